/*
 * The deciding transaction against a real MariaDB: the four acceptance cases
 * of the seeds, the micro-batch path, and the races the database decides.
 * Every case checks row counts, request status and response bytes.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "../support/testdb.h"
#include "ow/digest.h"
#include "ow/store.h"
#include "ow/store_lookup.h"
#include "store_test.h"

static testdb db;
static ow_idgen ids;

static long long count(const char *sql)
{
    return testdb_count(&db, sql);
}

static int setup(void **state)
{
    (void)state;
    testdb_exec(&db, "DELETE FROM orders");
    testdb_exec(&db, "DELETE FROM idempotency_requests");
    return 0;
}

static char *stored_body(long long user_id, const char *key)
{
    char sql[256];
    MYSQL_RES *res;
    MYSQL_ROW row;
    char *body = NULL;

    snprintf(sql, sizeof(sql),
             "SELECT response_body FROM idempotency_requests WHERE user_id=%lld AND "
             "idempotency_key='%s'",
             user_id, key);
    assert_int_equal(mysql_query(db.admin, sql), 0);
    res = mysql_store_result(db.admin);
    row = mysql_fetch_row(res);
    if (row != NULL)
        body = strdup(row[0]);
    mysql_free_result(res);
    return body;
}

/* Case 1: same key, same content -> one batch of orders, identical responses. */
static void test_same_key_same_content(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg a, b, c;
    char *stored;

    (void)state;
    testmsg_make(&a, "k-same",
                 "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"E1\",\"amount\":"
                 "\"19.90\"},{\"external_order_no\":\"E2\",\"amount\":5,\"quantity\":2}]}");
    /* Same request, spelled differently. */
    testmsg_make(&b, "k-same",
                 "{\"orders\":[{\"amount\":19.9,\"external_order_no\":\"E1\"},"
                 "{\"quantity\":2,\"external_order_no\":\"E2\",\"amount\":\"5.00\"}],"
                 "\"user_id\":1}");
    testmsg_make(&c, "k-same",
                 "{\"user_id\":1,\"orders\":[{\"external_order_no\":\"E1\",\"amount\":"
                 "\"19.90\"},{\"external_order_no\":\"E2\",\"amount\":5,\"quantity\":2}]}");
    testmsg_decide(s, &a);
    assert_int_equal(a.item.decision, OW_DECISION_CREATED);
    assert_int_equal(a.item.code, OW_CODE_CREATED);
    assert_int_equal(a.item.replayed, 0);
    testmsg_decide(s, &b);
    testmsg_decide(s, &c);
    assert_int_equal(b.item.decision, OW_DECISION_REPLAY);
    assert_int_equal(b.item.code, OW_CODE_CREATED);
    assert_int_equal(b.item.replayed, 1);
    assert_int_equal(c.item.decision, OW_DECISION_REPLAY);
    assert_int_equal(b.item.body.len, a.item.body.len);
    assert_memory_equal(b.item.body.data, a.item.body.data, a.item.body.len);
    assert_memory_equal(c.item.body.data, a.item.body.data, a.item.body.len);
    stored = stored_body(1, "k-same");
    assert_string_equal(stored, a.item.body.data);
    free(stored);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 1);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE status='SUCCEEDED' "
                           "AND response_status=201"),
                     1);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2);
    assert_int_equal(count("SELECT COUNT(*) FROM orders o JOIN idempotency_requests r ON "
                           "r.id=o.request_id WHERE o.external_order_no='E2' AND o.quantity=2 AND "
                           "o.amount=5.00 AND o.product_id IS NULL"),
                     1);
    testmsg_free(&a);
    testmsg_free(&b);
    testmsg_free(&c);
    ow_store_free(&s);
}

/* Case 2: same key, different content -> 409 IDEMPOTENCY_KEY_REUSED, nothing written. */
static void test_same_key_different_content(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg a, b;
    char *before, *after;
    json_t *j;
    json_error_t jerr;

    (void)state;
    testmsg_make(&a, "k-reuse",
                 "{\"user_id\":2,\"orders\":[{\"external_order_no\":\"R1\",\"amount\":1}]}");
    testmsg_make(&b, "k-reuse",
                 "{\"user_id\":2,\"orders\":[{\"external_order_no\":\"R1\",\"amount\":2},"
                 "{\"external_order_no\":\"R2\",\"amount\":3}]}");
    testmsg_decide(s, &a);
    before = stored_body(2, "k-reuse");
    testmsg_decide(s, &b);
    assert_int_equal(b.item.decision, OW_DECISION_KEY_REUSED);
    assert_int_equal(b.item.code, OW_CODE_IDEMPOTENCY_KEY_REUSED);
    j = json_loadb(b.item.body.data, b.item.body.len, 0, &jerr);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 409);
    assert_string_equal(json_string_value(json_object_get(j, "code")), "IDEMPOTENCY_KEY_REUSED");
    json_decref(j);
    after = stored_body(2, "k-reuse");
    assert_string_equal(before, after);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 1);
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE amount=1.00"), 1);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 1);
    /* The same key for another user is an independent request. */
    testmsg_free(&b);
    testmsg_make(&b, "k-reuse",
                 "{\"user_id\":3,\"orders\":[{\"external_order_no\":\"R1\",\"amount\":2}]}");
    testmsg_decide(s, &b);
    assert_int_equal(b.item.decision, OW_DECISION_CREATED);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 2);
    free(before);
    free(after);
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s);
}

/* Case 3: another key, same external order number. */
static void test_existing_orders(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg first, same, differ, replay;
    json_t *j, *o, *conf;
    json_error_t jerr;

    (void)state;
    testmsg_make(&first, "k-first",
                 "{\"user_id\":4,\"orders\":[{\"external_order_no\":\"X1\","
                 "\"amount\":\"10.00\",\"product_id\":7}]}");
    testmsg_decide(s, &first);
    assert_int_equal(first.item.decision, OW_DECISION_CREATED);

    /* Identical order under a new key: reused, not inserted again. */
    testmsg_make(&same, "k-second",
                 "{\"user_id\":4,\"orders\":[{\"external_order_no\":\"NEW\","
                 "\"amount\":1},{\"external_order_no\":\"X1\",\"amount\":10,"
                 "\"product_id\":7}]}");
    testmsg_decide(s, &same);
    assert_int_equal(same.item.decision, OW_DECISION_CREATED);
    j = json_loadb(same.item.body.data, same.item.body.len, 0, &jerr);
    o = json_object_get(j, "orders");
    assert_true(json_is_false(json_object_get(json_array_get(o, 0), "existing")));
    assert_true(json_is_true(json_object_get(json_array_get(o, 1), "existing")));
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(o, 1), "order_id")),
                     count("SELECT id FROM orders WHERE external_order_no='X1'"));
    json_decref(j);

    /* Differing order: the whole batch is rolled back, request FAILED, 409 names it. */
    testmsg_make(&differ, "k-third",
                 "{\"user_id\":4,\"orders\":[{\"external_order_no\":\"OK\","
                 "\"amount\":1},{\"external_order_no\":\"X1\",\"amount\":11,"
                 "\"quantity\":3}]}");
    testmsg_decide(s, &differ);
    assert_int_equal(differ.item.decision, OW_DECISION_CONFLICT);
    assert_int_equal(differ.item.code, OW_CODE_ORDER_ALREADY_EXISTS);
    j = json_loadb(differ.item.body.data, differ.item.body.len, 0, &jerr);
    conf = json_object_get(j, "conflicts");
    assert_int_equal(json_array_size(conf), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(conf, 0), "index")), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(conf, 0), "external_order_no")), "X1");
    assert_int_equal(json_array_size(json_object_get(json_array_get(conf, 0), "fields")), 3);
    json_decref(j);
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE external_order_no='OK'"), 0);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE status='FAILED' AND "
                           "response_status=409"),
                     1);
    assert_int_equal(count("SELECT COUNT(*) FROM orders o JOIN idempotency_requests r ON "
                           "r.id=o.request_id WHERE r.status='FAILED'"),
                     0);

    /* The FAILED request replays its 409 byte for byte. */
    testmsg_make(&replay, "k-third",
                 "{\"user_id\":4,\"orders\":[{\"external_order_no\":\"OK\","
                 "\"amount\":1},{\"external_order_no\":\"X1\",\"amount\":11,"
                 "\"quantity\":3}]}");
    testmsg_decide(s, &replay);
    assert_int_equal(replay.item.decision, OW_DECISION_REPLAY);
    assert_int_equal(replay.item.code, OW_CODE_ORDER_ALREADY_EXISTS);
    assert_int_equal(replay.item.body.len, differ.item.body.len);
    assert_memory_equal(replay.item.body.data, differ.item.body.data, differ.item.body.len);
    testmsg_free(&first);
    testmsg_free(&same);
    testmsg_free(&differ);
    testmsg_free(&replay);
    ow_store_free(&s);
}

/* Case 4: the same key from two connections at once, many times. */
typedef struct {
    ow_store *store;
    testmsg *m;
    pthread_barrier_t *start;
} racer;

static void *race(void *p)
{
    racer *r = p;

    pthread_barrier_wait(r->start);
    testmsg_decide(r->store, r->m);
    return NULL;
}

/* Decides a on s1 and b on s2 at once, each on its own thread. With a
 * holder (a session keeping a key uncommitted), both are left to reach its
 * lock first and the holder then rolls back. */
static void race_two(ow_store *s1, testmsg *a, ow_store *s2, testmsg *b, MYSQL *holder)
{
    pthread_barrier_t start;
    pthread_t t1, t2;
    racer r1, r2;

    pthread_barrier_init(&start, NULL, 2);
    r1 = (racer){s1, a, &start};
    r2 = (racer){s2, b, &start};
    pthread_create(&t1, NULL, race, &r1);
    pthread_create(&t2, NULL, race, &r2);
    if (holder != NULL) {
        usleep(500000);
        assert_int_equal(mysql_rollback(holder), 0);
        mysql_close(holder);
    }
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_barrier_destroy(&start);
}

static void test_same_key_two_connections(void **state)
{
    enum { ROUNDS = 60 };
    ow_store *s1 = testdb_store(&db, &ids, 5);
    ow_store *s2 = testdb_store(&db, &ids, 5);
    int created_first = 0, created_second = 0;

    (void)state;
    for (int round = 0; round < ROUNDS; round++) {
        char key[32], value[256];
        testmsg a, b;
        char sql[160];

        snprintf(key, sizeof(key), "race-%d", round);
        snprintf(value, sizeof(value),
                 "{\"user_id\":5,\"orders\":[{\"external_order_no\":\"RC-%d-a\",\"amount\":1},"
                 "{\"external_order_no\":\"RC-%d-b\",\"amount\":2}]}",
                 round, round);
        testmsg_make(&a, key, value);
        testmsg_make(&b, key, value);
        race_two(s1, &a, s2, &b, NULL);
        /* Exactly one created, the other replayed the same bytes. */
        if (!((a.item.decision == OW_DECISION_CREATED && b.item.decision == OW_DECISION_REPLAY) ||
              (b.item.decision == OW_DECISION_CREATED && a.item.decision == OW_DECISION_REPLAY)))
            fail_msg("round %d: decisions %d and %d", round, a.item.decision, b.item.decision);
        created_first += a.item.decision == OW_DECISION_CREATED;
        created_second += b.item.decision == OW_DECISION_CREATED;
        assert_int_equal(a.item.body.len, b.item.body.len);
        assert_memory_equal(a.item.body.data, b.item.body.data, a.item.body.len);
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM idempotency_requests WHERE idempotency_key='%s'", key);
        assert_int_equal(count(sql), 1);
        testmsg_free(&a);
        testmsg_free(&b);
    }
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE user_id=5"), 2 * ROUNDS);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE user_id=5"), ROUNDS);
    print_message("same-key race: %d rounds, first connection created %d, second %d\n", ROUNDS,
                  created_first, created_second);
    ow_store_free(&s1);
    ow_store_free(&s2);
}

/* A micro-batch decided by the set-based statements: every kind of outcome
 * at once, no fallback. */
static void test_micro_batch_mixed(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg seed_c, seed_e, m[5];
    ow_store_item items[5];
    ow_error err;
    const ow_store_stats *st;

    (void)state;
    testmsg_make(&seed_c, "mb-c",
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"C1\",\"amount\":1}]}");
    testmsg_make(&seed_e, "mb-e0",
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"E1\",\"amount\":1}]}");
    testmsg_decide(s, &seed_c);
    testmsg_decide(s, &seed_e);
    testmsg_make(&m[0], "mb-a",
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"A1\",\"amount\":1},"
                 "{\"external_order_no\":\"A2\",\"amount\":2}]}");
    testmsg_make(&m[1], "mb-b",
                 "{\"user_id\":8,\"orders\":[{\"external_order_no\":\"A1\",\"amount\":9}]}");
    testmsg_make(&m[2], "mb-c",
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"C1\",\"amount\":1}]}");
    testmsg_make(&m[3], "mb-c",
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"C1\",\"amount\":2}]}");
    testmsg_make(&m[4], "mb-e",
                 "{\"user_id\":7,\"orders\":[{\"external_order_no\":\"E2\",\"amount\":1},"
                 "{\"external_order_no\":\"E1\",\"amount\":5}]}");
    /* Items are moved into one array, as a lane does. */
    for (int i = 0; i < 5; i++)
        items[i] = m[i].item;
    /* m[2] and m[3] share a key: the second sees the first's row (stored by an
     * earlier transaction) and is a key reuse. */
    assert_int_equal(ow_store_decide(s, items, 5, &err), OW_OK);
    assert_int_equal(items[0].decision, OW_DECISION_CREATED);
    assert_int_equal(items[1].decision, OW_DECISION_CREATED);
    assert_int_equal(items[2].decision, OW_DECISION_REPLAY);
    assert_int_equal(items[3].decision, OW_DECISION_KEY_REUSED);
    assert_int_equal(items[4].decision, OW_DECISION_CONFLICT);
    assert_int_equal(items[2].body.len, seed_c.item.body.len);
    assert_memory_equal(items[2].body.data, seed_c.item.body.data, seed_c.item.body.len);
    st = ow_store_get_stats(s);
    assert_int_equal(st->batch_fallbacks, 0);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2 + 3);
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE external_order_no='E2'"), 0);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 2 + 3);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE status='FAILED'"), 1);
    for (int i = 0; i < 5; i++) {
        m[i].item = items[i];
        testmsg_free(&m[i]);
    }
    testmsg_free(&seed_c);
    testmsg_free(&seed_e);
    ow_store_free(&s);
}

/* Two items of one micro-batch create the same order: the unique key
 * rejects the set-based insert (1062) and the batch is redone one item at a
 * time under savepoints, where the second sees the first's order. */
static void test_micro_batch_fallback(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg a, b;
    ow_store_item items[2];
    ow_error err;
    json_t *j;
    json_error_t jerr;

    (void)state;
    testmsg_make(&a, "fb-a",
                 "{\"user_id\":9,\"orders\":[{\"external_order_no\":\"S1\",\"amount\":3}]}");
    testmsg_make(&b, "fb-b",
                 "{\"user_id\":9,\"orders\":[{\"external_order_no\":\"S1\",\"amount\":3},"
                 "{\"external_order_no\":\"S2\",\"amount\":4}]}");
    items[0] = a.item;
    items[1] = b.item;
    assert_int_equal(ow_store_decide(s, items, 2, &err), OW_OK);
    assert_int_equal(ow_store_get_stats(s)->batch_fallbacks, 1);
    assert_int_equal(items[0].decision, OW_DECISION_CREATED);
    assert_int_equal(items[1].decision, OW_DECISION_CREATED);
    j = json_loadb(items[1].body.data, items[1].body.len, 0, &jerr);
    assert_true(
        json_is_true(json_object_get(json_array_get(json_object_get(j, "orders"), 0), "existing")));
    json_decref(j);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 2);
    a.item = items[0];
    b.item = items[1];
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s);
}

static MYSQL *hold_key(const testmsg *m, const char *body)
{
    MYSQL *other = testdb_connect(&db);
    MYSQL_STMT *st = mysql_stmt_init(other);
    const char *sql = "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                      "request_digest, status, response_status, response_body) "
                      "VALUES (?, ?, ?, ?, 'SUCCEEDED', 201, ?)";
    MYSQL_BIND b[5];
    long long id = 1, user = m->req.user_id;
    unsigned long klen = m->item.key_len, dlen = 32, blen = strlen(body);

    mysql_autocommit(other, 0);
    memset(b, 0, sizeof(b));
    b[0].buffer_type = MYSQL_TYPE_LONGLONG;
    b[0].buffer = &id;
    b[1].buffer_type = MYSQL_TYPE_LONGLONG;
    b[1].buffer = &user;
    b[2].buffer_type = MYSQL_TYPE_BLOB;
    b[2].buffer = (void *)m->item.key;
    b[2].length = &klen;
    b[3].buffer_type = MYSQL_TYPE_BLOB;
    b[3].buffer = (void *)m->item.digest;
    b[3].length = &dlen;
    b[4].buffer_type = MYSQL_TYPE_BLOB;
    b[4].buffer = (void *)body;
    b[4].length = &blen;
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0 || mysql_stmt_bind_param(st, b) != 0 ||
        mysql_stmt_execute(st) != 0)
        fail_msg("hold key: %s", mysql_stmt_error(st));
    mysql_stmt_close(st);
    return other;
}

/* A micro-batch of recorded keys is answered by one non-locking
 * read. Another session holds row locks on both records (FOR UPDATE) for
 * the whole call: a locking or writing path would wait out the 1 s lock
 * wait and answer REQUEST_IN_PROGRESS; the read answers from the committed
 * rows, writes nothing and opens no deciding transaction. */
static void test_replay_batch_reads_only(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 1);
    testmsg a, b, m[3];
    ow_store_item items[3];
    ow_error err;
    MYSQL *other;
    uint64_t transactions;

    (void)state;
    testmsg_make(&a, "ro-a",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"R1\",\"amount\":1}]}");
    testmsg_make(&b, "ro-b",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"R2\",\"amount\":2}]}");
    assert_int_equal(testmsg_decide(s, &a), OW_DECISION_CREATED);
    assert_int_equal(testmsg_decide(s, &b), OW_DECISION_CREATED);
    testmsg_make(&m[0], "ro-a",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"R1\",\"amount\":1}]}");
    testmsg_make(&m[1], "ro-b",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"R2\",\"amount\":2}]}");
    testmsg_make(&m[2], "ro-a",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"R9\",\"amount\":1}]}");
    other = testdb_connect(&db);
    mysql_autocommit(other, 0);
    assert_int_equal(mysql_query(other, "SELECT id FROM idempotency_requests WHERE user_id = 12 "
                                        "FOR UPDATE"),
                     0);
    mysql_free_result(mysql_store_result(other));
    transactions = ow_store_get_stats(s)->transactions;
    for (int i = 0; i < 3; i++)
        items[i] = m[i].item;
    assert_int_equal(ow_store_decide(s, items, 3, &err), OW_OK);
    assert_int_equal(items[0].decision, OW_DECISION_REPLAY);
    assert_int_equal(items[0].replayed, 1);
    assert_int_equal(items[0].body.len, a.item.body.len);
    assert_memory_equal(items[0].body.data, a.item.body.data, a.item.body.len);
    assert_int_equal(items[1].decision, OW_DECISION_REPLAY);
    assert_memory_equal(items[1].body.data, b.item.body.data, b.item.body.len);
    assert_int_equal(items[2].decision, OW_DECISION_KEY_REUSED);
    assert_int_equal(items[2].code, OW_CODE_IDEMPOTENCY_KEY_REUSED);
    assert_int_equal(ow_store_get_stats(s)->transactions, transactions);
    assert_int_equal(ow_store_get_stats(s)->known_keys, 3);
    assert_int_equal(mysql_rollback(other), 0);
    mysql_close(other);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE user_id = 12"), 2);
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE user_id = 12"), 2);
    for (int i = 0; i < 3; i++) {
        m[i].item = items[i];
        testmsg_free(&m[i]);
    }
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s);
}

/* Another transaction holds the key longer than the in-progress wait. */
static void test_in_progress_then_replay(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 1);
    testmsg m;
    MYSQL *other;
    ow_error err;
    int64_t t0, waited;

    (void)state;
    testmsg_make(&m, "held",
                 "{\"user_id\":10,\"orders\":[{\"external_order_no\":\"H1\",\"amount\":1}]}");
    other = hold_key(&m, "{\"held\":true}");
    t0 = ow_clock_mono_ms();
    assert_int_equal(ow_store_decide(s, &m.item, 1, &err), OW_OK);
    waited = ow_clock_mono_ms() - t0;
    assert_int_equal(m.item.decision, OW_DECISION_IN_PROGRESS);
    assert_int_equal(m.item.code, OW_CODE_REQUEST_IN_PROGRESS);
    assert_non_null(strstr(m.item.body.data, "\"retry_after_ms\":1000"));
    assert_true(waited >= 900);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 0);
    /* The holder commits: the retry replays what it stored. */
    assert_int_equal(mysql_commit(other), 0);
    mysql_close(other);
    testmsg_decide(s, &m);
    assert_int_equal(m.item.decision, OW_DECISION_REPLAY);
    assert_string_equal(m.item.body.data, "{\"held\":true}");
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 0);
    testmsg_free(&m);
    ow_store_free(&s);
}

/* The same request from two replicas while a third session holds its key
 * uncommitted: the two insert the request's orders first, so the second
 * waits on the first's order rows, not on the key. The holder rolls back,
 * the first commits, and the second finds the orders and then the key
 * taken: it replays the first's body. No deadlock. */
static void test_three_sessions_same_request(void **state)
{
    ow_store *s1 = testdb_store(&db, &ids, 10);
    ow_store *s2 = testdb_store(&db, &ids, 10);
    testmsg a, b;

    (void)state;
    testmsg_make(&a, "three",
                 "{\"user_id\":11,\"orders\":[{\"external_order_no\":\"T1\",\"amount\":1}]}");
    testmsg_make(&b, "three",
                 "{\"user_id\":11,\"orders\":[{\"external_order_no\":\"T1\",\"amount\":1}]}");
    /* The holder rolls back once one waits on the first session's key, the other on its order */
    race_two(s1, &a, s2, &b, hold_key(&a, "{}"));
    if (!((a.item.decision == OW_DECISION_CREATED && b.item.decision == OW_DECISION_REPLAY) ||
          (b.item.decision == OW_DECISION_CREATED && a.item.decision == OW_DECISION_REPLAY)))
        fail_msg("decisions %d and %d", a.item.decision, b.item.decision);
    assert_int_equal(a.item.body.len, b.item.body.len);
    assert_memory_equal(a.item.body.data, b.item.body.data, a.item.body.len);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 1);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 1);
    assert_int_equal(ow_store_get_stats(s1)->deadlocks + ow_store_get_stats(s2)->deadlocks, 0);
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s1);
    ow_store_free(&s2);
}

/* The documented InnoDB case: a first session inserts a key, two more wait
 * on it, the first rolls back, and the two waiters deadlock. Here the two
 * are requests with one key and different orders, so that both reach the
 * key. The victim's retry finds the other's record: exactly one creation,
 * and the other's key is reused. */
static void test_three_sessions_first_rolls_back(void **state)
{
    ow_store *s1 = testdb_store(&db, &ids, 10);
    ow_store *s2 = testdb_store(&db, &ids, 10);
    testmsg a, b;

    (void)state;
    testmsg_make(&a, "three",
                 "{\"user_id\":16,\"orders\":[{\"external_order_no\":\"T1\",\"amount\":1}]}");
    testmsg_make(&b, "three",
                 "{\"user_id\":16,\"orders\":[{\"external_order_no\":\"T2\",\"amount\":1}]}");
    /* The holder rolls back once both wait on the first session's key */
    race_two(s1, &a, s2, &b, hold_key(&a, "{}"));
    if (!((a.item.decision == OW_DECISION_CREATED && b.item.decision == OW_DECISION_KEY_REUSED) ||
          (b.item.decision == OW_DECISION_CREATED && a.item.decision == OW_DECISION_KEY_REUSED)))
        fail_msg("decisions %d and %d", a.item.decision, b.item.decision);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 1);
    /* Only the creator's order: the other took its own back. */
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 1);
    /* The deadlock was seen and counted (order_worker_db_deadlocks_total). */
    assert_true(ow_store_get_stats(s1)->deadlocks + ow_store_get_stats(s2)->deadlocks >= 1);
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s1);
    ow_store_free(&s2);
}

/* Kills every connection to the test database but the admin's. */
static void kill_store_connections(void)
{
    char sql[256];
    MYSQL_RES *res;
    MYSQL_ROW row;
    int killed = 0;

    snprintf(sql, sizeof(sql),
             "SELECT id FROM information_schema.processlist WHERE db='%s' AND id <> "
             "CONNECTION_ID()",
             db.database);
    assert_int_equal(mysql_query(db.admin, sql), 0);
    res = mysql_store_result(db.admin);
    while ((row = mysql_fetch_row(res)) != NULL) {
        char kill[64];

        snprintf(kill, sizeof(kill), "KILL %s", row[0]);
        if (mysql_query(db.admin, kill) == 0)
            killed++;
    }
    mysql_free_result(res);
    assert_true(killed >= 1);
}

/* The server drops the connection: the error is retriable and the next call
 * reconnects by itself. */
static void test_lost_connection(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg a, b;
    ow_error err;

    (void)state;
    testmsg_make(&a, "lost-a",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"L1\",\"amount\":1}]}");
    testmsg_make(&b, "lost-b",
                 "{\"user_id\":12,\"orders\":[{\"external_order_no\":\"L2\",\"amount\":1}]}");
    testmsg_decide(s, &a);
    kill_store_connections();
    assert_int_not_equal(ow_store_decide(s, &b.item, 1, &err), OW_OK);
    assert_int_equal(err.cls, OW_ERRCLASS_RETRIABLE);
    assert_int_equal(b.item.decision, OW_DECISION_NONE);
    assert_int_equal(ow_store_decide(s, &b.item, 1, &err), OW_OK);
    assert_int_equal(b.item.decision, OW_DECISION_CREATED);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2);
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s);
}

/* Two processes that draw the same node number in the same millisecond
 * give two requests the same id. When both carry the same key, the second
 * one's row is ignored by the unique key and the row it reads back has its
 * own id: only the database's count of inserted rows shows that the row is
 * not its own. Here two generators with a frozen clock and one node draw
 * the same ids; the second request reuses the key with other content, and
 * conflicts with the first's order, so it would write no order that could
 * give the collision away. The second store skips the read of recorded keys,
 * which would answer from the committed row before any id is
 * drawn: the collision is what happens when that row commits between the
 * read and the insert. */
static int64_t frozen_clock(void)
{
    return OW_IDGEN_EPOCH_MS + 1000;
}

static void test_same_id_same_key(void **state)
{
    ow_idgen ga, gb;
    ow_store *a, *b;
    testmsg first, second;
    char *body;

    (void)state;
    ow_idgen_init(&ga, 7, frozen_clock);
    ow_idgen_init(&gb, 7, frozen_clock);
    a = testdb_store(&db, &ga, 5);
    b = testdb_store(&db, &gb, 5);
    testmsg_make(&first, "k-same-id",
                 "{\"user_id\":21,\"orders\":[{\"external_order_no\":\"SI1\","
                 "\"amount\":\"1.00\"}]}");
    testmsg_make(&second, "k-same-id",
                 "{\"user_id\":21,\"orders\":[{\"external_order_no\":\"SI1\","
                 "\"amount\":\"2.00\"}]}");
    assert_int_equal(testmsg_decide(a, &first), OW_DECISION_CREATED);
    /* Each draws its order's id, then its request's: the second's request
     * id is the first's. */
    ow_store_test_known_read(b, 0);
    assert_int_equal(testmsg_decide(b, &second), OW_DECISION_KEY_REUSED);
    assert_int_equal(second.item.code, OW_CODE_IDEMPOTENCY_KEY_REUSED);
    assert_true(ow_store_get_stats(b)->id_collisions >= 1); /* the ids did collide */
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE user_id=21"), 1);
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE user_id=21"), 1);
    body = stored_body(21, "k-same-id");
    assert_int_equal(strlen(body), first.item.body.len);
    assert_memory_equal(body, first.item.body.data, first.item.body.len);
    free(body);
    testmsg_free(&first);
    testmsg_free(&second);
    ow_store_free(&a);
    ow_store_free(&b);
}

/* Migration 004's SQL and the worker compute one key hash: every
 * row the worker wrote carries the value the migration would give it. */
static void test_key_hash_matches_sql(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    testmsg a, b;

    (void)state;
    testmsg_make(&a, "k-hash-1",
                 "{\"user_id\":31,\"orders\":[{\"external_order_no\":\"H1\","
                 "\"amount\":\"1.00\"}]}");
    testmsg_make(&b, "k:hash\\2",
                 "{\"user_id\":3,\"orders\":[{\"external_order_no\":\"H2\","
                 "\"amount\":\"1.00\"}]}");
    assert_int_equal(testmsg_decide(s, &a), OW_DECISION_CREATED);
    assert_int_equal(testmsg_decide(s, &b), OW_DECISION_CREATED);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 2);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE key_hash = "
                           "UNHEX(LEFT(SHA2(CONCAT(user_id, ':', idempotency_key), 256), 32))"),
                     2);
    testmsg_free(&a);
    testmsg_free(&b);
    ow_store_free(&s);
}

/* Plants a row for another user and key that carries m's key hash: what a
 * 128-bit collision of SHA-256 would store. The server computes key_hash
 * (migration 004), so t's copy of it becomes a plain column whose default
 * is that hash: the worker's own insert then collides too. */
static void plant_collision(testdb *t, const testmsg *m)
{
    unsigned char h[OW_KEY_HASH_LEN];
    char hex[2 * OW_KEY_HASH_LEN + 1];
    char sql[600];

    assert_int_equal(ow_key_hash(m->req.user_id, m->item.key, m->item.key_len, h), OW_OK);
    ow_hex(h, sizeof(h), hex);
    snprintf(sql, sizeof(sql),
             "ALTER TABLE idempotency_requests MODIFY key_hash BINARY(16) NOT NULL DEFAULT "
             "X'%s'",
             hex);
    testdb_exec(t, sql);
    testdb_exec(t, "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                   "request_digest, status, response_status, response_body) VALUES (5, 99, "
                   "'other-key', UNHEX(SHA2('x', 256)), 'SUCCEEDED', 201, '{\"secret\":1}')");
}

/* A key whose hash another (user_id, key) holds is answered like a reused
 * key from the request's own fields, writes nothing and does not stall:
 * through the known-key read, and through the deciding transaction's
 * read-back when that read is off. */
static void test_key_hash_collision(void **state)
{
    const char *value = "{\"user_id\":32,\"orders\":[{\"external_order_no\":\"C1\","
                        "\"amount\":\"1.00\"}]}";

    (void)state;
    for (int known = 1; known >= 0; known--) {
        testdb c;
        ow_store *s;
        testmsg m;

        testdb_create(&c, "ow_it_collide");
        s = testdb_store(&c, &ids, 5);
        testmsg_make(&m, "k-collides", value);
        plant_collision(&c, &m);
        ow_store_test_known_read(s, known);
        assert_int_equal(testmsg_decide(s, &m), OW_DECISION_KEY_REUSED);
        assert_int_equal(m.item.code, OW_CODE_IDEMPOTENCY_KEY_REUSED);
        assert_int_equal(m.item.replayed, 0);
        assert_null(strstr(m.item.body.data, "secret"));
        assert_non_null(strstr(m.item.body.data, "k-collides"));
        assert_int_equal(ow_store_get_stats(s)->key_hash_collisions, 1);
        assert_int_equal(testdb_count(&c, "SELECT COUNT(*) FROM idempotency_requests"), 1);
        assert_int_equal(testdb_count(&c, "SELECT COUNT(*) FROM orders"), 0);
        testmsg_free(&m);
        ow_store_free(&s);
        testdb_drop(&c);
    }
}

/* --- The query service's reads ------------------------------------------ */

/* A store whose connection is set up as the query service's are. */
static ow_store *read_only_store(void)
{
    ow_store_params p = testdb_params(&db, 5);
    ow_store *s;

    p.read_only = 1;
    s = ow_store_new(&p, &ids);
    assert_non_null(s);
    return s;
}

static ow_store_test_counts counts_now(ow_store *s)
{
    ow_store_test_counts c;
    ow_error err;

    if (ow_store_test_counts_read(s, &c, &err) != OW_OK)
        fail_msg("read session counters: %s", err.msg);
    return c;
}

/* What was sent between the reads a and b, less own (the reads' share). */
static ow_store_test_counts counts_between(const ow_store_test_counts *a,
                                           const ow_store_test_counts *b,
                                           const ow_store_test_counts *own)
{
    ow_store_test_counts d;

    d.questions = b->questions - a->questions - own->questions;
    d.prepares = b->prepares - a->prepares - own->prepares;
    d.executes = b->executes - a->executes - own->executes;
    d.closes = b->closes - a->closes - own->closes;
    d.bytes_sent = b->bytes_sent - a->bytes_sent - own->bytes_sent;
    return d;
}

static const char *const read_value =
    "{\"user_id\":21,\"orders\":[{\"external_order_no\":\"R-1\",\"amount\":\"1.50\"},"
    "{\"external_order_no\":\"R-2\",\"amount\":2,\"quantity\":4}]}";

/* Once a connection has looked up, a lookup costs one round trip: one
 * execution of a statement prepared when the connection was first used,
 * and nothing around it (no snapshot transaction, no ROLLBACK, no prepare
 * or close). For a record with orders, a key with no record, and an order. */
static void test_lookup_one_round_trip(void **state)
{
    static const char *const what[] = {"record with orders", "missing key", "order"};
    ow_store *w = testdb_store(&db, &ids, 5);
    ow_store *s = read_only_store();
    ow_store_test_counts a, b, own, d;
    ow_record rec;
    ow_record_order o;
    ow_error err;
    testmsg m;
    int rc;

    (void)state;
    testmsg_make(&m, "rt-1", read_value);
    assert_int_equal(testmsg_decide(w, &m), OW_DECISION_CREATED);
    ow_record_init(&rec);
    assert_int_equal(ow_store_lookup(s, 21, "rt-1", 4, &rec, &err), OW_OK);
    assert_int_equal(ow_store_order_get(s, 21, "R-2", 3, &o, &err), OW_OK);
    a = counts_now(s);
    b = counts_now(s);
    memset(&own, 0, sizeof(own));
    own = counts_between(&a, &b, &own);
    for (int i = 0; i < 3; i++) {
        a = counts_now(s);
        if (i == 0)
            rc = ow_store_lookup(s, 21, "rt-1", 4, &rec, &err);
        else if (i == 1)
            rc = ow_store_lookup(s, 21, "rt-2", 4, &rec, &err);
        else
            rc = ow_store_order_get(s, 21, "R-2", 3, &o, &err);
        b = counts_now(s);
        assert_int_equal(rc, i == 1 ? OW_ENOTFOUND : OW_OK);
        d = counts_between(&a, &b, &own);
        if (d.questions != 1 || d.executes != 1 || d.prepares != 0 || d.closes != 0)
            fail_msg("%s: %lld statements (%lld executions of prepared ones), %lld prepares, "
                     "%lld closes; want 1, 1, 0, 0",
                     what[i], d.questions, d.executes, d.prepares, d.closes);
        if (i == 0) {
            assert_int_equal(rec.n_orders, 2);
            assert_memory_equal(rec.response.data, m.item.body.data, m.item.body.len);
        }
    }
    assert_string_equal(o.external_order_no, "R-2");
    assert_int_equal(o.quantity, 4);
    ow_record_cleanup(&rec);
    testmsg_free(&m);
    ow_store_free(&s);
    ow_store_free(&w);
}

/* A record with many orders and a large body: the body is read whole and
 * sent once, not once per order row, and the orders come sorted by id
 * whatever order their rows were written in. */
static void test_lookup_many_orders(void **state)
{
    enum { N = 300, BODY = 100000 };
    ow_store *s = read_only_store();
    ow_store_test_counts a, b, own, d;
    ow_record rec;
    ow_error err;
    char want[16];

    (void)state;
    testdb_exec(&db, "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                     "request_digest, status, response_status, response_body) VALUES (7, 22, "
                     "'many', UNHEX(SHA2('many', 256)), 'SUCCEEDED', 201, "
                     "CONCAT('{\"pad\":\"', REPEAT('a', 100000 - 10), '\"}'))");
    /* Written in descending id order; external_order_no M-<id>. */
    testdb_exec(&db, "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, "
                     "product_id, quantity, request_id) SELECT 1000 - seq, CONCAT('OW-', 1000 - "
                     "seq), 22, CONCAT('M-', 1000 - seq), seq / 100, NULL, seq, 7 "
                     "FROM seq_1_to_300 ORDER BY seq");
    ow_record_init(&rec);
    assert_int_equal(ow_store_lookup(s, 22, "many", 4, &rec, &err), OW_OK);
    memset(&own, 0, sizeof(own));
    a = counts_now(s);
    b = counts_now(s);
    own = counts_between(&a, &b, &own);
    a = counts_now(s);
    assert_int_equal(ow_store_lookup(s, 22, "many", 4, &rec, &err), OW_OK);
    b = counts_now(s);
    d = counts_between(&a, &b, &own);
    assert_int_equal(rec.id, 7);
    assert_int_equal(rec.response.len, BODY);
    assert_int_equal(memcmp(rec.response.data, "{\"pad\":\"aaa", 11), 0);
    assert_int_equal(memcmp(rec.response.data + BODY - 5, "aaa\"}", 5), 0);
    assert_int_equal(rec.n_orders, N);
    for (size_t i = 0; i < N; i++) {
        snprintf(want, sizeof(want), "M-%zu", 700 + i);
        assert_int_equal(rec.orders[i].id, (int64_t)(700 + i));
        assert_string_equal(rec.orders[i].external_order_no, want);
        assert_int_equal(rec.orders[i].quantity, 300 - (int64_t)i);
    }
    /* The body once and about 115 bytes per order row (300 allowed). */
    if (d.bytes_sent < BODY || d.bytes_sent > BODY + N * 300)
        fail_msg("a lookup sent %lld bytes for a body of %d bytes and %d orders", d.bytes_sent,
                 BODY, N);
    ow_record_cleanup(&rec);
    ow_store_free(&s);
}

/* The query service's connections cannot write: the server refuses it. */
static void test_read_only_refuses_writes(void **state)
{
    ow_store *s = read_only_store();
    ow_error err;
    testmsg m;

    (void)state;
    testmsg_make(&m, "ro-1", read_value);
    assert_int_not_equal(ow_store_decide(s, &m.item, 1, &err), OW_OK);
    assert_int_equal(err.cls, OW_ERRCLASS_FATAL);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 0);
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 0);
    testmsg_free(&m);
    ow_store_free(&s);
}

/* A lookup on a connection the server dropped fails as retriable (the
 * query service answers 503), and the next one connects and prepares
 * again: the statements of the old connection are not used. */
static void test_lookup_reconnects(void **state)
{
    ow_store *w = testdb_store(&db, &ids, 5);
    ow_store *s = read_only_store();
    ow_record rec;
    ow_record_order o;
    ow_error err;
    testmsg m;

    (void)state;
    testmsg_make(&m, "rc-1", read_value);
    assert_int_equal(testmsg_decide(w, &m), OW_DECISION_CREATED);
    ow_store_free(&w);
    ow_record_init(&rec);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(ow_store_lookup(s, 21, "rc-1", 4, &rec, &err), OW_OK);
        assert_int_equal(ow_store_order_get(s, 21, "R-1", 3, &o, &err), OW_OK);
        kill_store_connections();
        if (round == 0)
            assert_int_not_equal(ow_store_lookup(s, 21, "rc-1", 4, &rec, &err), OW_OK);
        else
            assert_int_not_equal(ow_store_order_get(s, 21, "R-1", 3, &o, &err), OW_OK);
        assert_int_equal(err.cls, OW_ERRCLASS_RETRIABLE);
    }
    assert_int_equal(ow_store_lookup(s, 21, "rc-1", 4, &rec, &err), OW_OK);
    assert_int_equal(rec.n_orders, 2);
    assert_memory_equal(rec.response.data, m.item.body.data, m.item.body.len);
    assert_int_equal(ow_store_order_get(s, 21, "R-1", 3, &o, &err), OW_OK);
    assert_string_equal(o.amount, "1.50");
    ow_record_cleanup(&rec);
    testmsg_free(&m);
    ow_store_free(&s);
}

/* --- The races of docs/transactions.md, set-based and as on MySQL -------- */

/* Both ways the store talks to the server: MariaDB's (INSERT ... RETURNING
 * and bulk executions) and MySQL 8's (multi-row statements, the inserted
 * orders read back by id). */
static const char *const sql_mode_name[] = {"MariaDB's statements", "MySQL's statements"};

static ow_store *mode_store(int plain, unsigned lock_wait_s)
{
    ow_store *s = testdb_store(&db, &ids, lock_wait_s);

    ow_store_test_plain_sql(s, plain);
    return s;
}

/* Two requests with their own keys name one order at the same moment, in
 * the same way (even rounds) or with another amount (odd rounds). The
 * unique key lets one create it; the other waits on it, finds it, and
 * lists it as existing (the same order id) or is a conflict that writes
 * none of its orders. */
static void test_one_order_two_requests(void **state)
{
    enum { ROUNDS = 24 };

    (void)state;
    for (int round = 0; round < ROUNDS; round++) {
        int plain = round % 4 >= 2;
        ow_store *s1 = mode_store(plain, 5), *s2 = mode_store(plain, 5);
        char ka[32], kb[32], va[256], vb[256], sql[200];
        testmsg a, b;
        long long shared;

        snprintf(ka, sizeof(ka), "oo-a-%d", round);
        snprintf(kb, sizeof(kb), "oo-b-%d", round);
        snprintf(va, sizeof(va),
                 "{\"user_id\":13,\"orders\":[{\"external_order_no\":\"OA-%d\",\"amount\":1},"
                 "{\"external_order_no\":\"OO-%d\",\"amount\":5}]}",
                 round, round);
        snprintf(vb, sizeof(vb),
                 "{\"user_id\":13,\"orders\":[{\"external_order_no\":\"OO-%d\",\"amount\":%d},"
                 "{\"external_order_no\":\"OB-%d\",\"amount\":2}]}",
                 round, round % 2 == 0 ? 5 : 6, round);
        testmsg_make(&a, ka, va);
        testmsg_make(&b, kb, vb);
        race_two(s1, &a, s2, &b, NULL);
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM orders WHERE user_id = 13 AND external_order_no = 'OO-%d'",
                 round);
        assert_int_equal(count(sql), 1);
        snprintf(sql, sizeof(sql),
                 "SELECT id FROM orders WHERE user_id = 13 AND external_order_no = 'OO-%d'", round);
        shared = count(sql);
        if (round % 2 == 0) {
            json_error_t jerr;
            json_t *ja = json_loadb(a.item.body.data, a.item.body.len, 0, &jerr);
            json_t *jb = json_loadb(b.item.body.data, b.item.body.len, 0, &jerr);
            json_t *oa = json_array_get(json_object_get(ja, "orders"), 1);
            json_t *ob = json_array_get(json_object_get(jb, "orders"), 0);

            if (a.item.decision != OW_DECISION_CREATED || b.item.decision != OW_DECISION_CREATED)
                fail_msg("%s, round %d: decisions %d and %d", sql_mode_name[plain], round,
                         a.item.decision, b.item.decision);
            /* Both name the one row; exactly one of them created it. */
            assert_int_equal(json_integer_value(json_object_get(oa, "order_id")), shared);
            assert_int_equal(json_integer_value(json_object_get(ob, "order_id")), shared);
            assert_int_equal(json_is_true(json_object_get(oa, "existing")) +
                                 json_is_true(json_object_get(ob, "existing")),
                             1);
            json_decref(ja);
            json_decref(jb);
            assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE user_id = 13"),
                             3 * (round / 2 + 1) + (round / 2) * 2);
        } else {
            testmsg *lost = a.item.decision == OW_DECISION_CONFLICT ? &a : &b;
            testmsg *won = lost == &a ? &b : &a;

            if (won->item.decision != OW_DECISION_CREATED ||
                lost->item.decision != OW_DECISION_CONFLICT)
                fail_msg("%s, round %d: decisions %d and %d", sql_mode_name[plain], round,
                         a.item.decision, b.item.decision);
            /* The conflict wrote none of its orders: its own one is not there. */
            snprintf(sql, sizeof(sql),
                     "SELECT COUNT(*) FROM orders WHERE user_id = 13 AND external_order_no = "
                     "'O%c-%d'",
                     lost == &a ? 'A' : 'B', round);
            assert_int_equal(count(sql), 0);
        }
        testmsg_free(&a);
        testmsg_free(&b);
        ow_store_free(&s1);
        ow_store_free(&s2);
    }
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE user_id = 13"),
                     2 * ROUNDS);
    assert_int_equal(count("SELECT COUNT(*) FROM orders o JOIN idempotency_requests r ON "
                           "r.id = o.request_id WHERE r.status = 'FAILED'"),
                     0);
}

/* Two processes with one node number draw the same ids in the same
 * millisecond, and the second's first order is the first's order under
 * the first's order id: the insert skips it, and its row carries the id
 * and the order the second gave it. Only the count of rows the insert
 * went in with tells the two apart. The second request names that order
 * with another amount, so it conflicts; with a third order that exists
 * with another amount, its orders are taken back, and the first's order
 * must not be among them. Both ways of talking to the server. */
static void test_same_id_other_request(void **state)
{
    (void)state;
    for (int plain = 0; plain < 2; plain++) {
        ow_idgen ga, gb;
        ow_store *a, *b, *s = mode_store(plain, 5);
        testmsg first, second, third, prior;
        char key[32], sql[200], v1[200], v2[300];
        const char *tag = plain ? "P" : "B";

        ow_idgen_init(&ga, (unsigned)(10 + 2 * plain), frozen_clock);
        ow_idgen_init(&gb, (unsigned)(10 + 2 * plain), frozen_clock);
        a = testdb_store(&db, &ga, 5);
        b = testdb_store(&db, &gb, 5);
        ow_store_test_plain_sql(a, plain);
        ow_store_test_plain_sql(b, plain);
        ow_store_test_known_read(b, 0);
        snprintf(key, sizeof(key), "k-sid-%s", tag);
        snprintf(v1, sizeof(v1),
                 "{\"user_id\":22,\"orders\":[{\"external_order_no\":\"SO1-%s\","
                 "\"amount\":\"1.00\"}]}",
                 tag);
        testmsg_make(&first, key, v1);
        assert_int_equal(testmsg_decide(a, &first), OW_DECISION_CREATED);
        snprintf(v2, sizeof(v2),
                 "{\"user_id\":22,\"orders\":[{\"external_order_no\":\"SO1-%s\","
                 "\"amount\":\"2.00\"},{\"external_order_no\":\"SO2-%s\",\"amount\":\"1.00\"}]}",
                 tag, tag);
        snprintf(key, sizeof(key), "k-sid-%s-2", tag);
        testmsg_make(&second, key, v2);
        if (testmsg_decide(b, &second) != OW_DECISION_CONFLICT)
            fail_msg("%s: the second request: decision %d, not a conflict (its order SO1 exists "
                     "with another amount)",
                     sql_mode_name[plain], second.item.decision);
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM orders WHERE user_id = 22 AND external_order_no = 'SO2-%s'",
                 tag);
        assert_int_equal(count(sql), 0);

        /* The same again on fresh ids, with a third order that exists. */
        ow_idgen_init(&ga, (unsigned)(11 + 2 * plain), frozen_clock);
        ow_idgen_init(&gb, (unsigned)(11 + 2 * plain), frozen_clock);
        snprintf(v1, sizeof(v1),
                 "{\"user_id\":22,\"orders\":[{\"external_order_no\":\"SO3-%s\","
                 "\"amount\":\"9.00\"}]}",
                 tag);
        snprintf(key, sizeof(key), "k-sid-%s-prior", tag);
        testmsg_make(&prior, key, v1);
        assert_int_equal(testmsg_decide(s, &prior), OW_DECISION_CREATED);
        snprintf(v1, sizeof(v1),
                 "{\"user_id\":22,\"orders\":[{\"external_order_no\":\"SO4-%s\","
                 "\"amount\":\"1.00\"}]}",
                 tag);
        snprintf(key, sizeof(key), "k-sid-%s-3", tag);
        testmsg_free(&first);
        testmsg_make(&first, key, v1);
        assert_int_equal(testmsg_decide(a, &first), OW_DECISION_CREATED);
        snprintf(v2, sizeof(v2),
                 "{\"user_id\":22,\"orders\":[{\"external_order_no\":\"SO4-%s\","
                 "\"amount\":\"1.00\"},{\"external_order_no\":\"SO5-%s\",\"amount\":\"1.00\"},"
                 "{\"external_order_no\":\"SO3-%s\",\"amount\":\"1.00\"}]}",
                 tag, tag, tag);
        snprintf(key, sizeof(key), "k-sid-%s-4", tag);
        testmsg_make(&third, key, v2);
        if (testmsg_decide(b, &third) != OW_DECISION_CONFLICT)
            fail_msg("%s: the third request: decision %d, not a conflict", sql_mode_name[plain],
                     third.item.decision);
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM orders WHERE user_id = 22 AND external_order_no = 'SO4-%s'",
                 tag);
        if (count(sql) != 1)
            fail_msg("%s: the first request's committed order SO4 was deleted",
                     sql_mode_name[plain]);
        /* MySQL's way finds the collisions by the count; MariaDB's RETURNING
         * never lists a row it skipped. */
        if (plain)
            assert_true(ow_store_get_stats(b)->id_collisions >= 2);
        testmsg_free(&first);
        testmsg_free(&second);
        testmsg_free(&third);
        testmsg_free(&prior);
        ow_store_free(&a);
        ow_store_free(&b);
        ow_store_free(&s);
    }
}

/* A batch of new requests costs the server one statement per step, not
 * per request or per order: the read of recorded keys, the orders, the
 * request records, the commit. As on MySQL, rows travel in statements of a
 * power of two rows (at most 256). */
static void test_batch_statements(void **state)
{
    enum { N = 64 };

    (void)state;
    for (int plain = 0; plain < 2; plain++) {
        ow_store *s = mode_store(plain, 5);
        char keys[N][32]; /* items borrow their keys */
        testmsg m[N];
        ow_store_item items[N];
        ow_store_test_counts a, b, own, d;
        ow_error err;
        /* 64 requests of 5 orders: 320 orders are 256 + 64 rows. */
        long long want = plain ? 5 : 4;

        memset(&own, 0, sizeof(own));
        for (int i = 0; i < N; i++) {
            char value[512];

            snprintf(keys[i], sizeof(keys[i]), "bs-%d-%d", plain, i);
            snprintf(value, sizeof(value),
                     "{\"user_id\":%d,\"orders\":[{\"external_order_no\":\"A\",\"amount\":1},"
                     "{\"external_order_no\":\"B\",\"amount\":2},{\"external_order_no\":\"C\","
                     "\"amount\":3},{\"external_order_no\":\"D\",\"amount\":4},"
                     "{\"external_order_no\":\"E\",\"amount\":5}]}",
                     1000 * (plain + 1) + i);
            testmsg_make(&m[i], keys[i], value);
            items[i] = m[i].item;
        }
        assert_int_equal(ow_store_connect(s, &err), OW_OK);
        a = counts_now(s);
        b = counts_now(s);
        own = counts_between(&a, &b, &own);
        a = counts_now(s);
        assert_int_equal(ow_store_decide(s, items, N, &err), OW_OK);
        b = counts_now(s);
        d = counts_between(&a, &b, &own);
        for (int i = 0; i < N; i++) {
            assert_int_equal(items[i].decision, OW_DECISION_CREATED);
            m[i].item = items[i];
            testmsg_free(&m[i]);
        }
        if (d.questions != want)
            fail_msg("%s: %d requests of 5 new orders took %lld statements, want %lld",
                     sql_mode_name[plain], N, d.questions, want);
        ow_store_free(&s);
    }
    assert_int_equal(count("SELECT COUNT(*) FROM orders"), 2 * N * 5);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests"), 2 * N);
}

/* One batch of a lane against another's in a deadlock. The thread only
 * records what happened: the test fails in the main thread. */
typedef struct {
    ow_store *store;
    ow_store_item *items;
    size_t n;
    pthread_barrier_t *start;
    int deadlocked;             /* the first call failed on 1213 */
    ow_error first, again;      /* the calls' errors (code 0: none) */
    ow_store_test_counts retry; /* what the call after the deadlock sent */
} batch_racer;

static void *race_batch(void *p)
{
    batch_racer *r = p;
    ow_store_test_counts a, b, own;

    memset(&own, 0, sizeof(own));
    pthread_barrier_wait(r->start);
    if (ow_store_decide(r->store, r->items, r->n, &r->first) == OW_OK)
        return NULL;
    if (r->first.code != 1213 || ow_store_test_counts_read(r->store, &a, &r->again) != OW_OK ||
        ow_store_test_counts_read(r->store, &b, &r->again) != OW_OK)
        return NULL;
    r->deadlocked = 1;
    own = counts_between(&a, &b, &own);
    if (ow_store_test_counts_read(r->store, &a, &r->again) != OW_OK ||
        ow_store_decide(r->store, r->items, r->n, &r->again) != OW_OK ||
        ow_store_test_counts_read(r->store, &b, &r->again) != OW_OK)
        return NULL;
    r->retry = counts_between(&a, &b, &own);
    return NULL;
}

/* The failure of a batch racer's calls, if any. */
static void check_racer(const char *name, const batch_racer *r)
{
    if (r->first.code != 0 && r->first.code != 1213)
        fail_msg("%s: first call: %d %s", name, r->first.code, r->first.msg);
    if (r->again.code != 0 || (r->first.code == 1213 && !r->deadlocked))
        fail_msg("%s: after the deadlock: %d %s", name, r->again.code, r->again.msg);
}

/* An order of user 14 inserted and left uncommitted on a connection of its
 * own, as an earlier request would have written it. */
static MYSQL *hold_order(int id, const char *ext)
{
    MYSQL *other = testdb_connect(&db);
    char sql[200];

    mysql_autocommit(other, 0);
    snprintf(sql, sizeof(sql),
             "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, quantity) "
             "VALUES (%d, 'OW-%d', 14, '%s', 1, 1)",
             id, id, ext);
    if (mysql_query(other, sql) != 0)
        fail_msg("hold order %s: %s", ext, mysql_error(other));
    return other;
}

/* Two batches of 64 requests name the same 64 orders in opposite orders.
 * Two other sessions hold DL-20 and DL-40 uncommitted, so the first batch
 * stops at DL-20 with DL-00..19 inserted and the second at DL-40 with
 * DL-63..41. The holders commit: both batches find their orders and go
 * on, the first into DL-41 and the second into DL-39, each held by the
 * other: InnoDB picks a victim (1213). The victim's next call decides its
 * items in two halves, each set-based under a savepoint, so that the
 * deadlock costs it about one more batch of statements, not one
 * transaction's worth per item; both batches end with every order once. */
static void test_deadlock_large_batch(void **state)
{
    enum { N = 64 };
    ow_store *s1 = testdb_store(&db, &ids, 10), *s2 = testdb_store(&db, &ids, 10);
    char k1[N][32], k2[N][32]; /* items borrow their keys */
    testmsg m1[N], m2[N];
    ow_store_item i1[N], i2[N];
    pthread_barrier_t start;
    pthread_t t1, t2;
    batch_racer r1, r2;
    MYSQL *h20 = hold_order(1, "DL-20"), *h40 = hold_order(2, "DL-40");
    batch_racer *victim;

    (void)state;
    for (int i = 0; i < N; i++) {
        char v1[160], v2[160];

        snprintf(k1[i], sizeof(k1[i]), "dl-a-%d", i);
        snprintf(k2[i], sizeof(k2[i]), "dl-b-%d", i);
        snprintf(v1, sizeof(v1),
                 "{\"user_id\":14,\"orders\":[{\"external_order_no\":\"DL-%02d\",\"amount\":1}]}",
                 i);
        snprintf(v2, sizeof(v2),
                 "{\"user_id\":14,\"orders\":[{\"external_order_no\":\"DL-%02d\",\"amount\":1}]}",
                 N - 1 - i);
        testmsg_make(&m1[i], k1[i], v1);
        testmsg_make(&m2[i], k2[i], v2);
        i1[i] = m1[i].item;
        i2[i] = m2[i].item;
    }
    pthread_barrier_init(&start, NULL, 2);
    memset(&r1, 0, sizeof(r1));
    memset(&r2, 0, sizeof(r2));
    r1 = (batch_racer){.store = s1, .items = i1, .n = N, .start = &start};
    r2 = (batch_racer){.store = s2, .items = i2, .n = N, .start = &start};
    pthread_create(&t1, NULL, race_batch, &r1);
    pthread_create(&t2, NULL, race_batch, &r2);
    usleep(500000); /* each batch waits on its holder */
    assert_int_equal(mysql_commit(h20), 0);
    usleep(200000); /* the first batch goes on to DL-40 and waits there too */
    assert_int_equal(mysql_commit(h40), 0);
    mysql_close(h20);
    mysql_close(h40);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_barrier_destroy(&start);
    check_racer("first batch", &r1);
    check_racer("second batch", &r2);
    assert_int_equal(r1.deadlocked + r2.deadlocked, 1);
    assert_int_equal(ow_store_get_stats(s1)->deadlocks + ow_store_get_stats(s2)->deadlocks, 1);
    victim = r1.deadlocked ? &r1 : &r2;
    /* The known keys, then per half a savepoint, the orders, the read of
     * those that exist, the records; the commit. One item at a time would
     * take more than four statements per item. */
    if (victim->retry.questions > 12)
        fail_msg("the call after the deadlock took %lld statements for %d items",
                 victim->retry.questions, N);
    print_message("deadlock in a batch of %d: the victim's next call took %lld statements\n", N,
                  victim->retry.questions);
    for (int i = 0; i < N; i++) {
        assert_int_equal(i1[i].decision, OW_DECISION_CREATED);
        assert_int_equal(i2[i].decision, OW_DECISION_CREATED);
        m1[i].item = i1[i];
        m2[i].item = i2[i];
        testmsg_free(&m1[i]);
        testmsg_free(&m2[i]);
    }
    /* Every order once: the holders' two, and one request's of each other. */
    assert_int_equal(count("SELECT COUNT(*) FROM orders WHERE user_id = 14"), N);
    assert_int_equal(count("SELECT COUNT(DISTINCT request_id) FROM orders WHERE user_id = 14"),
                     N - 2);
    assert_int_equal(count("SELECT COUNT(*) FROM idempotency_requests WHERE user_id = 14"), 2 * N);
    ow_store_free(&s1);
    ow_store_free(&s2);
}

/* A TCP relay between one store and the server. Once armed, it passes the
 * client's next COMMIT to the server, lets the server commit, and closes
 * both sides without passing the answer on: the client loses its
 * connection not knowing whether the commit happened. */
typedef struct {
    int listen_fd;
    unsigned port;
    _Atomic int armed;
    _Atomic int cut;
    _Atomic int stop;
    pthread_t thread;
} commit_cutter;

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Passes the client's whole packets on (4-byte header: length, sequence);
 * 1 when it passed an armed COMMIT, -1 when a side closed. */
static int relay_client(commit_cutter *c, int from, int to, unsigned char *buf, size_t *have)
{
    ssize_t r = recv(from, buf + *have, 65536 - *have, 0);
    size_t len;

    if (r <= 0)
        return -1;
    *have += (size_t)r;
    while (*have >= 4 && *have >= 4 + (len = buf[0] | buf[1] << 8 | buf[2] << 16)) {
        int commit = len == 7 && buf[4] == 0x03 && memcmp(buf + 5, "COMMIT", 6) == 0;

        if (write_all(to, buf, 4 + len) != 0)
            return -1;
        memmove(buf, buf + 4 + len, *have - 4 - len);
        *have -= 4 + len;
        if (commit && atomic_exchange(&c->armed, 0))
            return 1;
    }
    return *have >= 65536 ? -1 : 0;
}

static void relay(commit_cutter *c, int client, int server)
{
    static unsigned char up[65536], down[65536];
    size_t have = 0;

    for (;;) {
        struct pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
        ssize_t r;

        if (poll(p, 2, 200) < 0 || atomic_load(&c->stop))
            return;
        if (p[0].revents != 0) {
            int rc = relay_client(c, client, server, up, &have);

            if (rc != 0) {
                if (rc == 1) {
                    usleep(300000); /* the server commits; its answer stays here */
                    atomic_fetch_add(&c->cut, 1);
                }
                return;
            }
        }
        if (p[1].revents != 0) {
            r = recv(server, down, sizeof(down), 0);
            if (r <= 0 || write_all(client, down, (size_t)r) != 0)
                return;
        }
    }
}

static void *cutter_main(void *arg)
{
    commit_cutter *c = arg;

    while (!atomic_load(&c->stop)) {
        struct pollfd p = {c->listen_fd, POLLIN, 0};
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)db.port)};
        int client, server;

        if (poll(&p, 1, 200) <= 0)
            continue;
        client = accept(c->listen_fd, NULL, NULL);
        server = socket(AF_INET, SOCK_STREAM, 0);
        inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
        if (client >= 0 && server >= 0 && connect(server, (struct sockaddr *)&to, sizeof(to)) == 0)
            relay(c, client, server);
        if (client >= 0)
            close(client);
        if (server >= 0)
            close(server);
    }
    return NULL;
}

static void cutter_start(commit_cutter *c)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);

    memset(c, 0, sizeof(*c));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    c->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->listen_fd < 0 || bind(c->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(c->listen_fd, 4) != 0 || getsockname(c->listen_fd, (struct sockaddr *)&a, &len) != 0)
        fail_msg("commit cutter: cannot listen");
    c->port = ntohs(a.sin_port);
    pthread_create(&c->thread, NULL, cutter_main, c);
}

static void cutter_stop(commit_cutter *c)
{
    atomic_store(&c->stop, 1);
    pthread_join(c->thread, NULL);
    close(c->listen_fd);
}

/* The answer to a batch's COMMIT is lost after the server committed it:
 * the call fails as retriable with no decision, and the retry, on a new
 * connection, settles every item by reading its record: the stored body,
 * byte for byte, with replayed: true, and nothing written twice. */
static void test_lost_commit_answer(void **state)
{
    enum { N = 4 };

    (void)state;
    for (int plain = 0; plain < 2; plain++) {
        commit_cutter cut;
        ow_store_params p = testdb_params(&db, 5);
        ow_store *s;
        char keys[N][32]; /* items borrow their keys */
        testmsg m[N];
        ow_store_item items[N];
        ow_error err;
        char sql[160];

        cutter_start(&cut);
        p.host = "127.0.0.1";
        p.port = cut.port;
        s = ow_store_new(&p, &ids);
        assert_non_null(s);
        ow_store_test_plain_sql(s, plain);
        for (int i = 0; i < N; i++) {
            char value[200];

            snprintf(keys[i], sizeof(keys[i]), "lc-%d-%d", plain, i);
            snprintf(value, sizeof(value),
                     "{\"user_id\":15,\"orders\":[{\"external_order_no\":\"LC-%d-%d\","
                     "\"amount\":1},{\"external_order_no\":\"LD-%d-%d\",\"amount\":2}]}",
                     plain, i, plain, i);
            testmsg_make(&m[i], keys[i], value);
            items[i] = m[i].item;
        }
        atomic_store(&cut.armed, 1);
        assert_int_not_equal(ow_store_decide(s, items, N, &err), OW_OK);
        assert_int_equal(err.cls, OW_ERRCLASS_RETRIABLE);
        assert_int_equal(atomic_load(&cut.cut), 1);
        for (int i = 0; i < N; i++)
            assert_int_equal(items[i].decision, OW_DECISION_NONE);
        /* The server did commit. */
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM idempotency_requests WHERE idempotency_key LIKE 'lc-%d-%%'",
                 plain);
        assert_int_equal(count(sql), N);
        assert_int_equal(ow_store_decide(s, items, N, &err), OW_OK);
        for (int i = 0; i < N; i++) {
            char *body = stored_body(15, keys[i]);

            assert_int_equal(items[i].decision, OW_DECISION_REPLAY);
            assert_int_equal(items[i].code, OW_CODE_CREATED);
            assert_int_equal(items[i].replayed, 1);
            assert_int_equal(items[i].body.len, strlen(body));
            assert_memory_equal(items[i].body.data, body, items[i].body.len);
            free(body);
            m[i].item = items[i];
            testmsg_free(&m[i]);
        }
        assert_int_equal(count(sql), N);
        snprintf(sql, sizeof(sql),
                 "SELECT COUNT(*) FROM orders WHERE user_id = 15 AND external_order_no LIKE "
                 "'L_-%d-%%'",
                 plain);
        assert_int_equal(count(sql), 2 * N);
        ow_store_free(&s);
        cutter_stop(&cut);
    }
}

/* An account without DELETE on orders cannot take back the new orders of a
 * request that conflicts: a worker's connection refuses it at once,
 * naming the grant, instead of failing at the first conflict. */
static void test_account_without_delete(void **state)
{
    char sql[256];
    ow_store_params p = testdb_params(&db, 5);
    ow_store *s;
    ow_error err;

    (void)state;
    testdb_exec(&db, "CREATE USER IF NOT EXISTS 'ow_nodelete'@'%' IDENTIFIED BY 'nd-pw'");
    snprintf(sql, sizeof(sql), "GRANT SELECT, INSERT, UPDATE ON %s.* TO 'ow_nodelete'@'%%'",
             db.database);
    testdb_exec(&db, sql);
    p.user = "ow_nodelete";
    p.password = "nd-pw";
    p.check_server = 1;
    p.needs = (ow_server_needs){.connections = 1,
                                .max_orders = 10,
                                .lock_wait_s = 5,
                                .writes = 1,
                                .decides = 1,
                                .connections_key = "worker.lanes"};
    s = ow_store_new(&p, &ids);
    assert_non_null(s);
    assert_int_not_equal(ow_store_connect(s, &err), OW_OK);
    assert_int_equal(err.cls, OW_ERRCLASS_INVALID_INPUT);
    if (strstr(err.msg, "DELETE FROM orders") == NULL || strstr(err.msg, "worker_user.sql") == NULL)
        fail_msg("the refusal does not name the grant: %s", err.msg);
    ow_store_free(&s);
    /* With the grant, the same connection is accepted. */
    snprintf(sql, sizeof(sql), "GRANT DELETE ON %s.orders TO 'ow_nodelete'@'%%'", db.database);
    testdb_exec(&db, sql);
    s = ow_store_new(&p, &ids);
    assert_int_equal(ow_store_connect(s, &err), OW_OK);
    ow_store_free(&s);
    testdb_exec(&db, "DROP USER 'ow_nodelete'@'%'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_same_key_same_content, setup),
        cmocka_unit_test_setup(test_same_key_different_content, setup),
        cmocka_unit_test_setup(test_existing_orders, setup),
        cmocka_unit_test_setup(test_same_key_two_connections, setup),
        cmocka_unit_test_setup(test_micro_batch_mixed, setup),
        cmocka_unit_test_setup(test_micro_batch_fallback, setup),
        cmocka_unit_test_setup(test_in_progress_then_replay, setup),
        cmocka_unit_test_setup(test_three_sessions_same_request, setup),
        cmocka_unit_test_setup(test_three_sessions_first_rolls_back, setup),
        cmocka_unit_test_setup(test_lost_connection, setup),
        cmocka_unit_test_setup(test_same_id_same_key, setup),
        cmocka_unit_test_setup(test_same_id_other_request, setup),
        cmocka_unit_test_setup(test_replay_batch_reads_only, setup),
        cmocka_unit_test_setup(test_key_hash_matches_sql, setup),
        cmocka_unit_test_setup(test_key_hash_collision, setup),
        cmocka_unit_test_setup(test_lookup_one_round_trip, setup),
        cmocka_unit_test_setup(test_lookup_many_orders, setup),
        cmocka_unit_test_setup(test_read_only_refuses_writes, setup),
        cmocka_unit_test_setup(test_lookup_reconnects, setup),
        cmocka_unit_test_setup(test_one_order_two_requests, setup),
        cmocka_unit_test_setup(test_batch_statements, setup),
        cmocka_unit_test_setup(test_deadlock_large_batch, setup),
        cmocka_unit_test_setup(test_lost_commit_answer, setup),
        cmocka_unit_test_setup(test_account_without_delete, setup),
    };
    int rc;

    mysql_library_init(0, NULL, NULL);
    ow_idgen_init(&ids, 1, ow_clock_wall_ms);
    testdb_create(&db, "ow_it_store");
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    testdb_drop(&db);
    mysql_library_end();
    return rc;
}
