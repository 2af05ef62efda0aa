/*
 * Unit tests for the strict JSON parser (src/base/json.c).
 *
 * The accept/reject table runs as one cmocka test per row.  Every input is
 * copied into a buffer of exactly its length, so a read past len shows up
 * under AddressSanitizer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ow/json.h"

#define LIT(s) s, sizeof(s) - 1
#define ACCEPT 1, NULL
#define REJECT(msg) 0, msg

typedef struct {
    const char *name;
    const char *input;
    size_t len;
    int ok;
    const char *msg;  /* substring of the expected error message */
} json_case;

static json_case cases[] = {
    /* Accepted documents. */
    { "ok zero", LIT("0"), ACCEPT },
    { "ok negative zero", LIT("-0"), ACCEPT },
    { "ok decimal", LIT("19.90"), ACCEPT },
    { "ok exponent upper plus", LIT("1E+2"), ACCEPT },
    { "ok exponent minus", LIT("-1.5e-10"), ACCEPT },
    { "ok zero fraction exponent", LIT("-0.0e-0"), ACCEPT },
    { "ok huge integer", LIT("123456789012345678901234567890"), ACCEPT },
    { "ok true", LIT("true"), ACCEPT },
    { "ok false", LIT("false"), ACCEPT },
    { "ok null", LIT("null"), ACCEPT },
    { "ok empty string", LIT("\"\""), ACCEPT },
    { "ok empty array", LIT("[]"), ACCEPT },
    { "ok empty object", LIT("{}"), ACCEPT },
    { "ok all whitespace kinds", LIT(" \t\r\n[ 1 ,\t2\r,\n3 ] \n"), ACCEPT },
    { "ok nested", LIT("{\"a\":{\"b\":[null,true,false,{}]}}"), ACCEPT },
    { "ok simple escapes", LIT("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\""), ACCEPT },
    { "ok \\u escape", LIT("\"\\u00e9\\u00E9\""), ACCEPT },
    { "ok surrogate pair", LIT("\"\\ud83d\\ude00\""), ACCEPT },
    { "ok \\u0000", LIT("\"a\\u0000b\""), ACCEPT },
    { "ok raw 2-byte UTF-8", LIT("\"caf\xc3\xa9\""), ACCEPT },
    { "ok raw 3-byte UTF-8", LIT("\"\xe2\x82\xac\""), ACCEPT },
    { "ok raw 4-byte UTF-8", LIT("\"\xf0\x9f\x98\x80\""), ACCEPT },
    { "ok U+10FFFF", LIT("\"\xf4\x8f\xbf\xbf\""), ACCEPT },
    { "ok U+FEFF inside string", LIT("\"\xef\xbb\xbf\""), ACCEPT },
    { "ok DEL in string", LIT("\"\x7f\""), ACCEPT },
    { "ok keys differ by case", LIT("{\"a\":1,\"A\":2}"), ACCEPT },
    { "ok same key in sibling objects", LIT("[{\"a\":1},{\"a\":2}]"), ACCEPT },
    { "ok same key at two levels", LIT("{\"a\":{\"a\":1}}"), ACCEPT },
    { "ok empty key", LIT("{\"\":1}"), ACCEPT },
    { "ok keys differ by embedded NUL", LIT("{\"a\\u0000\":1,\"a\":2}"), ACCEPT },

    /* Empty input, BOM and trailing data. */
    { "empty input", LIT(""), REJECT("empty input") },
    { "whitespace only", LIT(" \t\r\n"), REJECT("empty input") },
    { "UTF-8 BOM", LIT("\xef\xbb\xbf{}"), REJECT("byte order mark") },
    { "two values", LIT("1 2"), REJECT("unexpected data after JSON value") },
    { "trailing bracket", LIT("[]]"), REJECT("unexpected data after JSON value") },
    { "trailing letters", LIT("{}x"), REJECT("unexpected data after JSON value") },
    { "trailing NUL byte", LIT("[1]\0"), REJECT("unexpected data after JSON value") },
    { "literal with tail", LIT("nulll"), REJECT("unexpected data after JSON value") },
    { "form feed is not whitespace", LIT("\f1"), REJECT("expected a JSON value") },

    /* Numbers. */
    { "NaN", LIT("NaN"), REJECT("NaN") },
    { "Infinity", LIT("Infinity"), REJECT("Infinity") },
    { "-Infinity", LIT("-Infinity"), REJECT("-Infinity") },
    { "leading zero", LIT("01"), REJECT("leading zeros") },
    { "negative leading zero", LIT("-01"), REJECT("leading zeros") },
    { "leading zero in array", LIT("[00]"), REJECT("leading zeros") },
    { "plus sign", LIT("+1"), REJECT("'+'") },
    { "leading dot", LIT(".5"), REJECT("'.'") },
    { "minus dot", LIT("-.5"), REJECT("expected digit after '-'") },
    { "lone minus", LIT("-"), REJECT("expected digit after '-'") },
    { "trailing dot", LIT("1."), REJECT("decimal point") },
    { "dot exponent", LIT("1.e5"), REJECT("decimal point") },
    { "bare exponent", LIT("1e"), REJECT("exponent") },
    { "signed bare exponent", LIT("1e+"), REJECT("exponent") },
    { "exponent letter", LIT("[1Ex]"), REJECT("exponent") },
    { "hex", LIT("0x1F"), REJECT("hexadecimal") },
    { "negative hex", LIT("-0X1"), REJECT("hexadecimal") },

    /* Literals and foreign syntax. */
    { "truncated true", LIT("tru"), REJECT("invalid literal") },
    { "misspelled false", LIT("fals3"), REJECT("invalid literal") },
    { "misspelled null", LIT("[nul]"), REJECT("invalid literal") },
    { "capital True", LIT("True"), REJECT("expected a JSON value") },
    { "undefined", LIT("undefined"), REJECT("expected a JSON value") },
    { "single-quoted string", LIT("'a'"), REJECT("single quotes") },
    { "single-quoted key", LIT("{'a':1}"), REJECT("single quotes") },
    { "line comment", LIT("// c\n1"), REJECT("comments") },
    { "block comment", LIT("[1 /* c */]"), REJECT("comments") },
    { "hash comment", LIT("# c\n1"), REJECT("comments") },
    { "comment after value", LIT("1 // c"), REJECT("comments") },

    /* Structure. */
    { "trailing comma array", LIT("[1,]"), REJECT("trailing comma in array") },
    { "trailing comma object", LIT("{\"a\":1,}"), REJECT("trailing comma in object") },
    { "unquoted key", LIT("{a:1}"), REJECT("double-quoted") },
    { "numeric key", LIT("{1:1}"), REJECT("double-quoted") },
    { "leading comma", LIT("[,1]"), REJECT("expected a JSON value") },
    { "double comma", LIT("[1,,2]"), REJECT("expected a JSON value") },
    { "comma in empty object", LIT("{,}"), REJECT("expected a string key") },
    { "missing comma", LIT("[1 2]"), REJECT("expected ',' or ']'") },
    { "missing member comma", LIT("{\"a\":1 \"b\":2}"), REJECT("expected ',' or '}'") },
    { "missing colon", LIT("{\"a\" 1}"), REJECT("expected ':'") },
    { "key without value", LIT("{\"a\"}"), REJECT("expected ':'") },
    { "colon without value", LIT("{\"a\":}"), REJECT("expected a JSON value") },
    { "mismatched bracket", LIT("[1}"), REJECT("expected ',' or ']'") },
    { "unclosed array", LIT("[1"), REJECT("end of input") },
    { "unclosed empty array", LIT("["), REJECT("end of input") },
    { "unclosed object", LIT("{\"a\":1"), REJECT("end of input") },
    { "object ends after colon", LIT("{\"a\":"), REJECT("end of input") },
    { "stray closer", LIT("]"), REJECT("expected a JSON value") },

    /* Strings. */
    { "unterminated string", LIT("\"abc"), REJECT("unterminated string") },
    { "string ends in backslash", LIT("\"abc\\"), REJECT("unterminated string") },
    { "escaped final quote", LIT("\"abc\\\""), REJECT("unterminated string") },
    { "raw tab", LIT("\"a\tb\""), REJECT("control character") },
    { "raw newline", LIT("\"a\nb\""), REJECT("control character") },
    { "raw NUL", LIT("\"a\0b\""), REJECT("control character") },
    { "raw 0x1F", LIT("\"\x1f\""), REJECT("control character") },
    { "escape x", LIT("\"\\x41\""), REJECT("invalid escape") },
    { "escape a", LIT("\"\\a\""), REJECT("invalid escape") },
    { "escape single quote", LIT("\"\\'\""), REJECT("invalid escape") },
    { "escape NUL byte", LIT("\"\\\0\""), REJECT("invalid escape") },
    { "short \\u", LIT("\"\\u12\""), REJECT("\\u escape") },
    { "bad hex \\u", LIT("\"\\u12G4\""), REJECT("\\u escape") },
    { "uppercase U", LIT("\"\\U00e9\""), REJECT("invalid escape") },
    { "lone high surrogate", LIT("\"\\ud800\""), REJECT("high surrogate") },
    { "high surrogate then text", LIT("\"\\ud800x\""), REJECT("high surrogate") },
    { "high surrogate then BMP", LIT("\"\\ud800\\u0041\""), REJECT("high surrogate") },
    { "two high surrogates", LIT("\"\\ud800\\ud800\""), REJECT("high surrogate") },
    { "high surrogate then \\n", LIT("\"\\uD800\\n\""), REJECT("high surrogate") },
    { "high surrogate then bad \\u", LIT("\"\\ud800\\uZZZZ\""), REJECT("\\u escape") },
    { "lone low surrogate", LIT("\"\\udc00\""), REJECT("low surrogate") },
    { "misordered surrogates", LIT("\"\\udc00\\ud800\""), REJECT("low surrogate") },

    /* UTF-8. */
    { "overlong 2-byte", LIT("\"\xc0\xaf\""), REJECT("invalid UTF-8 sequence (overlong") },
    { "overlong C1", LIT("\"\xc1\xbf\""), REJECT("invalid UTF-8 sequence (overlong") },
    { "overlong 3-byte", LIT("\"\xe0\x80\xaf\""), REJECT("invalid UTF-8 sequence (overlong") },
    { "overlong 4-byte", LIT("\"\xf0\x80\x80\xaf\""), REJECT("invalid UTF-8 sequence (overlong") },
    { "UTF-8 surrogate D800", LIT("\"\xed\xa0\x80\""), REJECT("invalid UTF-8 sequence (encoded UTF-16") },
    { "UTF-8 surrogate DFFF", LIT("\"\xed\xbf\xbf\""), REJECT("invalid UTF-8 sequence (encoded UTF-16") },
    { "above U+10FFFF F4", LIT("\"\xf4\x90\x80\x80\""), REJECT("above U+10FFFF") },
    { "above U+10FFFF F5", LIT("\"\xf5\x80\x80\x80\""), REJECT("above U+10FFFF") },
    { "byte FF", LIT("\"\xff\""), REJECT("invalid UTF-8 sequence") },
    { "lone continuation", LIT("\"\x80\""), REJECT("invalid UTF-8 sequence (unexpected continuation") },
    { "truncated 2-byte", LIT("\"\xc3\""), REJECT("invalid UTF-8 sequence (truncated") },
    { "truncated 3-byte", LIT("\"\xe2\x82\""), REJECT("invalid UTF-8 sequence (truncated") },
    { "truncated 4-byte", LIT("\"\xf0\x9f\x98\""), REJECT("invalid UTF-8 sequence (truncated") },
    { "bad continuation", LIT("\"\xc3" "A\""), REJECT("invalid UTF-8 sequence (truncated") },
    { "truncated at end of input", LIT("\"\xe2\x82"), REJECT("invalid UTF-8 sequence (truncated") },
    { "invalid UTF-8 after value", LIT("[1]\xff"), REJECT("invalid UTF-8 sequence") },
    { "invalid UTF-8 between tokens", LIT("[1,\xc0\x80]"), REJECT("invalid UTF-8 sequence") },
    { "invalid UTF-8 in key", LIT("{\"\xed\xa0\x80\":1}"), REJECT("invalid UTF-8 sequence") },
    { "valid UTF-8 outside string", LIT("\xc3\xa9"), REJECT("expected a JSON value") },

    /* Duplicate names. */
    { "duplicate key", LIT("{\"a\":1,\"a\":2}"), REJECT("duplicate object key") },
    { "duplicate via escape", LIT("{\"a\":1,\"b\":2,\"\\u0061\":3}"), REJECT("duplicate object key") },
    { "duplicate empty key", LIT("{\"\":1,\"\":2}"), REJECT("duplicate object key") },
    { "duplicate nested", LIT("[{\"x\":{\"k\":1,\"k\":1}}]"), REJECT("duplicate object key") },
    { "duplicate in 17 members",
      LIT("{\"a\":0,\"b\":0,\"c\":0,\"d\":0,\"e\":0,\"f\":0,\"g\":0,\"h\":0,\"i\":0,"
          "\"j\":0,\"k\":0,\"l\":0,\"m\":0,\"n\":0,\"o\":0,\"p\":0,\"c\":0}"),
      REJECT("duplicate object key") },
    { "no duplicate in 17 members",
      LIT("{\"a\":0,\"b\":0,\"c\":0,\"d\":0,\"e\":0,\"f\":0,\"g\":0,\"h\":0,\"i\":0,"
          "\"j\":0,\"k\":0,\"l\":0,\"m\":0,\"n\":0,\"o\":0,\"p\":0,\"q\":0}"),
      ACCEPT },
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ---- Helpers --------------------------------------------------------- */

static double now_seconds(void)
{
    struct timespec ts;

    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Parses a copy of input held in a buffer of exactly len bytes. */
static int parse_exact(const char *input, size_t len, const ow_json_limits *lim,
                       ow_json_doc **doc, ow_json_error *err)
{
    char *copy = malloc(len != 0 ? len : 1);
    int rc;

    assert_non_null(copy);
    if (len != 0)
        memcpy(copy, input, len);
    rc = ow_json_parse(copy, len, lim, doc, err);
    free(copy);
    return rc;
}

static const ow_json_node *parse_ok(const char *input, ow_json_doc **doc)
{
    ow_json_error err;
    int rc = parse_exact(input, strlen(input), NULL, doc, &err);

    if (rc != 0)
        print_error("unexpected error at %zu: %s\n", err.offset, err.message);
    assert_int_equal(rc, 0);
    assert_non_null(*doc);
    return ow_json_root(*doc);
}

static void expect_reject(const char *input, size_t len, const ow_json_limits *lim,
                          int code, const char *msg, size_t offset)
{
    ow_json_doc *doc = NULL;
    ow_json_error err;
    int rc = parse_exact(input, len, lim, &doc, &err);

    assert_int_equal(rc, code);
    assert_null(doc);
    if (strstr(err.message, msg) == NULL)
        print_error("message \"%s\" lacks \"%s\"\n", err.message, msg);
    assert_non_null(strstr(err.message, msg));
    assert_int_equal(err.offset, offset);
}

/* Builds {"k0":0,"k1":1,...}; if dup_key is non-NULL the last member is
 * named dup_key and *dup_off receives its offset. */
static char *make_object(size_t members, const char *dup_key, size_t *len, size_t *dup_off)
{
    size_t cap = members * 32 + 64;
    char *buf = malloc(cap);
    size_t n = 0;

    assert_non_null(buf);
    buf[n++] = '{';
    for (size_t i = 0; i < members; i++) {
        int w;

        if (i != 0)
            buf[n++] = ',';
        if (dup_key != NULL && i + 1 == members) {
            *dup_off = n;
            w = snprintf(buf + n, cap - n, "\"%s\":%zu", dup_key, i);
        } else {
            w = snprintf(buf + n, cap - n, "\"k%zu\":%zu", i, i);
        }
        assert_true(w > 0 && (size_t)w < cap - n);
        n += (size_t)w;
    }
    buf[n++] = '}';
    *len = n;
    return buf;
}

static char *make_nested(size_t opens, size_t closes, char open, char close)
{
    char *buf = malloc(opens + closes + 1);

    assert_non_null(buf);
    memset(buf, open, opens);
    memset(buf + opens, close, closes);
    buf[opens + closes] = '\0';
    return buf;
}

/* ---- Table ----------------------------------------------------------- */

static void test_case(void **state)
{
    const json_case *c = *state;
    ow_json_doc *doc = NULL;
    ow_json_error err;
    int rc = parse_exact(c->input, c->len, NULL, &doc, &err);

    if (c->ok) {
        if (rc != 0)
            print_error("rejected at %zu: %s\n", err.offset, err.message);
        assert_int_equal(rc, 0);
        assert_non_null(ow_json_root(doc));
        ow_json_free(&doc);
        return;
    }
    assert_true(rc < 0);
    assert_null(doc);
    assert_true(err.offset <= c->len);
    if (strstr(err.message, c->msg) == NULL)
        print_error("message \"%s\" lacks \"%s\"\n", err.message, c->msg);
    assert_non_null(strstr(err.message, c->msg));
}

/* ---- DOM ------------------------------------------------------------- */

static const char dom_doc[] =
    "{\"order_id\":\"A-1\",\"amount\":19.90,\"neg\":-0,\"big\":1E+2,\"int\":42,"
    "\"items\":[1,\"two\",true,false,null,{}],"
    "\"cafe\":\"caf\\u00e9\",\"emoji\":\"\\ud83d\\ude00\",\"nul\":\"a\\u0000b\","
    "\"esc\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\",\"k\\u00e9y\":1}";

static void test_dom_numbers(void **state)
{
    ow_json_doc *doc = NULL;
    const ow_json_node *root = parse_ok(dom_doc, &doc);
    const ow_json_node *n;

    (void)state;
    assert_int_equal(root->type, OW_JSON_OBJECT);
    assert_int_equal(root->count, 11);
    n = ow_json_member(root, "amount");
    assert_non_null(n);
    assert_int_equal(n->type, OW_JSON_NUMBER);
    assert_string_equal(n->str, "19.90");
    assert_int_equal(n->len, 5);
    assert_false(ow_json_number_is_integer(n));
    n = ow_json_member(root, "neg");
    assert_string_equal(n->str, "-0");
    assert_int_equal(n->len, 2);
    assert_true(ow_json_number_is_integer(n));
    n = ow_json_member(root, "big");
    assert_string_equal(n->str, "1E+2");
    assert_false(ow_json_number_is_integer(n));
    n = ow_json_member(root, "int");
    assert_string_equal(n->str, "42");
    assert_true(ow_json_number_is_integer(n));
    assert_false(ow_json_number_is_integer(ow_json_member(root, "order_id")));
    assert_false(ow_json_number_is_integer(NULL));
    ow_json_free(&doc);
}

static void test_dom_strings(void **state)
{
    ow_json_doc *doc = NULL;
    const ow_json_node *root = parse_ok(dom_doc, &doc);
    const ow_json_node *n;

    (void)state;
    n = ow_json_member(root, "order_id");
    assert_int_equal(n->type, OW_JSON_STRING);
    assert_string_equal(n->str, "A-1");
    n = ow_json_member(root, "cafe");
    assert_int_equal(n->len, 5);
    assert_memory_equal(n->str, "caf\xc3\xa9", 6);
    n = ow_json_member(root, "emoji");
    assert_int_equal(n->len, 4);
    assert_memory_equal(n->str, "\xf0\x9f\x98\x80", 5);
    n = ow_json_member(root, "nul");
    assert_int_equal(n->len, 3);
    assert_memory_equal(n->str, "a\0b\0", 4);
    n = ow_json_member(root, "esc");
    assert_int_equal(n->len, 8);
    assert_memory_equal(n->str, "\"\\/\b\f\n\r\t", 9);
    n = ow_json_member(root, "k\xc3\xa9y");
    assert_non_null(n);
    assert_int_equal(n->key_len, 4);
    assert_string_equal(n->str, "1");
    ow_json_free(&doc);
}

static void test_dom_walk(void **state)
{
    static const ow_json_type want[] = {
        OW_JSON_NUMBER, OW_JSON_STRING, OW_JSON_TRUE, OW_JSON_FALSE, OW_JSON_NULL, OW_JSON_OBJECT
    };
    ow_json_doc *doc = NULL;
    const ow_json_node *root = parse_ok(dom_doc, &doc);
    const ow_json_node *items = ow_json_member(root, "items");
    const ow_json_node *c;
    size_t i = 0;

    (void)state;
    assert_null(root->key);
    assert_null(root->next);
    assert_string_equal(root->first->key, "order_id");
    assert_int_equal(root->first->key_len, 8);
    assert_int_equal(items->type, OW_JSON_ARRAY);
    assert_int_equal(items->count, 6);
    for (c = items->first; c != NULL; c = c->next) {
        assert_true(i < 6);
        assert_int_equal(c->type, want[i]);
        assert_null(c->key);
        i++;
    }
    assert_int_equal(i, 6);
    assert_int_equal(items->first->next->next->next->next->next->count, 0);
    assert_null(items->first->next->next->next->next->next->first);
    assert_null(ow_json_member(root, "missing"));
    assert_null(ow_json_member(root, "amoun"));
    assert_null(ow_json_member(items, "order_id"));
    assert_null(ow_json_member(NULL, "a"));
    ow_json_free(&doc);
}

/* ---- Limits ---------------------------------------------------------- */

static void test_depth_default_limit(void **state)
{
    char *at = make_nested(64, 64, '[', ']');
    char *past = make_nested(65, 65, '[', ']');
    ow_json_doc *doc = NULL;

    (void)state;
    parse_ok(at, &doc);
    ow_json_free(&doc);
    expect_reject(past, 130, NULL, OW_JSON_ERR_LIMIT, "nesting deeper than 64", 64);
    free(at);
    free(past);
}

static void test_depth_custom_limit(void **state)
{
    ow_json_limits lim = { .max_depth = 3, .max_nodes = 0 };
    ow_json_doc *doc = NULL;
    ow_json_error err;
    static const char ok[] = "{\"a\":[{\"b\":1}]}";
    static const char bad[] = "{\"a\":[{\"b\":{}}]}";

    (void)state;
    assert_int_equal(parse_exact(ok, strlen(ok), &lim, &doc, &err), 0);
    ow_json_free(&doc);
    expect_reject(bad, strlen(bad), &lim, OW_JSON_ERR_LIMIT, "nesting deeper than 3", 11);
    /* Scalars do not count as nesting. */
    lim.max_depth = 1;
    assert_int_equal(parse_exact(LIT("[1,\"x\",null]"), &lim, &doc, &err), 0);
    ow_json_free(&doc);
    expect_reject(LIT("[[]]"), &lim, OW_JSON_ERR_LIMIT, "nesting deeper than 1", 1);
}

static void test_deep_input_rejected_fast(void **state)
{
    size_t n = (size_t)1 << 20;
    char *buf = make_nested(n, 0, '[', ']');
    double t0 = now_seconds();

    (void)state;
    expect_reject(buf, n, NULL, OW_JSON_ERR_LIMIT, "nesting deeper than 64", 64);
    assert_true(now_seconds() - t0 < 0.5);
    free(buf);
}

/* With the limit raised the parser must still not recurse. */
static void test_deep_input_iterative(void **state)
{
    size_t half = (size_t)1 << 19;
    char *buf = make_nested(half, half, '[', ']');
    ow_json_limits lim = { .max_depth = SIZE_MAX, .max_nodes = 0 };
    ow_json_doc *doc = NULL;
    ow_json_error err;
    const ow_json_node *n;
    size_t depth = 0;

    (void)state;
    assert_int_equal(ow_json_parse(buf, 2 * half, &lim, &doc, &err), 0);
    for (n = ow_json_root(doc); n != NULL; n = n->first)
        depth++;
    assert_int_equal(depth, half);
    ow_json_free(&doc);
    expect_reject(buf, 2 * half - 1, &lim, OW_JSON_ERR_SYNTAX, "end of input", 2 * half - 1);
    free(buf);
}

static void test_max_nodes(void **state)
{
    static const char in[] = "{\"a\":[1,2],\"b\":null}";
    ow_json_limits lim = { .max_depth = 0, .max_nodes = 5 };
    ow_json_doc *doc = NULL;
    ow_json_error err;

    (void)state;
    assert_int_equal(parse_exact(in, strlen(in), &lim, &doc, &err), 0);
    ow_json_free(&doc);
    lim.max_nodes = 4;
    expect_reject(in, strlen(in), &lim, OW_JSON_ERR_LIMIT, "more than 4 values", 15);
    lim.max_nodes = 1;
    assert_int_equal(parse_exact(LIT("\"x\""), &lim, &doc, &err), 0);
    ow_json_free(&doc);
    expect_reject(LIT("[1]"), &lim, OW_JSON_ERR_LIMIT, "more than 1 values", 1);
}

/* ---- Large objects --------------------------------------------------- */

static void test_large_object_distinct(void **state)
{
    size_t len = 0;
    char *buf = make_object(200000, NULL, &len, NULL);
    ow_json_doc *doc = NULL;
    ow_json_error err;
    double t0 = now_seconds();
    int rc = ow_json_parse(buf, len, NULL, &doc, &err);
    double dt = now_seconds() - t0;
    const ow_json_node *n;

    (void)state;
    free(buf);
    assert_int_equal(rc, 0);
    print_message("200000 distinct members parsed in %.3f s\n", dt);
    assert_int_equal(ow_json_root(doc)->count, 200000);
    n = ow_json_member(ow_json_root(doc), "k199999");
    assert_non_null(n);
    assert_string_equal(n->str, "199999");
    ow_json_free(&doc);
    assert_true(dt < 1.0);
}

static void test_large_object_duplicate(void **state)
{
    size_t len = 0;
    size_t dup_off = 0;
    char *buf = make_object(200000, "k123", &len, &dup_off);
    double t0 = now_seconds();
    double dt;

    (void)state;
    expect_reject(buf, len, NULL, OW_JSON_ERR_SYNTAX, "duplicate object key", dup_off);
    dt = now_seconds() - t0;
    free(buf);
    print_message("200000 members with a duplicate rejected in %.3f s\n", dt);
    assert_true(dt < 1.0);
}

/* ---- Buffers and API edges ------------------------------------------- */

static void test_prefix_of_larger_buffer(void **state)
{
    static const char big[] = "[1,2]garbage";
    static const char num[] = "12345";
    ow_json_doc *doc = NULL;
    ow_json_error err;
    const ow_json_node *n;

    (void)state;
    assert_int_equal(ow_json_parse(big, 5, NULL, &doc, &err), 0);
    assert_int_equal(ow_json_root(doc)->count, 2);
    ow_json_free(&doc);
    assert_int_equal(ow_json_parse(num, 2, NULL, &doc, &err), 0);
    n = ow_json_root(doc);
    assert_int_equal(n->len, 2);
    assert_string_equal(n->str, "12");
    ow_json_free(&doc);
    assert_int_equal(ow_json_parse("truex", 4, NULL, &doc, &err), 0);
    assert_int_equal(ow_json_root(doc)->type, OW_JSON_TRUE);
    ow_json_free(&doc);
    expect_reject("\"abc\"", 4, NULL, OW_JSON_ERR_SYNTAX, "unterminated string", 0);
    expect_reject("1.5", 2, NULL, OW_JSON_ERR_SYNTAX, "decimal point", 2);
    expect_reject("[1,2]", 4, NULL, OW_JSON_ERR_SYNTAX, "end of input", 4);
}

static void test_error_offsets(void **state)
{
    (void)state;
    expect_reject(LIT("[1,]"), NULL, OW_JSON_ERR_SYNTAX, "trailing comma", 3);
    expect_reject(LIT("{\"a\":1,\"a\":2}"), NULL, OW_JSON_ERR_SYNTAX, "duplicate", 7);
    expect_reject(LIT("{\"b\":1,\"a\":1,\"b\":1,\"a\":1}"), NULL, OW_JSON_ERR_SYNTAX,
                  "duplicate", 13);
    expect_reject(LIT("\"ab\x01\""), NULL, OW_JSON_ERR_SYNTAX, "control", 3);
    expect_reject(LIT("  x"), NULL, OW_JSON_ERR_SYNTAX, "found 'x'", 2);
    expect_reject(LIT("[1]\xff"), NULL, OW_JSON_ERR_SYNTAX, "UTF-8", 3);
    expect_reject(LIT("\"x\\ud800\""), NULL, OW_JSON_ERR_SYNTAX, "high surrogate", 2);
    expect_reject(LIT("{\"a\":01}"), NULL, OW_JSON_ERR_SYNTAX, "leading zeros", 5);
}

static void test_api_edges(void **state)
{
    ow_json_doc *doc = NULL;
    ow_json_error err;

    (void)state;
    ow_json_free(NULL);
    ow_json_free(&doc);
    assert_null(ow_json_root(NULL));
    assert_int_equal(ow_json_parse("1", 1, NULL, NULL, &err), OW_JSON_ERR_ARG);
    assert_int_equal(ow_json_parse(NULL, 1, NULL, &doc, &err), OW_JSON_ERR_ARG);
    assert_null(doc);
    assert_int_equal(ow_json_parse(NULL, 0, NULL, &doc, &err), OW_JSON_ERR_SYNTAX);
    assert_string_equal(err.message, "empty input");
    assert_int_equal(ow_json_parse("[x]", 3, NULL, &doc, NULL), OW_JSON_ERR_SYNTAX);
    assert_int_equal(ow_json_parse("[1]", 3, NULL, &doc, NULL), 0);
    assert_non_null(doc);
    ow_json_free(&doc);
    assert_null(doc);
}

/* ---- Parsing again into one document ---------------------------------- */

/* Two DOMs are the same tree: types, names, strings and lexemes. */
static void same_tree(const ow_json_node *a, const ow_json_node *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->len, b->len);
    assert_int_equal(a->key_len, b->key_len);
    assert_int_equal(a->count, b->count);
    assert_true((a->str == NULL) == (b->str == NULL));
    if (a->str != NULL)
        assert_memory_equal(a->str, b->str, a->len + 1);
    assert_true((a->key == NULL) == (b->key == NULL));
    if (a->key != NULL)
        assert_memory_equal(a->key, b->key, a->key_len + 1);
    for (a = a->first, b = b->first; a != NULL || b != NULL; a = a->next, b = b->next) {
        assert_true(a != NULL && b != NULL);
        same_tree(a, b);
    }
}

/* Every row of the table, and a document of 5,000 members (more than the
 * block a document keeps), parsed again and again into one document, in
 * turn: each gives what a fresh parse gives, tree, code, message and
 * offset, whatever the document held before. */
static void test_reparse_matches_parse(void **state)
{
    ow_json_doc *reused = NULL;
    size_t big_len = 0, unused = 0;
    char *big = make_object(5000, NULL, &big_len, &unused);

    (void)state;
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i <= N_CASES; i++) {
            const char *in = i < N_CASES ? cases[i].input : big;
            size_t len = i < N_CASES ? cases[i].len : big_len;
            char *copy = malloc(len != 0 ? len : 1);
            ow_json_doc *fresh = NULL;
            ow_json_error e1, e2;
            int rc1, rc2;

            assert_non_null(copy);
            memcpy(copy, in, len);
            rc1 = ow_json_parse(copy, len, NULL, &fresh, &e1);
            rc2 = ow_json_reparse(copy, len, NULL, &reused, &e2);
            assert_int_equal(rc2, rc1);
            assert_non_null(reused);
            if (rc1 == 0) {
                same_tree(ow_json_root(fresh), ow_json_root(reused));
            } else {
                assert_null(ow_json_root(reused));
                assert_string_equal(e2.message, e1.message);
                assert_int_equal(e2.offset, e1.offset);
            }
            ow_json_free(&fresh);
            free(copy);
        }
    }
    ow_json_free(&reused);
    free(big);
}

/* Strings with a plain start and then an escape, a multi-byte character or
 * a control byte at every position decode as the escape says, or fail
 * where the byte is. */
static void test_plain_then_special(void **state)
{
    static const struct {
        const char *tail; /* raw JSON after the plain part, before the quote */
        const char *want; /* decoded, NULL: rejected */
        size_t want_len;
    } tails[] = {{"\\n", "\n", 1},
                 {"\\u00e9", "\xc3\xa9", 2},
                 {"\xc3\xa9", "\xc3\xa9", 2},
                 {"\\\"", "\"", 1},
                 {"\x01", NULL, 0},
                 {"\xc3", NULL, 0},
                 {"\\ud83d\\ude00", "\xf0\x9f\x98\x80", 4}};
    char in[64], want[64];

    (void)state;
    for (size_t t = 0; t < sizeof(tails) / sizeof(tails[0]); t++) {
        for (size_t plain = 0; plain < 6; plain++) {
            ow_json_doc *doc = NULL;
            ow_json_error err;
            int n = snprintf(in, sizeof(in), "[\"%.*s%sz\"]", (int)plain, "abcdef", tails[t].tail);
            int rc = parse_exact(in, (size_t)n, NULL, &doc, &err);
            const ow_json_node *s;

            if (tails[t].want == NULL) {
                assert_true(rc < 0);
                assert_int_equal(err.offset, 2 + plain);
                continue;
            }
            assert_int_equal(rc, 0);
            s = ow_json_root(doc)->first;
            memcpy(want, "abcdef", plain);
            memcpy(want + plain, tails[t].want, tails[t].want_len);
            want[plain + tails[t].want_len] = 'z';
            assert_int_equal(s->len, plain + tails[t].want_len + 1);
            assert_memory_equal(s->str, want, s->len);
            assert_int_equal(s->str[s->len], '\0');
            ow_json_free(&doc);
        }
    }
}

/* ---- Runner ---------------------------------------------------------- */

static int run_table(void)
{
    struct CMUnitTest *tests = calloc(N_CASES, sizeof(*tests));
    int failed;

    if (tests == NULL)
        return 1;
    for (size_t i = 0; i < N_CASES; i++) {
        tests[i].name = cases[i].name;
        tests[i].test_func = test_case;
        tests[i].initial_state = &cases[i];
    }
    failed = _cmocka_run_group_tests("json_table", tests, N_CASES, NULL, NULL);
    free(tests);
    return failed;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dom_numbers),
        cmocka_unit_test(test_reparse_matches_parse),
        cmocka_unit_test(test_plain_then_special),
        cmocka_unit_test(test_dom_strings),
        cmocka_unit_test(test_dom_walk),
        cmocka_unit_test(test_depth_default_limit),
        cmocka_unit_test(test_depth_custom_limit),
        cmocka_unit_test(test_deep_input_rejected_fast),
        cmocka_unit_test(test_deep_input_iterative),
        cmocka_unit_test(test_max_nodes),
        cmocka_unit_test(test_large_object_distinct),
        cmocka_unit_test(test_large_object_duplicate),
        cmocka_unit_test(test_prefix_of_larger_buffer),
        cmocka_unit_test(test_error_offsets),
        cmocka_unit_test(test_api_edges),
    };
    int failed = run_table();

    failed += cmocka_run_group_tests_name("json_dom_limits", tests, NULL, NULL);
    return failed != 0;
}
