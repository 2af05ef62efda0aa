/* The output stage: results, dead-letter copies and their acknowledgements
 * (see output.h). */
#include "output.h"

#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "ow/kafka.h"
#include "ow/log.h"
#include "ow/response.h"

/* An output refused for its size, waiting for its notice to be produced. */
struct ow_notice {
    ow_notice *next;
    ow_job *job;
    char what[16]; /* "result" or "dead letter" */
    size_t bytes;  /* key + value bytes of the refused output */
    char reason[128];
};

/* --- Limits ------------------------------------------------------------- */

static int read_message_max(rd_kafka_t *producer, size_t *max, ow_error *err)
{
    char buf[32];
    size_t len = sizeof(buf);
    char *end = NULL;
    unsigned long long v;

    if (rd_kafka_conf_get(rd_kafka_conf(producer), "message.max.bytes", buf, &len) !=
        RD_KAFKA_CONF_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot read message.max.bytes");
    v = strtoull(buf, &end, 10);
    if (end == buf || v <= OW_OUTPUT_RESERVE + OW_OUTPUT_KEY_MAX)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "kafka.message.max.bytes: %s is too small for a result", buf);
    *max = (size_t)v;
    return OW_OK;
}

/* The most orders whose largest result still fits, by bisection. */
static size_t orders_that_fit(size_t hi, size_t room)
{
    size_t lo = 0;

    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        size_t len = 0;

        if (ow_response_max_len(mid, &len) == OW_OK && len <= room)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* A decided request whose result cannot be delivered
 * would never get its answer, so the largest possible result must fit
 * before anything is decided. */
static int check_result_fits(const ow_output *o, ow_error *err)
{
    size_t orders = (size_t)o->cfg->request_max_orders;
    size_t room = o->output_max - OW_KEY_MAX;
    size_t len = 0;

    if (ow_response_max_len(orders, &len) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    if (len <= room)
        return OW_OK;
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                        "request.max_orders: a request of %zu orders can get a result of %zu "
                        "bytes, more than the %zu a result may carry (message.max.bytes %zu less "
                        "%d for key and headers); set request.max_orders to at most %zu or raise "
                        "kafka.producer.message.max.bytes and the topics' max.message.bytes",
                        orders, len, room, o->message_max, OW_OUTPUT_RESERVE + OW_KEY_MAX,
                        orders_that_fit(orders, room));
}

int ow_output_init(ow_output *o, rd_kafka_t *producer, const ow_config *cfg, ow_runstate *rs,
                   ow_ledger *ledger, const ow_output_rules *rules, ow_error *err)
{
    int rc;

    *o = (ow_output){.producer = producer, .cfg = cfg, .rs = rs, .ledger = ledger, .rules = *rules};
    pthread_mutex_init(&o->mu, NULL);
    atomic_store(&o->refused_at, SIZE_MAX);
    rc = read_message_max(producer, &o->message_max, err);
    if (rc != OW_OK)
        return rc;
    o->output_max = o->message_max - OW_OUTPUT_RESERVE;
    return check_result_fits(o, err);
}

/* What the broker said about one output topic's size limit. */
typedef struct {
    int found; /* 1: limit is the topic's max.message.bytes */
    size_t limit;
    char why[160]; /* when not found */
} topic_limit;

/* The max.message.bytes of one described topic, or why there is none. */
static void described_limit(const rd_kafka_ConfigResource_t *res, topic_limit *t)
{
    size_t nc = 0;
    const rd_kafka_ConfigEntry_t **ce = NULL;

    if (rd_kafka_ConfigResource_error(res) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *e = rd_kafka_ConfigResource_error_string(res);

        snprintf(t->why, sizeof(t->why), "the broker refused to describe the topic: %s",
                 e != NULL ? e : rd_kafka_err2str(rd_kafka_ConfigResource_error(res)));
        return;
    }
    ce = rd_kafka_ConfigResource_configs(res, &nc);
    for (size_t i = 0; i < nc; i++) {
        const char *v = rd_kafka_ConfigEntry_value(ce[i]);

        if (strcmp(rd_kafka_ConfigEntry_name(ce[i]), "max.message.bytes") == 0 && v != NULL) {
            t->limit = (size_t)strtoull(v, NULL, 10);
            t->found = 1;
        }
    }
}

static void limits_from_result(rd_kafka_event_t *ev, const char *const *topics, size_t n,
                               topic_limit *t)
{
    const rd_kafka_DescribeConfigs_result_t *r = rd_kafka_event_DescribeConfigs_result(ev);
    size_t nr = 0;
    const rd_kafka_ConfigResource_t **rs =
        r != NULL ? rd_kafka_DescribeConfigs_result_resources(r, &nr) : NULL;

    /* Matched by name, not by position; librdkafka leaves a slot NULL when
     * the broker left that topic out of its answer. */
    for (size_t k = 0; k < nr; k++)
        for (size_t i = 0; rs[k] != NULL && i < n; i++)
            if (strcmp(rd_kafka_ConfigResource_name(rs[k]), topics[i]) == 0)
                described_limit(rs[k], &t[i]);
}

/* The topics' max.message.bytes as the broker reports them, in one
 * DescribeConfigs request so that a broker that never answers (librdkafka's
 * mock cluster is one) costs the worker's start one wait, not one per
 * topic. */
static void topic_limits(rd_kafka_t *rk, const char *const *topics, size_t n, topic_limit *t)
{
    rd_kafka_ConfigResource_t *res[OW_OUTPUT_TOPICS] = {0};
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_event_t *ev = NULL;
    int made = q != NULL;

    for (size_t i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        snprintf(t[i].why, sizeof(t[i].why),
                 "the broker did not describe the topic's max.message.bytes within 10 s");
        res[i] = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topics[i]);
        made = made && res[i] != NULL;
    }
    if (made) {
        rd_kafka_DescribeConfigs(rk, res, n, NULL, q);
        ev = rd_kafka_queue_poll(q, 10000);
    }
    if (ev != NULL && rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR)
        limits_from_result(ev, topics, n, t);
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    if (q != NULL)
        rd_kafka_queue_destroy(q);
    for (size_t i = 0; i < n; i++)
        if (res[i] != NULL)
            rd_kafka_ConfigResource_destroy(res[i]);
}

int ow_output_check_topics(ow_output *o, const char *const *keys, const char *const *topics,
                           size_t n, ow_error *err)
{
    topic_limit t[OW_OUTPUT_TOPICS];

    if (n > OW_OUTPUT_TOPICS)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%zu output topics, at most %d", n,
                            OW_OUTPUT_TOPICS);
    topic_limits(o->producer, topics, n, t);
    for (size_t i = 0; i < n; i++) {
        if (!t[i].found) {
            OW_LOG(OW_LOG_WARN, "output_limit_unchecked", OW_F_STR("topic", topics[i]),
                   OW_F_STR("why", t[i].why));
            continue;
        }
        if (t[i].limit < o->message_max)
            return ow_error_set(
                err, OW_ERRCLASS_INVALID_INPUT, 0,
                "%s: topic %s takes messages of at most %zu bytes (max.message.bytes), "
                "less than the producer's message.max.bytes %zu; set "
                "kafka.producer.message.max.bytes to at most %zu or raise the topic's "
                "max.message.bytes",
                keys[i], topics[i], t[i].limit, o->message_max, t[i].limit);
    }
    return OW_OK;
}

void ow_output_destroy(ow_output *o)
{
    while (o->notices != NULL) {
        ow_notice *n = o->notices;

        o->notices = n->next;
        free(n);
    }
    pthread_mutex_destroy(&o->mu);
}

/* --- Producing ---------------------------------------------------------- */

/* The headers every output of a job carries: the message it answers, and
 * the trace context it continues (the job's, which is its own message's:
 * a replayed result belongs to the retry's trace, not the first
 * request's). */
static void source_headers(rd_kafka_headers_t *h, const ow_output *o, const ow_job *job)
{
    rd_kafka_header_add(h, "source-topic", -1, o->cfg->topic_input, -1);
    ow_kafka_header_int(h, "source-partition", job->t.partition);
    ow_kafka_header_int(h, "source-offset", job->t.offset);
    if (job->out_key_len < job->key_len)
        ow_kafka_header_int(h, "key-truncated-from", (long long)job->key_len);
    if (job->trace != NULL) {
        rd_kafka_header_add(h, "traceparent", -1, job->trace->traceparent, OW_TRACEPARENT_LEN);
        if (job->trace->state_len > 0)
            rd_kafka_header_add(h, "tracestate", -1, job->trace->state,
                                (ssize_t)job->trace->state_len);
    }
}

/* Whether a refused produce call stops the worker. A producer that failed
 * fatally refuses calls at once, possibly before its error callback asks
 * for a replacement; where it is replaced (producer_replaced) the job is
 * redone, so only that case is not fatal. A full queue at shutdown is not
 * either: the job is redelivered. */
static int produce_fatal(const ow_output *o, rd_kafka_resp_err_t e)
{
    if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return 0;
    return e != RD_KAFKA_RESP_ERR__FATAL || !o->rules.producer_replaced;
}

/* An output is about to be handed to the producer. */
static void producing(const ow_output *o)
{
    if (o->rules.producing != NULL)
        o->rules.producing(o->rules.opaque);
}

/* Produces one output of job, of the given kind, waiting while the local
 * queue is full. The value is copied and h is consumed. The job's ticket
 * waits for the output's acknowledgement from here on. Returns OW_OK,
 * OW_EINVAL when the message is too large (still to be settled), or
 * OW_EFATAL when it had to give up (settled as failed). */
static int produce(ow_output *o, const char *topic, ow_job *job, ow_output_kind kind,
                   const void *value, size_t len, rd_kafka_headers_t *h)
{
    ow_ledger_produced(&job->t);
    if (o->producer == NULL) { /* it failed and could not be replaced: the worker stops */
        rd_kafka_headers_destroy(h);
        ow_job_settle(o->ledger, job, 0);
        return OW_EFATAL;
    }
    if (len + job->out_key_len >= atomic_load(&o->refused_at)) {
        rd_kafka_headers_destroy(h);
        return OW_EINVAL;
    }
    producing(o);
    for (;;) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            o->producer, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(job->key, job->out_key_len),
            RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
            RD_KAFKA_V_OPAQUE(&job->tags[kind]), RD_KAFKA_V_END);

        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return OW_OK; /* h is owned by the message now */
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL && !ow_runstate_give_up(o->rs)) {
            ow_sleep_ms(5, NULL);
            continue;
        }
        rd_kafka_headers_destroy(h);
        if (e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
            return OW_EINVAL;
        /* A producer that failed for good refuses every output after it:
         * the line that said why is enough. */
        if (e != RD_KAFKA_RESP_ERR__FATAL || !atomic_load(&o->rs->fatal))
            OW_LOG(OW_LOG_ERROR, "produce_failed", OW_F_STR("topic", topic),
                   OW_F_STR("error", rd_kafka_err2str(e)), OW_F_JOB(job));
        if (produce_fatal(o, e))
            ow_runstate_set_fatal(o->rs, "a result could not be produced");
        ow_job_settle(o->ledger, job, 0);
        return OW_EFATAL;
    }
}

rd_kafka_headers_t *ow_output_result_headers(const ow_output *o, const ow_job *job, int replayed)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(job->trace != NULL ? 8 : 6);

    if (job->valid || job->has_user)
        ow_kafka_header_int(h, "user-id", job->req.user_id);
    rd_kafka_header_add(h, "replayed", -1, replayed ? "true" : "false", -1);
    source_headers(h, o, job);
    return h;
}

rd_kafka_headers_t *ow_output_dead_letter_headers(const ow_output *o, const ow_job *job)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(job->trace != NULL ? 11 : 9);

    rd_kafka_header_add(h, "error-code", -1, "INVALID_REQUEST", -1);
    rd_kafka_header_add(h, "error-message", -1, job->first_error, -1);
    ow_kafka_header_int(h, "error-count", (long long)job->n_errors);
    source_headers(h, o, job);
    ow_kafka_header_int(h, "source-timestamp", job->timestamp_ms);
    if (job->raw_len < job->raw_original_len)
        ow_kafka_header_int(h, "dlq-truncated-from", (long long)job->raw_original_len);
    return h;
}

static int publish_result(ow_output *o, ow_job *job, ow_output_kind kind, const void *body,
                          size_t len, int replayed)
{
    return produce(o, o->cfg->topic_results, job, kind, body, len,
                   ow_output_result_headers(o, job, replayed));
}

static int publish_dead_letter(ow_output *o, ow_job *job)
{
    return produce(o, o->cfg->topic_dlq, job, OW_OUT_DEAD_LETTER, job->raw, job->raw_len,
                   ow_output_dead_letter_headers(o, job));
}

/* --- Outputs refused for their size ------------------------------------- */

static rd_kafka_resp_err_t produce_notice(ow_output *o, ow_notice *n);
static void notice_failed(ow_output *o, ow_notice *n, rd_kafka_resp_err_t e);

/* A notice produced at once, on the lane's thread (notices_at_once): in a
 * transaction it must go in before any later job of its partition is
 * released, and a queued one could land in a later transaction than the
 * jobs after it. */
static void produce_notice_now(ow_output *o, ow_notice *n)
{
    rd_kafka_resp_err_t e;

    producing(o);
    while ((e = produce_notice(o, n)) == RD_KAFKA_RESP_ERR__QUEUE_FULL &&
           !ow_runstate_give_up(o->rs))
        ow_sleep_ms(5, NULL);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        notice_failed(o, n, e);
    free(n);
}

/* Puts a notice in place of an output of job that was refused for its
 * size, and settles that output: the job now waits for the notice's
 * acknowledgement instead. The notice is queued for the poller, or
 * produced now (notices_at_once). */
static void replace_by_notice(ow_output *o, ow_job *job, const char *what, size_t bytes,
                              const char *reason)
{
    ow_notice *n = calloc(1, sizeof(*n));

    OW_COUNT(outputs_too_large, 1);
    OW_LOG(OW_LOG_WARN, "output_too_large", OW_F_STR("output", what),
           OW_F_INT("bytes", (int64_t)bytes), OW_F_STR("error", reason), OW_F_JOB(job));
    if (n == NULL) {
        ow_runstate_set_fatal(o->rs, "out of memory");
        ow_job_settle(o->ledger, job, 0);
        return;
    }
    n->job = job;
    snprintf(n->what, sizeof(n->what), "%s", what);
    n->bytes = bytes;
    snprintf(n->reason, sizeof(n->reason), "%s", reason);
    ow_ledger_produced(&job->t);
    if (o->rules.notices_at_once) {
        produce_notice_now(o, n);
    } else {
        pthread_mutex_lock(&o->mu);
        n->next = o->notices;
        o->notices = n;
        pthread_mutex_unlock(&o->mu);
    }
    ow_job_settle(o->ledger, job, 1);
}

/* Produces one notice: the key, no value, and what was refused. */
static rd_kafka_resp_err_t produce_notice(ow_output *o, ow_notice *n)
{
    rd_kafka_headers_t *h = rd_kafka_headers_new(n->job->trace != NULL ? 10 : 8);
    char msg[256];
    rd_kafka_resp_err_t e;

    snprintf(msg, sizeof(msg), "the %s (%zu bytes) was refused for its size: %s", n->what, n->bytes,
             n->reason);
    rd_kafka_header_add(h, "error-code", -1, "OUTPUT_TOO_LARGE", -1);
    rd_kafka_header_add(h, "error-message", -1, msg, -1);
    source_headers(h, o, n->job);
    e = rd_kafka_producev(o->producer, RD_KAFKA_V_TOPIC(o->cfg->topic_dlq),
                          RD_KAFKA_V_KEY(n->job->key, n->job->out_key_len), RD_KAFKA_V_VALUE("", 0),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                          RD_KAFKA_V_OPAQUE(&n->job->tags[OW_OUT_NOTICE]), RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_headers_destroy(h);
    return e;
}

/* A notice that could not be produced: its job ends not done. */
static void notice_failed(ow_output *o, ow_notice *n, rd_kafka_resp_err_t e)
{
    OW_LOG(OW_LOG_ERROR, "produce_failed", OW_F_STR("topic", o->cfg->topic_dlq),
           OW_F_STR("error", rd_kafka_err2str(e)), OW_F_JOB(n->job));
    if (produce_fatal(o, e))
        ow_runstate_set_fatal(o->rs, "a dead-letter notice could not be produced");
    ow_job_settle(o->ledger, n->job, 0);
}

void ow_output_pump(ow_output *o)
{
    ow_notice *list;

    pthread_mutex_lock(&o->mu);
    list = o->notices;
    o->notices = NULL;
    pthread_mutex_unlock(&o->mu);
    while (list != NULL) {
        ow_notice *n = list;
        rd_kafka_resp_err_t e = produce_notice(o, n);

        list = n->next;
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL && !ow_runstate_give_up(o->rs)) {
            pthread_mutex_lock(&o->mu); /* again after the next poll */
            n->next = o->notices;
            o->notices = n;
            pthread_mutex_unlock(&o->mu);
            continue;
        }
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
            notice_failed(o, n, e);
        free(n);
    }
}

/* --- Publishing ---------------------------------------------------------- */

/* Once its outputs are handed to the producer (which copied them), a job
 * only waits for acknowledgements: free its payload and count what the
 * producer now holds instead. */
static void release_payload(ow_job *job)
{
    size_t held = job->valid ? job->item.body.len : job->invalid_body.len + job->raw_len;

    if (job->trace != NULL)
        held += sizeof(*job->trace) + job->trace->state_len;
    ow_job_free_payload(job);
    ow_job_holds(job, sizeof(*job) + held);
}

/* What a produce call left to do: nothing (produced, acknowledged later),
 * a notice in its place (refused for its size), or, after a failure, no
 * more outputs. Returns 0 after a failure. */
static int produced(ow_output *o, ow_job *job, int rc, const char *what, size_t bytes)
{
    if (rc == OW_EINVAL)
        replace_by_notice(o, job, what, bytes + job->out_key_len,
                          rd_kafka_err2str(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
    return rc != OW_EFATAL;
}

/* The lane hands the job over with its hold, which is released last, so
 * that a quick delivery report cannot end the job while it is produced. */
void ow_output_publish(ow_output *o, ow_job *job)
{
    int ok;

    if (job->valid) {
        ok = produced(o, job,
                      publish_result(o, job, OW_OUT_RESULT, job->item.body.data, job->item.body.len,
                                     job->item.replayed),
                      "result", job->item.body.len);
    } else {
        ok = job->key_len == 0 ||
             produced(o, job,
                      publish_result(o, job, OW_OUT_RESULT, job->invalid_body.data,
                                     job->invalid_body.len, 0),
                      "result", job->invalid_body.len);
        /* After a failure nothing more is produced: the worker stops. */
        if (ok)
            ok = produced(o, job, publish_dead_letter(o, job), "dead letter", job->raw_len);
    }
    release_payload(job);
    ow_job_settle(o->ledger, job, ok);
    if (ok)
        ow_output_pump(o);
}

void ow_output_in_progress(ow_output *o, ow_job *job)
{
    /* An interim answer refused for its size is not replaced: the
     * definitive result follows. */
    if (publish_result(o, job, OW_OUT_INTERIM, job->item.body.data, job->item.body.len, 0) ==
        OW_EINVAL)
        ow_job_settle(o->ledger, job, 1);
}

void ow_output_flush(ow_output *o, int timeout_ms)
{
    ow_output_pump(o);
    if (rd_kafka_flush(o->producer, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    /* The broker did not acknowledge everything in time (it is
     * unreachable). What is left is given up: its delivery reports, purged
     * rather than acknowledged, finish its jobs as not done, so no offset
     * moves past them, the next owner redelivers them, and no job outlives
     * the worker. */
    OW_LOG(OW_LOG_WARN, "flush_incomplete",
           OW_F_INT("unacknowledged", rd_kafka_outq_len(o->producer)));
    rd_kafka_purge(o->producer, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(o->producer, 100); /* serves the purged reports */
}

/* --- Delivery reports (the producer's poller thread) --------------------- */

static int size_refused(rd_kafka_resp_err_t e)
{
    return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           e == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

static void count_delivered(ow_output_kind kind, const ow_job *job)
{
    switch (kind) {
    case OW_OUT_INTERIM:
        OW_COUNT(results[OW_CODE_REQUEST_IN_PROGRESS], 1);
        break;
    case OW_OUT_DEAD_LETTER:
    case OW_OUT_NOTICE:
        OW_COUNT(dead_lettered, 1);
        break;
    default:
        OW_COUNT(results[job->valid ? job->item.code : OW_CODE_INVALID_REQUEST], 1);
        if (job->valid && job->item.replayed)
            OW_COUNT(replays, 1);
    }
}

int ow_output_purged(const rd_kafka_message_t *m)
{
    return m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
}

/* Lowers the size from which outputs are replaced by notices, so that the
 * same result does not fail every transaction after. */
void ow_output_refused(ow_output *o, const rd_kafka_message_t *m)
{
    size_t bytes = m->len + m->key_len;
    size_t was = atomic_load(&o->refused_at);

    if (size_refused(m->err) && m->len > 0) {
        while (bytes < was && !atomic_compare_exchange_weak(&o->refused_at, &was, bytes))
            ;
    }
}

void ow_output_given_up(ow_output *o, const rd_kafka_message_t *m)
{
    ow_job *job = ow_job_of_tag(m->_private);

    OW_LOG(OW_LOG_DEBUG, "output_abandoned", OW_F_STR("topic", rd_kafka_topic_name(m->rkt)),
           OW_F_STR("error", rd_kafka_err2str(m->err)), OW_F_JOB(job));
    ow_job_settle(o->ledger, job, 0);
}

void ow_output_delivered(ow_output *o, const rd_kafka_message_t *m)
{
    ow_output_tag *tag = m->_private;
    ow_job *job = ow_job_of_tag(tag);
    const char *topic = rd_kafka_topic_name(m->rkt);

    if (ow_output_purged(m)) {
        /* Purged at shutdown or by an abort: the job ends not done. */
        OW_LOG(OW_LOG_DEBUG, "output_abandoned", OW_F_STR("topic", topic), OW_F_JOB(job));
    } else if (size_refused(m->err) && m->len > 0 &&
               (tag->kind == OW_OUT_RESULT || tag->kind == OW_OUT_DEAD_LETTER)) {
        /* A topic whose limit is below the producer's refused it: a notice
         * (no value) replaces it, and the partition moves on. */
        replace_by_notice(o, job, tag->kind == OW_OUT_DEAD_LETTER ? "dead letter" : "result",
                          m->len + m->key_len, rd_kafka_err2str(m->err));
        return;
    } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* message.timeout.ms is infinite, so only permanent errors get here. */
        OW_LOG(OW_LOG_ERROR, "delivery_failed", OW_F_STR("topic", topic),
               OW_F_STR("error", rd_kafka_err2str(m->err)), OW_F_JOB(job));
        ow_runstate_set_fatal(o->rs, "a result was not acknowledged by the broker");
    } else {
        count_delivered(tag->kind, job);
    }
    ow_job_settle(o->ledger, job, m->err == RD_KAFKA_RESP_ERR_NO_ERROR);
}
