/*
 * End to end: the limits of what the worker publishes and where it
 * publishes it,
 * with the built binary against the real broker and MariaDB.
 *
 *   - A request.max_orders whose largest result would not fit the
 *     producer's message limit is refused at start (exit 2, naming the key,
 *     the sizes and the largest value that fits); with that largest value
 *     the worst batch a producer can send is decided and its result
 *     delivered, and one order more is refused.
 *   - A result that a topic refuses for its size (a results topic whose
 *     max.message.bytes is below the producer's limit) is replaced by an
 *     OUTPUT_TOO_LARGE notice on the dead-letter topic; the partition moves
 *     on and the worker keeps running; `send --wait` reports the notice
 *     (exit 5).
 *   - A results topic that does not exist (and that the worker may not
 *     create) stops the worker before it consumes anything (exit 1, naming
 *     the key and the topic).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "kit.h"
#include "testcli.h"
#include "teststack.h"

#define WAIT_S 120
#define PRODUCER_LIMIT 1000000 /* the worker producer's default message.max.bytes */

static teststack ts;
static size_t largest; /* request.max_orders that fits, from the refusal */

static int setup(void **state)
{
    (void)state;
    teststack_create(&ts, "limits", "ow_limits", 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    testdb_drop(&ts.db);
    return 0;
}

/* The whole file at path (NUL-terminated), or "" when it cannot be read. */
static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = calloc(1, 1 << 20);
    size_t n = 0;

    assert_non_null(buf);
    if (f != NULL) {
        n = fread(buf, 1, (1 << 20) - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* Runs a worker with the stack's settings plus extra (NAME=value, a
 * NULL-terminated list) and waits for it to exit by itself; returns its
 * status and its log. */
static int run_until_exit(const char *name, const char *const *extra, char **log)
{
    testenv env;
    char path[300];
    pid_t pid;
    int status;

    testenv_worker(&env, &ts);
    for (size_t i = 0; extra[i] != NULL; i++)
        testenv_add(&env, "%s", extra[i]);
    teststack_log(&ts, name, path, sizeof(path));
    unlink(path);
    pid = teststack_spawn(&env, path);
    status = kit_wait(pid, 60000);
    if (status < 0) {
        kill(pid, SIGKILL);
        kit_wait(pid, 5000);
    }
    *log = read_all(path);
    return status;
}

/* A batch of n orders whose result is as long as any can be: order numbers
 * of 64 quotes (escaped to two bytes each, in the input and in the result),
 * the largest amounts and numbers. */
static char *worst_batch(size_t n, size_t *len)
{
    size_t cap = 256 + n * 320;
    char *v = malloc(cap);
    size_t at;

    assert_non_null(v);
    at = (size_t)snprintf(v, cap, "{\"user_id\":9223372036854775807,\"orders\":[");
    for (size_t i = 0; i < n; i++) {
        char no[140] = "";
        char digits[16];
        size_t k = 0;

        /* Unique per order: its index, then quotes up to 64 characters. */
        size_t dl = (size_t)snprintf(digits, sizeof(digits), "%zu", i);

        memcpy(no, digits, dl);
        k = dl;
        for (size_t q = dl; q < 64; q++) {
            no[k++] = '\\';
            no[k++] = '"';
        }
        no[k] = '\0';
        at += (size_t)snprintf(v + at, cap - at,
                               "%s{\"external_order_no\":\"%s\",\"amount\":\"9999999999.99\","
                               "\"product_id\":9223372036854775807,\"quantity\":2147483647}",
                               i > 0 ? "," : "", no);
    }
    at += (size_t)snprintf(v + at, cap - at, "]}");
    *len = at;
    return v;
}

/* The result for key on the results topic, waited for. */
static void await_result(const char *topic, const char *key, kit_msgs *out, const kit_msg **m)
{
    for (int waited = 0; waited < WAIT_S * 2; waited++) {
        kit_msgs_free(out);
        kit_read_topic(ts.bootstrap, topic, 20000, out);
        for (size_t i = 0; i < out->n; i++) {
            if (out->v[i].key != NULL && out->v[i].key_len == strlen(key) &&
                memcmp(out->v[i].key, key, out->v[i].key_len) == 0) {
                *m = &out->v[i];
                return;
            }
        }
        usleep(500000);
    }
    fail_msg("%s: no message with key %s within %d s", topic, key, WAIT_S);
}

/* Refused at start, naming the sizes and the largest that fits. */
static void test_too_many_orders_refused_at_start(void **state)
{
    char *log = NULL;
    const char *at;
    char extra[96] = "";
    int status;

    (void)state;
    const char *const ten_thousand[] = {"ORDER_WORKER_REQUEST_MAX_ORDERS=10000", NULL};
    const char *const above[] = {extra, NULL};

    status = run_until_exit("worker-limits-10000.log", ten_thousand, &log);
    if (status != 2 || strstr(log, "request.max_orders") == NULL ||
        strstr(log, "message.max.bytes") == NULL)
        fail_msg("request.max_orders=10000: exit %d, log: %s", status, log);
    at = strstr(log, "at most ");
    assert_non_null(at);
    largest = (size_t)strtoull(at + 8, NULL, 10);
    assert_true(largest > 1000 && largest < 10000);
    free(log);
    /* The smallest refused: one order more than the largest that fits. */
    snprintf(extra, sizeof(extra), "ORDER_WORKER_REQUEST_MAX_ORDERS=%zu", largest + 1);
    status = run_until_exit("worker-limits-above.log", above, &log);
    if (status != 2 || strstr(log, "request.max_orders") == NULL)
        fail_msg("request.max_orders=%zu: exit %d, log: %s", largest + 1, status, log);
    free(log);
    print_message("limits: request.max_orders 10000 and %zu refused, %zu accepted\n",
                  largest + 1, largest);
}

/* With the largest accepted request.max_orders, the worst batch
 * of that many orders gets its 201, within the producer's limit. */
static void test_largest_batch_is_answered(void **state)
{
    testenv env;
    char path[300];
    rd_kafka_t *p = kit_producer(ts.bootstrap, "message.max.bytes=1048000");
    kit_msgs out = {0};
    const kit_msg *m = NULL;
    size_t len = 0;
    char *batch = worst_batch(largest, &len);
    json_t *j;
    pid_t pid;

    (void)state;
    assert_true(largest > 0);
    assert_true(len <= 1048576); /* request.max_bytes */
    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_REQUEST_MAX_ORDERS=%zu", largest);
    teststack_log(&ts, "worker-limits-largest.log", path, sizeof(path));
    pid = teststack_spawn(&env, path);
    assert_non_null(p);
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "limits-largest", 14, batch, len), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
    await_result(ts.topic_out, "limits-largest", &out, &m);
    j = json_loadb(m->value, m->len, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 201);
    assert_int_equal(json_array_size(json_object_get(j, "orders")), largest);
    assert_true(m->len + m->key_len < PRODUCER_LIMIT);
    print_message("limits: %zu worst-case orders (%zu bytes in) got a %zu-byte 201\n", largest,
                  len, m->len);
    json_decref(j);
    teststack_await_committed(&ts, 1, WAIT_S, path);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders"), (int64_t)largest);
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(kit_wait(pid, 30000), 0);
    kit_msgs_free(&out);
    free(batch);
}

/* A batch of n plain orders for user 11. */
static char *plain_batch(const char *prefix, size_t n, size_t *len)
{
    size_t cap = 64 + n * 96;
    char *v = malloc(cap);
    size_t at = (size_t)snprintf(v, cap, "{\"user_id\":11,\"orders\":[");

    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(v + at, cap - at, "%s{\"external_order_no\":\"%s-%zu\",\"amount\":1}",
                               i > 0 ? "," : "", prefix, i);
    at += (size_t)snprintf(v + at, cap - at, "]}");
    *len = at;
    return v;
}

/* The topic's max.message.bytes as the broker describes it, or -1. */
static long long described_limit(const char *topic)
{
    char errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    long long limit = -1;

    rd_kafka_conf_set(c, "bootstrap.servers", ts.bootstrap, errstr, sizeof(errstr));
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof(errstr));
    assert_non_null(rk);
    q = rd_kafka_queue_new(rk);
    rd_kafka_DescribeConfigs(rk, &res, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, 10000);
    if (ev != NULL) {
        size_t n = 0, nc = 0;
        const rd_kafka_ConfigResource_t **rs = rd_kafka_DescribeConfigs_result_resources(
            rd_kafka_event_DescribeConfigs_result(ev), &n);
        const rd_kafka_ConfigEntry_t **ce = n == 1 ? rd_kafka_ConfigResource_configs(rs[0], &nc)
                                                   : NULL;

        for (size_t i = 0; i < nc; i++)
            if (strcmp(rd_kafka_ConfigEntry_name(ce[i]), "max.message.bytes") == 0)
                limit = strtoll(rd_kafka_ConfigEntry_value(ce[i]), NULL, 10);
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_ConfigResource_destroy(res);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return limit;
}

/* A results topic whose limit is below the producer's is refused at start:
 * the broker would refuse results the worker believes fit. */
static void test_small_topic_limit_refused_at_start(void **state)
{
    char topic[128], extra[200];
    const char *const settings[] = {extra, NULL};
    char *log = NULL;
    int status;

    (void)state;
    snprintf(topic, sizeof(topic), "%s-tiny", ts.topic_out);
    assert_int_equal(kit_create_topic_with(ts.bootstrap, topic, 1, "max.message.bytes", "20000"),
                     0);
    snprintf(extra, sizeof(extra), "ORDER_WORKER_TOPIC_RESULTS=%s", topic);
    status = run_until_exit("worker-limits-tiny.log", settings, &log);
    if (status != 2 || strstr(log, "topic.results") == NULL || strstr(log, topic) == NULL ||
        strstr(log, "max.message.bytes") == NULL)
        fail_msg("results topic of 20000 bytes: exit %d, log: %s", status, log);
    free(log);
}

/* `order-worker send --wait` of a batch whose result the results topic
 * refuses: the notice on the dead-letter topic ends the wait, reported
 * with its headers and exit status 5, instead of a timeout that blamed a
 * missing worker. */
static void send_wait_gets_notice(const testenv *env, const char *body)
{
    char *argv[] = {(char *)testcli_bin(), "send",  "--user",       "11",    "--key",
                    "limits-big-send",     "--wait", "--timeout-ms", "60000", NULL};
    testcli_result r;

    assert_non_null(argv[0]);
    if (testcli_run(argv, env->envp, body, strlen(body), 90000, &r) != 0)
        fail_msg("cannot run %s", argv[0]);
    if (r.status != 5 || strstr(r.err, "error-code: OUTPUT_TOO_LARGE\n") == NULL ||
        strstr(r.err, "error-message: the result (") == NULL ||
        strstr(r.err, "for its size; an OUTPUT_TOO_LARGE notice on ") == NULL)
        fail_msg("send --wait: status %d (want 5), stderr:\n%s", r.status, r.err);
    assert_int_equal(r.out_len, 0); /* no result to print */
    print_message("limits: send --wait exited 5:\n%s", r.err);
    testcli_result_free(&r);
}

/* An output refused for its size (the topic's
 * limit lowered while the worker runs) is never fatal and never retried; a
 * notice takes its place and the partition moves on. */
static void test_result_refused_for_size_becomes_notice(void **state)
{
    char topic[128], path[300], text[256];
    testenv env;
    rd_kafka_t *p = kit_producer(ts.bootstrap, NULL);
    kit_msgs out = {0}, dlq = {0};
    const kit_msg *m = NULL;
    size_t big_len = 0, small_len = 0, big_send_len = 0;
    char *big = plain_batch("big", 300, &big_len);
    char *big_send = plain_batch("big-send", 300, &big_send_len);
    char *small = plain_batch("small", 1, &small_len);
    pid_t pid;

    (void)state;
    assert_non_null(p);
    snprintf(topic, sizeof(topic), "%s-shrinking", ts.topic_out);
    assert_int_equal(kit_create_topic(ts.bootstrap, topic, 1), 0);
    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_TOPIC_RESULTS=%s", topic);
    teststack_log(&ts, "worker-limits-notice.log", path, sizeof(path));
    pid = teststack_spawn(&env, path);
    /* Running and answering with the topic's default limit... */
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "limits-first", 12, small, small_len), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    await_result(topic, "limits-first", &out, &m);
    /* ...then the limit drops below the big batch's result. The broker
     * checks the batch as it arrives, lz4-compressed by default: the 300
     * orders' result got through a 20,000-byte limit compressed, so the
     * limit is 2,048 bytes, still above a 1-order result. */
    assert_int_equal(kit_alter_topic_config(ts.bootstrap, topic, "max.message.bytes", "2048"), 0);
    for (int i = 0; i < 100 && described_limit(topic) != 2048; i++)
        usleep(100000);
    assert_int_equal(described_limit(topic), 2048);
    sleep(1); /* the partition's log takes the new config */
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "limits-big", 10, big, big_len), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    await_result(ts.topic_dlq, "limits-big", &dlq, &m);
    assert_true(kit_header(m, "error-code", text, sizeof(text)));
    assert_string_equal(text, "OUTPUT_TOO_LARGE");
    assert_true(kit_header(m, "error-message", text, sizeof(text)));
    assert_non_null(strstr(text, "result"));
    assert_int_equal(m->len, 0);
    assert_false(m->value_null);
    /* The partition moved on: the next message is answered. */
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "limits-small", 12, small, small_len), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    await_result(topic, "limits-small", &out, &m);
    assert_non_null(strstr(m->value, "\"status\":201"));
    send_wait_gets_notice(&env, big_send);
    teststack_await_committed(&ts, 1, WAIT_S, path);
    /* The big request was decided and recorded: a lookup finds its answer. */
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM idempotency_requests "
                                       "WHERE idempotency_key = 'limits-big' "
                                       "AND status = 'SUCCEEDED'"),
                     1);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM idempotency_requests "
                                       "WHERE idempotency_key = 'limits-big-send' "
                                       "AND status = 'SUCCEEDED'"),
                     1);
    assert_int_equal(kit_wait(pid, 0), -1); /* still running */
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(kit_wait(pid, 30000), 0);
    rd_kafka_destroy(p);
    kit_msgs_free(&out);
    kit_msgs_free(&dlq);
    free(big);
    free(big_send);
    free(small);
}

/* A results topic that does not exist stops the worker before it
 * consumes anything, naming the key and the topic. */
static void test_missing_results_topic(void **state)
{
    char missing[160], topic[200], group[160], group_env[200];
    const char *const settings[] = {topic, group_env,
                                    "ORDER_WORKER_KAFKA_PRODUCER_ALLOW_AUTO_CREATE_TOPICS=false",
                                    NULL};
    char *log = NULL;
    int64_t committed[1], ends[1];
    int status;

    (void)state;
    snprintf(missing, sizeof(missing), "%s-missing", ts.topic_out);
    snprintf(topic, sizeof(topic), "ORDER_WORKER_TOPIC_RESULTS=%s", missing);
    /* A group of its own: had it consumed anything, it would commit there. */
    snprintf(group, sizeof(group), "%s-missing", ts.group);
    snprintf(group_env, sizeof(group_env), "ORDER_WORKER_KAFKA_GROUP_ID=%s", group);
    assert_int_equal(kit_end_offsets(ts.bootstrap, ts.topic_in, ends, 1), 1);
    assert_true(ends[0] > 0); /* there is something it could have consumed */
    status = run_until_exit("worker-limits-missing.log", settings, &log);
    if (status != 1 || strstr(log, "topic.results") == NULL || strstr(log, missing) == NULL)
        fail_msg("missing results topic: exit %d, log: %s", status, log);
    free(log);
    assert_int_equal(kit_committed(ts.bootstrap, group, ts.topic_in, 1, committed), 0);
    assert_int_equal(committed[0], -1001);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_too_many_orders_refused_at_start),
        cmocka_unit_test(test_largest_batch_is_answered),
        cmocka_unit_test(test_small_topic_limit_refused_at_start),
        cmocka_unit_test(test_result_refused_for_size_becomes_notice),
        cmocka_unit_test(test_missing_results_topic),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
