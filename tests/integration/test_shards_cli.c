/*
 * Shards through the built binary, with three databases of the test
 * MariaDB as the shards: migrate records the map on each; run refuses a
 * reordered, shorter or longer list, or another bucket count, with exit 2
 * naming both maps (before it touches Kafka); so do migrate (which then
 * changes no map), lookup, serve, purge and audit with a reordered list,
 * and run and lookup without mysql.shards against a database that records
 * itself as a shard; lookup reads the user's shard only; audit reports
 * each shard; entries that list the nodes of a cluster are checked per
 * cluster.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kit.h"
#include "ow/shard.h"
#include "ow/store.h"
#include "testcli.h"
#include "testdb.h"
#include "testport.h"

#define N_DB 4 /* three shards and a spare that is never migrated as one */

static testdb dbs[N_DB];
static ow_idgen ids;

static void shard_entry(char *buf, size_t cap, unsigned i)
{
    snprintf(buf, cap, "%s:%u/%s", dbs[i].host, dbs[i].port, dbs[i].database);
}

/* "a,b,c" from database indexes, e.g. order = {1, 0, 2}. */
static void shard_list(char *buf, size_t cap, const unsigned *order, size_t n)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        char e[256];

        shard_entry(e, sizeof(e), order[k]);
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", k > 0 ? "," : "", e);
    }
}

/* Runs the binary with mysql.shards = list (and extra env, may be NULL),
 * for at most timeout_ms. */
static testcli_result cli_for(const char *list, const char *extra, const char *const *args,
                              int timeout_ms)
{
    char env[8][1400];
    char *envp[9];
    char *argv[16];
    testcli_result r;
    size_t n = 0, k = 0;

    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_MYSQL_USER=%s", dbs[0].user);
    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_MYSQL_PASSWORD=%s", dbs[0].password);
    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_MYSQL_SHARDS=%s", list);
    /* Nothing may reach a broker: none listens here. */
    snprintf(env[k++], sizeof(env[0]), "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1");
    /* extra: NAME=value lines. */
    for (const char *e = extra; e != NULL && *e != '\0' && k < 8;) {
        size_t len = strcspn(e, "\n");

        snprintf(env[k++], sizeof(env[0]), "%.*s", (int)len, e);
        e += len + (e[len] == '\n');
    }
    for (size_t i = 0; i < k; i++)
        envp[i] = env[i];
    envp[k] = NULL;
    if (testcli_bin() == NULL)
        fail_msg("OW_TEST_WORKER_BIN is not set: run the tests through ctest");
    argv[n++] = (char *)testcli_bin();
    while (*args != NULL && n < 15)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    if (testcli_run(argv, envp, NULL, 0, timeout_ms, &r) != 0)
        fail_msg("cannot run %s", argv[0]);
    return r;
}

static testcli_result cli(const char *list, const char *extra, const char *const *args)
{
    return cli_for(list, extra, args, 60000);
}

static int group_setup(void **state)
{
    static const char *const names[N_DB] = {"owshard0", "owshard1", "owshard2", "owshard3"};

    (void)state;
    for (int i = 0; i < N_DB; i++)
        testdb_create(&dbs[i], names[i]);
    ow_idgen_init(&ids, 0, ow_clock_wall_ms);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N_DB; i++)
        testdb_drop(&dbs[i]);
    return 0;
}

static const unsigned order3[] = {0, 1, 2};

static void migrate3(void)
{
    static const char *const args[] = {"migrate", NULL};
    char list[1200];
    testcli_result r;

    shard_list(list, sizeof(list), order3, 3);
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "map recorded: 4096 buckets over 3 shards, this is shard 2"));
    testcli_result_free(&r);
}

static void test_migrate_records_each_map(void **state)
{
    (void)state;
    migrate3();
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(testdb_count(&dbs[i], "SELECT bucket_count FROM ow_shard_map"), 4096);
        assert_int_equal(testdb_count(&dbs[i], "SELECT shard_count FROM ow_shard_map"), 3);
        assert_int_equal(testdb_count(&dbs[i], "SELECT shard_index FROM ow_shard_map"), i);
    }
    assert_int_equal(testdb_count(&dbs[3], "SELECT COUNT(*) FROM ow_shard_map"), 0);
}

/* Each disagreement exits 2 before any broker is contacted, and prints
 * both maps. */
static void refused(const unsigned *order, size_t n, const char *extra, const char *recorded)
{
    static const char *const args[] = {"run", NULL};
    char list[1200];
    testcli_result r;

    shard_list(list, sizeof(list), order, n);
    r = cli(list, extra, args);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "mysql.shards disagrees with the shard map"));
    assert_non_null(strstr(r.err, "configured map (mysql.shards)"));
    assert_non_null(strstr(r.err, "recorded map (table ow_shard_map"));
    if (strstr(r.err, recorded) == NULL)
        fail_msg("stderr lacks \"%s\":\n%s", recorded, r.err);
    testcli_result_free(&r);
}

static void test_run_refuses_other_maps(void **state)
{
    static const unsigned reordered[] = {1, 0, 2};
    static const unsigned missing[] = {0, 1};
    static const unsigned extra[] = {0, 1, 2, 3};
    char name[300], want[400];

    (void)state;
    migrate3();
    shard_entry(name, sizeof(name), 1);
    snprintf(want, sizeof(want), "shard 0 (%s): 4096 buckets over 3 shards, recorded as shard 1",
             name);
    refused(reordered, 3, NULL, want);
    refused(missing, 2, NULL, "configured map (mysql.shards): 4096 buckets over 2 shards");
    shard_entry(name, sizeof(name), 3);
    snprintf(want, sizeof(want), "shard 3 (%s): no map recorded", name);
    refused(extra, 4, NULL, want);
    refused(order3, 3, "ORDER_WORKER_MYSQL_SHARD_BUCKETS=1024",
            "configured map (mysql.shards): 1024 buckets over 3 shards");
}

/* Every subcommand that reads or writes a shard refuses a reordered list,
 * naming both maps, and migrate changes no recorded map. */
static void test_every_command_refuses_a_reordered_list(void **state)
{
    static const unsigned reordered[] = {1, 0, 2};
    static const char *const cmds[][6] = {
        {"migrate", NULL}, {"lookup", "--user", "1", "--key", "k", NULL},
        {"serve", NULL},   {"purge", "--older-than", "30d", NULL},
        {"audit", NULL},
    };
    char list[1200], name[300], want[400], token[64], extra[120];
    FILE *f;

    (void)state;
    migrate3();
    shard_list(list, sizeof(list), reordered, 3);
    shard_entry(name, sizeof(name), 1);
    snprintf(want, sizeof(want), "shard 0 (%s): 4096 buckets over 3 shards, recorded as shard 1",
             name);
    /* serve reads its token file before it looks at any database. */
    snprintf(token, sizeof(token), "/tmp/ow-shards-cli-%d.token", (int)getpid());
    f = fopen(token, "w");
    assert_non_null(f);
    fputs("0123456789abcdef0123456789abcdef\n", f);
    fclose(f);
    assert_int_equal(chmod(token, 0600), 0);
    snprintf(extra, sizeof(extra), "ORDER_WORKER_API_TOKEN_FILE=%s", token);
    for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
        testcli_result r = cli(list, strcmp(cmds[c][0], "serve") == 0 ? extra : NULL, cmds[c]);

        if (r.status != 2 || strstr(r.err, "mysql.shards disagrees with the shard map") == NULL ||
            strstr(r.err, "configured map (mysql.shards)") == NULL || strstr(r.err, want) == NULL)
            fail_msg("%s: exit %d, want 2 naming both maps:\n%s", cmds[c][0], r.status, r.err);
        testcli_result_free(&r);
    }
    unlink(token);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(testdb_count(&dbs[i], "SELECT shard_index FROM ow_shard_map"), i);
}

/* Entries that name the nodes of one cluster: the shard map check is per
 * cluster. Here each "cluster" is a closed address (127.0.0.2, refusing
 * connections) and the test MariaDB: the nodes within an entry may come in
 * any order, as the first refuses and the next answers; swapping two
 * entries still moves users and is refused, naming the nodes as
 * configured. */
static void nodes_entry(char *buf, size_t cap, unsigned i, int closed_first)
{
    if (closed_first)
        snprintf(buf, cap, "127.0.0.2|%s:%u/%s", dbs[i].host, dbs[i].port, dbs[i].database);
    else
        snprintf(buf, cap, "%s|127.0.0.2:%u/%s", dbs[i].host, dbs[i].port, dbs[i].database);
}

static void test_node_lists_per_cluster(void **state)
{
    static const char *const lookup[] = {"lookup", "--user", "1", "--key", "k", NULL};
    char e[3][300], list[1200], want[400];
    testcli_result r;

    (void)state;
    migrate3();
    nodes_entry(e[0], sizeof(e[0]), 0, 1);
    nodes_entry(e[1], sizeof(e[1]), 1, 0);
    nodes_entry(e[2], sizeof(e[2]), 2, 1);
    snprintf(list, sizeof(list), "%s, %s, %s", e[0], e[1], e[2]);
    r = cli(list, NULL, lookup);
    if (r.status != 3)
        fail_msg("lookup with node lists: exit %d, want 3 (no record):\n%s", r.status, r.err);
    testcli_result_free(&r);
    snprintf(list, sizeof(list), "%s, %s, %s", e[1], e[0], e[2]);
    r = cli(list, NULL, lookup);
    snprintf(want, sizeof(want), "shard 0 (%s): 4096 buckets over 3 shards, recorded as shard 1",
             e[1]);
    if (r.status != 2 || strstr(r.err, want) == NULL)
        fail_msg("swapped entries: exit %d, want 2 naming \"%s\":\n%s", r.status, want, r.err);
    testcli_result_free(&r);
}

/* Without mysql.shards, a database that records itself as one of three
 * shards is refused: its users' other rows live elsewhere. */
static void test_unsharded_refuses_a_shard(void **state)
{
    static const char *const run[] = {"run", NULL};
    static const char *const lookup[] = {"lookup", "--user", "1", "--key", "k", NULL};
    const char *const *cmds[] = {run, lookup};
    char extra[600];

    (void)state;
    migrate3();
    snprintf(extra, sizeof(extra),
             "ORDER_WORKER_MYSQL_HOST=%s\nORDER_WORKER_MYSQL_PORT=%u\n"
             "ORDER_WORKER_MYSQL_DATABASE=%s",
             dbs[1].host, dbs[1].port, dbs[1].database);
    for (size_t c = 0; c < 2; c++) {
        testcli_result r = cli("", extra, cmds[c]);

        if (r.status != 2 ||
            strstr(r.err, "4096 buckets over 3 shards, recorded as shard 1") == NULL)
            fail_msg("%s: exit %d, want 2 naming the recorded map:\n%s", cmds[c][0], r.status,
                     r.err);
        testcli_result_free(&r);
    }
}

/* With mysql.shards set, mysql.host is not one of the databases: run never
 * connects to it, not even to check it at start. Here it names a database
 * that does not exist, which run would refuse (exit 1); run goes on to
 * wait for the broker instead (none listens), and is stopped. */
static void test_sharded_run_ignores_mysql_host(void **state)
{
    static const char *const args[] = {"run", NULL};
    char list[1200], extra[300];
    testcli_result r;

    (void)state;
    migrate3();
    shard_list(list, sizeof(list), order3, 3);
    snprintf(extra, sizeof(extra),
             "ORDER_WORKER_MYSQL_HOST=%s\nORDER_WORKER_MYSQL_PORT=%u\n"
             "ORDER_WORKER_MYSQL_DATABASE=ow_no_such_database",
             dbs[0].host, dbs[0].port);
    r = cli_for(list, extra, args, 8000);
    if (r.status != -1 || strstr(r.err, "ow_no_such_database") != NULL ||
        strstr(r.err, "database_unreachable") != NULL)
        fail_msg("exit %d (want still running, -1), stderr:\n%s", r.status, r.err);
    testcli_result_free(&r);
}

/* A free TCP port on loopback. */

/* GET path on 127.0.0.1:port; the response's head and body into out.
 * Returns the HTTP status, or 0 when nothing answered. */
static int http_get(unsigned port, const char *path, char *out, size_t cap)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {2, 0};
    char req[256];
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int status = 0;
    ssize_t n;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    out[0] = '\0';
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
        snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
        if (write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
            while (got + 1 < cap && (n = read(fd, out + got, cap - got - 1)) > 0)
                got += (size_t)n;
            out[got] = '\0';
            sscanf(out, "HTTP/1.%*d %d", &status);
        }
    }
    close(fd);
    return status;
}

/* While a shard does not answer, run still starts: /healthz answers at
 * once and /readyz names the shard. The shard here is a port nothing
 * listens on. */
static void test_healthz_while_a_shard_is_down(void **state)
{
    char list[1200], e0[256], e1[256], port_env[64], *argv[3];
    char *env[6] = {NULL};
    char body[2048];
    unsigned port = testport_free();
    int healthz = 0, readyz = 0;
    pid_t pid;

    (void)state;
    migrate3();
    shard_entry(e0, sizeof(e0), 0);
    shard_entry(e1, sizeof(e1), 1);
    snprintf(list, sizeof(list), "%s,%s,127.0.0.1:1/%s", e0, e1, dbs[2].database);
    {
        static char e[4][1500];

        snprintf(e[0], sizeof(e[0]), "ORDER_WORKER_MYSQL_USER=%s", dbs[0].user);
        snprintf(e[1], sizeof(e[1]), "ORDER_WORKER_MYSQL_SHARDS=%s", list);
        snprintf(e[2], sizeof(e[2]), "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1");
        snprintf(port_env, sizeof(port_env), "ORDER_WORKER_METRICS_PORT=%u", port);
        env[0] = e[0];
        env[1] = e[1];
        env[2] = e[2];
        env[3] = port_env;
    }
    argv[0] = (char *)testcli_bin();
    argv[1] = "run";
    argv[2] = NULL;
    pid = kit_spawn(argv, env, NULL);
    assert_true(pid > 0);
    for (int i = 0; i < 50 && healthz != 200; i++) { /* 5 s */
        healthz = http_get(port, "/healthz", body, sizeof(body));
        if (healthz != 200)
            usleep(100000);
    }
    for (int i = 0; i < 50 && strstr(body, "shard 2 unreachable") == NULL; i++) {
        readyz = http_get(port, "/readyz", body, sizeof(body));
        usleep(100000);
    }
    kill(pid, SIGTERM);
    assert_int_equal(kit_wait(pid, 20000), 0);
    assert_int_equal(healthz, 200);
    assert_int_equal(readyz, 503);
    assert_non_null(strstr(body, "shard 2 unreachable"));
}

/* A user id whose shard under 3 shards is `want`. */
static int64_t user_on(unsigned want)
{
    for (int64_t u = 1000;; u++) {
        if (ow_shard_of_user(u, 4096, 3) == want)
            return u;
    }
}

static void decide_on(unsigned shard, int64_t user, const char *key)
{
    char value[200];
    ow_store *s = testdb_store(&dbs[shard], &ids, 5);
    testmsg m;

    snprintf(value, sizeof(value),
             "{\"user_id\":%lld,\"orders\":[{\"external_order_no\":\"%s-1\",\"amount\":\"1.50\"}]}",
             (long long)user, key);
    testmsg_make(&m, key, value);
    assert_int_equal(testmsg_decide(s, &m), OW_DECISION_CREATED);
    testmsg_free(&m);
    ow_store_free(&s);
}

static void test_lookup_reads_the_users_shard(void **state)
{
    int64_t u2 = user_on(2);
    char user[32], list[1200];
    const char *args[] = {"lookup", "--user", user, "--key", "lk-1", NULL};
    testcli_result r;

    (void)state;
    migrate3();
    shard_list(list, sizeof(list), order3, 3);
    snprintf(user, sizeof(user), "%lld", (long long)u2);
    /* On its own shard: found. */
    decide_on(2, u2, "lk-1");
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "\"idempotency_key\": \"lk-1\""));
    testcli_result_free(&r);
    /* A row of the same user on another shard is never consulted. */
    args[4] = "lk-2";
    decide_on(0, u2, "lk-2");
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 3);
    testcli_result_free(&r);
}

static void test_audit_reports_each_shard(void **state)
{
    static const char *const args[] = {"audit", NULL};
    char list[1200], head[400], name[300];
    testcli_result r;
    const char *at2;

    (void)state;
    migrate3();
    shard_list(list, sizeof(list), order3, 3);
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 0);
    testcli_result_free(&r);
    /* A FAILED request owning an order, on shard 2 only. */
    testdb_exec(&dbs[2], "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                         "request_digest, status, response_status, response_body) VALUES "
                         "(77, 5, 'bad', UNHEX(SHA2('bad', 256)), 'FAILED', 409, '{}')");
    testdb_exec(&dbs[2], "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, "
                         "quantity, request_id) VALUES (77, 'OW-T77', 5, 'x', 1.00, 1, 77)");
    r = cli(list, NULL, args);
    assert_int_equal(r.status, 4);
    shard_entry(name, sizeof(name), 2);
    snprintf(head, sizeof(head), "audit: shard 2 (%s)", name);
    at2 = strstr(r.out, head);
    assert_non_null(at2);
    /* The finding is reported under shard 2's header, not before it. */
    assert_true(strstr(r.out, "FAIL FAILED requests owning orders") > at2);
    assert_non_null(strstr(at2, "FAIL FAILED requests owning orders: 1 finding(s)"));
    testcli_result_free(&r);
    testdb_exec(&dbs[2], "DELETE FROM orders WHERE id = 77");
    testdb_exec(&dbs[2], "DELETE FROM idempotency_requests WHERE id = 77");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrate_records_each_map),
        cmocka_unit_test(test_run_refuses_other_maps),
        cmocka_unit_test(test_every_command_refuses_a_reordered_list),
        cmocka_unit_test(test_node_lists_per_cluster),
        cmocka_unit_test(test_unsharded_refuses_a_shard),
        cmocka_unit_test(test_sharded_run_ignores_mysql_host),
        cmocka_unit_test(test_healthz_while_a_shard_is_down),
        cmocka_unit_test(test_lookup_reads_the_users_shard),
        cmocka_unit_test(test_audit_reports_each_shard),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
