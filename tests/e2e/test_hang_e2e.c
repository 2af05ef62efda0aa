/*
 * A broker or a worker that hangs (SIGSTOP), against the real broker and
 * MariaDB:
 *  - SIGTERM to a worker taking load while the broker is stopped, in
 *    exactly_once_v2 and in at_least_once: the worker logs worker_stopping
 *    and exits 0 within shutdown.timeout_ms + 2 s, although its commit
 *    (a transaction's offsets, its commit) waits for the broker;
 *  - an exactly-once worker stopped past its transaction.timeout.ms, so
 *    that the broker aborts its transaction: once it runs again it is
 *    fenced, and its log line and metric say the transaction timed out,
 *    not that a replica with the same worker.replica_id started;
 *  - a second replica started with the same worker.replica_id: the first
 *    is fenced, and says a replica with the same id started.
 * The broker (scripts/services.sh's, its pid in OW_RUN_DIR) and a stopped
 * worker are always continued before a test ends, even when it fails.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#define PARTITIONS 2
/* A modest load: about 30 messages a second. */
#define LOAD_INTERVAL_MS 33
/* The stop's budget in the stop tests, and the bound of a stop: its
 * budget and the watchdog's 2 s of grace. */
#define STOP_BUDGET_MS 5000
#define STOP_BOUND_MS (STOP_BUDGET_MS + 2000)
/* A worker stopped this long is past its transaction timeout and the
 * broker's check for timed-out transactions (every 10 s by default). */
#define TXN_TIMEOUT_MS 8000
#define WORKER_PAUSE_S 22

static teststack ts;
static pid_t broker = -1;
static int broker_paused;
/* Workers of the test running now: stopped with SIGKILL (and continued
 * first) at teardown. */
static pid_t workers[2];
static int worker_paused;

static int64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&t, NULL);
}

/* GET path on 127.0.0.1:port with a 2 s bound: the body into out (cut to
 * size - 1), or "" when nothing answered. */
static void http_get(unsigned port, const char *path, char *out, size_t size)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    char req[128];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    size_t len = 0;
    char *body;

    out[0] = '\0';
    if (fd < 0)
        return;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && write(fd, req, (size_t)n) == n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};

        while (len < size - 1 && poll(&pf, 1, 2000) == 1) {
            ssize_t r = read(fd, out + len, size - 1 - len);

            if (r <= 0)
                break;
            len += (size_t)r;
        }
    }
    close(fd);
    out[len] = '\0';
    body = strstr(out, "\r\n\r\n");
    if (body != NULL)
        memmove(out, body + 4, strlen(body + 4) + 1);
    else
        out[0] = '\0';
}

/* The value of one metric line ("name{labels} value") in a /metrics body;
 * -1 when absent. */
static long long metric(const char *body, const char *series)
{
    char pat[200];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s ", series);
    p = strstr(body, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The first log line with the event, copied into out; 0 when none. */
static int log_line(const char *path, const char *event, char *out, size_t size)
{
    char pat[96];
    char *log = teststack_read_file(path, NULL);
    const char *p, *start, *end;
    int found;

    snprintf(pat, sizeof(pat), "\"event\":\"%s\"", event);
    p = strstr(log, pat);
    found = p != NULL;
    if (found) {
        for (start = p; start > log && start[-1] != '\n'; start--)
            ;
        end = strchr(p, '\n');
        snprintf(out, size, "%.*s", (int)(end != NULL ? end - start : (ptrdiff_t)strlen(start)),
                 start);
    }
    free(log);
    return found;
}

/* --- The broker ------------------------------------------------------------ */

/* scripts/services.sh's broker, a java process; the test is skipped with
 * the mock broker. */
static pid_t find_broker(void)
{
    char path[400], comm[32] = "";
    FILE *f;
    long pid = -1;

    if (strcmp(test_env_or("OW_TEST_BROKER_KIND", "kafka"), "kafka") != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/kafka.pid", test_env("OW_RUN_DIR"));
    f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%ld", &pid) != 1)
        fail_msg("no broker pid in %s", path);
    fclose(f);
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    f = fopen(path, "r");
    if (f == NULL || fgets(comm, sizeof(comm), f) == NULL)
        fail_msg("broker pid %ld (%s/kafka.pid) is not running", pid, test_env("OW_RUN_DIR"));
    fclose(f);
    if (strncmp(comm, "java", 4) != 0)
        fail_msg("pid %ld of %s/kafka.pid is %s, not the broker", pid, test_env("OW_RUN_DIR"),
                 comm);
    return (pid_t)pid;
}

static void pause_broker(void)
{
    broker_paused = 1;
    assert_int_equal(kill(broker, SIGSTOP), 0);
}

static void continue_broker(void)
{
    if (broker_paused && kill(broker, SIGCONT) == 0)
        broker_paused = 0;
}

/* --- Load ---------------------------------------------------------------- */

typedef struct {
    pthread_t thread;
    rd_kafka_t *producer;
    _Atomic int stop;
    int started;
    int sent;
    char prefix[32];
} load;

/* One valid order batch every LOAD_INTERVAL_MS, new keys, over both
 * partitions; produce calls queue while the broker is stopped. */
static void *load_main(void *arg)
{
    load *l = arg;

    while (!atomic_load(&l->stop)) {
        char key[64], value[200];

        snprintf(key, sizeof(key), "%s-%d", l->prefix, l->sent);
        snprintf(value, sizeof(value),
                 "{\"user_id\":%d,\"orders\":[{\"external_order_no\":\"%s-%d\",\"amount\":1}]}",
                 1 + l->sent % 50, l->prefix, l->sent);
        if (kit_produce(l->producer, ts.topic_in, l->sent % PARTITIONS, key, strlen(key), value,
                        strlen(value)) == 0)
            l->sent++;
        rd_kafka_poll(l->producer, 0);
        sleep_ms(LOAD_INTERVAL_MS);
    }
    return NULL;
}

static void load_start(load *l, const char *prefix)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->prefix, sizeof(l->prefix), "%s-%d", prefix, (int)getpid());
    l->producer = kit_producer(ts.bootstrap, NULL);
    assert_non_null(l->producer);
    assert_int_equal(pthread_create(&l->thread, NULL, load_main, l), 0);
    l->started = 1;
}

/* With the broker running: what was queued goes out (or is given up). */
static void load_stop(load *l)
{
    if (!l->started)
        return;
    atomic_store(&l->stop, 1);
    pthread_join(l->thread, NULL);
    kit_flush(l->producer, 10000);
    rd_kafka_destroy(l->producer);
    l->started = 0;
}

/* --- Workers ---------------------------------------------------------------- */

/* A worker on ts with the test's settings, its metrics on port. */
static pid_t spawn(testenv *e, const char *log_name, char *log_path, size_t size)
{
    pid_t pid;

    teststack_log(&ts, log_name, log_path, size);
    unlink(log_path);
    pid = teststack_spawn(e, log_path);
    for (int i = 0; i < 2; i++)
        if (workers[i] <= 0) {
            workers[i] = pid;
            break;
        }
    return pid;
}

static void forget(pid_t pid)
{
    for (int i = 0; i < 2; i++)
        if (workers[i] == pid)
            workers[i] = 0;
}

/* Waits until the worker took partitions and consumed at least n
 * messages, as its /metrics says. */
static void await_consumed(unsigned port, long long n, const char *log_path)
{
    static char body[1 << 16];

    for (int i = 0; i < 240; i++) {
        http_get(port, "/metrics", body, sizeof(body));
        if (metric(body, "order_worker_messages_consumed_total") >= n &&
            metric(body, "order_worker_assigned_partitions") > 0)
            return;
        sleep_ms(250);
    }
    fail_msg("the worker did not consume %lld messages within 60 s (log %s)", n, log_path);
}

/* Each test's workers have a group of their own: a worker that left
 * without closing its consumer (the broker was stopped) would hold up the
 * next test's rebalance for its session timeout. */
static void base_env(testenv *e, const char *guarantee, const char *replica, unsigned port)
{
    testenv_worker(e, &ts);
    testenv_add(e, "ORDER_WORKER_KAFKA_GROUP_ID=%s-%s-%s", ts.group, replica, guarantee);
    testenv_add(e, "ORDER_WORKER_PROCESSING_GUARANTEE=%s", guarantee);
    testenv_add(e, "ORDER_WORKER_WORKER_REPLICA_ID=%s-%d", replica, (int)getpid());
    testenv_add(e, "ORDER_WORKER_METRICS_PORT=%u", port);
}

/* --- Fixture -------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    broker = find_broker();
    if (broker > 0) {
        teststack_create(&ts, "hang", "ow_e2e_hang", PARTITIONS);
        print_message("hang e2e: broker %s (pid %d)\n", ts.bootstrap, (int)broker);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    continue_broker();
    if (broker > 0)
        testdb_drop(&ts.db);
    return 0;
}

/* After each test: nothing stopped, no worker left. */
static int after(void **state)
{
    (void)state;
    continue_broker();
    for (int i = 0; i < 2; i++) {
        if (workers[i] <= 0)
            continue;
        if (worker_paused)
            kill(workers[i], SIGCONT);
        kill(workers[i], SIGKILL);
        kit_wait(workers[i], 10000);
        workers[i] = 0;
    }
    worker_paused = 0;
    return 0;
}

/* --- Stop while the broker hangs ------------------------------------------ */

static void stop_with_broker_paused(const char *guarantee)
{
    unsigned port = testport_free();
    char log_path[300], name[64], line[2048];
    testenv e;
    load l;
    pid_t w;
    int64_t t0, took;
    int status;

    if (broker <= 0)
        skip();
    base_env(&e, guarantee, "stop", port);
    testenv_add(&e, "ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=%d", STOP_BUDGET_MS);
    snprintf(name, sizeof(name), "hang-stop-%s.log", guarantee);
    w = spawn(&e, name, log_path, sizeof(log_path));
    load_start(&l, guarantee);
    await_consumed(port, 60, log_path);
    pause_broker();
    /* The worker's commits and results now wait for the broker. */
    sleep_ms(1500);
    t0 = now_ms();
    assert_int_equal(kill(w, SIGTERM), 0);
    status = kit_wait(w, 20000);
    took = now_ms() - t0;
    continue_broker();
    if (status == -1)
        status = kit_wait(w, 60000); /* after the broker came back */
    forget(w);
    load_stop(&l);
    print_message("%s: SIGTERM with the broker stopped: exit %d after %lld ms (bound %d)\n",
                  guarantee, status, (long long)took, STOP_BOUND_MS);
    if (!log_line(log_path, "worker_stopping", line, sizeof(line)))
        fail_msg("%s: no worker_stopping line after SIGTERM (log %s)", guarantee, log_path);
    if (took > STOP_BOUND_MS)
        fail_msg("%s: the stop took %lld ms, more than shutdown.timeout_ms %d + 2 s (log %s)",
                 guarantee, (long long)took, STOP_BUDGET_MS, log_path);
    assert_false(log_line(log_path, "stop_overrun", line, sizeof(line)));
    assert_int_equal(status, 0);
}

static void test_stop_exactly_once_broker_paused(void **state)
{
    (void)state;
    stop_with_broker_paused("exactly_once_v2");
}

static void test_stop_at_least_once_broker_paused(void **state)
{
    (void)state;
    stop_with_broker_paused("at_least_once");
}

/* --- Fenced: a timed-out transaction, another replica ------------------------ */

typedef struct {
    pthread_t thread;
    unsigned port;
    _Atomic int stop;
    /* The last /metrics body that answered, and how many did. */
    char body[1 << 16];
    int answers;
} scraper;

static void *scrape_main(void *arg)
{
    static char body[1 << 16];
    scraper *s = arg;

    while (!atomic_load(&s->stop)) {
        http_get(s->port, "/metrics", body, sizeof(body));
        if (body[0] != '\0') {
            memcpy(s->body, body, sizeof(body));
            s->answers++;
        }
        sleep_ms(10);
    }
    return NULL;
}

/* Scrapes /metrics until the worker exits (its endpoint stops with it),
 * so that the counters of a worker that stops after its fatal error are
 * seen; returns the exit status. */
static int wait_scraping(pid_t w, scraper *s, unsigned port, int timeout_ms)
{
    int status;

    memset(s, 0, sizeof(*s));
    s->port = port;
    assert_int_equal(pthread_create(&s->thread, NULL, scrape_main, s), 0);
    status = kit_wait(w, timeout_ms);
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    return status;
}

/* Whether the worker has a transaction open on the broker: a partition of
 * the results topic whose last stable offset is below its end. */
static int transaction_open(void)
{
    rd_kafka_t *committed = kit_offsets_client(ts.bootstrap, KIT_READ_COMMITTED);
    rd_kafka_t *all = kit_offsets_client(ts.bootstrap, KIT_READ_UNCOMMITTED);
    int64_t lso[PARTITIONS], end[PARTITIONS];
    int open = 0;

    assert_non_null(committed);
    assert_non_null(all);
    kit_query_ends(committed, ts.topic_out, PARTITIONS, 5000, lso);
    kit_query_ends(all, ts.topic_out, PARTITIONS, 5000, end);
    for (int p = 0; p < PARTITIONS; p++)
        open |= lso[p] >= 0 && end[p] > lso[p];
    rd_kafka_destroy(committed);
    rd_kafka_destroy(all);
    return open;
}

/* A few messages, sent at once; waits until the worker acknowledged all
 * it consumed (nothing of it in flight), as its /metrics says. */
static void burst(unsigned port, const char *prefix, int round, const char *log_path)
{
    static char body[1 << 16];
    rd_kafka_t *p = kit_producer(ts.bootstrap, NULL);
    long long before, now = -1;

    assert_non_null(p);
    http_get(port, "/metrics", body, sizeof(body));
    before = metric(body, "order_worker_messages_consumed_total");
    for (int i = 0; i < 4; i++) {
        char key[64], value[200];

        snprintf(key, sizeof(key), "%s-%d-%d-%d", prefix, (int)getpid(), round, i);
        snprintf(value, sizeof(value),
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"%s\",\"amount\":1}]}", key);
        assert_int_equal(
            kit_produce(p, ts.topic_in, i % PARTITIONS, key, strlen(key), value, strlen(value)), 0);
    }
    assert_int_equal(kit_flush(p, 10000), 0);
    rd_kafka_destroy(p);
    for (int i = 0; i < 200; i++) {
        http_get(port, "/metrics", body, sizeof(body));
        now = metric(body, "order_worker_messages_consumed_total");
        if (now >= before + 4 && metric(body, "order_worker_inflight_messages") == 0)
            return;
        sleep_ms(20);
    }
    fail_msg("the worker did not answer 4 messages within 4 s (consumed %lld, before %lld; log "
             "%s)",
             now, before, log_path);
}

static void test_paused_past_transaction_timeout(void **state)
{
    static scraper s;
    unsigned port = testport_free();
    char log_path[300], line[4096];
    testenv e;
    pid_t w;
    int status, open = 0;

    (void)state;
    if (broker <= 0)
        skip();
    base_env(&e, "exactly_once_v2", "paused", port);
    /* A transaction stays open for its interval after its first output,
     * so that the worker is stopped with one open; the stop and the
     * drain are short enough for the timeout (config_check.c). */
    testenv_add(&e, "ORDER_WORKER_TRANSACTION_INTERVAL_MS=2000");
    testenv_add(&e, "ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=3000");
    testenv_add(&e, "ORDER_WORKER_REBALANCE_DRAIN_TIMEOUT_MS=2000");
    testenv_add(&e, "ORDER_WORKER_KAFKA_PRODUCER_TRANSACTION_TIMEOUT_MS=%d", TXN_TIMEOUT_MS);
    w = spawn(&e, "hang-paused-worker.log", log_path, sizeof(log_path));
    await_consumed(port, 0, log_path);
    /* Stopped with its outputs acknowledged and their transaction open:
     * outputs still in flight would time out in the client after the
     * pause (message.timeout.ms is at most transaction.timeout.ms), and
     * librdkafka then aborts and bumps the epoch by itself, which the
     * broker allows after it aborted the transaction: the worker carries
     * on unfenced, and there is no line to read. */
    for (int attempt = 0; attempt < 10 && !open; attempt++) {
        burst(port, "paused", attempt, log_path);
        assert_int_equal(kill(w, SIGSTOP), 0);
        worker_paused = 1;
        sleep_ms(300); /* what it sent before settles */
        open = transaction_open();
        if (!open) {
            kill(w, SIGCONT);
            worker_paused = 0;
        }
    }
    if (!open)
        fail_msg("the worker never had a transaction open on the broker (log %s)", log_path);
    print_message("worker stopped with a transaction open, for %d s (transaction.timeout.ms "
                  "%d)\n",
                  WORKER_PAUSE_S, TXN_TIMEOUT_MS);
    sleep_ms(WORKER_PAUSE_S * 1000);
    assert_int_equal(kill(w, SIGCONT), 0);
    worker_paused = 0;
    status = wait_scraping(w, &s, port, 60000);
    forget(w);
    if (!log_line(log_path, "kafka_fenced", line, sizeof(line)))
        fail_msg("no kafka_fenced line (exit %d, log %s)", status, log_path);
    print_message("exit %d; %s\n", status, line);
    print_message("metrics (%d answers): transaction_timeout %lld, replica_id %lld\n", s.answers,
                  metric(s.body, "order_worker_kafka_producer_fenced_total{cause="
                                 "\"transaction_timeout\"}"),
                  metric(s.body, "order_worker_kafka_producer_fenced_total{cause=\"replica_id\"}"));
    assert_int_equal(status, 1);
    assert_non_null(strstr(line, "\"cause\":\"transaction timed out\""));
    assert_non_null(strstr(line, "the transaction timed out"));
    assert_null(strstr(line, "another producer with this transactional id started"));
    {
        char *log = teststack_read_file(log_path, NULL);

        assert_null(strstr(log, "fenced by a replica with the same replica id"));
        free(log);
    }
    assert_int_equal(
        metric(s.body, "order_worker_kafka_producer_fenced_total{cause=\"transaction_timeout\"}"),
        1);
    assert_int_equal(
        metric(s.body, "order_worker_kafka_producer_fenced_total{cause=\"replica_id\"}"), 0);
}

static void test_fenced_by_same_replica_id(void **state)
{
    static scraper s;
    unsigned port = testport_free(), port2 = testport_free();
    char log_path[300], log2[300], line[4096];
    testenv e, e2;
    load l;
    pid_t w, w2;
    int status;

    (void)state;
    if (broker <= 0)
        skip();
    base_env(&e, "exactly_once_v2", "twin", port);
    w = spawn(&e, "hang-twin-1.log", log_path, sizeof(log_path));
    load_start(&l, "twin");
    await_consumed(port, 60, log_path);
    base_env(&e2, "exactly_once_v2", "twin", port2);
    w2 = spawn(&e2, "hang-twin-2.log", log2, sizeof(log2));
    status = wait_scraping(w, &s, port, 60000);
    forget(w);
    kill(w2, SIGTERM);
    assert_int_equal(kit_wait(w2, 30000), 0);
    forget(w2);
    load_stop(&l);
    if (!log_line(log_path, "kafka_fenced", line, sizeof(line)))
        fail_msg("the first replica was not fenced (exit %d, log %s)", status, log_path);
    print_message("first replica: exit %d; %s\n", status, line);
    assert_int_equal(status, 1);
    assert_non_null(strstr(line, "\"cause\":\"a replica with the same id\""));
    assert_non_null(strstr(line, "another producer with this transactional id started"));
    assert_null(strstr(line, "timed out"));
    assert_int_equal(
        metric(s.body, "order_worker_kafka_producer_fenced_total{cause=\"replica_id\"}"), 1);
    assert_int_equal(
        metric(s.body, "order_worker_kafka_producer_fenced_total{cause=\"transaction_timeout\"}"),
        0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stop_exactly_once_broker_paused, after),
        cmocka_unit_test_teardown(test_stop_at_least_once_broker_paused, after),
        cmocka_unit_test_teardown(test_paused_past_transaction_timeout, after),
        cmocka_unit_test_teardown(test_fenced_by_same_replica_id, after),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
