/* W3C Trace Context (ow/trace.h): a table of traceparent and tracestate
 * values built from the rules of Trace Context level 1 (the W3C
 * Recommendation's ABNF, its versioning rules, and the cases of the W3C
 * test suite), each valid or not; the traceparent the worker writes; new
 * ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ow/error.h"
#include "ow/trace.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define PID "00f067aa0ba902b7"

typedef struct {
    const char *name;
    const char *value;
    int valid;
    unsigned flags; /* when valid */
} parent_case;

static const parent_case parents[] = {
    /* version 00: exactly version-trace-parent-flags in lower-case hex */
    {"spec example, sampled", "00-" TID "-" PID "-01", 1, 0x01},
    {"not sampled", "00-" TID "-" PID "-00", 1, 0x00},
    {"every flag (bits beyond sampled are read, not kept)", "00-" TID "-" PID "-ff", 1, 0xff},
    {"random-trace-id flag (level 2)", "00-" TID "-" PID "-03", 1, 0x03},
    {"ids with one non-zero byte", "00-00000000000000000000000000000001-0000000000000001-01", 1,
     0x01},
    /* Optional whitespace around the value, as HTTP has it */
    {"leading space", " 00-" TID "-" PID "-01", 1, 0x01},
    {"leading tab", "\t00-" TID "-" PID "-01", 1, 0x01},
    {"trailing space", "00-" TID "-" PID "-01 ", 1, 0x01},
    {"trailing tab", "00-" TID "-" PID "-01\t", 1, 0x01},
    {"both", "\t 00-" TID "-" PID "-01 \t", 1, 0x01},
    /* A higher version: its first 55 characters in version 00's format */
    {"version cc, 55 characters", "cc-" TID "-" PID "-01", 1, 0x01},
    {"version cc, more fields", "cc-" TID "-" PID "-01-what-the-future-will-be-like", 1, 0x01},
    {"version 01, a dash after the flags", "01-" TID "-" PID "-01-", 1, 0x01},
    {"version fe", "fe-" TID "-" PID "-00", 1, 0x00},
    /* Lower-case hex only (HEXDIGLC) */
    {"upper-case trace id", "00-4BF92F3577B34DA6A3CE929D0E0E4736-" PID "-01", 0, 0},
    {"one upper-case digit in the trace id", "00-4bf92f3577b34da6a3ce929d0e0e473A-" PID "-01", 0,
     0},
    {"upper-case parent id", "00-" TID "-00F067AA0BA902B7-01", 0, 0},
    {"upper-case flags", "00-" TID "-" PID "-0A", 0, 0},
    {"upper-case version", "0A-" TID "-" PID "-01", 0, 0},
    {"non-hex letter in the trace id", "00-4bf92f3577b34da6a3ce929d0e0e473g-" PID "-01", 0, 0},
    /* All-zero ids */
    {"zero trace id", "00-00000000000000000000000000000000-" PID "-01", 0, 0},
    {"zero parent id", "00-" TID "-0000000000000000-01", 0, 0},
    /* Versions */
    {"version ff", "ff-" TID "-" PID "-01", 0, 0},
    {"version 00 with a trailing character", "00-" TID "-" PID "-01.", 0, 0},
    {"version 00 with more fields", "00-" TID "-" PID "-01-what-the-future-will-be-like", 0, 0},
    {"version cc, no dash after the flags", "cc-" TID "-" PID "-01.what-the-future-will-be-like", 0,
     0},
    {"version cc, shorter than 55", "cc-" TID "-" PID "-1", 0, 0},
    {"version with a dot", ".0-" TID "-" PID "-01", 0, 0},
    {"version of three digits", "000-" TID "-" PID "-01", 0, 0},
    {"version of one digit", "0-" TID "-" PID "-01", 0, 0},
    /* Field lengths and separators */
    {"trace id of 33 digits", "00-" TID "0-" PID "-01", 0, 0},
    {"trace id of 31 digits", "00-4bf92f3577b34da6a3ce929d0e0e473-" PID "-01", 0, 0},
    {"parent id of 17 digits", "00-" TID "-" PID "0-01", 0, 0},
    {"parent id of 15 digits", "00-" TID "-00f067aa0ba902b-01", 0, 0},
    {"flags of 3 digits", "00-" TID "-" PID "-001", 0, 0},
    {"flags of 1 digit", "00-" TID "-" PID "-1", 0, 0},
    {"flags with a dot", "00-" TID "-" PID "-.0", 0, 0},
    {"underscore for a dash", "00_" TID "-" PID "-01", 0, 0},
    {"colon for the last dash", "00-" TID "-" PID ":01", 0, 0},
    {"space inside", "00-4bf92f3577b34da6 3ce929d0e0e4736-" PID "-01", 0, 0},
    {"trailing newline (not whitespace HTTP strips)", "00-" TID "-" PID "-01\n", 0, 0},
    {"empty", "", 0, 0},
    {"only blanks", " \t ", 0, 0},
    {"two traceparents joined by a comma", "00-" TID "-" PID "-01,00-" TID "-" PID "-01", 0, 0},
};

static void unhex(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;

        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
}

static void test_traceparent_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parents) / sizeof(parents[0]); i++) {
        const parent_case *c = &parents[i];
        ow_traceparent tp;
        int rc = ow_traceparent_parse(c->value, strlen(c->value), &tp);

        if ((rc == OW_OK) != c->valid)
            fail_msg("traceparent \"%s\" (%s): %s, want %s", c->value, c->name,
                     rc == OW_OK ? "accepted" : "refused", c->valid ? "accepted" : "refused");
        if (c->valid) {
            const char *v = c->value + strspn(c->value, " \t");
            unsigned char want[OW_TRACE_ID_LEN];

            unhex(v + 3, want, OW_TRACE_ID_LEN);
            assert_memory_equal(tp.trace_id, want, OW_TRACE_ID_LEN);
            unhex(v + 36, want, OW_SPAN_ID_LEN);
            assert_memory_equal(tp.parent_id, want, OW_SPAN_ID_LEN);
            assert_int_equal(tp.flags, c->flags);
        }
    }
    /* A value that is not NUL-terminated is read to its length only. */
    {
        char buf[80];
        ow_traceparent tp;

        memcpy(buf, "00-" TID "-" PID "-01-junk", 60);
        assert_int_equal(ow_traceparent_parse(buf, OW_TRACEPARENT_LEN, &tp), OW_OK);
        assert_int_equal(ow_traceparent_parse(NULL, 0, &tp), OW_EINVAL);
    }
}

typedef struct {
    const char *name;
    const char *value; /* NULL: built by the test (long values) */
    int valid;
    size_t members; /* when valid */
} state_case;

static const state_case states[] = {
    /* Lists, empty members and whitespace */
    {"empty header", "", 1, 0},
    {"spec example", "rojo=00f067aa0ba902b7", 1, 1},
    {"two vendors", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 1, 2},
    {"blanks around members", "foo=1 \t , \t bar=2, \t baz=3", 1, 3},
    {"tabs around members", "foo=1\t \t,\t \tbar=2,\t \tbaz=3", 1, 3},
    {"leading space", " foo=1", 1, 1},
    {"leading tab", "\tfoo=1", 1, 1},
    {"trailing space", "foo=1 ", 1, 1},
    {"trailing tab", "foo=1\t", 1, 1},
    {"empty member", "foo=1,,bar=2", 1, 2},
    {"whitespace-only member", "foo=1, \t ,bar=2", 1, 2},
    {"trailing comma", "foo=1,", 1, 1},
    {"only commas and blanks", " , ,", 1, 0},
    /* Keys */
    {"every simple-key character", "abcdefghijklmnopqrstuvwxyz0123456789_-*/=1", 1, 1},
    {"multi-tenant key", "fw529a3039@dt=1", 1, 1},
    {"tenant starting with a digit", "0tenant@sys=1", 1, 1},
    {"every multi-tenant character", "abcdefghijklmnopqrstuvwxyz0123456789_-*/@a-z0-9_-*/=1", 1, 1},
    {"space before '='", "foo =1", 0, 0},
    {"upper-case key", "FOO=1", 0, 0},
    {"dot in key", "foo.bar=1", 0, 0},
    {"simple key starting with a digit", "1foo=1", 0, 0},
    {"simple key starting with '_'", "_foo=1", 0, 0},
    {"empty system id", "foo@=1,bar=2", 0, 0},
    {"empty tenant id", "@foo=1,bar=2", 0, 0},
    {"two '@' in a row", "foo@@bar=1,bar=2", 0, 0},
    {"two '@'", "foo@bar@baz=1,bar=2", 0, 0},
    {"system id starting with a digit", "t@0v=1", 0, 0},
    {"empty key", "=1", 0, 0},
    {"no '='", "foo", 0, 0},
    /* Values */
    {"value with a leading space", "foo= 1", 1, 1},
    {"value with inner spaces", "foo=a b  c", 1, 1},
    {"every value character",
     "foo= !\"#$%&'()*+-./0123456789:;<>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstu"
     "vwxyz{|}~",
     1, 1},
    {"'=' in the value", "foo=bar=baz", 0, 0},
    {"empty value", "foo=,bar=3", 0, 0},
    {"value of spaces", "foo=   ", 0, 0},
    {"tab in the value", "foo=a\tb", 0, 0},
    {"DEL in the value", "foo=a\x7f", 0, 0},
    {"non-ASCII in the value", "foo=caf\xc3\xa9", 0, 0},
    {"newline in the value", "foo=a\nb", 0, 0},
    /* One entry per key */
    {"duplicate key, same value", "foo=1,foo=1", 0, 0},
    {"duplicate key, other value", "foo=1,foo=2", 0, 0},
    {"duplicate key, apart", "foo=1,bar=2,foo=3", 0, 0},
    {"duplicate multi-tenant key", "a@b=1,a@b=2", 0, 0},
    {"a key and a tenant of it", "a=1,a@b=2", 1, 2},
    /* Lengths and counts, built below */
    {"key of 256", NULL, 1, 2},
    {"key of 257", NULL, 0, 0},
    {"tenant of 241, system of 14", NULL, 1, 2},
    {"tenant of 242", NULL, 0, 0},
    {"system of 15", NULL, 0, 0},
    {"value of 256", NULL, 1, 1},
    {"value of 257", NULL, 0, 0},
    {"32 members", NULL, 1, 32},
    {"33 members", NULL, 0, 0},
    {"32 members and empty ones", NULL, 1, 32},
    {"512 bytes", NULL, 1, 2},
    {"513 bytes", NULL, 0, 0},
};

static void repeat(char *out, char c, size_t n)
{
    memset(out, c, n);
    out[n] = '\0';
}

/* The long values of the table, built from their names. */
static const char *build(const char *name, char *buf, size_t size)
{
    char a[600], b[600];

    if (strncmp(name, "key of ", 7) == 0) {
        repeat(a, 'z', (size_t)strtoul(name + 7, NULL, 10));
        snprintf(buf, size, "foo=1,%s=1", a);
    } else if (strcmp(name, "tenant of 241, system of 14") == 0) {
        repeat(a, 't', 241);
        repeat(b, 'v', 14);
        snprintf(buf, size, "foo=1,%s@%s=1", a, b);
    } else if (strcmp(name, "tenant of 242") == 0) {
        repeat(a, 't', 242);
        snprintf(buf, size, "foo=1,%s@v=1", a);
    } else if (strcmp(name, "system of 15") == 0) {
        repeat(b, 'v', 15);
        snprintf(buf, size, "foo=1,t@%s=1", b);
    } else if (strncmp(name, "value of ", 9) == 0) {
        repeat(a, 'x', (size_t)strtoul(name + 9, NULL, 10));
        snprintf(buf, size, "foo=%s", a);
    } else if (strstr(name, "members") != NULL) {
        size_t n = (size_t)strtoul(name, NULL, 10), at = 0;

        for (size_t i = 1; i <= n; i++)
            at += (size_t)snprintf(buf + at, size - at, "%sbar%02zu=%02zu%s", i > 1 ? "," : "", i,
                                   i, strstr(name, "empty") != NULL ? ", ," : "");
    } else if (strstr(name, "bytes") != NULL) {
        /* "foo=1," and one member filling the rest. */
        size_t total = (size_t)strtoul(name, NULL, 10);

        repeat(a, 'y', total - 6 - 1 - 256);
        repeat(b, 'x', 256);
        snprintf(buf, size, "foo=1,%s=%s", a, b);
        assert_int_equal(strlen(buf), total);
    } else {
        fail_msg("no builder for \"%s\"", name);
    }
    return buf;
}

static void test_tracestate_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        const state_case *c = &states[i];
        char buf[2048];
        const char *v = c->value != NULL ? c->value : build(c->name, buf, sizeof(buf));
        size_t members = 99;
        int rc = ow_tracestate_check(v, strlen(v), &members);

        if ((rc == OW_OK) != c->valid)
            fail_msg("tracestate (%s, %zu bytes) \"%.80s\": %s, want %s", c->name, strlen(v), v,
                     rc == OW_OK ? "accepted" : "refused", c->valid ? "accepted" : "refused");
        if (c->valid && members != c->members)
            fail_msg("tracestate (%s): %zu members, want %zu", c->name, members, c->members);
        if (!c->valid)
            assert_int_equal(members, 0);
    }
}

static void test_format(void **state)
{
    unsigned char trace_id[OW_TRACE_ID_LEN], span_id[OW_SPAN_ID_LEN];
    char out[OW_TRACEPARENT_LEN + 1];
    ow_traceparent tp;

    (void)state;
    unhex(TID, trace_id, sizeof(trace_id));
    unhex("b7ad6b7169203331", span_id, sizeof(span_id));
    ow_traceparent_format(trace_id, span_id, 0x01, out);
    assert_string_equal(out, "00-" TID "-b7ad6b7169203331-01");
    ow_traceparent_format(trace_id, span_id, 0x00, out);
    assert_string_equal(out, "00-" TID "-b7ad6b7169203331-00");
    /* What the worker writes, it reads back. */
    assert_int_equal(ow_traceparent_parse(out, strlen(out), &tp), OW_OK);
    assert_memory_equal(tp.trace_id, trace_id, OW_TRACE_ID_LEN);
    assert_memory_equal(tp.parent_id, span_id, OW_SPAN_ID_LEN);
}

/* New ids: from a fixed seed the same sequence, never all zeros, and no
 * two alike in many draws; a seed is never zero. */
static void test_new_ids(void **state)
{
    enum { N = 4096 };
    static unsigned char spans[N][OW_SPAN_ID_LEN];
    unsigned char a[OW_TRACE_ID_LEN], b[OW_TRACE_ID_LEN];
    uint64_t r1 = 42, r2 = 42;

    (void)state;
    ow_trace_new_id(&r1, a, sizeof(a));
    ow_trace_new_id(&r2, b, sizeof(b));
    assert_memory_equal(a, b, sizeof(a));
    /* Both halves of a trace id are drawn, not one copied. */
    assert_memory_not_equal(a, a + 8, 8);
    for (size_t i = 0; i < N; i++) {
        static const unsigned char zero[OW_SPAN_ID_LEN];

        ow_trace_new_id(&r1, spans[i], OW_SPAN_ID_LEN);
        assert_memory_not_equal(spans[i], zero, OW_SPAN_ID_LEN);
        for (size_t k = 0; k < i; k++)
            assert_memory_not_equal(spans[i], spans[k], OW_SPAN_ID_LEN);
    }
    assert_true(ow_trace_seed() != 0);
    assert_true(ow_trace_seed() != ow_trace_seed());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traceparent_table),
        cmocka_unit_test(test_tracestate_table),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_new_ids),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
