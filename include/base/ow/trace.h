/*
 * W3C Trace Context: reading a message's traceparent and tracestate, and
 * the ids of the worker's own span. Pure: no I/O besides the seed.
 *
 * traceparent follows Trace Context level 1 (W3C Recommendation, 2021):
 * version 00 is exactly 00-<32 hex>-<16 hex>-<2 hex> in lower-case hex,
 * neither id all zeros; version ff is invalid; a higher version is read
 * as the specification tells a receiver to (its first 55 characters in
 * version 00's format, then the end or a dash) and continued as version
 * 00. Spaces and tabs around the value are ignored, as HTTP's optional
 * whitespace around a field value is (the W3C test suite sends them).
 *
 * tracestate is a list of at most 32 key=value members in at most 512
 * bytes. A key is simple (a lower-case letter, then up to 255 of a-z 0-9
 * _ - * /) or multi-tenant (tenant@system: up to 241 such characters
 * starting with a letter or a digit, '@', up to 14 starting with a
 * letter); a value is 1 to 256 printable ASCII characters other than ','
 * and '=', the last not a space. Members may be empty, spaces and tabs
 * around a member are ignored, and a key may appear once.
 */
#ifndef OW_TRACE_H
#define OW_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define OW_TRACE_ID_LEN 16
#define OW_SPAN_ID_LEN 8
/* "00-" trace id "-" span id "-" flags. */
#define OW_TRACEPARENT_LEN 55
/* The longest tracestate the worker reads and propagates: the size W3C
 * asks every participant to propagate at least. */
#define OW_TRACESTATE_MAX 512
#define OW_TRACESTATE_MEMBERS_MAX 32

/* The trace flags the worker keeps: sampled, and level 2's random trace
 * id (which a participant continuing the trace must keep). The other bits
 * are reserved and sent as zero. */
#define OW_TRACE_FLAG_SAMPLED 0x01u
#define OW_TRACE_FLAG_RANDOM 0x02u
#define OW_TRACE_FLAGS_KEPT (OW_TRACE_FLAG_SAMPLED | OW_TRACE_FLAG_RANDOM)

typedef struct {
    unsigned char trace_id[OW_TRACE_ID_LEN];
    unsigned char parent_id[OW_SPAN_ID_LEN];
    unsigned flags; /* as received, all eight bits */
} ow_traceparent;

/* Parses a traceparent value of n bytes (not NUL-terminated). Returns
 * OW_OK, or OW_EINVAL when the header must be ignored. */
int ow_traceparent_parse(const char *v, size_t n, ow_traceparent *tp);

/* Checks a tracestate value of n bytes (several headers already joined
 * with ','). Returns OW_OK with the count of its non-empty members in
 * *members (0: nothing to propagate), or OW_EINVAL. */
int ow_tracestate_check(const char *v, size_t n, size_t *members);

/* Writes the version 00 traceparent of a span, lower-case and
 * NUL-terminated, into out (OW_TRACEPARENT_LEN + 1 bytes). */
void ow_traceparent_format(const unsigned char trace_id[OW_TRACE_ID_LEN],
                           const unsigned char span_id[OW_SPAN_ID_LEN], unsigned flags,
                           char out[OW_TRACEPARENT_LEN + 1]);

/* A non-zero seed for ow_trace_new_id: from the kernel's random source,
 * or from the clocks and the process id when that fails. */
uint64_t ow_trace_seed(void);

/* Fills id with n random bytes (8 for a span id, 16 for a trace id) from
 * the generator *rng (non-zero; updated), never all zeros, which W3C
 * forbids. */
void ow_trace_new_id(uint64_t *rng, unsigned char *id, size_t n);

#endif
