/*
 * The results topic, read once at the end of a run: each result is matched
 * to its input through its source-partition / source-offset headers; the
 * first definitive result of an input gives its end-to-end latency (input
 * CreateTime, set by the load generator, to the result's LogAppendTime, set
 * by the broker as it appended the result; both clocks are this machine's)
 * and its place in the throughput window.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* The input a definitive result answers, through its source headers; 0,
 * or -1 for an interim result or one of no input of this run. */
static int input_of(const bm_topic *in, const rd_kafka_message_t *m, rd_kafka_headers_t *h,
                    int code, size_t *idx)
{
    int64_t part = header_int(h, "source-partition", -1);
    int64_t off = header_int(h, "source-offset", -1);

    if (code == BM_CODE_IN_PROGRESS || m->key == NULL || m->key_len == 0 || part < 0 ||
        part >= in->partitions || off < 0 || off >= in->ends[part] ||
        !header_is(h, "source-topic", in->name))
        return -1;
    *idx = in->by_offset[part][off];
    return 0;
}

static void on_result(scan *sc, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    size_t idx;
    int code;

    rd_kafka_message_headers(m, &h);
    code = classify(m, h);
    sc->r->results_total++;
    sc->r->codes[code]++;
    if (input_of(sc->in, m, h, code, &idx) != 0)
        return;
    if (sc->first_ts[idx] == 0 || ts < sc->first_ts[idx]) {
        sc->first_ts[idx] = ts;
        if (sc->r->capture)
            capture_body(sc->r, idx, m, code);
    }
}

static rd_kafka_t *reader_new(const bm_env *e)
{
    char group[96], errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_t *rk;

    snprintf(group, sizeof(group), "owb-%s-reader", e->run_id);
    rd_kafka_conf_set(c, "bootstrap.servers", e->bootstrap, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "group.id", group, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "enable.partition.eof", "true", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "isolation.level", "read_committed", errstr, sizeof(errstr));
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof(errstr));
    if (rk == NULL) {
        bm_log("results reader: %s", errstr);
        rd_kafka_conf_destroy(c);
    }
    return rk;
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

/* A partition is read when a message at its end - 1 arrives or the
 * consumer reaches its end: with transactions the last offsets can be
 * commit markers, which no message reports. */
static int read_topic(const bm_env *e, const char *topic, scan *sc)
{
    rd_kafka_t *rk = reader_new(e);
    char done[BM_MAX_PARTS] = {0};
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
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
            on_result(sc, m);
        if ((m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->offset + 1 >= ends[m->partition]) ||
            (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && m->offset >= ends[m->partition])) {
            remaining -= !done[m->partition];
            done[m->partition] = 1;
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
        int64_t at = sc->r->visible_ms != NULL ? sc->r->visible_ms[i] : sc->first_ts[i];

        if (at != 0 && ts >= from && ts < to)
            lat[n++] = at - ts;
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
        int64_t at = r->visible_ms != NULL ? r->visible_ms[i] : sc->first_ts[i];

        if (at != 0)
            fprintf(f, "%lld,%d,%lld,%lld\n", (long long)p->ts_ms, (int)p->partition,
                    (long long)p->offset, (long long)(at - p->ts_ms));
    }
    if (fclose(f) != 0)
        bm_log("%s: write failed", path);
}

static void latency(const bm_env *e, const scan *sc, bm_result *r)
{
    int64_t *lat = bm_xcalloc(sc->in->count + 1, sizeof(*lat));
    int64_t first = INT64_MAX, last = INT64_MIN;
    size_t n = latencies_between(sc, INT64_MIN, INT64_MAX, lat);

    for (size_t i = 0; r->visible_ms != NULL && i < sc->in->count; i++)
        r->visible_missed += sc->first_ts[i] != 0 && r->visible_ms[i] == 0;
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

/* --- The tail: when results become visible ---------------------------------------- */

/* A received result: which input it answers and when it arrived. The
 * input's index is looked up at the end: with --rate the input topic is
 * indexed only once it is produced. */
typedef struct {
    int32_t part;
    int64_t off;
    int64_t at_ms;
} tail_seen;

struct bm_tail {
    const bm_topic *in;
    rd_kafka_t *rk;
    pthread_t th;
    tail_seen *seen;
    size_t n, cap;
    int64_t last_ms; /* wall ms of the last message (atomic) */
    int stop;        /* atomic */
};

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tail_note(bm_tail *t, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    int64_t now = wall_ms(), part, off;

    __atomic_store_n(&t->last_ms, now, __ATOMIC_RELAXED);
    rd_kafka_message_headers(m, &h);
    part = header_int(h, "source-partition", -1);
    off = header_int(h, "source-offset", -1);
    if (classify(m, h) == BM_CODE_IN_PROGRESS || m->key == NULL || m->key_len == 0 || part < 0 ||
        part >= t->in->partitions || off < 0 || !header_is(h, "source-topic", t->in->name))
        return;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 4096;
        t->seen = realloc(t->seen, t->cap * sizeof(*t->seen));
        if (t->seen == NULL) {
            bm_log("tail: out of memory");
            exit(2);
        }
    }
    t->seen[t->n++] = (tail_seen){(int32_t)part, off, now};
}

static void *tail_main(void *arg)
{
    bm_tail *t = arg;

    while (!__atomic_load_n(&t->stop, __ATOMIC_RELAXED)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(t->rk, 100);

        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
            tail_note(t, m);
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

/* A read_committed consumer that asks for new data every 10 ms at most,
 * so that a result is noted about when it becomes visible. */
static rd_kafka_t *tail_client(const bm_env *e, const char *results, int partitions)
{
    char group[96], errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(partitions);
    rd_kafka_t *rk;

    snprintf(group, sizeof(group), "owb-%s-tail", e->run_id);
    rd_kafka_conf_set(c, "bootstrap.servers", e->bootstrap, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "group.id", group, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "isolation.level", "read_committed", errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "fetch.wait.max.ms", "10", errstr, sizeof(errstr));
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, errstr, sizeof(errstr));
    if (rk == NULL) {
        bm_log("tail: %s", errstr);
        rd_kafka_conf_destroy(c);
    }
    for (int p = 0; rk != NULL && p < partitions; p++)
        rd_kafka_topic_partition_list_add(l, results, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    if (rk != NULL && rd_kafka_assign(rk, l) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        rk = NULL;
    }
    rd_kafka_topic_partition_list_destroy(l);
    return rk;
}

bm_tail *bm_tail_start(const bm_env *e, const bm_topic *in, const char *results)
{
    bm_tail *t = bm_xcalloc(1, sizeof(*t));

    t->in = in;
    t->last_ms = wall_ms();
    t->rk = tail_client(e, results, in->partitions);
    if (t->rk == NULL || pthread_create(&t->th, NULL, tail_main, t) != 0) {
        if (t->rk != NULL)
            rd_kafka_destroy(t->rk);
        free(t);
        return NULL;
    }
    return t;
}

int64_t *bm_tail_stop(bm_tail *t, int idle_ms, int max_ms)
{
    int64_t until = wall_ms() + max_ms;
    int64_t *v = bm_xcalloc(t->in->count + 1, sizeof(*v));

    while (wall_ms() < until &&
           wall_ms() - __atomic_load_n(&t->last_ms, __ATOMIC_RELAXED) < idle_ms)
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    __atomic_store_n(&t->stop, 1, __ATOMIC_RELAXED);
    pthread_join(t->th, NULL);
    rd_kafka_consumer_close(t->rk);
    rd_kafka_destroy(t->rk);
    for (size_t i = 0; i < t->n; i++) {
        const tail_seen *s = &t->seen[i];
        size_t idx;

        if (s->off >= t->in->ends[s->part])
            continue;
        idx = t->in->by_offset[s->part][s->off];
        if (v[idx] == 0 || s->at_ms < v[idx])
            v[idx] = s->at_ms;
    }
    free(t->seen);
    free(t);
    return v;
}
