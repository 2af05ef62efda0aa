/* Private to the query service's modules: serve.c (requests and routes),
 * serve_reply.c (responses), serve_conn.c (connections: the per-address limit
 * and the request deadline), serve_lookup.c (the database threads) and
 * serve_client.c (client addresses and the rate limit). */
#ifndef OW_API_INTERNAL_H
#define OW_API_INTERNAL_H

#include <microhttpd.h>
#include <stdint.h>

#include "ow/admin.h"
#include "ow/serve.h"

/* What a 503 tells the client to wait. */
#define OW_API_RETRY_AFTER_S "2"

/* --- Replies (serve_reply.c) ------------------------------------------------ */

/* A response and its status: built on any thread, queued on the
 * connection's own. r is NULL when it could not be built (out of memory). */
typedef struct {
    unsigned status;
    struct MHD_Response *r;
} serve_reply;

/* A JSON body (copied) with up to one extra header (h1 NULL: none). */
serve_reply serve_reply_json(unsigned status, const char *body, size_t len, const char *h1,
                             const char *v1);
/* {"status":N,"code":"X","message":"..."} with up to one extra header. */
serve_reply serve_reply_error(unsigned status, const char *code, const char *message,
                              const char *h1, const char *v1);
/* A stored record: its response bytes, status and digest. */
serve_reply serve_reply_record(const ow_admin_record *rec);
serve_reply serve_reply_order(const ow_admin_order *o, int64_t user_id);
/* A failed lookup: 503 for a retriable error, 500 otherwise (logged). */
serve_reply serve_reply_store_error(const ow_error *err);
/* 503 for a request that came while the service stops. */
serve_reply serve_reply_stopping(void);
/* Queues rep on c and releases it. MHD_NO (close the connection) when it
 * could not be built or queued. */
enum MHD_Result serve_reply_send(struct MHD_Connection *c, serve_reply rep);
void serve_reply_drop(serve_reply *rep);

/* --- Connections (serve_conn.c) --------------------------------------------- */

typedef struct serve_conns serve_conns;
typedef struct serve_job serve_job;

/* One client connection, from libmicrohttpd's "started" notification to
 * its "closed" one. */
typedef struct serve_conn {
    /* The registry's, under its lock. */
    struct serve_conn *prev, *next; /* every connection */
    int fd;
    int64_t deadline_ms; /* the request must be whole by then; 0 = none */
    int closing;         /* its socket was shut down */
    /* Set at the start, then read-only. */
    ow_serve_addr peer;
    int trusted; /* the peer is a trusted proxy */
    /* The connection's serving thread's alone. */
    int has_body;
    serve_job *job; /* the lookup it waits for, or answered */
} serve_conn;

serve_conns *serve_conns_new(unsigned timeout_s, unsigned max_per_address,
                             const ow_serve_proxies *trusted);
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

/* --- Lookups (serve_lookup.c) ----------------------------------------------- */

typedef struct serve_lookups serve_lookups;

/* Creates the database connections of every shard (api.threads each),
 * checks one per shard (as ow_serve_start documents) and starts their
 * threads. */
int serve_lookups_new(const ow_serve_params *p, serve_lookups **out, ow_error *err);
/* Suspends c and queues the lookup of route on its user's shard; *job is
 * then the connection's reference, and c is resumed once the job has its
 * reply. OW_EINVAL when the service is stopping (nothing suspended). */
int serve_lookups_submit(serve_lookups *l, struct MHD_Connection *c, const ow_route *route,
                         serve_job **job);
/* The reply of an answered job (the caller sends it), releasing the
 * connection's reference. OW_ERETRY, job kept, when it has none yet. */
int serve_lookups_take(serve_lookups *l, serve_job **job, serve_reply *out);
/* Releases the connection's reference without taking the reply (the
 * connection closed first). */
void serve_lookups_release(serve_lookups *l, serve_job **job);
/* Answers every lookup past its bound with 503. */
void serve_lookups_tick(serve_lookups *l, int64_t now_ms);
/* Answers every pending lookup with 503, interrupts the database calls in
 * progress and joins the threads; later submits fail. */
void serve_lookups_stop(serve_lookups *l);
void serve_lookups_free(serve_lookups **l);

/* --- Clients (serve_client.c) ----------------------------------------------- */

typedef struct serve_rate serve_rate;

/* Client addresses the rate limit keeps a bucket for at most. */
#define API_RATE_ADDRESSES 4096

/* per_s requests per second per client address, bursts of as many; 0 =
 * no limit. */
serve_rate *serve_rate_new(unsigned per_s);
/* The same with max_addresses (at least 1) buckets and another hash (for
 * the unit test: a small table, addresses that share a hash). */
serve_rate *serve_rate_new_with(unsigned per_s, size_t max_addresses,
                                uint64_t (*hash)(const ow_serve_addr *));
void serve_rate_free(serve_rate **rate);
/* 1 when client may make one more request now (and it is counted). */
int serve_rate_take(serve_rate *rate, const ow_serve_addr *client, int64_t now_ms);

/* The hash connections and rate-limit buckets file an address under;
 * addresses with one hash are told apart by their bytes. */
uint64_t serve_addr_hash(const ow_serve_addr *a);

/* The address of c's peer (zero when libmicrohttpd has none). */
void serve_client_peer(struct MHD_Connection *c, ow_serve_addr *out);
/* The client a request is counted for: the peer, or behind a trusted proxy
 * the forwarded address (ow_serve_forwarded_client). */
void serve_client_of(struct MHD_Connection *c, const serve_conn *conn,
                     const ow_serve_proxies *trusted, ow_serve_addr *out);

#endif
