/* Databases for the runs, the worker's user, and the database limit: the
 * same orders inserted by large multi-row INSERTs in large transactions. */
#include <fcntl.h>
#include <mysql.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "ow/digest.h"
#include "ow/idgen.h"
#include "ow/request.h"
#include "ow/response.h"
#include "ow/util.h"

/* MariaDB Connector/C declares is_null as my_bool *, MySQL 8 as bool *. */
#ifdef MARIADB_BASE_VERSION
typedef my_bool bm_bool;
#else
typedef bool bm_bool;
#endif

struct bm_db {
    MYSQL *my;
};

bm_db *bm_db_connect(const bm_env *e, const char *database)
{
    bm_db *db = bm_xcalloc(1, sizeof(*db));
    unsigned timeout = 10;

    db->my = mysql_init(NULL);
    if (db->my == NULL) {
        free(db);
        bm_log("mysql_init failed");
        return NULL;
    }
    mysql_options(db->my, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    if (mysql_real_connect(db->my, e->mysql_host, e->mysql_root_user, e->mysql_root_password,
                           database, e->mysql_port, NULL, 0) == NULL) {
        bm_log("connect to MySQL %s:%u as %s: %s", e->mysql_host, e->mysql_port, e->mysql_root_user,
               mysql_error(db->my));
        bm_db_close(&db);
        return NULL;
    }
    return db;
}

void bm_db_close(bm_db **db)
{
    if (*db == NULL)
        return;
    mysql_close((*db)->my);
    free(*db);
    *db = NULL;
}

static int exec(bm_db *db, const char *sql)
{
    if (mysql_query(db->my, sql) == 0)
        return 0;
    bm_log("%.60s...: %s", sql, mysql_error(db->my));
    return -1;
}

/* `order-worker migrate` as root on the new database; its output goes to
 * the database's log in the output folder. */
static int migrate(const bm_env *e, const char *name)
{
    char port[16], log[600];
    char user[128], pw[256], host[128], dbv[128], portv[48];
    const char *env[] = {user, pw, host, dbv, portv, "ORDER_WORKER_MYSQL_PASSWORD_FILE="};
    char *argv[] = {(char *)(uintptr_t)e->worker_bin, "migrate", NULL};
    pid_t pid;
    int status;

    snprintf(port, sizeof(port), "%u", e->mysql_port);
    snprintf(user, sizeof(user), "ORDER_WORKER_MYSQL_USER=%s", e->mysql_root_user);
    snprintf(pw, sizeof(pw), "ORDER_WORKER_MYSQL_PASSWORD=%s", e->mysql_root_password);
    snprintf(host, sizeof(host), "ORDER_WORKER_MYSQL_HOST=%s", e->mysql_host);
    snprintf(dbv, sizeof(dbv), "ORDER_WORKER_MYSQL_DATABASE=%s", name);
    snprintf(portv, sizeof(portv), "ORDER_WORKER_MYSQL_PORT=%s", port);
    snprintf(log, sizeof(log), "%s/migrate-%s.log", e->out_dir, name);
    pid = bm_spawn(argv, env, sizeof(env) / sizeof(env[0]), log);
    status = pid > 0 ? bm_wait_quiet(pid, 120) : -1;
    if (status != 0)
        bm_log("order-worker migrate on %s failed (status %d, log %s)", name, status, log);
    return status == 0 ? 0 : -1;
}

int bm_db_grant(const bm_env *e, const char *name)
{
    bm_db *db = bm_db_connect(e, NULL);
    char sql[512];
    int rc = db != NULL ? 0 : -1;

    if (rc == 0) {
        snprintf(sql, sizeof(sql), "GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.* TO '%s'@'%%'",
                 name, e->worker_user);
        rc = exec(db, sql);
    }
    bm_db_close(&db);
    return rc;
}

int bm_db_create(const bm_env *e, const char *name)
{
    bm_db *db = bm_db_connect(e, NULL);
    char sql[512];
    int rc = db != NULL ? 0 : -1;

    if (rc == 0) {
        snprintf(sql, sizeof(sql), "CREATE DATABASE `%s`", name);
        rc = exec(db, sql);
    }
    if (rc == 0)
        rc = migrate(e, name);
    if (rc == 0) {
        snprintf(sql, sizeof(sql), "GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.* TO '%s'@'%%'",
                 name, e->worker_user);
        rc = exec(db, sql);
    }
    bm_db_close(&db);
    return rc;
}

void bm_db_drop(const bm_env *e, const char *name)
{
    bm_db *db;
    char sql[256];

    if (e->keep_databases)
        return;
    db = bm_db_connect(e, NULL);
    if (db == NULL)
        return;
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS `%s`", name);
    exec(db, sql);
    bm_db_close(&db);
}

/* Runs sql and reads its rows of (name, integer) into the caller's
 * callback; -1 when the query fails. */
static int query_pairs(bm_db *db, const char *sql, void (*each)(void *, const char *, long long),
                       void *arg)
{
    MYSQL_RES *res;
    MYSQL_ROW row;

    if (exec(db, sql) != 0)
        return -1;
    res = mysql_store_result(db->my);
    if (res == NULL)
        return -1;
    while ((row = mysql_fetch_row(res)) != NULL)
        if (row[0] != NULL && row[1] != NULL)
            each(arg, row[0], strtoll(row[1], NULL, 10));
    mysql_free_result(res);
    return 0;
}

static void take_counter(void *arg, const char *name, long long v)
{
    bm_db_counters *c = arg;

    if (strcmp(name, "Questions") == 0)
        c->statements = v;
    else if (strcmp(name, "Com_commit") == 0)
        c->commits = v;
    else if (strcmp(name, "Innodb_os_log_written") == 0)
        c->redo_bytes = v;
}

int bm_db_counters_read(const bm_env *e, bm_db_counters *c)
{
    bm_db *db = bm_db_connect(e, NULL);
    int rc;

    memset(c, 0, sizeof(*c));
    if (db == NULL)
        return -1;
    rc = query_pairs(db,
                     "SHOW GLOBAL STATUS WHERE Variable_name IN "
                     "('Questions', 'Com_commit', 'Innodb_os_log_written')",
                     take_counter, c);
    bm_db_close(&db);
    c->ok = rc == 0;
    return rc;
}

typedef struct {
    bm_db *db;
    const char *database;
    long long entries;
} index_count;

/* One table and its number of indexes: adds rows x indexes. */
static void add_table(void *arg, const char *table, long long indexes)
{
    index_count *ic = arg;
    char sql[512];
    MYSQL_RES *res;
    MYSQL_ROW row;

    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM `%s`.`%s`", ic->database, table);
    if (ic->entries < 0 || exec(ic->db, sql) != 0 ||
        (res = mysql_store_result(ic->db->my)) == NULL) {
        ic->entries = -1;
        return;
    }
    row = mysql_fetch_row(res);
    if (row != NULL && row[0] != NULL)
        ic->entries += strtoll(row[0], NULL, 10) * indexes;
    mysql_free_result(res);
}

long long bm_db_index_entries(const bm_env *e, const char *database)
{
    index_count ic = {bm_db_connect(e, NULL), database, 0};
    char sql[512];

    if (ic.db == NULL)
        return -1;
    snprintf(sql, sizeof(sql),
             "SELECT table_name, COUNT(DISTINCT index_name) FROM information_schema.statistics "
             "WHERE table_schema = '%s' AND table_name IN ('idempotency_requests', 'orders') "
             "GROUP BY table_name",
             database);
    if (query_pairs(ic.db, sql, add_table, &ic) != 0)
        ic.entries = -1;
    bm_db_close(&ic.db);
    return ic.entries;
}

/* A random password from /dev/urandom, written to a 0600 file. */
static int new_password(bm_env *e, char *pw, size_t size)
{
    unsigned char raw[12];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    FILE *f;

    if (fd < 0 || read(fd, raw, sizeof(raw)) != (ssize_t)sizeof(raw)) {
        if (fd >= 0)
            close(fd);
        bm_log("cannot read /dev/urandom");
        return -1;
    }
    close(fd);
    if (size < 2 * sizeof(raw) + 3)
        return -1;
    memcpy(pw, "b-", 2);
    ow_hex(raw, sizeof(raw), pw + 2);
    snprintf(e->password_file, sizeof(e->password_file), "%s/worker.password", e->out_dir);
    fd = open(e->password_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL || fprintf(f, "%s\n", pw) < 0 || fclose(f) != 0) {
        bm_log("cannot write %s", e->password_file);
        return -1;
    }
    return 0;
}

int bm_db_worker_user(bm_env *e)
{
    char pw[64], sql[512];
    bm_db *db;
    int rc;

    snprintf(e->worker_user, sizeof(e->worker_user), "owb_%.24s", e->run_id);
    if (new_password(e, pw, sizeof(pw)) != 0)
        return -1;
    db = bm_db_connect(e, NULL);
    if (db == NULL)
        return -1;
    snprintf(sql, sizeof(sql), "CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", e->worker_user, pw);
    rc = exec(db, sql);
    bm_db_close(&db);
    return rc;
}

/* --- The database limit ------------------------------------------------------- */

/* One order row, prepared before the clock starts. */
typedef struct {
    long long id, user_id, product_id, quantity, request_id;
    char order_no[OW_ORDER_NO_LEN + 1];
    char ext[OW_EXT_NO_MAX + 1];
    unsigned long ext_len;
    char amount[OW_AMOUNT_TEXT_MAX];
    unsigned long amount_len;
} row_t;

/* One request row of the fair limit: what the worker writes for
 * a new batch, its 201 body included. */
typedef struct {
    long long id, user_id, response_status;
    const char *key;
    unsigned long key_len, digest_len, status_len, body_len;
    unsigned char digest[OW_DIGEST_LEN];
    char *body;
} req_row_t;

typedef struct {
    req_row_t *v;
    size_t n;
    size_t bytes;
} req_rows;

/* The request row of a new batch whose orders are rows[0..n). */
static void add_request(req_rows *rq, const bm_msg *m, const ow_request *req, long long id,
                        const row_t *rows)
{
    req_row_t *r = &rq->v[rq->n];
    ow_order_ref *refs = bm_xcalloc(req->n_orders + 1, sizeof(*refs));
    char hex[OW_DIGEST_HEX_LEN + 1];
    ow_response_ctx ctx;
    ow_buf body;

    ow_digest_compute(req, r->digest, hex);
    for (size_t k = 0; k < req->n_orders; k++) {
        refs[k].order_id = rows[k].id;
        memcpy(refs[k].order_no, rows[k].order_no, sizeof(rows[k].order_no));
    }
    ctx = (ow_response_ctx){req->user_id, m->key, m->key_len, hex};
    ow_buf_init(&body);
    if (ow_response_created(&ctx, req, refs, &body) != 0) {
        bm_log("out of memory");
        exit(2);
    }
    r->id = id;
    r->user_id = req->user_id;
    r->response_status = 201;
    r->key = m->key;
    r->key_len = (unsigned long)m->key_len;
    r->digest_len = OW_DIGEST_LEN;
    r->status_len = 9; /* SUCCEEDED */
    r->body = body.data;
    r->body_len = (unsigned long)body.len;
    rq->bytes += body.len;
    rq->n++;
    free(refs);
}

/* The orders of every NEW message, with ids drawn like the worker's; with
 * rq, also their request rows. */
static row_t *collect_rows(const bm_data *d, size_t *n_rows, req_rows *rq)
{
    const ow_request_limits limits = {16u << 20, 10000};
    size_t cap = (size_t)d->items + 1, n = 0;
    row_t *rows = bm_xcalloc(cap, sizeof(*rows));
    ow_idgen ids;

    if (rq != NULL)
        rq->v = bm_xcalloc(d->n + 1, sizeof(*rq->v));

    ow_idgen_init(&ids, (unsigned)getpid(), ow_clock_wall_ms);
    for (size_t i = 0; i < d->n; i++) {
        ow_request req;
        ow_field_errors errs;
        long long request_id;

        if (d->v[i].kind != KIT_NEW)
            continue;
        ow_field_errors_init(&errs);
        if (ow_request_parse(d->v[i].value, d->v[i].len, &limits, &req, &errs) != 0) {
            ow_request_cleanup(&req);
            continue;
        }
        request_id = ow_idgen_next(&ids);
        for (size_t k = 0; k < req.n_orders && n < cap; k++, n++) {
            const ow_order_item *o = &req.orders[k];
            row_t *r = &rows[n];

            r->id = ow_idgen_next(&ids);
            ow_order_no_format(r->id, r->order_no);
            r->user_id = req.user_id;
            memcpy(r->ext, o->external_order_no, o->ext_len);
            r->ext_len = (unsigned long)o->ext_len;
            ow_amount_format(o->amount_cents, r->amount);
            r->amount_len = (unsigned long)strlen(r->amount);
            r->product_id = o->product_id;
            r->quantity = o->quantity;
            r->request_id = request_id;
        }
        if (rq != NULL)
            add_request(rq, &d->v[i], &req, request_id, &rows[n - req.n_orders]);
        ow_request_cleanup(&req);
    }
    *n_rows = n;
    return rows;
}

/* A multi-row INSERT: head, then rows copies of tuple, comma-separated. */
static MYSQL_STMT *prepare_rows(bm_db *db, const char *head, const char *tuple, int rows,
                                const char *what)
{
    ow_buf sql;
    MYSQL_STMT *st = mysql_stmt_init(db->my);
    int rc;

    ow_buf_init(&sql);
    rc = ow_buf_appends(&sql, head);
    for (int i = 0; rc == 0 && i < rows; i++)
        rc = ow_buf_appendf(&sql, "%s%s", i == 0 ? "" : ",", tuple);
    if (st == NULL || rc != 0 || mysql_stmt_prepare(st, sql.data, sql.len) != 0) {
        bm_log("prepare a %d-row %s: %s", rows, what,
               st != NULL ? mysql_stmt_error(st) : "no memory");
        if (st != NULL)
            mysql_stmt_close(st);
        st = NULL;
    }
    ow_buf_cleanup(&sql);
    return st;
}

static MYSQL_STMT *prepare_insert(bm_db *db, int rows)
{
    return prepare_rows(db,
                        "INSERT INTO orders (id, order_no, user_id, external_order_no, "
                        "amount, product_id, quantity, request_id) VALUES ",
                        "(?,?,?,?,?,?,?,?)", rows, "INSERT");
}

static void bind_int(MYSQL_BIND *b, long long *v, bm_bool *is_null)
{
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_null = is_null;
}

static void bind_text(MYSQL_BIND *b, char *v, unsigned long *len)
{
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = v;
    b->buffer_length = *len;
    b->length = len;
}

/* Binds rows[0..n) to st and executes it. */
static int insert_rows(MYSQL_STMT *st, MYSQL_BIND *binds, row_t *rows, int n)
{
    static bm_bool yes = 1, no = 0;
    static unsigned long order_no_len = OW_ORDER_NO_LEN;

    memset(binds, 0, sizeof(*binds) * 8 * (size_t)n);
    for (int i = 0; i < n; i++) {
        MYSQL_BIND *b = &binds[8 * i];
        row_t *r = &rows[i];

        bind_int(&b[0], &r->id, &no);
        bind_text(&b[1], r->order_no, &order_no_len);
        bind_int(&b[2], &r->user_id, &no);
        bind_text(&b[3], r->ext, &r->ext_len);
        bind_text(&b[4], r->amount, &r->amount_len);
        bind_int(&b[5], &r->product_id, r->product_id > 0 ? &no : &yes);
        bind_int(&b[6], &r->quantity, &no);
        bind_int(&b[7], &r->request_id, &no);
    }
    if (mysql_stmt_bind_param(st, binds) != 0 || mysql_stmt_execute(st) != 0) {
        bm_log("insert %d rows: %s", n, mysql_stmt_error(st));
        return -1;
    }
    return 0;
}

static MYSQL_STMT *prepare_request_insert(bm_db *db, int rows)
{
    return prepare_rows(db,
                        "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                        "request_digest, status, response_status, response_body) VALUES ",
                        "(?,?,?,?,?,?,?)", rows, "request INSERT");
}

static void bind_blob(MYSQL_BIND *b, const void *v, unsigned long *len)
{
    b->buffer_type = MYSQL_TYPE_BLOB;
    b->buffer = (void *)(uintptr_t)v;
    b->buffer_length = *len;
    b->length = len;
}

static int insert_requests(MYSQL_STMT *st, MYSQL_BIND *binds, req_row_t *rows, int n)
{
    static bm_bool no = 0;
    static char succeeded[] = "SUCCEEDED";

    memset(binds, 0, sizeof(*binds) * 7 * (size_t)n);
    for (int i = 0; i < n; i++) {
        MYSQL_BIND *b = &binds[7 * i];
        req_row_t *r = &rows[i];

        bind_int(&b[0], &r->id, &no);
        bind_int(&b[1], &r->user_id, &no);
        bind_blob(&b[2], r->key, &r->key_len);
        bind_blob(&b[3], r->digest, &r->digest_len);
        bind_text(&b[4], succeeded, &r->status_len);
        bind_int(&b[5], &r->response_status, &no);
        bind_blob(&b[6], r->body, &r->body_len);
    }
    if (mysql_stmt_bind_param(st, binds) != 0 || mysql_stmt_execute(st) != 0) {
        bm_log("insert %d request rows: %s", n, mysql_stmt_error(st));
        return -1;
    }
    return 0;
}

/* A request INSERT's bodies stay within this many bytes: one statement of
 * 1,000 large bodies (1,000-order batches: about 134 KB each) would exceed
 * the server's max_allowed_packet. */
#define REQUEST_STMT_BODY_BYTES (8u << 20)

/* Rows per request INSERT: per_stmt, fewer when the longest body would
 * take a statement past REQUEST_STMT_BODY_BYTES. */
static int request_rows_per_stmt(const req_rows *rq, int per_stmt)
{
    unsigned long longest = 1;

    for (size_t i = 0; i < rq->n; i++)
        longest = rq->v[i].body_len > longest ? rq->v[i].body_len : longest;
    if ((unsigned long)per_stmt * longest <= REQUEST_STMT_BODY_BYTES)
        return per_stmt;
    return REQUEST_STMT_BODY_BYTES / longest > 0 ? (int)(REQUEST_STMT_BODY_BYTES / longest) : 1;
}

/* The request rows, in statements of per_stmt rows (fewer for large
 * bodies), a COMMIT every per_commit rows; *since_commit carries over to
 * the order rows. */
static int insert_all_requests(bm_db *db, req_rows *rq, int per_stmt, int per_commit,
                               size_t *since_commit)
{
    MYSQL_STMT *full;
    MYSQL_STMT *rest = NULL;
    MYSQL_BIND *binds;
    size_t done = 0;
    int rc;

    per_stmt = request_rows_per_stmt(rq, per_stmt);
    full = prepare_request_insert(db, per_stmt);
    binds = bm_xcalloc((size_t)per_stmt * 7, sizeof(*binds));
    rc = full != NULL ? exec(db, "SET autocommit = 0") : -1;
    while (rc == 0 && done < rq->n) {
        int k = rq->n - done >= (size_t)per_stmt ? per_stmt : (int)(rq->n - done);

        if (k < per_stmt && rest == NULL)
            rest = prepare_request_insert(db, k);
        rc = insert_requests(k == per_stmt ? full : rest, binds, rq->v + done, k);
        done += (size_t)k;
        *since_commit += (size_t)k;
        if (rc == 0 && *since_commit >= (size_t)per_commit) {
            rc = mysql_commit(db->my) == 0 ? 0 : -1;
            *since_commit = 0;
        }
    }
    if (full != NULL)
        mysql_stmt_close(full);
    if (rest != NULL)
        mysql_stmt_close(rest);
    free(binds);
    return rc;
}

/* Inserts every row: full statements of per_stmt rows, a smaller statement
 * for the rest, a COMMIT every per_commit rows (rounded to statements). */
static int insert_all(bm_db *db, row_t *rows, size_t n, int per_stmt, int per_commit,
                      size_t since_commit)
{
    MYSQL_STMT *full = prepare_insert(db, per_stmt);
    MYSQL_STMT *rest = NULL;
    MYSQL_BIND *binds = bm_xcalloc((size_t)per_stmt * 8, sizeof(*binds));
    size_t done = 0;
    int rc = full != NULL ? exec(db, "SET autocommit = 0") : -1;

    while (rc == 0 && done < n) {
        int k = n - done >= (size_t)per_stmt ? per_stmt : (int)(n - done);

        if (k < per_stmt && rest == NULL)
            rest = prepare_insert(db, k);
        rc = insert_rows(k == per_stmt ? full : rest, binds, rows + done, k);
        done += (size_t)k;
        since_commit += (size_t)k;
        if (rc == 0 && (since_commit >= (size_t)per_commit || done == n)) {
            rc = mysql_commit(db->my) == 0 ? 0 : -1;
            since_commit = 0;
        }
    }
    if (full != NULL)
        mysql_stmt_close(full);
    if (rest != NULL)
        mysql_stmt_close(rest);
    free(binds);
    return rc;
}

static void req_rows_free(req_rows *rq)
{
    for (size_t i = 0; i < rq->n; i++)
        free(rq->v[i].body);
    free(rq->v);
}

int bm_db_limit(const bm_env *e, const bm_data *d, int rows_per_stmt, int rows_per_commit,
                int with_requests, bm_dblimit *out)
{
    char name[BM_NAME_MAX];
    size_t n = 0, since_commit = 0;
    row_t *rows;
    req_rows rq = {0};
    bm_db *db = NULL;
    double t0;
    int rc;

    memset(out, 0, sizeof(*out));
    out->rows_per_stmt = rows_per_stmt;
    out->rows_per_commit = rows_per_commit;
    out->with_requests = with_requests;
    snprintf(name, sizeof(name), "owb_%s_dblimit%s", e->run_id, with_requests ? "_fair" : "");
    rows = collect_rows(d, &n, with_requests ? &rq : NULL);
    rc = bm_db_create(e, name);
    if (rc == 0) {
        db = bm_db_connect(e, name);
        rc = db != NULL ? 0 : -1;
    }
    if (rc == 0 && n > 0) {
        bm_cpu_sample c0, c1;

        bm_cpu_sample_take(e, 0, &c0);
        t0 = bm_now();
        if (with_requests)
            rc = insert_all_requests(db, &rq, rows_per_stmt, rows_per_commit, &since_commit);
        if (rc == 0)
            rc = insert_all(db, rows, n, rows_per_stmt, rows_per_commit, since_commit);
        out->seconds = bm_now() - t0;
        bm_cpu_sample_take(e, 0, &c1);
        bm_cpu_describe(&c0, &c1, out->cpu_note, sizeof(out->cpu_note));
        out->rows = n;
        out->request_rows = rq.n;
        out->request_mib = (double)rq.bytes / 1048576.0;
        out->rows_per_s = out->seconds > 0 ? (double)n / out->seconds : 0.0;
    }
    bm_db_close(&db);
    free(rows);
    req_rows_free(&rq);
    bm_db_drop(e, name);
    return rc;
}
