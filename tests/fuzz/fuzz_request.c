/*
 * Fuzz target: what the worker does with one consumed message (src/pipeline/job.c),
 * with the invariants checked and a failure turned into abort():
 *
 *   - the key check agrees with an independent reading of contract section 2;
 *   - the parse returns OK or EINVAL, never more than it was given (ASan
 *     watches the reads: the value ends where the input ends), and a valid
 *     request respects every bound of the contract;
 *   - an invalid message's 400 body is JSON (checked with the project's own
 *     ow_json_parse) that lists the same errors;
 *   - a valid request's canonical form is JSON, re-parses to the same
 *     request and the same digest, and every body built for it (created
 *     with fake order refs, order conflict, key reused, in progress) is JSON;
 *   - amounts survive format -> parse, and a parsed amount survives
 *     parse -> format -> parse.
 *
 * Input layout: see fuzz_request.h.
 */
#include "fuzz_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/digest.h"
#include "ow/error.h"
#include "ow/json.h"
#include "ow/request.h"
#include "ow/response.h"

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond))                                                                           \
            fuzz_fail(#cond, __LINE__);                                                        \
    } while (0)

/* Small enough that the size limit is reachable with -max_len=65536. */
static const ow_request_limits limits = {16384, 1000};
/* Canonical forms are longer than compact inputs: re-parse them without a size limit. */
static const ow_request_limits canon_limits = {SIZE_MAX, 1000};

static void fuzz_fail(const char *what, int line)
{
    fprintf(stderr, "fuzz_request.c:%d: invariant failed: %s\n", line, what);
    abort();
}

/* ---- JSON bodies --------------------------------------------------------- */

static int node_is(const ow_json_node *n, const char *s)
{
    return n != NULL && n->type == OW_JSON_STRING && n->len == strlen(s) &&
           memcmp(n->str, s, n->len) == 0;
}

/* Parses a built body with the project's parser; the caller frees *doc. */
static const ow_json_node *parse_body(const ow_buf *b, int status, ow_json_doc **doc)
{
    const ow_json_node *root;
    const ow_json_node *st;
    char text[8];

    CHECK(ow_json_parse(b->data, b->len, NULL, doc, NULL) == OW_JSON_OK);
    root = ow_json_root(*doc);
    CHECK(root->type == OW_JSON_OBJECT);
    st = ow_json_member(root, "status");
    snprintf(text, sizeof(text), "%d", status);
    CHECK(st != NULL && st->type == OW_JSON_NUMBER && strcmp(st->str, text) == 0);
    CHECK(ow_json_member(root, "code") != NULL);
    return root;
}

static void check_invalid_body(const char *key, size_t klen, const ow_request *req,
                               const ow_field_errors *errs)
{
    ow_buf b;
    ow_json_doc *doc = NULL;
    const ow_json_node *root;
    const ow_json_node *list;

    ow_buf_init(&b);
    CHECK(ow_response_invalid(key, klen, req->user_id > 0, req->user_id, errs, &b) == OW_OK);
    root = parse_body(&b, 400, &doc);
    CHECK(node_is(ow_json_member(root, "code"), "INVALID_REQUEST"));
    list = ow_json_member(root, "errors");
    CHECK(list != NULL && list->type == OW_JSON_ARRAY && list->count == errs->count);
    CHECK(node_is(ow_json_member(list->first, "field"), errs->items[0].field));
    CHECK((ow_json_member(root, "idempotency_key") != NULL) == (key != NULL));
    ow_json_free(&doc);
    ow_buf_cleanup(&b);
}

/* ---- Valid requests ------------------------------------------------------ */

static int key_byte_ok(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           c == '-' || c == '_' || c == '.' || c == ':';
}

/* Contract section 2, read independently of src/base/request.c. */
static int key_valid(const unsigned char *key, size_t len)
{
    if (key == NULL || len == 0 || len > OW_KEY_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (!key_byte_ok(key[i]))
            return 0;
    }
    return 1;
}

static void check_amount_round_trip(int64_t cents)
{
    char text[OW_AMOUNT_TEXT_MAX];
    int64_t back = -1;
    const char *why = NULL;

    CHECK(cents >= 0 && cents <= OW_AMOUNT_MAX_CENTS);
    ow_amount_format(cents, text);
    CHECK(ow_amount_parse(text, strlen(text), &back, &why) == OW_OK);
    CHECK(back == cents);
}

static void check_item(const ow_order_item *it)
{
    CHECK(it->ext_len >= 1 && it->ext_len <= OW_EXT_NO_MAX);
    CHECK(strlen(it->external_order_no) == it->ext_len);
    for (size_t k = 0; k < it->ext_len; k++)
        CHECK(it->external_order_no[k] >= 0x20 && it->external_order_no[k] <= 0x7e);
    check_amount_round_trip(it->amount_cents);
    CHECK(it->product_id >= 0);
    CHECK(it->quantity >= 1 && it->quantity <= OW_QUANTITY_MAX);
}

static void check_request_bounds(const ow_request *req)
{
    CHECK(req->user_id >= 1);
    CHECK(req->n_orders >= 1 && req->n_orders <= limits.max_orders);
    for (size_t i = 0; i < req->n_orders; i++) {
        check_item(&req->orders[i]);
        for (size_t k = 0; k < i; k++)
            CHECK(strcmp(req->orders[i].external_order_no, req->orders[k].external_order_no) != 0);
    }
}

static int same_request(const ow_request *a, const ow_request *b)
{
    if (a->user_id != b->user_id || a->n_orders != b->n_orders)
        return 0;
    for (size_t i = 0; i < a->n_orders; i++) {
        const ow_order_item *x = &a->orders[i];
        const ow_order_item *y = &b->orders[i];

        if (x->ext_len != y->ext_len || memcmp(x->external_order_no, y->external_order_no,
                                               x->ext_len) != 0 ||
            x->amount_cents != y->amount_cents || x->product_id != y->product_id ||
            x->quantity != y->quantity)
            return 0;
    }
    return 1;
}

/* The canonical form is JSON, and parsing it back gives the same request,
 * the same canonical bytes and so the same digest. */
static void check_canonical(const ow_request *req, const char *hex)
{
    ow_buf canon, again;
    ow_json_doc *doc = NULL;
    ow_request back;
    ow_field_errors errs;
    unsigned char raw[OW_DIGEST_LEN];
    char hex2[OW_DIGEST_HEX_LEN + 1];

    ow_buf_init(&canon);
    ow_buf_init(&again);
    ow_field_errors_init(&errs);
    CHECK(ow_digest_canonical(req, &canon) == OW_OK);
    CHECK(ow_json_parse(canon.data, canon.len, NULL, &doc, NULL) == OW_JSON_OK);
    CHECK(ow_request_parse(canon.data, canon.len, &canon_limits, &back, &errs) == OW_OK);
    CHECK(same_request(req, &back));
    CHECK(ow_digest_canonical(&back, &again) == OW_OK);
    CHECK(again.len == canon.len && memcmp(again.data, canon.data, canon.len) == 0);
    CHECK(ow_digest_compute(&back, raw, hex2) == OW_OK);
    CHECK(strcmp(hex, hex2) == 0);
    ow_request_cleanup(&back);
    ow_json_free(&doc);
    ow_buf_cleanup(&again);
    ow_buf_cleanup(&canon);
}

/* A created body with fake order refs: JSON, one entry per item, each
 * naming its item's external_order_no. */
static void check_created_body(const ow_response_ctx *ctx, const ow_request *req)
{
    ow_order_ref *refs = calloc(req->n_orders, sizeof(*refs));
    ow_buf b;
    ow_json_doc *doc = NULL;
    const ow_json_node *orders;
    const ow_json_node *o;
    size_t i = 0;

    CHECK(refs != NULL);
    for (size_t k = 0; k < req->n_orders; k++) {
        refs[k].order_id = (int64_t)k + 1;
        snprintf(refs[k].order_no, sizeof(refs[k].order_no), "ON%022zu", k);
        refs[k].existing = (int)(k & 1);
    }
    ow_buf_init(&b);
    CHECK(ow_response_created(ctx, req, refs, &b) == OW_OK);
    orders = ow_json_member(parse_body(&b, 201, &doc), "orders");
    CHECK(orders != NULL && orders->type == OW_JSON_ARRAY && orders->count == req->n_orders);
    for (o = orders->first; o != NULL; o = o->next, i++)
        CHECK(node_is(ow_json_member(o, "external_order_no"), req->orders[i].external_order_no));
    ow_json_free(&doc);
    ow_buf_cleanup(&b);
    free(refs);
}

static void check_conflict_body(const ow_response_ctx *ctx, const ow_request *req)
{
    ow_conflict *conflicts = calloc(req->n_orders, sizeof(*conflicts));
    ow_buf b;
    ow_json_doc *doc = NULL;
    const ow_json_node *list;

    CHECK(conflicts != NULL);
    for (size_t k = 0; k < req->n_orders; k++) {
        conflicts[k].index = k;
        conflicts[k].fields = (unsigned)(k % 7) + 1;
    }
    ow_buf_init(&b);
    CHECK(ow_response_order_conflict(ctx, req, conflicts, req->n_orders, &b) == OW_OK);
    list = ow_json_member(parse_body(&b, 409, &doc), "conflicts");
    CHECK(list != NULL && list->type == OW_JSON_ARRAY && list->count == req->n_orders);
    ow_json_free(&doc);
    ow_buf_cleanup(&b);
    free(conflicts);
}

static void check_other_bodies(const ow_response_ctx *ctx)
{
    ow_buf b;
    ow_json_doc *doc = NULL;

    ow_buf_init(&b);
    CHECK(ow_response_key_reused(ctx, &b) == OW_OK);
    parse_body(&b, 409, &doc);
    ow_json_free(&doc);
    ow_buf_reset(&b);
    CHECK(ow_response_in_progress(ctx, 250, &b) == OW_OK);
    parse_body(&b, 409, &doc);
    ow_json_free(&doc);
    ow_buf_cleanup(&b);
}

static void check_valid(const char *key, size_t klen, const ow_request *req)
{
    unsigned char raw[OW_DIGEST_LEN];
    char hex[OW_DIGEST_HEX_LEN + 1];
    ow_response_ctx ctx;

    check_request_bounds(req);
    CHECK(ow_digest_compute(req, raw, hex) == OW_OK);
    CHECK(strlen(hex) == OW_DIGEST_HEX_LEN && strspn(hex, "0123456789abcdef") == OW_DIGEST_HEX_LEN);
    check_canonical(req, hex);
    ctx.user_id = req->user_id;
    ctx.key = key;
    ctx.key_len = klen;
    ctx.digest_hex = hex;
    check_created_body(&ctx, req);
    check_conflict_body(&ctx, req);
    check_other_bodies(&ctx);
}

/* ---- One message --------------------------------------------------------- */

/* The value read as an amount lexeme: a parsed amount formats and parses
 * back to itself. */
static void check_amount_lexeme(const uint8_t *value, size_t len)
{
    int64_t cents = -1;
    const char *why = NULL;

    if (ow_amount_parse((const char *)value, len, &cents, &why) == OW_OK)
        check_amount_round_trip(cents);
    else
        CHECK(why != NULL);
}

static void run_message(const char *key, size_t klen, const uint8_t *value, size_t vlen)
{
    ow_field_errors errs;
    ow_request req;
    int key_ok;
    int rc;

    ow_field_errors_init(&errs);
    key_ok = ow_request_check_key(key, klen, &errs) == OW_OK;
    CHECK(key_ok == key_valid((const unsigned char *)key, klen));
    CHECK(errs.count == (key_ok ? 0u : 1u));
    rc = ow_request_parse(value, vlen, &limits, &req, &errs);
    CHECK(rc == OW_OK || rc == OW_EINVAL);
    if (rc == OW_OK) {
        CHECK(errs.count == (key_ok ? 0u : 1u));
    } else {
        CHECK(req.orders == NULL && req.n_orders == 0);
        CHECK(errs.count > (key_ok ? 0u : 1u));
    }
    if (rc == OW_OK && key_ok)
        check_valid(key, klen, &req);
    else
        check_invalid_body(key_ok ? key : NULL, klen, &req, &errs);
    ow_request_cleanup(&req);
    check_amount_lexeme(value, vlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t klen;
    char *key = NULL;

    if (size == 0)
        return 0;
    klen = data[0] == FUZZ_NO_KEY ? 0 : data[0];
    if (klen > size - 1)
        klen = size - 1;
    if (data[0] != FUZZ_NO_KEY) {
        /* A buffer of its own, so a read past the key is caught too. */
        key = malloc(klen > 0 ? klen : 1);
        CHECK(key != NULL);
        memcpy(key, data + 1, klen);
    }
    run_message(key, klen, data + 1 + klen, size - 1 - klen);
    free(key);
    return 0;
}
