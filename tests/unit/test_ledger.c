/* The partition ledger without Kafka: out-of-order acknowledgements, a
 * failed output holding the offset back, a revoke in the middle, a rewind
 * within an assignment. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ow/error.h"
#include "ow/ledger.h"
#include "ow/util.h"

/* What the ledger stored, per partition (last offset, and how often). */
typedef struct {
    int64_t last[4];
    int calls[4];
} stored;

static void store_fn(void *opaque, int32_t partition, int64_t offset)
{
    stored *st = opaque;

    st->last[partition] = offset;
    st->calls[partition]++;
}

typedef struct {
    ow_ledger l;
    stored st;
} fixture;

static int setup(void **state)
{
    static fixture f;

    memset(&f, 0, sizeof(f));
    for (int i = 0; i < 4; i++)
        f.st.last[i] = -1;
    ow_ledger_init(&f.l, store_fn, &f.st);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;

    ow_ledger_destroy(&f->l);
    return 0;
}

static void produce_then_release(fixture *f, ow_ticket *t, int outputs);

static void track(fixture *f, int32_t p, int64_t off, ow_ticket *t, int outputs)
{
    int rewound = -1;

    assert_int_equal(ow_ledger_track(&f->l, p, off, t, &rewound), OW_OK);
    assert_int_equal(rewound, 0);
    produce_then_release(f, t, outputs);
}

/* The holder produces that many outputs, then releases its hold. */
static void produce_then_release(fixture *f, ow_ticket *t, int outputs)
{
    int done = -1;

    for (int i = 0; i < outputs; i++)
        ow_ledger_produced(t);
    assert_int_equal(ow_ledger_settle(&f->l, t, 1, &done), outputs == 0);
}

static int ack(fixture *f, ow_ticket *t, int ok)
{
    int done = -1;
    int last = ow_ledger_settle(&f->l, t, ok, &done);

    return last ? done : -1;
}

static void test_untracked_partition_is_ignored(void **state)
{
    fixture *f = *state;
    ow_ticket t;
    int rewound;

    assert_int_equal(ow_ledger_track(&f->l, 2, 10, &t, &rewound), OW_ENOTFOUND);
    assert_int_equal(ow_ledger_assign(&f->l, 2), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 2, 10, &t, &rewound), OW_OK);
    assert_false(ow_ledger_stale(&f->l, &t));
}

/* Offsets complete out of order; the stored offset only ever covers a
 * contiguous prefix of acknowledged messages. */
static void test_out_of_order_acks(void **state)
{
    fixture *f = *state;
    ow_ticket t[3];

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    for (int i = 0; i < 3; i++)
        track(f, 0, 100 + i, &t[i], i == 1 ? 2 : 1); /* 101: result + dead letter */
    assert_int_equal(ack(f, &t[2], 1), 1);
    assert_int_equal(f->st.calls[0], 0);    /* 100 and 101 still open */
    assert_int_equal(ack(f, &t[1], 1), -1); /* one of two outputs */
    assert_int_equal(ack(f, &t[0], 1), 1);
    assert_int_equal(f->st.last[0], 101); /* 100 done; 101 waits for its dead letter */
    assert_int_equal(ack(f, &t[1], 1), 1);
    assert_int_equal(f->st.last[0], 103);
    assert_int_equal(f->st.calls[0], 2);
}

/* A failed output finishes its message as not done: nothing at or after it
 * is ever stored in this epoch. */
static void test_failed_output_holds_offset(void **state)
{
    fixture *f = *state;
    ow_ticket t[3];

    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    for (int i = 0; i < 3; i++)
        track(f, 1, i, &t[i], 1);
    assert_int_equal(ack(f, &t[0], 1), 1);
    assert_int_equal(f->st.last[1], 1);
    assert_int_equal(ack(f, &t[1], 0), 0); /* failed */
    assert_int_equal(ack(f, &t[2], 1), 1);
    assert_int_equal(f->st.last[1], 1);
    assert_int_equal(f->st.calls[1], 1);
}

/* A revoke in the middle: tickets of the old epoch are stale and their
 * acknowledgements store nothing, also after the partition comes back. */
static void test_revoke_in_the_middle(void **state)
{
    fixture *f = *state;
    ow_ticket before, after;
    const int32_t parts[1] = {3};
    _Atomic int abort_flag = 0;

    assert_int_equal(ow_ledger_assign(&f->l, 3), OW_OK);
    track(f, 3, 50, &before, 1);
    ow_ledger_revoke_begin(&f->l, 3);
    assert_true(ow_ledger_stale(&f->l, &before));
    /* Nothing new is tracked while revoking. */
    {
        ow_ticket t;
        int rewound;

        assert_int_equal(ow_ledger_track(&f->l, 3, 51, &t, &rewound), OW_ENOTFOUND);
    }
    /* The drain waits for the active ticket and gives up at the deadline. */
    assert_false(ow_ledger_wait_drained(&f->l, parts, 1, ow_clock_mono_ms() + 20, &abort_flag));
    ow_ledger_revoke_end(&f->l, 3);
    assert_int_equal(ow_ledger_assign(&f->l, 3), OW_OK);
    track(f, 3, 50, &after, 1);
    assert_int_equal(ack(f, &before, 1), 1); /* the old epoch's ack */
    assert_int_equal(f->st.calls[3], 0);
    assert_false(ow_ledger_wait_drained(&f->l, parts, 1, ow_clock_mono_ms() + 10, &abort_flag));
    assert_int_equal(ack(f, &after, 1), 1);
    assert_int_equal(f->st.last[3], 51);
    assert_true(ow_ledger_wait_drained(&f->l, parts, 1, ow_clock_mono_ms() + 10, &abort_flag));
}

/* The holder's hold keeps a ticket open: an output acknowledged before
 * the holder is done producing (an interim answer, or a quick delivery
 * report) does not finish it; the holder's release does, or the last
 * acknowledgement after it. A holder that gives its message up finishes
 * it as not done. */
static void test_hold_keeps_ticket_open(void **state)
{
    fixture *f = *state;
    ow_ticket t, dropped;
    int rewound, done = -1;

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 0, 7, &t, &rewound), OW_OK);
    ow_ledger_produced(&t);                                     /* interim answer */
    assert_int_equal(ow_ledger_settle(&f->l, &t, 1, &done), 0); /* its report */
    ow_ledger_produced(&t);                                     /* the result */
    assert_int_equal(ow_ledger_settle(&f->l, &t, 1, &done), 0); /* the hold */
    assert_int_equal(f->st.calls[0], 0);
    assert_int_equal(ow_ledger_settle(&f->l, &t, 1, &done), 1);
    assert_int_equal(done, 1);
    assert_int_equal(f->st.last[0], 8);
    assert_int_equal(ow_ledger_track(&f->l, 0, 8, &dropped, &rewound), OW_OK);
    assert_int_equal(ow_ledger_settle(&f->l, &dropped, 0, &done), 1);
    assert_int_equal(done, 0);
    assert_int_equal(f->st.last[0], 8);
}

/* An offset at or below the last tracked one (an offset reset) starts a
 * new epoch: in-flight tickets from before can no longer move the offset,
 * and the rewound messages are tracked afresh. */
static void test_rewind_within_assignment(void **state)
{
    fixture *f = *state;
    ow_ticket a, b, again;
    int rewound = 0;

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    track(f, 0, 10, &a, 1);
    track(f, 0, 11, &b, 1);
    assert_int_equal(ow_ledger_track(&f->l, 0, 5, &again, &rewound), OW_OK);
    assert_int_equal(rewound, 1);
    produce_then_release(f, &again, 1);
    assert_true(ow_ledger_stale(&f->l, &a));
    assert_false(ow_ledger_stale(&f->l, &again));
    assert_int_equal(ack(f, &a, 1), 1);
    assert_int_equal(ack(f, &b, 1), 1);
    assert_int_equal(f->st.calls[0], 0); /* 10 and 11 belong to the old epoch */
    assert_int_equal(ack(f, &again, 1), 1);
    assert_int_equal(f->st.last[0], 6);
}

static void ignore_rewind(void *opaque, int32_t partition, int64_t at, int64_t first)
{
    (void)opaque;
    (void)partition;
    (void)at;
    (void)first;
}

/* Everything that can make a ticket stale moves the endings count, so a
 * holder that saw the count unchanged knows its tickets are still
 * current; tracking and acknowledging leave it alone. */
static void test_endings_count_what_makes_stale(void **state)
{
    fixture *f = *state;
    ow_ticket a, b, again;
    uint64_t seen;
    int rewound = 0;

    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    seen = ow_ledger_endings(&f->l);
    assert_true(seen > 0);
    track(f, 1, 10, &a, 1);
    assert_int_equal(ack(f, &a, 1), 1);
    track(f, 1, 11, &b, 1);
    assert_int_equal(ow_ledger_endings(&f->l), seen);
    /* An offset reset within the assignment. */
    assert_int_equal(ow_ledger_track(&f->l, 1, 5, &again, &rewound), OW_OK);
    assert_true(ow_ledger_stale(&f->l, &b));
    assert_true(ow_ledger_endings(&f->l) > seen);
    seen = ow_ledger_endings(&f->l);
    produce_then_release(f, &again, 1);
    /* A rewind (an aborted transaction). */
    assert_int_equal(ow_ledger_rewind(&f->l, ignore_rewind, NULL), OW_OK);
    assert_true(ow_ledger_stale(&f->l, &again));
    assert_true(ow_ledger_endings(&f->l) > seen);
    seen = ow_ledger_endings(&f->l);
    /* A revoke: its beginning already, then its end. */
    track(f, 1, 5, &a, 1);
    ow_ledger_revoke_begin(&f->l, 1);
    assert_true(ow_ledger_stale(&f->l, &a));
    assert_true(ow_ledger_endings(&f->l) > seen);
    seen = ow_ledger_endings(&f->l);
    ow_ledger_revoke_end(&f->l, 1);
    assert_true(ow_ledger_endings(&f->l) > seen);
    seen = ow_ledger_endings(&f->l);
    /* A new assignment ends the epoch of what came before it. */
    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    assert_true(ow_ledger_endings(&f->l) > seen);
    assert_int_equal(ack(f, &a, 1), 1);
    assert_int_equal(ack(f, &again, 1), 1);
    assert_int_equal(ack(f, &b, 1), 1);
}

/* Several threads acknowledging at once: every ticket finishes exactly
 * once and the offset ends past the last message. */

#define RACE_N 2000

typedef struct {
    fixture *f;
    ow_ticket *t;
    int from;
} racer;

static void *race_acks(void *arg)
{
    racer *r = arg;

    for (int i = r->from; i < RACE_N; i += 2)
        ack(r->f, &r->t[i], 1);
    return NULL;
}

static void test_concurrent_acks(void **state)
{
    fixture *f = *state;
    static ow_ticket t[RACE_N];
    pthread_t th[2];
    racer r[2] = {{f, t, 0}, {f, t, 1}};

    assert_int_equal(ow_ledger_assign(&f->l, 2), OW_OK);
    for (int i = 0; i < RACE_N; i++)
        track(f, 2, i, &t[i], 1);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, race_acks, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(f->st.last[2], RACE_N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_untracked_partition_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_order_acks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_output_holds_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoke_in_the_middle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hold_keeps_ticket_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewind_within_assignment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_endings_count_what_makes_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_acks, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
