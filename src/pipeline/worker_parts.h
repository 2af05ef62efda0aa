/*
 * The worker's parts (worker*.c), private to them: the consumer thread's
 * loop and stop (worker.c), the start and its checks (worker_start.c), the
 * group: rebalances, passed-over input and leaving (worker_group.c), the
 * delivery poller (worker_delivery.c) and what the HTTP endpoint reports
 * (worker_status.c). Calls go from worker.c down to the others, and from
 * worker_start.c to group, delivery and status; none calls back up. How
 * outputs and offsets reach Kafka is the delivery mode's (delivery.h),
 * which every part calls and which calls none of them.
 */
#ifndef OW_WORKER_PARTS_H
#define OW_WORKER_PARTS_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "delivery.h"
#include "lane.h"
#include "metrics_http.h"
#include "ow/store_watch.h"
#include "ow/worker.h"

typedef struct {
    const ow_config *cfg;
    rd_kafka_t *consumer;
    rd_kafka_t *producer;
    ow_runstate rs;
    ow_ledger ledger;
    ow_delivery *delivery; /* the processing guarantee's */
    ow_output out;
    int out_ready;
    ow_lane_env env;
    ow_lane *lanes;
    size_t n_lanes;
    /* One watch per database (shard): lanes of shard s are
     * lanes[s * worker.lanes ...], and use watches[s]. */
    ow_store_watch **watches;
    unsigned n_dbs;
    ow_idgen ids;
    ow_job_maker maker; /* the poll thread's */

    pthread_t poller;
    int poller_started;
    _Atomic int poller_stop;
    _Atomic int producer_failed; /* the producer failed fatally and is to be replaced */
    ow_inflight inflight;        /* what backpressure weighs */
    int paused;
    int64_t full_since_ms; /* in flight at the limit since then, unpaused; 0 = not */

    int subscribed;
    _Atomic int ever_assigned; /* the first assignment (possibly empty) arrived */
    int consumer_unsafe;       /* closing it could abort (see leave_group) */
    int consumer_closed;       /* the group was left cleanly */

    /* Readiness, for /readyz. */
    _Atomic int broker_ok;  /* the delivery poller's last metadata request was answered */
    _Atomic int assigned;   /* partitions currently assigned */
    _Atomic int outputs_ok; /* the output topics were found */
    ow_metrics_http *http;
} ow_worker;

/* worker_group.c: rebalances, passed-over input, leaving the group. */
/* The consumer's offset_commit_cb: its own commits' answers go to the
 * delivery. */
void ow_worker_on_periodic_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                  rd_kafka_topic_partition_list_t *offsets, void *opaque);
/* Whether the input passed over offsets the broker had deleted before
 * they were read (retention, DeleteRecords): at is the offset of a
 * message, or the end of the partition, and seen what the ledger expected
 * there. Such offsets are counted and logged with their range. Costs
 * nothing when the input went on where expected; the first message of an
 * assignment asks the group for its committed offset. Consumer thread. */
void ow_worker_check_skipped(ow_worker *w, int32_t partition, int64_t at,
                             const ow_ledger_seen *seen);
/* librdkafka's partition EOF at end: the ledger may pass the records
 * behind the last message (ow_ledger_reached_end). Consumer thread. */
void ow_worker_reached_end(ow_worker *w, int32_t partition, int64_t end);
void ow_worker_on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                            rd_kafka_topic_partition_list_t *parts, void *opaque);
/* Leaves the group within the stop's deadline. */
void ow_worker_leave_group(ow_worker *w);

/* worker_delivery.c: the producer's callbacks and the delivery poller. */
void ow_worker_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);
void ow_worker_on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque);
void *ow_worker_poller(void *arg);

/* worker_status.c: what /metrics and /readyz report. */
/* What each database's watch says, into the shard gauges and db_ok; with
 * why, the reason of each database that does not answer. */
int ow_worker_databases_up(ow_worker *w, ow_buf *why);
int ow_worker_start_http(ow_worker *w, ow_error *err);

/* worker_start.c: clients, watches, lanes, the poller, the endpoint, the
 * checks, the subscription. */
int ow_worker_start(ow_worker *w, const volatile sig_atomic_t *stop, ow_error *err);
/* Replaces a producer that failed fatally, where the delivery says so
 * (ow_delivery_producer_failed): its outputs in flight are given up, every
 * partition goes back to where what was delivered ends
 * (ow_delivery_rewind), and a new producer takes over. Consumer thread. */
void ow_worker_replace_producer(ow_worker *w);

#endif
