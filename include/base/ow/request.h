/*
 * An order-batch request: message bytes in, a validated value struct out.
 * Pure: no I/O, no globals. Every rule of the wire contract is checked here
 * and each violation is reported with the path of the field it concerns
 * ("orders[2].amount"), so a sender can fix its message.
 */
#ifndef OW_REQUEST_H
#define OW_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#define OW_KEY_MAX 80
#define OW_EXT_NO_MAX 64
#define OW_AMOUNT_MAX_CENTS INT64_C(999999999999) /* 9999999999.99 */
#define OW_QUANTITY_MAX INT32_MAX
#define OW_FIELD_ERRORS_MAX 32
#define OW_AMOUNT_TEXT_MAX 16 /* "9999999999.99" + NUL fits */

typedef struct {
    char external_order_no[OW_EXT_NO_MAX + 1]; /* printable ASCII, NUL-terminated */
    size_t ext_len;
    int64_t amount_cents;
    int64_t product_id; /* 0 when absent or null */
    int64_t quantity;   /* 1 when absent or null */
} ow_order_item;

typedef struct {
    int64_t user_id; /* 0 when it did not parse */
    size_t n_orders;
    ow_order_item *orders; /* owned; free with ow_request_cleanup */
} ow_request;

typedef struct {
    char field[64];    /* "key", "value", "user_id", "orders[3].quantity" */
    char message[128]; /* never echoes the offending value */
} ow_field_error;

typedef struct {
    size_t count;
    size_t omitted; /* errors found beyond OW_FIELD_ERRORS_MAX */
    ow_field_error items[OW_FIELD_ERRORS_MAX];
} ow_field_errors;

typedef struct {
    size_t max_bytes;  /* largest accepted value */
    size_t max_orders; /* largest accepted orders array */
} ow_request_limits;

void ow_field_errors_init(ow_field_errors *errs);
void ow_field_errors_add(ow_field_errors *errs, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks an idempotency key: 1..80 bytes of A-Z a-z 0-9 - _ . :
 * key may be NULL (no key). Returns 0 or OW_EINVAL with an error for "key". */
int ow_request_check_key(const void *key, size_t len, ow_field_errors *errs);

/* Parses and validates a message value. Returns 0 with *out filled, OW_EINVAL
 * with errs filled (out->user_id still set when user_id itself was valid),
 * or OW_ENOMEM. out is always safe to pass to ow_request_cleanup. */
int ow_request_parse(const void *value, size_t len, const ow_request_limits *limits,
                     ow_request *out, ow_field_errors *errs);

/* What a caller parsing one message after another keeps from one parse to
 * the next: the JSON document's memory and the array the uniqueness check
 * sorts, so that a parse allocates only the orders. Zero it (or
 * ow_request_scratch_init) before the first use; one per thread. */
struct ow_json_doc;
typedef struct {
    struct ow_json_doc *doc;
    const ow_order_item **sorted;
    size_t sorted_cap;
} ow_request_scratch;

void ow_request_scratch_init(ow_request_scratch *s);
void ow_request_scratch_cleanup(ow_request_scratch *s);
/* ow_request_parse with the memory of s. */
int ow_request_parse_with(ow_request_scratch *s, const void *value, size_t len,
                          const ow_request_limits *limits, ow_request *out, ow_field_errors *errs);

void ow_request_cleanup(ow_request *req);

/* A hash of an order's unique key (user_id, external_order_no), for the
 * in-memory sets that mirror that key (a lane's batch, the decide index). */
uint64_t ow_order_hash(int64_t user_id, const char *ext, size_t len);

/* Parses an amount: the raw lexeme of a JSON number or the bytes of a JSON
 * string, "0".."9999999999.99", at most two decimals, no sign, no exponent.
 * Returns 0 or OW_EINVAL with a reason in why (static text). */
int ow_amount_parse(const char *s, size_t len, int64_t *cents, const char **why);
/* Formats cents as "19.90" into out (OW_AMOUNT_TEXT_MAX bytes). */
void ow_amount_format(int64_t cents, char out[OW_AMOUNT_TEXT_MAX]);

#endif
