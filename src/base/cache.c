/*
 * The retry cache: a hash table (ow_htab: key hash to entry) plus a
 * least-recently-used list, one allocation per entry (header, key and
 * body together), all of it, the table too, counted against max_bytes.
 */
#include "ow/cache.h"

#include <stdlib.h>
#include <string.h>

#include "ow/error.h"
#include "ow/htab.h"
#include "ow/list.h"

typedef struct entry {
    ow_list lru; /* newest first */
    uint64_t hash;
    int64_t user_id;
    int64_t stored_ms;
    ow_result_code code;
    size_t key_len, body_len;
    unsigned char digest[OW_DIGEST_LEN];
    char data[]; /* key, then body */
} entry;

struct ow_cache {
    ow_htab index; /* key hash -> entry */
    ow_list lru;   /* newest first */
    size_t bytes;  /* the entries' and the cache's own, without the table */
    size_t max_bytes, entries;
    int64_t ttl_ms;
};

uint64_t ow_cache_key_hash(int64_t user_id, const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)user_id;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

/* What malloc adds to each block (glibc, 64-bit), counted too. */
#define MALLOC_OVERHEAD 16

static size_t entry_bytes(const entry *e)
{
    return sizeof(*e) + e->key_len + e->body_len + MALLOC_OVERHEAD;
}

/* Everything counted against the bound. The table grows with the entries
 * (ow_htab_bytes counts its struct, which is part of the cache's). */
static size_t held(const ow_cache *c)
{
    return c->bytes - sizeof(c->index) + ow_htab_bytes(&c->index);
}

ow_cache *ow_cache_new(size_t max_bytes, int64_t ttl_ms)
{
    ow_cache *c;

    if (max_bytes == 0)
        return NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    if (ow_htab_init(&c->index, 0) != OW_OK) {
        free(c);
        return NULL;
    }
    ow_list_init(&c->lru);
    c->max_bytes = max_bytes;
    c->ttl_ms = ttl_ms;
    c->bytes = sizeof(*c);
    return c;
}

void ow_cache_free(ow_cache **cp)
{
    ow_cache *c = *cp;

    if (c == NULL)
        return;
    while (!ow_list_empty(&c->lru)) {
        entry *e = OW_LIST_ITEM(c->lru.next, entry, lru);

        ow_list_remove(&e->lru);
        free(e);
    }
    ow_htab_free(&c->index);
    free(c);
    *cp = NULL;
}

/* The entry of (user_id, key), whose hash is h, or NULL. */
static entry *find(const ow_cache *c, uint64_t h, int64_t user_id, const char *key, size_t len)
{
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t v;

    while (ow_htab_next(&c->index, h, &w, &v)) {
        entry *e = (entry *)v;

        if (e->user_id == user_id && e->key_len == len && memcmp(e->data, key, len) == 0)
            return e;
    }
    return NULL;
}

/* Takes e out of the table and the list and frees it. */
static void remove_entry(ow_cache *c, entry *e)
{
    ow_htab_remove(&c->index, e->hash, (uintptr_t)e);
    ow_list_remove(&e->lru);
    c->bytes -= entry_bytes(e);
    c->entries--;
    free(e);
}

/* Evicts the least recently used entries, never keep, while what the
 * cache holds and extra more bytes exceed the bound. */
static void evict(ow_cache *c, size_t extra, const entry *keep)
{
    while (!ow_list_empty(&c->lru) && held(c) + extra > c->max_bytes) {
        entry *oldest = OW_LIST_ITEM(c->lru.prev, entry, lru);

        if (oldest == keep)
            break;
        remove_entry(c, oldest);
    }
}

int ow_cache_get(ow_cache *c, int64_t user_id, const char *key, size_t key_len,
                 const unsigned char digest[OW_DIGEST_LEN], int64_t now_ms, ow_result_code *code,
                 ow_buf *body)
{
    entry *e;

    if (c == NULL)
        return 0;
    e = find(c, ow_cache_key_hash(user_id, key, key_len), user_id, key, key_len);
    if (e == NULL)
        return 0;
    if (now_ms - e->stored_ms >= c->ttl_ms) {
        remove_entry(c, e);
        return 0;
    }
    if (memcmp(e->digest, digest, OW_DIGEST_LEN) != 0)
        return 0;
    ow_buf_reset(body);
    if (ow_buf_append(body, e->data + e->key_len, e->body_len) != OW_OK)
        return 0;
    *code = e->code;
    ow_list_remove(&e->lru);
    ow_list_push(&c->lru, &e->lru);
    return 1;
}

int ow_cache_put(ow_cache *c, int64_t user_id, const char *key, size_t key_len,
                 const unsigned char digest[OW_DIGEST_LEN], ow_result_code code, const char *body,
                 size_t body_len, int64_t now_ms)
{
    uint64_t h;
    entry *e;
    size_t need = sizeof(*e) + key_len + body_len + MALLOC_OVERHEAD;

    if (c == NULL || need > c->max_bytes / 4)
        return 0;
    h = ow_cache_key_hash(user_id, key, key_len);
    e = find(c, h, user_id, key, key_len);
    if (e != NULL)
        remove_entry(c, e);
    evict(c, need, NULL);
    if (held(c) + need > c->max_bytes)
        return 0;
    e = malloc(need - MALLOC_OVERHEAD);
    if (e == NULL)
        return 0;
    if (ow_htab_put(&c->index, h, (uintptr_t)e) != OW_OK) {
        free(e);
        return 0;
    }
    e->hash = h;
    e->user_id = user_id;
    e->stored_ms = now_ms;
    e->code = code;
    e->key_len = key_len;
    e->body_len = body_len;
    memcpy(e->digest, digest, OW_DIGEST_LEN);
    memcpy(e->data, key, key_len);
    memcpy(e->data + key_len, body, body_len);
    ow_list_push(&c->lru, &e->lru);
    c->bytes += need;
    c->entries++;
    /* The put may have grown the table past what the eviction left room
     * for. */
    evict(c, 0, e);
    if (held(c) > c->max_bytes) {
        remove_entry(c, e);
        return 0;
    }
    return 1;
}

size_t ow_cache_bytes(const ow_cache *c)
{
    return c != NULL ? held(c) : 0;
}

size_t ow_cache_entries(const ow_cache *c)
{
    return c != NULL ? c->entries : 0;
}
