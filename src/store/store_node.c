/*
 * The nodes of a database's cluster: whether the node a connection reached
 * may serve it, and how its session is set up there.
 *
 * A Galera node accepts connections in every state, but only a node that
 * is in the Primary component, ready and Synced holds every committed
 * decision and may take new ones: a node cut off from the others, one that
 * is joining or donating, or one that is shutting down answers 1047 to a
 * read, or worse, to a read of an old state if dirty reads are on. Such a
 * node is "not ready": the connection is refused (RETRIABLE) and the
 * caller tries the next node.
 *
 * On a ready Galera node the session sets wsrep_sync_wait = 1: each read
 * (the known-key read, the read of the orders that existed, a lookup) first
 * waits until the node has applied every write set the cluster ordered
 * before it, so a decision committed through another node is seen, not
 * missed. Writes are checked by certification in any case
 * (docs/transactions.md, "On a Galera cluster").
 *
 * A server without wsrep (MySQL, a plain MariaDB, whose status still lists
 * wsrep_ready = OFF) is used as it is.
 */
#include <string.h>

#include "store_parts.h"

#define VALUE_MAX 64
/* ER_UNSUPPORTED_PS: MySQL prepares no SHOW VARIABLES; it has no wsrep. */
#define OW_ER_UNSUPPORTED_PS 1295

static const char *const sql_wsrep_vars =
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider')";
static const char *const sql_wsrep_status =
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_cluster_status', "
    "'wsrep_local_state_comment')";

typedef struct {
    const char *name;
    char value[VALUE_MAX];
} pair;

/* Runs st, a prepared SHOW of name/value rows (prepare's outcome rc),
 * fills the values of pairs[0..n) that it lists (the others stay "") and
 * closes it. */
static int show_pairs(ow_store *s, MYSQL_STMT *st, int rc, pair *pairs, size_t n, ow_error *err)
{
    MYSQL_BIND res[2];
    char name[VALUE_MAX], value[VALUE_MAX];
    unsigned long nlen = 0, vlen = 0;
    int frc = 0;

    for (size_t i = 0; i < n; i++)
        pairs[i].value[0] = '\0';
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, NULL, "node state", err);
    memset(res, 0, sizeof(res));
    ow_result_bytes(&res[0], name, sizeof(name) - 1, &nlen, NULL);
    ow_result_bytes(&res[1], value, sizeof(value) - 1, &vlen, NULL);
    if (rc == OW_OK && mysql_stmt_bind_result(st, res) != 0)
        rc = ow_store_fail_stmt(s, st, "node state", err);
    while (rc == OW_OK && (frc = mysql_stmt_fetch(st)) != MYSQL_NO_DATA) {
        if (frc == 1) {
            rc = ow_store_fail_stmt(s, st, "node state", err);
            break;
        }
        name[ow_store_text_len(nlen, sizeof(name))] = '\0';
        value[ow_store_text_len(vlen, sizeof(value))] = '\0';
        for (size_t i = 0; i < n; i++)
            if (strcmp(name, pairs[i].name) == 0)
                memcpy(pairs[i].value, value, sizeof(value));
    }
    if (st != NULL)
        mysql_stmt_close(st);
    return rc;
}

/* Whether the server runs wsrep with a provider: a Galera node. */
static int detect_galera(ow_store *s, ow_error *err)
{
    pair v[2] = {{"wsrep_on", ""}, {"wsrep_provider", ""}};
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, sql_wsrep_vars, &st, err);

    rc = show_pairs(s, st, rc, v, 2, err);

    s->galera = 0;
    if (rc != OW_OK && err->code == OW_ER_UNSUPPORTED_PS)
        return OW_OK;
    if (rc == OW_OK)
        s->galera = strcmp(v[0].value, "ON") == 0 && v[1].value[0] != '\0' &&
                    strcmp(v[1].value, "none") != 0;
    return rc;
}

int ow_store_node_ready(ow_store *s, ow_error *err)
{
    pair v[3] = {
        {"wsrep_ready", ""}, {"wsrep_cluster_status", ""}, {"wsrep_local_state_comment", ""}};
    char server[OW_STORE_SERVER_TEXT_MAX];
    MYSQL_STMT *st = NULL;
    int rc;

    if (!s->galera)
        return mysql_ping(s->db) == 0 ? OW_OK : ow_store_fail(s, mysql_errno(s->db), "ping", err);
    rc = ow_store_prepare(s, sql_wsrep_status, &st, err);
    rc = show_pairs(s, st, rc, v, 3, err);
    if (rc != OW_OK || (strcmp(v[0].value, "ON") == 0 && strcmp(v[1].value, "Primary") == 0 &&
                        strcmp(v[2].value, "Synced") == 0))
        return rc;
    ow_store_server_text(s, server, sizeof(server));
    s->broken = 1;
    /* The code is the one such a node answers to a read. */
    return ow_error_set(err, OW_ERRCLASS_RETRIABLE, OW_ER_WSREP_NOT_READY,
                        "node %s is not ready: wsrep_ready=%s, wsrep_cluster_status=%s, "
                        "wsrep_local_state_comment=%s",
                        server, v[0].value, v[1].value, v[2].value);
}

int ow_store_node_setup(ow_store *s, ow_error *err)
{
    int rc = detect_galera(s, err);

    if (rc == OW_OK && s->galera)
        rc = ow_store_node_ready(s, err);
    if (rc == OW_OK && s->galera)
        rc = ow_store_exec_static(s, "SET SESSION wsrep_sync_wait = 1", err);
    return rc;
}
