/*
 * The store's small reads, shared by lookup, purge and audit: one value of
 * one row, a read-only snapshot, and DATETIME values.
 */
#include <stddef.h>
#include <string.h>

#include "store_parts.h"
#include "store_test.h"

/* ow_timestamp is laid out as the start of MYSQL_TIME (the client library's
 * DATETIME), so a value is copied rather than rebuilt field by field. */
_Static_assert(offsetof(MYSQL_TIME, year) == offsetof(ow_timestamp, year) &&
                   offsetof(MYSQL_TIME, second) == offsetof(ow_timestamp, second) &&
                   offsetof(MYSQL_TIME, second_part) == offsetof(ow_timestamp, microsecond) &&
                   sizeof(((MYSQL_TIME *)0)->second_part) == sizeof(unsigned long),
               "ow_timestamp must match the start of MYSQL_TIME");

void ow_store_time_to(const ow_timestamp *t, MYSQL_TIME *m)
{
    memset(m, 0, sizeof(*m));
    memcpy(m, t, sizeof(*t));
    m->time_type = MYSQL_TIMESTAMP_DATETIME;
}

void ow_store_time_from(const MYSQL_TIME *m, ow_timestamp *t)
{
    memcpy(t, m, sizeof(*t));
}

/* Fetches the one row of an executed statement whose result is one column. */
int ow_store_fetch_single(ow_store *s, MYSQL_STMT *st, MYSQL_BIND *res, const char *what,
                          ow_error *err)
{
    int frc;

    if (mysql_stmt_bind_result(st, res) != 0)
        return ow_store_fail_stmt(s, st, what, err);
    frc = mysql_stmt_fetch(st);
    if (frc == 1) {
        unsigned e = mysql_stmt_errno(st);

        mysql_stmt_free_result(st);
        return ow_store_fail(s, e, what, err);
    }
    mysql_stmt_free_result(st);
    if (frc == MYSQL_NO_DATA)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%s: the query returned no row", what);
    return OW_OK;
}

/* Runs sql (parameters in params, may be NULL) and reads one integer. */
int ow_store_query_int(ow_store *s, const char *sql, ow_params *params, int64_t *v,
                       const char *what, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res;
    long long value = 0;
    ow_mybool nul = 0;
    int rc = ow_store_prepare(s, sql, &st, err);

    if (rc == OW_OK)
        rc = ow_store_execute(s, st, params, what, err);
    ow_result_int(&res, &value, &nul);
    if (rc == OW_OK)
        rc = ow_store_fetch_single(s, st, &res, what, err);
    if (st != NULL)
        mysql_stmt_close(st);
    *v = nul ? 0 : value;
    return rc;
}

/* Starts a read-only transaction that sees one consistent snapshot. The
 * caller ends it with ow_store_rollback. */
int ow_store_begin_snapshot(ow_store *s, ow_error *err)
{
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK)
        rc = ow_store_exec_static(s, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", err);
    if (rc == OW_OK)
        rc = ow_store_exec_static(s, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY", err);
    return rc;
}

static const char *const sql_session_counts =
    "SELECT CAST(SUM(IF(VARIABLE_NAME = 'QUESTIONS', VARIABLE_VALUE, 0)) AS SIGNED), "
    "CAST(SUM(IF(VARIABLE_NAME = 'COM_STMT_PREPARE', VARIABLE_VALUE, 0)) AS SIGNED), "
    "CAST(SUM(IF(VARIABLE_NAME = 'COM_STMT_EXECUTE', VARIABLE_VALUE, 0)) AS SIGNED), "
    "CAST(SUM(IF(VARIABLE_NAME = 'COM_STMT_CLOSE', VARIABLE_VALUE, 0)) AS SIGNED), "
    "CAST(SUM(IF(VARIABLE_NAME = 'BYTES_SENT', VARIABLE_VALUE, 0)) AS SIGNED) "
    "FROM information_schema.SESSION_STATUS";

int ow_store_test_counts_read(ow_store *s, ow_store_test_counts *out, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[5];
    long long *v[5] = {&out->questions, &out->prepares, &out->executes, &out->closes,
                       &out->bytes_sent};
    ow_mybool nul[5];
    int rc;

    memset(out, 0, sizeof(*out));
    if (!ow_store_connected(s))
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "session counters: not connected");
    rc = ow_store_prepare(s, sql_session_counts, &st, err);
    if (rc == OW_OK)
        rc = ow_store_execute(s, st, NULL, "read session counters", err);
    for (int i = 0; i < 5; i++)
        ow_result_int(&res[i], v[i], &nul[i]);
    if (rc == OW_OK && (mysql_stmt_bind_result(st, res) != 0 || mysql_stmt_fetch(st) != 0))
        rc = ow_store_fail_stmt(s, st, "read session counters", err);
    if (st != NULL) {
        mysql_stmt_free_result(st);
        mysql_stmt_close(st);
    }
    ow_store_end_read(s);
    return rc;
}
