#include "ow/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ow/error.h"

int ow_parse_int64(const char *s, int64_t *out)
{
    char *end = NULL;
    long long v;

    if (s == NULL || *s == '\0' || *s == '+' || *s == ' ' || *s == '\t')
        return OW_EINVAL;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return OW_EINVAL;
    *out = (int64_t)v;
    return OW_OK;
}

void ow_buf_init(ow_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void ow_buf_cleanup(ow_buf *b)
{
    free(b->data);
    ow_buf_init(b);
}

void ow_buf_reset(ow_buf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

int ow_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t cap2 = *cap != 0 ? *cap : 16;
    void *q;

    if (need <= *cap)
        return OW_OK;
    while (cap2 < need)
        cap2 *= 2;
    if (cap2 > SIZE_MAX / elem)
        return OW_ENOMEM;
    q = realloc(*p, cap2 * elem);
    if (q == NULL)
        return OW_ENOMEM;
    *p = q;
    *cap = cap2;
    return OW_OK;
}

int ow_grow_zeroed(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t had = *cap;
    int rc = ow_grow(p, cap, need, elem);

    if (rc == OW_OK && *cap > had)
        memset((char *)*p + had * elem, 0, (*cap - had) * elem);
    return rc;
}

int ow_buf_reserve(ow_buf *b, size_t extra)
{
    size_t need;
    size_t cap;
    char *p;

    if (extra > SIZE_MAX - b->len - 1)
        return OW_ENOMEM;
    need = b->len + extra + 1;
    if (need <= b->cap)
        return OW_OK;
    cap = b->cap != 0 ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = realloc(b->data, cap);
    if (p == NULL)
        return OW_ENOMEM;
    b->data = p;
    b->cap = cap;
    return OW_OK;
}

int ow_buf_append(ow_buf *b, const void *p, size_t n)
{
    /* The common case, room already there, without ow_buf_reserve's checks. */
    if (b->cap - b->len <= n && ow_buf_reserve(b, n) != OW_OK)
        return OW_ENOMEM;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return OW_OK;
}

int ow_buf_appendc(ow_buf *b, char c)
{
    if (b->cap - b->len <= 1 && ow_buf_reserve(b, 1) != OW_OK)
        return OW_ENOMEM;
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
    return OW_OK;
}

int ow_buf_appends(ow_buf *b, const char *s)
{
    return ow_buf_append(b, s, strlen(s));
}

int ow_buf_appendf(ow_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || ow_buf_reserve(b, (size_t)n) != OW_OK)
        return OW_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return OW_OK;
}

/* The digits of u, most significant first, into out with a NUL after. */
static size_t format_digits(unsigned long long u, char *out)
{
    char digits[20];
    size_t n = 0, k = 0;

    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0);
    while (n > 0)
        out[k++] = digits[--n];
    out[k] = '\0';
    return k;
}

size_t ow_format_int(long long v, char out[21])
{
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

    if (v >= 0)
        return format_digits(u, out);
    out[0] = '-';
    return 1 + format_digits(u, out + 1);
}

int ow_buf_append_int(ow_buf *b, long long v)
{
    char text[21];

    return ow_buf_append(b, text, ow_format_int(v, text));
}

int ow_buf_append_uint(ow_buf *b, unsigned long long v)
{
    char text[21];

    return ow_buf_append(b, text, format_digits(v, text));
}

char *ow_buf_steal(ow_buf *b, size_t *len)
{
    char *p = b->data;

    if (len != NULL)
        *len = b->len;
    ow_buf_init(b);
    return p;
}

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t ow_clock_mono_ms(void)
{
    return clock_us(CLOCK_MONOTONIC) / 1000;
}

int64_t ow_clock_mono_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

int64_t ow_clock_wall_ms(void)
{
    return clock_us(CLOCK_REALTIME) / 1000;
}

void ow_deadline_after_ms(int64_t ms, struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

uint64_t ow_hash64(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void ow_hex(const unsigned char *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 0x0f];
    }
    out[2 * n] = '\0';
}

void ow_sleep_ms(int64_t ms, const volatile int *stop)
{
    int64_t deadline = ow_clock_mono_ms() + ms;

    for (;;) {
        int64_t left = deadline - ow_clock_mono_ms();
        struct timespec ts;

        if (left <= 0 || (stop != NULL && *stop))
            return;
        if (left > 50)
            left = 50;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)left * 1000000L;
        nanosleep(&ts, NULL);
    }
}

uint64_t ow_rand64(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 2685821657736338717ULL;
}

int64_t ow_backoff_ms(int64_t base, int64_t max, unsigned attempt, uint64_t *seed)
{
    int64_t cap = base;

    if (base <= 0)
        return 0;
    for (unsigned i = 0; i < attempt && cap < max; i++)
        cap *= 2;
    if (cap > max)
        cap = max;
    /* Full jitter: anywhere in [cap/2, cap], so a herd of retries spreads out
     * but never retries immediately after a failure. */
    return cap / 2 + (int64_t)(ow_rand64(seed) % (uint64_t)(cap / 2 + 1));
}

static int64_t duration_unit(char c)
{
    switch (c) {
    case 's':
        return 1;
    case 'm':
        return 60;
    case 'h':
        return 3600;
    case 'd':
        return 86400;
    default:
        return 0;
    }
}

size_t ow_trim_blanks(const char **s, size_t n)
{
    while (n > 0 && (**s == ' ' || **s == '\t')) {
        (*s)++;
        n--;
    }
    while (n > 0 && ((*s)[n - 1] == ' ' || (*s)[n - 1] == '\t'))
        n--;
    return n;
}

int ow_duration_parse(const char *s, int64_t *seconds, const char **why)
{
    const char *reason = NULL;
    int64_t n = 0;
    int64_t unit = 0;
    size_t i = 0;

    if (s == NULL)
        s = "";
    /* Accumulate while n stays below the maximum, so it cannot overflow. */
    while (s[i] >= '0' && s[i] <= '9' && n <= OW_DURATION_MAX_S)
        n = n * 10 + (s[i++] - '0');
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    if (s[i] != '\0' && s[i + 1] == '\0')
        unit = duration_unit(s[i]);
    if (i == 0)
        reason = "must start with a number, e.g. 30d";
    else if (s[i] == '\0')
        reason = "needs a unit: s, m, h or d (e.g. 30d)";
    else if (unit == 0)
        reason = "unknown unit: use s, m, h or d (e.g. 30d)";
    else if (n == 0)
        reason = "must be greater than zero";
    else if (n > OW_DURATION_MAX_S / unit)
        reason = "is too long (at most 36500d)";
    if (reason != NULL) {
        if (why != NULL)
            *why = reason;
        return OW_EINVAL;
    }
    *seconds = n * unit;
    return OW_OK;
}

int ow_read_file(const char *path, size_t max, ow_buf *out, ow_error *err)
{
    FILE *f = fopen(path, "rb");
    char chunk[4096];
    size_t n;
    int rc = OW_OK;

    if (f == NULL)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: cannot open: %s", path,
                            strerror(errno));
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (out->len + n > max) {
            rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: larger than %zu bytes", path,
                              max);
            break;
        }
        if (ow_buf_append(out, chunk, n) != OW_OK) {
            rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
            break;
        }
    }
    if (rc == OW_OK && ferror(f))
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: read error", path);
    fclose(f);
    return rc;
}
