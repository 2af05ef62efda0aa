/*
 * Contiguous offset tracking for one partition. Messages finish out of order
 * (parallel lanes, asynchronous delivery reports), but a partition's
 * committed offset must never pass a message whose result was not
 * acknowledged. The tracker remembers every dispatched offset and reports the
 * highest offset below which everything is done. Pure, not thread-safe.
 */
#ifndef OW_OFFSETS_H
#define OW_OFFSETS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ow_offset_track ow_offset_track;

ow_offset_track *ow_offset_track_new(void);
void ow_offset_track_free(ow_offset_track **t);

/* Records a dispatched offset; offsets must strictly increase (OW_EINVAL). */
int ow_offset_track_add(ow_offset_track *t, int64_t offset);
/* Marks a recorded offset done (OW_ENOTFOUND if it was never added or is already
 * below the watermark). */
int ow_offset_track_done(ow_offset_track *t, int64_t offset);
/* Drops finished entries from the front. Returns 1 and sets *commit to the
 * offset to commit (last contiguous done offset + 1) when it moved since the
 * previous call, else 0. */
int ow_offset_track_advance(ow_offset_track *t, int64_t *commit);
/* Offsets recorded and not yet released by advance (done or not). */
size_t ow_offset_track_pending(const ow_offset_track *t);
/* The last value advance reported, or -1 if none. */
int64_t ow_offset_track_committed(const ow_offset_track *t);

#endif
