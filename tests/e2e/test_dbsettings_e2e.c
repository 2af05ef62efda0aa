/*
 * The built worker against MariaDB servers started with the settings DBAs
 * use (scripts/dbsettings.sh starts them; docs/operations.md, "Database
 * server requirements"). Three groups, one per server, chosen by
 * OW_DBSETTINGS_GROUP; the server's port is in OW_TEST_MYSQL_PORT_<GROUP>:
 *
 *   tuned      innodb_rollback_on_timeout=ON, max_allowed_packet=1M, the
 *              binary log on (ROW): a lock wait inside a batch, batches
 *              larger than a statement may be, a request too large for the
 *              server, and what SET GLOBAL changes for new connections
 *              (max_prepared_stmt_count, an account's connection limit,
 *              wait_timeout) and the schema's version;
 *   stmt_time  max_statement_time=1: a statement cut short is a lock wait;
 *   statement  the binary log on, binlog_format=STATEMENT: refused at start.
 *
 * Each test puts back what it changed on the server, also when it fails
 * (the group's teardown).
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "kit.h"
#include "testcli.h"
#include "teststack.h"
#include "testport.h"

static teststack ts;
static testenv env;
static pid_t worker;
static pid_t server; /* `serve` */
static MYSQL *holder;
static char group[32];
static char token_env[340]; /* ORDER_WORKER_API_TOKEN_FILE=..., for serve */
static const char token[] = "dbsettings-token-0123456789abcdef";

/* --- Helpers ---------------------------------------------------------------- */

static void admin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void admin(const char *fmt, ...)
{
    char sql[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    testdb_exec(&ts.db, sql);
}

static int log_has(const char *path, const char *needle)
{
    char *text = teststack_read_file(path, NULL);
    int has = strstr(text, needle) != NULL;

    free(text);
    return has;
}

/* The path of a log of this run (an earlier run's is removed). */
static void fresh_log(const char *name, char *out, size_t cap)
{
    teststack_log(&ts, name, out, cap);
    unlink(out);
}

static pid_t spawn(const char *cmd, const testenv *e, const char *log_path)
{
    char *argv[] = {(char *)test_env("OW_TEST_WORKER_BIN"), (char *)cmd, NULL};
    pid_t pid = kit_spawn(argv, e->envp, log_path);

    if (pid <= 0)
        fail_msg("cannot start %s %s", argv[0], cmd);
    return pid;
}

/* env: the worker's environment for this group's database, with extra
 * settings ("NAME=value", NULL-terminated). Filled in place: its envp
 * points into its own storage. */
static void worker_env(const char *first, ...)
{
    va_list ap;

    testenv_worker(&env, &ts);
    testenv_add(&env, "ORDER_WORKER_COMMIT_INTERVAL_MS=200");
    va_start(ap, first);
    for (const char *s = first; s != NULL; s = va_arg(ap, const char *))
        testenv_add(&env, "%s", s);
    va_end(ap);
}

/* A subcommand's run: its exit status and stderr. */
static int run_cli(const char *cmd, const testenv *e, char *err, size_t cap, const char *extra)
{
    char *argv[8] = {(char *)test_env("OW_TEST_WORKER_BIN"), (char *)cmd};
    testcli_result r;
    int status;

    if (extra != NULL) { /* "--user 1 --key k": words separated by spaces, at most 5 */
        static char words[128];
        char *save = NULL;
        int i = 2;

        snprintf(words, sizeof(words), "%s", extra);
        for (char *w = strtok_r(words, " ", &save); w != NULL && i < 7;
             w = strtok_r(NULL, " ", &save))
            argv[i++] = w;
    }
    assert_int_equal(testcli_run(argv, e->envp, NULL, 0, 60000, &r), 0);
    snprintf(err, cap, "%s", r.err);
    status = r.status;
    testcli_result_free(&r);
    return status;
}

/* The order batch of user with n orders whose order numbers are 64
 * characters of '"' and '\' (128 bytes once escaped), different for every
 * (seed, order), and whose amounts are the largest: about 270 bytes of
 * record per order. */
static char *big_batch(int64_t user, int n, unsigned seed)
{
    size_t cap = 256 + (size_t)n * 200;
    char *v = malloc(cap);
    size_t len;

    assert_non_null(v);
    len = (size_t)snprintf(v, cap, "{\"user_id\":%lld,\"orders\":[", (long long)user);
    for (int i = 0; i < n; i++) {
        uint64_t bits = (uint64_t)seed << 20 | (uint64_t)i;

        len +=
            (size_t)snprintf(v + len, cap - len, "%s{\"external_order_no\":\"", i > 0 ? "," : "");
        for (int b = 0; b < 64; b++)
            len += (size_t)snprintf(v + len, cap - len, "%s", (bits >> b) & 1 ? "\\\"" : "\\\\");
        len += (size_t)snprintf(v + len, cap - len, "\",\"amount\":\"9999999999.99\"}");
    }
    snprintf(v + len, cap - len, "]}");
    return v;
}

static char *small_batch(int64_t user, const char *order_no)
{
    char *v = malloc(256);

    assert_non_null(v);
    snprintf(v, 256,
             "{\"user_id\":%lld,\"orders\":[{\"external_order_no\":\"%s\",\"amount\":\"2.50\"}]}",
             (long long)user, order_no);
    return v;
}

static void produce(const char *key, const char *value)
{
    rd_kafka_t *p = kit_producer(ts.bootstrap, "message.max.bytes=2000000");

    assert_non_null(p);
    assert_int_equal(kit_produce(p, ts.topic_in, 0, key, strlen(key), value, strlen(value)), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
}

/* The code of the last result for key, "" when none; *n counts them. */
static void last_code(const kit_msgs *r, const char *key, char *code, size_t cap, int *n)
{
    code[0] = '\0';
    *n = 0;
    for (size_t i = 0; i < r->n; i++) {
        json_error_t e;
        json_t *j;

        if (r->v[i].key_len != strlen(key) || memcmp(r->v[i].key, key, r->v[i].key_len) != 0)
            continue;
        j = json_loadb(r->v[i].value, r->v[i].len, 0, &e);
        if (j != NULL && json_string_value(json_object_get(j, "code")) != NULL) {
            snprintf(code, cap, "%s", json_string_value(json_object_get(j, "code")));
            (*n)++;
        }
        json_decref(j);
    }
}

/* Waits up to timeout_s for key's last result to have code (and at least
 * min_results results); fails naming what it saw. */
static void await_code(const char *key, const char *code, int min_results, int timeout_s)
{
    kit_msgs r = {0};
    char last[64] = "";
    int n = 0;

    for (int waited = 0; waited < timeout_s * 2; waited++) {
        kit_msgs_free(&r);
        kit_read_topic(ts.bootstrap, ts.topic_out, 20000, &r);
        last_code(&r, key, last, sizeof(last), &n);
        if (strcmp(last, code) == 0 && n >= min_results)
            break;
        usleep(500000);
    }
    kit_msgs_free(&r);
    if (strcmp(last, code) != 0 || n < min_results)
        fail_msg("%s: last result \"%s\" of %d, wanted %s (at least %d)", key, last, n, code,
                 min_results);
}

static int alive(pid_t pid)
{
    return pid > 0 && kill(pid, 0) == 0 && kit_wait(pid, 0) == -1;
}

static void stop(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        if (kit_wait(*pid, 30000) == -1)
            kill(*pid, SIGKILL);
    }
    *pid = 0;
}

/* An uncommitted request record of (user, key) in another session. */
static void hold_key(int64_t user, const char *key)
{
    char sql[512];

    holder = testdb_connect(&ts.db);
    mysql_autocommit(holder, 0);
    snprintf(sql, sizeof(sql),
             "INSERT INTO idempotency_requests (id, user_id, idempotency_key, request_digest, "
             "status, response_status, response_body) VALUES (7, %lld, '%s', "
             "UNHEX(SHA2('held', 256)), 'SUCCEEDED', 201, '{}')",
             (long long)user, key);
    if (mysql_query(holder, sql) != 0)
        fail_msg("hold: %s", mysql_error(holder));
}

static void release_key(void)
{
    if (holder != NULL) {
        mysql_rollback(holder);
        mysql_close(holder);
    }
    holder = NULL;
}

/* SET GLOBAL binlog_format on the group's server, before its database
 * exists. */
static void set_binlog_format(const char *format)
{
    testdb t;
    char sql[128];

    memset(&t, 0, sizeof(t));
    snprintf(t.host, sizeof(t.host), "127.0.0.1");
    t.port = (unsigned)strtoul(test_env("OW_TEST_MYSQL_PORT"), NULL, 10);
    snprintf(t.user, sizeof(t.user), "root");
    t.admin = testdb_connect(&t);
    snprintf(sql, sizeof(sql), "SET GLOBAL binlog_format = '%s'", format);
    testdb_exec(&t, sql);
    mysql_close(t.admin);
}

/* --- Set-up per group --------------------------------------------------------- */

static int setup(void **state)
{
    char var[64];

    (void)state;
    snprintf(group, sizeof(group), "%s", test_env("OW_DBSETTINGS_GROUP"));
    snprintf(var, sizeof(var), "OW_TEST_MYSQL_PORT_%s", group);
    setenv("OW_TEST_MYSQL_PORT", test_env(var), 1);
    /* Nothing can be migrated under a statement-based binary log (the
     * migration's record is refused, 1665): the set-up runs with ROW and
     * the test puts the server's own setting back. */
    if (strcmp(group, "statement") == 0)
        set_binlog_format("ROW");
    teststack_create(&ts, group, "ow_dbs", 1);
    {
        char path[300];
        FILE *f;

        teststack_log(&ts, "dbsettings.token", path, sizeof(path));
        f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f, "%s\n", token);
        fclose(f);
        chmod(path, 0600);
        snprintf(token_env, sizeof(token_env), "ORDER_WORKER_API_TOKEN_FILE=%s", path);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    stop(&worker);
    stop(&server);
    release_key();
    testdb_drop(&ts.db);
    return 0;
}

/* What a test changes globally goes back after it, failed or not. */
static int restore(void **state)
{
    (void)state;
    stop(&worker);
    stop(&server);
    release_key();
    if (strcmp(group, "tuned") == 0) {
        admin("SET GLOBAL max_allowed_packet = 1048576");
        admin("SET GLOBAL max_prepared_stmt_count = 16382");
        admin("SET GLOBAL wait_timeout = 28800");
        admin("DELETE FROM ow_schema_migrations WHERE version = 99");
        admin("INSERT IGNORE INTO ow_schema_migrations (version, name) VALUES "
              "(4, '004_key_hash.sql')");
    }
    return 0;
}

/* --- tuned: innodb_rollback_on_timeout=ON ------------------------------------- */

/* k-a, k-locked and k-b of one user in one batch of one lane, while
 * another session holds k-locked's record: the lock wait rolls back the
 * whole transaction. k-a and k-b must be answered, k-locked must get
 * REQUEST_IN_PROGRESS, then its own result once the holder goes, and the
 * worker must keep running. */
static void test_lock_wait_rolls_back_the_batch(void **state)
{
    char logp[300];
    rd_kafka_t *p = kit_producer(ts.bootstrap, "linger.ms=50");
    char *a = small_batch(42, "RB-A"), *l = small_batch(42, "RB-L"), *b = small_batch(42, "RB-B");

    (void)state;
    hold_key(42, "k-locked");
    fresh_log("dbs-rollback.log", logp, sizeof(logp));
    worker_env("ORDER_WORKER_WORKER_LANES=1", "ORDER_WORKER_BATCH_MAX_WAIT_MS=300",
               "ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=2", NULL);
    worker = spawn("run", &env, logp);
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "k-a", 3, a, strlen(a)), 0);
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "k-locked", 8, l, strlen(l)), 0);
    assert_int_equal(kit_produce(p, ts.topic_in, 0, "k-b", 3, b, strlen(b)), 0);
    assert_int_equal(kit_flush(p, 30000), 0);
    rd_kafka_destroy(p);
    await_code("k-a", "CREATED", 1, 60);
    await_code("k-b", "CREATED", 1, 60);
    await_code("k-locked", "REQUEST_IN_PROGRESS", 1, 60);
    assert_true(alive(worker));
    release_key();
    await_code("k-locked", "CREATED", 1, 60);
    assert_true(alive(worker));
    assert_false(log_has(logp, "\"event\":\"db_fatal\""));
    assert_true(log_has(logp, "\"setting\":\"innodb_rollback_on_timeout\""));
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders WHERE user_id = 42"), 3);
    free(a);
    free(l);
    free(b);
}

/* --- tuned: max_allowed_packet=1M ---------------------------------------------- */

/* Four batches of 1,000 orders (about 250 KB of record each) and one of
 * 90, queued before the worker starts, then the same five again: ten
 * answers, the second five replays, with one lane deciding them from the
 * backlog in statements that fit the server's 1 MiB packet. */
static void test_batches_larger_than_the_packet(void **state)
{
    static const int sizes[] = {1000, 1000, 1000, 1000, 90};
    char logp[300], key[32];
    rd_kafka_t *p = kit_producer(ts.bootstrap, "message.max.bytes=2000000");

    (void)state;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 5; i++) {
            char *v = big_batch(43, sizes[i], (unsigned)i);

            snprintf(key, sizeof(key), "pk-%d", i);
            assert_int_equal(kit_produce(p, ts.topic_in, 0, key, strlen(key), v, strlen(v)), 0);
            free(v);
        }
    }
    assert_int_equal(kit_flush(p, 60000), 0);
    rd_kafka_destroy(p);
    fresh_log("dbs-packet.log", logp, sizeof(logp));
    /* One lane that waits for the backlog to fill its batch. */
    worker_env("ORDER_WORKER_WORKER_LANES=1", "ORDER_WORKER_BATCH_MAX_WAIT_MS=300", NULL);
    worker = spawn("run", &env, logp);
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "pk-%d", i);
        await_code(key, "CREATED", 2, 180);
    }
    teststack_await_committed(&ts, 1, 60, "the packet-sized batches");
    assert_true(alive(worker));
    assert_false(log_has(logp, "\"code\":2006"));
    assert_false(log_has(logp, "\"code\":1153"));
    assert_int_equal(testdb_count(&ts.db, "SELECT COUNT(*) FROM orders WHERE user_id = 43"), 4090);
    /* The batch of the four large requests could not be one statement. */
    assert_true(testdb_count(&ts.db, "SELECT SUM(LENGTH(response_body)) FROM idempotency_requests "
                                     "WHERE user_id = 43 AND idempotency_key <> 'pk-4'") > 1048576);
}

/* A request whose record no statement can carry: with a 128 KiB packet,
 * 1,000 long order numbers. It gets a permanent 400 naming the orders
 * and its dead-letter copy, and a request that fits is decided beside it;
 * the start names the setting. */
static void test_request_too_large_for_the_server(void **state)
{
    char logp[300];
    char *big = big_batch(44, 1000, 7), *fits = big_batch(44, 300, 8);
    kit_msgs dlq = {0};
    int found = 0;

    (void)state;
    admin("SET GLOBAL max_allowed_packet = 131072");
    fresh_log("dbs-too-large.log", logp, sizeof(logp));
    worker_env(NULL);
    worker = spawn("run", &env, logp);
    produce("tl-big", big);
    produce("tl-fits", fits);
    await_code("tl-big", "INVALID_REQUEST", 1, 60);
    await_code("tl-fits", "CREATED", 1, 60);
    kit_read_topic(ts.bootstrap, ts.topic_dlq, 20000, &dlq);
    for (size_t i = 0; i < dlq.n; i++)
        found |= dlq.v[i].key_len == 6 && memcmp(dlq.v[i].key, "tl-big", 6) == 0 &&
                 dlq.v[i].len == strlen(big) && memcmp(dlq.v[i].value, big, dlq.v[i].len) == 0;
    kit_msgs_free(&dlq);
    assert_true(found);
    teststack_await_committed(&ts, 1, 60, "the refused request");
    assert_true(alive(worker));
    assert_true(log_has(logp, "\"setting\":\"max_allowed_packet\""));
    assert_false(log_has(logp, "\"event\":\"db_retry\""));
    free(big);
    free(fits);
}

/* --- tuned: what the lanes need of the server ------------------------------------ */

/* Waits for a refusal at start: exit status 2 and a log naming each of
 * needles. */
static void expect_refusal(const char *cmd, const testenv *e, const char *name,
                           const char *const *needles)
{
    char logp[300];
    pid_t pid;
    int status;

    fresh_log(name, logp, sizeof(logp));
    pid = spawn(cmd, e, logp);
    status = kit_wait(pid, 45000);
    if (status == -1)
        kill(pid, SIGKILL);
    if (status != 2)
        fail_msg("%s: exit status %d, wanted a refusal (2); log %s", cmd, status, logp);
    for (const char *const *n = needles; *n != NULL; n++)
        if (!log_has(logp, *n))
            fail_msg("%s: the log %s does not name %s", cmd, logp, *n);
}

static void test_prepared_statement_limit_refused(void **state)
{
    static const char *const needles[] = {"max_prepared_stmt_count", "worker.lanes", NULL};

    (void)state;
    admin("SET GLOBAL max_prepared_stmt_count = 60");
    worker_env("ORDER_WORKER_WORKER_LANES=4", NULL);
    expect_refusal("run", &env, "dbs-stmt-count.log", needles);
}

static void test_account_connection_limit_refused(void **state)
{
    static const char *const needles[] = {"max_user_connections", "worker.lanes", NULL};

    (void)state;
    admin("CREATE USER IF NOT EXISTS 'ow_limited'@'%%' IDENTIFIED BY 'lim-pw' "
          "WITH MAX_USER_CONNECTIONS 3");
    admin("GRANT SELECT, INSERT, UPDATE, DELETE ON %s.* TO 'ow_limited'@'%%'", ts.db.database);
    worker_env("ORDER_WORKER_WORKER_LANES=4", "ORDER_WORKER_MYSQL_USER=ow_limited",
               "ORDER_WORKER_MYSQL_PASSWORD=lim-pw", NULL);
    expect_refusal("run", &env, "dbs-user-conns.log", needles);
    admin("DROP USER 'ow_limited'@'%%'");
}

/* An account that may not DELETE from orders (a grant of an earlier
 * worker_user.sql) cannot take back the new orders of a request that
 * conflicts: run refuses it at start, naming the grant, and purge, which
 * does not need it, still runs. */
static void test_account_without_delete_refused(void **state)
{
    static const char *const needles[] = {"DELETE FROM orders", "worker_user.sql", NULL};
    char err[4096];

    (void)state;
    admin("CREATE USER IF NOT EXISTS 'ow_nodelete'@'%%' IDENTIFIED BY 'nd-pw'");
    admin("GRANT SELECT, INSERT, UPDATE ON %s.* TO 'ow_nodelete'@'%%'", ts.db.database);
    admin("GRANT DELETE ON %s.idempotency_requests TO 'ow_nodelete'@'%%'", ts.db.database);
    worker_env("ORDER_WORKER_MYSQL_USER=ow_nodelete", "ORDER_WORKER_MYSQL_PASSWORD=nd-pw", NULL);
    expect_refusal("run", &env, "dbs-no-delete.log", needles);
    assert_int_equal(run_cli("purge", &env, err, sizeof(err), "--older-than 30d"), 0);
    admin("DROP USER 'ow_nodelete'@'%%'");
}

/* A schema newer than the binary, then one older: run, serve and lookup
 * refuse both, naming the migration. */
static void test_schema_version_checked(void **state)
{
    static const char *const newer[] = {"migration 99", NULL};
    static const char *const older[] = {"004_key_hash.sql", "order-worker migrate", NULL};
    char err[4096];

    (void)state;
    admin("INSERT INTO ow_schema_migrations (version, name) VALUES (99, '099_future.sql')");
    worker_env(token_env, NULL);
    expect_refusal("run", &env, "dbs-schema-newer.log", newer);
    expect_refusal("serve", &env, "dbs-schema-newer-serve.log", newer);
    assert_int_equal(run_cli("lookup", &env, err, sizeof(err), "--user 1 --key k"), 2);
    if (strstr(err, "migration 99") == NULL)
        fail_msg("lookup: %s", err);
    admin("DELETE FROM ow_schema_migrations WHERE version = 99");
    admin("DELETE FROM ow_schema_migrations WHERE version = 4");
    expect_refusal("run", &env, "dbs-schema-older.log", older);
    assert_int_equal(run_cli("lookup", &env, err, sizeof(err), "--user 1 --key k"), 2);
    if (strstr(err, "004_key_hash.sql") == NULL)
        fail_msg("lookup: %s", err);
}

/* --- tuned: wait_timeout ------------------------------------------------------ */

/* A port nothing listens on now. */

/* One GET on 127.0.0.1:port; the status, or -1. */
static int http_get(int port, const char *path, const char *bearer)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char req[512], resp[256] = "";
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;
    ssize_t n;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(req, sizeof(req),
             "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n",
             path, bearer);
    if (write(fd, req, strlen(req)) == (ssize_t)strlen(req) &&
        (n = read(fd, resp, sizeof(resp) - 1)) > 12)
        status = (int)strtol(resp + 9, NULL, 10);
    close(fd);
    return status;
}

/* Connections idle past the server's wait_timeout: the worker's next batch
 * and serve's next lookup find them closed before they use them, not
 * after (a db_retry, a 503). */
static void test_idle_connections_past_wait_timeout(void **state)
{
    char logp[300], slogp[300], port_env[64];
    int port = (int)testport_free(), status = -1;
    char *v1 = small_batch(45, "WT-1"), *v2 = small_batch(45, "WT-2");

    (void)state;
    admin("SET GLOBAL wait_timeout = 3");
    fresh_log("dbs-wait-timeout.log", logp, sizeof(logp));
    worker_env("ORDER_WORKER_WORKER_LANES=1", NULL); /* both batches on one connection */
    worker = spawn("run", &env, logp);
    produce("wt-1", v1);
    await_code("wt-1", "CREATED", 1, 60);
    sleep(5);
    produce("wt-2", v2);
    await_code("wt-2", "CREATED", 1, 60);
    assert_false(log_has(logp, "\"event\":\"db_retry\""));

    snprintf(port_env, sizeof(port_env), "ORDER_WORKER_API_PORT=%d", port);
    worker_env(port_env, token_env, "ORDER_WORKER_API_THREADS=1", NULL);
    fresh_log("dbs-wait-timeout-serve.log", slogp, sizeof(slogp));
    server = spawn("serve", &env, slogp);
    for (int i = 0; i < 100 && status != 201; i++) {
        status = http_get(port, "/v1/requests/45/wt-1", token);
        if (status != 201)
            usleep(100000);
    }
    assert_int_equal(status, 201); /* the stored result's status */
    sleep(5);
    assert_int_equal(http_get(port, "/v1/requests/45/wt-1", token), 201);
    free(v1);
    free(v2);
}

/* --- stmt_time: max_statement_time=1 ---------------------------------------------- */

/* A key held by another session: the worker's insert waits for its lock
 * and the server cuts it after 1 s. That is a lock wait: REQUEST_IN_PROGRESS
 * and retries, then the request's own result once the holder goes. */
static void test_statement_time_is_a_lock_wait(void **state)
{
    char logp[300];
    char *v = small_batch(46, "ST-1");

    (void)state;
    hold_key(46, "st-held");
    fresh_log("dbs-statement-time.log", logp, sizeof(logp));
    worker_env("ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=3", NULL);
    worker = spawn("run", &env, logp);
    produce("st-held", v);
    await_code("st-held", "REQUEST_IN_PROGRESS", 1, 60);
    assert_true(alive(worker));
    release_key();
    await_code("st-held", "CREATED", 1, 60);
    assert_true(alive(worker));
    assert_true(log_has(logp, "\"setting\":\"max_statement_time\""));
    assert_false(log_has(logp, "\"event\":\"db_fatal\""));
    free(v);
}

/* --- statement: binlog_format=STATEMENT ----------------------------------------------- */

/* Run and purge refuse to start, naming the setting; migrate says so. */
static void test_statement_binlog_refused(void **state)
{
    static const char *const needles[] = {"binlog_format", "ROW", NULL};
    char err[4096];
    char *v = small_batch(47, "SB-1");
    char *argv[] = {(char *)test_env("OW_TEST_WORKER_BIN"), "migrate", NULL};
    testcli_result r;

    (void)state;
    admin("SET GLOBAL binlog_format = 'STATEMENT'");
    produce("sb-1", v);
    worker_env(NULL);
    expect_refusal("run", &env, "dbs-binlog.log", needles);
    assert_int_equal(run_cli("purge", &env, err, sizeof(err), "--older-than 30d"), 2);
    if (strstr(err, "binlog_format") == NULL)
        fail_msg("purge: %s", err);
    /* migrate as the administrator it needs */
    testenv_add(&env, "ORDER_WORKER_MYSQL_USER=%s", ts.db.user);
    testenv_add(&env, "ORDER_WORKER_MYSQL_PASSWORD=%s", ts.db.password);
    assert_int_equal(testcli_run(argv, env.envp, NULL, 0, 60000, &r), 0);
    if (r.status != 0 || strstr(r.out, "binlog_format = STATEMENT: the worker refuses") == NULL)
        fail_msg("migrate: status %d\n%s%s", r.status, r.out, r.err);
    testcli_result_free(&r);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tuned[] = {
        cmocka_unit_test_teardown(test_lock_wait_rolls_back_the_batch, restore),
        cmocka_unit_test_teardown(test_batches_larger_than_the_packet, restore),
        cmocka_unit_test_teardown(test_request_too_large_for_the_server, restore),
        cmocka_unit_test_teardown(test_prepared_statement_limit_refused, restore),
        cmocka_unit_test_teardown(test_account_without_delete_refused, restore),
        cmocka_unit_test_teardown(test_account_connection_limit_refused, restore),
        cmocka_unit_test_teardown(test_schema_version_checked, restore),
        cmocka_unit_test_teardown(test_idle_connections_past_wait_timeout, restore),
    };
    const struct CMUnitTest stmt_time[] = {
        cmocka_unit_test_teardown(test_statement_time_is_a_lock_wait, restore),
    };
    const struct CMUnitTest statement[] = {
        cmocka_unit_test_teardown(test_statement_binlog_refused, restore),
    };
    const char *g = getenv("OW_DBSETTINGS_GROUP");

    mysql_library_init(0, NULL, NULL);
    if (getenv("OW_DBSETTINGS_FILTER") != NULL) /* one case, e.g. against another binary */
        cmocka_set_test_filter(getenv("OW_DBSETTINGS_FILTER"));
    if (g != NULL && strcmp(g, "tuned") == 0)
        return cmocka_run_group_tests_name("tuned", tuned, setup, teardown);
    if (g != NULL && strcmp(g, "stmt_time") == 0)
        return cmocka_run_group_tests_name("stmt_time", stmt_time, setup, teardown);
    if (g != NULL && strcmp(g, "statement") == 0)
        return cmocka_run_group_tests_name("statement", statement, setup, teardown);
    fprintf(stderr, "OW_DBSETTINGS_GROUP must be tuned, stmt_time or statement\n");
    return 1;
}
