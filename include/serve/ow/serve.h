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
#ifndef OW_SERVE_H
#define OW_SERVE_H

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

#endif
