/* The release order of exactly-once mode: a job's outputs go only after
 * every earlier job of its partition went, a job given up stops its
 * partition for the epoch, and an epoch that ends drops what waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sequencer.h"

#define N 8

static ow_job jobs[N];

/* Jobs 0..N-1 of one partition and epoch, offsets 10, 11, ... */
static ow_sequencer *fresh(int32_t partition, uint32_t epoch)
{
    ow_sequencer *s = ow_sequencer_new();

    assert_non_null(s);
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < N; i++) {
        jobs[i].t.partition = partition;
        jobs[i].t.epoch = epoch;
        jobs[i].t.offset = 10 + i;
    }
    return s;
}

static void append(ow_sequencer *s, int from, int to)
{
    for (int i = from; i < to; i++) {
        ow_job *drop = NULL;

        assert_int_equal(ow_sequencer_append(s, &jobs[i], &drop), OW_OK);
        assert_null(drop);
    }
}

/* The indexes on a list, in its order, as text ("0 1 2"). */
static const char *names(ow_job *list, char *buf, size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    for (ow_job *j = list; j != NULL && n + 4 < size; j = j->seq_next)
        n += (size_t)snprintf(buf + n, size - n, n > 0 ? " %d" : "%d", (int)(j - jobs));
    return buf;
}

/* Marks job i ready; what it released, as a releaser that produces at once
 * and then asks for the next ones until there are none. */
static const char *ready(ow_sequencer *s, int i, const char **dropped)
{
    static char rel[64], drp[64];
    ow_job *release = NULL, *drop = NULL, *all = NULL, **end = &all;

    ow_sequencer_ready(s, &jobs[i], &release, &drop);
    if (dropped != NULL)
        *dropped = names(drop, drp, sizeof(drp));
    else
        assert_null(drop);
    while (release != NULL) {
        *end = release;
        while (*end != NULL)
            end = &(*end)->seq_next;
        release = NULL;
        ow_sequencer_next(s, jobs[i].t.partition, &release);
    }
    return names(all, rel, sizeof(rel));
}

static void test_released_in_tracked_order(void **state)
{
    ow_sequencer *s = fresh(3, 1);

    (void)state;
    append(s, 0, 5);
    assert_string_equal(ready(s, 2, NULL), "");
    assert_string_equal(ready(s, 1, NULL), "");
    assert_string_equal(ready(s, 4, NULL), "");
    /* The first one lets the ready ones behind it go, up to the gap. */
    assert_string_equal(ready(s, 0, NULL), "0 1 2");
    assert_string_equal(ready(s, 3, NULL), "3 4");
    ow_sequencer_free(&s);
    assert_null(s);
}

/* While one thread produces a partition's released jobs, jobs that become
 * ready go to it, not to their own threads: one key's results stay in
 * order even when its messages were decided by different lanes. */
static void test_one_releaser_per_partition(void **state)
{
    ow_sequencer *s = fresh(4, 1);
    ow_job *first = NULL, *second = NULL, *drop = NULL;
    char buf[64];

    (void)state;
    append(s, 0, 3);
    ow_sequencer_ready(s, &jobs[0], &first, &drop);
    assert_string_equal(names(first, buf, sizeof(buf)), "0");
    /* Job 1 is ready while job 0 is still being produced: not released to
     * its caller... */
    ow_sequencer_ready(s, &jobs[1], &second, &drop);
    assert_null(second);
    assert_null(drop);
    /* ...but to the releaser when it asks for more. */
    ow_sequencer_next(s, 4, &second);
    assert_string_equal(names(second, buf, sizeof(buf)), "1");
    second = NULL;
    ow_sequencer_next(s, 4, &second);
    assert_null(second);
    /* No releaser now: the next ready one releases itself. */
    assert_string_equal(ready(s, 2, NULL), "2");
    ow_sequencer_free(&s);
}

static void test_partitions_do_not_wait_for_each_other(void **state)
{
    ow_sequencer *s = fresh(0, 1);

    (void)state;
    jobs[1].t.partition = 1;
    append(s, 0, 2);
    assert_string_equal(ready(s, 1, NULL), "1");
    assert_string_equal(ready(s, 0, NULL), "0");
    ow_sequencer_free(&s);
}

/* A job given up is a barrier: the offset can never be committed past it,
 * so nothing after it may be produced in this epoch. */
static void test_abandoned_job_stops_its_partition(void **state)
{
    ow_sequencer *s = fresh(2, 7);
    ow_job *drop = NULL;
    const char *dropped;

    (void)state;
    append(s, 0, 5);
    assert_string_equal(ready(s, 3, NULL), "");
    ow_sequencer_abandon(s, &jobs[1], &drop);
    assert_string_equal(names(drop, (char[64]){0}, 64), "3");
    /* Before the barrier: still released. After it: dropped. */
    assert_string_equal(ready(s, 0, NULL), "0");
    assert_string_equal(ready(s, 4, &dropped), "");
    assert_string_equal(dropped, "4");
    assert_string_equal(ready(s, 2, &dropped), "");
    assert_string_equal(dropped, "2");
    ow_sequencer_free(&s);
}

/* An epoch that ends (revoke, abort) drops what waits and forgets jobs
 * still being decided; a job of a newer epoch starts afresh. */
static void test_epoch_end_drops_and_forgets(void **state)
{
    ow_sequencer *s = fresh(5, 1);
    ow_job *drop = NULL;
    const char *dropped;

    (void)state;
    append(s, 0, 3);
    assert_string_equal(ready(s, 1, NULL), "");
    ow_sequencer_close(s, 5, &drop);
    assert_string_equal(names(drop, (char[64]){0}, 64), "1");
    assert_string_equal(ready(s, 0, &dropped), "");
    assert_string_equal(dropped, "0");
    /* The rewound messages come back in a new epoch. */
    jobs[3].t.epoch = jobs[4].t.epoch = 2;
    jobs[3].t.offset = 10;
    jobs[4].t.offset = 11;
    append(s, 3, 5);
    assert_string_equal(ready(s, 4, NULL), "");
    assert_string_equal(ready(s, 2, &dropped), "");
    assert_string_equal(dropped, "2");
    assert_string_equal(ready(s, 3, NULL), "3 4");
    ow_sequencer_free(&s);
}

static void test_new_epoch_on_append_drops_the_old(void **state)
{
    ow_sequencer *s = fresh(0, 1);
    ow_job *drop = NULL;

    (void)state;
    append(s, 0, 2);
    assert_string_equal(ready(s, 1, NULL), "");
    jobs[2].t.epoch = 2;
    assert_int_equal(ow_sequencer_append(s, &jobs[2], &drop), OW_OK);
    assert_string_equal(names(drop, (char[64]){0}, 64), "1");
    assert_string_equal(ready(s, 2, NULL), "2");
    ow_sequencer_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_released_in_tracked_order),
        cmocka_unit_test(test_one_releaser_per_partition),
        cmocka_unit_test(test_partitions_do_not_wait_for_each_other),
        cmocka_unit_test(test_abandoned_job_stops_its_partition),
        cmocka_unit_test(test_epoch_end_drops_and_forgets),
        cmocka_unit_test(test_new_epoch_on_append_drops_the_old),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
