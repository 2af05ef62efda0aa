/*
 * The output stage: produces results and dead-letter copies,
 * serves their delivery reports and tells the ledger. Private to the
 * pipeline. It knows no delivery mode: the mode (delivery.h) decides when
 * a job is published, and gives the output stage the rules below at start.
 *
 * Every output fits the producer's message limit whatever the input was:
 * keys are cut to OW_OUTPUT_KEY_MAX, dead-letter copies to what is left of the limit, and a configuration whose largest
 * valid request could get a result beyond the limit is refused at start.
 * An output topic whose max.message.bytes is below the producer's limit is
 * refused at start too. An output refused for its size all the same (the
 * topic's limit lowered while the worker runs) is replaced by a small
 * OUTPUT_TOO_LARGE notice on the dead-letter topic, so that its partition
 * moves on; it is never fatal and never retried.
 */
#ifndef OW_OUTPUT_INTERNAL_H
#define OW_OUTPUT_INTERNAL_H

#include <pthread.h>

#include "job.h"
#include "ow/config.h"
#include "runstate.h"

/* Bytes of every output's limit kept for its headers and record framing,
 * which librdkafka counts against message.max.bytes. The largest header
 * set, a dead letter's with a topic name of 249 bytes, an error message of
 * 199 and a tracestate of 512, takes less than 1,400 (unit.job_trace
 * checks it). */
#define OW_OUTPUT_RESERVE 2048

typedef struct ow_notice ow_notice;

/* What the delivery mode asks of the output stage. */
typedef struct {
    /* Called before an output is handed to the producer, on a lane's
     * thread inside the publish gate (exactly-once: the open transaction
     * now holds outputs). NULL: nothing to call. */
    void (*producing)(void *opaque);
    void *opaque;
    /* A notice that replaces an output refused for its size is produced at
     * once, on the lane's thread (exactly-once: inside the transaction,
     * before any later job of its partition is released), rather than
     * queued for the delivery poller. */
    int notices_at_once;
    /* A producer that failed fatally is replaced (at-least-once): an
     * output it refused is redone after the replacement, not fatal. */
    int producer_replaced;
} ow_output_rules;

typedef struct {
    rd_kafka_t *producer;
    const ow_config *cfg;
    ow_runstate *rs;
    ow_ledger *ledger;
    ow_output_rules rules;
    size_t message_max; /* the producer's message.max.bytes */
    size_t output_max;  /* key + value bytes one output may carry */
    /* The smallest key + value size a topic refused at delivery when that
     * failed a transaction (ow_output_refused); outputs this large are
     * replaced by notices from then on, so the redelivered message does not
     * fail the next one too. SIZE_MAX: none. */
    _Atomic size_t refused_at;
    pthread_mutex_t mu; /* guards notices */
    ow_notice *notices; /* OUTPUT_TOO_LARGE notices waiting to be produced */
} ow_output;

/* Reads the producer's effective message.max.bytes and refuses (class
 * INVALID_INPUT, naming the keys and sizes) a request.max_orders whose
 * largest result would not fit it. */
int ow_output_init(ow_output *o, rd_kafka_t *producer, const ow_config *cfg, ow_runstate *rs,
                   ow_ledger *ledger, const ow_output_rules *rules, ow_error *err);
void ow_output_destroy(ow_output *o);
/* The output topics one check asks about: results and dead letters. */
#define OW_OUTPUT_TOPICS 2

/* Refuses (class INVALID_INPUT, naming keys[i]) an output topic whose
 * max.message.bytes is below the producer's message.max.bytes: the broker
 * would refuse results the worker believes fit. One request asks about all
 * n (at most OW_OUTPUT_TOPICS) topics; a topic the broker does not describe
 * (no DescribeConfigs right, no answer within 10 s) is logged with the
 * reason and let through. */
int ow_output_check_topics(ow_output *o, const char *const *keys, const char *const *topics,
                           size_t n, ow_error *err);

/* The headers of a job's result and of an invalid job's dead-letter copy:
 * a new list, which the caller owns until the producer takes it. */
rd_kafka_headers_t *ow_output_result_headers(const ow_output *o, const ow_job *job, int replayed);
rd_kafka_headers_t *ow_output_dead_letter_headers(const ow_output *o, const ow_job *job);

/* Produces a decided or invalid job's outputs (its result, and the
 * dead-letter copy of an invalid message) now and releases the caller's
 * hold on the job; the last acknowledgement ends it. The job's payload is
 * freed once the producer copied it. */
void ow_output_publish(ow_output *o, ow_job *job);
/* Publishes a job's REQUEST_IN_PROGRESS answer; the caller keeps its hold,
 * and the job waits for this answer's acknowledgement too. */
void ow_output_in_progress(ow_output *o, ow_job *job);
/* The delivery report of an output of a producer being replaced: its job
 * ends not done, and is redone. */
void ow_output_given_up(ow_output *o, const rd_kafka_message_t *m);
/* The delivery report of an output (the producer's dr_msg_cb): the job
 * settles that output, and one refused for its size is replaced by a
 * notice; any other failure stops the worker. */
void ow_output_delivered(ow_output *o, const rd_kafka_message_t *m);
/* 1 when a delivery report says the output was purged (at a stop, or by
 * an abort) rather than refused. */
int ow_output_purged(const rd_kafka_message_t *m);
/* A transaction failed because the broker refused m: when it refused m
 * for its size, outputs at least that large are replaced by notices from
 * now on. */
void ow_output_refused(ow_output *o, const rd_kafka_message_t *m);
/* Produces the notices waiting; called by the delivery poller after each
 * poll, outside the delivery callback, so a full queue can drain first. */
void ow_output_pump(ow_output *o);
/* At a stop: produces the notices waiting and waits up to timeout_ms for
 * every output to be acknowledged; what is still unacknowledged then is
 * given up (purged), and its jobs end not done. */
void ow_output_flush(ow_output *o, int timeout_ms);

#endif
