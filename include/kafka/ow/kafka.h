/*
 * Kafka client calls that carry a rule of their own, for any layer above
 * (kafka.c): reading and writing headers, telling a refusal (TLS, SASL, an
 * ACL) from an outage, the topics' ACL check, a seek bounded alike on
 * every librdkafka version. Which settings the clients get is
 * ow/kafka_conf.h's. The calls of a layer's own protocol stay in that
 * layer: the worker's poll loop, rebalances, produce calls, commits and
 * transactions in the pipeline, send's in the cli.
 */
#ifndef OW_KAFKA_H
#define OW_KAFKA_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>

#include "ow/error.h"

/* 1 when err means Kafka refused the worker (a TLS or SASL
 * failure, a missing ACL), which retrying cannot fix; logs kafka_refused
 * once per process. 0 for any other error. */
int ow_kafka_refused(const rd_kafka_t *rk, int err, const char *reason);
/* Asks for the metadata of each topic; a FATAL error when the broker says
 * the principal may not see one (no Describe, i.e. no Read or Write ACL). */
int ow_kafka_check_topics(rd_kafka_t *rk, const char *const *topics, size_t n, ow_error *err);

/* Seeks a consumer's partitions (rd_kafka_seek_partitions) and waits for
 * the seeks up to timeout_ms (more than 0), in milliseconds whatever the
 * librdkafka version (before 2.1.0, up to timeout_ms for each seek). */
rd_kafka_error_t *ow_kafka_seek(rd_kafka_t *consumer, rd_kafka_topic_partition_list_t *parts,
                                int timeout_ms);

/* Adds a header whose value is a decimal integer. */
void ow_kafka_header_int(rd_kafka_headers_t *h, const char *name, long long v);

/* Looks a header up: the value and length of the last header named name,
 * or NULL. The project's one header reader: the tools' kit (kit_header)
 * reads the headers it keeps of a message through it. */
const char *ow_kafka_headers_get(const rd_kafka_headers_t *h, const char *name, size_t *len);
/* The same on a message's headers. */
const char *ow_kafka_header(const rd_kafka_message_t *m, const char *name, size_t *len);

#endif
