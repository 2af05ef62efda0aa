/* Turning a consumed message into a job: copy what is needed, validate it,
 * and either compute its digest or build its 400 body. */
#include <stdlib.h>
#include <string.h>

#include "ow/digest.h"
#include "ow/log.h"
#include "ow/metrics.h"
#include "ow/response.h"
#include "job.h"

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

void ow_job_log_key_reused(const ow_job *job)
{
    char digest8[9];

    memcpy(digest8, job->item.digest_hex, 8);
    digest8[8] = '\0';
    OW_LOG(OW_LOG_WARN, "idempotency_key_reused", OW_F_INT("user_id", job->req.user_id),
           OW_F_KEY("key", job->key, job->key_len), OW_F_STR("digest", digest8),
           OW_F_STR("stored_digest", job->item.stored_digest8),
           OW_F_INT("partition", job->t.partition), OW_F_INT("offset", job->t.offset));
    OW_COUNT(keys_reused, 1);
}

/* A missing or malformed key is a security event too. */
static void log_key_rejected(const ow_job *job, const char *why)
{
    OW_LOG(OW_LOG_WARN, "idempotency_key_rejected", OW_F_INT("user_id", job->req.user_id),
           OW_F_KEY("key", job->key != NULL ? job->key : "", job->key_len), OW_F_STR("error", why),
           OW_F_INT("partition", job->t.partition), OW_F_INT("offset", job->t.offset));
    OW_COUNT(keys_rejected, 1);
}

ow_job *ow_job_new(void)
{
    ow_job *job = calloc(1, sizeof(*job));

    for (int k = 0; job != NULL && k < OW_OUT_KINDS; k++)
        job->tags[k].kind = (ow_output_kind)k;
    if (job != NULL)
        ow_buf_init(&job->invalid_body);
    return job;
}

ow_job *ow_job_of_tag(ow_output_tag *tag)
{
    return (ow_job *)(void *)((char *)(tag - tag->kind) - offsetof(ow_job, tags));
}

ow_job *ow_job_from_message(const ow_job_limits *lim, const rd_kafka_message_t *m)
{
    ow_job_input in = {.partition = m->partition,
                       .offset = m->offset,
                       .timestamp_ms = rd_kafka_message_timestamp(m, NULL),
                       .key = m->key,
                       .key_len = m->key_len,
                       .value = m->payload,
                       .len = m->len};

    return ow_job_from_input(lim, &in);
}

ow_job *ow_job_from_input(const ow_job_limits *lim, const ow_job_input *m)
{
    ow_job *job = ow_job_new();
    ow_field_errors errs;
    int key_ok;
    int rc;

    if (job == NULL)
        return NULL;
    job->t.partition = m->partition; /* for the logs; ow_ledger_track fills the ticket */
    job->t.offset = m->offset;
    job->timestamp_ms = m->timestamp_ms;
    if (m->key != NULL) {
        job->key = malloc(m->key_len + 1);
        if (job->key == NULL)
            goto fail;
        memcpy(job->key, m->key, m->key_len);
        job->key[m->key_len] = '\0';
        job->key_len = m->key_len;
        job->out_key_len = m->key_len < OW_OUTPUT_KEY_MAX ? m->key_len : OW_OUTPUT_KEY_MAX;
    }
    job->key_hash = ow_hash64(job->key != NULL ? job->key : "", job->key_len);
    ow_field_errors_init(&errs);
    key_ok = ow_request_check_key(job->key, job->key_len, &errs) == OW_OK;
    rc = ow_request_parse(m->value, m->len, &lim->request, &job->req, &errs);
    if (rc == OW_ENOMEM)
        goto fail;
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
    job->bytes = sizeof(*job) + m->len + m->key_len + job->req.n_orders * sizeof(ow_order_item);
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
    free(job->key);
    free(job);
}

/* Takes a finished job off the in-flight counts and frees it. */
static void release(ow_job *job, int done)
{
    if (!done)
        OW_COUNT(dropped, 1);
    atomic_fetch_sub(&ow_stats.inflight_messages, 1);
    atomic_fetch_sub(&ow_stats.inflight_bytes, (int64_t)job->bytes);
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
