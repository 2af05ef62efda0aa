/* Configuration: table defaults, files, environment, errors, redaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ow/config.h"

static void test_defaults(void **state)
{
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_string_equal(cfg.topic_input, "order-batches");
    assert_string_equal(cfg.topic_results, "order-batch-results");
    assert_string_equal(cfg.topic_dlq, "order-batches.dlq");
    assert_int_equal(cfg.mysql_port, 3306);
    assert_int_equal(cfg.request_max_bytes, 1048576);
    assert_int_equal(cfg.request_max_orders, 1000);
    assert_int_equal(cfg.log_level, OW_LOG_INFO);
    assert_int_equal(cfg.tracing_start_traces, 0);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    ow_config_cleanup(&cfg);
}

static void test_file_syntax(void **state)
{
    const char *text = "# comment\n"
                       "\n"
                       "  kafka.bootstrap.servers = 10.0.0.1:9092 \n"
                       "mysql.port=3307\r\n"
                       "kafka.socket.timeout.ms = 5000\n"
                       "log.level = debug\n"
                       "tracing.start_traces = true\n"
                       "mysql.password =\n";
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, text, "t.conf", &err), OW_OK);
    assert_string_equal(cfg.kafka_bootstrap_servers, "10.0.0.1:9092");
    assert_int_equal(cfg.mysql_port, 3307);
    assert_int_equal(cfg.log_level, OW_LOG_DEBUG);
    assert_int_equal(cfg.tracing_start_traces, 1);
    assert_string_equal(cfg.mysql_password, "");
    assert_int_equal(cfg.n_passthrough, 1);
    assert_string_equal(cfg.passthrough[0].name, "socket.timeout.ms");
    assert_string_equal(cfg.passthrough[0].value, "5000");
    ow_config_cleanup(&cfg);
}

typedef struct {
    const char *text;
    const char *error; /* expected message, exactly */
} error_case;

static const error_case error_cases[] = {
    {"mysql.port = 70000\n", "t.conf:1: mysql.port: 70000 is out of range [1, 65535]"},
    {"\n\nmysql.port = 12x\n", "t.conf:3: mysql.port: \"12x\" is not an integer"},
    {"mysql.prot = 1\n", "t.conf:1: mysql.prot: unknown key"},
    {"just text\n", "t.conf:1: expected key = value, found no '='"},
    {" = 5\n", "t.conf:1: empty key before '='"},
    {"log.level = loud\n", "t.conf:1: log.level: must be one of error, warn, info, debug"},
    {"worker.lanes = 0\n", "t.conf:1: worker.lanes: 0 is out of range [1, 64]"},
    {"tracing.start_traces = yes\n",
     "t.conf:1: tracing.start_traces: \"yes\" is not true or false"},
    {"tracing.start_traces = 1\n", "t.conf:1: tracing.start_traces: \"1\" is not true or false"},
    {"tracing.start_traces = True\n",
     "t.conf:1: tracing.start_traces: \"True\" is not true or false"},
    {"kafka. = x\n", "t.conf:1: kafka.: a librdkafka property name must follow \"kafka.\""},
};

static void test_file_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++) {
        ow_config cfg;
        ow_error err;

        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, error_cases[i].text, "t.conf", &err),
                         OW_EINVAL);
        assert_string_equal(err.msg, error_cases[i].error);
        ow_config_cleanup(&cfg);
    }
}

/* A key given twice in a file: the first value was silently lost. The
 * environment may still override the file (test_env_overrides_file). */
static void test_file_key_given_twice(void **state)
{
    static const error_case cases[] = {
        {"mysql.port = 3307\n# later\nmysql.port = 3308\n",
         "t.conf:3: mysql.port: given more than once (first at t.conf:1)"},
        {"mysql.host = a\nmysql.host = a\n",
         "t.conf:2: mysql.host: given more than once (first at t.conf:1)"},
        {"mysql.password =\nlog.level = info\nmysql.password = x\n",
         "t.conf:3: mysql.password: given more than once (first at t.conf:1)"},
        {"kafka.socket.timeout.ms = 5000\n\nkafka.socket.timeout.ms = 6000\n",
         "t.conf:3: kafka.socket.timeout.ms: given more than once (first at t.conf:1)"},
        {"kafka.producer.linger.ms = 5\nkafka.producer.linger.ms = 5\n",
         "t.conf:2: kafka.producer.linger.ms: given more than once (first at t.conf:1)"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ow_config cfg;
        ow_error err;

        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        if (ow_config_load_string(&cfg, cases[i].text, "t.conf", &err) != OW_EINVAL)
            fail_msg("accepted: %s", cases[i].text);
        assert_string_equal(err.msg, cases[i].error);
        ow_config_cleanup(&cfg);
    }
}

/* The same property for one client and for both are two keys; the
 * environment overrides a file's kafka.* key as it does a table key. */
static void test_file_passthrough_override(void **state)
{
    char *env[] = {"ORDER_WORKER_KAFKA_SOCKET_TIMEOUT_MS=7000", NULL};
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg,
                                           "kafka.socket.timeout.ms = 5000\n"
                                           "kafka.consumer.socket.timeout.ms = 6000\n",
                                           "t.conf", &err),
                     OW_OK);
    assert_int_equal(ow_config_load_env(&cfg, env, &err), OW_OK);
    assert_int_equal(cfg.n_passthrough, 2);
    assert_string_equal(cfg.passthrough[0].name, "socket.timeout.ms");
    assert_string_equal(cfg.passthrough[0].value, "7000");
    assert_string_equal(cfg.passthrough[1].value, "6000");
    ow_config_cleanup(&cfg);
}

static void test_env_overrides_file(void **state)
{
    char *env[] = {"PATH=/bin",
                   "ORDER_WORKER_MYSQL_PORT=3310",
                   "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=b:1",
                   "ORDER_WORKER_KAFKA_STATISTICS_INTERVAL_MS=1000",
                   "ORDER_WORKER_REQUEST_IN_PROGRESS_WAIT_S=9",
                   NULL};
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, "mysql.port = 3307\nmysql.user = u\n", "f", &err),
                     OW_OK);
    assert_int_equal(ow_config_load_env(&cfg, env, &err), OW_OK);
    assert_int_equal(cfg.mysql_port, 3310);
    assert_string_equal(cfg.mysql_user, "u");
    assert_string_equal(cfg.kafka_bootstrap_servers, "b:1");
    assert_int_equal(cfg.request_in_progress_wait_s, 9);
    assert_int_equal(cfg.n_passthrough, 1);
    assert_string_equal(cfg.passthrough[0].name, "statistics.interval.ms");
    ow_config_cleanup(&cfg);
}

static void test_env_errors(void **state)
{
    char *unknown[] = {"ORDER_WORKER_NOPE=1", NULL};
    char *bad[] = {"ORDER_WORKER_WORKER_LANES=many", NULL};
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_env(&cfg, unknown, &err), OW_EINVAL);
    assert_string_equal(err.msg, "environment ORDER_WORKER_NOPE: unknown key");
    assert_int_equal(ow_config_load_env(&cfg, bad, &err), OW_EINVAL);
    assert_string_equal(err.msg,
                        "environment ORDER_WORKER_WORKER_LANES: worker.lanes: \"many\" is not an "
                        "integer");
    ow_config_cleanup(&cfg);
}

static void test_finish_checks(void **state)
{
    static const struct {
        const char *text;
        const char *error;
    } cases[] = {
        {"topic.results = order-batches\n",
         "topic.input: must differ from topic.results and topic.dlq"},
        {"kafka.group.id =\n", "kafka.group.id: must not be empty"},
        {"kafka.enable.auto.offset.store = true\n",
         "kafka.enable.auto.offset.store: is fixed by order-worker's delivery guarantees"},
        {"kafka.acks = 1\n", "kafka.acks: is fixed by order-worker's delivery guarantees"},
        /* commit.interval_ms sets it; the clients' table would override it. */
        {"kafka.consumer.auto.commit.interval.ms = 100\n",
         "kafka.consumer.auto.commit.interval.ms: is fixed by order-worker's delivery guarantees"},
        /* The ledger passes the records behind a partition's last message
         * when librdkafka reports the partition's end. */
        {"kafka.consumer.enable.partition.eof = false\n",
         "kafka.consumer.enable.partition.eof: is fixed by order-worker's delivery guarantees"},
        /* A partition without a committed offset is read from its start. */
        {"kafka.auto.offset.reset = latest\n",
         "kafka.auto.offset.reset: \"latest\": order-worker reads a partition the group has no "
         "offset for from its start (earliest): latest would skip its messages without deciding "
         "them, error would stop it"},
        {"kafka.consumer.auto.offset.reset = largest\n",
         "kafka.consumer.auto.offset.reset: \"largest\": order-worker reads a partition the group "
         "has no offset for from its start (earliest): latest would skip its messages without "
         "deciding them, error would stop it"},
        {"kafka.auto.offset.reset = error\n",
         "kafka.auto.offset.reset: \"error\": order-worker reads a partition the group has no "
         "offset for from its start (earliest): latest would skip its messages without deciding "
         "them, error would stop it"},
        {"retry.backoff_ms = 500\nretry.backoff_max_ms = 100\n",
         "retry.backoff_max_ms: must be at least retry.backoff_ms"},
        /* Results and dead letters on one topic; an address that
         * only looked like one. */
        {"topic.dlq = order-batch-results\n", "topic.results: must differ from topic.dlq"},
        {"topic.results = x\ntopic.dlq = x\n", "topic.results: must differ from topic.dlq"},
        {"metrics.address = 0.0.0\n",
         "metrics.address: \"0.0.0\" is not an IPv4 or IPv6 address or localhost"},
        {"metrics.address = ::1::2\n",
         "metrics.address: \"::1::2\" is not an IPv4 or IPv6 address or localhost"},
        {"mysql.ssl_mode = VERIFY_IDENTITY\n",
         "mysql.ssl_mode: \"VERIFY_IDENTITY\" is not one of disabled, preferred, required, "
         "verify_ca, verify_identity"},
        {"mysql.ssl_mode = verify_identity\n",
         "mysql.ssl_mode: verify_identity needs mysql.ssl_ca or mysql.ssl_capath"},
        {"mysql.ssl_mode = verify_ca\nmysql.ssl_cert = c.pem\n",
         "mysql.ssl_mode: verify_ca needs mysql.ssl_ca or mysql.ssl_capath"},
        {"mysql.ssl_cert = c.pem\n",
         "mysql.ssl_cert: mysql.ssl_cert and mysql.ssl_key go together"},
        /* A version Connector/C does not know is ignored by it without a
         * word, leaving the library's default in force. */
        {"mysql.tls_version = TLS1.2\n",
         "mysql.tls_version: \"TLS1.2\" is not one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3"},
        {"mysql.tls_version = TLSv9\n",
         "mysql.tls_version: \"TLSv9\" is not one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3"},
        {"mysql.tls_version = TLSv1.2,tlsv1.3\n",
         "mysql.tls_version: \"tlsv1.3\" is not one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3"},
        {"mysql.tls_version = TLSv1.2;TLSv1.3\n",
         "mysql.tls_version: \"TLSv1.2;TLSv1.3\" is not one of TLSv1.0, TLSv1.1, TLSv1.2, "
         "TLSv1.3"},
        {"mysql.tls_version = TLSv1.3,\n",
         "mysql.tls_version: \"\" is not one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3"},
        {"mysql.tls_version = TLSv1.2x\n",
         "mysql.tls_version: \"TLSv1.2x\" is not one of TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3"},
        /* Exactly-once needs a replica id that can be part of a
         * transactional id, and must not read aborted input. */
        {"processing.guarantee = exactly_once\n",
         "processing.guarantee: \"exactly_once\" is not one of at_least_once, exactly_once_v2"},
        {"processing.guarantee = exactly_once_v2\n",
         "worker.replica_id: required with processing.guarantee = exactly_once_v2: a name unique "
         "among the group's replicas and the same across restarts (a host name, a StatefulSet "
         "ordinal)"},
        {"worker.replica_id = a/b\n",
         "worker.replica_id: \"a/b\": only letters, digits, '.', '_' and '-', at most 64"},
        {"processing.guarantee = exactly_once_v2\nworker.replica_id = r1\n"
         "kafka.producer.transactional.id = x\n",
         "kafka.producer.transactional.id: is <kafka.group.id>-<worker.replica_id> with "
         "processing.guarantee = exactly_once_v2"},
        {"processing.guarantee = exactly_once_v2\nworker.replica_id = r1\n"
         "kafka.consumer.isolation.level = read_uncommitted\n",
         "kafka.consumer.isolation.level: must be read_committed with processing.guarantee = "
         "exactly_once_v2 (aborted input would be decided)"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ow_config cfg;
        ow_error err;

        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, cases[i].text, "f", &err), OW_OK);
        assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
        assert_string_equal(err.msg, cases[i].error);
        ow_config_cleanup(&cfg);
    }
}

/* exactly_once_v2: a transaction stays open up to transaction.interval_ms
 * plus the longer of a stop's and a revoke's wait for the lanes, plus a
 * second for its commit; a producer transaction.timeout.ms that cannot
 * hold that is refused, naming both keys. Where the timeout comes from:
 * librdkafka's default (60 s), kafka.transaction.timeout.ms or
 * kafka.producer.transaction.timeout.ms, the last one the producer gets
 * winning (a file's order, then the environment). */
static void test_transaction_timeout(void **state)
{
    static const char eos[] = "processing.guarantee = exactly_once_v2\nworker.replica_id = r1\n";
    static const struct {
        const char *text;  /* after eos, unless it starts with '!' */
        const char *env;   /* one NAME=value, or NULL */
        const char *error; /* NULL: accepted */
    } cases[] = {
        /* An interval longer than the timeout: every transaction would
         * time out. */
        {"transaction.interval_ms = 15000\nkafka.producer.transaction.timeout.ms = 5000\n", NULL,
         "kafka.producer.transaction.timeout.ms: 5000 ms cannot hold a transaction: "
         "transaction.interval_ms 15000 + shutdown.timeout_ms 10000 + 1000 for the commit = "
         "26000 ms; raise it or lower transaction.interval_ms"},
        /* librdkafka's default, against a long interval or a long drain. */
        {"transaction.interval_ms = 60000\n", NULL,
         "kafka.producer.transaction.timeout.ms: 60000 ms (librdkafka's default) cannot hold a "
         "transaction: transaction.interval_ms 60000 + shutdown.timeout_ms 10000 + 1000 for the "
         "commit = 71000 ms; raise it or lower transaction.interval_ms"},
        {"rebalance.drain_timeout_ms = 59000\n", NULL,
         "kafka.producer.transaction.timeout.ms: 60000 ms (librdkafka's default) cannot hold a "
         "transaction: transaction.interval_ms 100 + rebalance.drain_timeout_ms 59000 + 1000 for "
         "the commit = 60100 ms; raise it or lower transaction.interval_ms"},
        /* The bound itself is refused, one millisecond more is not. */
        {"kafka.transaction.timeout.ms = 11100\n", NULL,
         "kafka.transaction.timeout.ms: 11100 ms cannot hold a transaction: "
         "transaction.interval_ms 100 + shutdown.timeout_ms 10000 + 1000 for the commit = "
         "11100 ms; raise it or lower transaction.interval_ms"},
        {"kafka.transaction.timeout.ms = 11101\n", NULL, NULL},
        /* The producer's last setting counts: the file's order, then the
         * environment. */
        {"kafka.transaction.timeout.ms = 90000\nkafka.producer.transaction.timeout.ms = 8000\n",
         NULL,
         "kafka.producer.transaction.timeout.ms: 8000 ms cannot hold a transaction: "
         "transaction.interval_ms 100 + shutdown.timeout_ms 10000 + 1000 for the commit = "
         "11100 ms; raise it or lower transaction.interval_ms"},
        {"kafka.producer.transaction.timeout.ms = 8000\n",
         "ORDER_WORKER_KAFKA_TRANSACTION_TIMEOUT_MS=20000", NULL},
        {"kafka.producer.transaction.timeout.ms = 30000\n",
         "ORDER_WORKER_TRANSACTION_INTERVAL_MS=29000",
         "kafka.producer.transaction.timeout.ms: 30000 ms cannot hold a transaction: "
         "transaction.interval_ms 29000 + shutdown.timeout_ms 10000 + 1000 for the commit = "
         "40000 ms; raise it or lower transaction.interval_ms"},
        /* The consumer's setting is not the producer's. */
        {"kafka.consumer.transaction.timeout.ms = 5000\n", NULL, NULL},
        /* What the defaults, the fault runs (scripts/lib.sh's
         * fault_run_timeouts), scripts/shards.sh and the e2e tests of a
         * paused worker use. */
        {"", NULL, NULL},
        {"shutdown.timeout_ms = 5000\nrebalance.drain_timeout_ms = 2000\n", NULL, NULL},
        {"shutdown.timeout_ms = 8000\n", NULL, NULL},
        {"transaction.interval_ms = 2000\nshutdown.timeout_ms = 3000\n"
         "rebalance.drain_timeout_ms = 2000\nkafka.producer.transaction.timeout.ms = 8000\n",
         NULL, NULL},
        /* Without transactions the timeout is not used. */
        {"!transaction.interval_ms = 15000\nkafka.producer.transaction.timeout.ms = 5000\n", NULL,
         NULL},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512], env_var[96];
        char *env[] = {env_var, NULL};
        ow_config cfg;
        ow_error err;
        int rc;

        if (cases[i].text[0] == '!')
            snprintf(text, sizeof(text), "%s", cases[i].text + 1);
        else
            snprintf(text, sizeof(text), "%s%s", eos, cases[i].text);
        snprintf(env_var, sizeof(env_var), "%s", cases[i].env != NULL ? cases[i].env : "X=1");
        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, text, "f", &err), OW_OK);
        assert_int_equal(ow_config_load_env(&cfg, env, &err), OW_OK);
        rc = ow_config_finish(&cfg, &err);
        if (cases[i].error == NULL && rc != OW_OK)
            fail_msg("case %zu refused: %s", i, err.msg);
        if (cases[i].error != NULL) {
            if (rc != OW_EINVAL)
                fail_msg("case %zu accepted: %s", i, cases[i].text);
            assert_string_equal(err.msg, cases[i].error);
        }
        ow_config_cleanup(&cfg);
    }
}

/* The lists of versions MariaDB Connector/C knows (libmariadb's
 * ma_tls_version_options), with or without blanks after the commas. */
static void test_tls_versions_accepted(void **state)
{
    static const char *const good[] = {"",
                                       "TLSv1.2",
                                       "TLSv1.3",
                                       "TLSv1.2,TLSv1.3",
                                       "TLSv1.2, TLSv1.3",
                                       "TLSv1.0,TLSv1.1,TLSv1.2,TLSv1.3"};

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ow_config cfg;
        ow_error err;
        char line[96];

        snprintf(line, sizeof(line), "mysql.tls_version = %s\n", good[i]);
        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, line, "f", &err), OW_OK);
        if (ow_config_finish(&cfg, &err) != OW_OK)
            fail_msg("\"%s\" refused: %s", good[i], err.msg);
        ow_config_cleanup(&cfg);
    }
}

/* IPv6 literals and localhost are addresses too. */
static void test_metrics_addresses(void **state)
{
    static const char *const good[] = {"127.0.0.1", "0.0.0.0", "::1", "::", "fe80::1", "localhost"};

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ow_config cfg;
        ow_error err;
        char line[64];

        snprintf(line, sizeof(line), "metrics.address = %s\n", good[i]);
        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, line, "f", &err), OW_OK);
        if (ow_config_finish(&cfg, &err) != OW_OK)
            fail_msg("%s refused: %s", good[i], err.msg);
        ow_config_cleanup(&cfg);
    }
    assert_false(ow_config_address_ok("localhost.localdomain"));
    assert_false(ow_config_address_ok(""));
}

/* kafka.consumer.group.id would be overridden by kafka.group.id. */
static void test_group_id_passthrough_refused(void **state)
{
    static const char *const lines[] = {"kafka.consumer.group.id = other\n",
                                        "kafka.producer.group.id = other\n"};

    (void)state;
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
        ow_config cfg;
        ow_error err;

        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, lines[i], "w.conf", &err), OW_EINVAL);
        assert_non_null(strstr(err.msg, "w.conf:1: kafka."));
        assert_non_null(strstr(err.msg, "group.id: not used; set kafka.group.id instead"));
        ow_config_cleanup(&cfg);
    }
}

static char *print_to_string(const ow_config *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ow_config_print(cfg, f);
    fclose(f);
    return buf;
}

static void test_print_redacts_and_names_sources(void **state)
{
    char *env[] = {"ORDER_WORKER_MYSQL_HOST=db.internal", NULL};
    ow_config cfg;
    ow_error err;
    char *out;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg,
                                           "mysql.password = hunter2-secret\n"
                                           "kafka.sasl.password = kafka-secret\n"
                                           "kafka.ssl.key.password = keypass-secret\n"
                                           "kafka.ssl.key.pem = -----BEGIN PRIVATE KEY-----x\n"
                                           "kafka.ssl.keystore.password = store-secret\n"
                                           "kafka.security.protocol = SASL_SSL\n"
                                           "mysql.ssl_mode = verify_identity\n"
                                           "mysql.ssl_ca = /etc/ow/ca.pem\n",
                                           "w.conf", &err),
                     OW_OK);
    assert_int_equal(ow_config_load_env(&cfg, env, &err), OW_OK);
    out = print_to_string(&cfg);
    assert_null(strstr(out, "hunter2-secret"));
    assert_null(strstr(out, "kafka-secret"));
    /* Key passwords and inline key material are secrets too. */
    assert_null(strstr(out, "keypass-secret"));
    assert_null(strstr(out, "BEGIN PRIVATE KEY"));
    assert_null(strstr(out, "store-secret"));
    assert_non_null(strstr(out, "kafka.ssl.key.pem = (redacted)"));
    assert_non_null(strstr(out, "kafka.security.protocol = SASL_SSL"));
    assert_non_null(strstr(out, "mysql.ssl_mode = verify_identity    # file (w.conf:7)"));
    assert_non_null(strstr(out, "mysql.ssl_ca = /etc/ow/ca.pem"));
    assert_non_null(strstr(out, "mysql.ssl_cert =     # default"));
    assert_non_null(strstr(out, "mysql.password = (redacted)    # file (w.conf:1)"));
    assert_non_null(strstr(out, "kafka.sasl.password = (redacted)"));
    assert_non_null(strstr(out, "mysql.host = db.internal    # environment"));
    assert_non_null(strstr(out, "mysql.port = 3306    # default"));
    free(out);
    ow_config_cleanup(&cfg);
}

static void test_password_file(void **state)
{
    char path[] = "/tmp/ow-test-pw-XXXXXX";
    int fd = mkstemp(path);
    ow_config cfg;
    ow_error err;
    char line[128];

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cret\n", 7), 7);
    close(fd);
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    snprintf(line, sizeof(line), "mysql.password_file = %s\n", path);
    assert_int_equal(ow_config_load_string(&cfg, line, "f", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    assert_string_equal(cfg.mysql_password, "s3cret");
    {
        /* config --print names the file, not "default". */
        char *out = print_to_string(&cfg);
        char want[128];

        snprintf(want, sizeof(want), "mysql.password = (redacted)    # file (%s)\n", path);
        assert_non_null(strstr(out, want));
        assert_null(strstr(out, "s3cret"));
        free(out);
    }
    ow_config_cleanup(&cfg);

    /* An empty password line (as in the example file) does not conflict. */
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, "mysql.password =\n", "f", &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, line, "f", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    assert_string_equal(cfg.mysql_password, "s3cret");
    ow_config_cleanup(&cfg);

    /* Both a password and a password file: refuse rather than guess. */
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, line, "f", &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg, "mysql.password = x\n", "f", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
    ow_config_cleanup(&cfg);
    unlink(path);

    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(
        ow_config_load_string(&cfg, "mysql.password_file = /nonexistent/pw\n", "f", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
    assert_non_null(strstr(err.msg, "mysql.password_file: /nonexistent/pw: cannot open"));
    ow_config_cleanup(&cfg);
}

static void test_reference_lists_every_key(void **state)
{
    static const char *const keys[] = {"kafka.bootstrap.servers",
                                       "kafka.group.id",
                                       "topic.input",
                                       "topic.results",
                                       "topic.dlq",
                                       "mysql.host",
                                       "mysql.port",
                                       "mysql.user",
                                       "mysql.password",
                                       "mysql.database"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    (void)state;
    ow_config_print_reference(f, 1);
    fclose(f);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char cell[80];

        snprintf(cell, sizeof(cell), "| `%s` |", keys[i]);
        assert_non_null(strstr(buf, cell));
    }
    assert_non_null(strstr(buf, "`ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS`"));
    free(buf);
}

/* The shipped example loads cleanly and mentions every key of the table. */
static void test_example_file(void **state)
{
    char *ref = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&ref, &len);
    FILE *example;
    char text[16384];
    size_t n;
    ow_config cfg;
    ow_error err;
    const char *line;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    if (ow_config_load_file(&cfg, OW_SOURCE_DIR "/config/order-worker.conf", &err) != OW_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    ow_config_cleanup(&cfg);
    example = fopen(OW_SOURCE_DIR "/config/order-worker.conf", "r");
    assert_non_null(example);
    n = fread(text, 1, sizeof(text) - 1, example);
    text[n] = '\0';
    fclose(example);
    ow_config_print_reference(f, 0);
    fclose(f);
    /* Reference lines of keys start with two spaces and the key name. */
    for (line = ref; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (line[0] == ' ' && line[1] == ' ' && line[2] != ' ' &&
            strncmp(line + 2, "kafka.<", 7) != 0) {
            char key[64], want[80];

            sscanf(line + 2, "%63s", key);
            snprintf(want, sizeof(want), "\n%s =", key);
            if (strstr(text, want) == NULL)
                fail_msg("config/order-worker.conf does not set %s", key);
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_file_syntax),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_file_key_given_twice),
        cmocka_unit_test(test_file_passthrough_override),
        cmocka_unit_test(test_env_overrides_file),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_finish_checks),
        cmocka_unit_test(test_transaction_timeout),
        cmocka_unit_test(test_print_redacts_and_names_sources),
        cmocka_unit_test(test_password_file),
        cmocka_unit_test(test_metrics_addresses),
        cmocka_unit_test(test_tls_versions_accepted),
        cmocka_unit_test(test_group_id_passthrough_refused),
        cmocka_unit_test(test_reference_lists_every_key),
        cmocka_unit_test(test_example_file),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
