/* The Kafka transaction of exactly-once mode (txn.h). */
#include "txn.h"

#include <stdlib.h>
#include <string.h>

#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/metrics.h"
#include "ow/util.h"

/* How long a first init_transactions may take: it waits for the
 * coordinator and for an earlier producer's transaction to be aborted. */
#define INIT_TIMEOUT_MS 60000
/* A pause between retries of a call librdkafka calls retriable. */
#define RETRY_PAUSE_MS 100

void ow_txn_init(ow_txn *tx, const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger,
                 ow_txn_epoch_end_fn epoch_end, void *opaque)
{
    *tx = (ow_txn){.enabled = cfg->exactly_once,
                   .cfg = cfg,
                   .rs = rs,
                   .ledger = ledger,
                   .epoch_end = epoch_end,
                   .opaque = opaque};
    pthread_mutex_init(&tx->gate_mu, NULL);
    pthread_cond_init(&tx->gate_cv, NULL);
    pthread_mutex_init(&tx->mu, NULL);
}

void ow_txn_destroy(ow_txn *tx)
{
    free(tx->noted);
    free(tx->committed);
    pthread_mutex_destroy(&tx->gate_mu);
    pthread_cond_destroy(&tx->gate_cv);
    pthread_mutex_destroy(&tx->mu);
}

/* --- Errors ------------------------------------------------------------- */

typedef enum { TXN_OK = 0, TXN_RETRY, TXN_ABORT, TXN_FATAL } txn_outcome;

/* What an error of the transactional API asks for; a fatal one stops the
 * worker with one line that says why (a fenced producer names its id). */
static txn_outcome outcome_of(ow_txn *tx, rd_kafka_error_t *e, const char *step)
{
    txn_outcome o;

    if (e == NULL)
        return TXN_OK;
    if (rd_kafka_error_txn_requires_abort(e))
        o = TXN_ABORT;
    else if (rd_kafka_error_is_retriable(e) && !rd_kafka_error_is_fatal(e))
        o = TXN_RETRY;
    else
        o = TXN_FATAL;
    if (o == TXN_FATAL) {
        char why[512];
        rd_kafka_resp_err_t code = rd_kafka_fatal_error(tx->producer, why, sizeof(why));
        int fenced = code == RD_KAFKA_RESP_ERR__FENCED ||
                     code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
                     code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;

        OW_LOG(OW_LOG_ERROR, fenced ? "kafka_fenced" : "kafka_transaction_failed",
               OW_F_STR("step", step), OW_F_STR("replica_id", tx->cfg->worker_replica_id),
               OW_F_STR("error", rd_kafka_error_string(e)),
               OW_F_STR("why", fenced ? "another producer with this transactional id started: "
                                        "a replica with the same worker.replica_id"
                                      : NULL));
        ow_runstate_set_fatal(tx->rs, fenced ? "fenced by a replica with the same replica id"
                                             : "a Kafka transaction failed");
    } else if (o == TXN_ABORT) {
        OW_LOG(OW_LOG_WARN, "kafka_transaction_abortable", OW_F_STR("step", step),
               OW_F_STR("error", rd_kafka_error_string(e)));
    }
    rd_kafka_error_destroy(e);
    return o;
}

static int begin(ow_txn *tx)
{
    txn_outcome o = outcome_of(tx, rd_kafka_begin_transaction(tx->producer), "begin");

    tx->open = o == TXN_OK;
    atomic_store(&tx->produced, 0);
    tx->last_commit_ms = ow_clock_mono_ms();
    return o == TXN_OK ? OW_OK : OW_EFATAL;
}

int ow_txn_start(ow_txn *tx, rd_kafka_t *producer, rd_kafka_t *consumer, ow_error *err)
{
    rd_kafka_error_t *e;

    tx->producer = producer;
    tx->consumer = consumer;
    if (!tx->enabled)
        return OW_OK;
    e = rd_kafka_init_transactions(producer, INIT_TIMEOUT_MS);
    if (e != NULL) {
        int rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                              "kafka: cannot start transactions for transactional id %s-%s: %s",
                              tx->cfg->kafka_group_id, tx->cfg->worker_replica_id,
                              rd_kafka_error_string(e));

        rd_kafka_error_destroy(e);
        return rc;
    }
    if (begin(tx) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "kafka: cannot begin a transaction");
    OW_LOG(OW_LOG_INFO, "transactions_started", OW_F_STR("replica_id", tx->cfg->worker_replica_id),
           OW_F_INT("interval_ms", tx->cfg->transaction_interval_ms));
    return OW_OK;
}

/* --- The gate ------------------------------------------------------------- */

void ow_txn_enter(ow_txn *tx)
{
    pthread_mutex_lock(&tx->gate_mu);
    while (tx->closing)
        pthread_cond_wait(&tx->gate_cv, &tx->gate_mu);
    tx->inside++;
    pthread_mutex_unlock(&tx->gate_mu);
}

void ow_txn_leave(ow_txn *tx)
{
    pthread_mutex_lock(&tx->gate_mu);
    if (--tx->inside == 0)
        pthread_cond_broadcast(&tx->gate_cv);
    pthread_mutex_unlock(&tx->gate_mu);
}

void ow_txn_close(ow_txn *tx)
{
    pthread_mutex_lock(&tx->gate_mu);
    tx->closing = 1;
    while (tx->inside > 0)
        pthread_cond_wait(&tx->gate_cv, &tx->gate_mu);
    pthread_mutex_unlock(&tx->gate_mu);
}

void ow_txn_open(ow_txn *tx)
{
    pthread_mutex_lock(&tx->gate_mu);
    tx->closing = 0;
    pthread_cond_broadcast(&tx->gate_cv);
    pthread_mutex_unlock(&tx->gate_mu);
}

/* --- Offsets -------------------------------------------------------------- */

void ow_txn_produced(ow_txn *tx)
{
    if (tx->enabled)
        atomic_store(&tx->produced, 1);
}

void ow_txn_want_abort(ow_txn *tx)
{
    atomic_store(&tx->abort_wanted, 1);
}

/* Makes room for the partition's entries; mu held. */
static int room_for(ow_txn *tx, int32_t partition)
{
    size_t n = (size_t)partition + 16;
    int64_t *a, *b;

    if (partition < 0)
        return 0;
    if ((size_t)partition < tx->n_parts)
        return 1;
    a = realloc(tx->noted, n * sizeof(*a));
    if (a != NULL)
        tx->noted = a;
    b = a != NULL ? realloc(tx->committed, n * sizeof(*b)) : NULL;
    if (b == NULL)
        return 0;
    tx->committed = b;
    for (size_t i = tx->n_parts; i < n; i++)
        tx->noted[i] = tx->committed[i] = -1;
    tx->n_parts = n;
    return 1;
}

void ow_txn_note_offset(ow_txn *tx, int32_t partition, int64_t offset)
{
    pthread_mutex_lock(&tx->mu);
    if (room_for(tx, partition))
        tx->noted[partition] = offset;
    else
        ow_runstate_set_fatal(tx->rs, "out of memory");
    pthread_mutex_unlock(&tx->mu);
}

void ow_txn_forget(ow_txn *tx, int32_t partition)
{
    pthread_mutex_lock(&tx->mu);
    if (partition >= 0 && (size_t)partition < tx->n_parts)
        tx->noted[partition] = tx->committed[partition] = -1;
    pthread_mutex_unlock(&tx->mu);
}

/* The offsets noted since they were last sent; NULL when there are none. */
static rd_kafka_topic_partition_list_t *offsets_to_send(ow_txn *tx)
{
    rd_kafka_topic_partition_list_t *l = NULL;

    pthread_mutex_lock(&tx->mu);
    for (size_t i = 0; i < tx->n_parts; i++) {
        if (tx->noted[i] < 0 || tx->noted[i] == tx->committed[i])
            continue;
        if (l == NULL)
            l = rd_kafka_topic_partition_list_new(8);
        rd_kafka_topic_partition_list_add(l, tx->cfg->topic_input, (int32_t)i)->offset =
            tx->noted[i];
    }
    pthread_mutex_unlock(&tx->mu);
    return l;
}

static void offsets_sent(ow_txn *tx, const rd_kafka_topic_partition_list_t *l)
{
    pthread_mutex_lock(&tx->mu);
    for (int i = 0; l != NULL && i < l->cnt; i++) {
        int32_t p = l->elems[i].partition;

        if (p >= 0 && (size_t)p < tx->n_parts)
            tx->committed[p] = l->elems[i].offset;
    }
    pthread_mutex_unlock(&tx->mu);
}

/* --- Abort and rewind ----------------------------------------------------- */

/* The ledger's report of a partition's epoch start: where it goes back to
 * is its last committed offset, or, if this assignment committed nothing
 * yet, the first offset it consumed. */
typedef struct {
    const ow_txn *tx;
    const int64_t *committed; /* a copy, taken before the ledger's lock */
    size_t n;
    rd_kafka_topic_partition_list_t *l;
} rewind_args;

static int64_t add_rewind(void *opaque, int32_t partition, int64_t stored, int64_t first)
{
    rewind_args *a = opaque;
    rd_kafka_topic_partition_list_t *l = a->l;
    int64_t to;

    (void)stored; /* acknowledged, but maybe in the aborted transaction */
    to = partition >= 0 && (size_t)partition < a->n ? a->committed[partition] : -1;
    if (to < 0)
        to = first;
    if (to >= 0)
        rd_kafka_topic_partition_list_add(l, a->tx->cfg->topic_input, partition)->offset = to;
    return to;
}

/* Every assigned partition back to its committed offset: a new epoch in the
 * ledger (what is in flight is stale), nothing waiting for release, the
 * consumer repositioned. */
static void rewind_all(ow_txn *tx)
{
    rewind_args a = {tx, NULL, 0, rd_kafka_topic_partition_list_new(16)};
    rd_kafka_topic_partition_list_t *l = a.l;
    int64_t *copy = NULL;
    rd_kafka_error_t *e;

    /* The ledger calls ow_txn_note_offset with its lock held, so tx->mu is
     * never held while the ledger's is taken. */
    pthread_mutex_lock(&tx->mu);
    if (tx->n_parts > 0 && (copy = malloc(tx->n_parts * sizeof(*copy))) != NULL) {
        memcpy(copy, tx->committed, tx->n_parts * sizeof(*copy));
        a.n = tx->n_parts;
    }
    pthread_mutex_unlock(&tx->mu);
    a.committed = copy;
    if (ow_ledger_rewind(tx->ledger, add_rewind, &a) != OW_OK || (tx->n_parts > 0 && copy == NULL))
        ow_runstate_set_fatal(tx->rs, "out of memory");
    free(copy);
    pthread_mutex_lock(&tx->mu);
    for (size_t i = 0; i < tx->n_parts; i++)
        tx->noted[i] = tx->committed[i];
    pthread_mutex_unlock(&tx->mu);
    if (tx->epoch_end != NULL)
        tx->epoch_end(tx->opaque);
    e = l->cnt > 0 ? ow_kafka_seek(tx->consumer, l, 10000) : NULL;
    if (e != NULL) {
        OW_LOG(OW_LOG_ERROR, "rewind_failed", OW_F_STR("error", rd_kafka_error_string(e)));
        rd_kafka_error_destroy(e);
        ow_runstate_set_fatal(tx->rs, "the input could not be rewound after an abort");
    }
    for (int i = 0; i < l->cnt; i++)
        OW_LOG(OW_LOG_INFO, "partition_rewound", OW_F_INT("partition", l->elems[i].partition),
               OW_F_INT("offset", l->elems[i].offset), OW_F_STR("why", "transaction aborted"));
    rd_kafka_topic_partition_list_destroy(l);
}

int ow_txn_abort_closed(ow_txn *tx, const char *why)
{
    txn_outcome o;

    if (!tx->enabled || !tx->open)
        return OW_OK;
    do {
        o = outcome_of(tx, rd_kafka_abort_transaction(tx->producer, -1), "abort");
    } while (o == TXN_RETRY && !ow_runstate_give_up(tx->rs));
    tx->open = 0;
    atomic_store(&tx->abort_wanted, 0);
    if (o != TXN_OK)
        return OW_EFATAL;
    OW_COUNT(kafka_txn_aborts, 1);
    OW_LOG(OW_LOG_WARN, "txn_aborted", OW_F_STR("why", why));
    rewind_all(tx);
    return begin(tx) == OW_OK ? OW_ERETRY : OW_EFATAL;
}

/* --- Commit ------------------------------------------------------------- */

/* Waits until every produced output was acknowledged (the ledger has then
 * noted every offset they cover); 0 when the deadline came first. */
static int flushed(ow_txn *tx, int64_t deadline_ms)
{
    while (rd_kafka_flush(tx->producer, RETRY_PAUSE_MS) == RD_KAFKA_RESP_ERR__TIMED_OUT) {
        if (ow_clock_mono_ms() >= deadline_ms || atomic_load(&tx->abort_wanted) ||
            atomic_load(&tx->rs->fatal))
            return 0;
    }
    return 1;
}

static txn_outcome send_offsets(ow_txn *tx, const rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_consumer_group_metadata_t *md = rd_kafka_consumer_group_metadata(tx->consumer);
    txn_outcome o;

    do {
        o = outcome_of(tx, rd_kafka_send_offsets_to_transaction(tx->producer, l, md, -1),
                       "send offsets");
        if (o == TXN_RETRY)
            ow_sleep_ms(RETRY_PAUSE_MS, NULL);
    } while (o == TXN_RETRY && !ow_runstate_give_up(tx->rs));
    rd_kafka_consumer_group_metadata_destroy(md);
    return o;
}

static txn_outcome commit(ow_txn *tx)
{
    txn_outcome o;

    do {
        o = outcome_of(tx, rd_kafka_commit_transaction(tx->producer, -1), "commit");
    } while (o == TXN_RETRY && !ow_runstate_give_up(tx->rs));
    return o;
}

int ow_txn_commit_closed(ow_txn *tx, const char *why, int64_t deadline_ms)
{
    rd_kafka_topic_partition_list_t *l;
    txn_outcome o = TXN_OK;

    if (!tx->enabled)
        return OW_OK;
    if (!tx->open)
        return OW_EFATAL;
    if (atomic_load(&tx->abort_wanted))
        return ow_txn_abort_closed(tx, "an output was not delivered");
    if (!flushed(tx, deadline_ms))
        return atomic_load(&tx->abort_wanted)
                   ? ow_txn_abort_closed(tx, "an output was not delivered")
                   : OW_OK;
    l = offsets_to_send(tx);
    if (l == NULL && !atomic_load(&tx->produced)) {
        tx->last_commit_ms = ow_clock_mono_ms();
        return OW_OK;
    }
    if (l != NULL)
        o = send_offsets(tx, l);
    if (o == TXN_OK)
        o = commit(tx);
    if (o == TXN_OK) {
        offsets_sent(tx, l);
        OW_COUNT(kafka_txn_commits, 1);
        OW_LOG(OW_LOG_DEBUG, "transaction_committed", OW_F_STR("why", why),
               OW_F_INT("partitions", l != NULL ? l->cnt : 0));
    }
    if (l != NULL)
        rd_kafka_topic_partition_list_destroy(l);
    tx->open = 0;
    if (o == TXN_ABORT) {
        tx->open = 1; /* the abort ends it */
        return ow_txn_abort_closed(tx, why);
    }
    if (o != TXN_OK)
        return OW_EFATAL;
    return begin(tx);
}

int ow_txn_commit(ow_txn *tx, const char *why, int64_t deadline_ms)
{
    int rc;

    if (!tx->enabled)
        return OW_OK;
    ow_txn_close(tx);
    rc = ow_txn_commit_closed(tx, why, deadline_ms);
    ow_txn_open(tx);
    return rc;
}

int ow_txn_due(ow_txn *tx, int64_t now_ms)
{
    return tx->enabled && (atomic_load(&tx->abort_wanted) ||
                           now_ms - tx->last_commit_ms >= tx->cfg->transaction_interval_ms);
}
