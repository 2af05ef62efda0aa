/* Test support for the tests that run the built worker: the variables
 * scripts/test.sh sets, a database and the worker's topics, and the
 * environment that points a worker at them. */
#ifndef OW_TESTSTACK_H
#define OW_TESTSTACK_H

#include <sys/types.h>

#include "testdb.h"

/* A variable scripts/test.sh sets; fails the test when it is missing. */
const char *test_env(const char *name);
/* A variable's value, or def when it is not set. */
const char *test_env_or(const char *name, const char *def);

typedef struct {
    testdb db;
    char bootstrap[256];
    char topic_in[96], topic_out[96], topic_dlq[96], group[96];
    char logdir[256]; /* OW_TEST_LOG_DIR, else /tmp */
} teststack;

/* Names the topics and the group <prefix>-in-<pid>-<time> and so on, and
 * sets the log folder. Creates nothing. */
void teststack_name(teststack *s, const char *prefix);
/* teststack_name, then a fresh database (testdb_create with db_prefix) and,
 * on OW_TEST_KAFKA_BOOTSTRAP, the input and results topics with partitions
 * each and the dead-letter topic with one. */
void teststack_create(teststack *s, const char *prefix, const char *db_prefix, int partitions);

#define TESTENV_MAX 32

/* NAME=value lines for a worker's environment. */
typedef struct {
    char store[TESTENV_MAX][320];
    char *envp[TESTENV_MAX + 1]; /* NULL-terminated */
    int n;
} testenv;

/* Adds one NAME=value; the worker applies its environment in order, so a
 * later setting of a name wins. */
void testenv_add(testenv *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Starts e with the settings that connect a worker to s: broker, group,
 * topics and database, as the least-privileged worker user when the test
 * scripts created one (OW_TEST_WORKER_MYSQL_USER). */
void testenv_worker(testenv *e, const teststack *s);

/* Starts `order-worker run` (OW_TEST_WORKER_BIN) with e, appending its log
 * to log_path; fails the test when it cannot. */
pid_t teststack_spawn(const testenv *e, const char *log_path);
/* Waits up to timeout_s for s's group to commit the end of every non-empty
 * partition of the input topic (the topic has partitions); fails the test
 * naming the first partition behind, and hint, when it does not. */
void teststack_await_committed(const teststack *s, int partitions, int timeout_s, const char *hint);
/* logdir/name into out. */
void teststack_log(const teststack *s, const char *name, char *out, size_t size);
/* The whole file at path, NUL-terminated, its length in *len (len may be
 * NULL); the caller frees it. Fails the test naming path when it cannot be
 * read. */
char *teststack_read_file(const char *path, size_t *len);

#endif
