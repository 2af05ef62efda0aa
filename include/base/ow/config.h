/*
 * Configuration: one table describes every key (type, bounds, default,
 * secret flag, description and the field it fills). The same table drives
 * parsing, validation, environment overrides, --help, `config --print` and
 * the configuration section of the README.
 *
 * Sources, later ones winning: the table default, the file, the environment
 * (ORDER_WORKER_ + key in upper case with '.' as '_'). Keys that start with
 * "kafka." and are not in the table pass through to librdkafka unchanged.
 */
#ifndef OW_CONFIG_H
#define OW_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ow/error.h"
#include "ow/shard.h"

#define OW_CONFIG_ENV_PREFIX "ORDER_WORKER_"
#define OW_CONFIG_MAX_PASSTHROUGH 64
/* The largest cache.ttl_s: purge assumes the workers may use it. */
#define OW_CACHE_TTL_MAX_S 86400

typedef enum { OW_LOG_ERROR = 0, OW_LOG_WARN, OW_LOG_INFO, OW_LOG_DEBUG } ow_log_level;

typedef enum { OW_SRC_DEFAULT = 0, OW_SRC_FILE, OW_SRC_ENV } ow_config_source;

typedef struct {
    char *name; /* librdkafka property name, without the "kafka." prefix */
    char *value;
    ow_config_source source;
    char *where; /* "file:line" or "environment NAME" of the setting */
} ow_config_kv;

typedef struct ow_config {
    /* Kafka */
    char *kafka_bootstrap_servers;
    char *kafka_group_id;
    char *topic_input;
    char *topic_results;
    char *topic_dlq;
    /* MySQL */
    char *mysql_host;
    int64_t mysql_port;
    char *mysql_user;
    char *mysql_password;
    char *mysql_password_file;
    char *mysql_database;
    int64_t mysql_connect_timeout_s;
    char *mysql_ssl_mode; /* disabled|preferred|required|verify_ca|verify_identity */
    char *mysql_ssl_ca;
    char *mysql_ssl_capath;
    char *mysql_ssl_cert;
    char *mysql_ssl_key;
    char *mysql_ssl_crl;
    char *mysql_tls_version;
    char *mysql_ssl_cipher;
    char *mysql_shards;               /* host[:port][/database],... ("" = one database) */
    int64_t mysql_shard_buckets;      /* B of bucket = hash(user_id) mod B */
    char *mysql_shard_password_files; /* one path per shard, "" = mysql.password */
    /* Requests */
    int64_t request_max_bytes;
    int64_t request_max_orders;
    int64_t request_in_progress_wait_s;
    /* Engine */
    int64_t worker_lanes;
    int64_t batch_max_messages;
    int64_t batch_max_wait_ms;
    int64_t inflight_max_messages;
    int64_t inflight_max_bytes;
    int64_t retry_backoff_ms;
    int64_t retry_backoff_max_ms;
    int64_t commit_interval_ms;
    char *processing_guarantee; /* at_least_once | exactly_once_v2 */
    char *worker_replica_id;
    int64_t transaction_interval_ms;
    int64_t rebalance_drain_timeout_ms;
    int64_t shutdown_timeout_ms;
    int64_t cache_max_bytes;
    int64_t cache_ttl_s; /* 1..OW_CACHE_TTL_MAX_S */
    /* Operations */
    int64_t log_level;
    int64_t tracing_start_traces; /* 0 or 1 */
    char *metrics_address;
    int64_t metrics_port;
    /* Query service (serve) */
    char *api_address;
    int64_t api_port;
    char *api_token_file;
    int64_t api_threads;
    int64_t api_max_connections;
    int64_t api_max_connections_per_address;
    int64_t api_request_timeout_s;
    int64_t api_lookup_timeout_ms;
    int64_t api_rate_limit;
    char *api_trusted_proxies;

    /* processing.guarantee is exactly_once_v2 (set by ow_config_finish). */
    int exactly_once;
    /* mysql.shards parsed by ow_config_finish, each entry's port and
     * database filled from mysql.port and mysql.database when absent. */
    ow_shard_list shards;
    /* Shard i's password read from mysql.shard_password_files, or NULL for
     * mysql.password. */
    char *shard_passwords[OW_SHARD_MAX];

    /* kafka.* keys that are not in the table, in the order first seen. */
    ow_config_kv passthrough[OW_CONFIG_MAX_PASSTHROUGH];
    size_t n_passthrough;

    /* Where each table row got its value (indexed like the table). */
    ow_config_source *sources;
    char **source_where; /* "file:line" for OW_SRC_FILE, env name for OW_SRC_ENV, else NULL */
} ow_config;

/* Sets every key to its default. */
int ow_config_init(ow_config *cfg, ow_error *err);
void ow_config_cleanup(ow_config *cfg);

/* Reads a key=value file ('#' comments, blank lines). Errors say "file:line: key: reason";
 * a key given twice in the file is refused, naming both lines. */
int ow_config_load_file(ow_config *cfg, const char *path, ow_error *err);
/* Parses the same syntax from memory; origin names it in error messages. */
int ow_config_load_string(ow_config *cfg, const char *text, const char *origin, ow_error *err);
/* Applies ORDER_WORKER_* variables from envp (NULL-terminated "NAME=value" strings). */
int ow_config_load_env(ow_config *cfg, char *const *envp, ow_error *err);
/* Cross-key checks and the password file; call once after the loads. */
int ow_config_finish(ow_config *cfg, ow_error *err);
/* The value of string key key, or NULL for a key of another type or none. */
const char *ow_config_string(const ow_config *cfg, const char *key);
/* Where key's value came from (OW_SRC_DEFAULT for an unknown key). */
ow_config_source ow_config_source_of(const ow_config *cfg, const char *key);
/* Keeps a copy of shard's password (NULL: none), wiping the one it had. */
int ow_config_set_shard_password(ow_config *cfg, unsigned shard, const char *password);

/* Sets one key as if it came from src; where names the origin for errors. */
int ow_config_set(ow_config *cfg, const char *key, const char *value, ow_config_source src,
                  const char *where, ow_error *err);

/* The effective configuration, secrets redacted, with the source of each value. */
void ow_config_print(const ow_config *cfg, FILE *out);
/* The table as a Markdown table (for the README) or as --help text. */
void ow_config_print_reference(FILE *out, int markdown);

/* 1 for a librdkafka property that holds a secret (a password, a secret,
 * inline key material such as ssl.key.pem): redacted by config --print and
 * kept out of error messages and logs. */
int ow_config_is_secret_kafka(const char *name);
/* 1 for a librdkafka property (without its consumer./producer. prefix)
 * that order-worker sets itself for its delivery guarantees: a kafka.* key
 * naming it is refused, and the clients' settings table sets it whatever
 * the configuration holds. */
int ow_config_kafka_fixed(const char *name);

const char *ow_config_source_name(ow_config_source src);
/* 1 when address is an IPv4 or IPv6 literal or "localhost" (metrics.address). */
int ow_config_address_ok(const char *address);
const char *ow_log_level_name(int64_t level);

#endif
