/*
 * A lane: one thread, one database connection, a FIFO of jobs whose keys
 * hash to it. It takes a micro-batch from its queue, decides it in one
 * transaction, and produces the results in queue order.
 *
 * Batch rules keep per-key order and keep a batch free of internal races:
 * a job is skipped (and its key blocked for this round) when its key is
 * already in the batch or blocked, when one of its orders is already in
 * the batch, or when it waits for a retry (REQUEST_IN_PROGRESS).
 */
#include <stdlib.h>
#include <string.h>

#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/metrics.h"
#include "worker_internal.h"

#define SCAN_FACTOR 4         /* jobs looked at per batch, times batch.max_messages */
#define BATCH_MAX_ORDERS 4096 /* orders per transaction */

/* A set of 64-bit hashes, cleared per batch. 0 marks an empty slot. */
typedef struct {
    uint64_t *slots;
    size_t cap; /* power of two */
    size_t used;
} hset;

static int hset_init(hset *s, size_t max_entries)
{
    s->cap = 16;
    while (s->cap < 2 * max_entries)
        s->cap *= 2;
    s->used = 0;
    s->slots = calloc(s->cap, sizeof(*s->slots));
    return s->slots != NULL ? OW_OK : OW_ENOMEM;
}

static void hset_clear(hset *s)
{
    if (s->used > 0)
        memset(s->slots, 0, s->cap * sizeof(*s->slots));
    s->used = 0;
}

static int hset_has(const hset *s, uint64_t h)
{
    size_t i;

    h |= 1;
    for (i = (size_t)h & (s->cap - 1); s->slots[i] != 0; i = (i + 1) & (s->cap - 1)) {
        if (s->slots[i] == h)
            return 1;
    }
    return 0;
}

/* Returns 0 when the set is too full to take more (the caller stops). */
static int hset_add(hset *s, uint64_t h)
{
    size_t i;

    if (2 * (s->used + 1) > s->cap)
        return 0;
    h |= 1;
    for (i = (size_t)h & (s->cap - 1); s->slots[i] != 0; i = (i + 1) & (s->cap - 1)) {
        if (s->slots[i] == h)
            return 1;
    }
    s->slots[i] = h;
    s->used++;
    return 1;
}

static uint64_t order_hash(int64_t user_id, const ow_order_item *o)
{
    return ow_hash64(o->external_order_no, o->ext_len) ^
           ((uint64_t)user_id * 0x9e3779b97f4a7c15ULL);
}

typedef struct {
    ow_job **jobs;
    size_t n;
    size_t cap;
    size_t orders;
    ow_store_item *items;
    ow_job **valid;
    hset keys; /* keys in the batch or blocked this round */
    hset orders_set;
} batch;

static int batch_init(batch *b, size_t cap)
{
    memset(b, 0, sizeof(*b));
    b->cap = cap;
    b->jobs = calloc(cap, sizeof(*b->jobs));
    b->items = calloc(cap, sizeof(*b->items));
    b->valid = calloc(cap, sizeof(*b->valid));
    if (b->jobs == NULL || b->items == NULL || b->valid == NULL ||
        hset_init(&b->keys, cap * SCAN_FACTOR) != OW_OK ||
        hset_init(&b->orders_set, BATCH_MAX_ORDERS * 2) != OW_OK)
        return OW_ENOMEM;
    return OW_OK;
}

static void batch_free(batch *b)
{
    free(b->jobs);
    free(b->items);
    free(b->valid);
    free(b->keys.slots);
    free(b->orders_set.slots);
}

/* Whether a valid job's orders collide with the batch's, and if asked,
 * records them. */
static int orders_collide(batch *b, const ow_job *job)
{
    for (size_t i = 0; i < job->req.n_orders; i++) {
        if (hset_has(&b->orders_set, order_hash(job->req.user_id, &job->req.orders[i])))
            return 1;
    }
    return 0;
}

static void orders_add(batch *b, const ow_job *job)
{
    for (size_t i = 0; i < job->req.n_orders; i++)
        hset_add(&b->orders_set, order_hash(job->req.user_id, &job->req.orders[i]));
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
    l->queued--;
}

/* Moves eligible jobs from the queue into b. Called with l->mu held.
 * Returns the earliest not_before of a skipped waiting job, or 0. */
static int64_t take_batch(ow_lane *l, batch *b, ow_job **stale)
{
    size_t max = (size_t)l->w->cfg->batch_max_messages;
    size_t scanned = 0;
    int64_t now = ow_clock_mono_ms();
    int64_t wake = 0;
    ow_job *prev = NULL;
    ow_job *job = l->head;

    b->n = 0;
    b->orders = 0;
    hset_clear(&b->keys);
    hset_clear(&b->orders_set);
    while (job != NULL && b->n < max && scanned++ < max * SCAN_FACTOR) {
        ow_job *next = job->next;
        int take = 1;

        if (ow_worker_job_stale(l->w, job)) {
            unlink_job(l, prev, job);
            job->next = *stale;
            *stale = job;
            job = next;
            continue;
        }
        if (job->not_before_ms > now) {
            take = 0;
            if (wake == 0 || job->not_before_ms < wake)
                wake = job->not_before_ms;
        } else if (hset_has(&b->keys, job->key_hash)) {
            take = 0;
        } else if (job->valid && (orders_collide(b, job) ||
                                  (b->n > 0 && b->orders + job->req.n_orders > BATCH_MAX_ORDERS))) {
            take = 0;
        }
        if (!hset_add(&b->keys, job->key_hash))
            break;
        if (job->valid)
            orders_add(b, job);
        if (take) {
            unlink_job(l, prev, job);
            b->jobs[b->n++] = job;
            b->orders += job->req.n_orders;
        } else {
            prev = job;
        }
        job = next;
    }
    return wake;
}

/* --- Producing ---------------------------------------------------------- */

/* Tags a REQUEST_IN_PROGRESS result: its delivery finishes no job. */
static char in_progress_token;
void *const ow_in_progress_token = &in_progress_token;

static void source_headers(rd_kafka_headers_t *h, ow_worker *w, const ow_job *job)
{
    rd_kafka_header_add(h, "source-topic", -1, w->cfg->topic_input, -1);
    ow_kafka_header_int(h, "source-partition", job->partition);
    ow_kafka_header_int(h, "source-offset", job->offset);
}

/* Produces one message, waiting while the local queue is full. The value
 * is copied. Returns 0 or a negative code when it had to give up. */
static int produce(ow_lane *l, const char *topic, const void *key, size_t key_len,
                   const void *value, size_t len, rd_kafka_headers_t *h, void *opaque)
{
    ow_worker *w = l->w;

    for (;;) {
        rd_kafka_resp_err_t e =
            rd_kafka_producev(w->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
                              RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                              RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);

        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return OW_OK; /* h is owned by the message now */
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || atomic_load(&w->fatal) ||
            (atomic_load(&w->stopping) && ow_clock_mono_ms() > w->deadline_ms)) {
            OW_LOG(OW_LOG_ERROR, "produce_failed", OW_F_STR("topic", topic),
                   OW_F_STR("error", rd_kafka_err2str(e)));
            rd_kafka_headers_destroy(h);
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                ow_worker_set_fatal(w, "a result could not be produced");
            return OW_EFATAL;
        }
        ow_sleep_ms(5, NULL);
    }
}

static int publish_result(ow_lane *l, ow_job *job, const void *body, size_t len, int replayed,
                          void *opaque)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);

    if (job->valid || job->has_user)
        ow_kafka_header_int(h, "user-id", job->req.user_id);
    rd_kafka_header_add(h, "replayed", -1, replayed ? "true" : "false", -1);
    source_headers(h, l->w, job);
    return produce(l, l->w->cfg->topic_results, job->key, job->key_len, body, len, h, opaque);
}

static int publish_dead_letter(ow_lane *l, ow_job *job)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(8);

    rd_kafka_header_add(h, "error-code", -1, "INVALID_REQUEST", -1);
    rd_kafka_header_add(h, "error-message", -1, job->first_error, -1);
    ow_kafka_header_int(h, "error-count", (long long)job->n_errors);
    source_headers(h, l->w, job);
    ow_kafka_header_int(h, "source-timestamp", job->timestamp_ms);
    if (job->raw_len < job->raw_original_len)
        ow_kafka_header_int(h, "dlq-truncated-from", (long long)job->raw_original_len);
    return produce(l, l->w->cfg->topic_dlq, job->key, job->key_len, job->raw, job->raw_len, h, job);
}

/* Once its outputs are handed to the producer (which copied them), a job
 * only waits for acknowledgements: free its payload and count what the
 * producer now holds instead. */
static void release_payload(ow_job *job)
{
    int64_t before = (int64_t)job->bytes;
    size_t held = job->valid ? job->item.body.len : job->invalid_body.len + job->raw_len;

    ow_job_free_payload(job);
    job->bytes = sizeof(*job) + held;
    atomic_fetch_add(&ow_stats.inflight_bytes, (int64_t)job->bytes - before);
}

/* Produces a finished job's outputs; the last delivery report finishes it.
 * The lane holds one extra reference while it produces, so that a quick
 * delivery report cannot free the job under it. */
static void publish(ow_lane *l, ow_job *job)
{
    int planned = job->valid ? 1 : 1 + (job->key_len > 0);
    int produced = 0;
    int rc = OW_OK;

    atomic_store(&job->pending_acks, planned + 1);
    if (job->valid) {
        rc = publish_result(l, job, job->item.body.data, job->item.body.len, job->item.replayed,
                            job);
        produced += rc == OW_OK;
    } else {
        if (job->key_len > 0) {
            rc = publish_result(l, job, job->invalid_body.data, job->invalid_body.len, 0, job);
            produced += rc == OW_OK;
        }
        if (rc == OW_OK) {
            rc = publish_dead_letter(l, job);
            produced += rc == OW_OK;
        }
    }
    release_payload(job);
    /* Outputs that were never produced will never be acknowledged. */
    if (produced < planned)
        ow_worker_ack(l->w, job, planned - produced, 0);
    ow_worker_ack(l->w, job, 1, 1); /* the lane's own reference */
}

/* --- Deciding ----------------------------------------------------------- */

/* Drops the batch's valid jobs that went stale while the batch was retried. */
static size_t drop_stale(ow_lane *l, batch *b, size_t nv)
{
    size_t k = 0;

    for (size_t i = 0; i < nv; i++) {
        if (ow_worker_job_stale(l->w, b->valid[i])) {
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

/* Decides the batch's valid jobs, retrying transient failures until they
 * succeed, the worker stops, or a fatal error. Returns 0 when decided. */
static int decide(ow_lane *l, batch *b, size_t *nv)
{
    ow_worker *w = l->w;
    int one_at_a_time = 0;
    int64_t t0 = ow_clock_mono_us();

    for (unsigned attempt = 0;; attempt++) {
        ow_error err;
        int rc = ow_store_decide(l->store, b->items, *nv, one_at_a_time, &err);

        l->last_db_ms = ow_clock_mono_ms();
        ow_worker_db_seen(w, rc == OW_OK || ow_store_connected(l->store));
        if (rc == OW_OK) {
            ow_histogram_observe(&ow_stats.db_latency, ow_clock_mono_us() - t0);
            OW_COUNT(transactions, 1);
            return OW_OK;
        }
        OW_COUNT(retries[err.cls < 4 ? err.cls : 0], 1);
        if (err.cls != OW_ERRCLASS_RETRIABLE) {
            OW_LOG(OW_LOG_ERROR, "db_fatal", OW_F_INT("lane", l->index), OW_F_INT("code", err.code),
                   OW_F_STR("error", err.msg));
            ow_worker_set_fatal(w, "database error that retrying cannot fix");
            return OW_EFATAL;
        }
        /* Stopping: abandon the batch now; it is redelivered later. */
        if (atomic_load(&w->stopping))
            return OW_EFATAL;
        if (err.code == 1213 || err.code == 1205)
            one_at_a_time = 1;
        OW_LOG(attempt < 3 ? OW_LOG_INFO : OW_LOG_WARN, "db_retry", OW_F_INT("lane", l->index),
               OW_F_INT("attempt", attempt + 1), OW_F_INT("code", err.code),
               OW_F_STR("error", err.msg));
        ow_sleep_ms(
            ow_backoff_ms(w->cfg->retry_backoff_ms, w->cfg->retry_backoff_max_ms, attempt, &l->rng),
            &w->stop_sleep);
        if (atomic_load(&w->fatal) ||
            (atomic_load(&w->stopping) && ow_clock_mono_ms() > w->deadline_ms))
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
    l->queued += n;
    pthread_mutex_unlock(&l->mu);
}

static void publish_batch(ow_lane *l, batch *b, int decided)
{
    ow_job *rq_first = NULL, *rq_last = NULL;
    size_t rq_n = 0;

    for (size_t i = 0; i < b->n; i++) {
        ow_job *job = b->jobs[i];

        if (!decided || job->dropped || (job->valid && job->item.decision == OW_DECISION_NONE)) {
            ow_worker_finish_job(l->w, job, 0);
            continue;
        }
        if (job->valid && job->item.decision == OW_DECISION_IN_PROGRESS) {
            /* Tell the sender, then retry; the offset stays uncommitted. */
            publish_result(l, job, job->item.body.data, job->item.body.len, 0,
                           ow_in_progress_token);
            /* A revoked partition's next owner retries it instead. */
            if (ow_worker_job_stale(l->w, job)) {
                ow_worker_finish_job(l->w, job, 0);
                continue;
            }
            job->in_progress_rounds++;
            job->not_before_ms = ow_clock_mono_ms() + l->w->cfg->retry_backoff_ms;
            OW_LOG(OW_LOG_INFO, "request_in_progress", OW_F_KEY("key", job->key, job->key_len),
                   OW_F_INT("partition", job->partition), OW_F_INT("offset", job->offset),
                   OW_F_INT("rounds", job->in_progress_rounds));
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
            ow_job_log_key_reused(job); /* issue 11: a security event */
        OW_LOG(OW_LOG_DEBUG, "decided", OW_F_KEY("key", job->key, job->key_len),
               OW_F_INT("partition", job->partition), OW_F_INT("offset", job->offset),
               OW_F_STR("code", job->valid ? ow_result_code_name(job->item.code)
                                           : ow_result_code_name(OW_CODE_INVALID_REQUEST)),
               OW_F_INT("replayed", job->valid && job->item.replayed),
               OW_F_STR("error", job->valid ? NULL : job->first_error));
        publish(l, job);
    }
    requeue_front(l, rq_first, rq_last, rq_n);
}

static void run_batch(ow_lane *l, batch *b)
{
    size_t nv = 0;
    int decided = 1;

    for (size_t i = 0; i < b->n; i++) {
        if (b->jobs[i]->valid) {
            b->valid[nv] = b->jobs[i];
            b->items[nv] = b->jobs[i]->item;
            nv++;
        }
    }
    if (nv > 0) {
        size_t n = nv;

        decided = decide(l, b, &n) == OW_OK;
        for (size_t i = 0; i < n; i++)
            b->valid[i]->item = b->items[i];
    }
    publish_batch(l, b, decided);
}

/* --- Thread -------------------------------------------------------------- */

static void finish_list(ow_worker *w, ow_job *job)
{
    while (job != NULL) {
        ow_job *next = job->next;

        ow_worker_finish_job(w, job, 0);
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

/* An idle lane checks its connection every few seconds: it keeps the
 * connection from timing out and keeps /readyz truthful without traffic.
 * Called with mu held. */
static void idle_ping(ow_lane *l)
{
    ow_error err;
    int ok;

    if (l->queued > 0 || ow_clock_mono_ms() - l->last_db_ms < 5000)
        return;
    pthread_mutex_unlock(&l->mu);
    ok = ow_store_ping(l->store, &err) == OW_OK;
    ow_worker_db_seen(l->w, ok);
    if (!ok)
        OW_LOG(OW_LOG_DEBUG, "db_ping_failed", OW_F_INT("lane", l->index),
               OW_F_STR("error", err.msg));
    l->last_db_ms = ow_clock_mono_ms();
    pthread_mutex_lock(&l->mu);
}

/* When a batch could grow, give producers batch.max_wait_ms to add to it. */
static void linger(ow_lane *l)
{
    int64_t wait = l->w->cfg->batch_max_wait_ms;

    if (wait <= 0 || l->queued >= (size_t)l->w->cfg->batch_max_messages)
        return;
    pthread_mutex_unlock(&l->mu);
    ow_sleep_ms(wait, NULL);
    pthread_mutex_lock(&l->mu);
}

static void *lane_main(void *arg)
{
    ow_lane *l = arg;
    batch b;
    int64_t wake = 0;

    if (batch_init(&b, (size_t)l->w->cfg->batch_max_messages) != OW_OK) {
        ow_worker_set_fatal(l->w, "out of memory");
        batch_free(&b);
        return NULL;
    }
    pthread_mutex_lock(&l->mu);
    while (wait_for_work(l, wake)) {
        ow_job *stale = NULL;

        if (l->queued == 0) {
            wake = 0;
            idle_ping(l);
            continue;
        }
        linger(l);
        wake = take_batch(l, &b, &stale);
        pthread_mutex_unlock(&l->mu);
        finish_list(l->w, stale);
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
        l->queued = 0;
        pthread_mutex_unlock(&l->mu);
        finish_list(l->w, rest);
    }
    batch_free(&b);
    return NULL;
}

int ow_lane_start(ow_lane *l, ow_worker *w, unsigned index, ow_error *err)
{
    ow_store_params p;

    ow_store_params_from_config(w->cfg, &p);
    memset(l, 0, sizeof(*l));
    l->w = w;
    l->index = index;
    l->rng = (uint64_t)ow_clock_mono_us() * 2654435761u + index + 1;
    l->last_db_ms = ow_clock_mono_ms();
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->store = ow_store_new(&p, &w->ids);
    if (l->store == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
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
    l->queued++;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void ow_lane_drop_partition(ow_lane *l, int32_t partition)
{
    ow_job *dropped = NULL;
    ow_job *prev = NULL;

    pthread_mutex_lock(&l->mu);
    for (ow_job *job = l->head; job != NULL;) {
        ow_job *next = job->next;

        if (job->partition == partition) {
            unlink_job(l, prev, job);
            job->next = dropped;
            dropped = job;
        } else {
            prev = job;
        }
        job = next;
    }
    pthread_mutex_unlock(&l->mu);
    finish_list(l->w, dropped);
}

void ow_lane_stop(ow_lane *l)
{
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void ow_lane_join(ow_lane *l)
{
    if (l->started)
        pthread_join(l->thread, NULL);
    l->started = 0;
    ow_store_free(&l->store);
}

void ow_lane_destroy(ow_lane *l)
{
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
}
