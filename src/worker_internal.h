/* Private to worker.c, lane.c and job.c. */
#ifndef OW_WORKER_INTERNAL_H
#define OW_WORKER_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ow/config.h"
#include "ow/http.h"
#include "ow/idgen.h"
#include "ow/offsets.h"
#include "ow/request.h"
#include "ow/store.h"

typedef struct ow_worker ow_worker;

/* Dead-letter copies keep at most this many bytes of the original value, so
 * that they fit the broker's and the producer's default message size
 * (1,000,000 bytes) with room for the headers. */
#define OW_DLQ_MAX_BYTES 983040

/* One consumed message from dispatch until its outputs are acknowledged. */
typedef struct ow_job {
    struct ow_job *next; /* lane queue */
    int32_t partition;
    uint32_t epoch; /* partition epoch at dispatch; stale after a revoke */
    int64_t offset;
    int64_t timestamp_ms; /* the message's timestamp, for end-to-end latency */
    size_t bytes;         /* counted against inflight.max_bytes */
    char *key;            /* raw key bytes, NULL when the message had none */
    size_t key_len;
    uint64_t key_hash;
    int valid;
    /* Valid messages. */
    ow_request req;
    ow_store_item item;
    /* Invalid messages: the 400 body, the original bytes and the first error. */
    ow_buf invalid_body;
    char *raw;
    size_t raw_len;
    size_t raw_original_len; /* raw_len is smaller when the copy was truncated */
    char first_error[200];
    size_t n_errors;
    int has_user;
    /* Lane bookkeeping. */
    int64_t not_before_ms;
    unsigned in_progress_rounds;
    int dropped;              /* abandoned during a retry: its partition was revoked */
    _Atomic int pending_acks; /* outputs produced and not yet acknowledged */
    _Atomic int failed;       /* an output failed: the offset must not be stored */
} ow_job;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ow_job *head;
    ow_job *tail;
    size_t queued;
    int stop;
    pthread_t thread;
    int started;
    unsigned index;
    ow_worker *w;
    ow_store *store;
    uint64_t rng;
    int64_t last_db_ms; /* last time the lane talked to the database */
} ow_lane;

typedef struct {
    int assigned;
    int revoking;
    uint32_t epoch;
    size_t active;        /* dispatched jobs of this epoch not yet finished */
    int64_t first_offset; /* first offset dispatched in this epoch, -1 if none */
    ow_offset_track *track;
} ow_part;

struct ow_worker {
    const ow_config *cfg;
    rd_kafka_t *consumer;
    rd_kafka_t *producer;
    rd_kafka_topic_partition_list_t *pause_list;
    ow_lane *lanes;
    size_t n_lanes;
    ow_idgen ids;
    ow_request_limits limits;

    pthread_mutex_t parts_mu; /* guards parts and n_parts */
    pthread_cond_t parts_cv;  /* signalled when a job finishes */
    ow_part *parts;
    size_t n_parts;

    pthread_t poller;
    int poller_started;
    _Atomic int poller_stop;
    _Atomic int fatal;
    _Atomic int stopping;    /* shutdown: lanes abandon what is queued */
    volatile int stop_sleep; /* wakes backoff sleeps at shutdown */
    int paused;
    int64_t deadline_ms; /* shutdown deadline (monotonic) */

    int subscribed;
    _Atomic int ever_assigned; /* the first assignment (possibly empty) arrived */
    int consumer_unsafe;       /* closing it could abort (see leave_group) */

    /* Readiness, for /readyz. */
    _Atomic int db_ok;    /* the last database round trip of any lane worked */
    _Atomic int assigned; /* partitions currently assigned */
    ow_http *http;
};

/* job.c */
ow_job *ow_job_from_message(ow_worker *w, const rd_kafka_message_t *m, uint32_t epoch);
void ow_job_free(ow_job *job);
/* Security events (issue 11): logs idempotency_key_reused at warn with the
 * user, the masked key and both digests' first 8 hex digits, and counts it. */
void ow_job_log_key_reused(const ow_job *job);
/* Frees the parsed request, the stored item and the raw bytes, keeping the
 * job itself (its key, offset and acknowledgement count). */
void ow_job_free_payload(ow_job *job);

/* worker.c */
/* Called when a job is over: done = its outputs were acknowledged. */
void ow_worker_finish_job(ow_worker *w, ow_job *job, int done);
/* Accounts n acknowledgements (ok or failed) of a job's outputs; the last
 * one finishes the job. */
void ow_worker_ack(ow_worker *w, ow_job *job, int n, int ok);
/* The opaque of REQUEST_IN_PROGRESS results. */
extern void *const ow_in_progress_token;
/* 1 when the job's partition was revoked (or re-assigned) since dispatch. */
int ow_worker_job_stale(ow_worker *w, const ow_job *job);
void ow_worker_set_fatal(ow_worker *w, const char *why);
/* Records whether the database answered the last round trip. */
void ow_worker_db_seen(ow_worker *w, int ok);

/* lane.c */
int ow_lane_start(ow_lane *lane, ow_worker *w, unsigned index, ow_error *err);
void ow_lane_enqueue(ow_lane *lane, ow_job *job);
/* Removes queued (not yet started) jobs of a partition; they are finished
 * as not done. */
void ow_lane_drop_partition(ow_lane *lane, int32_t partition);
void ow_lane_stop(ow_lane *lane);
/* Waits for the lane's thread and closes its connection. The lane's queue
 * stays usable (empty) until ow_lane_destroy: leaving the group after the
 * lanes stopped still drops revoked partitions from it. */
void ow_lane_join(ow_lane *lane);
void ow_lane_destroy(ow_lane *lane);

#endif
