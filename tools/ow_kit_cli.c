/*
 * ow-kit: small Kafka utilities for the demo, the chaos run and the
 * benchmark scripts (not for production use).
 *
 *   ow-kit create-topic BOOTSTRAP TOPIC PARTITIONS
 *   ow-kit produce BOOTSTRAP TOPIC [--partition P] [--key K | --no-key]   (value on stdin)
 *   ow-kit read BOOTSTRAP TOPIC          one JSON object per message
 *   ow-kit lag BOOTSTRAP GROUP TOPIC     committed vs end offsets (kit_group_lag: from the
 *                                        log start when that is later); exit 0 when
 *                                        caught up
 *   ow-kit acl add|delete BOOTSTRAP PRINCIPAL TYPE NAME OPERATION
 *                                        one LITERAL ALLOW ACL (TYPE topic, group, cluster)
 *   ow-kit gen BOOTSTRAP TOPIC N [--rate R] [--seed S] [--retry P] [--reuse P]
 *              [--clash P] [--invalid P] [--items MAX] [--prefix K] [--stop-file F]
 *                                        produce a deterministic mix (kit_gen); with
 *                                        --stop-file, stop early once F exists
 *   ow-kit copy BOOTSTRAP TOPIC PARTITION OFFSET [--to TOPIC]
 *               [--txn ID --commit|--abort|--open]
 *                                        produce a copy of one record (key, value,
 *                                        headers) to the same partition, alone or in
 *                                        a transaction committed, aborted, or left
 *                                        open (the process exits as if killed)
 *   ow-kit lso-watch BOOTSTRAP TOPIC FILE [--interval-ms 100] [--seconds S]
 *                                        every interval, one line "WALL_MS P:LSO:HW ..."
 *                                        from a read_committed consumer's latest fetch
 *                                        responses, until SIGTERM or S seconds
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kit.h"

static int usage(void);

/* Produces n generated messages, at most rate per second (0 = unlimited). */
static int cmd_gen(int argc, char **argv)
{
    long n = strtol(argv[4], NULL, 10);
    long rate = 0;
    uint64_t seed = 1;
    int retry = 25, reuse = 2, clash = 2, invalid = 1, items = 10;
    const char *prefix = "k";
    const char *stop_file = NULL;
    kit_gen *g;
    kit_sender *s;
    kit_send_stats st;
    struct timespec t0, now;
    long counts[KIT_KIND_COUNT] = {0};
    long produced = 0;
    long failed;
    int rc = 0;

    for (int i = 5; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);

        if (strcmp(argv[i], "--rate") == 0)
            rate = v;
        else if (strcmp(argv[i], "--seed") == 0)
            seed = (uint64_t)v;
        else if (strcmp(argv[i], "--retry") == 0)
            retry = (int)v;
        else if (strcmp(argv[i], "--reuse") == 0)
            reuse = (int)v;
        else if (strcmp(argv[i], "--clash") == 0)
            clash = (int)v;
        else if (strcmp(argv[i], "--invalid") == 0)
            invalid = (int)v;
        else if (strcmp(argv[i], "--items") == 0)
            items = (int)v;
        else if (strcmp(argv[i], "--prefix") == 0)
            prefix = argv[i + 1];
        else if (strcmp(argv[i], "--stop-file") == 0)
            stop_file = argv[i + 1];
        else
            return usage();
    }
    g = kit_gen_new(seed, retry, reuse, clash, invalid, items, prefix);
    s = kit_sender_new(argv[2], argv[3], NULL);
    if (s == NULL)
        return 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n && rc == 0; i++) {
        const kit_gen_msg *m;

        if (stop_file != NULL && i % 16 == 0 && access(stop_file, F_OK) == 0)
            break;
        m = kit_gen_next(g);
        rc = kit_send(s, m->has_key ? m->key : NULL, m->key_len, m->value, m->len);
        if (rc != 0)
            break;
        produced++;
        counts[m->kind]++;
        rc = kit_sender_poll(s, 0);
        while (rc == 0 && rate > 0) {
            double el;

            clock_gettime(CLOCK_MONOTONIC, &now);
            el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
            if ((double)(i + 1) <= el * (double)rate)
                break;
            rc = kit_sender_poll(s, 1);
        }
    }
    failed = kit_sender_close(s, 120000, &st);
    kit_gen_free(g);
    if (st.replaced > 0)
        fprintf(stderr,
                "gen: %ld producer(s) replaced after a fatal error, %ld message(s) sent again\n",
                st.replaced, st.resent);
    fprintf(
        stderr,
        "gen: produced %ld (new %ld, retry %ld, reuse %ld, clash %ld, invalid %ld), %ld failed\n",
        produced, counts[KIT_NEW], counts[KIT_RETRY], counts[KIT_REUSE], counts[KIT_CLASH],
        counts[KIT_INVALID], failed);
    return rc == 0 && failed == 0 ? 0 : 1;
}

static int usage(void)
{
    fputs("usage: ow-kit create-topic BOOTSTRAP TOPIC PARTITIONS\n"
          "       ow-kit produce BOOTSTRAP TOPIC [--partition P] [--key K | --no-key] < value\n"
          "       ow-kit read BOOTSTRAP TOPIC\n"
          "       ow-kit lag BOOTSTRAP GROUP TOPIC\n"
          "       ow-kit acl add|delete BOOTSTRAP PRINCIPAL TYPE NAME OPERATION\n"
          "       ow-kit gen BOOTSTRAP TOPIC N [--rate R] [--seed S] [--retry P] [--reuse P]\n"
          "                  [--clash P] [--invalid P] [--items MAX] [--prefix K] [--stop-file F]\n"
          "       ow-kit copy BOOTSTRAP TOPIC PARTITION OFFSET [--to TOPIC]\n"
          "                  [--txn ID --commit|--abort|--open]\n"
          "       ow-kit lso-watch BOOTSTRAP TOPIC FILE [--interval-ms 100] [--seconds S]\n",
          stderr);
    return 2;
}

static int cmd_produce(int argc, char **argv)
{
    const char *key = NULL;
    int32_t partition = -1;
    char *value = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[65536];
    rd_kafka_t *p;
    int failed;

    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--partition") == 0 && i + 1 < argc)
            partition = (int32_t)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc)
            key = argv[++i];
        else if (strcmp(argv[i], "--no-key") != 0)
            return usage();
    }
    while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            value = realloc(value, cap);
        }
        memcpy(value + len, chunk, n);
        len += n;
    }
    while (len > 0 && value[len - 1] == '\n')
        len--;
    p = kit_producer(argv[2], NULL);
    if (p == NULL ||
        kit_produce(p, argv[3], partition, key, key ? strlen(key) : 0, value, len) != 0)
        return 1;
    failed = kit_flush(p, 30000);
    rd_kafka_destroy(p);
    free(value);
    return failed == 0 ? 0 : 1;
}

static json_t *headers_json(const rd_kafka_headers_t *h)
{
    json_t *o = json_object();
    const char *name;
    const void *v;
    size_t len;

    for (size_t i = 0;
         h != NULL && rd_kafka_header_get_all(h, i, &name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR;
         i++)
        json_object_set_new(o, name, json_stringn(v != NULL ? v : "", len));
    return o;
}

static int cmd_read(char **argv)
{
    kit_msgs msgs = {0};
    int rc = kit_read_topic(argv[2], argv[3], 30000, &msgs);

    for (size_t i = 0; i < msgs.n; i++) {
        const kit_msg *m = &msgs.v[i];
        json_t *o = json_object();
        char *line;

        json_object_set_new(o, "partition", json_integer(m->partition));
        json_object_set_new(o, "offset", json_integer(m->offset));
        json_object_set_new(o, "key", m->key ? json_stringn(m->key, m->key_len) : json_null());
        json_object_set_new(o, "headers", headers_json(m->headers));
        json_object_set_new(o, "value", json_stringn(m->value, m->len));
        line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (line != NULL)
            puts(line);
        free(line);
        json_decref(o);
    }
    kit_msgs_free(&msgs);
    return rc == 0 ? 0 : 1;
}

static int cmd_lag(char **argv)
{
    int64_t ends[256], committed[256], lag[256];
    int n = kit_group_lag(argv[2], argv[3], argv[4], 256, committed, ends, lag);
    long long total = 0;

    if (n <= 0)
        return 1;
    for (int p = 0; p < n; p++) {
        printf("partition %d: committed %lld end %lld lag %lld\n", p, (long long)committed[p],
               (long long)ends[p], (long long)lag[p]);
        total += lag[p];
    }
    printf("total lag %lld\n", total);
    return total == 0 ? 0 : 1;
}

/* The end of a transaction that cmd_copy runs. */
typedef enum { TXN_NONE, TXN_COMMIT, TXN_ABORT, TXN_OPEN } txn_end;

static int txn_check(rd_kafka_error_t *e, const char *what)
{
    if (e == NULL)
        return 0;
    fprintf(stderr, "ow-kit: %s: %s\n", what, rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return -1;
}

/* Produces m's key, value and headers to topic, m's partition. */
static int produce_copy(rd_kafka_t *p, const char *topic, const kit_msg *m)
{
    rd_kafka_headers_t *h = m->headers != NULL ? rd_kafka_headers_copy(m->headers) : NULL;
    void *value = m->value_null ? NULL : m->value;
    void *key = m->key;
    size_t key_len = m->key != NULL ? m->key_len : 0;
    rd_kafka_resp_err_t e = rd_kafka_producev(
        p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(m->partition),
        RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE(value, m->len),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);

    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* The headers are ours again when producev fails. */
        if (h != NULL)
            rd_kafka_headers_destroy(h);
        fprintf(stderr, "ow-kit: produce: %s\n", rd_kafka_err2str(e));
        return -1;
    }
    return 0;
}

/* The copy inside a transaction ended as asked. TXN_OPEN leaves it open
 * and ends the process at once, as a kill -9 would after the produce. */
static int copy_in_txn(const char *bootstrap, const char *to, const kit_msg *m, const char *id,
                       txn_end end)
{
    char conf[300];
    rd_kafka_t *p;
    int rc;

    snprintf(conf, sizeof(conf), "transactional.id=%s", id);
    p = kit_producer(bootstrap, conf);
    if (p == NULL)
        return -1;
    rc = txn_check(rd_kafka_init_transactions(p, 30000), "init_transactions");
    if (rc == 0)
        rc = txn_check(rd_kafka_begin_transaction(p), "begin_transaction");
    if (rc == 0)
        rc = produce_copy(p, to, m);
    if (rc == 0 && kit_flush(p, 30000) != 0) {
        fprintf(stderr, "ow-kit: the copy was not delivered\n");
        rc = -1;
    }
    if (rc == 0 && end == TXN_OPEN) {
        fflush(NULL);
        _exit(0);
    }
    if (rc == 0 && end == TXN_COMMIT)
        rc = txn_check(rd_kafka_commit_transaction(p, 30000), "commit_transaction");
    if (rc == 0 && end == TXN_ABORT)
        rc = txn_check(rd_kafka_abort_transaction(p, 30000), "abort_transaction");
    rd_kafka_destroy(p);
    return rc;
}

static int cmd_copy(int argc, char **argv)
{
    const char *to = argv[3], *id = NULL;
    txn_end end = TXN_NONE;
    kit_msgs one = {0};
    int rc;

    for (int i = 6; i < argc; i++) {
        if (strcmp(argv[i], "--to") == 0 && i + 1 < argc)
            to = argv[++i];
        else if (strcmp(argv[i], "--txn") == 0 && i + 1 < argc)
            id = argv[++i];
        else if (strcmp(argv[i], "--commit") == 0)
            end = TXN_COMMIT;
        else if (strcmp(argv[i], "--abort") == 0)
            end = TXN_ABORT;
        else if (strcmp(argv[i], "--open") == 0)
            end = TXN_OPEN;
        else
            return usage();
    }
    if ((id == NULL) != (end == TXN_NONE))
        return usage();
    if (kit_read_one(argv[2], argv[3], (int32_t)strtol(argv[4], NULL, 10),
                     strtoll(argv[5], NULL, 10), &one) != 0) {
        fprintf(stderr, "ow-kit: no record at %s-%s offset %s\n", argv[3], argv[4], argv[5]);
        return 1;
    }
    if (id != NULL) {
        rc = copy_in_txn(argv[2], to, &one.v[0], id, end);
    } else {
        rd_kafka_t *p = kit_producer(argv[2], NULL);

        rc = p != NULL ? produce_copy(p, to, &one.v[0]) : -1;
        if (rc == 0 && kit_flush(p, 30000) != 0)
            rc = -1;
        if (p != NULL)
            rd_kafka_destroy(p);
    }
    kit_msgs_free(&one);
    return rc == 0 ? 0 : 1;
}

static volatile sig_atomic_t watch_stop;

static void on_stop(int sig)
{
    (void)sig;
    watch_stop = 1;
}

static long long wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    FILE *f;
    const char *topic;
} lso_watch;

/* librdkafka's statistics: per partition, the high watermark and last
 * stable offset of the latest fetch response, one consistent pair. */
static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    lso_watch *w = opaque;
    json_t *root = json_loadb(json, len, 0, NULL);
    json_t *parts =
        json_object_get(json_object_get(json_object_get(root, "topics"), w->topic), "partitions");
    int n = 0;

    (void)rk;
    for (;; n++) {
        char key[12];

        snprintf(key, sizeof(key), "%d", n);
        if (json_object_get(parts, key) == NULL)
            break;
    }
    if (n > 0) {
        fprintf(w->f, "%lld", wall_ms());
        for (int p = 0; p < n; p++) {
            char key[12];
            json_t *pj;

            snprintf(key, sizeof(key), "%d", p);
            pj = json_object_get(parts, key);
            fprintf(w->f, " %d:%lld:%lld", p,
                    (long long)json_integer_value(json_object_get(pj, "ls_offset")),
                    (long long)json_integer_value(json_object_get(pj, "hi_offset")));
        }
        fputc('\n', w->f);
        fflush(w->f);
    }
    json_decref(root);
    return 0;
}

/* A read_committed consumer at the end of every partition of topic:
 * each fetch response carries the partition's high watermark and last
 * stable offset, and the statistics report them every interval. */
static rd_kafka_t *lso_consumer(const char *bootstrap, const char *topic, long interval,
                                lso_watch *w)
{
    char errstr[256], iv[24];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *l;
    int n;

    snprintf(iv, sizeof(iv), "%ld", interval);
    rd_kafka_conf_set(c, "bootstrap.servers", bootstrap, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "group.id", "ow-kit-lso-watch", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "isolation.level", "read_committed", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "fetch.wait.max.ms", iv, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "statistics.interval.ms", iv, errstr, sizeof(errstr));
    rd_kafka_conf_set_stats_cb(c, on_stats);
    rd_kafka_conf_set_opaque(c, w);
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof(errstr));
    if (rk == NULL)
        return NULL;
    /* The statistics callback is served from the main queue: route it to
     * the consumer's, which the loop polls. */
    rd_kafka_poll_set_consumer(rk);
    n = kit_partition_count(rk, topic);
    for (int i = 0; i < 40 && n <= 0; i++) {
        usleep(250 * 1000);
        n = kit_partition_count(rk, topic);
    }
    l = rd_kafka_topic_partition_list_new(n > 0 ? n : 1);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_END;
    if (n <= 0 || rd_kafka_assign(rk, l) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        rk = NULL;
    }
    rd_kafka_topic_partition_list_destroy(l);
    return rk;
}

/* Samples the last stable offset and the high watermark of every
 * partition of topic (what a read_committed consumer is told). */
static int cmd_lso_watch(int argc, char **argv)
{
    long interval = 100, seconds = 0;
    lso_watch w = {NULL, argv[3]};
    rd_kafka_t *rk;
    long long until;

    for (int i = 5; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--interval-ms") == 0)
            interval = strtol(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = strtol(argv[i + 1], NULL, 10);
        else
            return usage();
    }
    if (interval < 10 || interval > 10000 || seconds < 0)
        return usage();
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    w.f = fopen(argv[4], "w");
    rk = w.f != NULL ? lso_consumer(argv[2], argv[3], interval, &w) : NULL;
    if (rk == NULL) {
        fprintf(stderr, "ow-kit: lso-watch: cannot watch %s into %s\n", argv[3], argv[4]);
        return 1;
    }
    until = seconds > 0 ? wall_ms() + seconds * 1000 : -1;
    while (!watch_stop && (until < 0 || wall_ms() < until)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 50);

        if (m != NULL)
            rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    fclose(w.f);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "create-topic") == 0)
        return kit_create_topic(argv[2], argv[3], atoi(argv[4])) == 0 ? 0 : 1;
    if (argc >= 4 && strcmp(argv[1], "produce") == 0)
        return cmd_produce(argc, argv);
    if (argc == 4 && strcmp(argv[1], "read") == 0)
        return cmd_read(argv);
    if (argc == 8 && strcmp(argv[1], "acl") == 0 &&
        (strcmp(argv[2], "add") == 0 || strcmp(argv[2], "delete") == 0))
        return kit_acl(argv[3], strcmp(argv[2], "add") == 0, argv[4], argv[5], argv[6], argv[7]) ==
                       0
                   ? 0
                   : 1;
    if (argc == 5 && strcmp(argv[1], "lag") == 0)
        return cmd_lag(argv);
    if (argc >= 5 && strcmp(argv[1], "gen") == 0)
        return cmd_gen(argc, argv);
    if (argc >= 6 && strcmp(argv[1], "copy") == 0)
        return cmd_copy(argc, argv);
    if (argc >= 5 && strcmp(argv[1], "lso-watch") == 0)
        return cmd_lso_watch(argc, argv);
    return usage();
}
