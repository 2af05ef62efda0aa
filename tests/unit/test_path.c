/* ow-path's pure parts (tools/path/path.h): instructions per message from
 * two callgrind runs, and the determinism that makes that figure repeat for
 * the same binary: the same corpus from the same seed, and the same outputs
 * from the same corpus, run after run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "path.h"

static void test_per_message_cancels_the_start(void **state)
{
    uint64_t out = 0;

    (void)state;
    /* 1,000 instructions of start-up and 200 a message in both runs. */
    assert_int_equal(pt_per_message(1000 + 200 * 10, 10, 1000 + 200 * 110, 110, &out), 0);
    assert_int_equal(out, 200);
    /* Rounded to the nearest integer, halves up. */
    assert_int_equal(pt_per_message(0, 0, 5, 2, &out), 0);
    assert_int_equal(out, 3);
    assert_int_equal(pt_per_message(100, 1, 104, 4, &out), 0);
    assert_int_equal(out, 1);
    assert_int_equal(pt_per_message(100, 1, 105, 4, &out), 0);
    assert_int_equal(out, 2);
    /* Large counts do not overflow. */
    assert_int_equal(pt_per_message(0, 0, UINT64_MAX, 1, &out), 0);
    assert_true(out == UINT64_MAX);
    assert_int_equal(pt_per_message(UINT64_MAX - 3, 1, UINT64_MAX, 3, &out), 0);
    assert_int_equal(out, 2);
}

static void test_per_message_refuses_swapped_runs(void **state)
{
    uint64_t out = 7;

    (void)state;
    assert_int_equal(pt_per_message(1000, 10, 2000, 10, &out), -1);
    assert_int_equal(pt_per_message(2000, 20, 3000, 10, &out), -1);
    assert_int_equal(pt_per_message(3000, 10, 2000, 20, &out), -1);
    assert_int_equal(out, 7);
}

static void make(pt_corpus *c, uint64_t seed)
{
    pt_corpus_opts o;

    pt_corpus_defaults(&o);
    o.seed = seed;
    assert_int_equal(pt_corpus_make(&o, c), 0);
}

static void test_corpus_same_seed_same_bytes(void **state)
{
    pt_corpus a, b, other;

    (void)state;
    make(&a, 20261130);
    make(&b, 20261130);
    make(&other, 20261131);
    assert_int_equal(a.n, 1000);
    assert_int_equal(b.n, a.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_int_equal(a.v[i].kind, b.v[i].kind);
        assert_int_equal(a.v[i].len, b.v[i].len);
        assert_memory_equal(a.v[i].value, b.v[i].value, a.v[i].len);
        assert_int_equal(a.v[i].key_len, b.v[i].key_len);
        assert_true((a.v[i].key == NULL) == (b.v[i].key == NULL));
    }
    assert_true(pt_corpus_checksum(&a) == pt_corpus_checksum(&b));
    assert_true(pt_corpus_checksum(&a) != pt_corpus_checksum(&other));
    pt_corpus_free(&a);
    pt_corpus_free(&b);
    pt_corpus_free(&other);
}

/* The benchmark's mix: mostly new batches of 1-20 orders, some of each
 * other kind, invalid ones included. */
static void test_corpus_is_the_benchmarks_mix(void **state)
{
    pt_corpus c;

    (void)state;
    make(&c, 20261130);
    assert_true(c.kinds[KIT_NEW] > c.n * 3 / 4);
    for (int k = KIT_RETRY; k < KIT_KIND_COUNT; k++)
        assert_true(c.kinds[k] > 0);
    assert_true(c.kinds[KIT_INVALID] >= 30 && c.kinds[KIT_INVALID] <= 80);
    for (size_t i = 0; i < c.n; i++)
        if (c.v[i].kind == KIT_NEW)
            assert_true(c.v[i].n_orders >= 1 && c.v[i].n_orders <= 20);
    assert_true(c.orders > 3 * c.n && c.orders < 8 * c.n);
    pt_corpus_free(&c);
}

static void test_path_repeats_its_outputs(void **state)
{
    pt_corpus c, other;
    pt_stats a, b, twice, o;

    (void)state;
    make(&c, 20261130);
    make(&other, 20261131);
    assert_int_equal(pt_run(&c, 1, &a), 0);
    assert_int_equal(pt_run(&c, 1, &b), 0);
    assert_int_equal(pt_run(&c, 2, &twice), 0);
    assert_int_equal(pt_run(&other, 1, &o), 0);
    assert_memory_equal(&a, &b, sizeof(a));
    /* Only the first round feeds the checksum; every round does the work. */
    assert_true(twice.checksum == a.checksum);
    assert_int_equal(twice.messages, 2 * a.messages);
    assert_int_equal(twice.bodies_built, 2 * a.bodies_built);
    assert_int_equal(twice.headers, 2 * a.headers);
    /* The checksum covers the outputs: another corpus gives another. */
    assert_true(o.checksum != a.checksum);
    pt_corpus_free(&c);
    pt_corpus_free(&other);
}

/* The worker's validation agrees with the generator on every message, and
 * each kind gets what the worker would build for it. */
static void test_path_decides_every_kind(void **state)
{
    pt_corpus c;
    pt_stats st;
    size_t invalid_with_key = 0;

    (void)state;
    make(&c, 20261130);
    assert_int_equal(pt_run(&c, 1, &st), 0);
    assert_int_equal(st.messages, c.n);
    assert_int_equal(st.invalid, c.kinds[KIT_INVALID]);
    assert_int_equal(st.valid, c.n - c.kinds[KIT_INVALID]);
    /* A retry's body is the stored one: nothing built. */
    assert_int_equal(st.bodies_built, c.n - c.kinds[KIT_RETRY]);
    for (size_t i = 0; i < c.n; i++)
        invalid_with_key += c.v[i].kind == KIT_INVALID && c.v[i].key_len > 0;
    /* A result per keyed message, a dead letter per invalid one. */
    assert_int_equal(st.headers, st.valid + invalid_with_key + st.invalid);
    pt_corpus_free(&c);
}

/* With --traceparent every message carries one, the job continues it, and
 * the outputs (their traceparent headers among them) still repeat run
 * after run; they differ from the corpus without headers only by those
 * headers' checksum. */
static void test_traceparent_corpus(void **state)
{
    pt_corpus_opts o;
    pt_corpus plain, traced;
    pt_stats a, b, p;

    (void)state;
    pt_corpus_defaults(&o);
    assert_int_equal(pt_corpus_make(&o, &plain), 0);
    o.traceparent = 1;
    assert_int_equal(pt_corpus_make(&o, &traced), 0);
    for (size_t i = 0; i < traced.n; i++) {
        const void *v = NULL;
        size_t n = 0;

        assert_null(plain.v[i].headers);
        assert_non_null(traced.v[i].headers);
        assert_int_equal(rd_kafka_header_get_last(traced.v[i].headers, "traceparent", &v, &n), 0);
        assert_int_equal(n, 55);
        assert_int_equal(traced.v[i].len, plain.v[i].len);
    }
    assert_true(pt_corpus_checksum(&traced) != pt_corpus_checksum(&plain));
    assert_int_equal(pt_run(&traced, 1, &a), 0);
    assert_int_equal(pt_run(&traced, 1, &b), 0);
    assert_int_equal(pt_run(&plain, 1, &p), 0);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_true(a.checksum != p.checksum);
    assert_int_equal(a.headers, p.headers);
    assert_int_equal(a.bodies_built, p.bodies_built);
    pt_corpus_free(&plain);
    pt_corpus_free(&traced);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_message_cancels_the_start),
        cmocka_unit_test(test_per_message_refuses_swapped_runs),
        cmocka_unit_test(test_corpus_same_seed_same_bytes),
        cmocka_unit_test(test_corpus_is_the_benchmarks_mix),
        cmocka_unit_test(test_path_repeats_its_outputs),
        cmocka_unit_test(test_path_decides_every_kind),
        cmocka_unit_test(test_traceparent_corpus),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
