/*
 * REQUEST_IN_PROGRESS through the real worker: another transaction holds a
 * key (as a second replica would mid-decision). The worker must publish
 * 409 REQUEST_IN_PROGRESS with retry_after_ms, keep retrying, never commit
 * the message's offset while it waits, and once the holder commits, replay
 * the holder's stored response and only then commit. `send --wait` reports
 * the interim answers on stderr and waits for the definitive one.
 */
#include <pthread.h>
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
#include "ow/digest.h"
#include "teststack.h"

static teststack ts;
static pid_t worker;
static MYSQL *locker; /* holds a table lock in test_stop_cancels_a_blocked_statement */

/* The stored response of the held record: a well-formed 201 body (the
 * contract tier validates every result the tests read), built
 * in hold_key once the digest is known. */
static char held_body[512];
static const char *const value =
    "{\"user_id\":77,\"orders\":[{\"external_order_no\":\"IP-1\",\"amount\":\"2.50\"}]}";

/* Inserts the key's record (with the given id) in an open transaction of
 * another session. */
static MYSQL *hold_key(const char *key, int id)
{
    MYSQL *other = testdb_connect(&ts.db);
    MYSQL_STMT *st = mysql_stmt_init(other);
    const char *sql = "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                      "request_digest, status, response_status, response_body) "
                      "VALUES (?, 77, ?, ?, 'SUCCEEDED', 201, ?)";
    ow_request req;
    ow_field_errors errs;
    ow_request_limits lim = {1 << 20, 1000};
    unsigned char digest[OW_DIGEST_LEN];
    char hex[OW_DIGEST_HEX_LEN + 1];
    MYSQL_BIND b[4];
    unsigned long klen = strlen(key), dlen = OW_DIGEST_LEN, blen;
    long long id64 = id;

    ow_field_errors_init(&errs);
    assert_int_equal(ow_request_parse(value, strlen(value), &lim, &req, &errs), 0);
    assert_int_equal(ow_digest_compute(&req, digest, hex), 0);
    snprintf(held_body, sizeof(held_body),
             "{\"status\":201,\"code\":\"CREATED\",\"user_id\":77,\"idempotency_key\":\"%s\","
             "\"request_digest\":\"%s\",\"orders\":[{\"index\":0,\"external_order_no\":\"IP-1\","
             "\"order_id\":1,\"order_no\":\"OW-0000000000001\",\"amount\":\"2.50\","
             "\"existing\":false}]}",
             key, hex);
    blen = strlen(held_body);
    ow_request_cleanup(&req);
    mysql_autocommit(other, 0);
    memset(b, 0, sizeof(b));
    b[0].buffer_type = MYSQL_TYPE_LONGLONG;
    b[0].buffer = &id64;
    b[1].buffer_type = MYSQL_TYPE_STRING;
    b[1].buffer = (void *)(uintptr_t)key;
    b[1].length = &klen;
    b[2].buffer_type = MYSQL_TYPE_BLOB;
    b[2].buffer = digest;
    b[2].length = &dlen;
    b[3].buffer_type = MYSQL_TYPE_BLOB;
    b[3].buffer = (void *)(uintptr_t)held_body;
    b[3].length = &blen;
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0 || mysql_stmt_bind_param(st, b) != 0 ||
        mysql_stmt_execute(st) != 0)
        fail_msg("hold: %s", mysql_stmt_error(st));
    mysql_stmt_close(st);
    return other;
}

static testenv env;
static char log_path[300];

static int setup(void **state)
{
    (void)state;
    teststack_create(&ts, "ip", "ow_inprog", 1);
    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=1");
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=200");
    teststack_log(&ts, "worker-in-progress.log", log_path, sizeof(log_path));
    worker = teststack_spawn(&env, log_path);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (worker > 0)
        kill(worker, SIGKILL);
    if (locker != NULL) /* a failed test still holds its lock: drop it first */
        mysql_close(locker);
    testdb_drop(&ts.db);
    return 0;
}

static int count_code(const kit_msgs *r, const char *code, const kit_msg **last)
{
    int n = 0;

    for (size_t i = 0; i < r->n; i++) {
        json_error_t e;
        json_t *j = json_loadb(r->v[i].value, r->v[i].len, 0, &e);
        const char *c = j != NULL ? json_string_value(json_object_get(j, "code")) : NULL;

        if (c != NULL && strcmp(c, code) == 0) {
            n++;
            if (last != NULL)
                *last = &r->v[i];
            if (strcmp(code, "REQUEST_IN_PROGRESS") == 0)
                assert_int_equal(json_integer_value(json_object_get(j, "retry_after_ms")), 1000);
        }
        json_decref(j);
    }
    return n;
}

static void test_in_progress_until_the_holder_commits(void **state)
{
    MYSQL *holder = hold_key("ip-key", 1);
    rd_kafka_t *p = kit_producer(ts.bootstrap, NULL);
    kit_msgs results = {0};
    int64_t committed = -1;
    const kit_msg *final = NULL;
    char replayed[8] = "";

    (void)state;
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "ip-key", 6, value, strlen(value)), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
    /* While the key is held: interim answers, and the offset stays put. */
    for (int waited = 0; waited < 60; waited++) {
        kit_msgs_free(&results);
        kit_read_topic(ts.bootstrap, ts.topic_out, 20000, &results);
        if (count_code(&results, "REQUEST_IN_PROGRESS", NULL) >= 2)
            break;
        usleep(500000);
    }
    assert_true(count_code(&results, "REQUEST_IN_PROGRESS", NULL) >= 2);
    assert_int_equal(count_code(&results, "CREATED", NULL), 0);
    usleep(1000000); /* several commit intervals */
    assert_int_equal(kit_committed(ts.bootstrap, ts.group, ts.topic_in, 1, &committed), 0);
    assert_true(committed <= 0);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders"), 0);

    /* The holder commits: the worker replays what it stored, then commits. */
    assert_int_equal(mysql_commit(holder), 0);
    mysql_close(holder);
    for (int waited = 0; waited < 60 && final == NULL; waited++) {
        kit_msgs_free(&results);
        kit_read_topic(ts.bootstrap, ts.topic_out, 20000, &results);
        count_code(&results, "CREATED", &final);
        if (final == NULL)
            usleep(500000);
    }
    assert_non_null(final);
    assert_int_equal(final->len, strlen(held_body));
    assert_memory_equal(final->value, held_body, final->len);
    assert_true(kit_header(final, "replayed", replayed, sizeof(replayed)));
    assert_string_equal(replayed, "true");
    /* The definitive result is the last one for the key. */
    assert_ptr_equal(final, &results.v[results.n - 1]);
    for (int waited = 0; waited < 60 && committed != 1; waited++) {
        assert_int_equal(kit_committed(ts.bootstrap, ts.group, ts.topic_in, 1, &committed), 0);
        if (committed != 1)
            usleep(250000);
    }
    assert_int_equal(committed, 1);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders"), 0);
    kit_msgs_free(&results);
    kill(worker, SIGTERM);
    assert_int_equal(kit_wait(worker, 30000), 0);
    worker = 0;
}

typedef struct {
    testcli_result r;
    int rc;
} send_run;

static void *send_thread(void *arg)
{
    send_run *run = arg;
    char *argv[] = {(char *)test_env("OW_TEST_WORKER_BIN"),
                    "send",
                    "--user",
                    "77",
                    "--key",
                    "ip-send",
                    "--wait",
                    "--timeout-ms",
                    "120000",
                    NULL};

    run->rc = testcli_run(argv, env.envp, value, strlen(value), 150000, &run->r);
    return NULL;
}

/* Whether the results topic holds a REQUEST_IN_PROGRESS for key. */
static int interim_published(const char *key)
{
    kit_msgs results = {0};
    int found = 0;

    kit_read_topic(ts.bootstrap, ts.topic_out, 10000, &results);
    for (size_t i = 0; i < results.n; i++) {
        const kit_msg *m = &results.v[i];

        if (m->key_len == strlen(key) && memcmp(m->key, key, m->key_len) == 0 && m->len > 0 &&
            strstr(m->value, "\"REQUEST_IN_PROGRESS\"") != NULL)
            found = 1;
    }
    kit_msgs_free(&results);
    return found;
}

/* Send --wait took the interim 409 REQUEST_IN_PROGRESS
 * for the answer. It must report interim answers on stderr and print the
 * definitive result once the key's holder commits. */
static void test_send_wait_past_in_progress(void **state)
{
    MYSQL *holder = hold_key("ip-send", 2);
    send_run run;
    pthread_t th;
    int seen = 0;

    (void)state;
    memset(&run, 0, sizeof(run));
    if (worker <= 0)
        worker = teststack_spawn(&env, log_path);
    assert_int_equal(pthread_create(&th, NULL, send_thread, &run), 0);
    for (int waited = 0; waited < 120 && !seen; waited++) {
        seen = interim_published("ip-send");
        if (!seen)
            usleep(500000);
    }
    assert_true(seen);
    usleep(1500000); /* another interim answer (in_progress_wait_s = 1) */
    assert_int_equal(mysql_commit(holder), 0);
    mysql_close(holder);
    pthread_join(th, NULL);
    assert_int_equal(run.rc, 0);
    if (run.r.status != 0 || strstr(run.r.out, held_body) == NULL)
        fail_msg("send --wait: status %d\nstdout: %s\nstderr: %s", run.r.status, run.r.out,
                 run.r.err);
    assert_null(strstr(run.r.out, "REQUEST_IN_PROGRESS"));
    assert_non_null(strstr(run.r.err, "interim: {\"status\":409,\"code\":\"REQUEST_IN_PROGRESS\""));
    assert_non_null(strstr(run.r.err, "replayed: true"));
    testcli_result_free(&run.r);
    kill(worker, SIGTERM);
    assert_int_equal(kit_wait(worker, 30000), 0);
    worker = 0;
}

/* Whether the worker's connection waits on a table lock (bounded: 30 s). */
static int worker_waits_on_lock(void)
{
    for (int i = 0; i < 60; i++) {
        if (testdb_count(&ts.db, "SELECT COUNT(*) FROM information_schema.processlist "
                                 "WHERE state LIKE 'Waiting for table metadata lock%'") > 0)
            return 1;
        usleep(500000);
    }
    return 0;
}

/* A lane blocked in the database must not hold the stop. Another
 * session locks the requests table, so the worker's deciding statement
 * waits (up to its 46 s read timeout here). SIGTERM must end the worker
 * within its 3 s shutdown.timeout_ms: the lane's call is cancelled, its
 * transaction rolled back, its offset not committed. After the lock goes,
 * the next worker decides the message once. */
static void test_stop_cancels_a_blocked_statement(void **state)
{
    static const char stop_value[] =
        "{\"user_id\":78,\"orders\":[{\"external_order_no\":\"SB-1\",\"amount\":\"1.00\"}]}";
    rd_kafka_t *p = kit_producer(ts.bootstrap, NULL);
    testenv slow;
    char log2[300], text[1 << 16];
    int64_t before = -1, after = -1;
    kit_msgs results = {0};
    const kit_msg *created = NULL;
    FILE *f;
    size_t n;

    (void)state;
    assert_int_equal(kit_committed(ts.bootstrap, ts.group, ts.topic_in, 1, &before), 0);
    locker = testdb_connect(&ts.db);
    if (mysql_query(locker, "LOCK TABLES idempotency_requests WRITE") != 0)
        fail_msg("lock: %s", mysql_error(locker));
    slow = env;
    testenv_add(&slow, "ORDER_WORKER_MYSQL_CONNECT_TIMEOUT_S=20");
    testenv_add(&slow, "ORDER_WORKER_SHUTDOWN_TIMEOUT_MS=3000");
    teststack_log(&ts, "worker-stop-blocked.log", log2, sizeof(log2));
    worker = teststack_spawn(&slow, log2);
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "stop-key", 8, stop_value, strlen(stop_value)),
                     0);
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
    assert_true(worker_waits_on_lock());
    kill(worker, SIGTERM);
    /* 3 s budget + 2 s guard + margin for a loaded machine; the blocked
     * statement alone would hold the worker for 46 s. */
    assert_int_equal(kit_wait(worker, 15000), 0);
    worker = 0;
    f = fopen(log2, "r");
    assert_non_null(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    assert_non_null(strstr(text, "\"event\":\"lane_cancelled\""));
    assert_null(strstr(text, "\"event\":\"stop_overrun\""));
    assert_int_equal(kit_committed(ts.bootstrap, ts.group, ts.topic_in, 1, &after), 0);
    assert_int_equal(after, before);
    assert_int_equal(mysql_query(locker, "UNLOCK TABLES"), 0);
    mysql_close(locker);
    locker = NULL;
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders WHERE user_id = 78"), 0);

    worker = teststack_spawn(&env, log_path);
    for (int waited = 0; waited < 60 && created == NULL; waited++) {
        kit_msgs_free(&results);
        kit_read_topic(ts.bootstrap, ts.topic_out, 20000, &results);
        for (size_t i = 0; i < results.n; i++) {
            if (results.v[i].key_len == 8 && memcmp(results.v[i].key, "stop-key", 8) == 0)
                created = &results.v[i];
        }
        if (created == NULL)
            usleep(500000);
    }
    assert_non_null(created);
    assert_non_null(strstr(created->value, "\"code\":\"CREATED\""));
    kit_msgs_free(&results);
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders WHERE user_id = 78"), 1);
    for (int waited = 0; waited < 60 && after != before + 1; waited++) {
        assert_int_equal(kit_committed(ts.bootstrap, ts.group, ts.topic_in, 1, &after), 0);
        if (after != before + 1)
            usleep(250000);
    }
    assert_int_equal(after, before + 1);
    kill(worker, SIGTERM);
    assert_int_equal(kit_wait(worker, 30000), 0);
    worker = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_progress_until_the_holder_commits),
        cmocka_unit_test(test_send_wait_past_in_progress),
        cmocka_unit_test(test_stop_cancels_a_blocked_statement),
    };

    mysql_library_init(0, NULL, NULL);
    return cmocka_run_group_tests(tests, setup, teardown);
}
