/* A job's trace context (src/pipeline/job.c) and its outputs' headers
 * (src/pipeline/output.c): a message's W3C traceparent and tracestate
 * headers read by the rules of ow/trace.h, whatever the case of their
 * names, several tracestate headers joined; the worker's span new for every
 * message, the trace id and the sampled flag kept, the tracestate copied
 * unchanged; an invalid header counted and ignored, never changing the
 * message's validity, digest, 400 body, dead-letter bytes or offset;
 * tracing.start_traces; every output of the job carrying it, a replayed
 * result too; the log lines about the job naming the message and its
 * trace; the largest header set within the bytes kept for headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "job.h"
#include "metrics.h"
#include "output.h"
#include "ow/config.h"

#define TID "4bf92f3577b34da6a3ce929d0e0e4736"
#define PID "00f067aa0ba902b7"
#define TP "00-" TID "-" PID "-01"
#define STATE "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"

static const char valid_value[] = "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"A-1\","
                                  "\"amount\":\"19.90\"}]}";
static const char invalid_value[] = "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"A-1\","
                                    "\"amount\":\"19.900\"}]}";

static void maker_init(ow_job_maker *mk, int start_traces)
{
    ow_job_limits lim = {{1 << 20, 1000}, 1 << 20};

    ow_job_maker_init(mk, &lim);
    mk->ctx = (ow_job_context){"orders-in", "orders-group", start_traces};
}

/* A header list of name/value pairs, NULL-terminated; a value "(null)" is
 * a header without a value. */
static rd_kafka_headers_t *headers(const char *const *nv)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(8);

    for (size_t i = 0; nv != NULL && nv[i] != NULL; i += 2) {
        if (strcmp(nv[i + 1], "(null)") == 0)
            rd_kafka_header_add(h, nv[i], -1, NULL, 0);
        else
            rd_kafka_header_add(h, nv[i], -1, nv[i + 1], -1);
    }
    return h;
}

static ow_job *make_with(ow_job_maker *mk, const char *key, const char *value,
                         const rd_kafka_headers_t *h)
{
    ow_job_input in = {3, 41, 0, key, key != NULL ? strlen(key) : 0, value, strlen(value), h};
    ow_job *job = ow_job_from_input(mk, &in);

    assert_non_null(job);
    return job;
}

static ow_job *make(ow_job_maker *mk, const char *const *nv)
{
    rd_kafka_headers_t *h = headers(nv);
    ow_job *job = make_with(mk, "key-1", valid_value, h);

    /* The job keeps nothing of the message's headers. */
    rd_kafka_headers_destroy(h);
    return job;
}

static uint64_t invalid_count(int which)
{
    return atomic_load(&ow_stats.trace_invalid[which]);
}

/* The input's trace id and flags, a new span id of the worker's, the
 * tracestate as it came. */
static void test_continues_the_input_trace(void **state)
{
    static const char *const nv[] = {"traceparent", TP, "tracestate", STATE, NULL};
    ow_job_maker mk;
    ow_job *a, *b;

    (void)state;
    maker_init(&mk, 0);
    a = make(&mk, nv);
    b = make(&mk, nv);
    assert_non_null(a->trace);
    assert_int_equal(strlen(a->trace->traceparent), OW_TRACEPARENT_LEN);
    assert_memory_equal(a->trace->traceparent, "00-" TID "-", 36);
    assert_string_equal(a->trace->traceparent + 52, "-01");
    /* The span is the worker's: not the caller's, not zero, lower-case hex,
     * new for every message. */
    assert_string_not_equal(a->trace->span_id, PID);
    assert_string_not_equal(a->trace->span_id, "0000000000000000");
    assert_int_equal(strspn(a->trace->span_id, "0123456789abcdef"), 16);
    assert_memory_equal(a->trace->traceparent + 36, a->trace->span_id, 16);
    assert_string_not_equal(a->trace->span_id, b->trace->span_id);
    assert_string_equal(a->trace->trace_id, TID);
    assert_string_equal(a->trace->flags, "01");
    assert_int_equal(a->trace->state_len, strlen(STATE));
    assert_memory_equal(a->trace->state, STATE, strlen(STATE));
    ow_job_free(a);
    ow_job_free(b);
    ow_job_maker_cleanup(&mk);
}

typedef struct {
    const char *name;
    const char *nv[10];
    int start_traces;
    const char *trace_id; /* NULL: no trace; "new": a new one */
    const char *flags;
    const char *state;              /* the tracestate the outputs copy, NULL: none */
    unsigned bad_parent, bad_state; /* counted as invalid */
} header_case;

static const header_case header_cases[] = {
    {"no trace headers", {"content-type", "application/json", NULL}, 0, NULL, NULL, NULL, 0, 0},
    {"traceparent", {"traceparent", TP, NULL}, 0, TID, "01", NULL, 0, 0},
    {"not sampled", {"traceparent", "00-" TID "-" PID "-00", NULL}, 0, TID, "00", NULL, 0, 0},
    {"flags beyond sampled and random cleared",
     {"traceparent", "00-" TID "-" PID "-ff", NULL},
     0,
     TID,
     "03",
     NULL,
     0,
     0},
    {"a higher version is continued as 00",
     {"traceparent", "cc-" TID "-" PID "-01-future", NULL},
     0,
     TID,
     "01",
     NULL,
     0,
     0},
    {"names in any case",
     {"TraceParent", TP, "TRACESTATE", "a=1", NULL},
     0,
     TID,
     "01",
     "a=1",
     0,
     0},
    {"upper-case hex",
     {"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-" PID "-01", NULL},
     0,
     NULL,
     NULL,
     NULL,
     1,
     0},
    {"two traceparents", {"traceparent", TP, "traceparent", TP, NULL}, 0, NULL, NULL, NULL, 1, 0},
    {"traceparent without a value", {"traceparent", "(null)", NULL}, 0, NULL, NULL, NULL, 1, 0},
    {"invalid traceparent: its tracestate unread",
     {"traceparent", "00-" TID "-0000000000000000-01", "tracestate", STATE, NULL},
     0,
     NULL,
     NULL,
     NULL,
     1,
     0},
    {"tracestate without traceparent", {"tracestate", STATE, NULL}, 0, NULL, NULL, NULL, 0, 1},
    {"invalid tracestate: the traceparent stays",
     {"traceparent", TP, "tracestate", "foo=1,foo=2", NULL},
     0,
     TID,
     "01",
     NULL,
     0,
     1},
    {"empty tracestate: nothing to copy",
     {"traceparent", TP, "tracestate", "", NULL},
     0,
     TID,
     "01",
     NULL,
     0,
     0},
    {"tracestate headers joined",
     {"tracestate", "foo=1,bar=2", "traceparent", TP, "tracestate", "rojo=1,congo=2", "tracestate",
      "baz=3", NULL},
     0,
     TID,
     "01",
     "foo=1,bar=2,rojo=1,congo=2,baz=3",
     0,
     0},
    {"a key repeated across tracestate headers",
     {"traceparent", TP, "tracestate", "foo=1", "tracestate", "foo=2", NULL},
     0,
     TID,
     "01",
     NULL,
     0,
     1},
    {"an empty tracestate header among others",
     {"traceparent", TP, "tracestate", "foo=1", "tracestate", "", NULL},
     0,
     TID,
     "01",
     "foo=1,",
     0,
     0},
    {"start_traces: none becomes a new trace", {NULL}, 1, "new", "01", NULL, 0, 0},
    {"start_traces: an invalid one too",
     {"traceparent", "00-" TID "-" PID "-1", "tracestate", STATE, NULL},
     1,
     "new",
     "01",
     NULL,
     1,
     0},
    {"start_traces: a tracestate alone is dropped",
     {"tracestate", STATE, NULL},
     1,
     "new",
     "01",
     NULL,
     0,
     1},
    {"start_traces: a valid one is continued", {"traceparent", TP, NULL}, 1, TID, "01", NULL, 0, 0},
};

static void check_case(const header_case *c, const ow_job *job)
{
    const ow_job_trace *t = job->trace;

    if ((t == NULL) != (c->trace_id == NULL))
        fail_msg("%s: %s a trace context", c->name, t == NULL ? "no" : "unexpectedly");
    if (t == NULL)
        return;
    if (strcmp(c->trace_id, "new") == 0) {
        assert_string_not_equal(t->trace_id, TID);
        assert_string_not_equal(t->trace_id, "00000000000000000000000000000000");
        assert_int_equal(strspn(t->trace_id, "0123456789abcdef"), 32);
    } else {
        assert_string_equal(t->trace_id, c->trace_id);
    }
    assert_string_equal(t->flags, c->flags);
    assert_string_not_equal(t->span_id, PID);
    if (c->state == NULL) {
        if (t->state_len != 0)
            fail_msg("%s: tracestate \"%.*s\" copied", c->name, (int)t->state_len, t->state);
    } else {
        assert_int_equal(t->state_len, strlen(c->state));
        assert_memory_equal(t->state, c->state, t->state_len);
    }
}

static void test_header_rules(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(header_cases) / sizeof(header_cases[0]); i++) {
        const header_case *c = &header_cases[i];
        uint64_t p0 = invalid_count(0), s0 = invalid_count(1);
        ow_job_maker mk;
        ow_job *job;

        maker_init(&mk, c->start_traces);
        job = make(&mk, c->nv);
        check_case(c, job);
        if (invalid_count(0) - p0 != c->bad_parent || invalid_count(1) - s0 != c->bad_state)
            fail_msg("%s: counted %llu invalid traceparent and %llu tracestate, want %u and %u",
                     c->name, (unsigned long long)(invalid_count(0) - p0),
                     (unsigned long long)(invalid_count(1) - s0), c->bad_parent, c->bad_state);
        ow_job_free(job);
        ow_job_maker_cleanup(&mk);
    }
}

/* Without headers and without start_traces nothing is read or made. */
static void test_no_headers(void **state)
{
    ow_job_maker mk;
    ow_job *job;
    uint64_t rng;

    (void)state;
    maker_init(&mk, 0);
    rng = mk.trace_rng;
    job = make_with(&mk, "key-1", valid_value, NULL);
    assert_null(job->trace);
    assert_true(mk.trace_rng == rng);
    ow_job_free(job);
    ow_job_maker_cleanup(&mk);
}

/* Whatever the headers, the message is the same to the worker: validity,
 * key, digest, 400 body, dead-letter bytes, first error, partition and
 * offset. */
static void test_headers_never_change_the_decision(void **state)
{
    static const char *const keys[] = {"key-1", "bad key", NULL};
    static const char *const values[] = {valid_value, invalid_value, "not json"};

    (void)state;
    for (size_t k = 0; k < 3; k++) {
        for (size_t v = 0; v < 3; v++) {
            for (size_t i = 0; i < sizeof(header_cases) / sizeof(header_cases[0]); i++) {
                rd_kafka_headers_t *h = headers(header_cases[i].nv);
                ow_job_maker mk;
                ow_job *plain, *job;

                maker_init(&mk, header_cases[i].start_traces);
                plain = make_with(&mk, keys[k], values[v], NULL);
                job = make_with(&mk, keys[k], values[v], h);
                assert_int_equal(job->valid, plain->valid);
                assert_int_equal(job->key_len, plain->key_len);
                assert_true(job->key_hash == plain->key_hash);
                assert_true(job->req.user_id == plain->req.user_id);
                assert_int_equal(job->t.partition, plain->t.partition);
                assert_true(job->t.offset == plain->t.offset);
                if (job->valid) {
                    assert_string_equal(job->item.digest_hex, plain->item.digest_hex);
                } else {
                    assert_int_equal(job->invalid_body.len, plain->invalid_body.len);
                    assert_memory_equal(job->invalid_body.data, plain->invalid_body.data,
                                        job->invalid_body.len);
                    assert_int_equal(job->raw_len, plain->raw_len);
                    assert_memory_equal(job->raw, plain->raw, job->raw_len);
                    assert_string_equal(job->first_error, plain->first_error);
                    assert_int_equal(job->n_errors, plain->n_errors);
                }
                ow_job_free(plain);
                ow_job_free(job);
                ow_job_maker_cleanup(&mk);
                rd_kafka_headers_destroy(h);
            }
        }
    }
}

static const char *header_of(const rd_kafka_headers_t *h, const char *name, size_t *n)
{
    const void *v = NULL;

    if (rd_kafka_header_get_last(h, name, &v, n) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    return v;
}

static void assert_carries(rd_kafka_headers_t *h, const ow_job *job, const char *what)
{
    size_t n = 0;
    const char *tp = header_of(h, "traceparent", &n);
    const char *ts;

    if (tp == NULL)
        fail_msg("%s: no traceparent header", what);
    assert_int_equal(n, OW_TRACEPARENT_LEN);
    assert_memory_equal(tp, job->trace->traceparent, n);
    ts = header_of(h, "tracestate", &n);
    assert_non_null(ts);
    assert_int_equal(n, strlen(STATE));
    assert_memory_equal(ts, STATE, n);
    rd_kafka_headers_destroy(h);
}

/* Every output of a traced job carries its traceparent and tracestate: a
 * first result, a replayed one (the retry's trace, not the stored
 * request's), a 400 and its dead letter; an untraced job's carry none. */
static void test_outputs_carry_the_trace(void **state)
{
    static const char *const nv[] = {"traceparent", TP, "tracestate", STATE, NULL};
    ow_job_maker mk;
    ow_config cfg;
    ow_output o;
    ow_error err;
    ow_job *job, *bad, *plain;
    rd_kafka_headers_t *h;
    size_t n;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    memset(&o, 0, sizeof(o));
    o.cfg = &cfg;
    maker_init(&mk, 0);
    job = make(&mk, nv);
    assert_carries(ow_output_result_headers(&o, job, 0), job, "a first result");
    assert_carries(ow_output_result_headers(&o, job, 1), job, "a replayed result");
    h = headers(nv);
    bad = make_with(&mk, "key-2", invalid_value, h);
    rd_kafka_headers_destroy(h);
    assert_int_equal(bad->valid, 0);
    assert_carries(ow_output_result_headers(&o, bad, 0), bad, "a 400");
    assert_carries(ow_output_dead_letter_headers(&o, bad), bad, "a dead letter");
    plain = make(&mk, NULL);
    h = ow_output_result_headers(&o, plain, 1);
    assert_null(header_of(h, "traceparent", &n));
    assert_null(header_of(h, "tracestate", &n));
    rd_kafka_headers_destroy(h);
    ow_job_free(job);
    ow_job_free(bad);
    ow_job_free(plain);
    ow_job_maker_cleanup(&mk);
    ow_config_cleanup(&cfg);
}

static size_t varint_len(size_t v)
{
    size_t n = 1;

    /* Kafka's varints are zigzag-encoded: a length of 64 needs two bytes. */
    for (v <<= 1; v >= 0x80; v >>= 7)
        n++;
    return n;
}

/* What librdkafka counts for a header set: each name and value with its
 * length, and a record's largest framing (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD). */
static size_t wire_size(const rd_kafka_headers_t *h)
{
    const char *name;
    const void *v;
    size_t n, total = 5 + 1 + 10 + 5 + 5 + 5 + 5;

    for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &v, &n) == 0; i++)
        total += varint_len(strlen(name)) + strlen(name) + varint_len(n) + n;
    return total;
}

/* The largest header set, a dead letter's (a topic name of 249 bytes, the
 * longest first error, cut key and value, a tracestate of 512 bytes), fits
 * the bytes every output keeps for its headers. */
static void test_largest_headers_fit(void **state)
{
    char topic[250], st[OW_TRACESTATE_MAX + 1] = "", *key = malloc(3 * OW_OUTPUT_KEY_MAX);
    const char *nv[] = {"traceparent", TP, "tracestate", st, NULL};
    /* Room for the cut key and 10 bytes of the value. */
    ow_job_limits lim = {{1 << 20, 1000}, OW_OUTPUT_KEY_MAX + 10};
    rd_kafka_headers_t *h;
    ow_job_maker mk;
    ow_config cfg;
    ow_output o;
    ow_error err;
    ow_job *job;
    size_t size;

    (void)state;
    assert_non_null(key);
    memset(topic, 't', 249);
    topic[249] = '\0';
    memset(key, 'k', 3 * OW_OUTPUT_KEY_MAX);
    key[3 * OW_OUTPUT_KEY_MAX - 1] = '\0';
    /* 31 members of 15 bytes and a 32nd that fills the 512. */
    for (size_t i = 0, at = 0; i < 31; i++)
        at += (size_t)snprintf(st + at, sizeof(st) - at, "k%02zu=%010zu,", i, i);
    strcat(st, "k31=");
    memset(st + strlen(st), 'v', OW_TRACESTATE_MAX - strlen(st));
    st[OW_TRACESTATE_MAX] = '\0';
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    free(cfg.topic_input);
    cfg.topic_input = strdup(topic);
    memset(&o, 0, sizeof(o));
    o.cfg = &cfg;
    ow_job_maker_init(&mk, &lim);
    h = headers(nv);
    job = make_with(&mk, key, invalid_value, h);
    rd_kafka_headers_destroy(h);
    assert_non_null(job->trace);
    assert_int_equal(job->trace->state_len, OW_TRACESTATE_MAX);
    /* The longest first error the job keeps. */
    memset(job->first_error, 'e', sizeof(job->first_error) - 1);
    job->first_error[sizeof(job->first_error) - 1] = '\0';
    job->n_errors = 1000000;
    job->timestamp_ms = INT64_MIN;
    job->t.offset = INT64_MAX;
    job->t.partition = INT32_MAX;
    assert_true(job->raw_len < job->raw_original_len);
    h = ow_output_dead_letter_headers(&o, job);
    assert_non_null(header_of(h, "dlq-truncated-from", &size));
    assert_non_null(header_of(h, "key-truncated-from", &size));
    size = wire_size(h);
    print_message("the largest header set: %zu bytes of %d kept\n", size, OW_OUTPUT_RESERVE);
    assert_true(size <= OW_OUTPUT_RESERVE);
    rd_kafka_headers_destroy(h);
    h = ow_output_result_headers(&o, job, 0);
    assert_true(wire_size(h) <= size);
    rd_kafka_headers_destroy(h);
    ow_job_free(job);
    ow_job_maker_cleanup(&mk);
    ow_config_cleanup(&cfg);
    free(key);
}

static char captured[8192];

/* A log line about a traced job: the message by OpenTelemetry's messaging
 * attributes, and its trace by OpenTelemetry's log field names, with the
 * worker's span. */
static void test_log_lines_name_the_message_and_trace(void **state)
{
    static const char *const nv[] = {"traceparent", TP, NULL};
    ow_job_maker mk;
    ow_job *job;
    char want[128];
    int fds[2];
    ssize_t n;

    (void)state;
    maker_init(&mk, 0);
    job = make(&mk, nv);
    assert_int_equal(pipe(fds), 0);
    ow_log_set_fd(fds[1]);
    ow_log_set_level(OW_LOG_INFO);
    ow_job_log_key_reused(job);
    ow_log_set_fd(-1);
    ow_log_set_level(OW_LOG_ERROR);
    close(fds[1]);
    n = read(fds[0], captured, sizeof(captured) - 1);
    captured[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    assert_non_null(strstr(captured, "\"event\":\"idempotency_key_reused\""));
    assert_non_null(strstr(captured, "\"messaging.system\":\"kafka\","
                                     "\"messaging.destination.name\":\"orders-in\","
                                     "\"messaging.destination.partition.id\":\"3\","
                                     "\"messaging.kafka.offset\":41,"
                                     "\"messaging.consumer.group.name\":\"orders-group\","));
    snprintf(want, sizeof(want), "\"trace_id\":\"%s\",\"span_id\":\"%s\",\"trace_flags\":\"01\"}",
             TID, job->trace->span_id);
    assert_non_null(strstr(captured, want));
    ow_job_free(job);
    ow_job_maker_cleanup(&mk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_continues_the_input_trace),
        cmocka_unit_test(test_header_rules),
        cmocka_unit_test(test_no_headers),
        cmocka_unit_test(test_headers_never_change_the_decision),
        cmocka_unit_test(test_outputs_carry_the_trace),
        cmocka_unit_test(test_largest_headers_fit),
        cmocka_unit_test(test_log_lines_name_the_message_and_trace),
    };

    /* The security events of the messages made are not what is tested. */
    ow_log_set_level(OW_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
