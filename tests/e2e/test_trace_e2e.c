/*
 * End to end: W3C trace context through the built worker, against the real
 * broker and MariaDB.
 *
 *   - An invalid batch sent with a traceparent and a tracestate gets a 400
 *     and a dead letter with the same trace id, the same flags and the same
 *     tracestate, and one new span id of the worker's; sent again under
 *     another trace, its outputs carry that trace.
 *   - A valid batch's first result carries its trace; a retry under another
 *     trace gets the stored bytes (replayed: true) under the retry's trace; a
 *     retry without headers gets none; the stored record and `lookup` show
 *     nothing of either.
 *   - Invalid headers (an upper-case id, a repeated tracestate key, a
 *     tracestate alone) change nothing of the decision, are left off the
 *     outputs and are counted in /metrics.
 *   - The worker's log lines about those messages carry their trace id and
 *     the worker's span id, and name the message as OpenTelemetry's
 *     messaging conventions do.
 *   - With tracing.start_traces = true (a worker started again with it), a
 *     message without a traceparent gets a new sampled trace.
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
#include <unistd.h>

#include <cmocka.h>

#include "kit.h"
#include "testcli.h"
#include "teststack.h"
#include "testport.h"

#define WAIT_S 90
#define PARTITIONS 2

/* The callers' traces: trace id, parent (span) id. */
#define TA "0af7651916cd43dd8448eb211c80319c"
#define PA "b7ad6b7169203331"
#define TB "4bf92f3577b34da6a3ce929d0e0e4736"
#define PB "00f067aa0ba902b7"
#define TC "5c1fa0a3d3de4cbc9bdb94c4b1b54c43"
#define PC "0102030405060708"
#define TD "9f0e8d7c6b5a49382716051423324150"
#define PD "1122334455667788"
#define TE "d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f"
#define PE "aabbccddeeff0011"
#define TG "77777777777777777777777777777777"
#define PG "8888888888888888"
#define TH "123456789abcdef0123456789abcdef0"
#define PH "0fedcba987654321"
#define STATE "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"

static teststack ts;
static testenv env;
static pid_t worker;
static rd_kafka_t *producer;
static char log_path[300];
static unsigned metrics_port;
static char bad_key[64], ok_key[64];
static const char *bad_value = "{\"user_id\":4801,\"orders\":[{\"external_order_no\":\"TR-B\","
                               "\"amount\":\"19.900\"}]}";
static char ok_value[160];
/* The worker's span for the first invalid batch and for the reused key,
 * which the log lines must name. */
static char bad_span[17], reuse_span[17];

typedef struct {
    char trace_id[33];
    char span_id[17];
    char flags[3];
} tp_parts;

static int setup(void **state)
{
    (void)state;
    teststack_create(&ts, "trace", "ow_trace", PARTITIONS);
    snprintf(bad_key, sizeof(bad_key), "ctx-bad-%d", (int)getpid());
    snprintf(ok_key, sizeof(ok_key), "ctx-ok-%d", (int)getpid());
    snprintf(
        ok_value, sizeof(ok_value),
        "{\"user_id\":4801,\"orders\":[{\"external_order_no\":\"TR-%d\",\"amount\":\"19.90\"}]}",
        (int)getpid());
    metrics_port = testport_free();
    testenv_worker(&env, &ts);
    /* The decided lines are at debug: every message gets one. */
    testenv_add(&env, "ORDER_WORKER_LOG_LEVEL=debug");
    testenv_add(&env, "ORDER_WORKER_METRICS_PORT=%u", metrics_port);
    teststack_log(&ts, "worker-trace.log", log_path, sizeof(log_path));
    unlink(log_path);
    worker = teststack_spawn(&env, log_path);
    producer = kit_producer(ts.bootstrap, NULL);
    assert_non_null(producer);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (producer != NULL)
        rd_kafka_destroy(producer);
    if (worker > 0) {
        kill(worker, SIGTERM);
        if (kit_wait(worker, 30000) < 0)
            kill(worker, SIGKILL);
    }
    testdb_drop(&ts.db);
    return 0;
}

/* Produces one message (key NULL: none) with the trace headers given (NULL:
 * none) and waits for its acknowledgement. */
static void send_msg(const char *key, const char *value, const char *traceparent,
                     const char *tracestate)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(2);
    rd_kafka_resp_err_t e;

    if (traceparent != NULL)
        rd_kafka_header_add(h, "traceparent", -1, traceparent, -1);
    if (tracestate != NULL)
        rd_kafka_header_add(h, "tracestate", -1, tracestate, -1);
    e = kit_produce_headers(producer, ts.topic_in, -1, key, key != NULL ? strlen(key) : 0, value,
                            strlen(value), h);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        fail_msg("produce: %s", rd_kafka_err2str(e));
    assert_int_equal(kit_flush(producer, 30000), 0);
}

/* Waits until topic holds want messages that match (key, or, for key NULL,
 * the trace id in their traceparent); got[] points into out, in the order
 * the topic holds them (one key is on one partition). */
static void await(const char *topic, const char *key, const char *trace_id, size_t want,
                  kit_msgs *out, const kit_msg **got)
{
    for (int waited = 0; waited < WAIT_S * 2; waited++) {
        size_t n = 0;

        kit_msgs_free(out);
        kit_read_topic(ts.bootstrap, topic, 20000, out);
        for (size_t i = 0; i < out->n && n < want; i++) {
            const kit_msg *m = &out->v[i];
            char tp[128] = "";

            if (key != NULL && (m->key == NULL || m->key_len != strlen(key) ||
                                memcmp(m->key, key, m->key_len) != 0))
                continue;
            if (key == NULL && (m->key != NULL || !kit_header(m, "traceparent", tp, sizeof(tp)) ||
                                strstr(tp, trace_id) == NULL))
                continue;
            got[n++] = m;
        }
        if (n == want)
            return;
        usleep(500000);
    }
    fail_msg("%s: not %zu messages with key %s within %d s (see %s)", topic, want,
             key != NULL ? key : "(none)", WAIT_S, log_path);
}

static int lower_hex(const char *p, size_t n)
{
    return strspn(p, "0123456789abcdef") >= n;
}

/* An output's traceparent: version 00, lower-case hex, the caller's trace
 * id and flags, a span id that is neither zero nor the caller's; its
 * tracestate exactly state (NULL: no tracestate header). */
static void expect_trace(const kit_msg *m, const char *what, const char *trace_id,
                         const char *caller_span, const char *flags, const char *state, tp_parts *p)
{
    char tp[128], st[600];

    if (!kit_header(m, "traceparent", tp, sizeof(tp)))
        fail_msg("%s: no traceparent header", what);
    if (strlen(tp) != 55 || strncmp(tp, "00-", 3) != 0 || tp[35] != '-' || tp[52] != '-' ||
        !lower_hex(tp + 3, 32) || !lower_hex(tp + 36, 16) || !lower_hex(tp + 53, 2))
        fail_msg("%s: traceparent \"%s\" is not version 00 in lower-case hex", what, tp);
    memcpy(p->trace_id, tp + 3, 32);
    p->trace_id[32] = '\0';
    memcpy(p->span_id, tp + 36, 16);
    p->span_id[16] = '\0';
    memcpy(p->flags, tp + 53, 2);
    p->flags[2] = '\0';
    if (strcmp(p->trace_id, trace_id) != 0)
        fail_msg("%s: trace id %s, want the caller's %s", what, p->trace_id, trace_id);
    if (strcmp(p->span_id, caller_span) == 0 || strcmp(p->span_id, "0000000000000000") == 0)
        fail_msg("%s: span id %s is not a new one of the worker's", what, p->span_id);
    if (strcmp(p->flags, flags) != 0)
        fail_msg("%s: flags %s, want the caller's %s", what, p->flags, flags);
    if (state == NULL && kit_header(m, "tracestate", st, sizeof(st)))
        fail_msg("%s: tracestate \"%s\", want none", what, st);
    if (state != NULL && (!kit_header(m, "tracestate", st, sizeof(st)) || strcmp(st, state) != 0))
        fail_msg("%s: tracestate not the caller's \"%s\"", what, state);
}

static void expect_no_trace(const kit_msg *m, const char *what)
{
    char v[600];

    if (kit_header(m, "traceparent", v, sizeof(v)))
        fail_msg("%s: traceparent \"%s\", want none", what, v);
    if (kit_header(m, "tracestate", v, sizeof(v)))
        fail_msg("%s: tracestate \"%s\", want none", what, v);
}

static void expect_header(const kit_msg *m, const char *name, const char *want)
{
    char v[64] = "";

    if (!kit_header(m, name, v, sizeof(v)) || strcmp(v, want) != 0)
        fail_msg("header %s: \"%s\", want \"%s\"", name, v, want);
}

static void expect_same_bytes(const kit_msg *a, const kit_msg *b, const char *what)
{
    if (a->len != b->len || memcmp(a->value, b->value, a->len) != 0)
        fail_msg("%s: the bodies differ (%zu and %zu bytes)", what, a->len, b->len);
}

/* A 400 and its dead letter continue the caller's trace in one span of the
 * worker's; the same batch under another trace gets that trace. */
static void test_result_and_dead_letter(void **state)
{
    kit_msgs res = {0}, dlq = {0};
    const kit_msg *r[2], *d[2];
    tp_parts rp, dp, rp2, dp2;

    (void)state;
    send_msg(bad_key, bad_value, "00-" TA "-" PA "-01", STATE);
    await(ts.topic_out, bad_key, NULL, 1, &res, r);
    await(ts.topic_dlq, bad_key, NULL, 1, &dlq, d);
    assert_non_null(strstr(r[0]->value, "\"code\":\"INVALID_REQUEST\""));
    expect_trace(r[0], "the 400", TA, PA, "01", STATE, &rp);
    expect_trace(d[0], "the dead letter", TA, PA, "01", STATE, &dp);
    assert_string_equal(rp.span_id, dp.span_id); /* one span: the worker's for the message */
    assert_int_equal(d[0]->len, strlen(bad_value));
    assert_memory_equal(d[0]->value, bad_value, d[0]->len);
    memcpy(bad_span, rp.span_id, sizeof(bad_span));

    send_msg(bad_key, bad_value, "00-" TB "-" PB "-01", NULL);
    await(ts.topic_out, bad_key, NULL, 2, &res, r);
    await(ts.topic_dlq, bad_key, NULL, 2, &dlq, d);
    expect_trace(r[1], "the retry's 400", TB, PB, "01", NULL, &rp2);
    expect_trace(d[1], "the retry's dead letter", TB, PB, "01", NULL, &dp2);
    assert_string_equal(rp2.span_id, dp2.span_id);
    assert_string_not_equal(rp2.span_id, rp.span_id);
    expect_same_bytes(r[0], r[1], "the two 400s");
    expect_same_bytes(d[0], d[1], "the two dead letters");
    kit_msgs_free(&res);
    kit_msgs_free(&dlq);
}

/* The first result carries the first trace; a replay the retry's, with the
 * stored bytes; a retry without headers none. The record keeps nothing of
 * either. */
static void test_replay_belongs_to_the_retry(void **state)
{
    kit_msgs res = {0};
    const kit_msg *r[3];
    tp_parts p1, p2;
    char *argv[] = {(char *)testcli_bin(), "lookup", "--user", "4801", "--key", ok_key, NULL};
    char stored[2048];
    testcli_result out;
    MYSQL *c;
    MYSQL_RES *rs;
    MYSQL_ROW row;
    unsigned long *lens;
    char sql[256];

    (void)state;
    send_msg(ok_key, ok_value, "00-" TC "-" PC "-00", NULL);
    await(ts.topic_out, ok_key, NULL, 1, &res, r);
    expect_header(r[0], "replayed", "false");
    assert_non_null(strstr(r[0]->value, "\"code\":\"CREATED\""));
    expect_trace(r[0], "the first result", TC, PC, "00", NULL, &p1);

    send_msg(ok_key, ok_value, "00-" TD "-" PD "-01", "rojo=00f067aa0ba902b7");
    await(ts.topic_out, ok_key, NULL, 2, &res, r);
    expect_header(r[1], "replayed", "true");
    expect_trace(r[1], "the replayed result", TD, PD, "01", "rojo=00f067aa0ba902b7", &p2);
    assert_string_not_equal(p2.span_id, p1.span_id);
    expect_same_bytes(r[0], r[1], "the first result and its replay");

    send_msg(ok_key, ok_value, NULL, NULL);
    await(ts.topic_out, ok_key, NULL, 3, &res, r);
    expect_header(r[2], "replayed", "true");
    expect_no_trace(r[2], "a replay for a retry without trace headers");
    expect_same_bytes(r[0], r[2], "the first result and the second replay");

    /* The stored response is the published body, nothing more. */
    c = testdb_connect(&ts.db);
    snprintf(sql, sizeof(sql),
             "SELECT response_body FROM idempotency_requests WHERE user_id = 4801 AND "
             "idempotency_key = '%s'",
             ok_key);
    assert_int_equal(mysql_query(c, sql), 0);
    rs = mysql_store_result(c);
    assert_non_null(rs);
    row = mysql_fetch_row(rs);
    assert_non_null(row);
    lens = mysql_fetch_lengths(rs);
    assert_int_equal(lens[0], r[0]->len);
    memcpy(stored, row[0], lens[0] < sizeof(stored) ? lens[0] : sizeof(stored));
    assert_memory_equal(stored, r[0]->value, r[0]->len);
    mysql_free_result(rs);
    mysql_close(c);

    /* lookup shows nothing of a trace. */
    assert_int_equal(testcli_run(argv, env.envp, NULL, 0, 60000, &out), 0);
    if (out.status != 0)
        fail_msg("lookup: status %d: %s", out.status, out.err);
    assert_non_null(strstr(out.out, "\"response\""));
    if (strstr(out.out, "trace") != NULL || strstr(out.out, TC) != NULL ||
        strstr(out.out, TD) != NULL || strstr(out.out, p1.span_id) != NULL)
        fail_msg("lookup shows a trace:\n%s", out.out);
    testcli_result_free(&out);
    kit_msgs_free(&res);
}

/* Counters of /metrics (curl: the e2e tier's machine has it). */
static void trace_counters(double *parent, double *tstate)
{
    char cmd[160], line[256];
    FILE *p;

    *parent = *tstate = -1;
    snprintf(cmd, sizeof(cmd), "curl -s --max-time 5 http://127.0.0.1:%u/metrics", metrics_port);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (fgets(line, sizeof(line), p) != NULL) {
        static const char name[] = "order_worker_trace_headers_invalid_total{header=\"";

        if (strncmp(line, name, sizeof(name) - 1) != 0)
            continue;
        if (strncmp(line + sizeof(name) - 1, "traceparent\"} ", 14) == 0)
            *parent = strtod(line + sizeof(name) - 1 + 14, NULL);
        else if (strncmp(line + sizeof(name) - 1, "tracestate\"} ", 13) == 0)
            *tstate = strtod(line + sizeof(name) - 1 + 13, NULL);
    }
    pclose(p);
    if (*parent < 0 || *tstate < 0)
        fail_msg("no order_worker_trace_headers_invalid_total in /metrics on port %u",
                 metrics_port);
}

/* Invalid headers decide nothing: the batches get their 201s, the outputs
 * leave off what was invalid, and each is counted. */
static void test_invalid_headers_ignored(void **state)
{
    char k1[64], k2[64], k3[64], v[3][160];
    kit_msgs res = {0};
    const kit_msg *r[1];
    tp_parts p;
    double tp0, ts0, tp1, ts1;

    (void)state;
    trace_counters(&tp0, &ts0);
    for (int i = 0; i < 3; i++)
        snprintf(v[i], sizeof(v[i]),
                 "{\"user_id\":4802,\"orders\":[{\"external_order_no\":\"TRI-%d-%d\","
                 "\"amount\":\"1.00\"}]}",
                 (int)getpid(), i);
    snprintf(k1, sizeof(k1), "trace-upper-%d", (int)getpid());
    snprintf(k2, sizeof(k2), "trace-dupkey-%d", (int)getpid());
    snprintf(k3, sizeof(k3), "trace-stateonly-%d", (int)getpid());
    send_msg(k1, v[0], "00-D0E1F2A3B4C5D6E7F8091A2B3C4D5E6F-" PE "-01", STATE);
    send_msg(k2, v[1], "00-" TE "-" PE "-01", "foo=1,foo=2");
    send_msg(k3, v[2], NULL, STATE);
    await(ts.topic_out, k1, NULL, 1, &res, r);
    assert_non_null(strstr(r[0]->value, "\"code\":\"CREATED\""));
    expect_no_trace(r[0], "the result of an upper-case traceparent");
    await(ts.topic_out, k2, NULL, 1, &res, r);
    assert_non_null(strstr(r[0]->value, "\"code\":\"CREATED\""));
    expect_trace(r[0], "the result of a tracestate with a repeated key", TE, PE, "01", NULL, &p);
    await(ts.topic_out, k3, NULL, 1, &res, r);
    assert_non_null(strstr(r[0]->value, "\"code\":\"CREATED\""));
    expect_no_trace(r[0], "the result of a tracestate alone");
    trace_counters(&tp1, &ts1);
    if (tp1 - tp0 != 1 || ts1 - ts0 != 2)
        fail_msg("counted %g invalid traceparent and %g tracestate headers, want 1 and 2",
                 tp1 - tp0, ts1 - ts0);
    kit_msgs_free(&res);
}

/* The first log line with event that holds every string of want (NULL-
 * terminated), or fails naming them. */
static void expect_line(const char *log, const char *event, const char *const *want)
{
    char ev[96];

    snprintf(ev, sizeof(ev), "\"event\":\"%s\"", event);
    for (const char *line = log; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char *copy = strndup(line, len);
        int all = copy != NULL && strstr(copy, ev) != NULL;

        for (size_t i = 0; all && want[i] != NULL; i++)
            all = strstr(copy, want[i]) != NULL;
        free(copy);
        if (all)
            return;
        line += len + (end != NULL);
    }
    fail_msg("no %s line in %s with %s %s %s", event, log_path, want[0],
             want[1] != NULL ? want[1] : "", want[1] != NULL && want[2] != NULL ? want[2] : "");
}

/* The lines about a message carry its trace and the worker's span: the
 * decided line of each batch, the security events of a reused key and of
 * a message without a key. */
static void test_log_lines_carry_the_trace(void **state)
{
    static const char *const other =
        "{\"user_id\":4801,\"orders\":[{\"external_order_no\":\"TR-X\","
        "\"amount\":\"5.00\"}]}";
    kit_msgs res = {0};
    const kit_msg *r[4], *d[1];
    tp_parts p, ph;
    char trace[64], span[64], topic[160], group[160], nokey_span[64];
    char *log;

    (void)state;
    /* The same key with other content: IDEMPOTENCY_KEY_REUSED, a warn line. */
    send_msg(ok_key, other, "00-" TG "-" PG "-01", NULL);
    await(ts.topic_out, ok_key, NULL, 4, &res, r);
    assert_non_null(strstr(r[3]->value, "\"code\":\"IDEMPOTENCY_KEY_REUSED\""));
    expect_trace(r[3], "the 409", TG, PG, "01", NULL, &p);
    memcpy(reuse_span, p.span_id, sizeof(reuse_span));
    /* No key: a dead letter only, and a warn line. */
    send_msg(NULL, other, "00-" TH "-" PH "-01", NULL);
    await(ts.topic_dlq, NULL, TH, 1, &res, d);
    expect_trace(d[0], "the dead letter of a message without a key", TH, PH, "01", NULL, &ph);
    usleep(500000); /* lines are written before their outputs; a margin all the same */
    log = teststack_read_file(log_path, NULL);
    snprintf(topic, sizeof(topic), "\"messaging.destination.name\":\"%s\"", ts.topic_in);
    snprintf(group, sizeof(group), "\"messaging.consumer.group.name\":\"%s\"", ts.group);
    snprintf(trace, sizeof(trace), "\"trace_id\":\"%s\"", TG);
    snprintf(span, sizeof(span), "\"span_id\":\"%s\"", reuse_span);
    {
        const char *const want[] = {trace,
                                    span,
                                    "\"trace_flags\":\"01\"",
                                    topic,
                                    group,
                                    "\"messaging.system\":\"kafka\"",
                                    "\"messaging.destination.partition.id\":\"",
                                    "\"messaging.kafka.offset\":",
                                    NULL};

        expect_line(log, "idempotency_key_reused", want);
        expect_line(log, "decided", want);
    }
    assert_true(bad_span[0] != '\0'); /* test_result_and_dead_letter ran */
    snprintf(trace, sizeof(trace), "\"trace_id\":\"%s\"", TA);
    snprintf(span, sizeof(span), "\"span_id\":\"%s\"", bad_span);
    {
        const char *const want[] = {trace, span, "\"code\":\"INVALID_REQUEST\"", topic, NULL};

        expect_line(log, "decided", want);
    }
    snprintf(trace, sizeof(trace), "\"trace_id\":\"%s\"", TH);
    snprintf(nokey_span, sizeof(nokey_span), "\"span_id\":\"%s\"", ph.span_id);
    {
        const char *const want[] = {trace, nokey_span, topic, group, NULL};

        expect_line(log, "idempotency_key_rejected", want);
    }
    free(log);
    kit_msgs_free(&res);
}

/* tracing.start_traces: the worker, started again with it, gives a message
 * without a trace context a new trace, sampled, and logs it. */
static void test_start_traces(void **state)
{
    kit_msgs res = {0};
    const kit_msg *r[1];
    tp_parts p;
    char key[64], value[160], trace[64], *log;
    char tp[128];

    (void)state;
    kill(worker, SIGTERM);
    assert_true(kit_wait(worker, 30000) == 0);
    testenv_add(&env, "ORDER_WORKER_TRACING_START_TRACES=true");
    worker = teststack_spawn(&env, log_path);
    snprintf(key, sizeof(key), "ctx-root-%d", (int)getpid());
    snprintf(
        value, sizeof(value),
        "{\"user_id\":4803,\"orders\":[{\"external_order_no\":\"TRR-%d\",\"amount\":\"2.00\"}]}",
        (int)getpid());
    send_msg(key, value, NULL, NULL);
    await(ts.topic_out, key, NULL, 1, &res, r);
    assert_non_null(strstr(r[0]->value, "\"code\":\"CREATED\""));
    if (!kit_header(r[0], "traceparent", tp, sizeof(tp)))
        fail_msg("tracing.start_traces: no traceparent on the result");
    memcpy(p.trace_id, tp + 3, 32);
    p.trace_id[32] = '\0';
    /* A new trace: its own id, not zero, sampled, and no tracestate. */
    expect_trace(r[0], "a new trace", p.trace_id, "", "01", NULL, &p);
    assert_string_not_equal(p.trace_id, "00000000000000000000000000000000");
    usleep(500000);
    log = teststack_read_file(log_path, NULL);
    snprintf(trace, sizeof(trace), "\"trace_id\":\"%s\"", p.trace_id);
    {
        const char *const want[] = {trace, "\"code\":\"CREATED\"", NULL};

        expect_line(log, "decided", want);
    }
    free(log);
    kit_msgs_free(&res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_result_and_dead_letter),
        cmocka_unit_test(test_replay_belongs_to_the_retry),
        cmocka_unit_test(test_invalid_headers_ignored),
        cmocka_unit_test(test_log_lines_carry_the_trace),
        cmocka_unit_test(test_start_traces),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
