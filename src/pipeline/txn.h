/*
 * The Kafka transaction of exactly-once mode (txn.c). Private to the
 * pipeline. With processing.guarantee = at_least_once only the gate works
 * (the worker closes it to replace a failed producer); the rest does
 * nothing.
 *
 * Outputs are produced only inside a transaction, between ow_txn_enter and
 * ow_txn_leave (a lane's whole publication of a batch). The consumer
 * thread commits: it closes the gate (waiting for every producer to
 * leave), flushes the producer so that the ledger has seen every
 * acknowledgement, sends the offsets the ledger noted with the group's
 * metadata, commits, begins the next transaction and opens the gate.
 * Outputs and the offsets that cover them are visible together or not at
 * all; the sequencer sees to it that every produced output is covered.
 *
 * When a transaction cannot commit (a delivery failed, the coordinator
 * says it must be aborted, partitions were lost), it is aborted: every
 * partition goes back to its committed offset, what was in flight is
 * dropped, and the messages are consumed and decided again; the database
 * answers them from the stored responses, byte for byte. A fenced or
 * otherwise fatal producer stops the worker with one log line.
 */
#ifndef OW_TXN_H
#define OW_TXN_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ow/config.h"
#include "ow/ledger.h"
#include "runstate.h"

/* Called when every partition's epoch ended (an abort): what waits for
 * release is to be dropped. */
typedef void (*ow_txn_epoch_end_fn)(void *opaque);

typedef struct {
    int enabled; /* processing.guarantee = exactly_once_v2 */
    const ow_config *cfg;
    ow_runstate *rs;
    ow_ledger *ledger;
    rd_kafka_t *producer;
    rd_kafka_t *consumer;
    ow_txn_epoch_end_fn epoch_end;
    void *opaque;
    /* The gate: producers inside, or the committer closing it. */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int inside;
    int closing;
    /* Offsets, per partition: what the ledger noted (the next offset to
     * consume) and what the last commit sent (-1: nothing). */
    pthread_mutex_t mu;
    int64_t *noted;
    int64_t *committed;
    size_t n_parts;
    _Atomic int produced; /* since the transaction began */
    _Atomic int abort_wanted;
    int open; /* a transaction is begun */
    int64_t last_commit_ms;
} ow_txn;

void ow_txn_init(ow_txn *tx, const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger,
                 ow_txn_epoch_end_fn epoch_end, void *opaque);
void ow_txn_destroy(ow_txn *tx);
/* Registers the transactional id (fencing an earlier producer with it and
 * aborting its open transaction) and begins the first transaction. */
int ow_txn_start(ow_txn *tx, rd_kafka_t *producer, rd_kafka_t *consumer, ow_error *err);

/* Around producing: waits while the committer holds the gate. */
void ow_txn_enter(ow_txn *tx);
void ow_txn_leave(ow_txn *tx);
/* Something was produced in the open transaction. */
void ow_txn_produced(ow_txn *tx);
/* The ledger's store function: the partition's outputs are acknowledged up
 * to offset (the next to consume). Called with the ledger's lock held. */
void ow_txn_note_offset(ow_txn *tx, int32_t partition, int64_t offset);
/* A delivery failed inside the transaction: it must be aborted. */
void ow_txn_want_abort(ow_txn *tx);

/* 1 when the consumer thread should commit (or abort) now. */
int ow_txn_due(ow_txn *tx, int64_t now_ms);
/* Commits the transaction (or aborts it, if it must be), retrying what
 * librdkafka calls retriable until deadline_ms. OW_OK: committed, or
 * nothing to commit, or a flush that could not finish in time (the
 * transaction stays open); OW_ERETRY: aborted and rewound; OW_EFATAL: the
 * worker is stopping (fenced, or a fatal producer error; logged). */
int ow_txn_commit(ow_txn *tx, const char *why, int64_t deadline_ms);

/* For a revoke: close the gate, commit, let the caller end the revoked
 * partitions' epochs (ow_txn_forget), open the gate. */
void ow_txn_close(ow_txn *tx);
int ow_txn_commit_closed(ow_txn *tx, const char *why, int64_t deadline_ms);
void ow_txn_open(ow_txn *tx);
/* The partition is no longer ours: nothing of it is sent any more. */
void ow_txn_forget(ow_txn *tx, int32_t partition);
/* With the gate closed: aborts the transaction and rewinds (partitions
 * lost, or a rewound input). */
int ow_txn_abort_closed(ow_txn *tx, const char *why);

#endif
