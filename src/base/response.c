#include "ow/response.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ow/digest.h"
#include "ow/error.h"
#include "ow/json.h"

/* Each code's name, status and, for the bodies built with write_head, its
 * message. */
static const struct {
    const char *name;
    int status;
    const char *message;
} codes[OW_CODE_COUNT] = {
    [OW_CODE_CREATED] = {"CREATED", 201, NULL},
    [OW_CODE_ORDER_ALREADY_EXISTS] = {"ORDER_ALREADY_EXISTS", 409,
                                      "orders with these external_order_no already exist with "
                                      "different details; no order of this batch was created"},
    [OW_CODE_IDEMPOTENCY_KEY_REUSED] = {"IDEMPOTENCY_KEY_REUSED", 409,
                                        "this idempotency key was already used for a different "
                                        "request; nothing was changed"},
    [OW_CODE_REQUEST_IN_PROGRESS] = {"REQUEST_IN_PROGRESS", 409,
                                     "a request with this idempotency key is still being "
                                     "processed; the definitive result follows"},
    [OW_CODE_INVALID_REQUEST] = {"INVALID_REQUEST", 400, NULL},
};

const char *ow_result_code_name(ow_result_code code)
{
    return code < OW_CODE_COUNT ? codes[code].name : "UNKNOWN";
}

int ow_result_code_status(ow_result_code code)
{
    return code < OW_CODE_COUNT ? codes[code].status : 500;
}

/* {"status":N,"code":"X"[,"message":"..."],"user_id":U,"idempotency_key":"K","request_digest":"D" */
/* name (a JSON text such as ",\"key\":") and the string s[0..len) quoted. */
static int member_string(ow_buf *out, const char *name, const char *s, size_t len)
{
    int rc = ow_buf_appends(out, name);

    return rc == OW_OK ? ow_json_write_string(out, s, len) : rc;
}

/* Appends, never formats: a body is built for every decided batch, and
 * printf's machinery cost more than the text. The bytes are those the
 * formats "%d", "%lld" and "%zu" give. */
static int write_head(ow_buf *out, ow_result_code code, const ow_response_ctx *ctx)
{
    const char *message = codes[code].message;
    int rc = ow_buf_appends(out, "{\"status\":");

    if (rc == OW_OK)
        rc = ow_buf_append_int(out, codes[code].status);
    if (rc == OW_OK)
        rc = member_string(out, ",\"code\":", codes[code].name, strlen(codes[code].name));
    if (rc == OW_OK && message != NULL)
        rc = member_string(out, ",\"message\":", message, strlen(message));
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"user_id\":");
    if (rc == OW_OK)
        rc = ow_buf_append_int(out, (long long)ctx->user_id);
    if (rc == OW_OK)
        rc = member_string(out, ",\"idempotency_key\":", ctx->key, ctx->key_len);
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"request_digest\":\"");
    if (rc == OW_OK)
        rc = ow_buf_append(out, ctx->digest_hex, strlen(ctx->digest_hex));
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '"');
    return rc;
}

/* Appends rather than formats: the 201 body is built for every new batch,
 * and formatting it showed high in the deciding worker's profile. The bytes
 * are the same as the formatted ones. */
static int write_order(ow_buf *out, size_t index, const ow_order_item *it, const ow_order_ref *ref)
{
    char amount[OW_AMOUNT_TEXT_MAX];
    const char *tail = ref->existing ? "\",\"existing\":true}" : "\",\"existing\":false}";
    int rc = ow_buf_appends(out, "{\"index\":");

    ow_amount_format(it->amount_cents, amount);
    if (rc == OW_OK)
        rc = ow_buf_append_int(out, (long long)index);
    if (rc == OW_OK)
        rc = member_string(out, ",\"external_order_no\":", it->external_order_no, it->ext_len);
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"order_id\":");
    if (rc == OW_OK)
        rc = ow_buf_append_int(out, (long long)ref->order_id);
    if (rc == OW_OK)
        rc = member_string(out, ",\"order_no\":", ref->order_no, strlen(ref->order_no));
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"amount\":\"");
    if (rc == OW_OK)
        rc = ow_buf_appends(out, amount);
    if (rc == OW_OK)
        rc = ow_buf_appends(out, tail);
    return rc;
}

/* What a 201 body usually takes: the head, and per order its numbers and
 * names with room to spare. Reserved at once, the body is not copied on
 * every doubling from 64 bytes; a body with many escapes still grows. */
static size_t created_estimate(const ow_response_ctx *ctx, const ow_request *req)
{
    size_t n = 320 + ctx->key_len;

    for (size_t i = 0; i < req->n_orders; i++)
        n += 160 + req->orders[i].ext_len;
    return n;
}

int ow_response_created(const ow_response_ctx *ctx, const ow_request *req, const ow_order_ref *refs,
                        ow_buf *out)
{
    int rc = ow_buf_reserve(out, created_estimate(ctx, req));

    if (rc == OW_OK)
        rc = write_head(out, OW_CODE_CREATED, ctx);

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
        if (!first)
            rc = ow_buf_appendc(out, ',');
        if (rc == OW_OK)
            rc = member_string(out, "", names[i].name, strlen(names[i].name));
        first = 0;
    }
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, ']');
    return rc;
}

int ow_response_order_conflict(const ow_response_ctx *ctx, const ow_request *req,
                               const ow_conflict *conflicts, size_t n, ow_buf *out)
{
    int rc = write_head(out, OW_CODE_ORDER_ALREADY_EXISTS, ctx);

    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"conflicts\":[");
    for (size_t i = 0; rc == OW_OK && i < n; i++) {
        const ow_order_item *it = &req->orders[conflicts[i].index];

        rc = ow_buf_appends(out, i > 0 ? ",{\"index\":" : "{\"index\":");
        if (rc == OW_OK)
            rc = ow_buf_append_uint(out, conflicts[i].index);
        if (rc == OW_OK)
            rc = member_string(out, ",\"external_order_no\":", it->external_order_no, it->ext_len);
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
    int rc = write_head(out, OW_CODE_IDEMPOTENCY_KEY_REUSED, ctx);

    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '}');
    return rc;
}

int ow_response_in_progress(const ow_response_ctx *ctx, int64_t retry_after_ms, ow_buf *out)
{
    int rc = write_head(out, OW_CODE_REQUEST_IN_PROGRESS, ctx);

    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"retry_after_ms\":");
    if (rc == OW_OK)
        rc = ow_buf_append_int(out, (long long)retry_after_ms);
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '}');
    return rc;
}

int ow_response_invalid(const char *key, size_t key_len, int has_user, int64_t user_id,
                        const ow_field_errors *errs, ow_buf *out)
{
    int rc = ow_buf_appends(out, "{\"status\":400,\"code\":\"INVALID_REQUEST\",\"message\":"
                                 "\"the message is not a valid order batch; see errors\"");

    if (rc == OW_OK && has_user)
        rc = ow_buf_appends(out, ",\"user_id\":");
    if (rc == OW_OK && has_user)
        rc = ow_buf_append_int(out, (long long)user_id);
    if (rc == OW_OK && key != NULL)
        rc = member_string(out, ",\"idempotency_key\":", key, key_len);
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"errors\":[");
    for (size_t i = 0; rc == OW_OK && i < errs->count; i++) {
        const ow_field_error *e = &errs->items[i];

        rc = member_string(out, i > 0 ? ",{\"field\":" : "{\"field\":", e->field, strlen(e->field));
        if (rc == OW_OK)
            rc = member_string(out, ",\"message\":", e->message, strlen(e->message));
        if (rc == OW_OK)
            rc = ow_buf_appendc(out, '}');
    }
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, ']');
    if (rc == OW_OK && errs->omitted > 0)
        rc = ow_buf_appends(out, ",\"errors_omitted\":");
    if (rc == OW_OK && errs->omitted > 0)
        rc = ow_buf_append_uint(out, errs->omitted);
    if (rc == OW_OK)
        rc = ow_buf_appendc(out, '}');
    return rc;
}

/* The worst 400 body: every error slot used, every byte of its field and
 * message escaped to six, and errors omitted beyond them. */
static int worst_invalid(ow_buf *out)
{
    ow_field_errors errs;

    ow_field_errors_init(&errs);
    errs.count = OW_FIELD_ERRORS_MAX;
    errs.omitted = SIZE_MAX;
    for (size_t i = 0; i < errs.count; i++) {
        ow_field_error *e = &errs.items[i];

        memset(e->field, 0x01, sizeof(e->field) - 1);
        e->field[sizeof(e->field) - 1] = '\0';
        memset(e->message, 0x01, sizeof(e->message) - 1);
        e->message[sizeof(e->message) - 1] = '\0';
    }
    return ow_response_invalid(NULL, 0, 1, INT64_MAX, &errs, out);
}

/* A request whose every order has the longest body: an order number of
 * quotes (each escaped to two bytes) and the largest numbers. */
static int worst_request(size_t n, ow_request *req, ow_order_ref **refs, ow_conflict **conflicts)
{
    req->user_id = INT64_MAX;
    req->n_orders = n;
    req->orders = calloc(n > 0 ? n : 1, sizeof(*req->orders));
    *refs = calloc(n > 0 ? n : 1, sizeof(**refs));
    *conflicts = calloc(n > 0 ? n : 1, sizeof(**conflicts));
    if (req->orders == NULL || *refs == NULL || *conflicts == NULL)
        return OW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ow_order_item *o = &req->orders[i];

        memset(o->external_order_no, '"', OW_EXT_NO_MAX);
        o->ext_len = OW_EXT_NO_MAX;
        o->amount_cents = OW_AMOUNT_MAX_CENTS;
        o->product_id = INT64_MAX;
        o->quantity = OW_QUANTITY_MAX;
        (*refs)[i].order_id = INT64_MAX;
        memset((*refs)[i].order_no, 'W', OW_ORDER_NO_MAX);
        (*conflicts)[i].index = i;
        (*conflicts)[i].fields = OW_DIFF_AMOUNT | OW_DIFF_PRODUCT_ID | OW_DIFF_QUANTITY;
    }
    return OW_OK;
}

static void keep_max(ow_buf *b, size_t *max)
{
    if (b->len > *max)
        *max = b->len;
    b->len = 0;
}

int ow_response_max_len(size_t max_orders, size_t *len)
{
    static const char digest[OW_DIGEST_HEX_LEN + 1] =
        "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
    char key[OW_KEY_MAX];
    ow_response_ctx ctx = {INT64_MAX, key, sizeof(key), digest};
    ow_request req = {0};
    ow_order_ref *refs = NULL;
    ow_conflict *conflicts = NULL;
    ow_buf b;
    int rc;

    memset(key, 'k', sizeof(key)); /* key characters need no escaping */
    ow_buf_init(&b);
    *len = 0;
    rc = worst_request(max_orders, &req, &refs, &conflicts);
    if (rc == OW_OK && (rc = ow_response_created(&ctx, &req, refs, &b)) == OW_OK)
        keep_max(&b, len);
    if (rc == OW_OK &&
        (rc = ow_response_order_conflict(&ctx, &req, conflicts, max_orders, &b)) == OW_OK)
        keep_max(&b, len);
    if (rc == OW_OK && (rc = ow_response_key_reused(&ctx, &b)) == OW_OK)
        keep_max(&b, len);
    if (rc == OW_OK && (rc = ow_response_in_progress(&ctx, INT64_MAX, &b)) == OW_OK)
        keep_max(&b, len);
    if (rc == OW_OK && (rc = worst_invalid(&b)) == OW_OK)
        keep_max(&b, len);
    ow_buf_cleanup(&b);
    free(req.orders);
    free(refs);
    free(conflicts);
    return rc;
}
