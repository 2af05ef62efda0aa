/*
 * A lane: one thread, one connection to one database, a FIFO of the jobs
 * whose user lives on that database and whose key hashes to the lane. It
 * takes a micro-batch from its queue, decides it in one transaction, and
 * produces the results in queue order.
 *
 * Batch rules keep per-key order and keep a batch free of internal races
 * (ow/admit.h): a job is skipped when an earlier job of the round, taken
 * or skipped, holds its key or one of its orders, when the transaction's
 * orders would pass 4096, or when it waits for a retry
 * (REQUEST_IN_PROGRESS); every job the round looks at holds its own key
 * and orders.
 *
 * While the lane's database does not answer (its watch says so), only the
 * jobs that need no database leave: invalid messages and retries its cache
 * answers. The others wait in the queue, in order, and their keys with
 * them. Lanes of other databases are not held up: a database that hangs
 * costs only its own lanes.
 */
#include <stdlib.h>
#include <string.h>

#include "lane.h"
#include "metrics.h"
#include "ow/admit.h"
#include "ow/log.h"
#include "ow/shard.h"

#define SCAN_FACTOR 4         /* jobs looked at per batch, times batch.max_messages */
#define BATCH_MAX_ORDERS 4096 /* orders per transaction */
/* The orders of a job the round's order set is first sized for: every
 * round clears the whole set, so it starts small and grows only for rounds
 * of larger jobs. */
#define ORDERS_PER_JOB 4
#define DB_WAIT_POLL_MS 100 /* how often a lane waiting for its database looks again */

/* A lane's micro-batch: the lane thread's own, kept from one round to the
 * next. */
typedef struct {
    ow_job **jobs;
    size_t n;
    ow_store_item *items;
    ow_job **valid;
} batch;

static void batch_free(batch *b)
{
    free(b->jobs);
    free(b->items);
    free(b->valid);
}

/* Room for cap decided jobs and the retries the cache answers beside them. */
static int batch_init(batch *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->jobs = calloc(cap * SCAN_FACTOR, sizeof(*b->jobs));
    b->items = calloc(cap * SCAN_FACTOR, sizeof(*b->items));
    b->valid = calloc(cap * SCAN_FACTOR, sizeof(*b->valid));
    if (b->jobs == NULL || b->items == NULL || b->valid == NULL)
        return OW_ENOMEM;
    return OW_OK;
}

/* The lane's queue length changed by delta; mu held. */
static void count_queued(ow_lane *l, long delta)
{
    l->queued = (size_t)((long)l->queued + delta);
    atomic_fetch_add(&ow_stats.shard_waiting[l->shard], delta);
}

static void unlink_job(ow_lane *l, ow_job *prev, ow_job *job)
{
    if (prev == NULL)
        l->head = job->next;
    else
        prev->next = job->next;
    if (l->tail == job)
        l->tail = prev;
    job->next = NULL;
    count_queued(l, -1);
}

/* Whether jobs that need the database are taken. Only an outage holds
 * them: a database that refuses the worker (its certificate, its password)
 * refuses every attempt the same way, so the attempt is made, fails for
 * good and stops the worker, instead of a wait that never ends. */
static int db_answers(ow_lane *l)
{
    ow_watch_state st = l->watch != NULL ? ow_store_watch_state(l->watch, NULL) : OW_WATCH_UP;

    return st != OW_WATCH_DOWN;
}

/* When a batch could grow, producers have batch.max_wait_ms to add to it:
 * the round waits until then, unless the queue fills a batch first
 * (ow_lane_enqueue wakes the lane for that) or the lane stops. Starts the
 * linger when the round could wait, ends it when it need not; 1 while the
 * round waits, until l->linger_until. Called with l->mu held. */
static int lingers(ow_lane *l, size_t max, int64_t now)
{
    int64_t wait = l->env->cfg->batch_max_wait_ms;

    if (l->linger_until == 0 && wait > 0 && l->queued < max)
        l->linger_until = now + wait;
    if (l->linger_until > now && l->queued < max)
        return 1;
    l->linger_until = 0;
    return 0;
}

/* Unlinks the queued jobs whose tickets are stale (a revoked, re-assigned
 * or rewound partition's: nobody waits for their outputs) and returns them
 * as a list. Called with l->mu held. */
static ow_job *unlink_stale(ow_lane *l)
{
    ow_job *stale = NULL;
    ow_job *prev = NULL;

    for (ow_job *job = l->head; job != NULL;) {
        ow_job *next = job->next;

        if (ow_ledger_stale(l->env->ledger, &job->t)) {
            unlink_job(l, prev, job);
            job->next = stale;
            stale = job;
        } else {
            prev = job;
        }
        job = next;
    }
    return stale;
}

/* The round's look for stale jobs, only after the ledger ended something
 * since the lane last looked: a job is not asked again round after round
 * while it waits. Called with l->mu held. */
static void drop_stale_queued(ow_lane *l, ow_job **stale)
{
    uint64_t endings = ow_ledger_endings(l->env->ledger);

    if (endings == l->endings_seen)
        return;
    l->endings_seen = endings;
    *stale = unlink_stale(l);
}

/* Moves eligible jobs from the queue into the lane's batch (ow/admit.h
 * decides which): an invalid message needs no database, and a retry the
 * lane's cache answers rides along without counting against the batch.
 * Called with l->mu held. Returns the earliest time a skipped job may be
 * taken, the end of a linger, or 0. */
static int64_t take_batch(ow_lane *l, batch *b, ow_job **stale)
{
    size_t max = (size_t)l->env->cfg->batch_max_messages;
    size_t scanned = 0, counted = 0;
    int64_t now = ow_clock_mono_ms();
    int64_t wake = 0;
    ow_job *prev = NULL;
    ow_job *job;
    int db_up;

    b->n = 0;
    if (lingers(l, max, now))
        return l->linger_until;
    drop_stale_queued(l, stale);
    db_up = db_answers(l);
    ow_admit_reset(&l->admit, db_up);
    for (job = l->head; job != NULL && counted < max && scanned++ < max * SCAN_FACTOR;) {
        ow_job *next = job->next;
        ow_store_item *it = &job->item;
        ow_admit_ask q = {job->key_hash, job->valid ? &job->req : NULL, it->key, it->key_len,
                          it->digest};
        ow_admit_take take = OW_ADMIT_LEFT;

        if (job->not_before_ms > now) {
            if (wake == 0 || job->not_before_ms < wake)
                wake = job->not_before_ms;
        } else {
            take = ow_admit_consider(&l->admit, l->cache, &q, now, &it->code, &it->body);
        }
        if (take == OW_ADMIT_FREE) {
            OW_COUNT(cache_hits, 1);
            it->decision = OW_DECISION_REPLAY;
            it->replayed = 1;
        } else if (take == OW_ADMIT_COUNTED && job->valid && l->cache != NULL) {
            /* A miss counts once, when the job goes to the database: a lane
             * waiting for its database asks again for the same job. */
            OW_COUNT(cache_misses, 1);
        }
        /* A skipped job holds its key and orders too: a later job with one
         * of them must not be decided before it. */
        if (ow_admit_hold(&l->admit, job->key_hash, q.req, take) != OW_OK)
            break;
        if (take != OW_ADMIT_LEFT) {
            unlink_job(l, prev, job);
            b->jobs[b->n++] = job;
            counted += take == OW_ADMIT_COUNTED;
        } else {
            prev = job;
        }
        job = next;
    }
    if (l->admit.db_wait && (wake == 0 || wake > now + DB_WAIT_POLL_MS))
        wake = now + DB_WAIT_POLL_MS;
    return wake;
}

/* --- Deciding ----------------------------------------------------------- */

/* Drops the batch's valid jobs that went stale while the batch was retried. */
static size_t drop_stale(ow_lane *l, batch *b, size_t nv)
{
    size_t k = 0;

    for (size_t i = 0; i < nv; i++) {
        if (ow_ledger_stale(l->env->ledger, &b->valid[i]->t)) {
            b->valid[i]->item = b->items[i];
            b->valid[i]->dropped = 1;
            continue;
        }
        b->valid[k] = b->valid[i];
        b->items[k] = b->items[i];
        k++;
    }
    return k;
}

/* The most trace ids a line about a transaction lists. */
#define TRACE_IDS_MAX 16

/* The trace ids of the batch's first nv valid jobs that have one, each
 * once, as a JSON array into ids (empty when none); *more counts the
 * traced jobs beyond TRACE_IDS_MAX ids whose trace is not listed. */
static void batch_trace_ids(const batch *b, size_t nv, ow_buf *ids, size_t *more)
{
    const char *listed[TRACE_IDS_MAX];
    size_t n = 0;

    *more = 0;
    for (size_t i = 0; i < nv; i++) {
        const ow_job_trace *t = b->valid[i]->trace;
        size_t k = 0;

        if (t == NULL)
            continue;
        while (k < n && strcmp(listed[k], t->trace_id) != 0)
            k++;
        if (k < n)
            continue;
        if (n == TRACE_IDS_MAX) {
            (*more)++;
            continue;
        }
        listed[n++] = t->trace_id;
        ow_buf_appends(ids, n == 1 ? "[\"" : ",\"");
        ow_buf_appends(ids, t->trace_id);
        ow_buf_appendc(ids, '"');
    }
    if (n > 0)
        ow_buf_appendc(ids, ']');
}

/* Logs a database event of a lane, naming the shard when there are shards.
 * A transaction decides many messages, so its line carries no one trace:
 * it lists the trace ids of the messages it held (trace_ids), so that a
 * trace's lines can be found. */
static void log_db(const ow_lane *l, const batch *b, size_t nv, int level, const char *event,
                   unsigned attempt, const ow_error *err)
{
    ow_buf ids;
    size_t more = 0;
    char more_text[21] = "", shard_text[21] = "";

    if (!OW_LOG_ENABLED(level))
        return;
    ow_buf_init(&ids);
    batch_trace_ids(b, nv, &ids, &more);
    if (more > 0)
        ow_format_int((long long)more, more_text);
    if (l->env->cfg->shards.n > 0)
        ow_format_int((long long)l->shard, shard_text);
    /* A field without a value is left out: shard without shards. */
    OW_LOG(level, event, OW_F_INT("lane", l->index),
           OW_F_JSON("shard", l->env->cfg->shards.n > 0 ? shard_text : NULL),
           OW_F_INT("attempt", attempt + 1), OW_F_INT("code", err->code),
           OW_F_STR("error", err->msg), OW_F_INT("messages", (int64_t)nv),
           OW_F_JSON("trace_ids", ids.data),
           OW_F_JSON("trace_ids_omitted", more > 0 ? more_text : NULL));
    ow_buf_cleanup(&ids);
}

/* One deciding attempt of the batch's items[0..n), timed from t0_us.
 * OW_OK: decided. OW_ERETRY: a transient failure worth another attempt.
 * OW_EFATAL: abandon the batch, for an error retrying cannot fix (logged;
 * the worker stops), a stop, or a call the stop cancelled. */
static int attempt_decide(ow_lane *l, batch *b, size_t n, unsigned attempt, int64_t t0_us,
                          ow_error *err)
{
    ow_runstate *rs = l->env->rs;
    uint64_t deadlocks = ow_store_get_stats(l->store)->deadlocks;
    int rc = ow_store_decide(l->store, b->items, n, err);

    if (rc == OW_OK) {
        ow_histogram_observe(&ow_stats.db_latency, ow_clock_mono_us() - t0_us);
        OW_COUNT(transactions, 1);
        OW_COUNT(shard_transactions[l->shard], 1);
        return OW_OK;
    }
    OW_COUNT(retries[err->cls < 4 ? err->cls : 0], 1);
    OW_COUNT(deadlocks, ow_store_get_stats(l->store)->deadlocks - deadlocks);
    /* A call the stop cancelled can fail in any class: it is abandoned. */
    if (atomic_load(&l->cancelled))
        return OW_EFATAL;
    if (err->cls != OW_ERRCLASS_RETRIABLE) {
        log_db(l, b, n, OW_LOG_ERROR, "db_fatal", attempt, err);
        ow_runstate_fail(rs, err, "database error that retrying cannot fix");
        return OW_EFATAL;
    }
    /* Stopping: abandon the batch now; it is redelivered later. */
    if (atomic_load(&rs->stopping))
        return OW_EFATAL;
    return OW_ERETRY;
}

/* Logs the retry of the batch's first nv valid jobs and waits its backoff,
 * or, while the database does not answer, until it does (at most
 * retry.backoff_max_ms); 1 when the worker gives up meanwhile. */
static int backoff(ow_lane *l, const batch *b, size_t nv, unsigned attempt, const ow_error *err)
{
    const ow_config *cfg = l->env->cfg;
    ow_runstate *rs = l->env->rs;

    log_db(l, b, nv, attempt < 3 ? OW_LOG_INFO : OW_LOG_WARN, "db_retry", attempt, err);
    if (l->watch != NULL && !db_answers(l))
        ow_store_watch_wait_up(l->watch, ow_clock_mono_ms() + cfg->retry_backoff_max_ms,
                               &rs->stop_sleep);
    else
        ow_sleep_ms(
            ow_backoff_ms(cfg->retry_backoff_ms, cfg->retry_backoff_max_ms, attempt, &l->rng),
            &rs->stop_sleep);
    return ow_runstate_give_up(rs);
}

/* Decides the batch's valid jobs, retrying transient failures until they
 * succeed, the worker stops, or a fatal error. Which failures are
 * transient, and how a retry runs (in halves after a deadlock, one message
 * at a time after a lock wait), is the store's business: the lane only
 * backs off. Returns 0 when decided. */
static int decide(ow_lane *l, batch *b, size_t *nv)
{
    int64_t t0 = ow_clock_mono_us();

    for (unsigned attempt = 0;; attempt++) {
        ow_error err;
        int rc = attempt_decide(l, b, *nv, attempt, t0, &err);

        if (rc != OW_ERETRY)
            return rc;
        if (backoff(l, b, *nv, attempt, &err))
            return OW_EFATAL;
        *nv = drop_stale(l, b, *nv);
        if (*nv == 0)
            return OW_OK;
    }
}

/* Puts jobs back at the front of the queue in their original order. */
static void requeue_front(ow_lane *l, ow_job *first, ow_job *last, size_t n)
{
    if (first == NULL)
        return;
    pthread_mutex_lock(&l->mu);
    last->next = l->head;
    l->head = first;
    if (l->tail == NULL)
        l->tail = last;
    count_queued(l, (long)n);
    pthread_mutex_unlock(&l->mu);
}

/* A batch's outputs go out inside one pass through the publish gate, so
 * that a commit never splits a batch. */
static void publish_batch(ow_lane *l, batch *b, int decided)
{
    ow_job *rq_first = NULL, *rq_last = NULL;
    size_t rq_n = 0;

    if (!ow_delivery_enter(l->env->delivery)) {
        /* A stop gave up on the transaction: the batch is redelivered. */
        for (size_t i = 0; i < b->n; i++)
            ow_delivery_abandon(l->env->delivery, b->jobs[i]);
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        ow_job *job = b->jobs[i];

        if (!decided || job->dropped || (job->valid && job->item.decision == OW_DECISION_NONE)) {
            ow_delivery_abandon(l->env->delivery, job);
            continue;
        }
        if (job->valid && job->item.decision == OW_DECISION_TOO_LARGE &&
            ow_job_refuse_too_large(job) != OW_OK)
            ow_runstate_set_fatal(l->env->rs, "out of memory");
        if (job->valid && job->item.decision == OW_DECISION_IN_PROGRESS) {
            /* Tell the sender, then retry; the offset stays uncommitted. */
            ow_delivery_in_progress(l->env->delivery, job);
            /* A revoked partition's next owner retries it instead. */
            if (ow_ledger_stale(l->env->ledger, &job->t)) {
                ow_delivery_abandon(l->env->delivery, job);
                continue;
            }
            job->in_progress_rounds++;
            job->not_before_ms = ow_clock_mono_ms() + l->env->cfg->retry_backoff_ms;
            OW_LOG(OW_LOG_INFO, "request_in_progress", OW_F_KEY("key", job->key, job->key_len),
                   OW_F_INT("rounds", job->in_progress_rounds), OW_F_JOB(job));
            if (rq_last == NULL)
                rq_first = job;
            else
                rq_last->next = job;
            rq_last = job;
            job->next = NULL;
            rq_n++;
            continue;
        }
        if (job->valid && job->item.decision == OW_DECISION_KEY_REUSED)
            ow_job_log_key_reused(job); /* a security event */
        OW_LOG(OW_LOG_DEBUG, "decided", OW_F_KEY("key", job->key, job->key_len),
               OW_F_STR("code", job->valid ? ow_result_code_name(job->item.code)
                                           : ow_result_code_name(OW_CODE_INVALID_REQUEST)),
               OW_F_INT("replayed", job->valid && job->item.replayed),
               OW_F_STR("error", job->valid ? NULL : job->first_error), OW_F_JOB(job));
        ow_delivery_publish(l->env->delivery, job);
    }
    ow_delivery_leave(l->env->delivery);
    requeue_front(l, rq_first, rq_last, rq_n);
}

static void run_batch(ow_lane *l, batch *b)
{
    size_t nv = 0;
    int decided = 1;

    for (size_t i = 0; i < b->n; i++) {
        if (b->jobs[i]->valid && b->jobs[i]->item.decision != OW_DECISION_REPLAY) {
            b->valid[nv] = b->jobs[i];
            b->items[nv] = b->jobs[i]->item;
            nv++;
        }
    }
    if (nv > 0) {
        size_t n = nv;
        int64_t since = ow_clock_mono_ms();

        decided = decide(l, b, &n) == OW_OK;
        if (decided)
            ow_lane_cache_fill(l->cache, b->items, n, since);
        for (size_t i = 0; i < n; i++)
            b->valid[i]->item = b->items[i];
    }
    publish_batch(l, b, decided);
}

/* --- Thread -------------------------------------------------------------- */

/* Gives up a list of jobs (linked by next) without outputs. */
static void finish_list(ow_delivery *d, ow_job *job)
{
    while (job != NULL) {
        ow_job *next = job->next;

        ow_delivery_abandon(d, job);
        job = next;
    }
}

/* Waits for work; returns 0 when the lane should stop. Called with mu held. */
static int wait_for_work(ow_lane *l, int64_t wake_ms)
{
    struct timespec ts;
    int64_t wait_ms = 200;

    if (l->stop)
        return 0;
    if (wake_ms > 0) {
        int64_t d = wake_ms - ow_clock_mono_ms();

        wait_ms = d < 1 ? 1 : d < wait_ms ? d : wait_ms;
    } else if (l->queued > 0) {
        return 1;
    }
    ow_deadline_after_ms(wait_ms, &ts);
    pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    return !l->stop;
}

static void *lane_main(void *arg)
{
    ow_lane *l = arg;
    int64_t wake = 0;
    batch b;
    int ready = batch_init(&b, (size_t)l->env->cfg->batch_max_messages) == OW_OK;

    /* A lane without its batch ends like a stopped one, so that joining
     * it does not wait for the stop's deadline. */
    if (!ready)
        ow_runstate_set_fatal(l->env->rs, "out of memory");
    pthread_mutex_lock(&l->mu);
    while (ready && wait_for_work(l, wake)) {
        ow_job *stale = NULL;

        if (l->queued == 0) {
            wake = 0;
            l->linger_until = 0;
            continue;
        }
        wake = take_batch(l, &b, &stale);
        pthread_mutex_unlock(&l->mu);
        finish_list(l->env->delivery, stale);
        if (b.n > 0) {
            run_batch(l, &b);
            wake = 0;
        }
        pthread_mutex_lock(&l->mu);
        if (b.n == 0 && wake == 0 && l->queued > 0)
            wake = ow_clock_mono_ms() + 1;
    }
    /* Stopping: what was never started is abandoned and redelivered later. */
    {
        ow_job *rest = l->head;

        l->head = l->tail = NULL;
        count_queued(l, -(long)l->queued);
        l->exited = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        finish_list(l->env->delivery, rest);
    }
    batch_free(&b);
    return NULL;
}

size_t ow_lane_route(const ow_config *cfg, size_t per_db, const ow_job *job)
{
    unsigned db = 0;

    if ((job->valid || job->has_user) && cfg->shards.n > 0)
        db = ow_shard_of_user(job->req.user_id, (uint32_t)cfg->mysql_shard_buckets, cfg->shards.n);
    return db * per_db + job->key_hash % per_db;
}

int ow_lane_start(ow_lane *l, const ow_lane_env *env, unsigned index, unsigned shard,
                  ow_store_watch *watch, ow_error *err)
{
    ow_store_params p;
    size_t cap;
    int no_memory = 0;

    ow_store_params_for_shard(env->cfg, shard, &p); /* mysql.host unless sharded */
    memset(l, 0, sizeof(*l));
    l->env = env;
    l->index = index;
    l->shard = shard;
    l->watch = watch;
    l->rng = (uint64_t)ow_clock_mono_us() * 2654435761u + index + 1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->store = ow_store_new(&p, env->ids);
    l->cache = ow_lane_cache_new(env->cfg, env->n_lanes, &no_memory);
    /* A round's keys never outgrow their set, so a round allocates only
     * when its orders outgrow theirs. */
    cap = (size_t)env->cfg->batch_max_messages * SCAN_FACTOR;
    if (ow_admit_init(&l->admit, cap, cap * ORDERS_PER_JOB, BATCH_MAX_ORDERS) != OW_OK)
        no_memory = 1;
    if (l->store == NULL || no_memory)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    if (watch != NULL)
        ow_store_use_watch(l->store, watch);
    if (pthread_create(&l->thread, NULL, lane_main, l) != 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot start lane %u", index);
    l->started = 1;
    return OW_OK;
}

void ow_lane_enqueue(ow_lane *l, ow_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->tail == NULL)
        l->head = job;
    else
        l->tail->next = job;
    l->tail = job;
    count_queued(l, 1);
    /* A lingering lane waits for its time or a full batch: waking it for
     * every message would cost a context switch each. */
    if (l->linger_until == 0 || l->queued >= (size_t)l->env->cfg->batch_max_messages)
        pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void ow_lane_drop_stale(ow_lane *l)
{
    ow_job *dropped;

    pthread_mutex_lock(&l->mu);
    dropped = unlink_stale(l);
    pthread_mutex_unlock(&l->mu);
    finish_list(l->env->delivery, dropped);
}

void ow_lane_stop(ow_lane *l)
{
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void ow_lane_join(ow_lane *l, int64_t deadline_ms)
{
    int exited;

    pthread_mutex_lock(&l->mu);
    while (l->started && !l->exited && ow_clock_mono_ms() < deadline_ms) {
        struct timespec ts;

        ow_deadline_after_ms(deadline_ms - ow_clock_mono_ms(), &ts);
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    exited = l->exited;
    pthread_mutex_unlock(&l->mu);
    if (l->started && !exited) {
        OW_LOG(OW_LOG_WARN, "lane_cancelled", OW_F_INT("lane", l->index),
               OW_F_STR("reason", "still in a database call at its share of the stop deadline; "
                                  "its batch is rolled back and redelivered"));
        atomic_store(&l->cancelled, 1);
        ow_store_cancel(l->store);
    }
    if (l->started)
        pthread_join(l->thread, NULL);
    l->started = 0;
    ow_store_free(&l->store);
    ow_cache_free(&l->cache);
    ow_admit_free(&l->admit);
}

void ow_lane_destroy(ow_lane *l)
{
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}
