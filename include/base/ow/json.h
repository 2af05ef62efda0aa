/*
 * Strict, bounded JSON parser (RFC 8259) that keeps number lexemes as text,
 * and the one writer of JSON strings (result bodies, log lines, the query
 * service's replies).
 *
 * Numbers are never converted: NUMBER nodes carry the exact bytes of the
 * input so that money amounts such as "19.90" survive unchanged.  The parser
 * is iterative (no recursion), enforces nesting and node limits, rejects
 * invalid UTF-8 anywhere in the input and rejects duplicate member names.
 * Every node and string of a document lives in one arena owned by the doc.
 */
#ifndef OW_JSON_H
#define OW_JSON_H
#include <stddef.h>
#include <stdint.h>

#include "ow/util.h"

typedef enum {
    OW_JSON_NULL = 0,
    OW_JSON_FALSE,
    OW_JSON_TRUE,
    OW_JSON_NUMBER,
    OW_JSON_STRING,
    OW_JSON_ARRAY,
    OW_JSON_OBJECT
} ow_json_type;

typedef struct ow_json_node ow_json_node;
struct ow_json_node {
    ow_json_type type;
    const char
        *str; /* STRING: unescaped UTF-8 bytes, NUL-terminated, may contain NUL (\u0000) so use len;
                             NUMBER: the raw lexeme exactly as in the input, NUL-terminated */
    size_t len;
    const char
        *key; /* member name (unescaped, NUL-terminated) when the parent is an object, else NULL */
    size_t key_len;
    size_t count;        /* ARRAY/OBJECT: number of children */
    ow_json_node *first; /* first child, or NULL */
    ow_json_node *next;  /* next sibling, or NULL */
};

typedef struct {
    size_t max_depth; /* nesting of arrays/objects; the root array/object is depth 1; 0 means 64 */
    size_t max_nodes; /* total values; 0 means no limit besides memory */
} ow_json_limits;

typedef struct {
    size_t offset; /* byte offset in the input where the error was detected */
    char message
        [128]; /* short English reason, e.g. "invalid UTF-8 sequence", "duplicate object key", "nesting deeper than 64" */
} ow_json_error;

/* Return values of ow_json_parse.  Every failure is negative, so callers that
 * only test "< 0" need nothing else; the distinct codes let a caller tell a
 * bad message (SYNTAX, LIMIT) from a transient failure (NOMEM). */
enum {
    OW_JSON_OK = 0,
    OW_JSON_ERR_SYNTAX = -1, /* not valid JSON, not valid UTF-8, or a duplicate member name */
    OW_JSON_ERR_LIMIT = -2,  /* max_depth or max_nodes exceeded */
    OW_JSON_ERR_NOMEM = -3,  /* memory allocation failed */
    OW_JSON_ERR_ARG = -4     /* out is NULL, or buf is NULL with len > 0 */
};

typedef struct ow_json_doc ow_json_doc; /* opaque; owns every node and string (one arena) */

/* Parses exactly one JSON value (surrounded by optional whitespace) from buf[0..len).
 * Returns 0 and sets *out (a new doc, free with ow_json_free) or a negative value and fills err
 * (*out stays NULL). Never reads past len; buf need not be NUL-terminated.
 * limits and err may be NULL (default limits; no error details). */
int ow_json_parse(const void *buf, size_t len, const ow_json_limits *limits, ow_json_doc **out,
                  ow_json_error *err);
/* The same into *doc, reusing the memory of the document it holds (NULL
 * the first time): its first arena block and its stacks stay from one parse
 * to the next, so that a caller parsing one message after another allocates
 * nothing for messages of usual size. Nodes of the previous parse are gone.
 * After a failure *doc still holds the (empty) document for the next parse;
 * free it with ow_json_free when done. */
int ow_json_reparse(const void *buf, size_t len, const ow_json_limits *limits, ow_json_doc **doc,
                    ow_json_error *err);
const ow_json_node *ow_json_root(const ow_json_doc *doc); /* borrowed */
void ow_json_free(ow_json_doc **doc);                     /* NULL-safe; sets *doc = NULL */
/* Borrowed pointer to the member named name (NUL-terminated) of an object, or NULL.
 * This is a linear scan of the object's members. */
const ow_json_node *ow_json_member(const ow_json_node *obj, const char *name);
/* For NUMBER nodes: 1 if the lexeme has no fraction and no exponent part. */
int ow_json_number_is_integer(const ow_json_node *n);

/* Appends s as a JSON string (quotes included); bytes >= 0x80 are copied as
 * they are, so s must be valid UTF-8. OW_ENOMEM. */
int ow_json_write_string(ow_buf *out, const char *s, size_t len);
#endif
