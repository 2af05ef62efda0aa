#include "metrics.h"

ow_metrics ow_stats;

/* 1 ms .. ~8 s, doubling. */
static const int64_t bounds_us[OW_HIST_BUCKETS] = {1000,    2000,    4000,    8000,   16000,
                                                   32000,   64000,   128000,  256000, 512000,
                                                   1024000, 2048000, 4096000, 8192000};

double ow_histogram_bound(size_t i)
{
    return (double)bounds_us[i] / 1e6;
}

void ow_histogram_observe(ow_histogram *h, int64_t us)
{
    size_t i = 0;

    if (us < 0)
        us = 0;
    while (i < OW_HIST_BUCKETS && us > bounds_us[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, (uint64_t)us, memory_order_relaxed);
}

static int render_histogram(ow_buf *out, const char *name, const char *help, ow_histogram *h)
{
    uint64_t cumulative = 0;
    int rc = ow_buf_appendf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);

    for (size_t i = 0; rc == OW_OK && i <= OW_HIST_BUCKETS; i++) {
        cumulative += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < OW_HIST_BUCKETS)
            rc = ow_buf_appendf(out, "%s_bucket{le=\"%g\"} %llu\n", name, ow_histogram_bound(i),
                                (unsigned long long)cumulative);
        else
            rc = ow_buf_appendf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                                (unsigned long long)cumulative);
    }
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, "%s_sum %.6f\n%s_count %llu\n", name,
                            (double)atomic_load(&h->sum_us) / 1e6, name,
                            (unsigned long long)atomic_load(&h->count));
    return rc;
}

/* One per-shard series, labelled shard="N". */
static int shard_series(ow_buf *out, const char *name, const char *type, const char *help,
                        const long long *v, unsigned n)
{
    int rc = ow_buf_appendf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);

    for (unsigned i = 0; rc == OW_OK && i < n; i++)
        rc = ow_buf_appendf(out, "%s{shard=\"%u\"} %lld\n", name, i, v[i]);
    return rc;
}

/* A counter with one label: its HELP and TYPE, then a series per value. */
static int labelled_counter(ow_buf *out, const char *name, const char *help, const char *label,
                            const char *const *values, const _Atomic uint64_t *counts, size_t n)
{
    int rc = ow_buf_appendf(out, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);

    for (size_t i = 0; rc == OW_OK && i < n; i++)
        rc = ow_buf_appendf(out, "%s{%s=\"%s\"} %llu\n", name, label, values[i],
                            (unsigned long long)atomic_load(&counts[i]));
    return rc;
}

static int render_shards(ow_buf *out)
{
    unsigned n = atomic_load(&ow_stats.n_shards);
    long long up[OW_SHARD_MAX], waiting[OW_SHARD_MAX], tx[OW_SHARD_MAX];
    int rc;

    if (n == 0)
        return OW_OK;
    if (n > OW_SHARD_MAX)
        n = OW_SHARD_MAX;
    for (unsigned i = 0; i < n; i++) {
        up[i] = atomic_load(&ow_stats.shard_up[i]);
        waiting[i] = (long long)atomic_load(&ow_stats.shard_waiting[i]); /* a gauge */
        tx[i] = (long long)atomic_load(&ow_stats.shard_transactions[i]);
    }
    rc = shard_series(out, "order_worker_shard_up", "gauge",
                      "1 while the shard answers its watch's pings (every second).", up, n);
    if (rc == OW_OK)
        rc = shard_series(out, "order_worker_shard_waiting_messages", "gauge",
                          "Messages queued in the shard's lanes, not yet decided.", waiting, n);
    if (rc == OW_OK)
        rc = shard_series(out, "order_worker_shard_transactions_total", "counter",
                          "Deciding transactions committed, by shard.", tx, n);
    return rc;
}

int ow_metrics_render(ow_buf *out, ow_metrics_extra_fn extra, void *opaque)
{
    /* ow_errclass from 1: OW_ERRCLASS_NONE is never retried. */
    static const char *const classes[3] = {"retriable", "fatal", "invalid_input"};
    static const char *const fence_causes[2] = {"transaction_timeout", "replica_id"};
    static const char *const trace_headers[2] = {"traceparent", "tracestate"};
    int rc = OW_OK;

#define OW_COUNTER_RENDER(field, name, help)                                                     \
    if (rc == OW_OK)                                                                             \
        rc = ow_buf_appendf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, \
                            name, (unsigned long long)atomic_load(&ow_stats.field));
    OW_COUNTERS(OW_COUNTER_RENDER)
#undef OW_COUNTER_RENDER
    if (rc == OW_OK)
        rc = ow_buf_appends(out, "# HELP order_worker_results_total Results acknowledged by the "
                                 "broker, by status and code.\n# TYPE order_worker_results_total "
                                 "counter\n");
    for (int c = 0; rc == OW_OK && c < OW_CODE_COUNT; c++)
        rc = ow_buf_appendf(out, "order_worker_results_total{status=\"%d\",code=\"%s\"} %llu\n",
                            ow_result_code_status((ow_result_code)c),
                            ow_result_code_name((ow_result_code)c),
                            (unsigned long long)atomic_load(&ow_stats.results[c]));
    if (rc == OW_OK)
        rc = labelled_counter(out, "order_worker_retries_total",
                              "Retries after a failure, by error class.", "class", classes,
                              ow_stats.retries + 1, 3);
    if (rc == OW_OK)
        rc = labelled_counter(
            out, "order_worker_kafka_producer_fenced_total",
            "Exactly-once: the producer was fenced and the worker stopped, by cause: "
            "transaction_timeout (its transaction was open longer than transaction.timeout.ms, so "
            "the broker aborted it, unless a replica with the same worker.replica_id started "
            "meanwhile) or replica_id (another producer with its transactional id started).",
            "cause", fence_causes, ow_stats.fenced, 2);
    if (rc == OW_OK)
        rc = labelled_counter(
            out, "order_worker_trace_headers_invalid_total",
            "W3C Trace Context headers of input messages ignored as invalid, by header: a "
            "tracestate counts when it breaks the rules or comes without a traceparent, and is "
            "not read beside an invalid traceparent. The message is decided as if it had none.",
            "header", trace_headers, ow_stats.trace_invalid, 2);
    if (rc == OW_OK)
        rc = render_histogram(out, "order_worker_db_transaction_seconds",
                              "Time to decide one micro-batch in the database, retries included.",
                              &ow_stats.db_latency);
    if (rc == OW_OK)
        rc = render_histogram(out, "order_worker_end_to_end_seconds",
                              "From the input message's timestamp to its result's acknowledgement.",
                              &ow_stats.e2e_latency);
    if (rc == OW_OK)
        rc = render_shards(out);
    if (rc == OW_OK && extra != NULL)
        extra(out, opaque);
    return rc;
}
