/*
 * The output gate (src/gate.c, issue 12): what it holds, in which order it
 * hands it over, and what it gives back when the producer refuses. The
 * producer is replaced by a recorder; delivery reports are calls to
 * ow_gate_acked.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gate_internal.h"

#define MAX_RECORDED 200000

/* What the fake producer was handed, in order. */
typedef struct {
    pthread_mutex_t mu;
    size_t n;
    char keys[MAX_RECORDED][8];
    int keyless[MAX_RECORDED]; /* handed over with a NULL key */
    int nulls[MAX_RECORDED];   /* with a NULL value */
    long values[MAX_RECORDED];
    /* The hand-over at this index (counting refusals too) answers refuse. */
    size_t calls, refuse_at;
    rd_kafka_resp_err_t refuse;
} recorder;

static recorder rec;

static rd_kafka_resp_err_t record(void *ctx, const char *topic, const void *key, size_t key_len,
                                  const void *value, size_t len, rd_kafka_headers_t *h,
                                  void *opaque)
{
    recorder *r = ctx;
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;

    (void)topic;
    (void)opaque;
    pthread_mutex_lock(&r->mu);
    if (r->calls++ == r->refuse_at) {
        e = r->refuse;
    } else {
        assert_true(r->n < MAX_RECORDED);
        assert_true(key_len < sizeof(r->keys[0]));
        r->nulls[r->n] = value == NULL;
        assert_true(value == NULL ? len == 0 : len == sizeof(long));
        r->keyless[r->n] = key == NULL;
        if (key_len > 0)
            memcpy(r->keys[r->n], key, key_len);
        r->keys[r->n][key_len] = '\0';
        r->values[r->n] = -1;
        if (value != NULL)
            memcpy(&r->values[r->n], value, sizeof(long));
        r->n++;
        rd_kafka_headers_destroy(h); /* the producer's now */
    }
    pthread_mutex_unlock(&r->mu);
    return e;
}

static int setup(void **state)
{
    (void)state;
    memset(&rec, 0, sizeof(rec));
    pthread_mutex_init(&rec.mu, NULL);
    rec.refuse_at = SIZE_MAX;
    return 0;
}

/* Sends value v under key; returns what ow_gate_send returned. */
static int send_one(ow_gate *g, const char *key, long v)
{
    rd_kafka_resp_err_t e;
    int rc = ow_gate_send(g, "results", key, strlen(key), &v, sizeof(v), rd_kafka_headers_new(1),
                          NULL, &e);

    assert_int_equal(e, RD_KAFKA_RESP_ERR_NO_ERROR);
    return rc;
}

static void assert_recorded(size_t from, const long *want, size_t n)
{
    assert_int_equal(rec.n, from + n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rec.values[from + i], want[i]);
}

static void test_off_hands_over_everything(void **state)
{
    ow_gate g;
    static const long want[] = {1, 2, 3};

    (void)state;
    ow_gate_init(&g, 0, 0, record, &rec);
    for (long v = 1; v <= 3; v++)
        assert_int_equal(send_one(&g, "k", v), 0);
    assert_recorded(0, want, 3);
    assert_int_equal(atomic_load(&g.in_flight), 3);
    assert_int_equal(ow_gate_held(&g), 0);
    ow_gate_destroy(&g);
}

/* With a linger of 0 the window closes at once: while anything is in
 * flight, every output waits, and all of them go when the last report
 * arrives. */
static void test_holds_until_every_report(void **state)
{
    ow_gate g;
    static const long first[] = {1}, next[] = {2, 3}, last[] = {4};

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = INT64_MAX; /* only reports open it */
    assert_int_equal(send_one(&g, "a", 1), 0);
    assert_int_equal(send_one(&g, "b", 2), 1);
    assert_int_equal(send_one(&g, "a", 3), 1);
    assert_recorded(0, first, 1);
    assert_int_equal(ow_gate_held(&g), 2);

    assert_null(ow_gate_release(&g, 1)); /* one still in flight */
    assert_recorded(0, first, 1);

    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_recorded(1, next, 2);
    assert_int_equal(ow_gate_held(&g), 0);
    assert_int_equal(atomic_load(&g.in_flight), 2);

    assert_int_equal(send_one(&g, "c", 4), 1); /* behind the two in flight */
    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_int_equal(rec.n, 3);
    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_recorded(3, last, 1);
    ow_gate_destroy(&g);
}

/* Within one linger of an idle producer, outputs go straight through. */
static void test_window_lets_a_burst_through(void **state)
{
    ow_gate g;
    static const long want[] = {1, 2, 3, 4, 5};

    (void)state;
    ow_gate_init(&g, 1, 60 * 1000000LL, record, &rec);
    for (long v = 1; v <= 5; v++)
        assert_int_equal(send_one(&g, "k", v), 0);
    assert_recorded(0, want, 5);
    assert_int_equal(atomic_load(&g.in_flight), 5);
    ow_gate_destroy(&g);
}

/* The window of one linger closes: an output sent after it, while one is
 * in flight, waits. */
static void test_window_closes_after_linger(void **state)
{
    ow_gate g;

    (void)state;
    ow_gate_init(&g, 1, 20000, record, &rec);
    g.max_hold_us = INT64_MAX;
    assert_int_equal(send_one(&g, "k", 1), 0);
    usleep(50000);
    assert_int_equal(send_one(&g, "k", 2), 1);
    assert_int_equal(rec.n, 1);
    ow_gate_destroy(&g);
}

/* A report that never comes (a partition's leader away) holds the others
 * only for max_hold_us; then what is held goes with the first still in
 * flight. */
static void test_held_too_long_goes_anyway(void **state)
{
    ow_gate g;
    static const long want[] = {1, 2, 3};

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = 5000;
    assert_int_equal(send_one(&g, "stuck", 1), 0);
    assert_int_equal(send_one(&g, "k", 2), 1);
    assert_int_equal(send_one(&g, "k", 3), 1);
    usleep(20000);
    assert_null(ow_gate_release(&g, 1));
    assert_recorded(0, want, 3);
    assert_int_equal(atomic_load(&g.in_flight), 3);
    ow_gate_destroy(&g);
}

/* Held bytes are bounded like the producer's queue: past the bound a send
 * is refused as full and its headers stay the caller's. */
static void test_held_bytes_are_bounded(void **state)
{
    ow_gate g;
    rd_kafka_headers_t *h = rd_kafka_headers_new(1);
    rd_kafka_resp_err_t e;
    long v = 5;

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = INT64_MAX;
    g.max_held_bytes = 3 * (1 + sizeof(long));
    assert_int_equal(send_one(&g, "k", 1), 0);
    for (long i = 2; i <= 4; i++)
        assert_int_equal(send_one(&g, "k", i), 1);
    assert_int_equal(ow_gate_send(&g, "results", "k", 1, &v, sizeof(v), h, NULL, &e), 0);
    assert_int_equal(e, RD_KAFKA_RESP_ERR__QUEUE_FULL);
    assert_int_equal(ow_gate_held(&g), 3);
    assert_int_equal(g.held_bytes, 3 * (1 + sizeof(long)));
    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_int_equal(g.held_bytes, 0);
    assert_int_equal(send_one(&g, "k", 5), 1); /* room again */
    rd_kafka_headers_destroy(h);
    ow_gate_destroy(&g);
}

/* A full queue stops the release; the rest stay held in order and go at
 * the next one. Without stop_on_full (giving up) a full queue is a refusal. */
static void test_full_queue_keeps_order(void **state)
{
    ow_gate g;
    static const long second[] = {2}, rest[] = {3, 4};
    ow_gate_msg *refused;

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = INT64_MAX; /* only reports open it */
    assert_int_equal(send_one(&g, "k", 1), 0);
    for (long v = 2; v <= 4; v++)
        assert_int_equal(send_one(&g, "k", v), 1);
    ow_gate_acked(&g);
    rec.refuse_at = rec.calls + 1;
    rec.refuse = RD_KAFKA_RESP_ERR__QUEUE_FULL;
    assert_null(ow_gate_release(&g, 1));
    assert_recorded(1, second, 1);
    assert_int_equal(ow_gate_held(&g), 2);

    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_recorded(2, rest, 2);

    /* Giving up: the full queue's output comes back, the next still goes. */
    ow_gate_acked(&g);
    ow_gate_acked(&g);
    assert_int_equal(send_one(&g, "k", 5), 0);
    assert_int_equal(send_one(&g, "k", 6), 1);
    assert_int_equal(send_one(&g, "k", 7), 1);
    ow_gate_acked(&g);
    rec.refuse_at = rec.calls;
    refused = ow_gate_release(&g, 0);
    assert_non_null(refused);
    assert_int_equal(refused->err, RD_KAFKA_RESP_ERR__QUEUE_FULL);
    assert_null(refused->h);
    assert_null(refused->next);
    assert_int_equal(rec.n, 6);
    assert_int_equal(rec.values[5], 7);
    free(refused);
    ow_gate_destroy(&g);
}

/* An output the producer refuses for another reason comes back with its
 * error and bytes; those after it are still handed over. */
static void test_refused_outputs_come_back(void **state)
{
    ow_gate g;
    static const long want[] = {1, 3};
    ow_gate_msg *refused;
    long v;

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = INT64_MAX; /* only reports open it */
    assert_int_equal(send_one(&g, "k", 1), 0);
    assert_int_equal(send_one(&g, "big", 2), 1);
    assert_int_equal(send_one(&g, "k", 3), 1);
    ow_gate_acked(&g);
    rec.refuse_at = rec.calls;
    rec.refuse = RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE;
    refused = ow_gate_release(&g, 1);
    assert_non_null(refused);
    assert_int_equal(refused->err, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
    assert_int_equal(refused->key_len, 3);
    assert_memory_equal(refused->data, "big", 3);
    memcpy(&v, refused->data + refused->key_len, sizeof(v));
    assert_int_equal(v, 2);
    assert_null(refused->next);
    free(refused);
    assert_recorded(0, want, 2);
    ow_gate_destroy(&g);
}

/* A keyless output (a dead letter of a message without a key) stays
 * keyless when it was held, and a NULL value stays NULL; an empty key stays
 * an empty key. */
static void test_keyless_stays_keyless(void **state)
{
    ow_gate g;
    rd_kafka_resp_err_t e;
    long v = 2;

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = INT64_MAX; /* only reports open it */
    assert_int_equal(send_one(&g, "k", 1), 0);
    assert_int_equal(
        ow_gate_send(&g, "dlq", NULL, 0, &v, sizeof(v), rd_kafka_headers_new(1), NULL, &e), 1);
    v = 3;
    assert_int_equal(
        ow_gate_send(&g, "dlq", "", 0, &v, sizeof(v), rd_kafka_headers_new(1), NULL, &e), 1);
    assert_int_equal(ow_gate_send(&g, "dlq", "t", 1, NULL, 0, rd_kafka_headers_new(1), NULL, &e),
                     1);
    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_int_equal(rec.n, 4);
    assert_true(rec.nulls[3]);
    assert_false(rec.nulls[1] || rec.nulls[2]);
    assert_false(rec.keyless[0]);
    assert_true(rec.keyless[1]);
    assert_false(rec.keyless[2]);
    assert_int_equal(rec.keys[2][0], '\0');
    ow_gate_destroy(&g);
}

/* At shutdown what is held is taken off, in order, and nothing of it is
 * handed over later. */
static void test_take_returns_held_in_order(void **state)
{
    ow_gate g;
    ow_gate_msg *list, *n;
    long v, want = 2;

    (void)state;
    ow_gate_init(&g, 1, 0, record, &rec);
    g.max_hold_us = INT64_MAX; /* only reports open it */
    assert_int_equal(send_one(&g, "k", 1), 0);
    for (long i = 2; i <= 4; i++)
        assert_int_equal(send_one(&g, "k", i), 1);
    list = ow_gate_take(&g);
    assert_int_equal(ow_gate_held(&g), 0);
    for (n = list; n != NULL; want++) {
        ow_gate_msg *next = n->next;

        memcpy(&v, n->data + n->key_len, sizeof(v));
        assert_int_equal(v, want);
        rd_kafka_headers_destroy(n->h);
        free(n);
        n = next;
    }
    assert_int_equal(want, 5);
    ow_gate_acked(&g);
    assert_null(ow_gate_release(&g, 1));
    assert_int_equal(rec.n, 1);
    ow_gate_destroy(&g);
}

/* Lanes send from several threads while the delivery poller acknowledges
 * and releases: every output is handed over once, and each sender's
 * outputs in the order it sent them. */
#define SENDERS 4
#define PER_SENDER 20000

static ow_gate shared_gate;
static _Atomic int senders_left;
static _Atomic long holds;

static void *sender_main(void *arg)
{
    char key[8];

    snprintf(key, sizeof(key), "s%d", (int)(intptr_t)arg);
    for (long v = 0; v < PER_SENDER; v++)
        atomic_fetch_add(&holds, send_one(&shared_gate, key, v));
    atomic_fetch_sub(&senders_left, 1);
    return NULL;
}

static void *poller_main(void *arg)
{
    size_t acked = 0;

    (void)arg;
    for (;;) {
        size_t n;
        int done = atomic_load(&senders_left) == 0;

        pthread_mutex_lock(&rec.mu);
        n = rec.n;
        pthread_mutex_unlock(&rec.mu);
        for (; acked < n; acked++)
            ow_gate_acked(&shared_gate);
        assert_null(ow_gate_release(&shared_gate, 1));
        if (done && ow_gate_held(&shared_gate) == 0 && acked == SENDERS * PER_SENDER)
            return NULL;
    }
}

static void test_concurrent_senders_keep_order(void **state)
{
    pthread_t senders[SENDERS], poller;
    long next[SENDERS] = {0};

    (void)state;
    ow_gate_init(&shared_gate, 1, 50, record, &rec);
    atomic_store(&senders_left, SENDERS);
    atomic_store(&holds, 0);
    assert_int_equal(pthread_create(&poller, NULL, poller_main, NULL), 0);
    for (intptr_t i = 0; i < SENDERS; i++)
        assert_int_equal(pthread_create(&senders[i], NULL, sender_main, (void *)i), 0);
    for (int i = 0; i < SENDERS; i++)
        pthread_join(senders[i], NULL);
    pthread_join(poller, NULL);

    assert_int_equal(rec.n, SENDERS * PER_SENDER);
    for (size_t i = 0; i < rec.n; i++) {
        int s = rec.keys[i][1] - '0';

        assert_in_range(s, 0, SENDERS - 1);
        assert_int_equal(rec.values[i], next[s]);
        next[s]++;
    }
    assert_int_equal(atomic_load(&shared_gate.in_flight), 0);
    print_message("%ld of %d outputs were held\n", atomic_load(&holds), SENDERS * PER_SENDER);
    ow_gate_destroy(&shared_gate);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_off_hands_over_everything, setup),
        cmocka_unit_test_setup(test_holds_until_every_report, setup),
        cmocka_unit_test_setup(test_window_lets_a_burst_through, setup),
        cmocka_unit_test_setup(test_window_closes_after_linger, setup),
        cmocka_unit_test_setup(test_held_too_long_goes_anyway, setup),
        cmocka_unit_test_setup(test_held_bytes_are_bounded, setup),
        cmocka_unit_test_setup(test_full_queue_keeps_order, setup),
        cmocka_unit_test_setup(test_refused_outputs_come_back, setup),
        cmocka_unit_test_setup(test_keyless_stays_keyless, setup),
        cmocka_unit_test_setup(test_take_returns_held_in_order, setup),
        cmocka_unit_test_setup(test_concurrent_senders_keep_order, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
