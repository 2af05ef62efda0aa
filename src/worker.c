/*
 * The consumer thread: group membership, dispatch to lanes, offsets,
 * backpressure and shutdown. Delivery reports arrive on the producer's
 * poller thread and store offsets directly (rd_kafka_offsets_store is
 * thread-safe); the partition table is shared under parts_mu.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/metrics.h"
#include "ow/worker.h"
#include "worker_internal.h"

/* --- Partitions ---------------------------------------------------------- */

/* The state of a partition, growing the table when needed; parts_mu held. */
static ow_part *part_get(ow_worker *w, int32_t partition)
{
    if (partition < 0)
        return NULL;
    if ((size_t)partition >= w->n_parts) {
        size_t n = (size_t)partition + 16;
        ow_part *p = realloc(w->parts, n * sizeof(*p));

        if (p == NULL)
            return NULL;
        memset(p + w->n_parts, 0, (n - w->n_parts) * sizeof(*p));
        w->parts = p;
        w->n_parts = n;
    }
    return &w->parts[partition];
}

int ow_worker_job_stale(ow_worker *w, const ow_job *job)
{
    int stale;

    pthread_mutex_lock(&w->parts_mu);
    stale = (size_t)job->partition >= w->n_parts || w->parts[job->partition].epoch != job->epoch ||
            !w->parts[job->partition].assigned || w->parts[job->partition].revoking;
    pthread_mutex_unlock(&w->parts_mu);
    return stale;
}

void ow_worker_set_fatal(ow_worker *w, const char *why)
{
    if (atomic_exchange(&w->fatal, 1) == 0)
        OW_LOG(OW_LOG_ERROR, "worker_fatal", OW_F_STR("reason", why));
    w->stop_sleep = 1;
}

void ow_worker_db_seen(ow_worker *w, int ok)
{
    atomic_store(&w->db_ok, ok);
}

static void store_offset(ow_worker *w, int32_t partition, int64_t offset)
{
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

void ow_worker_finish_job(ow_worker *w, ow_job *job, int done)
{
    ow_part *p;
    int64_t commit = -1;

    pthread_mutex_lock(&w->parts_mu);
    p = (size_t)job->partition < w->n_parts ? &w->parts[job->partition] : NULL;
    /* A job from an earlier epoch belongs to an assignment that is over. */
    if (p != NULL && p->epoch == job->epoch && p->track != NULL) {
        if (done && ow_offset_track_done(p->track, job->offset) == OW_OK &&
            ow_offset_track_advance(p->track, &commit))
            store_offset(w, job->partition, commit);
        if (p->active > 0)
            p->active--;
    }
    pthread_cond_broadcast(&w->parts_cv);
    pthread_mutex_unlock(&w->parts_mu);
    if (!done)
        OW_COUNT(dropped, 1);
    atomic_fetch_sub(&ow_stats.inflight_messages, 1);
    atomic_fetch_sub(&ow_stats.inflight_bytes, (int64_t)job->bytes);
    ow_job_free(job);
}

void ow_worker_ack(ow_worker *w, ow_job *job, int n, int ok)
{
    if (!ok)
        atomic_store(&job->failed, 1);
    if (atomic_fetch_sub(&job->pending_acks, n) == n) {
        int done = !atomic_load(&job->failed);

        if (done && job->timestamp_ms > 0)
            ow_histogram_observe(&ow_stats.e2e_latency,
                                 (ow_clock_wall_ms() - job->timestamp_ms) * 1000);
        ow_worker_finish_job(w, job, done);
    }
}

/* --- Producer callbacks (poller thread) --------------------------------- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    ow_worker *w = opaque;
    ow_job *job = m->_private;
    int is_dlq = strcmp(rd_kafka_topic_name(m->rkt), w->cfg->topic_dlq) == 0;

    (void)rk;
    if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
        /* Purged at shutdown (abandon_outputs): the job ends not done. */
        OW_LOG(OW_LOG_DEBUG, "output_abandoned", OW_F_STR("topic", rd_kafka_topic_name(m->rkt)));
    } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* message.timeout.ms is infinite, so only permanent errors get here. */
        OW_LOG(OW_LOG_ERROR, "delivery_failed", OW_F_STR("topic", rd_kafka_topic_name(m->rkt)),
               OW_F_STR("error", rd_kafka_err2str(m->err)));
        ow_worker_set_fatal(w, "a result was not acknowledged by the broker");
    } else if (job == ow_in_progress_token) {
        OW_COUNT(results[OW_CODE_REQUEST_IN_PROGRESS], 1);
    } else if (is_dlq) {
        OW_COUNT(dead_lettered, 1);
    } else if (job->valid) {
        OW_COUNT(results[job->item.code], 1);
        if (job->item.replayed)
            OW_COUNT(replays, 1);
    } else {
        OW_COUNT(results[OW_CODE_INVALID_REQUEST], 1);
    }
    if (job != ow_in_progress_token && job != NULL)
        ow_worker_ack(w, job, 1, m->err == RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    ow_worker *w = opaque;

    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[512];

        rd_kafka_fatal_error(rk, why, sizeof(why));
        OW_LOG(OW_LOG_ERROR, "kafka_fatal", OW_F_STR("client", rd_kafka_name(rk)),
               OW_F_STR("error", why));
        ow_worker_set_fatal(w, "fatal Kafka client error");
        return;
    }
    if (ow_kafka_refused(rk, err, reason)) {
        ow_worker_set_fatal(w, "Kafka refused the worker's credentials or permissions");
        return;
    }
    OW_LOG(OW_LOG_WARN, "kafka_error", OW_F_STR("client", rd_kafka_name(rk)),
           OW_F_STR("error", rd_kafka_err2name((rd_kafka_resp_err_t)err)),
           OW_F_STR("reason", reason));
}

static void *poller_main(void *arg)
{
    ow_worker *w = arg;

    while (!atomic_load(&w->poller_stop))
        rd_kafka_poll(w->producer, 100);
    return NULL;
}

/* --- Rebalance (consumer thread, inside consumer_poll) ------------------- */

/* Starts a new epoch for a partition: jobs dispatched before it can no
 * longer store an offset. With track, the partition gets a fresh tracker
 * (OW_ENOMEM when it cannot be allocated); without, it keeps none. Called
 * with parts_mu held. */
static int part_new_epoch(ow_part *p, int track)
{
    ow_offset_track_free(&p->track);
    p->track = track ? ow_offset_track_new() : NULL;
    p->epoch++;
    p->active = 0;
    p->first_offset = -1;
    return track && p->track == NULL ? OW_ENOMEM : OW_OK;
}

static void assign_partitions(ow_worker *w, rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_error_t *e;

    pthread_mutex_lock(&w->parts_mu);
    for (int i = 0; i < parts->cnt; i++) {
        ow_part *p = part_get(w, parts->elems[i].partition);

        if (p == NULL) {
            ow_worker_set_fatal(w, "out of memory");
            continue;
        }
        p->assigned = 1;
        p->revoking = 0;
        if (part_new_epoch(p, 1) != OW_OK)
            ow_worker_set_fatal(w, "out of memory");
    }
    pthread_mutex_unlock(&w->parts_mu);
    atomic_fetch_add(&w->assigned, parts->cnt);
    atomic_store(&w->ever_assigned, 1);
    e = rd_kafka_incremental_assign(w->consumer, parts);
    if (e != NULL) {
        OW_LOG(OW_LOG_ERROR, "assign_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
        ow_worker_set_fatal(w, "incremental assign failed");
        return;
    }
    if (w->paused)
        rd_kafka_pause_partitions(w->consumer, parts);
}

static int all_drained(ow_worker *w, const rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++) {
        int32_t n = parts->elems[i].partition;

        if ((size_t)n < w->n_parts && w->parts[n].active > 0)
            return 0;
    }
    return 1;
}

/* Waits (bounded) until the revoked partitions have nothing in flight, so
 * that what was already decided gets acknowledged and committed here rather
 * than redone by the next owner. */
static void drain(ow_worker *w, const rd_kafka_topic_partition_list_t *parts)
{
    int64_t start = ow_clock_mono_ms();
    int64_t deadline = start + w->cfg->rebalance_drain_timeout_ms;

    /* The revoke that closing the consumer triggers at shutdown comes after
     * the flush, when the delivery poller has stopped: nothing in flight can
     * be acknowledged any more, so the stop's deadline bounds the wait. */
    if (atomic_load(&w->stopping) && w->deadline_ms < deadline)
        deadline = w->deadline_ms;
    pthread_mutex_lock(&w->parts_mu);
    while (!all_drained(w, parts) && ow_clock_mono_ms() < deadline && !atomic_load(&w->fatal)) {
        struct timespec ts;

        ow_deadline_after_ms(50, &ts);
        pthread_cond_timedwait(&w->parts_cv, &w->parts_mu, &ts);
    }
    if (!all_drained(w, parts))
        OW_LOG(OW_LOG_WARN, "revoke_drain_timeout",
               OW_F_INT("timeout_ms", deadline > start ? deadline - start : 0));
    pthread_mutex_unlock(&w->parts_mu);
}

static void commit_stored(ow_worker *w, const char *why)
{
    rd_kafka_resp_err_t e = rd_kafka_commit(w->consumer, NULL, 0);

    if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
        OW_COUNT(commits, 1);
    else if (e != RD_KAFKA_RESP_ERR__NO_OFFSET)
        OW_LOG(OW_LOG_WARN, "commit_failed", OW_F_STR("when", why),
               OW_F_STR("error", rd_kafka_err2str(e)));
}

static void revoke_partitions(ow_worker *w, rd_kafka_topic_partition_list_t *parts)
{
    int lost = rd_kafka_assignment_lost(w->consumer);
    rd_kafka_error_t *e;

    pthread_mutex_lock(&w->parts_mu);
    for (int i = 0; i < parts->cnt; i++) {
        ow_part *p = part_get(w, parts->elems[i].partition);

        if (p != NULL)
            p->revoking = 1;
    }
    pthread_mutex_unlock(&w->parts_mu);
    for (int i = 0; i < parts->cnt; i++) {
        for (size_t k = 0; k < w->n_lanes; k++)
            ow_lane_drop_partition(&w->lanes[k], parts->elems[i].partition);
    }
    /* A lost assignment may already belong to another member: commit nothing. */
    if (!lost) {
        drain(w, parts);
        commit_stored(w, "revoke");
    }
    pthread_mutex_lock(&w->parts_mu);
    for (int i = 0; i < parts->cnt; i++) {
        ow_part *p = part_get(w, parts->elems[i].partition);

        if (p == NULL)
            continue;
        p->assigned = 0;
        p->revoking = 0;
        part_new_epoch(p, 0);
    }
    pthread_mutex_unlock(&w->parts_mu);
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

/* Tracks a consumed offset. An offset at or below the last one tracked
 * means the partition went back within one assignment (an offset reset
 * after its log was truncated or recreated): a new epoch starts, so that
 * what is in flight from before can no longer move this partition's
 * offset and the rewound messages are tracked afresh, none skipped. Called
 * with parts_mu held; fails only when out of memory. */
static int track_offset(ow_part *p, const rd_kafka_message_t *m)
{
    int rc = ow_offset_track_add(p->track, m->offset);

    if (rc == OW_EINVAL) {
        OW_LOG(OW_LOG_WARN, "partition_rewound", OW_F_INT("partition", m->partition),
               OW_F_INT("offset", m->offset));
        rc = part_new_epoch(p, 1);
        if (rc == OW_OK)
            rc = ow_offset_track_add(p->track, m->offset);
    }
    return rc;
}

static void dispatch(ow_worker *w, rd_kafka_message_t *m)
{
    ow_part *p;
    uint32_t epoch = 0;
    int ok = 0;
    ow_job *job;

    pthread_mutex_lock(&w->parts_mu);
    p = part_get(w, m->partition);
    if (p != NULL && p->assigned && !p->revoking && p->track != NULL) {
        if (track_offset(p, m) != OW_OK) {
            pthread_mutex_unlock(&w->parts_mu);
            ow_worker_set_fatal(w, "out of memory");
            return;
        }
        if (p->first_offset < 0)
            p->first_offset = m->offset;
        p->active++;
        epoch = p->epoch;
        ok = 1;
    }
    pthread_mutex_unlock(&w->parts_mu);
    if (!ok) {
        OW_LOG(OW_LOG_WARN, "message_ignored", OW_F_INT("partition", m->partition),
               OW_F_INT("offset", m->offset));
        return;
    }
    job = ow_job_from_message(w, m, epoch);
    if (job == NULL) {
        ow_worker_set_fatal(w, "out of memory");
        return;
    }
    OW_COUNT(consumed, 1);
    atomic_fetch_add(&ow_stats.inflight_messages, 1);
    atomic_fetch_add(&ow_stats.inflight_bytes, (int64_t)job->bytes);
    ow_lane_enqueue(&w->lanes[job->key_hash % w->n_lanes], job);
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

/* Pauses the input when too much is in flight and resumes it at half. */
static void backpressure(ow_worker *w)
{
    int64_t msgs = atomic_load(&ow_stats.inflight_messages);
    int64_t bytes = atomic_load(&ow_stats.inflight_bytes);
    const ow_config *c = w->cfg;

    if (!w->paused && (msgs >= c->inflight_max_messages || bytes >= c->inflight_max_bytes))
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
        ow_worker_set_fatal(w, "fatal consumer error");
    } else if (ow_kafka_refused(w->consumer, m->err, rd_kafka_message_errstr(m))) {
        ow_worker_set_fatal(w, "Kafka refused the worker's permissions");
    } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        OW_LOG(OW_LOG_WARN, "consumer_error", OW_F_STR("error", rd_kafka_message_errstr(m)),
               OW_F_INT("partition", m->partition));
    }
    rd_kafka_message_destroy(m);
}

/* --- Operations endpoint ------------------------------------------------ */

/* Consumer lag per assigned partition: the partition's end offset (as last
 * seen by the fetcher) minus the offset this replica has stored. */
static void metrics_extra(ow_buf *out, void *opaque)
{
    ow_worker *w = opaque;

    ow_buf_appendf(out, "# HELP order_worker_consumer_lag Messages between the stored offset and "
                        "the end of each assigned partition.\n"
                        "# TYPE order_worker_consumer_lag gauge\n");
    pthread_mutex_lock(&w->parts_mu);
    for (size_t i = 0; i < w->n_parts; i++) {
        int64_t lo = -1, hi = -1, at;

        if (!w->parts[i].assigned || w->parts[i].track == NULL)
            continue;
        rd_kafka_get_watermark_offsets(w->consumer, w->cfg->topic_input, (int32_t)i, &lo, &hi);
        at = ow_offset_track_committed(w->parts[i].track);
        if (at < 0)
            at = w->parts[i].first_offset >= 0 ? w->parts[i].first_offset : hi;
        ow_buf_appendf(out, "order_worker_consumer_lag{topic=\"%s\",partition=\"%zu\"} %lld\n",
                       w->cfg->topic_input, i, (long long)(hi >= at && at >= 0 ? hi - at : 0));
    }
    pthread_mutex_unlock(&w->parts_mu);
    ow_buf_appendf(out,
                   "# HELP order_worker_assigned_partitions Input partitions assigned to this "
                   "replica.\n# TYPE order_worker_assigned_partitions gauge\n"
                   "order_worker_assigned_partitions %d\n"
                   "# HELP order_worker_database_up 1 when the last database round trip worked.\n"
                   "# TYPE order_worker_database_up gauge\norder_worker_database_up %d\n"
                   "# HELP order_worker_input_paused 1 while backpressure pauses the input.\n"
                   "# TYPE order_worker_input_paused gauge\norder_worker_input_paused %d\n",
                   atomic_load(&w->assigned), atomic_load(&w->db_ok), w->paused);
}

static int broker_reachable(ow_worker *w)
{
    const rd_kafka_metadata_t *md = NULL;
    int ok = rd_kafka_metadata(w->producer, 0, NULL, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
             md->broker_cnt > 0;

    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    return ok;
}

static int ready(ow_buf *why, void *opaque)
{
    ow_worker *w = opaque;
    int ok = 1;

    if (!atomic_load(&w->db_ok)) {
        ow_buf_appends(why, "database unreachable\n");
        ok = 0;
    }
    if (!broker_reachable(w)) {
        ow_buf_appends(why, "broker unreachable\n");
        ok = 0;
    }
    if (atomic_load(&w->assigned) == 0) {
        ow_buf_appends(why, "no partitions assigned\n");
        ok = 0;
    }
    if (atomic_load(&w->stopping) || atomic_load(&w->fatal)) {
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

/* Fails fast on configuration mistakes (wrong password, unknown database),
 * but a database that is only unreachable is waited for by the lanes. */
static int check_database(ow_worker *w, ow_error *err)
{
    int rc = ow_store_ping(w->lanes[0].store, err);

    ow_worker_db_seen(w, rc == OW_OK);
    if (rc != OW_OK && err->cls == OW_ERRCLASS_RETRIABLE) {
        OW_LOG(OW_LOG_WARN, "database_unreachable", OW_F_STR("error", err->msg));
        ow_error_clear(err);
        return OW_OK;
    }
    return rc;
}

static int start(ow_worker *w, ow_error *err)
{
    const char *topics[] = {w->cfg->topic_input, w->cfg->topic_results, w->cfg->topic_dlq};
    int rc = create_clients(w, err);

    /* Issue 11: a missing ACL stops the worker before it decides anything.
     * The consumer asks: its metadata requests never auto-create a topic. */
    if (rc == OW_OK)
        rc = ow_kafka_check_topics(w->consumer, topics, 3, err);
    if (rc != OW_OK)
        return rc;
    w->lanes = calloc((size_t)w->cfg->worker_lanes, sizeof(*w->lanes));
    if (w->lanes == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    for (size_t i = 0; i < (size_t)w->cfg->worker_lanes; i++) {
        rc = ow_lane_start(&w->lanes[i], w, (unsigned)i, err);
        if (rc != OW_OK)
            return rc;
        w->n_lanes++;
    }
    if (pthread_create(&w->poller, NULL, poller_main, w) != 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot start the delivery poller");
    w->poller_started = 1;
    rc = check_database(w, err);
    if (rc == OW_OK)
        rc = start_http(w, err);
    if (rc == OW_OK)
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

/* Leaves the group. librdkafka 2.0's consumer_close can hang when a
 * cooperative assignment arrives while it closes (librdkafka issue #4527),
 * so unsubscribe first and serve the rebalance callbacks (which commit and
 * unassign) until the assignment is empty; messages still fetched are
 * dropped unprocessed, their offsets never stored. */
static void leave_group(ow_worker *w)
{
    /* Within the stop's deadline, but give the revoke a moment even when
     * the deadline already passed. */
    int64_t floor = ow_clock_mono_ms() + 2000;
    int64_t deadline = w->deadline_ms > floor ? w->deadline_ms : floor;
    int idle = 0;

    /* librdkafka 2.0's cooperative-sticky assignor aborts the process when
     * a consumer that joined but never received its first assignment is
     * closed (librdkafka issue #4312, fixed in 2.3): let the join finish
     * first. Messages that arrive meanwhile are not processed. A worker
     * that failed before subscribing has no join to wait for. */
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
    rd_kafka_unsubscribe(w->consumer);
    while (ow_clock_mono_ms() < deadline && idle < 3) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(w->consumer, 100);

        if (m != NULL)
            rd_kafka_message_destroy(m);
        idle = assignment_empty(w->consumer) ? idle + 1 : 0;
    }
    rd_kafka_consumer_close(w->consumer);
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
    rd_kafka_flush(w->producer, 1000); /* serves the purged reports */
}

/* Stops taking messages, lets lanes finish what they started, flushes
 * results, commits what is acknowledged and leaves the group. */
static void shut_down(ow_worker *w)
{
    int64_t left;

    w->deadline_ms = ow_clock_mono_ms() + w->cfg->shutdown_timeout_ms;
    atomic_store(&w->stopping, 1);
    w->stop_sleep = 1; /* wakes lanes sleeping between database retries */
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_stop(&w->lanes[i]);
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_join(&w->lanes[i]);
    atomic_store(&w->poller_stop, 1);
    if (w->poller_started)
        pthread_join(w->poller, NULL);
    w->poller_started = 0;
    left = w->deadline_ms - ow_clock_mono_ms();
    if (w->producer != NULL &&
        rd_kafka_flush(w->producer, (int)(left > 0 ? left : 0)) != RD_KAFKA_RESP_ERR_NO_ERROR)
        abandon_outputs(w);
    if (w->consumer != NULL) {
        commit_stored(w, "shutdown");
        leave_group(w);
    }
}

static void destroy(ow_worker *w)
{
    ow_http_stop(&w->http);
    if (w->consumer != NULL && !w->consumer_unsafe)
        rd_kafka_destroy(w->consumer);
    if (w->producer != NULL)
        rd_kafka_destroy(w->producer);
    for (size_t i = 0; i < w->n_parts; i++)
        ow_offset_track_free(&w->parts[i].track);
    free(w->parts);
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_destroy(&w->lanes[i]);
    free(w->lanes);
    pthread_mutex_destroy(&w->parts_mu);
    pthread_cond_destroy(&w->parts_cv);
}

int ow_worker_run(const ow_config *cfg, const volatile sig_atomic_t *stop, ow_error *err)
{
    ow_worker w;
    uint64_t seed = (uint64_t)ow_clock_mono_us() ^ (uint64_t)getpid() << 20;
    int rc;

    memset(&w, 0, sizeof(w));
    w.cfg = cfg;
    w.limits.max_bytes = (size_t)cfg->request_max_bytes;
    w.limits.max_orders = (size_t)cfg->request_max_orders;
    ow_idgen_init(&w.ids, (unsigned)(ow_rand64(&seed) >> 20), ow_clock_wall_ms);
    pthread_mutex_init(&w.parts_mu, NULL);
    pthread_cond_init(&w.parts_cv, NULL);
    rc = start(&w, err);
    if (rc == OW_OK) {
        OW_LOG(OW_LOG_INFO, "worker_started", OW_F_STR("topic", cfg->topic_input),
               OW_F_STR("group", cfg->kafka_group_id), OW_F_INT("lanes", cfg->worker_lanes),
               OW_F_INT("batch_max_messages", cfg->batch_max_messages));
        while (!*stop && !atomic_load(&w.fatal)) {
            /* While paused, look again soon: the pause ends as soon as
             * acknowledgements bring the in-flight count down. */
            rd_kafka_message_t *m = rd_kafka_consumer_poll(w.consumer, w.paused ? 5 : 100);

            if (m != NULL)
                on_consumer_message(&w, m);
            backpressure(&w);
        }
    }
    OW_LOG(OW_LOG_INFO, "worker_stopping", OW_F_INT("fatal", atomic_load(&w.fatal)));
    shut_down(&w);
    if (rc == OW_OK && atomic_load(&w.fatal))
        rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "stopped after a fatal error (see log)");
    destroy(&w);
    OW_LOG(OW_LOG_INFO, "worker_stopped", OW_F_INT("clean", rc == OW_OK));
    return rc;
}
