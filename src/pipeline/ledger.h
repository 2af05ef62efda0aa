/*
 * The partition ledger: the one home of the rule "an offset is stored only
 * after every output of every earlier message was acknowledged".
 *
 * Each consumed message gets a ticket when it is tracked. A ticket belongs
 * to its partition's epoch; an epoch ends on every assign, revoke and
 * rewind, and a ticket of an ended epoch is stale: it can no longer move
 * the partition's offset. A ticket counts what its message still waits
 * for: its holder (whoever may still produce an output for it: one hold,
 * from ow_ledger_track) and every output produced and not yet
 * acknowledged. When the last of those is settled the ticket is finished,
 * and when that makes the partition's contiguous done watermark move, the
 * ledger calls its store function with the new offset. A failed output, or
 * a holder that gives its message up, finishes the ticket as not done,
 * which holds the watermark back for the rest of the epoch.
 *
 * Thread-safe: the consumer thread tracks and rebalances, lanes check
 * staleness, delivery reports acknowledge. The ledger owns its lock; the
 * store function is called with it held and must not call back. No Kafka:
 * unit-tested alone (tests/unit/test_ledger.c).
 */
#ifndef OW_LEDGER_H
#define OW_LEDGER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "offsets.h"

/* One tracked message. Embedded in the pipeline's job. Its counters are
 * the ledger's: only ow_ledger_* functions touch them. */
typedef struct {
    int32_t partition;
    uint32_t epoch;
    int64_t offset;
    _Atomic int pending; /* the hold and the outputs not yet acknowledged */
    _Atomic int failed;  /* something failed: the offset must never be stored */
} ow_ticket;

typedef void (*ow_ledger_store_fn)(void *opaque, int32_t partition, int64_t offset);

typedef struct {
    int assigned;
    int revoking;
    uint32_t epoch;
    size_t active;        /* tickets of this epoch not yet finished */
    int64_t first_offset; /* first offset tracked in this epoch, -1 if none */
    /* Where the input should go on: one past the last message tracked, the
     * partition's end, or where a rewind went back to; -1 if unknown. While
     * fresh (assigned, nothing seen yet) it is the group's committed
     * offset, which the ledger is not told. */
    int64_t next;
    int fresh;
    ow_offset_track *track;
} ow_ledger_part;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when a ticket finishes */
    ow_ledger_part *parts;
    size_t n_parts;
    ow_ledger_store_fn store;
    void *opaque;
    _Atomic uint64_t endings; /* revokes begun and epochs ended, ever */
} ow_ledger;

void ow_ledger_init(ow_ledger *l, ow_ledger_store_fn store, void *opaque);
void ow_ledger_destroy(ow_ledger *l);

/* A partition was assigned: a new epoch with a fresh tracker. OW_ENOMEM. */
int ow_ledger_assign(ow_ledger *l, int32_t partition);
/* A revoke starts: nothing new is tracked, and every ticket of the
 * partition is stale from now on. */
void ow_ledger_revoke_begin(ow_ledger *l, int32_t partition);
/* The revoke is over: the partition is unassigned and its epoch ends. */
void ow_ledger_revoke_end(ow_ledger *l, int32_t partition);

/* Every assigned partition goes back: fn gets its stored watermark and the
 * first offset tracked in the epoch (-1: none) and returns the offset the
 * caller moves the partition back to (-1: it stays where it is); then a
 * new epoch starts, so every ticket in flight is stale. For an aborted
 * Kafka transaction or a replaced producer. */
typedef int64_t (*ow_ledger_rewind_fn)(void *opaque, int32_t partition, int64_t stored,
                                       int64_t first);
int ow_ledger_rewind(ow_ledger *l, ow_ledger_rewind_fn fn, void *opaque);

/* What a consumed message, or the end of a partition, says about the
 * offsets before it. Offsets the input passes over are normal (transaction
 * markers, aborted or compacted records); offsets the broker deleted before
 * they were read are lost input, which only the broker's log start can
 * tell (the worker asks it). */
typedef struct {
    int rewound;      /* the partition went back within its assignment */
    int first;        /* the first of its assignment: expected at the group's committed offset */
    int64_t expected; /* otherwise the offset expected here, -1 if unknown */
} ow_ledger_seen;

/* Tracks a consumed message and fills its ticket, held by the caller. OW_ENOTFOUND when the
 * partition is not assigned to us (or is being revoked): the message is
 * to be ignored. An offset at or below the last one tracked means the
 * partition went back within one assignment (an offset reset): a new
 * epoch starts, so what is in flight from before can no longer move the
 * offset and the rewound messages are tracked afresh (seen->rewound = 1).
 * OW_ENOMEM when out of memory. */
int ow_ledger_track(ow_ledger *l, int32_t partition, int64_t offset, ow_ticket *t,
                    ow_ledger_seen *seen);
/* The consumer reached the partition's end at end (librdkafka's partition
 * EOF, which comes after every message below end): nothing below end is
 * still to be delivered. When the input passed offsets after the last
 * message tracked (transaction markers, aborted records), end - 1 is
 * tracked as done, so that the watermark reaches end once every message
 * tracked is done and the group's offset does not stay behind those
 * records. seen as for ow_ledger_track; OW_ENOTFOUND when the partition is
 * not assigned (or is being revoked). */
int ow_ledger_reached_end(ow_ledger *l, int32_t partition, int64_t end, ow_ledger_seen *seen);

/* 1 while the ticket's epoch is its partition's (a revoke may be under way). */
int ow_ledger_current(ow_ledger *l, const ow_ticket *t);
/* 1 when the ticket's epoch is over (revoked, re-assigned or rewound). */
int ow_ledger_stale(ow_ledger *l, const ow_ticket *t);
/* Counts what makes tickets stale (a revoke begun, an epoch ended). A
 * holder that read the count, then found its tickets current, need not ask
 * ow_ledger_stale again before the count has moved. That holds for tickets
 * it received current: the consumer thread both tracks a message and
 * ends epochs, so none ends between a job's ticket and its queue. */
uint64_t ow_ledger_endings(ow_ledger *l);

/* One more output is about to be produced for the ticket: it now waits for
 * that output's acknowledgement too. Only while the ticket is held. */
void ow_ledger_produced(ow_ticket *t);
/* Settles one of what the ticket waits for: an output's acknowledgement
 * (ok: it was acknowledged) or the holder's release (ok: every output it
 * meant to produce was produced). Returns 1 when it was the last: the
 * ticket is then finished, and *done says whether nothing failed; done
 * marks its offset done, which may store a new offset. */
int ow_ledger_settle(ow_ledger *l, ow_ticket *t, int ok, int *done);

/* Waits until no ticket of the given partitions is active, until
 * deadline_ms (monotonic) or until *abort is set. Returns 1 when drained. */
int ow_ledger_wait_drained(ow_ledger *l, const int32_t *partitions, size_t n, int64_t deadline_ms,
                           const _Atomic int *abort);

/* Calls fn for each assigned partition with the last stored offset (-1 if
 * none) and the first offset tracked in the epoch (-1 if none). */
typedef void (*ow_ledger_each_fn)(void *opaque, int32_t partition, int64_t stored, int64_t first);
void ow_ledger_each_assigned(ow_ledger *l, ow_ledger_each_fn fn, void *opaque);

#endif
