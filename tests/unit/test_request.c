/* Validation rules of contract section 2, one table row per rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ow/error.h"
#include "ow/request.h"

static const ow_request_limits limits = {1 << 20, 1000};

typedef struct {
    const char *name;
    const char *value;
    const char *field;   /* NULL: valid */
    const char *message; /* substring of the first error's message */
} value_case;

#define ORDER "\"external_order_no\":\"B-1\",\"amount\":\"19.90\""
#define WRAP(orders) "{\"user_id\":42,\"orders\":[" orders "]}"

static const value_case value_cases[] = {
    {"minimal valid", WRAP("{" ORDER "}"), NULL, NULL},
    {"all fields", WRAP("{" ORDER ",\"product_id\":101,\"quantity\":3}"), NULL, NULL},
    {"unknown fields ignored", "{\"user_id\":1,\"x\":{\"y\":[1,2]},\"orders\":[{" ORDER ",\"z\":null}]}",
     NULL, NULL},
    {"amount as number", WRAP("{\"external_order_no\":\"a\",\"amount\":19.9}"), NULL, NULL},
    {"amount zero", WRAP("{\"external_order_no\":\"a\",\"amount\":0}"), NULL, NULL},
    {"amount max", WRAP("{\"external_order_no\":\"a\",\"amount\":\"9999999999.99\"}"), NULL, NULL},
    {"null product and quantity", WRAP("{" ORDER ",\"product_id\":null,\"quantity\":null}"), NULL,
     NULL},
    {"user max", "{\"user_id\":9223372036854775807,\"orders\":[{" ORDER "}]}", NULL, NULL},
    {"ext with space and symbols", WRAP("{\"external_order_no\":\" a~!\\\"\",\"amount\":1}"), NULL,
     NULL},
    {"empty value", "", "value", "is empty"},
    {"not json", "hello", "value", "is not valid JSON"},
    {"truncated json", "{\"user_id\":42,\"orders\":[", "value", "is not valid JSON"},
    {"array root", "[1,2]", "value", "must be a JSON object"},
    {"string root", "\"x\"", "value", "must be a JSON object"},
    {"duplicate json key", "{\"user_id\":1,\"user_id\":2,\"orders\":[{" ORDER "}]}", "value",
     "is not valid JSON"},
    {"NaN", "{\"user_id\":NaN,\"orders\":[]}", "value", "is not valid JSON"},
    {"missing user", "{\"orders\":[{" ORDER "}]}", "user_id", "is required"},
    {"user string", "{\"user_id\":\"42\",\"orders\":[{" ORDER "}]}", "user_id",
     "must be a JSON integer"},
    {"user fraction", "{\"user_id\":42.0,\"orders\":[{" ORDER "}]}", "user_id",
     "must be a JSON integer"},
    {"user exponent", "{\"user_id\":4e1,\"orders\":[{" ORDER "}]}", "user_id",
     "must be a JSON integer"},
    {"user zero", "{\"user_id\":0,\"orders\":[{" ORDER "}]}", "user_id", "must be between 1"},
    {"user negative", "{\"user_id\":-5,\"orders\":[{" ORDER "}]}", "user_id", "must be between 1"},
    {"user 2^63", "{\"user_id\":9223372036854775808,\"orders\":[{" ORDER "}]}", "user_id",
     "must be between 1"},
    {"user huge", "{\"user_id\":123456789012345678901234567890,\"orders\":[{" ORDER "}]}",
     "user_id", "must be between 1"},
    {"user null", "{\"user_id\":null,\"orders\":[{" ORDER "}]}", "user_id", "must be a JSON integer"},
    {"missing orders", "{\"user_id\":1}", "orders", "is required"},
    {"orders object", "{\"user_id\":1,\"orders\":{}}", "orders", "must be an array"},
    {"orders empty", "{\"user_id\":1,\"orders\":[]}", "orders", "at least 1"},
    {"order not object", WRAP("1"), "orders[0]", "must be an object"},
    {"missing ext", WRAP("{\"amount\":1}"), "orders[0].external_order_no", "is required"},
    {"ext number", WRAP("{\"external_order_no\":5,\"amount\":1}"), "orders[0].external_order_no",
     "must be a string"},
    {"ext empty", WRAP("{\"external_order_no\":\"\",\"amount\":1}"), "orders[0].external_order_no",
     "must be 1 to 64 bytes"},
    {"ext 65 bytes",
     WRAP("{\"external_order_no\":\"0123456789012345678901234567890123456789012345678901234567890123"
          "4\",\"amount\":1}"),
     "orders[0].external_order_no", "must be 1 to 64 bytes"},
    {"ext non-ascii", WRAP("{\"external_order_no\":\"caf\\u00e9\",\"amount\":1}"),
     "orders[0].external_order_no", "not printable ASCII"},
    {"ext control", WRAP("{\"external_order_no\":\"a\\tb\",\"amount\":1}"),
     "orders[0].external_order_no", "not printable ASCII"},
    {"ext NUL", WRAP("{\"external_order_no\":\"a\\u0000b\",\"amount\":1}"),
     "orders[0].external_order_no", "not printable ASCII"},
    {"ext duplicate", WRAP("{" ORDER "},{" ORDER "}"), "orders[1].external_order_no",
     "repeats orders[0]"},
    {"missing amount", WRAP("{\"external_order_no\":\"a\"}"), "orders[0].amount", "is required"},
    {"amount bool", WRAP("{\"external_order_no\":\"a\",\"amount\":true}"), "orders[0].amount",
     "JSON number or a decimal string"},
    {"amount 3 decimals", WRAP("{\"external_order_no\":\"a\",\"amount\":19.999}"),
     "orders[0].amount", "at most 2 decimals"},
    {"amount string 3 decimals", WRAP("{\"external_order_no\":\"a\",\"amount\":\"1.001\"}"),
     "orders[0].amount", "at most 2 decimals"},
    {"amount negative", WRAP("{\"external_order_no\":\"a\",\"amount\":-1}"), "orders[0].amount",
     "must not be negative"},
    {"amount too big", WRAP("{\"external_order_no\":\"a\",\"amount\":10000000000}"),
     "orders[0].amount", "at most 9999999999.99"},
    {"amount exponent", WRAP("{\"external_order_no\":\"a\",\"amount\":1e2}"), "orders[0].amount",
     "exponent"},
    {"amount string spaces", WRAP("{\"external_order_no\":\"a\",\"amount\":\" 1.00\"}"),
     "orders[0].amount", "decimal like 19.90"},
    {"amount string empty", WRAP("{\"external_order_no\":\"a\",\"amount\":\"\"}"),
     "orders[0].amount", "must not be empty"},
    {"amount string leading zero", WRAP("{\"external_order_no\":\"a\",\"amount\":\"01.00\"}"),
     "orders[0].amount", "decimal like 19.90"},
    {"amount string dot", WRAP("{\"external_order_no\":\"a\",\"amount\":\"1.\"}"),
     "orders[0].amount", "decimal like 19.90"},
    {"amount string plus", WRAP("{\"external_order_no\":\"a\",\"amount\":\"+1\"}"),
     "orders[0].amount", "decimal like 19.90"},
    {"amount string NaN", WRAP("{\"external_order_no\":\"a\",\"amount\":\"NaN\"}"),
     "orders[0].amount", "decimal like 19.90"},
    {"product zero", WRAP("{" ORDER ",\"product_id\":0}"), "orders[0].product_id",
     "must be between 1"},
    {"product string", WRAP("{" ORDER ",\"product_id\":\"7\"}"), "orders[0].product_id",
     "must be a JSON integer"},
    {"product fraction", WRAP("{" ORDER ",\"product_id\":7.5}"), "orders[0].product_id",
     "must be a JSON integer"},
    {"quantity zero", WRAP("{" ORDER ",\"quantity\":0}"), "orders[0].quantity",
     "must be between 1"},
    {"quantity too big", WRAP("{" ORDER ",\"quantity\":2147483648}"), "orders[0].quantity",
     "must be between 1 and 2147483647"},
    {"quantity negative", WRAP("{" ORDER ",\"quantity\":-1}"), "orders[0].quantity",
     "must be between 1"},
    {"error in third item", WRAP("{\"external_order_no\":\"a\",\"amount\":1},{\"external_order_no\":"
                                 "\"b\",\"amount\":1},{\"external_order_no\":\"c\",\"amount\":"
                                 "\"x\"}"),
     "orders[2].amount", "decimal like 19.90"},
};

static void test_value_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(value_cases) / sizeof(value_cases[0]); i++) {
        const value_case *c = &value_cases[i];
        ow_request req;
        ow_field_errors errs;
        int rc;

        ow_field_errors_init(&errs);
        rc = ow_request_parse(c->value, strlen(c->value), &limits, &req, &errs);
        if (c->field == NULL) {
            if (rc != OW_OK)
                fail_msg("%s: expected valid, got %s: %s", c->name, errs.items[0].field,
                         errs.items[0].message);
            assert_int_equal(errs.count, 0);
        } else {
            if (rc != OW_EINVAL || errs.count == 0)
                fail_msg("%s: expected an error on %s", c->name, c->field);
            if (strcmp(errs.items[0].field, c->field) != 0 ||
                strstr(errs.items[0].message, c->message) == NULL)
                fail_msg("%s: expected %s: ...%s..., got %s: %s", c->name, c->field, c->message,
                         errs.items[0].field, errs.items[0].message);
            assert_null(req.orders);
        }
        ow_request_cleanup(&req);
    }
}

static void test_values_parsed(void **state)
{
    const char *v = WRAP("{\"external_order_no\":\"B-1\",\"amount\":19.9,\"product_id\":101},"
                         "{\"external_order_no\":\"B-2\",\"amount\":\"0.05\",\"quantity\":7}");
    ow_request req;
    ow_field_errors errs;

    (void)state;
    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(v, strlen(v), &limits, &req, &errs), OW_OK);
    assert_int_equal(req.user_id, 42);
    assert_int_equal(req.n_orders, 2);
    assert_string_equal(req.orders[0].external_order_no, "B-1");
    assert_int_equal(req.orders[0].amount_cents, 1990);
    assert_int_equal(req.orders[0].product_id, 101);
    assert_int_equal(req.orders[0].quantity, 1);
    assert_int_equal(req.orders[1].amount_cents, 5);
    assert_int_equal(req.orders[1].product_id, 0);
    assert_int_equal(req.orders[1].quantity, 7);
    ow_request_cleanup(&req);
}

static void test_all_errors_collected(void **state)
{
    const char *v = "{\"user_id\":7,\"orders\":[{\"amount\":-1},{\"external_order_no\":\"x\","
                    "\"amount\":1,\"quantity\":0}]}";
    ow_request req;
    ow_field_errors errs;

    (void)state;
    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(v, strlen(v), &limits, &req, &errs), OW_EINVAL);
    assert_int_equal(errs.count, 3);
    assert_string_equal(errs.items[0].field, "orders[0].external_order_no");
    assert_string_equal(errs.items[1].field, "orders[0].amount");
    assert_string_equal(errs.items[2].field, "orders[1].quantity");
    /* user_id parsed, so a 400 response can carry it. */
    assert_int_equal(req.user_id, 7);
    ow_request_cleanup(&req);
}

/* A repeated external_order_no is reported the same way in a batch of any
 * size, with or without an empty one among them (already invalid, never a
 * repeat): the repeats in order of their number, each naming the first of
 * its run. Sizes 2 to 20 straddle the 16 orders up to which repeats are
 * looked for pair by pair. */
static void test_repeats_any_size(void **state)
{
    ow_request_scratch scratch;

    (void)state;
    ow_request_scratch_init(&scratch);
    for (size_t n = 2; n <= 20; n++) {
        for (size_t dup = 0; dup < 3; dup++) {
            char v[4096];
            size_t len = (size_t)snprintf(v, sizeof(v), "{\"user_id\":7,\"orders\":[");
            ow_request req;
            ow_field_errors errs;
            int rc;

            for (size_t i = 0; i < n; i++) {
                /* dup 0: all distinct; 1: the last repeats the first; 2: the
                 * last two repeat the first and orders[1] is empty. */
                size_t name = (dup >= 1 && i == n - 1) || (dup == 2 && n > 3 && i == n - 2) ? 0 : i;
                const char *ext = dup == 2 && i == 1 ? "" : NULL;
                char own[16];

                snprintf(own, sizeof(own), "E-%zu", name);
                len += (size_t)snprintf(v + len, sizeof(v) - len,
                                        "%s{\"external_order_no\":\"%s\",\"amount\":1}",
                                        i > 0 ? "," : "", ext != NULL ? ext : own);
            }
            len += (size_t)snprintf(v + len, sizeof(v) - len, "]}");
            ow_field_errors_init(&errs);
            rc = ow_request_parse_with(&scratch, v, len, &limits, &req, &errs);
            if (dup == 0) {
                assert_int_equal(rc, OW_OK);
                assert_int_equal(errs.count, 0);
                ow_request_cleanup(&req);
                continue;
            }
            assert_int_equal(rc, OW_EINVAL);
            {
                size_t e = 0;
                char field[64];

                if (dup == 2) {
                    assert_string_equal(errs.items[e].field, "orders[1].external_order_no");
                    assert_non_null(strstr(errs.items[e].message, "must be 1 to 64 bytes"));
                    e++;
                }
                for (size_t i = (dup == 2 && n > 3) ? n - 2 : n - 1; i < n; i++) {
                    if (i == 1 && dup == 2)
                        continue;
                    snprintf(field, sizeof(field), "orders[%zu].external_order_no", i);
                    assert_true(e < errs.count);
                    assert_string_equal(errs.items[e].field, field);
                    assert_string_equal(errs.items[e].message,
                                        "repeats orders[0].external_order_no");
                    e++;
                }
                assert_int_equal(errs.count, e);
            }
            ow_request_cleanup(&req);
        }
    }
    ow_request_scratch_cleanup(&scratch);
}

static void test_limits(void **state)
{
    ow_request_limits small = {64, 2};
    const char *three = WRAP("{\"external_order_no\":\"a\",\"amount\":1},{\"external_order_no\":\"b\","
                             "\"amount\":1},{\"external_order_no\":\"c\",\"amount\":1}");
    char big[200];
    ow_request req;
    ow_field_errors errs;

    (void)state;
    ow_field_errors_init(&errs);
    small.max_bytes = 1000;
    assert_int_equal(ow_request_parse(three, strlen(three), &small, &req, &errs), OW_EINVAL);
    assert_string_equal(errs.items[0].field, "orders");
    assert_non_null(strstr(errs.items[0].message, "holds 3 orders; the limit is 2"));
    ow_request_cleanup(&req);

    memset(big, ' ', sizeof(big));
    memcpy(big, "{}", 2);
    small.max_bytes = 100;
    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(big, sizeof(big), &small, &req, &errs), OW_EINVAL);
    assert_string_equal(errs.items[0].field, "value");
    assert_non_null(strstr(errs.items[0].message, "is 200 bytes; the limit is 100"));
    ow_request_cleanup(&req);
}

static void test_error_cap(void **state)
{
    char v[40000];
    size_t n = 0;
    ow_request req;
    ow_field_errors errs;

    (void)state;
    n += (size_t)snprintf(v + n, sizeof(v) - n, "{\"user_id\":1,\"orders\":[");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(v + n, sizeof(v) - n, "%s{\"amount\":1}", i ? "," : "");
    n += (size_t)snprintf(v + n, sizeof(v) - n, "]}");
    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(v, n, &limits, &req, &errs), OW_EINVAL);
    assert_int_equal(errs.count, OW_FIELD_ERRORS_MAX);
    assert_int_equal(errs.omitted, 100 - OW_FIELD_ERRORS_MAX);
    ow_request_cleanup(&req);
}

typedef struct {
    const char *key;
    size_t len; /* 0: strlen */
    int ok;
    const char *message;
} key_case;

static void test_keys(void **state)
{
    static char k80[81], k81[82];
    const key_case cases[] = {
        {"idem_20260827_7f3a", 0, 1, NULL},
        {"A-Z.a:z_0", 0, 1, NULL},
        {k80, 80, 1, NULL},
        {k81, 81, 0, "is 81 bytes; the limit is 80"},
        {"", 0, 0, "is empty"},
        {"has space", 0, 0, "byte 4 is not one of"},
        {"slash/", 0, 0, "byte 6 is not one of"},
        {"caf\xc3\xa9", 0, 0, "byte 4 is not one of"},
        {"nul\0x", 5, 0, "byte 4 is not one of"},
        {NULL, 0, 0, "is missing"},
    };

    (void)state;
    memset(k80, 'k', 80);
    memset(k81, 'k', 81);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ow_field_errors errs;
        size_t len = cases[i].len != 0 || cases[i].key == NULL ? cases[i].len : strlen(cases[i].key);
        int rc;

        ow_field_errors_init(&errs);
        rc = ow_request_check_key(cases[i].key, len, &errs);
        if (cases[i].ok) {
            assert_int_equal(rc, OW_OK);
            assert_int_equal(errs.count, 0);
        } else {
            assert_int_equal(rc, OW_EINVAL);
            assert_string_equal(errs.items[0].field, "key");
            if (strstr(errs.items[0].message, cases[i].message) == NULL)
                fail_msg("key case %zu: got \"%s\"", i, errs.items[0].message);
        }
    }
}

static void test_amount_round_trip(void **state)
{
    static const struct {
        const char *in;
        int64_t cents;
        const char *out;
    } cases[] = {{"0", 0, "0.00"},       {"0.5", 50, "0.50"},         {"19.9", 1990, "19.90"},
                 {"19.90", 1990, "19.90"}, {"7", 700, "7.00"},       {"0.01", 1, "0.01"},
                 {"9999999999.99", 999999999999LL, "9999999999.99"}, {"100.00", 10000, "100.00"}};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t cents = -1;
        const char *why = NULL;
        char text[OW_AMOUNT_TEXT_MAX];

        assert_int_equal(ow_amount_parse(cases[i].in, strlen(cases[i].in), &cents, &why), OW_OK);
        assert_int_equal(cents, cases[i].cents);
        ow_amount_format(cents, text);
        assert_string_equal(text, cases[i].out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_table),
        cmocka_unit_test(test_values_parsed),
        cmocka_unit_test(test_all_errors_collected),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_error_cap),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_amount_round_trip),
        cmocka_unit_test(test_repeats_any_size),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
