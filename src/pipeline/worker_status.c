/* What the worker's HTTP endpoint reports: consumer lag, readiness and
 * the database states (worker_parts.h). */

#include "metrics.h"
#include "ow/log.h"
#include "worker_parts.h"

/* What each database's watch says, into the shard gauges and db_ok; with
 * why, the reason of each database that does not answer. */
int ow_worker_databases_up(ow_worker *w, ow_buf *why)
{
    int all = 1;

    for (unsigned i = 0; i < w->n_dbs; i++) {
        ow_error e;
        ow_watch_state st = ow_store_watch_state(w->watches[i], &e);
        int up = st == OW_WATCH_UP;

        atomic_store(&ow_stats.shard_up[i], up);
        all &= up;
        if (!up && why != NULL && w->cfg->shards.n > 0)
            ow_buf_appendf(why, "shard %u unreachable (%s)\n", i,
                           st == OW_WATCH_UNKNOWN ? "not checked yet" : e.msg);
        else if (!up && why != NULL)
            ow_buf_appendf(why, "database unreachable (%s)\n",
                           st == OW_WATCH_UNKNOWN ? "not checked yet" : e.msg);
        if (why != NULL && ow_store_watch_nodes(w->watches[i]) > 1)
            ow_buf_appendf(why, "%s: node %s\n", ow_store_watch_name(w->watches[i]),
                           ow_store_watch_node(w->watches[i]));
    }
    atomic_store(&w->rs.db_ok, all);
    return all;
}

/* --- Operations endpoint ------------------------------------------------ */

typedef struct {
    ow_worker *w;
    ow_buf *out;
} lag_ctx;

static void lag_line(void *opaque, int32_t partition, int64_t stored, int64_t first)
{
    lag_ctx *c = opaque;
    int64_t lo = -1, hi = -1;
    int64_t at = stored;

    rd_kafka_get_watermark_offsets(c->w->consumer, c->w->cfg->topic_input, partition, &lo, &hi);
    if (at < 0)
        at = first >= 0 ? first : hi;
    /* What the broker deleted can no longer be consumed: it is not lag
     * (input_skipped says what was lost). */
    if (lo > at)
        at = lo;
    ow_buf_appendf(c->out, "order_worker_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n",
                   c->w->cfg->topic_input, (int)partition,
                   (long long)(hi >= at && at >= 0 ? hi - at : 0));
}

/* Consumer lag per assigned partition: the partition's end offset (as last
 * seen by the fetcher) minus the offset this replica has stored, or the log
 * start when that is later. The stored offset passes the transaction
 * markers and aborted records at a partition's end once it is drained
 * (ow_ledger_reached_end), so lag reaches 0 behind them, as `ow-kit lag`
 * and ow-verify count it. */
static void metrics_extra(ow_buf *out, void *opaque)
{
    ow_worker *w = opaque;
    lag_ctx c = {w, out};

    ow_worker_databases_up(w, NULL);
    ow_buf_appendf(out, "# HELP order_worker_consumer_lag Messages between the stored offset and "
                        "the end of each assigned partition.\n"
                        "# TYPE order_worker_consumer_lag gauge\n");
    ow_ledger_each_assigned(&w->ledger, lag_line, &c);
    ow_buf_appendf(out,
                   "# HELP order_worker_assigned_partitions Input partitions assigned to this "
                   "replica.\n# TYPE order_worker_assigned_partitions gauge\n"
                   "order_worker_assigned_partitions %d\n"
                   "# HELP order_worker_database_up 1 when the last database round trip worked.\n"
                   "# TYPE order_worker_database_up gauge\norder_worker_database_up %d\n"
                   "# HELP order_worker_broker_up 1 when the last broker check (every second) "
                   "was answered.\n"
                   "# TYPE order_worker_broker_up gauge\norder_worker_broker_up %d\n"
                   "# HELP order_worker_input_paused 1 while backpressure pauses the input.\n"
                   "# TYPE order_worker_input_paused gauge\norder_worker_input_paused %d\n"
                   "# HELP order_worker_inflight_messages Messages consumed and not yet "
                   "acknowledged.\n"
                   "# TYPE order_worker_inflight_messages gauge\norder_worker_inflight_messages "
                   "%lld\n"
                   "# HELP order_worker_inflight_bytes Bytes of messages in flight.\n"
                   "# TYPE order_worker_inflight_bytes gauge\norder_worker_inflight_bytes %lld\n",
                   atomic_load(&w->assigned), atomic_load(&w->rs.db_ok), atomic_load(&w->broker_ok),
                   w->paused, (long long)atomic_load(&w->inflight.messages),
                   (long long)atomic_load(&w->inflight.bytes));
}

static int ready(ow_buf *why, void *opaque)
{
    ow_worker *w = opaque;
    int ok = ow_worker_databases_up(w, why);

    if (!atomic_load(&w->broker_ok)) {
        ow_buf_appends(why, "broker unreachable\n");
        ok = 0;
    }
    if (atomic_load(&w->assigned) == 0) {
        ow_buf_appends(why, "no partitions assigned\n");
        ok = 0;
    }
    if (!atomic_load(&w->outputs_ok)) {
        ow_buf_appends(why, "output topics not checked yet\n");
        ok = 0;
    }
    if (atomic_load(&w->rs.stopping) || atomic_load(&w->rs.fatal)) {
        ow_buf_appends(why, "stopping\n");
        ok = 0;
    }
    return ok;
}

int ow_worker_start_http(ow_worker *w, ow_error *err)
{
    ow_metrics_http_hooks hooks = {metrics_extra, ready, w};

    if (w->cfg->metrics_port == 0)
        return OW_OK;
    return ow_metrics_http_start(w->cfg->metrics_address, (unsigned)w->cfg->metrics_port, &hooks,
                                 &w->http, err);
}
