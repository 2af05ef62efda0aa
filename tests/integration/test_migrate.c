/*
 * `migrate` against a real MariaDB: two runs at once, migration 004 over
 * rows from before it, and the subcommands on a database missing a table
 * (their errors keep the server's text).
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

/* --- migrate ---------------------------------------------------------------- */

typedef struct {
    ow_store *store;
    int applied;
    int rc;
    char msg[256];
} migrate_run;

static void *migrate_thread(void *p)
{
    migrate_run *r = p;
    FILE *devnull = fopen("/dev/null", "w");
    ow_error err;

    r->rc = ow_store_migrate(r->store, devnull, &r->applied, &err);
    if (r->rc != OW_OK)
        snprintf(r->msg, sizeof(r->msg), "%s", err.msg);
    fclose(devnull);
    return NULL;
}

/* Two replicas migrating one empty database at once (a deployment that runs
 * migrate before each replica starts) both succeed, and every migration is
 * recorded once, counted by exactly one of them. */
static void test_migrate_concurrently(void **state)
{
    testdb fresh = db;
    char sql[256];

    (void)state;
    snprintf(fresh.database, sizeof(fresh.database), "ow_it_migrate_%d", (int)getpid());
    for (int round = 0; round < 10; round++) {
        migrate_run runs[2];
        pthread_t th[2];

        snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", fresh.database);
        testdb_exec(&db, sql);
        snprintf(sql, sizeof(sql), "CREATE DATABASE %s", fresh.database);
        testdb_exec(&db, sql);
        for (int k = 0; k < 2; k++) {
            memset(&runs[k], 0, sizeof(runs[k]));
            runs[k].store = testdb_store(&fresh, &ids, 5);
            assert_int_equal(pthread_create(&th[k], NULL, migrate_thread, &runs[k]), 0);
        }
        for (int k = 0; k < 2; k++) {
            pthread_join(th[k], NULL);
            ow_store_free(&runs[k].store);
            if (runs[k].rc != OW_OK)
                fail_msg("round %d, run %d: %s", round, k, runs[k].msg);
        }
        assert_int_equal(runs[0].applied + runs[1].applied, (int)ow_migrations_count);
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s.ow_schema_migrations", fresh.database);
        assert_int_equal(testdb_count(&db, sql), (long long)ow_migrations_count);
    }
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", fresh.database);
    testdb_exec(&db, sql);
}

static int migrate_db(testdb *t)
{
    ow_store *s = testdb_store(t, &ids, 5);
    migrate_run r = {.store = s};

    migrate_thread(&r);
    ow_store_free(&s);
    if (r.rc != OW_OK)
        fail_msg("migrate: %s", r.msg);
    return r.applied;
}

static long long index_count(testdb *t, const char *name)
{
    char sql[300];

    snprintf(sql, sizeof(sql),
             "SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics WHERE "
             "table_schema = DATABASE() AND table_name = 'idempotency_requests' AND "
             "index_name = '%s' AND non_unique = 0",
             name);
    return testdb_count(t, sql);
}

/* Migration 004 on a database with rows from before it: each row
 * gets the key hash that the worker computes (a retry of a stored key finds
 * its row), the old unique key is gone, and a migrate that stopped after its
 * first statement runs again. */
static void test_migrate_key_hash_on_old_rows(void **state)
{
    testdb old;
    ow_store *s;
    testmsg m;

    (void)state;
    testdb_create(&old, "ow_it_migrate_old"); /* every migration applied */
    /* Back to the schema before 004, with rows written then. */
    testdb_exec(&old, "ALTER TABLE idempotency_requests DROP INDEX uq_requests_key_hash, "
                      "DROP COLUMN key_hash, "
                      "ADD UNIQUE KEY uq_requests_user_key (user_id, idempotency_key)");
    testdb_exec(&old, "DELETE FROM ow_schema_migrations WHERE version = 4");
    testdb_exec(&old, "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                      "request_digest, status, response_status, response_body) SELECT seq, "
                      "1 + seq % 7, CONCAT('old-', seq), UNHEX(SHA2(seq, 256)), 'SUCCEEDED', 201, "
                      "'{}' FROM seq_1_to_500");
    assert_int_equal(migrate_db(&old), 1);
    assert_int_equal(index_count(&old, "uq_requests_user_key"), 0);
    assert_int_equal(index_count(&old, "uq_requests_key_hash"), 1);
    /* Row 42 is (1, 'old-42'), recorded for another request: the worker
     * finds it by its own hash and refuses the key. */
    s = testdb_store(&old, &ids, 5);
    testmsg_make(&m, "old-42",
                 "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"O1\","
                 "\"amount\":\"1.00\"}]}");
    assert_int_equal(testmsg_decide(s, &m), OW_DECISION_KEY_REUSED);
    assert_int_equal(testdb_count(&old, "SELECT COUNT(*) FROM idempotency_requests"), 500);
    assert_int_equal(testdb_count(&old, "SELECT COUNT(*) FROM orders"), 0);
    testmsg_free(&m);
    ow_store_free(&s);
    /* Stopped after its first statement: the column is there, the old
     * index too. */
    testdb_exec(&old, "ALTER TABLE idempotency_requests "
                      "ADD UNIQUE KEY uq_requests_user_key (user_id, idempotency_key)");
    testdb_exec(&old, "DELETE FROM ow_schema_migrations WHERE version = 4");
    assert_int_equal(migrate_db(&old), 1);
    assert_int_equal(migrate_db(&old), 0);
    assert_int_equal(index_count(&old, "uq_requests_user_key"), 0);
    assert_int_equal(index_count(&old, "uq_requests_key_hash"), 1);
    testdb_drop(&old);
}

/* --- statement errors keep their text ------------------------------------- */

/* Runs a subcommand against t and checks that it fails (status 1) with a
 * message carrying the server's text. */
static void expect_cli_error(testdb *t, const char *const *args, const char *text)
{
    testcli_result r = cli(t, args);

    if (r.status != 1 || strstr(r.err, text) == NULL)
        fail_msg("%s: status %d, stderr:\n%s\n(want \"%s\")", args[0], r.status, r.err, text);
    testcli_result_free(&r);
}

/* The worker's path: deciding one request on a store for t. */
static void expect_decide_error(testdb *t, const char *text)
{
    ow_store *s = testdb_store(t, &ids, 5);
    testmsg m;
    ow_error err;

    testmsg_make(&m, "prep-err", lookup_value);
    ow_error_clear(&err);
    assert_int_not_equal(ow_store_decide(s, &m.item, 1, &err), OW_OK);
    if (strstr(err.msg, text) == NULL)
        fail_msg("decide: \"%s\" (want \"%s\")", err.msg, text);
    testmsg_free(&m);
    ow_store_free(&s);
}

/* A missing privilege (1142) and a missing table (1146) raised when a
 * statement is prepared: the message used to end after the number, since
 * the text was read after the statement was closed. */
static void test_prepare_errors_keep_text(void **state)
{
    static const char *const lookup[] = {"lookup", "--user", "42", "--key", "k", NULL};
    static const char *const audit[] = {"audit", NULL};
    static const char *const purge[] = {"purge", "--older-than", "1d", "--workers-cache-ttl", "300",
                                        NULL};
    static const char *const migrate[] = {"migrate", NULL};
    testdb t;
    testdb np;
    char sql[512];

    (void)state;
    testdb_create(&t, "ow_it_preperr");
    /* An old request, so that purge reaches its statements on orders. */
    testdb_exec(&t, REQ(1, 42, "old-1", "SUCCEEDED", 201, "{}"));
    testdb_exec(&t, "UPDATE idempotency_requests SET created_at = NOW(6) - INTERVAL 40 DAY");

    /* A user who may only read idempotency_requests. */
    np = t;
    snprintf(np.user, sizeof(np.user), "ow_np_%d", (int)getpid());
    snprintf(np.password, sizeof(np.password), "np-%d", (int)getpid());
    snprintf(sql, sizeof(sql), "CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s'", np.user,
             np.password);
    testdb_exec(&t, sql);
    snprintf(sql, sizeof(sql), "GRANT SELECT ON %s.idempotency_requests TO '%s'@'%%'", t.database,
             np.user);
    testdb_exec(&t, sql);
    expect_decide_error(&np, "command denied to user");
    expect_cli_error(&np, lookup, "SELECT command denied to user");
    expect_cli_error(&np, audit, "SELECT command denied to user");
    expect_cli_error(&np, purge, "command denied to user");
    expect_cli_error(&np, migrate, "CREATE command denied to user");
    snprintf(sql, sizeof(sql), "DROP USER '%s'@'%%'", np.user);
    testdb_exec(&t, sql);

    testdb_exec(&t, "DROP TABLE orders");
    expect_decide_error(&t, "orders' doesn't exist");
    expect_cli_error(&t, lookup, "orders' doesn't exist");
    expect_cli_error(&t, audit, "orders' doesn't exist");
    expect_cli_error(&t, purge, "orders' doesn't exist");
    testdb_drop(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_concurrently),
        cmocka_unit_test(test_migrate_key_hash_on_old_rows),
        cmocka_unit_test(test_prepare_errors_keep_text),
    };

    return admin_main("ow_it_migrate", tests, sizeof(tests) / sizeof(tests[0]));
}
