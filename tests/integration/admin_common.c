/* The integration tests' shared part for the operator subcommands
 * (admin_common.h). */
#include "admin_common.h"

#include <stdio.h>
#include <string.h>

#include "ow/util.h"

testdb db;
ow_idgen ids;

const char *const lookup_value =
    "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"L-1\",\"amount\":\"19.9\","
    "\"product_id\":101},{\"external_order_no\":\"L-2\",\"amount\":5,\"quantity\":3}]}";

/* --- Helpers ---------------------------------------------------------------- */

void record(ow_store *s, const char *key, const char *value, ow_decision want)
{
    testmsg m;

    testmsg_make(&m, key, value);
    assert_int_equal(testmsg_decide(s, &m), want);
    testmsg_free(&m);
}

long long count(testdb *t, const char *sql)
{
    return testdb_count(t, sql);
}

testcli_result cli_for(testdb *t, const char *const *args, int timeout_ms)
{
    char env[5][200];
    char *envp[6];
    char *argv[16];
    testcli_result r;
    size_t n = 0;

    if (testcli_bin() == NULL)
        fail_msg("OW_TEST_WORKER_BIN is not set: run the tests through ctest");
    snprintf(env[0], sizeof(env[0]), "ORDER_WORKER_MYSQL_HOST=%s", t->host);
    snprintf(env[1], sizeof(env[1]), "ORDER_WORKER_MYSQL_PORT=%u", t->port);
    snprintf(env[2], sizeof(env[2]), "ORDER_WORKER_MYSQL_USER=%s", t->user);
    snprintf(env[3], sizeof(env[3]), "ORDER_WORKER_MYSQL_PASSWORD=%s", t->password);
    snprintf(env[4], sizeof(env[4]), "ORDER_WORKER_MYSQL_DATABASE=%s", t->database);
    for (int i = 0; i < 5; i++)
        envp[i] = env[i];
    envp[5] = NULL;
    argv[n++] = (char *)testcli_bin();
    while (*args != NULL && n < 15)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    if (testcli_run(argv, envp, NULL, 0, timeout_ms, &r) != 0)
        fail_msg("cannot run %s", argv[0]);
    return r;
}

testcli_result cli(testdb *t, const char *const *args)
{
    return cli_for(t, args, 60000);
}

int setup(void **state)
{
    (void)state;
    testdb_exec(&db, "DELETE FROM orders");
    testdb_exec(&db, "DELETE FROM idempotency_requests");
    return 0;
}

int admin_main(const char *prefix, const struct CMUnitTest *tests, size_t n)
{
    int rc;

    mysql_library_init(0, NULL, NULL);
    ow_idgen_init(&ids, 2, ow_clock_wall_ms);
    testdb_create(&db, prefix);
    rc = _cmocka_run_group_tests(prefix, tests, n, NULL, NULL);
    testdb_drop(&db);
    mysql_library_end();
    return rc;
}
