/* Result bodies: exact bytes, valid JSON, every field of contract section 4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "ow/error.h"
#include "ow/response.h"

static const char digest[] = "617ba20a7005cb1c5dcf1f0b4450af614802fb12ad0b2655813278e4d2996c08";

static ow_request two_orders(ow_order_item items[2])
{
    ow_request req = {42, 2, items};

    memset(items, 0, 2 * sizeof(*items));
    strcpy(items[0].external_order_no, "B20260827-001");
    items[0].ext_len = 13;
    items[0].amount_cents = 1990;
    items[0].quantity = 1;
    strcpy(items[1].external_order_no, "B\"2");
    items[1].ext_len = 3;
    items[1].amount_cents = 5;
    items[1].quantity = 2;
    return req;
}

static json_t *parse(const ow_buf *b)
{
    json_error_t jerr;
    json_t *j = json_loadb(b->data, b->len, JSON_REJECT_DUPLICATES, &jerr);

    if (j == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, b->data);
    return j;
}

static void test_created_exact_bytes(void **state)
{
    ow_order_item items[2];
    ow_request req = two_orders(items);
    ow_order_ref refs[2] = {{1, "OW-0000000000001", 0}, {77, "OW-000000000002D", 1}};
    ow_response_ctx ctx = {42, "idem_20260827_7f3a", 18, digest};
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    assert_int_equal(ow_response_created(&ctx, &req, refs, &b), OW_OK);
    assert_string_equal(
        b.data,
        "{\"status\":201,\"code\":\"CREATED\",\"user_id\":42,\"idempotency_key\":"
        "\"idem_20260827_7f3a\",\"request_digest\":\"617ba20a7005cb1c5dcf1f0b4450af614802fb12ad0b"
        "2655813278e4d2996c08\",\"orders\":[{\"index\":0,\"external_order_no\":\"B20260827-001\","
        "\"order_id\":1,\"order_no\":\"OW-0000000000001\",\"amount\":\"19.90\",\"existing\":false},"
        "{\"index\":1,\"external_order_no\":\"B\\\"2\",\"order_id\":77,\"order_no\":"
        "\"OW-000000000002D\",\"amount\":\"0.05\",\"existing\":true}]}");
    json_decref(parse(&b));
    ow_buf_cleanup(&b);
}

static void test_conflict_names_items_and_fields(void **state)
{
    ow_order_item items[2];
    ow_request req = two_orders(items);
    ow_conflict c[2] = {{0, OW_DIFF_AMOUNT}, {1, OW_DIFF_PRODUCT_ID | OW_DIFF_QUANTITY}};
    ow_response_ctx ctx = {42, "k1", 2, digest};
    json_t *j;
    json_t *conf;
    char *fields;
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    assert_int_equal(ow_response_order_conflict(&ctx, &req, c, 2, &b), OW_OK);
    j = parse(&b);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 409);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "ORDER_ALREADY_EXISTS");
    assert_non_null(json_string_value(json_object_get(j, "message")));
    assert_string_equal(json_string_value(json_object_get(j, "request_digest")), digest);
    conf = json_object_get(j, "conflicts");
    assert_int_equal(json_array_size(conf), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(conf, 1), "index")), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(conf, 1), "external_order_no")), "B\"2");
    fields = json_dumps(json_object_get(json_array_get(conf, 1), "fields"), JSON_COMPACT);
    assert_string_equal(fields, "[\"product_id\",\"quantity\"]");
    free(fields);
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(json_array_get(conf, 0), "fields"), 0)),
                        "amount");
    json_decref(j);
    ow_buf_cleanup(&b);
}

static void test_key_reused_and_in_progress(void **state)
{
    ow_response_ctx ctx = {9, "key:1", 5, digest};
    json_t *j;
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    assert_int_equal(ow_response_key_reused(&ctx, &b), OW_OK);
    j = parse(&b);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 409);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "IDEMPOTENCY_KEY_REUSED");
    assert_string_equal(json_string_value(json_object_get(j, "idempotency_key")), "key:1");
    assert_int_equal(json_integer_value(json_object_get(j, "user_id")), 9);
    json_decref(j);

    ow_buf_reset(&b);
    assert_int_equal(ow_response_in_progress(&ctx, 5000, &b), OW_OK);
    j = parse(&b);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "REQUEST_IN_PROGRESS");
    assert_int_equal(json_integer_value(json_object_get(j, "retry_after_ms")), 5000);
    json_decref(j);
    ow_buf_cleanup(&b);
}

static void test_invalid(void **state)
{
    ow_field_errors errs;
    json_t *j;
    ow_buf b;

    (void)state;
    ow_field_errors_init(&errs);
    ow_field_errors_add(&errs, "orders[2].amount", "must have at most 2 decimals");
    ow_field_errors_add(&errs, "key", "byte 3 is \"odd\"\n");
    ow_buf_init(&b);
    /* Without a usable key or user: neither field appears. */
    assert_int_equal(ow_response_invalid(NULL, 0, 0, 0, &errs, &b), OW_OK);
    j = parse(&b);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 400);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "INVALID_REQUEST");
    assert_null(json_object_get(j, "user_id"));
    assert_null(json_object_get(j, "idempotency_key"));
    assert_int_equal(json_array_size(json_object_get(j, "errors")), 2);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "errors"), 0), "field")),
                        "orders[2].amount");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "errors"), 1), "message")),
                        "byte 3 is \"odd\"\n");
    json_decref(j);

    ow_buf_reset(&b);
    errs.omitted = 4;
    assert_int_equal(ow_response_invalid("k", 1, 1, 77, &errs, &b), OW_OK);
    j = parse(&b);
    assert_int_equal(json_integer_value(json_object_get(j, "user_id")), 77);
    assert_string_equal(json_string_value(json_object_get(j, "idempotency_key")), "k");
    assert_int_equal(json_integer_value(json_object_get(j, "errors_omitted")), 4);
    json_decref(j);
    ow_buf_cleanup(&b);
}

static void test_codes(void **state)
{
    (void)state;
    assert_int_equal(ow_result_code_status(OW_CODE_CREATED), 201);
    assert_int_equal(ow_result_code_status(OW_CODE_ORDER_ALREADY_EXISTS), 409);
    assert_int_equal(ow_result_code_status(OW_CODE_IDEMPOTENCY_KEY_REUSED), 409);
    assert_int_equal(ow_result_code_status(OW_CODE_REQUEST_IN_PROGRESS), 409);
    assert_int_equal(ow_result_code_status(OW_CODE_INVALID_REQUEST), 400);
    assert_string_equal(ow_result_code_name(OW_CODE_REQUEST_IN_PROGRESS), "REQUEST_IN_PROGRESS");
}

/* Random requests of n orders: their 201 and 409 bodies never exceed the
 * bound (the bound decides which configurations start). */
static void check_bound_holds(size_t n, uint64_t *seed)
{
    static const char chars[] = "\"\\AZaz09-_ ~!";
    ow_request req = {INT64_MAX, n, calloc(n, sizeof(ow_order_item))};
    ow_order_ref *refs = calloc(n, sizeof(*refs));
    ow_conflict *conf = calloc(n, sizeof(*conf));
    ow_response_ctx ctx = {INT64_MAX, "k", 1, digest};
    size_t bound = 0;
    ow_buf b;

    assert_non_null(req.orders);
    assert_non_null(refs);
    assert_non_null(conf);
    for (size_t i = 0; i < n; i++) {
        ow_order_item *o = &req.orders[i];

        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        o->ext_len = 1 + (size_t)(*seed >> 33) % OW_EXT_NO_MAX;
        for (size_t k = 0; k < o->ext_len; k++)
            o->external_order_no[k] = chars[(*seed >> (k % 50)) % (sizeof(chars) - 1)];
        o->amount_cents = (int64_t)(*seed >> 24);
        o->quantity = 1;
        refs[i].order_id = (int64_t)(*seed >> 1);
        strcpy(refs[i].order_no, "OW-0000000000001");
        refs[i].existing = (int)(*seed & 1);
        conf[i].index = i;
        conf[i].fields = 1 + (unsigned)(*seed % 7);
    }
    assert_int_equal(ow_response_max_len(n, &bound), OW_OK);
    ow_buf_init(&b);
    assert_int_equal(ow_response_created(&ctx, &req, refs, &b), OW_OK);
    assert_true(b.len <= bound);
    b.len = 0;
    assert_int_equal(ow_response_order_conflict(&ctx, &req, conf, n, &b), OW_OK);
    assert_true(b.len <= bound);
    ow_buf_cleanup(&b);
    free(req.orders);
    free(refs);
    free(conf);
}

static void test_max_len_bounds_every_body(void **state)
{
    uint64_t seed = 7;
    size_t a = 0, b = 0, big = 0;

    (void)state;
    for (size_t n = 1; n <= 300; n += 37)
        check_bound_holds(n, &seed);
    /* Past the constant 400 body (about 37 kB), it grows with every order. */
    assert_int_equal(ow_response_max_len(1000, &a), OW_OK);
    assert_int_equal(ow_response_max_len(1001, &b), OW_OK);
    assert_true(b > a);
    /* The response the issue saw for 10,000 orders of 64-byte order
     * numbers (1,949,062 bytes) is within the bound for 10,000 orders. */
    assert_int_equal(ow_response_max_len(10000, &big), OW_OK);
    assert_true(big >= 1949062);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_created_exact_bytes),
        cmocka_unit_test(test_conflict_names_items_and_fields),
        cmocka_unit_test(test_key_reused_and_in_progress),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_codes),
        cmocka_unit_test(test_max_len_bounds_every_body),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
