/* The small hash table: values found by hash, two keys under one hash,
 * the hashes the table reserves for itself, removal and reuse, growth,
 * a long random run against a plain array, and a steady churn of
 * removals and puts that must not rebuild the table at every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ow/error.h"
#include "ow/htab.h"
#include "ow/util.h"

/* The values stored under h, as a bit set of values below 64. */
static uint64_t values_of(const ow_htab *t, uint64_t h)
{
    ow_htab_walk w = OW_HTAB_START;
    uint64_t seen = 0;
    uintptr_t v;

    while (ow_htab_next(t, h, &w, &v)) {
        assert_true(v < 64);
        seen |= UINT64_C(1) << v;
    }
    return seen;
}

static void test_put_find_remove(void **state)
{
    ow_htab t;

    (void)state;
    assert_int_equal(ow_htab_init(&t, 0), OW_OK);
    assert_false(ow_htab_has(&t, 42)); /* no memory yet */
    assert_int_equal(ow_htab_put(&t, 42, 1), OW_OK);
    assert_int_equal(ow_htab_put(&t, 42, 2), OW_OK); /* a second key, one hash */
    assert_int_equal(ow_htab_put(&t, 43, 3), OW_OK);
    assert_int_equal(values_of(&t, 42), (1u << 1) | (1u << 2));
    assert_int_equal(values_of(&t, 43), 1u << 3);
    assert_int_equal(values_of(&t, 44), 0);
    assert_int_equal(ow_htab_remove(&t, 42, 1), 1);
    assert_int_equal(ow_htab_remove(&t, 42, 1), 0);
    assert_int_equal(values_of(&t, 42), 1u << 2);
    assert_int_equal(t.used, 2);
    ow_htab_clear(&t);
    assert_int_equal(values_of(&t, 43), 0);
    assert_int_equal(t.used, 0);
    ow_htab_free(&t);
}

/* 0 and 1 are the table's own marks; they are ordinary hashes outside. */
static void test_reserved_hashes(void **state)
{
    ow_htab t;

    (void)state;
    assert_int_equal(ow_htab_init(&t, 4), OW_OK);
    assert_int_equal(ow_htab_put(&t, 0, 5), OW_OK);
    assert_int_equal(ow_htab_put(&t, 1, 6), OW_OK);
    assert_int_equal(ow_htab_put(&t, UINT64_MAX, 7), OW_OK);
    assert_int_equal(values_of(&t, 0), 1u << 5);
    assert_int_equal(values_of(&t, 1), 1u << 6);
    assert_int_equal(values_of(&t, UINT64_MAX), 1u << 7);
    assert_int_equal(ow_htab_remove(&t, 0, 5), 1);
    assert_int_equal(values_of(&t, 1), 1u << 6);
    ow_htab_free(&t);
}

#define RUN 20000
#define KEYS 700

/* Random puts and removes over a few hundred keys whose hashes collide
 * often (only 64 distinct hashes), checked against an array. */
static void test_random_against_array(void **state)
{
    static int present[KEYS];
    uint64_t seed = 20261205;
    ow_htab t;

    (void)state;
    assert_int_equal(ow_htab_init(&t, 0), OW_OK);
    for (int step = 0; step < RUN; step++) {
        size_t k = (size_t)(ow_rand64(&seed) % KEYS);
        uint64_t h = k % 64;

        if (present[k]) {
            assert_int_equal(ow_htab_remove(&t, h, k), 1);
            present[k] = 0;
        } else {
            assert_int_equal(ow_htab_put(&t, h, k), OW_OK);
            present[k] = 1;
        }
        if (step % 997 == 0) {
            size_t n = 0;

            for (size_t j = 0; j < KEYS; j++) {
                ow_htab_walk w = OW_HTAB_START;
                uintptr_t v;
                int found = 0;

                while (ow_htab_next(&t, j % 64, &w, &v))
                    found |= v == j;
                assert_int_equal(found, present[j]);
                n += (size_t)present[j];
            }
            assert_int_equal(t.used, n);
            assert_true(2 * (t.used + t.removed) <= t.cap);
        }
    }
    ow_htab_free(&t);
}

/* A table kept at one size by a removal and a put each step, at the size
 * where it is exactly half full: it is rebuilt (its arrays move) at most
 * once per used / 8 steps, not at every step. */
static void test_steady_churn_is_not_rebuilt_each_step(void **state)
{
    const uintptr_t n = 4096;
    const uintptr_t steps = 20000;
    ow_htab t;
    const uint64_t *arrays;
    unsigned rebuilds = 0;

    (void)state;
    assert_int_equal(ow_htab_init(&t, n), OW_OK);
    for (uintptr_t v = 0; v < n; v++)
        assert_int_equal(ow_htab_put(&t, ow_hash64(&v, sizeof(v)), v), OW_OK);
    arrays = t.hash;
    for (uintptr_t v = 0; v < steps; v++) {
        uintptr_t add = v + n;

        assert_int_equal(ow_htab_remove(&t, ow_hash64(&v, sizeof(v)), v), 1);
        assert_int_equal(ow_htab_put(&t, ow_hash64(&add, sizeof(add)), add), OW_OK);
        rebuilds += t.hash != arrays;
        arrays = t.hash;
    }
    assert_int_equal(t.used, n);
    assert_true(rebuilds <= 8 * steps / n + 1);
    for (uintptr_t v = steps; v < steps + n; v++)
        assert_true(ow_htab_has(&t, ow_hash64(&v, sizeof(v))));
    ow_htab_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_find_remove),
        cmocka_unit_test(test_reserved_hashes),
        cmocka_unit_test(test_random_against_array),
        cmocka_unit_test(test_steady_churn_is_not_rebuilt_each_step),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
