/* The query service's paths (serve_route.c): pure, and unit-tested. */
#ifndef OW_SERVE_ROUTE_H
#define OW_SERVE_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "ow/request.h"

/* The routes of the service. */
typedef enum {
    OW_ROUTE_NONE = 0,
    OW_ROUTE_REQUEST,
    OW_ROUTE_ORDER,
    OW_ROUTE_HEALTH
} serve_route_kind;

typedef struct {
    serve_route_kind kind;
    int64_t user_id;
    char segment[OW_KEY_MAX + 1]; /* the decoded key or external_order_no */
    size_t segment_len;
} serve_route;

/* Parses a raw (still percent-encoded) path. Returns 0 with the route
 * (kind OW_ROUTE_NONE for an unknown path), or OW_EINVAL with why set to
 * "<segment>: <reason>" when a segment breaks the rules. */
int serve_parse_path(const char *url, serve_route *route, char *why, size_t why_size);

#endif
