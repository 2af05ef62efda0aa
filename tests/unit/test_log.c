/* Log lines: JSON, level-gated, keys masked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ow/log.h"

static char captured[8192];

static void capture(void (*fn)(void))
{
    int fds[2];
    ssize_t n;

    assert_int_equal(pipe(fds), 0);
    ow_log_set_fd(fds[1]);
    fn();
    ow_log_set_fd(-1);
    close(fds[1]);
    n = read(fds[0], captured, sizeof(captured) - 1);
    captured[n > 0 ? n : 0] = '\0';
    close(fds[0]);
}

static int evaluated;

static int64_t side_effect(void)
{
    evaluated++;
    return 1;
}

static void log_some(void)
{
    ow_log_set_level(OW_LOG_INFO);
    OW_LOG(OW_LOG_DEBUG, "hidden", OW_F_INT("n", side_effect()));
    OW_LOG(OW_LOG_INFO, "shown", OW_F_INT("n", side_effect()), OW_F_STR("s", "a\"b"),
           OW_F_KEY("key", "idem_20260827_7f3a", 18));
}

static void test_json_line_and_gate(void **state)
{
    json_error_t jerr;
    json_t *j;

    (void)state;
    evaluated = 0;
    capture(log_some);
    /* The debug line's arguments were never evaluated. */
    assert_int_equal(evaluated, 1);
    assert_null(strstr(captured, "hidden"));
    j = json_loads(captured, JSON_DISABLE_EOF_CHECK, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(j, "event")), "shown");
    assert_string_equal(json_string_value(json_object_get(j, "s")), "a\"b");
    assert_non_null(json_string_value(json_object_get(j, "ts")));
    json_decref(j);
    /* The whole key never appears. */
    assert_null(strstr(captured, "idem_20260827_7f3a"));
    assert_non_null(strstr(captured, "\"key\":\"idem…#"));
}

static void test_mask(void **state)
{
    static const char *const keys[] = {"a", "ab", "abc", "abcdef", "idem_20260827_7f3a",
                                       "k:0123456789012345678901234567890123456789"};
    char m[OW_LOG_MASK_MAX], m2[OW_LOG_MASK_MAX];

    (void)state;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        size_t len = strlen(keys[i]);

        ow_log_mask_key(keys[i], len, m);
        /* Never the whole key, never more than 4 bytes of it, stable. */
        assert_true(len < 4 || strstr(m, keys[i]) == NULL);
        assert_true(strncmp(m, keys[i], len) != 0 || len == 0);
        assert_non_null(strstr(m, "#"));
        ow_log_mask_key(keys[i], len, m2);
        assert_string_equal(m, m2);
    }
    ow_log_mask_key("abcdefghijkl", 12, m);
    assert_int_equal(strncmp(m, "abcd…#", strlen("abcd…#")), 0);
    ow_log_mask_key("abcdefghijkm", 12, m2);
    assert_string_not_equal(m, m2);
}

static void log_optional(void)
{
    ow_log_set_level(OW_LOG_INFO);
    OW_LOG(OW_LOG_INFO, "first", OW_F_OPT("trace_id", NULL), OW_F_NUMSTR("part", 3),
           OW_F_OPT("after", "x"));
    OW_LOG(OW_LOG_INFO, "second", OW_F_OPT("trace_id", "4bf9"), OW_F_OPT("span_id", NULL),
           OW_F_JSON("ids", "[\"a\",\"b\"]"), OW_F_JSON("more", NULL));
}

/* A field without a value is left out, not written as null; a number that
 * is an identifier is written as a string; JSON text is written as it is. */
static void test_optional_and_numeric_strings(void **state)
{
    char *second;
    json_error_t jerr;
    json_t *j;

    (void)state;
    capture(log_optional);
    second = strchr(captured, '\n');
    assert_non_null(second);
    *second++ = '\0';
    j = json_loads(captured, 0, &jerr);
    assert_non_null(j);
    assert_null(json_object_get(j, "trace_id"));
    assert_string_equal(json_string_value(json_object_get(j, "part")), "3");
    assert_string_equal(json_string_value(json_object_get(j, "after")), "x");
    json_decref(j);
    assert_null(strstr(captured, "null"));
    j = json_loads(second, JSON_DISABLE_EOF_CHECK, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "trace_id")), "4bf9");
    assert_null(json_object_get(j, "span_id"));
    assert_int_equal(json_array_size(json_object_get(j, "ids")), 2);
    assert_null(json_object_get(j, "more"));
    assert_int_equal(json_object_size(j), 5); /* ts, level, event, trace_id, ids */
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_line_and_gate),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_optional_and_numeric_strings),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
