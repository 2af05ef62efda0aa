/*
 * Input that vanishes or appears upstream, with the built worker against
 * the real broker:
 *   - records the broker deleted (DeleteRecords) before the worker read
 *     them, while it was stopped and while it held its input paused: one
 *     error line with the exact range, the counter, and every other message
 *     answered;
 *   - transactional copies of the input, committed and aborted, then
 *     quiet: the lag metric, `ow-kit lag` and ow-verify's I4 reach 0, in
 *     both processing guarantees;
 *   - partitions added to the input while a worker runs are consumed
 *     within a bound far below librdkafka's default metadata refresh
 *     (5 minutes).
 * The MariaDB of the run is stopped and started again with
 * scripts/services.sh (OW_RUN_DIR) in the second case.
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
#include "testcli.h"
#include "teststack.h"
#include "testport.h"

/* The running worker of the current test, its metrics port and log. */
static pid_t worker;
static unsigned port;
static char log_path[300];
static int database_stopped;

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The worker's /metrics into out; 0 when it did not answer. */
static int scrape(char *out, size_t outsz)
{
    char cmd[160];
    FILE *p;
    size_t n;

    snprintf(cmd, sizeof(cmd), "curl -sf --max-time 5 http://127.0.0.1:%u/metrics", port);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(out, 1, outsz - 1, p);
    out[n] = '\0';
    return pclose(p) == 0 && n > 0;
}

/* The value of the metric line that starts with name (labels included);
 * -1 when the worker does not answer or has no such line. */
static long long metric(const char *name)
{
    static char body[1 << 17];
    size_t n = strlen(name);

    if (!scrape(body, sizeof(body)))
        return -1;
    for (const char *p = body; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtoll(p + n + 1, NULL, 10);
        p = strchr(p, '\n');
        p = p != NULL ? p + 1 : NULL;
    }
    return -1;
}

/* Waits up to timeout_s for metric name to reach want. */
static void await_metric(const char *name, long long want, int timeout_s)
{
    long long v = -1;

    for (int i = 0; i < timeout_s * 4 && (v = metric(name)) != want; i++)
        usleep(250000);
    if (v != want)
        fail_msg("%s is %lld after %d s, not %lld (see %s)", name, v, timeout_s, want, log_path);
}

static void services(const char *what)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "OW_RUN_DIR='%s' '%s/scripts/services.sh' %s >/dev/null",
             test_env("OW_RUN_DIR"), OW_SOURCE_DIR, what);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
}

/* Starts a worker for s with the extra NAME=value settings (NULL-ended). */
static void start_worker(const teststack *s, const char *log, const char *const *extra)
{
    testenv env;

    testenv_worker(&env, s);
    testenv_add(&env, "ORDER_WORKER_METRICS_PORT=%u", port);
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=300");
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        testenv_add(&env, "%s", extra[i]);
    teststack_log(s, log, log_path, sizeof(log_path));
    unlink(log_path);
    worker = teststack_spawn(&env, log_path);
}

static void stop_worker(void)
{
    int status;

    assert_int_equal(kill(worker, SIGTERM), 0);
    status = kit_wait(worker, 30000);
    if (status != 0)
        fail_msg("the worker exited with %d after SIGTERM (see %s)", status, log_path);
    worker = 0;
}

/* A valid request of user 77 under key prefix-i. */
static void request(const char *prefix, int i, char *key, size_t ksz, char *value, size_t vsz)
{
    snprintf(key, ksz, "%s-%d", prefix, i);
    snprintf(value, vsz,
             "{\"user_id\":77,\"orders\":[{\"external_order_no\":\"%s-%d\",\"amount\":\"1.00\"}]}",
             prefix, i);
}

/* Produces the requests prefix-from .. prefix-(to - 1) to one partition. */
static void produce(const teststack *s, int32_t partition, const char *prefix, int from, int to)
{
    rd_kafka_t *p = kit_producer(s->bootstrap, NULL);

    assert_non_null(p);
    for (int i = from; i < to; i++) {
        char key[64], value[200];

        request(prefix, i, key, sizeof(key), value, sizeof(value));
        assert_int_equal(
            kit_produce(p, s->topic_in, partition, key, strlen(key), value, strlen(value)), 0);
    }
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
}

/* Marks in got[offset] the input offsets of one partition that have a
 * result (at most n). */
static void answered(const teststack *s, int32_t partition, int *got, int n)
{
    kit_msgs results = {0};

    memset(got, 0, (size_t)n * sizeof(*got));
    assert_int_equal(kit_read_topic(s->bootstrap, s->topic_out, 30000, &results), 0);
    for (size_t i = 0; i < results.n; i++) {
        char part[24], off[24];
        long long o;

        if (!kit_header(&results.v[i], "source-partition", part, sizeof(part)) ||
            !kit_header(&results.v[i], "source-offset", off, sizeof(off)) ||
            strtol(part, NULL, 10) != partition)
            continue;
        o = strtoll(off, NULL, 10);
        if (o >= 0 && o < n)
            got[o] = 1;
    }
    kit_msgs_free(&results);
}

static int occurrences(const char *hay, const char *needle)
{
    int n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* The worker's one error line for the deleted range, and its counter. */
static void assert_skipped(const teststack *s, long long first, long long last)
{
    char line[400];
    char *log = teststack_read_file(log_path, NULL);

    snprintf(line, sizeof(line),
             "\"level\":\"error\",\"event\":\"input_skipped\",\"topic\":\"%s\",\"partition\":0,"
             "\"first_offset\":%lld,\"last_offset\":%lld,\"offsets\":%lld,",
             s->topic_in, first, last, last - first + 1);
    if (strstr(log, line) == NULL)
        fail_msg("%s has no line with %s", log_path, line);
    assert_int_equal(occurrences(log, "\"event\":\"input_skipped\""), 1);
    free(log);
    assert_int_equal(metric("order_worker_input_skipped_offsets_total"), last - first + 1);
}

/* Exactly the offsets of partition 0 below n that are not in
 * [gone_from, gone_to) have a result. */
static void assert_answered_except(const teststack *s, int n, int gone_from, int gone_to)
{
    int got[128];

    assert_true(n <= 128);
    answered(s, 0, got, n);
    for (int o = 0; o < n; o++) {
        int want = o < gone_from || o >= gone_to;

        if (got[o] != want)
            fail_msg("offset %d: %s (deleted: %d to %d)", o, got[o] ? "answered" : "no result",
                     gone_from, gone_to - 1);
    }
}

static int teardown(void **state)
{
    (void)state;
    if (worker > 0)
        kill(worker, SIGKILL);
    worker = 0;
    if (database_stopped)
        services("mariadb-up");
    database_stopped = 0;
    return 0;
}

static void drop(teststack *s)
{
    /* A connection made before the database restarted is gone. */
    mysql_close(s->db.admin);
    s->db.admin = testdb_connect(&s->db);
    testdb_drop(&s->db);
}

/* Committed at 10 when the worker stops; DeleteRecords to 60; the worker
 * starts again: 10 to 59 are reported, 60 to 69 decided. */
static void test_deleted_while_stopped(void **state)
{
    teststack s;

    (void)state;
    teststack_create(&s, "gone", "ow_gone", 1);
    port = testport_free();
    start_worker(&s, "gone-1.log", NULL);
    produce(&s, 0, "gone", 0, 10);
    teststack_await_committed(&s, 1, 60, log_path);
    stop_worker();
    produce(&s, 0, "gone", 10, 70);
    assert_int_equal(kit_delete_records(s.bootstrap, s.topic_in, 0, 60), 0);
    start_worker(&s, "gone-2.log", NULL);
    teststack_await_committed(&s, 1, 60, log_path);
    assert_skipped(&s, 10, 59);
    assert_answered_except(&s, 70, 10, 60);
    stop_worker();
    drop(&s);
}

/* The worker holds 2 to 4 while its database is down, its input paused at
 * inflight.max_messages = 3; DeleteRecords to 12; when the database is back
 * it decides 2 to 4, resumes at 5, which is gone (librdkafka's own offset
 * reset), and reports 5 to 11. */
static void test_deleted_while_paused(void **state)
{
    static const char *const extra[] = {"ORDER_WORKER_INFLIGHT_MAX_MESSAGES=3",
                                        "ORDER_WORKER_MYSQL_CONNECT_TIMEOUT_S=1", NULL};
    teststack s;

    (void)state;
    teststack_create(&s, "paused", "ow_paused", 1);
    port = testport_free();
    start_worker(&s, "paused.log", extra);
    produce(&s, 0, "paused", 0, 2);
    teststack_await_committed(&s, 1, 60, log_path);
    database_stopped = 1;
    services("mariadb-down");
    await_metric("order_worker_database_up", 0, 30);
    produce(&s, 0, "paused", 2, 22);
    await_metric("order_worker_input_paused", 1, 30);
    assert_int_equal(metric("order_worker_messages_consumed_total"), 5);
    assert_int_equal(kit_delete_records(s.bootstrap, s.topic_in, 0, 12), 0);
    services("mariadb-up");
    database_stopped = 0;
    teststack_await_committed(&s, 1, 90, log_path);
    assert_skipped(&s, 5, 11);
    assert_answered_except(&s, 22, 5, 12);
    stop_worker();
    drop(&s);
}

/* Copies of two input messages in a committed transaction and of two in
 * an aborted one, as another service's transactional producer makes them:
 * the partition ends with an abort marker after two aborted records. */
static void copy_in_transactions(const teststack *s, const char *prefix)
{
    char conf[200];
    rd_kafka_t *p;

    snprintf(conf, sizeof(conf), "transactional.id=%s-copier", s->topic_in);
    p = kit_producer(s->bootstrap, conf);
    assert_non_null(p);
    assert_null(rd_kafka_init_transactions(p, 30000));
    for (int t = 0; t < 2; t++) {
        assert_null(rd_kafka_begin_transaction(p));
        for (int i = 0; i < 2; i++) {
            char key[64], value[200];

            request(prefix, (t + i) % 3, key, sizeof(key), value, sizeof(value));
            assert_int_equal(kit_produce(p, s->topic_in, 0, key, strlen(key), value, strlen(value)),
                             0);
        }
        assert_int_equal(kit_flush(p, 30000), 0);
        if (t == 0)
            assert_null(rd_kafka_commit_transaction(p, 30000));
        else
            assert_null(rd_kafka_abort_transaction(p, 30000));
    }
    rd_kafka_destroy(p);
}

/* Waits up to 30 s for partition 0 of the input to end at want, as a
 * read_committed reader sees it (its ListOffsets answer is the last stable
 * offset), and fails naming the end it read last. A producer's commit or
 * abort returns as soon as the transaction coordinator has logged the
 * decision; the coordinator writes the markers to the partitions after
 * that, so for a moment the input can still end where the aborted
 * transaction began. */
static void await_input_end(const teststack *s, int64_t want)
{
    int64_t end = -1;
    long long t0 = now_ms();

    for (;;) {
        assert_int_equal(kit_end_offsets(s->bootstrap, s->topic_in, &end, 1), 1);
        if (end == want || now_ms() - t0 >= 30000)
            break;
        usleep(50000);
    }
    if (end != want)
        fail_msg("the input ends at %lld after %lld ms, not %lld", (long long)end, now_ms() - t0,
                 (long long)want);
}

/* `ow-kit lag`'s exit status (0: caught up) and its total. */
static int kit_lag(const teststack *s, long long *total)
{
    char *argv[] = {(char *)test_env("OW_TEST_KIT_BIN"),
                    "lag",
                    (char *)s->bootstrap,
                    (char *)s->group,
                    (char *)s->topic_in,
                    NULL};
    testcli_result r;
    const char *t;
    int status;

    assert_int_equal(testcli_run(argv, NULL, NULL, 0, 60000, &r), 0);
    t = strstr(r.out, "total lag ");
    *total = t != NULL ? strtoll(t + 10, NULL, 10) : -1;
    status = r.status;
    testcli_result_free(&r);
    return status;
}

/* Input 0 to 2, then copies in transactions (3 and 4 committed, marker 5;
 * 6 and 7 aborted, marker 8), then nothing: the lag metric, `ow-kit lag`
 * and ow-verify's I4 must all reach 0, which needs the group's offset past
 * the markers. */
static void lag_behind_markers(const char *prefix, const char *const *extra)
{
    teststack s;
    char lag_name[200], port_arg[16], log[64];
    long long lag = -1, kit_total = -1, t0;
    int kit_status = -1;
    int64_t committed = -1;
    testcli_result r;

    teststack_create(&s, prefix, prefix, 1);
    port = testport_free();
    snprintf(log, sizeof(log), "%s.log", prefix);
    start_worker(&s, log, extra);
    produce(&s, 0, prefix, 0, 3);
    copy_in_transactions(&s, prefix);
    await_input_end(&s, 9);
    snprintf(lag_name, sizeof(lag_name), "order_worker_consumer_lag{topic=\"%s\",partition=\"0\"}",
             s.topic_in);
    t0 = now_ms();
    while ((lag != 0 || kit_status != 0) && now_ms() - t0 < 60000) {
        usleep(250000);
        lag = metric(lag_name);
        kit_status = kit_lag(&s, &kit_total);
    }
    print_message("lag after %lld ms: metric %lld, ow-kit lag %lld (exit %d)\n", now_ms() - t0, lag,
                  kit_total, kit_status);
    assert_int_equal(lag, 0);
    assert_int_equal(kit_total, 0);
    assert_int_equal(kit_status, 0);
    assert_int_equal(kit_committed(s.bootstrap, s.group, s.topic_in, 1, &committed), 0);
    assert_int_equal(committed, 9);
    {
        char *argv[] = {(char *)test_env("OW_TEST_VERIFY_BIN"),
                        "--bootstrap",
                        s.bootstrap,
                        "--group",
                        s.group,
                        "--input",
                        s.topic_in,
                        "--results",
                        s.topic_out,
                        "--dlq",
                        s.topic_dlq,
                        "--mysql-host",
                        s.db.host,
                        "--mysql-port",
                        port_arg,
                        "--mysql-user",
                        s.db.user,
                        "--mysql-password",
                        s.db.password,
                        "--database",
                        s.db.database,
                        NULL};

        snprintf(port_arg, sizeof(port_arg), "%u", s.db.port);
        assert_int_equal(testcli_run(argv, NULL, NULL, 0, 120000, &r), 0);
        if (r.status != 0 ||
            strstr(r.out, "verify: ok   I4 committed offsets reach the end of every partition") ==
                NULL)
            fail_msg("ow-verify exited with %d:\n%s%s", r.status, r.out, r.err);
        testcli_result_free(&r);
    }
    stop_worker();
    drop(&s);
}

static void test_lag_behind_markers_at_least_once(void **state)
{
    (void)state;
    lag_behind_markers("marks", NULL);
}

static void test_lag_behind_markers_exactly_once(void **state)
{
    static const char *const extra[] = {"ORDER_WORKER_PROCESSING_GUARANTEE=exactly_once_v2",
                                        "ORDER_WORKER_WORKER_REPLICA_ID=r1", NULL};

    (void)state;
    lag_behind_markers("marks_eos", extra);
}

/* One partition, then three while the worker runs: the new partitions'
 * messages are answered within 60 s. */
static void test_added_partitions(void **state)
{
    teststack s;
    int got[2] = {0, 0};
    long long t0;

    (void)state;
    teststack_create(&s, "grow", "ow_grow", 1);
    port = testport_free();
    start_worker(&s, "grow.log", NULL);
    produce(&s, 0, "grow", 0, 1);
    teststack_await_committed(&s, 1, 60, log_path);
    assert_int_equal(kit_create_partitions(s.bootstrap, s.topic_in, 3), 0);
    t0 = now_ms();
    produce(&s, 1, "grow", 1, 2);
    produce(&s, 2, "grow", 2, 3);
    while ((!got[0] || !got[1]) && now_ms() - t0 < 60000) {
        int one;

        sleep(1);
        answered(&s, 1, &one, 1);
        got[0] = one;
        answered(&s, 2, &one, 1);
        got[1] = one;
    }
    if (!got[0] || !got[1])
        fail_msg("partitions 1 and 2 answered: %d, %d after %lld ms (see %s)", got[0], got[1],
                 now_ms() - t0, log_path);
    print_message("added partitions answered after %lld ms\n", now_ms() - t0);
    stop_worker();
    drop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_deleted_while_stopped, teardown),
        cmocka_unit_test_teardown(test_deleted_while_paused, teardown),
        cmocka_unit_test_teardown(test_lag_behind_markers_at_least_once, teardown),
        cmocka_unit_test_teardown(test_lag_behind_markers_exactly_once, teardown),
        cmocka_unit_test_teardown(test_added_partitions, teardown),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
