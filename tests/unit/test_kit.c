/* The kit's shared helpers: the one environment merge used by
 * the kit, the CLI test runner and the benchmark, kit_header, which
 * reads a kept message's headers with the pipeline's reader, and the
 * sender that outlives a fatal producer error (against librdkafka's mock
 * cluster). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include <cmocka.h>

#include "kit.h"

/* The value of name in a merged environment, or NULL; fails on a second
 * entry of the same name. */
static const char *lookup(char **envp, const char *name)
{
    size_t n = strlen(name);
    const char *found = NULL;

    for (size_t i = 0; envp[i] != NULL; i++) {
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') {
            assert_null(found);
            found = envp[i] + n + 1;
        }
    }
    return found;
}

static void test_env_merge_replaces_and_appends(void **state)
{
    const char *extra[] = {"OW_KIT_A=new", "OW_KIT_C=3", "OW_KIT_GH=x", NULL};
    char **envp;

    (void)state;
    assert_int_equal(setenv("OW_KIT_A", "old", 1), 0);
    assert_int_equal(setenv("OW_KIT_AB", "kept", 1), 0);
    assert_int_equal(setenv("OW_KIT_B", "parent", 1), 0);
    assert_int_equal(setenv("OW_KIT_G", "parent", 1), 0);
    envp = kit_env_merge(extra, SIZE_MAX);
    assert_non_null(envp);
    assert_string_equal(lookup(envp, "OW_KIT_A"), "new");
    /* Only the same name is replaced, not one that starts like it or one
     * that an override starts like. */
    assert_string_equal(lookup(envp, "OW_KIT_AB"), "kept");
    assert_string_equal(lookup(envp, "OW_KIT_G"), "parent");
    assert_string_equal(lookup(envp, "OW_KIT_GH"), "x");
    assert_string_equal(lookup(envp, "OW_KIT_B"), "parent");
    assert_string_equal(lookup(envp, "OW_KIT_C"), "3");
    free(envp);
}

static void test_env_merge_counts(void **state)
{
    /* n_env bounds a list that has no NULL (the benchmark's arrays). */
    const char *extra[] = {"OW_KIT_D=1", "OW_KIT_E=2"};
    char **envp;

    (void)state;
    unsetenv("OW_KIT_E");
    envp = kit_env_merge(extra, 1);
    assert_non_null(envp);
    assert_string_equal(lookup(envp, "OW_KIT_D"), "1");
    assert_null(lookup(envp, "OW_KIT_E"));
    free(envp);
    envp = kit_env_merge(NULL, 0);
    assert_non_null(envp);
    assert_null(lookup(envp, "OW_KIT_D"));
    free(envp);
}

static void test_header(void **state)
{
    kit_msg m;
    char out[8];

    (void)state;
    memset(&m, 0, sizeof(m));
    assert_int_equal(kit_header(&m, "replayed", out, sizeof(out)), 0); /* no headers */
    m.headers = rd_kafka_headers_new(4);
    rd_kafka_header_add(m.headers, "replayed", -1, "false", -1);
    rd_kafka_header_add(m.headers, "source-topic", -1, "a-long-topic-name", -1);
    rd_kafka_header_add(m.headers, "replayed", -1, "true", -1);
    rd_kafka_header_add(m.headers, "empty", -1, "", 0);
    /* The last header of a name wins, as in the pipeline. */
    assert_int_equal(kit_header(&m, "replayed", out, sizeof(out)), 1);
    assert_string_equal(out, "true");
    /* A long value is cut to the buffer. */
    assert_int_equal(kit_header(&m, "source-topic", out, sizeof(out)), 1);
    assert_string_equal(out, "a-long-");
    /* An empty value is present. */
    assert_int_equal(kit_header(&m, "empty", out, sizeof(out)), 1);
    assert_string_equal(out, "");
    assert_int_equal(kit_header(&m, "source", out, sizeof(out)), 0);
    assert_int_equal(kit_header(&m, "error-code", out, sizeof(out)), 0);
    rd_kafka_headers_destroy(m.headers);
}

/* Each sender case has a mock cluster of one broker with one topic of two
 * partitions. */
typedef struct {
    rd_kafka_t *host;
    rd_kafka_mock_cluster_t *mc;
    const char *bootstrap;
} mock;

static int mock_setup(void **state)
{
    mock *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return -1;
    m->mc = kit_mock_cluster(1, &m->host);
    if (m->mc == NULL ||
        rd_kafka_mock_topic_create(m->mc, "sent", 2, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        free(m);
        return -1;
    }
    m->bootstrap = rd_kafka_mock_cluster_bootstraps(m->mc);
    *state = m;
    return 0;
}

static int mock_teardown(void **state)
{
    mock *m = *state;

    rd_kafka_mock_cluster_destroy(m->mc);
    rd_kafka_destroy(m->host);
    free(m);
    return 0;
}

static void send_numbered(kit_sender *s, int from, int to)
{
    for (int i = from; i < to; i++) {
        char key[16];
        int len = snprintf(key, sizeof(key), "m-%d", i);

        assert_int_equal(kit_send(s, key, (size_t)len, key, (size_t)len), 0);
    }
}

/* Asserts that the topic holds m-0 .. m-(n-1), each once, and in each
 * partition in the order they were given to the sender. */
static void assert_each_once(const char *bootstrap, int n)
{
    kit_msgs got = {0};
    int *seen = calloc((size_t)n, sizeof(*seen));
    int last[2] = {-1, -1};

    assert_non_null(seen);
    assert_int_equal(kit_read_topic(bootstrap, "sent", 30000, &got), 0);
    for (size_t j = 0; j < got.n; j++) {
        int i = -1;
        int32_t part = got.v[j].partition;

        assert_int_equal(sscanf(got.v[j].key, "m-%d", &i), 1);
        assert_true(i >= 0 && i < n);
        seen[i]++;
        assert_true(part == 0 || part == 1);
        assert_true(i > last[part]);
        last[part] = i;
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(got.n, n);
    kit_msgs_free(&got);
    free(seen);
}

/* Closes s, which replaced its producer once and sent resent messages
 * again, and checks that the topic holds each of the n messages once. */
static void close_after_one_replacement(kit_sender *s, const mock *m, long resent, int n)
{
    kit_send_stats st;

    assert_int_equal(kit_sender_close(s, 30000, &st), 0);
    assert_int_equal(st.replaced, 1);
    assert_int_equal(st.resent, resent);
    assert_int_equal(st.lost, 0);
    assert_each_once(m->bootstrap, n);
}

/* A fatal error while messages wait in the producer's queue: they are
 * reported purged, and the sender sends them through a new producer. The
 * linger keeps the first half queued when the error comes, so that each of
 * them must be sent again, and the failed producer refuses the next
 * message, which goes with them; the rest go to the new producer. */
static void test_sender_resends_what_was_queued(void **state)
{
    mock *m = *state;
    kit_sender *s = kit_sender_new(m->bootstrap, "sent", "linger.ms=2000");

    assert_non_null(s);
    send_numbered(s, 0, 100);
    assert_int_equal(kit_sender_test_fatal(s), 0);
    send_numbered(s, 100, 200);
    close_after_one_replacement(s, m, 101, 200);
}

/* A fatal error while requests are in flight: the broker has written them
 * and answers 3 s later. The sender waits for those answers, so it sends
 * again only the message the failed producer refused; one that sent them
 * again would write them twice. */
static void test_sender_waits_for_what_is_in_flight(void **state)
{
    mock *m = *state;
    kit_sender *s = kit_sender_new(m->bootstrap, "sent", "linger.ms=50");

    assert_non_null(s);
    send_numbered(s, 0, 1); /* connected, with its producer id, when delivered */
    for (int i = 0; i < 200 && kit_sender_outq(s) > 0; i++)
        assert_int_equal(kit_sender_poll(s, 50), 0);
    assert_int_equal(kit_sender_outq(s), 0);
    assert_int_equal(rd_kafka_mock_broker_set_rtt(m->mc, 1, 3000), RD_KAFKA_RESP_ERR_NO_ERROR);
    /* One request per partition after the linger (not one per message,
     * which would leave some queued behind the five in flight). */
    send_numbered(s, 1, 50);
    for (int i = 0; i < 10; i++)
        assert_int_equal(kit_sender_poll(s, 50), 0);
    assert_int_equal(kit_sender_test_fatal(s), 0);
    send_numbered(s, 50, 51); /* refused: the producer is replaced here */
    assert_int_equal(rd_kafka_mock_broker_set_rtt(m->mc, 1, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    send_numbered(s, 51, 100);
    close_after_one_replacement(s, m, 1, 100);
}

/* Producers that keep failing: the eleventh failure ends the sending, and
 * every message not delivered is counted, none twice. */
static void test_sender_gives_up_after_ten_replacements(void **state)
{
    mock *m = *state;
    kit_sender *s = kit_sender_new(m->bootstrap, "sent", "linger.ms=5000");
    kit_send_stats st;
    int refused = 0;

    assert_non_null(s);
    for (int i = 0; i < 11; i++) {
        assert_int_equal(kit_sender_test_fatal(s), 0);
        refused += kit_send(s, "k", 1, "v", 1) != 0;
    }
    assert_int_equal(refused, 1);
    assert_int_equal(kit_send(s, "k", 1, "v", 1), -1);
    assert_int_equal(kit_sender_close(s, 1000, &st), 11);
    assert_int_equal(st.replaced, 10);
    assert_int_equal(st.resent, 55); /* 1 + 2 + ... + 10 */
    assert_int_equal(st.lost, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_merge_replaces_and_appends),
        cmocka_unit_test(test_env_merge_counts),
        cmocka_unit_test(test_header),
        cmocka_unit_test_setup_teardown(test_sender_resends_what_was_queued, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_sender_waits_for_what_is_in_flight, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_sender_gives_up_after_ten_replacements, mock_setup,
                                        mock_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
