/*
 * Keys already recorded, answered by one consistent read (issue 12).
 * Private to the store (decide.c calls it; store_known.c implements it).
 */
#ifndef OW_STORE_KNOWN_INTERNAL_H
#define OW_STORE_KNOWN_INTERNAL_H

#include "store_internal.h"

/* Decides items[0..n) in one transaction (decide.c's decide_batch). */
typedef int (*ow_decide_fn)(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                            ow_error *err);

/* Reads the batch's (user_id, key) rows with one non-locking SELECT. An item
 * whose key is recorded gets its final answer from the committed row (the
 * stored body with the same digest, IDEMPOTENCY_KEY_REUSED with another):
 * rows are written once in their final state, so a committed row is the
 * database's decision. The other items go to decide, which stays the judge
 * of everything new. A batch of replays writes nothing, locks nothing and
 * ends with a read-only COMMIT, which writes no redo. Same contract as
 * ow_store_decide: on error no item has a decision. */
int ow_store_decide_known(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                          ow_decide_fn decide, ow_error *err);

/* One row of a SELECT of ([id,] user_id, idempotency_key, request_digest,
 * response_status, response_body, key_hash), the columns that decide.c's
 * read-back and the known-key read both select. The body is fetched on
 * demand. */
typedef struct {
    ow_store *s;
    MYSQL_STMT *st;
    const char *what; /* names the read in errors */
    long long id;     /* 0 unless the SELECT starts with id */
    long long user_id;
    long long status;
    char key[OW_KEY_MAX + 1];
    unsigned long key_len;
    unsigned char digest[OW_DIGEST_LEN];
    unsigned long digest_len;
    unsigned char key_hash[OW_KEY_HASH_LEN];
    unsigned long key_hash_len;
    unsigned long body_len;
    unsigned body_col;
    int have_body;
} ow_request_row;

/* Called for each item whose (user_id, key) is the row's. */
typedef int (*ow_request_row_fn)(ow_request_row *row, ow_store_item *it, ow_error *err);

/* Reads every row of the executed statement st, a read by key hash, and
 * calls fn for each item of items[0..n) with the row's (user_id, key): a
 * batch may carry a key twice. An item with the row's hash and another key
 * is answered IDEMPOTENCY_KEY_REUSED (a hash collision). Rows with a key,
 * digest or hash of the wrong length are skipped. */
int ow_store_match_rows(ow_store *s, MYSQL_STMT *st, int with_id, ow_store_item *items, size_t n,
                        ow_request_row_fn fn, const char *what, ow_error *err);
/* The current row's response_body into s->scratch.blob, read once per row. */
int ow_request_row_body(ow_request_row *row, ow_error *err);
/* The answer of an item whose key a committed row holds: a replay of the
 * stored body (the row's, in s->scratch.blob) when the digests match, else
 * IDEMPOTENCY_KEY_REUSED. */
int ow_store_answer_recorded(ow_store *s, ow_store_item *it, const unsigned char *digest,
                             long long status, ow_error *err);

#endif
