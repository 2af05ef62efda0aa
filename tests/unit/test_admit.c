/* A lane's batch admission: a key or an order held by an earlier request
 * of the round keeps a later one out, a request left in the queue holds
 * them too, the orders of one transaction stay within the limit (a first
 * request always fits), answered requests do not count, and a new round
 * forgets everything. Which requests need the database, and what a round
 * takes while it does not answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ow/admit.h"
#include "ow/error.h"

/* A request of user with n orders named ext[0..n). */
static ow_request request(ow_order_item *items, int64_t user, const char *const *ext, size_t n)
{
    ow_request r = {user, n, items};

    for (size_t i = 0; i < n; i++) {
        memset(&items[i], 0, sizeof(items[i]));
        items[i].ext_len = strlen(ext[i]);
        memcpy(items[i].external_order_no, ext[i], items[i].ext_len);
    }
    return r;
}

static void test_keys_and_orders_are_held(void **state)
{
    ow_order_item a_items[2], b_items[1], c_items[1], d_items[1];
    const char *const a_ext[] = {"A-1", "A-2"};
    const char *const b_ext[] = {"A-2"};
    const char *const c_ext[] = {"C-1"};
    ow_request a = request(a_items, 7, a_ext, 2);
    ow_request b = request(b_items, 7, b_ext, 1);
    ow_request other_user = request(c_items, 8, b_ext, 1);
    ow_request c = request(d_items, 7, c_ext, 1);
    ow_admit adm;

    (void)state;
    assert_int_equal(ow_admit_init(&adm, 4, 4, 100), OW_OK);
    ow_admit_reset(&adm, 1);
    assert_false(ow_admit_key_held(&adm, 1));
    assert_true(ow_admit_orders_fit(&adm, &a));
    assert_int_equal(ow_admit_hold(&adm, 1, &a, OW_ADMIT_COUNTED), OW_OK);
    assert_true(ow_admit_key_held(&adm, 1));
    assert_false(ow_admit_key_held(&adm, 2));
    /* Another key naming one of a's orders waits; another user's order of
     * the same number does not. */
    assert_false(ow_admit_orders_fit(&adm, &b));
    assert_true(ow_admit_orders_fit(&adm, &other_user));
    /* A request left in the queue still holds its key and its orders. */
    assert_int_equal(ow_admit_hold(&adm, 3, &c, OW_ADMIT_LEFT), OW_OK);
    assert_true(ow_admit_key_held(&adm, 3));
    assert_false(ow_admit_orders_fit(&adm, &c));
    /* An invalid message holds its key only. */
    assert_int_equal(ow_admit_hold(&adm, 4, NULL, OW_ADMIT_COUNTED), OW_OK);
    assert_true(ow_admit_key_held(&adm, 4));
    /* A new round forgets all of it. */
    ow_admit_reset(&adm, 1);
    assert_false(ow_admit_key_held(&adm, 1));
    assert_false(ow_admit_key_held(&adm, 3));
    assert_true(ow_admit_orders_fit(&adm, &b));
    assert_true(ow_admit_orders_fit(&adm, &c));
    ow_admit_free(&adm);
}

static void test_orders_per_transaction(void **state)
{
    ow_order_item x_items[3], w_items[3], y_items[2], y2_items[1], z_items[1], x1_items[1];
    const char *const x_ext[] = {"X-1", "X-2", "X-3"};
    const char *const w_ext[] = {"W-1", "W-2", "W-3"};
    const char *const y_ext[] = {"Y-1", "Y-2"};
    const char *const y2_ext[] = {"Y-2"};
    const char *const z_ext[] = {"Z-1"};
    const char *const x1_ext[] = {"X-1"};
    ow_request x = request(x_items, 1, x_ext, 3);
    ow_request w = request(w_items, 1, w_ext, 3);
    ow_request y = request(y_items, 1, y_ext, 2);
    ow_request y2 = request(y2_items, 1, y2_ext, 1);
    ow_request z = request(z_items, 1, z_ext, 1);
    ow_request x1 = request(x1_items, 1, x1_ext, 1);
    ow_admit adm;

    (void)state;
    assert_int_equal(ow_admit_init(&adm, 4, 4, 2), OW_OK);
    ow_admit_reset(&adm, 1);
    /* Nothing taken yet: a request over the limit fits, so that a
     * transaction can take it alone; the next one does not. */
    assert_true(ow_admit_orders_fit(&adm, &x));
    assert_int_equal(ow_admit_hold(&adm, 1, &x, OW_ADMIT_COUNTED), OW_OK);
    assert_false(ow_admit_orders_fit(&adm, &z));
    ow_admit_reset(&adm, 1);
    /* A cached answer rides along: its orders do not count against the
     * transaction, but it is taken (the next request is no longer a
     * first one) and it holds its key and its orders. */
    assert_int_equal(ow_admit_hold(&adm, 1, &x, OW_ADMIT_FREE), OW_OK);
    assert_true(ow_admit_key_held(&adm, 1));
    assert_false(ow_admit_orders_fit(&adm, &x1));
    assert_false(ow_admit_orders_fit(&adm, &w)); /* 0 + 3 > 2, and not first */
    assert_true(ow_admit_orders_fit(&adm, &y));
    assert_int_equal(ow_admit_hold(&adm, 2, &y, OW_ADMIT_COUNTED), OW_OK);
    assert_false(ow_admit_orders_fit(&adm, &z)); /* 2 + 1 > 2 */
    ow_admit_reset(&adm, 1);
    /* A request left in the queue holds its orders even while nothing is
     * taken, and does not make the next request a second one. */
    assert_int_equal(ow_admit_hold(&adm, 2, &y, OW_ADMIT_LEFT), OW_OK);
    assert_false(ow_admit_orders_fit(&adm, &y2));
    assert_true(ow_admit_orders_fit(&adm, &x));
    ow_admit_free(&adm);
}

static void test_many_rounds(void **state)
{
    ow_admit adm;

    (void)state;
    /* Unsized: the sets grow in the first round and keep their memory. */
    assert_int_equal(ow_admit_init(&adm, 0, 0, 4096), OW_OK);
    for (int round = 0; round < 50; round++) {
        ow_admit_reset(&adm, 1);
        for (uint64_t k = 0; k < 1000; k++) {
            assert_false(ow_admit_key_held(&adm, k * 7919 + (uint64_t)round));
            assert_int_equal(
                ow_admit_hold(&adm, k * 7919 + (uint64_t)round, NULL, OW_ADMIT_COUNTED), OW_OK);
        }
        assert_int_equal(adm.taken, 1000);
    }
    ow_admit_free(&adm);
}

/* What a round does with one request, in the order of its rules. */
static void test_consider(void **state)
{
    ow_order_item a_items[1], b_items[1];
    const char *const a_ext[] = {"A-1"};
    ow_request a = request(a_items, 7, a_ext, 1);
    ow_request b = request(b_items, 7, a_ext, 1);
    const unsigned char digest[OW_DIGEST_LEN] = {1}, other[OW_DIGEST_LEN] = {2};
    const ow_admit_ask qa = {1, &a, "k-a", 3, digest};
    const ow_admit_ask qa_other = {1, &a, "k-a", 3, other};
    const ow_admit_ask qb = {2, &b, "k-b", 3, digest};
    const ow_admit_ask invalid = {3, NULL, "k-i", 3, digest};
    ow_cache *cache = ow_cache_new(1 << 20, 60000);
    ow_result_code code = OW_CODE_INVALID_REQUEST;
    ow_buf body;
    ow_admit adm;

    (void)state;
    ow_buf_init(&body);
    assert_non_null(cache);
    assert_int_equal(ow_admit_init(&adm, 4, 4, 100), OW_OK);
    assert_int_equal(ow_cache_put(cache, 7, "k-a", 3, digest, OW_CODE_CREATED, "{}", 2, 1000), 1);
    ow_admit_reset(&adm, 1);
    /* Without a cache, or with another digest, the database decides. */
    assert_int_equal(ow_admit_consider(&adm, NULL, &qa, 1000, &code, &body), OW_ADMIT_COUNTED);
    assert_int_equal(ow_admit_consider(&adm, cache, &qa_other, 1000, &code, &body),
                     OW_ADMIT_COUNTED);
    assert_int_equal(code, OW_CODE_INVALID_REQUEST);
    /* A retry the cache answers is free, with the stored answer. */
    assert_int_equal(ow_admit_consider(&adm, cache, &qa, 1000, &code, &body), OW_ADMIT_FREE);
    assert_int_equal(code, OW_CODE_CREATED);
    assert_int_equal(body.len, 2);
    /* Considering holds nothing; a held key waits even when the cache
     * would answer it, and so does another key naming a held order. */
    assert_int_equal(ow_admit_consider(&adm, cache, &qa, 1000, &code, &body), OW_ADMIT_FREE);
    assert_int_equal(ow_admit_hold(&adm, 1, &a, OW_ADMIT_COUNTED), OW_OK);
    assert_int_equal(ow_admit_consider(&adm, cache, &qa, 1000, &code, &body), OW_ADMIT_LEFT);
    assert_int_equal(ow_admit_consider(&adm, cache, &qb, 1000, &code, &body), OW_ADMIT_LEFT);
    assert_int_equal(ow_admit_consider(&adm, cache, &invalid, 1000, &code, &body),
                     OW_ADMIT_COUNTED);
    assert_false(adm.db_wait);
    /* The database does not answer: an invalid message and a cached retry
     * are still taken; a request that needs it waits, and the round says
     * so, until the next round. */
    ow_admit_reset(&adm, 0);
    assert_int_equal(ow_admit_consider(&adm, cache, &invalid, 1000, &code, &body),
                     OW_ADMIT_COUNTED);
    assert_int_equal(ow_admit_consider(&adm, cache, &qa, 1000, &code, &body), OW_ADMIT_FREE);
    assert_false(adm.db_wait);
    assert_int_equal(ow_admit_consider(&adm, cache, &qb, 1000, &code, &body), OW_ADMIT_LEFT);
    assert_true(adm.db_wait);
    ow_admit_reset(&adm, 1);
    assert_false(adm.db_wait);
    /* An expired entry answers nothing. */
    assert_int_equal(ow_admit_consider(&adm, cache, &qa, 61000, &code, &body), OW_ADMIT_COUNTED);
    ow_buf_cleanup(&body);
    ow_cache_free(&cache);
    ow_admit_free(&adm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_and_orders_are_held),
        cmocka_unit_test(test_orders_per_transaction),
        cmocka_unit_test(test_many_rounds),
        cmocka_unit_test(test_consider),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
