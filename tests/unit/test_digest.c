/* The request digest: what must and must not change it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ow/digest.h"
#include "ow/error.h"

static const ow_request_limits limits = {1 << 20, 1000};

static void digest_of(const char *value, char hex[OW_DIGEST_HEX_LEN + 1])
{
    ow_request req;
    ow_field_errors errs;
    unsigned char raw[OW_DIGEST_LEN];

    ow_field_errors_init(&errs);
    if (ow_request_parse(value, strlen(value), &limits, &req, &errs) != OW_OK)
        fail_msg("invalid test input: %s: %s", errs.items[0].field, errs.items[0].message);
    assert_int_equal(ow_digest_compute(&req, raw, hex), OW_OK);
    ow_request_cleanup(&req);
}

static const char *const base =
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}";

/* Spellings of the same request. */
static const char *const same[] = {
    "{ \"user_id\" : 42 ,\n \"orders\" : [ {\"external_order_no\":\"B20260827-001\",\"amount\":"
    "\"19.90\",\"product_id\":101,\"quantity\":1} , {\"external_order_no\":\"B-2\",\"amount\":5} ]"
    " }\n",
    "{\"orders\":[{\"quantity\":1,\"product_id\":101,\"amount\":\"19.90\",\"external_order_no\":"
    "\"B20260827-001\"},{\"amount\":5,\"external_order_no\":\"B-2\"}],\"user_id\":42}",
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":19.9,"
    "\"product_id\":101},{\"external_order_no\":\"B-2\",\"amount\":\"5.00\",\"quantity\":1}]}",
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":19.90,"
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":\"5\","
    "\"product_id\":null}]}",
    "{\"user_id\":42,\"note\":\"ignored\",\"orders\":[{\"external_order_no\":\"B20260827-001\","
    "\"amount\":\"19.9\",\"product_id\":101,\"x\":1},{\"external_order_no\":\"B-2\",\"amount\":5.0}"
    "]}",
};

/* Requests that differ from base in one respect each. */
static const char *const different[] = {
    /* user */
    "{\"user_id\":43,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* amount */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.91\","
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* external_order_no */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-002\",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* product_id */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.90\","
    "\"product_id\":102,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* product_id absent */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.90\","
    "\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* quantity */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":2},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* item order */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B-2\",\"amount\":5},{\"external_order_"
    "no\":"
    "\"B20260827-001\",\"amount\":\"19.90\",\"product_id\":101,\"quantity\":1}]}",
    /* one item fewer */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":1}]}",
    /* case of external_order_no */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"b20260827-001\",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
    /* trailing space in external_order_no */
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001 \",\"amount\":\"19.90\","
    "\"product_id\":101,\"quantity\":1},{\"external_order_no\":\"B-2\",\"amount\":5}]}",
};

static void test_same_request_same_digest(void **state)
{
    char want[OW_DIGEST_HEX_LEN + 1];
    char got[OW_DIGEST_HEX_LEN + 1];

    (void)state;
    digest_of(base, want);
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        digest_of(same[i], got);
        if (strcmp(want, got) != 0)
            fail_msg("spelling %zu changed the digest", i);
    }
}

static void test_different_request_different_digest(void **state)
{
    char want[OW_DIGEST_HEX_LEN + 1];
    char got[OW_DIGEST_HEX_LEN + 1];

    (void)state;
    digest_of(base, want);
    for (size_t i = 0; i < sizeof(different) / sizeof(different[0]); i++) {
        digest_of(different[i], got);
        if (strcmp(want, got) == 0)
            fail_msg("variant %zu did not change the digest", i);
        for (size_t j = 0; j < i; j++) {
            char other[OW_DIGEST_HEX_LEN + 1];

            digest_of(different[j], other);
            if (strcmp(other, got) == 0)
                fail_msg("variants %zu and %zu share a digest", j, i);
        }
    }
}

/* The canonical form is documented, so clients can compute it: pin it. */
static void test_canonical_form_and_vector(void **state)
{
    const char *v = "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"B20260827-001\","
                    "\"amount\":19.9,\"product_id\":101}]}";
    ow_request req;
    ow_field_errors errs;
    ow_buf canon;
    unsigned char raw[OW_DIGEST_LEN];
    char hex[OW_DIGEST_HEX_LEN + 1];

    (void)state;
    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(v, strlen(v), &limits, &req, &errs), OW_OK);
    ow_buf_init(&canon);
    assert_int_equal(ow_digest_canonical(&req, &canon), OW_OK);
    assert_string_equal(
        canon.data, "{\"orders\":[{\"amount\":\"19.90\",\"external_order_no\":\"B20260827-001\","
                    "\"product_id\":101,\"quantity\":1}],\"user_id\":42}");
    assert_int_equal(ow_digest_compute(&req, raw, hex), OW_OK);
    /* sha256sum of the text above. */
    assert_string_equal(hex, "617ba20a7005cb1c5dcf1f0b4450af614802fb12ad0b2655813278e4d2996c08");
    ow_buf_cleanup(&canon);
    ow_request_cleanup(&req);
}

static void test_escaping_in_canonical_form(void **state)
{
    const char *v =
        "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"a\\\"b\\\\c\",\"amount\":1}]}";
    ow_request req;
    ow_field_errors errs;
    ow_buf canon;

    (void)state;
    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(v, strlen(v), &limits, &req, &errs), OW_OK);
    ow_buf_init(&canon);
    assert_int_equal(ow_digest_canonical(&req, &canon), OW_OK);
    assert_string_equal(canon.data, "{\"orders\":[{\"amount\":\"1.00\",\"external_order_no\":"
                                    "\"a\\\"b\\\\c\",\"product_id\":null,\"quantity\":1}],"
                                    "\"user_id\":1}");
    ow_buf_cleanup(&canon);
    ow_request_cleanup(&req);
}

/* A request whose canonical form is many times longer than any buffer the
 * digest writes it through: the text is the one built here with printf,
 * byte for byte, and the digest is SHA-256 of that text. Orders of every
 * external_order_no length, quotes and backslashes included, put the
 * pieces across every alignment. */
static void test_long_canonical_form(void **state)
{
    enum { N = 1000 };
    ow_request req = {0};
    ow_buf canon, want;
    unsigned char raw[OW_DIGEST_LEN], direct[OW_DIGEST_LEN];
    char hex[OW_DIGEST_HEX_LEN + 1];

    (void)state;
    req.user_id = 9223372036854775807LL;
    req.n_orders = N;
    req.orders = calloc(N, sizeof(*req.orders));
    assert_non_null(req.orders);
    ow_buf_init(&want);
    assert_int_equal(ow_buf_appends(&want, "{\"orders\":["), OW_OK);
    for (size_t i = 0; i < N; i++) {
        ow_order_item *o = &req.orders[i];
        char amount[OW_AMOUNT_TEXT_MAX];

        o->ext_len = 1 + i % OW_EXT_NO_MAX;
        for (size_t k = 0; k < o->ext_len; k++)
            o->external_order_no[k] = "ab\"\\-9"[(i + k) % 6];
        o->amount_cents = (int64_t)(i * 7919) % OW_AMOUNT_MAX_CENTS;
        o->product_id = i % 3 == 0 ? 0 : (int64_t)i * 1000003;
        o->quantity = i % 5 == 0 ? OW_QUANTITY_MAX : (int64_t)i + 1;
        ow_amount_format(o->amount_cents, amount);
        assert_int_equal(ow_buf_appendf(&want, "%s{\"amount\":\"%s\",\"external_order_no\":\"",
                                        i > 0 ? "," : "", amount),
                         OW_OK);
        for (size_t k = 0; k < o->ext_len; k++) {
            char c = o->external_order_no[k];

            if (c == '"' || c == '\\')
                assert_int_equal(ow_buf_appendc(&want, '\\'), OW_OK);
            assert_int_equal(ow_buf_appendc(&want, c), OW_OK);
        }
        if (o->product_id > 0)
            assert_int_equal(ow_buf_appendf(&want, "\",\"product_id\":%lld,\"quantity\":%lld}",
                                            (long long)o->product_id, (long long)o->quantity),
                             OW_OK);
        else
            assert_int_equal(ow_buf_appendf(&want, "\",\"product_id\":null,\"quantity\":%lld}",
                                            (long long)o->quantity),
                             OW_OK);
    }
    assert_int_equal(ow_buf_appendf(&want, "],\"user_id\":%lld}", (long long)req.user_id), OW_OK);
    assert_true(want.len > 20 * 4096);
    ow_buf_init(&canon);
    assert_int_equal(ow_buf_appends(&canon, "prefix:"), OW_OK);
    assert_int_equal(ow_digest_canonical(&req, &canon), OW_OK);
    assert_int_equal(canon.len, 7 + want.len);
    assert_memory_equal(canon.data, "prefix:", 7);
    assert_memory_equal(canon.data + 7, want.data, want.len);
    assert_int_equal(ow_digest_compute(&req, raw, hex), OW_OK);
    assert_int_equal(ow_sha256(want.data, want.len, direct), OW_OK);
    assert_memory_equal(raw, direct, sizeof(raw));
    ow_buf_cleanup(&canon);
    ow_buf_cleanup(&want);
    ow_request_cleanup(&req);
}

/* The key hash: SHA-256 of "<user_id>:<key>", first 16 bytes
 * (vectors from sha256sum); the user is part of it, a key of the longest
 * length is accepted and a longer one refused. */
static void test_key_hash(void **state)
{
    unsigned char h[OW_KEY_HASH_LEN], h2[OW_KEY_HASH_LEN];
    char hex[2 * OW_KEY_HASH_LEN + 1];
    char longest[OW_KEY_MAX + 1];

    (void)state;
    assert_int_equal(ow_key_hash(42, "abc", 3, h), OW_OK);
    ow_hex(h, sizeof(h), hex);
    assert_string_equal(hex, "4c611c47136d0d52ef7b1d6508b6d77b");
    assert_int_equal(ow_key_hash(-7, "x:y", 3, h), OW_OK);
    ow_hex(h, sizeof(h), hex);
    assert_string_equal(hex, "24ccf1fad69ed7e0f0829603e7537ad6");
    assert_int_equal(ow_key_hash(42, "abc", 3, h), OW_OK);
    assert_int_equal(ow_key_hash(4, "2:abc", 5, h2), OW_OK); /* "4:2:abc", not "42:abc" */
    assert_memory_not_equal(h, h2, sizeof(h));
    assert_int_equal(ow_key_hash(43, "abc", 3, h2), OW_OK);
    assert_memory_not_equal(h, h2, sizeof(h));
    memset(longest, 'k', sizeof(longest));
    assert_int_equal(ow_key_hash(9223372036854775807LL, longest, OW_KEY_MAX, h), OW_OK);
    assert_int_equal(ow_key_hash(1, longest, OW_KEY_MAX + 1, h), OW_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_request_same_digest),
        cmocka_unit_test(test_different_request_different_digest),
        cmocka_unit_test(test_canonical_form_and_vector),
        cmocka_unit_test(test_long_canonical_form),
        cmocka_unit_test(test_escaping_in_canonical_form),
        cmocka_unit_test(test_key_hash),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
