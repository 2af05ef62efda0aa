/* The assessment of a server's settings (ow/store_server.h) and what an
 * error's message may say (store_parts.h): pure, no server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ow/response.h"
#include "ow/store_server.h"
#include "store_parts.h"

/* A server the worker runs against without a word. */
static ow_server_vars fine(void)
{
    ow_server_vars v = {.max_allowed_packet = 16 << 20,
                        .wait_timeout_s = 28800,
                        .statement_time_name = "max_statement_time",
                        .log_bin = 1,
                        .binlog_format = "ROW",
                        .max_prepared_stmt_count = 16382,
                        .flush_log_at_trx_commit = 1};

    return v;
}

static ow_server_needs worker(void)
{
    ow_server_needs n = {.connections = 6,
                         .statements = 46,
                         .max_orders = 1000,
                         .lock_wait_s = 5,
                         .writes = 1,
                         .connections_key = "worker.lanes"};

    return n;
}

static const ow_server_finding *find(const ow_server_report *r, const char *setting)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->f[i].setting, setting) == 0)
            return &r->f[i];
    return NULL;
}

/* One case: a change to the fine server or to the worker's needs, and
 * the level the setting must get, with words its reason must hold. */
typedef struct {
    const char *name;
    void (*change)(ow_server_vars *v, ow_server_needs *n);
    const char *setting;
    ow_server_level level;
    const char *words[3];
} assess_case;

static void none(ow_server_vars *v, ow_server_needs *n)
{
    (void)v;
    (void)n;
}
static void statement_binlog(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    snprintf(v->binlog_format, sizeof(v->binlog_format), "STATEMENT");
}
static void statement_no_binlog(ow_server_vars *v, ow_server_needs *n)
{
    statement_binlog(v, n);
    v->log_bin = 0;
}
static void statement_reads_only(ow_server_vars *v, ow_server_needs *n)
{
    statement_binlog(v, n);
    n->writes = 0;
}
static void mixed_binlog(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    snprintf(v->binlog_format, sizeof(v->binlog_format), "MIXED");
}
static void rollback_on(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->rollback_on_timeout = 1;
}
static void short_statements(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->statement_time_ms = 1000;
}
static void long_statements(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->statement_time_ms = 60000;
}
static void tiny_packet(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->max_allowed_packet = 32768;
}
static void small_packet(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->max_allowed_packet = 131072;
}
static void old_default_packet(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->max_allowed_packet = 1 << 20;
}
static void few_statements(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->max_prepared_stmt_count = 100;
}
static void just_enough_statements(ow_server_vars *v, ow_server_needs *n)
{
    v->max_prepared_stmt_count = (int64_t)n->connections * n->statements;
}
static void three_connections(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->max_user_connections = 3;
}
static void enough_connections(ow_server_vars *v, ow_server_needs *n)
{
    v->max_user_connections = n->connections;
}
static void galera_no_flush(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->galera = 1;
    v->flush_log_at_trx_commit = 2;
}
static void plain_no_flush(ow_server_vars *v, ow_server_needs *n)
{
    (void)n;
    v->flush_log_at_trx_commit = 2;
}

static const assess_case cases[] = {
    {"row binlog", none, "binlog_format", OW_SERVER_OK, {NULL}},
    {"statement binlog", statement_binlog, "binlog_format", OW_SERVER_REFUSE, {"1665", "ROW"}},
    {"statement, log off", statement_no_binlog, "binlog_format", OW_SERVER_OK, {NULL}},
    {"mixed binlog", mixed_binlog, "binlog_format", OW_SERVER_OK, {NULL}},
    {"rollback off", none, "innodb_rollback_on_timeout", OW_SERVER_OK, {NULL}},
    {"rollback on", rollback_on, "innodb_rollback_on_timeout", OW_SERVER_NOTE, {"whole"}},
    {"no statement limit", none, "max_statement_time", OW_SERVER_OK, {NULL}},
    {"statements cut before the wait",
     short_statements,
     "max_statement_time",
     OW_SERVER_WARN,
     {"request.in_progress_wait_s", "REQUEST_IN_PROGRESS"}},
    {"statements cut after the wait",
     long_statements,
     "max_statement_time",
     OW_SERVER_NOTE,
     {"lock wait"}},
    {"packet below the minimum", tiny_packet, "max_allowed_packet", OW_SERVER_REFUSE, {"65536"}},
    {"packet below the largest record",
     small_packet,
     "max_allowed_packet",
     OW_SERVER_WARN,
     {"request.max_orders", "400"}},
    {"1 MiB packet", old_default_packet, "max_allowed_packet", OW_SERVER_OK, {"split"}},
    {"few prepared statements",
     few_statements,
     "max_prepared_stmt_count",
     OW_SERVER_REFUSE,
     {"worker.lanes", "276"}},
    {"just enough statements",
     just_enough_statements,
     "max_prepared_stmt_count",
     OW_SERVER_OK,
     {NULL}},
    {"three account connections",
     three_connections,
     "max_user_connections",
     OW_SERVER_REFUSE,
     {"worker.lanes", "MAX_USER_CONNECTIONS"}},
    {"enough account connections",
     enough_connections,
     "max_user_connections",
     OW_SERVER_OK,
     {NULL}},
    {"galera without flush",
     galera_no_flush,
     "innodb_flush_log_at_trx_commit",
     OW_SERVER_WARN,
     {"Galera", "set it to 1"}},
};

static void test_assess_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const assess_case *c = &cases[i];
        ow_server_vars v = fine();
        ow_server_needs n = worker();
        ow_server_report r;
        const ow_server_finding *f;

        c->change(&v, &n);
        ow_server_assess(&v, &n, &r);
        f = find(&r, c->setting);
        if (f == NULL)
            fail_msg("%s: no finding for %s", c->name, c->setting);
        if (f->level != c->level)
            fail_msg("%s: %s is %s, wanted %s (%s)", c->name, c->setting,
                     ow_server_level_name(f->level), ow_server_level_name(c->level), f->why);
        for (int w = 0; w < 3 && c->words[w] != NULL; w++)
            if (strstr(f->why, c->words[w]) == NULL)
                fail_msg("%s: \"%s\" does not say %s", c->name, f->why, c->words[w]);
    }
}

/* A fine server is never refused or warned about; only a Galera node is
 * asked about its flush. */
static void test_fine_server_says_nothing(void **state)
{
    ow_server_vars v = fine();
    ow_server_needs n = worker();
    ow_server_report r;

    (void)state;
    ow_server_assess(&v, &n, &r);
    assert_int_equal(ow_server_worst(&r), OW_SERVER_OK);
    assert_null(find(&r, "innodb_flush_log_at_trx_commit"));
    plain_no_flush(&v, &n);
    ow_server_assess(&v, &n, &r);
    assert_null(find(&r, "innodb_flush_log_at_trx_commit"));
    /* serve only reads: the binary log's format is no concern of its. */
    v = fine();
    statement_reads_only(&v, &n);
    ow_server_assess(&v, &n, &r);
    assert_null(find(&r, "binlog_format"));
    assert_int_equal(ow_server_worst(&r), OW_SERVER_OK);
}

/* The orders that fit a packet: the worst record of that many fits, one
 * more does not, and the count never passes request.max_orders. */
static void test_orders_fitting(void **state)
{
    static const int64_t packets[] = {65536, 131072, 262144, 1 << 20};

    (void)state;
    for (size_t i = 0; i < sizeof(packets) / sizeof(packets[0]); i++) {
        size_t fit = ow_server_orders_fitting(packets[i], 100000);
        size_t len = 0, more = 0;

        assert_true(fit > 0);
        assert_int_equal(ow_response_max_len(fit, &len), 0);
        assert_int_equal(ow_response_max_len(fit + 1, &more), 0);
        assert_true((int64_t)ow_server_record_bytes(OW_KEY_MAX, len) <= packets[i]);
        assert_true((int64_t)ow_server_record_bytes(OW_KEY_MAX, more) > packets[i] - 1024);
    }
    assert_int_equal(ow_server_orders_fitting(1 << 20, 1000), 1000);
    assert_int_equal(ow_server_orders_fitting(64 << 20, 3000), 3000);
}

/* Which errors keep their server text: those that name a setting, a
 * column or a table do; those that can quote a row's values do not. */
static void test_error_texts(void **state)
{
    static const unsigned shown[] = {1054, 1146, 1153, 1205, 1305, 1461, 1665, 1969, 1226, 2006};
    static const unsigned withheld[] = {1062, 1264, 1292, 1366, 1406, 1586};

    (void)state;
    for (size_t i = 0; i < sizeof(shown) / sizeof(shown[0]); i++)
        if (ow_store_error_quotes_data(shown[i]))
            fail_msg("error %u is withheld", shown[i]);
    for (size_t i = 0; i < sizeof(withheld) / sizeof(withheld[0]); i++)
        if (!ow_store_error_quotes_data(withheld[i]))
            fail_msg("error %u is shown", withheld[i]);
    assert_non_null(strstr(ow_store_error_hint(1665), "binlog_format=ROW"));
    assert_non_null(strstr(ow_store_error_hint(1461), "max_prepared_stmt_count"));
    assert_non_null(strstr(ow_store_error_hint(1969), "max_statement_time"));
    assert_non_null(strstr(ow_store_error_hint(1153), "max_allowed_packet"));
    assert_non_null(strstr(ow_store_error_hint(1305), "innodb_rollback_on_timeout"));
    assert_non_null(strstr(ow_store_error_hint(1054), "order-worker migrate"));
    assert_non_null(strstr(ow_store_error_hint(1226), "MAX_USER_CONNECTIONS"));
    assert_null(ow_store_error_hint(1062));
}

/* What a retry may cure: statement timeouts, a savepoint the server
 * dropped, the account's and the server's connection and statement
 * limits, and a packet refused on its way (the connection is then lost). */
static void test_error_classes(void **state)
{
    static const unsigned retried[] = {1153, 1203, 1205, 1213, 1226, 1305, 1461, 1969, 3024};
    static const unsigned fatal[] = {1054, 1146, 1665, 1062};

    (void)state;
    for (size_t i = 0; i < sizeof(retried) / sizeof(retried[0]); i++)
        if (!ow_store_error_retriable(retried[i]))
            fail_msg("error %u is not retried", retried[i]);
    for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
        if (ow_store_error_retriable(fatal[i]))
            fail_msg("error %u is retried", fatal[i]);
    assert_true(ow_store_packet_refusal(1153));
    assert_true(ow_store_packet_refusal(2006));
    assert_false(ow_store_packet_refusal(1205));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assess_table),   cmocka_unit_test(test_fine_server_says_nothing),
        cmocka_unit_test(test_orders_fitting), cmocka_unit_test(test_error_texts),
        cmocka_unit_test(test_error_classes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
