/*
 * `purge` against a real MariaDB, as the store's functions
 * (ow/store_purge.h) and through the built binary: purges in batches with
 * orders kept, dry runs, the archive (lookup --archive, --max-rate, a purge
 * killed at random points loses no record from it), and two purges at once
 * (a chunk stays locked until it is deleted, so every archived copy holds
 * its orders).
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>
#include <jansson.h>

#include "ow/store_audit.h"
#include "ow/store_purge.h"
#include "ow/digest.h"
#include "ow/migrations.h"
#include "ow/store.h"
#include "admin_common.h"

/* --- purge ------------------------------------------------------------------- */

/* 7 requests 40 days old (9 orders), 2 of 29 days and 4 new (one of which
 * reuses an order of an old request), all for user 5: 13 requests, 14 orders. */
static void purge_fixture(ow_store *s)
{
    char key[32], value[256];

    for (int i = 0; i < 12; i++) {
        const char *second = i == 0   ? ",{\"external_order_no\":\"P-extra\",\"amount\":2}"
                             : i == 1 ? ",{\"external_order_no\":\"P-1b\",\"amount\":2}"
                                      : "";

        snprintf(key, sizeof(key), "%s-%d", i < 7 ? "old" : i < 9 ? "month" : "new", i);
        snprintf(value, sizeof(value),
                 "{\"user_id\":5,\"orders\":[{\"external_order_no\":\"P-%d\",\"amount\":1}%s]}", i,
                 second);
        record(s, key, value, OW_DECISION_CREATED);
    }
    /* A new request that reuses an order an old request created. */
    record(s, "new-reuse",
           "{\"user_id\":5,\"orders\":[{\"external_order_no\":\"P-0\",\"amount\":1}]}",
           OW_DECISION_CREATED);
    testdb_exec(&db, "UPDATE idempotency_requests SET created_at = NOW(6) - INTERVAL 40 DAY "
                     "WHERE idempotency_key LIKE 'old-%'");
    testdb_exec(&db, "UPDATE idempotency_requests SET created_at = NOW(6) - INTERVAL 29 DAY "
                     "WHERE idempotency_key LIKE 'month-%'");
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 13);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders"), 14);
}

/* What a 30-day purge must leave: the 6 recent requests, every order, and
 * request_id NULL exactly on the 9 orders of the purged requests. */
static void assert_purged(void)
{
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 6);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests "
                                "WHERE idempotency_key LIKE 'old-%'"),
                     0);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders"), 14);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL"), 9);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders o JOIN idempotency_requests r "
                                "ON r.id = o.request_id"),
                     5);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL AND "
                                "external_order_no IN ('P-0','P-1','P-1b','P-2','P-3','P-4',"
                                "'P-5','P-6','P-extra')"),
                     9);
}

static void test_purge_batches(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    ow_timestamp cutoff;
    ow_purge_batch b;
    ow_error err;
    int64_t n = 0, deleted = 0, detached = 0;
    int batches = 0;

    (void)state;
    purge_fixture(s);
    assert_int_equal(ow_store_purge_cutoff(s, 30 * 86400, &cutoff, &err), OW_OK);
    assert_int_equal(ow_store_purge_count(s, &cutoff, &n, &err), OW_OK);
    assert_int_equal(n, 7);
    do {
        assert_int_equal(ow_store_purge_batch(s, &cutoff, 3, &b, &err), OW_OK);
        assert_true(b.requests_selected <= 3);
        assert_int_equal(b.requests_deleted, b.requests_selected);
        deleted += b.requests_deleted;
        detached += b.orders_detached;
        batches++;
    } while (b.requests_selected == 3);
    assert_int_equal(batches, 3); /* 3 + 3 + 1 */
    assert_int_equal(deleted, 7);
    assert_int_equal(detached, 9);
    assert_purged();
    /* Nothing is left to purge; a bad batch size is refused. */
    assert_int_equal(ow_store_purge_batch(s, &cutoff, 3, &b, &err), OW_OK);
    assert_int_equal(b.requests_selected, 0);
    assert_int_equal(ow_store_purge_batch(s, &cutoff, 0, &b, &err), OW_EINVAL);
    assert_int_equal(ow_store_purge_batch(s, &cutoff, OW_PURGE_BATCH_MAX + 1, &b, &err), OW_EINVAL);
    ow_store_free(&s);
}

/* A batch larger than one IN list (ID_CHUNK = 256 ids) of the store. */
static void test_purge_large_batch(void **state)
{
    ow_store *s = testdb_store(&db, &ids, 5);
    ow_timestamp cutoff;
    ow_purge_batch b;
    ow_error err;

    (void)state;
    testdb_exec(&db, "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                     "request_digest, status, response_status, response_body, created_at) "
                     "SELECT seq, 9, CONCAT('bulk-', seq), UNHEX(SHA2(seq, 256)), 'SUCCEEDED', "
                     "201, '{}', NOW(6) - INTERVAL 2 HOUR FROM seq_1_to_700");
    testdb_exec(&db, "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, "
                     "quantity, request_id) SELECT seq, CONCAT('OW-T', seq), 9, CONCAT('B-', seq), "
                     "1, 1, seq FROM seq_1_to_700");
    assert_int_equal(ow_store_purge_cutoff(s, 3600, &cutoff, &err), OW_OK);
    assert_int_equal(ow_store_purge_batch(s, &cutoff, 600, &b, &err), OW_OK);
    assert_int_equal(b.requests_selected, 600);
    assert_int_equal(b.requests_deleted, 600);
    assert_int_equal(b.orders_detached, 600);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 100);
    assert_int_equal(count(&db, "SELECT MIN(id) FROM idempotency_requests"), 601);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL"), 600);
    assert_int_equal(
        count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL AND id > 600"), 0);
    ow_store_free(&s);
}

static void test_purge_cli(void **state)
{
    static const char *const dry[] = {"purge", "--older-than", "30d", "--dry-run", NULL};
    static const char *const real[] = {"purge", "--older-than", "720h", "--batch", "2", NULL};
    ow_store *s = testdb_store(&db, &ids, 5);
    testcli_result r;

    (void)state;
    purge_fixture(s);
    r = cli(&db, dry);
    if (r.status != 0)
        fail_msg("purge --dry-run: status %d: %s", r.status, r.err);
    assert_non_null(strstr(r.out, "purge: dry run: 7 request records created before "));
    testcli_result_free(&r);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 13);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL"), 0);

    r = cli(&db, real);
    if (r.status != 0)
        fail_msg("purge: status %d: %s", r.status, r.err);
    /* Progress per batch on stderr (not a TTY: one line each), summary on stdout. */
    assert_non_null(strstr(r.err, "purge: deleted 2 of ~7 records...\n"));
    assert_non_null(strstr(r.err, "purge: deleted 6 of ~7 records...\n"));
    assert_non_null(strstr(r.err, "purge: deleted 7 of ~7 records...\n"));
    assert_non_null(strstr(r.out, "purge: deleted 7 request records created before "));
    assert_non_null(strstr(r.out, "; 9 orders kept with request_id NULL\n"));
    testcli_result_free(&r);
    assert_purged();

    r = cli(&db, real);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "purge: deleted 0 request records"));
    testcli_result_free(&r);
    ow_store_free(&s);
}

/* --- purge archive --------------------------------------------------------- */

/* A fresh, empty archive directory under the build tree's temp space. */
static void archive_dir(char *dir, size_t size, const char *name)
{
    char cmd[600];

    snprintf(dir, size, "%s/ow-test-archive-%ld-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid(), name);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(mkdir(dir, 0750), 0);
}

static void archive_remove(const char *dir)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Per request id: how many times the archive in dir holds it (ids below
 * max_id), with every line checked to be a complete record. Returns the
 * number of lines; *files the number of archive files. */
static long archive_count(const char *dir, int *seen, long long max_id, int *files)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[700], line[8192];
    long lines = 0;

    assert_non_null(d);
    *files = 0;
    while ((e = readdir(d)) != NULL) {
        gzFile gz;

        if (strncmp(e->d_name, "requests-", 9) != 0)
            continue; /* ".", "..", and a leftover .tmp-* of a killed run */
        (*files)++;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        gz = gzopen(path, "rb");
        assert_non_null(gz);
        while (gzgets(gz, line, sizeof(line)) != NULL) {
            json_error_t jerr;
            json_t *j = json_loads(line, 0, &jerr);
            long long id;

            if (j == NULL)
                fail_msg("%s: a line is not JSON: %s", path, jerr.text);
            id = json_integer_value(json_object_get(j, "id"));
            assert_true(id >= 1 && id < max_id);
            assert_string_equal(json_string_value(json_object_get(j, "status")), "SUCCEEDED");
            if (json_array_size(json_object_get(j, "orders")) != 1)
                fail_msg("%s: request %lld was archived with %zu orders, not its 1", path, id,
                         json_array_size(json_object_get(j, "orders")));
            assert_non_null(json_string_value(json_object_get(j, "response_body")));
            seen[id]++;
            lines++;
            json_decref(j);
        }
        gzclose(gz);
    }
    closedir(d);
    return lines;
}

static void test_purge_archive_lookup(void **state)
{
    static const char *const again =
        "{\"user_id\":5,\"orders\":[{\"external_order_no\":\"P-3\",\"amount\":1}]}";
    ow_store *s = testdb_store(&db, &ids, 5);
    const char *found[] = {"lookup", "--archive", NULL, "--user", "5", "--key", "old-3", NULL};
    const char *missing[] = {"lookup", "--archive", NULL, "--user", "5", "--key", "new-9", NULL};
    const char *purge[] = {"purge", "--older-than", "30d", "--batch", "3", "--archive", NULL, NULL};
    char dir[512];
    ow_record before;
    ow_error err;
    testcli_result r;
    json_error_t jerr;
    json_t *j, *orders;
    int files = 0;

    (void)state;
    archive_dir(dir, sizeof(dir), "lookup");
    found[2] = missing[2] = purge[6] = dir;
    purge_fixture(s);
    ow_record_init(&before);
    assert_int_equal(ow_store_lookup(s, 5, "old-3", 5, &before, &err), OW_OK);

    /* An archive directory that is not there: refused, nothing deleted. */
    purge[6] = "/nonexistent/ow-archive";
    r = cli(&db, purge);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "--archive: cannot write archive files to /nonexistent/"));
    testcli_result_free(&r);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 13);
    purge[6] = dir;

    r = cli(&db, purge);
    if (r.status != 0)
        fail_msg("purge --archive: status %d: %s", r.status, r.err);
    testcli_result_free(&r);
    assert_purged();
    /* 7 records in chunks of 3: three files. */
    {
        DIR *d = opendir(dir);
        struct dirent *e;

        assert_non_null(d);
        while ((e = readdir(d)) != NULL)
            files += strncmp(e->d_name, "requests-", 9) == 0;
        closedir(d);
    }
    assert_int_equal(files, 3);

    r = cli(&db, found);
    if (r.status != 0)
        fail_msg("lookup --archive: status %d: %s", r.status, r.err);
    j = json_loads(r.out, 0, &jerr);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "id")), before.id);
    assert_int_equal(json_integer_value(json_object_get(j, "user_id")), 5);
    assert_string_equal(json_string_value(json_object_get(j, "idempotency_key")), "old-3");
    assert_string_equal(json_string_value(json_object_get(j, "request_digest")), before.digest_hex);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "SUCCEEDED");
    assert_int_equal(json_integer_value(json_object_get(j, "response_status")), 201);
    assert_int_equal(json_string_length(json_object_get(j, "response_body")), before.response.len);
    assert_memory_equal(json_string_value(json_object_get(j, "response_body")),
                        before.response.data, before.response.len);
    assert_int_equal(json_integer_value(json_object_get(j, "archive_copies")), 1);
    orders = json_object_get(j, "orders");
    assert_int_equal(json_array_size(orders), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(orders, 0), "id")),
                     before.orders[0].id);
    assert_string_equal(json_string_value(json_object_get(json_array_get(orders, 0), "order_no")),
                        before.orders[0].order_no);
    json_decref(j);
    testcli_result_free(&r);

    /* A record that was not purged is not in the archive. */
    r = cli(&db, missing);
    assert_int_equal(r.status, 3);
    assert_non_null(strstr(r.err, "no archived request for user 5 with key new-9"));
    testcli_result_free(&r);

    /* A retry after its record was purged is decided as new and creates
     * nothing twice: its order exists, so it is answered existing: true. */
    record(s, "old-3", again, OW_DECISION_CREATED);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders"), 14);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE external_order_no = 'P-3'"), 1);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests WHERE "
                                "idempotency_key = 'old-3' AND "
                                "LOCATE('\"existing\":true', response_body) > 0"),
                     1);
    ow_record_cleanup(&before);
    archive_remove(dir);
    ow_store_free(&s);
}

/* Writes lines (NULL-terminated) to dir/name as one gzip stream. */
static void plant(const char *dir, const char *name, const char *const *lines)
{
    char path[700];
    gzFile gz;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    gz = gzopen(path, "wb");
    assert_non_null(gz);
    for (; *lines != NULL; lines++) {
        assert_true(gzputs(gz, *lines) >= 0);
        assert_true(gzputc(gz, '\n') == '\n');
    }
    assert_int_equal(gzclose(gz), Z_OK);
}

/* One archived record of user 5 as purge writes it; orders is JSON. */
static const char *archived(char *buf, size_t size, long long id, const char *key,
                            const char *orders)
{
    snprintf(buf, size,
             "{\"id\":%lld,\"user_id\":5,\"idempotency_key\":\"%s\",\"request_digest\":\"%064d\","
             "\"status\":\"SUCCEEDED\",\"response_status\":201,\"response_body\":\"{}\","
             "\"created_at\":\"2026-01-02 00:00:00.000000\",\"orders\":%s}",
             id, key, 0, orders);
    return buf;
}

/* lookup --archive dir --user 5 --key key: the status, and the JSON
 * printed (NULL when none; the caller decrefs); the stderr in *err_out
 * when it is not NULL (the caller frees it). */
static json_t *lookup_archived(const char *dir, const char *key, int *status, char **err_out)
{
    const char *args[] = {"lookup", "--archive", dir, "--user", "5", "--key", key, NULL};
    testcli_result r = cli(&db, args);
    json_t *j = r.status == 0 ? json_loads(r.out, 0, NULL) : NULL;

    *status = r.status;
    if (err_out != NULL) {
        *err_out = r.err;
        r.err = NULL;
    }
    testcli_result_free(&r);
    return j;
}

/* Copies of one record that differ (an archive written before purge locked
 * its chunks: a record whose orders another purge detached between two
 * reads, archived with none): lookup --archive prints the copy with the
 * most orders, wherever its file sorts, and says the copies differ. */
static void test_archive_lookup_by_content(void **state)
{
    static const char *const full = "[{\"id\":11,\"order_no\":\"OW-11\"}]";
    char dir[512], a[512], b[512], want[700];
    char *err = NULL;
    json_t *j;
    int status;

    (void)state;
    archive_dir(dir, sizeof(dir), "copies");
    /* k1: the complete copy in the file whose name sorts first; k2: last. */
    plant(dir, "requests-0000000000000000001-0000000000000000001.jsonl.gz",
          (const char *const[]){archived(a, sizeof(a), 1, "k1", full),
                                archived(b, sizeof(b), 2, "k2", "[]"), NULL});
    plant(dir, "requests-0000000000000000002-0000000000000000002.jsonl.gz",
          (const char *const[]){archived(a, sizeof(a), 1, "k1", "[]"),
                                archived(b, sizeof(b), 2, "k2", full), NULL});
    for (int k = 1; k <= 2; k++) {
        j = lookup_archived(dir, k == 1 ? "k1" : "k2", &status, &err);
        if (status != 0 || j == NULL)
            fail_msg("lookup --archive k%d: status %d: %s", k, status, err);
        assert_int_equal(json_array_size(json_object_get(j, "orders")), 1);
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(json_object_get(j, "orders"), 0), "id")),
                         11);
        assert_int_equal(json_integer_value(json_object_get(j, "archive_copies")), 2);
        assert_true(json_is_true(json_object_get(j, "archive_copies_differ")));
        snprintf(want, sizeof(want),
                 "%s/requests-000000000000000000%d-000000000000000000%d.jsonl.gz", dir, k, k);
        assert_string_equal(json_string_value(json_object_get(j, "archive_file")), want);
        assert_non_null(strstr(err, "warning: the 2 archived copies of this record differ"));
        json_decref(j);
        free(err);
    }
    /* Identical copies (a chunk archived again after a crash) do not differ. */
    plant(dir, "requests-0000000000000000003-0000000000000000003.jsonl.gz",
          (const char *const[]){archived(a, sizeof(a), 3, "k3", full), NULL});
    plant(dir, "requests-0000000000000000003-0000000000000000004.jsonl.gz",
          (const char *const[]){archived(a, sizeof(a), 3, "k3", full), NULL});
    j = lookup_archived(dir, "k3", &status, &err);
    assert_int_equal(status, 0);
    assert_int_equal(json_integer_value(json_object_get(j, "archive_copies")), 2);
    assert_true(json_is_false(json_object_get(j, "archive_copies_differ")));
    assert_null(strstr(err, "differ"));
    json_decref(j);
    free(err);
    archive_remove(dir);
}

/* The key of line i of the file that is cut: varied, so that half of the
 * compressed file is well short of its end. */
static const char *cut_key(int i, char key[32])
{
    snprintf(key, 32, "cut-%d-%x", i, (unsigned)i * 2654435761u);
    return key;
}

/* A file cut short (a copy to cold storage that stopped) next to intact
 * ones: a record in an intact file is found (exit 0, the damaged file
 * named on stderr); a record that is not in the intact files is not
 * reported absent (exit 1, not 3), since the damaged file may hold it. */
static void test_archive_lookup_unreadable(void **state)
{
    static const char *const cut = "requests-0000000000000000100-0000000000000000399.jsonl.gz";
    static const char *const empty = "requests-0000000000000000400-0000000000000000400.jsonl.gz";
    static char lines[300][512];
    const char *list[301];
    char dir[512], a[512], path[700], *err = NULL;
    struct stat st;
    json_t *j;
    int status;

    (void)state;
    archive_dir(dir, sizeof(dir), "unreadable");
    plant(dir, "requests-0000000000000000001-0000000000000000001.jsonl.gz",
          (const char *const[]){archived(a, sizeof(a), 1, "intact", "[]"), NULL});
    for (int i = 0; i < 300; i++) {
        char key[32];

        list[i] = archived(lines[i], sizeof(lines[i]), 100 + i, cut_key(i, key), "[]");
    }
    list[300] = NULL;
    plant(dir, cut, list);
    snprintf(path, sizeof(path), "%s/%s", dir, cut);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size / 2), 0);

    j = lookup_archived(dir, "intact", &status, &err);
    if (status != 0 || j == NULL)
        fail_msg("lookup --archive beside a truncated file: status %d: %s", status, err);
    assert_int_equal(json_integer_value(json_object_get(j, "id")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "archive_files_unreadable")), 1);
    assert_non_null(strstr(err, "warning: skipped "));
    assert_non_null(strstr(err, cut));
    json_decref(j);
    free(err);

    /* cut-299 is past the cut; cut-0 before it, but a damaged file counts
     * for nothing; absent-key is nowhere: none of them is "not found". */
    for (int k = 0; k < 3; k++) {
        char cutk[32];
        const char *key = k == 0 ? cut_key(299, cutk) : k == 1 ? cut_key(0, cutk) : "absent-key";

        j = lookup_archived(dir, key, &status, &err);
        assert_null(j);
        if (status != 1)
            fail_msg("lookup --archive of %s: status %d, not 1: %s", key, status, err);
        assert_non_null(strstr(err, cut));
        assert_non_null(strstr(err, "could not be read"));
        assert_non_null(strstr(err, "not found is not certain"));
        free(err);
    }

    /* An empty file is no gzip stream: unreadable too. */
    assert_int_equal(unlink(path), 0);
    plant(dir, empty, (const char *const[]){NULL});
    snprintf(path, sizeof(path), "%s/%s", dir, empty);
    assert_int_equal(truncate(path, 0), 0);
    j = lookup_archived(dir, "absent-key", &status, &err);
    assert_int_equal(status, 1);
    assert_non_null(strstr(err, empty));
    free(err);

    /* Every file readable again: now absent means absent. */
    assert_int_equal(unlink(path), 0);
    j = lookup_archived(dir, "absent-key", &status, &err);
    assert_int_equal(status, 3);
    assert_non_null(strstr(err, "no archived request for user 5 with key absent-key"));
    free(err);
    archive_remove(dir);
}

/* n requests 2 hours old with one order each, ids 1..n, plus 5 new ones. */
static void purge_bulk(int n)
{
    char sql[700];

    snprintf(sql, sizeof(sql),
             "INSERT INTO idempotency_requests (id, user_id, idempotency_key, request_digest, "
             "status, response_status, response_body, created_at) SELECT seq, 9, "
             "CONCAT('bulk-', seq), UNHEX(SHA2(seq, 256)), 'SUCCEEDED', 201, "
             "CONCAT('{\"n\":', seq, '}'), NOW(6) - INTERVAL 2 HOUR + INTERVAL seq MICROSECOND "
             "FROM seq_1_to_%d",
             n);
    testdb_exec(&db, sql);
    snprintf(sql, sizeof(sql),
             "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, quantity, "
             "request_id) SELECT seq, CONCAT('OW-T', seq), 9, CONCAT('B-', seq), 1, 1, seq "
             "FROM seq_1_to_%d",
             n);
    testdb_exec(&db, sql);
    testdb_exec(&db, "INSERT INTO idempotency_requests (id, user_id, idempotency_key, "
                     "request_digest, status, response_status, response_body) SELECT "
                     "1000000 + seq, 9, CONCAT('recent-', seq), UNHEX(SHA2(seq, 256)), "
                     "'SUCCEEDED', 201, '{}' FROM seq_1_to_5");
}

/* --max-rate bounds the rate from above, so only a lower bound on the time
 * is asserted (a loaded machine only makes it slower). */
static void test_purge_max_rate(void **state)
{
    static const char *const args[] = {
        "purge",      "--older-than", "1h", "--workers-cache-ttl", "300", "--batch", "5",
        "--max-rate", "20",           NULL};
    testcli_result r;
    int64_t t0;

    (void)state;
    purge_bulk(30);
    t0 = ow_clock_mono_us();
    r = cli(&db, args);
    if (r.status != 0)
        fail_msg("purge --max-rate: status %d: %s", r.status, r.err);
    /* 30 records at 20/s: the sixth chunk waits until 1.25 s after the start. */
    assert_true(ow_clock_mono_us() - t0 >= 1200000);
    assert_non_null(strstr(r.out, "purge: deleted 30 request records"));
    testcli_result_free(&r);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 5);
}

#define KILL_POINTS 20
#define BULK 2000

/* The rule of the archive: a purge SIGKILLed at KILL_POINTS random moments
 * and then run to the end deletes every old record once, and every deleted
 * record is in the archive (duplicates allowed). Chunks of 5 records, so
 * that a run takes seconds and the kills land in every phase of a chunk in
 * proportion to its length: selecting, compressing, fsyncing the file,
 * renaming, fsyncing the directory, deleting, committing. */
static void test_purge_archive_killed(void **state)
{
    const char *args[] = {
        "purge",     "--older-than", "1h", "--workers-cache-ttl", "300", "--batch", "5",
        "--archive", NULL,           NULL};
    static int seen[BULK + 1];
    unsigned seed = (unsigned)time(NULL);
    char dir[512];
    testcli_result r;
    long lines;
    int killed = 0, files = 0, dups = 0;

    (void)state;
    archive_dir(dir, sizeof(dir), "killed");
    args[8] = dir;
    purge_bulk(BULK);
    srand(seed);
    print_message("purge kill test: seed %u, %d kill points\n", seed, KILL_POINTS);
    for (int k = 0; k < KILL_POINTS; k++) {
        int after_ms = 30 + rand() % 300;

        r = cli_for(&db, args, after_ms);
        killed += r.status == -1;
        if (r.status != -1 && r.status != 0)
            fail_msg("kill point %d: purge exited %d: %s", k, r.status, r.err);
        testcli_result_free(&r);
    }
    r = cli(&db, args);
    if (r.status != 0)
        fail_msg("the last purge: status %d: %s", r.status, r.err);
    testcli_result_free(&r);
    print_message("purge kill test: %d of %d runs were killed mid-purge\n", killed, KILL_POINTS);
    assert_true(killed > 0);
    /* Every old record is gone, the recent ones are kept, every order kept. */
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 5);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests WHERE id <= 2000"), 0);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL"), BULK);
    memset(seen, 0, sizeof(seen));
    lines = archive_count(dir, seen, BULK + 1, &files);
    for (int id = 1; id <= BULK; id++) {
        if (seen[id] == 0)
            fail_msg("request %d was deleted but is not in the archive", id);
        dups += seen[id] - 1;
    }
    print_message(
        "purge kill test: %ld archived lines in %d files for %d records (%d duplicates)\n", lines,
        files, BULK, dups);
    archive_remove(dir);
}

typedef struct {
    ow_store *s;
    ow_purge_chunk chunk;
    int rc;
    char msg[256];
    atomic_int done;
} lock_run;

static void *lock_thread(void *p)
{
    lock_run *r = p;
    ow_timestamp cutoff;
    ow_purge_pos pos = {0};
    ow_error err;

    r->rc = ow_store_purge_cutoff(r->s, 3600, &cutoff, &err);
    if (r->rc == OW_OK)
        r->rc = ow_store_purge_lock(r->s, &cutoff, &pos, 10, 1, &r->chunk, &err);
    if (r->rc != OW_OK)
        snprintf(r->msg, sizeof(r->msg), "%s", err.msg);
    atomic_store(&r->done, 1);
    return NULL;
}

/* Whether r's locking read waits: it is seen executing (within 10 s), and
 * it has not returned 300 ms later. */
static int lock_wait_seen(lock_run *r)
{
    int running = 0;

    for (int i = 0; i < 200 && !running && !atomic_load(&r->done); i++) {
        running = count(&db, "SELECT COUNT(*) FROM information_schema.processlist WHERE "
                             "db = DATABASE() AND info LIKE 'SELECT id, created_at, user_id%'") > 0;
        if (!running)
            usleep(50000);
    }
    usleep(300000);
    return running && !atomic_load(&r->done);
}

/* A chunk's records stay locked from its read to its commit: a second
 * purge that reaches them waits, and then locks the records after them
 * (those the first deleted are not in its chunk), each with its order. */
static void test_purge_lock_excludes(void **state)
{
    ow_store *a = testdb_store(&db, &ids, 5);
    lock_run b = {.s = testdb_store(&db, &ids, 5)};
    ow_purge_chunk chunk;
    ow_purge_pos pos = {0};
    ow_purge_batch out;
    ow_timestamp cutoff;
    ow_error err;
    pthread_t th;

    (void)state;
    purge_bulk(20);
    ow_purge_chunk_init(&chunk);
    ow_purge_chunk_init(&b.chunk);
    assert_int_equal(ow_store_purge_cutoff(a, 3600, &cutoff, &err), OW_OK);
    assert_int_equal(ow_store_purge_lock(a, &cutoff, &pos, 5, 1, &chunk, &err), OW_OK);
    assert_int_equal(chunk.n, 5);
    assert_int_equal(chunk.ids[0], 1);
    assert_int_equal(pthread_create(&th, NULL, lock_thread, &b), 0);
    if (!lock_wait_seen(&b)) {
        pthread_join(th, NULL);
        ow_store_purge_abort(a);
        fail_msg("the second purge's read did not wait for the first one's locked chunk: it "
                 "returned %d (%s) with %zu records, the first %lld",
                 b.rc, b.msg, b.chunk.n, b.chunk.n > 0 ? b.chunk.ids[0] : 0LL);
    }
    assert_int_equal(ow_store_purge_delete(a, &chunk, &pos, &out, &err), OW_OK);
    assert_int_equal(out.requests_deleted, 5);
    assert_int_equal(out.orders_detached, 5);
    pthread_join(th, NULL);
    if (b.rc != OW_OK)
        fail_msg("the second purge's lock: %s", b.msg);
    /* Committed before the checks, so that a failing one leaves no lock
     * behind for the next test. */
    pos = (ow_purge_pos){0};
    assert_int_equal(ow_store_purge_delete(b.s, &b.chunk, &pos, &out, &err), OW_OK);
    assert_int_equal(b.chunk.n, 10);
    for (size_t i = 0; i < b.chunk.n; i++) {
        assert_int_equal(b.chunk.ids[i], (long long)i + 6);
        assert_int_equal(b.chunk.records[i].n_orders, 1);
        assert_int_equal(b.chunk.records[i].orders[0].id, (long long)i + 6);
    }
    assert_int_equal(out.requests_deleted, 10);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 10);
    assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL"), 15);
    ow_purge_chunk_cleanup(&chunk);
    ow_purge_chunk_cleanup(&b.chunk);
    ow_store_free(&b.s);
    ow_store_free(&a);
}

typedef struct {
    const char *const *args;
    int delay_ms; /* before it starts */
    testcli_result r;
} purge_thread_run;

static void *purge_thread(void *p)
{
    purge_thread_run *run = p;

    usleep((useconds_t)run->delay_ms * 1000);
    run->r = cli(&db, run->args);
    return NULL;
}

#define CONCURRENT_ROUNDS 3
#define CONCURRENT_BULK 4000

/* Two purges at once on one archive directory (an hourly purge that
 * overruns into the next), one chunk of a record at a time and one chunk
 * of everything, the second started 0, 150 and 300 ms after the first:
 * both succeed, every old record is deleted and every order detached, and
 * every archived copy of every record carries its order. */
static void test_purge_archive_concurrent(void **state)
{
    const char *small[] = {
        "purge",     "--older-than", "1h", "--workers-cache-ttl", "300", "--batch", "1",
        "--archive", NULL,           NULL};
    const char *large[] = {
        "purge",     "--older-than", "1h", "--workers-cache-ttl", "300", "--batch", "20000",
        "--archive", NULL,           NULL};
    static int seen[CONCURRENT_BULK + 1];
    char dir[512];

    (void)state;
    for (int round = 0; round < CONCURRENT_ROUNDS; round++) {
        purge_thread_run runs[2] = {{small, 0, {0}}, {large, 150 * round, {0}}};
        pthread_t th[2];
        int files = 0, dups = 0;
        long lines;

        setup(NULL);
        archive_dir(dir, sizeof(dir), "concurrent");
        small[8] = large[8] = dir;
        purge_bulk(CONCURRENT_BULK);
        for (int k = 0; k < 2; k++)
            assert_int_equal(pthread_create(&th[k], NULL, purge_thread, &runs[k]), 0);
        for (int k = 0; k < 2; k++)
            pthread_join(th[k], NULL);
        for (int k = 0; k < 2; k++) {
            if (runs[k].r.status != 0)
                fail_msg("round %d: purge --batch %s: status %d: %s", round, runs[k].args[6],
                         runs[k].r.status, runs[k].r.err);
            testcli_result_free(&runs[k].r);
        }
        assert_int_equal(count(&db, "SELECT COUNT(*) FROM idempotency_requests"), 5);
        assert_int_equal(count(&db, "SELECT COUNT(*) FROM orders WHERE request_id IS NULL"),
                         CONCURRENT_BULK);
        memset(seen, 0, sizeof(seen));
        lines = archive_count(dir, seen, CONCURRENT_BULK + 1, &files);
        for (int id = 1; id <= CONCURRENT_BULK; id++) {
            if (seen[id] == 0)
                fail_msg("round %d: request %d was deleted but is not in the archive", round, id);
            dups += seen[id] - 1;
        }
        print_message("concurrent purges, round %d: %ld archived lines in %d files for %d "
                      "records (%d duplicates)\n",
                      round, lines, files, CONCURRENT_BULK, dups);
        archive_remove(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_purge_batches, setup),
        cmocka_unit_test_setup(test_purge_large_batch, setup),
        cmocka_unit_test_setup(test_purge_cli, setup),
        cmocka_unit_test_setup(test_purge_archive_lookup, setup),
        cmocka_unit_test(test_archive_lookup_by_content),
        cmocka_unit_test(test_archive_lookup_unreadable),
        cmocka_unit_test_setup(test_purge_max_rate, setup),
        cmocka_unit_test_setup(test_purge_archive_killed, setup),
        cmocka_unit_test_setup(test_purge_lock_excludes, setup),
        cmocka_unit_test_setup(test_purge_archive_concurrent, setup),
    };

    return admin_main("ow_it_purge", tests, sizeof(tests) / sizeof(tests[0]));
}
