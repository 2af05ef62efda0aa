/*
 * A small hash table of (64-bit hash, value) pairs, open addressing with
 * linear probing. The caller keeps its entries where it likes and stores a
 * value that finds them (an index or a pointer); the table finds the
 * values stored under a hash, and the caller compares the entries to tell
 * two keys with one hash apart. Pure: no I/O.
 *
 * Every hash is accepted (the table reserves two internal codes and maps
 * hashes onto them away). Capacity grows to keep the table at most half
 * full; removed pairs leave a mark that ow_htab_put reuses and that a grow
 * or a clear drops.
 */
#ifndef OW_HTAB_H
#define OW_HTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *hash; /* per slot: empty, removed, or the stored hash */
    uintptr_t *val;
    size_t cap;     /* a power of two, or 0 before the first put */
    size_t used;    /* pairs stored */
    size_t removed; /* slots marked removed */
} ow_htab;

/* Where a walk over the values of one hash is; start it with
 * OW_HTAB_START. */
typedef struct {
    size_t slot;
    size_t probes;
} ow_htab_walk;

#define OW_HTAB_START ((ow_htab_walk){0, 0})

/* An empty table with room for expect pairs before it grows (0: none yet).
 * Returns 0 or OW_ENOMEM. */
int ow_htab_init(ow_htab *t, size_t expect);
void ow_htab_free(ow_htab *t);
/* Forgets every pair, keeping the memory. */
void ow_htab_clear(ow_htab *t);
/* Stores (h, v), growing the table when needed; a pair already stored is
 * stored again. Returns 0 or OW_ENOMEM. */
int ow_htab_put(ow_htab *t, uint64_t h, uintptr_t v);
/* The next value stored under h after *w (begin with OW_HTAB_START): 1 and
 * *v, or 0 when there is none left. */
int ow_htab_next(const ow_htab *t, uint64_t h, ow_htab_walk *w, uintptr_t *v);
/* 1 when a value is stored under h. */
int ow_htab_has(const ow_htab *t, uint64_t h);
/* Removes the pair (h, v) if it is stored; returns 1 when it was. */
int ow_htab_remove(ow_htab *t, uint64_t h, uintptr_t v);
/* The bytes the table holds (for memory bounds). */
size_t ow_htab_bytes(const ow_htab *t);

#endif
