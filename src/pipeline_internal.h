/*
 * Private to the pipeline (job.c, output.c, lane.c, worker.c): the state
 * every stage shares, and the job that carries one message through them.
 *
 * Layers, each depending only on the ones below it (issue 10):
 *   worker  (consumer thread, rebalance, backpressure, lifecycle)
 *   lane    (micro-batches, deciding)      -> output, ledger, store
 *   output  (results, dead letters, acks)  -> ledger
 *   job     (one message)                  -> ledger
 */
#ifndef OW_PIPELINE_INTERNAL_H
#define OW_PIPELINE_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ow/config.h"
#include "ow/ledger.h"
#include "ow/request.h"
#include "ow/store.h"

/* What the stages share: stop and failure flags and the stop deadline. */
typedef struct {
    _Atomic int fatal;
    _Atomic int stopping;            /* shutdown: lanes abandon what is queued */
    volatile int stop_sleep;         /* wakes backoff sleeps at shutdown or on a fatal error */
    int64_t deadline_ms;             /* shutdown deadline (monotonic), set before stopping */
    _Atomic int db_ok;               /* every database answers (their watches say so) */
    _Atomic(const char *) stop_step; /* the step a stop is in, for stop_overrun */
    pthread_mutex_t first_mu;        /* guards first */
    ow_error first;                  /* the error that stopped the worker, if one did */
} ow_runstate;

void ow_runstate_init(ow_runstate *rs);
void ow_runstate_cleanup(ow_runstate *rs);
/* Stops the worker after an error that retrying cannot fix; logs once. */
void ow_runstate_set_fatal(ow_runstate *rs, const char *why);
/* The same, keeping err as the reason the worker reports (its class says
 * whether the configuration is to blame: a shard map that disagrees). */
void ow_runstate_fail(ow_runstate *rs, const ow_error *err, const char *why);
/* The error that stopped the worker into *err; 0 when none was kept. */
int ow_runstate_first(ow_runstate *rs, ow_error *err);
/* 1 once stopping and past the stop deadline, or after a fatal error. */
int ow_runstate_give_up(ow_runstate *rs);
/* Records the step a stop has reached (a static string). */
void ow_runstate_step(ow_runstate *rs, const char *step);

/* The last resort of a stop (issue 9): every wait of a stop is bounded by
 * the deadline, but a librdkafka call that never returns (seen once in the
 * chaos tier: after the revoke of a first assignment) would hold the
 * process. The guard's thread ends the process OW_STOP_GRACE_MS after the
 * deadline with exit status 1 and a stop_overrun line naming the step.
 * Such an exit loses nothing: offsets are committed only for what was
 * acknowledged, and the rest is redelivered. */
#define OW_STOP_GRACE_MS 2000
typedef struct {
    ow_runstate *rs;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int started;
} ow_stopguard;

/* Starts the guard; rs->deadline_ms must be set. */
void ow_stopguard_start(ow_stopguard *g, ow_runstate *rs);
/* The stop finished: ends the guard. */
void ow_stopguard_end(ow_stopguard *g);

/* The largest key an output carries: longer keys (never valid ones, which
 * are at most OW_KEY_MAX bytes) are cut, with the original length in a
 * key-truncated-from header (issue 9, defect 1). */
#define OW_OUTPUT_KEY_MAX 1024

/* One consumed message from dispatch until its outputs are acknowledged. */
typedef struct ow_job {
    struct ow_job *next;  /* lane queue */
    ow_ticket t;          /* partition, epoch, offset, acknowledgements */
    int64_t timestamp_ms; /* the message's timestamp, for end-to-end latency */
    size_t bytes;         /* counted against inflight.max_bytes */
    char *key;            /* raw key bytes, NULL when the message had none */
    size_t key_len;       /* the whole key's length */
    size_t out_key_len;   /* the bytes of it that outputs carry */
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
    int dropped; /* abandoned during a retry: its partition was revoked */
} ow_job;

/* What a job needs to know about the limits of its input and outputs. */
typedef struct {
    ow_request_limits request;
    size_t output_max; /* the most key + value bytes one output may carry */
} ow_job_limits;

/* A job for a message tracked by the ledger under ticket t. NULL when out
 * of memory. */
ow_job *ow_job_from_message(const ow_job_limits *lim, const rd_kafka_message_t *m,
                            const ow_ticket *t);
void ow_job_free(ow_job *job);
/* Frees the parsed request, the stored item and the raw bytes, keeping the
 * job itself (its key, ticket and acknowledgement count). */
void ow_job_free_payload(ow_job *job);
/* Security events (issue 11): logs idempotency_key_reused at warn with the
 * user, the masked key and both digests' first 8 hex digits, and counts it. */
void ow_job_log_key_reused(const ow_job *job);
/* Ends a job: finishes its ticket (done = its outputs were acknowledged),
 * takes it off the in-flight counts and frees it. */
void ow_job_end(ow_ledger *l, ow_job *job, int done);
/* Accounts n acknowledgements of the job's outputs; the last ends it. */
void ow_job_ack(ow_ledger *l, ow_job *job, int n, int ok);

#endif
