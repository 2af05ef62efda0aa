/*
 * The retry cache (issue 12): chained hash table plus a least-recently-used
 * list, one allocation per entry (header, key and body together), all of
 * it counted against max_bytes.
 */
#include "ow/cache.h"

#include <stdlib.h>
#include <string.h>

#include "ow/error.h"

typedef struct entry {
    struct entry *chain;         /* next in its bucket */
    struct entry *newer, *older; /* LRU list */
    uint64_t hash;
    int64_t user_id;
    int64_t stored_ms;
    ow_result_code code;
    size_t key_len, body_len;
    unsigned char digest[OW_DIGEST_LEN];
    char data[]; /* key, then body */
} entry;

struct ow_cache {
    entry **buckets;
    size_t n_buckets; /* power of two */
    entry *newest, *oldest;
    size_t bytes, max_bytes, entries;
    int64_t ttl_ms;
};

/* One bucket per this many bytes of bound: a 1 KB body is typical. */
#define BYTES_PER_BUCKET 512

static uint64_t key_hash(int64_t user_id, const char *key, size_t len)
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

ow_cache *ow_cache_new(size_t max_bytes, int64_t ttl_ms)
{
    ow_cache *c;
    size_t n = 16;

    if (max_bytes == 0)
        return NULL;
    while (n < max_bytes / BYTES_PER_BUCKET && n < ((size_t)1 << 24))
        n *= 2;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->buckets = calloc(n, sizeof(*c->buckets));
    if (c->buckets == NULL) {
        free(c);
        return NULL;
    }
    c->n_buckets = n;
    c->max_bytes = max_bytes;
    c->ttl_ms = ttl_ms;
    c->bytes = sizeof(*c) + n * sizeof(*c->buckets);
    return c;
}

void ow_cache_free(ow_cache **cp)
{
    ow_cache *c = *cp;

    if (c == NULL)
        return;
    for (entry *e = c->newest; e != NULL;) {
        entry *next = e->older;

        free(e);
        e = next;
    }
    free(c->buckets);
    free(c);
    *cp = NULL;
}

static entry **find_slot(ow_cache *c, uint64_t h, int64_t user_id, const char *key, size_t len)
{
    entry **p = &c->buckets[h & (c->n_buckets - 1)];

    while (*p != NULL) {
        entry *e = *p;

        if (e->hash == h && e->user_id == user_id && e->key_len == len &&
            memcmp(e->data, key, len) == 0)
            return p;
        p = &e->chain;
    }
    return p;
}

static void lru_unlink(ow_cache *c, entry *e)
{
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(ow_cache *c, entry *e)
{
    e->newer = NULL;
    e->older = c->newest;
    if (c->newest != NULL)
        c->newest->newer = e;
    c->newest = e;
    if (c->oldest == NULL)
        c->oldest = e;
}

/* Unlinks *slot (an entry of the table) and frees it. */
static void remove_at(ow_cache *c, entry **slot)
{
    entry *e = *slot;

    *slot = e->chain;
    lru_unlink(c, e);
    c->bytes -= entry_bytes(e);
    c->entries--;
    free(e);
}

static void remove_entry(ow_cache *c, entry *e)
{
    remove_at(c, find_slot(c, e->hash, e->user_id, e->data, e->key_len));
}

int ow_cache_get(ow_cache *c, int64_t user_id, const char *key, size_t key_len,
                 const unsigned char digest[OW_DIGEST_LEN], int64_t now_ms, ow_result_code *code,
                 ow_buf *body)
{
    uint64_t h;
    entry **slot;
    entry *e;

    if (c == NULL)
        return 0;
    h = key_hash(user_id, key, key_len);
    slot = find_slot(c, h, user_id, key, key_len);
    e = *slot;
    if (e == NULL)
        return 0;
    if (now_ms - e->stored_ms >= c->ttl_ms) {
        remove_at(c, slot);
        return 0;
    }
    if (memcmp(e->digest, digest, OW_DIGEST_LEN) != 0)
        return 0;
    ow_buf_reset(body);
    if (ow_buf_append(body, e->data + e->key_len, e->body_len) != OW_OK)
        return 0;
    *code = e->code;
    lru_unlink(c, e);
    lru_push(c, e);
    return 1;
}

int ow_cache_put(ow_cache *c, int64_t user_id, const char *key, size_t key_len,
                 const unsigned char digest[OW_DIGEST_LEN], ow_result_code code, const char *body,
                 size_t body_len, int64_t now_ms)
{
    uint64_t h;
    entry **slot;
    entry *e;
    size_t need = sizeof(*e) + key_len + body_len + MALLOC_OVERHEAD;

    if (c == NULL || need > c->max_bytes / 4)
        return 0;
    h = key_hash(user_id, key, key_len);
    slot = find_slot(c, h, user_id, key, key_len);
    if (*slot != NULL)
        remove_at(c, slot);
    while (c->oldest != NULL && c->bytes + need > c->max_bytes)
        remove_entry(c, c->oldest);
    if (c->bytes + need > c->max_bytes)
        return 0;
    e = malloc(need - MALLOC_OVERHEAD);
    if (e == NULL)
        return 0;
    e->hash = h;
    e->user_id = user_id;
    e->stored_ms = now_ms;
    e->code = code;
    e->key_len = key_len;
    e->body_len = body_len;
    memcpy(e->digest, digest, OW_DIGEST_LEN);
    memcpy(e->data, key, key_len);
    memcpy(e->data + key_len, body, body_len);
    /* The slot may have moved while evicting: find it again. */
    slot = find_slot(c, h, user_id, key, key_len);
    e->chain = NULL;
    *slot = e;
    lru_push(c, e);
    c->bytes += need;
    c->entries++;
    return 1;
}

size_t ow_cache_bytes(const ow_cache *c)
{
    return c != NULL ? c->bytes : 0;
}

size_t ow_cache_entries(const ow_cache *c)
{
    return c != NULL ? c->entries : 0;
}
