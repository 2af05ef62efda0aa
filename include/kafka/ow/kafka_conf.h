/*
 * librdkafka configuration for order-worker's consumers and producers
 * (kafka_conf.c): the settings per role and processing guarantee, and
 * the kafka.* keys of the configuration.
 *
 * Fixed by order-worker (and refused in the config file): the consumer
 * stores offsets only when told (enable.auto.offset.store=false) and the
 * producer is idempotent with acks=all. Everything under kafka.* passes
 * through, applied before the fixed settings.
 */
#ifndef OW_KAFKA_CONF_H
#define OW_KAFKA_CONF_H

#include <librdkafka/rdkafka.h>

#include "ow/config.h"
#include "ow/error.h"

typedef enum { OW_KAFKA_CONSUMER, OW_KAFKA_PRODUCER } ow_kafka_role;

/* A new configuration (owned by the caller until handed to rd_kafka_new). */
rd_kafka_conf_t *ow_kafka_conf_new(const ow_config *cfg, ow_kafka_role role, ow_error *err);

/* Checks every kafka.* property (name and value) against librdkafka on a
 * scratch configuration, so that a typo fails every subcommand at start
 * with "file:line: kafka.name: reason" rather than `run` later. */
int ow_kafka_check_config(const ow_config *cfg, ow_error *err);

/* Sets one property, turning librdkafka's complaint into an error. */
int ow_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, ow_error *err);

#endif
