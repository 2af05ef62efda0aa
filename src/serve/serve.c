/* The result query service (ow/serve.h): requests, routes, and the
 * service's start and stop. */
#include "ow/serve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "serve_client.h"
#include "serve_conn.h"
#include "serve_lookup.h"
#include "serve_reply.h"
#include "serve_route.h"
#include "ow/log.h"
#include "ow/util.h"

/* How often the timer looks for requests past their deadline and lookups
 * past their bound. */
#define TICK_MS 50

struct ow_serve {
    struct MHD_Daemon *daemon;
    unsigned char token_hash[SHA256_DIGEST_LENGTH];
    serve_proxies trusted;
    serve_conns *conns;
    serve_lookups *lookups;
    serve_rate *rate;
    pthread_t timer;
    int timer_started;
    pthread_mutex_t timer_lock;
    pthread_cond_t timer_cond; /* on CLOCK_MONOTONIC */
    int timer_stop;
};

/* --- Requests ------------------------------------------------------------ */

/* Compares SHA-256 digests with CRYPTO_memcmp, so that neither the
 * content nor the length of the token leaks through timing. */
static int token_ok(const ow_serve *a, struct MHD_Connection *c)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    unsigned char h[SHA256_DIGEST_LENGTH];

    if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
        return 0;
    auth += 7;
    SHA256((const unsigned char *)auth, strlen(auth), h);
    return CRYPTO_memcmp(h, a->token_hash, sizeof(h)) == 0;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *message, const char *h1, const char *v1)
{
    return serve_reply_send(c, serve_reply_error(status, code, message, h1, v1));
}

/* The token comes before the rate limit: a wrong one costs nothing, so a
 * client (or another behind the same address) that fails to authenticate
 * does not use up the requests of one that then does. */
static enum MHD_Result serve_v1(ow_serve *a, struct MHD_Connection *c, serve_conn *conn,
                                const char *url)
{
    serve_route route;
    serve_addr client;
    char why[200];
    int rc;

    if (!token_ok(a, c))
        return send_error(c, 401, "UNAUTHORIZED", "a valid bearer token is required",
                          "WWW-Authenticate", "Bearer");
    serve_client_of(c, &conn->peer, conn->trusted, &a->trusted, &client);
    if (!serve_rate_take(a->rate, &client, ow_clock_mono_ms()))
        return send_error(c, 429, "RATE_LIMITED", "too many requests from this address",
                          "Retry-After", "1");
    if (serve_parse_path(url, &route, why, sizeof(why)) != OW_OK)
        return send_error(c, 400, "INVALID_PATH", why, NULL, NULL);
    if (route.kind != OW_ROUTE_REQUEST && route.kind != OW_ROUTE_ORDER)
        return send_error(c, 404, "NO_SUCH_ROUTE",
                          "paths are /v1/requests/{user_id}/{key} and "
                          "/v1/orders/{user_id}/{external_order_no}",
                          NULL, NULL);
    rc = serve_lookups_submit(a->lookups, c, &route, &conn->job);
    if (rc == OW_EINVAL)
        return serve_reply_send(c, serve_reply_stopping());
    if (rc != OW_OK)
        return send_error(c, 500, "INTERNAL_ERROR", "out of memory", NULL, NULL);
    return MHD_YES; /* suspended until its database thread or the timer answers */
}

static enum MHD_Result on_whole_request(ow_serve *a, struct MHD_Connection *c, serve_conn *conn,
                                        const char *url, const char *method)
{
    serve_reply rep;

    if (conn->job != NULL) {
        /* Resumed: the lookup has its answer. */
        if (serve_lookups_take(a->lookups, &conn->job, &rep) != OW_OK)
            return MHD_YES;
        return serve_reply_send(c, rep);
    }
    serve_conns_request_whole(a->conns, conn);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return send_error(c, 405, "METHOD_NOT_ALLOWED", "only GET and HEAD are served", "Allow",
                          "GET, HEAD");
    if (conn->has_body)
        return send_error(c, 400, "BODY_NOT_ALLOWED", "a GET or HEAD request here has no body",
                          NULL, NULL);
    if (strcmp(url, "/healthz") == 0)
        return serve_reply_send(c, serve_reply_json(200, "{\"status\":\"ok\"}", 15, NULL, NULL));
    return serve_v1(a, c, conn, url);
}

static serve_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return ci != NULL ? ci->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **ptr)
{
    ow_serve *a = cls;
    serve_conn *conn = *ptr;

    (void)version;
    (void)upload_data;
    /* The first call has the headers only. Answering then would be an
     * "early" response after which libmicrohttpd closes the connection;
     * waiting for the whole request keeps it for the client's next one. */
    if (conn == NULL) {
        conn = conn_of(c);
        if (conn == NULL) /* out of memory when it was accepted: answer and close */
            return send_error(c, 503, "OUT_OF_MEMORY", "the service is out of memory",
                              "Retry-After", OW_SERVE_RETRY_AFTER_S);
        *ptr = conn;
        return MHD_YES;
    }
    /* libmicrohttpd wants a body read before the response: it is dropped,
     * and the request refused once it is whole. */
    if (*upload_size != 0) {
        conn->has_body = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    return on_whole_request(a, c, conn, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ptr,
                         enum MHD_RequestTerminationCode toe)
{
    ow_serve *a = cls;
    serve_conn *conn = *ptr;

    (void)c;
    (void)toe;
    if (conn == NULL)
        return;
    serve_lookups_release(a->lookups, &conn->job); /* closed before it was answered */
    conn->has_body = 0;
    serve_conns_request_done(a->conns, conn);
    *ptr = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    ow_serve *a = cls;
    serve_conn *conn;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = serve_conns_add(a->conns, c);
        return;
    }
    conn = *socket_context;
    if (conn != NULL)
        serve_lookups_release(a->lookups, &conn->job);
    serve_conns_remove(a->conns, &conn);
    *socket_context = NULL;
}

/* Keeps the path as the client sent it: segments are decoded one by one
 * after the split, so that %2F stays inside its segment. */
static size_t keep_raw(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

/* --- The timer ----------------------------------------------------------- */

static void *timer_main(void *arg)
{
    ow_serve *a = arg;
    struct timespec until;
    int64_t now;

    pthread_mutex_lock(&a->timer_lock);
    while (!a->timer_stop) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&a->timer_cond, &a->timer_lock, &until);
        if (a->timer_stop)
            break;
        pthread_mutex_unlock(&a->timer_lock);
        now = ow_clock_mono_ms();
        serve_conns_tick(a->conns, now);
        serve_lookups_tick(a->lookups, now);
        pthread_mutex_lock(&a->timer_lock);
    }
    pthread_mutex_unlock(&a->timer_lock);
    return NULL;
}

static int timer_start(ow_serve *a, ow_error *err)
{
    if (pthread_create(&a->timer, NULL, timer_main, a) != 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "api: cannot start the timer thread");
    a->timer_started = 1;
    return OW_OK;
}

static void timer_stop(ow_serve *a)
{
    if (!a->timer_started)
        return;
    pthread_mutex_lock(&a->timer_lock);
    a->timer_stop = 1;
    pthread_cond_signal(&a->timer_cond);
    pthread_mutex_unlock(&a->timer_lock);
    pthread_join(a->timer, NULL);
    a->timer_started = 0;
}

/* --- Start and stop ------------------------------------------------------ */

/* Stops what was started, in the order that keeps libmicrohttpd's rules:
 * every suspended connection is resumed (answered) before the daemon
 * stops, and the connections are closed before what they point to goes. */
static void serve_free(ow_serve *a)
{
    if (a->lookups != NULL)
        serve_lookups_stop(a->lookups);
    if (a->daemon != NULL)
        MHD_stop_daemon(a->daemon);
    timer_stop(a);
    serve_lookups_free(&a->lookups);
    serve_conns_free(&a->conns);
    serve_rate_free(&a->rate);
    pthread_cond_destroy(&a->timer_cond);
    pthread_mutex_destroy(&a->timer_lock);
    free(a);
}

static ow_serve *serve_alloc(void)
{
    ow_serve *a = calloc(1, sizeof(*a));
    pthread_condattr_t attr;

    if (a == NULL)
        return NULL;
    pthread_mutex_init(&a->timer_lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&a->timer_cond, &attr);
    pthread_condattr_destroy(&attr);
    return a;
}

/* The parts of the service that need no database, then the database
 * threads: a bad setting is refused before anything is connected. */
static int serve_init(ow_serve *a, const ow_serve_params *p, ow_error *err)
{
    serve_lookup_params lp = {.store = p->store,
                              .shards = p->shards,
                              .n_shards = p->n_shards,
                              .shard_buckets = p->shard_buckets,
                              .threads = p->threads,
                              .lookup_timeout_ms = p->lookup_timeout_ms};
    char why[200];

    if (serve_parse_proxies(p->trusted_proxies != NULL ? p->trusted_proxies : "", &a->trusted, why,
                            sizeof(why)) != OW_OK)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s", why);
    SHA256((const unsigned char *)p->token, p->token_len, a->token_hash);
    a->conns = serve_conns_new(p->timeout_s, p->max_per_address, &a->trusted);
    a->rate = serve_rate_new(p->rate_limit);
    if (a->conns == NULL || a->rate == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    return serve_lookups_new(&lp, &a->lookups, err);
}

static int daemon_start(ow_serve *a, const ow_serve_params *p, struct sockaddr_in *sa,
                        ow_error *err)
{
    a->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME,
        (uint16_t)p->port, NULL, NULL, on_request, a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)sa,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)p->threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)p->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)p->timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, a, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        a, MHD_OPTION_UNESCAPE_CALLBACK, keep_raw, NULL, MHD_OPTION_END);
    if (a->daemon == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                            "api: cannot listen on %s:%u (in use, or not a local address)",
                            p->address, p->port);
    return OW_OK;
}

int ow_serve_start(const ow_serve_params *p, ow_serve **out, ow_error *err)
{
    struct sockaddr_in sa;
    ow_serve *a;
    int rc;

    *out = NULL;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->port);
    if (p->port == 0 || p->port > 65535 || inet_pton(AF_INET, p->address, &sa.sin_addr) != 1)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "api.address: \"%s\" is not an IPv4 address, or api.port is 0",
                            p->address);
    a = serve_alloc();
    if (a == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    rc = serve_init(a, p, err);
    if (rc == OW_OK)
        rc = timer_start(a, err);
    if (rc == OW_OK)
        rc = daemon_start(a, p, &sa, err);
    if (rc != OW_OK) {
        serve_free(a);
        return rc;
    }
    *out = a;
    return OW_OK;
}

void ow_serve_stop(ow_serve **api)
{
    if (api == NULL || *api == NULL)
        return;
    serve_free(*api);
    *api = NULL;
}
