/* A deterministic mix of order-batch messages with known kinds. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"

typedef struct {
    char key[96];
    char *value;
    size_t len;
    int64_t user_id;
    char first_ext[48];
    int64_t first_cents;
    int n_orders;
} past;

struct kit_gen {
    uint64_t rng;
    int pct[KIT_KIND_COUNT];
    int items_max;
    int items_min;     /* with items_cdf: the skewed distribution */
    double *items_cdf; /* P(n <= items_min + i), NULL: uniform 1..items_max */
    size_t n_cdf;
    char prefix[48];
    uint64_t counter;
    int random_keys;
    past *hist;
    size_t n_hist;
    size_t cap_hist;
    kit_gen_msg cur;
    char *buf;
    size_t buf_cap;
    unsigned invalid_variant;
};

static uint64_t next_rand(kit_gen *g)
{
    uint64_t x = g->rng;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g->rng = x;
    return x * 2685821657736338717ULL;
}

static unsigned below(kit_gen *g, unsigned n)
{
    return (unsigned)(next_rand(g) % n);
}

kit_gen *kit_gen_new(uint64_t seed, int pct_retry, int pct_reuse, int pct_clash, int pct_invalid,
                     int items_max, const char *key_prefix)
{
    kit_gen *g = calloc(1, sizeof(*g));

    g->rng = seed != 0 ? seed : 88172645463325252ULL;
    g->pct[KIT_RETRY] = pct_retry;
    g->pct[KIT_REUSE] = pct_reuse;
    g->pct[KIT_CLASH] = pct_clash;
    g->pct[KIT_INVALID] = pct_invalid;
    g->items_max = items_max < 1 ? 1 : items_max;
    snprintf(g->prefix, sizeof(g->prefix), "%s", key_prefix);
    g->buf_cap = 1 << 16;
    g->buf = malloc(g->buf_cap);
    return g;
}

void kit_gen_set_numbering(kit_gen *g, uint64_t first, int random_keys)
{
    g->counter = first;
    g->random_keys = random_keys;
}

/* splitmix64's finaliser: a bijection, so distinct numbers give distinct keys. */
static uint64_t mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void kit_gen_free(kit_gen *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->n_hist; i++)
        free(g->hist[i].value);
    free(g->hist);
    free(g->buf);
    free(g->items_cdf);
    free(g);
}

static void put(kit_gen *g, size_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void put(kit_gen *g, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int w;

    for (;;) {
        va_start(ap, fmt);
        w = vsnprintf(g->buf + *n, g->buf_cap - *n, fmt, ap);
        va_end(ap);
        if (w >= 0 && *n + (size_t)w < g->buf_cap)
            break;
        g->buf_cap *= 2;
        g->buf = realloc(g->buf, g->buf_cap);
    }
    *n += (size_t)w;
}

/* Mean of the truncated geometric distribution P(k) ~ q^k, k = 0..span. */
static double geometric_mean(double q, int span)
{
    double w = 1.0, sum = 0.0, acc = 0.0;

    for (int k = 0; k <= span; k++) {
        sum += w;
        acc += w * k;
        w *= q;
    }
    return acc / sum;
}

int kit_gen_set_items(kit_gen *g, int min, int max, double mean)
{
    int span = max - min;
    double lo = -30.0, hi = 30.0, q, w = 1.0, sum = 0.0, acc = 0.0;
    double *cdf;

    if (min < 1 || max < min || max > 100000 || (mean != 0.0 && (mean < min || mean > max)))
        return -1;
    cdf = calloc((size_t)span + 1, sizeof(*cdf));
    if (cdf == NULL)
        return -1;
    /* The mean grows with q: bisect log(q) until it matches (0 = uniform). */
    for (int i = 0; i < 200 && mean != 0.0; i++) {
        double mid = (lo + hi) / 2;

        if (geometric_mean(exp(mid), span) < mean - min)
            lo = mid;
        else
            hi = mid;
    }
    q = mean != 0.0 ? exp((lo + hi) / 2) : 1.0;
    for (int k = 0; k <= span; k++) {
        sum += w;
        w *= q;
    }
    w = 1.0;
    for (int k = 0; k <= span; k++) {
        acc += w / sum;
        cdf[k] = acc;
        w *= q;
    }
    cdf[span] = 1.0;
    free(g->items_cdf);
    g->items_cdf = cdf;
    g->n_cdf = (size_t)span + 1;
    g->items_min = min;
    g->items_max = max;
    return 0;
}

/* Orders in a new batch: uniform 1..items_max, or from the table that
 * kit_gen_set_items built (one random draw either way). */
static int draw_items(kit_gen *g)
{
    double u;
    size_t lo = 0, hi;

    if (g->items_cdf == NULL)
        return 1 + (int)below(g, (unsigned)g->items_max);
    u = (double)(next_rand(g) >> 11) / (double)(UINT64_C(1) << 53);
    hi = g->n_cdf - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (g->items_cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return g->items_min + (int)lo;
}

static kit_kind pick_kind(kit_gen *g)
{
    unsigned r = below(g, 100);
    int acc = 0;

    if (g->n_hist == 0)
        return KIT_NEW;
    for (int k = KIT_RETRY; k < KIT_KIND_COUNT; k++) {
        acc += g->pct[k];
        if ((int)r < acc)
            return (kit_kind)k;
    }
    return KIT_NEW;
}

/* A batch of n orders numbered from tag; returns the JSON length. */
static size_t batch_json(kit_gen *g, int64_t user, const char *tag, int n, const char *first_ext,
                         int64_t first_cents, int64_t *cents0)
{
    size_t len = 0;

    put(g, &len, "{\"user_id\":%lld,\"orders\":[", (long long)user);
    for (int i = 0; i < n; i++) {
        int64_t cents = 1 + (int64_t)below(g, 99999);
        char ext[64];

        if (i == 0 && first_ext != NULL) {
            snprintf(ext, sizeof(ext), "%s", first_ext);
            cents = first_cents;
        } else {
            snprintf(ext, sizeof(ext), "%s-%d", tag, i);
        }
        if (i == 0 && cents0 != NULL)
            *cents0 = cents;
        put(g, &len, "%s{\"external_order_no\":\"%s\",\"amount\":\"%lld.%02lld\"", i ? "," : "",
            ext, (long long)(cents / 100), (long long)(cents % 100));
        if (below(g, 2))
            put(g, &len, ",\"product_id\":%u", 1 + below(g, 5000));
        if (below(g, 4) == 0)
            put(g, &len, ",\"quantity\":%u", 1 + below(g, 9));
        put(g, &len, "}");
    }
    put(g, &len, "]}");
    return len;
}

static void remember(kit_gen *g, int64_t cents0)
{
    past *p;

    if (g->n_hist == g->cap_hist) {
        g->cap_hist = g->cap_hist ? g->cap_hist * 2 : 1024;
        g->hist = realloc(g->hist, g->cap_hist * sizeof(*g->hist));
    }
    p = &g->hist[g->n_hist++];
    snprintf(p->key, sizeof(p->key), "%s", g->cur.key);
    p->value = malloc(g->cur.len);
    memcpy(p->value, g->cur.value, g->cur.len);
    p->len = g->cur.len;
    p->user_id = g->cur.user_id;
    snprintf(p->first_ext, sizeof(p->first_ext), "N%llu-0", (unsigned long long)g->counter);
    p->first_cents = cents0;
    p->n_orders = g->cur.n_orders;
}

/* Half the time a recent message (an immediate retry), else any earlier one. */
static const past *pick_past(kit_gen *g)
{
    size_t recent = g->n_hist < 10 ? g->n_hist : 10;

    if (below(g, 2))
        return &g->hist[g->n_hist - 1 - below(g, (unsigned)recent)];
    return &g->hist[below(g, (unsigned)g->n_hist)];
}

static void make_invalid(kit_gen *g, size_t *len)
{
    static const char *const values[] = {
        "not json",
        "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"X\",\"amount\":\"1.001\"}]}",
        "{\"orders\":[{\"external_order_no\":\"X\",\"amount\":1}]}",
        "{\"user_id\":1,\"orders\":[]}",
        "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"X\",\"amount\":1}",
        "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"X\",\"amount\":1}]}",
        "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"X\",\"amount\":1}]}",
    };
    unsigned v = g->invalid_variant++ % 7;

    *len = 0;
    put(g, len, "%s", values[v]);
    /* Variants 5 and 6 carry a valid value under a bad or missing key. */
    if (v == 5)
        snprintf(g->cur.key, sizeof(g->cur.key), "bad key %llu", (unsigned long long)g->counter);
    if (v == 6)
        g->cur.has_key = 0;
}

const kit_gen_msg *kit_gen_next(kit_gen *g)
{
    kit_gen_msg *m = &g->cur;
    const past *p = NULL;
    char tag[64];
    size_t len = 0;
    int64_t cents0 = 0;

    g->counter++;
    memset(m, 0, sizeof(*m));
    m->kind = pick_kind(g);
    m->has_key = 1;
    switch (m->kind) {
    case KIT_NEW:
        m->user_id = 1 + below(g, 1000);
        m->n_orders = draw_items(g);
        if (g->random_keys)
            snprintf(m->key, sizeof(m->key), "%s-%016llx", g->prefix,
                     (unsigned long long)mix64(g->counter));
        else
            snprintf(m->key, sizeof(m->key), "%s-%llu", g->prefix, (unsigned long long)g->counter);
        snprintf(tag, sizeof(tag), "N%llu", (unsigned long long)g->counter);
        len = batch_json(g, m->user_id, tag, m->n_orders, NULL, 0, &cents0);
        break;
    case KIT_RETRY:
        p = pick_past(g);
        snprintf(m->key, sizeof(m->key), "%s", p->key);
        m->user_id = p->user_id;
        m->n_orders = p->n_orders;
        len = p->len;
        if (len + 1 > g->buf_cap) {
            g->buf_cap = len + 1;
            g->buf = realloc(g->buf, g->buf_cap);
        }
        memcpy(g->buf, p->value, len);
        break;
    case KIT_REUSE:
        p = pick_past(g);
        snprintf(m->key, sizeof(m->key), "%s", p->key);
        m->user_id = p->user_id;
        snprintf(tag, sizeof(tag), "U%llu", (unsigned long long)g->counter);
        m->n_orders = 1;
        len = batch_json(g, m->user_id, tag, 1, NULL, 0, NULL);
        break;
    case KIT_CLASH:
        p = pick_past(g);
        m->user_id = p->user_id;
        snprintf(m->key, sizeof(m->key), "%s-%llu", g->prefix, (unsigned long long)g->counter);
        snprintf(tag, sizeof(tag), "C%llu", (unsigned long long)g->counter);
        m->n_orders = 2;
        len = batch_json(g, m->user_id, tag, 2, p->first_ext, p->first_cents + 1, NULL);
        break;
    default:
        snprintf(m->key, sizeof(m->key), "%s-%llu", g->prefix, (unsigned long long)g->counter);
        make_invalid(g, &len);
        break;
    }
    m->key_len = m->has_key ? strlen(m->key) : 0;
    m->value = g->buf;
    m->len = len;
    if (m->kind == KIT_NEW)
        remember(g, cents0);
    return m;
}
