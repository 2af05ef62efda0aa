/* The worker in its consumer group: offsets, commits, rebalances and
 * leaving the group (worker_parts.h). */
#include <stdlib.h>
#include <string.h>

#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/metrics.h"
#include "worker_parts.h"

/* --- Offsets ------------------------------------------------------------ */

/* The ledger's store function: called with the ledger's lock held when a
 * partition's done watermark moves. */
void ow_worker_store_offset(void *opaque, int32_t partition, int64_t offset)
{
    ow_worker *w = opaque;
    rd_kafka_topic_partition_list_t *l;
    rd_kafka_resp_err_t e;

    if (w->cfg->exactly_once) {
        ow_txn_note_offset(&w->txn, partition, offset);
        OW_COUNT(offsets_stored, 1);
        return;
    }
    l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->cfg->topic_input, partition)->offset = offset;
    e = rd_kafka_offsets_store(w->consumer, l);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && l->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        OW_COUNT(offsets_stored, 1);
    else
        OW_LOG(OW_LOG_DEBUG, "offset_store_skipped", OW_F_INT("partition", partition),
               OW_F_INT("offset", offset), OW_F_STR("error", rd_kafka_err2str(e)));
    rd_kafka_topic_partition_list_destroy(l);
}

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

/* Every commit's result, periodic or explicit. */
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

/* How many commits after a failed one name the stored offsets: usually
 * enough to outlast a retried request still on its way. A failure while
 * they go (theirs included: their answers come here too) does not add to
 * them; one after the last starts three more, so a long outage costs at
 * most one named commit per interval beside the client's own. */
#define RECOMMITS 3

void ow_worker_on_periodic_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                  rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    ow_worker *w = opaque;

    (void)rk;
    if (!count_commit(err, offsets, "periodic") && w->recommits == 0)
        w->recommits = RECOMMITS;
}

int64_t ow_worker_add_offset(void *opaque, int32_t partition, int64_t stored, int64_t first)
{
    const ow_offset_list *ol = opaque;
    int64_t to = stored >= 0 || !ol->or_first ? stored : first;

    if (to >= 0)
        rd_kafka_topic_partition_list_add(ol->list, ol->w->cfg->topic_input, partition)->offset =
            to;
    return to;
}

/* ow_ledger_each_fn's shape. */
static void add_stored_offset(void *opaque, int32_t partition, int64_t stored, int64_t first)
{
    ow_worker_add_offset(opaque, partition, stored, first);
}

/* The client's periodic commit sends only the partitions whose stored
 * offset it believes uncommitted. While the group coordinator moves, a
 * retried commit request can cross a newer one, and the client can then
 * believe committed what the coordinator holds older: a partition that
 * receives nothing more would keep that older offset (its lag never
 * reaching zero, its messages redelivered after a restart). Naming the
 * offsets sends them whatever the client believes. The client's own
 * periodic commit waits for a settled group; this one stays clear of a
 * rebalance callback by an interval, the nearest sign of one it has. */
void ow_worker_recommit(ow_worker *w)
{
    ow_offset_list ol;
    int64_t now;

    if (w->recommits == 0 || w->cfg->exactly_once)
        return;
    now = ow_clock_mono_ms();
    if (now < w->recommit_at_ms || now < w->rebalanced_ms + w->cfg->commit_interval_ms ||
        rd_kafka_assignment_lost(w->consumer))
        return;
    w->recommits--;
    w->recommit_at_ms = now + w->cfg->commit_interval_ms;
    ol = (ow_offset_list){w, rd_kafka_topic_partition_list_new(8), 0};
    ow_ledger_each_assigned(&w->ledger, add_stored_offset, &ol);
    /* Its answer comes to ow_worker_on_periodic_commit. */
    if (ol.list->cnt > 0)
        rd_kafka_commit(w->consumer, ol.list, 1);
    rd_kafka_topic_partition_list_destroy(ol.list);
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
 * for its own 45 s timeout. What is not committed is
 * redelivered later, which the contract allows. */
void ow_worker_commit(ow_worker *w, const char *why, int64_t deadline_ms)
{
    rd_kafka_queue_t *q;
    commit_wait *cw;
    rd_kafka_resp_err_t e;

    if (w->cfg->exactly_once) {
        ow_txn_commit(&w->txn, why, deadline_ms);
        return;
    }
    q = rd_kafka_queue_new(w->consumer);
    cw = calloc(1, sizeof(*cw));
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

void ow_worker_epoch_end(void *opaque)
{
    ow_worker *w = opaque;

    ow_output_close(&w->out, -1);
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

/* The end of a wait during a revoke: the drain timeout, and once a stop
 * was asked for no later than the stop's deadline. */
static int64_t revoke_deadline(const ow_worker *w)
{
    int64_t deadline = ow_clock_mono_ms() + w->cfg->rebalance_drain_timeout_ms;
    int64_t stop = ow_runstate_deadline(&w->rs);

    if (stop > 0 && stop < deadline)
        deadline = stop;
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

/* The revoked partitions' epochs end: nothing of them is tracked, sent or
 * released any more. */
static void end_partitions(ow_worker *w, const rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++) {
        ow_ledger_revoke_end(&w->ledger, parts->elems[i].partition);
        ow_txn_forget(&w->txn, parts->elems[i].partition);
        ow_output_close(&w->out, parts->elems[i].partition);
    }
}

/* Exactly-once: the transaction commits what the revoked partitions
 * produced with their offsets before they go, with the gate closed so that
 * nothing of theirs is produced after; lost partitions may already belong
 * to another member, so their transaction is aborted instead. */
static void revoke_in_transaction(ow_worker *w, const rd_kafka_topic_partition_list_t *parts,
                                  int lost)
{
    ow_publish_gate_close(&w->gate);
    if (lost) {
        end_partitions(w, parts);
        ow_txn_abort_closed(&w->txn, "partitions lost");
    } else {
        ow_txn_end_closed(&w->txn, "revoke", revoke_deadline(w));
        end_partitions(w, parts);
    }
    ow_publish_gate_open(&w->gate);
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
    if (w->cfg->exactly_once) {
        revoke_in_transaction(w, parts, lost);
    } else {
        /* A lost assignment may already belong to another member: commit
         * nothing. */
        if (!lost)
            ow_worker_commit(w, "revoke", revoke_deadline(w));
        for (int i = 0; i < parts->cnt; i++)
            ow_ledger_revoke_end(&w->ledger, parts->elems[i].partition);
    }
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
    w->rebalanced_ms = ow_clock_mono_ms();
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
 * cooperative assignment arrives while it closes (librdkafka issue #4527),
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
