/*
 * `audit` against a real MariaDB (ow/store_audit.h): a clean database, one
 * in which every check fires, and a database error.
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

/* --- audit ------------------------------------------------------------------- */

static void test_audit_clean(void **state)
{
    static const char *const audit[] = {"audit", NULL};
    ow_store *s = testdb_store(&db, &ids, 5);
    ow_audit_report rep;
    ow_error err;
    testcli_result r;
    int ok_lines = 0;

    (void)state;
    record(s, "a-1", "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"A-1\",\"amount\":1}]}",
           OW_DECISION_CREATED);
    record(s, "a-2",
           "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"A-1\",\"amount\":1},"
           "{\"external_order_no\":\"A-2\",\"amount\":2}]}",
           OW_DECISION_CREATED);
    record(s, "a-3", "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"A-1\",\"amount\":9}]}",
           OW_DECISION_CONFLICT);
    /* An order whose request was purged (request_id NULL) is not a finding. */
    testdb_exec(&db, "UPDATE orders SET request_id = NULL WHERE external_order_no = 'A-2'");
    assert_int_equal(ow_store_audit(s, &rep, &err), OW_OK);
    assert_int_equal(rep.requests, 3);
    assert_int_equal(rep.orders, 2);
    for (int i = 0; i < OW_AUDIT_CHECK_COUNT; i++) {
        assert_non_null(rep.checks[i].name);
        if (rep.checks[i].findings != 0)
            fail_msg("%s: %lld findings", rep.checks[i].name, (long long)rep.checks[i].findings);
        assert_int_equal(rep.checks[i].n_examples, 0);
    }
    r = cli(&db, audit);
    if (r.status != 0)
        fail_msg("audit: status %d\n%s%s", r.status, r.out, r.err);
    assert_non_null(strstr(r.out, "audit: idempotency_requests 3 rows, orders 2 rows"));
    assert_non_null(strstr(r.out, "duplicate request keys"));
    assert_non_null(strstr(r.out, "requests not in a final state"));
    assert_null(strstr(r.out, "  FAIL\n")); /* a check's result */
    assert_null(strstr(r.out, "\nFAIL "));  /* a failing check's examples */
    for (const char *p = strstr(r.out, "  OK\n"); p != NULL; p = strstr(p + 1, "  OK\n"))
        ok_lines++;
    assert_int_equal(ok_lines, OW_AUDIT_CHECK_COUNT);
    testcli_result_free(&r);
    ow_store_free(&s);
}

/* Bad rows of every kind, in a database of their own (its unique keys are
 * dropped to make the duplicates possible). */
static void insert_bad_rows(testdb *t)
{
    testdb_exec(t, "ALTER TABLE idempotency_requests DROP INDEX uq_requests_key_hash");
    testdb_exec(t, "ALTER TABLE orders DROP INDEX uq_orders_user_ext");
    /* Good rows around them. */
    testdb_exec(t, REQ(1, 1, "good-1", "SUCCEEDED", 201, "{}"));
    testdb_exec(t, ORDER(1, 1, "G-1", 1));
    /* I1: one key recorded twice for user 2 (one finding). */
    testdb_exec(t, REQ(2, 2, "twice-secret-key", "SUCCEEDED", 201, "{}"));
    testdb_exec(t, REQ(3, 2, "twice-secret-key", "SUCCEEDED", 201, "{}"));
    /* I2: one order number twice for user 3 (one finding). */
    testdb_exec(t, ORDER(2, 3, "DUP-ORDER-NO", 1));
    testdb_exec(t, ORDER(3, 3, "DUP-ORDER-NO", 1));
    /* I3: 12 orders naming a missing request, 1 owned by a FAILED request. */
    for (int i = 0; i < 12; i++) {
        char sql[300];

        snprintf(sql, sizeof(sql),
                 "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, quantity, "
                 "request_id) VALUES (%d, 'OW-M%d', 4, 'M-%d', 1, 1, 999)",
                 100 + i, i, i);
        testdb_exec(t, sql);
    }
    testdb_exec(t, REQ(4, 5, "failed-1", "FAILED", 409, "{}"));
    testdb_exec(t, ORDER(4, 5, "F-1", 4));
    /* Not final: a status a non-strict server stores as '', a mismatched
     * response_status each way, an empty body. */
    testdb_exec(t, "SET SESSION sql_mode = ''");
    testdb_exec(t, REQ(5, 6, "bad-status", "PROCESSING", 201, "{}"));
    testdb_exec(t, REQ(6, 6, "bad-code-1", "SUCCEEDED", 409, "{}"));
    testdb_exec(t, REQ(7, 6, "bad-code-2", "FAILED", 201, "{}"));
    testdb_exec(t, REQ(8, 6, "bad-body", "SUCCEEDED", 201, ""));
}

static const ow_audit_check *check_named(const ow_audit_report *rep, const char *name)
{
    for (int i = 0; i < OW_AUDIT_CHECK_COUNT; i++) {
        if (strcmp(rep->checks[i].name, name) == 0)
            return &rep->checks[i];
    }
    fail_msg("no audit check named %s", name);
    return NULL;
}

static void assert_examples_have(const ow_audit_check *c, const char *text)
{
    for (size_t i = 0; i < c->n_examples; i++) {
        if (strstr(c->examples[i], text) != NULL)
            return;
    }
    fail_msg("%s: no example has \"%s\" (first: %s)", c->name, text,
             c->n_examples > 0 ? c->examples[0] : "none");
}

static void test_audit_every_check_fires(void **state)
{
    static const char *const audit[] = {"audit", NULL};
    testdb bad;
    ow_store *s;
    ow_audit_report rep;
    ow_error err;
    testcli_result r;
    const ow_audit_check *c;

    (void)state;
    testdb_create(&bad, "ow_it_audit");
    insert_bad_rows(&bad);
    s = testdb_store(&bad, &ids, 5);
    assert_int_equal(ow_store_audit(s, &rep, &err), OW_OK);
    assert_int_equal(rep.requests, 8);
    assert_int_equal(rep.orders, 16);
    c = check_named(&rep, "duplicate request keys");
    assert_int_equal(c->findings, 1);
    assert_int_equal(c->n_examples, 1);
    assert_examples_have(c, "user_id=2 key=");
    assert_examples_have(c, "records=2");
    assert_null(strstr(c->examples[0], "twice-secret-key")); /* masked */
    c = check_named(&rep, "duplicate orders");
    assert_int_equal(c->findings, 1);
    assert_examples_have(c, "user_id=3 external_order_no=");
    assert_null(strstr(c->examples[0], "DUP-ORDER-NO"));
    c = check_named(&rep, "orders without a SUCCEEDED request");
    assert_int_equal(c->findings, 13);
    assert_int_equal(c->n_examples, OW_AUDIT_EXAMPLES);
    assert_examples_have(c, "order_id=4 request_status=\"FAILED\" request_id=4");
    assert_examples_have(c, "order_id=100 request_status=NULL request_id=999");
    c = check_named(&rep, "FAILED requests owning orders");
    assert_int_equal(c->findings, 1);
    assert_examples_have(c, "request_id=4 orders=1");
    c = check_named(&rep, "requests not in a final state");
    assert_int_equal(c->findings, 4);
    assert_examples_have(c, "request_id=5 status=\"\" response_status=201");
    assert_examples_have(c, "request_id=6 status=\"SUCCEEDED\" response_status=409");
    assert_examples_have(c, "request_id=7 status=\"FAILED\" response_status=201");
    assert_examples_have(c, "request_id=8 status=\"SUCCEEDED\" response_status=201");

    r = cli(&bad, audit);
    assert_int_equal(r.status, 4);
    assert_non_null(strstr(r.out, "FAIL duplicate request keys: 1 finding(s), all of them"));
    assert_non_null(
        strstr(r.out, "FAIL orders without a SUCCEEDED request: 13 finding(s), first examples"));
    assert_null(strstr(r.out, "twice-secret-key"));
    assert_null(strstr(r.out, "DUP-ORDER-NO"));
    testcli_result_free(&r);
    ow_store_free(&s);
    testdb_drop(&bad);
}

static void test_audit_database_error(void **state)
{
    static const char *const audit[] = {"audit", NULL};
    testdb none = db;
    testcli_result r;

    (void)state;
    snprintf(none.database, sizeof(none.database), "ow_it_no_such_database");
    r = cli(&none, audit);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "order-worker audit: cannot connect"));
    testcli_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_audit_clean, setup),
        cmocka_unit_test(test_audit_every_check_fires),
        cmocka_unit_test(test_audit_database_error),
    };

    return admin_main("ow_it_audit", tests, sizeof(tests) / sizeof(tests[0]));
}
