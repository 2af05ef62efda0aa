/*
 * Process metrics. Counters are defined once in OW_COUNTERS, an X-macro
 * list that generates the fields, the Prometheus names and the help text.
 * Everything is a relaxed atomic: written from lanes, the consumer thread
 * and delivery callbacks, read by the HTTP endpoint.
 */
#ifndef OW_METRICS_H
#define OW_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"
#include "ow/response.h"
#include "ow/shard.h"
#include "ow/util.h"

/* X(field, name, help) */
#define OW_COUNTERS(X)                                                                             \
    X(consumed, "order_worker_messages_consumed_total", "Messages consumed from the input topic.") \
    X(replays, "order_worker_replays_total",                                                       \
      "Results that published a stored response again (replayed: true).")                          \
    X(dead_lettered, "order_worker_dead_lettered_total",                                           \
      "Dead-letter copies of invalid messages, and notices of outputs too large, acknowledged.")   \
    X(outputs_too_large, "order_worker_outputs_too_large_total",                                   \
      "Outputs refused for their size and replaced by an OUTPUT_TOO_LARGE dead-letter notice.")    \
    X(transactions, "order_worker_db_transactions_total", "Database transactions run.")            \
    X(deadlocks, "order_worker_db_deadlocks_total",                                                \
      "Deciding transactions the database chose as a deadlock victim (retried one by one).")       \
    X(batch_fallbacks, "order_worker_batch_fallbacks_total",                                       \
      "Micro-batches redone one message at a time after a race.")                                  \
    X(offsets_stored, "order_worker_offsets_stored_total",                                         \
      "Offset advances stored after every result below them was acknowledged.")                    \
    X(commits, "order_worker_offset_commits_total", "Offset commits the group acknowledged.")      \
    X(commit_failures, "order_worker_offset_commit_failures_total",                                \
      "Offset commits that failed (the offsets are committed again later).")                       \
    X(rebalances, "order_worker_rebalances_total", "Partition assignments and revocations.")       \
    X(paused, "order_worker_backpressure_pauses_total",                                            \
      "Times the input partitions were paused because too much was in flight.")                    \
    X(dropped, "order_worker_jobs_abandoned_total",                                                \
      "Messages abandoned unacknowledged (revoked partition or shutdown); redelivered later.")     \
    X(keys_reused, "order_worker_idempotency_keys_reused_total",                                   \
      "Security events: a key sent again with a different request (IDEMPOTENCY_KEY_REUSED).")      \
    X(keys_rejected, "order_worker_malformed_keys_total",                                          \
      "Security events: messages rejected for a missing or malformed idempotency key.")            \
    X(cache_hits, "order_worker_cache_hits_total",                                                 \
      "Retries answered from the lane's retry cache, without the database.")                       \
    X(cache_misses, "order_worker_cache_misses_total",                                             \
      "Valid messages the retry cache could not answer (not cached, expired, other digest).")      \
    X(kafka_txn_commits, "order_worker_kafka_transactions_committed_total",                        \
      "Kafka transactions committed (exactly_once_v2): outputs and input offsets together.")       \
    X(kafka_txn_aborts, "order_worker_kafka_transactions_aborted_total",                           \
      "Kafka transactions aborted (exactly_once_v2); their partitions went back to the "           \
      "committed offsets.")                                                                        \
    X(input_skipped, "order_worker_input_skipped_offsets_total",                                   \
      "Input offsets the broker deleted before the worker consumed them (retention, "              \
      "DeleteRecords): at most that many requests were never decided.")

#define OW_HIST_BUCKETS 14

typedef struct {
    _Atomic uint64_t buckets[OW_HIST_BUCKETS + 1]; /* last: +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} ow_histogram;

typedef struct {
#define OW_COUNTER_FIELD(field, name, help) _Atomic uint64_t field;
    OW_COUNTERS(OW_COUNTER_FIELD)
#undef OW_COUNTER_FIELD
    _Atomic uint64_t results[OW_CODE_COUNT]; /* by result code */
    _Atomic uint64_t retries[4];             /* by ow_errclass */
    /* Exactly-once: the producer was fenced and the worker stopped; [0]
     * its transaction had outlived transaction.timeout.ms, [1] it had
     * not (another producer with its transactional id started). */
    _Atomic uint64_t fenced[2];
    /* W3C Trace Context headers ignored as invalid: [0] traceparent, [1]
     * tracestate (docs/contract.md, "Trace context"). */
    _Atomic uint64_t trace_invalid[2];
    ow_histogram db_latency;  /* one deciding transaction, incl. retries of it */
    ow_histogram e2e_latency; /* message timestamp to result acknowledged */
    /* User shards; n_shards is 0 without mysql.shards, and then
     * none of these is rendered. */
    _Atomic unsigned n_shards;
    _Atomic int shard_up[OW_SHARD_MAX];          /* its watch's last ping was answered */
    _Atomic int64_t shard_waiting[OW_SHARD_MAX]; /* messages queued in its lanes */
    _Atomic uint64_t shard_transactions[OW_SHARD_MAX];
} ow_metrics;

extern ow_metrics ow_stats;

#define OW_COUNT(field, n) \
    atomic_fetch_add_explicit(&ow_stats.field, (uint64_t)(n), memory_order_relaxed)

void ow_histogram_observe(ow_histogram *h, int64_t us);
/* Upper bound of bucket i in seconds (i < OW_HIST_BUCKETS). */
double ow_histogram_bound(size_t i);

/* Appends the Prometheus text exposition. lag_cb, when set, appends
 * per-partition lag lines. */
typedef void (*ow_metrics_extra_fn)(ow_buf *out, void *opaque);
int ow_metrics_render(ow_buf *out, ow_metrics_extra_fn extra, void *opaque);

#endif
