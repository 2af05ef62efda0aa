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
    if (ow_grow((void **)&sc->refs, &sc->refs_cap, total, sizeof(*sc->refs)) != OW_OK ||
        ow_grow((void **)&sc->slots, &sc->slots_cap, total, sizeof(*sc->slots)) != OW_OK ||
        ow_grow((void **)&sc->ids, &sc->ids_cap, total, sizeof(*sc->ids)) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

static ow_order_ref *slot_ref(const ow_decide_part *p, const ow_order_slot *o)
{
    return &p->s->scratch.refs[p->s->scratch.ref_start[o->item] + o->order];
}

static const ow_order_item *slot_order(const ow_decide_part *p, const ow_order_slot *o)
{
    return &p->items[o->item].req->orders[o->order];
}

static uint64_t id_hash(int64_t id)
{
    return (uint64_t)id * 0x9e3779b97f4a7c15ULL;
}

/* The part's slot that holds order id, or NULL. */
static ow_order_slot *slot_of_id(const ow_decide_part *p, int64_t id)
{
    const ow_scratch *sc = &p->s->scratch;
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t i;

    while (ow_htab_next(&sc->by_id, id_hash(id), &w, &i))
        if (slot_ref(p, &sc->slots[i])->order_id == id)
            return &sc->slots[i];
    return NULL;
}

/* --- Step 1: every order new ------------------------------------------------ */

int ow_orders_draw(ow_decide_part *p, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;

    sc->n_slots = 0;
    ow_htab_clear(&sc->by_id);
    for (size_t i = p->first; i < p->first + p->count; i++) {
        ow_store_item *it = &p->items[i];
        ow_order_ref *refs = &sc->refs[sc->ref_start[i]];

        for (size_t j = 0; j < it->req->n_orders; j++) {
            refs[j].order_id = ow_idgen_next(p->s->ids);
            ow_order_no_format(refs[j].order_id, refs[j].order_no);
            refs[j].existing = 0;
            sc->slots[sc->n_slots] = (ow_order_slot){i, j, 0};
            if (ow_htab_put(&sc->by_id, id_hash(refs[j].order_id), sc->n_slots) != OW_OK)
                return ow_store_oom(err);
            sc->n_slots++;
        }
        it->request_id = ow_idgen_next(p->s->ids);
        it->decision = OW_DECISION_NONE;
        it->ours = 0;
        it->replayed = 0;
        ow_buf_reset(&it->body);
    }
    return OW_OK;
}

/* --- Step 2: insert them, and learn which went in -------------------------- */

/* Cached per row bucket by the connection (ow_store_stmt). The RETURNING
 * form (MariaDB) names the rows that went in; an order that already exists
 * (or that a concurrent transaction created while this one waited on its
 * unique key) is skipped, and so is a row whose id another process drew. */
static const ow_sql_shape insert_orders_returning_sql = {
    OW_SLOT_DECIDE + 3,
    "INSERT IGNORE INTO orders (id, order_no, user_id, external_order_no, amount, product_id, "
    "quantity, request_id) VALUES ",
    "(?,?,?,?,?,?,?,?)", " RETURNING id"};

static const ow_sql_shape insert_orders_sql = {
    OW_SLOT_DECIDE + 4,
    "INSERT IGNORE INTO orders (id, order_no, user_id, external_order_no, amount, product_id, "
    "quantity, request_id) VALUES ",
    "(?,?,?,?,?,?,?,?)", ""};

static void bind_order(void *ctx, size_t r, ow_params *params)
{
    const ow_decide_part *p = ctx;
    const ow_order_slot *o = &p->s->scratch.slots[r];
    const ow_order_ref *ref = slot_ref(p, o);
    const ow_order_item *it = slot_order(p, o);
    const ow_store_item *item = &p->items[o->item];

    ow_param_int(params, ref->order_id);
    ow_param_bytes(params, ref->order_no, strlen(ref->order_no));
    ow_param_int(params, item->req->user_id);
    ow_param_bytes(params, it->external_order_no, it->ext_len);
    ow_param_amount(params, it->amount_cents);
    if (it->product_id > 0)
        ow_param_int(params, it->product_id);
    else
        ow_param_null(params);
    ow_param_int(params, it->quantity);
    ow_param_int(params, item->request_id);
}

/* An order's row in its statement: the fixed columns, its texts, and for
 * each of its 8 parameters a length prefix and a type. */
#define ORDER_ROW_FIXED (5 * 8 + OW_ORDER_NO_MAX + OW_AMOUNT_TEXT_MAX + 8 * 11)

static size_t order_bytes(const void *ctx, size_t r)
{
    const ow_decide_part *p = ctx;

    return ORDER_ROW_FIXED + slot_order(p, &p->s->scratch.slots[r])->ext_len;
}

/* An INSERT ... RETURNING whose error (a deadlock, a lock wait) came after
 * its result set began: the error is kept, then the statement is reset.
 * Connector/C leaves such a statement waiting for rows that will never
 * come, and its next execution would read the network until the read
 * timeout; the reset returns it to the prepared state (one round trip). */
static int returned_failed(ow_store *s, MYSQL_STMT *st, ow_error *err)
{
    int rc = ow_store_fail_stmt(s, st, "insert orders", err);

    mysql_stmt_reset(st);
    return rc;
}

/* The ids RETURNING gave back: those orders went in. */
static int mark_returned(void *ctx, MYSQL_STMT *st, ow_error *err)
{
    ow_decide_part *p = ctx;
    MYSQL_BIND res;
    ow_mybool nul = 0;
    long long id = 0;
    int frc;

    ow_result_int(&res, &id, &nul);
    if (mysql_stmt_bind_result(st, &res) != 0 || mysql_stmt_store_result(st) != 0)
        return returned_failed(p->s, st, err);
    for (;;) {
        ow_order_slot *o;

        frc = mysql_stmt_fetch(st);
        if (frc != 0)
            break;
        o = slot_of_id(p, id);
        if (o != NULL && !nul)
            o->inserted = 1;
    }
    if (frc != MYSQL_NO_DATA)
        return returned_failed(p->s, st, err);
    mysql_stmt_free_result(st);
    return OW_OK;
}

/* Without RETURNING: the part's order ids that hold the order this
 * transaction gave them went in (a row with one of our ids and another
 * order is another process's, whose id collided with ours). */
static const ow_sql_shape inserted_orders_sql = {
    OW_SLOT_DECIDE + 5, "SELECT id, user_id, external_order_no FROM orders WHERE id IN (", "?",
    ")"};

static int mark_read_back(ow_decide_part *p, MYSQL_STMT *st, ow_error *err)
{
    MYSQL_BIND res[3];
    ow_mybool nul[3];
    long long id = 0, user_id = 0;
    char ext[OW_EXT_NO_MAX + 1];
    unsigned long ext_len = 0;
    unsigned e;
    int frc;

    ow_result_int(&res[0], &id, &nul[0]);
    ow_result_int(&res[1], &user_id, &nul[1]);
    ow_result_bytes(&res[2], ext, sizeof(ext), &ext_len, &nul[2]);
    if (mysql_stmt_bind_result(st, res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(p->s, st, "read orders back", err);
    for (;;) {
        ow_order_slot *o;
        const ow_order_item *it;

        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        o = slot_of_id(p, id);
        it = o != NULL ? slot_order(p, o) : NULL;
        if (it != NULL && p->items[o->item].req->user_id == user_id && it->ext_len == ext_len &&
            memcmp(it->external_order_no, ext, ext_len) == 0)
            o->inserted = 1;
    }
    e = frc != MYSQL_NO_DATA ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    return frc == MYSQL_NO_DATA ? OW_OK : ow_store_fail(p->s, e, "read orders back", err);
}

/* Runs shape over ids[0..n), chunk by chunk (padding repeats the last id,
 * which changes nothing the list matches), and hands each execution's
 * result to each when there is one to read. */
static int by_ids(ow_decide_part *p, const ow_sql_shape *shape, const char *what,
                  const int64_t *ids, size_t n,
                  int (*each)(ow_decide_part *, MYSQL_STMT *, ow_error *), ow_error *err)
{
    int rc = OW_OK;

    for (size_t done = 0; rc == OW_OK && done < n; done += OW_STMT_MAX_ROWS) {
        size_t rows = n - done < OW_STMT_MAX_ROWS ? n - done : OW_STMT_MAX_ROWS;
        size_t padded = 0;
        MYSQL_STMT *st = NULL;

        rc = ow_store_stmt_padded(p->s, shape, rows, &st, &padded, err);
        for (size_t i = 0; rc == OW_OK && i < padded; i++)
            ow_param_int(&p->s->params, ids[done + (i < rows ? i : rows - 1)]);
        if (rc == OW_OK)
            rc = ow_store_execute(p->s, st, &p->s->params, what, err);
        if (rc == OW_OK && each != NULL)
            rc = each(p, st, err);
    }
    return rc;
}

/* Reads ids[0..n) by primary key. */
static int read_back_ids(ow_decide_part *p, const int64_t *ids, size_t n, ow_error *err)
{
    return by_ids(p, &inserted_orders_sql, "read orders back", ids, n, mark_read_back, err);
}

int ow_orders_insert(ow_decide_part *p, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    ow_rows rows = {p->s->returning ? &insert_orders_returning_sql : &insert_orders_sql,
                    sc->n_slots,
                    8,
                    p,
                    bind_order,
                    order_bytes,
                    p->s->returning ? mark_returned : NULL,
                    "insert orders"};
    size_t affected = 0, marked = 0;
    int rc;

    if (sc->n_slots == 0)
        return OW_OK;
    rc = ow_store_send_rows(p->s, &rows, &affected, err);
    if (rc != OW_OK || p->s->returning)
        return rc;
    if (affected == sc->n_slots) {
        for (size_t i = 0; i < sc->n_slots; i++)
            sc->slots[i].inserted = 1;
        return OW_OK;
    }
    for (size_t i = 0; i < sc->n_slots; i++)
        sc->ids[i] = slot_ref(p, &sc->slots[i])->order_id;
    rc = read_back_ids(p, sc->ids, sc->n_slots, err);
    if (rc != OW_OK)
        return rc;
    /* A row with our id and our order is ours only if the insert put it
     * there: a process that drew the same id for the same order in the
     * same millisecond (same node number) wrote one that looks the same,
     * and only the count of rows inserted tells them apart. Taken for ours,
     * its order would be listed as new, and taken back with a conflict. */
    for (size_t i = 0; i < sc->n_slots; i++)
        marked += sc->slots[i].inserted;
    if (marked != affected) {
        p->s->stats.id_collisions++;
        return OW_STORE_FALLBACK;
    }
    return OW_OK;
}

/* --- Step 3: the orders that exist, and each item's decision -------------- */

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

/* The columns of existing_sql, bound to one row. */
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
        return ow_store_fail_stmt(p->s, st, "read orders", err);
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
        return ow_store_fail(p->s, e, "read orders", err);
    return OW_OK;
}

/* The orders that exist, by their unique key, without locking: an order is
 * never changed in what an item compares (amount, product_id, quantity)
 * and never deleted once committed, so a committed row read at any moment
 * is the row at commit. Cached per row bucket by the connection. */
static const ow_sql_shape existing_sql = {
    OW_SLOT_DECIDE + 0,
    "SELECT id, order_no, user_id, external_order_no, amount, product_id, quantity FROM orders "
    "WHERE (user_id, external_order_no) IN (",
    "(?,?)", ")"};

/* Reads the existing rows of slots[0..rows) (the orders whose insert was
 * skipped); padding repeats the last pair, which changes nothing it
 * matches. */
static int read_chunk(ow_decide_part *p, const ow_order_slot *const *slots, size_t rows,
                      ow_error *err)
{
    size_t padded = 0;
    MYSQL_STMT *st = NULL;
    ow_params *params = &p->s->params;
    int rc = ow_store_stmt_padded(p->s, &existing_sql, rows, &st, &padded, err);

    if (rc != OW_OK)
        return rc;
    for (size_t i = 0; i < padded; i++) {
        const ow_order_slot *o = slots[i < rows ? i : rows - 1];
        const ow_order_item *it = slot_order(p, o);

        ow_param_int(params, p->items[o->item].req->user_id);
        ow_param_bytes(params, it->external_order_no, it->ext_len);
    }
    rc = ow_store_execute(p->s, st, params, "read orders", err);
    return rc == OW_OK ? fetch_existing(p, st, err) : rc;
}

static int read_skipped(ow_decide_part *p, ow_error *err)
{
    const ow_order_slot *chunk[OW_STMT_MAX_ROWS];
    ow_scratch *sc = &p->s->scratch;
    size_t k = 0;
    int rc = OW_OK;

    ow_htab_clear(&sc->existing);
    sc->n_rows = 0;
    for (size_t i = 0; rc == OW_OK && i < sc->n_slots; i++) {
        if (sc->slots[i].inserted)
            continue;
        chunk[k++] = &sc->slots[i];
        if (k == OW_STMT_MAX_ROWS) {
            rc = read_chunk(p, chunk, k, err);
            k = 0;
        }
    }
    return rc == OW_OK && k > 0 ? read_chunk(p, chunk, k, err) : rc;
}

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

/* An order whose insert was skipped: the existing order becomes the
 * item's (same fields) or a conflict (listed in the scratch). FALLBACK
 * when there is no such order (our id was another process's) or when it is
 * this transaction's own for another item, which that item may still give
 * up. */
static int settle_order(ow_decide_part *p, const ow_order_slot *o, size_t *n_conflicts)
{
    ow_scratch *sc = &p->s->scratch;
    const ow_request *req = p->items[o->item].req;
    const ow_order_item *it = slot_order(p, o);
    const ow_existing *e = existing_find(sc, req->user_id, it->external_order_no, it->ext_len);
    const ow_order_slot *own = e != NULL ? slot_of_id(p, e->id) : NULL;
    ow_order_ref *ref = slot_ref(p, o);

    if (e == NULL)
        p->s->stats.id_collisions++;
    if (e == NULL || (own != NULL && own->inserted))
        return OW_STORE_FALLBACK;
    if (diff_fields(e, it) != 0) {
        sc->conflicts[*n_conflicts].index = o->order;
        sc->conflicts[*n_conflicts].fields = diff_fields(e, it);
        ++*n_conflicts;
    } else {
        ref->order_id = e->id;
        memcpy(ref->order_no, e->order_no, sizeof(ref->order_no));
        ref->existing = 1;
    }
    return OW_OK;
}

/* Builds item i's body: CREATED with its orders (new and existing), or
 * ORDER_ALREADY_EXISTS naming the conflicts. A record no statement can
 * carry is not written: the request is refused, whatever its orders are. */
static int decide_item(ow_decide_part *p, size_t i, size_t n_conflicts, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    ow_store_item *it = &p->items[i];
    ow_response_ctx ctx;
    int rc;

    ow_store_item_ctx(it, &ctx);
    ow_buf_reset(&it->body);
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
    if (ow_server_record_bytes(it->key_len, it->body.len) > ow_store_packet_limit(p->s)) {
        it->decision = OW_DECISION_TOO_LARGE;
        it->code = OW_CODE_INVALID_REQUEST;
        ow_buf_reset(&it->body);
    }
    return OW_OK;
}

int ow_orders_settle(ow_decide_part *p, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    size_t skipped = 0, o = 0;
    int rc = OW_OK;

    for (size_t i = 0; i < sc->n_slots; i++)
        skipped += !sc->slots[i].inserted;
    if (skipped > 0)
        rc = read_skipped(p, err);
    /* Slots run item by item, in the items' order. */
    for (size_t i = p->first; rc == OW_OK && i < p->first + p->count; i++) {
        size_t n_conflicts = 0;

        if (ow_grow((void **)&sc->conflicts, &sc->conflicts_cap, p->items[i].req->n_orders,
                    sizeof(*sc->conflicts)) != OW_OK)
            return ow_store_oom(err);
        for (; rc == OW_OK && o < sc->n_slots && sc->slots[o].item == i; o++)
            if (!sc->slots[o].inserted)
                rc = settle_order(p, &sc->slots[o], &n_conflicts);
        if (rc == OW_OK)
            rc = decide_item(p, i, n_conflicts, err);
    }
    return rc;
}

/* --- Step 6: take back the orders of items that keep none ----------------- */

static const ow_sql_shape delete_orders_sql = {OW_SLOT_DECIDE + 6,
                                               "DELETE FROM orders WHERE id IN (", "?", ")"};

static int delete_ids(ow_decide_part *p, const int64_t *ids, size_t n, ow_error *err)
{
    return by_ids(p, &delete_orders_sql, "take back orders", ids, n, NULL, err);
}

int ow_orders_undo(ow_decide_part *p, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    size_t n = 0;

    for (size_t i = 0; i < sc->n_slots; i++) {
        const ow_store_item *it = &p->items[sc->slots[i].item];

        if (sc->slots[i].inserted && !(it->ours && it->decision == OW_DECISION_CREATED))
            sc->ids[n++] = slot_ref(p, &sc->slots[i])->order_id;
    }
    return n > 0 ? delete_ids(p, sc->ids, n, err) : OW_OK;
}
