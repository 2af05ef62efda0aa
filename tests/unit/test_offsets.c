/* The contiguous per-partition offset tracker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "offsets.h"
#include "ow/error.h"

typedef struct {
    const char *name;
    int64_t added[8];
    size_t n_added;
    int64_t done[8]; /* in completion order */
    size_t n_done;
    int64_t want[8]; /* committable after each completion, -1: no move */
} track_case;

static const track_case cases[] = {
    {"in order", {0, 1, 2}, 3, {0, 1, 2}, 3, {1, 2, 3}},
    {"reverse", {0, 1, 2}, 3, {2, 1, 0}, 3, {-1, -1, 3}},
    {"middle first", {5, 6, 7, 8}, 4, {6, 5, 8, 7}, 4, {-1, 7, -1, 9}},
    /* Gaps (compaction, transaction markers) commit past the last done offset. */
    {"gaps", {10, 20, 30}, 3, {20, 10, 30}, 3, {-1, 21, 31}},
    {"single", {42}, 1, {42}, 1, {43}},
};

static void test_table(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ow_offset_track *t = ow_offset_track_new();

        assert_non_null(t);
        for (size_t i = 0; i < cases[c].n_added; i++)
            assert_int_equal(ow_offset_track_add(t, cases[c].added[i]), OW_OK);
        for (size_t i = 0; i < cases[c].n_done; i++) {
            int64_t commit = -1;
            int moved;

            assert_int_equal(ow_offset_track_done(t, cases[c].done[i]), OW_OK);
            moved = ow_offset_track_advance(t, &commit);
            if (cases[c].want[i] < 0) {
                if (moved)
                    fail_msg("%s: step %zu moved to %lld", cases[c].name, i, (long long)commit);
            } else {
                if (!moved || commit != cases[c].want[i])
                    fail_msg("%s: step %zu: want %lld, got %d/%lld", cases[c].name, i,
                             (long long)cases[c].want[i], moved, (long long)commit);
            }
        }
        assert_int_equal(ow_offset_track_pending(t), 0);
        ow_offset_track_free(&t);
        assert_null(t);
    }
}

static void test_rejects(void **state)
{
    ow_offset_track *t = ow_offset_track_new();
    int64_t commit = 0;

    (void)state;
    assert_int_equal(ow_offset_track_add(t, 5), OW_OK);
    assert_int_equal(ow_offset_track_add(t, 5), OW_EINVAL);  /* not increasing */
    assert_int_equal(ow_offset_track_add(t, 4), OW_EINVAL);
    assert_int_equal(ow_offset_track_add(t, -1), OW_EINVAL);
    assert_int_equal(ow_offset_track_done(t, 6), OW_ENOTFOUND);
    assert_int_equal(ow_offset_track_advance(t, &commit), 0);
    assert_int_equal(ow_offset_track_committed(t), -1);
    assert_int_equal(ow_offset_track_done(t, 5), OW_OK);
    assert_int_equal(ow_offset_track_advance(t, &commit), 1);
    assert_int_equal(commit, 6);
    /* Released entries are gone. */
    assert_int_equal(ow_offset_track_done(t, 5), OW_ENOTFOUND);
    assert_int_equal(ow_offset_track_committed(t), 6);
    ow_offset_track_free(&t);
    ow_offset_track_free(&t); /* NULL-safe */
}

/* Many offsets finished in a random order: the committable offset never
 * passes an offset that is not done, and ends one past the last. */
static void test_random_completion(void **state)
{
    enum { N = 5000 };
    static int64_t order[N];
    static int done[N];
    ow_offset_track *t = ow_offset_track_new();
    uint64_t seed = 12345;
    int64_t last = -1;

    (void)state;
    for (int64_t i = 0; i < N; i++) {
        assert_int_equal(ow_offset_track_add(t, 100 + i), OW_OK);
        order[i] = i;
    }
    for (size_t i = N - 1; i > 0; i--) {
        size_t j;
        int64_t tmp;

        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        j = (size_t)(seed >> 33) % (i + 1);
        tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (size_t i = 0; i < N; i++) {
        int64_t commit;

        assert_int_equal(ow_offset_track_done(t, 100 + order[i]), OW_OK);
        done[order[i]] = 1;
        if (ow_offset_track_advance(t, &commit)) {
            assert_true(commit > last);
            for (int64_t k = 0; k < commit - 100; k++)
                assert_true(done[k]);
            if (commit - 100 < N)
                assert_false(done[commit - 100]);
            last = commit;
        }
    }
    assert_int_equal(last, 100 + N);
    assert_int_equal(ow_offset_track_pending(t), 0);
    ow_offset_track_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_random_completion),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
