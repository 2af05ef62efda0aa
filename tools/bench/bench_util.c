/* What every part of the tool uses: its log line, memory that cannot
 * fail, and the clocks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

void bm_log(const char *fmt, ...)
{
    va_list ap;

    fputs("ow-bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The tool cannot do anything useful without memory: say so and stop. */
void *bm_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);

    if (p == NULL) {
        bm_log("out of memory (%zu x %zu bytes)", n, size);
        exit(2);
    }
    return p;
}

char *bm_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = bm_xcalloc(n, 1);

    memcpy(p, s, n);
    return p;
}

double bm_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bm_wall(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
