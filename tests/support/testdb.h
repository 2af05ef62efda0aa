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

#endif
