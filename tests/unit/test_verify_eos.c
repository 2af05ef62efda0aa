/* ow-verify's exactly-once figures from a planted LSO timeline, faults file
 * and reads: what counts as a stall, which stall a replica kill is charged
 * with, the recovery after a broker kill, the aborted records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "verify_eos.h"

/* Writes text to a new temporary file; returns its path (free it). */
static char *temp_file(const char *text)
{
    char *path = strdup("/tmp/ow-test-verify-eos-XXXXXX");
    int fd = mkstemp(path);
    FILE *f;

    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Partition 0: a transaction open from t=100 (the high watermark past the
 * LSO) whose producer is killed at t=150; the LSO moves at t=1300, with a
 * sample without an answer (-1) in between. Partition 1: an ordinary
 * transaction committed within 100 ms. */
static const char timeline[] = "0 0:5:5 1:3:3\n"
                               "100 0:5:7 1:3:4\n"
                               "200 0:5:9 1:4:4\n"
                               "700 0:-1:-1 1:4:4\n"
                               "1300 0:9:9 1:4:4\n"
                               "6000 0:9:9 1:4:4\n";
static const char faults[] = "kill 150 4242\n"
                             "broker-kill 150 2\n"
                             "restart 500 1\n"
                             "kill 5000 4343\n";

static void test_stalls_charged_to_the_kill_they_cover(void **state)
{
    char *tl_path = temp_file(timeline), *f_path = temp_file(faults);
    eos_timeline tl;
    eos_stalls st;

    (void)state;
    assert_int_equal(eos_timeline_load(tl_path, &tl), 0);
    assert_int_equal(tl.parts, 2);
    assert_int_equal(tl.n, 6);
    eos_lso_stalls(&tl, f_path, &st);
    assert_int_equal(st.kills, 2);
    /* Only the first kill fell inside a stall: from the kill to the move. */
    assert_int_equal(st.kills_held, 1);
    assert_int_equal(st.after_kill_max_ms, 1150);
    assert_int_equal(st.after_kill_p50_ms, 1150);
    /* The whole stall, from the first sample showing it. */
    assert_int_equal(st.max_ms, 1200);
    eos_timeline_free(&tl);
    unlink(tl_path);
    unlink(f_path);
    free(tl_path);
    free(f_path);
}

static void test_recovery_from_the_timeline(void **state)
{
    char *tl_path = temp_file(timeline), *f_path = temp_file(faults);
    eos_timeline tl;
    kit_msgs none = {0};
    char out[256] = "";

    (void)state;
    assert_int_equal(eos_timeline_load(tl_path, &tl), 0);
    eos_recovery(&tl, &none, f_path, out, sizeof(out));
    /* Partition 1's LSO moved 50 ms after the kill, partition 0's 1150. */
    assert_string_equal(out, " node2:50/1150");
    eos_timeline_free(&tl);
    unlink(tl_path);
    unlink(f_path);
    free(tl_path);
    free(f_path);
}

static void add(kit_msgs *m, int32_t partition, int64_t offset, int64_t ts)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 16;
        m->v = realloc(m->v, m->cap * sizeof(*m->v));
        assert_non_null(m->v);
    }
    memset(&m->v[m->n], 0, sizeof(m->v[m->n]));
    m->v[m->n].partition = partition;
    m->v[m->n].offset = offset;
    m->v[m->n].timestamp_ms = ts;
    m->n++;
}

static void test_recovery_from_results_without_timeline(void **state)
{
    char *f_path = temp_file(faults);
    kit_msgs results = {0};
    char out[256] = "";

    (void)state;
    add(&results, 0, 0, 100);
    add(&results, 0, 1, 2150);
    add(&results, 1, 0, 400);
    eos_recovery(NULL, &results, f_path, out, sizeof(out));
    assert_string_equal(out, " node2:250/2000");
    free(results.v);
    unlink(f_path);
    free(f_path);
}

static void test_aborted_records_and_runs(void **state)
{
    kit_msgs committed = {0}, uncommitted = {0};
    long long runs = -1;

    (void)state;
    /* The reads interleave partitions; offsets 2, 4 and 5 of partition 0
     * are not committed, nor 0 of partition 1. */
    add(&committed, 0, 0, 0);
    add(&committed, 1, 1, 0);
    add(&committed, 0, 1, 0);
    add(&committed, 0, 3, 0);
    for (int64_t o = 0; o < 6; o++)
        add(&uncommitted, 0, o, 0);
    add(&uncommitted, 1, 0, 0);
    add(&uncommitted, 1, 1, 0);
    assert_int_equal(eos_aborted_records(&committed, &uncommitted, &runs), 4);
    assert_int_equal(runs, 3);
    assert_int_equal(eos_aborted_records(&committed, &committed, &runs), 0);
    assert_int_equal(runs, 0);
    free(committed.v);
    free(uncommitted.v);
}

static void test_logged_aborts(void **state)
{
    char *log = temp_file("{\"event\":\"txn_aborted\",\"reason\":\"x\"}\n"
                          "{\"event\":\"txn_committed\"}\n"
                          "{\"event\":\"txn_aborted\"}\n");
    const char *one[] = {log};
    const char *missing[] = {log, "/nonexistent/ow-worker.log"};

    (void)state;
    assert_int_equal(eos_logged_aborts(one, 1), 2);
    assert_int_equal(eos_logged_aborts(missing, 2), -1);
    unlink(log);
    free(log);
}

static void test_timeline_refuses_other_files(void **state)
{
    char *path = temp_file("not a timeline\n");
    eos_timeline tl;

    (void)state;
    assert_int_equal(eos_timeline_load(path, &tl), -1);
    eos_timeline_free(&tl);
    assert_int_equal(eos_timeline_load("/nonexistent/lso.txt", &tl), -1);
    unlink(path);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalls_charged_to_the_kill_they_cover),
        cmocka_unit_test(test_recovery_from_the_timeline),
        cmocka_unit_test(test_recovery_from_results_without_timeline),
        cmocka_unit_test(test_aborted_records_and_runs),
        cmocka_unit_test(test_logged_aborts),
        cmocka_unit_test(test_timeline_refuses_other_files),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
