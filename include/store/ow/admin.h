/*
 * Operator operations on the store, used by the lookup, purge and audit
 * subcommands: read one request record, delete old request records in
 * bounded transactions, and check the invariants of contract section 6.
 *
 * Like the rest of the store, each function returns 0 or a negative OW_E*
 * code with an ow_error whose class says whether to retry (RETRIABLE) or
 * give up (FATAL), and prints nothing. Every statement is prepared; data
 * travels only in bound parameters. Idempotency keys leave these functions
 * only in the record the caller asked for (lookup); the audit's examples
 * carry masked keys.
 */
#ifndef OW_ADMIN_H
#define OW_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "ow/digest.h"
#include "ow/error.h"
#include "ow/request.h"
#include "ow/response.h"
#include "ow/store.h"
#include "ow/util.h"

/* A DATETIME(6) value as the database holds it (its session time zone). */
typedef struct {
    unsigned year, month, day, hour, minute, second;
    unsigned long microsecond;
} ow_timestamp;

#define OW_TIMESTAMP_TEXT_MAX 32
/* "2026-11-30 02:00:00.123456" into out. */
void ow_timestamp_format(const ow_timestamp *t, char out[OW_TIMESTAMP_TEXT_MAX]);

/* --- lookup -------------------------------------------------------------- */

#define OW_DECIMAL_TEXT_MAX 40

typedef struct {
    int64_t id;
    char order_no[OW_ORDER_NO_MAX + 1];
    char external_order_no[OW_EXT_NO_MAX + 1];
    size_t ext_len;
    char amount[OW_DECIMAL_TEXT_MAX]; /* as the database prints it: "19.90" */
    int64_t product_id;               /* 0 when NULL */
    int64_t quantity;
} ow_admin_order;

typedef struct {
    int64_t id;
    int64_t user_id;
    char key[OW_KEY_MAX + 1];
    size_t key_len;
    char status[16]; /* "SUCCEEDED", "FAILED", or what a non-strict server stored */
    char digest_hex[OW_DIGEST_HEX_LEN + 1]; /* empty when the stored digest is not 32 bytes */
    int64_t response_status;
    ow_timestamp created_at;
    ow_timestamp updated_at;
    ow_buf response;        /* the stored response body, byte for byte */
    ow_admin_order *orders; /* orders whose request_id is this record's id, by id */
    size_t n_orders;
} ow_admin_record;

void ow_admin_record_init(ow_admin_record *r);
void ow_admin_record_cleanup(ow_admin_record *r);

/* Reads the record of (user_id, key) and its orders in one consistent
 * snapshot. out must have been initialised (ow_admin_record_init); what it
 * held is released first. Returns 0, OW_ENOTFOUND (err untouched) when
 * there is no such record, or an error. */
int ow_admin_lookup(ow_store *s, int64_t user_id, const char *key, size_t key_len,
                    ow_admin_record *out, ow_error *err);

/* One order by its business key (user_id, external_order_no), for the
 * query service (issue 15). Returns 0, OW_ENOTFOUND (err untouched), or an
 * error. */
int ow_admin_order_get(ow_store *s, int64_t user_id, const char *ext, size_t ext_len,
                       ow_admin_order *out, ow_error *err);

/* --- purge --------------------------------------------------------------- */

#define OW_PURGE_BATCH_DEFAULT 1000
#define OW_PURGE_BATCH_MAX 100000

/* The database's NOW(6) minus older_than_s seconds: computed once, so that
 * every batch of one purge uses the same cutoff. */
int ow_admin_purge_cutoff(ow_store *s, int64_t older_than_s, ow_timestamp *cutoff, ow_error *err);
/* Number of request records created before cutoff. */
int ow_admin_purge_count(ow_store *s, const ow_timestamp *cutoff, int64_t *count, ow_error *err);

typedef struct {
    int64_t requests_selected; /* old records found; fewer than limit: none are left */
    int64_t requests_deleted;
    int64_t orders_detached; /* orders whose request_id was set to NULL */
} ow_purge_batch;

/* One chunk (below) from the oldest record on: locks up to limit
 * (1..OW_PURGE_BATCH_MAX) records created before cutoff, oldest first,
 * sets request_id = NULL on their orders (orders are kept), deletes the
 * records and commits. On error nothing was committed and out is zeroed. */
int ow_admin_purge_batch(ow_store *s, const ow_timestamp *cutoff, size_t limit, ow_purge_batch *out,
                         ow_error *err);

/* A purge walks ix_requests_created in (created_at, id) order from where
 * its last chunk ended, each chunk one READ COMMITTED transaction:
 * ow_admin_purge_lock reads the chunk's records (and, for the archive,
 * their orders) with locking reads and returns with the transaction open;
 * the caller may write the chunk to the archive while those row locks
 * keep every other transaction from deleting the records or detaching
 * their orders; then ow_admin_purge_delete detaches the orders, deletes
 * the records by primary key and commits, or ow_admin_purge_abort rolls
 * back. Only the chunk's own rows are locked (no gap locks at READ
 * COMMITTED, no foreign keys), so a second purge beside it waits for the
 * chunk and then skips the records it deleted: what one transaction reads
 * is exactly what it deletes. */
typedef struct {
    ow_timestamp created_at; /* of the last record deleted */
    int64_t id;
    int started; /* 0: from the oldest record */
} ow_purge_pos;

typedef struct {
    long long *ids; /* the chunk's request ids, oldest first */
    size_t n;
    ow_admin_record *records; /* with_records: n records, each with its orders' id and order_no */
    ow_purge_pos last;        /* position of ids[n - 1] */
} ow_purge_chunk;

void ow_purge_chunk_init(ow_purge_chunk *c);
void ow_purge_chunk_cleanup(ow_purge_chunk *c);

/* Starts the chunk's transaction and locks the next chunk of up to limit
 * (1..OW_PURGE_BATCH_MAX) records created before cutoff and after pos;
 * with_records also reads each record's columns and locks and reads its
 * orders (for the archive). c->n < limit: this is the last chunk. On 0 the
 * transaction is open (also when c->n is 0) and the caller ends it with
 * ow_admin_purge_delete or ow_admin_purge_abort; on error it was rolled
 * back. */
int ow_admin_purge_lock(ow_store *s, const ow_timestamp *cutoff, const ow_purge_pos *pos,
                        size_t limit, int with_records, ow_purge_chunk *c, ow_error *err);
/* In the transaction ow_admin_purge_lock started: request_id = NULL on the
 * chunk's orders, its records deleted, commit; then *pos = c->last. On
 * error it was rolled back: nothing was committed. */
int ow_admin_purge_delete(ow_store *s, const ow_purge_chunk *c, ow_purge_pos *pos,
                          ow_purge_batch *out, ow_error *err);
/* Rolls the chunk's transaction back (the archive could not be written). */
void ow_admin_purge_abort(ow_store *s);

/* --- audit --------------------------------------------------------------- */

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
int ow_admin_audit(ow_store *s, ow_audit_report *out, ow_error *err);

#endif
