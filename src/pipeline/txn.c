/* The Kafka transaction of exactly-once mode (txn.h). */
#include "txn.h"

#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/util.h"

/* How long a first init_transactions may take: it waits for the
 * coordinator and for an earlier producer's transaction to be aborted. */
#define INIT_TIMEOUT_MS 60000
/* A pause between retries of a call librdkafka calls retriable. */
#define RETRY_PAUSE_MS 100
/* How long one call of init_transactions, commit_transaction or
 * abort_transaction blocks before the caller looks at the stop again. A
 * call that times out is made again and resumes the operation, which
 * librdkafka carries on in the background meanwhile. */
#define CALL_SLICE_MS 200
/* How often the consumer thread looks at the stop while the caller thread
 * sends offsets. */
#define CALLER_POLL_MS 100
/* librdkafka's transaction.timeout.ms when the configuration sets none. */
#define DEFAULT_TIMEOUT_MS 60000

/* send_offsets_to_transaction waits for the coordinators' answers however
 * short its timeout: librdkafka (2.0.2 and 2.8.0 alike) bounds only its
 * retries by it, so while a broker hangs the call returns after the
 * request's socket.timeout.ms, or when the broker comes back. It runs on a
 * thread of its own, and the consumer thread waits for it only as long as
 * it may. The structure lives on the heap and is never freed while a call
 * a stop gave up on still runs: the call returns into it. */
struct ow_txn_caller {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    rd_kafka_t *producer;
    /* The call handed over; the thread owns (and frees) them. */
    rd_kafka_topic_partition_list_t *offsets;
    rd_kafka_consumer_group_metadata_t *md;
    int timeout_ms;
    int busy;      /* a call was handed over and has not been collected */
    int done;      /* it returned: result holds its answer */
    int abandoned; /* nobody waits for it any more: the thread drops the answer */
    int quit;
    rd_kafka_error_t *result;
};

void ow_txn_init(ow_txn *tx, const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger,
                 ow_publish_gate *gate)
{
    *tx = (ow_txn){
        .cfg = cfg, .rs = rs, .ledger = ledger, .gate = gate, .timeout_ms = DEFAULT_TIMEOUT_MS};
    pthread_mutex_init(&tx->mu, NULL);
}

void ow_txn_destroy(ow_txn *tx)
{
    free(tx->noted);
    free(tx->committed);
    pthread_mutex_destroy(&tx->mu);
}

/* --- Errors ------------------------------------------------------------- */

typedef enum { TXN_OK = 0, TXN_RETRY, TXN_ABORT, TXN_FATAL } txn_outcome;

/* Why a fenced producer was fenced, as far as the client can tell. The
 * broker bumps the producer's epoch both when another producer with the
 * transactional id calls init_transactions and when it aborts a
 * transaction that outlived transaction.timeout.ms, and the old producer's
 * next request is refused either way. librdkafka (2.0.2 and 2.8.0) turns
 * every such refusal, INVALID_PRODUCER_EPOCH or PRODUCER_FENCED, from a
 * produce or a transactional request, into the same fatal _FENCED with
 * the same text. What the worker knows is how long its transaction was
 * open: the broker counts from no earlier than its first output, so a
 * transaction open for less than the timeout cannot have timed out, and
 * was fenced by another producer; one open for longer may have timed out,
 * or met such a producer as well. */
typedef enum { FENCED_TIMEOUT = 0, FENCED_REPLICA = 1 } fence_cause;

static int is_fencing(rd_kafka_resp_err_t code)
{
    return code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
           code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
}

/* Logs the producer's fatal error once and stops the worker. error is the
 * failed call's text (NULL from the error callback). */
static void report_fatal(ow_txn *tx, const char *step, const char *error)
{
    char why[512];
    rd_kafka_resp_err_t code = rd_kafka_fatal_error(tx->producer, why, sizeof(why));
    int64_t opened = atomic_load(&tx->opened_ms);
    int64_t open_ms = opened > 0 ? ow_clock_mono_ms() - opened : 0;
    fence_cause cause = opened > 0 && open_ms >= tx->timeout_ms ? FENCED_TIMEOUT : FENCED_REPLICA;

    if (error == NULL)
        error = why;
    if (!is_fencing(code)) {
        if (atomic_exchange(&tx->failure_logged, 1) == 0)
            OW_LOG(OW_LOG_ERROR, "kafka_transaction_failed", OW_F_STR("step", step),
                   OW_F_STR("replica_id", tx->cfg->worker_replica_id), OW_F_STR("error", error));
        ow_runstate_set_fatal(tx->rs, "a Kafka transaction failed");
        return;
    }
    if (atomic_exchange(&tx->failure_logged, 1) == 0) {
        OW_COUNT(fenced[cause], 1);
        OW_LOG(OW_LOG_ERROR, "kafka_fenced", OW_F_STR("step", step),
               OW_F_STR("replica_id", tx->cfg->worker_replica_id),
               OW_F_STR("cause", cause == FENCED_TIMEOUT ? "transaction timed out"
                                                         : "a replica with the same id"),
               OW_F_INT("open_ms", open_ms), OW_F_INT("transaction_timeout_ms", tx->timeout_ms),
               OW_F_STR("error", error),
               OW_F_STR("why", cause == FENCED_TIMEOUT
                                   ? "the transaction timed out: it was open longer than the "
                                     "producer's transaction.timeout.ms, so the broker aborted "
                                     "it and fenced this producer (or a replica with the same "
                                     "worker.replica_id started meanwhile: the broker refuses "
                                     "both alike)"
                                   : "another producer with this transactional id started: a "
                                     "replica with the same worker.replica_id (the transaction "
                                     "was younger than transaction.timeout.ms, so the broker "
                                     "had not aborted it)"));
    }
    ow_runstate_set_fatal(tx->rs, cause == FENCED_TIMEOUT
                                      ? "the Kafka transaction timed out (or a replica with the "
                                        "same replica id started)"
                                      : "fenced by a replica with the same replica id");
}

int ow_txn_producer_failed(ow_txn *tx)
{
    if (tx->producer == NULL || !is_fencing(rd_kafka_fatal_error(tx->producer, NULL, 0)))
        return 0;
    report_fatal(tx, "producer request", NULL);
    return 1;
}

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
    if (o == TXN_FATAL)
        report_fatal(tx, step, rd_kafka_error_string(e));
    else if (o == TXN_ABORT)
        OW_LOG(OW_LOG_WARN, "kafka_transaction_abortable", OW_F_STR("step", step),
               OW_F_STR("error", rd_kafka_error_string(e)));
    rd_kafka_error_destroy(e);
    return o;
}

/* Whether the calls of a commit or an abort are given up: after a fatal
 * error, or once a stop was asked for, at its deadline, less the reserve
 * it keeps for leaving the group unless this is the stop's own commit. */
static int calls_end(const ow_txn *tx)
{
    int64_t d;

    if (atomic_load(&tx->rs->fatal))
        return 1;
    d = ow_runstate_deadline(tx->rs);
    if (d == 0)
        return 0;
    if (!atomic_load(&tx->rs->stopping))
        d -= ow_runstate_reserve_ms();
    return ow_clock_mono_ms() >= d;
}

/* A stop gave up on a call whose outcome is now the broker's: nothing more
 * goes into the transaction and no call is made on the producer again.
 * Its outputs and offsets stay together: the broker commits them if the
 * commit reached the coordinator, and otherwise the next producer with
 * this transactional id aborts them at init_transactions (or the broker
 * after transaction.timeout.ms). An abort after the deadline would change
 * nothing. */
static void seal(ow_txn *tx, const char *step)
{
    ow_publish_gate_seal(tx->gate);
    tx->sealed = 1;
    tx->open = 0;
    /* After a fatal error its own line says why the worker stops. */
    if (!atomic_load(&tx->rs->fatal))
        OW_LOG(OW_LOG_WARN, "transaction_given_up", OW_F_STR("step", step),
               OW_F_STR("why", "the stop's deadline came first"),
               OW_F_STR("then", "its outputs and offsets commit together or not at all, as the "
                                "broker settles it; what did not commit is redelivered"));
}

/* --- The caller thread ---------------------------------------------------- */

static void *caller_main(void *arg)
{
    ow_txn_caller *c = arg;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        rd_kafka_topic_partition_list_t *offsets;
        rd_kafka_consumer_group_metadata_t *md;
        rd_kafka_error_t *e;

        while (!c->quit && !(c->busy && !c->done && c->offsets != NULL))
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit)
            break;
        offsets = c->offsets;
        md = c->md;
        c->offsets = NULL;
        c->md = NULL;
        pthread_mutex_unlock(&c->mu);
        e = rd_kafka_send_offsets_to_transaction(c->producer, offsets, md, c->timeout_ms);
        rd_kafka_topic_partition_list_destroy(offsets);
        rd_kafka_consumer_group_metadata_destroy(md);
        pthread_mutex_lock(&c->mu);
        if (c->abandoned) {
            if (e != NULL)
                rd_kafka_error_destroy(e);
            c->busy = 0;
        } else {
            c->result = e;
            c->done = 1;
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int caller_start(ow_txn *tx)
{
    ow_txn_caller *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return OW_ENOMEM;
    c->producer = tx->producer;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->thread, NULL, caller_main, c) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        free(c);
        return OW_EFATAL;
    }
    tx->caller = c;
    return OW_OK;
}

int ow_txn_release(ow_txn *tx)
{
    ow_txn_caller *c = tx->caller;
    int busy;

    if (c == NULL)
        return 1;
    pthread_mutex_lock(&c->mu);
    busy = c->busy && !c->done;
    c->quit = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (busy) {
        /* The call returns into c later, or never: both outlive this. */
        pthread_detach(c->thread);
        tx->caller = NULL;
        return 0;
    }
    pthread_join(c->thread, NULL);
    if (c->result != NULL)
        rd_kafka_error_destroy(c->result);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    tx->caller = NULL;
    return 1;
}

/* Sends offsets on the caller thread and waits for its answer until the
 * calls end (calls_end). Takes md. Returns the call's error (NULL: sent),
 * or sets *gave_up when the wait was given up. */
static rd_kafka_error_t *call_send_offsets(ow_txn *tx, const rd_kafka_topic_partition_list_t *l,
                                           rd_kafka_consumer_group_metadata_t *md, int *gave_up)
{
    ow_txn_caller *c = tx->caller;
    rd_kafka_error_t *e = NULL;
    int64_t d = ow_runstate_deadline(tx->rs);
    int64_t timeout = tx->timeout_ms;

    /* Past the stop's deadline a retried request has no use. */
    if (d > 0 && d - ow_clock_mono_ms() < timeout)
        timeout = d > ow_clock_mono_ms() ? d - ow_clock_mono_ms() : 1;
    pthread_mutex_lock(&c->mu);
    c->offsets = rd_kafka_topic_partition_list_copy(l);
    c->md = md;
    c->timeout_ms = (int)timeout;
    c->busy = 1;
    c->done = 0;
    pthread_cond_broadcast(&c->cv);
    while (!c->done) {
        struct timespec ts;

        if (calls_end(tx)) {
            *gave_up = 1;
            if (c->offsets != NULL) { /* not taken up yet: never made */
                rd_kafka_topic_partition_list_destroy(c->offsets);
                rd_kafka_consumer_group_metadata_destroy(c->md);
                c->offsets = NULL;
                c->md = NULL;
                c->busy = 0;
            } else {
                c->abandoned = 1;
            }
            break;
        }
        ow_deadline_after_ms(CALLER_POLL_MS, &ts);
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    if (c->done) {
        e = c->result;
        c->result = NULL;
        c->busy = 0;
        c->done = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

/* One resumable call (init, commit, abort) of CALL_SLICE_MS at a time,
 * until it is answered for good or the calls end: returns its outcome, or
 * TXN_RETRY with *gave_up set. */
typedef rd_kafka_error_t *(*txn_call_fn)(rd_kafka_t *rk, int timeout_ms);

static txn_outcome call_resumable(ow_txn *tx, txn_call_fn fn, const char *step, int *gave_up)
{
    for (;;) {
        rd_kafka_error_t *e = fn(tx->producer, CALL_SLICE_MS);
        int timed_out = e != NULL && rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR__TIMED_OUT;
        txn_outcome o = outcome_of(tx, e, step);

        if (o != TXN_RETRY)
            return o;
        if (calls_end(tx)) {
            *gave_up = 1;
            return o;
        }
        /* An answer other than a timeout came at once: do not spin. */
        if (!timed_out)
            ow_sleep_ms(RETRY_PAUSE_MS, NULL);
    }
}

int ow_txn_begin(ow_txn *tx)
{
    txn_outcome o = outcome_of(tx, rd_kafka_begin_transaction(tx->producer), "begin");

    tx->open = o == TXN_OK;
    atomic_store(&tx->opened_ms, 0);
    tx->last_commit_ms = ow_clock_mono_ms();
    return o == TXN_OK ? OW_OK : OW_EFATAL;
}

/* The producer's transaction.timeout.ms, which the broker enforces. */
static int64_t producer_timeout_ms(rd_kafka_t *producer)
{
    char buf[32];
    size_t len = sizeof(buf);
    int64_t v = 0;

    if (rd_kafka_conf_get(rd_kafka_conf(producer), "transaction.timeout.ms", buf, &len) !=
            RD_KAFKA_CONF_OK ||
        ow_parse_int64(buf, &v) != OW_OK || v <= 0)
        return DEFAULT_TIMEOUT_MS;
    return v;
}

/* init_transactions, a slice at a time so that a stop asked for meanwhile
 * is seen; 1 when it finished, 0 after a stop (the transaction is then
 * sealed), or an error. */
static int init_transactions(ow_txn *tx, ow_error *err)
{
    int64_t deadline = ow_clock_mono_ms() + INIT_TIMEOUT_MS;

    for (;;) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(tx->producer, CALL_SLICE_MS);
        int again = e != NULL && rd_kafka_error_is_retriable(e) && !rd_kafka_error_is_fatal(e) &&
                    ow_clock_mono_ms() < deadline;

        if (e == NULL)
            return 1;
        if (again && ow_runstate_stop_asked(tx->rs)) {
            rd_kafka_error_destroy(e);
            seal(tx, "init");
            return 0;
        }
        if (!again) {
            int rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                                  "kafka: cannot start transactions for transactional id %s-%s: %s",
                                  tx->cfg->kafka_group_id, tx->cfg->worker_replica_id,
                                  rd_kafka_error_string(e));

            rd_kafka_error_destroy(e);
            return rc;
        }
        if (rd_kafka_error_code(e) != RD_KAFKA_RESP_ERR__TIMED_OUT)
            ow_sleep_ms(RETRY_PAUSE_MS, NULL);
        rd_kafka_error_destroy(e);
    }
}

int ow_txn_start(ow_txn *tx, rd_kafka_t *producer, rd_kafka_t *consumer, ow_error *err)
{
    int rc;

    tx->producer = producer;
    tx->consumer = consumer;
    tx->timeout_ms = producer_timeout_ms(producer);
    if (caller_start(tx) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot start the transaction's caller");
    rc = init_transactions(tx, err);
    if (rc <= 0)
        return rc < 0 ? rc : OW_OK;
    if (ow_txn_begin(tx) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "kafka: cannot begin a transaction");
    OW_LOG(OW_LOG_INFO, "transactions_started", OW_F_STR("replica_id", tx->cfg->worker_replica_id),
           OW_F_INT("interval_ms", tx->cfg->transaction_interval_ms));
    return OW_OK;
}

/* --- Offsets -------------------------------------------------------------- */

/* Marks the transaction opened at its first output or offsets; later
 * outputs only read the mark, so that they do not all write one line. */
static void mark_opened(ow_txn *tx)
{
    int64_t none = 0;

    if (atomic_load_explicit(&tx->opened_ms, memory_order_relaxed) == 0)
        atomic_compare_exchange_strong(&tx->opened_ms, &none, ow_clock_mono_ms());
}

void ow_txn_produced(ow_txn *tx)
{
    mark_opened(tx);
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
 * ledger (what is in flight is stale), the offsets noted forgotten, the
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
    int gave_up = 0;

    if (!tx->open)
        return OW_OK;
    o = call_resumable(tx, rd_kafka_abort_transaction, "abort", &gave_up);
    atomic_store(&tx->abort_wanted, 0);
    if (gave_up) {
        seal(tx, "abort");
        return OW_TXN_NOT_COMMITTED;
    }
    tx->open = 0;
    if (o != TXN_OK)
        return OW_EFATAL;
    OW_COUNT(kafka_txn_aborts, 1);
    OW_LOG(OW_LOG_WARN, "txn_aborted", OW_F_STR("why", why));
    rewind_all(tx);
    return OW_ERETRY;
}

/* --- Commit ------------------------------------------------------------- */

/* Waits until every produced output was acknowledged (the ledger has then
 * noted every offset they cover); 0 when the deadline came first. Outside
 * the stop itself a stop asked for ends the wait too: the stop's own
 * commit flushes again, with the stop's budget. */
static int flushed(ow_txn *tx, int64_t deadline_ms)
{
    while (rd_kafka_flush(tx->producer, RETRY_PAUSE_MS) == RD_KAFKA_RESP_ERR__TIMED_OUT) {
        if (ow_clock_mono_ms() >= deadline_ms || atomic_load(&tx->abort_wanted) ||
            atomic_load(&tx->rs->fatal))
            return 0;
        if (!atomic_load(&tx->rs->stopping) && ow_runstate_stop_asked(tx->rs))
            return 0;
    }
    return 1;
}

static txn_outcome send_offsets(ow_txn *tx, const rd_kafka_topic_partition_list_t *l, int *gave_up)
{
    txn_outcome o;

    /* Offsets alone open the transaction on the broker too. */
    mark_opened(tx);
    do {
        rd_kafka_error_t *e =
            call_send_offsets(tx, l, rd_kafka_consumer_group_metadata(tx->consumer), gave_up);

        if (*gave_up)
            return TXN_RETRY;
        o = outcome_of(tx, e, "send offsets");
        if (o == TXN_RETRY)
            ow_sleep_ms(RETRY_PAUSE_MS, NULL);
    } while (o == TXN_RETRY && !(*gave_up = calls_end(tx)));
    return o;
}

int ow_txn_commit_closed(ow_txn *tx, const char *why, int64_t deadline_ms)
{
    rd_kafka_topic_partition_list_t *l;
    const char *step = "send offsets";
    txn_outcome o = TXN_OK;
    int gave_up = 0;

    if (tx->sealed)
        return OW_TXN_NOT_COMMITTED;
    if (!tx->open)
        return OW_EFATAL;
    if (atomic_load(&tx->abort_wanted))
        return ow_txn_abort_closed(tx, "an output was not delivered");
    if (!flushed(tx, deadline_ms))
        return atomic_load(&tx->abort_wanted)
                   ? ow_txn_abort_closed(tx, "an output was not delivered")
                   : OW_TXN_NOT_COMMITTED;
    l = offsets_to_send(tx);
    if (l == NULL && atomic_load(&tx->opened_ms) == 0) {
        tx->last_commit_ms = ow_clock_mono_ms();
        return OW_OK;
    }
    if (l != NULL)
        o = send_offsets(tx, l, &gave_up);
    if (o == TXN_OK) {
        step = "commit";
        o = call_resumable(tx, rd_kafka_commit_transaction, step, &gave_up);
    }
    if (o == TXN_OK) {
        offsets_sent(tx, l);
        OW_COUNT(kafka_txn_commits, 1);
        OW_LOG(OW_LOG_DEBUG, "transaction_committed", OW_F_STR("why", why),
               OW_F_INT("partitions", l != NULL ? l->cnt : 0));
    }
    if (l != NULL)
        rd_kafka_topic_partition_list_destroy(l);
    if (gave_up) {
        seal(tx, step);
        return OW_TXN_NOT_COMMITTED;
    }
    tx->open = 0;
    if (o == TXN_ABORT) {
        tx->open = 1; /* the abort ends it */
        return ow_txn_abort_closed(tx, why);
    }
    if (o != TXN_OK)
        return OW_EFATAL;
    return ow_txn_begin(tx);
}

int ow_txn_end_closed(ow_txn *tx, const char *why, int64_t deadline_ms)
{
    int rc = ow_txn_commit_closed(tx, why, deadline_ms);

    if (rc == OW_TXN_NOT_COMMITTED && !tx->sealed)
        rc = ow_txn_abort_closed(tx, "its commit could not finish in time");
    return rc;
}

int ow_txn_due(ow_txn *tx, int64_t now_ms)
{
    return !tx->sealed && (atomic_load(&tx->abort_wanted) ||
                           now_ms - tx->last_commit_ms >= tx->cfg->transaction_interval_ms);
}
