/* Store: opening a connection. The first node of the list that connects
 * and is ready (or the node the watch names), then the session: TLS
 * checked, the node's own setup, the isolation level and lock wait, and
 * the recorded shard map compared with the expected one. */
#include <errmsg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "store_gate.h"
#include "store_parts.h"

/* A connection unused for this long, or for half the server's wait_timeout
 * if that is shorter, is pinged before it is used again: the server may
 * have closed it, and finding that out with a ping costs a round trip
 * where a failed statement would cost a retry (or a lookup's 503). */
#define IDLE_CHECK_MS 60000

static int64_t idle_check_ms(const ow_store *s)
{
    int64_t half = s->server.wait_timeout_s * 500;

    return half > 0 && half < IDLE_CHECK_MS ? half : IDLE_CHECK_MS;
}

static int set_lock_wait(ow_store *s, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, "SET SESSION innodb_lock_wait_timeout = ?", &st, err);

    if (rc == OW_OK) {
        ow_params *p = ow_store_params_for(s, 1, err);

        if (p != NULL) {
            ow_param_int(p, s->lock_wait_timeout_s);
            rc = ow_store_execute(s, st, p, "set lock wait timeout", err);
        } else {
            rc = OW_EFATAL;
        }
    }
    if (st != NULL)
        mysql_stmt_close(st);
    return rc;
}

/* After the isolation level: a read-only session takes no row locks, so it
 * sets no lock wait, and it autocommits even where the server's default
 * says otherwise, so that every read ends its own transaction. */
static int read_only_setup(ow_store *s, ow_error *err)
{
    int rc = ow_store_exec_static(s, "SET SESSION TRANSACTION READ ONLY", err);

    if (rc == OW_OK && mysql_autocommit(s->db, 1) != 0)
        rc = ow_store_fail(s, mysql_errno(s->db), "autocommit on", err);
    return rc;
}

static int session_setup(ow_store *s, ow_error *err)
{
    int rc = ow_store_exec_static(s, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", err);

    if (rc == OW_OK && s->read_only)
        return read_only_setup(s, err);
    if (rc == OW_OK)
        rc = set_lock_wait(s, err);
    if (rc == OW_OK && mysql_autocommit(s->db, 0) != 0)
        rc = ow_store_fail(s, mysql_errno(s->db), "autocommit off", err);
    return rc;
}

/* 1 when s holds a connection that can be used as it is. */
static int usable(ow_store *s)
{
    int64_t now = ow_clock_mono_ms();

    if (s->db == NULL || s->broken)
        return 0;
    if (now - s->last_used_ms >= idle_check_ms(s) && mysql_ping(s->db) != 0)
        s->broken = 1;
    s->last_used_ms = now;
    return !s->broken;
}

/* After the connect itself: a session the watch may interrupt, on a node
 * that is ready, set up and matched against the recorded shard map. */
static int open_session(ow_store *s, ow_error *err)
{
    int rc;

    ow_store_set_sock(s, (int)mysql_get_socket(s->db));
    if (ow_store_cancelled(s)) /* a cancel that came while connecting */
        shutdown(s->sock, SHUT_RDWR);
    /* A watch that found the database gone, or moved it to another node,
     * while we connected interrupted nothing of ours: the socket was not
     * published yet. */
    rc = s->gate != NULL ? ow_gate_check(s->gate, s->gate_name, s->node, err) : OW_OK;
    if (rc == OW_OK)
        rc = ow_store_tls_check_session(s, err);
    if (rc == OW_OK)
        rc = ow_store_node_setup(s, err);
    if (rc == OW_OK)
        rc = session_setup(s, err);
    if (rc == OW_OK)
        rc = ow_store_read_server(s, err);
    if (rc == OW_OK)
        ow_store_learn_features(s);
    if (rc == OW_OK && s->check_server)
        rc = ow_store_check_server(s, err);
    if (rc == OW_OK && s->map_check != OW_MAP_UNCHECKED)
        rc = ow_store_check_map(s, err);
    return rc;
}

/* mysql_real_connect to the current node (s->host). */
static int connect_server(ow_store *s, ow_error *err)
{
    unsigned timeout = s->connect_timeout_s;
    /* A statement may legitimately wait for a lock for lock_wait_timeout_s. */
    unsigned rw_timeout = s->read_timeout_s != 0
                              ? s->read_timeout_s
                              : s->lock_wait_timeout_s + 2 * s->connect_timeout_s + 5;
    ow_mybool off = 0;
    unsigned e;
    char server[OW_STORE_SERVER_TEXT_MAX];
    int rc;

    s->db = mysql_init(NULL);
    if (s->db == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "mysql_init: out of memory");
    mysql_options(s->db, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    if (!s->long_statements) {
        mysql_options(s->db, MYSQL_OPT_READ_TIMEOUT, &rw_timeout);
        mysql_options(s->db, MYSQL_OPT_WRITE_TIMEOUT, &rw_timeout);
    }
    mysql_options(s->db, MYSQL_OPT_RECONNECT, &off);
    mysql_options(s->db, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    ow_store_tls_options(s);
    if (mysql_real_connect(s->db, s->host, s->user, s->password, s->database, s->port, NULL, 0) !=
        NULL)
        return OW_OK;
    e = mysql_errno(s->db);
    ow_store_server_text(s, server, sizeof(server));
    rc = ow_store_tls_connect_failed(s, e, err); /* fatal and logged, or OW_OK */
    if (rc == OW_OK && ow_store_error_retriable(e))
        rc = ow_error_set(err, OW_ERRCLASS_RETRIABLE, (int)e, "cannot connect to MySQL at %s: %s",
                          server, mysql_error(s->db));
    else if (rc == OW_OK)
        rc = ow_store_tls_refused(s, e, err);
    return rc;
}

int ow_store_connect_node(ow_store *s, unsigned node, ow_error *err)
{
    int rc;

    ow_store_disconnect(s);
    if (ow_store_cancelled(s))
        return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 0, "database call cancelled by the stop");
    ow_store_set_node(s, node < s->n_nodes ? node : 0);
    rc = connect_server(s, err);
    if (rc == OW_OK)
        rc = open_session(s, err);
    if (rc != OW_OK)
        ow_store_disconnect(s);
    else
        s->last_used_ms = ow_clock_mono_ms();
    return rc;
}

/* Without a watch: the first node, in order, that connects and is ready.
 * A refusal that another node would repeat (a wrong password) ends the
 * search; the error of a failed search names the first node's failure. */
static int connect_in_order(ow_store *s, ow_error *err)
{
    ow_error first;
    int rc = OW_OK;

    for (unsigned i = 0; i < s->n_nodes; i++) {
        rc = ow_store_connect_node(s, i, err);
        if (rc == OW_OK || err->cls != OW_ERRCLASS_RETRIABLE)
            return rc;
        if (i == 0)
            first = *err;
    }
    if (s->n_nodes > 1)
        rc = ow_error_set(err, OW_ERRCLASS_RETRIABLE, first.code,
                          "no node of %s is ready; the first: %s", s->hosts, first.msg);
    return rc;
}

int ow_store_connect(ow_store *s, ow_error *err)
{
    int rc;

    /* With a watch, a connection is used only on the current node. */
    if (usable(s) && (s->gate == NULL || ow_gate_node(s->gate) == s->node))
        return OW_OK;
    ow_store_disconnect(s);
    if (ow_store_cancelled(s))
        return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 0, "database call cancelled by the stop");
    if (s->gate == NULL)
        return connect_in_order(s, err);
    rc = ow_gate_check(s->gate, s->gate_name, ow_gate_node(s->gate), err);
    return rc == OW_OK ? ow_store_connect_node(s, ow_gate_node(s->gate), err) : rc;
}

int ow_store_ping(ow_store *s, ow_error *err)
{
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK && mysql_ping(s->db) != 0)
        rc = ow_store_fail(s, mysql_errno(s->db), "ping", err);
    return rc;
}

int ow_store_server_report_of(ow_store *s, ow_server_report *r, ow_error *err)
{
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK)
        ow_server_assess(&s->server, &s->needs, r);
    return rc;
}
