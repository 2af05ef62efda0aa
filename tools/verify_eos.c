#include "verify_eos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- The timeline ------------------------------------------------------ */

static int timeline_grow(eos_timeline *tl, size_t *cap)
{
    size_t c = *cap ? *cap * 2 : 1024;
    long long *t = realloc(tl->t, c * sizeof(*t));
    int64_t *l, *h;

    if (t == NULL)
        return -1;
    tl->t = t;
    l = realloc(tl->lso, c * (size_t)tl->parts * sizeof(*l));
    if (l == NULL)
        return -1;
    tl->lso = l;
    h = realloc(tl->hw, c * (size_t)tl->parts * sizeof(*h));
    if (h == NULL)
        return -1;
    tl->hw = h;
    *cap = c;
    return 0;
}

/* Parses "WALL_MS P:LSO:HW ..." into sample i; 0, or -1 for another shape. */
static int timeline_line(eos_timeline *tl, char *line, size_t i)
{
    char *p = line, *end;
    int k = 0;

    tl->t[i] = strtoll(p, &end, 10);
    if (end == p)
        return -1;
    for (p = end; k < tl->parts; k++) {
        long part = strtol(p, &end, 10);
        long long lso, hw;

        if (end == p || *end != ':' || part != k)
            return -1;
        lso = strtoll(end + 1, &p, 10);
        if (*p != ':')
            return -1;
        hw = strtoll(p + 1, &end, 10);
        p = end;
        tl->lso[i * (size_t)tl->parts + (size_t)k] = lso;
        tl->hw[i * (size_t)tl->parts + (size_t)k] = hw;
    }
    return 0;
}

/* The partition count of a line: its "P:LSO:HW" fields. */
static int fields(const char *line)
{
    int n = 0;

    for (const char *p = strchr(line, ' '); p != NULL; p = strchr(p + 1, ' '))
        n += p[1] >= '0' && p[1] <= '9';
    return n;
}

int eos_timeline_load(const char *path, eos_timeline *tl)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;

    memset(tl, 0, sizeof(*tl));
    if (f == NULL) {
        fprintf(stderr, "verify: cannot read the timeline %s\n", path);
        return -1;
    }
    while (rc == 0 && getline(&line, &len, f) > 0) {
        if (tl->parts == 0)
            tl->parts = fields(line);
        if (tl->parts <= 0 || tl->parts > EOS_MAX_PARTS) {
            rc = -1;
            break;
        }
        if (tl->n == cap && timeline_grow(tl, &cap) != 0)
            rc = -1;
        else if (timeline_line(tl, line, tl->n) == 0)
            tl->n++;
    }
    free(line);
    fclose(f);
    if (rc != 0) {
        fprintf(stderr, "verify: %s is not a timeline of at most %d partitions\n", path,
                EOS_MAX_PARTS);
        eos_timeline_free(tl);
    }
    return rc;
}

void eos_timeline_free(eos_timeline *tl)
{
    free(tl->t);
    free(tl->lso);
    free(tl->hw);
    memset(tl, 0, sizeof(*tl));
}

/* --- Reading what is settled ------------------------------------------- */

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Records past the LSO over every partition, or -1 if one did not answer. */
static long long behind_lso(rd_kafka_t *lso, rd_kafka_t *hw, const char *topic, int n)
{
    int64_t l[EOS_MAX_PARTS], h[EOS_MAX_PARTS];
    long long behind = 0;

    kit_query_ends(lso, topic, n, 5000, l);
    kit_query_ends(hw, topic, n, 5000, h);
    for (int p = 0; p < n; p++) {
        if (l[p] < 0 || h[p] < 0)
            return -1;
        behind += h[p] - l[p];
    }
    return behind;
}

long long eos_settle(const char *bootstrap, const char *topic, int timeout_ms, long long *waited_ms)
{
    rd_kafka_t *lso = kit_offsets_client(bootstrap, KIT_READ_COMMITTED);
    rd_kafka_t *hw = kit_offsets_client(bootstrap, KIT_READ_UNCOMMITTED);
    long long t0 = now_ms(), behind = -1;
    int n = lso != NULL ? kit_partition_count(lso, topic) : -1;

    while (n > 0 && n <= EOS_MAX_PARTS && hw != NULL) {
        struct timespec ts = {0, 500 * 1000000L};

        behind = behind_lso(lso, hw, topic, n);
        if (behind == 0 || now_ms() - t0 >= timeout_ms)
            break;
        nanosleep(&ts, NULL);
    }
    *waited_ms = now_ms() - t0;
    if (lso != NULL)
        rd_kafka_destroy(lso);
    if (hw != NULL)
        rd_kafka_destroy(hw);
    return behind;
}

/* --- Aborted records ---------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* (partition, offset) of every record, sorted; NULL when memory runs out. */
static uint64_t *positions(const kit_msgs *m)
{
    uint64_t *v = malloc((m->n + 1) * sizeof(*v));

    if (v == NULL)
        return NULL;
    for (size_t i = 0; i < m->n; i++)
        v[i] = (uint64_t)m->v[i].partition << 48 | (uint64_t)m->v[i].offset;
    qsort(v, m->n, sizeof(*v), cmp_u64);
    return v;
}

long long eos_aborted_records(const kit_msgs *committed, const kit_msgs *uncommitted,
                              long long *runs)
{
    uint64_t *c = positions(committed), *u = positions(uncommitted);
    long long aborted = 0;
    size_t j = 0;
    uint64_t last = UINT64_MAX;

    *runs = 0;
    if (c == NULL || u == NULL) {
        free(c);
        free(u);
        return -1;
    }
    for (size_t i = 0; i < uncommitted->n; i++) {
        while (j < committed->n && c[j] < u[i])
            j++;
        if (j < committed->n && c[j] == u[i])
            continue;
        aborted++;
        *runs += last == UINT64_MAX || u[i] != last + 1;
        last = u[i];
    }
    free(c);
    free(u);
    return aborted;
}

long long eos_logged_aborts(const char *const *logs, int n)
{
    long long count = 0;
    char *line = NULL;
    size_t len = 0;

    for (int i = 0; i < n; i++) {
        FILE *f = fopen(logs[i], "r");

        if (f == NULL) {
            fprintf(stderr, "verify: cannot read the worker log %s\n", logs[i]);
            count = -1;
            break;
        }
        while (getline(&line, &len, f) > 0)
            count += strstr(line, "txn_aborted") != NULL;
        fclose(f);
    }
    free(line);
    return count;
}

/* --- Faults ------------------------------------------------------------- */

#define MAX_FAULTS 4096

/* The times (and arguments) of the faults file's lines named name. */
static size_t faults_named(const char *path, const char *name, long long *t, long long *arg)
{
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    char line[256], n[32];
    size_t k = 0;

    if (f == NULL)
        return 0;
    while (k < MAX_FAULTS && fgets(line, sizeof(line), f) != NULL) {
        long long ms, a = 0;

        if (sscanf(line, "%31s %lld %lld", n, &ms, &a) >= 2 && strcmp(n, name) == 0) {
            t[k] = ms;
            arg[k] = a;
            k++;
        }
    }
    fclose(f);
    return k;
}

/* --- Stalls ------------------------------------------------------------- */

typedef struct {
    long long from, to;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static void spans_add(spans *s, long long from, long long to)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 256;
        span *v = realloc(s->v, c * sizeof(*v));

        if (v == NULL)
            return;
        s->v = v;
        s->cap = c;
    }
    s->v[s->n].from = from;
    s->v[s->n].to = to;
    s->n++;
}

/* Partition p's stalls: from the first sample that shows the high
 * watermark past an LSO until the sample where that LSO moved. */
static void partition_stalls(const eos_timeline *tl, int p, spans *out)
{
    int64_t cur = -1;
    long long since = -1;

    for (size_t i = 0; i < tl->n; i++) {
        int64_t l = tl->lso[i * (size_t)tl->parts + (size_t)p];
        int64_t h = tl->hw[i * (size_t)tl->parts + (size_t)p];

        if (l < 0 || h < 0)
            continue;
        if (l != cur) {
            if (since >= 0)
                spans_add(out, since, tl->t[i]);
            cur = l;
            since = h > l ? tl->t[i] : -1;
        } else if (h > l && since < 0) {
            since = tl->t[i];
        } else if (h == l) {
            since = -1;
        }
    }
    if (since >= 0 && tl->n > 0)
        spans_add(out, since, tl->t[tl->n - 1]);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;

    return (x > y) - (x < y);
}

void eos_lso_stalls(const eos_timeline *tl, const char *faults, eos_stalls *out)
{
    static long long kt[MAX_FAULTS], karg[MAX_FAULTS], held[MAX_FAULTS];
    spans s = {0};
    size_t kills = faults_named(faults, "kill", kt, karg);

    memset(out, 0, sizeof(*out));
    out->kills = (int)kills;
    for (int p = 0; p < tl->parts; p++)
        partition_stalls(tl, p, &s);
    for (size_t i = 0; i < s.n; i++)
        if (s.v[i].to - s.v[i].from > out->max_ms)
            out->max_ms = s.v[i].to - s.v[i].from;
    for (size_t k = 0; k < kills; k++) {
        long long worst = -1;

        for (size_t i = 0; i < s.n; i++)
            if (s.v[i].from <= kt[k] && kt[k] < s.v[i].to && s.v[i].to - kt[k] > worst)
                worst = s.v[i].to - kt[k];
        if (worst >= 0)
            held[out->kills_held++] = worst;
    }
    qsort(held, (size_t)out->kills_held, sizeof(*held), cmp_ll);
    if (out->kills_held > 0) {
        out->after_kill_max_ms = held[out->kills_held - 1];
        out->after_kill_p50_ms = held[(out->kills_held - 1) / 2];
    }
    free(s.v);
}

/* --- Recovery from broker kills ----------------------------------------- */

/* The first time after t when partition p moved on: its LSO passed the
 * value it had at t, or (without a timeline) a result stamped after t;
 * -1 when it never did. */
static long long moved_after(const eos_timeline *tl, const kit_msgs *results, int p, long long t)
{
    long long first = -1;
    int64_t base = -1;

    if (tl != NULL && tl->n > 0) {
        for (size_t i = 0; i < tl->n; i++) {
            int64_t l = tl->lso[i * (size_t)tl->parts + (size_t)p];

            if (l < 0)
                continue;
            if (tl->t[i] <= t)
                base = l;
            else if (base >= 0 && l > base)
                return tl->t[i];
        }
        return -1;
    }
    for (size_t i = 0; i < results->n; i++) {
        const kit_msg *r = &results->v[i];

        if (r->partition == p && r->timestamp_ms > t && (first < 0 || r->timestamp_ms < first))
            first = r->timestamp_ms;
    }
    return first;
}

void eos_recovery(const eos_timeline *tl, const kit_msgs *results, const char *faults, char *out,
                  size_t outsz)
{
    static long long kt[MAX_FAULTS], node[MAX_FAULTS];
    size_t kills = faults_named(faults, "broker-kill", kt, node);
    int parts = tl != NULL && tl->n > 0 ? tl->parts : 0;
    size_t used = strlen(out);

    for (size_t i = 0; i < results->n; i++)
        if (tl == NULL && results->v[i].partition + 1 > parts)
            parts = results->v[i].partition + 1;
    for (size_t k = 0; k < kills; k++) {
        long long next = -1, all = -1;

        for (int p = 0; p < parts; p++) {
            long long m = moved_after(tl, results, p, kt[k]);

            if (m < 0)
                continue;
            if (next < 0 || m - kt[k] < next)
                next = m - kt[k];
            if (m - kt[k] > all)
                all = m - kt[k];
        }
        if (used < outsz)
            used += (size_t)snprintf(out + used, outsz - used, " node%lld:%lld/%lld", node[k], next,
                                     all);
    }
}
