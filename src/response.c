#include "ow/response.h"

#include <string.h>

#include "ow/error.h"

static const struct {
    const char *name;
    int status;
} codes[OW_CODE_COUNT] = {
    [OW_CODE_CREATED] = {"CREATED", 201},
    [OW_CODE_ORDER_ALREADY_EXISTS] = {"ORDER_ALREADY_EXISTS", 409},
    [OW_CODE_IDEMPOTENCY_KEY_REUSED] = {"IDEMPOTENCY_KEY_REUSED", 409},
    [OW_CODE_REQUEST_IN_PROGRESS] = {"REQUEST_IN_PROGRESS", 409},
    [OW_CODE_INVALID_REQUEST] = {"INVALID_REQUEST", 400},
};

const char *ow_result_code_name(ow_result_code code)
{
    return code < OW_CODE_COUNT ? codes[code].name : "UNKNOWN";
}

int ow_result_code_status(ow_result_code code)
{
    return code < OW_CODE_COUNT ? codes[code].status : 500;
}

int ow_json_write_string(ow_buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    int rc = ow_buf_appendc(out, '"');

    for (size_t i = 0; rc == OW_OK && i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};

            rc = ow_buf_append(out, esc, 2);
        } else if (c < 0x20) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};

            rc = ow_buf_append(out, esc, 6);
        } else {
            rc = ow_buf_appendc(out, (char)c);
        }
    }
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '"');
    return rc;
}

/* {"status":N,"code":"X"[,"message":"..."],"user_id":U,"idempotency_key":"K","request_digest":"D" */
static int write_head(ow_buf *out, ow_result_code code, const char *message,
                      const ow_response_ctx *ctx)
{
    int rc =
        ow_buf_appendf(out, "{\"status\":%d,\"code\":\"%s\"", codes[code].status, codes[code].name);

    if (rc == OW_OK && message != NULL) {
        rc = ow_buf_appends(out, ",\"message\":");
        if (rc == OW_OK)
            rc = ow_json_write_string(out, message, strlen(message));
    }
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"user_id\":%lld,\"idempotency_key\":", (long long)ctx->user_id);
    if (rc == OW_OK)
        rc = ow_json_write_string(out, ctx->key, ctx->key_len);
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"request_digest\":\"%s\"", ctx->digest_hex);
    return rc;
}

static int write_order(ow_buf *out, size_t index, const ow_order_item *it, const ow_order_ref *ref)
{
    char amount[OW_AMOUNT_TEXT_MAX];
    int rc = ow_buf_appendf(out, "{\"index\":%zu,\"external_order_no\":", index);

    ow_amount_format(it->amount_cents, amount);
    if (rc == OW_OK)
        rc = ow_json_write_string(out, it->external_order_no, it->ext_len);
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"order_id\":%lld,\"order_no\":", (long long)ref->order_id);
    if (rc == OW_OK)
        rc = ow_json_write_string(out, ref->order_no, strlen(ref->order_no));
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"amount\":\"%s\",\"existing\":%s}", amount,
                            ref->existing ? "true" : "false");
    return rc;
}

int ow_response_created(const ow_response_ctx *ctx, const ow_request *req, const ow_order_ref *refs,
                        ow_buf *out)
{
    int rc = write_head(out, OW_CODE_CREATED, NULL, ctx);

    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"orders\":[");
    for (size_t i = 0; rc == OW_OK && i < req->n_orders; i++) {
        if (i > 0)
            rc = ow_buf_appendc(out, ',');
        if (rc == OW_OK)
            rc = write_order(out, i, &req->orders[i], &refs[i]);
    }
    if (rc == OW_OK)
        rc = ow_buf_appends(out, "]}");
    return rc;
}

static int write_fields(ow_buf *out, unsigned fields)
{
    static const struct {
        unsigned bit;
        const char *name;
    } names[] = {{OW_DIFF_AMOUNT, "amount"},
                 {OW_DIFF_PRODUCT_ID, "product_id"},
                 {OW_DIFF_QUANTITY, "quantity"}};
    int rc = ow_buf_appendc(out, '[');
    int first = 1;

    for (size_t i = 0; rc == OW_OK && i < sizeof(names) / sizeof(names[0]); i++) {
        if ((fields & names[i].bit) == 0)
            continue;
        rc = ow_buf_appendf(out, "%s\"%s\"", first ? "" : ",", names[i].name);
        first = 0;
    }
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, ']');
    return rc;
}

int ow_response_order_conflict(const ow_response_ctx *ctx, const ow_request *req,
                               const ow_conflict *conflicts, size_t n, ow_buf *out)
{
    int rc = write_head(out, OW_CODE_ORDER_ALREADY_EXISTS,
                        "orders with these external_order_no already exist with different "
                        "details; no order of this batch was created",
                        ctx);

    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"conflicts\":[");
    for (size_t i = 0; rc == OW_OK && i < n; i++) {
        const ow_order_item *it = &req->orders[conflicts[i].index];

        rc = ow_buf_appendf(out, "%s{\"index\":%zu,\"external_order_no\":", i > 0 ? "," : "",
                            conflicts[i].index);
        if (rc == OW_OK)
            rc = ow_json_write_string(out, it->external_order_no, it->ext_len);
        if (rc == OW_OK)
            rc = ow_buf_appends(out, ",\"fields\":");
        if (rc == OW_OK)
            rc = write_fields(out, conflicts[i].fields);
        if (rc == OW_OK)
            rc = ow_buf_appendc(out, '}');
    }
    if (rc == OW_OK)
        rc = ow_buf_appends(out, "]}");
    return rc;
}

int ow_response_key_reused(const ow_response_ctx *ctx, ow_buf *out)
{
    int rc = write_head(out, OW_CODE_IDEMPOTENCY_KEY_REUSED,
                        "this idempotency key was already used for a different request; "
                        "nothing was changed",
                        ctx);

    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '}');
    return rc;
}

int ow_response_in_progress(const ow_response_ctx *ctx, int64_t retry_after_ms, ow_buf *out)
{
    int rc = write_head(out, OW_CODE_REQUEST_IN_PROGRESS,
                        "a request with this idempotency key is still being processed; "
                        "the definitive result follows",
                        ctx);

    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"retry_after_ms\":%lld}", (long long)retry_after_ms);
    return rc;
}

int ow_response_invalid(const char *key, size_t key_len, int has_user, int64_t user_id,
                        const ow_field_errors *errs, ow_buf *out)
{
    int rc = ow_buf_appendf(out, "{\"status\":400,\"code\":\"INVALID_REQUEST\",\"message\":"
                                 "\"the message is not a valid order batch; see errors\"");

    if (rc == OW_OK && has_user)
        rc = ow_buf_appendf(out, ",\"user_id\":%lld", (long long)user_id);
    if (rc == OW_OK && key != NULL) {
        rc = ow_buf_appends(out, ",\"idempotency_key\":");
        if (rc == OW_OK)
            rc = ow_json_write_string(out, key, key_len);
    }
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"errors\":[");
    for (size_t i = 0; rc == OW_OK && i < errs->count; i++) {
        const ow_field_error *e = &errs->items[i];

        rc = ow_buf_appends(out, i > 0 ? ",{\"field\":" : "{\"field\":");
        if (rc == OW_OK)
            rc = ow_json_write_string(out, e->field, strlen(e->field));
        if (rc == OW_OK)
            rc = ow_buf_appends(out, ",\"message\":");
        if (rc == OW_OK)
            rc = ow_json_write_string(out, e->message, strlen(e->message));
        if (rc == OW_OK)
            rc = ow_buf_appendc(out, '}');
    }
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, ']');
    if (rc == OW_OK && errs->omitted > 0)
        rc = ow_buf_appendf(out, ",\"errors_omitted\":%zu", errs->omitted);
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '}');
    return rc;
}
