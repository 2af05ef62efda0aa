/*
 * Shards through the built binary (issue 14), with three databases of the
 * test MariaDB as the shards: migrate records the map on each; run refuses
 * a reordered, shorter or longer list, or another bucket count, with exit
 * 2 naming both maps (before it touches Kafka); lookup reads the user's
 * shard only; audit reports each shard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ow/shard.h"
#include "ow/store.h"
#include "testcli.h"
#include "testdb.h"

#define N_DB 4 /* three shards and a spare that is never migrated as one */

static testdb dbs[N_DB];
static ow_idgen ids;

static void shard_entry(char *buf, size_t cap, unsigned i)
{
    snprintf(buf, cap, "%s:%u/%s", dbs[i].host, dbs[i].port, dbs[i].database);
}

/* "a,b,c" from database indexes, e.g. order = {1, 0, 2}. */
static void shard_list(char *buf, size_t cap, const unsigned *order, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        char e[256];

        shard_entry(e, sizeof(e), order[k]);
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", k > 0 ? "," : "", e);
    }
}

/* Runs the binary with mysql.shards = list (and extra env, may be NULL). */
static testcli_result cli(const char *list, const char *extra, const char *const *args)
{
    char env[5][1400];
    char *envp[6];
    char *argv[16];
    testcli_result r;
    size_t n = 0, k = 0;

    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_MYSQL_USER=%s", dbs[0].user);
    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_MYSQL_PASSWORD=%s", dbs[0].password);
    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_MYSQL_SHARDS=%s", list);
    /* Nothing may reach a broker: none listens here. */
    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1");
    if (extra != NULL)
        snprintf(env[k++], sizeof(env[0]), "%s", extra);
    for (size_t i = 0; i < k; i++)
        envp[i] = env[i];
    envp[k] = NULL;
    if (testcli_bin() == NULL)
        fail_msg("OW_TEST_WORKER_BIN is not set: run the tests through ctest");
    argv[n++] = (char *)testcli_bin();
    while (*args != NULL && n < 15)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    if (testcli_run(argv, envp, NULL, 0, 60000, &r) != 0)
        fail_msg("cannot run %s", argv[0]);
    return r;
}

static int group_setup(void **state)
{
    static const char *const names[N_DB] = {"owshard0", "owshard1", "owshard2", "owshard3"};

    (void)state;
    for (int i = 0; i < N_DB; i++)
        testdb_create(&dbs[i], names[i]);
    ow_idgen_init(&ids, 0, ow_clock_wall_ms);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N_DB; i++)
        testdb_drop(&dbs[i]);
    return 0;
}

static const unsigned order3[] = {0, 1, 2};

static void migrate3(void)
{
    static const char *const args[] = {"migrate", NULL};
    char list[1200];
    testcli_result r;

    shard_list(list, sizeof(list), order3, 3);
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "map recorded: 4096 buckets over 3 shards, this is shard 2"));
    testcli_result_free(&r);
}

static void test_migrate_records_each_map(void **state)
{
    (void)state;
    migrate3();
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(testdb_count(&dbs[i], "SELECT bucket_count FROM ow_shard_map"), 4096);
        assert_int_equal(testdb_count(&dbs[i], "SELECT shard_count FROM ow_shard_map"), 3);
        assert_int_equal(testdb_count(&dbs[i], "SELECT shard_index FROM ow_shard_map"), i);
    }
    assert_int_equal(testdb_count(&dbs[3], "SELECT COUNT(*) FROM ow_shard_map"), 0);
}

/* Each disagreement exits 2 before any broker is contacted, and prints
 * both maps. */
static void refused(const unsigned *order, size_t n, const char *extra, const char *recorded)
{
    static const char *const args[] = {"run", NULL};
    char list[1200];
    testcli_result r;

    shard_list(list, sizeof(list), order, n);
    r = cli(list, extra, args);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "mysql.shards disagrees with the shard map"));
    assert_non_null(strstr(r.err, "configured map (mysql.shards)"));
    assert_non_null(strstr(r.err, "recorded map (table ow_shard_map"));
    if (strstr(r.err, recorded) == NULL)
        fail_msg("stderr lacks \"%s\":\n%s", recorded, r.err);
    testcli_result_free(&r);
}

static void test_run_refuses_other_maps(void **state)
{
    static const unsigned reordered[] = {1, 0, 2};
    static const unsigned missing[] = {0, 1};
    static const unsigned extra[] = {0, 1, 2, 3};
    char name[300], want[400];

    (void)state;
    migrate3();
    shard_entry(name, sizeof(name), 1);
    snprintf(want, sizeof(want), "shard 0 (%s): 4096 buckets over 3 shards, recorded as shard 1",
             name);
    refused(reordered, 3, NULL, want);
    refused(missing, 2, NULL, "configured map (mysql.shards): 4096 buckets over 2 shards");
    shard_entry(name, sizeof(name), 3);
    snprintf(want, sizeof(want), "shard 3 (%s): no map recorded", name);
    refused(extra, 4, NULL, want);
    refused(order3, 3, "ORDER_WORKER_MYSQL_SHARD_BUCKETS=1024",
            "configured map (mysql.shards): 1024 buckets over 3 shards");
}

/* A user id whose shard under 3 shards is `want`. */
static int64_t user_on(unsigned want)
{
    for (int64_t u = 1000;; u++) {
        if (ow_shard_of_user(u, 4096, 3) == want)
            return u;
    }
}

static void decide_on(unsigned shard, int64_t user, const char *key)
{
    char value[200];
    ow_store *s = testdb_store(&dbs[shard], &ids, 5);
    testmsg m;

    snprintf(value, sizeof(value),
             "{\"user_id\":%lld,\"orders\":[{\"external_order_no\":\"%s-1\",\"amount\":\"1.50\"}]}",
             (long long)user, key);
    testmsg_make(&m, key, value);
    assert_int_equal(testmsg_decide(s, &m), OW_DECISION_CREATED);
    testmsg_free(&m);
    ow_store_free(&s);
}

static void test_lookup_reads_the_users_shard(void **state)
{
    int64_t u2 = user_on(2);
    char user[32], list[1200];
    const char *args[] = {"lookup", "--user", user, "--key", "lk-1", NULL};
    testcli_result r;

    (void)state;
    migrate3();
    shard_list(list, sizeof(list), order3, 3);
    snprintf(user, sizeof(user), "%lld", (long long)u2);
    /* On its own shard: found. */
    decide_on(2, u2, "lk-1");
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "\"idempotency_key\": \"lk-1\""));
    testcli_result_free(&r);
    /* A row of the same user on another shard is never consulted. */
    args[4] = "lk-2";
    decide_on(0, u2, "lk-2");
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 3);
    testcli_result_free(&r);
}

static void test_audit_reports_each_shard(void **state)
{
    static const char *const args[] = {"audit", NULL};
    char list[1200], head[400], name[300];
    testcli_result r;
    const char *at2;

    (void)state;
    migrate3();
    shard_list(list, sizeof(list), order3, 3);
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 0);
    testcli_result_free(&r);
    /* A FAILED request owning an order, on shard 2 only. */
    testdb_exec(&dbs[2], "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                         "request_digest, status, response_status, response_body) VALUES "
                         "(77, 5, 'bad', UNHEX(SHA2('bad', 256)), 'FAILED', 409, '{}')");
    testdb_exec(&dbs[2], "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, "
                         "quantity, request_id) VALUES (77, 'OW-T77', 5, 'x', 1.00, 1, 77)");
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 4);
    shard_entry(name, sizeof(name), 2);
    snprintf(head, sizeof(head), "audit: shard 2 (%s)", name);
    at2 = strstr(r.out, head);
    assert_non_null(at2);
    /* The finding is reported under shard 2's header, not before it. */
    assert_true(strstr(r.out, "FAIL FAILED requests owning orders") > at2);
    assert_non_null(strstr(at2, "FAIL FAILED requests owning orders: 1 finding(s)"));
    testcli_result_free(&r);
    testdb_exec(&dbs[2], "DELETE FROM orders WHERE id = 77");
    testdb_exec(&dbs[2], "DELETE FROM idempotency_requests WHERE id = 77");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_records_each_map),
        cmocka_unit_test(test_run_refuses_other_maps),
        cmocka_unit_test(test_lookup_reads_the_users_shard),
        cmocka_unit_test(test_audit_reports_each_shard),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
