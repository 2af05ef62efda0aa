/*
 * Exactly-once delivery (delivery.h): outputs and the offsets that cover
 * them commit in one Kafka transaction (txn.h), and each partition's jobs
 * are produced in the order they were consumed (sequencer.h). The
 * consumer thread commits every transaction.interval_ms, on revoke and at
 * the stop, with the publish gate closed, so that no lane produces while
 * the transaction ends; an abort is handled here to its end, the release
 * order included, before the gate opens again.
 */
#include <stdlib.h>

#include "delivery_mode.h"
#include "metrics.h"
#include "ow/log.h"
#include "sequencer.h"
#include "txn.h"

typedef struct {
    ow_delivery d;
    ow_txn txn;
    ow_sequencer *order; /* the order jobs are released in */
} eos_delivery;

/* How long an interval's commit waits for the producer's flush before it
 * leaves the transaction open for the next interval. */
#define TXN_FLUSH_WAIT_MS 5000

/* --- The release order ------------------------------------------------------ */

/* Jobs that will never be published end not done. */
static void settle_dropped(ow_delivery *d, ow_job *drop)
{
    while (drop != NULL) {
        ow_job *next = drop->seq_next;

        drop->seq_next = NULL;
        ow_job_settle(d->ledger, drop, 0);
        drop = next;
    }
}

/* The partition's epoch ended (partition < 0: every partition's): jobs
 * waiting for release are dropped. */
static void close_epoch(eos_delivery *e, int32_t partition)
{
    ow_job *drop = NULL;

    ow_sequencer_close(e->order, partition, &drop);
    settle_dropped(&e->d, drop);
}

/* An input that went back by itself (an offset reset) may be decided
 * again: what the open transaction holds of it must not commit. */
static int eos_track(ow_delivery *d, ow_job *job, int rewound)
{
    eos_delivery *e = (eos_delivery *)d;
    ow_job *drop = NULL;
    int rc;

    if (rewound)
        ow_txn_want_abort(&e->txn);
    rc = ow_sequencer_append(e->order, job, &drop);
    settle_dropped(d, drop);
    return rc;
}

static void eos_publish(ow_delivery *d, ow_job *job)
{
    eos_delivery *e = (eos_delivery *)d;
    ow_job *release = NULL, *drop = NULL;

    ow_sequencer_ready(e->order, job, &release, &drop);
    settle_dropped(d, drop);
    while (release != NULL) {
        int32_t partition = release->t.partition;

        while (release != NULL) {
            ow_job *next = release->seq_next;

            release->seq_next = NULL;
            ow_output_publish(d->out, release);
            release = next;
        }
        ow_sequencer_next(e->order, partition, &release);
    }
}

static void eos_abandon(ow_delivery *d, ow_job *job)
{
    eos_delivery *e = (eos_delivery *)d;
    ow_job *drop = NULL;

    ow_sequencer_abandon(e->order, job, &drop);
    settle_dropped(d, drop);
    ow_job_settle(d->ledger, job, 0);
}

/* --- Commits ---------------------------------------------------------------- */

/* After a call on the transaction, with the gate closed: when it aborted
 * the transaction (OW_ERETRY), every epoch ended, so what waits for
 * release is dropped before the next transaction begins and the gate
 * opens; nothing of the aborted epochs is produced into it. */
static int after_abort(eos_delivery *e, int rc)
{
    if (rc != OW_ERETRY)
        return rc;
    close_epoch(e, -1);
    return ow_txn_begin(&e->txn) == OW_OK ? OW_ERETRY : OW_EFATAL;
}

/* Commits (or aborts) the transaction with the gate closed. */
static int commit(eos_delivery *e, const char *why, int64_t deadline_ms)
{
    int rc;

    ow_publish_gate_close(&e->d.gate);
    rc = after_abort(e, ow_txn_commit_closed(&e->txn, why, deadline_ms));
    ow_publish_gate_open(&e->d.gate);
    return rc;
}

static void eos_tick(ow_delivery *d)
{
    eos_delivery *e = (eos_delivery *)d;

    if (ow_txn_due(&e->txn, ow_clock_mono_ms()))
        commit(e, "interval", ow_clock_mono_ms() + TXN_FLUSH_WAIT_MS);
}

static void eos_commit(ow_delivery *d, const char *why, int64_t deadline_ms)
{
    commit((eos_delivery *)d, why, deadline_ms);
}

/* The last transaction: what did not make it is consumed again by the
 * next owner, and the next producer with this id aborts it. */
static void eos_flush(ow_delivery *d, int64_t deadline_ms)
{
    ow_runstate_step(d->rs, "commit transaction");
    commit((eos_delivery *)d, "shutdown", deadline_ms);
}

static void eos_store_offset(ow_delivery *d, int32_t partition, int64_t offset)
{
    ow_txn_note_offset(&((eos_delivery *)d)->txn, partition, offset);
    OW_COUNT(offsets_stored, 1);
}

/* The consumer never commits by itself here (enable.auto.commit is off:
 * offsets commit with the transaction), so no such answer comes. */
static void eos_committed(ow_delivery *d, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t *offsets)
{
    (void)d;
    (void)err;
    (void)offsets;
}

/* The revoked partitions' epochs end: nothing of them is tracked, sent or
 * released any more. */
static void end_partitions(eos_delivery *e, const rd_kafka_topic_partition_list_t *parts)
{
    for (int i = 0; i < parts->cnt; i++) {
        ow_ledger_revoke_end(e->d.ledger, parts->elems[i].partition);
        ow_txn_forget(&e->txn, parts->elems[i].partition);
        close_epoch(e, parts->elems[i].partition);
    }
}

/* The transaction commits what the revoked partitions produced with their
 * offsets before they go, with the gate closed so that nothing of theirs
 * is produced after; lost partitions may already belong to another
 * member, so their transaction is aborted instead. */
static void eos_revoke(ow_delivery *d, const rd_kafka_topic_partition_list_t *parts, int lost)
{
    eos_delivery *e = (eos_delivery *)d;

    ow_publish_gate_close(&d->gate);
    if (lost) {
        end_partitions(e, parts);
        after_abort(e, ow_txn_abort_closed(&e->txn, "partitions lost"));
    } else {
        after_abort(
            e, ow_txn_end_closed(&e->txn, "revoke",
                                 ow_runstate_until(d->rs, d->cfg->rebalance_drain_timeout_ms)));
        end_partitions(e, parts);
    }
    ow_publish_gate_open(&d->gate);
}

/* --- The producer's callbacks ----------------------------------------------- */

/* An output the broker refused fails its transaction, which is aborted and
 * its messages consumed again. */
static void transaction_failed(eos_delivery *e, const rd_kafka_message_t *m, const ow_job *job)
{
    ow_output_refused(e->d.out, m);
    if (!ow_ledger_current(e->d.ledger, &job->t))
        return; /* from an epoch already over: its transaction is gone */
    OW_LOG(OW_LOG_WARN, "delivery_failed", OW_F_STR("topic", rd_kafka_topic_name(m->rkt)),
           OW_F_STR("error", rd_kafka_err2str(m->err)),
           OW_F_STR("then", "the transaction is aborted"), OW_F_JOB(job));
    ow_txn_want_abort(&e->txn);
}

static void eos_delivered(ow_delivery *d, rd_kafka_t *rk, const rd_kafka_message_t *m)
{
    ow_job *job = ow_job_of_tag(m->_private);

    (void)rk;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR || ow_output_purged(m)) {
        ow_output_delivered(d->out, m);
        return;
    }
    transaction_failed((eos_delivery *)d, m, job);
    ow_job_settle(d->ledger, job, 0);
}

/* A fenced producer says why, once, as its transaction's calls would; any
 * fatal error stops the worker. */
static ow_producer_fate eos_producer_failed(ow_delivery *d)
{
    return ow_txn_producer_failed(&((eos_delivery *)d)->txn) ? OW_PRODUCER_REPORTED
                                                             : OW_PRODUCER_STOPS;
}

/* --- Lifecycle -------------------------------------------------------------- */

static int eos_start(ow_delivery *d, rd_kafka_t *producer, ow_error *err)
{
    eos_delivery *e = (eos_delivery *)d;

    e->order = ow_sequencer_new();
    if (e->order == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    return ow_txn_start(&e->txn, producer, d->consumer, err);
}

static int eos_release(ow_delivery *d)
{
    return ow_txn_release(&((eos_delivery *)d)->txn);
}

static void eos_free(ow_delivery *d)
{
    eos_delivery *e = (eos_delivery *)d;

    ow_sequencer_free(&e->order);
    ow_txn_destroy(&e->txn);
    ow_delivery_base_cleanup(d);
    free(e);
}

static const ow_delivery_ops eos_ops = {
    .start = eos_start,
    .release = eos_release,
    .free = eos_free,
    .track = eos_track,
    .publish = eos_publish,
    .abandon = eos_abandon,
    .store_offset = eos_store_offset,
    .tick = eos_tick,
    .commit = eos_commit,
    .revoke = eos_revoke,
    .flush = eos_flush,
    .delivered = eos_delivered,
    .committed = eos_committed,
    .producer_failed = eos_producer_failed,
};

/* The open transaction holds outputs from now on. */
static void producing(void *opaque)
{
    ow_txn_produced(opaque);
}

ow_delivery *ow_delivery_eos_new(const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger)
{
    eos_delivery *e = calloc(1, sizeof(*e));

    if (e == NULL)
        return NULL;
    ow_delivery_base_init(&e->d, &eos_ops, cfg, rs, ledger);
    e->d.rules = (ow_output_rules){
        .producing = producing, .opaque = &e->txn, .notices_at_once = 1, .producer_replaced = 0};
    /* The consumer's poll wait is short enough for the transaction
     * interval. */
    if (cfg->transaction_interval_ms < e->d.poll_ms)
        e->d.poll_ms = (int)cfg->transaction_interval_ms;
    ow_txn_init(&e->txn, cfg, rs, ledger, &e->d.gate);
    return &e->d;
}
