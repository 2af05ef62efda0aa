/*
 * Checking the invariants of the contract on a database: the audit
 * subcommand and ow-verify. *
 * Like the rest of the store, each function returns 0 or a negative OW_E*
 * code with an ow_error whose class says whether to retry (RETRIABLE) or
 * give up (FATAL), and prints nothing. Every statement is prepared; data
 * travels only in bound parameters. The examples carry masked keys.
 */
#ifndef OW_STORE_AUDIT_H
#define OW_STORE_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "ow/digest.h"
#include "ow/error.h"
#include "ow/request.h"
#include "ow/response.h"
#include "ow/store.h"
#include "ow/util.h"

typedef enum {
    OW_AUDIT_DUPLICATE_REQUESTS = 0, /* two records for one (user_id, key): I1 */
    OW_AUDIT_DUPLICATE_ORDERS,       /* two orders for one (user_id, external_order_no): I2 */
    OW_AUDIT_ORDERS_WITHOUT_SUCCESS, /* request_id set, request missing or not SUCCEEDED: I3 */
    OW_AUDIT_FAILED_OWNERS,          /* FAILED requests that own orders: I3 */
    OW_AUDIT_NOT_FINAL,              /* bad status, status/response_status mismatch, empty body */
    OW_AUDIT_CHECK_COUNT
} ow_audit_check_id;

#define OW_AUDIT_EXAMPLES 10
#define OW_AUDIT_EXAMPLE_MAX 160

typedef struct {
    const char *name; /* static text, e.g. "duplicate request keys" */
    int64_t findings;
    size_t n_examples; /* at most OW_AUDIT_EXAMPLES */
    /* "user_id=42 key=ab…#1a2b3c4d rows=2": ids, counts and masked keys only. */
    char examples[OW_AUDIT_EXAMPLES][OW_AUDIT_EXAMPLE_MAX];
} ow_audit_check;

typedef struct {
    int64_t requests; /* rows of idempotency_requests */
    int64_t orders;   /* rows of orders */
    ow_audit_check checks[OW_AUDIT_CHECK_COUNT];
} ow_audit_report;

/* Runs every check in one read-only consistent snapshot. */
int ow_store_audit(ow_store *s, ow_audit_report *out, ow_error *err);

#endif
