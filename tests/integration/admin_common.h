/* What the integration tests of the operator subcommands share: a
 * database of their own on the MariaDB the test scripts started, records
 * made through the deciding transaction, and the built binary run against
 * a database (exit status and output). */
#ifndef OW_ADMIN_COMMON_H
#define OW_ADMIN_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "ow/idgen.h"
#include "ow/store.h"
#include "testcli.h"
#include "testdb.h"

/* Rows written as they are, for data a decision would never write. */
#define REQ(id, user, key, status, code, body)                                                 \
    "INSERT INTO idempotency_requests (id, user_id, idempotency_key, request_digest, status, " \
    "response_status, response_body) VALUES (" #id ", " #user ", '" key "', "                  \
    "UNHEX(SHA2('" key "', 256)), '" status "', " #code ", '" body "')"
#define ORDER(id, user, ext, request)                                                  \
    "INSERT INTO orders (id, order_no, user_id, external_order_no, amount, quantity, " \
    "request_id) VALUES (" #id ", 'OW-T" #id "', " #user ", '" ext "', 1.00, 1, " #request ")"

/* A valid request of user 42 with two orders. */
extern const char *const lookup_value;

/* The program's database (created by admin_main) and its id generator. */
extern testdb db;
extern ow_idgen ids;

/* Decides one message on s and checks its decision. */
void record(ow_store *s, const char *key, const char *value, ow_decision want);
long long count(testdb *t, const char *sql);
/* Runs the binary against database t; argv after the binary, NULL-terminated;
 * killed (SIGKILL, status -1) after timeout_ms. */
testcli_result cli_for(testdb *t, const char *const *args, int timeout_ms);
testcli_result cli(testdb *t, const char *const *args);
/* A cmocka set-up: empties the two tables. */
int setup(void **state);
/* Creates the database prefix_<pid>, runs the tests, drops it. */
int admin_main(const char *prefix, const struct CMUnitTest *tests, size_t n);

#endif
