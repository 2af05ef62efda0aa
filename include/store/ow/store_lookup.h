/*
 * Reading one request record with its orders, or one order: the lookup
 * subcommand and the query service of serve. *
 * Like the rest of the store, each function returns 0 or a negative OW_E*
 * code with an ow_error whose class says whether to retry (RETRIABLE) or
 * give up (FATAL), and prints nothing. Every statement is prepared; data
 * travels only in bound parameters. Idempotency keys leave these
 * functions only in the record the caller asked for.
 */
#ifndef OW_STORE_LOOKUP_H
#define OW_STORE_LOOKUP_H

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

#define OW_DECIMAL_TEXT_MAX 40

typedef struct {
    int64_t id;
    char order_no[OW_ORDER_NO_MAX + 1];
    char external_order_no[OW_EXT_NO_MAX + 1];
    size_t ext_len;
    char amount[OW_DECIMAL_TEXT_MAX]; /* as the database prints it: "19.90" */
    int64_t product_id;               /* 0 when NULL */
    int64_t quantity;
} ow_record_order;

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
    ow_buf response;         /* the stored response body, byte for byte */
    ow_record_order *orders; /* orders whose request_id is this record's id, by id */
    size_t n_orders;
} ow_record;

void ow_record_init(ow_record *r);
void ow_record_cleanup(ow_record *r);

/* Reads the record of (user_id, key) and its orders with one statement,
 * so in one consistent snapshot; on a read-only store (the query service)
 * that statement is the lookup's only round trip. out must have been
 * initialised (ow_record_init); what it held is released first. Returns
 * 0, OW_ENOTFOUND (err untouched) when there is no such record, or an
 * error. */
int ow_store_lookup(ow_store *s, int64_t user_id, const char *key, size_t key_len, ow_record *out,
                    ow_error *err);

/* One order by its business key (user_id, external_order_no), for the
 * query service. Returns 0, OW_ENOTFOUND (err untouched), or an
 * error. */
int ow_store_order_get(ow_store *s, int64_t user_id, const char *ext, size_t ext_len,
                       ow_record_order *out, ow_error *err);

#endif
