/*
 * At-least-once delivery (delivery.h): a job's outputs are produced as
 * soon as its lane decided it, the ledger stores each partition's offset
 * in the consumer once every output below it was acknowledged, and the
 * consumer commits the stored offsets: by itself every commit.interval_ms,
 * and here on revoke and at the stop.
 */
#include <stdlib.h>

#include "delivery_mode.h"
#include "metrics.h"
#include "ow/kafka.h"
#include "ow/log.h"

typedef struct {
    ow_delivery d;
    /* Commits still to name the stored offsets themselves after a failed
     * periodic one (alo_tick), and when the next may go. Consumer
     * thread. */
    int recommits;
    int64_t recommit_at_ms;
} alo_delivery;

/* How many commits after a failed one name the stored offsets: usually
 * enough to outlast a retried request still on its way. A failure while
 * they go (theirs included: their answers come here too) does not add to
 * them; one after the last starts three more, so a long outage costs at
 * most one named commit per interval beside the client's own. */
#define RECOMMITS 3

/* --- Lifecycle ------------------------------------------------------------ */

static int alo_start(ow_delivery *d, rd_kafka_t *producer, ow_error *err)
{
    (void)d;
    (void)producer;
    (void)err;
    return OW_OK;
}

static int alo_release(ow_delivery *d)
{
    (void)d;
    return 1;
}

static void alo_free(ow_delivery *d)
{
    ow_delivery_base_cleanup(d);
    free(d);
}

/* --- Jobs ------------------------------------------------------------------ */

/* Outputs leave in the order their lanes decide them: one key's messages
 * share a lane, so its results stay in order. */
static int alo_track(ow_delivery *d, ow_job *job, int rewound)
{
    (void)d;
    (void)job;
    (void)rewound;
    return OW_OK;
}

static void alo_publish(ow_delivery *d, ow_job *job)
{
    ow_output_publish(d->out, job);
}

static void alo_abandon(ow_delivery *d, ow_job *job)
{
    ow_job_settle(d->ledger, job, 0);
}

/* --- Offsets and commits --------------------------------------------------- */

static void alo_store_offset(ow_delivery *d, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;

    rd_kafka_topic_partition_list_add(l, d->cfg->topic_input, partition)->offset = offset;
    e = rd_kafka_offsets_store(d->consumer, l);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && l->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        OW_COUNT(offsets_stored, 1);
    else
        OW_LOG(OW_LOG_DEBUG, "offset_store_skipped", OW_F_INT("partition", partition),
               OW_F_INT("offset", offset), OW_F_STR("error", rd_kafka_err2str(e)));
    rd_kafka_topic_partition_list_destroy(l);
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

static void alo_committed(ow_delivery *d, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t *offsets)
{
    alo_delivery *a = (alo_delivery *)d;

    if (!count_commit(err, offsets, "periodic") && a->recommits == 0)
        a->recommits = RECOMMITS;
}

/* A list of offsets being filled from the ledger (an ow_ledger_rewind_fn,
 * which returns the offset added, -1 for none): each partition's stored
 * offset, or with or_first, where its assignment began when it stored
 * none. */
typedef struct {
    const char *topic;
    rd_kafka_topic_partition_list_t *list;
    int or_first;
} offset_list;

static int64_t add_offset(void *opaque, int32_t partition, int64_t stored, int64_t first)
{
    const offset_list *ol = opaque;
    int64_t to = stored >= 0 || !ol->or_first ? stored : first;

    if (to >= 0)
        rd_kafka_topic_partition_list_add(ol->list, ol->topic, partition)->offset = to;
    return to;
}

/* ow_ledger_each_fn's shape. */
static void add_stored_offset(void *opaque, int32_t partition, int64_t stored, int64_t first)
{
    add_offset(opaque, partition, stored, first);
}

/* After a failed periodic commit: the stored offsets of the assigned
 * partitions, committed by name, once every commit.interval_ms, up to
 * RECOMMITS times, never within an interval of a rebalance callback.
 *
 * The client's periodic commit sends only the partitions whose stored
 * offset it believes uncommitted. While the group coordinator moves, a
 * retried commit request can cross a newer one, and the client can then
 * believe committed what the coordinator holds older: a partition that
 * receives nothing more would keep that older offset (its lag never
 * reaching zero, its messages redelivered after a restart). Naming the
 * offsets sends them whatever the client believes. The client's own
 * periodic commit waits for a settled group; this one stays clear of a
 * rebalance callback by an interval, the nearest sign of one it has. */
static void alo_tick(ow_delivery *d)
{
    alo_delivery *a = (alo_delivery *)d;
    offset_list ol;
    int64_t now;

    if (a->recommits == 0)
        return;
    now = ow_clock_mono_ms();
    if (now < a->recommit_at_ms || now < d->rebalanced_ms + d->cfg->commit_interval_ms ||
        rd_kafka_assignment_lost(d->consumer))
        return;
    a->recommits--;
    a->recommit_at_ms = now + d->cfg->commit_interval_ms;
    ol = (offset_list){d->cfg->topic_input, rd_kafka_topic_partition_list_new(8), 0};
    ow_ledger_each_assigned(d->ledger, add_stored_offset, &ol);
    /* Its answer comes to alo_committed. */
    if (ol.list->cnt > 0)
        rd_kafka_commit(d->consumer, ol.list, 1);
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
 * for its own 45 s timeout. */
static void alo_commit(ow_delivery *d, const char *why, int64_t deadline_ms)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(d->consumer);
    commit_wait *cw = calloc(1, sizeof(*cw));
    rd_kafka_resp_err_t e;

    if (q == NULL || cw == NULL) {
        if (q != NULL)
            rd_kafka_queue_destroy(q);
        free(cw);
        return;
    }
    cw->when = why;
    e = rd_kafka_commit_queue(d->consumer, NULL, q, on_commit, cw);
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

static void alo_revoke(ow_delivery *d, const rd_kafka_topic_partition_list_t *parts, int lost)
{
    /* A lost assignment may already belong to another member: commit
     * nothing. */
    if (!lost)
        alo_commit(d, "revoke", ow_runstate_until(d->rs, d->cfg->rebalance_drain_timeout_ms));
    for (int i = 0; i < parts->cnt; i++)
        ow_ledger_revoke_end(d->ledger, parts->elems[i].partition);
}

static void alo_flush(ow_delivery *d, int64_t deadline_ms)
{
    int64_t left = deadline_ms - ow_clock_mono_ms();

    ow_output_flush(d->out, (int)(left > 0 ? left : 0));
}

/* The producer was replaced and what it held given up: a partition goes
 * back to its stored offset, or to where its assignment began. */
static int alo_rewind(ow_delivery *d)
{
    offset_list back = {d->cfg->topic_input, rd_kafka_topic_partition_list_new(16), 1};
    rd_kafka_error_t *e = NULL;
    int n;

    if (ow_ledger_rewind(d->ledger, add_offset, &back) != OW_OK)
        ow_runstate_set_fatal(d->rs, "out of memory");
    if (back.list->cnt > 0 && (e = ow_kafka_seek(d->consumer, back.list, 10000)) != NULL) {
        OW_LOG(OW_LOG_ERROR, "rewind_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
        ow_runstate_set_fatal(d->rs, "the input could not be rewound after a producer failed");
    }
    n = back.list->cnt;
    rd_kafka_topic_partition_list_destroy(back.list);
    return n;
}

/* --- The producer's callbacks ---------------------------------------------- */

/* A producer that failed fatally fails what it still held: the worker
 * replaces it and those messages are redone. */
static void alo_delivered(ow_delivery *d, rd_kafka_t *rk, const rd_kafka_message_t *m)
{
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR &&
        rd_kafka_fatal_error(rk, NULL, 0) != RD_KAFKA_RESP_ERR_NO_ERROR)
        ow_output_given_up(d->out, m);
    else
        ow_output_delivered(d->out, m);
}

/* Without transactions a producer's fatal error loses no more than its
 * unacknowledged outputs, which are redone: it is replaced (librdkafka
 * 2.0's idempotent producer can fail so after a partition leader
 * change). */
static ow_producer_fate alo_producer_failed(ow_delivery *d)
{
    (void)d;
    return OW_PRODUCER_REPLACED;
}

static const ow_delivery_ops alo_ops = {
    .start = alo_start,
    .release = alo_release,
    .free = alo_free,
    .track = alo_track,
    .publish = alo_publish,
    .abandon = alo_abandon,
    .store_offset = alo_store_offset,
    .tick = alo_tick,
    .commit = alo_commit,
    .revoke = alo_revoke,
    .flush = alo_flush,
    .rewind = alo_rewind,
    .delivered = alo_delivered,
    .committed = alo_committed,
    .producer_failed = alo_producer_failed,
};

ow_delivery *ow_delivery_alo_new(const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger)
{
    alo_delivery *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    ow_delivery_base_init(&a->d, &alo_ops, cfg, rs, ledger);
    /* Notices wait for the delivery poller, whose callback may not block
     * on a full queue; the lane that queued one pumps it right after. */
    a->d.rules = (ow_output_rules){.producing = NULL, .notices_at_once = 0, .producer_replaced = 1};
    return &a->d;
}
