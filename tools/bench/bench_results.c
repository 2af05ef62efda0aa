/*
 * The results topic, read once at the end of a run: each result is matched
 * to its input through its source-partition / source-offset headers; the
 * first definitive result of an input gives its end-to-end latency (input
 * CreateTime, set by the load generator, to the result's LogAppendTime, set
 * by the broker as it appended the result; both clocks are this machine's)
 * and its place in the throughput window.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "bench.h"
#include "ow/kafka.h"

#define READ_TIMEOUT_S 180
#define GAP_REPORT_MS 250

typedef struct {
    const bm_topic *in;
    int64_t *first_ts; /* per input: first definitive result, 0 = none */
    bm_result *r;
} scan;

static int64_t header_int(rd_kafka_headers_t *h, const char *name, int64_t dflt)
{
    size_t len = 0;
    const char *v = ow_kafka_headers_get(h, name, &len);
    char buf[32];

    if (v == NULL || len == 0 || len >= sizeof(buf))
        return dflt;
    memcpy(buf, v, len);
    buf[len] = '\0';
    return strtoll(buf, NULL, 10);
}

static int header_is(rd_kafka_headers_t *h, const char *name, const char *want)
{
    size_t len = 0;
    const char *v = ow_kafka_headers_get(h, name, &len);

    return v != NULL && len == strlen(want) && memcmp(v, want, len) == 0;
}

static const char *find(const char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);

    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(hay + i, needle, k) == 0)
            return hay + i;
    }
    return NULL;
}

/* The body starts {"status":N,"code":"NAME" (fixed field order). */
static int classify(const rd_kafka_message_t *m, rd_kafka_headers_t *h)
{
    static const struct {
        const char *code;
        int kind;
    } codes[] = {{"\"CREATED\"", BM_CODE_CREATED},
                 {"\"ORDER_ALREADY_EXISTS\"", BM_CODE_CONFLICT},
                 {"\"IDEMPOTENCY_KEY_REUSED\"", BM_CODE_REUSED},
                 {"\"INVALID_REQUEST\"", BM_CODE_INVALID},
                 {"\"REQUEST_IN_PROGRESS\"", BM_CODE_IN_PROGRESS}};
    const char *v = m->payload;
    size_t n = m->len < 80 ? m->len : 80;
    const char *code = v != NULL ? find(v, n, "\"code\":") : NULL;

    if (code == NULL)
        return BM_CODE_OTHER;
    code += 7;
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        size_t len = strlen(codes[i].code);

        if ((size_t)(v + m->len - code) >= len && memcmp(code, codes[i].code, len) == 0) {
            if (codes[i].kind != BM_CODE_IN_PROGRESS && header_is(h, "replayed", "true"))
                return BM_CODE_REPLAYED;
            return codes[i].kind;
        }
    }
    return BM_CODE_OTHER;
}

/* --replay: the body's SHA-256 stands for its bytes. */
static void capture_body(bm_result *r, size_t idx, const rd_kafka_message_t *m, int code)
{
    unsigned int len = 0;

    if (EVP_Digest(m->payload != NULL ? m->payload : "", m->len, r->body_sha[idx], &len,
                   EVP_sha256(), NULL) != 1)
        return;
    r->body_flags[idx] = (unsigned char)(BM_BODY_SEEN | (code << 2));
}

static void on_result(scan *sc, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    int64_t part, off, ts = rd_kafka_message_timestamp(m, NULL);
    size_t idx;
    int code;

    rd_kafka_message_headers(m, &h);
    code = classify(m, h);
    sc->r->results_total++;
    sc->r->codes[code]++;
    part = header_int(h, "source-partition", -1);
    off = header_int(h, "source-offset", -1);
    if (code == BM_CODE_IN_PROGRESS || m->key == NULL || m->key_len == 0 || part < 0 ||
        part >= sc->in->partitions || off < 0 || off >= sc->in->ends[part] ||
        !header_is(h, "source-topic", sc->in->name))
        return;
    idx = sc->in->by_offset[part][off];
    if (sc->first_ts[idx] == 0 || ts < sc->first_ts[idx]) {
        sc->first_ts[idx] = ts;
        if (sc->r->capture)
            capture_body(sc->r, idx, m, code);
    }
}

static rd_kafka_t *reader_new(const bm_env *e)
{
    char group[96];

    snprintf(group, sizeof(group), "owb-%s-reader", e->run_id);
    return bm_kafka_client(e, RD_KAFKA_CONSUMER, group);
}

/* Assigns every non-empty partition from the beginning; returns how many. */
static int assign_all(rd_kafka_t *rk, const char *topic, int partitions, int64_t *ends)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(partitions);
    int n = 0;

    for (int p = 0; p < partitions; p++) {
        int64_t lo = 0;

        ends[p] = 0;
        if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &ends[p], 10000) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
            n = -1;
            break;
        }
        if (ends[p] > lo) {
            rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
            n++;
        }
    }
    if (n > 0 && rd_kafka_assign(rk, l) != RD_KAFKA_RESP_ERR_NO_ERROR)
        n = -1;
    rd_kafka_topic_partition_list_destroy(l);
    return n;
}

static int read_topic(const bm_env *e, const char *topic, scan *sc)
{
    rd_kafka_t *rk = reader_new(e);
    int64_t ends[BM_MAX_PARTS];
    int remaining = rk != NULL ? assign_all(rk, topic, sc->in->partitions, ends) : -1;
    double deadline = bm_now() + READ_TIMEOUT_S;
    int rc = remaining >= 0 ? 0 : -1;

    while (rc == 0 && remaining > 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);

        if (bm_now() > deadline) {
            bm_log("%s: not read to its end within %d s", topic, READ_TIMEOUT_S);
            rc = -1;
        }
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            on_result(sc, m);
            remaining -= m->offset + 1 == ends[m->partition];
        }
        rd_kafka_message_destroy(m);
    }
    if (rk != NULL) {
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
    }
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static double percentile(const int64_t *v, size_t n, double pct)
{
    size_t rank = (size_t)(pct / 100.0 * (double)n + 0.999999);

    if (n == 0)
        return 0.0;
    return (double)v[rank == 0 ? 0 : rank - 1 < n ? rank - 1 : n - 1];
}

/* Latency of the inputs whose CreateTime lies in [from, to) (ms since the
 * epoch); sorts into lat (count entries) and returns how many there were. */
static size_t latencies_between(const scan *sc, int64_t from, int64_t to, int64_t *lat)
{
    size_t n = 0;

    for (size_t i = 0; i < sc->in->count; i++) {
        int64_t ts = sc->in->pos[i].ts_ms;

        if (sc->first_ts[i] != 0 && ts >= from && ts < to)
            lat[n++] = sc->first_ts[i] - ts;
    }
    qsort(lat, n, sizeof(*lat), cmp_i64);
    return n;
}

static void write_latency_csv(const bm_env *e, const scan *sc, const bm_result *r)
{
    char path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/latency-%s.csv", e->out_dir, r->name);
    f = fopen(path, "w");
    if (f == NULL) {
        bm_log("%s: cannot write", path);
        return;
    }
    fputs("input_create_ms,partition,offset,latency_ms\n", f);
    for (size_t i = 0; i < sc->in->count; i++) {
        const bm_pos *p = &sc->in->pos[i];

        if (sc->first_ts[i] != 0)
            fprintf(f, "%lld,%d,%lld,%lld\n", (long long)p->ts_ms, (int)p->partition,
                    (long long)p->offset, (long long)(sc->first_ts[i] - p->ts_ms));
    }
    if (fclose(f) != 0)
        bm_log("%s: write failed", path);
}

static void latency(const bm_env *e, const scan *sc, bm_result *r)
{
    int64_t *lat = bm_xcalloc(sc->in->count + 1, sizeof(*lat));
    int64_t first = INT64_MAX, last = INT64_MIN;
    size_t n = latencies_between(sc, INT64_MIN, INT64_MAX, lat);

    r->p50_ms = percentile(lat, n, 50);
    r->p95_ms = percentile(lat, n, 95);
    r->p99_ms = percentile(lat, n, 99);
    r->max_ms = n > 0 ? (double)lat[n - 1] : 0.0;
    for (size_t i = 0; i < sc->in->count; i++) {
        if (sc->first_ts[i] != 0 && sc->in->pos[i].ts_ms < first)
            first = sc->in->pos[i].ts_ms;
        if (sc->first_ts[i] != 0 && sc->in->pos[i].ts_ms > last)
            last = sc->in->pos[i].ts_ms;
    }
    if (e->warmup_s > 0 && n > 0) {
        n = latencies_between(sc, first + (int64_t)(e->warmup_s * 1000.0), INT64_MAX, lat);
        r->steady_n = n;
        r->steady_p50_ms = percentile(lat, n, 50);
        r->steady_p95_ms = percentile(lat, n, 95);
        r->steady_p99_ms = percentile(lat, n, 99);
        r->steady_p999_ms = percentile(lat, n, 99.9);
        for (int64_t t = first; t <= last && r->n_p99_by_5s < 64; t += 5000) {
            n = latencies_between(sc, t, t + 5000, lat);
            r->p99_by_5s[r->n_p99_by_5s++] = percentile(lat, n, 99);
        }
    }
    if (e->latency_csv)
        write_latency_csv(e, sc, r);
    free(lat);
}

/* Throughput between the first and the last result, and the longest pause. */
static void window(const scan *sc, bm_result *r)
{
    int64_t *ts = bm_xcalloc(sc->in->count, sizeof(*ts));
    size_t n = 0;

    for (size_t i = 0; i < sc->in->count; i++) {
        if (sc->first_ts[i] != 0) {
            ts[n++] = sc->first_ts[i];
            r->items_done += sc->in->data->v[i].n_orders;
        }
    }
    qsort(ts, n, sizeof(*ts), cmp_i64);
    r->done = n;
    for (size_t i = 1; i < n; i++) {
        double gap = (double)(ts[i] - ts[i - 1]);

        r->gaps_over_250ms += gap > GAP_REPORT_MS;
        if (gap > r->gap_ms) {
            r->gap_ms = gap;
            r->gap_at_s = (double)(ts[i - 1] - ts[0]) / 1000.0;
        }
    }
    if (n > 0) {
        r->first_result_wall = (double)ts[0] / 1000.0;
        r->last_result_wall = (double)ts[n - 1] / 1000.0;
        r->window_s = r->last_result_wall - r->first_result_wall;
    }
    if (n > 1 && r->window_s > 0) {
        r->batches_per_s = (double)(n - 1) / r->window_s;
        r->orders_per_s = (double)r->items_done * ((double)(n - 1) / (double)n) / r->window_s;
    }
    free(ts);
}

/* Inputs that must have a result and have none: every keyed input of a
 * complete run, the committed ones of a time-bounded run. */
static size_t lost(const scan *sc, const int64_t *committed, int complete)
{
    size_t n = 0;

    for (size_t i = 0; i < sc->in->count; i++) {
        const bm_pos *p = &sc->in->pos[i];

        sc->r->unkeyed += sc->in->data->v[i].key == NULL;
        if (sc->in->data->v[i].key != NULL && sc->first_ts[i] == 0 &&
            (complete || p->offset < committed[p->partition]))
            n++;
    }
    return n;
}

int bm_results_read(const bm_env *e, const bm_topic *in, const int64_t *committed, bm_result *r)
{
    scan sc = {in, bm_xcalloc(in->count, sizeof(int64_t)), r};
    int rc;

    if (r->capture) {
        r->body_sha = bm_xcalloc(in->count + 1, sizeof(*r->body_sha));
        r->body_flags = bm_xcalloc(in->count + 1, 1);
    }
    rc = read_topic(e, r->results, &sc);

    if (rc == 0) {
        latency(e, &sc, r);
        window(&sc, r);
        r->lost = lost(&sc, committed, r->complete);
    }
    free(sc.first_ts);
    return rc;
}
