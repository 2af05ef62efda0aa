/*
 * ow-verify's exactly-once part (--read-committed): what a read_committed
 * consumer of the results and dead-letter topics must see when the worker
 * commits its outputs and input offsets in Kafka transactions, and what the
 * transactions cost: aborted records, the last stable offset held back
 * after a replica is killed, the time to recover from a broker kill.
 */
#ifndef OW_VERIFY_EOS_H
#define OW_VERIFY_EOS_H

#include <stddef.h>
#include <stdint.h>

#include "kit.h"

#define EOS_MAX_LOGS 64
#define EOS_MAX_PARTS 64

/* The last stable offset and high watermark of each results partition,
 * sampled by `ow-kit lso-watch` (-1 where a sample got no answer). */
typedef struct {
    long long *t; /* wall-clock ms of each sample */
    int64_t *lso; /* sample i, partition p at [i * parts + p] */
    int64_t *hw;
    size_t n;
    int parts;
} eos_timeline;

/* Loads FILE's "WALL_MS P:LSO:HW ..." lines; 0, or -1 (reported). */
int eos_timeline_load(const char *path, eos_timeline *tl);
void eos_timeline_free(eos_timeline *tl);

/* Waits at most timeout_ms until no transaction holds back the end of
 * topic (its last stable offset equals its high watermark on every
 * partition); returns the records still behind the last stable offset
 * then (0 when settled), or -1 when the offsets cannot be read. *waited_ms
 * gets the time it took. */
long long eos_settle(const char *bootstrap, const char *topic, int timeout_ms,
                     long long *waited_ms);

/* Records that a read_uncommitted consumer sees and a read_committed one
 * does not (the aborted ones, once nothing is open); *runs gets how many
 * runs of consecutive offsets they form per partition. */
long long eos_aborted_records(const kit_msgs *committed, const kit_msgs *uncommitted,
                              long long *runs);

/* Lines naming the event txn_aborted in the worker logs; -1 when one of
 * them cannot be read. */
long long eos_logged_aborts(const char *const *logs, int n);

typedef struct {
    long long after_kill_max_ms; /* the longest, from a replica kill to the LSO moving */
    long long after_kill_p50_ms; /* the median over the kills that held the LSO */
    int kills;                   /* replica kills in the faults file */
    int kills_held;              /* of them, those during which an LSO stood still */
    long long max_ms;            /* the longest stall of the run, whatever its cause */
} eos_stalls;

/* Stalls: times when a partition's LSO stood still while its high
 * watermark was past it (a transaction open). Replica kills are the
 * faults file's "kill MS PID" lines. */
void eos_lso_stalls(const eos_timeline *tl, const char *faults, eos_stalls *out);

/* Prints, for each "broker-kill MS NODE" line of the faults file, the time
 * from the kill to the next result a read_committed consumer could see
 * and to the moment every results partition had one; from the timeline
 * when there is one (the LSO moving), else from the results' timestamps.
 * Appends " nodeN:NEXT/ALL" per kill to out. */
void eos_recovery(const eos_timeline *tl, const kit_msgs *results, const char *faults, char *out,
                  size_t outsz);

#endif
