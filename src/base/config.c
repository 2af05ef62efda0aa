#include "ow/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "config_rows.h"
#include "ow/nodes.h"
#include "ow/util.h"

#define ROW_OFF(field) offsetof(ow_config, field)

/* The one list of configuration keys. Order is the order of --help, of
 * `config --print` and of the README table. */
const config_row ow_config_rows[] = {
    {"kafka.bootstrap.servers", CT_STRING, 0, 0, "127.0.0.1:9092", 0,
     ROW_OFF(kafka_bootstrap_servers), "Kafka brokers, host:port[,host:port...]."},
    {"kafka.group.id", CT_STRING, 0, 0, "order-worker", 0, ROW_OFF(kafka_group_id),
     "Consumer group shared by every replica."},
    {"topic.input", CT_STRING, 0, 0, "order-batches", 0, ROW_OFF(topic_input),
     "Topic of order-batch requests."},
    {"topic.results", CT_STRING, 0, 0, "order-batch-results", 0, ROW_OFF(topic_results),
     "Topic the outcome of every request is published to."},
    {"topic.dlq", CT_STRING, 0, 0, "order-batches.dlq", 0, ROW_OFF(topic_dlq),
     "Dead-letter topic for the original bytes of invalid messages."},
    {"mysql.host", CT_STRING, 0, 0, "127.0.0.1", 0, ROW_OFF(mysql_host),
     "MySQL/MariaDB host name or address, or the nodes of one cluster (Galera) separated by "
     "commas, all on mysql.port: the worker and serve use one node at a time, the first that is "
     "ready in this order, and move on when it is lost or not ready (docs/operations.md, \"Node "
     "lists\"). localhost means the client library's Unix socket ($MYSQL_UNIX_PORT, else its "
     "default, /run/mysqld/mysqld.sock on Debian) and mysql.port is then not used; give "
     "127.0.0.1 for TCP."},
    {"mysql.port", CT_INT, 1, 65535, "3306", 0, ROW_OFF(mysql_port),
     "MySQL/MariaDB TCP port (not used with mysql.host = localhost)."},
    {"mysql.user", CT_STRING, 0, 0, "order_worker", 0, ROW_OFF(mysql_user),
     "Database user (needs SELECT, INSERT, UPDATE, DELETE: sql/worker_user.sql)."},
    {"mysql.password", CT_STRING, 0, 0, "", 1, ROW_OFF(mysql_password),
     "Database password. Prefer mysql.password_file or the environment."},
    {"mysql.password_file", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_password_file),
     "Path of a file holding the database password (one line)."},
    {"mysql.database", CT_STRING, 0, 0, "orders", 0, ROW_OFF(mysql_database),
     "Database (schema) holding the order-worker tables."},
    {"mysql.connect_timeout_s", CT_INT, 1, 300, "5", 0, ROW_OFF(mysql_connect_timeout_s),
     "Seconds to wait for a database connection and for each read or write."},
    /* TLS to the database: the option names and meanings of the
     * MySQL client's --ssl-* options. */
    {"mysql.ssl_mode", CT_STRING, 0, 0, "preferred", 0, ROW_OFF(mysql_ssl_mode),
     "TLS to the database: disabled, preferred (TLS if offered, unverified), required, "
     "verify_ca (and the chain must lead to mysql.ssl_ca) or verify_identity (and the "
     "certificate must name mysql.host)."},
    {"mysql.ssl_ca", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_ssl_ca),
     "PEM file of the CA certificates that may sign the server's certificate."},
    {"mysql.ssl_capath", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_ssl_capath),
     "Directory of hashed CA certificates (c_rehash), instead of or besides mysql.ssl_ca."},
    {"mysql.ssl_cert", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_ssl_cert),
     "PEM file of the client certificate (for users created REQUIRE X509)."},
    {"mysql.ssl_key", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_ssl_key),
     "PEM file of the client certificate's private key."},
    {"mysql.ssl_crl", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_ssl_crl),
     "PEM file of certificate revocation lists checked against the server's chain."},
    {"mysql.tls_version", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_tls_version),
     "Allowed TLS versions: a comma-separated list of TLSv1.0, TLSv1.1, TLSv1.2 and TLSv1.3, "
     "e.g. TLSv1.2,TLSv1.3 (empty: the library's default); any other entry is refused."},
    {"mysql.ssl_cipher", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_ssl_cipher),
     "Allowed TLS 1.2 cipher list in OpenSSL syntax (empty: the library's default)."},
    /* User sharding (docs/operations.md "Shards"). */
    {"mysql.shards", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_shards),
     "Comma-separated host[:port][/database] of each shard, in shard order (port and "
     "database default to mysql.port and mysql.database; credentials and TLS are the "
     "mysql.* keys); host may be the nodes of one cluster separated by | "
     "(10.0.0.1|10.0.0.2|10.0.0.3:3306/orders), used like a mysql.host list. Empty: one "
     "database, mysql.host. Never reorder the entries: run refuses a list that disagrees with "
     "the map migrate recorded (the nodes within an entry may be reordered)."},
    {"mysql.shard_password_files", CT_STRING, 0, 0, "", 0, ROW_OFF(mysql_shard_password_files),
     "Per-shard passwords: comma-separated files (one line each), in mysql.shards order; an "
     "empty entry uses mysql.password. Empty: every shard uses mysql.password."},
    {"mysql.shard_buckets", CT_INT, 1, 1048576, "4096", 0, ROW_OFF(mysql_shard_buckets),
     "Buckets users are hashed into (bucket = FNV-1a(user_id) mod this); chosen once, "
     "recorded on every shard by migrate."},
    {"request.max_bytes", CT_INT, 64, 16777216, "1048576", 0, ROW_OFF(request_max_bytes),
     "Largest accepted message value in bytes; larger ones are INVALID_REQUEST."},
    {"request.max_orders", CT_INT, 1, 10000, "1000", 0, ROW_OFF(request_max_orders),
     "Largest accepted number of orders in one batch. The worker refuses to start when the "
     "largest result this allows would not fit the producer's message.max.bytes."},
    {"request.in_progress_wait_s", CT_INT, 1, 3600, "5", 0, ROW_OFF(request_in_progress_wait_s),
     "Seconds to wait for a concurrent request with the same key before publishing "
     "REQUEST_IN_PROGRESS (the database lock wait timeout)."},
    {"worker.lanes", CT_INT, 1, 64, "4", 0, ROW_OFF(worker_lanes),
     "Lanes per database (per shard with mysql.shards), each with its own connection; every "
     "message of one user's key goes through the same lane."},
    {"batch.max_messages", CT_INT, 1, 1000, "256", 0, ROW_OFF(batch_max_messages),
     "Most messages decided in one database transaction (1 = one transaction per message); a "
     "lane takes what its queue holds up to this, so transactions this large come only from a "
     "backlog."},
    {"batch.max_wait_ms", CT_INT, 0, 1000, "2", 0, ROW_OFF(batch_max_wait_ms),
     "How long a lane waits to fill a micro-batch before it runs a smaller one."},
    /* A backlog beyond this waits in the prefetch queue, whose bytes are
     * bounded, rather than as parsed jobs, which cost more memory each
     * (docs/tuning.md, "Memory"). */
    {"inflight.max_messages", CT_INT, 1, 1000000, "4096", 0, ROW_OFF(inflight_max_messages),
     "Messages consumed but not yet acknowledged before partitions are paused."},
    /* It also sizes the prefetch queue, so with the retry cache it sets the
     * peak RSS at the defaults (docs/tuning.md, "Memory"). */
    {"inflight.max_bytes", CT_INT, 65536, 1073741824, "14680064", 0, ROW_OFF(inflight_max_bytes),
     "Bytes of messages in flight before partitions are paused (bounds memory)."},
    {"retry.backoff_ms", CT_INT, 1, 60000, "100", 0, ROW_OFF(retry_backoff_ms),
     "First delay after a transient failure; doubles per attempt, with jitter."},
    {"retry.backoff_max_ms", CT_INT, 1, 600000, "5000", 0, ROW_OFF(retry_backoff_max_ms),
     "Longest delay between retries of a transient failure."},
    {"commit.interval_ms", CT_INT, 100, 60000, "1000", 0, ROW_OFF(commit_interval_ms),
     "How often acknowledged offsets are committed to the group (at_least_once)."},
    {"processing.guarantee", CT_STRING, 0, 0, "at_least_once", 0, ROW_OFF(processing_guarantee),
     "at_least_once: a result may be published again after a crash or a rebalance, with the "
     "same bytes. exactly_once_v2: results, dead letters and input offsets are committed in "
     "one Kafka transaction, so a read_committed consumer sees each result once (needs "
     "worker.replica_id)."},
    {"worker.replica_id", CT_STRING, 0, 0, "", 0, ROW_OFF(worker_replica_id),
     "This replica's name, unique among the group's replicas and the same across its "
     "restarts (a host name, a StatefulSet ordinal): the Kafka transactional id is "
     "<kafka.group.id>-<worker.replica_id>, so a restarted replica fences its predecessor at "
     "once. Letters, digits, '.', '_' and '-', at most 64."},
    {"transaction.interval_ms", CT_INT, 10, 60000, "100", 0, ROW_OFF(transaction_interval_ms),
     "exactly_once_v2: how often the open transaction is committed; results become visible "
     "to read_committed consumers then. Plus the longer of shutdown.timeout_ms and "
     "rebalance.drain_timeout_ms and a second, it must be below the producer's "
     "transaction.timeout.ms (docs/operations.md, \"Exactly once\")."},
    {"rebalance.drain_timeout_ms", CT_INT, 0, 600000, "5000", 0,
     ROW_OFF(rebalance_drain_timeout_ms),
     "On revoke, how long to wait for in-flight messages of the revoked partitions."},
    {"shutdown.timeout_ms", CT_INT, 0, 600000, "10000", 0, ROW_OFF(shutdown_timeout_ms),
     "On SIGTERM/SIGINT/SIGHUP, the bound of the whole stop: in-flight work, result delivery, "
     "the final commit and leaving the group."},
    /* The retry cache's default keeps a retry storm within the 64 MiB
     * budget beside the prefetch queue; a larger cache took no more work
     * from the database (docs/tuning.md, "Memory"). */
    {"cache.max_bytes", CT_INT, 0, 1073741824, "1048576", 0, ROW_OFF(cache_max_bytes),
     "Bytes of recent outcomes (digest, status, stored response) kept per replica to answer "
     "retries without a database round trip, split among the lanes; 0 disables the cache."},
    {"cache.ttl_s", CT_INT, 1, OW_CACHE_TTL_MAX_S, "300", 0, ROW_OFF(cache_ttl_s),
     "Seconds a cached outcome may answer a retry. purge refuses an --older-than not longer "
     "than the workers' longest cache.ttl_s: 86400 unless its --workers-cache-ttl states it."},
    {"log.level", CT_LOGLEVEL, 0, 3, "info", 0, ROW_OFF(log_level),
     "Least severe level logged: error, warn, info or debug."},
    /* W3C Trace Context (docs/contract.md, "Trace context"). */
    {"tracing.start_traces", CT_BOOL, 0, 1, "false", 0, ROW_OFF(tracing_start_traces),
     "true: a message without a valid traceparent header starts a new trace, whose "
     "traceparent its result and dead letter carry (sampled). false: such outputs carry none; "
     "a valid traceparent is continued either way."},
    {"metrics.address", CT_STRING, 0, 0, "127.0.0.1", 0, ROW_OFF(metrics_address),
     "Address the /metrics, /healthz and /readyz HTTP endpoint binds to: an IPv4 or IPv6 "
     "literal, or localhost (127.0.0.1)."},
    {"metrics.port", CT_INT, 0, 65535, "0", 0, ROW_OFF(metrics_port),
     "Port of the HTTP endpoint; 0 disables it."},
    /* The result query service, `order-worker serve`. */
    {"api.address", CT_STRING, 0, 0, "127.0.0.1", 0, ROW_OFF(api_address),
     "Address the query service (serve) binds to; loopback unless a proxy needs more."},
    {"api.port", CT_INT, 1, 65535, "8480", 0, ROW_OFF(api_port), "Port of the query service."},
    {"api.token_file", CT_STRING, 0, 0, "", 0, ROW_OFF(api_token_file),
     "File holding the bearer token clients of the query service must send (one line; "
     "required by serve)."},
    {"api.threads", CT_INT, 1, 64, "4", 0, ROW_OFF(api_threads),
     "Serving threads of the query service, and per shard as many database connections, each "
     "with a thread of its own."},
    {"api.max_connections", CT_INT, 1, 10000, "512", 0, ROW_OFF(api_max_connections),
     "Most simultaneous client connections of the query service; more wait to be "
     "accepted."},
    {"api.max_connections_per_address", CT_INT, 0, 10000, "64", 0,
     ROW_OFF(api_max_connections_per_address),
     "Most simultaneous query-service connections from one client address (a trusted "
     "proxy's are not counted); more are closed at once. 0 = no limit."},
    {"api.request_timeout_s", CT_INT, 1, 300, "10", 0, ROW_OFF(api_request_timeout_s),
     "Seconds a query-service client has to send a whole request, counted from the "
     "connection's start or its previous response, and that a connection may stay idle; "
     "then it is closed."},
    {"api.lookup_timeout_ms", CT_INT, 100, 60000, "2000", 0, ROW_OFF(api_lookup_timeout_ms),
     "Milliseconds within which a lookup is answered: when the database does not answer, or "
     "every connection to the user's shard is busy, it gets 503 with Retry-After. The "
     "service's database reads and writes give up after as long, rounded up to seconds."},
    {"api.rate_limit", CT_INT, 0, 1000000, "100", 0, ROW_OFF(api_rate_limit),
     "Requests per second one client address may make to the query service (bursts of "
     "as many); more get 429. 0 = no limit."},
    {"api.trusted_proxies", CT_STRING, 0, 0, "", 0, ROW_OFF(api_trusted_proxies),
     "Comma-separated IP addresses of proxies in front of the query service. For a request "
     "from one of them the client address (for api.rate_limit) is the right-most "
     "X-Forwarded-For entry that is not itself one of them. Empty: X-Forwarded-For is "
     "ignored."},
};

#define N_ROWS (sizeof(ow_config_rows) / sizeof(ow_config_rows[0]))
const size_t ow_config_n_rows = N_ROWS;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *ow_log_level_name(int64_t level)
{
    if (level < 0 || level > OW_LOG_DEBUG)
        return "?";
    return level_names[level];
}

const char *ow_config_source_name(ow_config_source src)
{
    static const char *const names[] = {
        [OW_SRC_DEFAULT] = "default", [OW_SRC_FILE] = "file", [OW_SRC_ENV] = "environment"};

    return (unsigned)src < sizeof(names) / sizeof(names[0]) ? names[src] : "?";
}

static const config_row *find_row(const char *key, size_t *index)
{
    for (size_t i = 0; i < N_ROWS; i++) {
        if (strcmp(ow_config_rows[i].name, key) == 0) {
            *index = i;
            return &ow_config_rows[i];
        }
    }
    return NULL;
}

static int set_source(ow_config *cfg, size_t i, ow_config_source src, const char *where)
{
    char *copy = NULL;

    if (where != NULL) {
        copy = strdup(where);
        if (copy == NULL)
            return OW_ENOMEM;
    }
    free(cfg->source_where[i]);
    cfg->source_where[i] = copy;
    cfg->sources[i] = src;
    return OW_OK;
}

static int parse_row_value(ow_config *cfg, const config_row *row, const char *value,
                           const char *where, ow_error *err)
{
    int64_t v = 0;

    switch (row->type) {
    case CT_STRING: {
        char *copy = strdup(value);

        if (copy == NULL)
            return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
        free(*ow_config_str_field(cfg, row));
        *ow_config_str_field(cfg, row) = copy;
        return OW_OK;
    }
    case CT_LOGLEVEL:
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
            if (strcmp(value, level_names[i]) == 0) {
                *ow_config_int_field(cfg, row) = (int64_t)i;
                return OW_OK;
            }
        }
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "%s: %s: must be one of error, warn, info, debug", where, row->name);
    case CT_BOOL:
        if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "%s: %s: \"%s\" is not true or false", where, row->name, value);
        *ow_config_int_field(cfg, row) = value[0] == 't';
        return OW_OK;
    case CT_INT:
        if (ow_parse_int64(value, &v) != OW_OK)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "%s: %s: \"%s\" is not an integer", where, row->name, value);
        if (v < row->min || v > row->max)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "%s: %s: %lld is out of range [%lld, %lld]", where, row->name,
                                (long long)v, (long long)row->min, (long long)row->max);
        *ow_config_int_field(cfg, row) = v;
        return OW_OK;
    }
    return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%s: %s: unknown type", where, row->name);
}

static int set_passthrough(ow_config *cfg, const char *name, const char *value,
                           ow_config_source src, const char *where, ow_error *err)
{
    ow_config_kv *kv = NULL;

    if (*name == '\0')
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "%s: kafka.: a librdkafka property name must follow \"kafka.\"", where);
    /* The consumer's group is kafka.group.id; a passed-through one would be
     * overridden by it without a word. */
    if (strcmp(name, "consumer.group.id") == 0 || strcmp(name, "producer.group.id") == 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "%s: kafka.%s: not used; set kafka.group.id instead", where, name);
    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        if (strcmp(cfg->passthrough[i].name, name) == 0)
            kv = &cfg->passthrough[i];
    }
    if (kv == NULL) {
        if (cfg->n_passthrough == OW_CONFIG_MAX_PASSTHROUGH)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "%s: kafka.%s: more than %d kafka.* properties", where, name,
                                OW_CONFIG_MAX_PASSTHROUGH);
        kv = &cfg->passthrough[cfg->n_passthrough];
        kv->name = strdup(name);
        kv->value = NULL;
        kv->where = NULL;
        if (kv->name == NULL)
            return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
        cfg->n_passthrough++;
    }
    free(kv->value);
    free(kv->where);
    kv->value = strdup(value);
    kv->where = strdup(where);
    kv->source = src;
    if (kv->value == NULL || kv->where == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    return OW_OK;
}

int ow_config_set(ow_config *cfg, const char *key, const char *value, ow_config_source src,
                  const char *where, ow_error *err)
{
    size_t index = 0;
    const config_row *row = find_row(key, &index);
    int rc;

    if (row == NULL) {
        if (strncmp(key, "kafka.", 6) == 0)
            return set_passthrough(cfg, key + 6, value, src, where, err);
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: %s: unknown key", where, key);
    }
    rc = parse_row_value(cfg, row, value, where, err);
    if (rc != OW_OK)
        return rc;
    if (set_source(cfg, index, src, where) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    return OW_OK;
}

const char *ow_config_string(const ow_config *cfg, const char *key)
{
    size_t index = 0;
    const config_row *row = find_row(key, &index);

    if (row == NULL || row->type != CT_STRING)
        return NULL;
    return *ow_config_str_field((ow_config *)cfg, row);
}

ow_config_source ow_config_source_of(const ow_config *cfg, const char *key)
{
    size_t index = 0;

    if (find_row(key, &index) == NULL)
        return OW_SRC_DEFAULT;
    return cfg->sources[index];
}

int ow_config_set_shard_password(ow_config *cfg, unsigned shard, const char *password)
{
    char *copy = NULL;

    if (shard >= OW_SHARD_MAX)
        return OW_EINVAL;
    if (password != NULL && (copy = strdup(password)) == NULL)
        return OW_ENOMEM;
    if (cfg->shard_passwords[shard] != NULL)
        memset(cfg->shard_passwords[shard], 0, strlen(cfg->shard_passwords[shard]));
    free(cfg->shard_passwords[shard]);
    cfg->shard_passwords[shard] = copy;
    return OW_OK;
}

int ow_config_init(ow_config *cfg, ow_error *err)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->sources = calloc(N_ROWS, sizeof(*cfg->sources));
    cfg->source_where = calloc(N_ROWS, sizeof(*cfg->source_where));
    if (cfg->sources == NULL || cfg->source_where == NULL) {
        ow_config_cleanup(cfg);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    }
    for (size_t i = 0; i < N_ROWS; i++) {
        int rc = parse_row_value(cfg, &ow_config_rows[i], ow_config_rows[i].def, "default", err);

        if (rc != OW_OK) {
            ow_config_cleanup(cfg);
            return rc;
        }
    }
    return OW_OK;
}

void ow_config_cleanup(ow_config *cfg)
{
    if (cfg->sources != NULL) {
        for (size_t i = 0; i < N_ROWS; i++) {
            if (ow_config_rows[i].type == CT_STRING)
                free(*ow_config_str_field(cfg, &ow_config_rows[i]));
            free(cfg->source_where[i]);
        }
    }
    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        free(cfg->passthrough[i].name);
        free(cfg->passthrough[i].value);
        free(cfg->passthrough[i].where);
    }
    for (unsigned i = 0; i < OW_SHARD_MAX; i++)
        ow_config_set_shard_password(cfg, i, NULL);
    free(cfg->sources);
    free(cfg->source_where);
    memset(cfg, 0, sizeof(*cfg));
}

static char *trim(char *s)
{
    char *end;

    while (*s == ' ' || *s == '\t')
        s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        end--;
    *end = '\0';
    return s;
}

/* The line of one file that set each key, 0 for none: a key given twice
 * in a file would lose one of its values without a word. Another file or
 * the environment overriding it is the documented order of sources. */
typedef struct {
    unsigned row[N_ROWS];
    unsigned kv[OW_CONFIG_MAX_PASSTHROUGH];
} file_lines;

static unsigned *line_of(const ow_config *cfg, file_lines *fl, const char *key)
{
    size_t i = 0;

    if (find_row(key, &i) != NULL)
        return &fl->row[i];
    for (i = 0; strncmp(key, "kafka.", 6) == 0 && i < cfg->n_passthrough; i++) {
        if (strcmp(cfg->passthrough[i].name, key + 6) == 0)
            return &fl->kv[i];
    }
    return NULL;
}

static int load_line(ow_config *cfg, char *line, const char *origin, unsigned lineno,
                     file_lines *fl, ow_error *err)
{
    char where[300];
    char *eq;
    char *key;
    char *value;
    unsigned *first;
    int rc;

    snprintf(where, sizeof(where), "%s:%u", origin, lineno);
    line = trim(line);
    if (*line == '\0' || *line == '#')
        return OW_OK;
    eq = strchr(line, '=');
    if (eq == NULL)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "%s: expected key = value, found no '='", where);
    *eq = '\0';
    key = trim(line);
    value = trim(eq + 1);
    if (*key == '\0')
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: empty key before '='", where);
    first = line_of(cfg, fl, key);
    if (first != NULL && *first != 0)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "%s: %s: given more than once (first at %s:%u)", where, key, origin,
                            *first);
    rc = ow_config_set(cfg, key, value, OW_SRC_FILE, where, err);
    first = line_of(cfg, fl, key); /* a kafka.* key has a slot once it is set */
    if (rc == OW_OK && first != NULL)
        *first = lineno;
    return rc;
}

int ow_config_load_string(ow_config *cfg, const char *text, const char *origin, ow_error *err)
{
    unsigned lineno = 0;
    const char *p = text;
    file_lines fl;

    memset(&fl, 0, sizeof(fl));
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
        char line[4096];
        int rc;

        lineno++;
        if (n >= sizeof(line))
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "%s:%u: line longer than %zu bytes", origin, lineno,
                                sizeof(line) - 1);
        memcpy(line, p, n);
        line[n] = '\0';
        rc = load_line(cfg, line, origin, lineno, &fl, err);
        if (rc != OW_OK)
            return rc;
        p += n;
        if (*p == '\n')
            p++;
    }
    return OW_OK;
}

int ow_config_load_file(ow_config *cfg, const char *path, ow_error *err)
{
    ow_buf text;
    int rc;

    ow_buf_init(&text);
    rc = ow_read_file(path, 1 << 20, &text, err);
    if (rc == OW_OK) {
        if (memchr(text.data != NULL ? text.data : "", '\0', text.len) != NULL)
            rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: contains a NUL byte", path);
        else
            rc = ow_config_load_string(cfg, text.data != NULL ? text.data : "", path, err);
    }
    ow_buf_cleanup(&text);
    return rc;
}

void ow_config_env_name(const char *key, char *out, size_t outsz)
{
    size_t n = strlen(OW_CONFIG_ENV_PREFIX);
    size_t i = 0;

    memcpy(out, OW_CONFIG_ENV_PREFIX, n);
    for (; key[i] != '\0' && n + i + 1 < outsz; i++) {
        unsigned char c = (unsigned char)key[i];

        out[n + i] = c == '.' ? '_' : (char)toupper(c);
    }
    out[n + i] = '\0';
}

static int load_env_var(ow_config *cfg, const char *name, size_t name_len, const char *value,
                        ow_error *err)
{
    char env[128];
    char where[160];

    snprintf(where, sizeof(where), "environment %.*s", (int)name_len, name);
    for (size_t i = 0; i < N_ROWS; i++) {
        ow_config_env_name(ow_config_rows[i].name, env, sizeof(env));
        if (strlen(env) == name_len && memcmp(env, name, name_len) == 0)
            return ow_config_set(cfg, ow_config_rows[i].name, value, OW_SRC_ENV, where, err);
    }
    /* ORDER_WORKER_KAFKA_SOCKET_TIMEOUT_MS -> kafka.socket.timeout.ms: librdkafka
     * property names use '.' and never '_'. */
    if (name_len > strlen(OW_CONFIG_ENV_PREFIX "KAFKA_") &&
        strncmp(name, OW_CONFIG_ENV_PREFIX "KAFKA_", strlen(OW_CONFIG_ENV_PREFIX "KAFKA_")) == 0) {
        size_t skip = strlen(OW_CONFIG_ENV_PREFIX);
        char key[128];
        size_t k = 0;

        for (size_t i = skip; i < name_len && k + 1 < sizeof(key); i++, k++)
            key[k] = name[i] == '_' ? '.' : (char)tolower((unsigned char)name[i]);
        key[k] = '\0';
        return ow_config_set(cfg, key, value, OW_SRC_ENV, where, err);
    }
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: unknown key", where);
}

int ow_config_load_env(ow_config *cfg, char *const *envp, ow_error *err)
{
    size_t plen = strlen(OW_CONFIG_ENV_PREFIX);

    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        const char *e = envp[i];
        const char *eq = strchr(e, '=');
        int rc;

        if (eq == NULL || strncmp(e, OW_CONFIG_ENV_PREFIX, plen) != 0)
            continue;
        rc = load_env_var(cfg, e, (size_t)(eq - e), eq + 1, err);
        if (rc != OW_OK)
            return rc;
    }
    return OW_OK;
}

int ow_config_is_secret_kafka(const char *name)
{
    return strstr(name, "password") != NULL || strstr(name, "secret") != NULL ||
           strstr(name, ".pem") != NULL || strstr(name, "oauthbearer.config") != NULL;
}
