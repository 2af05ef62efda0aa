/*
 * lookup: one request record and its orders, or one order, each read by
 * one statement, prepared once per connection (ow/store_lookup.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/store_lookup.h"
#include "store_parts.h"

void ow_timestamp_format(const ow_timestamp *t, char out[OW_TIMESTAMP_TEXT_MAX])
{
    snprintf(out, OW_TIMESTAMP_TEXT_MAX, "%04u-%02u-%02u %02u:%02u:%02u.%06lu", t->year % 10000,
             t->month % 100, t->day % 100, t->hour % 100, t->minute % 100, t->second % 100,
             t->microsecond % 1000000);
}

/* The record with its orders in one statement, so in one snapshot and one
 * round trip: a row per order, or one row with NULL order columns for a
 * record without orders. The body travels once, in the row of the first
 * order, not once per order. No ORDER BY: sorting rows of a LEFT JOIN by
 * the inner table's column takes the server a temporary table, on disk
 * because of the body; read_record sorts the orders instead. */
static const ow_sql_shape lookup_sql = {
    OW_SLOT_LOOKUP + 0,
    "SELECT r.id, r.status, r.request_digest, r.response_status, r.created_at, r.updated_at, "
    "IF(o.id IS NULL OR o.id = (SELECT MIN(f.id) FROM orders f WHERE f.request_id = r.id), "
    "r.response_body, NULL), "
    "o.id, o.order_no, o.external_order_no, o.amount, o.product_id, o.quantity "
    "FROM idempotency_requests r LEFT JOIN orders o ON o.request_id = r.id "
    "WHERE r.key_hash = ? AND r.user_id = ? AND r.idempotency_key = ?",
    "", ""};

static const ow_sql_shape order_by_ext_sql = {
    OW_SLOT_LOOKUP + 1,
    "SELECT id, order_no, external_order_no, amount, product_id, quantity FROM orders "
    "WHERE user_id = ? AND external_order_no = ?",
    "", ""};

void ow_record_init(ow_record *r)
{
    memset(r, 0, sizeof(*r));
    ow_buf_init(&r->response);
}

void ow_record_cleanup(ow_record *r)
{
    ow_buf_cleanup(&r->response);
    free(r->orders);
    ow_record_init(r);
}

/* The request's columns of lookup_sql, bound to a record. */
typedef struct {
    MYSQL_BIND res[7];
    ow_mybool nul[7];
    unsigned long status_len, digest_len, body_len;
    long long id, response_status;
    unsigned char digest[OW_DIGEST_LEN];
    MYSQL_TIME created, updated;
} request_cols;

static void bind_request_cols(request_cols *c, ow_record *r)
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

static void fill_record(const request_cols *c, ow_record *r)
{
    r->id = c->id;
    r->status[c->status_len < sizeof(r->status) ? c->status_len : sizeof(r->status) - 1] = '\0';
    r->response_status = c->response_status;
    r->digest_hex[0] = '\0';
    if (!c->nul[2] && c->digest_len == OW_DIGEST_LEN)
        ow_hex(c->digest, OW_DIGEST_LEN, r->digest_hex);
    if (!c->nul[4])
        ow_store_time_from(&c->created, &r->created_at);
    if (!c->nul[5])
        ow_store_time_from(&c->updated, &r->updated_at);
}

static int grow_orders(ow_record *r, size_t *cap)
{
    size_t cap2 = *cap != 0 ? *cap * 2 : 16;
    ow_record_order *p;

    if (r->n_orders < *cap)
        return OW_OK;
    p = realloc(r->orders, cap2 * sizeof(*p));
    if (p == NULL)
        return OW_ENOMEM;
    r->orders = p;
    *cap = cap2;
    return OW_OK;
}

/* The columns of an order (order_by_ext_sql, and the last six of
 * lookup_sql), bound to one order. */
typedef struct {
    MYSQL_BIND res[6];
    ow_mybool nul[6];
    unsigned long order_no_len, ext_len, amount_len;
    long long id, product_id, quantity;
    ow_record_order o;
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

static void take_order(order_cols *c, ow_record_order *o)
{
    c->o.id = c->id;
    c->o.order_no[ow_store_text_len(c->order_no_len, sizeof(c->o.order_no))] = '\0';
    c->o.ext_len = ow_store_text_len(c->ext_len, sizeof(c->o.external_order_no));
    c->o.external_order_no[c->o.ext_len] = '\0';
    c->o.amount[ow_store_text_len(c->amount_len, sizeof(c->o.amount))] = '\0';
    c->o.product_id = c->nul[4] ? 0 : c->product_id;
    c->o.quantity = c->quantity;
    *o = c->o;
}

/* Every column of lookup_sql: the request's seven, then an order's six. */
typedef struct {
    request_cols req;
    order_cols ord;
    MYSQL_BIND res[13];
} record_cols;

static void bind_record_cols(record_cols *c, ow_record *r)
{
    bind_request_cols(&c->req, r);
    bind_order_cols(&c->ord);
    memcpy(c->res, c->req.res, sizeof(c->req.res));
    memcpy(c->res + 7, c->ord.res, sizeof(c->ord.res));
}

/* One fetched row of lookup_sql into r: the request's columns from the
 * first row, the body from the row that carries it, the row's order if it
 * has one. */
static int take_row(ow_store *s, MYSQL_STMT *st, record_cols *c, int first, ow_record *r,
                    size_t *cap, ow_error *err)
{
    int rc = OW_OK;

    if (first)
        fill_record(&c->req, r);
    /* The first row sets the body (empty if it does not carry it). */
    if (first || !c->req.nul[6])
        rc = ow_store_fetch_column(s, st, 6, c->req.nul[6] ? 0 : c->req.body_len, &r->response,
                                   "read response body", err);
    if (rc != OW_OK || c->ord.nul[0])
        return rc;
    if (grow_orders(r, cap) != OW_OK)
        return ow_store_oom(err);
    take_order(&c->ord, &r->orders[r->n_orders++]);
    return OW_OK;
}

static int order_id_cmp(const void *a, const void *b)
{
    const ow_record_order *x = a;
    const ow_record_order *y = b;

    return (x->id > y->id) - (x->id < y->id);
}

/* Reads the rows of the executed lookup_sql into r; OW_ENOTFOUND when
 * there are none. */
static int read_record(ow_store *s, MYSQL_STMT *st, ow_record *r, ow_error *err)
{
    record_cols c;
    size_t cap = 0;
    size_t rows = 0;
    int frc;
    int rc = OW_OK;

    bind_record_cols(&c, r);
    if (mysql_stmt_bind_result(st, c.res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(s, st, "look up request", err);
    for (;;) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        rc = take_row(s, st, &c, rows++ == 0, r, &cap, err);
        if (rc != OW_OK)
            break;
    }
    if (rc == OW_OK && frc != MYSQL_NO_DATA)
        rc = ow_store_fail_stmt(s, st, "look up request", err);
    mysql_stmt_free_result(st);
    if (rc == OW_OK && rows == 0)
        rc = OW_ENOTFOUND;
    if (rc == OW_OK && r->n_orders > 1)
        qsort(r->orders, r->n_orders, sizeof(*r->orders), order_id_cmp);
    return rc;
}

int ow_store_lookup(ow_store *s, int64_t user_id, const char *key, size_t key_len, ow_record *out,
                    ow_error *err)
{
    MYSQL_STMT *st = NULL;
    unsigned char hash[OW_KEY_HASH_LEN];
    int rc;

    ow_record_cleanup(out);
    if (key_len == 0 || key_len > OW_KEY_MAX)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "key: must be 1 to %d bytes",
                            OW_KEY_MAX);
    out->user_id = user_id;
    memcpy(out->key, key, key_len);
    out->key_len = key_len;
    if (ow_key_hash(user_id, key, key_len, hash) != OW_OK)
        return ow_store_oom(err);
    rc = ow_store_connect(s, err);
    if (rc == OW_OK)
        rc = ow_store_stmt(s, &lookup_sql, 0, &st, err);
    if (rc == OW_OK) {
        ow_param_bytes(&s->params, hash, sizeof(hash));
        ow_param_int(&s->params, user_id);
        ow_param_bytes(&s->params, out->key, key_len);
        rc = ow_store_execute(s, st, &s->params, "look up request", err);
    }
    if (rc == OW_OK)
        rc = read_record(s, st, out, err);
    ow_store_end_read(s);
    return rc;
}

/* One row by the unique key (user_id, external_order_no). */
int ow_store_order_get(ow_store *s, int64_t user_id, const char *ext, size_t ext_len,
                       ow_record_order *out, ow_error *err)
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
        rc = ow_store_stmt(s, &order_by_ext_sql, 0, &st, err);
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
    ow_store_end_read(s);
    return rc;
}
