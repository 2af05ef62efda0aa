/*
 * The Kafka transaction of exactly-once mode (txn.c). Private to the
 * pipeline: only exactly-once delivery (delivery_eos.c) uses it.
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
 * dropped (the caller drops what waits for release, then begins the next
 * transaction), and the messages are consumed and decided again; the
 * database answers them from the stored responses, byte for byte. A fenced or
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

#include "ledger.h"
#include "ow/config.h"
#include "publish_gate.h"
#include "runstate.h"

/* The thread that calls send_offsets_to_transaction (txn.c). */
typedef struct ow_txn_caller ow_txn_caller;

/* ow_txn_commit_closed's answer when it committed nothing and nothing failed: the
 * flush did not finish in time (the transaction stays open), or a stop
 * gave up on the commit (the transaction is sealed). */
#define OW_TXN_NOT_COMMITTED 1

typedef struct {
    const ow_config *cfg;
    ow_runstate *rs;
    ow_ledger *ledger;
    rd_kafka_t *producer;
    rd_kafka_t *consumer;
    ow_publish_gate *gate; /* sealed with the transaction */
    int sealed;            /* a stop gave up on a call: nothing more is produced */
    /* Offsets, per partition: what the ledger noted (the next offset to
     * consume) and what the last commit sent (-1: nothing). */
    pthread_mutex_t mu;
    int64_t *noted;
    int64_t *committed;
    size_t n_parts;
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
                 ow_publish_gate *gate);
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

/* The calls below are made with the publish gate closed, on the consumer
 * thread. */

/* Commits the transaction (or aborts it, if it must be), and begins the
 * next. The producer's flush waits until deadline_ms, and outside the stop
 * itself no longer than until a stop is asked for (the stop's own commit
 * flushes again); the calls that follow are retried while librdkafka calls
 * them retriable, until a stop gives up on them (at its deadline, less
 * what it keeps for leaving the group unless this is its own commit).
 * OW_OK: committed, or nothing to commit; OW_TXN_NOT_COMMITTED: the flush
 * did not finish (the transaction stays open), or a stop gave up (it is
 * sealed); OW_ERETRY: aborted and rewound, and no transaction is open (see
 * ow_txn_abort_closed); OW_EFATAL: the worker is stopping (fenced, or a
 * fatal producer error; logged). */
int ow_txn_commit_closed(ow_txn *tx, const char *why, int64_t deadline_ms);
/* Commits as ow_txn_commit_closed, and aborts the transaction when the
 * commit could not finish: outputs of partitions that are about to go must
 * never be committed later without their offsets. */
int ow_txn_end_closed(ow_txn *tx, const char *why, int64_t deadline_ms);
/* The partition is no longer ours: nothing of it is sent any more. */
void ow_txn_forget(ow_txn *tx, int32_t partition);
/* Aborts the transaction (partitions lost, or a rewound input) and
 * rewinds: every assigned partition gets a new epoch in the ledger and the
 * consumer goes back to its committed offset. OW_ERETRY then: no
 * transaction is open, and the caller drops what waits for release before
 * it begins the next (ow_txn_begin), so that nothing of the aborted epochs
 * is produced into it. OW_OK when none was open; OW_TXN_NOT_COMMITTED when
 * a stop gave up on the abort (sealed); OW_EFATAL. */
int ow_txn_abort_closed(ow_txn *tx, const char *why);
/* Begins the next transaction: OW_OK, or OW_EFATAL (logged). */
int ow_txn_begin(ow_txn *tx);

#endif
