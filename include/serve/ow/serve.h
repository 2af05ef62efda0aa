/*
 * The result query service: a read-only HTTP interface next to
 * the workers, served by libmicrohttpd's thread pool.
 *
 *   GET /v1/requests/{user_id}/{key}            the stored response, byte for
 *       byte, with its stored status (201 or 409), `Idempotency-Replayed:
 *       true` and `Request-Digest: <64 hex>`; 404 when there is no record
 *   GET /v1/orders/{user_id}/{external_order_no} the order as JSON (200/404)
 *   GET /healthz                                 200 "ok" (no token, no database)
 *
 * Every /v1 request needs `Authorization: Bearer <token>`; the token is
 * compared in constant time before the rate limit, the path or the
 * database, and a missing or wrong one costs no database query and no share
 * of the client's rate limit (401). Path segments are percent-decoded and checked with the
 * message rules (user id: 1 to 2^63-1 in decimal; key: ow_request_check_key;
 * external_order_no: 1 to 64 bytes of printable ASCII) before the database
 * is touched (400). Other methods than GET and HEAD get 405, a request body
 * 400, both after the body was read.
 *
 * The serving threads never touch the database: a lookup suspends its
 * connection and waits in its shard's queue for one of that shard's
 * database threads, so /healthz answers while a database hangs. A lookup
 * is answered within lookup_timeout_ms, with 503 and Retry-After when the
 * database did not answer in time or all of the shard's connections stayed
 * busy; the next request reconnects. Errors are JSON:
 * {"status":N,"code":"...","message":"..."}.
 *
 * A request must arrive whole within timeout_s of its connection's start
 * or of the previous response on it, however slowly its bytes trickle in;
 * one client address may hold max_per_address connections at most.
 */
#ifndef OW_API_H
#define OW_API_H

#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"
#include "ow/request.h"
#include "ow/store.h"

typedef struct ow_serve ow_serve;

typedef struct {
    const char *address; /* IPv4 */
    unsigned port;
    unsigned threads;            /* serving threads; database threads per shard */
    unsigned max_connections;    /* simultaneous clients */
    unsigned max_per_address;    /* connections of one address, 0 = no limit */
    unsigned timeout_s;          /* to send a whole request; to stay idle */
    unsigned lookup_timeout_ms;  /* a lookup is answered within it */
    unsigned rate_limit;         /* requests/s per client address, 0 = none */
    const char *trusted_proxies; /* comma-separated addresses, "" = none */
    const char *token;           /* the bearer token (copied) */
    size_t token_len;
    ow_store_params store; /* borrowed for the call; ow_store_new copies */
    /* With user shards: one database per shard, in mysql.shards
     * order; lookups go to the user's shard. n_shards 0 = store only. */
    const ow_store_params *shards;
    unsigned n_shards;
    uint32_t shard_buckets;
} ow_serve_params;

/* Starts the service. An invalid parameter (the address, a trusted proxy)
 * is OW_ERRCLASS_INVALID_INPUT with a message naming its key. */
int ow_serve_start(const ow_serve_params *p, ow_serve **out, ow_error *err);
void ow_serve_stop(ow_serve **api);

/* --- Path parsing (pure; exposed for the unit test) ---------------------- */

typedef enum { OW_ROUTE_NONE = 0, OW_ROUTE_REQUEST, OW_ROUTE_ORDER, OW_ROUTE_HEALTH } ow_route_kind;

typedef struct {
    ow_route_kind kind;
    int64_t user_id;
    char segment[OW_KEY_MAX + 1]; /* the decoded key or external_order_no */
    size_t segment_len;
} ow_route;

/* Parses a raw (still percent-encoded) path. Returns 0 with the route
 * (kind OW_ROUTE_NONE for an unknown path), or OW_EINVAL with why set to
 * "<segment>: <reason>" when a segment breaks the rules. */
int ow_serve_parse_path(const char *url, ow_route *route, char *why, size_t why_size);

/* --- Client addresses (pure; exposed for the unit test) ------------------ */

/* An IPv6 address, or an IPv4 one as ::ffff:a.b.c.d, so that both kinds
 * compare as 16 bytes. */
typedef struct {
    unsigned char b[16];
} ow_serve_addr;

#define OW_API_PROXIES_MAX 32
/* X-Forwarded-For header lines read from one request; a request with more
 * is counted as its proxy's. */
#define OW_API_XFF_LINES_MAX 16

typedef struct {
    ow_serve_addr addr[OW_API_PROXIES_MAX];
    size_t n;
} ow_serve_proxies;

/* Parses an IPv4 or IPv6 literal of n bytes. Returns 0 or OW_EINVAL. */
int ow_serve_addr_parse(const char *s, size_t n, ow_serve_addr *out);
/* "a.b.c.d" for a mapped IPv4 address, the IPv6 text otherwise. */
void ow_serve_addr_format(const ow_serve_addr *a, char *out, size_t size);

/* Parses api.trusted_proxies: comma-separated addresses, blanks around them
 * ignored, "" for none. OW_EINVAL with why naming the bad entry. */
int ow_serve_parse_proxies(const char *list, ow_serve_proxies *out, char *why, size_t why_size);
int ow_serve_proxies_has(const ow_serve_proxies *p, const ow_serve_addr *a);

/* The client of a request that came from the trusted proxy *client: the
 * X-Forwarded-For lines (xff[0..n), in the order received) are read from
 * the right, skipping trusted proxies; the first other address is the
 * client. Only that part of the header was written by proxies the service
 * trusts; anything further left may have been written by the client. An
 * entry that is not an address ends the walk at the hop to its right. */
void ow_serve_forwarded_client(const ow_serve_proxies *p, const char *const *xff, size_t n,
                               ow_serve_addr *client);

#endif
