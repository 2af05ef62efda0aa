/*
 * The result query service (issue 15): a read-only HTTP interface next to
 * the workers, served by libmicrohttpd's thread pool.
 *
 *   GET /v1/requests/{user_id}/{key}            the stored response, byte for
 *       byte, with its stored status (201 or 409), `Idempotency-Replayed:
 *       true` and `Request-Digest: <64 hex>`; 404 when there is no record
 *   GET /v1/orders/{user_id}/{external_order_no} the order as JSON (200/404)
 *   GET /healthz                                 200 "ok" (no token, no database)
 *
 * Every /v1 request needs `Authorization: Bearer <token>`; the token is
 * compared in constant time before anything else is looked at, and a
 * missing or wrong one costs no database query (401). Path segments are
 * percent-decoded and checked with the message rules (user id: 1 to 2^63-1
 * in decimal; key: ow_request_check_key; external_order_no: 1 to 64 bytes
 * of printable ASCII) before the database is touched (400). A database
 * that cannot be reached gives 503 with Retry-After; the next request
 * reconnects. Errors are JSON: {"status":N,"code":"...","message":"..."}.
 */
#ifndef OW_API_H
#define OW_API_H

#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"
#include "ow/request.h"
#include "ow/store.h"

typedef struct ow_api ow_api;

typedef struct {
    const char *address; /* IPv4 */
    unsigned port;
    unsigned threads;         /* serving threads = database connections */
    unsigned max_connections; /* simultaneous clients */
    unsigned timeout_s;       /* idle or slow connection */
    unsigned rate_limit;      /* requests/s per client address, 0 = none */
    const char *token;        /* the bearer token (copied) */
    size_t token_len;
    ow_store_params store; /* borrowed for the call; ow_store_new copies */
    /* With user shards (issue 14): one database per shard, in mysql.shards
     * order; lookups go to the user's shard. n_shards 0 = store only. */
    const ow_store_params *shards;
    unsigned n_shards;
    uint32_t shard_buckets;
} ow_api_params;

int ow_api_start(const ow_api_params *p, ow_api **out, ow_error *err);
void ow_api_stop(ow_api **api);

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
int ow_api_parse_path(const char *url, ow_route *route, char *why, size_t why_size);

#endif
