/*
 * The Kafka transaction of exactly-once mode (txn.c). Private to the
 * pipeline. With processing.guarantee = at_least_once it does nothing.
 *
 * Outputs are produced only inside a transaction, inside the publish
 * gate (publish_gate.h: a lane's whole publication of a batch). The
 * consumer thread commits: it closes the gate (waiting for every producer
 * to leave), flushes the producer so that the ledger has seen every
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
 * otherwise fatal producer stops the worker with one log line; a fenced
 * one says whether its transaction had outlived transaction.timeout.ms.
 *
 * Every call on the producer is bounded: while a broker hangs, a stop
 * gives up on a commit or an abort at its deadline. The transaction is
 * then sealed: nothing more is produced into it and no call is made on the
 * producer again, so its outputs and offsets stay together whatever the
 * broker does with it (it commits them if the commit reached the
 * coordinator, else the next producer with the transactional id aborts
 * them).
 */
#ifndef OW_TXN_H
#define OW_TXN_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "publish_gate.h"
#include "ow/config.h"
#include "ow/ledger.h"
#include "runstate.h"

/* Called when every partition's epoch ended (an abort): what waits for
 * release is to be dropped. */
typedef void (*ow_txn_epoch_end_fn)(void *opaque);

/* The thread that calls send_offsets_to_transaction (txn.c). */
typedef struct ow_txn_caller ow_txn_caller;

/* ow_txn_commit's answer when it committed nothing and nothing failed: the
 * flush did not finish in time (the transaction stays open), or a stop
 * gave up on the commit (the transaction is sealed). */
#define OW_TXN_NOT_COMMITTED 1

typedef struct {
    int enabled; /* processing.guarantee = exactly_once_v2 */
    const ow_config *cfg;
    ow_runstate *rs;
    ow_ledger *ledger;
    rd_kafka_t *producer;
    rd_kafka_t *consumer;
    ow_publish_gate *gate; /* sealed when a stop gave up on a call: nothing more is produced */
    ow_txn_epoch_end_fn epoch_end;
    void *opaque;
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
    /* When the open transaction got its first output or offsets (0: none
     * yet): the broker counts its timeout from about then. */
    _Atomic int64_t opened_ms;
    int64_t timeout_ms;         /* the producer's transaction.timeout.ms */
    _Atomic int failure_logged; /* the producer's failure was reported */
    ow_txn_caller *caller;
} ow_txn;

void ow_txn_init(ow_txn *tx, const ow_config *cfg, ow_runstate *rs, ow_ledger *ledger,
                 ow_publish_gate *gate, ow_txn_epoch_end_fn epoch_end, void *opaque);
void ow_txn_destroy(ow_txn *tx);
/* Registers the transactional id (fencing an earlier producer with it and
 * aborting its open transaction) and begins the first transaction. A stop
 * asked for meanwhile ends the wait: nothing is produced then. */
int ow_txn_start(ow_txn *tx, rd_kafka_t *producer, rd_kafka_t *consumer, ow_error *err);
/* Ends the thread that calls send_offsets_to_transaction. Returns 1 when
 * the producer may be destroyed, 0 when a call a stop gave up on still
 * runs on it (the process then exits without destroying the producer). */
int ow_txn_release(ow_txn *tx);

/* Something was produced in the open transaction. */
void ow_txn_produced(ow_txn *tx);
/* The ledger's store function: the partition's outputs are acknowledged up
 * to offset (the next to consume). Called with the ledger's lock held. */
void ow_txn_note_offset(ow_txn *tx, int32_t partition, int64_t offset);
/* A delivery failed inside the transaction: it must be aborted. */
void ow_txn_want_abort(ow_txn *tx);
/* The producer's fatal error as its error callback reports it (any
 * thread): a fenced producer is reported (once) as at a transactional
 * call, and the worker stops. Returns 0 for another error, which the
 * caller reports. */
int ow_txn_producer_failed(ow_txn *tx);

/* 1 when the consumer thread should commit (or abort) now. */
int ow_txn_due(ow_txn *tx, int64_t now_ms);
/* Commits the transaction (or aborts it, if it must be). The producer's
 * flush waits until deadline_ms, and outside the stop itself no longer
 * than until a stop is asked for (the stop's own commit flushes again);
 * the calls that follow are retried while librdkafka calls them
 * retriable, until a stop gives up on them (at its deadline, less what it
 * keeps for leaving the group unless this is its own commit). OW_OK:
 * committed, or nothing to commit; OW_TXN_NOT_COMMITTED: the flush did not
 * finish (the transaction stays open), or a stop gave up (it is sealed);
 * OW_ERETRY: aborted and rewound; OW_EFATAL: the worker is stopping
 * (fenced, or a fatal producer error; logged). */
int ow_txn_commit(ow_txn *tx, const char *why, int64_t deadline_ms);

/* For a revoke, with the gate closed: end the transaction, then let the
 * caller end the revoked partitions' epochs (ow_txn_forget). */
int ow_txn_commit_closed(ow_txn *tx, const char *why, int64_t deadline_ms);
/* Commits as ow_txn_commit_closed, and aborts the transaction when the
 * commit could not finish: outputs of partitions that are about to go must
 * never be committed later without their offsets. */
int ow_txn_end_closed(ow_txn *tx, const char *why, int64_t deadline_ms);
/* The partition is no longer ours: nothing of it is sent any more. */
void ow_txn_forget(ow_txn *tx, int32_t partition);
/* With the gate closed: aborts the transaction and rewinds (partitions
 * lost, or a rewound input). */
int ow_txn_abort_closed(ow_txn *tx, const char *why);

#endif
