/* Small checked helpers used everywhere: integer parsing, a growable buffer,
 * clocks and a stable hash. No I/O. */
#ifndef OW_UTIL_H
#define OW_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"

/* Parses a whole NUL-terminated decimal integer ("-12", "42"); no spaces, no
 * '+', no trailing bytes. Returns 0, or OW_EINVAL when s is not a number or
 * does not fit. */
int ow_parse_int64(const char *s, int64_t *out);

/* Longest duration ow_duration_parse accepts: 100 years of 365 days. */
#define OW_DURATION_MAX_S (INT64_C(36500) * 86400)

/* Parses a duration such as "30d", "12h", "90m" or "3600s": decimal digits
 * and one unit (s, m, h, d), nothing else. The result, in seconds, is
 * positive and at most OW_DURATION_MAX_S. Returns 0, or OW_EINVAL with a
 * reason in *why (static text; why may be NULL). */
int ow_duration_parse(const char *s, int64_t *seconds, const char **why);

/* Trims spaces and tabs around (*s)[0..n): moves *s past the leading ones
 * and returns the length without the trailing ones. */
size_t ow_trim_blanks(const char **s, size_t n);

/* Growable byte buffer; data is always NUL-terminated when non-NULL. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
} ow_buf;

void ow_buf_init(ow_buf *b);
void ow_buf_cleanup(ow_buf *b);
void ow_buf_reset(ow_buf *b); /* keeps the allocation */
/* Room for extra more bytes and a terminating NUL. */
int ow_buf_reserve(ow_buf *b, size_t extra);
int ow_buf_append(ow_buf *b, const void *p, size_t n);
int ow_buf_appendc(ow_buf *b, char c);
int ow_buf_appends(ow_buf *b, const char *s);
int ow_buf_appendf(ow_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Decimal text of v without printf, which costs more than the digits on
 * every message's path. out gets a NUL; returns the
 * length (at most 20). */
size_t ow_format_int(long long v, char out[21]);
int ow_buf_append_int(ow_buf *b, long long v);
/* The same for an unsigned value (a size_t, which %zu would print). */
int ow_buf_append_uint(ow_buf *b, unsigned long long v);
/* Appends the contents of the file at path to out; a file larger than max
 * bytes is refused. The error names the path. */
int ow_read_file(const char *path, size_t max, ow_buf *out, ow_error *err);
/* Grows the array *p of *cap elements of elem bytes to hold at least need
 * (doubling, from 16), keeping its contents. Returns 0 or OW_ENOMEM (the
 * array is unchanged). */
int ow_grow(void **p, size_t *cap, size_t need, size_t elem);
/* The same, and the elements it adds are zero. */
int ow_grow_zeroed(void **p, size_t *cap, size_t need, size_t elem);

/* Hands the bytes to the caller (who frees them) and leaves b empty. */
char *ow_buf_steal(ow_buf *b, size_t *len);

int64_t ow_clock_mono_ms(void);
int64_t ow_clock_mono_us(void);
int64_t ow_clock_wall_ms(void);

struct timespec;
/* The CLOCK_REALTIME instant ms milliseconds from now, for
 * pthread_cond_timedwait. */
void ow_deadline_after_ms(int64_t ms, struct timespec *ts);

/* 64-bit FNV-1a; stable across runs and machines (used to route keys). */
uint64_t ow_hash64(const void *p, size_t n);

/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void ow_hex(const unsigned char *p, size_t n, char *out);

/* Sleeps ms milliseconds unless *stop becomes non-zero (checked every 50 ms). */
void ow_sleep_ms(int64_t ms, const volatile int *stop);

/* A delay for retry number attempt (0-based): min(max, base * 2^attempt),
 * with full jitter drawn from seed (updated). */
int64_t ow_backoff_ms(int64_t base, int64_t max, unsigned attempt, uint64_t *seed);

/* xorshift64* step; *state must be non-zero. */
uint64_t ow_rand64(uint64_t *state);

#endif
