/* The delivery mode, picked once at start and called through its
 * functions (delivery.h). */
#include "delivery.h"

ow_delivery *ow_delivery_new(const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger)
{
    /* The one place that reads processing.guarantee: from here on the
     * mode's functions answer for it. */
    if (cfg->exactly_once)
        return ow_delivery_eos_new(cfg, rs, ledger);
    return ow_delivery_alo_new(cfg, rs, ledger);
}

void ow_delivery_free(ow_delivery **dp)
{
    if (*dp == NULL)
        return;
    (*dp)->ops->free(*dp);
    *dp = NULL;
}

int ow_delivery_start(ow_delivery *d, ow_output *out, rd_kafka_t *producer, rd_kafka_t *consumer,
                      ow_error *err)
{
    int rc = ow_output_init(out, producer, d->cfg, d->rs, d->ledger, &d->rules, err);

    d->out = out;
    d->consumer = consumer;
    return rc == OW_OK ? d->ops->start(d, producer, err) : rc;
}

int ow_delivery_release(ow_delivery *d)
{
    return d == NULL || d->ops->release(d);
}

ow_publish_gate *ow_delivery_gate(ow_delivery *d)
{
    return &d->gate;
}

int ow_delivery_poll_ms(const ow_delivery *d)
{
    return d->poll_ms;
}

/* --- The consumer thread ------------------------------------------------- */

int ow_delivery_track(ow_delivery *d, ow_job *job, int rewound)
{
    return d->ops->track(d, job, rewound);
}

void ow_delivery_tick(ow_delivery *d)
{
    d->ops->tick(d);
}

void ow_delivery_rebalanced(ow_delivery *d)
{
    d->rebalanced_ms = ow_clock_mono_ms();
}

void ow_delivery_commit(ow_delivery *d, const char *why, int64_t deadline_ms)
{
    d->ops->commit(d, why, deadline_ms);
}

void ow_delivery_revoke(ow_delivery *d, const rd_kafka_topic_partition_list_t *parts, int lost)
{
    d->ops->revoke(d, parts, lost);
}

void ow_delivery_flush(ow_delivery *d, int64_t deadline_ms)
{
    d->ops->flush(d, deadline_ms);
}

int ow_delivery_rewind(ow_delivery *d)
{
    return d->ops->rewind != NULL ? d->ops->rewind(d) : 0;
}

/* --- Lanes ----------------------------------------------------------------- */

int ow_delivery_enter(ow_delivery *d)
{
    return ow_publish_gate_enter(&d->gate);
}

void ow_delivery_leave(ow_delivery *d)
{
    ow_publish_gate_leave(&d->gate);
}

void ow_delivery_publish(ow_delivery *d, ow_job *job)
{
    d->ops->publish(d, job);
}

void ow_delivery_in_progress(ow_delivery *d, ow_job *job)
{
    ow_output_in_progress(d->out, job);
}

void ow_delivery_abandon(ow_delivery *d, ow_job *job)
{
    d->ops->abandon(d, job);
}

/* --- Kafka's callbacks and the ledger's ----------------------------------- */

void ow_delivery_store_offset(void *opaque, int32_t partition, int64_t offset)
{
    ow_delivery *d = opaque;

    d->ops->store_offset(d, partition, offset);
}

void ow_delivery_delivered(ow_delivery *d, rd_kafka_t *rk, const rd_kafka_message_t *m)
{
    d->ops->delivered(d, rk, m);
}

void ow_delivery_committed(ow_delivery *d, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t *offsets)
{
    d->ops->committed(d, err, offsets);
}

ow_producer_fate ow_delivery_producer_failed(ow_delivery *d)
{
    return d->ops->producer_failed(d);
}
