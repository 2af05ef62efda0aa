/*
 * Operator operations on the store: lookup, purge and audit (ow/admin.h).
 *
 * Every statement is prepared and every value travels as a bound parameter;
 * the only SQL text built at run time is made of the static fragments below
 * (placeholder lists and the audit's COUNT/LIMIT wrappers). Reads that must
 * agree with each other (a record and its orders; the audit's checks) run
 * in one read-only REPEATABLE READ snapshot; a purge chunk is one
 * READ COMMITTED transaction of the session's usual kind whose reads are
 * locking reads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/admin.h"
#include "ow/log.h"
#include "store_parts.h"

#define ID_BUCKET 8                /* ow_store_stmt's bucket of ID_CHUNK rows */
#define ID_CHUNK (1u << ID_BUCKET) /* ids per IN list of a purge chunk: 256 */

/* --- Small helpers ------------------------------------------------------- */

void ow_timestamp_format(const ow_timestamp *t, char out[OW_TIMESTAMP_TEXT_MAX])
{
    snprintf(out, OW_TIMESTAMP_TEXT_MAX, "%04u-%02u-%02u %02u:%02u:%02u.%06lu", t->year % 10000,
             t->month % 100, t->day % 100, t->hour % 100, t->minute % 100, t->second % 100,
             t->microsecond % 1000000);
}

static void to_mysql_time(const ow_timestamp *t, MYSQL_TIME *m)
{
    memset(m, 0, sizeof(*m));
    m->year = t->year;
    m->month = t->month;
    m->day = t->day;
    m->hour = t->hour;
    m->minute = t->minute;
    m->second = t->second;
    m->second_part = t->microsecond;
    m->time_type = MYSQL_TIMESTAMP_DATETIME;
}

static void from_mysql_time(const MYSQL_TIME *m, ow_timestamp *t)
{
    t->year = m->year;
    t->month = m->month;
    t->day = m->day;
    t->hour = m->hour;
    t->minute = m->minute;
    t->second = m->second;
    t->microsecond = m->second_part;
}

/* Fetches the one row of an executed statement whose result is one column. */
static int fetch_single(ow_store *s, MYSQL_STMT *st, MYSQL_BIND *res, const char *what,
                        ow_error *err)
{
    int frc;

    if (mysql_stmt_bind_result(st, res) != 0)
        return ow_store_fail_stmt(s, st, what, err);
    frc = mysql_stmt_fetch(st);
    if (frc == 1) {
        unsigned e = mysql_stmt_errno(st);

        mysql_stmt_free_result(st);
        return ow_store_fail(s, e, what, err);
    }
    mysql_stmt_free_result(st);
    if (frc == MYSQL_NO_DATA)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%s: the query returned no row", what);
    return OW_OK;
}

/* Runs sql (parameters in params, may be NULL) and reads one integer. */
static int query_int(ow_store *s, const char *sql, ow_params *params, int64_t *v, const char *what,
                     ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res;
    long long value = 0;
    ow_mybool nul = 0;
    int rc = ow_store_prepare(s, sql, &st, err);

    if (rc == OW_OK)
        rc = ow_store_execute(s, st, params, what, err);
    ow_result_int(&res, &value, &nul);
    if (rc == OW_OK)
        rc = fetch_single(s, st, &res, what, err);
    if (st != NULL)
        mysql_stmt_close(st);
    *v = nul ? 0 : value;
    return rc;
}

/* Starts a read-only transaction that sees one consistent snapshot. The
 * caller ends it with ow_store_rollback. */
static int begin_snapshot(ow_store *s, ow_error *err)
{
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK)
        rc = ow_store_exec_static(s, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", err);
    if (rc == OW_OK)
        rc = ow_store_exec_static(s, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", err);
    return rc;
}

/* --- lookup -------------------------------------------------------------- */

static const char *const sql_lookup_request =
    "SELECT id, status, request_digest, response_status, created_at, updated_at, response_body "
    "FROM idempotency_requests WHERE key_hash = ? AND user_id = ? AND idempotency_key = ?";

static const char *const sql_lookup_orders =
    "SELECT id, order_no, external_order_no, amount, product_id, quantity FROM orders "
    "WHERE request_id = ? ORDER BY id";

void ow_admin_record_init(ow_admin_record *r)
{
    memset(r, 0, sizeof(*r));
    ow_buf_init(&r->response);
}

void ow_admin_record_cleanup(ow_admin_record *r)
{
    ow_buf_cleanup(&r->response);
    free(r->orders);
    ow_admin_record_init(r);
}

/* The columns of sql_lookup_request, bound to a record. */
typedef struct {
    MYSQL_BIND res[7];
    ow_mybool nul[7];
    unsigned long status_len, digest_len, body_len;
    long long id, response_status;
    unsigned char digest[OW_DIGEST_LEN];
    MYSQL_TIME created, updated;
} request_cols;

static void bind_request_cols(request_cols *c, ow_admin_record *r)
{
    memset(c, 0, sizeof(*c));
    ow_result_int(&c->res[0], &c->id, &c->nul[0]);
    ow_result_bytes(&c->res[1], r->status, sizeof(r->status) - 1, &c->status_len, &c->nul[1]);
    ow_result_bytes(&c->res[2], c->digest, sizeof(c->digest), &c->digest_len, &c->nul[2]);
    ow_result_int(&c->res[3], &c->response_status, &c->nul[3]);
    c->res[4].buffer_type = MYSQL_TYPE_DATETIME;
    c->res[4].buffer = &c->created;
    c->res[4].is_null = &c->nul[4];
    c->res[5].buffer_type = MYSQL_TYPE_DATETIME;
    c->res[5].buffer = &c->updated;
    c->res[5].is_null = &c->nul[5];
    /* No buffer: the body's length is learned first, then it is fetched. */
    ow_result_bytes(&c->res[6], NULL, 0, &c->body_len, &c->nul[6]);
}

static void fill_record(const request_cols *c, ow_admin_record *r)
{
    r->id = c->id;
    r->status[c->status_len < sizeof(r->status) ? c->status_len : sizeof(r->status) - 1] = '\0';
    r->response_status = c->response_status;
    r->digest_hex[0] = '\0';
    if (!c->nul[2] && c->digest_len == OW_DIGEST_LEN)
        ow_hex(c->digest, OW_DIGEST_LEN, r->digest_hex);
    if (!c->nul[4])
        from_mysql_time(&c->created, &r->created_at);
    if (!c->nul[5])
        from_mysql_time(&c->updated, &r->updated_at);
}

/* Reads the request row; OW_ENOTFOUND when there is none. */
static int lookup_request(ow_store *s, MYSQL_STMT *st, ow_admin_record *r, ow_error *err)
{
    request_cols c;
    unsigned char hash[OW_KEY_HASH_LEN];
    int frc;
    int rc = OW_OK;

    ow_params_reset(&s->params);
    if (ow_params_reserve(&s->params, 3) != OW_OK ||
        ow_key_hash(r->user_id, r->key, r->key_len, hash) != OW_OK)
        return ow_store_oom(err);
    ow_param_bytes(&s->params, hash, sizeof(hash));
    ow_param_int(&s->params, r->user_id);
    ow_param_bytes(&s->params, r->key, r->key_len);
    rc = ow_store_execute(s, st, &s->params, "look up request", err);
    if (rc != OW_OK)
        return rc;
    bind_request_cols(&c, r);
    if (mysql_stmt_bind_result(st, c.res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(s, st, "look up request", err);
    frc = mysql_stmt_fetch(st);
    if (frc == MYSQL_NO_DATA)
        rc = OW_ENOTFOUND;
    else if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
        rc = ow_store_fail_stmt(s, st, "look up request", err);
    if (rc == OW_OK) {
        fill_record(&c, r);
        rc = ow_store_fetch_column(s, st, 6, c.nul[6] ? 0 : c.body_len, &r->response,
                                   "read response body", err);
    }
    mysql_stmt_free_result(st);
    return rc;
}

static int grow_orders(ow_admin_record *r, size_t *cap)
{
    size_t cap2 = *cap != 0 ? *cap * 2 : 16;
    ow_admin_order *p;

    if (r->n_orders < *cap)
        return OW_OK;
    p = realloc(r->orders, cap2 * sizeof(*p));
    if (p == NULL)
        return OW_ENOMEM;
    r->orders = p;
    *cap = cap2;
    return OW_OK;
}

/* The columns of sql_lookup_orders, bound to one order. */
typedef struct {
    MYSQL_BIND res[6];
    ow_mybool nul[6];
    unsigned long order_no_len, ext_len, amount_len;
    long long id, product_id, quantity;
    ow_admin_order o;
} order_cols;

static void bind_order_cols(order_cols *c)
{
    memset(c, 0, sizeof(*c));
    ow_result_int(&c->res[0], &c->id, &c->nul[0]);
    ow_result_bytes(&c->res[1], c->o.order_no, sizeof(c->o.order_no) - 1, &c->order_no_len,
                    &c->nul[1]);
    ow_result_bytes(&c->res[2], c->o.external_order_no, sizeof(c->o.external_order_no) - 1,
                    &c->ext_len, &c->nul[2]);
    ow_result_bytes(&c->res[3], c->o.amount, sizeof(c->o.amount) - 1, &c->amount_len, &c->nul[3]);
    ow_result_int(&c->res[4], &c->product_id, &c->nul[4]);
    ow_result_int(&c->res[5], &c->quantity, &c->nul[5]);
}

static size_t clamp_len(unsigned long len, size_t cap)
{
    return len < cap ? (size_t)len : cap - 1;
}

static void take_order(order_cols *c, ow_admin_order *o)
{
    c->o.id = c->id;
    c->o.order_no[clamp_len(c->order_no_len, sizeof(c->o.order_no))] = '\0';
    c->o.ext_len = clamp_len(c->ext_len, sizeof(c->o.external_order_no));
    c->o.external_order_no[c->o.ext_len] = '\0';
    c->o.amount[clamp_len(c->amount_len, sizeof(c->o.amount))] = '\0';
    c->o.product_id = c->nul[4] ? 0 : c->product_id;
    c->o.quantity = c->quantity;
    *o = c->o;
}

static int lookup_orders(ow_store *s, MYSQL_STMT *st, ow_admin_record *r, ow_error *err)
{
    order_cols c;
    size_t cap = 0;
    int frc;
    int rc;

    ow_params_reset(&s->params);
    if (ow_params_reserve(&s->params, 1) != OW_OK)
        return ow_store_oom(err);
    ow_param_int(&s->params, r->id);
    rc = ow_store_execute(s, st, &s->params, "look up orders", err);
    if (rc != OW_OK)
        return rc;
    bind_order_cols(&c);
    if (mysql_stmt_bind_result(st, c.res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(s, st, "look up orders", err);
    for (;;) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        if (grow_orders(r, &cap) != OW_OK) {
            rc = ow_store_oom(err);
            break;
        }
        take_order(&c, &r->orders[r->n_orders++]);
    }
    if (rc == OW_OK && frc != MYSQL_NO_DATA)
        rc = ow_store_fail_stmt(s, st, "look up orders", err);
    mysql_stmt_free_result(st);
    return rc;
}

int ow_admin_lookup(ow_store *s, int64_t user_id, const char *key, size_t key_len,
                    ow_admin_record *out, ow_error *err)
{
    MYSQL_STMT *req = NULL;
    MYSQL_STMT *orders = NULL;
    int rc;

    ow_admin_record_cleanup(out);
    if (key_len == 0 || key_len > OW_KEY_MAX)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "key: must be 1 to %d bytes",
                            OW_KEY_MAX);
    out->user_id = user_id;
    memcpy(out->key, key, key_len);
    out->key_len = key_len;
    rc = begin_snapshot(s, err);
    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_lookup_request, &req, err);
    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_lookup_orders, &orders, err);
    if (rc == OW_OK)
        rc = lookup_request(s, req, out, err);
    if (rc == OW_OK)
        rc = lookup_orders(s, orders, out, err);
    if (req != NULL)
        mysql_stmt_close(req);
    if (orders != NULL)
        mysql_stmt_close(orders);
    ow_store_rollback(s);
    return rc;
}

static const char *const sql_order_by_ext =
    "SELECT id, order_no, external_order_no, amount, product_id, quantity FROM orders "
    "WHERE user_id = ? AND external_order_no = ?";

/* One row, read outside any explicit transaction: a single statement sees
 * one snapshot by itself. */
int ow_admin_order_get(ow_store *s, int64_t user_id, const char *ext, size_t ext_len,
                       ow_admin_order *out, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    order_cols c;
    int frc;
    int rc;

    if (ext_len == 0 || ext_len > OW_EXT_NO_MAX)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "external_order_no: must be 1 to %d bytes", OW_EXT_NO_MAX);
    rc = ow_store_connect(s, err);
    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_order_by_ext, &st, err);
    if (rc == OW_OK) {
        ow_params_reset(&s->params);
        if (ow_params_reserve(&s->params, 2) != OW_OK)
            rc = ow_store_oom(err);
    }
    if (rc == OW_OK) {
        ow_param_int(&s->params, user_id);
        ow_param_bytes(&s->params, ext, ext_len);
        rc = ow_store_execute(s, st, &s->params, "look up order", err);
    }
    if (rc == OW_OK) {
        bind_order_cols(&c);
        if (mysql_stmt_bind_result(st, c.res) != 0 || mysql_stmt_store_result(st) != 0)
            rc = ow_store_fail_stmt(s, st, "look up order", err);
    }
    if (rc == OW_OK) {
        frc = mysql_stmt_fetch(st);
        if (frc == MYSQL_NO_DATA)
            rc = OW_ENOTFOUND;
        else if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            rc = ow_store_fail_stmt(s, st, "look up order", err);
        else
            take_order(&c, out);
        mysql_stmt_free_result(st);
    }
    if (st != NULL)
        mysql_stmt_close(st);
    ow_store_rollback(s);
    return rc;
}

/* --- purge --------------------------------------------------------------- */

static const char *const sql_cutoff = "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS DATETIME(6))";
static const char *const sql_count_old =
    "SELECT COUNT(*) FROM idempotency_requests WHERE created_at < ?";
/* The chunk after position (c, i): created_at < cutoff, (created_at, id) >
 * (c, i), written so that the range on ix_requests_created is
 * [c, cutoff) and the walk never revisits the delete-marked entries of the
 * chunks before it (issue 13). A locking read: the rows it returns stay
 * locked until the chunk's transaction ends, so no other purge can detach
 * their orders or delete them meanwhile. A row another transaction holds
 * is waited for; if that transaction deleted it, the read skips it and
 * takes the next one, so the chunk holds only records that still exist. */
#define SQL_AFTER_POS                                                          \
    " FROM idempotency_requests WHERE created_at < ? AND created_at >= ? AND " \
    "(created_at > ? OR id > ?) ORDER BY created_at, id LIMIT ? FOR UPDATE"
static const char *const sql_select_old = "SELECT id, created_at" SQL_AFTER_POS;
static const char *const sql_select_old_records =
    "SELECT id, created_at, user_id, idempotency_key, status, request_digest, response_status, "
    "response_body" SQL_AFTER_POS;
/* IN lists of ID_CHUNK ids, cached by the connection (ow_store_stmt). The
 * orders are locked too, although only a transaction that also deletes
 * their record (locked above) may detach them: it costs nothing, and the
 * archive then never depends on that rule of the callers. */
static const ow_sql_shape chunk_orders_sql = {
    OW_SLOT_PURGE + 0, "SELECT id, order_no, request_id FROM orders WHERE request_id IN (", "?",
    ") FOR UPDATE"};
static const ow_sql_shape detach_sql = {
    OW_SLOT_PURGE + 1, "UPDATE orders SET request_id = NULL WHERE request_id IN (", "?", ")"};
static const ow_sql_shape delete_sql = {OW_SLOT_PURGE + 2,
                                        "DELETE FROM idempotency_requests WHERE id IN (", "?", ")"};

int ow_admin_purge_cutoff(ow_store *s, int64_t older_than_s, ow_timestamp *cutoff, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res;
    MYSQL_TIME t;
    ow_mybool nul = 0;
    ow_params *p = NULL;
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_cutoff, &st, err);
    if (rc == OW_OK && (p = ow_store_params_for(s, 1, err)) == NULL)
        rc = OW_EFATAL;
    if (rc == OW_OK) {
        ow_param_int(p, older_than_s);
        rc = ow_store_execute(s, st, p, "compute cutoff", err);
    }
    memset(&t, 0, sizeof(t));
    ow_result_time(&res, &t, &nul);
    if (rc == OW_OK)
        rc = fetch_single(s, st, &res, "compute cutoff", err);
    if (rc == OW_OK && nul)
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                          "the cutoff is before the earliest date the database can hold");
    if (rc == OW_OK)
        from_mysql_time(&t, cutoff);
    if (st != NULL)
        mysql_stmt_close(st);
    ow_store_rollback(s);
    return rc;
}

int ow_admin_purge_count(ow_store *s, const ow_timestamp *cutoff, int64_t *count, ow_error *err)
{
    MYSQL_TIME t;
    ow_params *p = NULL;
    int rc = ow_store_connect(s, err);

    *count = 0;
    to_mysql_time(cutoff, &t);
    if (rc == OW_OK && (p = ow_store_params_for(s, 1, err)) == NULL)
        rc = OW_EFATAL;
    if (rc == OW_OK) {
        ow_param_time(p, &t);
        rc = query_int(s, sql_count_old, p, count, "count old requests", err);
    }
    ow_store_rollback(s);
    return rc;
}

/* Runs shape over ids[0..n) in chunks of ID_CHUNK; the last chunk repeats
 * its last id to fill the list, which changes nothing it matches. Adds the
 * affected rows to *affected. */
static int run_in_chunks(ow_store *s, const ow_sql_shape *shape, const long long *ids, size_t n,
                         int64_t *affected, const char *what, ow_error *err)
{
    int rc = OW_OK;

    for (size_t done = 0; rc == OW_OK && done < n; done += ID_CHUNK) {
        MYSQL_STMT *st = NULL;

        rc = ow_store_stmt(s, shape, ID_BUCKET, &st, err);
        for (size_t i = 0; rc == OW_OK && i < ID_CHUNK; i++)
            ow_param_int(&s->params, ids[done + i < n ? done + i : n - 1]);
        if (rc == OW_OK)
            rc = ow_store_execute(s, st, &s->params, what, err);
        if (rc == OW_OK)
            *affected += (int64_t)mysql_stmt_affected_rows(st);
    }
    return rc;
}

void ow_purge_chunk_init(ow_purge_chunk *c)
{
    memset(c, 0, sizeof(*c));
}

static void chunk_clear(ow_purge_chunk *c)
{
    for (size_t i = 0; c->records != NULL && i < c->n; i++)
        ow_admin_record_cleanup(&c->records[i]);
    free(c->records);
    free(c->ids);
    ow_purge_chunk_init(c);
}

void ow_purge_chunk_cleanup(ow_purge_chunk *c)
{
    chunk_clear(c);
}

/* Binds the five parameters of SQL_AFTER_POS into s->params. */
static int pos_params(ow_store *s, const ow_timestamp *cutoff, const ow_purge_pos *pos,
                      size_t limit, ow_error *err)
{
    static const ow_timestamp origin = {1000, 1, 1, 0, 0, 0, 0};
    ow_params *p = ow_store_params_for(s, 5, err);
    MYSQL_TIME until, from;

    if (p == NULL)
        return OW_EFATAL;
    to_mysql_time(cutoff, &until);
    to_mysql_time(pos->started ? &pos->created_at : &origin, &from);
    ow_param_time(p, &until);
    ow_param_time(p, &from);
    ow_param_time(p, &from);
    ow_param_int(p, pos->started ? pos->id : INT64_MIN);
    ow_param_int(p, (long long)limit);
    return OW_OK;
}

/* The columns of sql_select_old_records (the first two: sql_select_old). */
typedef struct {
    MYSQL_BIND res[8];
    ow_mybool nul[8];
    long long id, user_id, response_status;
    MYSQL_TIME created;
    unsigned long key_len, status_len, digest_len, body_len;
    char key[OW_KEY_MAX + 1];
    char status[16];
    unsigned char digest[OW_DIGEST_LEN];
} chunk_cols;

static void bind_chunk_cols(chunk_cols *c)
{
    memset(c, 0, sizeof(*c));
    ow_result_int(&c->res[0], &c->id, &c->nul[0]);
    ow_result_time(&c->res[1], &c->created, &c->nul[1]);
    c->res[1].is_null = &c->nul[1];
    ow_result_int(&c->res[2], &c->user_id, &c->nul[2]);
    ow_result_bytes(&c->res[3], c->key, sizeof(c->key) - 1, &c->key_len, &c->nul[3]);
    ow_result_bytes(&c->res[4], c->status, sizeof(c->status) - 1, &c->status_len, &c->nul[4]);
    ow_result_bytes(&c->res[5], c->digest, sizeof(c->digest), &c->digest_len, &c->nul[5]);
    ow_result_int(&c->res[6], &c->response_status, &c->nul[6]);
    ow_result_bytes(&c->res[7], NULL, 0, &c->body_len, &c->nul[7]);
}

static void take_chunk_record(const chunk_cols *c, ow_admin_record *r)
{
    r->id = c->id;
    r->user_id = c->user_id;
    r->key_len = clamp_len(c->key_len, sizeof(r->key));
    memcpy(r->key, c->key, r->key_len);
    r->key[r->key_len] = '\0';
    memcpy(r->status, c->status, clamp_len(c->status_len, sizeof(r->status)));
    r->status[clamp_len(c->status_len, sizeof(r->status))] = '\0';
    r->digest_hex[0] = '\0';
    if (!c->nul[5] && c->digest_len == OW_DIGEST_LEN)
        ow_hex(c->digest, OW_DIGEST_LEN, r->digest_hex);
    r->response_status = c->response_status;
    from_mysql_time(&c->created, &r->created_at);
}

/* One fetched row into the chunk: its id, position and (records) columns. */
static int take_chunk_row(ow_store *s, MYSQL_STMT *st, const chunk_cols *c, int with_records,
                          ow_purge_chunk *ch, ow_error *err)
{
    ch->ids[ch->n] = c->id;
    ch->last.id = c->id;
    ch->last.started = 1;
    from_mysql_time(&c->created, &ch->last.created_at);
    if (with_records) {
        ow_admin_record *r = &ch->records[ch->n];

        ow_admin_record_init(r);
        take_chunk_record(c, r);
        ch->n++;
        return ow_store_fetch_column(s, st, 7, c->nul[7] ? 0 : c->body_len, &r->response,
                                     "read response body", err);
    }
    ch->n++;
    return OW_OK;
}

static int select_chunk(ow_store *s, const ow_timestamp *cutoff, const ow_purge_pos *pos,
                        size_t limit, int with_records, ow_purge_chunk *ch, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    chunk_cols c;
    int frc = 0;
    int rc;

    if (with_records)
        rc = ow_store_prepare(s, sql_select_old_records, &st, err);
    else
        rc = ow_store_prepare(s, sql_select_old, &st, err);
    bind_chunk_cols(&c);
    if (rc == OW_OK)
        rc = pos_params(s, cutoff, pos, limit, err);
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, &s->params, "select old requests", err);
    if (rc == OW_OK && (mysql_stmt_bind_result(st, c.res) != 0 || mysql_stmt_store_result(st) != 0))
        rc = ow_store_fail_stmt(s, st, "select old requests", err);
    while (rc == OW_OK && ch->n < limit) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        rc = take_chunk_row(s, st, &c, with_records, ch, err);
    }
    if (rc == OW_OK && frc != 0 && frc != MYSQL_NO_DATA && frc != MYSQL_DATA_TRUNCATED)
        rc = ow_store_fail_stmt(s, st, "select old requests", err);
    if (st != NULL) {
        mysql_stmt_free_result(st);
        mysql_stmt_close(st);
    }
    return rc;
}

/* The record of request id in the chunk (ids ascending by position, not by
 * id: a linear search over at most one chunk). */
static ow_admin_record *chunk_record(ow_purge_chunk *ch, long long id)
{
    for (size_t i = 0; i < ch->n; i++)
        if (ch->records[i].id == id)
            return &ch->records[i];
    return NULL;
}

static int add_chunk_order(ow_purge_chunk *ch, long long id, const char *order_no,
                           unsigned long no_len, long long request_id, ow_error *err)
{
    ow_admin_record *r = chunk_record(ch, request_id);
    ow_admin_order *o;

    if (r == NULL)
        return OW_OK;
    o = realloc(r->orders, (r->n_orders + 1) * sizeof(*o));
    if (o == NULL)
        return ow_store_oom(err);
    r->orders = o;
    o = &r->orders[r->n_orders++];
    memset(o, 0, sizeof(*o));
    o->id = id;
    memcpy(o->order_no, order_no, clamp_len(no_len, sizeof(o->order_no)));
    return OW_OK;
}

/* Reads the orders of ids[done..done+ID_CHUNK) with a prepared IN list. */
static int chunk_orders_part(ow_store *s, ow_purge_chunk *ch, size_t done, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[3];
    ow_mybool nul[3] = {0};
    long long id = 0, request_id = 0;
    char order_no[OW_ORDER_NO_MAX + 1];
    unsigned long no_len = 0;
    int frc = 0;
    int rc = ow_store_stmt(s, &chunk_orders_sql, ID_BUCKET, &st, err);

    for (size_t i = 0; rc == OW_OK && i < ID_CHUNK; i++)
        ow_param_int(&s->params, ch->ids[done + i < ch->n ? done + i : ch->n - 1]);
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, &s->params, "select the orders of old requests", err);
    ow_result_int(&res[0], &id, &nul[0]);
    ow_result_bytes(&res[1], order_no, sizeof(order_no) - 1, &no_len, &nul[1]);
    ow_result_int(&res[2], &request_id, &nul[2]);
    if (rc == OW_OK && mysql_stmt_bind_result(st, res) != 0)
        rc = ow_store_fail_stmt(s, st, "select the orders of old requests", err);
    while (rc == OW_OK) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        rc = add_chunk_order(ch, id, order_no, no_len, request_id, err);
    }
    if (rc == OW_OK && frc != MYSQL_NO_DATA)
        rc = ow_store_fail_stmt(s, st, "select the orders of old requests", err);
    if (st != NULL)
        mysql_stmt_free_result(st);
    return rc;
}

static int select_chunk_orders(ow_store *s, ow_purge_chunk *ch, ow_error *err)
{
    int rc = OW_OK;

    for (size_t done = 0; rc == OW_OK && done < ch->n; done += ID_CHUNK)
        rc = chunk_orders_part(s, ch, done, err);
    return rc;
}

int ow_admin_purge_lock(ow_store *s, const ow_timestamp *cutoff, const ow_purge_pos *pos,
                        size_t limit, int with_records, ow_purge_chunk *c, ow_error *err)
{
    int rc;

    chunk_clear(c);
    if (limit == 0 || limit > OW_PURGE_BATCH_MAX)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "batch: must be 1 to %d",
                            OW_PURGE_BATCH_MAX);
    c->ids = malloc(limit * sizeof(*c->ids));
    c->records = with_records ? calloc(limit, sizeof(*c->records)) : NULL;
    if (c->ids == NULL || (with_records && c->records == NULL)) {
        chunk_clear(c);
        return ow_store_oom(err);
    }
    rc = ow_store_connect(s, err);
    if (rc == OW_OK)
        rc = select_chunk(s, cutoff, pos, limit, with_records, c, err);
    if (rc == OW_OK && with_records && c->n > 0)
        rc = select_chunk_orders(s, c, err);
    if (rc != OW_OK) {
        /* A lock wait timeout ends only its statement: the locks taken
         * before it must go too. */
        ow_store_rollback(s);
        chunk_clear(c);
    }
    return rc;
}

int ow_admin_purge_delete(ow_store *s, const ow_purge_chunk *c, ow_purge_pos *pos,
                          ow_purge_batch *out, ow_error *err)
{
    int rc = OW_OK;

    memset(out, 0, sizeof(*out));
    /* A new connection would not hold the chunk's locks. */
    if (!ow_store_connected(s))
        return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 0,
                            "delete requests: the connection that locked the chunk is gone");
    if (c->n > 0)
        rc = run_in_chunks(s, &detach_sql, c->ids, c->n, &out->orders_detached, "detach orders",
                           err);
    if (rc == OW_OK && c->n > 0)
        rc = run_in_chunks(s, &delete_sql, c->ids, c->n, &out->requests_deleted, "delete requests",
                           err);
    if (rc == OW_OK)
        rc = ow_store_commit(s, err);
    if (rc != OW_OK) {
        ow_store_rollback(s);
        memset(out, 0, sizeof(*out));
        return rc;
    }
    out->requests_selected = (int64_t)c->n;
    if (c->n > 0)
        *pos = c->last;
    return OW_OK;
}

void ow_admin_purge_abort(ow_store *s)
{
    ow_store_rollback(s);
}

int ow_admin_purge_batch(ow_store *s, const ow_timestamp *cutoff, size_t limit, ow_purge_batch *out,
                         ow_error *err)
{
    ow_purge_chunk c;
    ow_purge_pos pos = {0};
    int rc;

    memset(out, 0, sizeof(*out));
    ow_purge_chunk_init(&c);
    rc = ow_admin_purge_lock(s, cutoff, &pos, limit, 0, &c, err);
    if (rc == OW_OK)
        rc = ow_admin_purge_delete(s, &c, &pos, out, err);
    ow_purge_chunk_cleanup(&c);
    return rc;
}

/* --- audit --------------------------------------------------------------- */

/* Each check is a SELECT with one row per finding and three columns named
 * a (BIGINT), b (bytes or NULL) and c (BIGINT), ordered for stable
 * examples. Its findings are the rows; its examples the first rows. */
typedef struct {
    const char *name;
    const char *rows;
    const char *label[3]; /* label[1] NULL: column b is not shown */
    int mask_b;           /* column b holds a key or an order number: mask it */
} audit_def;

static const audit_def audit_defs[OW_AUDIT_CHECK_COUNT] = {
    [OW_AUDIT_DUPLICATE_REQUESTS] =
        {"duplicate request keys",
         "SELECT user_id AS a, idempotency_key AS b, COUNT(*) AS c FROM idempotency_requests "
         "GROUP BY user_id, idempotency_key HAVING COUNT(*) > 1 ORDER BY a, b",
         {"user_id", "key", "records"},
         1},
    [OW_AUDIT_DUPLICATE_ORDERS] =
        {"duplicate orders",
         "SELECT user_id AS a, external_order_no AS b, COUNT(*) AS c FROM orders "
         "GROUP BY user_id, external_order_no HAVING COUNT(*) > 1 ORDER BY a, b",
         {"user_id", "external_order_no", "orders"},
         1},
    [OW_AUDIT_ORDERS_WITHOUT_SUCCESS] =
        {"orders without a SUCCEEDED request",
         "SELECT o.id AS a, r.status AS b, o.request_id AS c FROM orders o "
         "LEFT JOIN idempotency_requests r ON r.id = o.request_id "
         "WHERE o.request_id IS NOT NULL AND (r.id IS NULL OR r.status <> 'SUCCEEDED') "
         "ORDER BY a",
         {"order_id", "request_status", "request_id"},
         0},
    [OW_AUDIT_FAILED_OWNERS] =
        {"FAILED requests owning orders",
         "SELECT r.id AS a, NULL AS b, COUNT(*) AS c FROM idempotency_requests r "
         "JOIN orders o ON o.request_id = r.id WHERE r.status = 'FAILED' GROUP BY r.id "
         "ORDER BY a",
         {"request_id", NULL, "orders"},
         0},
    [OW_AUDIT_NOT_FINAL] =
        {"requests not in a final state",
         "SELECT id AS a, status AS b, response_status AS c FROM idempotency_requests "
         "WHERE status NOT IN ('SUCCEEDED', 'FAILED') "
         "OR (status = 'SUCCEEDED' AND response_status <> 201) "
         "OR (status = 'FAILED' AND response_status <> 409) "
         "OR LENGTH(response_body) = 0 ORDER BY a",
         {"request_id", "status", "response_status"},
         0},
};

/* The bytes of column b, printable: masked when they are a key, else
 * quoted with anything but printable ASCII as '?'. */
static void show_b(const audit_def *d, const char *b, size_t len, int isnull, char *out,
                   size_t outsz)
{
    size_t k = 0;

    if (isnull) {
        snprintf(out, outsz, "NULL");
        return;
    }
    if (d->mask_b) {
        ow_log_mask_key(b, len, out);
        return;
    }
    out[k++] = '"';
    for (size_t i = 0; i < len && k + 2 < outsz; i++)
        out[k++] = (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"') ? b[i] : '?';
    out[k++] = '"';
    out[k] = '\0';
}

static void format_example(const audit_def *d, long long a, const char *b, size_t blen, int bnull,
                           long long c, char out[OW_AUDIT_EXAMPLE_MAX])
{
    char shown[OW_LOG_MASK_MAX + 64];

    if (d->label[1] == NULL) {
        snprintf(out, OW_AUDIT_EXAMPLE_MAX, "%s=%lld %s=%lld", d->label[0], a, d->label[2], c);
        return;
    }
    show_b(d, b, blen, bnull, shown, sizeof(shown));
    snprintf(out, OW_AUDIT_EXAMPLE_MAX, "%s=%lld %s=%s %s=%lld", d->label[0], a, d->label[1], shown,
             d->label[2], c);
}

static int fetch_examples(ow_store *s, const audit_def *d, MYSQL_STMT *st, ow_audit_check *chk,
                          ow_error *err)
{
    MYSQL_BIND res[3];
    ow_mybool nul[3] = {0};
    long long a = 0, c = 0;
    char b[OW_KEY_MAX + 1];
    unsigned long blen = 0;
    unsigned e;
    int frc = 0;

    ow_result_int(&res[0], &a, &nul[0]);
    ow_result_bytes(&res[1], b, sizeof(b), &blen, &nul[1]);
    ow_result_int(&res[2], &c, &nul[2]);
    if (mysql_stmt_bind_result(st, res) != 0)
        return ow_store_fail_stmt(s, st, "audit examples", err);
    while (chk->n_examples < OW_AUDIT_EXAMPLES) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        format_example(d, nul[0] ? 0 : a, b, blen < sizeof(b) ? blen : sizeof(b), nul[1],
                       nul[2] ? 0 : c, chk->examples[chk->n_examples]);
        chk->n_examples++;
    }
    e = frc == 1 ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    if (frc == 1)
        return ow_store_fail(s, e, "audit examples", err);
    return OW_OK;
}

static int audit_examples(ow_store *s, const audit_def *d, ow_audit_check *chk, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    ow_params *p = NULL;
    ow_buf sql;
    int rc;

    ow_buf_init(&sql);
    rc = ow_buf_appends(&sql, d->rows) == OW_OK && ow_buf_appends(&sql, " LIMIT ?") == OW_OK
             ? OW_OK
             : ow_store_oom(err);
    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql.data, &st, err);
    if (rc == OW_OK && (p = ow_store_params_for(s, 1, err)) == NULL)
        rc = OW_EFATAL;
    if (rc == OW_OK) {
        ow_param_int(p, OW_AUDIT_EXAMPLES);
        rc = ow_store_execute(s, st, p, "audit examples", err);
    }
    if (rc == OW_OK)
        rc = fetch_examples(s, d, st, chk, err);
    if (st != NULL)
        mysql_stmt_close(st);
    ow_buf_cleanup(&sql);
    return rc;
}

static int audit_check(ow_store *s, const audit_def *d, ow_audit_check *chk, ow_error *err)
{
    ow_buf sql;
    int rc;

    chk->name = d->name;
    ow_buf_init(&sql);
    rc = ow_buf_appends(&sql, "SELECT COUNT(*) FROM (") == OW_OK &&
                 ow_buf_appends(&sql, d->rows) == OW_OK &&
                 ow_buf_appends(&sql, ") AS findings") == OW_OK
             ? OW_OK
             : ow_store_oom(err);
    if (rc == OW_OK)
        rc = query_int(s, sql.data, NULL, &chk->findings, "audit count", err);
    if (rc == OW_OK && chk->findings > 0)
        rc = audit_examples(s, d, chk, err);
    ow_buf_cleanup(&sql);
    return rc;
}

int ow_admin_audit(ow_store *s, ow_audit_report *out, ow_error *err)
{
    int rc;

    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < OW_AUDIT_CHECK_COUNT; i++)
        out->checks[i].name = audit_defs[i].name;
    rc = begin_snapshot(s, err);
    if (rc == OW_OK)
        rc = query_int(s, "SELECT COUNT(*) FROM idempotency_requests", NULL, &out->requests,
                       "count requests", err);
    if (rc == OW_OK)
        rc = query_int(s, "SELECT COUNT(*) FROM orders", NULL, &out->orders, "count orders", err);
    for (size_t i = 0; rc == OW_OK && i < OW_AUDIT_CHECK_COUNT; i++)
        rc = audit_check(s, &audit_defs[i], &out->checks[i], err);
    ow_store_rollback(s);
    return rc;
}
