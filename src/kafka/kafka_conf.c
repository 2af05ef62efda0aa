/* The clients' settings (ow/kafka_conf.h): the table of what
 * order-worker sets per role and processing guarantee, and the kafka.*
 * keys passed through. */
#include "ow/kafka_conf.h"

#include <stdio.h>
#include <string.h>

#include "ow/log.h"

/* Sets name on conf; a refusal names the key as shown (the kafka.* key the
 * configuration wrote), after where when given. librdkafka's reason may
 * quote the value: not for a secret. */
static int conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, const char *where,
                    const char *shown, ow_error *err)
{
    char errstr[512];

    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK)
        return OW_OK;
    if (ow_config_is_secret_kafka(name))
        snprintf(errstr, sizeof(errstr), "librdkafka refused the value (not shown: a secret)");
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s%skafka.%s: %s",
                        where != NULL ? where : "", where != NULL ? ": " : "", shown, errstr);
}

int ow_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, ow_error *err)
{
    return conf_set(conf, name, value, NULL, name, err);
}

int ow_kafka_check_config(const ow_config *cfg, ow_error *err)
{
    rd_kafka_conf_t *scratch = rd_kafka_conf_new();
    int rc = OW_OK;

    for (size_t i = 0; rc == OW_OK && i < cfg->n_passthrough; i++) {
        const ow_config_kv *kv = &cfg->passthrough[i];
        const char *name = kv->name;

        if (strncmp(name, "consumer.", 9) == 0 || strncmp(name, "producer.", 9) == 0)
            name += 9;
        rc = conf_set(scratch, name, kv->value, kv->where != NULL ? kv->where : "configuration",
                      kv->name, err);
    }
    rd_kafka_conf_destroy(scratch);
    return rc;
}

/* Whether the configuration sets name for this role (plainly or with the
 * role's prefix). */
static int has_passthrough(const ow_config *cfg, ow_kafka_role role, const char *name)
{
    const char *prefix = role == OW_KAFKA_CONSUMER ? "consumer." : "producer.";
    size_t plen = strlen(prefix);

    for (size_t i = 0; i < cfg->n_passthrough; i++) {
        const char *n = cfg->passthrough[i].name;

        if (strcmp(n, name) == 0 || (strncmp(n, prefix, plen) == 0 && strcmp(n + plen, name) == 0))
            return 1;
    }
    return 0;
}

/* The clients' settings. Those ow_config_kafka_fixed names are part of
 * order-worker's delivery guarantees (the configuration may not set them,
 * ow_config_finish refuses them); the others are defaults that kafka.*
 * keys override. */
typedef struct {
    ow_kafka_role role;
    unsigned modes; /* the processing guarantees it applies to */
    const char *name;
    const char *value; /* NULL: from the configuration (setting_value) */
} kafka_setting;

#define ALO 1u /* at_least_once */
#define EOS 2u /* exactly_once_v2 */
#define ALL (ALO | EOS)

static const kafka_setting kafka_settings[] = {
    {OW_KAFKA_CONSUMER, ALL, "partition.assignment.strategy", "cooperative-sticky"},
    /* A partition the group has no offset for is read from its start, and
     * so is one whose offset the broker deleted: the worker reports that
     * (config_check.c refuses latest and error). */
    {OW_KAFKA_CONSUMER, ALL, "auto.offset.reset", "earliest"},
    /* The end of a partition tells the ledger that the transaction markers
     * and aborted records behind its last message will never be delivered,
     * so that its offset passes them (ow_ledger_reached_end). */
    {OW_KAFKA_CONSUMER, ALL, "enable.partition.eof", "true"},
    /* Partitions added to the input are consumed once the group sees them
     * in a metadata refresh; librdkafka's default waits up to 5 minutes.
     * The request names only the subscribed topic. */
    {OW_KAFKA_CONSUMER, ALL, "topic.metadata.refresh.interval.ms", "10000"},
    /* The local prefetch queue counts against memory too: it gets the
     * in-flight byte budget. librdkafka 2.0 stops fetching for a fixed
     * second once the queue is over it (fetch.queue.backoff.ms came in 2.2),
     * so the queue must hold a second of the fastest consumption, or a
     * worker replaying a backlog sits idle for most of every second. */
    {OW_KAFKA_CONSUMER, ALL, "queued.max.messages.kbytes", NULL},
    /* Fewer, fuller fetches under load, and a resumed partition's fetcher
     * comes back within 10 ms instead of librdkafka's 500 ms long poll. A
     * fetch rarely reaches fetch.min.bytes at production rates, so this wait
     * is part of every batch's latency (docs/tuning.md, "Knobs"). */
    {OW_KAFKA_CONSUMER, ALL, "fetch.wait.max.ms", "10"},
    {OW_KAFKA_CONSUMER, ALL, "fetch.min.bytes", "65536"},
    /* Small responses, so that the queue overshoots its bound by little:
     * librdkafka's 1 MiB per partition allows up to 6 MiB per response over
     * the budget. fetch.max.bytes may not be below message.max.bytes
     * (1,000,000); one larger message is still fetched (librdkafka raises
     * the partition size for it). */
    {OW_KAFKA_CONSUMER, ALL, "fetch.max.bytes", "1048576"},
    {OW_KAFKA_CONSUMER, ALL, "max.partition.fetch.bytes", "262144"},
    /* An offset is stored only once every output of its message and of the
     * messages before it was acknowledged (the ledger). */
    {OW_KAFKA_CONSUMER, ALL, "enable.auto.offset.store", "false"},
    {OW_KAFKA_CONSUMER, ALO, "enable.auto.commit", "true"},
    {OW_KAFKA_CONSUMER, ALO, "auto.commit.interval.ms", NULL},
    /* Offsets go into the producer's transaction instead. */
    {OW_KAFKA_CONSUMER, EOS, "enable.auto.commit", "false"},
    {OW_KAFKA_PRODUCER, ALL, "enable.idempotence", "true"},
    {OW_KAFKA_PRODUCER, ALL, "acks", "all"},
    /* Results are never given up on: a result that cannot be delivered
     * blocks its offset, so the producer keeps retrying while the broker is
     * away (0 = no local timeout), and memory is bounded by backpressure. */
    {OW_KAFKA_PRODUCER, ALO, "message.timeout.ms", "0"},
    /* One id per replica, the same after a restart: the new producer's
     * init_transactions fences the old one and aborts its open transaction
     * at once, instead of leaving it to transaction.timeout.ms. With a
     * transaction, librdkafka bounds message.timeout.ms by its timeout. */
    {OW_KAFKA_PRODUCER, EOS, "transactional.id", NULL},
    /* librdkafka 2.0.2's broker thread polls without waiting while a
     * partition's lingered results wait behind its one request in flight
     * (the idempotence window counts messages, not requests). A longer
     * linger spends less of that CPU but adds its wait to every result's
     * latency, so latency decides (docs/tuning.md, "Knobs"). */
    {OW_KAFKA_PRODUCER, ALL, "linger.ms", "10"},
    {OW_KAFKA_PRODUCER, ALL, "queue.buffering.max.kbytes", "32768"},
    /* Results are JSON that repeats its field names in every order: lz4
     * makes them smaller for less CPU in the worker and the broker than
     * sending them whole (docs/tuning.md, "Knobs"). The Java client and
     * librdkafka's read lz4 as they are; a consumer without the codec needs
     * kafka.producer.compression.type = none (docs/contract.md). */
    {OW_KAFKA_PRODUCER, ALL, "compression.type", "lz4"},
};

/* The value of a setting that comes from the configuration. */
static const char *setting_value(const kafka_setting *k, const ow_config *cfg, char *buf,
                                 size_t size)
{
    if (k->value != NULL)
        return k->value;
    if (strcmp(k->name, "queued.max.messages.kbytes") == 0)
        snprintf(buf, size, "%lld", (long long)(cfg->inflight_max_bytes / 1024));
    else if (strcmp(k->name, "transactional.id") == 0)
        snprintf(buf, size, "%s-%s", cfg->kafka_group_id, cfg->worker_replica_id);
    else
        snprintf(buf, size, "%lld", (long long)cfg->commit_interval_ms);
    return buf;
}

static int role_settings(rd_kafka_conf_t *conf, const ow_config *cfg, ow_kafka_role role,
                         ow_error *err)
{
    int rc = OW_OK;

    for (size_t i = 0; rc == OW_OK && i < sizeof(kafka_settings) / sizeof(kafka_settings[0]); i++) {
        const kafka_setting *k = &kafka_settings[i];
        char buf[512];

        if (k->role != role || !(k->modes & (cfg->exactly_once ? EOS : ALO)) ||
            (!ow_config_kafka_fixed(k->name) && has_passthrough(cfg, role, k->name)))
            continue;
        rc = ow_kafka_conf_set(conf, k->name, setting_value(k, cfg, buf, sizeof(buf)), err);
    }
    return rc;
}

rd_kafka_conf_t *ow_kafka_conf_new(const ow_config *cfg, ow_kafka_role role, ow_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc = ow_kafka_conf_set(conf, "bootstrap.servers", cfg->kafka_bootstrap_servers, err);

    if (rc == OW_OK)
        rc = ow_kafka_conf_set(
            conf, "client.id",
            role == OW_KAFKA_CONSUMER ? "order-worker-consumer" : "order-worker-producer", err);
    for (size_t i = 0; rc == OW_OK && i < cfg->n_passthrough; i++) {
        const char *name = cfg->passthrough[i].name;
        const char *mine = role == OW_KAFKA_CONSUMER ? "consumer." : "producer.";
        const char *other = role == OW_KAFKA_CONSUMER ? "producer." : "consumer.";

        /* kafka.consumer.<p> and kafka.producer.<p> reach one client only. */
        if (strncmp(name, other, strlen(other)) == 0)
            continue;
        if (strncmp(name, mine, strlen(mine)) == 0)
            name += strlen(mine);
        rc = ow_kafka_conf_set(conf, name, cfg->passthrough[i].value, err);
    }
    if (rc == OW_OK && role == OW_KAFKA_CONSUMER)
        rc = ow_kafka_conf_set(conf, "group.id", cfg->kafka_group_id, err);
    if (rc == OW_OK)
        rc = role_settings(conf, cfg, role, err);
    if (rc != OW_OK) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, ow_log_rdkafka);
    return conf;
}
