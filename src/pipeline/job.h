/*
 * One consumed message, from dispatch until its outputs are acknowledged
 * (job.c). Private to the pipeline. Its ticket's counters belong to the
 * ledger: a job is settled through ow_job_settle only.
 */
#ifndef OW_JOB_H
#define OW_JOB_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger.h"
#include "ow/log.h"
#include "ow/request.h"
#include "ow/store.h"
#include "ow/trace.h"

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

struct ow_job_maker;

/* The trace context a job continues (W3C Trace Context): its input's
 * trace, or a new one (tracing.start_traces), and the worker's span for
 * the message, whose id every output and log line about it carries. */
typedef struct {
    /* The outputs' header: version 00, the trace id, the worker's span id
     * and the flags kept (OW_TRACE_FLAGS_KEPT). */
    char traceparent[OW_TRACEPARENT_LEN + 1];
    char trace_id[2 * OW_TRACE_ID_LEN + 1]; /* the log lines' fields */
    char span_id[2 * OW_SPAN_ID_LEN + 1];
    char flags[3];
    size_t state_len; /* the input's tracestate, copied unchanged; 0: none */
    char state[];
} ow_job_trace;

/* What a maker knows of the messages it makes jobs of: where they come
 * from, which every log line about one names, and whether a message
 * without a trace context starts one. */
typedef struct {
    const char *topic; /* NULL: not named */
    const char *group;
    int start_traces; /* tracing.start_traces */
} ow_job_context;

/* The in-flight budget (inflight.max_messages, inflight.max_bytes): the
 * messages between their dispatch and their last acknowledgement, and the
 * bytes they hold. A job counts in when the consumer thread dispatches it
 * (ow_job_count_in) and out when it ends; backpressure reads the budget
 * (worker.c), and the endpoint reports it. Control state, not a metric:
 * it lives with the worker, not in ow_stats. */
typedef struct {
    _Atomic int64_t messages;
    _Atomic int64_t bytes;
} ow_inflight;

/* One consumed message from dispatch until its outputs are acknowledged. */
typedef struct ow_job {
    struct ow_job *next;          /* lane queue; its maker's spares once ended */
    struct ow_job_maker *maker;   /* where it goes when it ends; NULL: freed */
    ow_ticket t;                  /* partition, epoch, offset, acknowledgements */
    int64_t timestamp_ms;         /* the message's timestamp, for end-to-end latency */
    size_t bytes;                 /* what it holds, counted against inflight.max_bytes */
    ow_inflight *inflight;        /* the budget it counts against; NULL before dispatch */
    const ow_job_context *ctx;    /* its maker's; NULL for a job of no maker */
    ow_job_trace *trace;          /* NULL: its outputs carry no trace context */
    char *key;                    /* raw key bytes, NULL when the message had none */
    char key_buf[OW_KEY_MAX + 1]; /* key points here when the key fits */
    size_t key_len;               /* the whole key's length */
    size_t out_key_len;           /* the bytes of it that outputs carry */
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

/* The thread that makes jobs (the consumer's poll thread) and what it keeps
 * from one message to the next. A job ends on whichever thread settles its
 * last acknowledgement (mostly the delivery poller); it then goes back to
 * its maker through a lock-free stack rather than free(), and the maker
 * takes the returned jobs all at once and makes new jobs of them. So a
 * job's memory is allocated and freed on the maker's thread, where glibc's
 * per-thread cache serves it, instead of the ending thread locking the
 * maker's heap arena for every job. One maker per thread; only its thread
 * calls ow_job_from_* and ow_job_maker_cleanup. */
typedef struct ow_job_maker {
    ow_job_limits lim;
    ow_job_context ctx; /* set by its owner after ow_job_maker_init; empty before */
    uint64_t trace_rng; /* span and trace ids; seeded by ow_job_maker_init */
    ow_request_scratch parse;
    ow_job *spare; /* ended jobs ready for reuse, linked by next */
    size_t n_spare;
    _Atomic(ow_job *) returned; /* jobs ended on any thread, linked by next */
} ow_job_maker;

void ow_job_maker_init(ow_job_maker *mk, const ow_job_limits *lim);
/* Frees the spares, the returned jobs and the parse scratch. Jobs still in
 * flight must have ended (or be abandoned for good) before. */
void ow_job_maker_cleanup(ow_job_maker *mk);

/* An empty job of no maker (the caller fills it in; ow_job_free frees it),
 * its tags set. NULL when out of memory. */
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
    /* Its headers, where the trace context is read; NULL when it had
     * none, so that a message without headers costs one comparison. */
    const rd_kafka_headers_t *headers;
} ow_job_input;

/* A job for a message, parsed and validated, made by mk on mk's thread;
 * its ticket is not tracked yet (ow_ledger_track on job->t). NULL when out
 * of memory. */
ow_job *ow_job_from_message(ow_job_maker *mk, const rd_kafka_message_t *m);
/* The same from the message's parts, for a caller that has no librdkafka
 * message (tools/ow_path.c measures this path over a fixed corpus). */
ow_job *ow_job_from_input(ow_job_maker *mk, const ow_job_input *in);
/* Ends a job on any thread: its payload and a long key are freed, and the
 * job goes back to its maker (or is freed when it has none). */
void ow_job_free(ow_job *job);
/* Frees the parsed request, the stored item and the raw bytes, keeping the
 * job itself (its key, ticket and acknowledgement count). */
void ow_job_free_payload(ow_job *job);
/* Turns a valid job whose record the database refused for its size
 * (OW_DECISION_TOO_LARGE: the server's max_allowed_packet shrank after the
 * message was read) into an invalid one answered 400, whose dead-letter
 * copy carries none of the original bytes (they were not kept for a valid
 * message) and names their length. OW_OK or OW_ENOMEM. */
int ow_job_refuse_too_large(ow_job *job);
/* The fields that end every log line about a job's message: OpenTelemetry's
 * messaging attributes naming the message, then, when it has a trace
 * context, OpenTelemetry's log fields for it (the worker's span). Lines
 * about a partition or a lane name them otherwise (docs/operations.md,
 * "Logs"). */
#define OW_F_JOB(job)                                                                             \
    OW_F_STR("messaging.system", "kafka"),                                                        \
        OW_F_OPT("messaging.destination.name", (job)->ctx != NULL ? (job)->ctx->topic : NULL),    \
        OW_F_NUMSTR("messaging.destination.partition.id", (job)->t.partition),                    \
        OW_F_INT("messaging.kafka.offset", (job)->t.offset),                                      \
        OW_F_OPT("messaging.consumer.group.name", (job)->ctx != NULL ? (job)->ctx->group : NULL), \
        OW_F_OPT("trace_id", (job)->trace != NULL ? (job)->trace->trace_id : NULL),               \
        OW_F_OPT("span_id", (job)->trace != NULL ? (job)->trace->span_id : NULL),                 \
        OW_F_OPT("trace_flags", (job)->trace != NULL ? (job)->trace->flags : NULL)

/* Security events: logs idempotency_key_reused at warn with the
 * user, the masked key and both digests' first 8 hex digits, and counts it. */
void ow_job_log_key_reused(const ow_job *job);
/* The consumer thread dispatched job: it counts against budget until it
 * ends. */
void ow_job_count_in(ow_job *job, ow_inflight *budget);
/* The job now holds bytes (the producer copied its outputs, and its
 * payload was freed): its count in the budget follows. */
void ow_job_holds(ow_job *job, size_t bytes);
/* Settles one of what the job's ticket waits for (ow_ledger_settle): its
 * holder's release, or an output's acknowledgement. The last one takes it
 * off the in-flight budget and frees it. */
void ow_job_settle(ow_ledger *l, ow_job *job, int ok);

#endif
