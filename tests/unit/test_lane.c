/* A lane's micro-batch rules with a fake store and a fake delivery: which
 * jobs are decided together, what waits for the next batch, what a stale
 * job does, REQUEST_IN_PROGRESS and retries, what a lane does while its
 * database does not answer, and which lane a message goes to. The lane's
 * thread, its queue and the partition ledger are the real ones; the store,
 * its watch and the delivery are replaced at link time by the functions
 * below. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lane.h"
#include "metrics.h"
#include "ow/digest.h"
#include "ow/error.h"
#include "ow/shard.h"
#include "ow/util.h"

/* --- What the fakes saw ---------------------------------------------------- */

#define MAX_SEEN 256

typedef struct {
    pthread_mutex_t mu;
    /* Every decide call: the keys of its items, space-separated. */
    char batches[MAX_SEEN][256];
    size_t n_batches;
    /* Every publish, in order: "key" or "key:in_progress". */
    char published[MAX_SEEN][64];
    size_t n_published;
    /* Scripted answers. */
    int in_progress_left; /* the first N decides of key "busy" answer IN_PROGRESS */
    int retriable_left;   /* the first N decide calls fail RETRIABLE */
    int fatal;            /* every decide call fails FATAL */
    int hang;             /* decide blocks until ow_store_cancel (30 s at most) */
    int cancels;          /* ow_store_cancel calls */
    int hanging;          /* a decide call is blocked in hang mode */
    pthread_cond_t cv;    /* signals a cancel */
    int mark_ours;        /* created items are the call's own rows (as committed) */
    /* The last invalid job published: its 400 body and dead-letter bytes. */
    char invalid_body[512];
    size_t raw_len, raw_original_len;
} seen_t;

static seen_t seen = {PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static ow_ledger ledger;

/* --- The store, faked -------------------------------------------------------- */

void ow_store_params_from_config(const struct ow_config *cfg, ow_store_params *p)
{
    (void)cfg;
    memset(p, 0, sizeof(*p));
}

/* Shard i's store is fake_shards[i] (its port carries i); "down" makes
 * its decide and ping fail as a lost connection does. */
typedef struct {
    _Atomic int down;
} fake_shard;

static fake_shard fake_shards[OW_SHARD_MAX];

void ow_store_params_for_shard(const struct ow_config *cfg, unsigned shard, ow_store_params *p)
{
    (void)cfg;
    memset(p, 0, sizeof(*p));
    p->port = shard;
}

ow_store *ow_store_new(const ow_store_params *params, ow_idgen *ids)
{
    (void)ids;
    return (ow_store *)&fake_shards[params->port];
}

void ow_store_free(ow_store **store)
{
    *store = NULL;
}

int ow_store_ping(ow_store *s, ow_error *err)
{
    ow_error_clear(err);
    if (atomic_load(&((fake_shard *)s)->down))
        return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 2003, "cannot connect");
    return OW_OK;
}

const ow_store_stats *ow_store_get_stats(const ow_store *s)
{
    static const ow_store_stats none;

    (void)s;
    return &none;
}

size_t ow_store_orders_cap(void)
{
    return SIZE_MAX;
}

int ow_store_connected(const ow_store *s)
{
    return !atomic_load(&((const fake_shard *)s)->down);
}

void ow_store_cancel(ow_store *s)
{
    (void)s;
    pthread_mutex_lock(&seen.mu);
    seen.cancels++;
    pthread_cond_broadcast(&seen.cv);
    pthread_mutex_unlock(&seen.mu);
}

/* A call blocked in the database until a cancel; it then fails as a TLS
 * connection cut mid-read does, in a class that is not RETRIABLE. */
static int hang_until_cancelled(ow_error *err)
{
    struct timespec ts;

    ow_deadline_after_ms(30000, &ts);
    seen.hanging = 1;
    while (seen.cancels == 0 && pthread_cond_timedwait(&seen.cv, &seen.mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&seen.mu);
    return ow_error_set(err, OW_ERRCLASS_FATAL, 2026, "TLS/SSL error: unexpected eof");
}

int ow_store_item_init(ow_store_item *it, const ow_request *req, const char *key, size_t key_len)
{
    memset(it, 0, sizeof(*it));
    it->req = req;
    it->key = key;
    it->key_len = key_len;
    ow_buf_init(&it->body);
    return OW_OK;
}

void ow_store_item_cleanup(ow_store_item *it)
{
    ow_buf_cleanup(&it->body);
}

int ow_store_decide(ow_store *s, ow_store_item *items, size_t n, ow_error *err)
{
    char *line;

    ow_error_clear(err);
    if (atomic_load(&((fake_shard *)s)->down))
        return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 2013, "lost connection");
    pthread_mutex_lock(&seen.mu);
    if (seen.hang)
        return hang_until_cancelled(err);
    if (seen.fatal) {
        pthread_mutex_unlock(&seen.mu);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 1146, "no such table");
    }
    if (seen.retriable_left > 0) {
        seen.retriable_left--;
        pthread_mutex_unlock(&seen.mu);
        return ow_error_set(err, OW_ERRCLASS_RETRIABLE, 2013, "lost connection");
    }
    line = seen.batches[seen.n_batches++ % MAX_SEEN];
    line[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int busy = items[i].key_len == 4 && memcmp(items[i].key, "busy", 4) == 0;
        int huge = items[i].key_len == 4 && memcmp(items[i].key, "huge", 4) == 0;

        snprintf(line + strlen(line), 256 - strlen(line), "%s%.*s", i > 0 ? " " : "",
                 (int)items[i].key_len, items[i].key);
        ow_buf_reset(&items[i].body);
        ow_buf_appends(&items[i].body, "{}");
        if (huge) { /* its record does not fit the server's packet */
            items[i].decision = OW_DECISION_TOO_LARGE;
            items[i].code = OW_CODE_INVALID_REQUEST;
            ow_buf_reset(&items[i].body);
        } else if (busy && seen.in_progress_left > 0) {
            seen.in_progress_left--;
            items[i].decision = OW_DECISION_IN_PROGRESS;
            items[i].code = OW_CODE_REQUEST_IN_PROGRESS;
        } else {
            items[i].decision = OW_DECISION_CREATED;
            items[i].code = OW_CODE_CREATED;
            items[i].ours = seen.mark_ours;
        }
    }
    pthread_mutex_unlock(&seen.mu);
    return OW_OK;
}

/* --- The database's watch, faked: its state is the test's to set --------- */

struct ow_store_watch {
    _Atomic int state;
};

static ow_store_watch fake_watch;

void ow_store_use_watch(ow_store *s, ow_store_watch *w)
{
    (void)s;
    (void)w;
}

ow_watch_state ow_store_watch_state(ow_store_watch *w, ow_error *why)
{
    if (why != NULL)
        ow_error_clear(why);
    return (ow_watch_state)atomic_load(&w->state);
}

int ow_store_watch_wait_up(ow_store_watch *w, int64_t deadline_ms, const volatile int *stop)
{
    while (atomic_load(&w->state) != OW_WATCH_UP && ow_clock_mono_ms() < deadline_ms &&
           (stop == NULL || !*stop))
        ow_sleep_ms(1, NULL);
    return atomic_load(&w->state) == OW_WATCH_UP;
}

/* --- The delivery, faked: every output is acknowledged at once ---------- */

static void record(const ow_job *job, const char *suffix)
{
    pthread_mutex_lock(&seen.mu);
    snprintf(seen.published[seen.n_published++ % MAX_SEEN], 64, "%.*s%s", (int)job->key_len,
             job->key, suffix);
    pthread_mutex_unlock(&seen.mu);
}

void ow_delivery_publish(ow_delivery *d, ow_job *job)
{
    (void)d;
    if (!job->valid) {
        pthread_mutex_lock(&seen.mu);
        snprintf(seen.invalid_body, sizeof(seen.invalid_body), "%.*s", (int)job->invalid_body.len,
                 job->invalid_body.data);
        seen.raw_len = job->raw_len;
        seen.raw_original_len = job->raw_original_len;
        pthread_mutex_unlock(&seen.mu);
    }
    record(job, "");
    ow_job_settle(&ledger, job, 1);
}

void ow_delivery_in_progress(ow_delivery *d, ow_job *job)
{
    (void)d;
    record(job, ":in_progress");
}

/* The publish gate is always open here, and the release order belongs to
 * exactly-once mode, which these tests do not run: a job given up is
 * settled as not done. */
int ow_delivery_enter(ow_delivery *d)
{
    (void)d;
    return 1;
}

void ow_delivery_leave(ow_delivery *d)
{
    (void)d;
}

void ow_delivery_abandon(ow_delivery *d, ow_job *job)
{
    (void)d;
    ow_job_settle(&ledger, job, 0);
}

/* --- Fixture ------------------------------------------------------------------ */

typedef struct {
    ow_config cfg;
    ow_runstate rs;
    ow_lane_env env;
    ow_lane lane;
    int64_t next_offset;
} fixture;

static int stores; /* how often the done watermark moved */

static void count_store(void *opaque, int32_t partition, int64_t offset)
{
    (void)opaque;
    (void)partition;
    (void)offset;
    stores++;
}

static int setup(void **state)
{
    static fixture f;
    ow_error err;

    memset(&f, 0, sizeof(f));
    pthread_mutex_lock(&seen.mu);
    memset(seen.batches, 0, sizeof(seen.batches));
    memset(seen.published, 0, sizeof(seen.published));
    seen.n_batches = seen.n_published = 0;
    seen.in_progress_left = seen.retriable_left = seen.fatal = seen.mark_ours = 0;
    seen.hang = seen.cancels = seen.hanging = 0;
    stores = 0;
    pthread_mutex_unlock(&seen.mu);
    for (int i = 0; i < OW_SHARD_MAX; i++)
        atomic_store(&fake_shards[i].down, 0);
    atomic_store(&fake_watch.state, OW_WATCH_UP);
    atomic_store(&ow_stats.shard_waiting[0], 0);
    ow_runstate_init(&f.rs);
    assert_int_equal(ow_config_init(&f.cfg, &err), OW_OK);
    f.cfg.batch_max_messages = 4;
    f.cfg.batch_max_wait_ms = 0;
    f.cfg.retry_backoff_ms = 1;
    f.cfg.retry_backoff_max_ms = 2;
    ow_ledger_init(&ledger, count_store, NULL);
    assert_int_equal(ow_ledger_assign(&ledger, 0), OW_OK);
    f.env = (ow_lane_env){&f.cfg, &f.rs, NULL, NULL, &ledger, 1};
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;

    ow_lane_stop(&f->lane);
    ow_lane_join(&f->lane, ow_clock_mono_ms() + 10000);
    ow_lane_destroy(&f->lane);
    ow_ledger_destroy(&ledger);
    ow_config_cleanup(&f->cfg);
    ow_runstate_cleanup(&f->rs);
    return 0;
}

/* A valid job for key with the given order numbers of user 7. */
static ow_job *job_new(fixture *f, const char *key, const char *const *orders, size_t n)
{
    ow_job *job = ow_job_new();
    ow_ledger_seen at;

    assert_non_null(job);
    assert_int_equal(ow_ledger_track(&ledger, 0, f->next_offset++, &job->t, &at), OW_OK);
    job->key_len = strlen(key);
    job->key = malloc(job->key_len + 1);
    memcpy(job->key, key, job->key_len + 1);
    job->out_key_len = job->key_len;
    job->key_hash = ow_hash64(key, job->key_len);
    job->valid = 1;
    job->req.user_id = 7;
    job->req.n_orders = n;
    job->req.orders = calloc(n > 0 ? n : 1, sizeof(ow_order_item));
    for (size_t i = 0; i < n; i++) {
        snprintf(job->req.orders[i].external_order_no, OW_EXT_NO_MAX + 1, "%s", orders[i]);
        job->req.orders[i].ext_len = strlen(orders[i]);
    }
    assert_int_equal(ow_store_item_init(&job->item, &job->req, job->key, job->key_len), OW_OK);
    ow_buf_init(&job->invalid_body);
    return job;
}

static ow_job *simple(fixture *f, const char *key, const char *order)
{
    const char *orders[1] = {order};

    return job_new(f, key, orders, 1);
}

/* Waits (bounded: 10 s) until n outputs were published. */
static void wait_published(size_t n)
{
    for (int i = 0; i < 10000; i++) {
        size_t have;

        pthread_mutex_lock(&seen.mu);
        have = seen.n_published;
        pthread_mutex_unlock(&seen.mu);
        if (have >= n)
            return;
        ow_sleep_ms(1, NULL);
    }
    fail_msg("only %zu of %zu outputs were published", seen.n_published, n);
}

/* Starts the lane and queues every job while holding its lock, so that the
 * lane sees the whole queue at once and batches form from it alone, not
 * from the timing of the test. */
static void enqueue_then_start(fixture *f, ow_job **jobs, size_t n)
{
    ow_error err;

    assert_int_equal(ow_lane_start(&f->lane, &f->env, 0, 0, &fake_watch, &err), OW_OK);
    pthread_mutex_lock(&f->lane.mu);
    for (size_t i = 0; i < n; i++) {
        jobs[i]->next = NULL;
        if (f->lane.tail == NULL)
            f->lane.head = jobs[i];
        else
            f->lane.tail->next = jobs[i];
        f->lane.tail = jobs[i];
        f->lane.queued++;
        atomic_fetch_add(&ow_stats.shard_waiting[0], 1); /* as ow_lane_enqueue counts */
    }
    pthread_cond_signal(&f->lane.cv);
    pthread_mutex_unlock(&f->lane.mu);
}

/* The same key twice: the second waits for the next batch, and results
 * leave in consumption order. */
static void test_same_key_waits_for_next_batch(void **state)
{
    fixture *f = *state;
    ow_job *jobs[3] = {simple(f, "a", "o1"), simple(f, "a", "o2"), simple(f, "b", "o3")};

    enqueue_then_start(f, jobs, 3);
    wait_published(3);
    assert_string_equal(seen.batches[0], "a b");
    assert_string_equal(seen.batches[1], "a");
    assert_string_equal(seen.published[0], "a");
    assert_string_equal(seen.published[1], "b");
    assert_string_equal(seen.published[2], "a");
}

/* Two keys naming the same order of the same user are never decided in one
 * transaction; a third key behind the blocked one may still join. */
static void test_colliding_orders_split(void **state)
{
    fixture *f = *state;
    ow_job *jobs[3] = {simple(f, "k1", "same"), simple(f, "k2", "same"), simple(f, "k3", "other")};

    enqueue_then_start(f, jobs, 3);
    wait_published(3);
    assert_string_equal(seen.batches[0], "k1 k3");
    assert_string_equal(seen.batches[1], "k2");
}

/* batch.max_messages caps a batch. */
static void test_batch_size_cap(void **state)
{
    fixture *f = *state;
    ow_job *jobs[10];
    char key[8], order[8];

    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        snprintf(order, sizeof(order), "o%d", i);
        jobs[i] = simple(f, key, order);
    }
    enqueue_then_start(f, jobs, 10);
    wait_published(10);
    assert_string_equal(seen.batches[0], "k0 k1 k2 k3");
    assert_string_equal(seen.batches[1], "k4 k5 k6 k7");
    assert_string_equal(seen.batches[2], "k8 k9");
}

/* A job whose partition was revoked is ended without being decided. */
static void test_stale_job_is_dropped(void **state)
{
    fixture *f = *state;
    ow_job *jobs[2];

    assert_int_equal(ow_ledger_assign(&ledger, 1), OW_OK);
    jobs[0] = simple(f, "gone", "o1");
    jobs[0]->t.partition = 1;
    {
        ow_ledger_seen at;

        assert_int_equal(ow_ledger_track(&ledger, 1, 0, &jobs[0]->t, &at), OW_OK);
    }
    jobs[1] = simple(f, "kept", "o2");
    ow_ledger_revoke_begin(&ledger, 1);
    enqueue_then_start(f, jobs, 2);
    wait_published(1);
    assert_string_equal(seen.batches[0], "kept");
    assert_int_equal(seen.n_batches, 1);
    assert_string_equal(seen.published[0], "kept");
}

/* REQUEST_IN_PROGRESS is published, the job retried, and a later message
 * with the same key does not overtake it. */
static void test_in_progress_retries_in_order(void **state)
{
    fixture *f = *state;
    ow_job *jobs[2] = {simple(f, "busy", "o1"), simple(f, "busy", "o1")};

    seen.in_progress_left = 2;
    enqueue_then_start(f, jobs, 2);
    wait_published(4);
    assert_string_equal(seen.published[0], "busy:in_progress");
    assert_string_equal(seen.published[1], "busy:in_progress");
    assert_string_equal(seen.published[2], "busy");
    assert_string_equal(seen.published[3], "busy");
    for (size_t i = 0; i < seen.n_batches; i++)
        assert_string_equal(seen.batches[i], "busy");
}

/* A record the server's packet cannot hold (the limit shrank after the
 * message was read): the job is answered 400 naming the orders, its
 * dead-letter copy keeps none of the bytes (a valid job kept none) and
 * names their length, and the batch's other job is decided as usual. */
static void test_record_too_large_is_refused(void **state)
{
    fixture *f = *state;
    ow_job *jobs[2] = {simple(f, "huge", "o1"), simple(f, "a", "o2")};

    jobs[0]->raw_original_len = 1234;
    enqueue_then_start(f, jobs, 2);
    wait_published(2);
    assert_string_equal(seen.published[0], "huge");
    assert_string_equal(seen.published[1], "a");
    assert_non_null(strstr(seen.invalid_body, "\"code\":\"INVALID_REQUEST\""));
    assert_non_null(strstr(seen.invalid_body, "max_allowed_packet"));
    assert_int_equal(seen.raw_len, 0);
    assert_int_equal(seen.raw_original_len, 1234);
}

/* Transient failures are retried with the same batch; a fatal one stops
 * the worker and ends the batch's jobs without output. */
static void test_retries_then_fatal(void **state)
{
    fixture *f = *state;
    ow_job *jobs[2] = {simple(f, "r1", "o1"), simple(f, "r2", "o2")};

    seen.retriable_left = 3;
    enqueue_then_start(f, jobs, 2);
    wait_published(2);
    assert_int_equal(seen.n_batches, 1);
    assert_string_equal(seen.batches[0], "r1 r2");
    seen.fatal = 1;
    {
        ow_job *more[1] = {simple(f, "f1", "o3")};

        ow_lane_enqueue(&f->lane, more[0]);
    }
    for (int i = 0; i < 10000 && !atomic_load(&f->rs.fatal); i++)
        ow_sleep_ms(1, NULL);
    assert_true(atomic_load(&f->rs.fatal));
    assert_int_equal(seen.n_published, 2);
}

/* A job of a traced message, as ow_job_from_input makes it. */
static void give_trace(ow_job *job, const char *trace_id)
{
    job->trace = calloc(1, sizeof(*job->trace));
    assert_non_null(job->trace);
    snprintf(job->trace->trace_id, sizeof(job->trace->trace_id), "%s", trace_id);
}

/* A retried transaction's line lists the trace ids of its messages, each
 * once, so that the line is found from any of their traces. */
static void test_retry_line_lists_the_traces(void **state)
{
    fixture *f = *state;
    ow_job *jobs[4] = {simple(f, "t1", "o1"), simple(f, "t2", "o2"), simple(f, "t3", "o3"),
                       simple(f, "t4", "o4")};
    static char text[8192];
    int fds[2];
    ssize_t n;

    give_trace(jobs[0], "0af7651916cd43dd8448eb211c80319c");
    give_trace(jobs[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    give_trace(jobs[3], "0af7651916cd43dd8448eb211c80319c");
    seen.retriable_left = 1;
    assert_int_equal(pipe(fds), 0);
    ow_log_set_fd(fds[1]);
    ow_log_set_level(OW_LOG_INFO);
    enqueue_then_start(f, jobs, 4);
    wait_published(4);
    ow_log_set_fd(-1);
    close(fds[1]);
    n = read(fds[0], text, sizeof(text) - 1);
    close(fds[0]);
    text[n > 0 ? n : 0] = '\0';
    if (strstr(text, "\"event\":\"db_retry\"") == NULL ||
        strstr(text, "\"messages\":4,\"trace_ids\":[\"0af7651916cd43dd8448eb211c80319c\","
                     "\"4bf92f3577b34da6a3ce929d0e0e4736\"]}") == NULL)
        fail_msg("no db_retry line listing the batch's two traces:\n%s", text);
}

/* A stop does not wait for a lane blocked in the database past
 * the lane's deadline. Its call is cancelled, and the batch is abandoned
 * (no output, the offset not done) without taking the failure of the
 * cancelled call for a fatal error. */
static void test_stop_cancels_a_blocked_lane(void **state)
{
    fixture *f = *state;
    ow_job *jobs[1] = {simple(f, "stuck", "o1")};

    seen.hang = 1;
    enqueue_then_start(f, jobs, 1);
    for (int i = 0; i < 10000; i++) { /* until the lane is inside decide */
        int in;

        pthread_mutex_lock(&seen.mu);
        in = seen.hanging;
        pthread_mutex_unlock(&seen.mu);
        if (in)
            break;
        ow_sleep_ms(1, NULL);
    }
    assert_int_equal(seen.hanging, 1);
    atomic_store(&f->rs.stopping, 1);
    f->rs.deadline_ms = ow_clock_mono_ms() + 100;
    ow_lane_stop(&f->lane);
    ow_lane_join(&f->lane, ow_clock_mono_ms() + 100);
    assert_int_equal(seen.cancels, 1);
    assert_int_equal(seen.n_published, 0);
    assert_false(atomic_load(&f->rs.fatal));
    assert_int_equal(stores, 0); /* its offset is not done: redelivered */
}

/* A retry with the same digest is answered from the lane's cache
 * once the first was committed; another digest goes to the store again. */
static void run_cache_case(fixture *f, size_t expect_decides)
{
    ow_job *jobs[3] = {simple(f, "c", "o1"), simple(f, "c", "o1"), simple(f, "c", "o2")};
    uint64_t hits = atomic_load(&ow_stats.cache_hits);

    jobs[0]->item.digest[0] = jobs[1]->item.digest[0] = 1;
    jobs[2]->item.digest[0] = 2;
    seen.mark_ours = 1;
    enqueue_then_start(f, jobs, 3);
    wait_published(3);
    assert_int_equal(seen.n_batches, expect_decides);
    assert_int_equal(atomic_load(&ow_stats.cache_hits) - hits, 3 - expect_decides);
    for (size_t i = 0; i < seen.n_batches; i++)
        assert_string_equal(seen.batches[i], "c");
}

static void test_cache_answers_same_digest(void **state)
{
    fixture *f = *state;

    run_cache_case(f, 2);
}

static void test_cache_off(void **state)
{
    fixture *f = *state;

    f->cfg.cache_max_bytes = 0;
    run_cache_case(f, 3);
}

/* --- A database that does not answer, and routing ------------------------ */

/* An invalid job for key: answered without a database. */
static ow_job *invalid(fixture *f, const char *key)
{
    ow_job *job = simple(f, key, "x");

    ow_request_cleanup(&job->req);
    ow_store_item_cleanup(&job->item);
    memset(&job->req, 0, sizeof(job->req));
    job->valid = 0;
    return job;
}

static size_t published(void)
{
    size_t n;

    pthread_mutex_lock(&seen.mu);
    n = seen.n_published;
    pthread_mutex_unlock(&seen.mu);
    return n;
}

static size_t published_at(const char *key, size_t from)
{
    for (size_t i = from; i < seen.n_published; i++) {
        if (strcmp(seen.published[i], key) == 0)
            return i;
    }
    fail_msg("%s was never published after position %zu", key, from);
    return 0;
}

/* While the lane's database does not answer, the jobs that need it wait in
 * the queue, in order, and so does a later job with one of their keys (an
 * invalid one too); what needs no database leaves: an invalid message and
 * a retry the lane's cache answers. Once the database answers, the rest is
 * decided and published, each key's results in consumption order. */
static void test_database_down_holds_only_what_needs_it(void **state)
{
    fixture *f = *state;
    ow_job *first[1] = {simple(f, "c", "o0")};
    ow_job *retry, *later[4];

    f->cfg.cache_max_bytes = 1 << 20;
    first[0]->item.digest[0] = 7;
    seen.mark_ours = 1;
    enqueue_then_start(f, first, 1);
    wait_published(1);

    atomic_store(&fake_watch.state, OW_WATCH_DOWN);
    atomic_store(&fake_shards[0].down, 1);
    later[0] = simple(f, "a", "o1");
    later[1] = invalid(f, "a");
    later[2] = invalid(f, "x");
    later[3] = simple(f, "b", "o2");
    for (int i = 0; i < 4; i++)
        ow_lane_enqueue(&f->lane, later[i]);
    retry = simple(f, "c", "o0");
    retry->item.digest[0] = 7;
    ow_lane_enqueue(&f->lane, retry);
    wait_published(3);
    ow_sleep_ms(300, NULL); /* three polls of the watch: nothing more leaves */
    assert_int_equal(published(), 3);
    assert_int_equal(seen.n_batches, 1);
    published_at("x", 1);
    published_at("c", 1);
    assert_int_equal(atomic_load(&ow_stats.shard_waiting[0]), 3);

    atomic_store(&fake_shards[0].down, 0);
    atomic_store(&fake_watch.state, OW_WATCH_UP);
    wait_published(6);
    assert_true(published_at("a", 1) < published_at("a", published_at("a", 1) + 1));
    published_at("b", 1);
    assert_int_equal(seen.n_batches, 2);
    assert_string_equal(seen.batches[1], "a b");
    assert_int_equal(atomic_load(&ow_stats.shard_waiting[0]), 0);
}

/* A database the watch found refusing (a rejected certificate, a wrong
 * password) is not waited for as an outage is: the lane takes its jobs,
 * its attempt fails for good and the worker stops, as it would if the
 * lane had met the refusal itself. Seen on MariaDB 11.8: the worker started
 * while the first handshake looked like a lost connection, and waited
 * until it was killed. */
static void test_database_refused_stops_the_worker(void **state)
{
    fixture *f = *state;
    ow_job *jobs[1] = {simple(f, "r1", "o1")};

    atomic_store(&fake_watch.state, OW_WATCH_REFUSED);
    seen.fatal = 1;
    enqueue_then_start(f, jobs, 1);
    for (int i = 0; i < 5000 && !atomic_load(&f->rs.fatal); i++)
        ow_sleep_ms(1, NULL);
    assert_true(atomic_load(&f->rs.fatal));
    assert_int_equal(seen.n_published, 0);
    assert_int_equal(atomic_load(&ow_stats.shard_waiting[0]), 0);
}

static int64_t user_on(unsigned shard)
{
    for (int64_t u = 100;; u++) {
        if (ow_shard_of_user(u, 4096, 3) == shard)
            return u;
    }
}

/* Every message of one (user, key) goes to one lane, among its user's
 * database's lanes; a message without a user goes to the first
 * database's. */
static void test_route_by_database_then_key(void **state)
{
    fixture *f = *state;
    ow_job *on1 = simple(f, "k", "o1"), *again = simple(f, "k", "o2");
    ow_job *on2 = simple(f, "k", "o3"), *nouser = invalid(f, "k");
    size_t lane1, lane2;

    f->cfg.shards.n = 3;
    f->cfg.mysql_shard_buckets = 4096;
    on1->req.user_id = again->req.user_id = user_on(1);
    on2->req.user_id = user_on(2);
    lane1 = ow_lane_route(&f->cfg, 4, on1);
    lane2 = ow_lane_route(&f->cfg, 4, on2);
    assert_in_range(lane1, 4, 7);
    assert_in_range(lane2, 8, 11);
    assert_int_equal(lane1 % 4, lane2 % 4); /* the key picks the lane within a database */
    assert_int_equal(ow_lane_route(&f->cfg, 4, again), lane1);
    assert_in_range(ow_lane_route(&f->cfg, 4, nouser), 0, 3);
    f->cfg.shards.n = 0;
    assert_in_range(ow_lane_route(&f->cfg, 4, on2), 0, 3);
    for (int i = 0; i < 4; i++) {
        ow_job *j = i == 0 ? on1 : i == 1 ? again : i == 2 ? on2 : nouser;

        ow_job_settle(&ledger, j, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_same_key_waits_for_next_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_colliding_orders_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_size_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_job_is_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_progress_retries_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_too_large_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retries_then_fatal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retry_line_lists_the_traces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_cancels_a_blocked_lane, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_answers_same_digest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_database_down_holds_only_what_needs_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_database_refused_stops_the_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_by_database_then_key, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
