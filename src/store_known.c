/*
 * Replays without a write (issue 12). Before the deciding transaction, one
 * consistent read by the unique key (key_hash, migration 004) looks up the
 * whole micro-batch. READ COMMITTED makes it a non-locking read of the
 * latest committed rows. Measured before this (scripts/bench.sh --replay,
 * 100,000 batches), a batch of replays cost as much as deciding it: the
 * locking read of its orders, an INSERT IGNORE of every request row, the
 * read-back and a commit, for 1.6x the decide rate.
 */
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "store_known_internal.h"

static const ow_sql_shape known_sql = {
    OW_SLOT_KNOWN + 0,
    "SELECT user_id, idempotency_key, request_digest, response_status, response_body, key_hash "
    "FROM idempotency_requests WHERE key_hash IN (",
    "?", ")"};

/* IDEMPOTENCY_KEY_REUSED, built from the item's own fields; stored_digest8
 * names the recorded request for the security log. */
static int answer_key_reused(ow_store_item *it, const char *stored_digest8, ow_error *err)
{
    ow_response_ctx ctx = {it->req->user_id, it->key, it->key_len, it->digest_hex};

    ow_buf_reset(&it->body);
    it->ours = 0;
    it->replayed = 0;
    it->decision = OW_DECISION_KEY_REUSED;
    it->code = OW_CODE_IDEMPOTENCY_KEY_REUSED;
    memcpy(it->stored_digest8, stored_digest8, sizeof(it->stored_digest8));
    return ow_response_key_reused(&ctx, &it->body) == OW_OK ? OW_OK : ow_store_oom(err);
}

int ow_store_answer_recorded(ow_store *s, ow_store_item *it, const unsigned char *digest,
                             long long status, ow_error *err)
{
    char digest8[9];

    if (memcmp(digest, it->digest, OW_DIGEST_LEN) != 0) {
        ow_hex(digest, 4, digest8);
        return answer_key_reused(it, digest8, err);
    }
    ow_buf_reset(&it->body);
    it->ours = 0;
    it->decision = OW_DECISION_REPLAY;
    it->code = status == 201 ? OW_CODE_CREATED : OW_CODE_ORDER_ALREADY_EXISTS;
    it->replayed = 1;
    if (ow_buf_append(&it->body, s->scratch.blob.data, s->scratch.blob.len) != OW_OK)
        return ow_store_oom(err);
    return OW_OK;
}

int ow_request_row_body(ow_request_row *row, ow_error *err)
{
    if (row->have_body)
        return OW_OK;
    row->have_body = 1;
    return ow_store_fetch_column(row->s, row->st, row->body_col, row->body_len,
                                 &row->s->scratch.blob, row->what, err);
}

static int row_matches(const ow_request_row *row, const ow_store_item *it)
{
    return it->req->user_id == row->user_id && it->key_len == row->key_len &&
           memcmp(it->key, row->key, row->key_len) == 0;
}

/* The row holds the item's key hash for another (user_id, key): two keys
 * whose SHA-256 agree in 128 bits (about 1.5e-21 for 10^9 keys;
 * docs/transactions.md), the row possibly another item's of the same
 * batch. The item's key cannot be recorded, so it is answered like a key
 * used for another request, from its own fields, and writes nothing. */
static int answer_collision(ow_request_row *row, ow_store_item *it, ow_error *err)
{
    row->s->stats.key_hash_collisions++;
    OW_LOG(OW_LOG_ERROR, "idempotency_key_hash_collision", OW_F_INT("user_id", it->req->user_id),
           OW_F_KEY("key", it->key, it->key_len), OW_F_INT("stored_user_id", row->user_id),
           OW_F_KEY("stored_key", row->key, row->key_len));
    return answer_key_reused(it, "00000000", err);
}

int ow_store_match_rows(ow_store *s, MYSQL_STMT *st, int with_id, ow_store_item *items, size_t n,
                        ow_request_row_fn fn, const char *what, ow_error *err)
{
    MYSQL_BIND res[7];
    ow_mybool nul[7] = {0};
    ow_request_row row = {.s = s, .st = st, .what = what};
    unsigned c = with_id ? 1 : 0;
    unsigned e;
    int frc = 0;
    int rc = OW_OK;

    if (with_id)
        ow_result_int(&res[0], &row.id, &nul[0]);
    ow_result_int(&res[c], &row.user_id, &nul[c]);
    ow_result_bytes(&res[c + 1], row.key, sizeof(row.key), &row.key_len, &nul[c + 1]);
    ow_result_bytes(&res[c + 2], row.digest, sizeof(row.digest), &row.digest_len, &nul[c + 2]);
    ow_result_int(&res[c + 3], &row.status, &nul[c + 3]);
    ow_result_bytes(&res[c + 4], NULL, 0, &row.body_len, &nul[c + 4]);
    ow_result_bytes(&res[c + 5], row.key_hash, sizeof(row.key_hash), &row.key_hash_len,
                    &nul[c + 5]);
    row.body_col = c + 4;
    if (mysql_stmt_bind_result(st, res) != 0 || mysql_stmt_store_result(st) != 0)
        return ow_store_fail_stmt(s, st, what, err);
    while (rc == OW_OK) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        if (row.key_len > OW_KEY_MAX || row.digest_len != OW_DIGEST_LEN ||
            row.key_hash_len != OW_KEY_HASH_LEN)
            continue;
        row.have_body = 0;
        /* The rows were read by key hash: a row with an item's hash is its
         * key's record or a collision. */
        for (size_t i = 0; rc == OW_OK && i < n; i++) {
            if (memcmp(row.key_hash, items[i].key_hash, OW_KEY_HASH_LEN) != 0)
                continue;
            rc = row_matches(&row, &items[i]) ? fn(&row, &items[i], err)
                                              : answer_collision(&row, &items[i], err);
        }
    }
    e = rc == OW_OK && frc != MYSQL_NO_DATA ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    if (rc == OW_OK && frc != MYSQL_NO_DATA)
        rc = ow_store_fail(s, e, what, err);
    return rc;
}

/* A known key: the committed row answers the item. */
static int known_row(ow_request_row *row, ow_store_item *it, ow_error *err)
{
    int rc = ow_request_row_body(row, err);

    return rc == OW_OK ? ow_store_answer_recorded(row->s, it, row->digest, row->status, err) : rc;
}

/* One padded chunk of the read over items [from, from+rows). */
static int read_chunk(ow_store *s, ow_store_item *items, size_t from, size_t rows, ow_error *err)
{
    unsigned bucket = 0;
    ow_params *p = &s->params;
    MYSQL_STMT *st = NULL;
    int rc;

    while (((size_t)1 << bucket) < rows)
        bucket++;
    rc = ow_store_stmt(s, &known_sql, bucket, &st, err);
    if (rc != OW_OK)
        return rc;
    /* Padding repeats the last pair: it fills the list without changing
     * what it matches. */
    for (size_t i = 0; i < ((size_t)1 << bucket); i++) {
        const ow_store_item *it = &items[from + (i < rows ? i : rows - 1)];

        ow_param_bytes(p, it->key_hash, OW_KEY_HASH_LEN);
    }
    rc = ow_store_execute(s, st, p, "read known keys", err);
    if (rc == OW_OK)
        rc = ow_store_match_rows(s, st, 0, items + from, rows, known_row, "read known keys", err);
    return rc;
}

static int read_known(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    for (size_t i = 0; i < n; i++) {
        items[i].decision = OW_DECISION_NONE;
        items[i].replayed = 0;
    }
    for (size_t done = 0; done < n; done += OW_STMT_MAX_ROWS) {
        size_t rows = n - done < OW_STMT_MAX_ROWS ? n - done : OW_STMT_MAX_ROWS;
        int rc = read_chunk(s, items, done, rows, err);

        if (rc != OW_OK)
            return rc;
    }
    return OW_OK;
}

static void clear_all(ow_store_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        items[i].decision = OW_DECISION_NONE;
        items[i].replayed = 0;
        items[i].ours = 0;
        ow_buf_reset(&items[i].body);
    }
}

/* Moves the unanswered items to the front of rest (struct copies: each
 * body buffer has one owner at a time) and decides them there. */
static int decide_rest(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                       ow_decide_fn decide, ow_error *err)
{
    ow_store_item *rest = malloc(n * sizeof(*rest));
    size_t *where = malloc(n * sizeof(*where));
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
    rc = decide(s, rest, k, one_at_a_time, err);
    for (size_t j = 0; j < k; j++)
        items[where[j]] = rest[j];
    free(rest);
    free(where);
    return rc;
}

void ow_store_set_known_read(ow_store *s, int enabled)
{
    s->no_known_read = !enabled;
}

int ow_store_decide_known(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                          ow_decide_fn decide, ow_error *err)
{
    size_t unknown = 0;
    int rc;

    if (s->no_known_read)
        return decide(s, items, n, one_at_a_time, err);
    rc = ow_store_connect(s, err);
    if (rc == OW_OK)
        rc = read_known(s, items, n, err);
    for (size_t i = 0; rc == OW_OK && i < n; i++)
        unknown += items[i].decision == OW_DECISION_NONE;
    if (rc == OW_OK && unknown == 0)
        rc = ow_store_commit(s, err); /* read-only: ends the snapshot, no redo */
    else if (rc == OW_OK && unknown == n)
        rc = decide(s, items, n, one_at_a_time, err);
    else if (rc == OW_OK)
        rc = decide_rest(s, items, n, one_at_a_time, decide, err);
    if (rc == OW_OK)
        s->stats.known_keys += n - unknown;
    else {
        ow_store_rollback(s);
        clear_all(items, n);
    }
    return rc;
}
