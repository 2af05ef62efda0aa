#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kit.h"
#include "ow/kafka.h"

static rd_kafka_conf_t *base_conf(const char *bootstrap)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    char errstr[256];

    rd_kafka_conf_set(c, "bootstrap.servers", bootstrap, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));
    /* OW_KIT_KAFKA_CONF="security.protocol=SSL,ssl.ca.location=..." reaches
     * every client (the secure tier talks only TLS to its broker). */
    if (getenv("OW_KIT_KAFKA_CONF") != NULL) {
        char *copy = strdup(getenv("OW_KIT_KAFKA_CONF"));
        char *save = NULL;

        for (char *kv = strtok_r(copy, ",", &save); kv != NULL; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');

            if (eq != NULL) {
                *eq = '\0';
                if (rd_kafka_conf_set(c, kv, eq + 1, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
                    fprintf(stderr, "ow-kit: OW_KIT_KAFKA_CONF: %s\n", errstr);
            }
        }
        free(copy);
    }
    return c;
}

void kit_msgs_free(kit_msgs *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].key);
        free(m->v[i].value);
        if (m->v[i].headers != NULL)
            rd_kafka_headers_destroy(m->v[i].headers);
    }
    free(m->v);
    memset(m, 0, sizeof(*m));
}

int kit_header(const kit_msg *m, const char *name, char *out, size_t outsz)
{
    size_t len = 0;
    const char *v = ow_kafka_headers_get(m->headers, name, &len);

    if (v == NULL)
        return 0;
    if (len >= outsz)
        len = outsz - 1;
    memcpy(out, v, len);
    out[len] = '\0';
    return 1;
}

/* Asks for the topic's metadata, which makes a broker with automatic topic
 * creation create it (with its default partition count). */
static int auto_create(rd_kafka_t *rk, const char *topic, int wanted)
{
    int n = -1;

    for (int attempt = 0; attempt < 20 && n <= 0; attempt++) {
        n = kit_partition_count(rk, topic);
        if (n <= 0) {
            struct timespec ts = {0, 250 * 1000000L};

            nanosleep(&ts, NULL);
        }
    }
    if (n <= 0) {
        fprintf(stderr, "kit: create topic %s: no answer to CreateTopics, and not auto-created\n",
                topic);
        return -1;
    }
    if (n != wanted)
        fprintf(stderr, "kit: topic %s auto-created with %d partitions (asked for %d)\n", topic, n,
                wanted);
    return 0;
}

int kit_create_topic(const char *bootstrap, const char *topic, int partitions)
{
    return kit_create_topic_with(bootstrap, topic, partitions, NULL, NULL);
}

int kit_create_topic_with(const char *bootstrap, const char *topic, int partitions,
                          const char *config, const char *value)
{
    char errstr[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, base_conf(bootstrap), errstr, sizeof(errstr));
    rd_kafka_NewTopic_t *nt;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    int rc = -1;

    if (rk == NULL)
        return -1;
    nt = rd_kafka_NewTopic_new(topic, partitions, -1, errstr, sizeof(errstr));
    if (config != NULL)
        rd_kafka_NewTopic_set_config(nt, config, value);
    q = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, 10000);
    if (ev == NULL) {
        /* librdkafka's mock cluster does not answer CreateTopics: let the
         * broker create the topic on first use instead. */
        rc = auto_create(rk, topic, partitions);
    }
    if (ev != NULL) {
        const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
        size_t cnt = 0;
        const rd_kafka_topic_result_t **tr =
            res != NULL ? rd_kafka_CreateTopics_result_topics(res, &cnt) : NULL;

        if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR && cnt == 1 &&
            (rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_NO_ERROR ||
             rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS))
            rc = 0;
        else
            fprintf(stderr, "kit: create topic %s: %s\n", topic,
                    cnt == 1 ? rd_kafka_topic_result_error_string(tr[0])
                             : rd_kafka_event_error_string(ev));
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_NewTopic_destroy(nt);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

int kit_alter_topic_config(const char *bootstrap, const char *topic, const char *config,
                           const char *value)
{
    char errstr[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, base_conf(bootstrap), errstr, sizeof(errstr));
    rd_kafka_ConfigResource_t *res;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    int rc = -1;

    if (rk == NULL)
        return -1;
    res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_ConfigResource_set_config(res, config, value);
    q = rd_kafka_queue_new(rk);
    rd_kafka_AlterConfigs(rk, &res, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, 10000);
    if (ev != NULL) {
        const rd_kafka_AlterConfigs_result_t *r = rd_kafka_event_AlterConfigs_result(ev);
        size_t n = 0;
        const rd_kafka_ConfigResource_t **rs =
            r != NULL ? rd_kafka_AlterConfigs_result_resources(r, &n) : NULL;

        if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR && n == 1 &&
            rd_kafka_ConfigResource_error(rs[0]) == RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = 0;
        else
            fprintf(stderr, "kit: alter topic %s: %s\n", topic, rd_kafka_event_error_string(ev));
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_ConfigResource_destroy(res);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

int kit_create_partitions(const char *bootstrap, const char *topic, int total)
{
    char errstr[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, base_conf(bootstrap), errstr, sizeof(errstr));
    rd_kafka_NewPartitions_t *np;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    int rc = -1;

    if (rk == NULL)
        return -1;
    np = rd_kafka_NewPartitions_new(topic, (size_t)total, errstr, sizeof(errstr));
    q = rd_kafka_queue_new(rk);
    rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, 10000);
    if (ev != NULL) {
        const rd_kafka_CreatePartitions_result_t *r = rd_kafka_event_CreatePartitions_result(ev);
        size_t n = 0;
        const rd_kafka_topic_result_t **tr =
            r != NULL ? rd_kafka_CreatePartitions_result_topics(r, &n) : NULL;

        if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR && n == 1 &&
            rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = 0;
        else
            fprintf(stderr, "kit: partitions of %s: %s\n", topic,
                    n == 1 ? rd_kafka_topic_result_error_string(tr[0])
                           : rd_kafka_event_error_string(ev));
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_NewPartitions_destroy(np);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

int kit_delete_records(const char *bootstrap, const char *topic, int32_t partition, int64_t before)
{
    char errstr[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, base_conf(bootstrap), errstr, sizeof(errstr));
    rd_kafka_topic_partition_list_t *l;
    rd_kafka_DeleteRecords_t *dr;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    int rc = -1;

    if (rk == NULL)
        return -1;
    l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = before;
    dr = rd_kafka_DeleteRecords_new(l);
    rd_kafka_topic_partition_list_destroy(l);
    q = rd_kafka_queue_new(rk);
    rd_kafka_DeleteRecords(rk, &dr, 1, NULL, q);
    ev = rd_kafka_queue_poll(q, 30000);
    if (ev != NULL) {
        const rd_kafka_DeleteRecords_result_t *r = rd_kafka_event_DeleteRecords_result(ev);
        const rd_kafka_topic_partition_list_t *done =
            r != NULL ? rd_kafka_DeleteRecords_result_offsets(r) : NULL;

        if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR && done != NULL &&
            done->cnt == 1 && done->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = 0;
        else
            fprintf(stderr, "kit: delete records of %s [%d]: %s\n", topic, (int)partition,
                    done != NULL && done->cnt == 1 ? rd_kafka_err2str(done->elems[0].err)
                                                   : rd_kafka_event_error_string(ev));
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_DeleteRecords_destroy(dr);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}

rd_kafka_mock_cluster_t *kit_mock_cluster(int brokers, rd_kafka_t **host)
{
    char errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_mock_cluster_t *mc = NULL;

    /* The host talks to no broker; its warning that it has none is noise. */
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));
    *host = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof(errstr));
    if (*host == NULL) {
        rd_kafka_conf_destroy(c);
        return NULL;
    }
    mc = rd_kafka_mock_cluster_new(*host, brokers);
    if (mc == NULL) {
        rd_kafka_destroy(*host);
        *host = NULL;
    }
    return mc;
}

static int failed_deliveries;

static void on_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
        __atomic_add_fetch(&failed_deliveries, 1, __ATOMIC_RELAXED);
}

rd_kafka_conf_t *kit_producer_conf(const char *bootstrap, const char *extra_conf)
{
    char errstr[256];
    rd_kafka_conf_t *c = base_conf(bootstrap);

    rd_kafka_conf_set(c, "enable.idempotence", "true", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "linger.ms", "5", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "queue.buffering.max.messages", "1000000", errstr, sizeof(errstr));
    if (extra_conf != NULL) {
        char *copy = strdup(extra_conf);
        char *save = NULL;

        for (char *kv = strtok_r(copy, ",", &save); kv != NULL; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');

            if (eq != NULL) {
                *eq = '\0';
                rd_kafka_conf_set(c, kv, eq + 1, errstr, sizeof(errstr));
            }
        }
        free(copy);
    }
    return c;
}

rd_kafka_t *kit_producer(const char *bootstrap, const char *extra_conf)
{
    char errstr[256];
    rd_kafka_conf_t *c = kit_producer_conf(bootstrap, extra_conf);
    rd_kafka_t *p;

    rd_kafka_conf_set_dr_msg_cb(c, on_dr);
    p = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof(errstr));
    if (p == NULL)
        rd_kafka_conf_destroy(c);
    return p;
}

rd_kafka_resp_err_t kit_produce_with(rd_kafka_t *p, const char *topic, int32_t partition,
                                     const void *key, size_t key_len, const void *value, size_t len,
                                     void *opaque)
{
    int32_t part = partition < 0 ? RD_KAFKA_PARTITION_UA : partition;
    size_t klen = key != NULL ? key_len : 0;

    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part), RD_KAFKA_V_KEY(key, klen),
            RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);

        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            return e;
        rd_kafka_poll(p, 10);
    }
}

rd_kafka_resp_err_t kit_produce_headers(rd_kafka_t *p, const char *topic, int32_t partition,
                                        const void *key, size_t key_len, const void *value,
                                        size_t len, rd_kafka_headers_t *h)
{
    int32_t part = partition < 0 ? RD_KAFKA_PARTITION_UA : partition;
    size_t klen = key != NULL ? key_len : 0;

    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part), RD_KAFKA_V_KEY(key, klen),
            RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);

        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return e; /* h is the message's now */
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_headers_destroy(h);
            return e;
        }
        rd_kafka_poll(p, 10);
    }
}

int kit_produce(rd_kafka_t *p, const char *topic, int32_t partition, const void *key,
                size_t key_len, const void *value, size_t len)
{
    return kit_produce_with(p, topic, partition, key, key_len, value, len, NULL) ==
                   RD_KAFKA_RESP_ERR_NO_ERROR
               ? 0
               : -1;
}

int kit_flush(rd_kafka_t *p, int timeout_ms)
{
    rd_kafka_flush(p, timeout_ms);
    return __atomic_exchange_n(&failed_deliveries, 0, __ATOMIC_RELAXED) + rd_kafka_outq_len(p);
}

int kit_partition_count(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(rk, topic, NULL);
    const rd_kafka_metadata_t *md = NULL;
    int n = -1;

    if (rd_kafka_metadata(rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        n = md->topics[0].partition_cnt;
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    return n;
}

int kit_watermarks(const char *bootstrap, const char *topic, int64_t *starts, int64_t *ends,
                   int max)
{
    char errstr[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, base_conf(bootstrap), errstr, sizeof(errstr));
    int n;

    if (rk == NULL)
        return -1;
    n = kit_partition_count(rk, topic);
    for (int i = 0; i < n && i < max; i++) {
        int64_t lo = 0, hi = -1;

        rd_kafka_query_watermark_offsets(rk, topic, i, &lo, &hi, 10000);
        if (starts != NULL)
            starts[i] = lo;
        ends[i] = hi;
    }
    rd_kafka_destroy(rk);
    return n;
}

int kit_end_offsets(const char *bootstrap, const char *topic, int64_t *ends, int max)
{
    return kit_watermarks(bootstrap, topic, NULL, ends, max);
}

int kit_group_lag(const char *bootstrap, const char *group, const char *topic, int max,
                  int64_t *committed, int64_t *ends, int64_t *lag)
{
    int64_t starts[256];
    int n = kit_watermarks(bootstrap, topic, starts, ends, max < 256 ? max : 256);

    if (n <= 0 || n > max || n > 256 || kit_committed(bootstrap, group, topic, n, committed) != 0)
        return -1;
    for (int p = 0; p < n; p++) {
        int64_t from = committed[p] > starts[p] ? committed[p] : starts[p];

        lag[p] = ends[p] > from ? ends[p] - from : 0;
    }
    return n;
}

static void copy_msg(kit_msgs *out, const rd_kafka_message_t *m)
{
    kit_msg *k;
    rd_kafka_headers_t *h = NULL;

    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 1024;
        out->v = realloc(out->v, out->cap * sizeof(*out->v));
    }
    k = &out->v[out->n++];
    memset(k, 0, sizeof(*k));
    k->partition = m->partition;
    k->offset = m->offset;
    k->timestamp_ms = rd_kafka_message_timestamp(m, NULL);
    if (m->key != NULL) {
        k->key = malloc(m->key_len + 1);
        memcpy(k->key, m->key, m->key_len);
        k->key[m->key_len] = '\0';
        k->key_len = m->key_len;
    }
    k->value = malloc(m->len + 1);
    if (m->len > 0)
        memcpy(k->value, m->payload, m->len);
    k->value[m->len] = '\0';
    k->len = m->len;
    k->value_null = m->payload == NULL;
    if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
        k->headers = rd_kafka_headers_copy(h);
}

static void put_hex(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", (unsigned char)p[i]);
}

/* With OW_TEST_CONTRACT_CAPTURE set, every result (it carries a
 * `replayed` header) and every dead letter (`error-code`) a test reads is
 * appended to that file as one JSON line, for scripts/contract.sh to check
 * against docs/asyncapi.yaml. Bytes travel as hex; the checker decodes. */
static void capture(const char *topic, const kit_msg *k)
{
    const char *path = getenv("OW_TEST_CONTRACT_CAPTURE");
    const char *kind = NULL;
    const char *name;
    const void *v;
    size_t len;
    FILE *f;

    if (path == NULL || *path == '\0' || k->headers == NULL)
        return;
    if (ow_kafka_headers_get(k->headers, "error-code", &len) != NULL)
        kind = "dead_letter";
    else if (ow_kafka_headers_get(k->headers, "replayed", &len) != NULL)
        kind = "result";
    if (kind == NULL || (f = fopen(path, "a")) == NULL)
        return;
    fprintf(f, "{\"kind\":\"%s\",\"topic\":\"%s\",\"partition\":%d,\"offset\":%lld,\"headers\":\"",
            kind, topic, (int)k->partition, (long long)k->offset);
    /* The headers as "name=value" lines, in order (repeats kept). */
    for (size_t i = 0;
         rd_kafka_header_get_all(k->headers, i, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
         i++) {
        put_hex(f, name, strlen(name));
        put_hex(f, "=", 1);
        put_hex(f, v != NULL ? v : "", v != NULL ? len : 0);
        put_hex(f, "\n", 1);
    }
    fputs("\",\"value\":\"", f);
    if (strcmp(kind, "result") == 0)
        put_hex(f, k->value, k->len);
    fputs("\"}\n", f);
    fclose(f);
}

static const char *iso_name(kit_isolation iso)
{
    return iso == KIT_READ_COMMITTED ? "read_committed" : "read_uncommitted";
}

rd_kafka_t *kit_offsets_client(const char *bootstrap, kit_isolation iso)
{
    char errstr[256];
    rd_kafka_conf_t *c = base_conf(bootstrap);

    rd_kafka_conf_set(c, "group.id", "ow-kit-offsets", errstr, sizeof(errstr));
    if (iso != KIT_READ_DEFAULT)
        rd_kafka_conf_set(c, "isolation.level", iso_name(iso), errstr, sizeof(errstr));
    return rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof(errstr));
}

/* One ListOffsets round for every partition (a query per partition took
 * 100-300 ms each under the cluster tiers' load); the latest offset is
 * asked as timestamp -1. */
void kit_query_ends(rd_kafka_t *rk, const char *topic, int n, int timeout_ms, int64_t *ends)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);

    for (int i = 0; i < n; i++) {
        rd_kafka_topic_partition_list_add(l, topic, i)->offset = RD_KAFKA_OFFSET_END;
        ends[i] = -1;
    }
    rd_kafka_offsets_for_times(rk, l, timeout_ms);
    for (int i = 0; i < l->cnt; i++) {
        const rd_kafka_topic_partition_t *e = &l->elems[i];

        if (e->err == RD_KAFKA_RESP_ERR_NO_ERROR && e->offset >= 0 && e->partition < n)
            ends[e->partition] = e->offset;
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* A partition is read to its end when a message at end - 1 arrives, or the
 * consumer reports reaching the end: the last offsets may hold transaction
 * markers or aborted records, which no message reports. */
static int read_partitions(rd_kafka_t *rk, const char *topic, const int64_t *ends, int remaining,
                           int timeout_ms, kit_msgs *out)
{
    char done[256] = {0};
    int64_t deadline;
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    deadline = ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
    while (remaining > 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        int64_t reached = -1;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (ts.tv_sec * 1000 + ts.tv_nsec / 1000000 > deadline)
            return -1;
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            copy_msg(out, m);
            capture(topic, &out->v[out->n - 1]);
            reached = m->offset + 1;
        } else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            reached = m->offset;
        }
        if (reached >= 0 && m->partition >= 0 && m->partition < 256 && !done[m->partition] &&
            reached >= ends[m->partition]) {
            done[m->partition] = 1;
            remaining--;
        }
        rd_kafka_message_destroy(m);
    }
    return 0;
}

int kit_read_topic(const char *bootstrap, const char *topic, int timeout_ms, kit_msgs *out)
{
    return kit_read_topic_iso(bootstrap, topic, timeout_ms, KIT_READ_DEFAULT, out);
}

int kit_read_topic_iso(const char *bootstrap, const char *topic, int timeout_ms, kit_isolation iso,
                       kit_msgs *out)
{
    char errstr[256];
    rd_kafka_conf_t *c = base_conf(bootstrap);
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *parts;
    int64_t ends[256];
    int n;
    int remaining = 0;
    int rc;

    rd_kafka_conf_set(c, "group.id", "ow-kit-reader", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "enable.partition.eof", "true", errstr, sizeof(errstr));
    if (iso != KIT_READ_DEFAULT)
        rd_kafka_conf_set(c, "isolation.level", iso_name(iso), errstr, sizeof(errstr));
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof(errstr));
    if (rk == NULL)
        return -1;
    n = kit_partition_count(rk, topic);
    if (n <= 0 || n > 256) {
        rd_kafka_destroy(rk);
        return n == 0 ? 0 : -1;
    }
    parts = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++) {
        int64_t lo = 0;

        rd_kafka_query_watermark_offsets(rk, topic, i, &lo, &ends[i], 10000);
        if (ends[i] > lo) {
            rd_kafka_topic_partition_list_add(parts, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
            remaining++;
        }
    }
    rd_kafka_assign(rk, parts);
    rc = read_partitions(rk, topic, ends, remaining, timeout_ms, out);
    rd_kafka_topic_partition_list_destroy(parts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return rc;
}

int kit_read_one(const char *bootstrap, const char *topic, int32_t partition, int64_t offset,
                 kit_msgs *out)
{
    rd_kafka_t *rk = kit_offsets_client(bootstrap, KIT_READ_UNCOMMITTED);
    rd_kafka_topic_partition_list_t *l;
    int rc = -1;

    if (rk == NULL)
        return -1;
    l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    rd_kafka_assign(rk, l);
    for (int i = 0; i < 50 && rc != 0; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);

        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->offset == offset) {
            copy_msg(out, m);
            rc = 0;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return rc;
}

int kit_committed(const char *bootstrap, const char *group, const char *topic, int partitions,
                  int64_t *out)
{
    char errstr[256];
    rd_kafka_conf_t *c = base_conf(bootstrap);
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(partitions);
    int rc = -1;

    rd_kafka_conf_set(c, "group.id", group, errstr, sizeof(errstr));
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof(errstr));
    for (int i = 0; i < partitions; i++)
        rd_kafka_topic_partition_list_add(parts, topic, i);
    if (rk != NULL && rd_kafka_committed(rk, parts, 15000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < partitions; i++)
            out[i] = parts->elems[i].offset;
        rc = 0;
    }
    rd_kafka_topic_partition_list_destroy(parts);
    if (rk != NULL)
        rd_kafka_destroy(rk);
    return rc;
}

/* Adds or deletes one LITERAL ALLOW ACL for principal on any host (the
 * secure tier). type: topic, group, cluster (name kafka-cluster);
 * operation: read, write, describe, idempotent-write,
 * create, all. */
static int acl_enum(const char *type, const char *op, rd_kafka_ResourceType_t *rt,
                    rd_kafka_AclOperation_t *ao)
{
    static const struct {
        const char *name;
        int v;
    } types[] = {{"topic", RD_KAFKA_RESOURCE_TOPIC},
                 {"group", RD_KAFKA_RESOURCE_GROUP},
                 {"cluster", RD_KAFKA_RESOURCE_BROKER}},
      ops[] = {{"read", RD_KAFKA_ACL_OPERATION_READ},
               {"write", RD_KAFKA_ACL_OPERATION_WRITE},
               {"describe", RD_KAFKA_ACL_OPERATION_DESCRIBE},
               {"idempotent-write", RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE},
               {"create", RD_KAFKA_ACL_OPERATION_CREATE},
               {"all", RD_KAFKA_ACL_OPERATION_ALL}};
    int found = 0;

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(type, types[i].name) == 0) {
            *rt = (rd_kafka_ResourceType_t)types[i].v;
            found |= 1;
        }
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        if (strcmp(op, ops[i].name) == 0) {
            *ao = (rd_kafka_AclOperation_t)ops[i].v;
            found |= 2;
        }
    return found == 3 ? 0 : -1;
}

int kit_acl(const char *bootstrap, int add, const char *principal, const char *type,
            const char *name, const char *op)
{
    char errstr[256];
    rd_kafka_ResourceType_t rt;
    rd_kafka_AclOperation_t ao = RD_KAFKA_ACL_OPERATION_UNKNOWN;
    rd_kafka_t *rk;
    rd_kafka_queue_t *q;
    rd_kafka_event_t *ev;
    rd_kafka_resp_err_t e;
    int rc = -1;

    if (acl_enum(type, op, &rt, &ao) != 0) {
        fprintf(stderr, "kit: acl: unknown resource type %s or operation %s\n", type, op);
        return -1;
    }
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, base_conf(bootstrap), errstr, sizeof(errstr));
    if (rk == NULL)
        return -1;
    q = rd_kafka_queue_new(rk);
    if (add) {
        rd_kafka_AclBinding_t *b =
            rd_kafka_AclBinding_new(rt, name, RD_KAFKA_RESOURCE_PATTERN_LITERAL, principal, "*", ao,
                                    RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW, errstr, sizeof(errstr));

        rd_kafka_CreateAcls(rk, &b, 1, NULL, q);
        ev = rd_kafka_queue_poll(q, 15000);
        rd_kafka_AclBinding_destroy(b);
        if (ev != NULL) {
            size_t cnt = 0;
            const rd_kafka_CreateAcls_result_t *res = rd_kafka_event_CreateAcls_result(ev);
            const rd_kafka_acl_result_t **r =
                res != NULL ? rd_kafka_CreateAcls_result_acls(res, &cnt) : NULL;

            e = rd_kafka_event_error(ev);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR && cnt == 1 &&
                rd_kafka_acl_result_error(r[0]) == NULL)
                rc = 0;
            else
                fprintf(stderr, "kit: CreateAcls: %s\n",
                        e != RD_KAFKA_RESP_ERR_NO_ERROR ? rd_kafka_event_error_string(ev)
                        : cnt == 1 ? rd_kafka_error_string(rd_kafka_acl_result_error(r[0]))
                                   : "no result");
        }
    } else {
        rd_kafka_AclBindingFilter_t *f = rd_kafka_AclBindingFilter_new(
            rt, name, RD_KAFKA_RESOURCE_PATTERN_LITERAL, principal, "*", ao,
            RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW, errstr, sizeof(errstr));

        rd_kafka_DeleteAcls(rk, &f, 1, NULL, q);
        ev = rd_kafka_queue_poll(q, 15000);
        rd_kafka_AclBinding_destroy(f);
        if (ev != NULL) {
            size_t cnt = 0, n = 0;
            const rd_kafka_DeleteAcls_result_t *res = rd_kafka_event_DeleteAcls_result(ev);
            const rd_kafka_DeleteAcls_result_response_t **r =
                res != NULL ? rd_kafka_DeleteAcls_result_responses(res, &cnt) : NULL;

            e = rd_kafka_event_error(ev);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR && cnt == 1 &&
                rd_kafka_DeleteAcls_result_response_error(r[0]) == NULL) {
                rd_kafka_DeleteAcls_result_response_matching_acls(r[0], &n);
                rc = n == 1 ? 0 : -1;
                if (n != 1)
                    fprintf(stderr, "kit: DeleteAcls matched %zu ACLs, expected 1\n", n);
            } else {
                fprintf(stderr, "kit: DeleteAcls failed\n");
            }
        }
    }
    if (ev == NULL)
        fprintf(stderr, "kit: no answer to the ACL request\n");
    else
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}
