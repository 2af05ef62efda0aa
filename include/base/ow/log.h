/*
 * Logging: one JSON object per line on stderr,
 *   {"ts":"2026-11-30T01:02:03.456Z","level":"info","event":"lane_started","lane":2}
 * The level is checked before any argument is evaluated. Idempotency keys are
 * only ever logged through OW_F_KEY, which masks them (a short prefix and a
 * hash); payloads and secrets are never logged.
 */
#ifndef OW_LOG_H
#define OW_LOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/config.h"

typedef struct {
    const char *name;
    /* 's' string (null when NULL), 'o' string left out when NULL, 'i'
     * integer, 'n' integer written as a JSON string, 'j' JSON text written
     * as it is and left out when NULL, 'k' masked key, 'f' double */
    char type;
    const char *s;
    size_t len;
    int64_t i;
    double f;
} ow_log_field;

extern _Atomic int ow_log_threshold;

#define OW_F_STR(k, v) ((ow_log_field){(k), 's', (v), 0, 0, 0.0})
/* A field that only some lines have a value for (a trace id): no field at
 * all when v is NULL. */
#define OW_F_OPT(k, v) ((ow_log_field){(k), 'o', (v), 0, 0, 0.0})
/* An identifier that is a number but a string by its convention
 * (OpenTelemetry's messaging.destination.partition.id). */
#define OW_F_NUMSTR(k, v) ((ow_log_field){(k), 'n', NULL, 0, (int64_t)(v), 0.0})
/* A value the caller wrote as JSON (an array), left out when NULL. */
#define OW_F_JSON(k, v) ((ow_log_field){(k), 'j', (v), 0, 0, 0.0})
#define OW_F_INT(k, v) ((ow_log_field){(k), 'i', NULL, 0, (int64_t)(v), 0.0})
#define OW_F_DBL(k, v) ((ow_log_field){(k), 'f', NULL, 0, 0, (double)(v)})
#define OW_F_KEY(k, p, n) ((ow_log_field){(k), 'k', (const char *)(p), (n), 0, 0.0})

#define OW_LOG_ENABLED(level) \
    ((int)(level) <= atomic_load_explicit(&ow_log_threshold, memory_order_relaxed))

/* OW_LOG(OW_LOG_INFO, "event_name", OW_F_INT("lane", 2), ...) — at least one field. */
#define OW_LOG(level, event, ...)                                                                \
    do {                                                                                         \
        if (OW_LOG_ENABLED(level)) {                                                             \
            const ow_log_field ow_log_f_[] = {__VA_ARGS__};                                      \
            ow_log_write((level), (event), ow_log_f_, sizeof(ow_log_f_) / sizeof(ow_log_f_[0])); \
        }                                                                                        \
    } while (0)

void ow_log_set_level(int level);
/* Redirects output (tests); fd -1 restores stderr. */
void ow_log_set_fd(int fd);
void ow_log_write(int level, const char *event, const ow_log_field *fields, size_t n);

/* Writes the masked form of a key into out ("idem…#1a2b3c4d"): at most a
 * third of the key, never more than 4 bytes, and 8 hex digits of its
 * SHA-256. out must hold OW_LOG_MASK_MAX bytes. */
#define OW_LOG_MASK_MAX 24
void ow_log_mask_key(const char *key, size_t len, char out[OW_LOG_MASK_MAX]);

/* librdkafka log_cb signature bridge. */
struct rd_kafka_s;
void ow_log_rdkafka(const struct rd_kafka_s *rk, int level, const char *fac, const char *buf);

#endif
