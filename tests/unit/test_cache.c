/* The retry cache: hits need the same digest, entries expire,
 * the byte bound holds, 0 disables it, and two keys under one hash are
 * told apart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ow/cache.h"

static void digest_of(unsigned char d[OW_DIGEST_LEN], int seed)
{
    for (int i = 0; i < OW_DIGEST_LEN; i++)
        d[i] = (unsigned char)(seed * 31 + i);
}

static int put(ow_cache *c, int64_t user, const char *key, int seed, const char *body, int64_t now)
{
    unsigned char d[OW_DIGEST_LEN];

    digest_of(d, seed);
    return ow_cache_put(c, user, key, strlen(key), d, OW_CODE_CREATED, body, strlen(body), now);
}

static int get(ow_cache *c, int64_t user, const char *key, int seed, int64_t now, ow_buf *body)
{
    unsigned char d[OW_DIGEST_LEN];
    ow_result_code code = OW_CODE_INVALID_REQUEST;
    int hit;

    digest_of(d, seed);
    hit = ow_cache_get(c, user, key, strlen(key), d, now, &code, body);
    if (hit)
        assert_int_equal(code, OW_CODE_CREATED);
    return hit;
}

static void test_disabled(void **state)
{
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    assert_null(ow_cache_new(0, 1000));
    /* A disabled cache (NULL) answers nothing and stores nothing. */
    assert_int_equal(put(NULL, 1, "k", 1, "{}", 0), 0);
    assert_int_equal(get(NULL, 1, "k", 1, 0, &b), 0);
    assert_int_equal(ow_cache_bytes(NULL), 0);
    ow_buf_cleanup(&b);
}

static void test_hit_needs_same_digest_and_scope(void **state)
{
    ow_cache *c = ow_cache_new(1 << 20, 60000);
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    assert_non_null(c);
    assert_int_equal(put(c, 42, "idem-1", 7, "{\"status\":201}", 1000), 1);
    assert_int_equal(get(c, 42, "idem-1", 7, 1001, &b), 1);
    assert_int_equal(b.len, strlen("{\"status\":201}"));
    assert_memory_equal(b.data, "{\"status\":201}", b.len);
    /* Another digest (a reused key), another user, another key: misses. */
    assert_int_equal(get(c, 42, "idem-1", 8, 1002, &b), 0);
    assert_int_equal(get(c, 43, "idem-1", 7, 1002, &b), 0);
    assert_int_equal(get(c, 42, "idem-2", 7, 1002, &b), 0);
    assert_int_equal(get(c, 42, "idem-", 7, 1002, &b), 0);
    assert_int_equal(ow_cache_entries(c), 1);
    ow_cache_free(&c);
    assert_null(c);
    ow_buf_cleanup(&b);
}

static void test_ttl(void **state)
{
    ow_cache *c = ow_cache_new(1 << 20, 5000);
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    put(c, 1, "k", 1, "body", 10000);
    assert_int_equal(get(c, 1, "k", 1, 14999, &b), 1);
    /* At the TTL it is gone, and so are its bytes. */
    assert_int_equal(get(c, 1, "k", 1, 15000, &b), 0);
    assert_int_equal(ow_cache_entries(c), 0);
    assert_int_equal(get(c, 1, "k", 1, 15001, &b), 0);
    ow_cache_free(&c);
    ow_buf_cleanup(&b);
}

static void test_bound_evicts_least_recent(void **state)
{
    const size_t bound = 64 * 1024;
    ow_cache *c = ow_cache_new(bound, 60000);
    char body[1000], key[32];
    ow_buf b;
    int stored = 0;

    (void)state;
    ow_buf_init(&b);
    memset(body, 'x', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    for (int i = 0; i < 500; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        stored += put(c, 1, key, i, body, 1000 + i);
        assert_true(ow_cache_bytes(c) <= bound);
        /* Touch key-0 so that it stays the most recently used. */
        assert_int_equal(get(c, 1, "key-0", 0, 1000 + i, &b), 1);
    }
    assert_int_equal(stored, 500);
    assert_true(ow_cache_entries(c) < 64);
    assert_true(ow_cache_entries(c) > 40);
    assert_int_equal(get(c, 1, "key-499", 499, 2000, &b), 1);
    assert_int_equal(get(c, 1, "key-1", 1, 2000, &b), 0); /* evicted */
    assert_int_equal(get(c, 1, "key-0", 0, 2000, &b), 1); /* kept by use */
    ow_cache_free(&c);
    ow_buf_cleanup(&b);
}

static void test_replace_and_oversize(void **state)
{
    ow_cache *c = ow_cache_new(4096, 60000);
    char big[2000];
    ow_buf b;
    size_t before;

    (void)state;
    ow_buf_init(&b);
    put(c, 1, "k", 1, "first", 0);
    put(c, 1, "k", 1, "second", 1);
    assert_int_equal(ow_cache_entries(c), 1);
    assert_int_equal(get(c, 1, "k", 1, 2, &b), 1);
    assert_memory_equal(b.data, "second", 6);
    /* An entry above a quarter of the bound is not kept. */
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    before = ow_cache_bytes(c);
    assert_int_equal(put(c, 1, "big", 1, big, 3), 0);
    assert_int_equal(ow_cache_bytes(c), before);
    assert_int_equal(get(c, 1, "k", 1, 4, &b), 1);
    ow_cache_free(&c);
    ow_buf_cleanup(&b);
}

/* The user id seeds the key's hash by XOR before its first byte, so
 * (u, "i...") and (u ^ ('i' ^ 'j'), "j...") share one hash. */
static void test_two_keys_under_one_hash(void **state)
{
    const int64_t u1 = 42, u2 = 42 ^ ('i' ^ 'j');
    ow_cache *c = ow_cache_new(1 << 20, 5000);
    ow_buf b;

    (void)state;
    ow_buf_init(&b);
    assert_int_equal(ow_cache_key_hash(u1, "idem-1", 6), ow_cache_key_hash(u2, "jdem-1", 6));
    assert_int_equal(put(c, u1, "idem-1", 7, "{\"a\":1}", 1000), 1);
    assert_int_equal(get(c, u2, "jdem-1", 7, 1001, &b), 0);
    assert_int_equal(put(c, u2, "jdem-1", 7, "{\"b\":2}", 2000), 1);
    assert_int_equal(ow_cache_entries(c), 2);
    assert_int_equal(get(c, u1, "idem-1", 7, 2001, &b), 1);
    assert_memory_equal(b.data, "{\"a\":1}", b.len);
    assert_int_equal(get(c, u2, "jdem-1", 7, 2002, &b), 1);
    assert_memory_equal(b.data, "{\"b\":2}", b.len);
    /* Replacing one leaves the other. */
    assert_int_equal(put(c, u2, "jdem-1", 7, "{\"b\":3}", 3000), 1);
    assert_int_equal(ow_cache_entries(c), 2);
    assert_int_equal(get(c, u1, "idem-1", 7, 3001, &b), 1);
    assert_memory_equal(b.data, "{\"a\":1}", b.len);
    /* The first expires (TTL 5 s); the second stays. */
    assert_int_equal(get(c, u1, "idem-1", 7, 6000, &b), 0);
    assert_int_equal(ow_cache_entries(c), 1);
    assert_int_equal(get(c, u2, "jdem-1", 7, 6001, &b), 1);
    assert_memory_equal(b.data, "{\"b\":3}", b.len);
    ow_cache_free(&c);
    ow_buf_cleanup(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_hit_needs_same_digest_and_scope),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_bound_evicts_least_recent),
        cmocka_unit_test(test_replace_and_oversize),
        cmocka_unit_test(test_two_keys_under_one_hash),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
