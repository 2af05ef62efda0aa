/*
 * The retry cache: a bounded, in-process map from (user_id,
 * idempotency key) to the outcome the database recorded for it: the
 * request digest, the result code and the stored response bytes.
 *
 * Retries of one key land on one partition and so on one lane of one
 * replica; each lane owns a cache, so no lock is needed. A lane fills it
 * only after the deciding transaction committed, and a hit answers only a
 * message with the same digest; anything else goes to the database, which
 * stays the only judge. Entries expire after a TTL that purge's horizon
 * must exceed (purge refuses a shorter one), so the cache never answers for
 * a record the purge has removed. Pure: no I/O, no clock of its own.
 */
#ifndef OW_CACHE_H
#define OW_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ow/digest.h"
#include "ow/response.h"
#include "ow/util.h"

typedef struct ow_cache ow_cache;

/* A cache holding at most max_bytes (entries, their bytes and the
 * table); NULL when max_bytes is 0 (disabled) or memory runs out. */
ow_cache *ow_cache_new(size_t max_bytes, int64_t ttl_ms);
void ow_cache_free(ow_cache **c);

/* Looks (user_id, key) up at now_ms. Returns 1 on a hit with this digest
 * and sets *code and body (replaced) to the stored answer; 0 otherwise (not
 * cached, expired, or another digest: the database decides). */
int ow_cache_get(ow_cache *c, int64_t user_id, const char *key, size_t key_len,
                 const unsigned char digest[OW_DIGEST_LEN], int64_t now_ms, ow_result_code *code,
                 ow_buf *body);

/* Records a committed outcome (CREATED or ORDER_ALREADY_EXISTS with its
 * stored body), replacing an older one of the key and evicting the least
 * recently used entries to stay within the bound. An entry larger than a
 * quarter of the bound is not kept. Returns 1 when stored. */
int ow_cache_put(ow_cache *c, int64_t user_id, const char *key, size_t key_len,
                 const unsigned char digest[OW_DIGEST_LEN], ow_result_code code, const char *body,
                 size_t body_len, int64_t now_ms);

size_t ow_cache_bytes(const ow_cache *c); /* bytes counted against the bound */
size_t ow_cache_entries(const ow_cache *c);

/* The hash the cache files (user_id, key) under. Keys with one hash are
 * told apart by their bytes; exposed so that the unit test can show it
 * with two keys that share one. */
uint64_t ow_cache_key_hash(int64_t user_id, const char *key, size_t len);

#endif
