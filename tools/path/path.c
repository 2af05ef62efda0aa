/* The corpus and the worker's in-process path over it (see path.h). */
#include "path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "output.h"
#include "ow/config.h"
#include "ow/idgen.h"
#include "ow/log.h"
#include "ow/response.h"
#include "ow/store.h"

/* 2026-06-01T00:00:00Z. Ids come from a clock that never moves, so every
 * run draws the same ones (the generator counts on within a millisecond). */
#define PT_CLOCK_MS INT64_C(1780272000000)
/* Partitions the messages are spread over, as in the benchmark. */
#define PT_PARTITIONS 6

#define FNV_OFFSET UINT64_C(14695981039346656037)
#define FNV_PRIME UINT64_C(1099511628211)

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* --- The corpus ------------------------------------------------------------ */

void pt_corpus_defaults(pt_corpus_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->seed = 20261130;
    o->messages = 1000;
    o->pct_retry = 10;
    o->pct_reuse = 1;
    o->pct_clash = 1;
    o->pct_invalid = 5;
    o->items_min = 1;
    o->items_max = 20;
    o->items_mean = 5.0;
}

static char *dup_bytes(const char *p, size_t n)
{
    char *d = malloc(n + 1);

    if (d != NULL) {
        memcpy(d, p, n);
        d[n] = '\0';
    }
    return d;
}

/* A traceparent of the message's own trace, from its index: the same
 * corpus every time. */
static rd_kafka_headers_t *trace_headers(size_t i)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(1);
    char tp[96];

    snprintf(tp, sizeof(tp), "00-4bf92f3577b34da6a3ce%012zx-00f067aa%08zx-01",
             (i + 1) & 0xffffffffffffu, (i + 1) & 0xffffffffu);
    rd_kafka_header_add(h, "traceparent", -1, tp, -1);
    return h;
}

static int copy_msg(pt_msg *d, const kit_gen_msg *m)
{
    d->kind = m->kind;
    d->n_orders = m->n_orders;
    d->len = m->len;
    d->value = dup_bytes(m->value, m->len);
    if (m->has_key) {
        d->key_len = m->key_len;
        d->key = dup_bytes(m->key, m->key_len);
    }
    return d->value != NULL && (!m->has_key || d->key != NULL) ? 0 : -1;
}

int pt_corpus_make(const pt_corpus_opts *o, pt_corpus *c)
{
    kit_gen *g = kit_gen_new(o->seed, o->pct_retry, o->pct_reuse, o->pct_clash, o->pct_invalid,
                             o->items_max, "bench");
    int rc = -1;

    memset(c, 0, sizeof(*c));
    if (g == NULL || kit_gen_set_items(g, o->items_min, o->items_max, o->items_mean) != 0)
        goto out;
    c->v = calloc(o->messages > 0 ? o->messages : 1, sizeof(*c->v));
    if (c->v == NULL)
        goto out;
    for (size_t i = 0; i < o->messages; i++) {
        const kit_gen_msg *m = kit_gen_next(g);

        c->n++;
        if (copy_msg(&c->v[i], m) != 0)
            goto out;
        if (o->traceparent)
            c->v[i].headers = trace_headers(i);
        c->kinds[m->kind]++;
        c->orders += (size_t)m->n_orders;
    }
    rc = 0;
out:
    kit_gen_free(g);
    if (rc != 0)
        pt_corpus_free(c);
    return rc;
}

void pt_corpus_free(pt_corpus *c)
{
    for (size_t i = 0; c->v != NULL && i < c->n; i++) {
        free(c->v[i].key);
        free(c->v[i].value);
        if (c->v[i].headers != NULL)
            rd_kafka_headers_destroy(c->v[i].headers);
    }
    free(c->v);
    memset(c, 0, sizeof(*c));
}

uint64_t pt_corpus_checksum(const pt_corpus *c)
{
    uint64_t h = FNV_OFFSET;

    for (size_t i = 0; i < c->n; i++) {
        const pt_msg *m = &c->v[i];
        unsigned char kind = (unsigned char)m->kind, has_key = m->key != NULL;

        h = fnv(h, &kind, 1);
        h = fnv(h, &has_key, 1);
        h = fnv(h, m->key != NULL ? m->key : "", m->key_len);
        h = fnv(h, m->value, m->len);
        if (m->headers != NULL) {
            const void *tp = NULL;
            size_t n = 0;

            if (rd_kafka_header_get_last(m->headers, "traceparent", &tp, &n) == 0)
                h = fnv(h, tp, n);
        }
    }
    return h;
}

/* --- The path ---------------------------------------------------------------- */

typedef struct {
    ow_job_maker maker; /* makes the jobs, as the poll thread's does */
    ow_config cfg;
    ow_output out;
    ow_idgen ids;
    ow_order_ref *refs; /* reused from message to message, as the store's scratch is */
    size_t refs_cap;
    pt_stats *st;
    int sum; /* fold this message's outputs into the checksum */
} pt_ctx;

static int64_t fixed_clock(void)
{
    return PT_CLOCK_MS;
}

/* A new batch: its orders' ids and numbers, then its 201 body. */
static int created(pt_ctx *x, ow_job *job, const ow_response_ctx *ctx)
{
    size_t n = job->req.n_orders;

    if (ow_grow((void **)&x->refs, &x->refs_cap, n, sizeof(*x->refs)) != OW_OK)
        return OW_ENOMEM;
    for (size_t j = 0; j < n; j++) {
        x->refs[j].order_id = ow_idgen_next(&x->ids);
        ow_order_no_format(x->refs[j].order_id, x->refs[j].order_no);
        x->refs[j].existing = 0;
    }
    return ow_response_created(ctx, &job->req, x->refs, &job->item.body);
}

/* The body the deciding transaction would give a valid message of this
 * kind (src/store/store_orders.c, src/store/store_decide.c). */
static int decide_body(pt_ctx *x, ow_job *job, kit_kind kind)
{
    static const ow_conflict clash = {0, OW_DIFF_AMOUNT}; /* the generator's clash */
    ow_store_item *it = &job->item;
    ow_response_ctx ctx;

    /* What ow_store_item_ctx gives the store (private to it). */
    ctx.user_id = job->req.user_id;
    ctx.key = it->key;
    ctx.key_len = it->key_len;
    ctx.digest_hex = it->digest_hex;
    if (kind == KIT_RETRY) {
        it->replayed = 1; /* the stored bytes, read by the database */
        return OW_OK;
    }
    x->st->bodies_built++;
    if (kind == KIT_REUSE)
        return ow_response_key_reused(&ctx, &it->body);
    it->request_id = ow_idgen_next(&x->ids);
    if (kind == KIT_CLASH)
        return ow_response_order_conflict(&ctx, &job->req, &clash, 1, &it->body);
    return created(x, job, &ctx);
}

static void fold_headers(pt_ctx *x, const rd_kafka_headers_t *h)
{
    const char *name;
    const void *value;
    size_t size;

    for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &value, &size) == 0; i++) {
        x->st->checksum = fnv(x->st->checksum, name, strlen(name) + 1);
        x->st->checksum = fnv(x->st->checksum, value, size);
    }
}

/* Headers are built as the output stage builds them, then dropped where
 * the producer would take them. */
static void headers(pt_ctx *x, rd_kafka_headers_t *h)
{
    x->st->headers++;
    if (x->sum)
        fold_headers(x, h);
    rd_kafka_headers_destroy(h);
}

static void fold_body(pt_ctx *x, const ow_job *job, const ow_buf *body)
{
    unsigned char valid = (unsigned char)job->valid;

    x->st->checksum = fnv(x->st->checksum, &valid, 1);
    if (job->valid)
        x->st->checksum = fnv(x->st->checksum, job->item.digest_hex, OW_DIGEST_HEX_LEN);
    x->st->checksum = fnv(x->st->checksum, body->data, body->len);
}

static int decided(pt_ctx *x, ow_job *job, kit_kind kind)
{
    int rc = decide_body(x, job, kind);

    if (rc != OW_OK)
        return rc;
    x->st->valid++;
    if (x->sum)
        fold_body(x, job, &job->item.body);
    headers(x, ow_output_result_headers(&x->out, job, job->item.replayed));
    return OW_OK;
}

/* An invalid message: its 400 result (under a key, when it has one) and
 * its dead-letter copy. */
static void invalid(pt_ctx *x, ow_job *job)
{
    x->st->invalid++;
    x->st->bodies_built++;
    if (x->sum) {
        fold_body(x, job, &job->invalid_body);
        x->st->checksum = fnv(x->st->checksum, job->raw, job->raw_len);
    }
    if (job->key_len > 0)
        headers(x, ow_output_result_headers(&x->out, job, 0));
    headers(x, ow_output_dead_letter_headers(&x->out, job));
}

static int one(pt_ctx *x, const pt_msg *m, size_t i)
{
    ow_job_input in = {.partition = (int32_t)(i % PT_PARTITIONS),
                       .offset = (int64_t)(i / PT_PARTITIONS),
                       .timestamp_ms = PT_CLOCK_MS,
                       .key = m->key,
                       .key_len = m->key_len,
                       .value = m->value,
                       .len = m->len,
                       .headers = m->headers};
    ow_job *job = ow_job_from_input(&x->maker, &in);
    int rc = OW_OK;

    if (job == NULL)
        return OW_ENOMEM;
    if (job->valid)
        rc = decided(x, job, m->kind);
    else
        invalid(x, job);
    ow_job_free(job);
    x->st->messages++;
    return rc;
}

static int ctx_init(pt_ctx *x, pt_stats *st)
{
    ow_job_limits lim;
    ow_error err;

    memset(x, 0, sizeof(*x));
    memset(st, 0, sizeof(*st));
    st->checksum = FNV_OFFSET;
    x->st = st;
    if (ow_config_init(&x->cfg, &err) != OW_OK)
        return -1;
    lim.request.max_bytes = (size_t)x->cfg.request_max_bytes;
    lim.request.max_orders = (size_t)x->cfg.request_max_orders;
    /* librdkafka's default message.max.bytes, as the output stage computes it. */
    lim.output_max = 1000000 - OW_OUTPUT_RESERVE;
    ow_job_maker_init(&x->maker, &lim);
    /* As the worker's maker, named; span ids from a fixed seed, so that
     * every run gives the same outputs. */
    x->maker.ctx = (ow_job_context){x->cfg.topic_input, x->cfg.kafka_group_id, 0};
    x->maker.trace_rng = PT_CLOCK_MS;
    x->out.cfg = &x->cfg;
    ow_idgen_init(&x->ids, 1, fixed_clock);
    /* The worker logs a rejected or reused key at warn: log I/O is not part
     * of the path, and a time stamp would make the count vary. */
    ow_log_set_level(OW_LOG_ERROR);
    return 0;
}

int pt_run(const pt_corpus *c, int rounds, pt_stats *st)
{
    pt_ctx x;
    int rc = ctx_init(&x, st);

    for (int r = 0; rc == 0 && r < rounds; r++) {
        x.sum = r == 0;
        for (size_t i = 0; rc == 0 && i < c->n; i++)
            rc = one(&x, &c->v[i], i) == OW_OK ? 0 : -1;
    }
    free(x.refs);
    ow_job_maker_cleanup(&x.maker);
    ow_config_cleanup(&x.cfg);
    return rc;
}

int pt_per_message(uint64_t ir1, uint64_t n1, uint64_t ir2, uint64_t n2, uint64_t *out)
{
    uint64_t dn, dir;

    if (n2 <= n1 || ir2 < ir1)
        return -1;
    dn = n2 - n1;
    dir = ir2 - ir1;
    *out = dir / dn + (dir % dn >= dn - dir % dn ? 1 : 0);
    return 0;
}
