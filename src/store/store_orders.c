/* The orders' side of the deciding transaction (store_orders.h). */
#include "store_orders.h"

#include <stdlib.h>
#include <string.h>

#include "ow/htab.h"

void ow_store_item_ctx(const ow_store_item *it, ow_response_ctx *ctx)
{
    ctx->user_id = it->req->user_id;
    ctx->key = it->key;
    ctx->key_len = it->key_len;
    ctx->digest_hex = it->digest_hex;
}

int ow_orders_prepare(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    ow_scratch *sc = &s->scratch;
    size_t total = 0;

    if (ow_grow((void **)&sc->ref_start, &sc->ref_start_cap, n, sizeof(*sc->ref_start)) != OW_OK)
        return ow_store_oom(err);
    for (size_t i = 0; i < n; i++) {
        sc->ref_start[i] = total;
        total += items[i].req->n_orders;
        items[i].decision = OW_DECISION_NONE;
    }
    if (ow_grow((void **)&sc->refs, &sc->refs_cap, total, sizeof(*sc->refs)) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

/* --- The orders that exist ------------------------------------------------ */

static const ow_existing *existing_find(const ow_scratch *sc, long long user_id, const char *ext,
                                        size_t len)
{
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t row;

    while (ow_htab_next(&sc->existing, ow_order_hash(user_id, ext, len), &w, &row)) {
        const ow_existing *e = &sc->rows[row];

        if (e->user_id == user_id && e->ext_len == len && memcmp(e->ext, ext, len) == 0)
            return e;
    }
    return NULL;
}

static int existing_add(ow_scratch *sc, const ow_existing *row)
{
    if (existing_find(sc, row->user_id, row->ext, row->ext_len) != NULL)
        return OW_OK;
    if (ow_grow((void **)&sc->rows, &sc->rows_cap, sc->n_rows + 1, sizeof(*sc->rows)) != OW_OK ||
        ow_htab_put(&sc->existing, ow_order_hash(row->user_id, row->ext, row->ext_len),
                    sc->n_rows) != OW_OK)
        return OW_ENOMEM;
    sc->rows[sc->n_rows++] = *row;
    return OW_OK;
}

/* --- Step 1: lock existing orders ---------------------------------------- */

/* The columns of lock_orders_sql, bound to one row. */
typedef struct {
    MYSQL_BIND res[7];
    ow_mybool nul[7];
    ow_existing row;
    char amount[32];
    unsigned long order_no_len, ext_len, amount_len;
} existing_cols;

static void bind_existing(existing_cols *c)
{
    memset(c, 0, sizeof(*c));
    ow_result_int(&c->res[0], &c->row.id, &c->nul[0]);
    ow_result_bytes(&c->res[1], c->row.order_no, sizeof(c->row.order_no) - 1, &c->order_no_len,
                    &c->nul[1]);
    ow_result_int(&c->res[2], &c->row.user_id, &c->nul[2]);
    ow_result_bytes(&c->res[3], c->row.ext, sizeof(c->row.ext) - 1, &c->ext_len, &c->nul[3]);
    ow_result_bytes(&c->res[4], c->amount, sizeof(c->amount) - 1, &c->amount_len, &c->nul[4]);
    ow_result_int(&c->res[5], &c->row.product_id, &c->nul[5]);
    ow_result_int(&c->res[6], &c->row.quantity, &c->nul[6]);
}

/* The fetched row as the plan compares it. */
static void take_existing(existing_cols *c)
{
    const char *why = NULL;
    ow_existing *row = &c->row;

    row->order_no[c->order_no_len < sizeof(row->order_no) ? c->order_no_len : 0] = '\0';
    row->ext_len = c->ext_len < sizeof(row->ext) ? c->ext_len : sizeof(row->ext) - 1;
    row->ext[row->ext_len] = '\0';
    if (c->nul[5])
        row->product_id = 0;
    if (c->amount_len >= sizeof(c->amount) ||
        ow_amount_parse(c->amount, c->amount_len, &row->cents, &why) != OW_OK)
        row->cents = -1;
}

static int fetch_existing(ow_decide_part *p, MYSQL_STMT *st, ow_error *err)
{
    existing_cols c;
    unsigned e;
    int frc;

    bind_existing(&c);
    if (mysql_stmt_bind_result(st, c.res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(p->s, st, "lock orders", err);
    for (;;) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        take_existing(&c);
        if (existing_add(&p->s->scratch, &c.row) != OW_OK) {
            mysql_stmt_free_result(st);
            return ow_store_oom(err);
        }
    }
    /* Freeing the result clears the statement's error: read it first. */
    e = frc != MYSQL_NO_DATA ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    if (frc != MYSQL_NO_DATA)
        return ow_store_fail(p->s, e, "lock orders", err);
    return OW_OK;
}

/* Cached per row bucket by the connection (ow_store_stmt). */
static const ow_sql_shape lock_orders_sql = {
    OW_SLOT_DECIDE + 0,
    "SELECT id, order_no, user_id, external_order_no, amount, product_id, quantity FROM orders "
    "WHERE (user_id, external_order_no) IN (",
    "(?,?)", ") FOR UPDATE"};

/* Runs one padded chunk of the locking read over rows (user, order)
 * pairs; padding repeats the last pair, which changes nothing it matches. */
static int lock_chunk(ow_decide_part *p, const ow_order_item **its, const long long *users,
                      size_t rows, ow_error *err)
{
    size_t padded = 0;
    MYSQL_STMT *st = NULL;
    ow_params *params = &p->s->params;
    int rc = ow_store_stmt_padded(p->s, &lock_orders_sql, rows, &st, &padded, err);

    if (rc != OW_OK)
        return rc;
    for (size_t i = 0; i < padded; i++) {
        size_t k = i < rows ? i : rows - 1;

        ow_param_int(params, users[k]);
        ow_param_bytes(params, its[k]->external_order_no, its[k]->ext_len);
    }
    rc = ow_store_execute(p->s, st, params, "lock orders", err);
    return rc == OW_OK ? fetch_existing(p, st, err) : rc;
}

int ow_orders_lock(ow_decide_part *p, ow_error *err)
{
    const ow_order_item *its[OW_STMT_MAX_ROWS];
    long long users[OW_STMT_MAX_ROWS];
    ow_scratch *sc = &p->s->scratch;
    size_t k = 0;
    int rc = OW_OK;

    ow_htab_clear(&sc->existing);
    sc->n_rows = 0;
    for (size_t i = p->first; rc == OW_OK && i < p->first + p->count; i++) {
        const ow_request *req = p->items[i].req;

        for (size_t j = 0; rc == OW_OK && j < req->n_orders; j++) {
            its[k] = &req->orders[j];
            users[k] = req->user_id;
            if (++k == OW_STMT_MAX_ROWS) {
                rc = lock_chunk(p, its, users, k, err);
                k = 0;
            }
        }
    }
    if (rc == OW_OK && k > 0)
        rc = lock_chunk(p, its, users, k, err);
    return rc;
}

/* --- Step 2: decide in memory -------------------------------------------- */

static unsigned diff_fields(const ow_existing *e, const ow_order_item *it)
{
    unsigned d = 0;

    if (e->cents != it->amount_cents)
        d |= OW_DIFF_AMOUNT;
    if (e->product_id != it->product_id)
        d |= OW_DIFF_PRODUCT_ID;
    if (e->quantity != it->quantity)
        d |= OW_DIFF_QUANTITY;
    return d;
}

/* Each order of item i: reused, in conflict, or new. Returns the number
 * of conflicts (listed in the scratch). */
static size_t plan_orders(ow_decide_part *p, size_t i)
{
    ow_scratch *sc = &p->s->scratch;
    const ow_request *req = p->items[i].req;
    ow_order_ref *refs = &sc->refs[sc->ref_start[i]];
    size_t n_conflicts = 0;

    for (size_t j = 0; j < req->n_orders; j++) {
        const ow_order_item *o = &req->orders[j];
        const ow_existing *e = existing_find(sc, req->user_id, o->external_order_no, o->ext_len);

        if (e == NULL) {
            refs[j].order_id = ow_idgen_next(p->s->ids);
            ow_order_no_format(refs[j].order_id, refs[j].order_no);
            refs[j].existing = 0;
        } else if (diff_fields(e, o) != 0) {
            sc->conflicts[n_conflicts].index = j;
            sc->conflicts[n_conflicts].fields = diff_fields(e, o);
            n_conflicts++;
        } else {
            refs[j].order_id = e->id;
            memcpy(refs[j].order_no, e->order_no, sizeof(refs[j].order_no));
            refs[j].existing = 1;
        }
    }
    return n_conflicts;
}

static int plan_item(ow_decide_part *p, size_t i, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    ow_store_item *it = &p->items[i];
    size_t n_conflicts;
    ow_response_ctx ctx;
    int rc;

    if (ow_grow((void **)&sc->conflicts, &sc->conflicts_cap, it->req->n_orders,
                sizeof(*sc->conflicts)) != OW_OK)
        return ow_store_oom(err);
    n_conflicts = plan_orders(p, i);
    ow_store_item_ctx(it, &ctx);
    ow_buf_reset(&it->body);
    it->request_id = ow_idgen_next(p->s->ids);
    it->ours = 0;
    it->replayed = 0;
    if (n_conflicts > 0) {
        it->decision = OW_DECISION_CONFLICT;
        it->code = OW_CODE_ORDER_ALREADY_EXISTS;
        rc = ow_response_order_conflict(&ctx, it->req, sc->conflicts, n_conflicts, &it->body);
    } else {
        it->decision = OW_DECISION_CREATED;
        it->code = OW_CODE_CREATED;
        rc = ow_response_created(&ctx, it->req, &sc->refs[sc->ref_start[i]], &it->body);
    }
    if (rc != OW_OK)
        return ow_store_oom(err);
    /* A record no statement can carry is not written: the request is
     * refused, whatever its orders are. */
    if (ow_server_record_bytes(it->key_len, it->body.len) > ow_store_packet_limit(p->s)) {
        it->decision = OW_DECISION_TOO_LARGE;
        it->code = OW_CODE_INVALID_REQUEST;
        ow_buf_reset(&it->body);
    }
    return OW_OK;
}

int ow_orders_plan(ow_decide_part *p, ow_error *err)
{
    for (size_t i = p->first; i < p->first + p->count; i++) {
        int rc = plan_item(p, i, err);

        if (rc != OW_OK)
            return rc;
    }
    return OW_OK;
}

/* --- Step 5: insert the new orders --------------------------------------- */

typedef struct {
    const ow_store_item *it;
    size_t order;
} order_slot;

/* Cached per row bucket by the connection (ow_store_stmt). */
static const ow_sql_shape insert_orders_sql = {
    OW_SLOT_DECIDE + 3,
    "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, product_id, quantity, "
    "request_id) VALUES ",
    "(?,?,?,?,?,?,?,?)", ""};

static int insert_chunk(ow_decide_part *p, const order_slot *slots, unsigned bucket, ow_error *err)
{
    size_t rows = (size_t)1 << bucket;
    ow_scratch *sc = &p->s->scratch;
    ow_params *params = &p->s->params;
    MYSQL_STMT *st = NULL;
    int rc = ow_store_stmt(p->s, &insert_orders_sql, bucket, &st, err);

    if (rc != OW_OK)
        return rc;
    for (size_t r = 0; r < rows; r++) {
        const ow_store_item *it = slots[r].it;
        const ow_order_item *o = &it->req->orders[slots[r].order];
        const ow_order_ref *ref = &sc->refs[sc->ref_start[it - p->items] + slots[r].order];

        ow_param_int(params, ref->order_id);
        ow_param_bytes(params, ref->order_no, strlen(ref->order_no));
        ow_param_int(params, it->req->user_id);
        ow_param_bytes(params, o->external_order_no, o->ext_len);
        ow_param_amount(params, o->amount_cents);
        if (o->product_id > 0)
            ow_param_int(params, o->product_id);
        else
            ow_param_null(params);
        ow_param_int(params, o->quantity);
        ow_param_int(params, it->request_id);
    }
    return ow_store_execute(p->s, st, params, "insert orders", err);
}

/* An order's row in its statement: the fixed columns, its texts, and for
 * each of its 8 parameters a length prefix and a type. */
#define ORDER_ROW_FIXED (5 * 8 + OW_ORDER_NO_MAX + OW_AMOUNT_TEXT_MAX + 8 * 11)

static size_t slots_bytes(const order_slot *slots, size_t rows)
{
    size_t bytes = 0;

    for (size_t r = 0; r < rows; r++)
        bytes += ORDER_ROW_FIXED + slots[r].it->req->orders[slots[r].order].ext_len;
    return bytes;
}

/* Inserts slots[0..k) as a sum of powers of two (one cached statement
 * each), each within the packet budget. */
static int insert_slots(ow_decide_part *p, const order_slot *slots, size_t k, ow_error *err)
{
    size_t budget = ow_store_packet_budget(p->s);
    int rc = OW_OK;

    for (size_t done = 0; rc == OW_OK && done < k;) {
        unsigned bucket = ow_store_bucket_floor(k - done);
        size_t bytes = slots_bytes(slots + done, (size_t)1 << bucket);

        while (bucket > 0 && bytes > budget)
            bytes = slots_bytes(slots + done, (size_t)1 << --bucket);
        rc = insert_chunk(p, slots + done, bucket, err);
        if (rc != OW_OK)
            ow_store_statement_refused(p->s, bytes, err);
        done += (size_t)1 << bucket;
    }
    return rc;
}

int ow_orders_insert(ow_decide_part *p, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    order_slot slots[OW_STMT_MAX_ROWS];
    size_t k = 0;
    int rc = OW_OK;

    for (size_t i = p->first; rc == OW_OK && i < p->first + p->count; i++) {
        const ow_store_item *it = &p->items[i];

        if (!it->ours || it->decision != OW_DECISION_CREATED)
            continue;
        for (size_t j = 0; rc == OW_OK && j < it->req->n_orders; j++) {
            if (sc->refs[sc->ref_start[i] + j].existing)
                continue;
            slots[k].it = it;
            slots[k].order = j;
            if (++k == OW_STMT_MAX_ROWS) {
                rc = insert_slots(p, slots, k, err);
                k = 0;
            }
        }
    }
    return rc == OW_OK ? insert_slots(p, slots, k, err) : rc;
}
