#include "ow/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ow/digest.h"
#include "ow/json.h"
#include "ow/util.h"

_Atomic int ow_log_threshold = OW_LOG_INFO;
static _Atomic int log_fd = 2;

void ow_log_set_level(int level)
{
    atomic_store(&ow_log_threshold, level);
}

void ow_log_set_fd(int fd)
{
    atomic_store(&log_fd, fd < 0 ? 2 : fd);
}

void ow_log_mask_key(const char *key, size_t len, char out[OW_LOG_MASK_MAX])
{
    unsigned char md[OW_DIGEST_LEN];
    char hex[9];
    size_t show = len / 3;

    if (show > 4)
        show = 4;
    if (key == NULL) {
        snprintf(out, OW_LOG_MASK_MAX, "(none)");
        return;
    }
    if (ow_sha256(key, len, md) != OW_OK) {
        snprintf(out, OW_LOG_MASK_MAX, "(masked)");
        return;
    }
    ow_hex(md, 4, hex);
    /* Only key-alphabet bytes are shown; anything else becomes '?'. */
    {
        char prefix[5];

        for (size_t i = 0; i < show; i++) {
            unsigned char c = (unsigned char)key[i];

            prefix[i] = (c >= 0x21 && c <= 0x7e && c != '"' && c != '\\') ? (char)c : '?';
        }
        prefix[show] = '\0';
        snprintf(out, OW_LOG_MASK_MAX, "%s…#%s", prefix, hex);
    }
}

static void append_time(ow_buf *b)
{
    struct timespec ts;
    struct tm tm;
    char when[32];

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    ow_buf_appendf(b, "{\"ts\":\"%s.%03ldZ\"", when, ts.tv_nsec / 1000000L);
}

static void append_field(ow_buf *b, const ow_log_field *f)
{
    char masked[OW_LOG_MASK_MAX];

    if ((f->type == 'o' || f->type == 'j') && f->s == NULL)
        return;
    ow_buf_appendc(b, ',');
    ow_json_write_string(b, f->name, strlen(f->name));
    ow_buf_appendc(b, ':');
    switch (f->type) {
    case 'i':
        ow_buf_appendf(b, "%lld", (long long)f->i);
        break;
    case 'n':
        ow_buf_appendf(b, "\"%lld\"", (long long)f->i);
        break;
    case 'j':
        ow_buf_appends(b, f->s);
        break;
    case 'f':
        ow_buf_appendf(b, "%.6g", f->f);
        break;
    case 'k':
        ow_log_mask_key(f->s, f->len, masked);
        ow_json_write_string(b, masked, strlen(masked));
        break;
    default:
        if (f->s == NULL)
            ow_buf_appends(b, "null");
        else
            ow_json_write_string(b, f->s, strlen(f->s));
        break;
    }
}

void ow_log_write(int level, const char *event, const ow_log_field *fields, size_t n)
{
    ow_buf b;
    ssize_t w;

    ow_buf_init(&b);
    append_time(&b);
    ow_buf_appendf(&b, ",\"level\":\"%s\",\"event\":", ow_log_level_name(level));
    ow_json_write_string(&b, event, strlen(event));
    for (size_t i = 0; i < n; i++)
        append_field(&b, &fields[i]);
    ow_buf_appends(&b, "}\n");
    if (b.data != NULL) {
        /* One write per line so lines from different threads never interleave. */
        w = write(atomic_load(&log_fd), b.data, b.len);
        (void)w;
    }
    ow_buf_cleanup(&b);
}

void ow_log_rdkafka(const struct rd_kafka_s *rk, int level, const char *fac, const char *buf)
{
    int ours = level <= 3   ? OW_LOG_ERROR
               : level <= 4 ? OW_LOG_WARN
               : level <= 6 ? OW_LOG_INFO
                            : OW_LOG_DEBUG;

    (void)rk;
    OW_LOG(ours, "rdkafka", OW_F_STR("facility", fac), OW_F_STR("message", buf));
}
