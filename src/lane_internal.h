/*
 * A lane: one thread, one database connection, a FIFO of jobs whose keys
 * hash to it (lane.c). Private to the pipeline. A lane depends only
 * downwards (issue 10): what it needs comes in an ow_lane_env that the
 * worker builds, and it never reaches into the worker.
 */
#ifndef OW_LANE_INTERNAL_H
#define OW_LANE_INTERNAL_H

#include <pthread.h>

#include "ow/cache.h"
#include "ow/idgen.h"
#include "output_internal.h"
#include "pipeline_internal.h"

typedef struct {
    const ow_config *cfg;
    ow_runstate *rs;
    ow_idgen *ids;
    ow_output *out;
    ow_ledger *ledger;
} ow_lane_env;

/* A lane's connections to user shards (issue 14, lane_shard.c). */
typedef struct ow_lane_shards ow_lane_shards;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ow_job *head;
    ow_job *tail;
    size_t queued;
    int stop;
    int exited;            /* the thread has left its loop (under mu) */
    _Atomic int cancelled; /* the stop cancelled its database call */
    pthread_t thread;
    int started;
    unsigned index;
    const ow_lane_env *env;
    ow_store *store;
    uint64_t rng;
    int64_t last_db_ms;     /* last time the lane talked to the database */
    ow_cache *cache;        /* recent outcomes of this lane's keys (issue 12) */
    ow_lane_shards *shards; /* NULL without mysql.shards; store is then shard 0's */
} ow_lane;

int ow_lane_start(ow_lane *lane, const ow_lane_env *env, unsigned index, ow_error *err);
void ow_lane_enqueue(ow_lane *lane, ow_job *job);
/* Removes queued (not yet started) jobs of a partition; they end as not
 * done. */
void ow_lane_drop_partition(ow_lane *lane, int32_t partition);
void ow_lane_stop(ow_lane *lane);
/* Waits for the lane's thread and closes its connection. The lane's queue
 * stays usable (empty) until ow_lane_destroy: leaving the group after the
 * lanes stopped still drops revoked partitions from it. A lane still busy
 * at deadline_ms (monotonic) has its database call cancelled first: its
 * batch is rolled back and redelivered later (issue 9). */
void ow_lane_join(ow_lane *lane, int64_t deadline_ms);
void ow_lane_destroy(ow_lane *lane);

/* The lane's retry cache (lane_cache.c, issue 12): its share of
 * cache.max_bytes, none when 0. */
int ow_lane_cache_init(ow_lane *lane);
void ow_lane_cache_free(ow_lane *lane);
/* A hit with the job's digest: the job gets the stored answer as a replay
 * and returns 1. */
int ow_lane_cache_answer(ow_lane *lane, ow_job *job);
/* After the deciding transaction committed: keeps items' recorded answers,
 * aged from since_ms (monotonic), taken before the transaction began. */
void ow_lane_cache_fill(ow_lane *lane, const ow_store_item *items, size_t n, int64_t since_ms);

/* One deciding attempt of items[0..n) on st (shard -1 without shards,
 * else the shard, for the logs), timed from t0_us: counts it. OW_OK:
 * decided. OW_ERETRY: a transient failure (in err) worth another attempt.
 * OW_EFATAL: abandon the batch, for an error retrying cannot fix (logged;
 * the worker stops), a stop, or a call the stop cancelled (issue 9). */
int ow_lane_attempt(ow_lane *lane, ow_store *st, ow_store_item *items, size_t n, int shard,
                    unsigned attempt, int64_t t0_us, ow_error *err);
/* Logs the retry, sleeps its backoff; 1 when the worker gives up meanwhile. */
int ow_lane_backoff(ow_lane *lane, int shard, unsigned attempt, const ow_error *err);

/* --- Shards (lane_shard.c). All of these need lane->shards != NULL, except
 * start and free. --- */
/* Connects nothing yet: a store per shard (the lane's own is shard 0). */
int ow_lane_shards_start(ow_lane *lane, ow_error *err);
void ow_lane_shards_free(ow_lane *lane);
/* Decides valid[0..nv) (items alike) one transaction per shard. The jobs
 * of a shard that is down are marked parked, undecided. Returns OW_OK or
 * OW_EFATAL (stop, or an error retrying cannot fix). */
int ow_lane_shards_decide(ow_lane *lane, ow_job **valid, ow_store_item *items, size_t nv);
/* Moves the parked jobs among jobs[0..*n) to the parked list and removes
 * them from jobs (keeping the others' order). Call it before publishing
 * the rest. Takes mu. */
void ow_lane_shards_park(ow_lane *lane, ow_job **jobs, size_t *n);
/* 1 when a parked job has job's key (the job must wait); lowers *wake to
 * its shard's next probe. Called with mu held. */
int ow_lane_shards_blocked(const ow_lane *lane, const ow_job *job, int64_t *wake);
/* Probes the down shards that are due; an answering shard's parked jobs
 * go back to the front of the queue. Returns wake lowered to the next
 * probe. Called with mu held (released during a probe). */
int64_t ow_lane_shards_tick(ow_lane *lane, int64_t wake);
/* Takes the parked jobs of a partition, or all of them, off the parked
 * list (a list linked by next). Called with mu held. */
ow_job *ow_lane_shards_take_partition(ow_lane *lane, int32_t partition);
ow_job *ow_lane_shards_take_all(ow_lane *lane);
/* The idle check of every shard that is up. */
void ow_lane_shards_ping(ow_lane *lane);
/* From the stopping thread: cancels the call in progress on every shard's
 * connection but the lane's own (issue 9). */
void ow_lane_shards_cancel(ow_lane *lane);

#endif
