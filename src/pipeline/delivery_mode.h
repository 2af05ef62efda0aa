/*
 * What a delivery mode provides (delivery_alo.c, delivery_eos.c), for
 * delivery.c, which picks one and calls it; see delivery.h for what the
 * calls mean. Private to the pipeline.
 *
 * A mode's object begins with an ow_delivery (what both modes share) and
 * is made by the mode's constructor; its functions receive that
 * ow_delivery.
 */
#ifndef OW_DELIVERY_MODE_H
#define OW_DELIVERY_MODE_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "job.h"
#include "ledger.h"
#include "output.h"
#include "ow/config.h"
#include "ow/error.h"
#include "publish_gate.h"
#include "runstate.h"

typedef struct ow_delivery ow_delivery;

/* What a producer's fatal error leads to. */
typedef enum {
    OW_PRODUCER_REPLACED, /* the worker replaces the producer and redoes what it held */
    OW_PRODUCER_STOPS,    /* the worker stops; the caller says why */
    OW_PRODUCER_REPORTED  /* the worker stops, and why was said (a fenced producer) */
} ow_producer_fate;

typedef struct {
    int (*start)(ow_delivery *d, rd_kafka_t *producer, ow_error *err);
    int (*release)(ow_delivery *d);
    void (*free)(ow_delivery *d);
    int (*track)(ow_delivery *d, ow_job *job, int rewound);
    void (*publish)(ow_delivery *d, ow_job *job);
    void (*abandon)(ow_delivery *d, ow_job *job);
    void (*store_offset)(ow_delivery *d, int32_t partition, int64_t offset);
    void (*tick)(ow_delivery *d);
    void (*commit)(ow_delivery *d, const char *why, int64_t deadline_ms);
    void (*revoke)(ow_delivery *d, const rd_kafka_topic_partition_list_t *parts, int lost);
    void (*flush)(ow_delivery *d, int64_t deadline_ms);
    /* Only a mode whose producer_failed answers OW_PRODUCER_REPLACED has
     * one: the producer is replaced and what it held given up. */
    int (*rewind)(ow_delivery *d);
    void (*delivered)(ow_delivery *d, rd_kafka_t *rk, const rd_kafka_message_t *m);
    void (*committed)(ow_delivery *d, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets);
    ow_producer_fate (*producer_failed)(ow_delivery *d);
} ow_delivery_ops;

/* What both modes share. */
struct ow_delivery {
    const ow_delivery_ops *ops;
    const ow_config *cfg;
    ow_runstate *rs;
    ow_ledger *ledger;
    ow_output *out;        /* from ow_delivery_start */
    rd_kafka_t *consumer;  /* from ow_delivery_start */
    ow_publish_gate gate;  /* lanes publish inside it */
    ow_output_rules rules; /* what the mode asks of the output stage */
    int poll_ms;           /* the consumer thread's longest poll */
    int64_t rebalanced_ms; /* the last rebalance callback (consumer thread) */
};

/* The modes' constructors (delivery.c calls the one configured). */
ow_delivery *ow_delivery_alo_new(const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger);
ow_delivery *ow_delivery_eos_new(const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger);

/* A constructor's first step: what both modes share. */
static inline void ow_delivery_base_init(ow_delivery *d, const ow_delivery_ops *ops,
                                         const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger)
{
    d->ops = ops;
    d->cfg = cfg;
    d->rs = rs;
    d->ledger = ledger;
    d->poll_ms = 100;
    ow_publish_gate_init(&d->gate);
}

/* A mode's free function's last step before it frees its object. */
static inline void ow_delivery_base_cleanup(ow_delivery *d)
{
    ow_publish_gate_destroy(&d->gate);
}

#endif
