/*
 * The operator subcommands end to end: one real worker process, a real
 * broker and MariaDB, and the built binary run as an operator would run it.
 * send --wait gets the 201 and then the byte-identical replay; lookup shows
 * the record (and exits 3 for an unknown key); audit passes; config --print
 * hides the password; bad arguments exit 2.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "kit.h"
#include "testcli.h"
#include "teststack.h"

#define CLI_TIMEOUT_MS 120000

static teststack ts;
static testenv env;
static pid_t worker;
static char *first_result; /* stdout of the first send --wait */

static const char *const batch =
    "{\"user_id\":4242,\"orders\":[{\"external_order_no\":\"CLI-1\",\"amount\":\"19.90\","
    "\"product_id\":101},{\"external_order_no\":\"CLI-2\",\"amount\":5,\"quantity\":2}]}";

/* Runs the binary with the test's environment, extra (may be NULL) on top. */
static testcli_result cli(const char *const *args, const char *in, const char *extra)
{
    char *argv[16];
    char *envp[TESTENV_MAX + 2];
    testcli_result r;
    size_t n = 0;
    int e = 0;

    argv[n++] = (char *)test_env("OW_TEST_WORKER_BIN");
    while (*args != NULL && n < 15)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    for (; e < env.n; e++)
        envp[e] = env.envp[e];
    envp[e++] = (char *)extra;
    envp[e] = NULL;
    if (testcli_run(argv, envp, in, in != NULL ? strlen(in) : 0, CLI_TIMEOUT_MS, &r) != 0)
        fail_msg("cannot run %s", argv[0]);
    return r;
}

static int setup(void **state)
{
    char log[300];

    (void)state;
    teststack_create(&ts, "cli", "ow_e2e_cli", 2);
    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=6000");
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=500");
    teststack_log(&ts, "cli-worker.log", log, sizeof(log));
    worker = teststack_spawn(&env, log);
    print_message("cli e2e: broker %s, topics %s/%s, database %s, worker log %s\n", ts.bootstrap,
                  ts.topic_in, ts.topic_out, ts.db.database, log);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (worker > 0) {
        kill(worker, SIGTERM);
        if (kit_wait(worker, 20000) < 0) {
            kill(worker, SIGKILL);
            kit_wait(worker, 5000);
        }
    }
    testdb_drop(&ts.db);
    free(first_result);
    return 0;
}

static json_t *parse_json(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);

    if (j == NULL)
        fail_msg("not JSON (%s): %s", jerr.text, text);
    return j;
}

static void test_send_wait_created(void **state)
{
    static const char *const args[] = {"send", "--user", "4242", "--key", "cli-e2e-1", "--wait",
                                       "--timeout-ms", "90000", NULL};
    testcli_result r = cli(args, batch, NULL);
    json_t *j;

    (void)state;
    if (r.status != 0)
        fail_msg("send --wait: status %d\n%s", r.status, r.err);
    assert_non_null(strstr(r.err, "sent: partition "));
    assert_non_null(strstr(r.err, "replayed: false\n"));
    assert_non_null(strstr(r.err, "source-offset: "));
    assert_true(r.out_len > 0);
    assert_ptr_equal(strchr(r.out, '\n'), r.out + r.out_len - 1); /* one line */
    j = parse_json(r.out);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 201);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "CREATED");
    assert_int_equal(json_array_size(json_object_get(j, "orders")), 2);
    json_decref(j);
    first_result = strdup(r.out);
    testcli_result_free(&r);
}

static void test_send_wait_replayed(void **state)
{
    static char path[300];
    const char *const args[] = {"send", "--user", "4242", "--key", "cli-e2e-1", path, "--wait",
                                NULL};
    testcli_result r;
    FILE *f;

    (void)state;
    assert_non_null(first_result);
    snprintf(path, sizeof(path), "%s/cli-e2e-batch-%d.json", ts.logdir, (int)getpid());
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(batch, f);
    fclose(f);
    r = cli(args, NULL, NULL);
    unlink(path);
    if (r.status != 0)
        fail_msg("send --wait (again): status %d\n%s", r.status, r.err);
    assert_non_null(strstr(r.err, "replayed: true\n"));
    assert_string_equal(r.out, first_result); /* byte for byte */
    testcli_result_free(&r);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM idempotency_requests"), 1);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders"), 2);
}

static void test_send_wait_invalid_input(void **state)
{
    static const char *const args[] = {"send", "--user", "4242", "--key", "cli-e2e-bad", "--wait",
                                       NULL};
    testcli_result r = cli(args, "{\"user_id\":4242,\"orders\":[]}", NULL);
    json_t *j;

    (void)state;
    /* The result arrived: exit 0, whatever its status. */
    if (r.status != 0)
        fail_msg("send --wait (invalid): status %d\n%s", r.status, r.err);
    j = parse_json(r.out);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 400);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "INVALID_REQUEST");
    json_decref(j);
    testcli_result_free(&r);
}

/* An empty document is sent as an empty value ("byte for byte"),
 * not as a tombstone (a null value). */
static void test_send_empty_document(void **state)
{
    static const char *const args[] = {"send", "--user", "4242", "--key", "cli-e2e-empty", NULL};
    testcli_result r = cli(args, "", NULL);
    kit_msgs in = {0};
    const kit_msg *sent = NULL;

    (void)state;
    if (r.status != 0)
        fail_msg("send (empty): status %d\n%s", r.status, r.err);
    testcli_result_free(&r);
    kit_read_topic(ts.bootstrap, ts.topic_in, 20000, &in);
    for (size_t i = 0; i < in.n; i++)
        if (in.v[i].key_len == 13 && memcmp(in.v[i].key, "cli-e2e-empty", 13) == 0)
            sent = &in.v[i];
    assert_non_null(sent);
    assert_int_equal(sent->len, 0);
    assert_false(sent->value_null);
    kit_msgs_free(&in);
}

static void test_lookup(void **state)
{
    static const char *const found[] = {"lookup", "--user", "4242", "--key", "cli-e2e-1", NULL};
    static const char *const unknown[] = {"lookup", "--user", "4242", "--key", "cli-e2e-none",
                                          NULL};
    testcli_result r = cli(found, NULL, NULL);
    json_t *j, *first;

    (void)state;
    if (r.status != 0)
        fail_msg("lookup: status %d\n%s", r.status, r.err);
    j = parse_json(r.out);
    first = parse_json(first_result);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "response_status")), 201);
    assert_string_equal(json_string_value(json_object_get(j, "request_digest")),
                        json_string_value(json_object_get(first, "request_digest")));
    assert_int_equal(json_array_size(json_object_get(j, "orders")), 2);
    assert_true(json_equal(json_object_get(j, "response"), first));
    json_decref(first);
    json_decref(j);
    testcli_result_free(&r);

    r = cli(unknown, NULL, NULL);
    assert_int_equal(r.status, 3);
    assert_non_null(strstr(r.err, "no request for user 4242 with key cli-e2e-none"));
    testcli_result_free(&r);
}

static void test_audit_passes(void **state)
{
    static const char *const args[] = {"audit", NULL};
    testcli_result r = cli(args, NULL, NULL);

    (void)state;
    if (r.status != 0)
        fail_msg("audit: status %d\n%s%s", r.status, r.out, r.err);
    assert_non_null(strstr(r.out, "audit: idempotency_requests 1 rows, orders 2 rows"));
    testcli_result_free(&r);
}

static void test_config_print_redacts(void **state)
{
    static const char *const args[] = {"config", "--print", NULL};
    testcli_result r = cli(args, NULL, "ORDER_WORKER_MYSQL_PASSWORD=secret-value");

    (void)state;
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "secret-value"));
    assert_null(strstr(r.err, "secret-value"));
    assert_non_null(strstr(r.out, "mysql.password = (redacted)"));
    assert_non_null(strstr(r.out, ts.topic_in)); /* the environment's values are shown */
    testcli_result_free(&r);
}

static void test_bad_arguments(void **state)
{
    static const char *const a1[] = {"lookup", "--user", "x", "--key", "k", NULL};
    static const char *const a2[] = {"send", "--user", "4242", NULL};
    static const char *const a3[] = {"purge", "--older-than", "0d", NULL};
    static const char *const a4[] = {"audit", "--verbose", NULL};
    static const char *const a5[] = {"send", "--user", "1", "--key", "k", NULL};
    static const char *const *const cases[] = {a1, a2, a3, a4, a5};
    static const char *const stderr_has[] = {"--user", "--key", "--older-than", "--verbose",
                                             "user_id is 4242 but --user is 1"};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        testcli_result r = cli(cases[i], batch, NULL);

        if (r.status != 2 || strstr(r.err, stderr_has[i]) == NULL)
            fail_msg("case %zu: status %d, stderr: %s", i, r.status, r.err);
        testcli_result_free(&r);
    }
    /* Nothing reached the database. */
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM idempotency_requests"), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_send_wait_created),
        cmocka_unit_test(test_send_wait_replayed),
        cmocka_unit_test(test_send_wait_invalid_input),
        cmocka_unit_test(test_send_empty_document),
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_audit_passes),
        cmocka_unit_test(test_config_print_redacts),
        cmocka_unit_test(test_bad_arguments),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
