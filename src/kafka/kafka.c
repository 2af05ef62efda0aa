/* The Kafka client calls the layers share (ow/kafka.h): headers, a
 * refusal told from an outage, the topics' ACL check, a bounded seek. */
#include "ow/kafka.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>

#include "ow/log.h"
#include "ow/util.h"

void ow_kafka_header_int(rd_kafka_headers_t *h, const char *name, long long v)
{
    char buf[21];
    size_t n = ow_format_int(v, buf);

    rd_kafka_header_add(h, name, -1, buf, (ssize_t)n);
}

const char *ow_kafka_headers_get(const rd_kafka_headers_t *h, const char *name, size_t *len)
{
    const void *v = NULL;

    if (h == NULL || rd_kafka_header_get_last(h, name, &v, len) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    return v;
}

const char *ow_kafka_header(const rd_kafka_message_t *m, const char *name, size_t *len)
{
    rd_kafka_headers_t *h = NULL;

    if (rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return NULL;
    return ow_kafka_headers_get(h, name, len);
}

/* A rejected certificate, a wrong SASL password or a missing ACL
 * does not heal by itself; librdkafka would retry them forever and the
 * worker would look merely disconnected. */
static const char *refusal_kind(int err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
        return "authentication";
    case RD_KAFKA_RESP_ERR__SSL:
        return "tls";
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        return "authorization";
    default:
        return NULL;
    }
}

rd_kafka_error_t *ow_kafka_seek(rd_kafka_t *consumer, rd_kafka_topic_partition_list_t *parts,
                                int timeout_ms)
{
    /* Before 2.1.0, librdkafka waited for each seek timeout_ms microseconds
     * (its 2.1.0 change log): ten seconds ended after ten milliseconds, and
     * a rewind whose seek waited for the consumer's broker thread failed and
     * stopped the worker. */
    if (rd_kafka_version() < 0x02010000 && timeout_ms > 0)
        timeout_ms = timeout_ms > INT_MAX / 1000 ? INT_MAX : timeout_ms * 1000;
    return rd_kafka_seek_partitions(consumer, parts, timeout_ms);
}

/* Both clients usually fail the same way: one line per process. */
static atomic_int refusal_logged;

int ow_kafka_refused(const rd_kafka_t *rk, int err, const char *reason)
{
    const char *kind = refusal_kind(err);

    if (kind == NULL)
        return 0;
    if (atomic_exchange(&refusal_logged, 1) == 0)
        OW_LOG(OW_LOG_ERROR, "kafka_refused", OW_F_STR("client", rd_kafka_name(rk)),
               OW_F_STR("kind", kind),
               OW_F_STR("error", rd_kafka_err2name((rd_kafka_resp_err_t)err)),
               OW_F_STR("reason", reason));
    return 1;
}

int ow_kafka_check_topics(rd_kafka_t *rk, const char *const *topics, size_t n, ow_error *err)
{
    for (size_t i = 0; i < n; i++) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topics[i], NULL);
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e;

        if (rkt == NULL)
            continue;
        e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1)
            e = md->topics[0].err;
        if (md != NULL)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        if (e == RD_KAFKA_RESP_ERR__TIMED_OUT || e == RD_KAFKA_RESP_ERR__TRANSPORT)
            break; /* no broker answers (yet): the clients report why */
        /* Other answers (a timeout, an unknown topic) are not ours to judge
         * here: the clients retry them or report them elsewhere. */
        if (e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED) {
            char reason[200];

            snprintf(reason, sizeof(reason), "topic %s is not visible to this principal",
                     topics[i]);
            ow_kafka_refused(rk, e, reason);
            return ow_error_set(err, OW_ERRCLASS_FATAL, (int)e,
                                "Kafka: not authorized for topic %s (see the ACL list in "
                                "docs/operations.md)",
                                topics[i]);
        }
    }
    return OW_OK;
}
