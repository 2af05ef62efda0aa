/*
 * Deleting old request records in bounded transactions: the purge
 * subcommand. *
 * Like the rest of the store, each function returns 0 or a negative OW_E*
 * code with an ow_error whose class says whether to retry (RETRIABLE) or
 * give up (FATAL), and prints nothing. Every statement is prepared; data
 * travels only in bound parameters.
 */
#ifndef OW_STORE_PURGE_H
#define OW_STORE_PURGE_H

#include "ow/store_lookup.h"

#define OW_PURGE_BATCH_DEFAULT 1000
#define OW_PURGE_BATCH_MAX 100000

/* The database's NOW(6) minus older_than_s seconds: computed once, so that
 * every batch of one purge uses the same cutoff. */
int ow_store_purge_cutoff(ow_store *s, int64_t older_than_s, ow_timestamp *cutoff, ow_error *err);
/* Number of request records created before cutoff. */
int ow_store_purge_count(ow_store *s, const ow_timestamp *cutoff, int64_t *count, ow_error *err);

typedef struct {
    int64_t requests_selected; /* old records found; fewer than limit: none are left */
    int64_t requests_deleted;
    int64_t orders_detached; /* orders whose request_id was set to NULL */
} ow_purge_batch;

/* One chunk (below) from the oldest record on: locks up to limit
 * (1..OW_PURGE_BATCH_MAX) records created before cutoff, oldest first,
 * sets request_id = NULL on their orders (orders are kept), deletes the
 * records and commits. On error nothing was committed and out is zeroed. */
int ow_store_purge_batch(ow_store *s, const ow_timestamp *cutoff, size_t limit, ow_purge_batch *out,
                         ow_error *err);

/* A purge walks ix_requests_created in (created_at, id) order from where
 * its last chunk ended, each chunk one READ COMMITTED transaction:
 * ow_store_purge_lock reads the chunk's records (and, for the archive,
 * their orders) with locking reads and returns with the transaction open;
 * the caller may write the chunk to the archive while those row locks
 * keep every other transaction from deleting the records or detaching
 * their orders; then ow_store_purge_delete detaches the orders, deletes
 * the records by primary key and commits, or ow_store_purge_abort rolls
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
    ow_record *records; /* with_records: n records, each with its orders' id and order_no */
    ow_purge_pos last;  /* position of ids[n - 1] */
} ow_purge_chunk;

void ow_purge_chunk_init(ow_purge_chunk *c);
void ow_purge_chunk_cleanup(ow_purge_chunk *c);

/* Starts the chunk's transaction and locks the next chunk of up to limit
 * (1..OW_PURGE_BATCH_MAX) records created before cutoff and after pos;
 * with_records also reads each record's columns and locks and reads its
 * orders (for the archive). c->n < limit: this is the last chunk. On 0 the
 * transaction is open (also when c->n is 0) and the caller ends it with
 * ow_store_purge_delete or ow_store_purge_abort; on error it was rolled
 * back. */
int ow_store_purge_lock(ow_store *s, const ow_timestamp *cutoff, const ow_purge_pos *pos,
                        size_t limit, int with_records, ow_purge_chunk *c, ow_error *err);
/* In the transaction ow_store_purge_lock started: request_id = NULL on the
 * chunk's orders, its records deleted, commit; then *pos = c->last. On
 * error it was rolled back: nothing was committed. */
int ow_store_purge_delete(ow_store *s, const ow_purge_chunk *c, ow_purge_pos *pos,
                          ow_purge_batch *out, ow_error *err);
/* Rolls the chunk's transaction back (the archive could not be written). */
void ow_store_purge_abort(ow_store *s);

#endif
