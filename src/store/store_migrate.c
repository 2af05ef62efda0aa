/* Migrations: applies the embedded sql/ files (ow/migrations.h), each once. */
#include <string.h>

#include "ow/migrations.h"
#include "store_parts.h"

static const char *const create_migrations_table =
    "CREATE TABLE IF NOT EXISTS ow_schema_migrations ("
    " version INT NOT NULL PRIMARY KEY,"
    " name VARCHAR(200) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE = InnoDB";

/* Runs one statement of static SQL text (from the embedded migrations). */
static int run_static_prepared(ow_store *s, const char *sql, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, sql, &st, err);

    if (rc == OW_OK)
        rc = ow_store_execute(s, st, NULL, "migration statement", err);
    if (st != NULL)
        mysql_stmt_close(st);
    return rc;
}

/* Errors of an ALTER TABLE that say its change is already there. MySQL 8
 * has no DROP INDEX IF EXISTS or ADD COLUMN IF NOT EXISTS, so these make a
 * drop (migration 002) and an added column (migration 004) safe to run again after a migrate that stopped halfway or beside
 * another replica's. Each ALTER of a migration is atomic and names what it
 * adds or drops first, so "already there" means "done". A CREATE TABLE
 * with these errors still fails. */
#define OW_ER_DUP_FIELDNAME 1060
#define OW_ER_CANT_DROP_FIELD_OR_KEY 1091

static int already_done(const char *sql, int code)
{
    return strncmp(sql, "ALTER TABLE ", 12) == 0 &&
           (code == OW_ER_DUP_FIELDNAME || code == OW_ER_CANT_DROP_FIELD_OR_KEY);
}

static int run_statement(ow_store *s, const char *sql, ow_error *err)
{
    int rc = run_static_prepared(s, sql, err);

    if (rc != OW_OK && already_done(sql, err->code)) {
        ow_error_clear(err);
        return OW_OK;
    }
    return rc;
}

/* Splits text at lines that end in ';' and runs each statement. */
static int run_script(ow_store *s, const char *text, ow_error *err)
{
    ow_buf stmt;
    const char *p = text;
    int rc = OW_OK;

    ow_buf_init(&stmt);
    while (rc == OW_OK && *p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
        size_t t = n;
        const char *q = p;

        while (*q == ' ' || *q == '\t')
            q++;
        while (t > 0 && (p[t - 1] == ' ' || p[t - 1] == '\t' || p[t - 1] == '\r'))
            t--;
        if (strncmp(q, "--", 2) != 0 && t > 0) {
            if (ow_buf_append(&stmt, p, t) != OW_OK || ow_buf_appendc(&stmt, '\n') != OW_OK)
                rc = ow_store_oom(err);
            if (rc == OW_OK && p[t - 1] == ';') {
                stmt.data[stmt.len - 2] = '\0'; /* drop ";\n" */
                rc = run_statement(s, stmt.data, err);
                ow_buf_reset(&stmt);
            }
        }
        p += n;
        if (*p == '\n')
            p++;
    }
    ow_buf_cleanup(&stmt);
    return rc;
}

static int is_applied(ow_store *s, int version, int *applied, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res;
    long long count = 0;
    ow_mybool nul = 0;
    ow_params *p = NULL;
    int rc = ow_store_prepare(s, "SELECT COUNT(*) FROM ow_schema_migrations WHERE version = ?", &st,
                              err);

    if (rc != OW_OK)
        return rc;
    if ((p = ow_store_params_for(s, 1, err)) == NULL) {
        mysql_stmt_close(st);
        return OW_EFATAL;
    }
    ow_param_int(p, version);
    rc = ow_store_execute(s, st, p, "read migrations", err);
    ow_result_int(&res, &count, &nul);
    if (rc == OW_OK && (mysql_stmt_bind_result(st, &res) != 0 || mysql_stmt_fetch(st) != 0))
        rc = ow_store_fail_stmt(s, st, "read migrations", err);
    mysql_stmt_close(st);
    *applied = count > 0;
    return rc;
}

/* Records m as applied. The scripts are re-runnable, so two migrate runs
 * may both apply one; the version's primary key keeps one record and *first
 * says whether it is this run's. */
static const char *const sql_record_migration =
    "INSERT IGNORE INTO ow_schema_migrations (version, name) VALUES (?, ?)";

static int record(ow_store *s, const ow_migration *m, int *first, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    int rc = ow_store_prepare(s, sql_record_migration, &st, err);
    ow_params *p = rc == OW_OK ? ow_store_params_for(s, 2, err) : NULL;

    if (p == NULL) {
        if (st != NULL)
            mysql_stmt_close(st);
        return rc != OW_OK ? rc : OW_EFATAL;
    }
    ow_param_int(p, m->version);
    ow_param_bytes(p, m->name, strlen(m->name));
    rc = ow_store_execute(s, st, p, "record migration", err);
    *first = rc == OW_OK && mysql_stmt_affected_rows(st) == 1;
    mysql_stmt_close(st);
    if (rc == OW_OK)
        rc = ow_store_commit(s, err);
    return rc;
}

int ow_store_migrate(ow_store *s, FILE *log, int *applied, ow_error *err)
{
    int rc;

    if (!s->long_statements) {
        s->long_statements = 1;
        ow_store_disconnect(s);
    }
    rc = ow_store_connect(s, err);

    *applied = 0;
    if (rc == OW_OK)
        rc = run_static_prepared(s, create_migrations_table, err);
    for (unsigned i = 0; rc == OW_OK && i < ow_migrations_count; i++) {
        const ow_migration *m = &ow_migrations[i];
        int done = 0;

        rc = is_applied(s, m->version, &done, err);
        if (rc != OW_OK)
            break;
        if (done) {
            fprintf(log, "migrate: %s already applied\n", m->name);
            continue;
        }
        rc = run_script(s, m->sql, err);
        if (rc == OW_OK)
            rc = record(s, m, &done, err);
        if (rc == OW_OK && !done) {
            fprintf(log, "migrate: %s was applied by another run meanwhile\n", m->name);
        } else if (rc == OW_OK) {
            fprintf(log, "migrate: applied %s\n", m->name);
            (*applied)++;
        }
    }
    return rc;
}
