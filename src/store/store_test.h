/*
 * Switches of the store that only tests use: they reach behaviour that
 * production never asks for. Not part of the store's interface (ow/store.h).
 */
#ifndef OW_STORE_TEST_H
#define OW_STORE_TEST_H

#include "ow/store.h"

/* On by default: ow_store_decide answers recorded keys from one
 * non-locking read before it decides the rest. Off, every item goes
 * through the deciding transaction, which reaches the races that read
 * cannot see coming (a row committed between the read and the insert). */
void ow_store_test_known_read(ow_store *s, int enabled);

/* On: s uses neither INSERT ... RETURNING nor bulk executions, as against
 * MySQL 8 (the orders' inserts are read back by id, rows travel in
 * multi-row statements), from its next connection on. */
void ow_store_test_plain_sql(ow_store *s, int on);

/* The server's counters of s's own session (information_schema's
 * SESSION_STATUS), read by one statement on s's connection, which must be
 * open. What a call costs the server is the difference of two reads around
 * it less the difference of two reads in a row (the read's own share). */
typedef struct {
    long long questions;  /* Questions: statements, executions of prepared ones included */
    long long prepares;   /* Com_stmt_prepare */
    long long executes;   /* Com_stmt_execute */
    long long closes;     /* Com_stmt_close */
    long long bytes_sent; /* Bytes_sent: to the client */
} ow_store_test_counts;

int ow_store_test_counts_read(ow_store *s, ow_store_test_counts *out, ow_error *err);

#endif
