/* The partition ledger without Kafka: out-of-order acknowledgements, a
 * failed output holding the offset back, a revoke in the middle, a rewind
 * within an assignment, the end of a partition behind records that are
 * never delivered, where each message was expected. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ledger.h"
#include "ow/error.h"
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
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_track(&f->l, p, off, t, &seen), OW_OK);
    assert_int_equal(seen.rewound, 0);
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
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_track(&f->l, 2, 10, &t, &seen), OW_ENOTFOUND);
    assert_int_equal(ow_ledger_reached_end(&f->l, 2, 12, &seen), OW_ENOTFOUND);
    assert_int_equal(ow_ledger_assign(&f->l, 2), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 2, 10, &t, &seen), OW_OK);
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
        ow_ledger_seen seen;

        assert_int_equal(ow_ledger_track(&f->l, 3, 51, &t, &seen), OW_ENOTFOUND);
        assert_int_equal(ow_ledger_reached_end(&f->l, 3, 60, &seen), OW_ENOTFOUND);
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
    ow_ledger_seen seen;
    int done = -1;

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 0, 7, &t, &seen), OW_OK);
    ow_ledger_produced(&t);                                     /* interim answer */
    assert_int_equal(ow_ledger_settle(&f->l, &t, 1, &done), 0); /* its report */
    ow_ledger_produced(&t);                                     /* the result */
    assert_int_equal(ow_ledger_settle(&f->l, &t, 1, &done), 0); /* the hold */
    assert_int_equal(f->st.calls[0], 0);
    assert_int_equal(ow_ledger_settle(&f->l, &t, 1, &done), 1);
    assert_int_equal(done, 1);
    assert_int_equal(f->st.last[0], 8);
    assert_int_equal(ow_ledger_track(&f->l, 0, 8, &dropped, &seen), OW_OK);
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
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    track(f, 0, 10, &a, 1);
    track(f, 0, 11, &b, 1);
    assert_int_equal(ow_ledger_track(&f->l, 0, 5, &again, &seen), OW_OK);
    assert_int_equal(seen.rewound, 1);
    produce_then_release(f, &again, 1);
    assert_true(ow_ledger_stale(&f->l, &a));
    assert_false(ow_ledger_stale(&f->l, &again));
    assert_int_equal(ack(f, &a, 1), 1);
    assert_int_equal(ack(f, &b, 1), 1);
    assert_int_equal(f->st.calls[0], 0); /* 10 and 11 belong to the old epoch */
    assert_int_equal(ack(f, &again, 1), 1);
    assert_int_equal(f->st.last[0], 6);
}

static int64_t ignore_rewind(void *opaque, int32_t partition, int64_t at, int64_t first)
{
    (void)opaque;
    (void)partition;
    (void)at;
    (void)first;
    return -1;
}

/* Everything that can make a ticket stale moves the endings count, so a
 * holder that saw the count unchanged knows its tickets are still
 * current; tracking and acknowledging leave it alone. */
static void test_endings_count_what_makes_stale(void **state)
{
    fixture *f = *state;
    ow_ticket a, b, again;
    uint64_t seen;
    ow_ledger_seen at;

    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    seen = ow_ledger_endings(&f->l);
    assert_true(seen > 0);
    track(f, 1, 10, &a, 1);
    assert_int_equal(ack(f, &a, 1), 1);
    track(f, 1, 11, &b, 1);
    assert_int_equal(ow_ledger_endings(&f->l), seen);
    /* An offset reset within the assignment. */
    assert_int_equal(ow_ledger_track(&f->l, 1, 5, &again, &at), OW_OK);
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

/* The end of a partition behind transaction markers or aborted records
 * (offsets 3 to 5 never delivered) moves the watermark to the end, but
 * only once every message before it is done; an end right after the last
 * message adds nothing. */
static void test_end_passes_records_never_delivered(void **state)
{
    fixture *f = *state;
    ow_ticket t[3];
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    for (int i = 0; i < 3; i++)
        track(f, 0, i, &t[i], 1);
    assert_int_equal(ow_ledger_reached_end(&f->l, 0, 6, &seen), OW_OK);
    assert_int_equal(f->st.calls[0], 0);
    assert_int_equal(ack(f, &t[0], 1), 1);
    assert_int_equal(f->st.last[0], 1);
    assert_int_equal(ack(f, &t[2], 1), 1);
    assert_int_equal(f->st.last[0], 1); /* 1 is not acknowledged yet */
    assert_int_equal(ack(f, &t[1], 1), 1);
    assert_int_equal(f->st.last[0], 6);
    assert_int_equal(f->st.calls[0], 2);
    /* New input after the markers, and an end right after it. */
    track(f, 0, 6, &t[0], 1);
    assert_int_equal(ow_ledger_reached_end(&f->l, 0, 7, &seen), OW_OK);
    assert_int_equal(ack(f, &t[0], 1), 1);
    assert_int_equal(f->st.last[0], 7);
    assert_int_equal(f->st.calls[0], 3);
    assert_int_equal(ow_ledger_reached_end(&f->l, 0, 7, &seen), OW_OK);
    assert_int_equal(f->st.calls[0], 3);
}

/* A message whose output failed holds the watermark back: an end after it
 * never passes it. */
static void test_end_never_passes_a_failed_message(void **state)
{
    fixture *f = *state;
    ow_ticket t[2];
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    track(f, 1, 10, &t[0], 1);
    track(f, 1, 11, &t[1], 1);
    assert_int_equal(ack(f, &t[1], 0), 0);
    assert_int_equal(ow_ledger_reached_end(&f->l, 1, 20, &seen), OW_OK);
    assert_int_equal(ack(f, &t[0], 1), 1);
    assert_int_equal(f->st.last[1], 11);
    assert_int_equal(f->st.calls[1], 1);
}

/* A partition whose assignment starts behind nothing but markers: its end
 * alone moves the watermark. */
static void test_end_of_an_assignment_without_messages(void **state)
{
    fixture *f = *state;
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_assign(&f->l, 2), OW_OK);
    assert_int_equal(ow_ledger_reached_end(&f->l, 2, 9, &seen), OW_OK);
    assert_int_equal(seen.first, 1);
    assert_int_equal(f->st.last[2], 9);
}

static int64_t rewind_to_3(void *opaque, int32_t partition, int64_t at, int64_t first)
{
    (void)opaque;
    (void)at;
    (void)first;
    return partition == 0 ? 3 : -1;
}

/* Where each message or end was expected: the first of an assignment at
 * the group's committed offset (unknown to the ledger), then one past the
 * last message, the end, or where a rewind went back to. */
static void test_expected_offsets(void **state)
{
    fixture *f = *state;
    ow_ticket t;
    ow_ledger_seen seen;

    assert_int_equal(ow_ledger_assign(&f->l, 0), OW_OK);
    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 0, 4, &t, &seen), OW_OK);
    assert_int_equal(seen.first, 1);
    assert_int_equal(seen.expected, -1);
    assert_int_equal(ow_ledger_track(&f->l, 0, 10, &t, &seen), OW_OK);
    assert_int_equal(seen.first, 0);
    assert_int_equal(seen.expected, 5);
    assert_int_equal(ow_ledger_reached_end(&f->l, 0, 15, &seen), OW_OK);
    assert_int_equal(seen.expected, 11);
    assert_int_equal(ow_ledger_track(&f->l, 0, 15, &t, &seen), OW_OK);
    assert_int_equal(seen.expected, 15);
    assert_int_equal(ow_ledger_track(&f->l, 1, 7, &t, &seen), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 1, 8, &t, &seen), OW_OK);
    assert_int_equal(seen.expected, 8);
    /* Partition 0 goes back to 3; partition 1 stays where it is. */
    assert_int_equal(ow_ledger_rewind(&f->l, rewind_to_3, NULL), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 0, 3, &t, &seen), OW_OK);
    assert_int_equal(seen.first, 0);
    assert_int_equal(seen.expected, 3);
    assert_int_equal(seen.rewound, 0);
    assert_int_equal(ow_ledger_track(&f->l, 1, 9, &t, &seen), OW_OK);
    assert_int_equal(seen.expected, 9);
    /* A new assignment starts at the committed offset again. */
    ow_ledger_revoke_begin(&f->l, 1);
    ow_ledger_revoke_end(&f->l, 1);
    assert_int_equal(ow_ledger_assign(&f->l, 1), OW_OK);
    assert_int_equal(ow_ledger_track(&f->l, 1, 9, &t, &seen), OW_OK);
    assert_int_equal(seen.first, 1);
    assert_int_equal(seen.expected, -1);
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
        cmocka_unit_test_setup_teardown(test_end_passes_records_never_delivered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_end_never_passes_a_failed_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_end_of_an_assignment_without_messages, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_expected_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_acks, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
