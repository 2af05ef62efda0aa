/*
 * One consumed message, from dispatch until its outputs are acknowledged
 * (job.c). Private to the pipeline. Its ticket's counters belong to the
 * ledger: a job is settled through ow_job_settle only.
 */
#ifndef OW_JOB_H
#define OW_JOB_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/ledger.h"
#include "ow/request.h"
#include "ow/store.h"

/* The largest key an output carries: longer keys (never valid ones, which
 * are at most OW_KEY_MAX bytes) are cut, with the original length in a
 * key-truncated-from header. */
#define OW_OUTPUT_KEY_MAX 1024

/* What an output of a job is. The producer carries a pointer to the job's
 * tag of that kind as the message's opaque, so that a delivery report
 * knows its job and what it acknowledges. */
typedef enum {
    OW_OUT_RESULT = 0,  /* the definitive result */
    OW_OUT_DEAD_LETTER, /* an invalid message's original bytes */
    OW_OUT_NOTICE,      /* OUTPUT_TOO_LARGE, in place of an output refused for its size */
    OW_OUT_INTERIM,     /* REQUEST_IN_PROGRESS, before the result */
    OW_OUT_KINDS
} ow_output_kind;

typedef struct {
    ow_output_kind kind;
} ow_output_tag;

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
    /* Exactly-once release order (sequencer.c), under the sequencer's lock. */
    struct ow_job *seq_next;
    unsigned char seq_queued;         /* in its partition's release order */
    unsigned char seq_ready;          /* decided: its outputs may go once all before it went */
    ow_output_tag tags[OW_OUT_KINDS]; /* tags[k].kind == k */
} ow_job;

/* What a job needs to know about the limits of its input and outputs. */
typedef struct {
    ow_request_limits request;
    size_t output_max; /* the most key + value bytes one output may carry */
} ow_job_limits;

/* An empty job (the caller fills it in), its tags set. NULL when out of
 * memory. */
ow_job *ow_job_new(void);
/* The job whose tag a delivery report carries. */
ow_job *ow_job_of_tag(ow_output_tag *tag);
/* What a job is made of: the parts of a consumed message it reads. */
typedef struct {
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms;
    const void *key; /* NULL when the message had none */
    size_t key_len;
    const void *value; /* NULL for a null value */
    size_t len;
} ow_job_input;

/* A job for a message, parsed and validated; its ticket is not tracked
 * yet (ow_ledger_track on job->t). NULL when out of memory. */
ow_job *ow_job_from_message(const ow_job_limits *lim, const rd_kafka_message_t *m);
/* The same from the message's parts, for a caller that has no librdkafka
 * message (tools/ow_path.c measures this path over a fixed corpus). */
ow_job *ow_job_from_input(const ow_job_limits *lim, const ow_job_input *in);
void ow_job_free(ow_job *job);
/* Frees the parsed request, the stored item and the raw bytes, keeping the
 * job itself (its key, ticket and acknowledgement count). */
void ow_job_free_payload(ow_job *job);
/* Security events: logs idempotency_key_reused at warn with the
 * user, the masked key and both digests' first 8 hex digits, and counts it. */
void ow_job_log_key_reused(const ow_job *job);
/* Settles one of what the job's ticket waits for (ow_ledger_settle): its
 * holder's release, or an output's acknowledgement. The last one takes it
 * off the in-flight counts and frees it. */
void ow_job_settle(ow_ledger *l, ow_job *job, int ok);

#endif
