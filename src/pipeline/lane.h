/*
 * A lane: one thread, one connection to one database (a shard, or the only
 * database), a FIFO of the jobs whose user lives there and whose key
 * hashes to it (lane.c). Private to the pipeline. A lane depends only
 * downwards: what it needs comes in an ow_lane_env that the
 * worker builds, and it never reaches into the worker.
 */
#ifndef OW_LANE_INTERNAL_H
#define OW_LANE_INTERNAL_H

#include <pthread.h>

#include "lane_cache.h"
#include "ow/admit.h"
#include "ow/idgen.h"
#include "ow/store_watch.h"
#include "delivery.h"
#include "job.h"
#include "runstate.h"

typedef struct {
    const ow_config *cfg;
    ow_runstate *rs;
    ow_idgen *ids;
    ow_delivery *delivery; /* where decided jobs go */
    ow_ledger *ledger;
    size_t n_lanes; /* of the whole worker, over every database */
} ow_lane_env;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ow_job *head;
    ow_job *tail;
    size_t queued;
    uint64_t endings_seen; /* the ledger's endings when the queue was last looked through */
    int64_t linger_until;  /* while a round waits for its batch to fill (monotonic ms), else 0 */
    int stop;
    int exited;            /* the thread has left its loop (under mu) */
    _Atomic int cancelled; /* the stop cancelled its database call */
    pthread_t thread;
    int started;
    unsigned index; /* among all lanes of the worker, for the logs */
    unsigned shard; /* the database it decides on (0 without mysql.shards) */
    const ow_lane_env *env;
    ow_store *store;       /* its own connection to that database */
    ow_store_watch *watch; /* whether that database answers */
    uint64_t rng;
    ow_cache *cache; /* recent outcomes of this lane's keys */
    ow_admit admit;  /* a round's held keys and orders (the lane thread's) */
} ow_lane;

/* The lane of a job, with per_db lanes for each database: among the lanes
 * of its user's database, the one its key hashes to. So every message of
 * one (user, key) goes through one lane, in order, and a database that
 * hangs holds up only its own users' messages. A message without a
 * readable user id (invalid, answered without a database) goes to the
 * first database's lanes. */
size_t ow_lane_route(const ow_config *cfg, size_t per_db, const ow_job *job);
/* Starts lane number index, deciding on database shard (its connection
 * is made on first use), which watch watches. */
int ow_lane_start(ow_lane *lane, const ow_lane_env *env, unsigned index, unsigned shard,
                  ow_store_watch *watch, ow_error *err);
void ow_lane_enqueue(ow_lane *lane, ow_job *job);
/* Removes the queued (not yet started) jobs whose tickets are stale (of a
 * partition whose revoke began, or whose epoch ended); they end as not
 * done. For the consumer thread, which need not wait for the lane's next
 * round (a lane may be inside a database call for long). */
void ow_lane_drop_stale(ow_lane *lane);
void ow_lane_stop(ow_lane *lane);
/* Waits for the lane's thread and closes its connection. The lane's queue
 * stays usable (empty) until ow_lane_destroy: leaving the group after the
 * lanes stopped still drops revoked partitions from it. A lane still busy
 * at deadline_ms (monotonic) has its database call cancelled first: its
 * batch is rolled back and redelivered later. */
void ow_lane_join(ow_lane *lane, int64_t deadline_ms);
void ow_lane_destroy(ow_lane *lane);

#endif
