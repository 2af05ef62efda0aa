/*
 * Test and tool kit: Kafka administration and I/O, processes, and the
 * deterministic message generator. Used by the end-to-end tests, the chaos
 * verifier and the benchmark; not part of the worker.
 */
#ifndef OW_KIT_H
#define OW_KIT_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h> /* after rdkafka.h */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kit_proc.h"

/* --- Kafka --------------------------------------------------------------- */

typedef struct {
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms;
    char *key; /* NULL when absent */
    size_t key_len;
    char *value;
    size_t len;
    int value_null;              /* a null value (tombstone), as opposed to an empty one */
    rd_kafka_headers_t *headers; /* a copy of the message's; NULL when it had none */
} kit_msg;

typedef struct {
    kit_msg *v;
    size_t n;
    size_t cap;
} kit_msgs;

void kit_msgs_free(kit_msgs *m);
/* Value of a header in a kit_msg (the last of that name, read with the
 * pipeline's ow_kafka_headers_get), copied into out and cut to outsz - 1
 * bytes; returns 0 if absent. */
int kit_header(const kit_msg *m, const char *name, char *out, size_t outsz);

/* Creates a topic (replication 1); an existing topic is not an error. */
int kit_create_topic(const char *bootstrap, const char *topic, int partitions);
/* The same with one topic-level config (e.g. max.message.bytes). */
int kit_create_topic_with(const char *bootstrap, const char *topic, int partitions,
                          const char *config, const char *value);
/* Sets one topic-level config (AlterConfigs: the topic's other dynamic
 * configs go back to their defaults). */
int kit_alter_topic_config(const char *bootstrap, const char *topic, const char *config,
                           const char *value);
/* Raises the topic's partition count to total (CreatePartitions). */
int kit_create_partitions(const char *bootstrap, const char *topic, int total);
/* Deletes the partition's records below before (DeleteRecords): its log
 * start becomes before. */
int kit_delete_records(const char *bootstrap, const char *topic, int32_t partition, int64_t before);
/* add = 1 creates, 0 deletes one LITERAL ALLOW ACL (see kit_kafka.c). */
int kit_acl(const char *bootstrap, int add, const char *principal, const char *type,
            const char *name, const char *op);
/* A producer for the kit (idempotent, acks=all); extra_conf is
 * "key=value,..." or NULL. kit_producer_conf is its configuration, new. */
rd_kafka_t *kit_producer(const char *bootstrap, const char *extra_conf);
rd_kafka_conf_t *kit_producer_conf(const char *bootstrap, const char *extra_conf);
/* Produces one message asynchronously; key may be NULL. partition -1 = by key. */
int kit_produce(rd_kafka_t *p, const char *topic, int32_t partition, const void *key,
                size_t key_len, const void *value, size_t len);
/* The same with the delivery report's opaque; waits while the queue is
 * full and returns librdkafka's answer (opaque stays the caller's unless
 * it is RD_KAFKA_RESP_ERR_NO_ERROR). */
rd_kafka_resp_err_t kit_produce_with(rd_kafka_t *p, const char *topic, int32_t partition,
                                     const void *key, size_t key_len, const void *value, size_t len,
                                     void *opaque);
/* The same with headers, which the producer takes (destroyed here when
 * the message could not be queued); waits while the queue is full. */
rd_kafka_resp_err_t kit_produce_headers(rd_kafka_t *p, const char *topic, int32_t partition,
                                        const void *key, size_t key_len, const void *value,
                                        size_t len, rd_kafka_headers_t *h);
/* Flushes; returns the number of messages that failed to deliver. */
int kit_flush(rd_kafka_t *p, int timeout_ms);
/* A librdkafka mock cluster of n brokers, in a client of its own, *host,
 * which the caller destroys after the cluster; NULL on failure. */
rd_kafka_mock_cluster_t *kit_mock_cluster(int brokers, rd_kafka_t **host);

/* A producer to one topic that replaces itself after a fatal error and
 * sends again what the failed one did not deliver (see kit_send.c). */
typedef struct kit_sender kit_sender;
typedef struct {
    long replaced; /* producers replaced after a fatal error */
    long resent;   /* messages sent again by a replacement */
    long lost;     /* held by a failed producer past every purge: not sent again */
} kit_send_stats;

/* NULL when no producer can be created. */
kit_sender *kit_sender_new(const char *bootstrap, const char *topic, const char *extra_conf);
/* Queues a copy of one message (key may be NULL, value not; partitioned
 * by key);
 * 0, or -1 when it cannot be queued or producers keep failing. */
int kit_send(kit_sender *s, const void *key, size_t key_len, const void *value, size_t len);
/* Serves delivery reports for up to timeout_ms and replaces a failed
 * producer; 0, or -1 as kit_send. */
int kit_sender_poll(kit_sender *s, int timeout_ms);
/* Waits up to timeout_ms for every message (a replacement meanwhile, and
 * the last producer's end, can each take 32 s more), frees s and returns
 * how many were not delivered; fills st when not NULL. */
long kit_sender_close(kit_sender *s, int timeout_ms, kit_send_stats *st);
/* For tests: messages and events the current producer has not reported. */
long kit_sender_outq(const kit_sender *s);
/* For tests: raises a fatal error in the current producer, as the broker's
 * OUT_OF_ORDER_SEQUENCE_NUMBER does; 0, or -1. */
int kit_sender_test_fatal(kit_sender *s);

/* How a reader treats records of transactions: as librdkafka's default has
 * it (read_committed), or with isolation.level set explicitly. */
typedef enum { KIT_READ_DEFAULT = 0, KIT_READ_COMMITTED, KIT_READ_UNCOMMITTED } kit_isolation;

/* Reads a topic from the beginning to its current end (or until max
 * messages); appends to out. Returns 0 or -1. */
int kit_read_topic(const char *bootstrap, const char *topic, int timeout_ms, kit_msgs *out);
/* The same with an isolation level. The end of a partition is its end
 * offset as that level sees it: with read_committed the last stable offset,
 * which a transaction still open holds back. */
int kit_read_topic_iso(const char *bootstrap, const char *topic, int timeout_ms, kit_isolation iso,
                       kit_msgs *out);
/* Appends the record at topic/partition/offset, read with read_uncommitted
 * (whatever its transaction's outcome), to out; 0 or -1 (none within 10 s). */
int kit_read_one(const char *bootstrap, const char *topic, int32_t partition, int64_t offset,
                 kit_msgs *out);
/* End offsets (high watermarks) of every partition; returns the count. */
int kit_end_offsets(const char *bootstrap, const char *topic, int64_t *ends, int max);
/* The same with each partition's log start in starts (NULL: not wanted). */
int kit_watermarks(const char *bootstrap, const char *topic, int64_t *starts, int64_t *ends,
                   int max);
/* What group still has to consume of each partition of topic: its end
 * offset minus the committed offset, or minus its log start when that is
 * later (what the broker deleted can no longer be consumed; a group without
 * an offset starts there). The one definition of lag for `ow-kit lag` and
 * ow-verify; the worker's order_worker_consumer_lag counts the same way.
 * Fills committed (RD_KAFKA_OFFSET_INVALID where none), ends and lag;
 * returns the partition count, -1 on failure or more than max (at most
 * 256). */
int kit_group_lag(const char *bootstrap, const char *group, const char *topic, int max,
                  int64_t *committed, int64_t *ends, int64_t *lag);
/* A client for repeated offset queries. With read_committed, a ListOffsets
 * for the latest offset answers the last stable offset (KIP-98), so that
 * kit_query_ends gives the LSO; with read_uncommitted the high watermark. */
rd_kafka_t *kit_offsets_client(const char *bootstrap, kit_isolation iso);
/* The partition count of topic (-1 when unknown), asked of rk. */
int kit_partition_count(rd_kafka_t *rk, const char *topic);
/* End offsets of partitions 0..n-1 as rk's isolation level sees them; a
 * partition that does not answer within timeout_ms gets -1. */
void kit_query_ends(rd_kafka_t *rk, const char *topic, int n, int timeout_ms, int64_t *ends);
/* Committed offsets of a group; RD_KAFKA_OFFSET_INVALID (-1001) where nothing is committed. */
int kit_committed(const char *bootstrap, const char *group, const char *topic, int partitions,
                  int64_t *out);

/* --- Generator ----------------------------------------------------------- */

typedef enum {
    KIT_NEW = 0, /* a first request */
    KIT_RETRY,   /* same key, same content as an earlier message */
    KIT_REUSE,   /* same key, other content */
    KIT_CLASH,   /* new key, an existing order number with another amount */
    KIT_INVALID, /* fails validation */
    KIT_KIND_COUNT
} kit_kind;

typedef struct {
    kit_kind kind;
    char key[96];
    size_t key_len; /* 0 with has_key 0: no key */
    int has_key;
    char *value;
    size_t len;
    int64_t user_id;
    int n_orders; /* orders in the value (a retry: those of the message it repeats) */
} kit_gen_msg;

typedef struct kit_gen kit_gen;

/* percentages of retries, reuses, clashes and invalid messages; the rest
 * are new. items_max: orders per batch are 1..items_max (mean about half). */
kit_gen *kit_gen_new(uint64_t seed, int pct_retry, int pct_reuse, int pct_clash, int pct_invalid,
                     int items_max, const char *key_prefix);
/* Switches the orders per new batch to min..max with the given mean, drawn
 * from a truncated geometric distribution (mean 0: uniform in min..max);
 * for example 1..20 with mean 5. Without this call the default above holds.
 * Returns 0, or -1 when the bounds are invalid or memory runs out. */
int kit_gen_set_items(kit_gen *g, int min, int max, double mean);
/* Growth benchmark: messages are numbered from first + 1, so that
 * runs against one preloaded database never reuse a key or an
 * external_order_no; random_keys: a new batch's key is prefix-<16 hex
 * digits> from a bijective mix of its number (unique, in random index
 * order like UUIDs) instead of prefix-<number>. */
void kit_gen_set_numbering(kit_gen *g, uint64_t first, int random_keys);
void kit_gen_free(kit_gen *g);
/* The next message (owned by the generator until the next call). */
const kit_gen_msg *kit_gen_next(kit_gen *g);

#endif
