/*
 * End to end with hostile input: every row of the hostile table
 * (tests/hostile/hostile_cases.c) goes to a fresh input topic, read by one
 * worker process of the built binary on a real broker and a fresh MariaDB
 * database. Checked afterwards:
 *   - the group's committed offsets reach the end of every partition, so no
 *     message stopped its partition;
 *   - a message with a non-empty key has exactly one result, under its own
 *     key byte for byte: 400 INVALID_REQUEST naming the expected first field
 *     (the one valid control row: 201 CREATED); a message with an empty key
 *     or none has no result;
 *   - every invalid message has exactly one dead-letter copy with the same
 *     key and value bytes and the error and source headers; a key longer
 *     than OUTPUT_KEY_MAX or a value that would not fit the producer's
 *     limit beside it is cut, with its original length in a header, and
 *     every output fits the limit;
 *   - the database holds the control's request and order and nothing else;
 *   - SIGTERM stops the worker with status 0.
 * The worker runs with request.max_bytes = HOSTILE_MAX_BYTES, the limit the
 * table's rows are judged against.
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

#include "hostile_cases.h"
#include "kit.h"
#include "teststack.h"

#define PARTITIONS 4
#define WAIT_S 120
#define OUTPUT_KEY_MAX 1024       /* src/pipeline/job.h */
#define PRODUCER_LIMIT 1000000    /* the worker producer's message.max.bytes */

/* A row as produced, and where it landed in the input topic. */
typedef struct {
    const hostile_case *c;
    unsigned char *key;
    unsigned char *value;
    size_t len;
    int32_t partition;
    int64_t offset;
} sent_row;

static teststack ts;
static pid_t worker;
static sent_row *rows;
static kit_msgs results, dead_letters;

static void start_worker(void)
{
    testenv env;
    char log[300];

    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_REQUEST_MAX_BYTES=%d", HOSTILE_MAX_BYTES);
    testenv_add(&env, "ORDER_WORKER_REQUEST_MAX_ORDERS=%d", HOSTILE_MAX_ORDERS);
    testenv_add(&env, "ORDER_WORKER_KAFKA_CONSUMER_SESSION_TIMEOUT_MS=6000");
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=500");
    teststack_log(&ts, "worker-hostile.log", log, sizeof(log));
    worker = teststack_spawn(&env, log);
}

static int setup(void **state)
{
    (void)state;
    teststack_create(&ts, "hostile", "ow_hostile", PARTITIONS);
    rows = calloc(hostile_count, sizeof(*rows));
    assert_non_null(rows);
    start_worker();
    print_message("hostile e2e: %zu rows, broker %s (%s), topics %s/%s/%s, worker log in %s\n",
                  hostile_count, ts.bootstrap, test_env_or("OW_TEST_BROKER_KIND", "?"), ts.topic_in,
                  ts.topic_out, ts.topic_dlq, ts.logdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (worker > 0) {
        kill(worker, SIGKILL);
        kit_wait(worker, 5000);
    }
    testdb_drop(&ts.db);
    for (size_t i = 0; rows != NULL && i < hostile_count; i++) {
        free(rows[i].key);
        free(rows[i].value);
    }
    free(rows);
    kit_msgs_free(&results);
    kit_msgs_free(&dead_letters);
    return 0;
}

/* --- Matching ----------------------------------------------------------- */

static int same_key(const sent_row *r, const kit_msg *m)
{
    if (!r->c->has_key)
        return m->key == NULL;
    return m->key != NULL && m->key_len == r->c->key_len &&
           (r->c->key_len == 0 || memcmp(m->key, r->key, r->c->key_len) == 0);
}

/* Rows always have a value, possibly empty: an empty value must not come
 * back as a null one (a tombstone, which compaction would treat as a delete). */
static int same_value(const sent_row *r, const kit_msg *m)
{
    return !m->value_null && m->len == r->len &&
           (r->len == 0 || memcmp(m->value, r->value, r->len) == 0);
}

static int64_t header_int(const kit_msg *m, const char *name);

/* An output's key: the message's, cut to OUTPUT_KEY_MAX bytes with the
 * original length in key-truncated-from when it was longer. */
static int output_key_ok(const sent_row *r, const kit_msg *m)
{
    size_t want = r->c->key_len < OUTPUT_KEY_MAX ? r->c->key_len : OUTPUT_KEY_MAX;

    if (r->c->key_len <= OUTPUT_KEY_MAX)
        return same_key(r, m) && header_int(m, "key-truncated-from") == -1;
    return m->key != NULL && m->key_len == want && memcmp(m->key, r->key, want) == 0 &&
           header_int(m, "key-truncated-from") == (int64_t)r->c->key_len;
}

static int64_t header_int(const kit_msg *m, const char *name)
{
    char text[32];

    if (!kit_header(m, name, text, sizeof(text)))
        return -1;
    return strtoll(text, NULL, 10);
}

/* Messages of out whose source headers name the input message of row r. */
static size_t outputs_of(const sent_row *r, const kit_msgs *out, const kit_msg **first)
{
    size_t n = 0;

    *first = NULL;
    for (size_t k = 0; k < out->n; k++) {
        const kit_msg *m = &out->v[k];

        if (header_int(m, "source-partition") != r->partition ||
            header_int(m, "source-offset") != r->offset)
            continue;
        if (n++ == 0)
            *first = m;
    }
    return n;
}

/* Reads topic until it holds at least want messages or WAIT_S passes. */
static void read_at_least(const char *topic, size_t want, kit_msgs *out)
{
    for (int waited = 0; waited < WAIT_S * 2; waited++) {
        kit_msgs_free(out);
        kit_read_topic(ts.bootstrap, topic, 20000, out);
        if (out->n >= want)
            return;
        usleep(500000);
    }
    fail_msg("%s: only %zu of %zu messages within %d s", topic, out->n, want, WAIT_S);
}

/* --- Tests --------------------------------------------------------------- */

/* Produces every row, then finds each in the input topic to learn its
 * partition and offset (the source headers of the outputs name them). */
static void test_produce_every_row(void **state)
{
    /* The rows with huge keys are larger than a producer's default limit,
     * not than the broker's. */
    rd_kafka_t *producer = kit_producer(ts.bootstrap, "message.max.bytes=1048000");
    kit_msgs inputs = {0};

    (void)state;
    assert_non_null(producer);
    for (size_t i = 0; i < hostile_count; i++) {
        const hostile_case *c = &hostile_cases[i];

        rows[i].c = c;
        rows[i].key = hostile_key(c);
        rows[i].value = hostile_value(c, &rows[i].len);
        assert_non_null(rows[i].key);
        assert_non_null(rows[i].value);
        assert_int_equal(kit_produce(producer, ts.topic_in, -1, c->has_key ? rows[i].key : NULL,
                                     c->key_len, rows[i].value, rows[i].len),
                         0);
    }
    assert_int_equal(kit_flush(producer, 30000), 0);
    rd_kafka_destroy(producer);
    read_at_least(ts.topic_in, hostile_count, &inputs);
    assert_int_equal(inputs.n, hostile_count);
    for (size_t i = 0; i < hostile_count; i++) {
        size_t found = 0;

        for (size_t k = 0; k < inputs.n; k++) {
            if (!same_key(&rows[i], &inputs.v[k]) || !same_value(&rows[i], &inputs.v[k]))
                continue;
            rows[i].partition = inputs.v[k].partition;
            rows[i].offset = inputs.v[k].offset;
            found++;
        }
        if (found != 1)
            fail_msg("%s: found %zu times in the input topic", rows[i].c->name, found);
    }
    kit_msgs_free(&inputs);
}

/* Committed offsets at the end mean every output was acknowledged, so the
 * output topics read after this are complete. */
static void test_offsets_committed_to_the_end(void **state)
{
    char log[300];

    (void)state;
    teststack_log(&ts, "worker-hostile.log", log, sizeof(log));
    teststack_await_committed(&ts, PARTITIONS, WAIT_S, log);
}

static void check_result_body(const sent_row *r, const kit_msg *m)
{
    json_error_t jerr;
    json_t *j = json_loadb(m->value, m->len, 0, &jerr);
    const char *code;

    if (j == NULL)
        fail_msg("%s: result is not JSON: %s", r->c->name, jerr.text);
    code = json_string_value(json_object_get(j, "code"));
    if (r->c->field == NULL) {
        assert_int_equal(json_integer_value(json_object_get(j, "status")), 201);
        assert_string_equal(code, "CREATED");
    } else {
        const char *field = json_string_value(
            json_object_get(json_array_get(json_object_get(j, "errors"), 0), "field"));

        assert_int_equal(json_integer_value(json_object_get(j, "status")), 400);
        assert_string_equal(code, "INVALID_REQUEST");
        if (field == NULL || strcmp(field, r->c->field) != 0)
            fail_msg("%s: first error on %s, expected %s", r->c->name, field ? field : "(none)",
                     r->c->field);
    }
    json_decref(j);
}

static void test_one_result_per_keyed_message(void **state)
{
    size_t want = 0;

    (void)state;
    for (size_t i = 0; i < hostile_count; i++)
        want += rows[i].c->key_len > 0;
    read_at_least(ts.topic_out, want, &results);
    assert_int_equal(results.n, want);
    for (size_t i = 0; i < hostile_count; i++) {
        const sent_row *r = &rows[i];
        const kit_msg *m = NULL;
        size_t n = outputs_of(r, &results, &m);
        char replayed[16] = "";

        if (n != (r->c->key_len > 0 ? 1u : 0u))
            fail_msg("%s: %zu results", r->c->name, n);
        if (n == 0)
            continue;
        if (!output_key_ok(r, m))
            fail_msg("%s: the result's key differs from the message's", r->c->name);
        assert_true(kit_header(m, "replayed", replayed, sizeof(replayed)));
        assert_string_equal(replayed, "false");
        check_result_body(r, m);
    }
}

/* The copy's value: the message's bytes, or their first bytes with the
 * original length in dlq-truncated-from when the whole would not fit. */
static int dead_letter_value_ok(const sent_row *r, const kit_msg *m)
{
    if (m->len == r->len)
        return same_value(r, m) && header_int(m, "dlq-truncated-from") == -1;
    return !m->value_null && m->len < r->len && memcmp(m->value, r->value, m->len) == 0 &&
           header_int(m, "dlq-truncated-from") == (int64_t)r->len;
}

static void check_dead_letter(const sent_row *r, const kit_msg *m)
{
    char text[128];

    if (!output_key_ok(r, m) || !dead_letter_value_ok(r, m))
        fail_msg("%s: the dead-letter copy differs from the message", r->c->name);
    /* Whatever came in, what goes out fits the producer's limit, headers and
     * framing included (1 kB is far more than they take). */
    if (m->key_len + m->len + 1024 > PRODUCER_LIMIT)
        fail_msg("%s: a dead-letter copy of %zu bytes", r->c->name, m->key_len + m->len);
    /* And a copy that fits whole (2 kB kept for headers) is not cut. */
    if (m->key_len + r->len + 2048 <= PRODUCER_LIMIT && m->len != r->len)
        fail_msg("%s: cut to %zu of %zu bytes though it fits", r->c->name, m->len, r->len);
    assert_true(kit_header(m, "error-code", text, sizeof(text)));
    assert_string_equal(text, "INVALID_REQUEST");
    assert_true(kit_header(m, "source-topic", text, sizeof(text)));
    assert_string_equal(text, ts.topic_in);
    /* outputs_of matched source-partition and source-offset already. */
}

static void test_one_dead_letter_per_invalid_message(void **state)
{
    size_t want = 0;

    (void)state;
    for (size_t i = 0; i < hostile_count; i++)
        want += rows[i].c->field != NULL;
    read_at_least(ts.topic_dlq, want, &dead_letters);
    assert_int_equal(dead_letters.n, want);
    for (size_t i = 0; i < hostile_count; i++) {
        const sent_row *r = &rows[i];
        const kit_msg *m = NULL;
        size_t n = outputs_of(r, &dead_letters, &m);

        if (n != (r->c->field != NULL ? 1u : 0u))
            fail_msg("%s: %zu dead-letter copies", r->c->name, n);
        if (n == 1)
            check_dead_letter(r, m);
    }
}

/* Only the control row was written: one request, its one order. */
static void test_database_holds_only_the_control(void **state)
{
    (void)state;
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM idempotency_requests"), 1);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders"), 1);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM idempotency_requests "
                                       "WHERE user_id = 42 AND status = 'SUCCEEDED' "
                                       "AND idempotency_key = REPEAT('k', 80)"),
                     1);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders WHERE user_id = 42 "
                                       "AND external_order_no = 'H-1' AND amount = 19.90"),
                     1);
}

static void test_sigterm_exits_zero(void **state)
{
    int status;

    (void)state;
    assert_int_equal(kill(worker, SIGTERM), 0);
    status = kit_wait(worker, 30000);
    if (status != 0)
        fail_msg("the worker exited with %d after SIGTERM", status);
    worker = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_produce_every_row),
        cmocka_unit_test(test_offsets_committed_to_the_end),
        cmocka_unit_test(test_one_result_per_keyed_message),
        cmocka_unit_test(test_one_dead_letter_per_invalid_message),
        cmocka_unit_test(test_database_holds_only_the_control),
        cmocka_unit_test(test_sigterm_exits_zero),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
