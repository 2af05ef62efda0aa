/*
 * Fault injection with librdkafka's mock cluster: what a real broker cannot
 * show on demand. This process creates a three-broker mock cluster (it
 * serves real TCP on loopback), one worker process of the built binary
 * connects to it, and a fresh MariaDB database holds the decisions. Inputs
 * lead on brokers 1 and 2, every output partition (results, dead letters)
 * on broker 3, so a fault on broker 3 hits the worker's producer only. Each
 * scenario injects one kind of fault while inputs keep arriving:
 *
 *   1. retriable errors answering the worker's Produce requests;
 *   2. the group coordinator moving between brokers while the worker
 *      commits every 200 ms, with OffsetCommit errors;
 *   3. broker 3 down while results are in flight;
 *   4. SIGTERM while broker 3 is down;
 *   5. a permanent produce error;
 *   6. SIGTERM while every broker is down, group coordinator included
 *      (the final commit must not wait for it).
 *
 * Safety, checked over and over while the fault is active and afterwards:
 * no committed offset ever passes a message whose outputs (its result when
 * it has a key, its dead-letter copy when it is invalid) were not
 * acknowledged. A check reads the group's committed offsets FIRST and the
 * output topics AFTER: an output acknowledged before the offsets were read
 * is visible to the later read, so an input below a committed offset
 * without its outputs is a real violation. (A violation whose output
 * arrives between the two reads goes unseen; the faults keep outputs away
 * for far longer than a check takes.) Copies of one output must be
 * byte-identical.
 *
 * Liveness, once the fault is over: every input gets its outputs (and each
 * result has the expected code), the committed offsets reach the end of
 * every input partition, the database holds the expected rows, and SIGTERM
 * stops the worker with status 0 and leaves the offsets at the end.
 *
 * What librdkafka 2.0.2's mock does and does not do, and how the test
 * copes (seen in runs of this test and of small probes against 2.0.2, and
 * read in the mock's sources, rdkafka_mock*.c):
 *   - CreateTopics does not answer: topics come from
 *     rd_kafka_mock_topic_create. A group's first assignment takes ~3 s.
 *   - Heartbeat, JoinGroup and SyncGroup answer NOT_COORDINATOR on a
 *     broker that is not the coordinator, but OffsetCommit and OffsetFetch
 *     are answered by any broker, so moving the coordinator alone does not
 *     fail a commit: NOT_COORDINATOR is pushed on OffsetCommit (ApiKey 8)
 *     to make the client look the coordinator up again at commit time.
 *   - It checks an idempotent producer's sequence numbers only for
 *     transactional producers. Were a Produce request to fail and a later
 *     request pipelined behind it to succeed, the mock would append the
 *     later batch over the gap (Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER),
 *     and librdkafka, trusting the broker, would acknowledge the failed
 *     batch ("implicitly acked by subsequent batch success"): a result
 *     acknowledged and never written, which this test catches and no worker
 *     can prevent. So produce errors come in bursts pushed in one call
 *     (nothing succeeds between two of them) that end with a disconnect
 *     (_TRANSPORT), which fails whatever was pipelined behind the burst.
 *     For the same reason a retry of a batch that was appended but not
 *     answered is appended again: outputs may appear twice.
 *   - rd_kafka_mock_topic_set_error affects Metadata answers only, and
 *     librdkafka keeps producing through it: it injects nothing here.
 *   - librdkafka 2.0.2 itself treats NETWORK_EXCEPTION, FENCED_LEADER_EPOCH
 *     and UNKNOWN_LEADER_EPOCH in a Produce answer as permanent (a failed
 *     delivery report; the worker then stops with status 1 by design), so
 *     the bursts use the errors it retries: NOT_LEADER_FOR_PARTITION,
 *     LEADER_NOT_AVAILABLE, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_
 *     APPEND), KAFKA_STORAGE_ERROR and disconnects.
 *
 * OW_MOCK_FILTER=test_broker_down (a cmocka pattern) runs one scenario;
 * OW_MOCK_WORKER_DEBUG=eos,msg,cgrp sets the worker's kafka.debug (with
 * OW_MOCK_WORKER_LOG_LEVEL=debug to see it in the worker's log).
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
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "kit.h"
#include "teststack.h"

#define BROKERS 3
#define IN_PARTS 3
#define OUT_PARTS 3
#define API_PRODUCE 0
#define API_OFFSET_COMMIT 8
#define LIVENESS_S 45
#define KEY_MAX 64

/* One scenario: a mock cluster, its topics, a database and a worker. */
typedef struct {
    const char *name;
    rd_kafka_t *owner; /* the handle the mock cluster lives on */
    rd_kafka_mock_cluster_t *mc;
    teststack st; /* its bootstrap is the mock cluster's */
    char log[300];
    rd_kafka_t *producer;
    pid_t worker;
    int next;                /* index of the next input to generate */
    int n_valid;             /* valid inputs (distinct keys) */
    long long n_orders;      /* orders in the valid inputs */
    int checks;              /* safety checks made */
    int in_fault;            /* 1 while the fault is being injected or served */
    int max_covered;         /* most inputs below the committed offsets in one check */
    int fault_covered;       /* the same, during the fault */
    int shutdown_timeout_ms; /* the worker's shutdown.timeout_ms, 0 for the default */
    int64_t t0_ms;
} scenario;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* --- The cluster --------------------------------------------------------- */

static void set_leader(scenario *s, const char *topic, int32_t partition, int32_t broker)
{
    assert_int_equal(rd_kafka_mock_partition_set_leader(s->mc, topic, partition, broker),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
}

/* Input partitions lead on brokers 1 and 2, the result and dead-letter
 * partitions on broker 3, the group coordinator is broker 1: a fault on
 * broker 3 hits the worker's producer only. */
static void cluster_start(scenario *s)
{
    s->mc = kit_mock_cluster(BROKERS, &s->owner);
    assert_non_null(s->mc);
    snprintf(s->st.bootstrap, sizeof(s->st.bootstrap), "%s",
             rd_kafka_mock_cluster_bootstraps(s->mc));
    assert_int_equal(rd_kafka_mock_topic_create(s->mc, s->st.topic_in, IN_PARTS, BROKERS), 0);
    assert_int_equal(rd_kafka_mock_topic_create(s->mc, s->st.topic_out, OUT_PARTS, BROKERS), 0);
    assert_int_equal(rd_kafka_mock_topic_create(s->mc, s->st.topic_dlq, 1, BROKERS), 0);
    for (int p = 0; p < IN_PARTS; p++)
        set_leader(s, s->st.topic_in, p, 1 + p % 2);
    for (int p = 0; p < OUT_PARTS; p++)
        set_leader(s, s->st.topic_out, p, 3);
    set_leader(s, s->st.topic_dlq, 0, 3);
    assert_int_equal(rd_kafka_mock_coordinator_set(s->mc, "group", s->st.group, 1), 0);
}

/* Pushes a burst of retriable errors for the next Produce requests that
 * broker 3 receives, each answered after rtt_ms. In one call, so that no
 * request succeeds between two of them, and ending with a disconnect that
 * fails whatever was pipelined behind the burst: see the header on why the
 * mock needs both. */
static void push_produce_burst(scenario *s, int rtt_ms)
{
    assert_int_equal(
        rd_kafka_mock_broker_push_request_error_rtts(
            s->mc, 3, API_PRODUCE, 7, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, rtt_ms,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, rtt_ms, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            rtt_ms, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, rtt_ms,
            RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, rtt_ms, RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR,
            rtt_ms, RD_KAFKA_RESP_ERR__TRANSPORT, 0),
        RD_KAFKA_RESP_ERR_NO_ERROR);
}

static size_t produce_errors_left(scenario *s)
{
    size_t n = 0;

    assert_int_equal(rd_kafka_mock_broker_error_stack_cnt(s->mc, 3, API_PRODUCE, &n), 0);
    return n;
}

/* --- Inputs -------------------------------------------------------------- */

/* Input i: mostly valid batches of 1 to 3 orders with a key of their own;
 * every 10th is invalid with a key ("bad-": a 400 result and a dead-letter
 * copy); every 25th has no key (a dead-letter copy only). Returns the
 * number of orders of a valid input, 0 for an invalid one; key_len is 0
 * for no key. */
static int input_for(const scenario *s, int i, char key[KEY_MAX], size_t *key_len, char *value,
                     size_t vsz)
{
    int orders = 1 + i % 3;
    size_t len;

    *key_len = 0;
    if (i % 25 == 13) {
        snprintf(value, vsz, "{\"user_id\":7,\"orders\":[]}");
        return 0;
    }
    if (i % 10 == 7) {
        *key_len = (size_t)snprintf(key, KEY_MAX, "bad-%s-%d", s->name, i);
        snprintf(value, vsz, "{\"user_id\":%d,", 1000 + i);
        return 0;
    }
    *key_len = (size_t)snprintf(key, KEY_MAX, "%s-%d", s->name, i);
    len = (size_t)snprintf(value, vsz, "{\"user_id\":%d,\"orders\":[", 1000 + i % 13);
    for (int j = 0; j < orders; j++)
        len += (size_t)snprintf(value + len, vsz - len,
                                "%s{\"external_order_no\":\"%s-%d-%d\",\"amount\":\"%d.%02d\"}",
                                j ? "," : "", s->name, i, j, 10 + j, i % 100);
    snprintf(value + len, vsz - len, "]}");
    return orders;
}

/* Produces the next n inputs, round robin over the partitions. */
static void produce_inputs(scenario *s, int n)
{
    char key[KEY_MAX], value[512];

    for (int k = 0; k < n; k++, s->next++) {
        size_t key_len;
        int orders = input_for(s, s->next, key, &key_len, value, sizeof(value));

        assert_int_equal(kit_produce(s->producer, s->st.topic_in, s->next % IN_PARTS,
                                     key_len > 0 ? key : NULL, key_len, value, strlen(value)),
                         0);
        if (orders > 0) {
            s->n_valid++;
            s->n_orders += orders;
        }
    }
    assert_int_equal(kit_flush(s->producer, 30000), 0);
}

static int input_has_key(const kit_msg *m)
{
    return m->key != NULL && m->key_len > 0;
}

static int input_is_valid(const kit_msg *m)
{
    return input_has_key(m) && strncmp(m->key, "bad-", 4) != 0;
}

/* --- Outputs, indexed by the input they answer --------------------------- */

typedef struct {
    int64_t cap[IN_PARTS];
    const kit_msg **result[IN_PARTS]; /* first result per input offset */
    const kit_msg **dlq[IN_PARTS];    /* first dead-letter copy per input offset */
} out_index;

static int64_t header_i64(const kit_msg *m, const char *name)
{
    char v[32];
    char *end = NULL;
    long long n;

    if (!kit_header(m, name, v, sizeof(v)))
        fail_msg("an output has no %s header", name);
    n = strtoll(v, &end, 10);
    if (end == v || *end != '\0')
        fail_msg("an output has a bad %s header: %s", name, v);
    return n;
}

/* Makes room in the index for input offset off of partition part. */
static void index_reserve(out_index *x, int64_t part, int64_t off)
{
    int64_t cap;

    if (part < 0 || part >= IN_PARTS || off < 0)
        fail_msg("an output names source %lld/%lld", (long long)part, (long long)off);
    if (off < x->cap[part])
        return;
    cap = off + 256;
    x->result[part] = realloc(x->result[part], (size_t)cap * sizeof(*x->result[part]));
    x->dlq[part] = realloc(x->dlq[part], (size_t)cap * sizeof(*x->dlq[part]));
    assert_non_null(x->result[part]);
    assert_non_null(x->dlq[part]);
    for (int64_t i = x->cap[part]; i < cap; i++)
        x->result[part][i] = x->dlq[part][i] = NULL;
    x->cap[part] = cap;
}

/* Adds outputs to the index; only those at an offset below limit[partition]
 * (of their own topic) when limit is not NULL. Copies of one output must be
 * byte-identical (at-least-once delivery repeats a result, never changes it). */
static void index_outputs(out_index *x, const kit_msgs *outs, int dlq, const int64_t *limit)
{
    for (size_t k = 0; k < outs->n; k++) {
        const kit_msg *m = &outs->v[k];
        int64_t part = header_i64(m, "source-partition");
        int64_t off = header_i64(m, "source-offset");
        const kit_msg **p;

        if (limit != NULL && m->offset >= limit[m->partition])
            continue;
        index_reserve(x, part, off);
        p = &(dlq ? x->dlq : x->result)[part][off];
        if (*p == NULL)
            *p = m;
        else if ((*p)->len != m->len || memcmp((*p)->value, m->value, m->len) != 0)
            fail_msg("input %lld/%lld has two different %s", (long long)part, (long long)off,
                     dlq ? "dead-letter copies" : "results");
    }
}

/* The first result (or dead-letter copy) of input in, or NULL. */
static const kit_msg *output_of(const out_index *x, int dlq, const kit_msg *in)
{
    if (in->offset >= x->cap[in->partition])
        return NULL;
    return (dlq ? x->dlq : x->result)[in->partition][in->offset];
}

static void index_free(out_index *x)
{
    for (int p = 0; p < IN_PARTS; p++) {
        free(x->result[p]);
        free(x->dlq[p]);
    }
    memset(x, 0, sizeof(*x));
}

/* What input m is missing among its outputs, or NULL. */
static const char *missing_output(const out_index *x, const kit_msg *m)
{
    if (input_has_key(m) && output_of(x, 0, m) == NULL)
        return "result";
    if (!input_is_valid(m) && output_of(x, 1, m) == NULL)
        return "dead-letter copy";
    return NULL;
}

/* --- Snapshots and the safety check ------------------------------------ */

/* What a check sees: the committed offsets, read first, then the output
 * topics and the inputs. */
typedef struct {
    int64_t committed[IN_PARTS];
    kit_msgs results, dlq, inputs;
    out_index x;
} snapshot;

static void read_committed(scenario *s, int64_t *committed)
{
    for (int attempt = 0;; attempt++) {
        if (kit_committed(s->st.bootstrap, s->st.group, s->st.topic_in, IN_PARTS, committed) == 0)
            return;
        if (attempt == 3)
            fail_msg("%s: cannot read the group's committed offsets", s->name);
        sleep_ms(200);
    }
}

static void read_all(scenario *s, const char *topic, kit_msgs *out)
{
    if (kit_read_topic(s->st.bootstrap, topic, 20000, out) != 0)
        fail_msg("%s: cannot read topic %s", s->name, topic);
}

/* Reads the outputs and the inputs; with limits, only the outputs below
 * them (per partition of the output topic) count. */
static void snapshot_outputs(scenario *s, snapshot *snap, const int64_t *out_limit,
                             const int64_t *dlq_limit)
{
    read_all(s, s->st.topic_out, &snap->results);
    read_all(s, s->st.topic_dlq, &snap->dlq);
    read_all(s, s->st.topic_in, &snap->inputs);
    index_outputs(&snap->x, &snap->results, 0, out_limit);
    index_outputs(&snap->x, &snap->dlq, 1, dlq_limit);
}

static void snapshot_take(scenario *s, snapshot *snap)
{
    memset(snap, 0, sizeof(*snap));
    read_committed(s, snap->committed);
    snapshot_outputs(s, snap, NULL, NULL);
}

static void snapshot_free(snapshot *snap)
{
    index_free(&snap->x);
    kit_msgs_free(&snap->results);
    kit_msgs_free(&snap->dlq);
    kit_msgs_free(&snap->inputs);
}

/* Every input below committed[] must have its outputs in snap. Returns how
 * many inputs were below. */
static int verify_covered(scenario *s, const int64_t *committed, const snapshot *snap,
                          const char *when)
{
    int covered = 0;

    for (size_t k = 0; k < snap->inputs.n; k++) {
        const kit_msg *m = &snap->inputs.v[k];
        const char *missing;

        if (m->offset >= committed[m->partition])
            continue;
        covered++;
        missing = missing_output(&snap->x, m);
        if (missing != NULL)
            fail_msg("%s (%s, t=%.1f s): partition %d committed at %lld, but input %lld (key "
                     "%.*s) has no acknowledged %s",
                     s->name, when, (double)(now_ms() - s->t0_ms) / 1000.0, (int)m->partition,
                     (long long)committed[m->partition], (long long)m->offset,
                     input_has_key(m) ? (int)m->key_len : 6, input_has_key(m) ? m->key : "(none)",
                     missing);
    }
    s->checks++;
    if (covered > s->max_covered)
        s->max_covered = covered;
    if (s->in_fault && covered > s->fault_covered)
        s->fault_covered = covered;
    return covered;
}

static void check_safety(scenario *s, const char *when)
{
    snapshot snap;

    snapshot_take(s, &snap);
    verify_covered(s, snap.committed, &snap, when);
    snapshot_free(&snap);
}

/* --- The worker ---------------------------------------------------------- */

static void start_worker(scenario *s)
{
    testenv env;

    testenv_worker(&env, &s->st);
    testenv_add(&env, "ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=6000");
    testenv_add(&env, "ORDER_WORKER_KAFKA_CONSUMER_HEARTBEAT_INTERVAL_MS=500");
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=200");
    /* Bursts of produce errors end with disconnects, after which librdkafka
     * backs off reconnecting up to reconnect.backoff.max.ms (10 s by
     * default): a shorter maximum only makes the test quicker. */
    testenv_add(&env, "ORDER_WORKER_KAFKA_RECONNECT_BACKOFF_MAX_MS=1000");
    if (s->shutdown_timeout_ms > 0)
        testenv_add(&env, "ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=%d", s->shutdown_timeout_ms);
    testenv_add(&env, "ORDER_WORKER_LOG_LEVEL=%s", test_env_or("OW_MOCK_WORKER_LOG_LEVEL", "info"));
    if (getenv("OW_MOCK_WORKER_DEBUG") != NULL)
        testenv_add(&env, "ORDER_WORKER_KAFKA_DEBUG=%s", getenv("OW_MOCK_WORKER_DEBUG"));
    s->worker = teststack_spawn(&env, s->log);
}

/* Lines of the scenario's worker log (every start appends) that carry
 * "event":"<event>". */
static int log_events(const scenario *s, const char *event)
{
    char needle[96], line[8192];
    FILE *f = fopen(s->log, "r");
    int n = 0;

    if (f == NULL)
        return 0;
    snprintf(needle, sizeof(needle), "\"event\":\"%s\"", event);
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Waits (30 s at most) until the log holds n lines of the event. */
static void await_log_events(scenario *s, const char *event, int n)
{
    for (int waited = 0; waited < 300; waited++) {
        if (log_events(s, event) >= n)
            return;
        sleep_ms(100);
    }
    fail_msg("%s: %d %s events not logged within 30 s (see %s)", s->name, n, event, s->log);
}

/* Starts the worker again after a scenario's first one stopped, and waits
 * until it has joined the group. When the first worker had committed
 * everything, finish() had nothing to wait for, and its SIGTERM reached the
 * new process before main() installed the handler (exit 143 in the
 * sanitizer build, whose start is slower): the stop finish() checks must be
 * a running worker's. */
static void restart_worker(scenario *s)
{
    int assigned = log_events(s, "partitions_assigned");

    start_worker(s);
    await_log_events(s, "partitions_assigned", assigned + 1);
}

/* Waits until the worker has consumed and answered something. */
static void await_first_output(scenario *s)
{
    for (int waited = 0; waited < 300; waited++) {
        int64_t ends[OUT_PARTS] = {0};
        int64_t total = 0;

        assert_int_equal(kit_end_offsets(s->st.bootstrap, s->st.topic_out, ends, OUT_PARTS),
                         OUT_PARTS);
        for (int p = 0; p < OUT_PARTS; p++)
            total += ends[p] > 0 ? ends[p] : 0;
        if (total > 0)
            return;
        sleep_ms(100);
    }
    fail_msg("%s: no result within 30 s of the worker's start (see %s)", s->name, s->log);
}

/* The produce fault is over when broker 3 has served every pushed error;
 * safety is checked meanwhile. */
static void await_produce_errors_served(scenario *s)
{
    int64_t deadline = now_ms() + 30000;

    while (produce_errors_left(s) > 0) {
        if (now_ms() > deadline)
            fail_msg("%s: %zu pushed Produce errors never reached the worker", s->name,
                     produce_errors_left(s));
        check_safety(s, "produce errors draining");
    }
}

/* --- Liveness ------------------------------------------------------------ */

/* Each result says what its input deserves. */
static void check_answers(const snapshot *snap)
{
    for (size_t k = 0; k < snap->inputs.n; k++) {
        const kit_msg *in = &snap->inputs.v[k];
        const kit_msg *r = output_of(&snap->x, 0, in);
        json_t *j;
        const char *code;

        if (r == NULL)
            continue;
        j = json_loadb(r->value, r->len, 0, NULL);
        if (j == NULL)
            fail_msg("the result of input %d/%lld is not JSON", (int)in->partition,
                     (long long)in->offset);
        code = json_string_value(json_object_get(j, "code"));
        if (code == NULL || strcmp(code, input_is_valid(in) ? "CREATED" : "INVALID_REQUEST") != 0)
            fail_msg("input %d/%lld got %s", (int)in->partition, (long long)in->offset,
                     code != NULL ? code : "a result without a code");
        json_decref(j);
    }
}

/* After the fault: every input gets its outputs and the committed offsets
 * reach the end of every input partition; safety is checked on the way. */
static void await_liveness(scenario *s)
{
    int64_t deadline = now_ms() + LIVENESS_S * 1000;

    for (;;) {
        snapshot snap;
        int64_t ends[IN_PARTS];
        int missing = 0, behind = 0;

        snapshot_take(s, &snap);
        verify_covered(s, snap.committed, &snap, "recovery");
        assert_int_equal(kit_end_offsets(s->st.bootstrap, s->st.topic_in, ends, IN_PARTS),
                         IN_PARTS);
        for (size_t k = 0; k < snap.inputs.n; k++)
            missing += missing_output(&snap.x, &snap.inputs.v[k]) != NULL;
        for (int p = 0; p < IN_PARTS; p++)
            behind += snap.committed[p] != ends[p];
        if (snap.inputs.n != (size_t)s->next)
            fail_msg("%s: %zu inputs in the topic, %d produced", s->name, snap.inputs.n, s->next);
        if (missing == 0 && behind == 0) {
            check_answers(&snap);
            snapshot_free(&snap);
            print_message("%s: recovered %.1f s after the start\n", s->name,
                          (double)(now_ms() - s->t0_ms) / 1000.0);
            return;
        }
        if (now_ms() > deadline) {
            snapshot_free(&snap);
            fail_msg("%s: %d s after the fault, %d of %d inputs lack outputs; committed "
                     "%lld/%lld/%lld, ends %lld/%lld/%lld (see %s)",
                     s->name, LIVENESS_S, missing, s->next, (long long)snap.committed[0],
                     (long long)snap.committed[1], (long long)snap.committed[2], (long long)ends[0],
                     (long long)ends[1], (long long)ends[2], s->log);
        }
        snapshot_free(&snap);
        sleep_ms(300);
    }
}

static void expect_count(scenario *s, const char *sql, long long want)
{
    long long got = testdb_count(&s->st.db, sql);

    if (got != want)
        fail_msg("%s: %s gave %lld, expected %lld", s->name, sql, got, want);
}

/* One request per valid input, all SUCCEEDED, owning exactly their orders. */
static void check_database(scenario *s)
{
    expect_count(s, "SELECT COUNT(*) FROM idempotency_requests", s->n_valid);
    expect_count(s, "SELECT COUNT(*) FROM idempotency_requests WHERE status='SUCCEEDED'",
                 s->n_valid);
    expect_count(s, "SELECT COUNT(*) FROM orders", s->n_orders);
    expect_count(s,
                 "SELECT COUNT(*) FROM orders o LEFT JOIN idempotency_requests r "
                 "ON r.id = o.request_id WHERE r.status IS NULL OR r.status <> 'SUCCEEDED'",
                 0);
}

/* SIGTERM: exit status 0, and the committed offsets stay at the end. */
static void stop_worker(scenario *s)
{
    int64_t committed[IN_PARTS], ends[IN_PARTS];
    int status;

    assert_int_equal(kill(s->worker, SIGTERM), 0);
    status = kit_wait(s->worker, 30000);
    if (status != 0)
        fail_msg("%s: the worker exited with %d after SIGTERM (see %s)", s->name, status, s->log);
    s->worker = 0;
    read_committed(s, committed);
    assert_int_equal(kit_end_offsets(s->st.bootstrap, s->st.topic_in, ends, IN_PARTS), IN_PARTS);
    for (int p = 0; p < IN_PARTS; p++)
        if (committed[p] != ends[p])
            fail_msg("%s: after SIGTERM partition %d is committed at %lld, end %lld", s->name, p,
                     (long long)committed[p], (long long)ends[p]);
}

static void finish(scenario *s)
{
    s->in_fault = 0;
    await_liveness(s);
    check_database(s);
    stop_worker(s);
    print_message("%s: %d inputs, %d safety checks (up to %d inputs below the committed "
                  "offsets during the fault, %d after), %.1f s\n",
                  s->name, s->next, s->checks, s->fault_covered, s->max_covered,
                  (double)(now_ms() - s->t0_ms) / 1000.0);
}

/* --- Setup and teardown -------------------------------------------------- */

static int scenario_setup(void **state, const char *name)
{
    scenario *s = calloc(1, sizeof(*s));

    assert_non_null(s);
    s->name = name;
    s->t0_ms = now_ms();
    teststack_name(&s->st, name);
    snprintf(s->log, sizeof(s->log), "%s/mock-faults-%s.log", s->st.logdir, name);
    unlink(s->log);
    *state = s;
    cluster_start(s);
    testdb_create(&s->st.db, "ow_mock");
    s->producer = kit_producer(s->st.bootstrap, NULL);
    assert_non_null(s->producer);
    print_message("%s: mock cluster %s, worker log %s\n", name, s->st.bootstrap, s->log);
    return 0;
}

static int scenario_teardown(void **state)
{
    scenario *s = *state;

    if (s == NULL)
        return 0;
    if (s->worker > 0) {
        kill(s->worker, SIGKILL);
        kit_wait(s->worker, 5000);
    }
    if (s->producer != NULL)
        rd_kafka_destroy(s->producer);
    if (s->st.db.admin != NULL)
        testdb_drop(&s->st.db);
    if (s->mc != NULL)
        rd_kafka_mock_cluster_destroy(s->mc);
    if (s->owner != NULL)
        rd_kafka_destroy(s->owner);
    free(s);
    *state = NULL;
    return 0;
}

static int setup_produce(void **state)
{
    return scenario_setup(state, "produce");
}

static int setup_coordinator(void **state)
{
    return scenario_setup(state, "coord");
}

static int setup_down(void **state)
{
    return scenario_setup(state, "down");
}

static int setup_stop(void **state)
{
    return scenario_setup(state, "stop");
}

/* --- Scenarios ----------------------------------------------------------- */

/*
 * 1. Produce errors on the result topic. A first batch of inputs waits for
 * the worker with errors pushed on the cluster-wide Produce stack (once the
 * inputs are flushed, the worker's is the only producer); then 20 inputs
 * arrive every 800 ms while broker 3, the leader of every output partition,
 * answers the worker's Produce requests with a burst of retriable errors
 * (each after 100 ms) per step. Safety is checked back to back throughout,
 * and every pushed error must have been served to the worker.
 */
static void test_produce_errors(void **state)
{
    scenario *s = *state;

    produce_inputs(s, 60);
    /* The cluster-wide stack serves any broker; only the worker produces
     * until it is empty. It ends with a disconnect, as a burst does. */
    rd_kafka_mock_push_request_errors(
        s->mc, API_PRODUCE, 10, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR,
        RD_KAFKA_RESP_ERR__TRANSPORT);
    s->in_fault = 1;
    start_worker(s);
    /* A result in the log means the cluster's error stack is empty: an
     * answer without error comes only after every pushed error was served. */
    await_first_output(s);
    for (int step = 0; step < 8; step++) {
        int64_t step_end = now_ms() + 800;

        produce_inputs(s, 20);
        push_produce_burst(s, 100);
        do
            check_safety(s, "produce errors");
        while (now_ms() < step_end);
    }
    await_produce_errors_served(s);
    finish(s);
}

/*
 * 2. The coordinator moves while the worker commits every 200 ms: it is set
 * to broker 2, 3, 1, 2, ... every step, and OffsetCommit requests fail with
 * NOT_COORDINATOR (the mock answers commits on any broker, so this is what
 * makes the client look the coordinator up again; its heartbeats find out
 * by themselves), COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS
 * and REQUEST_TIMED_OUT (two per step). Every other step broker 3 answers
 * the worker's Produce requests with a burst of retriable errors (each after
 * 150 ms), so results stay unacknowledged for a while after they leave the
 * worker: an offset stored or committed early would show. Ten inputs
 * arrive every 700 ms, safety is checked back to back, and the committed
 * offsets must move during the fault.
 */
static void test_coordinator_moves(void **state)
{
    scenario *s = *state;
    int64_t first[IN_PARTS], last[IN_PARTS];
    int moved = 0;

    produce_inputs(s, 20);
    start_worker(s);
    await_first_output(s);
    read_committed(s, first);
    s->in_fault = 1;
    for (int step = 0; step < 16; step++) {
        static const rd_kafka_resp_err_t commit_errors[] = {
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE};
        int64_t step_end = now_ms() + 700;
        int32_t coordinator = 1 + (step + 1) % 3;

        assert_int_equal(rd_kafka_mock_coordinator_set(s->mc, "group", s->st.group, coordinator),
                         0);
        rd_kafka_mock_push_request_errors_array(s->mc, API_OFFSET_COMMIT, 2,
                                                &commit_errors[(2 * step) % 6]);
        produce_inputs(s, 10);
        if (step % 2 == 0)
            push_produce_burst(s, 150);
        do
            check_safety(s, "coordinator moving");
        while (now_ms() < step_end);
    }
    read_committed(s, last);
    for (int p = 0; p < IN_PARTS; p++)
        moved += last[p] > first[p];
    if (moved == 0)
        fail_msg("coord: no committed offset moved while the coordinator moved");
    await_produce_errors_served(s);
    finish(s);
}

/*
 * 3. Broker 3, the leader of every output partition, goes down for 4 s
 * while results are in flight (it answers after 250 ms before that, to
 * widen the window), and inputs keep coming. While it is down the output
 * topics cannot be read, so each check reads the committed offsets then,
 * and judges them later against the outputs that were in the log when the
 * broker came back: before it comes back, its next Produce answers are
 * pushed as errors, so nothing is appended until the test has read the
 * output end offsets, and an output acknowledged before a committed read is
 * below those ends.
 */
#define DOWN_MS 4000
#define DOWN_READS_MAX 64

static void test_broker_down(void **state)
{
    scenario *s = *state;
    int64_t down_committed[DOWN_READS_MAX][IN_PARTS];
    int reads = 0;
    int64_t out_ends[OUT_PARTS], dlq_end[1];
    snapshot snap;
    int covered = 0;
    size_t left;
    int64_t down_ms;

    produce_inputs(s, 40);
    start_worker(s);
    await_first_output(s);
    check_safety(s, "before the fault");
    s->in_fault = 1;
    assert_int_equal(rd_kafka_mock_broker_set_rtt(s->mc, 3, 250), 0);
    produce_inputs(s, 40);
    sleep_ms(100);
    assert_int_equal(rd_kafka_mock_broker_set_down(s->mc, 3), 0);
    down_ms = now_ms();
    while (reads < DOWN_READS_MAX && (now_ms() - down_ms < DOWN_MS || reads < 4)) {
        if (reads % 4 == 0)
            produce_inputs(s, 10);
        sleep_ms(150);
        read_committed(s, down_committed[reads++]);
    }
    assert_int_equal(rd_kafka_mock_broker_set_rtt(s->mc, 3, 0), 0);
    push_produce_burst(s, 100);
    push_produce_burst(s, 100);
    assert_int_equal(rd_kafka_mock_broker_set_up(s->mc, 3), 0);
    down_ms = now_ms() - down_ms;
    assert_int_equal(kit_end_offsets(s->st.bootstrap, s->st.topic_out, out_ends, OUT_PARTS),
                     OUT_PARTS);
    assert_int_equal(kit_end_offsets(s->st.bootstrap, s->st.topic_dlq, dlq_end, 1), 1);
    left = produce_errors_left(s);
    if (left == 0)
        fail_msg("down: the worker produced before the output ends were read; the check "
                 "would be unsound (push more errors)");
    print_message("down: broker 3 down for %.1f s; output ends read with %zu pushed errors left\n",
                  (double)down_ms / 1000.0, left);
    /* The committed offsets read while the broker was down, against the
     * outputs that were in the log when it came back. */
    memset(&snap, 0, sizeof(snap));
    snapshot_outputs(s, &snap, out_ends, dlq_end);
    for (int i = 0; i < reads; i++) {
        int c = verify_covered(s, down_committed[i], &snap, "broker down");

        covered = c > covered ? c : covered;
    }
    snapshot_free(&snap);
    print_message("down: %d committed reads while the broker was down, up to %d inputs below "
                  "them\n",
                  reads, covered);
    check_safety(s, "after the broker came back");
    await_produce_errors_served(s);
    finish(s);
}

/*
 * 4. SIGTERM while broker 3 is down and results wait for it. The worker
 * must stop with status 0 within shutdown.timeout_ms (2 s here) and a
 * little more, committing nothing past an unacknowledged output. Once it is
 * gone nothing produces to broker 3, so after the broker is back its log
 * holds every output that was ever acknowledged. A new worker then finishes
 * the work (the database turns the redelivered inputs into replays).
 */
#define STOP_TIMEOUT_MS 2000
#define STOP_SLACK_MS 2500

/* SIGTERM: the worker must exit 0 within limit_ms; returns how long it took. */
static int64_t stop_within(scenario *s, int64_t limit_ms, const char *during)
{
    int64_t took = now_ms();
    int status;

    assert_int_equal(kill(s->worker, SIGTERM), 0);
    status = kit_wait(s->worker, 120000);
    took = now_ms() - took;
    s->worker = 0;
    if (status != 0)
        fail_msg("%s: the worker exited with %d after SIGTERM %s (see %s)", s->name, status, during,
                 s->log);
    if (took > limit_ms)
        fail_msg("%s: SIGTERM %s took %lld ms with shutdown.timeout_ms = %d (see %s)", s->name,
                 during, (long long)took, STOP_TIMEOUT_MS, s->log);
    return took;
}

static void test_stop_during_outage(void **state)
{
    scenario *s = *state;
    int64_t committed[IN_PARTS];
    snapshot snap;
    int64_t took;

    s->shutdown_timeout_ms = STOP_TIMEOUT_MS;
    produce_inputs(s, 30);
    start_worker(s);
    await_first_output(s);
    s->in_fault = 1;
    assert_int_equal(rd_kafka_mock_broker_set_down(s->mc, 3), 0);
    produce_inputs(s, 30);
    sleep_ms(1000); /* consumed and decided; their results wait for broker 3 */
    took = stop_within(s, STOP_TIMEOUT_MS + STOP_SLACK_MS, "during the outage");
    read_committed(s, committed);
    assert_int_equal(rd_kafka_mock_broker_set_up(s->mc, 3), 0);
    memset(&snap, 0, sizeof(snap));
    snapshot_outputs(s, &snap, NULL, NULL);
    verify_covered(s, committed, &snap, "stopped during the outage");
    snapshot_free(&snap);
    print_message("stop: SIGTERM during the outage took %.1f s; committed %lld/%lld/%lld\n",
                  (double)took / 1000.0, (long long)committed[0], (long long)committed[1],
                  (long long)committed[2]);
    restart_worker(s);
    finish(s);
}

/*
 * 5. A permanent produce error (the broker refuses the results topic). The
 * worker cannot deliver a result, so it must stop with status 1 after
 * flushing what it can, without ever committing an offset past the
 * undelivered result; a supervisor's restart then finishes the work once
 * the broker accepts results again.
 */
static void test_fatal_produce_error(void **state)
{
    scenario *s = *state;
    int64_t committed[IN_PARTS];
    snapshot snap;
    int status = -1;
    int64_t deadline;

    produce_inputs(s, 30);
    start_worker(s);
    await_first_output(s);
    s->in_fault = 1;
    assert_int_equal(rd_kafka_mock_broker_push_request_error_rtts(
                         s->mc, 3, API_PRODUCE, 1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, 0),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
    produce_inputs(s, 30);
    deadline = now_ms() + 30000;
    while (status < 0 && now_ms() < deadline) {
        check_safety(s, "permanent produce error");
        status = kit_wait(s->worker, 100);
    }
    if (status != 1)
        fail_msg("fatal: the worker exited with %d, not 1, after a permanent produce error "
                 "(-1: still running; see %s)",
                 status, s->log);
    s->worker = 0;
    read_committed(s, committed);
    memset(&snap, 0, sizeof(snap));
    snapshot_outputs(s, &snap, NULL, NULL);
    verify_covered(s, committed, &snap, "after the fatal exit");
    snapshot_free(&snap);
    print_message("fatal: exit status 1; committed %lld/%lld/%lld\n", (long long)committed[0],
                  (long long)committed[1], (long long)committed[2]);
    restart_worker(s);
    finish(s);
}

static int setup_fatal(void **state)
{
    return scenario_setup(state, "fatal");
}

/*
 * 6. SIGTERM with the whole cluster down: no commit, no leave and no close
 * can be answered, and shutdown.timeout_ms still bounds the exit
 * (it once took 90 s). Whatever was not committed is redelivered to
 * the next worker, which the liveness check then sees answered.
 */
#define ALL_DOWN_SLACK_MS 1500

static void test_stop_with_cluster_down(void **state)
{
    scenario *s = *state;
    int64_t committed[IN_PARTS];
    int64_t took;

    s->shutdown_timeout_ms = STOP_TIMEOUT_MS;
    produce_inputs(s, 30);
    start_worker(s);
    await_first_output(s);
    s->in_fault = 1;
    for (int32_t b = 1; b <= 3; b++)
        assert_int_equal(rd_kafka_mock_broker_set_down(s->mc, b), 0);
    sleep_ms(500);
    took = stop_within(s, STOP_TIMEOUT_MS + ALL_DOWN_SLACK_MS, "with every broker down");
    for (int32_t b = 1; b <= 3; b++)
        assert_int_equal(rd_kafka_mock_broker_set_up(s->mc, b), 0);
    read_committed(s, committed);
    print_message("all-down: SIGTERM with every broker down took %.1f s (limit %d ms); "
                  "committed %lld/%lld/%lld\n",
                  (double)took / 1000.0, STOP_TIMEOUT_MS, (long long)committed[0],
                  (long long)committed[1], (long long)committed[2]);
    restart_worker(s);
    finish(s);
}

static int setup_all_down(void **state)
{
    return scenario_setup(state, "alldown");
}

/*
 * 7. The idempotent producer fails fatally: the broker answers a Produce
 * request with OUT_OF_ORDER_SEQUENCE_NUMBER, as it does to librdkafka
 * 2.0's producer after some leader changes (librdkafka #4438). The worker
 * must not stop: it gives up the failed producer's outputs, goes back to
 * the stored offsets and carries on with a new producer, and every input
 * gets its result, with safety checked throughout.
 */
static void test_producer_replaced(void **state)
{
    scenario *s = *state;

    produce_inputs(s, 30);
    start_worker(s);
    await_first_output(s);
    s->in_fault = 1;
    assert_int_equal(
        rd_kafka_mock_broker_push_request_error_rtts(
            s->mc, 3, API_PRODUCE, 1, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, 0),
        RD_KAFKA_RESP_ERR_NO_ERROR);
    /* Inputs keep arriving at every lane while the producer fails: a lane
     * that produces between the failure and its replacement is refused at
     * once, which must not stop the worker either. */
    for (int step = 0; step < 6; step++) {
        int64_t step_end = now_ms() + 500;

        produce_inputs(s, 80);
        do {
            check_safety(s, "producer replaced");
            if (kit_wait(s->worker, 50) >= 0)
                fail_msg("replaced: the worker exited after its producer failed (see %s)", s->log);
        } while (now_ms() < step_end);
    }
    finish(s);
}

static int setup_replaced(void **state)
{
    return scenario_setup(state, "replaced");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_produce_errors, setup_produce, scenario_teardown),
        cmocka_unit_test_setup_teardown(test_coordinator_moves, setup_coordinator,
                                        scenario_teardown),
        cmocka_unit_test_setup_teardown(test_broker_down, setup_down, scenario_teardown),
        cmocka_unit_test_setup_teardown(test_stop_during_outage, setup_stop, scenario_teardown),
        cmocka_unit_test_setup_teardown(test_fatal_produce_error, setup_fatal, scenario_teardown),
        cmocka_unit_test_setup_teardown(test_stop_with_cluster_down, setup_all_down,
                                        scenario_teardown),
        cmocka_unit_test_setup_teardown(test_producer_replaced, setup_replaced, scenario_teardown),
    };

    if (getenv("OW_MOCK_FILTER") != NULL)
        cmocka_set_test_filter(getenv("OW_MOCK_FILTER"));
    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
