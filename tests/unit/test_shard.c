/* User sharding: the hash's known answers, the bucket map, the
 * N -> 2N move rule and mysql.shards parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ow/config.h"
#include "ow/nodes.h"
#include "ow/shard.h"

/* Computed independently (Python, FNV-1a 64 over the decimal text); the
 * same table is in docs/contract.md, "Shard routing". */
static const struct {
    int64_t user;
    uint64_t hash;
    uint32_t bucket; /* B = 4096 */
    unsigned shard3;
} vectors[] = {
    {1, 0xaf63ac4c86019afcULL, 2812, 1},         {42, 0x07ee7e07b4b19223ULL, 547, 1},
    {1000000, 0xabb4c8205c0ca07cULL, 124, 1},    {123456789, 0x06d5573923c6cdfcULL, 3580, 1},
    {INT64_MAX, 0xf7cefbda42d0e94bULL, 2379, 0},
};

static void test_known_answers(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        assert_true(ow_shard_hash(vectors[i].user) == vectors[i].hash);
        assert_int_equal(ow_shard_bucket(vectors[i].user, 4096), vectors[i].bucket);
        assert_int_equal(ow_shard_of_user(vectors[i].user, 4096, 3), vectors[i].shard3);
        assert_int_equal(ow_shard_of_user(vectors[i].user, 4096, 1), 0);
    }
}

/* Every user of a bucket moving from N to 2N shards goes from shard s to
 * s or s + N, never elsewhere: the copy of docs/operations.md is complete. */
static unsigned doubling_moves(unsigned n)
{
    unsigned moved = 0;

    for (uint32_t b = 0; b < 4096; b++) {
        unsigned from = ow_shard_of_bucket(b, n);
        unsigned to = ow_shard_of_bucket(b, 2 * n);

        assert_true(to == from || to == from + n);
        moved += to != from;
    }
    return moved;
}

static void test_doubling_moves_half(void **state)
{
    (void)state;
    assert_int_equal(doubling_moves(1), 2048);
    assert_int_equal(doubling_moves(2), 2048);
    /* 4096 = 682 * 6 + 4: buckets 4092..4095 add one mover (4095). */
    assert_int_equal(doubling_moves(3), 682 * 3 + 1);
}

/* Users spread over every shard (the e2e tier picks users per shard). */
static void test_spread(void **state)
{
    unsigned count[3] = {0, 0, 0};

    (void)state;
    for (int64_t u = 1; u <= 3000; u++)
        count[ow_shard_of_user(u, 4096, 3)]++;
    for (int s = 0; s < 3; s++)
        assert_in_range(count[s], 850, 1150);
}

static void test_parse_list(void **state)
{
    ow_shard_list l;
    ow_error err;

    (void)state;
    assert_int_equal(ow_shard_list_parse("", &l, &err), OW_OK);
    assert_int_equal(l.n, 0);
    assert_int_equal(ow_shard_list_parse(" db0:3307/orders_a, db1 ,[::1]:3309/x", &l, &err), OW_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.addr[0].host, "db0");
    assert_int_equal(l.addr[0].port, 3307);
    assert_string_equal(l.addr[0].database, "orders_a");
    assert_string_equal(l.addr[1].host, "db1");
    assert_int_equal(l.addr[1].port, 0);
    assert_string_equal(l.addr[1].database, "");
    assert_string_equal(l.addr[2].host, "::1");
    assert_int_equal(l.addr[2].port, 3309);
}

static void test_parse_errors(void **state)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"a,,b", "mysql.shards: entry 1 \"\": empty entry"},
        {"a:0", "mysql.shards: entry 0 \"a:0\": the port must be 1..65535"},
        {"a:x1", "mysql.shards: entry 0 \"a:x1\": the port must be 1..65535"},
        {"a/b-c", "mysql.shards: entry 0 \"a/b-c\": the database name must be 1..64 of A-Z a-z "
                  "0-9 _ $"},
        {"a b", "mysql.shards: entry 0 \"a b\": the host is empty or has a character not "
                "allowed"},
        {"[::1", "mysql.shards: entry 0 \"[::1\": expected host[:port][/database]"},
    };
    ow_shard_list l;
    ow_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(ow_shard_list_parse(bad[i].text, &l, &err), OW_EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
    }
}

/* A shard entry may name the nodes of one cluster: '|' between them, one
 * port and database after the last; they are kept joined by commas, the
 * mysql.host form that the store splits. */
static void test_parse_node_lists(void **state)
{
    ow_shard_list l;
    ow_error err;
    char node[64];

    (void)state;
    assert_int_equal(ow_shard_list_parse("10.0.0.1|10.0.0.2|10.0.0.3:3306/orders, a | b ,"
                                         "[::1]|[::2]:3309/x",
                                         &l, &err),
                     OW_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.addr[0].host, "10.0.0.1,10.0.0.2,10.0.0.3");
    assert_int_equal(l.addr[0].port, 3306);
    assert_string_equal(l.addr[0].database, "orders");
    assert_string_equal(l.addr[1].host, "a,b");
    assert_int_equal(l.addr[1].port, 0);
    assert_string_equal(l.addr[2].host, "::1,::2");
    assert_int_equal(l.addr[2].port, 3309);
    assert_int_equal(ow_nodes_count(l.addr[0].host), 3);
    assert_int_equal(ow_nodes_get(l.addr[0].host, 2, node, sizeof(node)), OW_OK);
    assert_string_equal(node, "10.0.0.3");
    assert_int_equal(ow_nodes_get(l.addr[0].host, 3, node, sizeof(node)), OW_ENOTFOUND);
}

static void test_parse_node_list_errors(void **state)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"a:3306|b", "mysql.shards: entry 0 \"a:3306|b\": the port is written once, after the "
                     "last node"},
        {"a||b", "mysql.shards: entry 0 \"a||b\": a node name is empty or has a character not "
                 "allowed"},
        {"a|b c/x", "mysql.shards: entry 0 \"a|b c/x\": a node name is empty or has a character "
                    "not allowed"},
        {"ok, a|b|a:1", "mysql.shards: entry 1 \"a|b|a:1\": node 2 \"a\": listed twice"},
        {"a|b/", "mysql.shards: entry 0 \"a|b/\": the database name must be 1..64 of A-Z a-z "
                 "0-9 _ $"},
    };
    ow_shard_list l;
    ow_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(ow_shard_list_parse(bad[i].text, &l, &err), OW_EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
    }
}

/* mysql.host: one node or a comma-separated list; each name is checked. A
 * node shared by two shard entries is one database under two indexes;
 * reordering the nodes inside an entry is the same cluster. */
static void test_config_node_lists(void **state)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"mysql.host = 127.0.0.11, 127.0.0.12,\n", "mysql.host: node 2 \"\": empty node name"},
        {"mysql.host = db1,db 2\n",
         "mysql.host: node 1 \"db 2\": a node name is 1..255 letters, digits and . - _ : (IPv6)"},
        {"mysql.host = db1,db/2\n",
         "mysql.host: node 1 \"db/2\": a node name is 1..255 letters, digits and . - _ : (IPv6)"},
        {"mysql.host = db1,db2,db1\n", "mysql.host: node 2 \"db1\": listed twice"},
        {"mysql.shards = a|b, c|b\n", "mysql.shards: entry 1 names the same database as entry 0"},
    };
    ow_config cfg;
    ow_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
        assert_int_equal(ow_config_load_string(&cfg, bad[i].text, "t", &err), OW_OK);
        assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
        assert_string_equal(err.msg, bad[i].msg);
        ow_config_cleanup(&cfg);
    }
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(ow_config_load_string(&cfg,
                                           "mysql.host = 127.0.0.11, 127.0.0.12,127.0.0.13\n"
                                           "mysql.shards = c|b|a, d|e:3310\n",
                                           "t", &err),
                     OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    assert_int_equal(ow_nodes_count(cfg.mysql_host), 3);
    assert_string_equal(cfg.shards.addr[0].host, "c,b,a");
    assert_string_equal(cfg.shards.addr[1].host, "d,e");
    assert_int_equal(cfg.shards.addr[1].port, 3310);
    ow_config_cleanup(&cfg);
}

/* Defaults from mysql.port/mysql.database; one database listed twice is
 * refused, however it is spelled. */
static void test_config_shards(void **state)
{
    ow_config cfg;
    ow_error err;

    (void)state;
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    assert_int_equal(cfg.mysql_shard_buckets, 4096);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    assert_int_equal(cfg.shards.n, 0);
    assert_int_equal(ow_config_load_string(&cfg,
                                           "mysql.port = 3310\nmysql.database = od\n"
                                           "mysql.shards = h1, h2:3311/other\n",
                                           "t", &err),
                     OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    assert_int_equal(cfg.shards.n, 2);
    assert_int_equal(cfg.shards.addr[0].port, 3310);
    assert_string_equal(cfg.shards.addr[0].database, "od");
    assert_int_equal(cfg.shards.addr[1].port, 3311);
    assert_int_equal(ow_config_load_string(&cfg, "mysql.shards = h1, h1:3310/od\n", "t", &err),
                     OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
    assert_string_equal(err.msg, "mysql.shards: entry 1 names the same database as entry 0");
    ow_config_cleanup(&cfg);
}

/* mysql.shard_password_files: read per shard, "" keeps mysql.password,
 * and the count must match mysql.shards. */
static void test_shard_password_files(void **state)
{
    char dir[] = "/tmp/ow-shardpw-XXXXXX";
    char f0[64], f2[64], text[256];
    ow_config cfg;
    ow_error err;
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(f0, sizeof(f0), "%s/s0", dir);
    snprintf(f2, sizeof(f2), "%s/s2", dir);
    f = fopen(f0, "w");
    fputs("pw-zero\n", f);
    fclose(f);
    f = fopen(f2, "w");
    fputs("pw-two", f);
    fclose(f);
    assert_int_equal(ow_config_init(&cfg, &err), OW_OK);
    snprintf(text, sizeof(text), "mysql.shards = a, b, c\nmysql.shard_password_files = %s, , %s\n",
             f0, f2);
    assert_int_equal(ow_config_load_string(&cfg, text, "t", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_OK);
    assert_string_equal(cfg.shard_passwords[0], "pw-zero");
    assert_null(cfg.shard_passwords[1]);
    assert_string_equal(cfg.shard_passwords[2], "pw-two");
    snprintf(text, sizeof(text), "mysql.shard_password_files = %s\n", f0);
    assert_int_equal(ow_config_load_string(&cfg, text, "t", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
    assert_string_equal(err.msg,
                        "mysql.shard_password_files: 1 entries for 3 shards in mysql.shards");
    snprintf(text, sizeof(text), "mysql.shard_password_files = ,%s/missing,\n", dir);
    assert_int_equal(ow_config_load_string(&cfg, text, "t", &err), OW_OK);
    assert_int_equal(ow_config_finish(&cfg, &err), OW_EINVAL);
    assert_non_null(strstr(err.msg, "mysql.shard_password_files: entry 1: "));
    assert_non_null(strstr(err.msg, "cannot open"));
    ow_config_cleanup(&cfg);
    unlink(f0);
    unlink(f2);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_node_lists),    cmocka_unit_test(test_parse_node_list_errors),
        cmocka_unit_test(test_config_node_lists),   cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_doubling_moves_half), cmocka_unit_test(test_spread),
        cmocka_unit_test(test_parse_list),          cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_config_shards),       cmocka_unit_test(test_shard_password_files),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
