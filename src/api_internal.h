/* Private to the query service's modules: api.c (requests and routes),
 * api_reply.c (responses), api_conn.c (connections: the per-address limit
 * and the request deadline), api_lookup.c (the database threads) and
 * api_client.c (client addresses and the rate limit). */
#ifndef OW_API_INTERNAL_H
#define OW_API_INTERNAL_H

#include <microhttpd.h>
#include <stdint.h>

#include "ow/admin.h"
#include "ow/api.h"

/* What a 503 tells the client to wait. */
#define OW_API_RETRY_AFTER_S "2"

/* --- Replies (api_reply.c) ------------------------------------------------ */

/* A response and its status: built on any thread, queued on the
 * connection's own. r is NULL when it could not be built (out of memory). */
typedef struct {
    unsigned status;
    struct MHD_Response *r;
} api_reply;

/* A JSON body (copied) with up to one extra header (h1 NULL: none). */
api_reply api_reply_json(unsigned status, const char *body, size_t len, const char *h1,
                         const char *v1);
/* {"status":N,"code":"X","message":"..."} with up to one extra header. */
api_reply api_reply_error(unsigned status, const char *code, const char *message, const char *h1,
                          const char *v1);
/* A stored record: its response bytes, status and digest. */
api_reply api_reply_record(const ow_admin_record *rec);
api_reply api_reply_order(const ow_admin_order *o, int64_t user_id);
/* A failed lookup: 503 for a retriable error, 500 otherwise (logged). */
api_reply api_reply_store_error(const ow_error *err);
/* 503 for a request that came while the service stops. */
api_reply api_reply_stopping(void);
/* Queues rep on c and releases it. MHD_NO (close the connection) when it
 * could not be built or queued. */
enum MHD_Result api_reply_send(struct MHD_Connection *c, api_reply rep);
void api_reply_drop(api_reply *rep);

/* --- Connections (api_conn.c) --------------------------------------------- */

typedef struct api_conns api_conns;
typedef struct api_job api_job;

/* One client connection, from libmicrohttpd's "started" notification to
 * its "closed" one. */
typedef struct api_conn {
    /* The registry's, under its lock. */
    struct api_conn *prev, *next; /* every connection */
    int fd;
    int64_t deadline_ms; /* the request must be whole by then; 0 = none */
    int closing;         /* its socket was shut down */
    /* Set at the start, then read-only. */
    ow_api_addr peer;
    int trusted; /* the peer is a trusted proxy */
    /* The connection's serving thread's alone. */
    int has_body;
    api_job *job; /* the lookup it waits for, or answered */
} api_conn;

api_conns *api_conns_new(unsigned timeout_s, unsigned max_per_address,
                         const ow_api_proxies *trusted);
void api_conns_free(api_conns **conns);
/* A new connection: registered, with its request deadline running, or
 * shut down at once when its address holds max_per_address already (then
 * registered all the same, until it is closed). NULL when out of memory,
 * after shutting the socket down. */
api_conn *api_conns_add(api_conns *conns, struct MHD_Connection *c);
/* Before libmicrohttpd closes the socket: the registry forgets it, so no
 * later shutdown can reach a descriptor the system has handed out again. */
void api_conns_remove(api_conns *conns, api_conn **conn);
/* The request arrived whole: no deadline while it is answered. */
void api_conns_request_whole(api_conns *conns, api_conn *conn);
/* The response was sent: the next request's deadline starts. */
void api_conns_request_done(api_conns *conns, api_conn *conn);
/* Shuts down every connection past its deadline. */
void api_conns_tick(api_conns *conns, int64_t now_ms);

/* --- Lookups (api_lookup.c) ----------------------------------------------- */

typedef struct api_lookups api_lookups;

/* Creates the database connections of every shard (api.threads each),
 * checks one per shard (as ow_api_start documents) and starts their
 * threads. */
int api_lookups_new(const ow_api_params *p, api_lookups **out, ow_error *err);
/* Suspends c and queues the lookup of route on its user's shard; *job is
 * then the connection's reference, and c is resumed once the job has its
 * reply. OW_EINVAL when the service is stopping (nothing suspended). */
int api_lookups_submit(api_lookups *l, struct MHD_Connection *c, const ow_route *route,
                       api_job **job);
/* The reply of an answered job (the caller sends it), releasing the
 * connection's reference. OW_ERETRY, job kept, when it has none yet. */
int api_lookups_take(api_lookups *l, api_job **job, api_reply *out);
/* Releases the connection's reference without taking the reply (the
 * connection closed first). */
void api_lookups_release(api_lookups *l, api_job **job);
/* Answers every lookup past its bound with 503. */
void api_lookups_tick(api_lookups *l, int64_t now_ms);
/* Answers every pending lookup with 503, interrupts the database calls in
 * progress and joins the threads; later submits fail. */
void api_lookups_stop(api_lookups *l);
void api_lookups_free(api_lookups **l);

/* --- Clients (api_client.c) ----------------------------------------------- */

typedef struct api_rate api_rate;

/* Client addresses the rate limit keeps a bucket for at most. */
#define API_RATE_ADDRESSES 4096

/* per_s requests per second per client address, bursts of as many; 0 =
 * no limit. */
api_rate *api_rate_new(unsigned per_s);
/* The same with max_addresses (at least 1) buckets and another hash (for
 * the unit test: a small table, addresses that share a hash). */
api_rate *api_rate_new_with(unsigned per_s, size_t max_addresses,
                            uint64_t (*hash)(const ow_api_addr *));
void api_rate_free(api_rate **rate);
/* 1 when client may make one more request now (and it is counted). */
int api_rate_take(api_rate *rate, const ow_api_addr *client, int64_t now_ms);

/* The hash connections and rate-limit buckets file an address under;
 * addresses with one hash are told apart by their bytes. */
uint64_t api_addr_hash(const ow_api_addr *a);

/* The address of c's peer (zero when libmicrohttpd has none). */
void api_client_peer(struct MHD_Connection *c, ow_api_addr *out);
/* The client a request is counted for: the peer, or behind a trusted proxy
 * the forwarded address (ow_api_forwarded_client). */
void api_client_of(struct MHD_Connection *c, const api_conn *conn, const ow_api_proxies *trusted,
                   ow_api_addr *out);

#endif
