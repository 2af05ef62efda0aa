/*
 * The operations endpoint during an end-to-end run: /metrics is scraped with
 * curl after a known mix has been processed and must show what the run
 * produced; /healthz and /readyz answer for a healthy replica and for one
 * whose database is unreachable.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kit.h"
#include "teststack.h"
#include "testport.h"

#define PARTITIONS 3

static teststack ts;
static pid_t good, bad;
static unsigned good_port, bad_port;

/* GETs a URL with curl; returns the HTTP status and the body in out. */
static int http_get(unsigned port, const char *path, char *out, size_t outsz)
{
    char cmd[256];
    FILE *p;
    size_t n;
    char *nl;
    int status;

    snprintf(cmd, sizeof(cmd), "curl -s --max-time 5 -w '\\n%%{http_code}' http://127.0.0.1:%u%s",
             port, path);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, outsz - 1, p);
    out[n] = '\0';
    pclose(p);
    nl = strrchr(out, '\n');
    if (nl == NULL)
        return -1;
    status = atoi(nl + 1);
    *nl = '\0';
    return status;
}

/* The value of the first metric line that starts with name (labels included). */
static double metric(const char *text, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    fail_msg("metric %s not found", name);
    return -1;
}

/* A replica in its own group with its own metrics port; mysql_port may be
 * closed. */
static pid_t start(const char *group, unsigned port, unsigned mysql_port, const char *log)
{
    testenv env;
    char path[300];

    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_KAFKA_GROUP_ID=%s", group);
    testenv_add(&env, "ORDER_WORKER_MYSQL_PORT=%u", mysql_port);
    testenv_add(&env, "ORDER_WORKER_METRICS_PORT=%u", port);
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=300");
    testenv_add(&env, "ORDER_WORKER_MYSQL_CONNECT_TIMEOUT_S=1");
    teststack_log(&ts, log, path, sizeof(path));
    return teststack_spawn(&env, path);
}

static int setup(void **state)
{
    char group[128];

    (void)state;
    teststack_create(&ts, "metrics", "ow_metrics", PARTITIONS);
    good_port = testport_free();
    bad_port = testport_free();
    good = start(ts.group, good_port, ts.db.port, "metrics-good.log");
    /* The second replica's database port is closed: it must say so. */
    snprintf(group, sizeof(group), "%s-bad", ts.group);
    bad = start(group, bad_port, testport_free(), "metrics-bad.log");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (good > 0)
        kill(good, SIGKILL);
    if (bad > 0)
        kill(bad, SIGKILL);
    testdb_drop(&ts.db);
    return 0;
}

static void test_metrics_after_a_known_mix(void **state)
{
    rd_kafka_t *p = kit_producer(ts.bootstrap, NULL);
    static char body[65536];

    (void)state;
    for (int i = 0; i < 10; i++) {
        char key[32], value[160];

        snprintf(key, sizeof(key), "m-%d", i);
        snprintf(
            value, sizeof(value),
            "{\"user_id\":5,\"orders\":[{\"external_order_no\":\"M-%d\",\"amount\":\"1.00\"}]}", i);
        assert_int_equal(kit_produce(p, ts.topic_in, -1, key, strlen(key), value, strlen(value)),
                         0);
        if (i < 5) /* a retry of the same request */
            assert_int_equal(
                kit_produce(p, ts.topic_in, -1, key, strlen(key), value, strlen(value)), 0);
    }
    for (int i = 0; i < 3; i++) {
        char key[32];

        snprintf(key, sizeof(key), "bad-%d", i);
        assert_int_equal(kit_produce(p, ts.topic_in, -1, key, strlen(key), "{oops", 5), 0);
    }
    assert_int_equal(kit_produce(p, ts.topic_in, -1, NULL, 0, "{}", 2), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
    teststack_await_committed(&ts, PARTITIONS, 60, "see metrics-good.log");
    assert_int_equal(http_get(good_port, "/metrics", body, sizeof(body)), 200);
    /* Exactly what this run produced (one replica, nothing redelivered). */
    assert_int_equal(metric(body, "order_worker_messages_consumed_total"), 19);
    assert_int_equal(metric(body, "order_worker_results_total{status=\"201\",code=\"CREATED\"}"),
                     15);
    assert_int_equal(metric(body, "order_worker_replays_total"), 5);
    assert_int_equal(
        metric(body, "order_worker_results_total{status=\"400\",code=\"INVALID_REQUEST\"}"), 3);
    assert_int_equal(metric(body, "order_worker_dead_lettered_total"), 4);
    assert_int_equal(metric(body, "order_worker_inflight_messages"), 0);
    assert_true(metric(body, "order_worker_db_transactions_total") >= 1);
    assert_true(metric(body, "order_worker_db_transaction_seconds_count") >= 1);
    assert_int_equal(metric(body, "order_worker_end_to_end_seconds_count"), 19);
    assert_true(metric(body, "order_worker_offsets_stored_total") >= 1);
    /* The periodic commits that moved the group's offsets are counted;
     * their callback runs at the next poll. */
    for (int i = 0; i < 50 && metric(body, "order_worker_offset_commits_total") < 1; i++) {
        usleep(200000);
        assert_int_equal(http_get(good_port, "/metrics", body, sizeof(body)), 200);
    }
    assert_true(metric(body, "order_worker_offset_commits_total") >= 1);
    assert_int_equal(metric(body, "order_worker_offset_commit_failures_total"), 0);
    assert_int_equal(metric(body, "order_worker_assigned_partitions"), PARTITIONS);
    assert_int_equal(metric(body, "order_worker_database_up"), 1);
    for (int k = 0; k < PARTITIONS; k++) {
        char name[200];

        snprintf(name, sizeof(name), "order_worker_consumer_lag{topic=\"%s\",partition=\"%d\"}",
                 ts.topic_in, k);
        assert_int_equal(metric(body, name), 0);
    }
    assert_int_equal(http_get(good_port, "/healthz", body, sizeof(body)), 200);
    assert_int_equal(http_get(good_port, "/readyz", body, sizeof(body)), 200);
    assert_int_equal(http_get(good_port, "/nope", body, sizeof(body)), 404);
}

static void test_unready_without_database(void **state)
{
    static char body[65536];
    int status = 0;

    (void)state;
    /* Alive, but not ready, and it says why. */
    for (int waited = 0; waited < 40 && status != 503; waited++) {
        if (http_get(bad_port, "/healthz", body, sizeof(body)) == 200)
            status = http_get(bad_port, "/readyz", body, sizeof(body));
        if (status != 503)
            usleep(250000);
    }
    assert_int_equal(status, 503);
    assert_non_null(strstr(body, "database unreachable"));
    assert_int_equal(http_get(bad_port, "/metrics", body, sizeof(body)), 200);
    assert_int_equal(metric(body, "order_worker_database_up"), 0);
}

static void test_sigterm(void **state)
{
    (void)state;
    kill(good, SIGTERM);
    kill(bad, SIGTERM);
    assert_int_equal(kit_wait(good, 30000), 0);
    assert_int_equal(kit_wait(bad, 30000), 0);
    good = bad = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_after_a_known_mix),
        cmocka_unit_test(test_unready_without_database),
        cmocka_unit_test(test_sigterm),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
