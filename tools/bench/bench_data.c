/* The data set (kit_gen) and the input topics it is produced to. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

/* --- Generation ------------------------------------------------------------ */

static void copy_msg(bm_msg *dst, const kit_gen_msg *m)
{
    dst->kind = m->kind;
    dst->n_orders = m->n_orders;
    dst->len = m->len;
    dst->value = bm_xcalloc(m->len + 1, 1);
    memcpy(dst->value, m->value, m->len);
    if (m->has_key) {
        dst->key_len = m->key_len;
        dst->key = bm_xcalloc(m->key_len + 1, 1);
        memcpy(dst->key, m->key, m->key_len);
    }
}

int bm_data_generate(const bm_gen_opts *o, bm_data *d)
{
    kit_gen *g = kit_gen_new(o->seed, o->pct_retry, o->pct_reuse, o->pct_clash, o->pct_invalid,
                             o->items_max, "bench");

    memset(d, 0, sizeof(*d));
    if (g == NULL || kit_gen_set_items(g, o->items_min, o->items_max, o->items_mean) != 0) {
        bm_log("cannot set up the generator (items %d..%d, mean %.2f)", o->items_min, o->items_max,
               o->items_mean);
        kit_gen_free(g);
        return -1;
    }
    kit_gen_set_numbering(g, o->first, o->random_keys);
    d->v = bm_xcalloc((size_t)o->n, sizeof(*d->v));
    for (long i = 0; i < o->n; i++) {
        const kit_gen_msg *m = kit_gen_next(g);

        copy_msg(&d->v[i], m);
        d->kinds[m->kind]++;
        d->items += m->n_orders;
        d->bytes += m->len;
    }
    d->n = (size_t)o->n;
    kit_gen_free(g);
    return 0;
}

void bm_data_free(bm_data *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].key);
        free(d->v[i].value);
    }
    free(d->v);
    memset(d, 0, sizeof(*d));
}

/* --- Topics ------------------------------------------------------------------ */

int bm_topic_init(bm_topic *t, const bm_env *e, const char *suffix, const bm_data *d, size_t count)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "owb-%s-%.40s-in", e->run_id, suffix);
    t->partitions = e->partitions;
    t->data = d;
    t->count = count < d->n ? count : d->n;
    t->pos = bm_xcalloc(t->count, sizeof(*t->pos));
    if (kit_create_topic(e->bootstrap, t->name, t->partitions) != 0) {
        bm_log("cannot create topic %s", t->name);
        return -1;
    }
    return 0;
}

void bm_topic_cleanup(bm_topic *t)
{
    free(t->pos);
    for (int p = 0; p < BM_MAX_PARTS; p++)
        free(t->by_offset[p]);
    memset(t, 0, sizeof(*t));
}

/* Delivery reports: remember where each message landed and when. */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    bm_topic *t = opaque;
    size_t i = (size_t)(uintptr_t)m->_private;

    (void)rk;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR || i == 0 || i > t->count) {
        t->failed++;
        return;
    }
    t->pos[i - 1].partition = m->partition;
    t->pos[i - 1].offset = m->offset;
    t->pos[i - 1].ts_ms = rd_kafka_message_timestamp(m, NULL);
    __atomic_add_fetch(&t->produced, 1, __ATOMIC_RELAXED);
}

static rd_kafka_t *producer_new(const bm_env *e, bm_topic *t)
{
    static const char *const settings[][2] = {
        {"enable.idempotence", "true"},
        {"linger.ms", "5"},
        {"queue.buffering.max.messages", "1000000"},
        {"queue.buffering.max.kbytes", "1048576"},
        {"log_level", "3"},
    };
    char errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_t *p;

    rd_kafka_conf_set(c, "bootstrap.servers", e->bootstrap, errstr, sizeof(errstr));
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        rd_kafka_conf_set(c, settings[i][0], settings[i][1], errstr, sizeof(errstr));
    rd_kafka_conf_set_opaque(c, t);
    rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
    p = rd_kafka_new(RD_KAFKA_PRODUCER, c, errstr, sizeof(errstr));
    if (p == NULL) {
        bm_log("producer: %s", errstr);
        rd_kafka_conf_destroy(c);
    }
    return p; /* c is owned by p when p != NULL */
}

static int produce_one(rd_kafka_t *p, bm_topic *t, size_t i)
{
    const bm_msg *m = &t->data->v[i];
    size_t key_len = m->key != NULL ? m->key_len : 0;

    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC(t->name), RD_KAFKA_V_KEY(m->key, key_len),
            RD_KAFKA_V_VALUE(m->value, m->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)(i + 1)), RD_KAFKA_V_END);

        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            bm_log("produce to %s: %s", t->name, rd_kafka_err2str(err));
            return -1;
        }
        rd_kafka_poll(p, 10);
    }
}

/* Holds message i back until its time at the given rate. */
static void pace(rd_kafka_t *p, double t0, size_t i, double rate)
{
    if (rate <= 0)
        return;
    for (;;) {
        double wait = t0 + (double)i / rate - bm_now();

        if (wait <= 0)
            return;
        rd_kafka_poll(p, wait > 0.005 ? 5 : 1);
    }
}

/* Offsets of a fresh topic from an idempotent producer are dense: index them. */
static int index_offsets(bm_topic *t)
{
    size_t counts[BM_MAX_PARTS] = {0};

    for (size_t i = 0; i < t->count; i++) {
        int32_t p = t->pos[i].partition;

        if (p < 0 || p >= t->partitions || p >= BM_MAX_PARTS) {
            bm_log("%s: message %zu in unexpected partition %d", t->name, i, (int)p);
            return -1;
        }
        counts[p]++;
    }
    for (int p = 0; p < t->partitions; p++) {
        t->by_offset[p] = bm_xcalloc(counts[p], sizeof(size_t));
        t->ends[p] = (int64_t)counts[p];
    }
    for (size_t i = 0; i < t->count; i++) {
        const bm_pos *ps = &t->pos[i];

        if (ps->offset < 0 || (size_t)ps->offset >= counts[ps->partition]) {
            bm_log("%s: offsets are not dense (partition %d offset %lld of %zu)", t->name,
                   (int)ps->partition, (long long)ps->offset, counts[ps->partition]);
            return -1;
        }
        t->by_offset[ps->partition][ps->offset] = i;
    }
    return 0;
}

int bm_topic_produce(bm_topic *t, const bm_env *e, double rate)
{
    rd_kafka_t *p = producer_new(e, t);
    double t0 = bm_now();
    int rc = 0;

    if (p == NULL)
        return -1;
    for (size_t i = 0; rc == 0 && i < t->count; i++) {
        if (*e->interrupted || __atomic_load_n(&t->stop, __ATOMIC_RELAXED)) {
            bm_log("%s: producing stopped after %zu messages", t->name, i);
            rc = -1;
            break;
        }
        pace(p, t0, i, rate);
        rc = produce_one(p, t, i);
        rd_kafka_poll(p, 0);
    }
    rd_kafka_flush(p, 120000);
    if (rc == 0 && (t->failed > 0 || t->produced != t->count)) {
        bm_log("%s: %zu of %zu messages acknowledged, %d failed", t->name, (size_t)t->produced,
               t->count, t->failed);
        rc = -1;
    }
    rd_kafka_destroy(p);
    return rc == 0 ? index_offsets(t) : -1;
}
