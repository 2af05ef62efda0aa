/* The query service's connections (serve_conn.c). */
#ifndef OW_SERVE_CONN_H
#define OW_SERVE_CONN_H

#include <microhttpd.h>
#include <stdint.h>

#include "ow/list.h"
#include "serve_client.h"

typedef struct serve_conns serve_conns;
typedef struct serve_job serve_job;

/* One client connection, from libmicrohttpd's "started" notification to
 * its "closed" one. */
typedef struct serve_conn {
    /* The registry's, under its lock. */
    ow_list link; /* in the registry's list of every connection */
    int fd;
    int64_t deadline_ms; /* the request must be whole by then; 0 = none */
    int closing;         /* its socket was shut down */
    /* Set at the start, then read-only. */
    serve_addr peer;
    int trusted; /* the peer is a trusted proxy */
    /* The connection's serving thread's alone. */
    int has_body;
    serve_job *job; /* the lookup it waits for, or answered */
} serve_conn;

serve_conns *serve_conns_new(unsigned timeout_s, unsigned max_per_address,
                             const serve_proxies *trusted);
void serve_conns_free(serve_conns **conns);
/* A new connection: registered, with its request deadline running, or
 * shut down at once when its address holds max_per_address already (then
 * registered all the same, until it is closed). NULL when out of memory,
 * after shutting the socket down. */
serve_conn *serve_conns_add(serve_conns *conns, struct MHD_Connection *c);
/* Before libmicrohttpd closes the socket: the registry forgets it, so no
 * later shutdown can reach a descriptor the system has handed out again. */
void serve_conns_remove(serve_conns *conns, serve_conn **conn);
/* The request arrived whole: no deadline while it is answered. */
void serve_conns_request_whole(serve_conns *conns, serve_conn *conn);
/* The response was sent: the next request's deadline starts. */
void serve_conns_request_done(serve_conns *conns, serve_conn *conn);
/* Shuts down every connection past its deadline. */
void serve_conns_tick(serve_conns *conns, int64_t now_ms);

#endif
