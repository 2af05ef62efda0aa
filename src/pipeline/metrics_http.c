#include "metrics_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "metrics.h"

struct ow_metrics_http {
    struct MHD_Daemon *daemon;
    ow_metrics_http_hooks hooks;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rc;

    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result serve_metrics(ow_metrics_http *h, struct MHD_Connection *c)
{
    ow_buf out;
    enum MHD_Result rc;

    ow_buf_init(&out);
    if (ow_metrics_render(&out, h->hooks.metrics_extra, h->hooks.opaque) != OW_OK) {
        ow_buf_cleanup(&out);
        return reply(c, 500, "text/plain", "out of memory\n", 14);
    }
    rc = reply(c, 200, "text/plain; version=0.0.4", out.data, out.len);
    ow_buf_cleanup(&out);
    return rc;
}

static enum MHD_Result serve_ready(ow_metrics_http *h, struct MHD_Connection *c)
{
    ow_buf why;
    enum MHD_Result rc;
    int ready;

    ow_buf_init(&why);
    ready = h->hooks.ready != NULL ? h->hooks.ready(&why, h->hooks.opaque) : 1;
    if (ready && why.len > 0 && ow_buf_appends(&why, "ready\n") == OW_OK)
        rc = reply(c, 200, "text/plain", why.data, why.len);
    else if (ready)
        rc = reply(c, 200, "text/plain", "ready\n", 6);
    else
        rc = reply(c, 503, "text/plain", why.data != NULL ? why.data : "not ready\n",
                   why.data != NULL ? why.len : 10);
    ow_buf_cleanup(&why);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **ptr)
{
    ow_metrics_http *h = cls;

    (void)version;
    (void)upload_data;
    (void)ptr;
    if (*upload_size != 0)
        return MHD_NO;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(c, 405, "text/plain", "method not allowed\n", 19);
    if (strcmp(url, "/metrics") == 0)
        return serve_metrics(h, c);
    if (strcmp(url, "/healthz") == 0)
        return reply(c, 200, "text/plain", "ok\n", 3);
    if (strcmp(url, "/readyz") == 0)
        return serve_ready(h, c);
    return reply(c, 404, "text/plain", "not found\n", 10);
}

/*
 * Limits against slow and idle clients: about 1,020 idle connections,
 * libmicrohttpd's default limit of FD_SETSIZE - 4, once made /healthz
 * unanswerable. One epoll thread serves every connection, and the
 * handlers only read atomics, so a probe is answered however many clients
 * sit idle. An idle connection is closed after HTTP_IDLE_TIMEOUT_S (a
 * Prometheus scrape or a probe takes milliseconds); one address may hold
 * HTTP_PER_IP_LIMIT connections, all together at most HTTP_CONNECTION_LIMIT
 * and a quarter of the open-file limit (the systemd unit sets 65536).
 */
#define HTTP_CONNECTION_LIMIT 4096
#define HTTP_PER_IP_LIMIT 64
#define HTTP_IDLE_TIMEOUT_S 5
#define HTTP_CONNECTION_MEMORY 16384 /* request headers; responses live apart */

static unsigned connection_limit(void)
{
    struct rlimit rl;
    rlim_t quarter;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return HTTP_CONNECTION_LIMIT;
    quarter = rl.rlim_cur / 4;
    return quarter < HTTP_CONNECTION_LIMIT ? (unsigned)quarter : HTTP_CONNECTION_LIMIT;
}

/* metrics.address as a socket address: an IPv4 or IPv6 literal, or
 * localhost, which is 127.0.0.1. Returns 0 when it is none of these. */
static int parse_address(const char *address, unsigned port, struct sockaddr_storage *ss, int *ipv6)
{
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (strcmp(address, "localhost") == 0)
        address = "127.0.0.1";
    *ipv6 = 0;
    if (inet_pton(AF_INET, address, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        return 1;
    }
    if (inet_pton(AF_INET6, address, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *ipv6 = 1;
        return 1;
    }
    return 0;
}

int ow_metrics_http_start(const char *address, unsigned port, const ow_metrics_http_hooks *hooks,
                          ow_metrics_http **out, ow_error *err)
{
    struct sockaddr_storage sa;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD;
    int ipv6 = 0;
    ow_metrics_http *h;

    *out = NULL;
    if (port == 0 || port > 65535 || !parse_address(address, port, &sa, &ipv6))
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "metrics.address: \"%s\" is not an IPv4 or IPv6 address or localhost, "
                            "or the port is 0",
                            address);
    if (ipv6)
        flags |= MHD_USE_IPv6;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    h->hooks = *hooks;
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit(), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned int)HTTP_PER_IP_LIMIT, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)HTTP_CONNECTION_MEMORY, MHD_OPTION_END);
    if (h->daemon == NULL) {
        free(h);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                            "metrics: cannot listen on %s:%u (in use, or not a local address)",
                            address, port);
    }
    *out = h;
    return OW_OK;
}

void ow_metrics_http_stop(ow_metrics_http **http)
{
    ow_metrics_http *h = http != NULL ? *http : NULL;

    if (h == NULL)
        return;
    MHD_stop_daemon(h->daemon);
    free(h);
    *http = NULL;
}
