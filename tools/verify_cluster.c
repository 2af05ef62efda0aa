/*
 * ow-verify on a cluster: the node it reads and the comparison of the
 * nodes' rows. See verify_cluster.h.
 */
#include "verify_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VC_HOST_MAX 256
#define VC_NODES_MAX 16

typedef struct {
    int galera;
    char ready[8];
    char state[32];
    char status[32];
    long long size;
} node_state;

/* Splits a comma-separated list into names; returns their count. */
static size_t split_hosts(const char *hosts, char names[][VC_HOST_MAX], size_t max)
{
    size_t n = 0;
    const char *p = hosts;

    while (n < max && *p != '\0') {
        size_t len = strcspn(p, ",");

        if (len > 0 && len < VC_HOST_MAX) {
            memcpy(names[n], p, len);
            names[n][len] = '\0';
            n++;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return n;
}

static MYSQL *open_node(const vc_target *t, const char *host)
{
    unsigned connect_s = 5, rw_s = 120;
    MYSQL *db = mysql_init(NULL);

    if (db == NULL)
        return NULL;
    mysql_options(db, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_options(db, MYSQL_OPT_READ_TIMEOUT, &rw_s);
    if (mysql_real_connect(db, host, t->user, t->password, t->database, t->port, NULL, 0) == NULL) {
        printf("verify: node %s:%u: %s\n", host, t->port, mysql_error(db));
        mysql_close(db);
        return NULL;
    }
    return db;
}

/* Rows of a two-column statement, calling each(name, value, st). */
static int query_pairs(MYSQL *db, const char *sql, node_state *st,
                       void (*each)(const char *, const char *, node_state *))
{
    MYSQL_RES *r;
    MYSQL_ROW row;

    if (mysql_query(db, sql) != 0 || (r = mysql_store_result(db)) == NULL)
        return -1;
    while ((row = mysql_fetch_row(r)) != NULL)
        if (row[0] != NULL && row[1] != NULL)
            each(row[0], row[1], st);
    mysql_free_result(r);
    return 0;
}

static void take_var(const char *name, const char *v, node_state *st)
{
    if (strcmp(name, "wsrep_on") == 0)
        st->galera = strcmp(v, "ON") == 0;
    else if (strcmp(name, "wsrep_ready") == 0)
        snprintf(st->ready, sizeof(st->ready), "%s", v);
    else if (strcmp(name, "wsrep_local_state_comment") == 0)
        snprintf(st->state, sizeof(st->state), "%s", v);
    else if (strcmp(name, "wsrep_cluster_status") == 0)
        snprintf(st->status, sizeof(st->status), "%s", v);
    else if (strcmp(name, "wsrep_cluster_size") == 0)
        st->size = strtoll(v, NULL, 10);
}

/* A server without wsrep_on (MySQL) or with it OFF is not a Galera node. */
static int read_state(MYSQL *db, node_state *st)
{
    memset(st, 0, sizeof(*st));
    if (query_pairs(db, "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'", st, take_var) != 0)
        return -1;
    if (!st->galera)
        return 0;
    return query_pairs(db,
                       "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', "
                       "'wsrep_local_state_comment', 'wsrep_cluster_status', "
                       "'wsrep_cluster_size')",
                       st, take_var);
}

static int synced(const node_state *st)
{
    return !st->galera || (strcmp(st->ready, "ON") == 0 && strcmp(st->state, "Synced") == 0 &&
                           strcmp(st->status, "Primary") == 0);
}

/* Makes the session's reads wait until the node applied every write the
 * cluster committed before them, and reads once. */
static int causal_read(MYSQL *db)
{
    MYSQL_RES *r;

    if (mysql_query(db, "SET SESSION wsrep_sync_wait = 1") != 0 ||
        mysql_query(db, "SELECT COUNT(*) FROM idempotency_requests") != 0)
        return -1;
    r = mysql_store_result(db);
    mysql_free_result(r);
    return r != NULL ? 0 : -1;
}

MYSQL *vc_connect(const vc_target *t, char *chosen, size_t chosen_size)
{
    char names[VC_NODES_MAX][VC_HOST_MAX];
    size_t n = split_hosts(t->hosts, names, VC_NODES_MAX);

    for (size_t i = 0; i < n; i++) {
        node_state st;
        MYSQL *db = open_node(t, names[i]);

        if (db == NULL)
            continue;
        if (read_state(db, &st) != 0 || (st.galera && !synced(&st)) ||
            (st.galera && causal_read(db) != 0)) {
            printf("verify: node %s:%u passed over: %s%s %s %s\n", names[i], t->port,
                   mysql_errno(db) != 0 ? mysql_error(db) : "wsrep_ready=", st.ready, st.state,
                   st.status);
            mysql_close(db);
            continue;
        }
        snprintf(chosen, chosen_size, "%s", names[i]);
        if (st.galera)
            printf("verify: database: Galera node %s:%u (%s, %s, cluster size %lld); its reads "
                   "wait for every committed write (wsrep_sync_wait=1)\n",
                   names[i], t->port, st.state, st.status, st.size);
        return db;
    }
    fprintf(stderr, "verify: no usable node in '%s'\n", t->hosts);
    return NULL;
}

/* The checksums of the worker's two tables, as one string. */
static int table_sums(MYSQL *db, char *out, size_t outsz)
{
    MYSQL_RES *r;
    MYSQL_ROW row;

    out[0] = '\0';
    if (mysql_query(db, "CHECKSUM TABLE idempotency_requests, orders") != 0 ||
        (r = mysql_store_result(db)) == NULL)
        return -1;
    while ((row = mysql_fetch_row(r)) != NULL)
        snprintf(out + strlen(out), outsz - strlen(out), "%s%s=%s", out[0] != '\0' ? " " : "",
                 row[0], row[1] != NULL ? row[1] : "NULL");
    mysql_free_result(r);
    return 0;
}

/* Node i's checksums after a causal read, or a reason in out; 0 or -1. */
static int node_sums(const vc_target *t, const char *host, char *out, size_t outsz)
{
    node_state st;
    MYSQL *db = open_node(t, host);
    int rc = -1;

    if (db == NULL) {
        snprintf(out, outsz, "does not answer");
        return -1;
    }
    if (read_state(db, &st) != 0 || !synced(&st))
        snprintf(out, outsz, "not Synced in the Primary component (%s %s %s)", st.ready, st.state,
                 st.status);
    else if ((st.galera && causal_read(db) != 0) || table_sums(db, out, outsz) != 0)
        snprintf(out, outsz, "%s", mysql_error(db));
    else
        rc = 0;
    mysql_close(db);
    return rc;
}

long long vc_compare_nodes(const vc_target *t, const char *chosen)
{
    char names[VC_NODES_MAX][VC_HOST_MAX];
    char want[512], got[512];
    size_t n = split_hosts(t->hosts, names, VC_NODES_MAX);
    long long bad = 0;

    if (n < 2)
        return -1;
    if (node_sums(t, chosen, want, sizeof(want)) != 0) {
        printf("verify: node %s (the one read): %s\n", chosen, want);
        return (long long)n;
    }
    for (size_t i = 0; i < n; i++) {
        int read = node_sums(t, names[i], got, sizeof(got)) == 0;
        int same = read && strcmp(got, want) == 0;

        printf("verify: node %s:%u: %s%s%s\n", names[i], t->port, got,
               read && !same ? " DIFFERS from " : "", read && !same ? chosen : "");
        bad += !same;
    }
    return bad;
}
