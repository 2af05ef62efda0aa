/*
 * audit: the invariants of the contract, each a SELECT run in one
 * read-only REPEATABLE READ snapshot (ow/store_audit.h). The only SQL text
 * built at run time wraps a check's fixed SELECT in COUNT and LIMIT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "ow/store_audit.h"
#include "store_parts.h"

/* Each check is a SELECT with one row per finding and three columns named
 * a (BIGINT), b (bytes or NULL) and c (BIGINT), ordered for stable
 * examples. Its findings are the rows; its examples the first rows. */
typedef struct {
    const char *name;
    const char *rows;
    const char *label[3]; /* label[1] NULL: column b is not shown */
    int mask_b;           /* column b holds a key or an order number: mask it */
} audit_def;

static const audit_def audit_defs[OW_AUDIT_CHECK_COUNT] = {
    [OW_AUDIT_DUPLICATE_REQUESTS] =
        {"duplicate request keys",
         "SELECT user_id AS a, idempotency_key AS b, COUNT(*) AS c FROM idempotency_requests "
         "GROUP BY user_id, idempotency_key HAVING COUNT(*) > 1 ORDER BY a, b",
         {"user_id", "key", "records"},
         1},
    [OW_AUDIT_DUPLICATE_ORDERS] =
        {"duplicate orders",
         "SELECT user_id AS a, external_order_no AS b, COUNT(*) AS c FROM orders "
         "GROUP BY user_id, external_order_no HAVING COUNT(*) > 1 ORDER BY a, b",
         {"user_id", "external_order_no", "orders"},
         1},
    [OW_AUDIT_ORDERS_WITHOUT_SUCCESS] =
        {"orders without a SUCCEEDED request",
         "SELECT o.id AS a, r.status AS b, o.request_id AS c FROM orders o "
         "LEFT JOIN idempotency_requests r ON r.id = o.request_id "
         "WHERE o.request_id IS NOT NULL AND (r.id IS NULL OR r.status <> 'SUCCEEDED') "
         "ORDER BY a",
         {"order_id", "request_status", "request_id"},
         0},
    [OW_AUDIT_FAILED_OWNERS] =
        {"FAILED requests owning orders",
         "SELECT r.id AS a, NULL AS b, COUNT(*) AS c FROM idempotency_requests r "
         "JOIN orders o ON o.request_id = r.id WHERE r.status = 'FAILED' GROUP BY r.id "
         "ORDER BY a",
         {"request_id", NULL, "orders"},
         0},
    [OW_AUDIT_NOT_FINAL] =
        {"requests not in a final state",
         "SELECT id AS a, status AS b, response_status AS c FROM idempotency_requests "
         "WHERE status NOT IN ('SUCCEEDED', 'FAILED') "
         "OR (status = 'SUCCEEDED' AND response_status <> 201) "
         "OR (status = 'FAILED' AND response_status <> 409) "
         "OR LENGTH(response_body) = 0 ORDER BY a",
         {"request_id", "status", "response_status"},
         0},
};

/* The bytes of column b, printable: masked when they are a key, else
 * quoted with anything but printable ASCII as '?'. */
static void show_b(const audit_def *d, const char *b, size_t len, int isnull, char *out,
                   size_t outsz)
{
    size_t k = 0;

    if (isnull) {
        snprintf(out, outsz, "NULL");
        return;
    }
    if (d->mask_b) {
        ow_log_mask_key(b, len, out);
        return;
    }
    out[k++] = '"';
    for (size_t i = 0; i < len && k + 2 < outsz; i++)
        out[k++] = (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"') ? b[i] : '?';
    out[k++] = '"';
    out[k] = '\0';
}

static void format_example(const audit_def *d, long long a, const char *b, size_t blen, int bnull,
                           long long c, char out[OW_AUDIT_EXAMPLE_MAX])
{
    char shown[OW_LOG_MASK_MAX + 64];

    if (d->label[1] == NULL) {
        snprintf(out, OW_AUDIT_EXAMPLE_MAX, "%s=%lld %s=%lld", d->label[0], a, d->label[2], c);
        return;
    }
    show_b(d, b, blen, bnull, shown, sizeof(shown));
    snprintf(out, OW_AUDIT_EXAMPLE_MAX, "%s=%lld %s=%s %s=%lld", d->label[0], a, d->label[1], shown,
             d->label[2], c);
}

static int fetch_examples(ow_store *s, const audit_def *d, MYSQL_STMT *st, ow_audit_check *chk,
                          ow_error *err)
{
    MYSQL_BIND res[3];
    ow_mybool nul[3] = {0};
    long long a = 0, c = 0;
    char b[OW_KEY_MAX + 1];
    unsigned long blen = 0;
    unsigned e;
    int frc = 0;

    ow_result_int(&res[0], &a, &nul[0]);
    ow_result_bytes(&res[1], b, sizeof(b), &blen, &nul[1]);
    ow_result_int(&res[2], &c, &nul[2]);
    if (mysql_stmt_bind_result(st, res) != 0)
        return ow_store_fail_stmt(s, st, "audit examples", err);
    while (chk->n_examples < OW_AUDIT_EXAMPLES) {
        frc = mysql_stmt_fetch(st);
        if (frc != 0 && frc != MYSQL_DATA_TRUNCATED)
            break;
        format_example(d, nul[0] ? 0 : a, b, blen < sizeof(b) ? blen : sizeof(b), nul[1],
                       nul[2] ? 0 : c, chk->examples[chk->n_examples]);
        chk->n_examples++;
    }
    e = frc == 1 ? mysql_stmt_errno(st) : 0;
    mysql_stmt_free_result(st);
    if (frc == 1)
        return ow_store_fail(s, e, "audit examples", err);
    return OW_OK;
}

static int audit_examples(ow_store *s, const audit_def *d, ow_audit_check *chk, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    ow_params *p = NULL;
    ow_buf sql;
    int rc;

    ow_buf_init(&sql);
    rc = ow_buf_appends(&sql, d->rows) == OW_OK && ow_buf_appends(&sql, " LIMIT ?") == OW_OK
             ? OW_OK
             : ow_store_oom(err);
    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql.data, &st, err);
    if (rc == OW_OK && (p = ow_store_params_for(s, 1, err)) == NULL)
        rc = OW_EFATAL;
    if (rc == OW_OK) {
        ow_param_int(p, OW_AUDIT_EXAMPLES);
        rc = ow_store_execute(s, st, p, "audit examples", err);
    }
    if (rc == OW_OK)
        rc = fetch_examples(s, d, st, chk, err);
    if (st != NULL)
        mysql_stmt_close(st);
    ow_buf_cleanup(&sql);
    return rc;
}

static int audit_check(ow_store *s, const audit_def *d, ow_audit_check *chk, ow_error *err)
{
    ow_buf sql;
    int rc;

    chk->name = d->name;
    ow_buf_init(&sql);
    rc = ow_buf_appends(&sql, "SELECT COUNT(*) FROM (") == OW_OK &&
                 ow_buf_appends(&sql, d->rows) == OW_OK &&
                 ow_buf_appends(&sql, ") AS findings") == OW_OK
             ? OW_OK
             : ow_store_oom(err);
    if (rc == OW_OK)
        rc = ow_store_query_int(s, sql.data, NULL, &chk->findings, "audit count", err);
    if (rc == OW_OK && chk->findings > 0)
        rc = audit_examples(s, d, chk, err);
    ow_buf_cleanup(&sql);
    return rc;
}

int ow_store_audit(ow_store *s, ow_audit_report *out, ow_error *err)
{
    int rc;

    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < OW_AUDIT_CHECK_COUNT; i++)
        out->checks[i].name = audit_defs[i].name;
    rc = ow_store_begin_snapshot(s, err);
    if (rc == OW_OK)
        rc = ow_store_query_int(s, "SELECT COUNT(*) FROM idempotency_requests", NULL,
                                &out->requests, "count requests", err);
    if (rc == OW_OK)
        rc = ow_store_query_int(s, "SELECT COUNT(*) FROM orders", NULL, &out->orders,
                                "count orders", err);
    for (size_t i = 0; rc == OW_OK && i < OW_AUDIT_CHECK_COUNT; i++)
        rc = audit_check(s, &audit_defs[i], &out->checks[i], err);
    ow_store_rollback(s);
    return rc;
}
