/* Turning a consumed message into a job: copy what is needed, read its
 * trace context, validate it, and either compute its digest or build its
 * 400 body. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "job.h"
#include "metrics.h"
#include "ow/digest.h"
#include "ow/log.h"
#include "ow/response.h"

static void describe_errors(ow_job *job, const ow_field_errors *errs)
{
    job->n_errors = errs->count + errs->omitted;
    if (errs->count > 0)
        snprintf(job->first_error, sizeof(job->first_error), "%s: %s", errs->items[0].field,
                 errs->items[0].message);
}

/* An invalid message keeps its original bytes for the dead-letter topic. */
static int make_invalid(ow_job *job, const ow_job_limits *lim, const ow_job_input *m,
                        const ow_field_errors *errs, int key_ok)
{
    job->valid = 0;
    describe_errors(job, errs);
    job->raw_original_len = m->len;
    /* An empty value keeps a non-NULL pointer: producing NULL would turn it
     * into a null value (a tombstone) in the dead-letter topic. */
    if (m->value != NULL) {
        /* A copy larger than the producer and the topic accept would never
         * be acknowledged and would stall the partition: keep what fits
         * beside the (cut) key and say so. */
        size_t room = lim->output_max - job->out_key_len;
        size_t keep = m->len < room ? m->len : room;

        job->raw = malloc(keep > 0 ? keep : 1);
        if (job->raw == NULL)
            return OW_ENOMEM;
        memcpy(job->raw, m->value, keep);
        job->raw_len = keep;
    }
    job->has_user = job->req.user_id > 0;
    return ow_response_invalid(key_ok ? job->key : NULL, job->key_len, job->has_user,
                               job->req.user_id, errs, &job->invalid_body);
}

/* A request whose record the database cannot take in one statement. */
static int refuse_too_large(ow_field_errors *errs)
{
    ow_field_errors_add(errs, "orders",
                        "at most %zu orders: the record of a larger request would not fit the "
                        "database's max_allowed_packet",
                        ow_store_orders_cap());
    return OW_EINVAL;
}

int ow_job_refuse_too_large(ow_job *job)
{
    ow_field_errors errs;

    ow_field_errors_init(&errs);
    ow_field_errors_add(&errs, "orders",
                        "the record of this request would not fit the database's "
                        "max_allowed_packet");
    ow_store_item_cleanup(&job->item);
    job->valid = 0;
    describe_errors(job, &errs);
    /* The original bytes are gone: the dead-letter copy keeps none of them
     * and names their length. */
    job->raw = malloc(1);
    job->raw_len = 0;
    job->has_user = 1;
    if (job->raw == NULL)
        return OW_ENOMEM;
    return ow_response_invalid(job->key, job->key_len, 1, job->req.user_id, &errs,
                               &job->invalid_body);
}

void ow_job_log_key_reused(const ow_job *job)
{
    char digest8[9];

    memcpy(digest8, job->item.digest_hex, 8);
    digest8[8] = '\0';
    OW_LOG(OW_LOG_WARN, "idempotency_key_reused", OW_F_INT("user_id", job->req.user_id),
           OW_F_KEY("key", job->key, job->key_len), OW_F_STR("digest", digest8),
           OW_F_STR("stored_digest", job->item.stored_digest8), OW_F_JOB(job));
    OW_COUNT(keys_reused, 1);
}

/* A missing or malformed key is a security event too. */
static void log_key_rejected(const ow_job *job, const char *why)
{
    OW_LOG(OW_LOG_WARN, "idempotency_key_rejected", OW_F_INT("user_id", job->req.user_id),
           OW_F_KEY("key", job->key != NULL ? job->key : "", job->key_len), OW_F_STR("error", why),
           OW_F_JOB(job));
    OW_COUNT(keys_rejected, 1);
}

/* Empties job (new memory, or an ended job's) for a message: zeroed, its
 * tags and buffers set. */
static ow_job *job_init(ow_job *job)
{
    if (job == NULL)
        return NULL;
    memset(job, 0, sizeof(*job));
    for (int k = 0; k < OW_OUT_KINDS; k++)
        job->tags[k].kind = (ow_output_kind)k;
    ow_buf_init(&job->invalid_body);
    return job;
}

ow_job *ow_job_new(void)
{
    return job_init(malloc(sizeof(ow_job)));
}

/* The most ended jobs a maker keeps for reuse; after a peak of jobs in
 * flight the ones beyond it are freed. */
#define MAKER_KEEP 1024

void ow_job_maker_init(ow_job_maker *mk, const ow_job_limits *lim)
{
    memset(mk, 0, sizeof(*mk));
    mk->lim = *lim;
    mk->trace_rng = ow_trace_seed();
    ow_request_scratch_init(&mk->parse);
    atomic_init(&mk->returned, NULL);
}

static void free_list(ow_job *job)
{
    while (job != NULL) {
        ow_job *next = job->next;

        free(job);
        job = next;
    }
}

void ow_job_maker_cleanup(ow_job_maker *mk)
{
    free_list(mk->spare);
    free_list(atomic_exchange(&mk->returned, NULL));
    mk->spare = NULL;
    mk->n_spare = 0;
    ow_request_scratch_cleanup(&mk->parse);
}

/* A job from the maker's spares, taking over the jobs returned since the
 * last time when there are none; beyond MAKER_KEEP they are freed. */
static ow_job *maker_take(ow_job_maker *mk)
{
    ow_job *job;

    if (mk->spare == NULL) {
        ow_job *list = atomic_exchange_explicit(&mk->returned, NULL, memory_order_acquire);

        while (list != NULL) {
            ow_job *next = list->next;

            if (mk->n_spare < MAKER_KEEP) {
                list->next = mk->spare;
                mk->spare = list;
                mk->n_spare++;
            } else {
                free(list);
            }
            list = next;
        }
    }
    job = mk->spare;
    if (job == NULL)
        return job_init(malloc(sizeof(*job)));
    mk->spare = job->next;
    mk->n_spare--;
    return job_init(job);
}

/* Any thread: the job goes on its maker's stack of returned jobs. */
static void maker_return(ow_job_maker *mk, ow_job *job)
{
    ow_job *head = atomic_load_explicit(&mk->returned, memory_order_relaxed);

    do {
        job->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&mk->returned, &head, job, memory_order_release,
                                                    memory_order_relaxed));
}

ow_job *ow_job_of_tag(ow_output_tag *tag)
{
    return (ow_job *)(void *)((char *)(tag - tag->kind) - offsetof(ow_job, tags));
}

ow_job *ow_job_from_message(ow_job_maker *mk, const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    ow_job_input in = {.partition = m->partition,
                       .offset = m->offset,
                       .timestamp_ms = rd_kafka_message_timestamp(m, NULL),
                       .key = m->key,
                       .key_len = m->key_len,
                       .value = m->payload,
                       .len = m->len};

    /* librdkafka parses a message's headers on this first call, and
     * answers at once for a message that has none. */
    if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR)
        in.headers = h;
    return ow_job_from_input(mk, &in);
}

/* --- Trace context ------------------------------------------------------- */

/* The trace context headers of one message. W3C Trace Context names its
 * headers case-insensitively, as HTTP does; several tracestate headers
 * are one list, joined with commas. */
typedef struct {
    const char *parent; /* the traceparent's value, when exactly one */
    size_t parent_len;
    unsigned parents;
    unsigned states;
    int state_too_long; /* joined, more than OW_TRACESTATE_MAX bytes */
    size_t state_len;
    char state[OW_TRACESTATE_MAX];
} trace_headers;

static int header_named(const char *name, const char *want, size_t want_len)
{
    return strlen(name) == want_len && strncasecmp(name, want, want_len) == 0;
}

static void add_state(trace_headers *th, const char *v, size_t n)
{
    size_t sep = th->states > 0;

    th->states++;
    if (th->state_too_long || th->state_len + sep + n > OW_TRACESTATE_MAX) {
        th->state_too_long = 1;
        return;
    }
    if (sep)
        th->state[th->state_len++] = ',';
    if (n > 0)
        memcpy(th->state + th->state_len, v, n);
    th->state_len += n;
}

static void find_trace_headers(const rd_kafka_headers_t *h, trace_headers *th)
{
    const char *name;
    const void *v;
    size_t n;

    th->parent = NULL;
    th->parent_len = 0;
    th->parents = th->states = 0;
    th->state_too_long = 0;
    th->state_len = 0;
    for (size_t i = 0;
         h != NULL && rd_kafka_header_get_all(h, i, &name, &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR;
         i++) {
        if (header_named(name, "traceparent", 11)) {
            th->parents++;
            th->parent = v;
            th->parent_len = v != NULL ? n : 0;
        } else if (header_named(name, "tracestate", 10)) {
            add_state(th, v, v != NULL ? n : 0); /* a null value: an empty list */
        }
    }
}

/* Gives job the trace context of tp's trace with a new span of the
 * worker's, and the tracestate to copy (state_len 0: none). */
static int attach_trace(ow_job_maker *mk, ow_job *job, const ow_traceparent *tp, const char *state,
                        size_t state_len)
{
    unsigned char span[OW_SPAN_ID_LEN];
    ow_job_trace *t = malloc(sizeof(*t) + state_len);

    if (t == NULL)
        return OW_ENOMEM;
    ow_trace_new_id(&mk->trace_rng, span, sizeof(span));
    ow_traceparent_format(tp->trace_id, span, tp->flags & OW_TRACE_FLAGS_KEPT, t->traceparent);
    memcpy(t->trace_id, t->traceparent + 3, 2 * OW_TRACE_ID_LEN);
    t->trace_id[2 * OW_TRACE_ID_LEN] = '\0';
    memcpy(t->span_id, t->traceparent + 36, 2 * OW_SPAN_ID_LEN);
    t->span_id[2 * OW_SPAN_ID_LEN] = '\0';
    memcpy(t->flags, t->traceparent + 53, 2);
    t->flags[2] = '\0';
    t->state_len = state_len;
    if (state_len > 0)
        memcpy(t->state, state, state_len);
    job->trace = t;
    job->bytes += sizeof(*t) + state_len;
    return OW_OK;
}

/* Reads a message's trace context. An invalid header is counted and
 * ignored: it never makes the message invalid nor changes its decision.
 * Without a valid traceparent the message's outputs carry none, unless
 * tracing.start_traces asks for a new trace (sampled, so that the
 * services after the worker record it). A new trace carries no
 * tracestate: one received belongs to the trace it came with, and W3C's
 * processing model discards it. */
static int read_trace(ow_job_maker *mk, ow_job *job, const rd_kafka_headers_t *h)
{
    trace_headers th;
    ow_traceparent tp;
    size_t members = 0;
    int parent_ok;

    find_trace_headers(h, &th);
    parent_ok = th.parents == 1 && ow_traceparent_parse(th.parent, th.parent_len, &tp) == OW_OK;
    if (th.parents > 0 && !parent_ok)
        OW_COUNT(trace_invalid[0], 1);
    /* A traceparent that failed leaves its tracestate unread (W3C: it
     * MUST NOT be parsed). */
    if (th.states > 0 && th.parents == 0)
        OW_COUNT(trace_invalid[1], 1);
    else if (th.states > 0 && parent_ok &&
             (th.state_too_long || ow_tracestate_check(th.state, th.state_len, &members) != OW_OK))
        OW_COUNT(trace_invalid[1], 1);
    if (parent_ok)
        return attach_trace(mk, job, &tp, th.state, members > 0 ? th.state_len : 0);
    if (!mk->ctx.start_traces)
        return OW_OK;
    ow_trace_new_id(&mk->trace_rng, tp.trace_id, sizeof(tp.trace_id));
    tp.flags = OW_TRACE_FLAG_SAMPLED;
    return attach_trace(mk, job, &tp, NULL, 0);
}

/* Copies the message's key into the job: into the job itself when it fits,
 * which every valid key does. */
static int copy_key(ow_job *job, const ow_job_input *m)
{
    if (m->key == NULL)
        return OW_OK;
    job->key = m->key_len < sizeof(job->key_buf) ? job->key_buf : malloc(m->key_len + 1);
    if (job->key == NULL)
        return OW_ENOMEM;
    memcpy(job->key, m->key, m->key_len);
    job->key[m->key_len] = '\0';
    job->key_len = m->key_len;
    job->out_key_len = m->key_len < OW_OUTPUT_KEY_MAX ? m->key_len : OW_OUTPUT_KEY_MAX;
    return OW_OK;
}

ow_job *ow_job_from_input(ow_job_maker *mk, const ow_job_input *m)
{
    const ow_job_limits *lim = &mk->lim;
    ow_job *job = maker_take(mk);
    ow_field_errors errs;
    int key_ok;
    int rc;

    if (job == NULL)
        return NULL;
    job->maker = mk;
    job->ctx = &mk->ctx;
    job->t.partition = m->partition; /* for the logs; ow_ledger_track fills the ticket */
    job->t.offset = m->offset;
    job->timestamp_ms = m->timestamp_ms;
    if (copy_key(job, m) != OW_OK)
        goto fail;
    /* Before anything is logged about the message, so that its lines carry
     * the trace. */
    if ((m->headers != NULL || mk->ctx.start_traces) && read_trace(mk, job, m->headers) != OW_OK)
        goto fail;
    job->key_hash = ow_hash64(job->key != NULL ? job->key : "", job->key_len);
    ow_field_errors_init(&errs);
    key_ok = ow_request_check_key(job->key, job->key_len, &errs) == OW_OK;
    rc = ow_request_parse_with(&mk->parse, m->value, m->len, &lim->request, &job->req, &errs);
    if (rc == OW_ENOMEM)
        goto fail;
    if (rc == OW_OK && job->req.n_orders > ow_store_orders_cap())
        rc = refuse_too_large(&errs);
    if (rc == OW_OK && key_ok) {
        job->valid = 1;
        if (ow_store_item_init(&job->item, &job->req, job->key, job->key_len) != OW_OK ||
            ow_digest_compute(&job->req, job->item.digest, job->item.digest_hex) != OW_OK)
            goto fail;
    } else if (make_invalid(job, lim, m, &errs, key_ok) != OW_OK) {
        goto fail;
    }
    if (!key_ok)
        log_key_rejected(job, errs.count > 0 ? errs.items[0].message : "");
    job->raw_original_len = m->len;
    job->bytes += sizeof(*job) + m->len + m->key_len + job->req.n_orders * sizeof(ow_order_item);
    return job;
fail:
    ow_job_free(job);
    return NULL;
}

void ow_job_free_payload(ow_job *job)
{
    if (job->valid)
        ow_store_item_cleanup(&job->item);
    ow_request_cleanup(&job->req);
    ow_buf_cleanup(&job->invalid_body);
    free(job->raw);
    job->raw = NULL;
}

void ow_job_free(ow_job *job)
{
    if (job == NULL)
        return;
    ow_job_free_payload(job);
    free(job->trace);
    if (job->key != job->key_buf)
        free(job->key);
    if (job->maker != NULL)
        maker_return(job->maker, job);
    else
        free(job);
}

void ow_job_count_in(ow_job *job, ow_inflight *budget)
{
    job->inflight = budget;
    atomic_fetch_add(&budget->messages, 1);
    atomic_fetch_add(&budget->bytes, (int64_t)job->bytes);
}

void ow_job_holds(ow_job *job, size_t bytes)
{
    int64_t before = (int64_t)job->bytes;

    job->bytes = bytes;
    if (job->inflight != NULL)
        atomic_fetch_add(&job->inflight->bytes, (int64_t)bytes - before);
}

/* Takes a finished job off the in-flight budget and frees it. */
static void release(ow_job *job, int done)
{
    if (!done)
        OW_COUNT(dropped, 1);
    if (job->inflight != NULL) {
        atomic_fetch_sub(&job->inflight->messages, 1);
        atomic_fetch_sub(&job->inflight->bytes, (int64_t)job->bytes);
    }
    ow_job_free(job);
}

void ow_job_settle(ow_ledger *l, ow_job *job, int ok)
{
    int done = 0;

    if (!ow_ledger_settle(l, &job->t, ok, &done))
        return;
    if (done && job->timestamp_ms > 0)
        ow_histogram_observe(&ow_stats.e2e_latency,
                             (ow_clock_wall_ms() - job->timestamp_ms) * 1000);
    release(job, done);
}
