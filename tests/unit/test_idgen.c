/* Time-ordered ids and order numbers. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ow/idgen.h"

static int64_t fake_now = OW_IDGEN_EPOCH_MS + 1000;

static int64_t fake_clock(void)
{
    return fake_now;
}

static void test_layout_and_order(void **state)
{
    ow_idgen g;
    int64_t a, b;

    (void)state;
    ow_idgen_init(&g, 5, fake_clock);
    a = ow_idgen_next(&g);
    b = ow_idgen_next(&g);
    assert_int_equal(a >> 22, 1000);        /* milliseconds since the epoch */
    assert_int_equal((a >> 12) & 1023, 5);  /* node */
    assert_int_equal(a & 4095, 0);          /* first sequence number */
    assert_int_equal(b, a + 1);
    /* A clock that steps back never repeats an id. */
    fake_now -= 500;
    assert_true(ow_idgen_next(&g) > b);
    fake_now += 500;
}

static void test_sequence_overflow_borrows_next_ms(void **state)
{
    ow_idgen g;
    int64_t prev = -1;

    (void)state;
    ow_idgen_init(&g, 1, fake_clock);
    for (int i = 0; i < 10000; i++) {
        int64_t id = ow_idgen_next(&g);

        assert_true(id > prev);
        assert_int_equal((id >> 12) & 1023, 1);
        prev = id;
    }
}

typedef struct {
    ow_idgen *g;
    int64_t *out;
    size_t n;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;

    for (size_t i = 0; i < a->n; i++)
        a->out[i] = ow_idgen_next(a->g);
    return NULL;
}

static int cmp64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return (a > b) - (a < b);
}

static void test_threads_never_share_an_id(void **state)
{
    enum { T = 4, N = 50000 };
    static int64_t ids[T * N];
    pthread_t th[T];
    worker_arg args[T];
    ow_idgen g;

    (void)state;
    ow_idgen_init(&g, 3, fake_clock);
    for (int t = 0; t < T; t++) {
        args[t] = (worker_arg){&g, ids + (size_t)t * N, N};
        assert_int_equal(pthread_create(&th[t], NULL, worker, &args[t]), 0);
    }
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    qsort(ids, T * N, sizeof(ids[0]), cmp64);
    for (size_t i = 1; i < T * N; i++)
        assert_true(ids[i] != ids[i - 1]);
}

static void test_order_no(void **state)
{
    char a[OW_ORDER_NO_LEN + 1], b[OW_ORDER_NO_LEN + 1];

    (void)state;
    ow_order_no_format(1, a);
    assert_string_equal(a, "OW-0000000000001");
    ow_order_no_format(INT64_MAX, a);
    assert_string_equal(a, "OW-7ZZZZZZZZZZZZ");
    ow_order_no_format(32, b);
    assert_string_equal(b, "OW-0000000000010");
    /* Distinct ids give distinct numbers, and the digits sort like the ids. */
    ow_order_no_format(123456789, a);
    ow_order_no_format(123456790, b);
    assert_true(strcmp(a, b) < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_and_order),
        cmocka_unit_test(test_sequence_overflow_borrows_next_ms),
        cmocka_unit_test(test_threads_never_share_an_id),
        cmocka_unit_test(test_order_no),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
