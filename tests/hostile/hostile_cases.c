/* The rows of the hostile input table; see hostile_cases.h. */
#include "hostile_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A string literal as (pointer, length): the length counts embedded NULs. */
#define BYTES(s) (s), sizeof(s) - 1

/* A row keyed "hostile:<name>" whose value is the literal v. */
#define ROW(name, v, field, why) {name, 1, BYTES("hostile:" name), HOSTILE_LITERAL, 0, BYTES(v), field, why}
/* A row with its own key bytes k and the valid value. */
#define KEYROW(name, k, field, why) {name, 1, BYTES(k), HOSTILE_LITERAL, 0, BYTES(VALID), field, why}
/* A row whose value comes from a generator. */
#define GENROW(name, gen, n, field, why) {name, 1, BYTES("hostile:" name), gen, n, NULL, 0, field, why}
/* A row with a generated key of klen bytes and a padded valid value of n. */
#define BIGKEYROW(name, klen, n) {name, 1, NULL, klen, HOSTILE_PADDED, n, NULL, 0, "key", NULL, 1}

#define ITEM "{\"external_order_no\":\"H-1\",\"amount\":\"19.90\"}"
#define BATCH(orders) "{\"user_id\":42,\"orders\":[" orders "]}"
#define USER(u) "{\"user_id\":" u ",\"orders\":[" ITEM "]}"
#define ONE(fields) BATCH("{" fields "}")
#define EXT_OK "\"external_order_no\":\"H-1\""
#define AMOUNT(a) ONE(EXT_OK ",\"amount\":" a)
#define PRODUCT(p) ONE(EXT_OK ",\"amount\":1,\"product_id\":" p)
#define QUANTITY(q) ONE(EXT_OK ",\"amount\":1,\"quantity\":" q)
#define EXT(e) ONE("\"external_order_no\":" e ",\"amount\":1")
#define VALID BATCH(ITEM)

#define X10(s) s s s s s s s s s s
#define K80 X10("kkkkkkkk")
#define OPEN100 X10(X10("["))
#define CLOSE100 X10(X10("]"))
#define ZEROS400 X10(X10("0000"))
#define DIGITS400 X10(X10("1234"))
#define EMPTY_ITEMS1000 X10(X10(X10("{},")))
#define EXT65 "\"" X10("ABCDEF") "01234\""

const hostile_case hostile_cases[] = {
    /* Not JSON, or JSON the parser must refuse. */
    ROW("truncated.mid-key", "{\"user_id\":42,\"orders\":[{\"external_order_no\":\"H-1\",\"amo",
        "value", "unterminated string"),
    ROW("truncated.after-colon", "{\"user_id\":", "value", "unexpected end of input"),
    ROW("truncated.unclosed-array", "{\"user_id\":42,\"orders\":[" ITEM, "value",
        "unexpected end of input"),
    ROW("deep.100-in-ignored-field",
        "{\"user_id\":42,\"orders\":[" ITEM "],\"x\":" OPEN100 CLOSE100 "}", "value",
        "nesting deeper than"),
    GENROW("deep.100000", HOSTILE_DEEP, 100000, "value", "nesting deeper than"),
    ROW("nan.user_id", USER("NaN"), "value", "NaN is not valid JSON"),
    ROW("infinity.amount", AMOUNT("Infinity"), "value", "Infinity is not valid JSON"),
    ROW("minus-infinity.amount", AMOUNT("-Infinity"), "value", "-Infinity is not valid JSON"),
    ROW("duplicate-key.top-level", "{\"user_id\":42,\"user_id\":43,\"orders\":[" ITEM "]}",
        "value", "duplicate object key"),
    ROW("duplicate-key.in-order", ONE(EXT_OK ",\"amount\":1,\"amount\":2"), "value",
        "duplicate object key"),
    ROW("non-utf8.in-string", EXT("\"H-\xff\""), "value", "invalid UTF-8"),
    ROW("non-utf8.in-key-name", "{\"user_id\":42,\"\xfe\":1,\"orders\":[" ITEM "]}", "value",
        "invalid UTF-8"),
    ROW("non-utf8.outside-strings", "{\"user_id\":42,\x80\"orders\":[" ITEM "]}", "value",
        "invalid UTF-8"),
    ROW("overlong-utf8.slash", EXT("\"H\xc0\xaf" "1\""), "value", "overlong"),
    ROW("overlong-utf8.nul", EXT("\"H\xe0\x80\x80" "1\""), "value", "overlong"),
    ROW("utf8-encoded-surrogate", EXT("\"H\xed\xa0\x80" "1\""), "value", "surrogate"),
    ROW("lone-surrogate.high", EXT("\"H-\\ud800\""), "value", "unpaired UTF-16 high surrogate"),
    ROW("lone-surrogate.low", EXT("\"H-\\udc00x\""), "value", "unpaired UTF-16 low surrogate"),
    ROW("nul.raw-in-string", EXT("\"H\0-1\""), "value", "unescaped control character"),
    ROW("nul.raw-after-value", VALID "\0", "value", "unexpected data after JSON value"),
    ROW("nul.escaped-in-external_order_no", EXT("\"H-\\u0000\""), "orders[0].external_order_no",
        "not printable ASCII"),
    ROW("bom", "\xef\xbb\xbf" VALID, "value", "byte order mark"),
    ROW("empty-value", "", "value", "is empty"),
    ROW("whitespace-only", " \t\r\n ", "value", "empty input"),
    /* Keys far beyond the key limit: a 990,000-byte key
     * with 20 kB, a 17,000-byte key with 983,000 bytes (the threshold the
     * issue computed), and a key and a value that both must be cut for the
     * dead-letter copy to fit. */
    BIGKEYROW("key.huge", 990000, 20000),
    BIGKEYROW("key.threshold", 17000, 983000),
    BIGKEYROW("key.and-value-cut", 2000, 1040000),
    GENROW("too-large", HOSTILE_PADDED, HOSTILE_MAX_BYTES + 1, "value",
           "is 262145 bytes; the limit is 262144"),
    ROW("json-null", "null", "value", "must be a JSON object"),
    ROW("json-array", "[" VALID "]", "value", "must be a JSON object"),
    ROW("single-quotes", "{'user_id':42}", "value", "double quotes"),
    ROW("trailing-comma", BATCH(ITEM ","), "value", "trailing comma"),

    /* Keys. The first row is the valid control: it must be created. */
    KEYROW("key.80-bytes-valid", K80, NULL, NULL),
    KEYROW("key.81-bytes", K80 "k", "key", "is 81 bytes; the limit is 80"),
    KEYROW("key.empty", "", "key", "is empty"),
    {"key.none", 0, NULL, 0, HOSTILE_LITERAL, 0, BYTES(VALID), "key", "is missing"},
    KEYROW("key.space", "hostile key", "key", "byte 8 is not one of"),
    KEYROW("key.slash", "hostile/key", "key", "byte 8 is not one of"),
    KEYROW("key.non-ascii", "hostile-caf\xc3\xa9", "key", "byte 12 is not one of"),
    KEYROW("key.nul-byte", "hostile\0key", "key", "byte 8 is not one of"),

    /* user_id */
    ROW("user_id.missing", "{\"orders\":[" ITEM "]}", "user_id", "is required"),
    ROW("user_id.zero", USER("0"), "user_id", "must be between 1"),
    ROW("user_id.negative", USER("-42"), "user_id", "must be between 1"),
    ROW("user_id.2pow63", USER("9223372036854775808"), "user_id", "must be between 1"),
    ROW("user_id.1e400-digits", USER("1" ZEROS400), "user_id", "must be between 1"),
    ROW("user_id.float", USER("42.0"), "user_id", "must be a JSON integer"),
    ROW("user_id.exponent", USER("42e0"), "user_id", "must be a JSON integer"),
    ROW("user_id.string", USER("\"42\""), "user_id", "must be a JSON integer"),

    /* orders */
    ROW("orders.missing", "{\"user_id\":42}", "orders", "is required"),
    ROW("orders.not-array", "{\"user_id\":42,\"orders\":" ITEM "}", "orders", "must be an array"),
    ROW("orders.empty", BATCH(""), "orders", "at least 1"),
    ROW("orders.1001-items", BATCH(EMPTY_ITEMS1000 "{}"), "orders",
        "holds 1001 orders; the limit is 1000"),
    ROW("orders.item-not-object", BATCH(ITEM ",\"H-2\""), "orders[1]", "must be an object"),

    /* external_order_no */
    ROW("external_order_no.missing", ONE("\"amount\":1"), "orders[0].external_order_no",
        "is required"),
    ROW("external_order_no.empty", EXT("\"\""), "orders[0].external_order_no",
        "must be 1 to 64 bytes"),
    ROW("external_order_no.65-bytes", EXT(EXT65), "orders[0].external_order_no",
        "must be 1 to 64 bytes, is 65"),
    ROW("external_order_no.non-printable", EXT("\"H\\t1\""), "orders[0].external_order_no",
        "not printable ASCII"),
    ROW("external_order_no.number", EXT("1"), "orders[0].external_order_no", "must be a string"),
    ROW("external_order_no.duplicate", BATCH(ITEM "," ITEM), "orders[1].external_order_no",
        "repeats orders[0]"),

    /* amount */
    ROW("amount.missing", ONE(EXT_OK), "orders[0].amount", "is required"),
    ROW("amount.negative", AMOUNT("-1"), "orders[0].amount", "must not be negative"),
    ROW("amount.3-decimals", AMOUNT("19.999"), "orders[0].amount", "at most 2 decimals"),
    ROW("amount.exponent", AMOUNT("1e2"), "orders[0].amount", "must not use an exponent"),
    ROW("amount.too-big", AMOUNT("\"10000000000.00\""), "orders[0].amount",
        "at most 9999999999.99"),
    ROW("amount.400-digits", AMOUNT(DIGITS400), "orders[0].amount", "at most 9999999999.99"),
    ROW("amount.bool", AMOUNT("true"), "orders[0].amount", "JSON number or a decimal string"),
    ROW("amount.leading-zero-string", AMOUNT("\"019.90\""), "orders[0].amount",
        "decimal like 19.90"),
    ROW("amount.empty-string", AMOUNT("\"\""), "orders[0].amount", "must not be empty"),
    ROW("amount.in-third-item",
        BATCH(ITEM ",{\"external_order_no\":\"H-2\",\"amount\":1},"
                   "{\"external_order_no\":\"H-3\",\"amount\":\"1,00\"}"),
        "orders[2].amount", "decimal like 19.90"),

    /* product_id */
    ROW("product_id.zero", PRODUCT("0"), "orders[0].product_id", "must be between 1"),
    ROW("product_id.negative", PRODUCT("-7"), "orders[0].product_id", "must be between 1"),
    ROW("product_id.float", PRODUCT("1.5"), "orders[0].product_id", "must be a JSON integer"),
    ROW("product_id.string", PRODUCT("\"101\""), "orders[0].product_id", "must be a JSON integer"),

    /* quantity */
    ROW("quantity.zero", QUANTITY("0"), "orders[0].quantity", "must be between 1"),
    ROW("quantity.negative", QUANTITY("-1"), "orders[0].quantity", "must be between 1"),
    ROW("quantity.2pow31", QUANTITY("2147483648"), "orders[0].quantity",
        "must be between 1 and 2147483647"),
    ROW("quantity.float", QUANTITY("1.0"), "orders[0].quantity", "must be a JSON integer"),
};

const size_t hostile_count = sizeof(hostile_cases) / sizeof(hostile_cases[0]);

/* {"user_id":42,"orders":[ITEM],"deep":[[[...]]]} with n levels of arrays. */
static unsigned char *make_deep(size_t n, size_t *len)
{
    static const char head[] = "{\"user_id\":42,\"orders\":[" ITEM "],\"deep\":";
    size_t h = sizeof(head) - 1;
    unsigned char *v = malloc(h + 2 * n + 1);

    if (v == NULL)
        return NULL;
    memcpy(v, head, h);
    memset(v + h, '[', n);
    memset(v + h + n, ']', n);
    v[h + 2 * n] = '}';
    *len = h + 2 * n + 1;
    return v;
}

/* The valid batch with a "pad" string member, exactly total bytes long. */
static unsigned char *make_padded(size_t total, size_t *len)
{
    static const char head[] = "{\"user_id\":42,\"orders\":[" ITEM "],\"pad\":\"";
    size_t h = sizeof(head) - 1;
    unsigned char *v;

    if (total < h + 2)
        return NULL;
    v = malloc(total);
    if (v == NULL)
        return NULL;
    memcpy(v, head, h);
    memset(v + h, 'p', total - h - 2);
    memcpy(v + total - 2, "\"}", 2);
    *len = total;
    return v;
}

unsigned char *hostile_key(const hostile_case *c)
{
    unsigned char *k = malloc(c->key_len > 0 ? c->key_len : 1);
    int n;

    if (k == NULL)
        return NULL;
    if (!c->key_gen) {
        if (c->key_len > 0)
            memcpy(k, c->key, c->key_len);
        return k;
    }
    memset(k, 'K', c->key_len);
    n = snprintf((char *)k, c->key_len, "hostile:%s:", c->name);
    if (n > 0 && (size_t)n < c->key_len)
        k[n] = 'K'; /* snprintf's NUL */
    return k;
}

unsigned char *hostile_value(const hostile_case *c, size_t *len)
{
    unsigned char *v;

    switch (c->gen) {
    case HOSTILE_DEEP:
        return make_deep(c->n, len);
    case HOSTILE_PADDED:
        return make_padded(c->n, len);
    case HOSTILE_LITERAL:
    default:
        v = malloc(c->value_len > 0 ? c->value_len : 1);
        if (v == NULL)
            return NULL;
        memcpy(v, c->value, c->value_len);
        *len = c->value_len;
        return v;
    }
}
