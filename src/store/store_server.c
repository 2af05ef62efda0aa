/* The server's settings: read on every connection, assessed against what
 * the process needs (ow/store_server.h), and the schema's version against
 * the binary's. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "ow/migrations.h"
#include "ow/response.h"
#include "store_parts.h"

/* ER_UNKNOWN_SYSTEM_VARIABLE: a server without the variable asked for. */
#define OW_ER_UNKNOWN_SYSTEM_VARIABLE 1193
#define OW_ER_TABLEACCESS_DENIED 1142
/* Bytes of one request record's statement besides its key and body: the
 * fixed columns, and for each of its 7 parameters a length prefix of up to
 * 9 bytes and a 2-byte type. */
#define RECORD_FIXED (8 + 8 + 32 + 9 + 8 + 7 * 11)

size_t ow_server_record_bytes(size_t key_len, size_t body_len)
{
    return RECORD_FIXED + key_len + body_len;
}

/* --- Assessment (pure) ------------------------------------------------------ */

const char *ow_server_level_name(ow_server_level level)
{
    static const char *const names[] = {"ok", "note", "warn", "refuse"};

    return level <= OW_SERVER_REFUSE ? names[level] : "?";
}

ow_server_level ow_server_worst(const ow_server_report *r)
{
    ow_server_level worst = OW_SERVER_OK;

    for (size_t i = 0; i < r->n; i++)
        if (r->f[i].level > worst)
            worst = r->f[i].level;
    return worst;
}

static ow_server_finding *add(ow_server_report *r, const char *setting, ow_server_level level)
{
    ow_server_finding *f = &r->f[r->n < OW_SERVER_FINDINGS_MAX ? r->n++ : r->n - 1];

    memset(f, 0, sizeof(*f));
    f->setting = setting;
    f->level = level;
    return f;
}

static void set_int(ow_server_finding *f, int64_t v)
{
    snprintf(f->value, sizeof(f->value), "%" PRId64, v);
}

size_t ow_server_orders_fitting(int64_t packet, size_t max_orders)
{
    static _Atomic int64_t last_packet;
    static _Atomic size_t last_max, last_fit;
    size_t lo = 0, hi = max_orders;
    int64_t budget = packet - OW_SERVER_PACKET_RESERVE;

    if (atomic_load(&last_packet) == packet && atomic_load(&last_max) == max_orders)
        return atomic_load(&last_fit);
    /* The largest n whose worst record fits: records grow with n. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        size_t len = 0;

        if (ow_response_max_len(mid, &len) == OW_OK &&
            (int64_t)ow_server_record_bytes(OW_KEY_MAX, len) <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    atomic_store(&last_fit, lo);
    atomic_store(&last_max, max_orders);
    atomic_store(&last_packet, packet);
    return lo;
}

static void assess_binlog(const ow_server_vars *v, const ow_server_needs *need, ow_server_report *r)
{
    ow_server_finding *f;

    if (!need->writes)
        return;
    if (v->log_bin && strcmp(v->binlog_format, "STATEMENT") == 0) {
        f = add(r, "binlog_format", OW_SERVER_REFUSE);
        snprintf(f->why, sizeof(f->why),
                 "the binary log is on and statement-based: InnoDB cannot log the READ COMMITTED "
                 "transactions that decide requests (error 1665); set binlog_format=ROW (or "
                 "MIXED)");
    } else {
        f = add(r, "binlog_format", OW_SERVER_OK);
        snprintf(f->why, sizeof(f->why), "%s",
                 v->log_bin ? "row-based or mixed" : "binary log off");
    }
    snprintf(f->value, sizeof(f->value), "%s", v->binlog_format);
}

static void assess_rollback(const ow_server_vars *v, const ow_server_needs *need,
                            ow_server_report *r)
{
    ow_server_finding *f;

    if (!need->writes)
        return;
    f = add(r, "innodb_rollback_on_timeout",
            v->rollback_on_timeout ? OW_SERVER_NOTE : OW_SERVER_OK);
    snprintf(f->value, sizeof(f->value), "%s", v->rollback_on_timeout ? "ON" : "OFF");
    snprintf(f->why, sizeof(f->why), "%s",
             v->rollback_on_timeout
                 ? "a lock wait that times out rolls back the whole transaction: the requests "
                   "decided before it in the batch are decided again"
                 : "a lock wait that times out rolls back its statement only");
}

static void assess_statement_time(const ow_server_vars *v, const ow_server_needs *need,
                                  ow_server_report *r)
{
    int64_t wait_ms = (int64_t)need->lock_wait_s * 1000;
    ow_server_finding *f;

    if (v->statement_time_ms <= 0) {
        f = add(r, v->statement_time_name, OW_SERVER_OK);
        snprintf(f->why, sizeof(f->why), "statements are not cut short");
    } else if (need->writes && v->statement_time_ms < wait_ms) {
        f = add(r, v->statement_time_name, OW_SERVER_WARN);
        snprintf(f->why, sizeof(f->why),
                 "statements are cut at %" PRId64 " ms, before request.in_progress_wait_s (%u s): "
                 "a request whose key or orders another transaction holds is answered "
                 "REQUEST_IN_PROGRESS after %" PRId64 " ms and retried",
                 v->statement_time_ms, need->lock_wait_s, v->statement_time_ms);
    } else {
        f = add(r, v->statement_time_name, OW_SERVER_NOTE);
        snprintf(f->why, sizeof(f->why),
                 "a statement cut at %" PRId64 " ms is retried like a lock wait",
                 v->statement_time_ms);
    }
    snprintf(f->value, sizeof(f->value), "%" PRId64 " ms", v->statement_time_ms);
}

static void assess_packet(const ow_server_vars *v, const ow_server_needs *need, ow_server_report *r)
{
    ow_server_finding *f;
    size_t fit;

    if (v->max_allowed_packet < OW_SERVER_PACKET_MIN) {
        f = add(r, "max_allowed_packet", OW_SERVER_REFUSE);
        snprintf(f->why, sizeof(f->why),
                 "below %d bytes, the least the worker's fixed statements need; raise it",
                 OW_SERVER_PACKET_MIN);
    } else if (need->writes && (fit = ow_server_orders_fitting(
                                    v->max_allowed_packet, need->max_orders)) < need->max_orders) {
        f = add(r, "max_allowed_packet", OW_SERVER_WARN);
        snprintf(f->why, sizeof(f->why),
                 "holds the record of a request of at most %zu orders, fewer than "
                 "request.max_orders (%zu): larger requests are answered 400 INVALID_REQUEST "
                 "with a dead-letter copy; raise max_allowed_packet or lower request.max_orders",
                 fit, need->max_orders);
    } else {
        f = add(r, "max_allowed_packet", OW_SERVER_OK);
        snprintf(f->why, sizeof(f->why),
                 "holds the largest record; larger batches are split into statements that fit");
    }
    set_int(f, v->max_allowed_packet);
}

static void assess_statements(const ow_server_vars *v, const ow_server_needs *need,
                              ow_server_report *r)
{
    int64_t want = (int64_t)need->connections * need->statements;
    ow_server_finding *f;

    if (v->max_prepared_stmt_count < want) {
        f = add(r, "max_prepared_stmt_count", OW_SERVER_REFUSE);
        snprintf(f->why, sizeof(f->why),
                 "below the %" PRId64 " prepared statements that %u connections (%s) may hold: "
                 "raise max_prepared_stmt_count (it counts every client of the server) or lower "
                 "%s",
                 want, need->connections, need->connections_key, need->connections_key);
    } else {
        f = add(r, "max_prepared_stmt_count", OW_SERVER_OK);
        snprintf(f->why, sizeof(f->why),
                 "room for the %" PRId64 " statements of %u connections; other clients share it",
                 want, need->connections);
    }
    set_int(f, v->max_prepared_stmt_count);
}

static void assess_connections(const ow_server_vars *v, const ow_server_needs *need,
                               ow_server_report *r)
{
    ow_server_finding *f;

    if (v->max_user_connections > 0 && v->max_user_connections < (int64_t)need->connections) {
        f = add(r, "max_user_connections", OW_SERVER_REFUSE);
        snprintf(f->why, sizeof(f->why),
                 "the account may hold %" PRId64 " connections, fewer than the %u this process "
                 "opens (%s): raise the account's MAX_USER_CONNECTIONS or lower %s",
                 v->max_user_connections, need->connections, need->connections_key,
                 need->connections_key);
    } else {
        f = add(r, "max_user_connections", OW_SERVER_OK);
        snprintf(f->why, sizeof(f->why),
                 "room for this process's %u connections (replicas with the same account "
                 "share it; a connection refused for it is retried)",
                 need->connections);
    }
    set_int(f, v->max_user_connections);
}

static void assess_flush(const ow_server_vars *v, const ow_server_needs *need, ow_server_report *r)
{
    ow_server_finding *f;

    if (!v->galera || !need->writes)
        return;
    if (v->flush_log_at_trx_commit != 1) {
        f = add(r, "innodb_flush_log_at_trx_commit", OW_SERVER_WARN);
        snprintf(f->why, sizeof(f->why),
                 "a Galera node that does not flush its redo log at each commit can lose "
                 "committed decisions when the cluster's nodes crash in quick succession; a "
                 "request answered before would then be decided again: set it to 1");
    } else {
        f = add(r, "innodb_flush_log_at_trx_commit", OW_SERVER_OK);
        snprintf(f->why, sizeof(f->why), "each commit is on disk before it is answered");
    }
    set_int(f, v->flush_log_at_trx_commit);
}

static void assess_wait_timeout(const ow_server_vars *v, ow_server_report *r)
{
    ow_server_finding *f = add(r, "wait_timeout", OW_SERVER_OK);

    snprintf(f->why, sizeof(f->why),
             "a connection idle for half of it is checked with a ping before it is used");
    set_int(f, v->wait_timeout_s);
}

void ow_server_assess(const ow_server_vars *v, const ow_server_needs *need, ow_server_report *out)
{
    out->n = 0;
    assess_binlog(v, need, out);
    assess_rollback(v, need, out);
    assess_statement_time(v, need, out);
    assess_packet(v, need, out);
    assess_statements(v, need, out);
    assess_connections(v, need, out);
    assess_flush(v, need, out);
    assess_wait_timeout(v, out);
}

/* --- Reading them --------------------------------------------------------- */

/* Settings both MariaDB and MySQL 8 have, as the session sees them. */
static const char *const sql_server_vars =
    "SELECT @@session.max_allowed_packet, @@session.wait_timeout, "
    "@@global.innodb_rollback_on_timeout, @@global.log_bin, @@session.binlog_format, "
    "@@global.max_prepared_stmt_count, @@session.max_user_connections, "
    "@@global.innodb_flush_log_at_trx_commit";
/* MariaDB's limit on every statement, in seconds; MySQL's, on SELECT, in ms. */
static const char *const sql_statement_time_mariadb = "SELECT @@session.max_statement_time * 1000";
static const char *const sql_statement_time_mysql = "SELECT @@session.max_execution_time";

#define VAR_COLUMNS 8
#define FORMAT_COLUMN 4

/* Fetches the one row of the executed statement st into res; closes st. */
static int fetch_row(ow_store *s, MYSQL_STMT *st, int rc, MYSQL_BIND *res, ow_error *err)
{
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, NULL, "read server settings", err);
    if (rc == OW_OK && (mysql_stmt_bind_result(st, res) != 0 || mysql_stmt_fetch(st) == 1))
        rc = ow_store_fail_stmt(s, st, "read server settings", err);
    if (st != NULL) {
        mysql_stmt_free_result(st);
        mysql_stmt_close(st);
    }
    return rc;
}

/* max_statement_time, or on MySQL max_execution_time, in milliseconds. */
static int read_statement_time(ow_store *s, ow_server_vars *v, ow_error *err)
{
    MYSQL_BIND res;
    ow_mybool nul = 0;
    long long ms = 0;
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, sql_statement_time_mariadb, &st, err);

    v->statement_time_name = "max_statement_time";
    if (rc != OW_OK && err->code == OW_ER_UNKNOWN_SYSTEM_VARIABLE) {
        ow_error_clear(err);
        v->statement_time_name = "max_execution_time";
        rc = ow_store_prepare(s, sql_statement_time_mysql, &st, err);
    }
    ow_result_int(&res, &ms, &nul);
    rc = fetch_row(s, st, rc, &res, err);
    v->statement_time_ms = rc == OW_OK && !nul ? ms : 0;
    return rc;
}

int ow_store_read_server(ow_store *s, ow_error *err)
{
    ow_server_vars *v = &s->server;
    MYSQL_BIND res[VAR_COLUMNS];
    ow_mybool nul[VAR_COLUMNS];
    long long n[VAR_COLUMNS];
    unsigned long len = 0;
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, sql_server_vars, &st, err);

    memset(v, 0, sizeof(*v));
    memset(n, 0, sizeof(n));
    memset(res, 0, sizeof(res));
    for (int i = 0; i < VAR_COLUMNS; i++)
        ow_result_int(&res[i], &n[i], &nul[i]);
    ow_result_bytes(&res[FORMAT_COLUMN], v->binlog_format, sizeof(v->binlog_format) - 1, &len,
                    &nul[FORMAT_COLUMN]);
    rc = fetch_row(s, st, rc, res, err);
    if (rc != OW_OK)
        return rc;
    v->binlog_format[ow_store_text_len(len, sizeof(v->binlog_format))] = '\0';
    v->max_allowed_packet = n[0];
    v->wait_timeout_s = n[1];
    v->rollback_on_timeout = n[2] != 0;
    v->log_bin = n[3] != 0;
    v->max_prepared_stmt_count = n[5];
    v->max_user_connections = n[6];
    v->flush_log_at_trx_commit = n[7];
    v->galera = s->galera;
    rc = read_statement_time(s, v, err);
    if (rc == OW_OK)
        ow_store_note_orders_cap(s);
    return rc;
}

/* --- The schema's version --------------------------------------------------- */

static const char *const sql_schema_versions = "SELECT version FROM ow_schema_migrations";

/* Which of the binary's migrations v is (its index), or -1. */
static int known_index(long long v)
{
    for (unsigned i = 0; i < ow_migrations_count; i++)
        if (ow_migrations[i].version == v)
            return (int)i;
    return -1;
}

/* Reads the applied versions: a bit per migration of the binary's that
 * the database records, and the newest version the binary does not know
 * (0: none). */
static int read_versions(ow_store *s, uint64_t *present, long long *unknown, ow_error *err)
{
    MYSQL_BIND res;
    ow_mybool nul = 0;
    long long v = 0;
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, sql_schema_versions, &st, err);
    int frc = 0;

    *present = 0;
    *unknown = 0;
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, NULL, "read schema version", err);
    ow_result_int(&res, &v, &nul);
    if (rc == OW_OK && (mysql_stmt_bind_result(st, &res) != 0 || mysql_stmt_store_result(st) != 0))
        rc = ow_store_fail_stmt(s, st, "read schema version", err);
    while (rc == OW_OK && (frc = mysql_stmt_fetch(st)) != MYSQL_NO_DATA) {
        int k = known_index(v);

        if (frc == 1) {
            rc = ow_store_fail_stmt(s, st, "read schema version", err);
            break;
        }
        if (k >= 0 && k < 64)
            *present |= (uint64_t)1 << k;
        else if (k < 0 && v > *unknown)
            *unknown = v;
    }
    if (st != NULL) {
        mysql_stmt_free_result(st);
        mysql_stmt_close(st);
    }
    ow_store_end_read(s);
    return rc;
}

/* The schema must be the binary's: every migration it knows applied (an
 * older schema fails on its first statement that names a newer column),
 * and none it does not know (a newer binary's schema may mean rows this
 * one would misread). A schema the account may not read is named once and
 * not checked. */
static int check_schema(ow_store *s, const char *db, ow_error *err)
{
    uint64_t present = 0;
    long long unknown = 0;
    int rc = read_versions(s, &present, &unknown, err);

    if (rc != OW_OK && err->code == OW_ER_NO_SUCH_TABLE)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, err->code,
                            "database %s has no order-worker schema: run `order-worker migrate`",
                            db);
    if (rc != OW_OK && err->code == OW_ER_TABLEACCESS_DENIED) {
        ow_store_log_once(OW_LOG_WARN, db, "ow_schema_migrations", "not readable",
                          "the account may not read ow_schema_migrations, so the schema's "
                          "version is not checked: grant it SELECT (sql/worker_user.sql, "
                          "sql/api_user.sql)");
        ow_error_clear(err);
        return OW_OK;
    }
    if (rc != OW_OK)
        return rc;
    if (unknown > 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "database %s: the schema records migration %lld, which this binary "
                            "does not know (its newest is %d): run the order-worker release that "
                            "applied it, or a newer one",
                            db, unknown, ow_migrations[ow_migrations_count - 1].version);
    for (unsigned i = 0; i < ow_migrations_count; i++)
        if (!(present & ((uint64_t)1 << i)))
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "database %s: the schema lacks migration %s: run `order-worker "
                                "migrate`",
                                db, ow_migrations[i].name);
    return OW_OK;
}

/* --- Findings in the log ---------------------------------------------------- */

/* What was logged, once per process for each database, setting and level:
 * every connection reads the settings, and lanes reconnect. */
#define LOGGED_MAX 256
static pthread_mutex_t logged_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t logged[LOGGED_MAX];
static size_t n_logged;

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h * 0x100000001b3ULL;
}

/* 1 the first time the process sees this (database, setting, value). */
static int first_time(const char *db, const char *setting, const char *value)
{
    uint64_t h = fnv(fnv(fnv(0xcbf29ce484222325ULL, db), setting), value);
    int first = 1;

    pthread_mutex_lock(&logged_mu);
    for (size_t i = 0; i < n_logged && first; i++)
        first = logged[i] != h;
    if (first && n_logged < LOGGED_MAX)
        logged[n_logged++] = h;
    pthread_mutex_unlock(&logged_mu);
    return first;
}

void ow_store_log_once(int level, const char *db, const char *setting, const char *value,
                       const char *why)
{
    if (first_time(db, setting, value))
        OW_LOG(level, "db_setting", OW_F_STR("database", db), OW_F_STR("setting", setting),
               OW_F_STR("value", value), OW_F_STR("why", why));
}

/* --- At each connection ------------------------------------------------------ */

/* The most orders a request may carry, per database of the process (its
 * index in mysql.shards; 0: not known yet, else one more than the count),
 * and the least of them, which every message's check reads. */
static _Atomic size_t orders_fit[OW_SHARD_MAX];
static _Atomic size_t orders_cap = SIZE_MAX;

void ow_store_note_orders_cap(ow_store *s)
{
    size_t least = SIZE_MAX;

    if (!s->needs.writes || s->needs.max_orders == 0 || s->db_index >= OW_SHARD_MAX)
        return;
    atomic_store(&orders_fit[s->db_index],
                 ow_server_orders_fitting(s->server.max_allowed_packet, s->needs.max_orders) + 1);
    for (unsigned i = 0; i < OW_SHARD_MAX; i++) {
        size_t c = atomic_load(&orders_fit[i]);

        if (c > 0 && c - 1 < least)
            least = c - 1;
    }
    atomic_store(&orders_cap, least);
}

size_t ow_store_orders_cap(void)
{
    return atomic_load_explicit(&orders_cap, memory_order_relaxed);
}

/* The deciding transaction deletes the orders it inserted for an item that
 * writes none, so its account needs DELETE on orders (sql/worker_user.sql
 * grants it); a statement that deletes nothing finds out at start instead
 * of at the first conflict. It takes no lock. Any other error it meets (a
 * read-only server during a failover) is not this check's to judge: the
 * deciding transaction meets it again and retries. */

static int check_delete(ow_store *s, const char *db, ow_error *err)
{
    int rc = ow_store_exec_static(s, "DELETE FROM orders WHERE 1 = 0", err);

    ow_store_end_read(s);
    if (rc != OW_OK && err->code == OW_ER_TABLEACCESS_DENIED)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, err->code,
                            "database %s: the account may not DELETE FROM orders, which deciding "
                            "needs (the new orders of a request that conflicts are taken back): "
                            "grant it, e.g. by running sql/worker_user.sql again",
                            db);
    if (rc != OW_OK && !ow_store_connected(s))
        return rc;
    ow_error_clear(err);
    return OW_OK;
}

int ow_store_check_server(ow_store *s, ow_error *err)
{
    char db[OW_STORE_SERVER_TEXT_MAX + 80];
    ow_server_report r;
    int rc = OW_OK;

    ow_store_server_text(s, db, sizeof(db));
    snprintf(db + strlen(db), sizeof(db) - strlen(db), "/%s", s->database);
    ow_server_assess(&s->server, &s->needs, &r);
    for (size_t i = 0; i < r.n; i++) {
        const ow_server_finding *f = &r.f[i];

        if (f->level == OW_SERVER_NOTE || f->level == OW_SERVER_WARN)
            ow_store_log_once(f->level == OW_SERVER_WARN ? OW_LOG_WARN : OW_LOG_INFO, db,
                              f->setting, f->value, f->why);
        if (f->level == OW_SERVER_REFUSE && rc == OW_OK)
            rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "database %s: %s = %s: %s", db,
                              f->setting, f->value, f->why);
    }
    if (rc == OW_OK)
        rc = check_schema(s, db, err);
    if (rc == OW_OK && s->needs.decides)
        rc = check_delete(s, db, err);
    return rc;
}
