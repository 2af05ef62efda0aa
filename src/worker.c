/*
 * The consumer thread: group membership, dispatch to lanes, backpressure
 * and the worker's lifecycle. Which offsets may be stored is the ledger's
 * business (ow/ledger.h), producing and acknowledging outputs the output
 * stage's (output_internal.h), deciding the lanes' (lane_internal.h).
 * Delivery reports arrive on the producer's poller thread; the ledger
 * stores offsets from there (rd_kafka_offsets_store is thread-safe).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lane_internal.h"
#include "ow/http.h"
#include "ow/shard.h"
#include "ow/store_watch.h"
#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/metrics.h"
#include "ow/worker.h"

typedef struct {
    const ow_config *cfg;
    rd_kafka_t *consumer;
    rd_kafka_t *producer;
    ow_runstate rs;
    ow_ledger ledger;
    ow_output out;
    int out_ready;
    ow_lane_env env;
    ow_lane *lanes;
    size_t n_lanes;
    /* One watch per database (shard): lanes of shard s are
     * lanes[s * worker.lanes ...], and use watches[s]. */
    ow_store_watch **watches;
    unsigned n_dbs;
    ow_idgen ids;
    ow_job_limits limits;

    pthread_t poller;
    int poller_started;
    _Atomic int poller_stop;
    int paused;
    int64_t full_since_ms; /* in flight at the limit since then, unpaused; 0 = not */

    int subscribed;
    _Atomic int ever_assigned; /* the first assignment (possibly empty) arrived */
    int consumer_unsafe;       /* closing it could abort (see leave_group) */
    int consumer_closed;       /* the group was left cleanly */
    ow_stopguard guard;        /* bounds the whole stop (issue 9) */

    /* Readiness, for /readyz. */
    _Atomic int broker_ok;  /* the delivery poller's last metadata request was answered */
    _Atomic int assigned;   /* partitions currently assigned */
    _Atomic int outputs_ok; /* the output topics were found (issue 9, defect 6) */
    ow_http *http;
} ow_worker;

/* --- Offsets ------------------------------------------------------------ */

/* The ledger's store function: called with the ledger's lock held when a
 * partition's done watermark moves. */
static void store_offset(void *opaque, int32_t partition, int64_t offset)
{
    ow_worker *w = opaque;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;

    rd_kafka_topic_partition_list_add(l, w->cfg->topic_input, partition)->offset = offset;
    e = rd_kafka_offsets_store(w->consumer, l);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && l->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        OW_COUNT(offsets_stored, 1);
    else
        OW_LOG(OW_LOG_DEBUG, "offset_store_skipped", OW_F_INT("partition", partition),
               OW_F_INT("offset", offset), OW_F_STR("error", rd_kafka_err2str(e)));
    rd_kafka_topic_partition_list_destroy(l);
}

/* Every commit's result, periodic or explicit (issue 9, defect 9). */
static int count_commit(rd_kafka_resp_err_t err, const rd_kafka_topic_partition_list_t *offsets,
                        const char *when)
{
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return 1; /* nothing was stored since the last commit */
    for (int i = 0; err == RD_KAFKA_RESP_ERR_NO_ERROR && offsets != NULL && i < offsets->cnt; i++)
        err = offsets->elems[i].err;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        OW_COUNT(commits, 1);
        return 1;
    }
    OW_COUNT(commit_failures, 1);
    OW_LOG(OW_LOG_WARN, "commit_failed", OW_F_STR("when", when),
           OW_F_STR("error", rd_kafka_err2str(err)));
    return 0;
}

static void on_periodic_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                               rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    (void)rk;
    (void)opaque;
    count_commit(err, offsets, "periodic");
}

typedef struct {
    const char *when;
    int answered;
} commit_wait;

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    commit_wait *cw = opaque;

    (void)rk;
    count_commit(err, offsets, cw->when);
    cw->answered = 1;
}

/* Commits the stored offsets, waiting for the answer until deadline_ms at
 * most: with the group coordinator away a synchronous commit would wait
 * for its own 45 s timeout (issue 9, defect 3). What is not committed is
 * redelivered later, which the contract allows. */
static void commit_stored(ow_worker *w, const char *why, int64_t deadline_ms)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(w->consumer);
    commit_wait *cw = calloc(1, sizeof(*cw));
    rd_kafka_resp_err_t e;

    if (q == NULL || cw == NULL) {
        if (q != NULL)
            rd_kafka_queue_destroy(q);
        free(cw);
        return;
    }
    cw->when = why;
    e = rd_kafka_commit_queue(w->consumer, NULL, q, on_commit, cw);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        count_commit(e, NULL, why);
        cw->answered = 1;
    }
    while (!cw->answered && ow_clock_mono_ms() < deadline_ms) {
        int64_t left = deadline_ms - ow_clock_mono_ms();

        rd_kafka_queue_poll_callback(q, (int)(left < 100 ? (left > 0 ? left : 0) : 100));
    }
    if (!cw->answered)
        OW_LOG(OW_LOG_WARN, "commit_unanswered", OW_F_STR("when", why),
               OW_F_STR("error", "no answer from the group coordinator in time; what is not "
                                 "committed is redelivered"));
    rd_kafka_queue_destroy(q);
    /* An answer that comes after the queue is gone is dropped with it; the
     * callback never runs, so cw may go now. */
    free(cw);
}

/* --- Producer callbacks (poller thread) --------------------------------- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    ow_worker *w = opaque;

    (void)rk;
    ow_output_delivered(&w->out, m);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    ow_worker *w = opaque;

    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];

        rd_kafka_fatal_error(rk, why, sizeof(why));
        OW_LOG(OW_LOG_ERROR, "kafka_fatal", OW_F_STR("client", rd_kafka_name(rk)),
               OW_F_STR("error", why));
        ow_runstate_set_fatal(&w->rs, "fatal Kafka client error");
        return;
    }
    if (ow_kafka_refused(rk, err, reason)) {
        ow_runstate_set_fatal(&w->rs, "Kafka refused the worker's credentials or permissions");
        return;
    }
    OW_LOG(OW_LOG_WARN, "kafka_error", OW_F_STR("client", rd_kafka_name(rk)),
           OW_F_STR("error", rd_kafka_err2name((rd_kafka_resp_err_t)err)),
           OW_F_STR("reason", reason));
}

/* /readyz answers from broker_ok, refreshed here once a second, so that no
 * HTTP request waits on the broker (issue 9: a metadata call inside the
 * handler held the HTTP thread 1 s per probe while the broker was down). A
 * check returns in milliseconds while the broker answers; while it does not,
 * delivery reports wait up to BROKER_CHECK_TIMEOUT_MS more, and there are
 * none to wait for then. */
#define BROKER_CHECK_INTERVAL_MS 1000
#define BROKER_CHECK_TIMEOUT_MS 500

static int broker_reachable(ow_worker *w)
{
    const rd_kafka_metadata_t *md = NULL;
    int ok = rd_kafka_metadata(w->producer, 0, NULL, &md, BROKER_CHECK_TIMEOUT_MS) ==
                 RD_KAFKA_RESP_ERR_NO_ERROR &&
             md->broker_cnt > 0;

    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    return ok;
}

static void *poller_main(void *arg)
{
    ow_worker *w = arg;
    int64_t next_check = 0;

    while (!atomic_load(&w->poller_stop)) {
        rd_kafka_poll(w->producer, 100);
        ow_output_pump(&w->out);
        if (ow_clock_mono_ms() >= next_check) {
            atomic_store(&w->broker_ok, broker_reachable(w));
            next_check = ow_clock_mono_ms() + BROKER_CHECK_INTERVAL_MS;
        }
    }
    return NULL;
}

/* --- Rebalance (consumer thread, inside consumer_poll) ------------------- */

static void assign_partitions(ow_worker *w, rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_error_t *e;

    for (int i = 0; i < parts->cnt; i++) {
        if (ow_ledger_assign(&w->ledger, parts->elems[i].partition) != OW_OK)
            ow_runstate_set_fatal(&w->rs, "out of memory");
    }
    atomic_fetch_add(&w->assigned, parts->cnt);
    atomic_store(&w->ever_assigned, 1);
    e = rd_kafka_incremental_assign(w->consumer, parts);
    if (e != NULL) {
        OW_LOG(OW_LOG_ERROR, "assign_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
        ow_runstate_set_fatal(&w->rs, "incremental assign failed");
        return;
    }
    if (w->paused)
        rd_kafka_pause_partitions(w->consumer, parts);
}

/* The end of a wait during a revoke: the drain timeout, and at shutdown no
 * later than the stop's deadline. */
static int64_t revoke_deadline(const ow_worker *w)
{
    int64_t deadline = ow_clock_mono_ms() + w->cfg->rebalance_drain_timeout_ms;

    if (atomic_load(&w->rs.stopping) && w->rs.deadline_ms < deadline)
        deadline = w->rs.deadline_ms;
    return deadline;
}

/* Waits (bounded) until the revoked partitions have nothing in flight, so
 * that what was already decided gets acknowledged and committed here rather
 * than redone by the next owner. */
static void drain(ow_worker *w, const rd_kafka_topic_partition_list_t *parts)
{
    int64_t start = ow_clock_mono_ms();
    int64_t deadline = revoke_deadline(w);
    int32_t *ids = calloc((size_t)parts->cnt + 1, sizeof(*ids));

    if (ids == NULL)
        return;
    for (int i = 0; i < parts->cnt; i++)
        ids[i] = parts->elems[i].partition;
    if (!ow_ledger_wait_drained(&w->ledger, ids, (size_t)parts->cnt, deadline, &w->rs.fatal))
        OW_LOG(OW_LOG_WARN, "revoke_drain_timeout",
               OW_F_INT("timeout_ms", deadline > start ? deadline - start : 0));
    free(ids);
}

static void revoke_partitions(ow_worker *w, rd_kafka_topic_partition_list_t *parts)
{
    int lost = rd_kafka_assignment_lost(w->consumer);
    rd_kafka_error_t *e;

    for (int i = 0; i < parts->cnt; i++)
        ow_ledger_revoke_begin(&w->ledger, parts->elems[i].partition);
    for (int i = 0; i < parts->cnt; i++) {
        for (size_t k = 0; k < w->n_lanes; k++)
            ow_lane_drop_partition(&w->lanes[k], parts->elems[i].partition);
    }
    /* A lost assignment may already belong to another member: commit nothing. */
    if (!lost) {
        drain(w, parts);
        commit_stored(w, "revoke", revoke_deadline(w));
    }
    for (int i = 0; i < parts->cnt; i++)
        ow_ledger_revoke_end(&w->ledger, parts->elems[i].partition);
    atomic_fetch_sub(&w->assigned, parts->cnt);
    e = rd_kafka_incremental_unassign(w->consumer, parts);
    if (e != NULL) {
        OW_LOG(OW_LOG_WARN, "unassign_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
    }
    OW_LOG(OW_LOG_INFO, lost ? "partitions_lost" : "partitions_revoked",
           OW_F_INT("count", parts->cnt));
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    ow_worker *w = opaque;

    (void)rk;
    OW_COUNT(rebalances, 1);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        assign_partitions(w, parts);
        OW_LOG(OW_LOG_INFO, "partitions_assigned", OW_F_INT("count", parts->cnt),
               OW_F_INT("first", parts->cnt > 0 ? parts->elems[0].partition : -1));
    } else {
        revoke_partitions(w, parts);
    }
}

/* --- Consumer thread ----------------------------------------------------- */

static void dispatch(ow_worker *w, rd_kafka_message_t *m)
{
    ow_job *job = ow_job_from_message(&w->limits, m);
    int rewound = 0;
    int rc = job != NULL ? ow_ledger_track(&w->ledger, m->partition, m->offset, &job->t, &rewound)
                         : OW_ENOMEM;

    if (rewound)
        OW_LOG(OW_LOG_WARN, "partition_rewound", OW_F_INT("partition", m->partition),
               OW_F_INT("offset", m->offset));
    if (rc == OW_ENOTFOUND)
        OW_LOG(OW_LOG_WARN, "message_ignored", OW_F_INT("partition", m->partition),
               OW_F_INT("offset", m->offset));
    else if (rc != OW_OK)
        ow_runstate_set_fatal(&w->rs, "out of memory");
    if (rc != OW_OK) {
        ow_job_free(job);
        return;
    }
    OW_COUNT(consumed, 1);
    atomic_fetch_add(&ow_stats.inflight_messages, 1);
    atomic_fetch_add(&ow_stats.inflight_bytes, (int64_t)job->bytes);
    ow_lane_enqueue(&w->lanes[ow_lane_route(w->cfg, w->n_lanes / w->n_dbs, job)], job);
}

static void set_paused(ow_worker *w, int pause)
{
    rd_kafka_topic_partition_list_t *parts = NULL;

    if (rd_kafka_assignment(w->consumer, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    if (pause)
        rd_kafka_pause_partitions(w->consumer, parts);
    else
        rd_kafka_resume_partitions(w->consumer, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    w->paused = pause;
    if (pause)
        OW_COUNT(paused, 1);
    OW_LOG(OW_LOG_DEBUG, pause ? "input_paused" : "input_resumed",
           OW_F_INT("inflight", atomic_load(&ow_stats.inflight_messages)));
}

/* How long the input may stay at the in-flight limit, unpolled, before it
 * is paused (issue 12). A pause discards librdkafka's prefetched messages,
 * and while they are refetched the fetcher can sit out librdkafka 2.0's
 * fixed one-second backoff: replays stalled 0.6-0.8 s after each pause.
 * Not polling for a moment keeps the prefetch, and memory stays bounded by
 * queued.max.messages.kbytes; a longer wait (a database outage) pauses as
 * before, so that rebalance callbacks are served. */
#define BACKPRESSURE_HOLD_MS 200

/* Pauses the input when too much has been in flight for a while and
 * resumes it at half. */
static void backpressure(ow_worker *w)
{
    int64_t msgs = atomic_load(&ow_stats.inflight_messages);
    int64_t bytes = atomic_load(&ow_stats.inflight_bytes);
    const ow_config *c = w->cfg;
    int full = msgs >= c->inflight_max_messages || bytes >= c->inflight_max_bytes;
    int64_t now = ow_clock_mono_ms();

    if (!full || w->paused)
        w->full_since_ms = 0;
    else if (w->full_since_ms == 0)
        w->full_since_ms = now;
    if (!w->paused && full && now - w->full_since_ms >= BACKPRESSURE_HOLD_MS)
        set_paused(w, 1);
    else if (w->paused && msgs <= c->inflight_max_messages / 2 &&
             bytes <= c->inflight_max_bytes / 2)
        set_paused(w, 0);
}

static void on_consumer_message(ow_worker *w, rd_kafka_message_t *m)
{
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        dispatch(w, m);
    } else if (m->err == RD_KAFKA_RESP_ERR__FATAL) {
        ow_runstate_set_fatal(&w->rs, "fatal consumer error");
    } else if (ow_kafka_refused(w->consumer, m->err, rd_kafka_message_errstr(m))) {
        ow_runstate_set_fatal(&w->rs, "Kafka refused the worker's permissions");
    } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        OW_LOG(OW_LOG_WARN, "consumer_error", OW_F_STR("error", rd_kafka_message_errstr(m)),
               OW_F_INT("partition", m->partition));
    }
    rd_kafka_message_destroy(m);
}

/* What each database's watch says, into the shard gauges and db_ok; with
 * why, the reason of each database that does not answer. */
static int databases_up(ow_worker *w, ow_buf *why)
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
    ow_buf_appendf(c->out, "order_worker_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n",
                   c->w->cfg->topic_input, (int)partition,
                   (long long)(hi >= at && at >= 0 ? hi - at : 0));
}

/* Consumer lag per assigned partition: the partition's end offset (as last
 * seen by the fetcher) minus the offset this replica has stored. */
static void metrics_extra(ow_buf *out, void *opaque)
{
    ow_worker *w = opaque;
    lag_ctx c = {w, out};

    databases_up(w, NULL);
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
                   "# TYPE order_worker_input_paused gauge\norder_worker_input_paused %d\n",
                   atomic_load(&w->assigned), atomic_load(&w->rs.db_ok), atomic_load(&w->broker_ok),
                   w->paused);
}

static int ready(ow_buf *why, void *opaque)
{
    ow_worker *w = opaque;
    int ok = databases_up(w, why);

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

static int start_http(ow_worker *w, ow_error *err)
{
    ow_http_hooks hooks = {metrics_extra, ready, w};

    if (w->cfg->metrics_port == 0)
        return OW_OK;
    return ow_http_start(w->cfg->metrics_address, (unsigned)w->cfg->metrics_port, &hooks, &w->http,
                         err);
}

/* --- Lifecycle ----------------------------------------------------------- */

static int create_clients(ow_worker *w, ow_error *err)
{
    char errstr[512];
    rd_kafka_conf_t *pc = ow_kafka_conf_new(w->cfg, OW_KAFKA_PRODUCER, err);
    rd_kafka_conf_t *cc;

    if (pc == NULL)
        return OW_EINVAL;
    rd_kafka_conf_set_opaque(pc, w);
    rd_kafka_conf_set_dr_msg_cb(pc, on_delivery);
    rd_kafka_conf_set_error_cb(pc, on_error);
    w->producer = rd_kafka_new(RD_KAFKA_PRODUCER, pc, errstr, sizeof(errstr));
    if (w->producer == NULL) {
        rd_kafka_conf_destroy(pc);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "producer: %s", errstr);
    }
    pc = NULL; /* owned by the producer now */
    cc = ow_kafka_conf_new(w->cfg, OW_KAFKA_CONSUMER, err);
    if (cc == NULL)
        return OW_EINVAL;
    rd_kafka_conf_set_opaque(cc, w);
    rd_kafka_conf_set_error_cb(cc, on_error);
    rd_kafka_conf_set_rebalance_cb(cc, on_rebalance);
    rd_kafka_conf_set_offset_commit_cb(cc, on_periodic_commit);
    w->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, cc, errstr, sizeof(errstr));
    if (w->consumer == NULL) {
        rd_kafka_conf_destroy(cc);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "consumer: %s", errstr);
    }
    cc = NULL; /* owned by the consumer now */
    rd_kafka_poll_set_consumer(w->consumer);
    return OW_OK;
}

static int subscribe(ow_worker *w, ow_error *err)
{
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;

    rd_kafka_topic_partition_list_add(topics, w->cfg->topic_input, RD_KAFKA_PARTITION_UA);
    e = rd_kafka_subscribe(w->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    w->subscribed = e == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "subscribe to %s: %s",
                            w->cfg->topic_input, rd_kafka_err2str(e));
    return OW_OK;
}

/* The name of database i in logs: the shard and its address, or the
 * address of the only one. */
static void db_name(const ow_config *cfg, unsigned i, char *buf, size_t cap)
{
    if (cfg->shards.n == 0) {
        snprintf(buf, cap, "database %s:%lld/%s", cfg->mysql_host, (long long)cfg->mysql_port,
                 cfg->mysql_database);
        return;
    }
    snprintf(buf, cap, "shard %u (%s:%u/%s)", i, cfg->shards.addr[i].host, cfg->shards.addr[i].port,
             cfg->shards.addr[i].database);
}

/* A watch per database, started: each pings from its own thread. */
static int start_watches(ow_worker *w, ow_error *err)
{
    w->n_dbs = w->cfg->shards.n > 0 ? w->cfg->shards.n : 1;
    w->watches = calloc(w->n_dbs, sizeof(*w->watches));
    if (w->watches == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    atomic_store(&ow_stats.n_shards, w->cfg->shards.n);
    for (unsigned i = 0; i < w->n_dbs; i++) {
        ow_store_params p;
        char name[OW_SHARD_HOST_MAX + OW_SHARD_DB_MAX + 40];
        int rc;

        ow_store_params_for_shard(w->cfg, i, &p);
        db_name(w->cfg, i, name, sizeof(name));
        w->watches[i] = ow_store_watch_new(&p, name);
        if (w->watches[i] == NULL)
            return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
        rc = ow_store_watch_start(w->watches[i], err);
        if (rc != OW_OK)
            return rc;
    }
    return OW_OK;
}

/* Fails fast on what waiting cannot cure (a wrong password, an unknown
 * database, a shard map that disagrees), from each watch's first ping; a
 * database that only does not answer yet is waited for by its lanes. The
 * wait is bounded by the connect timeout, and the HTTP endpoint answers
 * /healthz meanwhile. */
static int check_databases(ow_worker *w, ow_error *err)
{
    int64_t deadline = ow_clock_mono_ms() + w->cfg->mysql_connect_timeout_s * 1000 + 2000;

    for (unsigned i = 0; i < w->n_dbs; i++) {
        ow_error why;
        ow_watch_state st = ow_store_watch_first(w->watches[i], deadline, &why);

        if (st == OW_WATCH_REFUSED) {
            *err = why;
            return why.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EINVAL : OW_EFATAL;
        }
        if (st != OW_WATCH_UP)
            OW_LOG(OW_LOG_WARN, "database_unreachable",
                   OW_F_STR("database", ow_store_watch_name(w->watches[i])),
                   OW_F_STR("error", st == OW_WATCH_UNKNOWN ? "no answer yet" : why.msg));
    }
    databases_up(w, NULL);
    return OW_OK;
}

/* A topic the broker calls unknown for this long is missing: a topic just
 * created can be unknown to a broker for a moment (seen in the end-to-end
 * tests against Kafka 4.1, which create their topics right before). */
#define TOPIC_MISSING_MS 10000

/* Asks the broker for one output topic through the producer, which is what
 * producing to it would do (a broker that creates topics on first use
 * creates it here). Returns OW_OK, OW_ERETRY (no answer yet), OW_ENOTFOUND
 * (unknown for now) or OW_EFATAL, with err naming the key and the topic. */
static int check_topic(ow_worker *w, const char *key, const char *topic, ow_error *err)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(w->producer, topic, NULL);
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR__TRANSPORT;
    int rc = OW_ERETRY;

    if (t != NULL)
        e = rd_kafka_metadata(w->producer, 0, t, &md, 2000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1) {
        rd_kafka_resp_err_t te = md->topics[0].err;

        if (te == RD_KAFKA_RESP_ERR_NO_ERROR && md->topics[0].partition_cnt > 0)
            rc = OW_OK;
        else if (te == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            rc = OW_ENOTFOUND;
        else if (te == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                 te == RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION)
            rc = OW_EFATAL;
        if (rc == OW_ENOTFOUND || rc == OW_EFATAL)
            ow_error_set(err, OW_ERRCLASS_FATAL, (int)te, "%s: topic %s: %s", key, topic,
                         rd_kafka_err2str(te));
    }
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    if (t != NULL)
        rd_kafka_topic_destroy(t);
    return rc;
}

/* Both output topics, then their size limits (output_internal.h). */
static int check_output_topics(ow_worker *w, ow_error *err)
{
    int rc = check_topic(w, "topic.results", w->cfg->topic_results, err);

    if (rc == OW_OK)
        rc = check_topic(w, "topic.dlq", w->cfg->topic_dlq, err);
    if (rc == OW_OK) {
        const char *const keys[OW_OUTPUT_TOPICS] = {"topic.results", "topic.dlq"};
        const char *const topics[OW_OUTPUT_TOPICS] = {w->cfg->topic_results, w->cfg->topic_dlq};

        rc = ow_output_check_topics(&w->out, keys, topics, OW_OUTPUT_TOPICS, err);
    }
    return rc;
}

/* Issue 9, defect 6: a missing output topic is found before anything is
 * consumed, not after a decision committed. A broker that does not answer
 * is waited for (the worker is not ready meanwhile). */
static int check_outputs(ow_worker *w, const volatile sig_atomic_t *stop, ow_error *err)
{
    int64_t missing_since = -1;
    int logged = 0;

    while (!*stop && !atomic_load(&w->rs.fatal)) {
        int rc = check_output_topics(w, err);

        if (rc == OW_OK) {
            atomic_store(&w->outputs_ok, 1);
            return OW_OK;
        }
        if (rc == OW_ENOTFOUND && missing_since < 0)
            missing_since = ow_clock_mono_ms();
        if (rc == OW_ENOTFOUND && ow_clock_mono_ms() - missing_since >= TOPIC_MISSING_MS)
            return OW_EFATAL;
        if (rc != OW_ERETRY && rc != OW_ENOTFOUND)
            return rc;
        if (!logged++)
            OW_LOG(OW_LOG_WARN, "output_topics_unavailable",
                   OW_F_STR("error", rc == OW_ENOTFOUND ? err->msg : "broker unreachable"));
        ow_error_clear(err);
        ow_sleep_ms(500, &w->rs.stop_sleep);
    }
    return OW_OK;
}

/* worker.lanes lanes for each database. */
static int start_lanes(ow_worker *w, ow_error *err)
{
    size_t per_db = (size_t)w->cfg->worker_lanes;

    w->env = (ow_lane_env){w->cfg, &w->rs, &w->ids, &w->out, &w->ledger, per_db * w->n_dbs};
    w->lanes = calloc(per_db * w->n_dbs, sizeof(*w->lanes));
    if (w->lanes == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    for (size_t i = 0; i < per_db * w->n_dbs; i++) {
        unsigned db = (unsigned)(i / per_db);
        int rc = ow_lane_start(&w->lanes[i], &w->env, (unsigned)i, db, w->watches[db], err);

        if (rc != OW_OK)
            return rc;
        w->n_lanes++;
    }
    return OW_OK;
}

/* The databases first: a configuration they refuse (a wrong password, a
 * shard map that disagrees) stops the worker before it joins the group,
 * and /healthz answers while they are checked. */
static int start(ow_worker *w, const volatile sig_atomic_t *stop, ow_error *err)
{
    const char *topics[] = {w->cfg->topic_input, w->cfg->topic_results, w->cfg->topic_dlq};
    int rc = start_watches(w, err);

    if (rc == OW_OK)
        rc = start_http(w, err);
    if (rc == OW_OK)
        rc = check_databases(w, err);
    if (rc == OW_OK)
        rc = create_clients(w, err);
    if (rc == OW_OK)
        rc = ow_output_init(&w->out, w->producer, w->cfg, &w->rs, &w->ledger, err);
    /* A missing ACL stops the worker before it decides anything. The
     * consumer asks: its metadata requests never auto-create a topic. */
    if (rc == OW_OK)
        rc = ow_kafka_check_topics(w->consumer, topics, 3, err);
    if (rc != OW_OK)
        return rc;
    w->out_ready = 1;
    w->limits.output_max = w->out.output_max;
    rc = start_lanes(w, err);
    if (rc != OW_OK)
        return rc;
    if (pthread_create(&w->poller, NULL, poller_main, w) != 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot start the delivery poller");
    w->poller_started = 1;
    rc = check_outputs(w, stop, err);
    if (rc == OW_OK && !*stop)
        rc = subscribe(w, err);
    return rc;
}

static int assignment_empty(rd_kafka_t *rk)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    int empty = 1;

    if (rd_kafka_assignment(rk, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        empty = parts->cnt == 0;
        rd_kafka_topic_partition_list_destroy(parts);
    }
    return empty;
}

/* Closes the consumer (leaves the group) within the stop's deadline; a
 * close that does not finish in time is given up and the handle later
 * destroyed without it (the group then drops this member after its
 * session timeout). */
static void close_consumer(ow_worker *w)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(w->consumer);
    rd_kafka_error_t *e = q != NULL ? rd_kafka_consumer_close_queue(w->consumer, q) : NULL;

    if (q == NULL)
        return;
    if (e != NULL) {
        OW_LOG(OW_LOG_WARN, "close_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
    } else {
        while (!rd_kafka_consumer_closed(w->consumer) && ow_clock_mono_ms() < w->rs.deadline_ms)
            rd_kafka_queue_poll_callback(q, 50);
        w->consumer_closed = rd_kafka_consumer_closed(w->consumer);
    }
    if (!w->consumer_closed)
        OW_LOG(OW_LOG_WARN, "left_without_close", OW_F_STR("reason", "stop deadline"));
    rd_kafka_queue_destroy(q);
}

/* Leaves the group. librdkafka 2.0's consumer_close can hang when a
 * cooperative assignment arrives while it closes (librdkafka issue #4527),
 * so unsubscribe first and serve the rebalance callbacks (which commit and
 * unassign) until the assignment is empty; messages still fetched are
 * dropped unprocessed, their offsets never stored. Everything here ends by
 * the stop's deadline (issue 9, defect 3). */
static void leave_group(ow_worker *w)
{
    int64_t deadline = w->rs.deadline_ms;
    int idle = 0;

    /* librdkafka 2.0's cooperative-sticky assignor aborts the process when
     * a consumer that joined but never received its first assignment is
     * closed (librdkafka issue #4312, fixed in 2.3): let the join finish
     * first. Messages that arrive meanwhile are not processed. A worker
     * that failed before subscribing has no join to wait for. */
    ow_runstate_step(&w->rs, "leave: first join");
    while (w->subscribed && !atomic_load(&w->ever_assigned) && ow_clock_mono_ms() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, 100);

        if (m != NULL)
            rd_kafka_message_destroy(m);
    }
    if (!atomic_load(&w->ever_assigned) && w->subscribed) {
        /* Closing could abort; nothing was assigned, so nothing is to be
         * committed, and the group drops this member after its session
         * timeout. */
        OW_LOG(OW_LOG_WARN, "left_without_close", OW_F_STR("reason", "no assignment yet"));
        w->consumer_unsafe = 1;
        return;
    }
    if (ow_clock_mono_ms() >= deadline) {
        OW_LOG(OW_LOG_WARN, "left_without_close", OW_F_STR("reason", "stop deadline"));
        return;
    }
    ow_runstate_step(&w->rs, "leave: unsubscribe");
    rd_kafka_unsubscribe(w->consumer);
    ow_runstate_step(&w->rs, "leave: revoke");
    while (ow_clock_mono_ms() < deadline && idle < 3) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, 100);

        if (m != NULL)
            rd_kafka_message_destroy(m);
        idle = assignment_empty(w->consumer) ? idle + 1 : 0;
    }
    ow_runstate_step(&w->rs, "leave: close");
    close_consumer(w);
}

/* Gives up the outputs that the shutdown flush could not deliver (their
 * broker is unreachable). Their delivery reports, purged rather than
 * acknowledged, finish their jobs as not done: no offset moves past them,
 * the next owner redelivers them, and no job outlives the worker. */
static void abandon_outputs(ow_worker *w)
{
    OW_LOG(OW_LOG_WARN, "flush_incomplete",
           OW_F_INT("unacknowledged", rd_kafka_outq_len(w->producer)));
    rd_kafka_purge(w->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(w->producer, 100); /* serves the purged reports */
}

/* The part of the stop's budget kept for committing and leaving the group
 * after the flush: a quarter, at most 2 s. */
static int64_t leave_reserve_ms(const ow_config *cfg)
{
    int64_t r = cfg->shutdown_timeout_ms / 4;

    return r < 2000 ? r : 2000;
}

/* Stops taking messages, lets lanes finish what they started, flushes
 * results, commits what is acknowledged and leaves the group, all within
 * shutdown.timeout_ms (issue 9, defect 3). */
static void shut_down(ow_worker *w)
{
    int64_t left;

    w->rs.deadline_ms = ow_clock_mono_ms() + w->cfg->shutdown_timeout_ms;
    ow_stopguard_start(&w->guard, &w->rs);
    atomic_store(&w->rs.stopping, 1);
    w->rs.stop_sleep = 1; /* wakes lanes sleeping between database retries */
    ow_runstate_step(&w->rs, "lanes");
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_stop(&w->lanes[i]);
    /* Lanes get what the flush and the leave do not keep. */
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_join(&w->lanes[i], w->rs.deadline_ms - 2 * leave_reserve_ms(w->cfg));
    ow_runstate_step(&w->rs, "watches");
    for (unsigned i = 0; w->watches != NULL && i < w->n_dbs; i++)
        ow_store_watch_stop(w->watches[i], w->rs.deadline_ms - 2 * leave_reserve_ms(w->cfg));
    ow_runstate_step(&w->rs, "flush");
    atomic_store(&w->poller_stop, 1);
    if (w->poller_started)
        pthread_join(w->poller, NULL);
    w->poller_started = 0;
    left = w->rs.deadline_ms - leave_reserve_ms(w->cfg) - ow_clock_mono_ms();
    if (w->producer != NULL && w->out_ready) {
        ow_output_pump(&w->out);
        if (rd_kafka_flush(w->producer, (int)(left > 0 ? left : 0)) != RD_KAFKA_RESP_ERR_NO_ERROR)
            abandon_outputs(w);
    }
    if (w->consumer != NULL) {
        /* Half of what is left, so that leaving the group has the rest. */
        left = w->rs.deadline_ms - ow_clock_mono_ms();
        ow_runstate_step(&w->rs, "commit");
        commit_stored(w, "shutdown", ow_clock_mono_ms() + (left > 0 ? left / 2 : 0));
        leave_group(w);
    }
}

static void destroy(ow_worker *w)
{
    ow_runstate_step(&w->rs, "destroy");
    ow_http_stop(&w->http);
    /* A member of the group that could not leave it by the deadline is not
     * destroyed: librdkafka's destroy would wait for the coordinator all
     * the same (6 s more with every broker down, seen in the mock test).
     * The process exits next; the group drops the member after its session
     * timeout. A consumer that never subscribed has no group to leave. */
    ow_runstate_step(&w->rs, "destroy: consumer");
    if (w->consumer != NULL && !w->consumer_unsafe && (w->consumer_closed || !w->subscribed))
        rd_kafka_destroy_flags(w->consumer,
                               w->consumer_closed ? 0 : RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    ow_runstate_step(&w->rs, "destroy: producer");
    if (w->producer != NULL)
        rd_kafka_destroy(w->producer);
    ow_ledger_destroy(&w->ledger);
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_destroy(&w->lanes[i]);
    free(w->lanes);
    for (unsigned i = 0; w->watches != NULL && i < w->n_dbs; i++)
        ow_store_watch_free(&w->watches[i]);
    free(w->watches);
    if (w->out_ready)
        ow_output_destroy(&w->out);
    ow_runstate_cleanup(&w->rs);
}

int ow_worker_run(const ow_config *cfg, const volatile sig_atomic_t *stop, ow_error *err)
{
    ow_worker w;
    uint64_t seed = (uint64_t)ow_clock_mono_us() ^ (uint64_t)getpid() << 20;
    int rc;

    memset(&w, 0, sizeof(w));
    ow_runstate_init(&w.rs);
    w.cfg = cfg;
    w.limits.request.max_bytes = (size_t)cfg->request_max_bytes;
    w.limits.request.max_orders = (size_t)cfg->request_max_orders;
    ow_idgen_init(&w.ids, (unsigned)(ow_rand64(&seed) >> 20), ow_clock_wall_ms);
    ow_ledger_init(&w.ledger, store_offset, &w);
    rc = start(&w, stop, err);
    if (rc == OW_OK) {
        OW_LOG(OW_LOG_INFO, "worker_started", OW_F_STR("topic", cfg->topic_input),
               OW_F_STR("group", cfg->kafka_group_id), OW_F_INT("lanes", cfg->worker_lanes),
               OW_F_INT("batch_max_messages", cfg->batch_max_messages),
               OW_F_INT("result_max_bytes", (int64_t)w.out.output_max));
        while (!*stop && !atomic_load(&w.rs.fatal)) {
            /* While paused, look again soon: the pause ends as soon as
             * acknowledgements bring the in-flight count down. */
            rd_kafka_message_t *m;

            if (w.full_since_ms != 0) { /* at the limit: wait, do not take more */
                ow_sleep_ms(1, NULL);
                backpressure(&w);
                continue;
            }
            m = rd_kafka_consumer_poll(w.consumer, w.paused ? 5 : 100);

            if (m != NULL)
                on_consumer_message(&w, m);
            backpressure(&w);
        }
    }
    OW_LOG(OW_LOG_INFO, "worker_stopping", OW_F_INT("fatal", atomic_load(&w.rs.fatal)));
    shut_down(&w);
    if (rc == OW_OK && atomic_load(&w.rs.fatal)) {
        rc = ow_runstate_first(&w.rs, err) && err->cls == OW_ERRCLASS_INVALID_INPUT ? OW_EINVAL
                                                                                    : OW_EFATAL;
        if (rc == OW_EFATAL)
            ow_error_set(err, OW_ERRCLASS_FATAL, 0, "stopped after a fatal error (see log)");
    }
    destroy(&w);
    ow_stopguard_end(&w.guard);
    OW_LOG(OW_LOG_INFO, "worker_stopped", OW_F_INT("clean", rc == OW_OK));
    return rc;
}
