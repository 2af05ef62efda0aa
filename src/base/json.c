/*
 * Strict, bounded JSON parser (RFC 8259), and the JSON string writer at the
 * end; see include/base/ow/json.h.
 *
 * The parser is a loop over an explicit stack of open containers, so the
 * C stack depth is constant whatever the input.  The container stack grows
 * on demand and never beyond max_depth frames.  Nodes and strings come from
 * an arena of large blocks owned by the document.  Duplicate member names
 * are detected when an object closes: small objects are compared pairwise,
 * larger ones through a sorted array of child pointers (O(n log n)).
 */
#include "ow/json.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ow/util.h"

#define OW_JSON_DEFAULT_DEPTH 64
#define OW_JSON_BLOCK_MIN ((size_t)64 * 1024)
#define OW_JSON_BLOCK_MAX ((size_t)1024 * 1024)
#define OW_JSON_STACK_MIN 16
/* Objects up to this many members are checked for duplicates pairwise. */
#define OW_JSON_DUP_LINEAR_MAX 16

/* A node plus the input offset of its member name, used to report where a
 * duplicate name appears.  The public node is the first member, so a
 * pointer to it converts back to the enclosing struct. */
typedef struct ow_json_inode {
    ow_json_node pub;
    size_t key_off;
} ow_json_inode;

typedef struct ow_json_block ow_json_block;
struct ow_json_block {
    ow_json_block *next;
    size_t cap;  /* payload bytes */
    size_t used; /* payload bytes handed out */
};

struct ow_json_doc {
    ow_json_node *root;
    ow_json_block *blocks; /* the block serving small allocations is first */
    size_t next_block;     /* payload size of the next ordinary block */
    /* The parser's stacks, kept with the document so that a document
     * parsed again (ow_json_reparse) reuses them. */
    struct ow_json_frame *stack;
    size_t stack_cap;
    const struct ow_json_inode **scratch;
    size_t scratch_cap;
};

typedef struct ow_json_frame {
    ow_json_node *node; /* the open array or object */
    ow_json_node *last; /* its last child so far, or NULL */
} ow_json_frame;

typedef struct {
    const unsigned char *buf;
    size_t len;
    size_t pos;
    size_t max_depth;
    size_t max_nodes;
    size_t nodes;
    ow_json_doc *doc; /* owns the stack and the scratch */
    size_t depth;
    const char *key; /* member name waiting for its value */
    size_t key_len;
    size_t key_off;
    ow_json_error *err;
} ow_json_parser;

/* ---- Errors ---------------------------------------------------------- */

static int fail(ow_json_parser *p, int code, size_t off, const char *msg)
{
    p->err->offset = off;
    snprintf(p->err->message, sizeof(p->err->message), "%s", msg);
    return code;
}

static int fail_syntax(ow_json_parser *p, size_t off, const char *msg)
{
    return fail(p, OW_JSON_ERR_SYNTAX, off, msg);
}

static int fail_nomem(ow_json_parser *p)
{
    return fail(p, OW_JSON_ERR_NOMEM, p->pos, "out of memory");
}

/* ---- Arena ----------------------------------------------------------- */

static size_t block_header_size(void)
{
    size_t a = alignof(max_align_t);

    return (sizeof(ow_json_block) + a - 1) / a * a;
}

static unsigned char *block_data(ow_json_block *b)
{
    return (unsigned char *)b + block_header_size();
}

static ow_json_block *block_new(size_t cap)
{
    ow_json_block *b;

    if (cap > SIZE_MAX - block_header_size())
        return NULL;
    b = malloc(block_header_size() + cap);
    if (b == NULL)
        return NULL;
    b->next = NULL;
    b->cap = cap;
    b->used = 0;
    return b;
}

/* Requests larger than an ordinary block get a block of their own, linked
 * behind the current block so that its free space is not abandoned. */
static void *arena_alloc_slow(ow_json_doc *doc, size_t size)
{
    ow_json_block *b;

    if (size > doc->next_block) {
        b = block_new(size);
        if (b == NULL)
            return NULL;
        if (doc->blocks == NULL) {
            doc->blocks = b;
        } else {
            b->next = doc->blocks->next;
            doc->blocks->next = b;
        }
    } else {
        b = block_new(doc->next_block);
        if (b == NULL)
            return NULL;
        b->next = doc->blocks;
        doc->blocks = b;
        if (doc->next_block < OW_JSON_BLOCK_MAX)
            doc->next_block *= 2;
    }
    b->used = size;
    return block_data(b);
}

/* align must be a power of two no larger than alignof(max_align_t). */
static void *arena_alloc(ow_json_doc *doc, size_t size, size_t align)
{
    ow_json_block *b = doc->blocks;

    if (b != NULL && b->used <= SIZE_MAX - (align - 1)) {
        size_t start = (b->used + align - 1) & ~(align - 1);

        if (start <= b->cap && size <= b->cap - start) {
            b->used = start + size;
            return block_data(b) + start;
        }
    }
    return arena_alloc_slow(doc, size);
}

static ow_json_doc *doc_new(void)
{
    ow_json_doc *doc = malloc(sizeof(*doc));

    if (doc == NULL)
        return NULL;
    doc->root = NULL;
    doc->blocks = NULL;
    doc->next_block = OW_JSON_BLOCK_MIN;
    doc->stack = NULL;
    doc->stack_cap = 0;
    doc->scratch = NULL;
    doc->scratch_cap = 0;
    return doc;
}

/* The most scratch entries a document keeps for its next parse. */
#define OW_JSON_SCRATCH_KEEP 1024

/* Empties a document for another parse: one ordinary block of the first
 * size stays (the one a message of usual size fits in), every other block
 * goes, and so does a scratch array grown by an unusually large object. */
static void doc_reset(ow_json_doc *doc)
{
    ow_json_block *keep = NULL;
    ow_json_block *b = doc->blocks;

    while (b != NULL) {
        ow_json_block *next = b->next;

        if (keep == NULL && b->cap == OW_JSON_BLOCK_MIN) {
            keep = b;
            keep->next = NULL;
            keep->used = 0;
        } else {
            free(b);
        }
        b = next;
    }
    doc->blocks = keep;
    doc->next_block = keep != NULL ? 2 * OW_JSON_BLOCK_MIN : OW_JSON_BLOCK_MIN;
    doc->root = NULL;
    if (doc->scratch_cap > OW_JSON_SCRATCH_KEEP) {
        free(doc->scratch);
        doc->scratch = NULL;
        doc->scratch_cap = 0;
    }
}

/* ---- Character helpers ----------------------------------------------- */

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool at_end(const ow_json_parser *p)
{
    return p->pos >= p->len;
}

static unsigned char cur(const ow_json_parser *p)
{
    return p->buf[p->pos];
}

static void skip_ws(ow_json_parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->buf[p->pos];

        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return;
        p->pos++;
    }
}

static bool has_prefix(const ow_json_parser *p, size_t at, const char *lit)
{
    size_t n = strlen(lit);

    return at <= p->len && n <= p->len - at && memcmp(p->buf + at, lit, n) == 0;
}

/* ---- UTF-8 ----------------------------------------------------------- */

static bool is_cont(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

/* Checks one UTF-8 sequence at s[0..n) (n >= 1) following Unicode Table 3-7.
 * Returns its length, or 0 and sets *why. */
static size_t utf8_seq(const unsigned char *s, size_t n, const char **why)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;

    if (c < 0x80)
        return 1;
    if (c < 0xC0) {
        *why = "invalid UTF-8 sequence (unexpected continuation byte)";
        return 0;
    }
    if (c < 0xC2) {
        *why = "invalid UTF-8 sequence (overlong encoding)";
        return 0;
    }
    if (c > 0xF4) {
        *why = c < 0xF8 ? "invalid UTF-8 sequence (code point above U+10FFFF)"
                        : "invalid UTF-8 sequence (invalid lead byte)";
        return 0;
    }
    need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (n < 2 || !is_cont(s[1])) {
        *why = "invalid UTF-8 sequence (truncated)";
        return 0;
    }
    if (s[1] < lo) {
        *why = "invalid UTF-8 sequence (overlong encoding)";
        return 0;
    }
    if (s[1] > hi) {
        *why = c == 0xED ? "invalid UTF-8 sequence (encoded UTF-16 surrogate)"
                         : "invalid UTF-8 sequence (code point above U+10FFFF)";
        return 0;
    }
    for (size_t i = 2; i < need; i++) {
        if (i >= n || !is_cont(s[i])) {
            *why = "invalid UTF-8 sequence (truncated)";
            return 0;
        }
    }
    return need;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Reports an unexpected byte at p->pos.  Non-ASCII bytes are first checked
 * as UTF-8 so that invalid UTF-8 anywhere is reported as such, and comment
 * openers get their own message. */
static int fail_unexpected(ow_json_parser *p, const char *msg)
{
    unsigned char c = cur(p);
    char buf[sizeof(p->err->message)];
    const char *why = NULL;

    if (c >= 0x80 && utf8_seq(p->buf + p->pos, p->len - p->pos, &why) == 0)
        return fail_syntax(p, p->pos, why);
    if (c == '/' || c == '#')
        return fail_syntax(p, p->pos, "comments are not allowed");
    if (c > 0x20 && c < 0x7F)
        snprintf(buf, sizeof(buf), "%s, found '%c'", msg, (char)c);
    else
        snprintf(buf, sizeof(buf), "%s, found byte 0x%02X", msg, (unsigned)c);
    return fail_syntax(p, p->pos, buf);
}

/* ---- Strings --------------------------------------------------------- */

/* Index of the closing quote of the string whose body starts at i, or len. */
static size_t string_end(const ow_json_parser *p, size_t i)
{
    while (i < p->len) {
        unsigned char c = p->buf[i];

        if (c == '"')
            return i;
        if (c == '\\' && p->len - i < 2)
            return p->len;
        i += c == '\\' ? 2 : 1;
    }
    return p->len;
}

static int hex4(const unsigned char *s, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        uint32_t d;

        if (is_digit(c))
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* Reads \uXXXX at s[i..end); returns 0 and the code unit, or -1. */
static int read_u_escape(const ow_json_parser *p, size_t i, size_t end, uint32_t *cu)
{
    if (end - i < 6 || p->buf[i] != '\\' || p->buf[i + 1] != 'u')
        return -1;
    return hex4(p->buf + i + 2, cu);
}

/* Decodes the \u escape (or surrogate pair) at *i into out; advances *i. */
static int decode_u(ow_json_parser *p, size_t *i, size_t end, char *out, size_t *o)
{
    uint32_t cu;
    uint32_t lo;
    size_t at = *i;

    if (read_u_escape(p, at, end, &cu) != 0)
        return fail_syntax(p, at, "invalid \\u escape (expected 4 hex digits)");
    if (cu >= 0xDC00 && cu <= 0xDFFF)
        return fail_syntax(p, at, "unpaired UTF-16 low surrogate in \\u escape");
    if (cu < 0xD800 || cu > 0xDBFF) {
        *o += utf8_encode(cu, out + *o);
        *i = at + 6;
        return 0;
    }
    if (end - at >= 8 && p->buf[at + 6] == '\\' && p->buf[at + 7] == 'u' &&
        read_u_escape(p, at + 6, end, &lo) != 0)
        return fail_syntax(p, at + 6, "invalid \\u escape (expected 4 hex digits)");
    if (read_u_escape(p, at + 6, end, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
        return fail_syntax(p, at, "unpaired UTF-16 high surrogate in \\u escape");
    *o += utf8_encode(0x10000 + ((cu - 0xD800) << 10) + (lo - 0xDC00), out + *o);
    *i = at + 12;
    return 0;
}

static int decode_escape(ow_json_parser *p, size_t *i, size_t end, char *out, size_t *o)
{
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    const char *hit;
    unsigned char c;

    /* A backslash can only end the body when the closing quote is missing;
     * p->pos is still at the opening quote. */
    if (end - *i < 2)
        return fail_syntax(p, p->pos, "unterminated string");
    c = p->buf[*i + 1];
    if (c == 'u')
        return decode_u(p, i, end, out, o);
    hit = c != '\0' ? strchr(from, c) : NULL;
    if (hit == NULL)
        return fail_syntax(p, *i, "invalid escape sequence in string");
    out[(*o)++] = to[hit - from];
    *i += 2;
    return 0;
}

/* Validates and copies one raw UTF-8 sequence at *i. */
static int copy_utf8(ow_json_parser *p, size_t *i, size_t end, char *out, size_t *o)
{
    const char *why = NULL;
    size_t n = utf8_seq(p->buf + *i, end - *i, &why);

    if (n == 0)
        return fail_syntax(p, *i, why);
    memcpy(out + *o, p->buf + *i, n);
    *o += n;
    *i += n;
    return 0;
}

/* Decodes the string body buf[start..end) into out; returns its length. */
static int decode_string(ow_json_parser *p, size_t start, size_t end, char *out, size_t *len)
{
    size_t i = start;
    size_t o = 0;
    int rc = 0;

    while (i < end && rc == 0) {
        unsigned char c = p->buf[i];

        if (c >= 0x20 && c < 0x80 && c != '\\') {
            out[o++] = (char)c;
            i++;
        } else if (c < 0x20) {
            rc = fail_syntax(p, i, "unescaped control character in string");
        } else if (c == '\\') {
            rc = decode_escape(p, &i, end, out, &o);
        } else {
            rc = copy_utf8(p, &i, end, out, &o);
        }
    }
    out[o] = '\0';
    *len = o;
    return rc;
}

/* A string with escapes, control characters or non-ASCII bytes. */
static int parse_escaped_string(ow_json_parser *p, const char **str, size_t *len)
{
    size_t open = p->pos;
    size_t end = string_end(p, open + 1);
    size_t raw = end - (open + 1);
    char *out;
    int rc;

    if (raw == SIZE_MAX)
        return fail_nomem(p);
    out = arena_alloc(p->doc, raw + 1, 1);
    if (out == NULL)
        return fail_nomem(p);
    rc = decode_string(p, open + 1, end, out, len);
    if (rc != 0)
        return rc;
    if (end == p->len)
        return fail_syntax(p, open, "unterminated string");
    *str = out;
    p->pos = end + 1;
    return 0;
}

/* The end of a plain string body from i: printable ASCII without escapes,
 * which is what nearly every member name and value of a message is. */
static size_t plain_end(const ow_json_parser *p, size_t i)
{
    while (i < p->len) {
        unsigned char c = p->buf[i];

        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
            break;
        i++;
    }
    return i;
}

/* Parses the string starting at the opening quote at p->pos.  A plain
 * string is copied as it is in one pass; any other is checked and decoded.
 * The decoded form is never longer than the raw body, so the raw length
 * sizes it. */
static int parse_string(ow_json_parser *p, const char **str, size_t *len)
{
    size_t plain = plain_end(p, p->pos + 1);

    if (plain < p->len && p->buf[plain] == '"') {
        size_t n = plain - (p->pos + 1);
        char *out = arena_alloc(p->doc, n + 1, 1);

        if (out == NULL)
            return fail_nomem(p);
        memcpy(out, p->buf + p->pos + 1, n);
        out[n] = '\0';
        *str = out;
        *len = n;
        p->pos = plain + 1;
        return 0;
    }
    return parse_escaped_string(p, str, len);
}
/* ---- Numbers and literals -------------------------------------------- */

static size_t skip_digits(const ow_json_parser *p, size_t i)
{
    while (i < p->len && is_digit(p->buf[i]))
        i++;
    return i;
}

static int scan_int_part(ow_json_parser *p, size_t *i)
{
    size_t at = *i;

    if (at < p->len && p->buf[at] == '-') {
        at++;
        if (at < p->len && p->buf[at] == 'I')
            return fail_syntax(p, p->pos, "-Infinity is not valid JSON");
        if (at >= p->len || !is_digit(p->buf[at]))
            return fail_syntax(p, at, "expected digit after '-'");
    }
    if (p->buf[at] != '0') {
        *i = skip_digits(p, at);
        return 0;
    }
    at++;
    if (at < p->len && is_digit(p->buf[at]))
        return fail_syntax(p, at - 1, "leading zeros are not allowed in numbers");
    if (at < p->len && (p->buf[at] == 'x' || p->buf[at] == 'X'))
        return fail_syntax(p, at - 1, "hexadecimal numbers are not allowed");
    *i = at;
    return 0;
}

/* Validates the number grammar at p->pos; sets *end past the lexeme. */
static int scan_number(ow_json_parser *p, size_t *end)
{
    size_t i = p->pos;
    int rc = scan_int_part(p, &i);

    if (rc != 0)
        return rc;
    if (i < p->len && p->buf[i] == '.') {
        i++;
        if (i >= p->len || !is_digit(p->buf[i]))
            return fail_syntax(p, i, "expected digit after decimal point");
        i = skip_digits(p, i);
    }
    if (i < p->len && (p->buf[i] == 'e' || p->buf[i] == 'E')) {
        i++;
        if (i < p->len && (p->buf[i] == '+' || p->buf[i] == '-'))
            i++;
        if (i >= p->len || !is_digit(p->buf[i]))
            return fail_syntax(p, i, "expected digit in exponent");
        i = skip_digits(p, i);
    }
    *end = i;
    return 0;
}

static int parse_number(ow_json_parser *p, ow_json_node *n)
{
    size_t end = 0;
    size_t lex;
    char *out;
    int rc = scan_number(p, &end);

    if (rc != 0)
        return rc;
    lex = end - p->pos;
    out = arena_alloc(p->doc, lex + 1, 1);
    if (out == NULL)
        return fail_nomem(p);
    memcpy(out, p->buf + p->pos, lex);
    out[lex] = '\0';
    n->str = out;
    n->len = lex;
    p->pos = end;
    return 0;
}

static int parse_literal(ow_json_parser *p, const char *lit, const char *msg)
{
    if (!has_prefix(p, p->pos, lit))
        return fail_syntax(p, p->pos, msg);
    p->pos += strlen(lit);
    return 0;
}

/* ---- Nodes and containers -------------------------------------------- */

static void attach(ow_json_parser *p, ow_json_inode *in)
{
    ow_json_node *n = &in->pub;
    ow_json_frame *f;

    if (p->depth == 0) {
        p->doc->root = n;
        return;
    }
    f = &p->doc->stack[p->depth - 1];
    if (f->node->type == OW_JSON_OBJECT) {
        n->key = p->key;
        n->key_len = p->key_len;
        in->key_off = p->key_off;
    }
    if (f->last != NULL)
        f->last->next = n;
    else
        f->node->first = n;
    f->last = n;
    f->node->count++;
}

static int new_node(ow_json_parser *p, ow_json_type type, ow_json_node **out)
{
    ow_json_inode *in;
    char msg[sizeof(p->err->message)];

    if (p->max_nodes != 0 && p->nodes >= p->max_nodes) {
        snprintf(msg, sizeof(msg), "more than %zu values", p->max_nodes);
        return fail(p, OW_JSON_ERR_LIMIT, p->pos, msg);
    }
    in = arena_alloc(p->doc, sizeof(*in), alignof(ow_json_inode));
    if (in == NULL)
        return fail_nomem(p);
    memset(in, 0, sizeof(*in));
    in->pub.type = type;
    attach(p, in);
    p->nodes++;
    *out = &in->pub;
    return 0;
}

static int grow_stack(ow_json_parser *p)
{
    ow_json_doc *d = p->doc;
    size_t cap = d->stack_cap == 0 ? OW_JSON_STACK_MIN : d->stack_cap;
    ow_json_frame *s;

    if (d->stack_cap != 0)
        cap = cap <= SIZE_MAX / 2 ? cap * 2 : SIZE_MAX;
    if (cap > p->max_depth)
        cap = p->max_depth;
    if (cap > SIZE_MAX / sizeof(*s))
        return fail_nomem(p);
    s = realloc(d->stack, cap * sizeof(*s));
    if (s == NULL)
        return fail_nomem(p);
    d->stack = s;
    d->stack_cap = cap;
    return 0;
}

static int open_container(ow_json_parser *p, ow_json_type type)
{
    ow_json_node *n = NULL;
    char msg[sizeof(p->err->message)];
    int rc;

    if (p->depth >= p->max_depth) {
        snprintf(msg, sizeof(msg), "nesting deeper than %zu", p->max_depth);
        return fail(p, OW_JSON_ERR_LIMIT, p->pos, msg);
    }
    if (p->depth == p->doc->stack_cap) {
        rc = grow_stack(p);
        if (rc != 0)
            return rc;
    }
    rc = new_node(p, type, &n);
    if (rc != 0)
        return rc;
    p->doc->stack[p->depth].node = n;
    p->doc->stack[p->depth].last = NULL;
    p->depth++;
    p->pos++;
    return 0;
}

/* ---- Duplicate member names ------------------------------------------ */

static int key_cmp(const ow_json_node *a, const ow_json_node *b)
{
    size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->key, b->key, n);

    if (c != 0)
        return c;
    return (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

/* Orders by name, then by position, so equal names sit in input order. */
static int inode_cmp(const void *pa, const void *pb)
{
    const ow_json_inode *a = *(const ow_json_inode *const *)pa;
    const ow_json_inode *b = *(const ow_json_inode *const *)pb;
    int c = key_cmp(&a->pub, &b->pub);

    if (c != 0)
        return c;
    return (a->key_off > b->key_off) - (a->key_off < b->key_off);
}

static int fail_duplicate(ow_json_parser *p, size_t off)
{
    return fail_syntax(p, off, "duplicate object key");
}

static int check_dups_small(ow_json_parser *p, const ow_json_node *obj)
{
    for (const ow_json_node *b = obj->first; b != NULL; b = b->next) {
        for (const ow_json_node *a = obj->first; a != b; a = a->next) {
            if (key_cmp(a, b) == 0)
                return fail_duplicate(p, ((const ow_json_inode *)b)->key_off);
        }
    }
    return 0;
}

static int reserve_scratch(ow_json_parser *p, size_t count)
{
    if (ow_grow((void **)&p->doc->scratch, &p->doc->scratch_cap, count, sizeof(*p->doc->scratch)) !=
        OW_OK)
        return fail_nomem(p);
    return 0;
}

/* Reports the earliest second occurrence of any name, like the pairwise
 * check does, so the error offset does not depend on the object's size. */
static int check_dups_sorted(ow_json_parser *p, const ow_json_node *obj)
{
    size_t n = 0;
    size_t best = SIZE_MAX;
    int rc = reserve_scratch(p, obj->count);
    const ow_json_inode **sorted;

    if (rc != 0)
        return rc;
    sorted = p->doc->scratch;
    for (const ow_json_node *c = obj->first; c != NULL; c = c->next)
        sorted[n++] = (const ow_json_inode *)c;
    qsort(sorted, n, sizeof(*sorted), inode_cmp);
    for (size_t i = 1; i < n; i++) {
        const ow_json_inode *prev = sorted[i - 1];
        const ow_json_inode *c = sorted[i];

        if (key_cmp(&prev->pub, &c->pub) == 0 && c->key_off < best)
            best = c->key_off;
    }
    if (best != SIZE_MAX)
        return fail_duplicate(p, best);
    return 0;
}

/* Pops the innermost container; p->pos is at its closing bracket. */
static int close_container(ow_json_parser *p)
{
    const ow_json_node *n = p->doc->stack[p->depth - 1].node;
    int rc = 0;

    if (n->type == OW_JSON_OBJECT && n->count > OW_JSON_DUP_LINEAR_MAX)
        rc = check_dups_sorted(p, n);
    else if (n->type == OW_JSON_OBJECT && n->count > 1)
        rc = check_dups_small(p, n);
    if (rc != 0)
        return rc;
    p->depth--;
    p->pos++;
    return 0;
}

/* ---- Grammar --------------------------------------------------------- */

static bool is_ident_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || is_digit(c);
}

/* Parses `"name" :` at p->pos (whitespace already skipped) and keeps the
 * name for the member value that follows. */
static int parse_key(ow_json_parser *p)
{
    int rc;

    if (at_end(p))
        return fail_syntax(p, p->pos, "unexpected end of input (unclosed object)");
    if (cur(p) == '\'')
        return fail_syntax(p, p->pos, "strings must use double quotes, not single quotes");
    if (is_ident_start(cur(p)))
        return fail_syntax(p, p->pos, "object keys must be double-quoted strings");
    if (cur(p) != '"')
        return fail_unexpected(p, "expected a string key in object");
    p->key_off = p->pos;
    rc = parse_string(p, &p->key, &p->key_len);
    if (rc != 0)
        return rc;
    skip_ws(p);
    if (at_end(p))
        return fail_syntax(p, p->pos, "unexpected end of input (unclosed object)");
    if (cur(p) != ':')
        return fail_unexpected(p, "expected ':' after object key");
    p->pos++;
    return 0;
}

static int value_start_error(ow_json_parser *p)
{
    unsigned char c = cur(p);

    if (c == '+')
        return fail_syntax(p, p->pos, "numbers must not start with '+'");
    if (c == '.')
        return fail_syntax(p, p->pos, "numbers must not start with '.'");
    if (c == '\'')
        return fail_syntax(p, p->pos, "strings must use double quotes, not single quotes");
    if (has_prefix(p, p->pos, "NaN"))
        return fail_syntax(p, p->pos, "NaN is not valid JSON");
    if (has_prefix(p, p->pos, "Infinity"))
        return fail_syntax(p, p->pos, "Infinity is not valid JSON");
    return fail_unexpected(p, "expected a JSON value");
}

/* After '[' or '{': either the container closes at once or a value (for
 * objects, a member) follows. */
static int after_open(ow_json_parser *p, ow_json_type type, bool *want_value)
{
    char close = type == OW_JSON_ARRAY ? ']' : '}';

    skip_ws(p);
    if (!at_end(p) && cur(p) == close) {
        *want_value = false;
        return close_container(p);
    }
    *want_value = true;
    if (type == OW_JSON_OBJECT)
        return parse_key(p);
    return 0;
}

static int parse_scalar(ow_json_parser *p, ow_json_type type)
{
    ow_json_node *n = NULL;
    int rc = new_node(p, type, &n);

    if (rc != 0)
        return rc;
    switch (type) {
    case OW_JSON_STRING:
        return parse_string(p, &n->str, &n->len);
    case OW_JSON_NUMBER:
        return parse_number(p, n);
    case OW_JSON_TRUE:
        return parse_literal(p, "true", "invalid literal (expected true)");
    case OW_JSON_FALSE:
        return parse_literal(p, "false", "invalid literal (expected false)");
    default:
        return parse_literal(p, "null", "invalid literal (expected null)");
    }
}

/* Parses a value at p->pos.  Scalars are consumed whole; for a container
 * only the opening is consumed and *want_value says whether a child value
 * comes next. */
static int parse_value(ow_json_parser *p, bool *want_value)
{
    unsigned char c;
    int rc;

    skip_ws(p);
    if (at_end(p))
        return fail_syntax(p, p->pos, "unexpected end of input (expected a value)");
    c = cur(p);
    *want_value = false;
    if (c == '[' || c == '{') {
        ow_json_type type = c == '[' ? OW_JSON_ARRAY : OW_JSON_OBJECT;

        rc = open_container(p, type);
        return rc != 0 ? rc : after_open(p, type, want_value);
    }
    if (c == '"')
        return parse_scalar(p, OW_JSON_STRING);
    if (c == '-' || is_digit(c))
        return parse_scalar(p, OW_JSON_NUMBER);
    if (c == 't')
        return parse_scalar(p, OW_JSON_TRUE);
    if (c == 'f')
        return parse_scalar(p, OW_JSON_FALSE);
    if (c == 'n')
        return parse_scalar(p, OW_JSON_NULL);
    return value_start_error(p);
}

/* The words a container's errors use: its closing byte and names. */
typedef struct {
    char close;
    const char *unclosed; /* end of input inside it */
    const char *expected; /* neither ',' nor the closing byte after a value */
    const char *trailing; /* ',' right before the closing byte */
} container_words;

static const container_words array_words = {']', "unexpected end of input (unclosed array)",
                                            "expected ',' or ']' after array element",
                                            "trailing comma in array"};
static const container_words object_words = {'}', "unexpected end of input (unclosed object)",
                                             "expected ',' or '}' after object member",
                                             "trailing comma in object"};

/* Handles what follows a complete value inside the innermost container:
 * its end, or a comma and (in an object) the next member's key. */
static int after_value(ow_json_parser *p, bool *want_value)
{
    bool is_array = p->doc->stack[p->depth - 1].node->type == OW_JSON_ARRAY;
    const container_words *w = is_array ? &array_words : &object_words;

    skip_ws(p);
    if (at_end(p))
        return fail_syntax(p, p->pos, w->unclosed);
    if (cur(p) == w->close) {
        *want_value = false;
        return close_container(p);
    }
    if (cur(p) != ',')
        return fail_unexpected(p, w->expected);
    p->pos++;
    skip_ws(p);
    if (!at_end(p) && cur(p) == w->close)
        return fail_syntax(p, p->pos, w->trailing);
    *want_value = true;
    return is_array ? 0 : parse_key(p);
}

static int parse_document(ow_json_parser *p)
{
    bool want_value = true;
    int rc = 0;

    if (has_prefix(p, 0, "\xEF\xBB\xBF"))
        return fail_syntax(p, 0, "UTF-8 byte order mark is not allowed");
    skip_ws(p);
    if (at_end(p))
        return fail_syntax(p, p->pos, "empty input");
    while (rc == 0 && (want_value || p->depth > 0)) {
        if (want_value)
            rc = parse_value(p, &want_value);
        else
            rc = after_value(p, &want_value);
    }
    if (rc != 0)
        return rc;
    skip_ws(p);
    if (!at_end(p))
        return fail_unexpected(p, "unexpected data after JSON value");
    return 0;
}

/* ---- Public API ------------------------------------------------------ */

static void parser_init(ow_json_parser *p, const void *buf, size_t len,
                        const ow_json_limits *limits, ow_json_error *err)
{
    memset(p, 0, sizeof(*p));
    p->buf = buf;
    p->len = len;
    p->max_depth = OW_JSON_DEFAULT_DEPTH;
    if (limits != NULL && limits->max_depth != 0)
        p->max_depth = limits->max_depth;
    if (limits != NULL)
        p->max_nodes = limits->max_nodes;
    p->err = err;
}

/* Parses into p->doc and leaves the document's memory to the caller. */
static int parse_into(ow_json_parser *p)
{
    int rc = parse_document(p);

    if (rc != 0)
        p->doc->root = NULL;
    return rc;
}

int ow_json_parse(const void *buf, size_t len, const ow_json_limits *limits, ow_json_doc **out,
                  ow_json_error *err)
{
    int rc;

    if (out != NULL)
        *out = NULL;
    rc = ow_json_reparse(buf, len, limits, out, err);
    if (rc != 0 && out != NULL)
        ow_json_free(out);
    return rc;
}

int ow_json_reparse(const void *buf, size_t len, const ow_json_limits *limits, ow_json_doc **doc,
                    ow_json_error *err)
{
    ow_json_error scratch_err;
    ow_json_parser p;

    if (err == NULL)
        err = &scratch_err;
    err->offset = 0;
    err->message[0] = '\0';
    parser_init(&p, buf, len, limits, err);
    if (doc == NULL || (buf == NULL && len != 0))
        return fail(&p, OW_JSON_ERR_ARG, 0, "invalid argument");
    if (*doc == NULL && (*doc = doc_new()) == NULL)
        return fail_nomem(&p);
    doc_reset(*doc);
    p.doc = *doc;
    return parse_into(&p);
}

const ow_json_node *ow_json_root(const ow_json_doc *doc)
{
    return doc != NULL ? doc->root : NULL;
}

void ow_json_free(ow_json_doc **doc)
{
    ow_json_block *b;

    if (doc == NULL || *doc == NULL)
        return;
    b = (*doc)->blocks;
    while (b != NULL) {
        ow_json_block *next = b->next;

        free(b);
        b = next;
    }
    free((*doc)->stack);
    free((*doc)->scratch);
    free(*doc);
    *doc = NULL;
}

const ow_json_node *ow_json_member(const ow_json_node *obj, const char *name)
{
    size_t n;

    if (obj == NULL || name == NULL || obj->type != OW_JSON_OBJECT)
        return NULL;
    n = strlen(name);
    for (const ow_json_node *c = obj->first; c != NULL; c = c->next) {
        if (c->key_len == n && memcmp(c->key, name, n) == 0)
            return c;
    }
    return NULL;
}

int ow_json_number_is_integer(const ow_json_node *n)
{
    if (n == NULL || n->type != OW_JSON_NUMBER || n->str == NULL)
        return 0;
    return memchr(n->str, '.', n->len) == NULL && memchr(n->str, 'e', n->len) == NULL &&
           memchr(n->str, 'E', n->len) == NULL;
}

/* --- Writing ------------------------------------------------------------- */

int ow_json_write_string(ow_buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *p;

    /* Room for the worst case, every byte escaped to six, so that the loop
     * writes without a check per byte. */
    if (len > (SIZE_MAX - 3) / 6 || ow_buf_reserve(out, 6 * len + 2) != OW_OK)
        return OW_ENOMEM;
    p = out->data + out->len;
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            memcpy(p, "\\u00", 4);
            p[4] = hex[c >> 4];
            p[5] = hex[c & 0xf];
            p += 6;
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    *p = '\0';
    out->len = (size_t)(p - out->data);
    return OW_OK;
}
