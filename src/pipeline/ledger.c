/* The partition ledger (ledger.h): epochs, tickets, acknowledgements and
 * the contiguous done watermark, under one lock. */
#include "ledger.h"

#include <stdlib.h>
#include <string.h>

#include "ow/error.h"
#include "ow/util.h"

void ow_ledger_init(ow_ledger *l, ow_ledger_store_fn store, void *opaque)
{
    memset(l, 0, sizeof(*l));
    atomic_init(&l->endings, 0);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->store = store;
    l->opaque = opaque;
}

void ow_ledger_destroy(ow_ledger *l)
{
    for (size_t i = 0; i < l->n_parts; i++)
        ow_offset_track_free(&l->parts[i].track);
    free(l->parts);
    l->parts = NULL;
    l->n_parts = 0;
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}

/* The state of a partition, growing the table when needed; mu held. */
static ow_ledger_part *part_get(ow_ledger *l, int32_t partition)
{
    if (partition < 0 || ow_grow_zeroed((void **)&l->parts, &l->n_parts, (size_t)partition + 1,
                                        sizeof(*l->parts)) != OW_OK)
        return NULL;
    return &l->parts[partition];
}

/* The partition of a ticket if the ticket's epoch is current; mu held. */
static ow_ledger_part *part_of(ow_ledger *l, const ow_ticket *t)
{
    ow_ledger_part *p;

    if (t->partition < 0 || (size_t)t->partition >= l->n_parts)
        return NULL;
    p = &l->parts[t->partition];
    return p->epoch == t->epoch ? p : NULL;
}

/* Ends the partition's epoch: tickets from before can no longer store an
 * offset. With track, a fresh tracker (OW_ENOMEM when it cannot be had). */
static int new_epoch(ow_ledger *l, ow_ledger_part *p, int track)
{
    atomic_fetch_add(&l->endings, 1);
    ow_offset_track_free(&p->track);
    p->track = track ? ow_offset_track_new() : NULL;
    p->epoch++;
    p->active = 0;
    p->first_offset = -1;
    return track && p->track == NULL ? OW_ENOMEM : OW_OK;
}

int ow_ledger_assign(ow_ledger *l, int32_t partition)
{
    ow_ledger_part *p;
    int rc = OW_ENOMEM;

    pthread_mutex_lock(&l->mu);
    p = part_get(l, partition);
    if (p != NULL) {
        p->assigned = 1;
        p->revoking = 0;
        p->fresh = 1;
        p->next = -1;
        rc = new_epoch(l, p, 1);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void ow_ledger_revoke_begin(ow_ledger *l, int32_t partition)
{
    ow_ledger_part *p;

    pthread_mutex_lock(&l->mu);
    p = part_get(l, partition);
    if (p != NULL)
        p->revoking = 1;
    atomic_fetch_add(&l->endings, 1);
    pthread_mutex_unlock(&l->mu);
}

void ow_ledger_revoke_end(ow_ledger *l, int32_t partition)
{
    ow_ledger_part *p;

    pthread_mutex_lock(&l->mu);
    p = part_get(l, partition);
    if (p != NULL) {
        p->assigned = 0;
        p->revoking = 0;
        new_epoch(l, p, 0);
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int ow_ledger_rewind(ow_ledger *l, ow_ledger_rewind_fn fn, void *opaque)
{
    int rc = OW_OK;

    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->n_parts; i++) {
        ow_ledger_part *p = &l->parts[i];
        int64_t to;

        if (!p->assigned)
            continue;
        to = fn(opaque, (int32_t)i, p->track != NULL ? ow_offset_track_committed(p->track) : -1,
                p->first_offset);
        if (to >= 0) {
            p->next = to;
            p->fresh = 0;
        }
        if (new_epoch(l, p, 1) != OW_OK)
            rc = OW_ENOMEM;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* What the partition expected before offset (the next message, or its end)
 * and where it goes on after it; mu held. */
static void seen_at(ow_ledger_part *p, int64_t offset, ow_ledger_seen *seen)
{
    seen->first = p->fresh;
    seen->expected = p->fresh ? -1 : p->next;
    p->fresh = 0;
    p->next = offset;
}

int ow_ledger_track(ow_ledger *l, int32_t partition, int64_t offset, ow_ticket *t,
                    ow_ledger_seen *seen)
{
    ow_ledger_part *p;
    int rc = OW_ENOTFOUND;

    *seen = (ow_ledger_seen){0, 0, -1};
    pthread_mutex_lock(&l->mu);
    p = part_get(l, partition);
    if (p != NULL && p->assigned && !p->revoking && p->track != NULL) {
        seen_at(p, offset + 1, seen);
        rc = ow_offset_track_add(p->track, offset);
        if (rc == OW_EINVAL) {
            seen->rewound = 1;
            rc = new_epoch(l, p, 1);
            if (rc == OW_OK)
                rc = ow_offset_track_add(p->track, offset);
        }
        if (rc == OW_OK) {
            if (p->first_offset < 0)
                p->first_offset = offset;
            p->active++;
            t->partition = partition;
            t->epoch = p->epoch;
            t->offset = offset;
            atomic_store(&t->pending, 1); /* the caller's hold */
            atomic_store(&t->failed, 0);
        }
    } else if (p == NULL) {
        rc = OW_ENOMEM;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int ow_ledger_reached_end(ow_ledger *l, int32_t partition, int64_t end, ow_ledger_seen *seen)
{
    ow_ledger_part *p;
    int rc = OW_ENOTFOUND;
    int64_t commit = -1;

    *seen = (ow_ledger_seen){0, 0, -1};
    pthread_mutex_lock(&l->mu);
    p = part_get(l, partition);
    if (p != NULL && p->assigned && !p->revoking && p->track != NULL) {
        seen_at(p, end, seen);
        /* OW_EINVAL when end - 1 is the last message tracked, or below it:
         * then there is nothing to pass over. The entry has no ticket: it
         * is done as soon as it is added. */
        rc = ow_offset_track_add(p->track, end - 1);
        if (rc == OW_OK && ow_offset_track_done(p->track, end - 1) == OW_OK &&
            ow_offset_track_advance(p->track, &commit) && l->store != NULL)
            l->store(l->opaque, partition, commit);
        if (rc == OW_EINVAL)
            rc = OW_OK;
    } else if (p == NULL) {
        rc = OW_ENOMEM;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int ow_ledger_current(ow_ledger *l, const ow_ticket *t)
{
    int current;

    pthread_mutex_lock(&l->mu);
    current = part_of(l, t) != NULL;
    pthread_mutex_unlock(&l->mu);
    return current;
}

int ow_ledger_stale(ow_ledger *l, const ow_ticket *t)
{
    ow_ledger_part *p;
    int stale;

    pthread_mutex_lock(&l->mu);
    p = part_of(l, t);
    stale = p == NULL || !p->assigned || p->revoking;
    pthread_mutex_unlock(&l->mu);
    return stale;
}

uint64_t ow_ledger_endings(ow_ledger *l)
{
    return atomic_load(&l->endings);
}

void ow_ledger_produced(ow_ticket *t)
{
    atomic_fetch_add(&t->pending, 1);
}

/* Finishes a ticket: done marks its offset done, which may store a new
 * offset; either way it no longer counts as active. */
static void finish(ow_ledger *l, const ow_ticket *t, int done)
{
    ow_ledger_part *p;
    int64_t commit = -1;

    pthread_mutex_lock(&l->mu);
    p = part_of(l, t);
    /* A ticket from an earlier epoch belongs to an assignment that is over. */
    if (p != NULL && p->track != NULL) {
        if (done && ow_offset_track_done(p->track, t->offset) == OW_OK &&
            ow_offset_track_advance(p->track, &commit) && l->store != NULL)
            l->store(l->opaque, t->partition, commit);
        if (p->active > 0)
            p->active--;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int ow_ledger_settle(ow_ledger *l, ow_ticket *t, int ok, int *done)
{
    if (!ok)
        atomic_store(&t->failed, 1);
    if (atomic_fetch_sub(&t->pending, 1) != 1)
        return 0;
    *done = !atomic_load(&t->failed);
    finish(l, t, *done);
    return 1;
}

/* mu held. */
static int drained(const ow_ledger *l, const int32_t *partitions, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int32_t k = partitions[i];

        if (k >= 0 && (size_t)k < l->n_parts && l->parts[k].active > 0)
            return 0;
    }
    return 1;
}

int ow_ledger_wait_drained(ow_ledger *l, const int32_t *partitions, size_t n, int64_t deadline_ms,
                           const _Atomic int *abort)
{
    int ok;

    pthread_mutex_lock(&l->mu);
    while (!drained(l, partitions, n) && ow_clock_mono_ms() < deadline_ms &&
           (abort == NULL || !atomic_load(abort))) {
        struct timespec ts;

        ow_deadline_after_ms(50, &ts);
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    ok = drained(l, partitions, n);
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void ow_ledger_each_assigned(ow_ledger *l, ow_ledger_each_fn fn, void *opaque)
{
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->n_parts; i++) {
        const ow_ledger_part *p = &l->parts[i];

        if (p->assigned && p->track != NULL)
            fn(opaque, (int32_t)i, ow_offset_track_committed(p->track), p->first_offset);
    }
    pthread_mutex_unlock(&l->mu);
}
