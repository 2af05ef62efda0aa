#include "ow/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/error.h"
#include "ow/json.h"
#include "ow/util.h"

#define JSON_MAX_DEPTH 32

void ow_field_errors_init(ow_field_errors *errs)
{
    errs->count = 0;
    errs->omitted = 0;
}

static void field_errors_vadd(ow_field_errors *errs, const char *field, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void field_errors_vadd(ow_field_errors *errs, const char *field, const char *fmt, va_list ap)
{
    ow_field_error *e;

    if (errs == NULL)
        return;
    if (errs->count == OW_FIELD_ERRORS_MAX) {
        errs->omitted++;
        return;
    }
    e = &errs->items[errs->count++];
    snprintf(e->field, sizeof(e->field), "%s", field);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
}

void ow_field_errors_add(ow_field_errors *errs, const char *field, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    field_errors_vadd(errs, field, fmt, ap);
    va_end(ap);
}

static int key_byte_ok(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == ':';
}

int ow_request_check_key(const void *key, size_t len, ow_field_errors *errs)
{
    const unsigned char *k = key;

    if (key == NULL) {
        ow_field_errors_add(errs, "key", "is missing; the message key is the idempotency key");
        return OW_EINVAL;
    }
    if (len == 0) {
        ow_field_errors_add(errs, "key", "is empty; expected 1 to %d bytes", OW_KEY_MAX);
        return OW_EINVAL;
    }
    if (len > OW_KEY_MAX) {
        ow_field_errors_add(errs, "key", "is %zu bytes; the limit is %d", len, OW_KEY_MAX);
        return OW_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        if (!key_byte_ok(k[i])) {
            ow_field_errors_add(errs, "key", "byte %zu is not one of A-Z a-z 0-9 - _ . :", i + 1);
            return OW_EINVAL;
        }
    }
    return OW_OK;
}

/* A JSON integer lexeme in [min, max], min >= 0. Returns 0, or OW_EINVAL
 * with why set. */
static int int_in_range(const ow_json_node *n, int64_t min, int64_t max, int64_t *out,
                        const char **why)
{
    const char *s;
    int neg = 0;
    uint64_t v = 0;

    if (n->type != OW_JSON_NUMBER || !ow_json_number_is_integer(n)) {
        *why = "must be a JSON integer";
        return OW_EINVAL;
    }
    s = n->str;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    for (; *s != '\0'; s++) {
        unsigned d = (unsigned)(*s - '0');

        if (v > (UINT64_MAX - d) / 10) {
            *why = "is out of range";
            return OW_EINVAL;
        }
        v = v * 10 + d;
    }
    if ((neg && v != 0) || v > (uint64_t)max || (int64_t)v < min) {
        *why = "is out of range";
        return OW_EINVAL;
    }
    *out = (int64_t)v;
    return OW_OK;
}

/* Reads decimal digits from s[*i..len) into *value; returns how many, or
 * more than max when there are too many. */
static size_t read_digits(const char *s, size_t len, size_t *i, size_t max, int64_t *value)
{
    size_t n = 0;

    for (; *i < len && s[*i] >= '0' && s[*i] <= '9'; (*i)++) {
        if (++n > max)
            return n;
        *value = *value * 10 + (s[*i] - '0');
    }
    return n;
}

int ow_amount_parse(const char *s, size_t len, int64_t *cents, const char **why)
{
    size_t i = 0;
    size_t int_digits;
    size_t frac_digits = 0;
    int64_t units = 0;
    int64_t frac = 0;

    if (len == 0) {
        *why = "must not be empty";
        return OW_EINVAL;
    }
    if (s[0] == '-') {
        *why = "must not be negative";
        return OW_EINVAL;
    }
    int_digits = read_digits(s, len, &i, 10, &units);
    if (int_digits > 10) {
        *why = "must be at most 9999999999.99";
        return OW_EINVAL;
    }
    if (int_digits == 0 || (int_digits > 1 && s[0] == '0')) {
        *why = "must be a decimal like 19.90";
        return OW_EINVAL;
    }
    if (i < len && s[i] == '.') {
        i++;
        frac_digits = read_digits(s, len, &i, 2, &frac);
        if (frac_digits > 2) {
            *why = "must have at most 2 decimals";
            return OW_EINVAL;
        }
        if (frac_digits == 0) {
            *why = "must be a decimal like 19.90";
            return OW_EINVAL;
        }
    }
    if (i != len) {
        *why = (s[i] == 'e' || s[i] == 'E') ? "must not use an exponent"
                                            : "must be a decimal like 19.90";
        return OW_EINVAL;
    }
    if (frac_digits == 1)
        frac *= 10;
    *cents = units * 100 + frac;
    return OW_OK;
}

void ow_amount_format(int64_t cents, char out[OW_AMOUNT_TEXT_MAX])
{
    char digits[24];
    size_t n = 0;
    uint64_t v = cents < 0 ? 0 : (uint64_t)cents;

    /* Digits from the right: two decimals, the point, then at least one unit
     * digit. Amounts are validated to at most 13 digits, so this fits. */
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
        if (n == 2)
            digits[n++] = '.';
    } while ((v > 0 || n < 4) && n + 1 < OW_AMOUNT_TEXT_MAX);
    for (size_t i = 0; i < n; i++)
        out[i] = digits[n - 1 - i];
    out[n] = '\0';
}

/* One error of orders[index] (or of its member name): the field's path is
 * formatted only when there is an error to report, not for every field of
 * every order: formatting every path eagerly showed in replay profiles. */
static void item_error(ow_field_errors *errs, size_t index, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void item_error(ow_field_errors *errs, size_t index, const char *name, const char *fmt, ...)
{
    char path[sizeof(errs->items[0].field)];
    va_list ap;

    if (name != NULL)
        snprintf(path, sizeof(path), "orders[%zu].%s", index, name);
    else
        snprintf(path, sizeof(path), "orders[%zu]", index);
    va_start(ap, fmt);
    field_errors_vadd(errs, path, fmt, ap);
    va_end(ap);
}

static void parse_ext_no(const ow_json_node *v, size_t i, ow_order_item *item,
                         ow_field_errors *errs, int *ok)
{
    if (v == NULL) {
        item_error(errs, i, "external_order_no", "is required");
        *ok = 0;
        return;
    }
    if (v->type != OW_JSON_STRING) {
        item_error(errs, i, "external_order_no", "must be a string");
        *ok = 0;
        return;
    }
    if (v->len == 0 || v->len > OW_EXT_NO_MAX) {
        item_error(errs, i, "external_order_no", "must be 1 to %d bytes, is %zu", OW_EXT_NO_MAX,
                   v->len);
        *ok = 0;
        return;
    }
    for (size_t k = 0; k < v->len; k++) {
        unsigned char c = (unsigned char)v->str[k];

        if (c < 0x20 || c > 0x7e) {
            item_error(errs, i, "external_order_no", "byte %zu is not printable ASCII", k + 1);
            *ok = 0;
            return;
        }
    }
    memcpy(item->external_order_no, v->str, v->len);
    item->external_order_no[v->len] = '\0';
    item->ext_len = v->len;
}

static void parse_amount(const ow_json_node *v, size_t i, ow_order_item *item,
                         ow_field_errors *errs, int *ok)
{
    const char *why = NULL;

    if (v == NULL) {
        item_error(errs, i, "amount", "is required");
        *ok = 0;
        return;
    }
    if (v->type != OW_JSON_NUMBER && v->type != OW_JSON_STRING) {
        item_error(errs, i, "amount", "must be a JSON number or a decimal string");
        *ok = 0;
        return;
    }
    if (ow_amount_parse(v->str, v->len, &item->amount_cents, &why) != OW_OK) {
        item_error(errs, i, "amount", "%s", why);
        *ok = 0;
    }
}

static void parse_optional_int(const ow_json_node *v, size_t i, const char *name, int64_t max,
                               int64_t absent, int64_t *out, ow_field_errors *errs, int *ok)
{
    const char *why = NULL;

    *out = absent;
    if (v == NULL || v->type == OW_JSON_NULL)
        return;
    if (int_in_range(v, 1, max, out, &why) != OW_OK) {
        if (v->type == OW_JSON_NUMBER && ow_json_number_is_integer(v))
            item_error(errs, i, name, "must be between 1 and %lld", (long long)max);
        else
            item_error(errs, i, name, "%s", why);
        *ok = 0;
    }
}

static int parse_item(const ow_json_node *obj, size_t i, ow_order_item *item, ow_field_errors *errs)
{
    int ok = 1;

    memset(item, 0, sizeof(*item));
    if (obj->type != OW_JSON_OBJECT) {
        item_error(errs, i, NULL, "must be an object");
        return 0;
    }
    parse_ext_no(ow_json_member(obj, "external_order_no"), i, item, errs, &ok);
    parse_amount(ow_json_member(obj, "amount"), i, item, errs, &ok);
    parse_optional_int(ow_json_member(obj, "product_id"), i, "product_id", INT64_MAX, 0,
                       &item->product_id, errs, &ok);
    parse_optional_int(ow_json_member(obj, "quantity"), i, "quantity", OW_QUANTITY_MAX, 1,
                       &item->quantity, errs, &ok);
    return ok;
}

/* Orders item pointers by external_order_no, then by position in the array. */
static int cmp_ext(const void *a, const void *b)
{
    const ow_order_item *x = *(const ow_order_item *const *)a;
    const ow_order_item *y = *(const ow_order_item *const *)b;
    int c = strcmp(x->external_order_no, y->external_order_no);

    if (c != 0)
        return c;
    return (x > y) - (x < y);
}

/* Up to this many orders, a batch with no repeated external_order_no is
 * recognized by comparing every pair, without sorting. */
#define UNIQUE_PAIRWISE_MAX 16

/* 1 when items[0..n) are few and no two share an external_order_no; 0 when
 * there are many, or a repeat, which the sorted check reports. An empty one
 * (already reported as invalid) repeats nothing, as in the sorted check. */
static int all_distinct_small(const ow_order_item *items, size_t n)
{
    if (n > UNIQUE_PAIRWISE_MAX)
        return 0;
    for (size_t i = 1; i < n; i++) {
        for (size_t k = 0; k < i; k++) {
            if (items[i].ext_len != 0 && items[i].ext_len == items[k].ext_len &&
                memcmp(items[i].external_order_no, items[k].external_order_no, items[i].ext_len) ==
                    0)
                return 0;
        }
    }
    return 1;
}

/* Reports every item whose external_order_no repeats an earlier item's,
 * naming the first item of the run. Returns 1 when all are unique, 0 when
 * not, -1 when out of memory. */
static int check_unique_ext(ow_request_scratch *s, const ow_order_item *items, size_t n,
                            ow_field_errors *errs)
{
    const ow_order_item **sorted;
    size_t run_start = 0;
    int ok = 1;

    if (n < 2 || all_distinct_small(items, n))
        return 1;
    if (ow_grow((void **)&s->sorted, &s->sorted_cap, n, sizeof(*s->sorted)) != OW_OK)
        return -1;
    sorted = s->sorted;
    for (size_t i = 0; i < n; i++)
        sorted[i] = &items[i];
    qsort(sorted, n, sizeof(*sorted), cmp_ext);
    for (size_t k = 1; k < n; k++) {
        if (sorted[k]->ext_len == 0 ||
            strcmp(sorted[k]->external_order_no, sorted[run_start]->external_order_no) != 0) {
            run_start = k;
            continue;
        }
        item_error(errs, (size_t)(sorted[k] - items), "external_order_no",
                   "repeats orders[%zu].external_order_no", (size_t)(sorted[run_start] - items));
        ok = 0;
    }
    return ok;
}

static int parse_orders(ow_request_scratch *s, const ow_json_node *orders,
                        const ow_request_limits *limits, ow_request *out, ow_field_errors *errs)
{
    const ow_json_node *item;
    size_t i = 0;
    int ok = 1;
    int uniq;

    if (orders == NULL) {
        ow_field_errors_add(errs, "orders", "is required");
        return 0;
    }
    if (orders->type != OW_JSON_ARRAY) {
        ow_field_errors_add(errs, "orders", "must be an array");
        return 0;
    }
    if (orders->count == 0) {
        ow_field_errors_add(errs, "orders", "must hold at least 1 order");
        return 0;
    }
    if (orders->count > limits->max_orders) {
        ow_field_errors_add(errs, "orders", "holds %zu orders; the limit is %zu", orders->count,
                            limits->max_orders);
        return 0;
    }
    /* parse_item clears each item: no calloc. */
    out->orders = malloc(orders->count * sizeof(*out->orders));
    if (out->orders == NULL)
        return -1;
    for (item = orders->first; item != NULL; item = item->next, i++) {
        if (!parse_item(item, i, &out->orders[i], errs))
            ok = 0;
    }
    out->n_orders = orders->count;
    uniq = check_unique_ext(s, out->orders, out->n_orders, errs);
    if (uniq < 0)
        return -1;
    return ok && uniq;
}

static void parse_user_id(const ow_json_node *v, ow_request *out, ow_field_errors *errs, int *ok)
{
    const char *why = NULL;
    int64_t id = 0;

    if (v == NULL) {
        ow_field_errors_add(errs, "user_id", "is required");
        *ok = 0;
        return;
    }
    if (int_in_range(v, 1, INT64_MAX, &id, &why) != OW_OK) {
        if (v->type == OW_JSON_NUMBER && ow_json_number_is_integer(v))
            ow_field_errors_add(errs, "user_id", "must be between 1 and %lld",
                                (long long)INT64_MAX);
        else
            ow_field_errors_add(errs, "user_id", "%s", why);
        *ok = 0;
        return;
    }
    out->user_id = id;
}

/* The most entries the sorting scratch keeps between parses. */
#define SORTED_KEEP 1024

void ow_request_scratch_init(ow_request_scratch *s)
{
    memset(s, 0, sizeof(*s));
}

void ow_request_scratch_cleanup(ow_request_scratch *s)
{
    ow_json_free(&s->doc);
    free(s->sorted);
    ow_request_scratch_init(s);
}

int ow_request_parse_with(ow_request_scratch *s, const void *value, size_t len,
                          const ow_request_limits *limits, ow_request *out, ow_field_errors *errs)
{
    ow_json_limits jl = {JSON_MAX_DEPTH, 0};
    ow_json_error jerr;
    const ow_json_node *root;
    int ok = 1;
    int rc = OW_EINVAL;
    int jrc;
    int orc;

    memset(out, 0, sizeof(*out));
    if (value == NULL || len == 0) {
        ow_field_errors_add(errs, "value", "is empty; expected a JSON object");
        goto out;
    }
    if (len > limits->max_bytes) {
        ow_field_errors_add(errs, "value", "is %zu bytes; the limit is %zu", len,
                            limits->max_bytes);
        goto out;
    }
    jl.max_nodes = limits->max_orders * 20 > 100000 ? limits->max_orders * 20 : 100000;
    jrc = ow_json_reparse(value, len, &jl, &s->doc, &jerr);
    if (jrc == OW_JSON_ERR_NOMEM) {
        rc = OW_ENOMEM;
        goto out;
    }
    if (jrc != OW_JSON_OK) {
        ow_field_errors_add(errs, "value", "is not valid JSON: %s at byte %zu", jerr.message,
                            jerr.offset);
        goto out;
    }
    root = ow_json_root(s->doc);
    if (root->type != OW_JSON_OBJECT) {
        ow_field_errors_add(errs, "value", "must be a JSON object");
        goto out;
    }
    parse_user_id(ow_json_member(root, "user_id"), out, errs, &ok);
    orc = parse_orders(s, ow_json_member(root, "orders"), limits, out, errs);
    if (orc < 0) {
        rc = OW_ENOMEM;
        goto out;
    }
    rc = (ok && orc) ? OW_OK : OW_EINVAL;
out:
    if (s->sorted_cap > SORTED_KEEP) {
        free(s->sorted);
        s->sorted = NULL;
        s->sorted_cap = 0;
    }
    if (rc != OW_OK) {
        int64_t user_id = out->user_id;

        ow_request_cleanup(out);
        out->user_id = user_id;
    }
    return rc;
}

int ow_request_parse(const void *value, size_t len, const ow_request_limits *limits,
                     ow_request *out, ow_field_errors *errs)
{
    ow_request_scratch s;
    int rc;

    ow_request_scratch_init(&s);
    rc = ow_request_parse_with(&s, value, len, limits, out, errs);
    ow_request_scratch_cleanup(&s);
    return rc;
}

void ow_request_cleanup(ow_request *req)
{
    if (req == NULL)
        return;
    free(req->orders);
    req->orders = NULL;
    req->n_orders = 0;
    req->user_id = 0;
}

uint64_t ow_order_hash(int64_t user_id, const char *ext, size_t len)
{
    return ow_hash64(ext, len) ^ ((uint64_t)user_id * 0x9e3779b97f4a7c15ULL);
}
