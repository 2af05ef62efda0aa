/* The checks of a whole configuration, after every source was read
 * (ow_config_finish): the keys that depend on each other, the files that
 * keys name (passwords), TLS to the database and the shard list. Each
 * refusal names its key. */
#include "ow/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "ow/nodes.h"
#include "ow/util.h"

int ow_config_address_ok(const char *address)
{
    unsigned char addr[sizeof(struct in6_addr)];

    return strcmp(address, "localhost") == 0 || inet_pton(AF_INET, address, addr) == 1 ||
           inet_pton(AF_INET6, address, addr) == 1;
}

static int load_password_file(ow_config *cfg, ow_error *err)
{
    ow_buf text;
    int rc;

    if (ow_config_source_of(cfg, "mysql.password") != OW_SRC_DEFAULT &&
        *cfg->mysql_password != '\0')
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "mysql.password_file: cannot be combined with a mysql.password");
    ow_buf_init(&text);
    rc = ow_read_file(cfg->mysql_password_file, 4096, &text, err);
    if (rc == OW_OK) {
        char *pw = text.data != NULL ? text.data : "";

        pw[strcspn(pw, "\r\n")] = '\0';
        /* config --print names the file the password came from. */
        rc = ow_config_set(cfg, "mysql.password", pw, OW_SRC_FILE, cfg->mysql_password_file, err);
    } else if (err != NULL) {
        char why[sizeof(err->msg)];

        memcpy(why, err->msg, sizeof(why));
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "mysql.password_file: %s", why);
    }
    ow_buf_cleanup(&text);
    return rc;
}

/* mysql.tls_version: a comma-separated list of the names MariaDB
 * Connector/C knows. The library looks each name up in the text and
 * ignores anything else without a word, so a typo would leave its default
 * versions in force while the configuration seemed to restrict them. */
static int check_tls_versions(const char *list, ow_error *err)
{
    static const char *const known[] = {"TLSv1.0", "TLSv1.1", "TLSv1.2", "TLSv1.3"};
    const char *p = list;

    if (*list == '\0')
        return OW_OK; /* the library's default */
    for (;;) {
        size_t n = strcspn(p, ",");
        size_t k = 0;

        while (n > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        while (k < sizeof(known) / sizeof(known[0]) &&
               (strlen(known[k]) != n || strncmp(p, known[k], n) != 0))
            k++;
        if (k == sizeof(known) / sizeof(known[0]))
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "mysql.tls_version: \"%.*s\" is not one of TLSv1.0, TLSv1.1, "
                                "TLSv1.2, TLSv1.3",
                                (int)n, p);
        p += strcspn(p, ",");
        if (*p == '\0')
            return OW_OK;
        p++;
    }
}

/* A kafka.* key's name without its role prefix. */
static const char *kafka_name(const char *full)
{
    if (strncmp(full, "consumer.", 9) == 0 || strncmp(full, "producer.", 9) == 0)
        return full + 9;
    return full;
}

int ow_config_kafka_fixed(const char *name)
{
    /* auto.commit.interval.ms is commit.interval_ms's, and transactional.id
     * is refused by check_guarantee with its own reason. */
    static const char *const fixed[] = {
        "enable.auto.offset.store", "enable.idempotence",   "acks",
        "enable.auto.commit",       "enable.partition.eof", "auto.commit.interval.ms"};

    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (strcmp(name, fixed[i]) == 0)
            return 1;
    return 0;
}

/* processing.guarantee, and what exactly_once_v2 needs: a replica id that
 * can be a transactional id, and input read committed. */
static int check_guarantee(ow_config *cfg, ow_error *err)
{
    const char *id = cfg->worker_replica_id;
    size_t n = strlen(id);

    if (strcmp(cfg->processing_guarantee, "at_least_once") != 0 &&
        strcmp(cfg->processing_guarantee, "exactly_once_v2") != 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "processing.guarantee: \"%s\" is not one of at_least_once, "
                            "exactly_once_v2",
                            cfg->processing_guarantee);
    cfg->exactly_once = strcmp(cfg->processing_guarantee, "exactly_once_v2") == 0;
    if (n > 64 ||
        strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "worker.replica_id: \"%.64s\": only letters, digits, '.', '_' and "
                            "'-', at most 64",
                            id);
    if (!cfg->exactly_once)
        return OW_OK;
    if (strlen(cfg->kafka_group_id) > 200)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "kafka.group.id: at most 200 bytes with processing.guarantee = "
                            "exactly_once_v2 (it begins the transactional id)");
    if (n == 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "worker.replica_id: required with processing.guarantee = "
                            "exactly_once_v2: a name unique among the group's replicas and the "
                            "same across restarts (a host name, a StatefulSet ordinal)");
    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        const char *name = kafka_name(cfg->passthrough[i].name);

        if (strcmp(name, "transactional.id") == 0)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "kafka.%s: is <kafka.group.id>-<worker.replica_id> with "
                                "processing.guarantee = exactly_once_v2",
                                cfg->passthrough[i].name);
        if (strcmp(name, "isolation.level") == 0 &&
            strcmp(cfg->passthrough[i].value, "read_committed") != 0)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "kafka.%s: must be read_committed with processing.guarantee = "
                                "exactly_once_v2 (aborted input would be decided)",
                                cfg->passthrough[i].name);
    }
    return OW_OK;
}

/* librdkafka's transaction.timeout.ms when the configuration sets none. */
#define LIBRDKAFKA_TXN_TIMEOUT_MS 60000
/* What a commit takes besides the waits counted below, while the broker
 * answers: the flush of what is still in flight and the commit's own
 * requests, tens of milliseconds on a healthy cluster. */
#define TXN_COMMIT_ALLOWANCE_MS 1000

/* exactly_once_v2: the broker aborts a transaction that stays open longer
 * than the producer's transaction.timeout.ms and fences the producer, so
 * a transaction must be able to end within it. One stays open from its
 * first output until its commit ends: up to transaction.interval_ms until
 * the consumer thread commits, and longer when a revoke or a stop comes
 * first, since they wait for the lanes' work in flight before they commit
 * (rebalance.drain_timeout_ms, shutdown.timeout_ms), plus the commit
 * itself. The batch wait, lock waits (request.in_progress_wait_s) and the
 * database's retry backoff are not added: a lane decides outside the
 * transaction and publishes a batch only once it is decided, so they
 * delay which transaction carries a result, not how long one stays open;
 * only the drain and the stop wait for them, within their own bounds. A
 * configuration that cannot fit would see transactions aborted for their
 * timeout, and the worker fenced, again and again. */
static int check_transaction_timeout(const ow_config *cfg, ow_error *err)
{
    const char *key = "producer.transaction.timeout.ms";
    const char *value = NULL;
    int64_t timeout = LIBRDKAFKA_TXN_TIMEOUT_MS;
    int64_t wait = cfg->shutdown_timeout_ms;
    const char *wait_key = "shutdown.timeout_ms";
    int64_t need;

    if (!cfg->exactly_once)
        return OW_OK;
    /* The producer applies them in this order: the last one counts. */
    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        const char *n = cfg->passthrough[i].name;

        if (strcmp(n, "transaction.timeout.ms") == 0 ||
            strcmp(n, "producer.transaction.timeout.ms") == 0) {
            key = n;
            value = cfg->passthrough[i].value;
        }
    }
    /* A value that is no number is librdkafka's to refuse, by name. */
    if (value != NULL && ow_parse_int64(value, &timeout) != OW_OK)
        return OW_OK;
    if (cfg->rebalance_drain_timeout_ms > wait) {
        wait = cfg->rebalance_drain_timeout_ms;
        wait_key = "rebalance.drain_timeout_ms";
    }
    need = cfg->transaction_interval_ms + wait + TXN_COMMIT_ALLOWANCE_MS;
    if (timeout > need)
        return OW_OK;
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                        "kafka.%s: %lld ms%s cannot hold a transaction: transaction.interval_ms "
                        "%lld + %s %lld + %d for the commit = %lld ms; raise it or lower "
                        "transaction.interval_ms",
                        key, (long long)timeout, value == NULL ? " (librdkafka's default)" : "",
                        (long long)cfg->transaction_interval_ms, wait_key, (long long)wait,
                        TXN_COMMIT_ALLOWANCE_MS, (long long)need);
}

/* mysql.ssl_mode and the files it needs. */
static int check_mysql_tls(const ow_config *cfg, ow_error *err)
{
    static const char *const modes[] = {"disabled", "preferred", "required", "verify_ca",
                                        "verify_identity"};
    size_t m = 0;

    while (m < sizeof(modes) / sizeof(modes[0]) && strcmp(cfg->mysql_ssl_mode, modes[m]) != 0)
        m++;
    if (m == sizeof(modes) / sizeof(modes[0]))
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "mysql.ssl_mode: \"%s\" is not one of disabled, preferred, required, "
                            "verify_ca, verify_identity",
                            cfg->mysql_ssl_mode);
    if (m >= 3 && *cfg->mysql_ssl_ca == '\0' && *cfg->mysql_ssl_capath == '\0')
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "mysql.ssl_mode: %s needs mysql.ssl_ca or mysql.ssl_capath",
                            cfg->mysql_ssl_mode);
    if ((*cfg->mysql_ssl_cert == '\0') != (*cfg->mysql_ssl_key == '\0'))
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "mysql.ssl_cert: mysql.ssl_cert and mysql.ssl_key go together");
    return check_tls_versions(cfg->mysql_tls_version, err);
}

/* 1 when entries a and b share a node: the same host, port and database. */
static int share_node(const ow_shard_addr *a, const ow_shard_addr *b)
{
    char na[OW_NODE_NAME_MAX + 1], nb[OW_NODE_NAME_MAX + 1];

    if (a->port != b->port || strcmp(a->database, b->database) != 0)
        return 0;
    for (unsigned i = 0; ow_nodes_get(a->host, i, na, sizeof(na)) == OW_OK; i++)
        for (unsigned j = 0; ow_nodes_get(b->host, j, nb, sizeof(nb)) == OW_OK; j++)
            if (strcmp(na, nb) == 0)
                return 1;
    return 0;
}

/* Parses mysql.shards, fills each entry's defaults and refuses a database
 * listed in two entries: two shard indexes on one database would route two
 * users' buckets to one place under two recorded maps. */
static int load_shards(ow_config *cfg, ow_error *err)
{
    ow_shard_list *l = &cfg->shards;
    int rc = ow_shard_list_parse(cfg->mysql_shards, l, err);

    for (unsigned i = 0; rc == OW_OK && i < l->n; i++) {
        if (l->addr[i].port == 0)
            l->addr[i].port = (unsigned)cfg->mysql_port;
        if (l->addr[i].database[0] == '\0') {
            if (strlen(cfg->mysql_database) > OW_SHARD_DB_MAX)
                return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                    "mysql.database: longer than %d bytes", OW_SHARD_DB_MAX);
            memcpy(l->addr[i].database, cfg->mysql_database, strlen(cfg->mysql_database) + 1);
        }
        for (unsigned j = 0; j < i; j++) {
            if (share_node(&l->addr[i], &l->addr[j]))
                return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                    "mysql.shards: entry %u names the same database as entry %u", i,
                                    j);
        }
    }
    return rc;
}

/* mysql.host: one node, or the nodes of one cluster separated by commas. */
static int check_host(const ow_config *cfg, ow_error *err)
{
    char joined[OW_NODES_TEXT_MAX + 1];

    return ow_nodes_join(cfg->mysql_host, strlen(cfg->mysql_host), ',', "mysql.host", joined,
                         sizeof(joined), err);
}

/* Reads entry i of mysql.shard_password_files (path[0..n), "" = none). */
static int load_shard_password(ow_config *cfg, unsigned i, const char *path, size_t n,
                               ow_error *err)
{
    char file[4096];
    ow_buf text;
    int rc;

    if (n == 0)
        return OW_OK;
    if (n >= sizeof(file))
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "mysql.shard_password_files: entry %u: path too long", i);
    memcpy(file, path, n);
    file[n] = '\0';
    ow_buf_init(&text);
    rc = ow_read_file(file, 4096, &text, err);
    if (rc == OW_OK) {
        char *pw = text.data != NULL ? text.data : "";

        pw[strcspn(pw, "\r\n")] = '\0';
        if (ow_config_set_shard_password(cfg, i, pw) != OW_OK)
            rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    } else if (err != NULL) {
        char why[sizeof(err->msg)];

        memcpy(why, err->msg, sizeof(why));
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                          "mysql.shard_password_files: entry %u: %s", i, why);
    }
    if (text.data != NULL)
        memset(text.data, 0, text.len);
    ow_buf_cleanup(&text);
    return rc;
}

/* mysql.shard_password_files: one entry per shard. */
static int load_shard_passwords(ow_config *cfg, ow_error *err)
{
    const char *p = cfg->mysql_shard_password_files;
    unsigned i = 0;
    int rc = OW_OK;

    for (unsigned k = 0; k < OW_SHARD_MAX; k++)
        ow_config_set_shard_password(cfg, k, NULL);
    if (*p == '\0')
        return OW_OK;
    while (rc == OW_OK) {
        size_t n = strcspn(p, ",");

        while (n > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            n--;
        }
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (i < cfg->shards.n)
            rc = load_shard_password(cfg, i, p, n, err);
        i++;
        p += strcspn(p, ",");
        if (*p == '\0')
            break;
        p++;
    }
    if (rc == OW_OK && i != cfg->shards.n)
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                          "mysql.shard_password_files: %u entries for %u shards in mysql.shards", i,
                          cfg->shards.n);
    return rc;
}

int ow_config_finish(ow_config *cfg, ow_error *err)
{
    int rc;

    static const char *const required[] = {"kafka.bootstrap.servers",
                                           "kafka.group.id",
                                           "topic.input",
                                           "topic.results",
                                           "topic.dlq",
                                           "mysql.host",
                                           "mysql.user",
                                           "mysql.database"};

    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        const char *value = ow_config_string(cfg, required[i]);

        if (value == NULL || *value == '\0')
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: must not be empty",
                                required[i]);
    }
    if (strcmp(cfg->topic_input, cfg->topic_results) == 0 ||
        strcmp(cfg->topic_input, cfg->topic_dlq) == 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "topic.input: must differ from topic.results and topic.dlq");
    /* Results and dead-letter copies on one topic could not be told apart
     * by a consumer of either. */
    if (strcmp(cfg->topic_results, cfg->topic_dlq) == 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "topic.results: must differ from topic.dlq");
    if (!ow_config_address_ok(cfg->metrics_address))
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "metrics.address: \"%s\" is not an IPv4 or IPv6 address or localhost",
                            cfg->metrics_address);
    if (cfg->retry_backoff_max_ms < cfg->retry_backoff_ms)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "retry.backoff_max_ms: must be at least retry.backoff_ms");
    if (cfg->inflight_max_bytes < cfg->request_max_bytes)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "inflight.max_bytes: must be at least request.max_bytes");
    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        const char *full = cfg->passthrough[i].name;
        const char *n = kafka_name(full);

        if (ow_config_kafka_fixed(n))
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "kafka.%s: is fixed by order-worker's delivery guarantees", full);
        /* latest (and its other names) skips, without a word, what a
         * partition held before the group had an offset for it: a
         * partition added to the input, offsets the group let expire, and
         * after an offset the broker deleted, everything up to the end.
         * error stops such a partition for good, and the records the
         * broker deleted are gone either way: earliest goes on with what is
         * left and the worker reports the rest (input_skipped). */
        if (strcmp(n, "auto.offset.reset") == 0 &&
            strcmp(cfg->passthrough[i].value, "earliest") != 0 &&
            strcmp(cfg->passthrough[i].value, "smallest") != 0 &&
            strcmp(cfg->passthrough[i].value, "beginning") != 0)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "kafka.%s: \"%s\": order-worker reads a partition the group has "
                                "no offset for from its start (earliest): latest would skip its "
                                "messages without deciding them, error would stop it",
                                full, cfg->passthrough[i].value);
    }
    rc = check_guarantee(cfg, err);
    if (rc == OW_OK)
        rc = check_transaction_timeout(cfg, err);
    if (rc == OW_OK)
        rc = check_mysql_tls(cfg, err);
    if (rc == OW_OK)
        rc = check_host(cfg, err);
    if (rc == OW_OK)
        rc = load_shards(cfg, err);
    if (rc == OW_OK)
        rc = load_shard_passwords(cfg, err);
    if (rc != OW_OK)
        return rc;
    if (*cfg->mysql_password_file != '\0')
        return load_password_file(cfg, err);
    return OW_OK;
}
