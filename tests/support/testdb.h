/* Test support: a throwaway database on the MariaDB the test scripts started. */
#ifndef OW_TESTDB_H
#define OW_TESTDB_H

#include <mysql.h>

#include "ow/store.h"

typedef struct {
    char host[128];
    unsigned port;
    char user[64];
    char password[128];
    char database[64];
    MYSQL *admin; /* autocommit connection for assertions */
} testdb;

/* Creates a fresh database named prefix_<pid> and applies the migrations.
 * Fails the test when OW_TEST_MYSQL_PORT is not set. */
void testdb_create(testdb *t, const char *prefix);
void testdb_drop(testdb *t);
ow_store_params testdb_params(const testdb *t, unsigned lock_wait_s);

/* Runs SQL on the admin connection and fails the test on error. */
void testdb_exec(testdb *t, const char *sql);
/* The first column of the first row as an integer. */
long long testdb_count(testdb *t, const char *sql);
/* A new autocommit-off connection to the test database. */
MYSQL *testdb_connect(const testdb *t);

/* A store on the test database whose in-progress wait is lock_wait_s. */
ow_store *testdb_store(const testdb *t, ow_idgen *ids, unsigned lock_wait_s);

/* A request parsed and digested as the worker does it, ready to decide. */
typedef struct {
    ow_request req;
    ow_store_item item;
} testmsg;

/* Fails the test when value is not a valid request. */
void testmsg_make(testmsg *m, const char *key, const char *value);
void testmsg_free(testmsg *m);
/* Decides m in a transaction of its own, retrying transient errors the way
 * the worker does; returns the decision. */
ow_decision testmsg_decide(ow_store *s, testmsg *m);

#endif
