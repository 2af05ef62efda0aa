/* Making jobs (src/pipeline/job.h): a job ended on any thread goes back to
 * the maker that made it and is made again from the same memory, reset;
 * none is lost or handed out twice when several threads end jobs at once;
 * the maker keeps at most MAKER_KEEP (1024) ended jobs; a key is copied into
 * the job when it fits and onto the heap when it does not; the in-flight
 * budget counts a job from its dispatch to its end, and no other. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "job.h"
#include "ledger.h"

static const char value[] = "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"A-1\","
                            "\"amount\":\"19.90\"}]}";

static void maker_init(ow_job_maker *mk)
{
    ow_job_limits lim = {{1 << 20, 1000}, 1 << 20};

    ow_job_maker_init(mk, &lim);
}

static ow_job *make(ow_job_maker *mk, const char *key, size_t key_len)
{
    ow_job_input in = {0, 1, 0, key, key_len, value, sizeof(value) - 1};
    ow_job *job = ow_job_from_input(mk, &in);

    assert_non_null(job);
    assert_int_equal(job->valid, 1);
    return job;
}

static void *end_job(void *arg)
{
    ow_job_free(arg);
    return NULL;
}

/* A job ended on another thread is the next one made, reset. */
static void test_ended_job_made_again(void **state)
{
    ow_job_maker mk;
    ow_job *a, *b;
    pthread_t t;

    (void)state;
    maker_init(&mk);
    a = make(&mk, "key-1", 5);
    a->in_progress_rounds = 3;
    a->dropped = 1;
    a->not_before_ms = 99;
    assert_int_equal(pthread_create(&t, NULL, end_job, a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_ptr_equal(atomic_load(&mk.returned), a); /* back with its maker, not freed */
    b = make(&mk, "key-2", 5);
    assert_null(atomic_load(&mk.returned));
    assert_ptr_equal(b, a);
    assert_int_equal(b->in_progress_rounds, 0);
    assert_int_equal(b->dropped, 0);
    assert_int_equal(b->not_before_ms, 0);
    assert_ptr_equal(b->maker, &mk);
    assert_string_equal(b->key, "key-2");
    assert_ptr_equal(b->item.key, b->key);
    assert_int_equal(b->req.n_orders, 1);
    for (int k = 0; k < OW_OUT_KINDS; k++)
        assert_ptr_equal(ow_job_of_tag(&b->tags[k]), b);
    ow_job_free(b);
    ow_job_maker_cleanup(&mk);
}

/* A key of up to OW_KEY_MAX bytes lives in the job; a longer one (an
 * invalid message's) on the heap, its outputs' copy cut at
 * OW_OUTPUT_KEY_MAX. */
static void test_keys(void **state)
{
    ow_job_maker mk;
    char longest[OW_KEY_MAX];
    size_t huge_len = 3 * OW_OUTPUT_KEY_MAX;
    char *huge = malloc(huge_len);
    ow_job_input in = {0, 1, 0, huge, huge_len, value, sizeof(value) - 1};
    ow_job *job;

    (void)state;
    assert_non_null(huge);
    maker_init(&mk);
    memset(longest, 'k', sizeof(longest));
    job = make(&mk, longest, sizeof(longest));
    assert_ptr_equal(job->key, job->key_buf);
    assert_memory_equal(job->key, longest, sizeof(longest));
    assert_int_equal(job->key[sizeof(longest)], '\0');
    ow_job_free(job);
    memset(huge, 'h', huge_len);
    job = ow_job_from_input(&mk, &in);
    assert_non_null(job);
    assert_int_equal(job->valid, 0);
    assert_true(job->key != job->key_buf);
    assert_int_equal(job->key_len, huge_len);
    assert_int_equal(job->out_key_len, OW_OUTPUT_KEY_MAX);
    assert_memory_equal(job->key, huge, huge_len);
    ow_job_free(job); /* the heap copy is freed: the sanitize tier checks */
    job = make(&mk, "short", 5);
    assert_ptr_equal(job->key, job->key_buf);
    ow_job_free(job);
    ow_job_maker_cleanup(&mk);
    free(huge);
}

/* More jobs ended at once than a maker keeps: it keeps 1,024. */
static void test_keeps_at_most(void **state)
{
    enum { N = 1500 };
    ow_job_maker mk;
    ow_job **jobs = calloc(N, sizeof(*jobs));

    (void)state;
    assert_non_null(jobs);
    maker_init(&mk);
    for (size_t i = 0; i < N; i++)
        jobs[i] = make(&mk, "k", 1);
    for (size_t i = 0; i < N; i++)
        ow_job_free(jobs[i]);
    jobs[0] = make(&mk, "k", 1);
    assert_int_equal(mk.n_spare, 1023);
    ow_job_free(jobs[0]);
    ow_job_maker_cleanup(&mk);
    free(jobs);
}

/* Four threads end jobs while the maker makes more: at the end every job
 * made is back with the maker, each once. */
#define ENDERS 4
#define PER_ROUND 64
#define ROUNDS 400

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ow_job *queue[ENDERS * PER_ROUND];
    size_t n;
    int done;
} handoff;

static void *ender(void *arg)
{
    handoff *h = arg;

    pthread_mutex_lock(&h->mu);
    for (;;) {
        ow_job *job;

        while (h->n == 0 && !h->done)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->n == 0)
            break;
        job = h->queue[--h->n];
        pthread_cond_broadcast(&h->cv); /* room for the maker */
        pthread_mutex_unlock(&h->mu);
        ow_job_free(job);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;

    return (x > y) - (x < y);
}

/* The distinct pointers of v[0..n), sorted; returns how many. */
static size_t distinct(void **v, size_t n)
{
    size_t k = 0;

    qsort(v, n, sizeof(*v), cmp_ptr);
    for (size_t i = 0; i < n; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

static void test_concurrent_ends(void **state)
{
    static void *made[PER_ROUND * ROUNDS];
    static void *back[PER_ROUND * ROUNDS];
    handoff h = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0};
    pthread_t t[ENDERS];
    ow_job_maker mk;
    size_t n_made = 0, n_back = 0, uniq;

    (void)state;
    maker_init(&mk);
    for (int i = 0; i < ENDERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, ender, &h), 0);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < PER_ROUND; i++) {
            ow_job *job = make(&mk, "k", 1);

            made[n_made++] = job;
            pthread_mutex_lock(&h.mu);
            while (h.n == sizeof(h.queue) / sizeof(h.queue[0]))
                pthread_cond_wait(&h.cv, &h.mu);
            h.queue[h.n++] = job;
            pthread_cond_broadcast(&h.cv);
            pthread_mutex_unlock(&h.mu);
        }
    }
    pthread_mutex_lock(&h.mu);
    h.done = 1;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    for (int i = 0; i < ENDERS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    /* Every job ever made is back: the spares and the returned stack hold
     * the distinct jobs made, each once. */
    uniq = distinct(made, n_made);
    assert_true(uniq < n_made); /* jobs were made again */
    for (ow_job *j = mk.spare; j != NULL && n_back < uniq + 1; j = j->next)
        back[n_back++] = j;
    for (ow_job *j = atomic_load(&mk.returned); j != NULL && n_back < uniq + 1; j = j->next)
        back[n_back++] = j;
    assert_int_equal(n_back, uniq);
    assert_int_equal(distinct(back, n_back), uniq);
    assert_memory_equal(back, made, uniq * sizeof(*made));
    ow_job_maker_cleanup(&mk);
}

/* Tracks job in l (partition 0, the given offset): the caller holds it. */
static void track(ow_ledger *l, ow_job *job, int64_t offset)
{
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_track(l, 0, offset, &job->t, &seen), OW_OK);
}

static void *settle_job(void *arg)
{
    ow_job **jl = arg;

    ow_job_settle((ow_ledger *)jl[0], jl[1], 1);
    return NULL;
}

/* A dispatched job counts in the budget with its bytes until it ends, on
 * whichever thread; its bytes follow what it holds; a job never dispatched
 * counts nowhere, and a job made again from an ended one's memory starts
 * outside the budget. */
static void test_inflight_budget(void **state)
{
    ow_inflight budget = {0};
    ow_job_maker mk;
    ow_ledger l;
    ow_job *a, *b, *c, *d;
    void *jl[2];
    pthread_t t;
    int64_t a_bytes;

    (void)state;
    maker_init(&mk);
    ow_ledger_init(&l, NULL, NULL);
    assert_int_equal(ow_ledger_assign(&l, 0), OW_OK);
    a = make(&mk, "key-a", 5);
    b = make(&mk, "key-b", 5);
    c = make(&mk, "key-c", 5);
    track(&l, a, 1);
    track(&l, b, 2);
    track(&l, c, 3);
    assert_true(a->bytes > 0);
    ow_job_count_in(a, &budget);
    ow_job_count_in(b, &budget);
    assert_int_equal(atomic_load(&budget.messages), 2);
    assert_int_equal(atomic_load(&budget.bytes), (int64_t)(a->bytes + b->bytes));
    /* The producer copied a's outputs: it holds less now. */
    ow_job_holds(a, 100);
    assert_int_equal(atomic_load(&budget.bytes), (int64_t)(100 + b->bytes));
    /* c was never dispatched: its end leaves the budget alone. */
    ow_job_settle(&l, c, 1);
    assert_int_equal(atomic_load(&budget.messages), 2);
    a_bytes = (int64_t)a->bytes;
    ow_job_settle(&l, a, 1);
    assert_int_equal(atomic_load(&budget.messages), 1);
    assert_int_equal(atomic_load(&budget.bytes), (int64_t)b->bytes);
    assert_int_equal(a_bytes, 100);
    jl[0] = &l;
    jl[1] = b;
    assert_int_equal(pthread_create(&t, NULL, settle_job, jl), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(atomic_load(&budget.messages), 0);
    assert_int_equal(atomic_load(&budget.bytes), 0);
    /* Made again from an ended job's memory: outside the budget until it
     * is dispatched itself. */
    d = make(&mk, "key-d", 5);
    assert_true(d == a || d == b || d == c);
    assert_null(d->inflight);
    track(&l, d, 4);
    ow_job_settle(&l, d, 1);
    assert_int_equal(atomic_load(&budget.messages), 0);
    assert_int_equal(atomic_load(&budget.bytes), 0);
    ow_ledger_destroy(&l);
    ow_job_maker_cleanup(&mk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ended_job_made_again),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_keeps_at_most),
        cmocka_unit_test(test_concurrent_ends),
        cmocka_unit_test(test_inflight_budget),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
