/* The worker in its consumer group: rebalances, input passed over, and
 * leaving the group (worker_parts.h). Offsets and commits are the
 * delivery mode's (delivery.h). */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "ow/log.h"
#include "worker_parts.h"

/* --- Input deleted before it was read ------------------------------------ */

/* The longest the consumer thread waits for the group's committed offset
 * or a partition's log start when it checks passed-over input: once per
 * assignment of a partition, and when the input passed over offsets,
 * never for every message. */
#define SKIP_CHECK_TIMEOUT_MS 5000

/* The group's committed offset of one partition; -1 when it has none or
 * the coordinator did not answer in time. */
static int64_t committed_offset(ow_worker *w, int32_t partition)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;
    int64_t off = -1;

    rd_kafka_topic_partition_list_add(l, w->cfg->topic_input, partition);
    e = rd_kafka_committed(w->consumer, l, SKIP_CHECK_TIMEOUT_MS);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && l->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        off = l->elems[0].offset >= 0 ? l->elems[0].offset : -1;
    else
        OW_LOG(OW_LOG_WARN, "input_check_failed", OW_F_STR("topic", w->cfg->topic_input),
               OW_F_INT("partition", partition),
               OW_F_STR("error",
                        rd_kafka_err2str(e != RD_KAFKA_RESP_ERR_NO_ERROR ? e : l->elems[0].err)),
               OW_F_STR("why", "the group's committed offset did not come: input the broker "
                               "deleted before this assignment began is not looked for"));
    rd_kafka_topic_partition_list_destroy(l);
    return off;
}

/* Offsets the input passes over are normal: transaction markers, records
 * of aborted transactions, records compaction removed. They are lost input
 * only when the broker deleted them before they were read: librdkafka then
 * resets the partition to its log start (auto.offset.reset = earliest) and
 * says so only in a log line of its own. So the log start decides. */
void ow_worker_check_skipped(ow_worker *w, int32_t partition, int64_t at,
                             const ow_ledger_seen *seen)
{
    const char *topic = w->cfg->topic_input;
    int64_t from = seen->expected, lo = -1, hi = -1, to;

    if (seen->rewound || (!seen->first && (from < 0 || at <= from)))
        return;
    /* librdkafka keeps the log start of the partition's last fetch
     * response: the one that delivered at, or a later one. */
    rd_kafka_get_watermark_offsets(w->consumer, topic, partition, &lo, &hi);
    if (lo < 0 &&
        rd_kafka_query_watermark_offsets(w->consumer, topic, partition, &lo, &hi,
                                         SKIP_CHECK_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        OW_LOG(OW_LOG_WARN, "input_check_failed", OW_F_STR("topic", topic),
               OW_F_INT("partition", partition), OW_F_INT("from", from), OW_F_INT("at", at),
               OW_F_STR("why", "the partition's log start did not come: whether the broker "
                               "deleted these offsets before they were read is not known"));
        return;
    }
    if (lo <= 0 || at <= 0)
        return; /* nothing was ever deleted, or nothing was passed over */
    if (seen->first)
        from = committed_offset(w, partition);
    if (from < 0 || lo <= from || at <= from)
        return;
    /* Deleted after at was fetched, the log start may be past at. */
    to = lo < at ? lo : at;
    OW_COUNT(input_skipped, to - from);
    OW_LOG(OW_LOG_ERROR, "input_skipped", OW_F_STR("topic", topic),
           OW_F_INT("partition", partition), OW_F_INT("first_offset", from),
           OW_F_INT("last_offset", to - 1), OW_F_INT("offsets", to - from),
           OW_F_STR("why", "the broker deleted these offsets (retention or DeleteRecords) "
                           "before the worker read them: their requests were never decided"));
}

void ow_worker_reached_end(ow_worker *w, int32_t partition, int64_t end)
{
    ow_ledger_seen seen;
    int rc = ow_ledger_reached_end(&w->ledger, partition, end, &seen);

    if (rc == OW_ENOMEM)
        ow_runstate_set_fatal(&w->rs, "out of memory");
    else if (rc == OW_OK)
        ow_worker_check_skipped(w, partition, end, &seen);
}

void ow_worker_on_periodic_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                  rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    ow_worker *w = opaque;

    (void)rk;
    ow_delivery_committed(w->delivery, err, offsets);
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

/* Waits (bounded) until the revoked partitions have nothing in flight, so
 * that what was already decided gets acknowledged and committed here rather
 * than redone by the next owner. */
static void drain(ow_worker *w, const rd_kafka_topic_partition_list_t *parts)
{
    int64_t start = ow_clock_mono_ms();
    /* The drain timeout, and once a stop was asked for no later than the
     * stop's deadline. */
    int64_t deadline = ow_runstate_until(&w->rs, w->cfg->rebalance_drain_timeout_ms);
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
    for (size_t k = 0; k < w->n_lanes; k++)
        ow_lane_drop_stale(&w->lanes[k]);
    if (!lost)
        drain(w, parts);
    ow_delivery_revoke(w->delivery, parts, lost);
    atomic_fetch_sub(&w->assigned, parts->cnt);
    e = rd_kafka_incremental_unassign(w->consumer, parts);
    if (e != NULL) {
        OW_LOG(OW_LOG_WARN, "unassign_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
    }
    OW_LOG(OW_LOG_INFO, lost ? "partitions_lost" : "partitions_revoked",
           OW_F_INT("count", parts->cnt));
}

void ow_worker_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                            rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    ow_worker *w = opaque;

    (void)rk;
    OW_COUNT(rebalances, 1);
    ow_delivery_rebalanced(w->delivery);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        assign_partitions(w, parts);
        OW_LOG(OW_LOG_INFO, "partitions_assigned", OW_F_INT("count", parts->cnt),
               OW_F_INT("first", parts->cnt > 0 ? parts->elems[0].partition : -1));
    } else {
        revoke_partitions(w, parts);
    }
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
 * cooperative assignment arrives while it closes (librdkafka#4527),
 * so unsubscribe first and serve the rebalance callbacks (which commit and
 * unassign) until the assignment is empty; messages still fetched are
 * dropped unprocessed, their offsets never stored. Everything here ends by
 * the stop's deadline. */
void ow_worker_leave_group(ow_worker *w)
{
    int64_t deadline = w->rs.deadline_ms;
    int idle = 0;

    /* librdkafka 2.0's cooperative-sticky assignor aborts the process when
     * a consumer that joined but never received its first assignment is
     * closed (librdkafka#4312, fixed in 2.3): let the join finish
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
