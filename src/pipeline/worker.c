/*
 * The consumer thread: its loop (dispatch to lanes, backpressure) and the
 * worker's stop. Which offsets may be stored is the ledger's business
 * (ledger.h), how outputs and offsets reach Kafka the delivery mode's
 * (delivery.h), deciding the lanes' (lane.h); starting, the group and the
 * endpoint are in worker_start.c, worker_group.c and worker_status.c.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "ow/kafka.h"
#include "ow/log.h"
#include "worker_parts.h"

/* --- Consumer thread ----------------------------------------------------- */

static void dispatch(ow_worker *w, rd_kafka_message_t *m)
{
    ow_job *job = ow_job_from_message(&w->maker, m);
    ow_ledger_seen seen = {0, 0, -1};
    int rc = job != NULL ? ow_ledger_track(&w->ledger, m->partition, m->offset, &job->t, &seen)
                         : OW_ENOMEM;
    int rewound = seen.rewound;

    ow_worker_check_skipped(w, m->partition, m->offset, &seen);
    if (rewound)
        OW_LOG(OW_LOG_WARN, "partition_rewound", OW_F_INT("partition", m->partition),
               OW_F_INT("offset", m->offset));
    if (rc == OW_ENOTFOUND)
        OW_LOG(OW_LOG_WARN, "message_ignored", OW_F_JOB(job));
    else if (rc != OW_OK)
        ow_runstate_set_fatal(&w->rs, "out of memory");
    if (rc != OW_OK) {
        ow_job_free(job);
        return;
    }
    if (ow_delivery_track(w->delivery, job, rewound) != OW_OK)
        ow_runstate_set_fatal(&w->rs, "out of memory");
    OW_COUNT(consumed, 1);
    ow_job_count_in(job, &w->inflight);
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
           OW_F_INT("inflight", atomic_load(&w->inflight.messages)));
}

/* How long the input may stay at the in-flight limit, unpolled, before it
 * is paused. A pause discards librdkafka's prefetched messages, and while
 * they are refetched the fetcher can sit out librdkafka 2.0's fixed
 * one-second backoff, which would stall a worker replaying a backlog after
 * every pause. Not polling for a moment keeps the prefetch, and memory
 * stays bounded by queued.max.messages.kbytes; a longer wait (a database
 * outage) pauses as before, so that rebalance callbacks are served. */
#define BACKPRESSURE_HOLD_MS 200

/* Pauses the input when too much has been in flight for a while and
 * resumes it at half. */
static void backpressure(ow_worker *w)
{
    int64_t msgs = atomic_load(&w->inflight.messages);
    int64_t bytes = atomic_load(&w->inflight.bytes);
    const ow_config *c = w->cfg;
    int full = msgs >= c->inflight_max_messages || bytes >= c->inflight_max_bytes;
    int64_t now;

    /* Called for every message: below the limit and not paused, there is
     * nothing to time. */
    if (!full && !w->paused) {
        w->full_since_ms = 0;
        return;
    }
    now = ow_clock_mono_ms();
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
    } else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        ow_worker_reached_end(w, m->partition, m->offset);
    } else {
        OW_LOG(OW_LOG_WARN, "consumer_error", OW_F_STR("error", rd_kafka_message_errstr(m)),
               OW_F_INT("partition", m->partition));
    }
    rd_kafka_message_destroy(m);
}

/* Stops taking messages, lets lanes finish what they started, flushes
 * results, commits what is acknowledged and leaves the group, all within
 * shutdown.timeout_ms. */
static void shut_down(ow_worker *w)
{
    int64_t reserve = ow_runstate_reserve_ms();
    int64_t left;

    /* The deadline counts from the signal, when one asked for the stop. */
    ow_runstate_begin_stop(&w->rs);
    w->rs.stop_sleep = 1; /* wakes lanes sleeping between database retries */
    ow_runstate_step(&w->rs, "lanes");
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_stop(&w->lanes[i]);
    /* Lanes get what the flush and the leave do not keep. */
    for (size_t i = 0; i < w->n_lanes; i++)
        ow_lane_join(&w->lanes[i], w->rs.deadline_ms - 2 * reserve);
    ow_runstate_step(&w->rs, "watches");
    for (unsigned i = 0; w->watches != NULL && i < w->n_dbs; i++)
        ow_store_watch_stop(w->watches[i], w->rs.deadline_ms - 2 * reserve);
    ow_runstate_step(&w->rs, "flush");
    atomic_store(&w->poller_stop, 1);
    if (w->poller_started)
        pthread_join(w->poller, NULL);
    w->poller_started = 0;
    left = w->rs.deadline_ms - reserve - ow_clock_mono_ms();
    if (w->producer != NULL && w->out_ready)
        ow_delivery_flush(w->delivery, ow_clock_mono_ms() + (left > 0 ? left : 0));
    if (w->consumer != NULL) {
        /* Half of what is left, so that leaving the group has the rest. */
        left = w->rs.deadline_ms - ow_clock_mono_ms();
        ow_runstate_step(&w->rs, "commit");
        ow_delivery_commit(w->delivery, "shutdown", ow_clock_mono_ms() + (left > 0 ? left / 2 : 0));
        ow_worker_leave_group(w);
    }
}

static void destroy(ow_worker *w)
{
    ow_runstate_step(&w->rs, "destroy");
    ow_metrics_http_stop(&w->http);
    /* A member of the group that could not leave it by the deadline is not
     * destroyed: librdkafka's destroy would wait for the coordinator all
     * the same, past the deadline while every broker is down. The process
     * exits next; the group drops the member after its session timeout. A
     * consumer that never subscribed has no group to leave. */
    ow_runstate_step(&w->rs, "destroy: consumer");
    if (w->consumer != NULL && !w->consumer_unsafe && (w->consumer_closed || !w->subscribed))
        rd_kafka_destroy_flags(w->consumer,
                               w->consumer_closed ? 0 : RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    ow_runstate_step(&w->rs, "destroy: producer");
    /* Not while a call a stop gave up on still runs on it: the process
     * exits next, and the call with it. */
    if (ow_delivery_release(w->delivery) && w->producer != NULL)
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
    ow_delivery_free(&w->delivery);
    ow_runstate_cleanup(&w->rs);
    /* Last: the producer is gone, so no delivery report ends a job after. */
    ow_job_maker_cleanup(&w->maker);
}

void ow_worker_stop_status(int64_t *deadline_ms, const char **step)
{
    ow_runstate_stop_status(deadline_ms, step);
}

void ow_worker_stop_asked(void)
{
    ow_runstate_ask_stop();
}

int ow_worker_run(const ow_config *cfg, const volatile sig_atomic_t *stop, ow_error *err)
{
    ow_worker w;
    ow_job_limits lim = {{(size_t)cfg->request_max_bytes, (size_t)cfg->request_max_orders}, 0};
    uint64_t seed = (uint64_t)ow_clock_mono_us() ^ (uint64_t)getpid() << 20;
    int rc;

    memset(&w, 0, sizeof(w));
    ow_runstate_init(&w.rs);
    ow_runstate_arm(&w.rs, stop, cfg->shutdown_timeout_ms);
    w.cfg = cfg;
    ow_job_maker_init(&w.maker, &lim);
    w.maker.ctx =
        (ow_job_context){cfg->topic_input, cfg->kafka_group_id, (int)cfg->tracing_start_traces};
    ow_idgen_init(&w.ids, (unsigned)(ow_rand64(&seed) >> 20), ow_clock_wall_ms);
    w.delivery = ow_delivery_new(cfg, &w.rs, &w.ledger);
    ow_ledger_init(&w.ledger, ow_delivery_store_offset, w.delivery);
    rc = w.delivery != NULL ? ow_worker_start(&w, stop, err)
                            : ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    if (rc == OW_OK) {
        OW_LOG(OW_LOG_INFO, "worker_started", OW_F_STR("topic", cfg->topic_input),
               OW_F_STR("group", cfg->kafka_group_id), OW_F_INT("lanes", cfg->worker_lanes),
               OW_F_INT("batch_max_messages", cfg->batch_max_messages),
               OW_F_INT("result_max_bytes", (int64_t)w.out.output_max));
        while (!*stop && !atomic_load(&w.rs.fatal)) {
            /* While paused, look again soon: the pause ends as soon as
             * acknowledgements bring the in-flight count down. */
            rd_kafka_message_t *m;

            if (atomic_load(&w.producer_failed))
                ow_worker_replace_producer(&w);
            ow_delivery_tick(w.delivery);

            if (w.full_since_ms != 0) { /* at the limit: wait, do not take more */
                ow_sleep_ms(1, NULL);
                backpressure(&w);
                continue;
            }
            m = rd_kafka_consumer_poll(w.consumer, w.paused ? 5 : ow_delivery_poll_ms(w.delivery));

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
    OW_LOG(OW_LOG_INFO, "worker_stopped", OW_F_INT("clean", rc == OW_OK));
    return rc;
}
