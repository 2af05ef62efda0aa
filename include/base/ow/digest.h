/*
 * The request digest: SHA-256 of a canonical form of the normalized request.
 *
 * Canonical form (version 1), a compact JSON text with a fixed shape:
 *   {"orders":[{"amount":"19.90","external_order_no":"B-1","product_id":101,"quantity":1}],
 *    "user_id":42}
 * Keys in this order, no whitespace, amounts with exactly two decimals,
 * product_id null when absent, quantity 1 when absent, items in message
 * order. Whitespace, key order and amount spelling of the message therefore
 * do not change the digest; the user, any value and the item order do.
 * The idempotency key is not part of it.
 */
#ifndef OW_DIGEST_H
#define OW_DIGEST_H

#include "ow/request.h"
#include "ow/util.h"

#define OW_DIGEST_LEN 32
#define OW_DIGEST_HEX_LEN 64
/* The key hash: the first 16 bytes of SHA-256 over the user id
 * in decimal, ':' and the key's bytes. It is the whole unique key of
 * idempotency_requests (migration 004), so that index holds 16 bytes per
 * request instead of the user id and the key; the row keeps both, and a
 * read by the hash compares them. Migration 004 computes the same value in
 * SQL: UNHEX(LEFT(SHA2(CONCAT(user_id, ':', idempotency_key), 256), 32)). */
#define OW_KEY_HASH_LEN 16

/* SHA-256 of data[0..len) into out, with a context on the stack. Returns 0,
 * or OW_ENOMEM should libcrypto report a failure. Thread-safe. */
int ow_sha256(const void *data, size_t len, unsigned char out[OW_DIGEST_LEN]);

/* Appends the canonical form to out. Returns 0 or OW_ENOMEM. */
int ow_digest_canonical(const ow_request *req, ow_buf *out);
/* Computes the digest; hex gets 64 lower-case hex digits and a NUL. The
 * canonical form goes into the hash a chunk at a time: nothing is
 * allocated. Returns 0 or OW_ENOMEM. */
int ow_digest_compute(const ow_request *req, unsigned char raw[OW_DIGEST_LEN],
                      char hex[OW_DIGEST_HEX_LEN + 1]);

/* The key hash of (user_id, key[0..len)). Returns 0, OW_EINVAL when len
 * exceeds OW_KEY_MAX, or OW_ENOMEM. */
int ow_key_hash(long long user_id, const char *key, size_t len, unsigned char out[OW_KEY_HASH_LEN]);

#endif
