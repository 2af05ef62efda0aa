/* Store: the handle and its connection's end, error classes, parameters
 * and the statement cache. A connection is opened in store_connect.c; the
 * deciding transaction is in store_decide.c. */
#include <errmsg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ow/config.h"
#include "ow/log.h"
#include "ow/nodes.h"
#include "store_parts.h"

void ow_store_params_from_config(const ow_config *cfg, ow_store_params *p)
{
    p->host = cfg->mysql_host;
    p->port = (unsigned)cfg->mysql_port;
    p->user = cfg->mysql_user;
    p->password = cfg->mysql_password;
    p->database = cfg->mysql_database;
    p->connect_timeout_s = (unsigned)cfg->mysql_connect_timeout_s;
    p->lock_wait_timeout_s = (unsigned)cfg->request_in_progress_wait_s;
    p->read_timeout_s = 0;
    p->read_only = 0;
    p->map_check = OW_MAP_UNSHARDED;
    memset(&p->map, 0, sizeof(p->map));
    /* A worker's: its lanes, and its watch's two connections. A subcommand
     * that needs less says so. */
    p->check_server = 1;
    p->needs = (ow_server_needs){.connections = (unsigned)cfg->worker_lanes + 2,
                                 .max_orders = (size_t)cfg->request_max_orders,
                                 .lock_wait_s = (unsigned)cfg->request_in_progress_wait_s,
                                 .writes = 1,
                                 .decides = 1,
                                 .connections_key = "worker.lanes"};
    p->db_index = 0;
    /* ow_config_finish checked the name. */
    p->tls.mode = (ow_ssl_mode)ow_ssl_mode_parse(cfg->mysql_ssl_mode);
    p->tls.ca = cfg->mysql_ssl_ca;
    p->tls.capath = cfg->mysql_ssl_capath;
    p->tls.cert = cfg->mysql_ssl_cert;
    p->tls.key = cfg->mysql_ssl_key;
    p->tls.crl = cfg->mysql_ssl_crl;
    p->tls.tls_version = cfg->mysql_tls_version;
    p->tls.cipher = cfg->mysql_ssl_cipher;
}

/* Splits s->hosts into s->nodes (at least one, "" for an empty list). */
static int split_nodes(ow_store *s)
{
    unsigned n = ow_nodes_count(s->hosts);

    s->n_nodes = n > 0 ? n : 1;
    s->nodes = calloc(s->n_nodes, sizeof(*s->nodes));
    if (s->nodes == NULL)
        return OW_ENOMEM;
    for (unsigned i = 0; i < s->n_nodes; i++) {
        char name[OW_NODE_NAME_MAX + 1] = "";

        if (n > 0)
            ow_nodes_get(s->hosts, i, name, sizeof(name));
        s->nodes[i] = strdup(name);
        if (s->nodes[i] == NULL)
            return OW_ENOMEM;
    }
    s->host = s->nodes[0];
    return OW_OK;
}

ow_store *ow_store_new(const ow_store_params *p, ow_idgen *ids)
{
    ow_store *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->hosts = strdup(p->host);
    s->user = strdup(p->user);
    s->password = strdup(p->password != NULL ? p->password : "");
    s->database = strdup(p->database);
    s->port = p->port;
    s->connect_timeout_s = p->connect_timeout_s;
    s->lock_wait_timeout_s = p->lock_wait_timeout_s;
    s->read_timeout_s = p->read_timeout_s;
    s->read_only = p->read_only;
    s->map_check = p->map_check;
    s->map = p->map;
    s->check_server = p->check_server;
    s->needs = p->needs;
    s->db_index = p->db_index;
    /* What one connection may cache: the deciding transaction's shapes
     * and the known-key read, or the lookups', in every row bucket, and
     * one statement prepared for the moment. */
    if (s->needs.statements == 0)
        s->needs.statements =
            (s->needs.writes ? OW_STMT_WRITER_SHAPES : OW_STMT_READER_SHAPES) * OW_STMT_BUCKETS + 1;
    if (s->needs.connections_key == NULL)
        s->needs.connections_key = "the connections";
    s->ids = ids;
    s->sock = -1;
    pthread_mutex_init(&s->cancel_mu, NULL);
    s->rng = (uint64_t)ow_clock_mono_us() ^ (uint64_t)(uintptr_t)s ^ 0x9e3779b97f4a7c15ULL;
    if (s->hosts == NULL || split_nodes(s) != OW_OK || s->user == NULL || s->password == NULL ||
        s->database == NULL || ow_store_tls_copy(&s->tls, &p->tls) != OW_OK)
        ow_store_free(&s);
    return s;
}

void ow_store_free(ow_store **store)
{
    ow_store *s;

    if (store == NULL || *store == NULL)
        return;
    s = *store;
    if (s->gate != NULL)
        ow_gate_remove(s->gate, &s->sock);
    ow_store_disconnect(s);
    ow_params_free(&s->params);
    free(s->scratch.rows);
    ow_htab_free(&s->scratch.existing);
    free(s->scratch.refs);
    free(s->scratch.ref_start);
    free(s->scratch.conflicts);
    free(s->scratch.picks);
    free(s->scratch.slots);
    free(s->scratch.ids);
    ow_htab_free(&s->scratch.by_id);
    ow_buf_cleanup(&s->scratch.blob);
    for (unsigned i = 0; s->nodes != NULL && i < s->n_nodes; i++)
        free(s->nodes[i]);
    free(s->nodes);
    free(s->hosts);
    free(s->user);
    if (s->password != NULL)
        memset(s->password, 0, strlen(s->password));
    free(s->password);
    free(s->database);
    ow_store_tls_free(&s->tls);
    pthread_mutex_destroy(&s->cancel_mu);
    free(s);
    *store = NULL;
}

/* Publishes the connection's socket to ow_store_cancel; the lock keeps a
 * cancel from shutting down a descriptor that was closed and reused. */
void ow_store_set_sock(ow_store *s, int sock)
{
    pthread_mutex_lock(&s->cancel_mu);
    s->sock = sock;
    pthread_mutex_unlock(&s->cancel_mu);
}

/* The node the next connection leads to, published like the socket. */
void ow_store_set_node(ow_store *s, unsigned node)
{
    pthread_mutex_lock(&s->cancel_mu);
    s->node = node;
    pthread_mutex_unlock(&s->cancel_mu);
    s->host = s->nodes[node];
}

const char *ow_store_node_name(const ow_store *s)
{
    return s->host;
}

void ow_store_disconnect(ow_store *s)
{
    for (int k = 0; k < OW_STMT_SLOTS; k++) {
        for (int b = 0; b < OW_STMT_BUCKETS; b++) {
            if (s->stmts[k][b] != NULL)
                mysql_stmt_close(s->stmts[k][b]);
            s->stmts[k][b] = NULL;
        }
    }
    ow_store_set_sock(s, -1);
    if (s->db != NULL)
        mysql_close(s->db);
    s->db = NULL;
    s->broken = 0;
}

void ow_store_cancel(ow_store *s)
{
    pthread_mutex_lock(&s->cancel_mu);
    atomic_store(&s->cancelled, 1);
    if (s->sock >= 0)
        shutdown(s->sock, SHUT_RDWR);
    pthread_mutex_unlock(&s->cancel_mu);
}

void ow_store_interrupt(ow_store *s)
{
    pthread_mutex_lock(&s->cancel_mu);
    if (s->sock >= 0)
        shutdown(s->sock, SHUT_RDWR);
    pthread_mutex_unlock(&s->cancel_mu);
}

int ow_store_cancelled(ow_store *s)
{
    return atomic_load(&s->cancelled);
}

const ow_store_stats *ow_store_get_stats(const ow_store *s)
{
    return &s->stats;
}

/* Errors after which the connection cannot be trusted any more. */
static int is_connection_error(unsigned e)
{
    switch (e) {
    case CR_CONNECTION_ERROR:     /* 2002 */
    case CR_CONN_HOST_ERROR:      /* 2003 */
    case CR_SERVER_GONE_ERROR:    /* 2006 */
    case CR_SERVER_LOST:          /* 2013 */
    case CR_COMMANDS_OUT_OF_SYNC: /* 2014 */
    case 2055:                    /* lost connection, extended (MySQL) */
    case 1053:                    /* server shutdown in progress */
    /* A Galera node that is not ready (non-Primary, joining, shutting
     * down), and a COMMIT it could not replicate: the next node is tried. */
    case OW_ER_WSREP_NOT_READY:
    case OW_ER_ERROR_DURING_COMMIT:
    case 1152: /* aborted connection */
    /* A packet over max_allowed_packet: the server closes the connection
     * after it, and the retry sends smaller statements. */
    case OW_ER_NET_PACKET_TOO_LARGE:
    case 1158:
    case 1159:
    case 1160:
    case 1161: /* network read/write errors */
    case 1927: /* connection was killed */
    case 4031: /* disconnected by the server for inactivity */
        return 1;
    default:
        return e >= 2000 && e < 3000; /* any other client-side error */
    }
}

static int is_transient_server_error(unsigned e)
{
    switch (e) {
    case OW_ER_LOCK_DEADLOCK:     /* 1213, the transaction was rolled back */
    case OW_ER_LOCK_WAIT_TIMEOUT: /* 1205 */
    case OW_ER_STATEMENT_TIMEOUT: /* 1969, max_statement_time: like a lock wait */
    case OW_ER_QUERY_TIMEOUT:     /* 3024, max_execution_time (MySQL) */
    case OW_ER_SP_DOES_NOT_EXIST: /* 1305: the server rolled back the transaction */
    case 1020:                    /* record changed since last read */
    case 1040:                    /* too many connections */
    case 1203:                    /* the account's max_user_connections, held by others */
    case 1226:                    /* an account resource limit (connections, queries per hour) */
    case 1461:                    /* max_prepared_stmt_count, shared with every client */
    case 1181:                    /* error during ROLLBACK */
    case 1290:                    /* --read-only, e.g. during a failover */
    case 1317:                    /* query interrupted */
    case 1412:                    /* table definition changed */
    case 1637:                    /* too many active concurrent transactions */
    case 1836:                    /* running in read-only mode */
    case 3572:                    /* NOWAIT lock (MySQL) */
    case 3100:                    /* Group Replication refused the commit (rolled back) */
    case 3101:                    /* Group Replication certification conflict (rolled back) */
        return 1;
    default:
        return 0;
    }
}

int ow_store_error_retriable(unsigned e)
{
    return is_connection_error(e) || is_transient_server_error(e);
}

int ow_store_packet_refusal(int code)
{
    switch (code) {
    case OW_ER_NET_PACKET_TOO_LARGE:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case 2055:
    case 1158:
    case 1159:
    case 1160:
    case 1161:
        return 1;
    default:
        return 0;
    }
}

int ow_store_error_quotes_data(unsigned e)
{
    switch (e) {
    case OW_ER_DUP_ENTRY: /* Duplicate entry '42-key' for key ... */
    case 1264:            /* out of range value */
    case 1265:            /* data truncated */
    case 1292:            /* incorrect (datetime, double...) value: '...' */
    case 1300:            /* invalid character string: '...' */
    case 1366:            /* incorrect string value: '\xF0...' */
    case 1367:            /* illegal value found during parsing */
    case 1406:            /* data too long */
    case 1411:            /* incorrect value for function */
    case 1586:            /* duplicate entry with a key name */
    case 1690:            /* value out of range in an expression */
    case 3819:            /* check constraint violated */
    case 4025:            /* CONSTRAINT failed */
        return 1;
    default:
        return 0;
    }
}

const char *ow_store_error_hint(unsigned e)
{
    switch (e) {
    case 1054:
    case OW_ER_NO_SUCH_TABLE:
        return "the schema is older than this binary: run `order-worker migrate`";
    case OW_ER_SP_DOES_NOT_EXIST:
        return "the server rolled back the whole transaction (innodb_rollback_on_timeout=ON, "
               "or a deadlock): the batch is decided again";
    case OW_ER_STATEMENT_TIMEOUT:
        return "the server's max_statement_time cut the statement: retried like a lock wait";
    case OW_ER_QUERY_TIMEOUT:
        return "the server's max_execution_time cut the statement: retried like a lock wait";
    case OW_ER_NET_PACKET_TOO_LARGE:
        return "a statement was larger than the server's max_allowed_packet: the retry sends "
               "smaller ones";
    case 1461:
        return "the server's max_prepared_stmt_count is reached (it counts every client): "
               "retried; raise it";
    case 1665:
        return "the binary log is statement-based: set binlog_format=ROW (or MIXED)";
    case 1203:
    case 1226:
        return "the account's MAX_USER_CONNECTIONS (or another resource limit) is reached: "
               "retried; raise it or run fewer lanes or replicas";
    case 1040:
        return "the server's max_connections is reached: retried";
    case 1290:
    case 1836:
        return "the server is read-only (a failover, or read_only=ON): retried";
    default:
        return NULL;
    }
}

/* What a message may say of an error: the server's text, unless it can
 * quote row data ("Duplicate entry '42-key'"), then its number alone. */
static const char *safe_message(unsigned e, const char *text)
{
    return ow_store_error_quotes_data(e) ? "(message withheld: it may quote row data)" : text;
}

static int store_fail_text(ow_store *s, unsigned e, const char *text, const char *what,
                           ow_error *err)
{
    const char *hint = ow_store_error_hint(e);
    char why[sizeof(err->msg)];
    int rc;

    /* The hint first: a server's text can fill the message by itself. */
    snprintf(why, sizeof(why), "%s%s%s", hint != NULL ? hint : "", hint != NULL ? "; " : "",
             safe_message(e, text));
    if (is_connection_error(e)) {
        rc = ow_error_set(err, OW_ERRCLASS_RETRIABLE, (int)e, "%s: database connection lost: %u %s",
                          what, e, why);
        s->broken = 1;
        /* The watch need not wait for its next round to look at the node. */
        if (s->gate != NULL)
            ow_gate_wake(s->gate);
    } else if (is_transient_server_error(e)) {
        rc = ow_error_set(err, OW_ERRCLASS_RETRIABLE, (int)e, "%s: transient database error %u: %s",
                          what, e, why);
    } else {
        rc =
            ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "%s: database error %u: %s", what, e, why);
    }
    return rc;
}

int ow_store_fail(ow_store *s, unsigned e, const char *what, ow_error *err)
{
    return store_fail_text(s, e, s->db != NULL ? mysql_error(s->db) : "", what, err);
}

int ow_store_fail_stmt(ow_store *s, MYSQL_STMT *st, const char *what, ow_error *err)
{
    return store_fail_text(s, mysql_stmt_errno(st), mysql_stmt_error(st), what, err);
}

int ow_store_exec_static(ow_store *s, const char *sql, ow_error *err)
{
    if (mysql_real_query(s->db, sql, (unsigned long)strlen(sql)) != 0)
        return ow_store_fail(s, mysql_errno(s->db), "static statement", err);
    return OW_OK;
}

ow_params *ow_store_params_for(ow_store *s, size_t n, ow_error *err)
{
    ow_params_reset(&s->params);
    if (ow_params_reserve(&s->params, n) != OW_OK) {
        ow_store_oom(err);
        return NULL;
    }
    return &s->params;
}

int ow_store_connected(const ow_store *s)
{
    return s->db != NULL && !s->broken;
}

int ow_store_commit(ow_store *s, ow_error *err)
{
    if (mysql_commit(s->db) != 0)
        return ow_store_fail(s, mysql_errno(s->db), "commit", err);
    return OW_OK;
}

void ow_store_rollback(ow_store *s)
{
    if (ow_store_connected(s) && mysql_rollback(s->db) != 0)
        s->broken = 1; /* Unknown state: start over on a new connection. */
}

void ow_store_end_read(ow_store *s)
{
    if (!s->read_only)
        ow_store_rollback(s);
}

int ow_store_prepare(ow_store *s, const char *sql, MYSQL_STMT **out, ow_error *err)
{
    MYSQL_STMT *st = mysql_stmt_init(s->db);

    *out = NULL;
    if (st == NULL)
        return ow_store_fail(s, mysql_errno(s->db), "prepare", err);
    if (mysql_stmt_prepare(st, sql, (unsigned long)strlen(sql)) != 0) {
        unsigned e = mysql_stmt_errno(st);
        char text[MYSQL_ERRMSG_SIZE];

        /* Closing the statement clears the error: keep its text. */
        snprintf(text, sizeof(text), "%s", mysql_stmt_error(st));
        mysql_stmt_close(st);
        return store_fail_text(s, e, text, "prepare", err);
    }
    *out = st;
    return OW_OK;
}

int ow_store_oom(ow_error *err)
{
    return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
}

static size_t count_params(const char *sql)
{
    size_t n = 0;

    for (const char *c = sql; *c != '\0'; c++)
        n += *c == '?';
    return n;
}

/* The placeholders of shape's statement for rows tuples. */
static size_t shape_params(const ow_sql_shape *shape, size_t rows)
{
    return count_params(shape->head) + count_params(shape->tuple) * rows +
           count_params(shape->tail);
}

static int build_sql(const ow_sql_shape *shape, size_t rows, ow_buf *b)
{
    int rc = ow_buf_appends(b, shape->head);

    for (size_t i = 0; rc == OW_OK && i < rows; i++) {
        if (i > 0)
            rc = ow_buf_appendc(b, ',');
        if (rc == OW_OK)
            rc = ow_buf_appends(b, shape->tuple);
    }
    return rc == OW_OK ? ow_buf_appends(b, shape->tail) : rc;
}

unsigned ow_store_bucket_floor(size_t rows)
{
    unsigned b = 0;

    while (b + 1 < OW_STMT_BUCKETS && ((size_t)1 << (b + 1)) <= rows)
        b++;
    return b;
}

int ow_store_stmt_padded(ow_store *s, const ow_sql_shape *shape, size_t rows, MYSQL_STMT **out,
                         size_t *padded, ow_error *err)
{
    unsigned bucket = 0;

    while (((size_t)1 << bucket) < rows)
        bucket++;
    *padded = (size_t)1 << bucket;
    return ow_store_stmt(s, shape, bucket, out, err);
}

int ow_store_stmt(ow_store *s, const ow_sql_shape *shape, unsigned bucket, MYSQL_STMT **out,
                  ow_error *err)
{
    size_t rows = (size_t)1 << bucket;
    MYSQL_STMT **slot = &s->stmts[shape->slot][bucket];
    int rc = OW_OK;

    if (*slot == NULL) {
        ow_buf sql;

        ow_buf_init(&sql);
        if (build_sql(shape, rows, &sql) != OW_OK)
            rc = ow_store_oom(err);
        else
            rc = ow_store_prepare(s, sql.data, slot, err);
        ow_buf_cleanup(&sql);
    }
    *out = *slot;
    if (rc != OW_OK)
        return rc;
    ow_params_reset(&s->params);
    if (ow_params_reserve(&s->params, shape_params(shape, rows)) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

int ow_store_fetch_column(ow_store *s, MYSQL_STMT *st, unsigned col, unsigned long len, ow_buf *out,
                          const char *what, ow_error *err)
{
    MYSQL_BIND b;
    unsigned long got = 0;

    ow_buf_reset(out);
    if (ow_buf_reserve(out, len) != OW_OK)
        return ow_store_oom(err);
    if (len > 0) {
        ow_result_bytes(&b, out->data, len, &got, NULL);
        if (mysql_stmt_fetch_column(st, &b, col, 0) != 0)
            return ow_store_fail_stmt(s, st, what, err);
    }
    out->len = len;
    out->data[len] = '\0';
    return OW_OK;
}

/* --- Rows of one shape: bulk or multi-row ---------------------------------- */

void ow_store_learn_features(ow_store *s)
{
    const char *info = mysql_get_server_info(s->db);
    unsigned long version = mysql_get_server_version(s->db);
    int mariadb = info != NULL && strstr(info, "MariaDB") != NULL;

    s->returning = !s->plain_sql && mariadb && version >= 100500;
    s->bulk = 0;
#if OW_HAVE_BULK
    {
        unsigned long caps = 0;

        /* The server's MariaDB capabilities, stored shifted down by 32: a
         * proxy that speaks as MySQL announces none, and gets multi-row
         * statements. */
        if (!s->plain_sql &&
            mariadb_get_infov(s->db, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &caps) == 0)
            s->bulk = (caps & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32)) != 0;
    }
#endif
}

/* Reads what an executed statement returned (RETURNING), or counts the
 * rows it wrote. */
static int statement_done(MYSQL_STMT *st, const ow_rows *rows, size_t *affected, ow_error *err)
{
    /* A statement that returns its rows' ids answers with a result set:
     * one that only counted them would leave its rows unread, as if others
     * had written them. */
    if (rows->returned != NULL && mysql_stmt_field_count(st) == 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                            "%s: the server wrote %llu rows but returned none of their ids "
                            "(INSERT ... RETURNING unsupported?)",
                            rows->what, (unsigned long long)mysql_stmt_affected_rows(st));
    if (rows->returned != NULL)
        return rows->returned(rows->ctx, st, err);
    *affected += (size_t)mysql_stmt_affected_rows(st);
    return OW_OK;
}

static size_t rows_bytes(const ow_rows *rows, size_t first, size_t n)
{
    size_t bytes = 0;

    for (size_t r = first; r < first + n; r++)
        bytes += rows->bytes(rows->ctx, r);
    return bytes;
}

/* The rows of one multi-row statement of 2^bucket rows from first. */
static int send_multi_row(ow_store *s, const ow_rows *rows, size_t first, unsigned bucket,
                          size_t *affected, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    int rc = ow_store_stmt(s, rows->shape, bucket, &st, err);

    for (size_t r = first; rc == OW_OK && r < first + ((size_t)1 << bucket); r++)
        rows->bind(rows->ctx, r, &s->params);
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, &s->params, rows->what, err);
    return rc == OW_OK ? statement_done(st, rows, affected, err) : rc;
}

#if OW_HAVE_BULK
/* rows [first, first + n) as one bulk execution of the one-row statement. */
static int send_bulk(ow_store *s, const ow_rows *rows, size_t first, size_t n, size_t *affected,
                     ow_error *err)
{
    MYSQL_STMT *st = NULL;
    unsigned int size = (unsigned int)n, none = 0;
    int rc = ow_store_stmt(s, rows->shape, 0, &st, err);

    if (rc == OW_OK && ow_params_bulk(&s->params, n, rows->cols) != OW_OK)
        rc = ow_store_oom(err);
    for (size_t r = first; rc == OW_OK && r < first + n; r++)
        rows->bind(rows->ctx, r, &s->params);
    if (rc == OW_OK && mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &size) != 0)
        rc = ow_store_fail_stmt(s, st, rows->what, err);
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, &s->params, rows->what, err);
    if (rc == OW_OK)
        rc = statement_done(st, rows, affected, err);
    /* The cached statement may run with single values again. */
    if (st != NULL)
        mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &none);
    return rc;
}
#endif

/* When the server's limit is not known: MariaDB's default. */
#define PACKET_DEFAULT (16 * 1024 * 1024)

size_t ow_store_packet_limit(const ow_store *s)
{
    int64_t packet = s->server.max_allowed_packet;

    return packet > OW_SERVER_PACKET_RESERVE ? (size_t)(packet - OW_SERVER_PACKET_RESERVE)
                                             : PACKET_DEFAULT;
}

size_t ow_store_packet_budget(const ow_store *s)
{
    size_t limit = ow_store_packet_limit(s);

    return s->packet_cap > 0 && s->packet_cap < limit ? s->packet_cap : limit;
}

void ow_store_statement_refused(ow_store *s, size_t bytes, const ow_error *err)
{
    size_t cap = bytes / 2;

    /* Only a large statement, and only the errors a packet over a limit on
     * its way (a proxy's, or the server's) ends in. */
    if (bytes < OW_SERVER_PACKET_MIN || !ow_store_packet_refusal(err->code))
        return;
    s->packet_cap = cap < OW_SERVER_PACKET_MIN ? OW_SERVER_PACKET_MIN : cap;
    OW_LOG(OW_LOG_WARN, "db_statement_split", OW_F_INT("bytes", (int64_t)bytes),
           OW_F_INT("code", err->code), OW_F_INT("next_max_bytes", (int64_t)s->packet_cap),
           OW_F_STR("why", "a large statement was refused or lost its connection: the retry "
                           "sends smaller ones"));
}

/* How many rows from first one statement takes: bulk, as many as fit the
 * budget; else the largest power of two that fits. At least one. */
static size_t chunk_rows(const ow_store *s, const ow_rows *rows, size_t first, size_t budget,
                         unsigned *bucket, size_t *bytes)
{
    size_t left = rows->rows - first, n;

    if (s->bulk) {
        *bytes = rows->bytes(rows->ctx, first);
        for (n = 1; n < left && *bytes + rows->bytes(rows->ctx, first + n) <= budget; n++)
            *bytes += rows->bytes(rows->ctx, first + n);
        return n;
    }
    *bucket = ow_store_bucket_floor(left);
    *bytes = rows_bytes(rows, first, (size_t)1 << *bucket);
    while (*bucket > 0 && *bytes > budget)
        *bytes = rows_bytes(rows, first, (size_t)1 << --*bucket);
    return (size_t)1 << *bucket;
}

int ow_store_send_rows(ow_store *s, const ow_rows *rows, size_t *affected, ow_error *err)
{
    size_t budget = ow_store_packet_budget(s);
    int rc = OW_OK;

    *affected = 0;
    for (size_t done = 0; rc == OW_OK && done < rows->rows;) {
        unsigned bucket = 0;
        size_t bytes = 0;
        size_t n = chunk_rows(s, rows, done, budget, &bucket, &bytes);

#if OW_HAVE_BULK
        if (s->bulk)
            rc = send_bulk(s, rows, done, n, affected, err);
        else
#endif
            rc = send_multi_row(s, rows, done, bucket, affected, err);
        if (rc != OW_OK)
            ow_store_statement_refused(s, bytes, err);
        done += n;
    }
    return rc;
}

int ow_store_execute(ow_store *s, MYSQL_STMT *st, ow_params *p, const char *what, ow_error *err)
{
    if (p != NULL && p->n > 0 && mysql_stmt_bind_param(st, p->b) != 0)
        return ow_store_fail_stmt(s, st, what, err);
    if (mysql_stmt_execute(st) != 0)
        return ow_store_fail_stmt(s, st, what, err);
    return OW_OK;
}
