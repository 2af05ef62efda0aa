/* A small hash table of (hash, value) pairs (ow/htab.h). */
#include "ow/htab.h"

#include <stdlib.h>
#include <string.h>

#include "ow/error.h"

#define EMPTY 0
#define REMOVED 1

/* Stored hashes are never EMPTY or REMOVED: those two move to the top. */
static uint64_t stored(uint64_t h)
{
    return h > REMOVED ? h : h + UINT64_C(0xfffffffffffffffd);
}

static int alloc(ow_htab *t, size_t cap)
{
    t->hash = calloc(cap, sizeof(*t->hash));
    t->val = calloc(cap, sizeof(*t->val));
    if (t->hash == NULL || t->val == NULL) {
        free(t->hash);
        free(t->val);
        t->hash = NULL;
        t->val = NULL;
        return OW_ENOMEM;
    }
    t->cap = cap;
    t->used = 0;
    t->removed = 0;
    return OW_OK;
}

static size_t cap_for(size_t n)
{
    size_t cap = 16;

    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

int ow_htab_init(ow_htab *t, size_t expect)
{
    memset(t, 0, sizeof(*t));
    return expect > 0 ? alloc(t, cap_for(expect)) : OW_OK;
}

void ow_htab_free(ow_htab *t)
{
    free(t->hash);
    free(t->val);
    memset(t, 0, sizeof(*t));
}

void ow_htab_clear(ow_htab *t)
{
    if (t->used + t->removed > 0)
        memset(t->hash, 0, t->cap * sizeof(*t->hash));
    t->used = 0;
    t->removed = 0;
}

/* The first slot at or after h's home that is empty or removed; the
 * table is never full. */
static size_t free_slot(const ow_htab *t, uint64_t h)
{
    size_t i = (size_t)h & (t->cap - 1);

    while (t->hash[i] > REMOVED)
        i = (i + 1) & (t->cap - 1);
    return i;
}

/* Rebuilds the table at capacity cap, dropping the removed marks. */
static int rehash(ow_htab *t, size_t cap)
{
    ow_htab old = *t;

    if (alloc(t, cap) != OW_OK) {
        *t = old;
        return OW_ENOMEM;
    }
    for (size_t i = 0; i < old.cap; i++) {
        if (old.hash[i] > REMOVED) {
            size_t j = free_slot(t, old.hash[i]);

            t->hash[j] = old.hash[i];
            t->val[j] = old.val[i];
            t->used++;
        }
    }
    free(old.hash);
    free(old.val);
    return OW_OK;
}

int ow_htab_put(ow_htab *t, uint64_t h, uintptr_t v)
{
    size_t i;

    /* A rebuild leaves room for an eighth as many pairs again. Sized for
     * the pairs alone, a table whose removals and puts keep it at a steady
     * size just under a power of two would be rebuilt at every put that
     * follows a removal; with the room, at most once per used / 8 of them. */
    if (2 * (t->used + t->removed + 1) > t->cap &&
        rehash(t, cap_for(t->used + 1 + (t->used + 1) / 8)) != OW_OK)
        return OW_ENOMEM;
    h = stored(h);
    i = free_slot(t, h);
    t->removed -= t->hash[i] == REMOVED;
    t->hash[i] = h;
    t->val[i] = v;
    t->used++;
    return OW_OK;
}

int ow_htab_next(const ow_htab *t, uint64_t h, ow_htab_walk *w, uintptr_t *v)
{
    if (t->cap == 0)
        return 0;
    h = stored(h);
    if (w->probes == 0)
        w->slot = (size_t)h & (t->cap - 1);
    while (w->probes < t->cap && t->hash[w->slot] != EMPTY) {
        size_t i = w->slot;

        w->slot = (w->slot + 1) & (t->cap - 1);
        w->probes++;
        if (t->hash[i] == h) {
            *v = t->val[i];
            return 1;
        }
    }
    w->probes = t->cap;
    return 0;
}

int ow_htab_has(const ow_htab *t, uint64_t h)
{
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t v;

    return ow_htab_next(t, h, &w, &v);
}

int ow_htab_remove(ow_htab *t, uint64_t h, uintptr_t v)
{
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t got;

    while (ow_htab_next(t, h, &w, &got)) {
        if (got == v) {
            size_t i = (w.slot + t->cap - 1) & (t->cap - 1);

            t->hash[i] = REMOVED;
            t->used--;
            t->removed++;
            return 1;
        }
    }
    return 0;
}

size_t ow_htab_bytes(const ow_htab *t)
{
    return sizeof(*t) + t->cap * (sizeof(*t->hash) + sizeof(*t->val));
}
