/* The query service's path rules (ow_api_parse_path, issue 15): segments
 * are percent-decoded one by one and checked with the message rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ow/api.h"
#include "ow/error.h"

static void test_request_route(void **state)
{
    ow_route r;
    char why[200];

    (void)state;
    assert_int_equal(ow_api_parse_path("/v1/requests/42/idem_2026:a.b-c", &r, why, sizeof(why)),
                     OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_REQUEST);
    assert_int_equal(r.user_id, 42);
    assert_int_equal(r.segment_len, 15);
    assert_string_equal(r.segment, "idem_2026:a.b-c");
    assert_int_equal(ow_api_parse_path("/v1/requests/9223372036854775807/k%41", &r, why,
                                       sizeof(why)),
                     OW_OK);
    assert_int_equal(r.user_id, INT64_MAX);
    assert_string_equal(r.segment, "kA");
}

static void test_order_route_decodes_its_segment(void **state)
{
    ow_route r;
    char why[200];

    (void)state;
    assert_int_equal(ow_api_parse_path("/v1/orders/7/A%2FB%20c", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_ORDER);
    assert_int_equal(r.user_id, 7);
    assert_string_equal(r.segment, "A/B c");
}

static void test_other_paths(void **state)
{
    ow_route r;
    char why[200];

    (void)state;
    assert_int_equal(ow_api_parse_path("/healthz", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_HEALTH);
    assert_int_equal(ow_api_parse_path("/v1/requestsX/1/k", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_NONE);
    assert_int_equal(ow_api_parse_path("/", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_NONE);
}

static void expect_bad(const char *url, const char *why_prefix)
{
    ow_route r;
    char why[200] = "";

    if (ow_api_parse_path(url, &r, why, sizeof(why)) != OW_EINVAL)
        fail_msg("%s: accepted", url);
    if (strncmp(why, why_prefix, strlen(why_prefix)) != 0)
        fail_msg("%s: \"%s\" does not start with \"%s\"", url, why, why_prefix);
}

static void test_bad_segments(void **state)
{
    char long_key[200];

    (void)state;
    expect_bad("/v1/requests/0/k", "user_id: ");
    expect_bad("/v1/requests/01/k", "user_id: ");
    expect_bad("/v1/requests/-1/k", "user_id: ");
    expect_bad("/v1/requests/9223372036854775808/k", "user_id: ");
    expect_bad("/v1/requests/12a/k", "user_id: ");
    expect_bad("/v1/requests/42", "user_id: ");
    expect_bad("/v1/requests/42/", "key: is empty");
    expect_bad("/v1/requests/42/a'b", "key: byte 2 is not one of");
    expect_bad("/v1/requests/42/a%27b", "key: byte 2 is not one of");
    expect_bad("/v1/requests/42/a;b", "key: byte 2");
    expect_bad("/v1/requests/42/a%2Fb", "key: byte 2");
    expect_bad("/v1/requests/42/a/b", "key: must be one path segment");
    expect_bad("/v1/requests/42/%", "key: malformed percent-encoding");
    expect_bad("/v1/requests/42/%4", "key: malformed percent-encoding");
    expect_bad("/v1/requests/42/%zz", "key: malformed percent-encoding");
    memset(long_key, 'k', 81);
    long_key[81] = '\0';
    {
        char url[300];

        snprintf(url, sizeof(url), "/v1/requests/42/%s", long_key);
        expect_bad(url, "key: is too long");
    }
    expect_bad("/v1/orders/42/%00", "external_order_no: byte 1 is not printable ASCII");
    expect_bad("/v1/orders/42/a%7Fb", "external_order_no: byte 2");
    expect_bad("/v1/orders/42/", "external_order_no: must be 1 to 64 bytes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_route),
        cmocka_unit_test(test_order_route_decodes_its_segment),
        cmocka_unit_test(test_other_paths),
        cmocka_unit_test(test_bad_segments),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
