/*
 * purge: request records older than a cutoff, in bounded chunks
 * (ow/store_purge.h). A chunk is one READ COMMITTED transaction whose reads
 * are locking reads, so that two purges never both take one record. The
 * only SQL text built at run time is made of the static fragments below
 * (placeholder lists).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "ow/store_purge.h"
#include "store_parts.h"

#define ID_BUCKET 8                /* ow_store_stmt's bucket of ID_CHUNK rows */
#define ID_CHUNK (1u << ID_BUCKET) /* ids per IN list of a purge chunk: 256 */

static const char *const sql_cutoff = "SELECT CAST(NOW(6) - INTERVAL ? SECOND AS DATETIME(6))";
static const char *const sql_count_old =
    "SELECT COUNT(*) FROM idempotency_requests WHERE created_at < ?";
/* The chunk after position (c, i): created_at < cutoff, (created_at, id) >
 * (c, i), written so that the range on ix_requests_created is
 * [c, cutoff) and the walk never revisits the delete-marked entries of the
 * chunks before it, which would slow every chunk as the purge goes on.
 * A locking read: the rows it returns stay locked until the chunk's
 * transaction ends, so no other purge can detach their orders or delete
 * them meanwhile. A row another transaction holds is waited for; if that
 * transaction deleted it, the read skips it and takes the next one, so the
 * chunk holds only records that still exist. */
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

int ow_store_purge_cutoff(ow_store *s, int64_t older_than_s, ow_timestamp *cutoff, ow_error *err)
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
        rc = ow_store_fetch_single(s, st, &res, "compute cutoff", err);
    if (rc == OW_OK && nul)
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                          "the cutoff is before the earliest date the database can hold");
    if (rc == OW_OK)
        ow_store_time_from(&t, cutoff);
    if (st != NULL)
        mysql_stmt_close(st);
    ow_store_rollback(s);
    return rc;
}

int ow_store_purge_count(ow_store *s, const ow_timestamp *cutoff, int64_t *count, ow_error *err)
{
    MYSQL_TIME t;
    ow_params *p = NULL;
    int rc = ow_store_connect(s, err);

    *count = 0;
    ow_store_time_to(cutoff, &t);
    if (rc == OW_OK && (p = ow_store_params_for(s, 1, err)) == NULL)
        rc = OW_EFATAL;
    if (rc == OW_OK) {
        ow_param_time(p, &t);
        rc = ow_store_query_int(s, sql_count_old, p, count, "count old requests", err);
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
        ow_record_cleanup(&c->records[i]);
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
    ow_store_time_to(cutoff, &until);
    ow_store_time_to(pos->started ? &pos->created_at : &origin, &from);
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

static void take_chunk_record(const chunk_cols *c, ow_record *r)
{
    r->id = c->id;
    r->user_id = c->user_id;
    r->key_len = ow_store_text_len(c->key_len, sizeof(r->key));
    memcpy(r->key, c->key, r->key_len);
    r->key[r->key_len] = '\0';
    memcpy(r->status, c->status, ow_store_text_len(c->status_len, sizeof(r->status)));
    r->status[ow_store_text_len(c->status_len, sizeof(r->status))] = '\0';
    r->digest_hex[0] = '\0';
    if (!c->nul[5] && c->digest_len == OW_DIGEST_LEN)
        ow_hex(c->digest, OW_DIGEST_LEN, r->digest_hex);
    r->response_status = c->response_status;
    ow_store_time_from(&c->created, &r->created_at);
}

/* One fetched row into the chunk: its id, position and (records) columns. */
static int take_chunk_row(ow_store *s, MYSQL_STMT *st, const chunk_cols *c, int with_records,
                          ow_purge_chunk *ch, ow_error *err)
{
    ch->ids[ch->n] = c->id;
    ch->last.id = c->id;
    ch->last.started = 1;
    ow_store_time_from(&c->created, &ch->last.created_at);
    if (with_records) {
        ow_record *r = &ch->records[ch->n];

        ow_record_init(r);
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
static ow_record *chunk_record(ow_purge_chunk *ch, long long id)
{
    for (size_t i = 0; i < ch->n; i++)
        if (ch->records[i].id == id)
            return &ch->records[i];
    return NULL;
}

static int add_chunk_order(ow_purge_chunk *ch, long long id, const char *order_no,
                           unsigned long no_len, long long request_id, ow_error *err)
{
    ow_record *r = chunk_record(ch, request_id);
    ow_record_order *o;

    if (r == NULL)
        return OW_OK;
    o = realloc(r->orders, (r->n_orders + 1) * sizeof(*o));
    if (o == NULL)
        return ow_store_oom(err);
    r->orders = o;
    o = &r->orders[r->n_orders++];
    memset(o, 0, sizeof(*o));
    o->id = id;
    memcpy(o->order_no, order_no, ow_store_text_len(no_len, sizeof(o->order_no)));
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

int ow_store_purge_lock(ow_store *s, const ow_timestamp *cutoff, const ow_purge_pos *pos,
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

int ow_store_purge_delete(ow_store *s, const ow_purge_chunk *c, ow_purge_pos *pos,
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

void ow_store_purge_abort(ow_store *s)
{
    ow_store_rollback(s);
}

int ow_store_purge_batch(ow_store *s, const ow_timestamp *cutoff, size_t limit, ow_purge_batch *out,
                         ow_error *err)
{
    ow_purge_chunk c;
    ow_purge_pos pos = {0};
    int rc;

    memset(out, 0, sizeof(*out));
    ow_purge_chunk_init(&c);
    rc = ow_store_purge_lock(s, cutoff, &pos, limit, 0, &c, err);
    if (rc == OW_OK)
        rc = ow_store_purge_delete(s, &c, &pos, out, err);
    ow_purge_chunk_cleanup(&c);
    return rc;
}
