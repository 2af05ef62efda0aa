/*
 * Result bodies (contract section 4), built once as compact JSON with a
 * fixed field order. A recorded request's body is stored in the database
 * and every replay publishes those stored bytes unchanged, so the bytes
 * built here are the bytes every consumer sees. Pure: no I/O.
 */
#ifndef OW_RESPONSE_H
#define OW_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "ow/request.h"
#include "ow/util.h"

#define OW_ORDER_NO_MAX 24

typedef enum {
    OW_CODE_CREATED = 0,
    OW_CODE_ORDER_ALREADY_EXISTS,
    OW_CODE_IDEMPOTENCY_KEY_REUSED,
    OW_CODE_REQUEST_IN_PROGRESS,
    OW_CODE_INVALID_REQUEST,
    OW_CODE_COUNT
} ow_result_code;

/* Bits naming the fields of an existing order that differ from the request. */
enum { OW_DIFF_AMOUNT = 1, OW_DIFF_PRODUCT_ID = 2, OW_DIFF_QUANTITY = 4 };

typedef struct {
    int64_t order_id;
    char order_no[OW_ORDER_NO_MAX + 1];
    int existing; /* 1 when the order was created by an earlier request */
} ow_order_ref;

typedef struct {
    size_t index;    /* position in the request's orders array */
    unsigned fields; /* OW_DIFF_* bits, never 0 */
} ow_conflict;

/* What every body of one request shares. key must be a valid key. */
typedef struct {
    int64_t user_id;
    const char *key;
    size_t key_len;
    const char *digest_hex; /* 64 hex digits */
} ow_response_ctx;

const char *ow_result_code_name(ow_result_code code);
int ow_result_code_status(ow_result_code code);

/* Each function appends one body to out and returns 0 or OW_ENOMEM. */
int ow_response_created(const ow_response_ctx *ctx, const ow_request *req, const ow_order_ref *refs,
                        ow_buf *out);
int ow_response_order_conflict(const ow_response_ctx *ctx, const ow_request *req,
                               const ow_conflict *conflicts, size_t n, ow_buf *out);
int ow_response_key_reused(const ow_response_ctx *ctx, ow_buf *out);
int ow_response_in_progress(const ow_response_ctx *ctx, int64_t retry_after_ms, ow_buf *out);
/* key may be NULL when the message key is missing or invalid; user_id is
 * written only when has_user is non-zero. */
int ow_response_invalid(const char *key, size_t key_len, int has_user, int64_t user_id,
                        const ow_field_errors *errs, ow_buf *out);

/* The largest body any request of at most max_orders orders can get, in
 * bytes: computed by building the worst case (every order number made of
 * characters that JSON escapes, the largest ids and amounts, every field in
 * conflict) with the functions above, so it follows their format. The
 * worker refuses at start a configuration whose largest result would not
 * fit the result topic's message limit. */
int ow_response_max_len(size_t max_orders, size_t *len);

#endif
