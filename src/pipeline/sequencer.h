/*
 * The release order of exactly-once mode (sequencer.c). Private to the
 * pipeline.
 *
 * A Kafka transaction commits its outputs and the input offsets together,
 * and an offset covers every message before it in its partition. So that
 * every output in a committed transaction is covered by the offset
 * committed with it, a job's outputs are produced only once the outputs of
 * every earlier job of its partition (in the order the consumer thread
 * tracked them) were produced: lanes decide in parallel, and the sequencer
 * releases their jobs in order. The produced jobs of a partition are then
 * always a prefix of its tracked ones, and once the producer is flushed
 * the ledger's watermark is exactly the end of that prefix.
 *
 * A job given up without outputs (its lane stops, its database refuses it)
 * is a barrier: no later job of its partition is released in the epoch,
 * because its offset can never be committed past it; they are dropped.
 * An epoch that ends (a revoke, an aborted transaction) drops what waits.
 *
 * Dropped jobs are handed back to the caller, which settles them as not
 * done: the sequencer never settles, so its lock is never held across the
 * ledger's.
 */
#ifndef OW_SEQUENCER_H
#define OW_SEQUENCER_H

#include <pthread.h>
#include <stdint.h>

#include "job.h"

typedef struct ow_sequencer ow_sequencer;

ow_sequencer *ow_sequencer_new(void);
void ow_sequencer_free(ow_sequencer **s);

/* The consumer thread tracked job (its ticket is filled): it takes its place
 * in its partition's order. A job of a newer epoch than the partition's
 * ends the older epoch: what waited of it is added to *drop. OW_ENOMEM
 * when the partition could not be had (the job is then not in any order,
 * and the worker must stop). */
int ow_sequencer_append(ow_sequencer *s, ow_job *job, ow_job **drop);
/* job is decided. The jobs that may be produced now, job among them or not,
 * are put on *release in order (linked by seq_next); jobs that can never
 * be, on *drop. A caller that got jobs is its partition's releaser: it
 * produces them, then asks ow_sequencer_next for more until there are
 * none; meanwhile other callers get none of that partition, so that its
 * outputs are produced in order (one key's results stay in order). */
void ow_sequencer_ready(ow_sequencer *s, ow_job *job, ow_job **release, ow_job **drop);
/* The releaser of partition produced what it got: the next ready jobs, or
 * none (and it is no longer the releaser). */
void ow_sequencer_next(ow_sequencer *s, int32_t partition, ow_job **release);
/* job is given up without outputs: it leaves the order and becomes its
 * partition's barrier; waiting jobs behind it go on *drop. The caller
 * settles job itself. */
void ow_sequencer_abandon(ow_sequencer *s, ow_job *job, ow_job **drop);
/* The partition's epoch ended (partition < 0: every partition's): what
 * waits goes on *drop, and jobs still being decided are forgotten (their
 * ready will drop them). */
void ow_sequencer_close(ow_sequencer *s, int32_t partition, ow_job **drop);

#endif
