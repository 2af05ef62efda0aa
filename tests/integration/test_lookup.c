/*
 * `lookup` against a real MariaDB, as the store's function
 * (ow/store_lookup.h) and through the built binary: a record and its
 * orders, a FAILED record, found and not found, the exit statuses.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>
#include <jansson.h>

#include "ow/store_audit.h"
#include "ow/store_purge.h"
#include "ow/digest.h"
#include "ow/migrations.h"
#include "ow/store.h"
#include "admin_common.h"

/* --- lookup ------------------------------------------------------------------ */

static void test_lookup_record(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    ow_record rec;
    ow_error err;
    testmsg m;

    (void)state;
    testmsg_make(&m, "look-1", lookup_value);
    assert_int_equal(testmsg_decide(s, &m), OW_DECISION_CREATED);
    ow_record_init(&rec);
    assert_int_equal(ow_store_lookup(s, 42, "look-1", 6, &rec, &err), OW_OK);
    assert_int_equal(rec.user_id, 42);
    assert_int_equal(rec.id, count(&db, "SELECT id FROM idempotency_requests"));
    assert_string_equal(rec.status, "SUCCEEDED");
    assert_int_equal(rec.response_status, 201);
    assert_string_equal(rec.digest_hex, m.item.digest_hex);
    assert_true(rec.created_at.year >= 2024 && rec.created_at.month >= 1);
    assert_int_equal(rec.response.len, m.item.body.len);
    assert_memory_equal(rec.response.data, m.item.body.data, m.item.body.len);
    assert_int_equal(rec.n_orders, 2);
    assert_string_equal(rec.orders[0].external_order_no, "L-1");
    assert_string_equal(rec.orders[0].amount, "19.90");
    assert_int_equal(rec.orders[0].product_id, 101);
    assert_int_equal(rec.orders[0].quantity, 1);
    assert_string_equal(rec.orders[1].external_order_no, "L-2");
    assert_string_equal(rec.orders[1].amount, "5.00");
    assert_int_equal(rec.orders[1].product_id, 0);
    assert_int_equal(rec.orders[1].quantity, 3);
    assert_int_equal(strncmp(rec.orders[0].order_no, "OW-", 3), 0);
    /* The scope is (user, key): another user's lookup of the key finds nothing. */
    assert_int_equal(ow_store_lookup(s, 43, "look-1", 6, &rec, &err), OW_ENOTFOUND);
    assert_int_equal(ow_store_lookup(s, 42, "look-2", 6, &rec, &err), OW_ENOTFOUND);
    ow_record_cleanup(&rec);
    testmsg_free(&m);
    ow_store_free(&s);
}

static void test_lookup_failed_record(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    ow_record rec;
    ow_error err;

    (void)state;
    record(s, "first", "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"F-1\",\"amount\":1}]}",
           OW_DECISION_CREATED);
    record(s, "clash", "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"F-1\",\"amount\":2}]}",
           OW_DECISION_CONFLICT);
    ow_record_init(&rec);
    assert_int_equal(ow_store_lookup(s, 7, "clash", 5, &rec, &err), OW_OK);
    assert_string_equal(rec.status, "FAILED");
    assert_int_equal(rec.response_status, 409);
    assert_int_equal(rec.n_orders, 0);
    assert_non_null(strstr(rec.response.data, "ORDER_ALREADY_EXISTS"));
    ow_record_cleanup(&rec);
    ow_store_free(&s);
}

static void test_lookup_cli(void **state)
{
    static const char *const found[] = {"lookup", "--user", "42", "--key", "look-cli", NULL};
    static const char *const missing[] = {"lookup", "--user", "42", "--key", "no-such-key", NULL};
    ow_store *s = testdb_store(&db, &ids, 5);
    testcli_result r;
    json_error_t jerr;
    json_t *j, *orders, *resp;
    testmsg m;

    (void)state;
    testmsg_make(&m, "look-cli", lookup_value);
    assert_int_equal(testmsg_decide(s, &m), OW_DECISION_CREATED);
    r = cli(&db, found);
    if (r.status != 0)
        fail_msg("lookup: status %d: %s", r.status, r.err);
    j = json_loads(r.out, 0, &jerr);
    if (j == NULL)
        fail_msg("lookup printed no JSON: %s", r.out);
    assert_non_null(strstr(r.out, "\n  \"id\": ")); /* pretty-printed */
    assert_int_equal(json_integer_value(json_object_get(j, "user_id")), 42);
    assert_string_equal(json_string_value(json_object_get(j, "idempotency_key")), "look-cli");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "SUCCEEDED");
    assert_string_equal(json_string_value(json_object_get(j, "request_digest")), m.item.digest_hex);
    assert_int_equal(json_integer_value(json_object_get(j, "response_status")), 201);
    assert_int_equal(strlen(json_string_value(json_object_get(j, "created_at"))), 26);
    orders = json_object_get(j, "orders");
    assert_int_equal(json_array_size(orders), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(orders, 0), "amount")),
                        "19.90");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(orders, 0), "product_id")),
                     101);
    assert_true(json_is_null(json_object_get(json_array_get(orders, 1), "product_id")));
    /* The stored response, embedded as JSON, equals the body the worker built. */
    resp = json_loadb(m.item.body.data, m.item.body.len, 0, &jerr);
    assert_true(json_equal(json_object_get(j, "response"), resp));
    json_decref(resp);
    json_decref(j);
    testcli_result_free(&r);

    r = cli(&db, missing);
    assert_int_equal(r.status, 3);
    assert_string_equal(r.out, "");
    assert_non_null(
        strstr(r.err, "order-worker lookup: no request for user 42 with key no-such-key"));
    testcli_result_free(&r);
    testmsg_free(&m);
    ow_store_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_lookup_record, setup),
        cmocka_unit_test_setup(test_lookup_failed_record, setup),
        cmocka_unit_test_setup(test_lookup_cli, setup),
    };

    return admin_main("ow_it_lookup", tests, sizeof(tests) / sizeof(tests[0]));
}
