/* The query service's database threads (serve_lookup.h).
 *
 * Each shard has api.threads threads, each with a connection of its own,
 * and a queue of lookups. A serving thread suspends the connection, queues
 * the lookup and goes back to its other connections, so no serving thread
 * ever waits on a database. A lookup is answered exactly once, under the
 * lock: by its database thread with the result, or by the timer with 503
 * once lookup_timeout_ms have passed, whichever comes first; the other
 * one's answer is dropped. A job is shared by the connection and the
 * shard's side (its queue, then the thread running it), and freed when
 * both have let go of it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_lookup.h"
#include "ow/log.h"
#include "ow/shard.h"
#include "ow/util.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_ANSWERED } job_state;

struct serve_job {
    serve_job *next; /* in its shard's queue */
    struct MHD_Connection *conn;
    serve_route route;
    unsigned shard;
    int64_t deadline_ms;
    job_state state;
    int refs;
    serve_reply reply;
};

typedef struct serve_shard serve_shard;

typedef struct {
    serve_shard *shard;
    ow_store *store;
    pthread_t thread;
    serve_job *current; /* the job it runs, under the lock */
} serve_worker;

struct serve_shard {
    serve_lookups *owner;
    unsigned index;
    serve_job *head, *tail; /* in the order of their deadlines */
    pthread_cond_t ready;
    serve_worker *workers;
    unsigned n_workers; /* with a store */
    unsigned n_threads; /* started */
};

struct serve_lookups {
    pthread_mutex_t lock;
    int stopping;
    unsigned timeout_ms;
    uint32_t shard_buckets;
    serve_shard *shards;
    unsigned n_shards;
    ow_idgen ids; /* unused by lookups; ow_store_new wants one */
};

/* --- Jobs (under the lock) ------------------------------------------------ */

static void unref_locked(serve_job *job)
{
    if (--job->refs > 0)
        return;
    serve_reply_drop(&job->reply);
    free(job);
}

/* The first answer wins: the job's connection is resumed with it. */
static void answer_locked(serve_job *job, serve_reply rep)
{
    if (job->state == JOB_ANSWERED) {
        serve_reply_drop(&rep);
        return;
    }
    job->state = JOB_ANSWERED;
    job->reply = rep;
    MHD_resume_connection(job->conn);
}

static serve_reply late_reply(const serve_lookups *l, job_state state)
{
    char msg[160];

    if (state == JOB_QUEUED) {
        snprintf(msg, sizeof(msg),
                 "no database connection of this user's shard was free within %u ms; retry after "
                 "the Retry-After delay",
                 l->timeout_ms);
        return serve_reply_error(503, "BUSY", msg, "Retry-After", OW_SERVE_RETRY_AFTER_S);
    }
    snprintf(msg, sizeof(msg),
             "the database did not answer within %u ms; retry after the Retry-After delay",
             l->timeout_ms);
    return serve_reply_error(503, "DATABASE_UNAVAILABLE", msg, "Retry-After",
                             OW_SERVE_RETRY_AFTER_S);
}

static void answer_late_locked(serve_lookups *l, serve_job *job)
{
    if (l->stopping) {
        answer_locked(job, serve_reply_stopping());
        return;
    }
    OW_LOG(OW_LOG_WARN, "api_lookup_timeout", OW_F_INT("shard", job->shard),
           OW_F_STR("waited_for", job->state == JOB_QUEUED ? "connection" : "database"),
           OW_F_INT("timeout_ms", l->timeout_ms));
    answer_locked(job, late_reply(l, job->state));
}

/* --- The database threads ------------------------------------------------- */

static serve_reply lookup_request(ow_store *s, const serve_route *route)
{
    ow_record rec;
    ow_error err;
    serve_reply rep;
    int rc;

    ow_record_init(&rec);
    rc = ow_store_lookup(s, route->user_id, route->segment, route->segment_len, &rec, &err);
    if (rc == OW_ENOTFOUND)
        rep = serve_reply_error(404, "NOT_FOUND",
                                "no request record for this user and key: it was never decided, or "
                                "it was purged; sending the message again is safe",
                                NULL, NULL);
    else if (rc != OW_OK)
        rep = serve_reply_store_error(&err);
    else
        rep = serve_reply_record(&rec);
    ow_record_cleanup(&rec);
    return rep;
}

static serve_reply lookup_order(ow_store *s, const serve_route *route)
{
    ow_record_order o;
    ow_error err;
    int rc = ow_store_order_get(s, route->user_id, route->segment, route->segment_len, &o, &err);

    if (rc == OW_ENOTFOUND)
        return serve_reply_error(404, "NOT_FOUND",
                                 "no order with this external_order_no for this user", NULL, NULL);
    if (rc != OW_OK)
        return serve_reply_store_error(&err);
    return serve_reply_order(&o, route->user_id);
}

static void *worker_main(void *arg)
{
    serve_worker *w = arg;
    serve_shard *sh = w->shard;
    serve_lookups *l = sh->owner;

    pthread_mutex_lock(&l->lock);
    for (;;) {
        serve_job *job;
        serve_reply rep;

        while (!l->stopping && sh->head == NULL)
            pthread_cond_wait(&sh->ready, &l->lock);
        if (l->stopping)
            break;
        job = sh->head;
        sh->head = job->next;
        if (sh->head == NULL)
            sh->tail = NULL;
        job->state = JOB_RUNNING;
        w->current = job;
        pthread_mutex_unlock(&l->lock);
        rep = job->route.kind == OW_ROUTE_ORDER ? lookup_order(w->store, &job->route)
                                                : lookup_request(w->store, &job->route);
        pthread_mutex_lock(&l->lock);
        w->current = NULL;
        answer_locked(job, rep);
        unref_locked(job);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

/* --- Submitting and answering --------------------------------------------- */

int serve_lookups_submit(serve_lookups *l, struct MHD_Connection *c, const serve_route *route,
                         serve_job **out)
{
    serve_job *job = calloc(1, sizeof(*job));
    serve_shard *sh;

    *out = NULL;
    if (job == NULL)
        return OW_ENOMEM;
    job->conn = c;
    job->route = *route;
    job->refs = 2; /* the connection's and the shard's */
    job->shard =
        l->n_shards == 1 ? 0 : ow_shard_of_user(route->user_id, l->shard_buckets, l->n_shards);
    sh = &l->shards[job->shard];
    pthread_mutex_lock(&l->lock);
    if (l->stopping) {
        pthread_mutex_unlock(&l->lock);
        free(job);
        return OW_EINVAL;
    }
    job->deadline_ms = ow_clock_mono_ms() + l->timeout_ms;
    /* Suspended before it can be answered: a resume must follow a suspend. */
    MHD_suspend_connection(c);
    if (sh->tail != NULL)
        sh->tail->next = job;
    else
        sh->head = job;
    sh->tail = job;
    pthread_cond_signal(&sh->ready);
    pthread_mutex_unlock(&l->lock);
    *out = job;
    return OW_OK;
}

int serve_lookups_take(serve_lookups *l, serve_job **job, serve_reply *out)
{
    int rc = OW_OK;

    pthread_mutex_lock(&l->lock);
    if ((*job)->state != JOB_ANSWERED) {
        rc = OW_ERETRY;
    } else {
        *out = (*job)->reply;
        (*job)->reply.r = NULL;
        unref_locked(*job);
        *job = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

void serve_lookups_release(serve_lookups *l, serve_job **job)
{
    if (job == NULL || *job == NULL)
        return;
    pthread_mutex_lock(&l->lock);
    unref_locked(*job);
    pthread_mutex_unlock(&l->lock);
    *job = NULL;
}

/* Answers the queued jobs past their deadline (the head of the queue is the
 * oldest) and the running ones; at a stop, every one. */
static void expire_locked(serve_lookups *l, serve_shard *sh, int64_t now_ms)
{
    while (sh->head != NULL && (l->stopping || now_ms >= sh->head->deadline_ms)) {
        serve_job *job = sh->head;

        sh->head = job->next;
        if (sh->head == NULL)
            sh->tail = NULL;
        answer_late_locked(l, job);
        unref_locked(job); /* the queue's reference */
    }
    for (unsigned i = 0; i < sh->n_threads; i++) {
        serve_job *job = sh->workers[i].current;

        if (job != NULL && job->state == JOB_RUNNING && (l->stopping || now_ms >= job->deadline_ms))
            answer_late_locked(l, job);
    }
}

void serve_lookups_tick(serve_lookups *l, int64_t now_ms)
{
    pthread_mutex_lock(&l->lock);
    for (unsigned i = 0; i < l->n_shards; i++)
        expire_locked(l, &l->shards[i], now_ms);
    pthread_mutex_unlock(&l->lock);
}

/* --- Start and stop ------------------------------------------------------- */

static int shard_init(serve_lookups *l, unsigned index, const ow_store_params *sp, unsigned threads)
{
    serve_shard *sh = &l->shards[index];
    ow_store_params p = *sp;

    /* Lookups take no locks: a read that does not come back within the
     * lookup's bound is given up, so the thread serves again. */
    p.read_timeout_s = (unsigned)((l->timeout_ms + 999) / 1000);
    /* Each lookup is one statement that ends its own transaction: one
     * round trip, with the server refusing any write. */
    p.read_only = 1;
    sh->owner = l;
    sh->index = index;
    pthread_cond_init(&sh->ready, NULL);
    sh->workers = calloc(threads, sizeof(*sh->workers));
    if (sh->workers == NULL)
        return -1;
    for (; sh->n_workers < threads; sh->n_workers++) {
        serve_worker *w = &sh->workers[sh->n_workers];

        w->shard = sh;
        w->store = ow_store_new(&p, &l->ids);
        if (w->store == NULL)
            return -1;
    }
    return 0;
}

/* One connection per shard at start: wrong credentials or a missing
 * database stop the service now; a shard that is merely down does not (503
 * for its users until it is back). */
static int first_connect(serve_lookups *l, ow_error *err)
{
    for (unsigned i = 0; i < l->n_shards; i++) {
        int rc = ow_store_ping(l->shards[i].workers[0].store, err);

        if (rc != OW_OK && err->cls != OW_ERRCLASS_RETRIABLE)
            return rc;
        if (rc != OW_OK)
            OW_LOG(OW_LOG_WARN, "api_database_unavailable", OW_F_INT("shard", i),
                   OW_F_STR("error", err->msg));
    }
    return OW_OK;
}

static int start_threads(serve_lookups *l, ow_error *err)
{
    for (unsigned i = 0; i < l->n_shards; i++) {
        serve_shard *sh = &l->shards[i];

        for (; sh->n_threads < sh->n_workers; sh->n_threads++) {
            if (pthread_create(&sh->workers[sh->n_threads].thread, NULL, worker_main,
                               &sh->workers[sh->n_threads]) != 0)
                return ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                                    "api: cannot start a database thread");
        }
    }
    return OW_OK;
}

int serve_lookups_new(const serve_lookup_params *p, serve_lookups **out, ow_error *err)
{
    serve_lookups *l = calloc(1, sizeof(*l));
    unsigned n = p->n_shards > 0 ? p->n_shards : 1;
    int rc = OW_OK;

    *out = NULL;
    if (l == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    pthread_mutex_init(&l->lock, NULL);
    l->timeout_ms = p->lookup_timeout_ms;
    l->shard_buckets = p->shard_buckets;
    ow_idgen_init(&l->ids, 0, ow_clock_wall_ms);
    l->shards = calloc(n, sizeof(*l->shards));
    if (l->shards == NULL)
        rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    for (; rc == OW_OK && l->n_shards < n; l->n_shards++) {
        const ow_store_params *sp = p->n_shards > 0 ? &p->shards[l->n_shards] : &p->store;

        if (shard_init(l, l->n_shards, sp, p->threads) != 0)
            rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    }
    if (rc == OW_OK)
        rc = first_connect(l, err);
    if (rc == OW_OK)
        rc = start_threads(l, err);
    if (rc != OW_OK) {
        serve_lookups_stop(l);
        serve_lookups_free(&l);
        return rc;
    }
    *out = l;
    return OW_OK;
}

void serve_lookups_stop(serve_lookups *l)
{
    pthread_mutex_lock(&l->lock);
    l->stopping = 1;
    for (unsigned i = 0; i < l->n_shards; i++) {
        serve_shard *sh = &l->shards[i];

        expire_locked(l, sh, 0);
        pthread_cond_broadcast(&sh->ready);
        /* A thread held by a database that does not answer returns now. */
        for (unsigned k = 0; k < sh->n_threads; k++)
            ow_store_cancel(sh->workers[k].store);
    }
    pthread_mutex_unlock(&l->lock);
    for (unsigned i = 0; i < l->n_shards; i++) {
        serve_shard *sh = &l->shards[i];

        for (unsigned k = 0; k < sh->n_threads; k++)
            pthread_join(sh->workers[k].thread, NULL);
        pthread_mutex_lock(&l->lock); /* the timer reads it */
        sh->n_threads = 0;
        pthread_mutex_unlock(&l->lock);
    }
}

void serve_lookups_free(serve_lookups **lp)
{
    serve_lookups *l;

    if (lp == NULL || *lp == NULL)
        return;
    l = *lp;
    for (unsigned i = 0; l->shards != NULL && i < l->n_shards; i++) {
        serve_shard *sh = &l->shards[i];

        for (unsigned k = 0; k < sh->n_workers; k++)
            ow_store_free(&sh->workers[k].store);
        free(sh->workers);
        pthread_cond_destroy(&sh->ready);
    }
    free(l->shards);
    pthread_mutex_destroy(&l->lock);
    free(l);
    *lp = NULL;
}
