/*
 * The hostile input table (tests/hostile/hostile_cases.c) through the same
 * calls the worker makes for a consumed message (src/pipeline/job.c): the key check,
 * the request parse, and for a rejected message the 400 body. One cmocka
 * test per row. Values are copied into buffers of exactly their length, so
 * a read past the end shows up under AddressSanitizer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "hostile_cases.h"
#include "ow/error.h"
#include "ow/request.h"
#include "ow/response.h"

static const ow_request_limits limits = {HOSTILE_MAX_BYTES, HOSTILE_MAX_ORDERS};

/* The outcome of one message, as src/pipeline/job.c computes it. */
typedef struct {
    int key_ok;
    int rc;
    ow_request req;
    ow_field_errors errs;
} verdict;

static void judge(const hostile_case *c, verdict *v)
{
    size_t len = 0;
    unsigned char *value = hostile_value(c, &len);
    char *key = NULL;

    assert_non_null(value);
    if (c->has_key) {
        key = (char *)hostile_key(c);
        assert_non_null(key);
    }
    ow_field_errors_init(&v->errs);
    v->key_ok = ow_request_check_key(key, c->key_len, &v->errs) == OW_OK;
    v->rc = ow_request_parse(value, len, &limits, &v->req, &v->errs);
    free(key);
    free(value);
}

static void check_valid(const hostile_case *c, verdict *v)
{
    if (!v->key_ok || v->rc != OW_OK)
        fail_msg("%s: expected valid, got %s: %s", c->name, v->errs.items[0].field,
                 v->errs.items[0].message);
    assert_int_equal(v->errs.count, 0);
    assert_true(v->req.n_orders > 0);
}

/* The 400 body must be JSON naming the field, and carry the key only when
 * the key itself was valid (src/pipeline/job.c passes NULL otherwise). */
static void check_body(const hostile_case *c, verdict *v)
{
    ow_buf body;
    json_error_t jerr;
    json_t *j;
    const char *field;

    ow_buf_init(&body);
    assert_int_equal(ow_response_invalid(v->key_ok ? c->key : NULL, c->key_len,
                                         v->req.user_id > 0, v->req.user_id, &v->errs, &body),
                     OW_OK);
    j = json_loadb(body.data, body.len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL)
        fail_msg("%s: 400 body is not JSON (%s): %s", c->name, jerr.text, body.data);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 400);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "INVALID_REQUEST");
    field = json_string_value(json_object_get(json_array_get(json_object_get(j, "errors"), 0),
                                              "field"));
    assert_non_null(field);
    assert_string_equal(field, c->field);
    assert_int_equal(json_array_size(json_object_get(j, "errors")), v->errs.count);
    if (v->key_ok) {
        json_t *k = json_object_get(j, "idempotency_key");

        assert_int_equal(json_string_length(k), c->key_len);
        assert_memory_equal(json_string_value(k), c->key, c->key_len);
    } else {
        assert_null(json_object_get(j, "idempotency_key"));
    }
    json_decref(j);
    ow_buf_cleanup(&body);
}

static void check_rejected(const hostile_case *c, verdict *v)
{
    const ow_field_error *first = &v->errs.items[0];

    if (v->key_ok && v->rc == OW_OK)
        fail_msg("%s: accepted, expected an error on %s", c->name, c->field);
    /* The value itself may be fine when only the key is wrong. */
    assert_true(v->rc == OW_OK || v->rc == OW_EINVAL);
    assert_true(v->errs.count > 0);
    if (strcmp(first->field, c->field) != 0 ||
        (c->why != NULL && strstr(first->message, c->why) == NULL))
        fail_msg("%s: expected %s: ...%s..., got %s: %s", c->name, c->field,
                 c->why ? c->why : "", first->field, first->message);
    check_body(c, v);
}

static void test_row(void **state)
{
    const hostile_case *c = *state;
    verdict v;

    judge(c, &v);
    if (c->field == NULL)
        check_valid(c, &v);
    else
        check_rejected(c, &v);
    ow_request_cleanup(&v.req);
}

static int same_message(const hostile_case *a, const hostile_case *b)
{
    size_t la = 0, lb = 0;
    unsigned char *va = hostile_value(a, &la);
    unsigned char *vb = hostile_value(b, &lb);
    int same = a->has_key == b->has_key && a->key_len == b->key_len &&
               (a->key_len == 0 || memcmp(a->key, b->key, a->key_len) == 0) && la == lb &&
               memcmp(va, vb, la) == 0;

    free(va);
    free(vb);
    return same;
}

/* The end-to-end test tells messages apart by key and value and expects one
 * created request: the table must allow both. */
static void test_table_shape(void **state)
{
    size_t valid = 0;

    (void)state;
    assert_true(hostile_count >= 45);
    for (size_t i = 0; i < hostile_count; i++) {
        valid += hostile_cases[i].field == NULL;
        for (size_t k = 0; k < i; k++) {
            if (strcmp(hostile_cases[i].name, hostile_cases[k].name) == 0 ||
                same_message(&hostile_cases[i], &hostile_cases[k]))
                fail_msg("rows %zu and %zu are not distinct", k, i);
        }
    }
    assert_int_equal(valid, 1);
}

/* The other side of the "too-large" row: exactly max_bytes is accepted. */
static void test_exactly_max_bytes_accepted(void **state)
{
    const hostile_case at_limit = {"at-limit", 1, "k", 1, HOSTILE_PADDED, HOSTILE_MAX_BYTES,
                                   NULL, 0, NULL, NULL};
    verdict v;

    (void)state;
    judge(&at_limit, &v);
    check_valid(&at_limit, &v);
    ow_request_cleanup(&v.req);
}

int main(void)
{
    const struct CMUnitTest shape[] = {
        cmocka_unit_test(test_table_shape),
        cmocka_unit_test(test_exactly_max_bytes_accepted),
    };
    struct CMUnitTest *rows = calloc(hostile_count, sizeof(*rows));
    int failed;

    if (rows == NULL)
        return 1;
    for (size_t i = 0; i < hostile_count; i++) {
        rows[i].name = hostile_cases[i].name;
        rows[i].test_func = test_row;
        rows[i].initial_state = (void *)(uintptr_t)&hostile_cases[i];
    }
    failed = _cmocka_run_group_tests("hostile_table", rows, hostile_count, NULL, NULL);
    failed += cmocka_run_group_tests_name("hostile_shape", shape, NULL, NULL);
    free(rows);
    return failed != 0;
}
