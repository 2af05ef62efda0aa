#include "testdb.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ow/digest.h"

static void env_or(char *out, size_t sz, const char *name, const char *def)
{
    const char *v = getenv(name);

    snprintf(out, sz, "%s", v != NULL ? v : def);
}

MYSQL *testdb_connect(const testdb *t)
{
    MYSQL *db = mysql_init(NULL);

    if (mysql_real_connect(db, t->host, t->user, t->password, t->database[0] ? t->database : NULL,
                           t->port, NULL, 0) == NULL)
        fail_msg("cannot connect to MariaDB %s:%u: %s", t->host, t->port, mysql_error(db));
    return db;
}

void testdb_exec(testdb *t, const char *sql)
{
    if (mysql_query(t->admin, sql) != 0)
        fail_msg("%s: %s", sql, mysql_error(t->admin));
    while (mysql_more_results(t->admin) && mysql_next_result(t->admin) == 0)
        ;
}

long long testdb_count(testdb *t, const char *sql)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    long long v = -1;

    if (mysql_query(t->admin, sql) != 0)
        fail_msg("%s: %s", sql, mysql_error(t->admin));
    res = mysql_store_result(t->admin);
    if (res != NULL && (row = mysql_fetch_row(res)) != NULL && row[0] != NULL)
        v = strtoll(row[0], NULL, 10);
    mysql_free_result(res);
    return v;
}

/* Runs sql/worker_user.sql for this database, as an administrator would. */
static void grant_worker(testdb *t, const char *user, const char *password)
{
    char sql[512];
    FILE *f = fopen(OW_SOURCE_DIR "/sql/worker_user.sql", "r");
    char line[1024];
    char stmt[8192] = "";

    if (f == NULL)
        fail_msg("cannot open sql/worker_user.sql");
    snprintf(sql, sizeof(sql),
             "SET @worker_user='%s', @worker_host='%%', @worker_password='%s', "
             "@worker_database='%s'",
             user, password, t->database);
    testdb_exec(t, sql);
    while (fgets(line, sizeof(line), f) != NULL) {
        size_t n = strlen(line);

        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' '))
            line[--n] = '\0';
        if (n == 0 || strncmp(line, "--", 2) == 0)
            continue;
        strncat(stmt, line, sizeof(stmt) - strlen(stmt) - 2);
        strcat(stmt, " ");
        if (line[n - 1] == ';') {
            testdb_exec(t, stmt);
            stmt[0] = '\0';
        }
    }
    fclose(f);
}

void testdb_create(testdb *t, const char *prefix)
{
    char port[16];
    char sql[256];
    ow_store_params p;
    ow_store *s;
    ow_idgen ids;
    ow_error err;
    int applied = 0;
    FILE *devnull;

    memset(t, 0, sizeof(*t));
    env_or(port, sizeof(port), "OW_TEST_MYSQL_PORT", "");
    if (port[0] == '\0')
        fail_msg("OW_TEST_MYSQL_PORT is not set: run the integration tests through "
                 "scripts/test.sh, which starts MariaDB");
    t->port = (unsigned)strtoul(port, NULL, 10);
    env_or(t->host, sizeof(t->host), "OW_TEST_MYSQL_HOST", "127.0.0.1");
    env_or(t->user, sizeof(t->user), "OW_TEST_MYSQL_USER", "root");
    env_or(t->password, sizeof(t->password), "OW_TEST_MYSQL_PASSWORD", "");
    t->admin = testdb_connect(t);
    snprintf(t->database, sizeof(t->database), "%s_%d", prefix, (int)getpid());
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", t->database);
    testdb_exec(t, sql);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", t->database);
    testdb_exec(t, sql);
    if (mysql_select_db(t->admin, t->database) != 0)
        fail_msg("use %s: %s", t->database, mysql_error(t->admin));
    p = testdb_params(t, 5);
    ow_idgen_init(&ids, 0, ow_clock_wall_ms);
    s = ow_store_new(&p, &ids);
    devnull = fopen("/dev/null", "w");
    if (ow_store_migrate(s, devnull, &applied, &err) != OW_OK)
        fail_msg("migrate: %s", err.msg);
    fclose(devnull);
    ow_store_free(&s);
    if (getenv("OW_TEST_WORKER_MYSQL_USER") != NULL)
        grant_worker(t, getenv("OW_TEST_WORKER_MYSQL_USER"),
                     getenv("OW_TEST_WORKER_MYSQL_PASSWORD") ? getenv("OW_TEST_WORKER_MYSQL_PASSWORD") : "");
}

void testdb_drop(testdb *t)
{
    char sql[256];

    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", t->database);
    testdb_exec(t, sql);
    mysql_close(t->admin);
    t->admin = NULL;
}

ow_store_params testdb_params(const testdb *t, unsigned lock_wait_s)
{
    ow_store_params p = {t->host, t->port, t->user, t->password, t->database, 5, lock_wait_s};

    return p;
}

ow_store *testdb_store(const testdb *t, ow_idgen *ids, unsigned lock_wait_s)
{
    ow_store_params p = testdb_params(t, lock_wait_s);
    ow_store *s = ow_store_new(&p, ids);

    assert_non_null(s);
    return s;
}

void testmsg_make(testmsg *m, const char *key, const char *value)
{
    static const ow_request_limits limits = {1 << 20, 1000};
    ow_field_errors errs;

    ow_field_errors_init(&errs);
    if (ow_request_parse(value, strlen(value), &limits, &m->req, &errs) != OW_OK)
        fail_msg("bad test input %s: %s %s", value, errs.items[0].field, errs.items[0].message);
    assert_int_equal(ow_store_item_init(&m->item, &m->req, key, strlen(key)), OW_OK);
    assert_int_equal(ow_digest_compute(&m->req, m->item.digest, m->item.digest_hex), OW_OK);
}

void testmsg_free(testmsg *m)
{
    ow_store_item_cleanup(&m->item);
    ow_request_cleanup(&m->req);
}

ow_decision testmsg_decide(ow_store *s, testmsg *m)
{
    ow_error err;

    for (int attempt = 0; attempt < 20; attempt++) {
        if (ow_store_decide(s, &m->item, 1, &err) == OW_OK)
            return m->item.decision;
        if (err.cls != OW_ERRCLASS_RETRIABLE)
            fail_msg("decide: %s", err.msg);
        usleep(50000);
    }
    fail_msg("decide kept failing: %s", err.msg);
    return OW_DECISION_NONE;
}
