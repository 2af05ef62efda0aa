/* Starting the worker: the databases first, then the Kafka clients, the
 * lanes, the delivery poller, the output checks and the subscription
 * (worker_parts.h). */
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "ow/kafka.h"
#include "ow/kafka_conf.h"
#include "ow/log.h"
#include "ow/shard.h"
#include "worker_parts.h"

/* --- Lifecycle ----------------------------------------------------------- */

/* A client of the role's kind with the worker's callbacks; *out owns the
 * configuration from then on. */
static int new_client(ow_worker *w, ow_kafka_role role, rd_kafka_t **out, ow_error *err)
{
    int producer = role == OW_KAFKA_PRODUCER;
    rd_kafka_conf_t *conf = ow_kafka_conf_new(w->cfg, role, err);
    char errstr[512];

    if (conf == NULL)
        return OW_EINVAL;
    rd_kafka_conf_set_opaque(conf, w);
    rd_kafka_conf_set_error_cb(conf, ow_worker_on_error);
    if (producer) {
        rd_kafka_conf_set_dr_msg_cb(conf, ow_worker_on_delivery);
    } else {
        rd_kafka_conf_set_rebalance_cb(conf, ow_worker_on_rebalance);
        rd_kafka_conf_set_offset_commit_cb(conf, ow_worker_on_periodic_commit);
    }
    *out = rd_kafka_new(producer ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER, conf, errstr,
                        sizeof(errstr));
    if (*out == NULL) {
        rd_kafka_conf_destroy(conf);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%s: %s", producer ? "producer" : "consumer",
                            errstr);
    }
    return OW_OK;
}

static int create_clients(ow_worker *w, ow_error *err)
{
    int rc = new_client(w, OW_KAFKA_PRODUCER, &w->producer, err);

    if (rc == OW_OK)
        rc = new_client(w, OW_KAFKA_CONSUMER, &w->consumer, err);
    if (rc == OW_OK)
        rd_kafka_poll_set_consumer(w->consumer);
    return rc;
}

/* Serves the failed producer's last delivery reports (its outputs, given up,
 * finish their jobs as not done), within 5 s and the stop's deadline. */
static void retire_producer(ow_worker *w)
{
    int64_t deadline = ow_runstate_until(&w->rs, 5000);

    atomic_store(&w->poller_stop, 1);
    if (w->poller_started)
        pthread_join(w->poller, NULL);
    w->poller_started = 0;
    rd_kafka_purge(w->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    while (rd_kafka_outq_len(w->producer) > 0 && ow_clock_mono_ms() < deadline)
        rd_kafka_poll(w->producer, 100);
    rd_kafka_destroy(w->producer);
    w->producer = NULL;
}

void ow_worker_replace_producer(ow_worker *w)
{
    ow_publish_gate *gate = ow_delivery_gate(w->delivery);
    int rewound;
    ow_error err;

    ow_publish_gate_close(gate);
    retire_producer(w);
    /* The old producer's last callbacks may have said so again. */
    atomic_store(&w->producer_failed, 0);
    rewound = ow_delivery_rewind(w->delivery);
    if (new_client(w, OW_KAFKA_PRODUCER, &w->producer, &err) != OW_OK) {
        OW_LOG(OW_LOG_ERROR, "producer_failed", OW_F_STR("error", err.msg));
        ow_runstate_set_fatal(&w->rs, "the producer could not be replaced");
        w->out.producer = NULL;
    } else {
        w->out.producer = w->producer;
        atomic_store(&w->poller_stop, 0);
        w->poller_started = pthread_create(&w->poller, NULL, ow_worker_poller, w) == 0;
        if (!w->poller_started)
            ow_runstate_set_fatal(&w->rs, "cannot start the delivery poller");
        OW_LOG(OW_LOG_WARN, "producer_replaced", OW_F_INT("partitions_rewound", rewound));
    }
    ow_publish_gate_open(gate);
}

static int subscribe(ow_worker *w, ow_error *err)
{
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_resp_err_t e;

    rd_kafka_topic_partition_list_add(topics, w->cfg->topic_input, RD_KAFKA_PARTITION_UA);
    e = rd_kafka_subscribe(w->consumer, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    w->subscribed = e == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e, "subscribe to %s: %s",
                            w->cfg->topic_input, rd_kafka_err2str(e));
    return OW_OK;
}

/* The name of database i in logs: the shard and its address, or the
 * address of the only one. */
static void db_name(const ow_config *cfg, unsigned i, char *buf, size_t cap)
{
    if (cfg->shards.n == 0) {
        snprintf(buf, cap, "database %s:%lld/%s", cfg->mysql_host, (long long)cfg->mysql_port,
                 cfg->mysql_database);
        return;
    }
    snprintf(buf, cap, "shard %u (%s:%u/%s)", i, cfg->shards.addr[i].host, cfg->shards.addr[i].port,
             cfg->shards.addr[i].database);
}

/* A watch per database, started: each pings from its own thread. */
static int start_watches(ow_worker *w, ow_error *err)
{
    w->n_dbs = w->cfg->shards.n > 0 ? w->cfg->shards.n : 1;
    w->watches = calloc(w->n_dbs, sizeof(*w->watches));
    if (w->watches == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    atomic_store(&ow_stats.n_shards, w->cfg->shards.n);
    for (unsigned i = 0; i < w->n_dbs; i++) {
        ow_store_params p;
        char name[OW_SHARD_HOST_MAX + OW_SHARD_DB_MAX + 40];
        int rc;

        ow_store_params_for_shard(w->cfg, i, &p);
        db_name(w->cfg, i, name, sizeof(name));
        w->watches[i] = ow_store_watch_new(&p, name);
        if (w->watches[i] == NULL)
            return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
        rc = ow_store_watch_start(w->watches[i], err);
        if (rc != OW_OK)
            return rc;
    }
    return OW_OK;
}

/* Fails fast on what waiting cannot cure (a wrong password, an unknown
 * database, a shard map that disagrees), from each watch's first ping; a
 * database that only does not answer yet is waited for by its lanes. The
 * wait is bounded by the connect timeout, and the HTTP endpoint answers
 * /healthz meanwhile. */
static int check_databases(ow_worker *w, ow_error *err)
{
    int64_t deadline = ow_clock_mono_ms() + w->cfg->mysql_connect_timeout_s * 1000 + 2000;

    for (unsigned i = 0; i < w->n_dbs; i++) {
        ow_error why;
        ow_watch_state st = ow_store_watch_first(w->watches[i], deadline, &why);

        if (st == OW_WATCH_REFUSED) {
            *err = why;
            return why.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EINVAL : OW_EFATAL;
        }
        if (st != OW_WATCH_UP)
            OW_LOG(OW_LOG_WARN, "database_unreachable",
                   OW_F_STR("database", ow_store_watch_name(w->watches[i])),
                   OW_F_STR("error", st == OW_WATCH_UNKNOWN ? "no answer yet" : why.msg));
    }
    ow_worker_databases_up(w, NULL);
    return OW_OK;
}

/* A topic the broker calls unknown for this long is missing: a topic just
 * created can be unknown to a broker for a moment, until the cluster's
 * metadata reaches it. */
#define TOPIC_MISSING_MS 10000

/* Asks the broker for one output topic through the producer, which is what
 * producing to it would do (a broker that creates topics on first use
 * creates it here). Returns OW_OK, OW_ERETRY (no answer yet), OW_ENOTFOUND
 * (unknown for now) or OW_EFATAL, with err naming the key and the topic. */
static int check_topic(ow_worker *w, const char *key, const char *topic, ow_error *err)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(w->producer, topic, NULL);
    const rd_kafka_metadata_t *md = NULL;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR__TRANSPORT;
    int rc = OW_ERETRY;

    if (t != NULL)
        e = rd_kafka_metadata(w->producer, 0, t, &md, 2000);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1) {
        rd_kafka_resp_err_t te = md->topics[0].err;

        if (te == RD_KAFKA_RESP_ERR_NO_ERROR && md->topics[0].partition_cnt > 0)
            rc = OW_OK;
        else if (te == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            rc = OW_ENOTFOUND;
        else if (te == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                 te == RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION)
            rc = OW_EFATAL;
        if (rc == OW_ENOTFOUND || rc == OW_EFATAL)
            ow_error_set(err, OW_ERRCLASS_FATAL, (int)te, "%s: topic %s: %s", key, topic,
                         rd_kafka_err2str(te));
    }
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    if (t != NULL)
        rd_kafka_topic_destroy(t);
    return rc;
}

/* Both output topics, then their size limits (output.h). */
static int check_output_topics(ow_worker *w, ow_error *err)
{
    int rc = check_topic(w, "topic.results", w->cfg->topic_results, err);

    if (rc == OW_OK)
        rc = check_topic(w, "topic.dlq", w->cfg->topic_dlq, err);
    if (rc == OW_OK) {
        const char *const keys[OW_OUTPUT_TOPICS] = {"topic.results", "topic.dlq"};
        const char *const topics[OW_OUTPUT_TOPICS] = {w->cfg->topic_results, w->cfg->topic_dlq};

        rc = ow_output_check_topics(&w->out, keys, topics, OW_OUTPUT_TOPICS, err);
    }
    return rc;
}

/* A missing output topic is found before anything is
 * consumed, not after a decision committed. A broker that does not answer
 * is waited for (the worker is not ready meanwhile). */
static int check_outputs(ow_worker *w, const volatile sig_atomic_t *stop, ow_error *err)
{
    int64_t missing_since = -1;
    int logged = 0;

    while (!*stop && !atomic_load(&w->rs.fatal)) {
        int rc = check_output_topics(w, err);

        if (rc == OW_OK) {
            atomic_store(&w->outputs_ok, 1);
            return OW_OK;
        }
        if (rc == OW_ENOTFOUND && missing_since < 0)
            missing_since = ow_clock_mono_ms();
        if (rc == OW_ENOTFOUND && ow_clock_mono_ms() - missing_since >= TOPIC_MISSING_MS)
            return OW_EFATAL;
        if (rc != OW_ERETRY && rc != OW_ENOTFOUND)
            return rc;
        if (!logged++)
            OW_LOG(OW_LOG_WARN, "output_topics_unavailable",
                   OW_F_STR("error", rc == OW_ENOTFOUND ? err->msg : "broker unreachable"));
        ow_error_clear(err);
        ow_sleep_ms(500, &w->rs.stop_sleep);
    }
    return OW_OK;
}

/* worker.lanes lanes for each database. */
static int start_lanes(ow_worker *w, ow_error *err)
{
    size_t per_db = (size_t)w->cfg->worker_lanes;

    w->env = (ow_lane_env){w->cfg, &w->rs, &w->ids, w->delivery, &w->ledger, per_db * w->n_dbs};
    w->lanes = calloc(per_db * w->n_dbs, sizeof(*w->lanes));
    if (w->lanes == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    for (size_t i = 0; i < per_db * w->n_dbs; i++) {
        unsigned db = (unsigned)(i / per_db);
        int rc = ow_lane_start(&w->lanes[i], &w->env, (unsigned)i, db, w->watches[db], err);

        if (rc != OW_OK)
            return rc;
        w->n_lanes++;
    }
    return OW_OK;
}

/* The databases first: a configuration they refuse (a wrong password, a
 * shard map that disagrees) stops the worker before it joins the group,
 * and /healthz answers while they are checked. */
int ow_worker_start(ow_worker *w, const volatile sig_atomic_t *stop, ow_error *err)
{
    const char *topics[] = {w->cfg->topic_input, w->cfg->topic_results, w->cfg->topic_dlq};
    int rc = start_watches(w, err);

    if (rc == OW_OK)
        rc = ow_worker_start_http(w, err);
    if (rc == OW_OK)
        rc = check_databases(w, err);
    if (rc == OW_OK)
        rc = create_clients(w, err);
    if (rc == OW_OK)
        rc = ow_delivery_start(w->delivery, &w->out, w->producer, w->consumer, err);
    /* A missing ACL stops the worker before it decides anything. The
     * consumer asks: its metadata requests never auto-create a topic. */
    if (rc == OW_OK)
        rc = ow_kafka_check_topics(w->consumer, topics, 3, err);
    if (rc != OW_OK)
        return rc;
    w->out_ready = 1;
    w->maker.lim.output_max = w->out.output_max;
    rc = start_lanes(w, err);
    if (rc != OW_OK)
        return rc;
    if (pthread_create(&w->poller, NULL, ow_worker_poller, w) != 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot start the delivery poller");
    w->poller_started = 1;
    rc = check_outputs(w, stop, err);
    if (rc == OW_OK && !*stop)
        rc = subscribe(w, err);
    return rc;
}
