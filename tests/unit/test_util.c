/* Checked integer parsing, buffers, backoff, growing arrays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ow/error.h"
#include "ow/util.h"

static void test_parse_int64(void **state)
{
    static const struct {
        const char *s;
        int ok;
        int64_t v;
    } cases[] = {{"0", 1, 0},
                 {"-12", 1, -12},
                 {"9223372036854775807", 1, INT64_MAX},
                 {"-9223372036854775808", 1, INT64_MIN},
                 {"9223372036854775808", 0, 0},
                 {"", 0, 0},
                 {"+1", 0, 0},
                 {" 1", 0, 0},
                 {"1 ", 0, 0},
                 {"1x", 0, 0},
                 {"0x10", 0, 0}};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t v = 0;
        int rc = ow_parse_int64(cases[i].s, &v);

        if (cases[i].ok) {
            assert_int_equal(rc, OW_OK);
            assert_int_equal(v, cases[i].v);
        } else {
            assert_int_equal(rc, OW_EINVAL);
        }
    }
    assert_int_equal(ow_parse_int64(NULL, NULL), OW_EINVAL);
}

/* Blanks go on both sides, nothing else does, and a blank-only text is
 * empty. */
static void test_trim_blanks(void **state)
{
    const char *s = " \ta b\t ", *e = "\t \t", *x = "x\n";

    (void)state;
    assert_int_equal(ow_trim_blanks(&s, strlen(s)), 3);
    assert_memory_equal(s, "a b", 3);
    assert_int_equal(ow_trim_blanks(&e, strlen(e)), 0);
    assert_int_equal(ow_trim_blanks(&x, strlen(x)), 2);
    assert_int_equal(ow_trim_blanks(&x, 1), 1);
    assert_int_equal(x[0], 'x');
}

static void test_buf(void **state)
{
    ow_buf b;
    char *s;
    size_t len;

    (void)state;
    ow_buf_init(&b);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ow_buf_appendf(&b, "%d,", i), OW_OK);
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_int_equal(b.data[b.len], '\0');
    s = ow_buf_steal(&b, &len);
    assert_null(b.data);
    assert_int_equal(strlen(s), len);
    free(s);
    ow_buf_cleanup(&b);
}

static void test_backoff_bounds(void **state)
{
    uint64_t seed = 99;

    (void)state;
    for (unsigned attempt = 0; attempt < 20; attempt++) {
        for (int i = 0; i < 100; i++) {
            int64_t d = ow_backoff_ms(100, 5000, attempt, &seed);
            int64_t cap = attempt < 6 ? 100LL << attempt : 5000;

            if (cap > 5000)
                cap = 5000;
            assert_true(d >= cap / 2);
            assert_true(d <= cap);
        }
    }
    assert_int_equal(ow_backoff_ms(0, 100, 3, &seed), 0);
}

static void test_hash_stable(void **state)
{
    (void)state;
    /* FNV-1a test vectors. */
    assert_true(ow_hash64("", 0) == 14695981039346656037ULL);
    assert_true(ow_hash64("a", 1) == 0xaf63dc4c8601ec8cULL);
}

static void test_duration_parse(void **state)
{
    static const struct {
        const char *s;
        int64_t seconds; /* 0: must be rejected */
        const char *why; /* a word of the reason when rejected */
    } cases[] = {
        {"30d", 30 * 86400, NULL},
        {"12h", 12 * 3600, NULL},
        {"90m", 90 * 60, NULL},
        {"3600s", 3600, NULL},
        {"1s", 1, NULL},
        {"007m", 7 * 60, NULL},
        {"36500d", OW_DURATION_MAX_S, NULL},
        {"3153600000s", OW_DURATION_MAX_S, NULL},
        {"36501d", 0, "too long"},
        {"3153600001s", 0, "too long"},
        {"99999999999999999999999d", 0, "too long"},
        {"0d", 0, "greater than zero"},
        {"0s", 0, "greater than zero"},
        {"000h", 0, "greater than zero"},
        {"-5d", 0, "number"},
        {"+5d", 0, "number"},
        {"", 0, "number"},
        {"d", 0, "number"},
        {" 5d", 0, "number"},
        {"30", 0, "needs a unit"},
        {"30w", 0, "unknown unit"},
        {"30D", 0, "unknown unit"},
        {"30dd", 0, "unknown unit"},
        {"30d ", 0, "unknown unit"},
        {"30 d", 0, "unknown unit"},
        {"1.5h", 0, "unknown unit"},
        {"1h30m", 0, "unknown unit"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t v = -1;
        const char *why = NULL;
        int rc = ow_duration_parse(cases[i].s, &v, &why);

        if (cases[i].seconds > 0) {
            if (rc != OW_OK || v != cases[i].seconds)
                fail_msg("\"%s\": rc %d, %lld seconds", cases[i].s, rc, (long long)v);
        } else {
            if (rc != OW_EINVAL || why == NULL || strstr(why, cases[i].why) == NULL)
                fail_msg("\"%s\": rc %d, reason %s", cases[i].s, rc, why ? why : "(none)");
            assert_int_equal(v, -1); /* untouched */
        }
    }
    assert_int_equal(ow_duration_parse(NULL, NULL, NULL), OW_EINVAL);
}

/* Growing keeps what the array held, doubles (from 16 when empty), leaves
 * an array that holds enough as it is, and ow_grow_zeroed clears what it
 * adds: here over bytes the allocator keeps, so that they are not zero
 * by chance. */
static void test_grow(void **state)
{
    int *a = malloc(16 * sizeof(*a));
    int *e = NULL;
    size_t cap = 4, ecap = 0;

    (void)state;
    assert_non_null(a);
    memset(a, 0xab, 16 * sizeof(*a));
    for (int i = 0; i < 4; i++)
        a[i] = i + 1;
    assert_int_equal(ow_grow_zeroed((void **)&a, &cap, 4, sizeof(*a)), OW_OK);
    assert_int_equal(cap, 4);
    assert_int_equal(ow_grow_zeroed((void **)&a, &cap, 5, sizeof(*a)), OW_OK);
    assert_int_equal(cap, 8);
    for (int i = 0; i < 4; i++)
        assert_int_equal(a[i], i + 1);
    for (size_t i = 4; i < cap; i++)
        assert_int_equal(a[i], 0);
    assert_int_equal(ow_grow((void **)&a, &cap, SIZE_MAX / 2, sizeof(*a)), OW_ENOMEM);
    assert_int_equal(cap, 8);
    assert_int_equal(a[3], 4);
    assert_int_equal(ow_grow_zeroed((void **)&e, &ecap, 3, sizeof(*e)), OW_OK);
    assert_int_equal(ecap, 16);
    for (size_t i = 0; i < ecap; i++)
        assert_int_equal(e[i], 0);
    free(a);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_int64), cmocka_unit_test(test_trim_blanks),
        cmocka_unit_test(test_buf),         cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_hash_stable), cmocka_unit_test(test_duration_parse),
        cmocka_unit_test(test_grow),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
