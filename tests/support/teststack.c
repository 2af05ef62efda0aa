#include "teststack.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kit.h"

const char *test_env(const char *name)
{
    const char *v = getenv(name);

    if (v == NULL || *v == '\0')
        fail_msg("%s is not set: run the tests through scripts/test.sh", name);
    return v;
}

const char *test_env_or(const char *name, const char *def)
{
    const char *v = getenv(name);

    return v != NULL ? v : def;
}

void teststack_name(teststack *s, const char *prefix)
{
    char sfx[48];

    snprintf(sfx, sizeof(sfx), "%d-%ld", (int)getpid(), (long)time(NULL));
    snprintf(s->topic_in, sizeof(s->topic_in), "%s-in-%s", prefix, sfx);
    snprintf(s->topic_out, sizeof(s->topic_out), "%s-out-%s", prefix, sfx);
    snprintf(s->topic_dlq, sizeof(s->topic_dlq), "%s-dlq-%s", prefix, sfx);
    snprintf(s->group, sizeof(s->group), "%s-group-%s", prefix, sfx);
    snprintf(s->logdir, sizeof(s->logdir), "%s", test_env_or("OW_TEST_LOG_DIR", "/tmp"));
}

void teststack_create(teststack *s, const char *prefix, const char *db_prefix, int partitions)
{
    snprintf(s->bootstrap, sizeof(s->bootstrap), "%s", test_env("OW_TEST_KAFKA_BOOTSTRAP"));
    teststack_name(s, prefix);
    testdb_create(&s->db, db_prefix);
    assert_int_equal(kit_create_topic(s->bootstrap, s->topic_in, partitions), 0);
    assert_int_equal(kit_create_topic(s->bootstrap, s->topic_out, partitions), 0);
    assert_int_equal(kit_create_topic(s->bootstrap, s->topic_dlq, 1), 0);
}

void testenv_add(testenv *e, const char *fmt, ...)
{
    va_list ap;

    if (e->n == TESTENV_MAX)
        fail_msg("testenv: more than %d settings", TESTENV_MAX);
    va_start(ap, fmt);
    vsnprintf(e->store[e->n], sizeof(e->store[e->n]), fmt, ap);
    va_end(ap);
    e->envp[e->n] = e->store[e->n];
    e->n++;
    e->envp[e->n] = NULL;
}

void testenv_worker(testenv *e, const teststack *s)
{
    e->n = 0;
    e->envp[0] = NULL;
    testenv_add(e, "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=%s", s->bootstrap);
    testenv_add(e, "ORDER_WORKER_KAFKA_GROUP_ID=%s", s->group);
    testenv_add(e, "ORDER_WORKER_TOPIC_INPUT=%s", s->topic_in);
    testenv_add(e, "ORDER_WORKER_TOPIC_RESULTS=%s", s->topic_out);
    testenv_add(e, "ORDER_WORKER_TOPIC_DLQ=%s", s->topic_dlq);
    testenv_add(e, "ORDER_WORKER_MYSQL_HOST=%s", s->db.host);
    testenv_add(e, "ORDER_WORKER_MYSQL_PORT=%u", s->db.port);
    testenv_add(e, "ORDER_WORKER_MYSQL_USER=%s",
                test_env_or("OW_TEST_WORKER_MYSQL_USER", s->db.user));
    testenv_add(e, "ORDER_WORKER_MYSQL_PASSWORD=%s",
                test_env_or("OW_TEST_WORKER_MYSQL_PASSWORD", s->db.password));
    testenv_add(e, "ORDER_WORKER_MYSQL_DATABASE=%s", s->db.database);
}

pid_t teststack_spawn(const testenv *e, const char *log_path)
{
    char *argv[] = {(char *)test_env("OW_TEST_WORKER_BIN"), "run", NULL};
    pid_t pid = kit_spawn(argv, e->envp, log_path);

    if (pid <= 0)
        fail_msg("cannot start %s (log %s)", argv[0], log_path);
    return pid;
}

void teststack_await_committed(const teststack *s, int partitions, int timeout_s, const char *hint)
{
    int64_t ends[64], committed[64];
    int behind = 1;

    assert_true(partitions <= 64);
    assert_int_equal(kit_end_offsets(s->bootstrap, s->topic_in, ends, partitions), partitions);
    for (int waited = 0; waited < timeout_s * 2 && behind; waited++) {
        behind = 0;
        assert_int_equal(kit_committed(s->bootstrap, s->group, s->topic_in, partitions, committed),
                         0);
        for (int p = 0; p < partitions; p++)
            behind |= ends[p] > 0 && committed[p] != ends[p];
        if (behind)
            usleep(500000);
    }
    for (int p = 0; p < partitions; p++)
        if (ends[p] > 0 && committed[p] != ends[p])
            fail_msg("partition %d: committed %lld, end %lld (%s)", p, (long long)committed[p],
                     (long long)ends[p], hint);
}

void teststack_log(const teststack *s, const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", s->logdir, name);
}

char *teststack_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;

    if (f == NULL)
        fail_msg("cannot read %s", path);
    for (;;) {
        if (cap - n < 65536) {
            cap = cap == 0 ? 1 << 20 : cap * 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);

        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}
