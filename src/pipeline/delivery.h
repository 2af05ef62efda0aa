/*
 * The delivery mode (delivery.c): how a decided message's outputs reach
 * Kafka and how its offset moves on. Private to the pipeline.
 *
 * processing.guarantee picks one of two modes, once, at start
 * (ow_delivery_new); the rest of the pipeline calls them through this
 * interface and never asks which one it got.
 *
 * At-least-once (delivery_alo.c): a job's outputs are produced as soon as
 * its lane decided it. The ledger stores a partition's offset in the
 * consumer once every output below it was acknowledged, and the consumer
 * commits the stored offsets every commit.interval_ms, on revoke and at
 * the stop. A producer that fails fatally is replaced.
 *
 * Exactly-once (delivery_eos.c): outputs and the offsets that cover them
 * commit together in one Kafka transaction (txn.h) every
 * transaction.interval_ms, on revoke and at the stop, and a partition's
 * jobs are produced in the order they were consumed (sequencer.h), so that
 * every committed output is covered by the offset committed with it. An
 * output that is not delivered aborts the transaction, and every partition
 * goes back to its committed offset.
 *
 * Both publish through one gate (publish_gate.h) and one output stage
 * (output.h).
 */
#ifndef OW_DELIVERY_H
#define OW_DELIVERY_H

#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "delivery_mode.h"
#include "job.h"
#include "ledger.h"
#include "output.h"
#include "ow/config.h"
#include "ow/error.h"
#include "publish_gate.h"
#include "runstate.h"

/* The delivery of cfg's processing.guarantee, for the worker whose ledger
 * is ledger (its store function is ow_delivery_store_offset, with the
 * delivery as opaque). NULL when out of memory. */
ow_delivery *ow_delivery_new(const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger);
void ow_delivery_free(ow_delivery **d);
/* Once the clients exist: starts the output stage out with the mode's
 * rules, then what the mode needs (exactly-once: the release order, the
 * transactional id and the first transaction). */
int ow_delivery_start(ow_delivery *d, ow_output *out, rd_kafka_t *producer, rd_kafka_t *consumer,
                      ow_error *err);
/* Before the producer is destroyed: 1 when it may be, 0 when a call a stop
 * gave up on still runs on it (the process then exits without destroying
 * it). 1 for NULL. */
int ow_delivery_release(ow_delivery *d);
/* The gate lanes publish through: the consumer thread closes it to
 * replace a failed producer. */
ow_publish_gate *ow_delivery_gate(ow_delivery *d);
/* How long the consumer thread may wait in one poll. */
int ow_delivery_poll_ms(const ow_delivery *d);

/* --- The consumer thread ------------------------------------------------- */

/* The consumer thread tracked job (its ticket is filled); rewound: its
 * partition went back within its assignment (an offset reset). OW_ENOMEM:
 * the worker must stop. */
int ow_delivery_track(ow_delivery *d, ow_job *job, int rewound);
/* Once every turn of the consumer thread's loop: commits what is due. */
void ow_delivery_tick(ow_delivery *d);
/* A rebalance callback came (inside the consumer's poll). */
void ow_delivery_rebalanced(ow_delivery *d);
/* Commits what was delivered, waiting for the answer until deadline_ms at
 * most; what is not committed is redelivered later, which the contract
 * allows. */
void ow_delivery_commit(ow_delivery *d, const char *why, int64_t deadline_ms);
/* The partitions are revoked (lost: they may already belong to another
 * member), after what was in flight of them was waited for: commits what
 * of them was delivered, unless they were lost, and ends their epochs in
 * the ledger. */
void ow_delivery_revoke(ow_delivery *d, const rd_kafka_topic_partition_list_t *parts, int lost);
/* At the stop, once the lanes and the delivery poller ended: delivers what
 * was produced, by deadline_ms; what cannot be is given up and redelivered
 * later. */
void ow_delivery_flush(ow_delivery *d, int64_t deadline_ms);
/* With the gate closed, after the producer's outputs in flight were given
 * up (a replaced producer, OW_PRODUCER_REPLACED): every assigned
 * partition goes back to where what was delivered ends, in a new epoch of
 * the ledger, and the consumer with it. Returns how many partitions went
 * back. */
int ow_delivery_rewind(ow_delivery *d);

/* --- Lanes ----------------------------------------------------------------- */

/* Around a lane's publication of a batch (the publish gate). 0: nothing
 * may be produced any more (a stop gave up on the transaction): the lane
 * abandons what it holds and does not call ow_delivery_leave. */
int ow_delivery_enter(ow_delivery *d);
void ow_delivery_leave(ow_delivery *d);
/* A decided or invalid job, with the lane's hold: its outputs are produced
 * now or, in exactly-once mode, once every earlier job of its partition
 * was. */
void ow_delivery_publish(ow_delivery *d, ow_job *job);
/* Publishes a job's REQUEST_IN_PROGRESS answer; the caller keeps its
 * hold. */
void ow_delivery_in_progress(ow_delivery *d, ow_job *job);
/* A job given up without outputs: it ends not done. In exactly-once mode
 * no later job of its partition is published in this epoch. */
void ow_delivery_abandon(ow_delivery *d, ow_job *job);

/* --- Kafka's callbacks and the ledger's ----------------------------------- */

/* The ledger's store function (opaque: the delivery): every output of the
 * partition is acknowledged below offset. Called with the ledger's lock
 * held. */
void ow_delivery_store_offset(void *opaque, int32_t partition, int64_t offset);
/* A delivery report (the producer's dr_msg_cb, on the delivery poller). */
void ow_delivery_delivered(ow_delivery *d, rd_kafka_t *rk, const rd_kafka_message_t *m);
/* The answer to a commit the consumer made by itself (its
 * offset_commit_cb, inside the consumer's poll). */
void ow_delivery_committed(ow_delivery *d, rd_kafka_resp_err_t err,
                           rd_kafka_topic_partition_list_t *offsets);
/* The producer failed fatally (its error callback, any thread): what that
 * leads to. */
ow_producer_fate ow_delivery_producer_failed(ow_delivery *d);

#endif
