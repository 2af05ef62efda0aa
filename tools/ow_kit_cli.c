/*
 * ow-kit: small Kafka utilities for the demo, the chaos run and the
 * benchmark scripts (not for production use).
 *
 *   ow-kit create-topic BOOTSTRAP TOPIC PARTITIONS
 *   ow-kit produce BOOTSTRAP TOPIC [--partition P] [--key K | --no-key]   (value on stdin)
 *   ow-kit read BOOTSTRAP TOPIC          one JSON object per message
 *   ow-kit lag BOOTSTRAP GROUP TOPIC     committed vs end offsets; exit 0 when caught up
 *   ow-kit acl add|delete BOOTSTRAP PRINCIPAL TYPE NAME OPERATION
 *                                        one LITERAL ALLOW ACL (TYPE topic, group, cluster)
 *   ow-kit gen BOOTSTRAP TOPIC N [--rate R] [--seed S] [--retry P] [--reuse P]
 *              [--clash P] [--invalid P] [--items MAX] [--prefix K] [--stop-file F]
 *                                        produce a deterministic mix (kit_gen); with
 *                                        --stop-file, stop early once F exists
 */
#include <jansson.h>
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
    rd_kafka_t *p;
    struct timespec t0, now;
    long counts[KIT_KIND_COUNT] = {0};
    int failed;

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
    p = kit_producer(argv[2], NULL);
    if (p == NULL)
        return 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        const kit_gen_msg *m;

        if (stop_file != NULL && i % 16 == 0 && access(stop_file, F_OK) == 0) {
            n = i;
            break;
        }
        m = kit_gen_next(g);

        counts[m->kind]++;
        if (kit_produce(p, argv[3], -1, m->has_key ? m->key : NULL, m->key_len, m->value, m->len) !=
            0)
            return 1;
        rd_kafka_poll(p, 0);
        while (rate > 0) {
            double el;

            clock_gettime(CLOCK_MONOTONIC, &now);
            el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
            if ((double)(i + 1) <= el * (double)rate)
                break;
            rd_kafka_poll(p, 1);
        }
    }
    failed = kit_flush(p, 120000);
    rd_kafka_destroy(p);
    kit_gen_free(g);
    fprintf(
        stderr,
        "gen: produced %ld (new %ld, retry %ld, reuse %ld, clash %ld, invalid %ld), %d failed\n", n,
        counts[KIT_NEW], counts[KIT_RETRY], counts[KIT_REUSE], counts[KIT_CLASH],
        counts[KIT_INVALID], failed);
    return failed == 0 ? 0 : 1;
}

static int usage(void)
{
    fputs(
        "usage: ow-kit create-topic BOOTSTRAP TOPIC PARTITIONS\n"
        "       ow-kit produce BOOTSTRAP TOPIC [--partition P] [--key K | --no-key] < value\n"
        "       ow-kit read BOOTSTRAP TOPIC\n"
        "       ow-kit lag BOOTSTRAP GROUP TOPIC\n"
        "       ow-kit acl add|delete BOOTSTRAP PRINCIPAL TYPE NAME OPERATION\n"
        "       ow-kit gen BOOTSTRAP TOPIC N [--rate R] [--seed S] [--retry P] [--reuse P]\n"
        "                  [--clash P] [--invalid P] [--items MAX] [--prefix K] [--stop-file F]\n",
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
    int64_t ends[256], committed[256];
    int n = kit_end_offsets(argv[2], argv[4], ends, 256);
    long long total = 0;

    if (n <= 0 || kit_committed(argv[2], argv[3], argv[4], n, committed) != 0)
        return 1;
    for (int p = 0; p < n; p++) {
        long long lag = ends[p] - (committed[p] < 0 ? 0 : committed[p]);

        printf("partition %d: committed %lld end %lld lag %lld\n", p, (long long)committed[p],
               (long long)ends[p], lag);
        total += lag;
    }
    printf("total lag %lld\n", total);
    return total == 0 ? 0 : 1;
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
    return usage();
}
