/*
 * The operations endpoint: GET /metrics (Prometheus text), /healthz (the
 * process is up) and /readyz (it can do its work). Served by libmicrohttpd's
 * own thread; the worker supplies what to say through callbacks.
 */
#ifndef OW_METRICS_HTTP_H
#define OW_METRICS_HTTP_H

#include "ow/error.h"
#include "ow/util.h"

typedef struct ow_metrics_http ow_metrics_http;

typedef struct {
    /* Appends worker-specific metric lines (lag per partition). */
    void (*metrics_extra)(ow_buf *out, void *opaque);
    /* Returns 1 when ready (lines it appended to why come before
     * "ready"); otherwise appends the reasons to why. */
    int (*ready)(ow_buf *why, void *opaque);
    void *opaque;
} ow_metrics_http_hooks;

/* Binds address:port (loopback by default). port 0 is refused. */
int ow_metrics_http_start(const char *address, unsigned port, const ow_metrics_http_hooks *hooks,
                          ow_metrics_http **out, ow_error *err);
void ow_metrics_http_stop(ow_metrics_http **http);

#endif
