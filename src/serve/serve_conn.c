/* The query service's connections (serve_conn.h): how many one address
 * holds, and the deadline by which each request must have arrived whole.
 *
 * libmicrohttpd's own timeout counts inactivity, so a client that sends a
 * byte every few seconds keeps a connection forever, and enough of them use
 * up api.max_connections. libmicrohttpd 0.9.75 has no total deadline and no
 * way to close a connection from another thread, so the timer shuts the
 * socket down (shutdown(2)); libmicrohttpd then reads the end of the stream
 * and closes the connection itself. That is safe against a descriptor that
 * was closed and handed out again because a connection stays registered
 * until libmicrohttpd's "closed" notification, which comes before it closes
 * the socket, and both happen under the registry's lock.
 *
 * Its own per-address limit is used instead of libmicrohttpd's
 * (MHD_OPTION_PER_IP_CONNECTION_LIMIT) because that one cannot leave out
 * the trusted proxies, whose connections carry many clients. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "serve_conn.h"
#include "ow/error.h"
#include "ow/htab.h"
#include "ow/log.h"
#include "ow/util.h"

/* Closed connections are logged at most this often, with their count. */
#define LOG_EVERY_MS 1000

struct serve_conns {
    pthread_mutex_t lock;
    unsigned timeout_ms;
    unsigned max_per_address;
    serve_proxies trusted;
    ow_list all;     /* every connection */
    ow_htab by_addr; /* address hash -> connection */
    /* Since the last log line. */
    uint64_t cut_slow, refused;
    serve_addr last_refused;
    int64_t logged_ms;
};

serve_conns *serve_conns_new(unsigned timeout_s, unsigned max_per_address,
                             const serve_proxies *trusted)
{
    serve_conns *cs = calloc(1, sizeof(*cs));

    if (cs == NULL)
        return NULL;
    pthread_mutex_init(&cs->lock, NULL);
    cs->timeout_ms = timeout_s * 1000u;
    cs->max_per_address = max_per_address;
    cs->trusted = *trusted;
    ow_list_init(&cs->all);
    (void)ow_htab_init(&cs->by_addr, 0); /* no memory yet: it cannot fail */
    return cs;
}

void serve_conns_free(serve_conns **conns)
{
    if (conns == NULL || *conns == NULL)
        return;
    /* libmicrohttpd has closed every connection by now. */
    pthread_mutex_destroy(&(*conns)->lock);
    ow_htab_free(&(*conns)->by_addr);
    free(*conns);
    *conns = NULL;
}

/* Connections of conn's address that are not being closed, conn excluded. */
static unsigned same_address(const serve_conns *cs, const serve_conn *conn)
{
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t v;
    unsigned n = 0;

    while (ow_htab_next(&cs->by_addr, serve_addr_hash(&conn->peer), &w, &v)) {
        const serve_conn *o = (const serve_conn *)v;

        if (o != conn && !o->closing && memcmp(o->peer.b, conn->peer.b, sizeof(o->peer.b)) == 0)
            n++;
    }
    return n;
}

/* Returns 0 or OW_ENOMEM (conn is not linked then). */
static int link_conn(serve_conns *cs, serve_conn *conn)
{
    if (ow_htab_put(&cs->by_addr, serve_addr_hash(&conn->peer), (uintptr_t)conn) != OW_OK)
        return OW_ENOMEM;
    ow_list_push(&cs->all, &conn->link);
    return OW_OK;
}

static void unlink_conn(serve_conns *cs, serve_conn *conn)
{
    ow_htab_remove(&cs->by_addr, serve_addr_hash(&conn->peer), (uintptr_t)conn);
    ow_list_remove(&conn->link);
}

static int socket_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

    return ci != NULL ? ci->connect_fd : -1;
}

/* Called on the connection's thread before libmicrohttpd can close it: the
 * descriptor is still this connection's. */
static void shut_down(struct MHD_Connection *c)
{
    if (socket_of(c) >= 0)
        shutdown(socket_of(c), SHUT_RDWR);
}

serve_conn *serve_conns_add(serve_conns *cs, struct MHD_Connection *c)
{
    serve_conn *conn = calloc(1, sizeof(*conn));
    int rc;

    if (conn == NULL) {
        shut_down(c);
        return NULL;
    }
    ow_list_init(&conn->link);
    conn->fd = socket_of(c);
    serve_client_peer(c, &conn->peer);
    conn->trusted = serve_proxies_has(&cs->trusted, &conn->peer);
    pthread_mutex_lock(&cs->lock);
    conn->deadline_ms = ow_clock_mono_ms() + cs->timeout_ms;
    if (cs->max_per_address > 0 && !conn->trusted &&
        same_address(cs, conn) >= cs->max_per_address) {
        conn->closing = 1;
        cs->refused++;
        cs->last_refused = conn->peer;
        if (conn->fd >= 0)
            shutdown(conn->fd, SHUT_RDWR);
    }
    rc = link_conn(cs, conn);
    pthread_mutex_unlock(&cs->lock);
    if (rc != OW_OK) {
        shut_down(c);
        free(conn);
        return NULL;
    }
    return conn;
}

void serve_conns_remove(serve_conns *cs, serve_conn **conn)
{
    if (conn == NULL || *conn == NULL)
        return;
    pthread_mutex_lock(&cs->lock);
    unlink_conn(cs, *conn);
    pthread_mutex_unlock(&cs->lock);
    free(*conn);
    *conn = NULL;
}

void serve_conns_request_whole(serve_conns *cs, serve_conn *conn)
{
    pthread_mutex_lock(&cs->lock);
    conn->deadline_ms = 0;
    pthread_mutex_unlock(&cs->lock);
}

void serve_conns_request_done(serve_conns *cs, serve_conn *conn)
{
    pthread_mutex_lock(&cs->lock);
    conn->deadline_ms = ow_clock_mono_ms() + cs->timeout_ms;
    pthread_mutex_unlock(&cs->lock);
}

static void log_closed(serve_conns *cs, int64_t now_ms)
{
    char addr[64];

    if (cs->cut_slow == 0 && cs->refused == 0)
        return;
    if (now_ms - cs->logged_ms < LOG_EVERY_MS)
        return;
    if (cs->cut_slow > 0)
        OW_LOG(OW_LOG_WARN, "api_slow_requests_closed", OW_F_INT("count", cs->cut_slow),
               OW_F_INT("timeout_ms", cs->timeout_ms));
    if (cs->refused > 0) {
        serve_addr_format(&cs->last_refused, addr, sizeof(addr));
        OW_LOG(OW_LOG_WARN, "api_connections_refused", OW_F_INT("count", cs->refused),
               OW_F_INT("limit", cs->max_per_address), OW_F_STR("last_address", addr));
    }
    cs->cut_slow = 0;
    cs->refused = 0;
    cs->logged_ms = now_ms;
}

void serve_conns_tick(serve_conns *cs, int64_t now_ms)
{
    pthread_mutex_lock(&cs->lock);
    for (ow_list *n = cs->all.next; n != &cs->all; n = n->next) {
        serve_conn *conn = OW_LIST_ITEM(n, serve_conn, link);

        if (conn->closing || conn->deadline_ms == 0 || now_ms < conn->deadline_ms)
            continue;
        conn->closing = 1;
        cs->cut_slow++;
        if (conn->fd >= 0)
            shutdown(conn->fd, SHUT_RDWR);
    }
    log_closed(cs, now_ms);
    pthread_mutex_unlock(&cs->lock);
}
