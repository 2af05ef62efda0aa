/*
 * The transaction that decides a micro-batch of requests.
 *
 * Set-based path, for several items at once:
 *   1. lock the batch's existing orders (SELECT ... FOR UPDATE);
 *   2. decide each item in memory as if its key were new: reuse identical
 *      orders, report differing ones as a conflict, give new orders new ids;
 *      build the response body;
 *   3. INSERT IGNORE every request row, final status and body included;
 *   4. read the request rows back by key hash (the unique key, migration
 *      004) and match them by (user_id, key): a row with our id is
 *      ours (as many as step 3 inserted: ids from two processes can
 *      collide); another id means the key was already recorded (by an earlier
 *      request or a concurrent transaction that committed while we waited on
 *      the unique key), so the item replays the stored body or reports
 *      IDEMPOTENCY_KEY_REUSED, and writes nothing;
 *   5. INSERT the new orders of the items that are ours and CREATED;
 *   6. COMMIT.
 * A race the database reports in the middle (a concurrent creator of the
 * same order, 1062; a lock wait timeout, 1205; an id collision) rolls the
 * whole transaction back and the batch is redone one item at a time, each
 * item under its own SAVEPOINT, where each outcome belongs to one item.
 * A deadlock (1213) rolls back the transaction in the server; the caller
 * backs off and calls again, and that call runs one item at a time (the
 * store remembers why it failed: no caller branches on MySQL's numbers).
 */
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "store_internal.h"
#include "store_known_internal.h"

/* The statements of the set-based path, cached per row bucket by the
 * connection (ow_store_stmt). */
static const ow_sql_shape lock_orders_sql = {
    OW_SLOT_DECIDE + 0,
    "SELECT id, order_no, user_id, external_order_no, amount, product_id, quantity FROM orders "
    "WHERE (user_id, external_order_no) IN (",
    "(?,?)", ") FOR UPDATE"};
static const ow_sql_shape insert_requests_sql = {
    OW_SLOT_DECIDE + 1,
    "INSERT IGNORE INTO idempotency_requests (id, user_id, idempotency_key, request_digest, "
    "status, response_status, response_body) VALUES ",
    "(?,?,?,?,?,?,?)", ""};
static const ow_sql_shape select_requests_sql = {
    OW_SLOT_DECIDE + 2,
    "SELECT id, user_id, idempotency_key, request_digest, response_status, response_body, "
    "key_hash FROM idempotency_requests WHERE key_hash IN (",
    "?", ")"};
static const ow_sql_shape insert_orders_sql = {
    OW_SLOT_DECIDE + 3,
    "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, product_id, quantity, "
    "request_id) VALUES ",
    "(?,?,?,?,?,?,?,?)", ""};

#define FALLBACK 1      /* positive: a race; redo one item at a time */
#define ITEM_ATTEMPTS 5 /* tries of one item before giving up the batch */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t cap2 = *cap != 0 ? *cap : 16;
    void *q;

    if (need <= *cap)
        return OW_OK;
    while (cap2 < need)
        cap2 *= 2;
    if (cap2 > SIZE_MAX / elem)
        return OW_ENOMEM;
    q = realloc(*p, cap2 * elem);
    if (q == NULL)
        return OW_ENOMEM;
    *p = q;
    *cap = cap2;
    return OW_OK;
}

static unsigned bucket_for(size_t rows)
{
    unsigned b = 0;

    while (((size_t)1 << b) < rows)
        b++;
    return b;
}

/* Largest power of two <= rows, capped at OW_STMT_MAX_ROWS. */
static unsigned bucket_floor(size_t rows)
{
    unsigned b = 0;

    while (b + 1 < OW_STMT_BUCKETS && ((size_t)1 << (b + 1)) <= rows)
        b++;
    return b;
}

/* --- Index of existing orders ------------------------------------------- */

static size_t index_slots(size_t max_rows);

static int index_reset(ow_scratch *sc, size_t max_rows)
{
    size_t slots = index_slots(max_rows);

    if (grow((void **)&sc->rows, &sc->rows_cap, max_rows, sizeof(*sc->rows)) != OW_OK ||
        grow((void **)&sc->slots, &sc->slots_cap, slots, sizeof(*sc->slots)) != OW_OK)
        return OW_ENOMEM;
    for (size_t i = 0; i < slots; i++)
        sc->slots[i] = SIZE_MAX;
    sc->n_rows = 0;
    return OW_OK;
}

static size_t index_slots(size_t max_rows)
{
    size_t slots = 16;

    while (slots < 2 * max_rows)
        slots *= 2;
    return slots;
}

static const ow_existing *index_find(const ow_scratch *sc, size_t nslots, long long user_id,
                                     const char *ext, size_t len)
{
    size_t i = (size_t)ow_order_hash(user_id, ext, len) & (nslots - 1);

    while (sc->slots[i] != SIZE_MAX) {
        const ow_existing *e = &sc->rows[sc->slots[i]];

        if (e->user_id == user_id && e->ext_len == len && memcmp(e->ext, ext, len) == 0)
            return e;
        i = (i + 1) & (nslots - 1);
    }
    return NULL;
}

static void index_add(ow_scratch *sc, size_t nslots, size_t max_rows, const ow_existing *row)
{
    size_t i;

    if (sc->n_rows == max_rows || index_find(sc, nslots, row->user_id, row->ext, row->ext_len))
        return;
    sc->rows[sc->n_rows] = *row;
    i = (size_t)ow_order_hash(row->user_id, row->ext, row->ext_len) & (nslots - 1);
    while (sc->slots[i] != SIZE_MAX)
        i = (i + 1) & (nslots - 1);
    sc->slots[i] = sc->n_rows++;
}

/* --- Step 1: lock existing orders ---------------------------------------- */

typedef struct {
    ow_store *s;
    ow_store_item *items;
    size_t first;
    size_t count;
    size_t n_orders; /* orders of items[first .. first+count) */
    size_t nslots;
    size_t inserted; /* request rows the server reports as inserted (step 3) */
} batch;

static int fetch_existing(batch *bt, MYSQL_STMT *st, ow_error *err)
{
    ow_scratch *sc = &bt->s->scratch;
    MYSQL_BIND res[7];
    ow_existing row;
    char amount[32];
    unsigned long order_no_len = 0, ext_len = 0, amount_len = 0;
    ow_mybool nul[7] = {0};
    unsigned e;
    int frc;

    ow_result_int(&res[0], &row.id, &nul[0]);
    ow_result_bytes(&res[1], row.order_no, sizeof(row.order_no) - 1, &order_no_len, &nul[1]);
    ow_result_int(&res[2], &row.user_id, &nul[2]);
    ow_result_bytes(&res[3], row.ext, sizeof(row.ext) - 1, &ext_len, &nul[3]);
    ow_result_bytes(&res[4], amount, sizeof(amount) - 1, &amount_len, &nul[4]);
    ow_result_int(&res[5], &row.product_id, &nul[5]);
    ow_result_int(&res[6], &row.quantity, &nul[6]);
    if (mysql_stmt_bind_result(st, res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(bt->s, st, "lock orders", err);
    for (;;) {
        const char *why = NULL;

        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;

        row.order_no[order_no_len < sizeof(row.order_no) ? order_no_len : 0] = '\0';
        row.ext_len = ext_len < sizeof(row.ext) ? ext_len : sizeof(row.ext) - 1;
        row.ext[row.ext_len] = '\0';
        if (nul[5])
            row.product_id = 0;
        if (amount_len >= sizeof(amount) ||
            ow_amount_parse(amount, amount_len, &row.cents, &why) != OW_OK)
            row.cents = -1;
        index_add(sc, bt->nslots, bt->n_orders, &row);
    }
    /* Freeing the result clears the statement's error: read it first. */
    e = frc != MYSQL_NO_DATA ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    if (frc != MYSQL_NO_DATA)
        return ow_store_fail(bt->s, e, "lock orders", err);
    return OW_OK;
}

/* The cached statement whose IN list holds rows (user_id, x) pairs, padded
 * to the next power of two, with room for its parameters. The caller binds
 * padded pairs, repeating the last one, which fills the list without
 * changing what it matches. */
static int padded_in_list(ow_store *s, const ow_sql_shape *shape, size_t rows, MYSQL_STMT **st,
                          size_t *padded, ow_error *err)
{
    unsigned bucket = bucket_for(rows);

    *padded = (size_t)1 << bucket;
    return ow_store_stmt(s, shape, bucket, st, err);
}

/* Runs one padded chunk of the locking read over tuples [from, from+rows). */
static int lock_chunk(batch *bt, const ow_order_item **its, const long long *users, size_t rows,
                      ow_error *err)
{
    size_t padded = 0;
    MYSQL_STMT *st = NULL;
    ow_params *p = &bt->s->params;
    int rc = padded_in_list(bt->s, &lock_orders_sql, rows, &st, &padded, err);

    if (rc != OW_OK)
        return rc;
    for (size_t i = 0; i < padded; i++) {
        size_t k = i < rows ? i : rows - 1;

        ow_param_int(p, users[k]);
        ow_param_bytes(p, its[k]->external_order_no, its[k]->ext_len);
    }
    rc = ow_store_execute(bt->s, st, p, "lock orders", err);
    if (rc == OW_OK)
        rc = fetch_existing(bt, st, err);
    return rc;
}

static int lock_orders(batch *bt, ow_error *err)
{
    const ow_order_item *its[OW_STMT_MAX_ROWS];
    long long users[OW_STMT_MAX_ROWS];
    size_t k = 0;
    int rc = OW_OK;

    if (index_reset(&bt->s->scratch, bt->n_orders) != OW_OK)
        return ow_store_oom(err);
    bt->nslots = index_slots(bt->n_orders);
    for (size_t i = bt->first; rc == OW_OK && i < bt->first + bt->count; i++) {
        const ow_request *req = bt->items[i].req;

        for (size_t j = 0; rc == OW_OK && j < req->n_orders; j++) {
            its[k] = &req->orders[j];
            users[k] = req->user_id;
            if (++k == OW_STMT_MAX_ROWS) {
                rc = lock_chunk(bt, its, users, k, err);
                k = 0;
            }
        }
    }
    if (rc == OW_OK && k > 0)
        rc = lock_chunk(bt, its, users, k, err);
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

static void response_ctx(const ow_store_item *it, ow_response_ctx *ctx)
{
    ctx->user_id = it->req->user_id;
    ctx->key = it->key;
    ctx->key_len = it->key_len;
    ctx->digest_hex = it->digest_hex;
}

static int plan_item(batch *bt, size_t i, ow_error *err)
{
    ow_scratch *sc = &bt->s->scratch;
    ow_store_item *it = &bt->items[i];
    const ow_request *req = it->req;
    ow_order_ref *refs = &sc->refs[sc->ref_start[i]];
    size_t n_conflicts = 0;
    ow_response_ctx ctx;
    int rc;

    if (grow((void **)&sc->conflicts, &sc->conflicts_cap, req->n_orders, sizeof(*sc->conflicts)) !=
        OW_OK)
        return ow_store_oom(err);
    for (size_t j = 0; j < req->n_orders; j++) {
        const ow_order_item *o = &req->orders[j];
        const ow_existing *e =
            index_find(sc, bt->nslots, req->user_id, o->external_order_no, o->ext_len);

        if (e == NULL) {
            refs[j].order_id = ow_idgen_next(bt->s->ids);
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
    response_ctx(it, &ctx);
    ow_buf_reset(&it->body);
    it->request_id = ow_idgen_next(bt->s->ids);
    it->ours = 0;
    it->replayed = 0;
    if (n_conflicts > 0) {
        it->decision = OW_DECISION_CONFLICT;
        it->code = OW_CODE_ORDER_ALREADY_EXISTS;
        rc = ow_response_order_conflict(&ctx, req, sc->conflicts, n_conflicts, &it->body);
    } else {
        it->decision = OW_DECISION_CREATED;
        it->code = OW_CODE_CREATED;
        rc = ow_response_created(&ctx, req, refs, &it->body);
    }
    return rc == OW_OK ? OW_OK : ow_store_oom(err);
}

static int plan(batch *bt, ow_error *err)
{
    for (size_t i = bt->first; i < bt->first + bt->count; i++) {
        int rc = plan_item(bt, i, err);

        if (rc != OW_OK)
            return rc;
    }
    return OW_OK;
}

/* --- Step 3: insert the request rows ------------------------------------- */

static int insert_requests_chunk(batch *bt, size_t from, unsigned bucket, ow_error *err)
{
    size_t rows = (size_t)1 << bucket;
    ow_params *p = &bt->s->params;
    MYSQL_STMT *st = NULL;
    int rc = ow_store_stmt(bt->s, &insert_requests_sql, bucket, &st, err);

    if (rc != OW_OK)
        return rc;
    for (size_t i = from; i < from + rows; i++) {
        const ow_store_item *it = &bt->items[i];
        const char *status = it->decision == OW_DECISION_CREATED ? "SUCCEEDED" : "FAILED";

        ow_param_int(p, it->request_id);
        ow_param_int(p, it->req->user_id);
        ow_param_bytes(p, it->key, it->key_len);
        ow_param_bytes(p, it->digest, OW_DIGEST_LEN);
        ow_param_bytes(p, status, strlen(status));
        ow_param_int(p, ow_result_code_status(it->code));
        ow_param_bytes(p, it->body.data, it->body.len);
    }
    rc = ow_store_execute(bt->s, st, p, "insert requests", err);
    if (rc == OW_OK)
        bt->inserted += (size_t)mysql_stmt_affected_rows(st);
    return rc;
}

static int insert_requests(batch *bt, ow_error *err)
{
    size_t done = 0;

    bt->inserted = 0;
    while (done < bt->count) {
        unsigned bucket = bucket_floor(bt->count - done);
        int rc = insert_requests_chunk(bt, bt->first + done, bucket, err);

        if (rc != OW_OK)
            return rc;
        done += (size_t)1 << bucket;
    }
    return OW_OK;
}

/* --- Step 4: read back who owns each key --------------------------------- */

/* Step 4: a row with the item's id is ours; another id recorded the key
 * first. */
static int existing_row(ow_request_row *row, ow_store_item *it, ow_error *err)
{
    int rc;

    if (row->id == it->request_id) {
        it->ours = 1;
        return OW_OK;
    }
    rc = ow_request_row_body(row, err);
    return rc == OW_OK ? ow_store_answer_recorded(row->s, it, row->digest, row->status, err) : rc;
}

static int select_requests_chunk(batch *bt, size_t from, size_t rows, ow_error *err)
{
    size_t padded = 0;
    ow_params *p = &bt->s->params;
    MYSQL_STMT *st = NULL;
    int rc = padded_in_list(bt->s, &select_requests_sql, rows, &st, &padded, err);

    if (rc != OW_OK)
        return rc;
    for (size_t i = 0; i < padded; i++) {
        const ow_store_item *it = &bt->items[from + (i < rows ? i : rows - 1)];

        ow_param_bytes(p, it->key_hash, OW_KEY_HASH_LEN);
    }
    rc = ow_store_execute(bt->s, st, p, "read requests", err);
    if (rc == OW_OK)
        rc = ow_store_match_rows(bt->s, st, 1, bt->items + bt->first, bt->count, existing_row,
                                 "read requests", err);
    return rc;
}

static int select_requests(batch *bt, ow_error *err)
{
    size_t ours = 0;

    /* Every row inserted: all are ours, nothing to read back (issue 12:
     * the read-back sent each just-inserted body back to us). */
    if (bt->inserted == bt->count) {
        for (size_t i = bt->first; i < bt->first + bt->count; i++)
            bt->items[i].ours = 1;
        return OW_OK;
    }

    for (size_t done = 0; done < bt->count; done += OW_STMT_MAX_ROWS) {
        size_t rows = bt->count - done < OW_STMT_MAX_ROWS ? bt->count - done : OW_STMT_MAX_ROWS;
        int rc = select_requests_chunk(bt, bt->first + done, rows, err);

        if (rc != OW_OK)
            return rc;
    }
    for (size_t i = bt->first; i < bt->first + bt->count; i++) {
        const ow_store_item *it = &bt->items[i];

        ours += it->ours;
        /* Neither our row nor another: INSERT IGNORE skipped ours because its
         * id collided with another row's primary key. */
        if (it->ours == 0 && it->decision != OW_DECISION_REPLAY &&
            it->decision != OW_DECISION_KEY_REUSED) {
            bt->s->stats.id_collisions++;
            return FALLBACK;
        }
    }
    /* A row that carries our id is ours only if the server inserted it: a
     * process that drew the same id for the same key in the same
     * millisecond (same node number) wrote a row that looks like ours, and
     * only the count of inserted rows tells them apart. */
    if (ours != bt->inserted) {
        bt->s->stats.id_collisions++;
        return FALLBACK;
    }
    return OW_OK;
}

/* --- Step 5: insert the new orders --------------------------------------- */

typedef struct {
    const ow_store_item *it;
    size_t order;
} order_slot;

static int insert_orders_chunk(batch *bt, const order_slot *slots, unsigned bucket, ow_error *err)
{
    size_t rows = (size_t)1 << bucket;
    ow_scratch *sc = &bt->s->scratch;
    ow_params *p = &bt->s->params;
    MYSQL_STMT *st = NULL;
    int rc = ow_store_stmt(bt->s, &insert_orders_sql, bucket, &st, err);

    if (rc != OW_OK)
        return rc;
    for (size_t r = 0; r < rows; r++) {
        const ow_store_item *it = slots[r].it;
        const ow_order_item *o = &it->req->orders[slots[r].order];
        const ow_order_ref *ref = &sc->refs[sc->ref_start[it - bt->items] + slots[r].order];

        ow_param_int(p, ref->order_id);
        ow_param_bytes(p, ref->order_no, strlen(ref->order_no));
        ow_param_int(p, it->req->user_id);
        ow_param_bytes(p, o->external_order_no, o->ext_len);
        ow_param_amount(p, o->amount_cents);
        if (o->product_id > 0)
            ow_param_int(p, o->product_id);
        else
            ow_param_null(p);
        ow_param_int(p, o->quantity);
        ow_param_int(p, it->request_id);
    }
    return ow_store_execute(bt->s, st, p, "insert orders", err);
}

static int insert_orders(batch *bt, ow_error *err)
{
    ow_scratch *sc = &bt->s->scratch;
    order_slot slots[OW_STMT_MAX_ROWS];
    size_t k = 0;
    int rc = OW_OK;

    for (size_t i = bt->first; rc == OW_OK && i < bt->first + bt->count; i++) {
        const ow_store_item *it = &bt->items[i];

        if (!it->ours || it->decision != OW_DECISION_CREATED)
            continue;
        for (size_t j = 0; rc == OW_OK && j < it->req->n_orders; j++) {
            if (sc->refs[sc->ref_start[i] + j].existing)
                continue;
            slots[k].it = it;
            slots[k].order = j;
            k++;
            if (k == OW_STMT_MAX_ROWS) {
                rc = insert_orders_chunk(bt, slots, bucket_floor(k), err);
                k = 0;
            }
        }
    }
    /* The rest, as a sum of powers of two (one cached statement each). */
    for (size_t done = 0; rc == OW_OK && done < k;) {
        unsigned bucket = bucket_floor(k - done);

        rc = insert_orders_chunk(bt, slots + done, bucket, err);
        done += (size_t)1 << bucket;
    }
    return rc;
}

/* --- The two paths ------------------------------------------------------- */

/* Maps the database's race reports (1062 on an order insert, 1205 lock wait
 * timeout) to FALLBACK and leaves other errors as they are. */
static int race_or_error(int rc, const ow_error *err)
{
    if (rc == OW_OK || rc == FALLBACK)
        return rc;
    if (err->code == OW_ER_DUP_ENTRY || err->code == OW_ER_LOCK_WAIT_TIMEOUT)
        return FALLBACK;
    return rc;
}

static int run_steps(batch *bt, ow_error *err)
{
    int rc = lock_orders(bt, err);

    if (rc == OW_OK)
        rc = plan(bt, err);
    if (rc == OW_OK)
        rc = insert_requests(bt, err);
    if (rc == OW_OK)
        rc = select_requests(bt, err);
    if (rc == OW_OK)
        rc = insert_orders(bt, err);
    return race_or_error(rc, err);
}

static int in_progress(ow_store *s, ow_store_item *it, ow_error *err)
{
    ow_response_ctx ctx;

    ow_buf_reset(&it->body);
    it->decision = OW_DECISION_IN_PROGRESS;
    it->code = OW_CODE_REQUEST_IN_PROGRESS;
    it->ours = 0;
    it->replayed = 0;
    response_ctx(it, &ctx);
    if (ow_response_in_progress(&ctx, (int64_t)s->lock_wait_timeout_s * 1000, &it->body) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

static void new_node(ow_store *s)
{
    ow_idgen_set_node(s->ids, (unsigned)(ow_rand64(&s->rng) >> 20));
}

/* One item under a savepoint (or alone in its transaction when single). */
static int run_one(ow_store *s, ow_store_item *items, size_t i, int single, ow_error *err)
{
    batch bt = {s, items, i, 1, items[i].req->n_orders, 0};

    for (unsigned attempt = 0; attempt < ITEM_ATTEMPTS; attempt++) {
        int rc = OW_OK;

        if (!single)
            rc = ow_store_exec_static(s, "SAVEPOINT ow_item", err);
        if (rc == OW_OK)
            rc = run_steps(&bt, err);
        if (rc != FALLBACK)
            return rc;
        /* Undo this item's statements; earlier items of the batch stay. */
        if (single)
            ow_store_rollback(s);
        else if (ow_store_exec_static(s, "ROLLBACK TO SAVEPOINT ow_item", err) != OW_OK)
            return OW_ERETRY;
        if (err->code == OW_ER_LOCK_WAIT_TIMEOUT)
            return in_progress(s, &items[i], err);
        if (err->code == OW_ER_DUP_ENTRY)
            s->stats.order_races++;
        /* A concurrent creator has committed (the next locking read sees its
         * order), or our id collided (a new node number avoids it). */
        new_node(s);
        ow_error_clear(err);
    }
    return ow_error_set(err, OW_ERRCLASS_RETRIABLE, OW_ER_DUP_ENTRY,
                        "item kept racing with concurrent writers after %d attempts",
                        ITEM_ATTEMPTS);
}

static int run_one_at_a_time(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    int single = n == 1;

    for (size_t i = 0; i < n; i++) {
        int rc = run_one(s, items, i, single, err);

        if (rc != OW_OK) {
            ow_store_rollback(s);
            return rc;
        }
    }
    return ow_store_commit(s, err);
}

static int prepare_scratch(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    ow_scratch *sc = &s->scratch;
    size_t total = 0;

    if (grow((void **)&sc->ref_start, &sc->ref_start_cap, n, sizeof(*sc->ref_start)) != OW_OK)
        return ow_store_oom(err);
    for (size_t i = 0; i < n; i++) {
        sc->ref_start[i] = total;
        total += items[i].req->n_orders;
        items[i].decision = OW_DECISION_NONE;
    }
    if (grow((void **)&sc->refs, &sc->refs_cap, total, sizeof(*sc->refs)) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

static void clear_decisions(ow_store_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        items[i].decision = OW_DECISION_NONE;
        items[i].replayed = 0;
        items[i].ours = 0;
        ow_buf_reset(&items[i].body);
    }
}

/* After a deadlock or a lock wait the next call goes one item at a time. */
static int remember_race(ow_store *s, int rc, const ow_error *err)
{
    if (rc != OW_OK && err->code == OW_ER_LOCK_DEADLOCK)
        s->stats.deadlocks++;
    s->next_one_at_a_time =
        rc != OW_OK && (err->code == OW_ER_LOCK_DEADLOCK || err->code == OW_ER_LOCK_WAIT_TIMEOUT);
    return rc;
}

static int decide_batch(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                        ow_error *err)
{
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK)
        rc = prepare_scratch(s, items, n, err);
    if (rc != OW_OK)
        return rc;
    s->stats.transactions++;
    if (!one_at_a_time && n > 1) {
        size_t total = s->scratch.ref_start[n - 1] + items[n - 1].req->n_orders;
        batch bt = {s, items, 0, n, total, 0};

        rc = run_steps(&bt, err);
        if (rc == OW_OK)
            rc = ow_store_commit(s, err);
        if (rc != FALLBACK) {
            if (rc != OW_OK) {
                ow_store_rollback(s);
                clear_decisions(items, n);
            }
            return rc;
        }
        ow_store_rollback(s);
        s->stats.batch_fallbacks++;
        ow_error_clear(err);
    }
    rc = run_one_at_a_time(s, items, n, err);
    if (rc != OW_OK)
        clear_decisions(items, n);
    return rc;
}

int ow_store_decide(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time, ow_error *err)
{
    ow_error_clear(err);
    if (n == 0)
        return OW_OK;
    one_at_a_time |= s->next_one_at_a_time;
    /* Recorded keys first, without a lock (issue 12); the rest decide_batch. */
    return remember_race(s, ow_store_decide_known(s, items, n, one_at_a_time, decide_batch, err),
                         err);
}

int ow_store_item_init(ow_store_item *it, const ow_request *req, const char *key, size_t key_len)
{
    memset(it, 0, sizeof(*it));
    it->req = req;
    it->key = key;
    it->key_len = key_len;
    ow_buf_init(&it->body);
    return ow_key_hash(req->user_id, key, key_len, it->key_hash);
}

void ow_store_item_cleanup(ow_store_item *it)
{
    ow_buf_cleanup(&it->body);
}
