/*
 * ow-path internals: a corpus of order-batch messages made by the kit's
 * deterministic generator, and the worker's in-process path over it: what
 * happens to a message between the consumer and the producer, less the
 * database and Kafka themselves. Per message:
 *
 *   - the job (src/pipeline/job.c): key copy and check, the trace context
 *     read from the message's headers (a message of the corpus has none, or,
 *     with pt_corpus_opts.traceparent, a W3C traceparent header), parse and
 *     validation, the key hash and the request digest, or, for an invalid
 *     message, its 400 body and its dead-letter copy;
 *   - the decision's body as the deciding transaction builds it
 *     (src/store/store_orders.c): a new batch gets its order ids and numbers and
 *     a 201 body, a clash a 409 ORDER_ALREADY_EXISTS, a reused key a 409
 *     IDEMPOTENCY_KEY_REUSED; a retry publishes the stored body, which the
 *     database returns, so nothing is built for it;
 *   - the headers of its outputs (src/pipeline/output.c);
 *   - freeing the job.
 *
 * Single-threaded, no I/O, no clock (the id generator reads a fixed one), a
 * fixed seed for span ids and the log below its warnings, so the same
 * binary and corpus execute the same instructions every time:
 * scripts/bench-cost.sh counts them with callgrind. Not part of the
 * worker.
 */
#ifndef OW_PATH_H
#define OW_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "kit.h"

typedef struct {
    char *key; /* NULL: no key */
    size_t key_len;
    char *value;
    size_t len;
    kit_kind kind;
    int n_orders;
    rd_kafka_headers_t *headers; /* NULL: none, as most messages */
} pt_msg;

typedef struct {
    pt_msg *v;
    size_t n;
    size_t kinds[KIT_KIND_COUNT];
    size_t orders; /* in the values, as the generator made them */
} pt_corpus;

typedef struct {
    uint64_t seed;
    size_t messages;
    int pct_retry, pct_reuse, pct_clash, pct_invalid;
    int items_min, items_max;
    double items_mean; /* 0: uniform in items_min..items_max */
    /* 1: every message carries a traceparent header (a trace of its own,
     * sampled), whose trace the job continues; 0: no headers. */
    int traceparent;
} pt_corpus_opts;

/* The benchmark's mix (tools/ow_bench.c: batches of 1-20 orders, mean 5,
 * 10 % retries, 1 % reused keys, 1 % clashes) with 5 % invalid messages,
 * 1,000 messages, no headers. */
void pt_corpus_defaults(pt_corpus_opts *o);
/* Returns 0, or -1 for options the generator refuses or no memory. */
int pt_corpus_make(const pt_corpus_opts *o, pt_corpus *c);
void pt_corpus_free(pt_corpus *c);
/* FNV-1a over every message's kind, key, value and traceparent. */
uint64_t pt_corpus_checksum(const pt_corpus *c);

typedef struct {
    size_t messages; /* rounds x corpus messages */
    size_t valid, invalid;
    size_t bodies_built; /* 201, 409 and 400 bodies (a retry's is stored) */
    size_t headers;      /* output header sets */
    /* FNV-1a over the first round's outputs: validity, digest, body bytes,
     * header names and values. Only the first round feeds it, so its cost
     * is the same in every run and cancels out of instructions per message. */
    uint64_t checksum;
} pt_stats;

/* The path over every message of c, rounds times. Returns 0, or -1 when a
 * job could not be made (no memory). */
int pt_run(const pt_corpus *c, int rounds, pt_stats *st);

/* Instructions per message from two runs of different lengths, so that the
 * start-up both share cancels out: (ir2 - ir1) / (n2 - n1), rounded to the
 * nearest integer. Returns 0, or -1 when n2 <= n1 or ir2 < ir1 (the longer
 * run cannot have executed fewer instructions). */
int pt_per_message(uint64_t ir1, uint64_t n1, uint64_t ir2, uint64_t n2, uint64_t *out);

#endif
