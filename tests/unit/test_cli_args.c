/*
 * The subcommands' argument handling, through the built binary: every bad
 * argument is refused with exit status 2 and a message that names it,
 * before any database or broker is contacted (none is running here).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "testcli.h"

#define MAX_ARGS 12

typedef struct {
    const char *args[MAX_ARGS]; /* after the binary, NULL-terminated */
    const char *in;             /* stdin, or NULL */
    const char *env;            /* one extra "NAME=value", or NULL */
    int status;
    const char *err; /* must appear on stderr */
} cli_case;

static testcli_result run(const cli_case *c)
{
    char *argv[MAX_ARGS + 2];
    char *env[2] = {(char *)c->env, NULL};
    testcli_result r;
    size_t n = 0;
    const char *bin = testcli_bin();

    if (bin == NULL)
        fail_msg("OW_TEST_WORKER_BIN is not set: run the tests through ctest");
    argv[n++] = (char *)bin;
    for (size_t i = 0; c->args[i] != NULL; i++)
        argv[n++] = (char *)c->args[i];
    argv[n] = NULL;
    if (testcli_run(argv, c->env != NULL ? env : NULL, c->in, c->in ? strlen(c->in) : 0, 20000,
                    &r) != 0)
        fail_msg("cannot run %s", bin);
    return r;
}

static void check(const cli_case *c)
{
    testcli_result r = run(c);
    char line[512] = "";
    size_t len = 0;

    for (size_t i = 0; c->args[i] != NULL && len < sizeof(line); i++)
        len += (size_t)snprintf(line + len, sizeof(line) - len, " %s", c->args[i]);
    if (r.status != c->status || strstr(r.err, c->err) == NULL)
        fail_msg("order-worker%s: status %d (want %d), stderr:\n%s\n(want \"%s\")", line, r.status,
                 c->status, r.err, c->err);
    testcli_result_free(&r);
}

static void test_lookup_args(void **state)
{
    static const cli_case cases[] = {
        {{"lookup", NULL}, NULL, NULL, 2, "--user is required"},
        {{"lookup", "--user", "0", "--key", "k", NULL},
         NULL,
         NULL,
         2,
         "--user: must be a positive"},
        {{"lookup", "--user", "-5", "--key", "k", NULL},
         NULL,
         NULL,
         2,
         "--user: must be a positive"},
        {{"lookup", "--user", "9223372036854775808", "--key", "k", NULL},
         NULL,
         NULL,
         2,
         "--user: must be a positive"},
        {{"lookup", "--user", "12abc", "--key", "k", NULL}, NULL, NULL, 2, "--user: must be"},
        {{"lookup", "--user", "1", NULL}, NULL, NULL, 2, "--key is required"},
        {{"lookup", "--user", "1", "--key", "", NULL}, NULL, NULL, 2, "--key is required"},
        {{"lookup", "--user", "1", "--key", "bad key", NULL}, NULL, NULL, 2, "--key: "},
        {{"lookup", "--user", "1", "--key", /* 81 bytes */
          "k1234567890123456789012345678901234567890"
          "1234567890123456789012345678901234567890",
          NULL},
         NULL,
         NULL,
         2,
         "--key: "},
        {{"lookup", "--user", "1", "--key", "k", "extra", NULL},
         NULL,
         NULL,
         2,
         "unexpected argument \"extra\""},
        {{"lookup", "--bogus", NULL}, NULL, NULL, 2, "unknown option --bogus"},
        {{"lookup", "--key", "k", "--user", NULL}, NULL, NULL, 2, "--user needs a value"},
        {{"lookup", "--config", "/nonexistent/ow.conf", "--user", "1", "--key", "k", NULL},
         NULL,
         NULL,
         2,
         "configuration error"},
        {{"lookup", "--user", "1", "--key", "k", NULL},
         NULL,
         "ORDER_WORKER_MYSQL_PORT=abc",
         2,
         "mysql.port"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

static void test_purge_args(void **state)
{
    static const cli_case cases[] = {
        {{"purge", NULL}, NULL, NULL, 2, "--older-than is required"},
        {{"purge", "--older-than", "0d", NULL},
         NULL,
         NULL,
         2,
         "--older-than: \"0d\" must be greater"},
        {{"purge", "--older-than", "30", NULL}, NULL, NULL, 2, "--older-than: \"30\" needs a unit"},
        {{"purge", "--older-than", "-1d", NULL}, NULL, NULL, 2, "--older-than"},
        {{"purge", "--older-than", "30y", NULL}, NULL, NULL, 2, "unknown unit"},
        {{"purge", "--older-than", "99999999999d", NULL}, NULL, NULL, 2, "too long"},
        {{"purge", "--older-than", "30d", "--batch", "0", NULL},
         NULL,
         NULL,
         2,
         "--batch: must be an integer from 1 to 100000"},
        {{"purge", "--older-than", "30d", "--batch", "100001", NULL}, NULL, NULL, 2, "--batch"},
        {{"purge", "--older-than", "30d", "--batch", "ten", NULL}, NULL, NULL, 2, "--batch"},
        {{"purge", "--older-than", "30d", "--dry-run=yes", NULL},
         NULL,
         NULL,
         2,
         "unknown option --dry-run=yes"},
        {{"purge", "--older-than", "30d", "now", NULL}, NULL, NULL, 2, "unexpected argument"},
        /* Not within a worker's retry cache TTL: without --workers-cache-ttl,
         * the longest cache.ttl_s any worker may have. */
        {{"purge", "--older-than", "5m", NULL},
         NULL,
         NULL,
         2,
         "--older-than: 300 s is not longer than 86400 s, the longest cache.ttl_s a worker may "
         "have"},
        {{"purge", "--older-than", "1d", NULL},
         NULL,
         NULL,
         2,
         "--older-than: 86400 s is not longer than 86400 s"},
        {{"purge", "--older-than", "1h", "--workers-cache-ttl", "3600", NULL},
         NULL,
         NULL,
         2,
         "--older-than: 3600 s is not longer than --workers-cache-ttl (3600 s)"},
        /* Shorter than the configuration's own TTL (300 s by default, here 600 s). */
        {{"purge", "--older-than", "1h", "--workers-cache-ttl", "299", NULL},
         NULL,
         NULL,
         2,
         "--workers-cache-ttl: 299 s is shorter than this configuration's cache.ttl_s (300 s)"},
        {{"purge", "--older-than", "1h", "--workers-cache-ttl", "300", NULL},
         NULL,
         "ORDER_WORKER_CACHE_TTL_S=600",
         2,
         "--workers-cache-ttl: 300 s is shorter than this configuration's cache.ttl_s (600 s)"},
        {{"purge", "--older-than", "1h", "--workers-cache-ttl", "0", NULL},
         NULL,
         NULL,
         2,
         "--workers-cache-ttl: must be an integer from 1 to 86400 (seconds, as cache.ttl_s), got "
         "\"0\""},
        {{"purge", "--older-than", "30d", "--workers-cache-ttl", "86401", NULL},
         NULL,
         NULL,
         2,
         "--workers-cache-ttl: must be an integer from 1 to 86400"},
        {{"purge", "--older-than", "30d", "--workers-cache-ttl", "5m", NULL},
         NULL,
         NULL,
         2,
         "--workers-cache-ttl: must be an integer"},
        {{"purge", "--older-than", "30d", "--workers-cache-ttl", NULL},
         NULL,
         NULL,
         2,
         "--workers-cache-ttl needs a value"},
        /* Accepted: the guard passes and the command goes on to the (absent)
         * database. */
        {{"purge", "--older-than", "25h", NULL},
         NULL,
         "ORDER_WORKER_MYSQL_PORT=1",
         1,
         "cannot connect"},
        {{"purge", "--older-than", "301s", "--workers-cache-ttl", "300", NULL},
         NULL,
         "ORDER_WORKER_MYSQL_PORT=1",
         1,
         "cannot connect"},
        {{"purge", "--older-than", "2m", "--workers-cache-ttl", "60", "--config", "/dev/stdin",
          NULL},
         "cache.ttl_s = 30\nmysql.port = 1\n",
         NULL,
         1,
         "cannot connect"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

static void test_audit_config_args(void **state)
{
    static const cli_case cases[] = {
        {{"audit", "everything", NULL}, NULL, NULL, 2, "unexpected argument"},
        {{"audit", "--user", "1", NULL}, NULL, NULL, 2, "unknown option --user"},
        {{"audit", "--config", NULL}, NULL, NULL, 2, "--config needs a value"},
        {{"config", NULL}, NULL, NULL, 2, "exactly one of --print and --markdown"},
        {{"config", "--print", "--markdown", NULL}, NULL, NULL, 2, "exactly one"},
        {{"config", "--dump", NULL}, NULL, NULL, 2, "unknown option --dump"},
        {{"config", "--print", "--config", "/nonexistent/ow.conf", NULL},
         NULL,
         NULL,
         2,
         "/nonexistent/ow.conf"},
        {{"nonsense", NULL}, NULL, NULL, 2, "unknown command \"nonsense\""},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

static void test_send_args(void **state)
{
    static const cli_case cases[] = {
        {{"send", NULL}, NULL, NULL, 2, "--user is required"},
        {{"send", "--user", "x", "--key", "k", NULL}, NULL, NULL, 2, "--user: must be"},
        {{"send", "--user", "1", NULL}, NULL, NULL, 2, "--key is required"},
        {{"send", "--user", "1", "--key", "k", "--timeout-ms", "0", NULL},
         NULL,
         NULL,
         2,
         "--timeout-ms: must be an integer"},
        {{"send", "--user", "1", "--key", "k", "--timeout-ms", "3600001", NULL},
         NULL,
         NULL,
         2,
         "--timeout-ms"},
        {{"send", "--user", "1", "--key", "k", "a.json", "b.json", NULL},
         NULL,
         NULL,
         2,
         "unexpected argument \"b.json\""},
        {{"send", "--user", "1", "--key", "k", "--wait=1", NULL},
         NULL,
         NULL,
         2,
         "unknown option --wait=1"},
        {{"send", "--user", "1", "--key", "k", "/nonexistent/doc.json", NULL},
         NULL,
         NULL,
         2,
         "/nonexistent/doc.json: cannot open"},
        {{"send", "--user", "1", "--key", "k", NULL},
         "{\"user_id\":2,\"orders\":[]}",
         NULL,
         2,
         "the document's user_id is 2 but --user is 1"},
        {{"send", "--user", "1", "--key", "k", "-", NULL},
         "{\"user_id\":\"1\"}",
         NULL,
         2,
         "user_id is not an integer"},
        {{"send", "--user", "1", "--key", "k", NULL},
         "{\"user_id\":1.0}",
         NULL,
         2,
         "user_id is not an integer"},
        {{"send", "--user", "1", "--key", "k", NULL},
         "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"A-1\",\"amount\":\"1.00\"}]}",
         "ORDER_WORKER_REQUEST_MAX_BYTES=64",
         2,
         "stdin: larger than request.max_bytes (64 bytes)"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

/* Issue 9: a value may start with dashes, and no option may be given twice
 * (only the first would have counted). */
static void test_dash_values_and_repeats(void **state)
{
    static const cli_case cases[] = {
        /* "--abc" is a valid key: taken as --key's value, so lookup gets as
         * far as the (absent) database. */
        {{"lookup", "--user", "1", "--key", "--abc", NULL},
         NULL,
         "ORDER_WORKER_MYSQL_PORT=1",
         1,
         "cannot connect"},
        {{"lookup", "--key", "--user", "1", NULL}, NULL, NULL, 2, "--key needs a value"},
        {{"lookup", "--user", "1", "--user", "2", "--key", "k", NULL},
         NULL,
         NULL,
         2,
         "--user given more than once"},
        {{"lookup", "--user", "1", "--key", "k", "--key=k", NULL},
         NULL,
         NULL,
         2,
         "--key given more than once"},
        {{"send", "--user", "1", "--key", "k", "--wait", "--wait", NULL},
         NULL,
         NULL,
         2,
         "--wait given more than once"},
        {{"purge", "--older-than", "1d", "--older-than", "2d", NULL},
         NULL,
         NULL,
         2,
         "--older-than given more than once"},
        {{"config", "--print", "--config", "a", "--config", "b", NULL},
         NULL,
         NULL,
         2,
         "--config given more than once"},
        {{"run", "--config", "a", "--config=b", NULL},
         NULL,
         NULL,
         2,
         "--config given more than once"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

/* Issue 9: configuration that used to be accepted and then ignored or
 * failed later is refused at start by every subcommand. */
static void test_config_refused_everywhere(void **state)
{
    static const char *const bad_prop = "ORDER_WORKER_KAFKA_NO_SUCH_PROPERTY=1";
    static const cli_case cases[] = {
        {{"run", NULL},
         NULL,
         bad_prop,
         2,
         "environment ORDER_WORKER_KAFKA_NO_SUCH_PROPERTY: kafka.no.such.property: No such "
         "configuration property"},
        {{"migrate", NULL}, NULL, bad_prop, 2, "kafka.no.such.property: No such"},
        {{"lookup", "--user", "1", "--key", "k", NULL},
         NULL,
         bad_prop,
         2,
         "kafka.no.such.property: No such"},
        {{"purge", "--older-than", "1d", NULL},
         NULL,
         bad_prop,
         2,
         "kafka.no.such.property: No such"},
        {{"audit", NULL}, NULL, bad_prop, 2, "kafka.no.such.property: No such"},
        {{"send", "--user", "1", "--key", "k", NULL},
         "{}",
         bad_prop,
         2,
         "kafka.no.such.property: No such"},
        {{"config", "--print", NULL}, NULL, bad_prop, 2, "kafka.no.such.property: No such"},
        /* From a file: named by file:line; a bad value as well as a bad name. */
        {{"config", "--print", "--config", "/dev/stdin", NULL},
         "kafka.fetch.wait.max.ms = 10\nkafka.no.such.property = 1\n",
         NULL,
         2,
         "/dev/stdin:2: kafka.no.such.property: No such configuration property"},
        {{"config", "--print", "--config", "/dev/stdin", NULL},
         "kafka.producer.compression.codec = zip\n",
         NULL,
         2,
         "/dev/stdin:1: kafka.producer.compression.codec: Invalid value"},
        {{"config", "--print", NULL},
         NULL,
         "ORDER_WORKER_KAFKA_CONSUMER_GROUP_ID=g",
         2,
         "kafka.consumer.group.id: not used; set kafka.group.id instead"},
        {{"config", "--print", NULL},
         NULL,
         "ORDER_WORKER_TOPIC_DLQ=order-batch-results",
         2,
         "topic.results: must differ from topic.dlq"},
        {{"config", "--print", NULL},
         NULL,
         "ORDER_WORKER_METRICS_ADDRESS=example.com",
         2,
         "metrics.address: \"example.com\" is not an IPv4 or IPv6 address or localhost"},
        {{"config", "--print", NULL}, NULL, "ORDER_WORKER_METRICS_ADDRESS=::1", 0, ""},
        {{"config", "--print", NULL}, NULL, "ORDER_WORKER_METRICS_ADDRESS=localhost", 0, ""},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

/* An exactly-once configuration whose transactions could never commit
 * in the producer's transaction.timeout.ms: every subcommand refuses it
 * with exit status 2, naming the timeout and transaction.interval_ms,
 * before it connects to anything. */
static void test_transaction_timeout_refused_everywhere(void **state)
{
    static const char conf[] = "processing.guarantee = exactly_once_v2\n"
                               "worker.replica_id = r1\n"
                               "transaction.interval_ms = 15000\n"
                               "kafka.producer.transaction.timeout.ms = 5000\n";
    static const char want[] = "kafka.producer.transaction.timeout.ms: 5000 ms cannot hold "
                               "a transaction: transaction.interval_ms 15000 + shutdown.timeout_ms "
                               "10000 + 1000 for the commit = 26000 ms";
    static const cli_case cases[] = {
        {{"run", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want},
        {{"serve", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want},
        {{"migrate", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want},
        {{"lookup", "--user", "1", "--key", "k", "--config", "/dev/stdin", NULL},
         conf,
         NULL,
         2,
         want},
        {{"purge", "--older-than", "2d", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want},
        {{"audit", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want},
        {{"send", "--user", "1", "--key", "k", "/dev/null", "--config", "/dev/stdin", NULL},
         conf,
         NULL,
         2,
         want},
        {{"config", "--print", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

/* mysql.host = localhost makes the client library use its Unix socket and
 * never the port, as MySQL's own clients do: a failed connection names the
 * socket it tried, not host:port. Nothing listens on either address. */
static void test_connect_names_what_was_tried(void **state)
{
    static const cli_case cases[] = {
        {{"lookup", "--user", "1", "--key", "k", "--config", "/dev/stdin", NULL},
         "mysql.host = localhost\nmysql.port = 26166\n",
         "MYSQL_UNIX_PORT=/nonexistent/ow-test.sock",
         1,
         "cannot connect to MySQL at localhost (Unix socket /nonexistent/ow-test.sock; "
         "mysql.port is not used): Can't connect to local server through socket "
         "'/nonexistent/ow-test.sock'"},
        {{"lookup", "--user", "1", "--key", "k", "--config", "/dev/stdin", NULL},
         "mysql.host = 127.0.0.1\nmysql.port = 1\n",
         NULL,
         1,
         "cannot connect to MySQL at 127.0.0.1:1: "},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

/* serve's api.token_file, read before anything else is started: every case
 * here stops at exit status 2. Each configuration also names a database
 * port and an address serve could not use, so that a token file wrongly
 * accepted ends in exit status 1 instead of a running service. */
static void write_file(const char *path, const char *text, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void check_serve(const char *conf, const char *want)
{
    cli_case c = {{"serve", "--config", "/dev/stdin", NULL}, conf, NULL, 2, want};

    check(&c);
}

static void check_token_file(const char *path, const char *want)
{
    char conf[512];

    snprintf(conf, sizeof(conf), "api.token_file = %s\nmysql.port = 1\napi.address = 192.0.2.1\n",
             path);
    check_serve(conf, want);
}

static void test_serve_token_file(void **state)
{
    static const char *const files[] = {"t0644", "t0666",   "t0640", "t0460",  "blanks",
                                        "long",  "control", "good",  "own0440"};
    char dir[] = "/tmp/ow-token-XXXXXX";
    char path[64];
    char want[160];
    char conf[512];
    char long_token[5001];

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/t0644", dir);
    write_file(path, "0123456789abcdef0123\n", 21, 0644);
    snprintf(want, sizeof(want), "api.token_file: %s has mode 0644: others must have no access",
             path);
    check_token_file(path, want);
    snprintf(path, sizeof(path), "%s/t0666", dir);
    write_file(path, "0123456789abcdef0123\n", 21, 0666);
    snprintf(want, sizeof(want), "api.token_file: %s has mode 0666", path);
    check_token_file(path, want);
    /* Group read is refused unless the group is the process's own: here a
     * group it is not in (the tests run as root, which may give the file
     * away). A group that may write is refused whatever the group. */
    snprintf(path, sizeof(path), "%s/t0640", dir);
    write_file(path, "0123456789abcdef0123\n", 21, 0640);
    assert_int_equal(chown(path, (uid_t)-1, 65534), 0);
    check_token_file(path, "has mode 0640");
    snprintf(path, sizeof(path), "%s/t0460", dir);
    write_file(path, "0123456789abcdef0123\n", 21, 0460);
    check_token_file(path, "has mode 0460");
    /* 15 bytes of token and then blanks: the blanks are not part of it. */
    snprintf(path, sizeof(path), "%s/blanks", dir);
    write_file(path, "0123456789abcde \t \r\n", 20, 0600);
    check_token_file(path, "api.token_file: the token must be at least 16 bytes");
    snprintf(path, sizeof(path), "%s/long", dir);
    memset(long_token, 'k', 5000);
    write_file(path, long_token, 5000, 0600);
    check_token_file(path,
                     "api.token_file: the token is 5000 bytes, more than the maximum of 4096");
    snprintf(path, sizeof(path), "%s/control", dir);
    write_file(path, "0123456789\001abcdef\n", 18, 0600);
    check_token_file(path, "byte 11 of the token is a control character");
    snprintf(want, sizeof(want), "api.token_file: %s is a directory, not a file", dir);
    check_token_file(dir, want);
    snprintf(path, sizeof(path), "%s/missing", dir);
    check_token_file(path, "api.token_file: cannot read");
    /* A token file that passes (mode 0600, 16 bytes before the blanks):
     * the next check, of the trusted proxies, refuses the bad entry. */
    snprintf(path, sizeof(path), "%s/good", dir);
    write_file(path, "0123456789abcdef \t\n", 19, 0600);
    snprintf(conf, sizeof(conf),
             "api.token_file = %s\nmysql.port = 1\napi.address = 192.0.2.1\n"
             "api.trusted_proxies = 10.0.0.1, proxy.example\n",
             path);
    check_serve(conf, "api.trusted_proxies: \"proxy.example\" is not an IPv4 or IPv6 address");
    /* A Kubernetes Secret mounted for the pod's fsGroup: 0440, the file's
     * group the process's own. It passes: the proxies' check refuses next. */
    snprintf(path, sizeof(path), "%s/own0440", dir);
    write_file(path, "0123456789abcdef0123\n", 21, 0440);
    assert_int_equal(chown(path, (uid_t)-1, getegid()), 0);
    snprintf(conf, sizeof(conf),
             "api.token_file = %s\nmysql.port = 1\napi.address = 192.0.2.1\n"
             "api.trusted_proxies = proxy.example\n",
             path);
    check_serve(conf, "api.trusted_proxies: \"proxy.example\" is not an IPv4 or IPv6 address");
    check_serve("mysql.port = 1\n", "api.token_file: is required");
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void test_help_of_every_command(void **state)
{
    static const char *const cmds[] = {"run",   "migrate", "lookup", "purge",
                                       "audit", "send",    "config"};

    (void)state;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cli_case c = {{cmds[i], "--help", NULL}, NULL, NULL, 0, ""};
        testcli_result r = run(&c);
        char want[64];

        snprintf(want, sizeof(want), "usage: order-worker %s", cmds[i]);
        if (r.status != 0 || strstr(r.out, want) == NULL)
            fail_msg("%s --help: status %d, stdout:\n%s", cmds[i], r.status, r.out);
        testcli_result_free(&r);
    }
}

static void test_config_reference_and_print(void **state)
{
    cli_case help = {{"--help", NULL}, NULL, NULL, 0, ""};
    cli_case config_help = {{"config", "--help", NULL}, NULL, NULL, 0, ""};
    cli_case md = {{"config", "--markdown", NULL}, NULL, NULL, 0, ""};
    cli_case print = {
        {"config", "--print", NULL}, NULL, "ORDER_WORKER_MYSQL_PASSWORD=secret-value", 0, ""};
    testcli_result r;

    (void)state;
    r = run(&help);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "  mysql.password_file "));
    testcli_result_free(&r);
    r = run(&config_help);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--markdown"));
    assert_non_null(strstr(r.out, "  kafka.bootstrap.servers "));
    testcli_result_free(&r);
    r = run(&md);
    assert_int_equal(r.status, 0);
    assert_int_equal(strncmp(r.out, "| key | type | default |", 24), 0);
    assert_non_null(strstr(r.out, "| `mysql.password` | string |"));
    testcli_result_free(&r);
    r = run(&print);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "secret-value"));
    assert_null(strstr(r.err, "secret-value"));
    assert_non_null(strstr(r.out, "mysql.password = (redacted)"));
    assert_non_null(strstr(r.out, "ORDER_WORKER_MYSQL_PASSWORD"));
    testcli_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_args),
        cmocka_unit_test(test_purge_args),
        cmocka_unit_test(test_audit_config_args),
        cmocka_unit_test(test_send_args),
        cmocka_unit_test(test_dash_values_and_repeats),
        cmocka_unit_test(test_config_refused_everywhere),
        cmocka_unit_test(test_transaction_timeout_refused_everywhere),
        cmocka_unit_test(test_connect_names_what_was_tried),
        cmocka_unit_test(test_serve_token_file),
        cmocka_unit_test(test_help_of_every_command),
        cmocka_unit_test(test_config_reference_and_print),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
