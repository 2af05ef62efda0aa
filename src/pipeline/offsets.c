#include "offsets.h"

#include <stdlib.h>
#include <string.h>

#include "ow/error.h"

typedef struct {
    int64_t offset;
    int done;
} entry;

/* A ring of entries in increasing offset order. */
struct ow_offset_track {
    entry *ring;
    size_t cap;  /* power of two */
    size_t head; /* index of the oldest entry */
    size_t count;
    int64_t last_added;
    int64_t committed; /* last value reported by advance, -1 if none */
};

ow_offset_track *ow_offset_track_new(void)
{
    ow_offset_track *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    t->cap = 64;
    t->ring = calloc(t->cap, sizeof(*t->ring));
    if (t->ring == NULL) {
        free(t);
        return NULL;
    }
    t->last_added = -1;
    t->committed = -1;
    return t;
}

void ow_offset_track_free(ow_offset_track **t)
{
    if (t == NULL || *t == NULL)
        return;
    free((*t)->ring);
    free(*t);
    *t = NULL;
}

static entry *at(const ow_offset_track *t, size_t i)
{
    return &t->ring[(t->head + i) & (t->cap - 1)];
}

static int grow(ow_offset_track *t)
{
    size_t cap = t->cap * 2;
    entry *ring;

    if (cap < t->cap || cap > SIZE_MAX / sizeof(*ring))
        return OW_ENOMEM;
    ring = malloc(cap * sizeof(*ring));
    if (ring == NULL)
        return OW_ENOMEM;
    for (size_t i = 0; i < t->count; i++)
        ring[i] = *at(t, i);
    free(t->ring);
    t->ring = ring;
    t->cap = cap;
    t->head = 0;
    return OW_OK;
}

int ow_offset_track_add(ow_offset_track *t, int64_t offset)
{
    entry *e;

    if (offset < 0 || offset <= t->last_added)
        return OW_EINVAL;
    if (t->count == t->cap && grow(t) != OW_OK)
        return OW_ENOMEM;
    e = at(t, t->count);
    e->offset = offset;
    e->done = 0;
    t->count++;
    t->last_added = offset;
    return OW_OK;
}

int ow_offset_track_done(ow_offset_track *t, int64_t offset)
{
    size_t lo = 0;
    size_t hi = t->count;

    /* Binary search: the ring holds strictly increasing offsets. */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int64_t v = at(t, mid)->offset;

        if (v == offset) {
            at(t, mid)->done = 1;
            return OW_OK;
        }
        if (v < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return OW_ENOTFOUND;
}

int ow_offset_track_advance(ow_offset_track *t, int64_t *commit)
{
    int64_t last = -1;

    while (t->count > 0 && at(t, 0)->done) {
        last = at(t, 0)->offset;
        t->head = (t->head + 1) & (t->cap - 1);
        t->count--;
    }
    if (last < 0)
        return 0;
    t->committed = last + 1;
    *commit = t->committed;
    return 1;
}

size_t ow_offset_track_pending(const ow_offset_track *t)
{
    return t->count;
}

int64_t ow_offset_track_committed(const ow_offset_track *t)
{
    return t->committed;
}
