/*
 * The transaction that decides a micro-batch of requests
 * (docs/transactions.md).
 *
 *   0. one non-locking read by key hash answers the items whose key is
 *      already recorded: rows are written once, final, so a committed row
 *      is the database's decision (its stored body with the same digest,
 *      IDEMPOTENCY_KEY_REUSED with another). A batch of such items writes
 *      nothing and ends with a read-only COMMIT.
 *   The other items are decided set-based, for all of them at once:
 *   1. draw each item's request id and a new id for each of its orders, as
 *      if every order were new (store_orders.c);
 *   2. INSERT IGNORE every order: the unique key skips an order that
 *      exists, or that a concurrent transaction created while this one
 *      waited on it, and RETURNING (or a read by id) says which went in;
 *   3. read the skipped orders without locking and decide each item: an
 *      identical order is the item's, a differing one a conflict; build
 *      its body;
 *   4. INSERT IGNORE every request row, final status and body included;
 *   5. when fewer rows were inserted than given, read the rows back by key
 *      hash: a row with the item's id is ours (as many as step 4 inserted:
 *      ids from two processes can collide); another id means the key was
 *      recorded first (by an earlier request, or by a concurrent
 *      transaction that committed while we waited on the unique key), so
 *      the item replays the stored body or reports IDEMPOTENCY_KEY_REUSED;
 *   6. delete the orders step 2 inserted for items that write none (a
 *      conflict, a record too large, a key recorded first);
 *   7. COMMIT.
 * A race the database reports in the middle (a lock wait timeout, 1205;
 * an id collision) rolls the part back and redoes it one item at a time,
 * each under its own SAVEPOINT, where each outcome belongs to one item. A
 * deadlock (1213) rolls back the transaction in the server; the caller
 * backs off and calls again, and that call decides the items in two
 * groups, each set-based under a savepoint (four after a second deadlock
 * in a row, and so on down to one item at a time). The store remembers
 * why it failed: no caller branches on MySQL's numbers.
 */
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "store_orders.h"
#include "store_test.h"

#define FALLBACK OW_STORE_FALLBACK
#define RESTART OW_STORE_RESTART
#define ITEM_ATTEMPTS 5 /* tries of one item before giving up the batch */
#define SPLIT_ONE 16    /* next_split that means one item at a time */

/* --- Answers from a recorded request ------------------------------------- */

static void clear_decisions(ow_store_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        items[i].decision = OW_DECISION_NONE;
        items[i].replayed = 0;
        items[i].ours = 0;
        ow_buf_reset(&items[i].body);
    }
}

/* IDEMPOTENCY_KEY_REUSED, built from the item's own fields; stored_digest8
 * names the recorded request for the security log. */
static int answer_key_reused(ow_store_item *it, const char *stored_digest8, ow_error *err)
{
    ow_response_ctx ctx;

    ow_store_item_ctx(it, &ctx);
    clear_decisions(it, 1);
    it->decision = OW_DECISION_KEY_REUSED;
    it->code = OW_CODE_IDEMPOTENCY_KEY_REUSED;
    memcpy(it->stored_digest8, stored_digest8, sizeof(it->stored_digest8));
    return ow_response_key_reused(&ctx, &it->body) == OW_OK ? OW_OK : ow_store_oom(err);
}

/* A committed row holds the item's key: a replay of its stored body
 * (body) when the digests match, else IDEMPOTENCY_KEY_REUSED. */
static int answer_recorded(ow_store_item *it, const unsigned char *digest, long long status,
                           const ow_buf *body, ow_error *err)
{
    char digest8[9];

    if (memcmp(digest, it->digest, OW_DIGEST_LEN) != 0) {
        ow_hex(digest, 4, digest8);
        return answer_key_reused(it, digest8, err);
    }
    clear_decisions(it, 1);
    it->decision = OW_DECISION_REPLAY;
    it->code = status == 201 ? OW_CODE_CREATED : OW_CODE_ORDER_ALREADY_EXISTS;
    it->replayed = 1;
    return ow_buf_append(&it->body, body->data, body->len) == OW_OK ? OW_OK : ow_store_oom(err);
}

/* --- Rows read by key hash (steps 0 and 5) -------------------------------- */

/* The reads by key hash, cached per row bucket by the connection
 * (ow_store_stmt). Step 0 reads without locking and takes no id; step 5
 * reads back the rows the inserts met. */
static const ow_sql_shape known_sql = {
    OW_SLOT_KNOWN + 0,
    "SELECT 0, user_id, idempotency_key, request_digest, response_status, response_body, key_hash "
    "FROM idempotency_requests WHERE key_hash IN (",
    "?", ")"};

static const ow_sql_shape read_back_sql = {
    OW_SLOT_DECIDE + 2,
    "SELECT id, user_id, idempotency_key, request_digest, response_status, response_body, "
    "key_hash FROM idempotency_requests WHERE key_hash IN (",
    "?", ")"};

/* One row of known_sql or read_back_sql: (id, user_id, idempotency_key,
 * request_digest, response_status, response_body, key_hash); the body is
 * fetched on demand. */
typedef struct {
    MYSQL_BIND res[7];
    ow_mybool nul[7];
    long long id; /* 0 for known_sql */
    long long user_id;
    long long status;
    char key[OW_KEY_MAX + 1];
    unsigned long key_len;
    unsigned char digest[OW_DIGEST_LEN];
    unsigned long digest_len;
    unsigned char key_hash[OW_KEY_HASH_LEN];
    unsigned long key_hash_len;
    unsigned long body_len;
    int have_body;
} request_row;

static void bind_row(request_row *r)
{
    memset(r, 0, sizeof(*r));
    ow_result_int(&r->res[0], &r->id, &r->nul[0]);
    ow_result_int(&r->res[1], &r->user_id, &r->nul[1]);
    ow_result_bytes(&r->res[2], r->key, sizeof(r->key), &r->key_len, &r->nul[2]);
    ow_result_bytes(&r->res[3], r->digest, sizeof(r->digest), &r->digest_len, &r->nul[3]);
    ow_result_int(&r->res[4], &r->status, &r->nul[4]);
    ow_result_bytes(&r->res[5], NULL, 0, &r->body_len, &r->nul[5]);
    ow_result_bytes(&r->res[6], r->key_hash, sizeof(r->key_hash), &r->key_hash_len, &r->nul[6]);
}

/* The answer of an item whose key the current row records: ours when the
 * row carries the item's request id (step 5), else the recorded answer. */
static int answer_row(ow_store *s, MYSQL_STMT *st, request_row *r, ow_store_item *it, ow_error *err)
{
    int rc = OW_OK;

    if (r->id != 0 && r->id == it->request_id) {
        it->ours = 1;
        return OW_OK;
    }
    if (!r->have_body) { /* one fetch per row, whatever items share it */
        rc = ow_store_fetch_column(s, st, 5, r->body_len, &s->scratch.blob, "read requests", err);
        r->have_body = 1;
    }
    return rc == OW_OK ? answer_recorded(it, r->digest, r->status, &s->scratch.blob, err) : rc;
}

/* The row holds the item's key hash for another (user_id, key): two keys
 * whose SHA-256 agree in 128 bits (about 1.5e-21 for 10^9 keys;
 * docs/transactions.md), the row possibly another item's of the same
 * batch. The item's key cannot be recorded, so it is answered like a key
 * used for another request, from its own fields, and writes nothing. */
static int answer_collision(ow_store *s, const request_row *r, ow_store_item *it, ow_error *err)
{
    s->stats.key_hash_collisions++;
    OW_LOG(OW_LOG_ERROR, "idempotency_key_hash_collision", OW_F_INT("user_id", it->req->user_id),
           OW_F_KEY("key", it->key, it->key_len), OW_F_INT("stored_user_id", r->user_id),
           OW_F_KEY("stored_key", r->key, r->key_len));
    return answer_key_reused(it, "00000000", err);
}

/* Matches the current row to every item with its key hash (a batch may
 * carry a key twice). */
static int match_row(ow_store *s, MYSQL_STMT *st, request_row *r, ow_store_item *items, size_t n,
                     ow_error *err)
{
    int rc = OW_OK;

    for (size_t i = 0; rc == OW_OK && i < n; i++) {
        ow_store_item *it = &items[i];

        if (memcmp(r->key_hash, it->key_hash, OW_KEY_HASH_LEN) != 0)
            continue;
        if (it->req->user_id == r->user_id && it->key_len == r->key_len &&
            memcmp(it->key, r->key, r->key_len) == 0)
            rc = answer_row(s, st, r, it, err);
        else
            rc = answer_collision(s, r, it, err);
    }
    return rc;
}

/* Reads every row of the executed statement st; rows with a key, digest
 * or hash of the wrong length are skipped. */
static int match_rows(ow_store *s, MYSQL_STMT *st, ow_store_item *items, size_t n, ow_error *err)
{
    request_row r;
    unsigned e;
    int frc = 0;
    int rc = OW_OK;

    bind_row(&r);
    if (mysql_stmt_bind_result(st, r.res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(s, st, "read requests", err);
    while (rc == OW_OK) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        r.have_body = 0;
        if (r.key_len <= OW_KEY_MAX && r.digest_len == OW_DIGEST_LEN &&
            r.key_hash_len == OW_KEY_HASH_LEN)
            rc = match_row(s, st, &r, items, n, err);
    }
    e = rc == OW_OK && frc != MYSQL_NO_DATA ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    if (rc == OW_OK && frc != MYSQL_NO_DATA)
        rc = ow_store_fail(s, e, "read requests", err);
    return rc;
}

/* Reads the rows of items[0..n) by key hash with shape, chunk by chunk,
 * and matches them (padding repeats the last hash, which changes nothing
 * the list matches). */
static int read_by_hash(ow_store *s, const ow_sql_shape *shape, ow_store_item *items, size_t n,
                        ow_error *err)
{
    int rc = OW_OK;

    for (size_t done = 0; rc == OW_OK && done < n; done += OW_STMT_MAX_ROWS) {
        size_t rows = n - done < OW_STMT_MAX_ROWS ? n - done : OW_STMT_MAX_ROWS;
        size_t padded = 0;
        MYSQL_STMT *st = NULL;

        rc = ow_store_stmt_padded(s, shape, rows, &st, &padded, err);
        for (size_t i = 0; rc == OW_OK && i < padded; i++)
            ow_param_bytes(&s->params, items[done + (i < rows ? i : rows - 1)].key_hash,
                           OW_KEY_HASH_LEN);
        if (rc == OW_OK)
            rc = ow_store_execute(s, st, &s->params, "read requests", err);
        if (rc == OW_OK)
            rc = match_rows(s, st, items + done, rows, err);
    }
    return rc;
}

/* --- Step 4: insert the request rows ------------------------------------- */

/* Cached per row bucket by the connection (ow_store_stmt). */
static const ow_sql_shape insert_requests_sql = {
    OW_SLOT_DECIDE + 1,
    "INSERT IGNORE INTO idempotency_requests (id, user_id, idempotency_key, request_digest, "
    "status, response_status, response_body) VALUES ",
    "(?,?,?,?,?,?,?)", ""};

static void bind_request(void *ctx, size_t r, ow_params *params)
{
    const ow_decide_part *p = ctx;
    const ow_store_item *it = &p->items[p->s->scratch.picks[r]];
    const char *status = it->decision == OW_DECISION_CREATED ? "SUCCEEDED" : "FAILED";

    ow_param_int(params, it->request_id);
    ow_param_int(params, it->req->user_id);
    ow_param_bytes(params, it->key, it->key_len);
    ow_param_bytes(params, it->digest, OW_DIGEST_LEN);
    ow_param_bytes(params, status, strlen(status));
    ow_param_int(params, ow_result_code_status(it->code));
    ow_param_bytes(params, it->body.data, it->body.len);
}

static size_t request_bytes(const void *ctx, size_t r)
{
    const ow_decide_part *p = ctx;
    const ow_store_item *it = &p->items[p->s->scratch.picks[r]];

    return ow_server_record_bytes(it->key_len, it->body.len);
}

/* Every item with a record to write, in statements that fit the packet
 * budget (one row always goes). */
static int insert_requests(ow_decide_part *p, ow_error *err)
{
    ow_scratch *sc = &p->s->scratch;
    ow_rows rows = {&insert_requests_sql, 0, 7, p, bind_request, request_bytes, NULL,
                    "insert requests"};

    p->inserted = 0;
    if (ow_grow((void **)&sc->picks, &sc->picks_cap, p->count, sizeof(*sc->picks)) != OW_OK)
        return ow_store_oom(err);
    for (size_t i = p->first; i < p->first + p->count; i++)
        if (p->items[i].decision != OW_DECISION_TOO_LARGE)
            sc->picks[rows.rows++] = i;
    return ow_store_send_rows(p->s, &rows, &p->inserted, err);
}

/* --- Step 5: read back who owns each key --------------------------------- */

static int read_back(ow_decide_part *p, ow_error *err)
{
    ow_store_item *items = p->items + p->first;
    size_t ours = 0;
    int rc;

    size_t written = 0;

    for (size_t i = 0; i < p->count; i++)
        written += items[i].decision != OW_DECISION_TOO_LARGE;
    /* Every row inserted: all are ours, nothing to read back. */
    if (p->inserted == written) {
        for (size_t i = 0; i < p->count; i++)
            items[i].ours = items[i].decision != OW_DECISION_TOO_LARGE;
        return OW_OK;
    }
    rc = read_by_hash(p->s, &read_back_sql, items, p->count, err);
    for (size_t i = 0; rc == OW_OK && i < p->count; i++) {
        ours += items[i].ours;
        /* Neither our row nor another: INSERT IGNORE skipped ours because its
         * id collided with another row's primary key. */
        if (!items[i].ours && items[i].decision != OW_DECISION_REPLAY &&
            items[i].decision != OW_DECISION_KEY_REUSED &&
            items[i].decision != OW_DECISION_TOO_LARGE)
            rc = FALLBACK;
    }
    /* A row that carries our id is ours only if the server inserted it: a
     * process that drew the same id for the same key in the same
     * millisecond (same node number) wrote a row that looks like ours, and
     * only the count of inserted rows tells them apart. */
    if (rc == OW_OK && ours != p->inserted)
        rc = FALLBACK;
    if (rc == FALLBACK)
        p->s->stats.id_collisions++;
    return rc;
}

/* --- Set-based parts, and one item at a time ------------------------------ */

/* A lock wait that timed out, or a statement the server cut short. */
static int lock_wait(int code)
{
    return code == OW_ER_LOCK_WAIT_TIMEOUT || code == OW_ER_STATEMENT_TIMEOUT ||
           code == OW_ER_QUERY_TIMEOUT;
}

/* Maps the database's race reports (a lock wait; 1062, which the inserts'
 * IGNORE leaves to no statement but is still a race if it comes) to
 * FALLBACK and leaves other errors as they are. */
static int race_or_error(int rc, const ow_error *err)
{
    if (rc == OW_OK || rc == FALLBACK)
        return rc;
    if (err->code == OW_ER_DUP_ENTRY || lock_wait(err->code))
        return FALLBACK;
    return rc;
}

/* The steps of a part's transaction after its known keys, in order: draw
 * the ids of every order as new, insert the orders, read those that
 * existed and decide each item, insert the request records, read back
 * whose they are, take back the orders of items that keep none. */
static int (*const part_steps[])(ow_decide_part *, ow_error *) = {
    ow_orders_draw, ow_orders_insert, ow_orders_settle, insert_requests, read_back, ow_orders_undo};

static int run_steps(ow_decide_part *p, ow_error *err)
{
    int rc = OW_OK;

    for (size_t i = 0; rc == OW_OK && i < sizeof(part_steps) / sizeof(part_steps[0]); i++)
        rc = part_steps[i](p, err);
    return race_or_error(rc, err);
}

static int in_progress(ow_store *s, ow_store_item *it, ow_error *err)
{
    ow_response_ctx ctx;

    clear_decisions(it, 1);
    it->decision = OW_DECISION_IN_PROGRESS;
    it->code = OW_CODE_REQUEST_IN_PROGRESS;
    ow_store_item_ctx(it, &ctx);
    if (ow_response_in_progress(&ctx, (int64_t)s->lock_wait_timeout_s * 1000, &it->body) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

/* A lock wait that took the whole transaction with it: the server's
 * innodb_rollback_on_timeout does that to 1205 (not to a statement cut by
 * max_statement_time). */
static int transaction_lost(const ow_store *s, const ow_error *err)
{
    return err->code == OW_ER_LOCK_WAIT_TIMEOUT && s->server.rollback_on_timeout;
}

/* One item under a savepoint (or alone in its transaction when single).
 * RESTART: the server rolled back the transaction, the item is answered
 * REQUEST_IN_PROGRESS, and the items before it are to be decided again. */
static int run_one(ow_store *s, ow_store_item *items, size_t i, int single, ow_error *err)
{
    ow_decide_part p = {s, items, i, 1, 0};

    for (unsigned attempt = 0; attempt < ITEM_ATTEMPTS; attempt++) {
        int rc = OW_OK;

        if (!single)
            rc = ow_store_exec_static(s, "SAVEPOINT ow_item", err);
        if (rc == OW_OK)
            rc = run_steps(&p, err);
        if (rc != FALLBACK)
            return rc;
        /* Undo this item's statements; earlier items of the batch stay. */
        if (single) {
            ow_store_rollback(s);
        } else if (transaction_lost(s, err)) {
            rc = in_progress(s, &items[i], err);
            return rc == OW_OK ? RESTART : rc;
        } else if (ow_store_exec_static(s, "ROLLBACK TO SAVEPOINT ow_item", err) != OW_OK) {
            return OW_ERETRY;
        }
        if (lock_wait(err->code))
            return in_progress(s, &items[i], err);
        if (err->code == OW_ER_DUP_ENTRY)
            s->stats.order_races++;
        /* A concurrent writer has committed (the next attempt's inserts
         * skip its rows and read them), or our id collided (a new node
         * number avoids it). */
        ow_idgen_set_node(s->ids, (unsigned)(ow_rand64(&s->rng) >> 20));
        ow_error_clear(err);
    }
    return ow_error_set(err, OW_ERRCLASS_RETRIABLE, OW_ER_DUP_ENTRY,
                        "item kept racing with concurrent writers after %d attempts",
                        ITEM_ATTEMPTS);
}

/* Each item in turn. After a RESTART the items answered REQUEST_IN_PROGRESS
 * stay so, and the others start over in the new transaction: each restart
 * settles one more item, so there are at most n. */
static int run_one_at_a_time(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    for (size_t i = 0; i < n;) {
        int rc = items[i].decision == OW_DECISION_IN_PROGRESS ? OW_OK
                                                              : run_one(s, items, i, n == 1, err);

        if (rc == RESTART) {
            for (size_t j = 0; j < i; j++)
                if (items[j].decision != OW_DECISION_IN_PROGRESS)
                    clear_decisions(&items[j], 1);
            s->stats.transaction_restarts++;
            ow_error_clear(err);
            i = 0;
            continue;
        }
        if (rc != OW_OK)
            return rc;
        i++;
    }
    return ow_store_commit(s, err);
}

/* One group of items[first, first + count) set-based under a savepoint;
 * after a race, its items one at a time. A lock wait that rolled back the
 * whole transaction took the groups before with it: the call fails with
 * it, and the next call goes one item at a time (ow_store_decide). */
static int run_group(ow_store *s, ow_store_item *items, size_t first, size_t count, ow_error *err)
{
    ow_decide_part p = {s, items, first, count, 0};
    int rc = ow_store_exec_static(s, "SAVEPOINT ow_group", err);

    if (rc == OW_OK)
        rc = run_steps(&p, err);
    if (rc != FALLBACK)
        return rc;
    if (transaction_lost(s, err) ||
        ow_store_exec_static(s, "ROLLBACK TO SAVEPOINT ow_group", err) != OW_OK)
        return OW_ERETRY;
    s->stats.batch_fallbacks++;
    ow_error_clear(err);
    for (size_t i = first; rc == OW_OK && i < first + count;) {
        rc = run_one(s, items, i++, 0, err);
        if (rc == RESTART)
            rc = OW_ERETRY;
    }
    return rc;
}

/* The size of the groups a call of n items is decided in after split
 * deadlocks in a row: n / 2^split, rounded up. */
static size_t group_size(size_t n, unsigned split)
{
    size_t groups = split < SPLIT_ONE ? (size_t)1 << split : n;

    return groups >= n ? 1 : (n + groups - 1) / groups;
}

/* Decides items[0..n), none of whose keys step 0 found, in one
 * transaction: set-based as a whole, or in the groups of split, each under
 * a savepoint; a part that meets a race is redone one item at a time. */
static int decide_new(ow_store *s, ow_store_item *items, size_t n, unsigned split, ow_error *err)
{
    size_t size = group_size(n, split);
    int rc = ow_orders_prepare(s, items, n, err);

    if (rc != OW_OK)
        return rc;
    s->stats.transactions++;
    if (size == n && n > 1) {
        ow_decide_part p = {s, items, 0, n, 0};

        rc = run_steps(&p, err);
        if (rc == OW_OK)
            rc = ow_store_commit(s, err);
        if (rc != FALLBACK)
            return rc;
        ow_store_rollback(s);
        s->stats.batch_fallbacks++;
        ow_error_clear(err);
        size = 1;
    }
    if (size == 1)
        return run_one_at_a_time(s, items, n, err);
    for (size_t g = 0; rc == OW_OK && g < n; g += size)
        rc = run_group(s, items, g, n - g < size ? n - g : size, err);
    return rc == OW_OK ? ow_store_commit(s, err) : rc;
}

/* Moves the items step 0 did not answer to the front of a copy (struct
 * copies: each body buffer has one owner at a time), decides them, and
 * puts them back. */
static int decide_rest(ow_store *s, ow_store_item *items, size_t n, size_t unknown, unsigned split,
                       ow_error *err)
{
    ow_store_item *rest = malloc(unknown * sizeof(*rest));
    size_t *where = malloc(unknown * sizeof(*where));
    size_t k = 0;
    int rc;

    if (rest == NULL || where == NULL) {
        free(rest);
        free(where);
        return ow_store_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].decision == OW_DECISION_NONE) {
            where[k] = i;
            rest[k++] = items[i];
        }
    }
    rc = decide_new(s, rest, k, split, err);
    for (size_t j = 0; j < k; j++)
        items[where[j]] = rest[j];
    free(rest);
    free(where);
    return rc;
}

/* Step 0, then the rest; on error nothing was committed and no item has
 * a decision. */
static int decide(ow_store *s, ow_store_item *items, size_t n, unsigned split, ow_error *err)
{
    size_t unknown = 0;
    int rc = ow_store_connect(s, err);

    clear_decisions(items, n);
    if (rc == OW_OK && !s->no_known_read)
        rc = read_by_hash(s, &known_sql, items, n, err);
    for (size_t i = 0; rc == OW_OK && i < n; i++)
        unknown += items[i].decision == OW_DECISION_NONE;
    if (rc == OW_OK && unknown == 0)
        rc = ow_store_commit(s, err); /* read-only: ends the snapshot, no redo */
    else if (rc == OW_OK && unknown == n)
        rc = decide_new(s, items, n, split, err);
    else if (rc == OW_OK)
        rc = decide_rest(s, items, n, unknown, split, err);
    if (rc == OW_OK) {
        s->stats.known_keys += n - unknown;
        return OW_OK;
    }
    ow_store_rollback(s);
    clear_decisions(items, n);
    return rc;
}

int ow_store_decide(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    int rc;

    ow_error_clear(err);
    if (n == 0)
        return OW_OK;
    rc = decide(s, items, n, s->next_split, err);
    if (rc == OW_OK) {
        s->next_split = 0;
        return OW_OK;
    }
    /* A deadlock, or a transaction the server rolled back under a
     * savepoint: the next call decides the items in twice as many groups,
     * so that the statements a retry costs stay about those of one
     * set-based call, and a part that keeps meeting the race ends up one
     * item at a time. A lock wait: one item at a time, where the item that
     * waits gets its answer. */
    if (err->code == OW_ER_LOCK_DEADLOCK)
        s->stats.deadlocks++;
    if (err->code == OW_ER_LOCK_DEADLOCK || err->code == OW_ER_SP_DOES_NOT_EXIST)
        s->next_split = s->next_split + 1 < SPLIT_ONE ? s->next_split + 1 : SPLIT_ONE;
    else if (lock_wait(err->code))
        s->next_split = SPLIT_ONE;
    return rc;
}

void ow_store_test_known_read(ow_store *s, int enabled)
{
    s->no_known_read = !enabled;
}

void ow_store_test_plain_sql(ow_store *s, int on)
{
    s->plain_sql = on;
    ow_store_disconnect(s);
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
