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
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(json_array_get(conf, 0), "fields"), 0)),
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

/* --- Every body against the formats it had when it was printed -------- */

/* The string s[0..len) as JSON, escaped as the contract's bodies escape. */
static void ref_string(ow_buf *b, const char *s, size_t len)
{
    assert_int_equal(ow_buf_appendc(b, '"'), OW_OK);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\')
            assert_int_equal(ow_buf_appendf(b, "\\%c", c), OW_OK);
        else if (c < 0x20)
            assert_int_equal(ow_buf_appendf(b, "\\u%04x", c), OW_OK);
        else
            assert_int_equal(ow_buf_appendc(b, (char)c), OW_OK);
    }
    assert_int_equal(ow_buf_appendc(b, '"'), OW_OK);
}

static void ref_head(ow_buf *b, int status, const char *code, const char *message,
                     const ow_response_ctx *ctx)
{
    assert_int_equal(ow_buf_appendf(b, "{\"status\":%d,\"code\":\"%s\"", status, code), OW_OK);
    if (message != NULL) {
        assert_int_equal(ow_buf_appends(b, ",\"message\":"), OW_OK);
        ref_string(b, message, strlen(message));
    }
    assert_int_equal(
        ow_buf_appendf(b, ",\"user_id\":%lld,\"idempotency_key\":", (long long)ctx->user_id),
        OW_OK);
    ref_string(b, ctx->key, ctx->key_len);
    assert_int_equal(ow_buf_appendf(b, ",\"request_digest\":\"%s\"", ctx->digest_hex), OW_OK);
}

static void same_bytes(const ow_buf *got, const ow_buf *want, const char *what)
{
    if (got->len != want->len || memcmp(got->data, want->data, want->len) != 0)
        fail_msg("%s:\n got  %s\n want %s", what, got->data, want->data);
}

static const char conflict_msg[] = "orders with these external_order_no already exist with "
                                   "different details; no order of this batch was created";
static const char reused_msg[] = "this idempotency key was already used for a different request; "
                                 "nothing was changed";
static const char progress_msg[] = "a request with this idempotency key is still being processed; "
                                   "the definitive result follows";

static void check_conflict(const ow_response_ctx *ctx, const ow_request *req)
{
    static const char *const names[] = {"amount", "product_id", "quantity"};
    ow_conflict c[7];
    ow_buf got, want;

    for (size_t i = 0; i < 7; i++) {
        c[i].index = (i * 4099) % req->n_orders;
        c[i].fields = (unsigned)i + 1; /* every combination of the three */
    }
    ow_buf_init(&got);
    ow_buf_init(&want);
    assert_int_equal(ow_response_order_conflict(ctx, req, c, 7, &got), OW_OK);
    ref_head(&want, 409, "ORDER_ALREADY_EXISTS", conflict_msg, ctx);
    assert_int_equal(ow_buf_appends(&want, ",\"conflicts\":["), OW_OK);
    for (size_t i = 0; i < 7; i++) {
        const ow_order_item *it = &req->orders[c[i].index];
        int first = 1;

        assert_int_equal(ow_buf_appendf(&want, "%s{\"index\":%zu,\"external_order_no\":",
                                        i > 0 ? "," : "", c[i].index),
                         OW_OK);
        ref_string(&want, it->external_order_no, it->ext_len);
        assert_int_equal(ow_buf_appends(&want, ",\"fields\":["), OW_OK);
        for (unsigned k = 0; k < 3; k++) {
            if ((c[i].fields & (1u << k)) == 0)
                continue;
            assert_int_equal(ow_buf_appendf(&want, "%s\"%s\"", first ? "" : ",", names[k]), OW_OK);
            first = 0;
        }
        assert_int_equal(ow_buf_appends(&want, "]}"), OW_OK);
    }
    assert_int_equal(ow_buf_appends(&want, "]}"), OW_OK);
    same_bytes(&got, &want, "409 ORDER_ALREADY_EXISTS");
    ow_buf_cleanup(&got);
    ow_buf_cleanup(&want);
}

static void check_reused_and_progress(const ow_response_ctx *ctx, int64_t retry_after)
{
    ow_buf got, want;

    ow_buf_init(&got);
    ow_buf_init(&want);
    assert_int_equal(ow_response_key_reused(ctx, &got), OW_OK);
    ref_head(&want, 409, "IDEMPOTENCY_KEY_REUSED", reused_msg, ctx);
    assert_int_equal(ow_buf_appendc(&want, '}'), OW_OK);
    same_bytes(&got, &want, "409 IDEMPOTENCY_KEY_REUSED");
    ow_buf_reset(&got);
    ow_buf_reset(&want);
    assert_int_equal(ow_response_in_progress(ctx, retry_after, &got), OW_OK);
    ref_head(&want, 409, "REQUEST_IN_PROGRESS", progress_msg, ctx);
    assert_int_equal(ow_buf_appendf(&want, ",\"retry_after_ms\":%lld}", (long long)retry_after),
                     OW_OK);
    same_bytes(&got, &want, "409 REQUEST_IN_PROGRESS");
    ow_buf_cleanup(&got);
    ow_buf_cleanup(&want);
}

static void check_invalid(const char *key, size_t key_len, int has_user, int64_t user_id,
                          const ow_field_errors *errs)
{
    ow_buf got, want;

    ow_buf_init(&got);
    ow_buf_init(&want);
    assert_int_equal(ow_response_invalid(key, key_len, has_user, user_id, errs, &got), OW_OK);
    assert_int_equal(ow_buf_appends(&want, "{\"status\":400,\"code\":\"INVALID_REQUEST\","
                                           "\"message\":\"the message is not a valid order "
                                           "batch; see errors\""),
                     OW_OK);
    if (has_user)
        assert_int_equal(ow_buf_appendf(&want, ",\"user_id\":%lld", (long long)user_id), OW_OK);
    if (key != NULL) {
        assert_int_equal(ow_buf_appends(&want, ",\"idempotency_key\":"), OW_OK);
        ref_string(&want, key, key_len);
    }
    assert_int_equal(ow_buf_appends(&want, ",\"errors\":["), OW_OK);
    for (size_t i = 0; i < errs->count; i++) {
        assert_int_equal(ow_buf_appends(&want, i > 0 ? ",{\"field\":" : "{\"field\":"), OW_OK);
        ref_string(&want, errs->items[i].field, strlen(errs->items[i].field));
        assert_int_equal(ow_buf_appends(&want, ",\"message\":"), OW_OK);
        ref_string(&want, errs->items[i].message, strlen(errs->items[i].message));
        assert_int_equal(ow_buf_appendc(&want, '}'), OW_OK);
    }
    assert_int_equal(ow_buf_appendc(&want, ']'), OW_OK);
    if (errs->omitted > 0)
        assert_int_equal(ow_buf_appendf(&want, ",\"errors_omitted\":%zu", errs->omitted), OW_OK);
    assert_int_equal(ow_buf_appendc(&want, '}'), OW_OK);
    same_bytes(&got, &want, "400 INVALID_REQUEST");
    ow_buf_cleanup(&got);
    ow_buf_cleanup(&want);
}

/* Each body kind, byte for byte, against the printf formats it was built
 * with, over the extremes of every number and every escape of a string:
 * results already stored are replayed byte for byte, so a body may never
 * change its bytes. */
static void test_every_body_as_printed(void **state)
{
    static const int64_t users[] = {1, 42, 1000000007, INT64_MAX};
    static const int64_t retries[] = {0, 7, 5000, INT64_MAX};
    static const size_t omitted[] = {0, 1, 99, SIZE_MAX};
    const char key[] = "k\"\\\x01\x1f:ok";
    ow_order_item items[2];
    ow_request req = two_orders(items);
    ow_field_errors errs;

    (void)state;
    for (size_t u = 0; u < sizeof(users) / sizeof(users[0]); u++) {
        ow_response_ctx ctx = {users[u], key, u == 0 ? 0 : sizeof(key) - 1, digest};

        check_conflict(&ctx, &req);
        check_reused_and_progress(&ctx, retries[u]);
        ow_field_errors_init(&errs);
        for (size_t e = 0; e < u; e++)
            ow_field_errors_add(&errs, e == 1 ? "orders[1].amount\"" : "value",
                                "bad \\ \"%zu\"\x02", e);
        errs.omitted = omitted[u];
        check_invalid(u % 2 ? key : NULL, sizeof(key) - 1, (int)(u % 2), users[u], &errs);
        check_invalid(key, u, 1, -users[u], &errs);
    }
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
        cmocka_unit_test(test_every_body_as_printed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
