/* W3C Trace Context: traceparent and tracestate (see ow/trace.h). */
#include "ow/trace.h"

#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "ow/error.h"
#include "ow/util.h"

/* --- traceparent ------------------------------------------------------------ */

/* A lower-case hex digit's value plus one; 0 for any other byte:
 * upper-case hex is not HEXDIGLC and makes the header invalid. */
static const unsigned char hex_plus1[256] = {
    ['0'] = 1, ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16};

/* The byte of two lower-case hex digits at p, or -1. */
static int hex_byte(const char *p)
{
    int hi = hex_plus1[(unsigned char)p[0]] - 1, lo = hex_plus1[(unsigned char)p[1]] - 1;

    return (hi | lo) < 0 ? -1 : hi << 4 | lo;
}

/* n bytes of lower-case hex at p into out (n / 2 bytes); 0 when one is
 * not such a digit or every byte is zero, which W3C forbids for both ids. */
static int hex_id(const char *p, size_t n, unsigned char *out)
{
    unsigned char any = 0;

    for (size_t i = 0; i < n; i += 2) {
        int b = hex_byte(p + i);

        if (b < 0)
            return 0;
        out[i / 2] = (unsigned char)b;
        any |= out[i / 2];
    }
    return any != 0;
}

int ow_traceparent_parse(const char *v, size_t n, ow_traceparent *tp)
{
    int version, flags;

    if (v == NULL)
        return OW_EINVAL;
    n = ow_trim_blanks(&v, n);
    if (n < OW_TRACEPARENT_LEN)
        return OW_EINVAL;
    version = hex_byte(v);
    if (version < 0 || v[2] != '-' || version == 0xff)
        return OW_EINVAL;
    /* Version 00 is exactly 55 characters; a higher one may go on after a
     * dash with fields this version does not know, which are not read. */
    if (version == 0 ? n != OW_TRACEPARENT_LEN
                     : n > OW_TRACEPARENT_LEN && v[OW_TRACEPARENT_LEN] != '-')
        return OW_EINVAL;
    if (v[35] != '-' || v[52] != '-')
        return OW_EINVAL;
    if (!hex_id(v + 3, 2 * OW_TRACE_ID_LEN, tp->trace_id) ||
        !hex_id(v + 36, 2 * OW_SPAN_ID_LEN, tp->parent_id))
        return OW_EINVAL;
    flags = hex_byte(v + 53);
    if (flags < 0)
        return OW_EINVAL;
    tp->flags = (unsigned)flags;
    return OW_OK;
}

void ow_traceparent_format(const unsigned char trace_id[OW_TRACE_ID_LEN],
                           const unsigned char span_id[OW_SPAN_ID_LEN], unsigned flags,
                           char out[OW_TRACEPARENT_LEN + 1])
{
    unsigned char f = (unsigned char)flags;

    memcpy(out, "00-", 3);
    ow_hex(trace_id, OW_TRACE_ID_LEN, out + 3);
    out[35] = '-';
    ow_hex(span_id, OW_SPAN_ID_LEN, out + 36);
    out[52] = '-';
    ow_hex(&f, 1, out + 53);
}

/* --- tracestate --------------------------------------------------------------- */

static int lcalpha(char c)
{
    return c >= 'a' && c <= 'z';
}

static int keychar(char c)
{
    return lcalpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' || c == '/';
}

/* first, then up to max - 1 key characters: a simple key, a tenant id or
 * a system id of at most max characters. */
static int key_part(const char *p, size_t n, size_t max, int digit_first)
{
    if (n == 0 || n > max || !(lcalpha(p[0]) || (digit_first && p[0] >= '0' && p[0] <= '9')))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!keychar(p[i]))
            return 0;
    return 1;
}

static int key_ok(const char *p, size_t n)
{
    const char *at = memchr(p, '@', n);

    if (at == NULL)
        return key_part(p, n, 256, 0);
    return key_part(p, (size_t)(at - p), 241, 1) &&
           key_part(at + 1, n - (size_t)(at - p) - 1, 14, 0);
}

/* 1 to 256 printable characters other than ',' and '=', the last not a
 * space (the member's trailing blanks were trimmed already). */
static int value_ok(const char *p, size_t n)
{
    if (n == 0 || n > 256 || p[n - 1] == ' ')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e || p[i] == ',' || p[i] == '=')
            return 0;
    return 1;
}

typedef struct {
    const char *p;
    size_t n;
} span;

/* One list member: empty, or key=value with no other '='. Its key goes
 * to keys[*count], which must not repeat an earlier one. */
static int member_ok(const char *p, size_t n, span *keys, size_t *count)
{
    const char *eq;
    size_t kn;

    n = ow_trim_blanks(&p, n);
    if (n == 0)
        return 1;
    eq = memchr(p, '=', n);
    if (eq == NULL)
        return 0;
    kn = (size_t)(eq - p);
    if (!key_ok(p, kn) || !value_ok(eq + 1, n - kn - 1) || *count == OW_TRACESTATE_MEMBERS_MAX)
        return 0;
    for (size_t i = 0; i < *count; i++)
        if (keys[i].n == kn && memcmp(keys[i].p, p, kn) == 0)
            return 0;
    keys[(*count)++] = (span){p, kn};
    return 1;
}

int ow_tracestate_check(const char *v, size_t n, size_t *members)
{
    span keys[OW_TRACESTATE_MEMBERS_MAX];
    size_t count = 0;
    size_t at = 0;

    *members = 0;
    if (n > OW_TRACESTATE_MAX || (v == NULL && n > 0))
        return OW_EINVAL;
    while (at <= n && n > 0) {
        const char *comma = memchr(v + at, ',', n - at);
        size_t end = comma != NULL ? (size_t)(comma - v) : n;

        if (!member_ok(v + at, end - at, keys, &count))
            return OW_EINVAL;
        at = end + 1;
    }
    *members = count;
    return OW_OK;
}

/* --- Ids ------------------------------------------------------------------------ */

uint64_t ow_trace_seed(void)
{
    uint64_t seed = 0;

    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
        seed = (uint64_t)ow_clock_mono_us() * 0x9e3779b97f4a7c15u ^
               (uint64_t)ow_clock_wall_ms() << 16 ^ (uint64_t)getpid();
    return seed != 0 ? seed : 0x9e3779b97f4a7c15u;
}

void ow_trace_new_id(uint64_t *rng, unsigned char *id, size_t n)
{
    unsigned char any;

    /* xorshift64* never returns 0 from a non-zero state, so the loop runs
     * once; it states the rule rather than relying on that. */
    do {
        any = 0;
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = ow_rand64(rng);

            for (size_t k = 0; k < 8 && i + k < n; k++) {
                id[i + k] = (unsigned char)(r >> (8 * k));
                any |= id[i + k];
            }
        }
    } while (any == 0);
}
