/*
 * The hostile input table: malformed order-batch messages (and one valid
 * control) with the first field error each must get. One table, used by the
 * unit test (tests/unit/test_hostile.c), the end-to-end test
 * (tests/e2e/test_hostile_e2e.c) and the fuzz corpus replay
 * (tests/fuzz/replay_main.c). The rows live in hostile_cases.c.
 *
 * Every row is judged with HOSTILE_MAX_BYTES as request.max_bytes and the
 * default request.max_orders (1000); the end-to-end worker runs with the
 * same settings.
 */
#ifndef OW_HOSTILE_CASES_H
#define OW_HOSTILE_CASES_H

#include <stddef.h>

/* request.max_bytes for every row. 256 KiB: large enough that the row with
 * 100,000 nesting levels (about 200 KB) reaches the JSON parser, small
 * enough that max_bytes + 1 can still be produced to a broker with the
 * default message size limit (1 MB). */
#define HOSTILE_MAX_BYTES 262144
#define HOSTILE_MAX_ORDERS 1000

/* How a row's value is made. */
typedef enum {
    HOSTILE_LITERAL = 0, /* value[0..value_len) as written */
    HOSTILE_DEEP,        /* a valid batch with n nested arrays in an ignored field */
    HOSTILE_PADDED       /* a valid batch padded (ignored field) to exactly n bytes */
} hostile_gen;

typedef struct {
    const char *name;  /* unique; also the key suffix of rows with a generated key */
    int has_key;       /* 0: the message has no key at all */
    const char *key;   /* key bytes (may be empty or hold any byte) */
    size_t key_len;
    hostile_gen gen;
    size_t n;          /* parameter of the generator */
    const char *value; /* HOSTILE_LITERAL: the bytes, which may hold NUL */
    size_t value_len;
    const char *field; /* expected field of the first error; NULL: the row is valid */
    const char *why;   /* substring of the first error's message (NULL: not checked) */
} hostile_case;

extern const hostile_case hostile_cases[];
extern const size_t hostile_count;

/* The value bytes of a row, in a new heap buffer of exactly *len bytes
 * (at least one byte is allocated, so the pointer is never NULL). Returns
 * NULL when out of memory. Free with free(). */
unsigned char *hostile_value(const hostile_case *c, size_t *len);

#endif
