/*
 * Private to output.c: the output gate (output.gate, issue 12).
 *
 * librdkafka 2.0.2's broker thread busy-polls while a partition's lingered
 * results wait behind its one produce request in flight (the idempotence
 * window counts messages, not requests; 1.36 s of the worker's 2.9 s of CPU
 * replaying 100,000 batches, docs/performance.md, "The producer's busy
 * wait"). The gate keeps that from happening: outputs go to the producer
 * for one linger after it was idle; after that they wait here, in the order
 * they came, until every output handed over is acknowledged, and then go
 * together. So each partition has at most one request in flight and nothing
 * lingers behind it.
 *
 * The gate is one for all partitions: a partition whose leader is away
 * would hold every other partition's results. So a held output goes on
 * after OW_GATE_MAX_HOLD_US whatever is in flight (results then wait for
 * the producer as they did without the gate), and the held bytes are
 * bounded: past max_held_bytes a send is refused with QUEUE_FULL, as the
 * producer's own queue would refuse it (review of bd8f0b8).
 *
 * The gate knows nothing of jobs or topics' meaning: it copies key and
 * value, keeps the headers and an opaque pointer, and hands each output to
 * a function the caller gives (rd_kafka_producev in the worker, a recorder
 * in tests/unit/test_gate.c).
 */
#ifndef OW_GATE_INTERNAL_H
#define OW_GATE_INTERNAL_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The longest an output waits for the gate: well above a produce round
 * trip on a busy broker (10-60 ms here), well below what an outage of one
 * partition's leader may last. */
#define OW_GATE_MAX_HOLD_US 250000

/* One output held by the gate; its key, then its value, follow. */
typedef struct ow_gate_msg {
    struct ow_gate_msg *next;
    const char *topic;
    void *opaque;
    rd_kafka_headers_t *h; /* NULL once the hand-over refused it (destroyed) */
    rd_kafka_resp_err_t err;
    int64_t since_us;       /* when it was held */
    int has_key, has_value; /* 0: NULL (no key, a tombstone), not empty */
    size_t key_len, len;
    char data[];
} ow_gate_msg;

/* Hands one output to the producer. On RD_KAFKA_RESP_ERR_NO_ERROR h is the
 * producer's; otherwise it is still the caller's. */
typedef rd_kafka_resp_err_t (*ow_gate_hand_fn)(void *ctx, const char *topic, const void *key,
                                               size_t key_len, const void *value, size_t len,
                                               rd_kafka_headers_t *h, void *opaque);

typedef struct {
    int on;                /* 0: every output is handed over at once */
    int64_t linger_us;     /* how long outputs go through after the producer was idle */
    int64_t max_hold_us;   /* OW_GATE_MAX_HOLD_US; tests shorten it */
    size_t max_held_bytes; /* 0: no bound */
    ow_gate_hand_fn hand;
    void *ctx;
    /* mu guards held and window_until_us and orders every hand-over;
     * in_flight is decremented by delivery reports without it. */
    pthread_mutex_t mu;
    ow_gate_msg *held, *held_tail; /* oldest first */
    size_t n_held, held_bytes;
    int64_t window_until_us;
    _Atomic int64_t in_flight; /* handed over, not yet reported */
} ow_gate;

void ow_gate_init(ow_gate *g, int on, int64_t linger_us, ow_gate_hand_fn hand, void *ctx);
/* Frees what is still held (their headers too); their opaques are the
 * caller's business, so call ow_gate_take before when they matter. */
void ow_gate_destroy(ow_gate *g);

/* Hands one output over, or holds a copy while the gate is closed. h is
 * consumed either way unless the output was refused (then *e says why,
 * RD_KAFKA_RESP_ERR__QUEUE_FULL when the held bytes are at their bound, and
 * h is still the caller's). Returns 1 when held, 0 when handed over or
 * refused, -1 when a copy could not be allocated (h destroyed). */
int ow_gate_send(ow_gate *g, const char *topic, const void *key, size_t key_len, const void *value,
                 size_t len, rd_kafka_headers_t *h, void *opaque, rd_kafka_resp_err_t *e);
/* Counts n outputs handed to the producer past the gate (a notice; -1
 * when the producer refused one counted before it was handed over). */
void ow_gate_count(ow_gate *g, int n);
/* A delivery report of any output counted in flight. */
void ow_gate_acked(ow_gate *g);

/* Once nothing is in flight, or the oldest output held has waited
 * max_hold_us, hands over everything held, oldest first.
 * With stop_on_full, a full local queue stops it and the rest stay held, in
 * order. Returns the outputs the hand-over refused, oldest first (each with
 * its err; their headers destroyed), for the caller to settle and free. */
ow_gate_msg *ow_gate_release(ow_gate *g, int stop_on_full);
/* Takes everything held off the gate, oldest first (the shutdown ran out of
 * time); the caller settles and frees each, and destroys its h. */
ow_gate_msg *ow_gate_take(ow_gate *g);
size_t ow_gate_held(ow_gate *g);

#endif
