/* The query service's paths (serve_route.h): segments are percent-decoded
 * one by one and checked with the message rules before any database is
 * asked. */
#include "serve_route.h"

#include <stdio.h>
#include <string.h>

#include "ow/error.h"
#include "ow/util.h"

_Static_assert(OW_KEY_MAX >= OW_EXT_NO_MAX, "serve_route.segment holds either");

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes p[0..n) into out (at most cap bytes). */
static int decode_segment(const char *p, size_t n, char *out, size_t cap, size_t *len,
                          const char **why)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i];

        if (c == '%') {
            int hi = i + 2 < n ? hex_value(p[i + 1]) : -1;
            int lo = i + 2 < n ? hex_value(p[i + 2]) : -1;

            if (hi < 0 || lo < 0) {
                *why = "malformed percent-encoding";
                return OW_EINVAL;
            }
            c = hi * 16 + lo;
            i += 2;
        }
        if (k == cap) {
            *why = "is too long";
            return OW_EINVAL;
        }
        out[k++] = (char)c;
    }
    *len = k;
    return OW_OK;
}

/* The message rule for user_id: a decimal integer from 1 to 2^63-1, here
 * without sign or leading zero. */
static int parse_user(const char *p, size_t n, int64_t *out)
{
    uint64_t v = 0;

    if (n == 0 || n > 19 || p[0] == '0')
        return OW_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return OW_EINVAL;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return OW_EINVAL;
    *out = (int64_t)v;
    return OW_OK;
}

static int check_ext(const char *s, size_t n, char *why, size_t why_size)
{
    if (n == 0 || n > OW_EXT_NO_MAX) {
        snprintf(why, why_size, "external_order_no: must be 1 to %d bytes", OW_EXT_NO_MAX);
        return OW_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x20 || c > 0x7e) {
            snprintf(why, why_size, "external_order_no: byte %zu is not printable ASCII", i + 1);
            return OW_EINVAL;
        }
    }
    return OW_OK;
}

/* The second segment: decoded, then checked by the message rules. */
static int parse_second(const char *p, size_t n, serve_route *r, char *why, size_t why_size)
{
    const char *name = r->kind == OW_ROUTE_REQUEST ? "key" : "external_order_no";
    size_t cap = r->kind == OW_ROUTE_REQUEST ? OW_KEY_MAX : OW_EXT_NO_MAX;
    const char *reason = NULL;
    ow_field_errors errs;

    if (memchr(p, '/', n) != NULL) {
        snprintf(why, why_size, "%s: must be one path segment (send '/' as %%2F)", name);
        return OW_EINVAL;
    }
    if (decode_segment(p, n, r->segment, cap, &r->segment_len, &reason) != OW_OK) {
        snprintf(why, why_size, "%s: %s (at most %zu bytes)", name, reason, cap);
        return OW_EINVAL;
    }
    r->segment[r->segment_len] = '\0';
    if (r->kind == OW_ROUTE_ORDER)
        return check_ext(r->segment, r->segment_len, why, why_size);
    ow_field_errors_init(&errs);
    if (ow_request_check_key(r->segment, r->segment_len, &errs) != OW_OK) {
        snprintf(why, why_size, "key: %s", errs.count > 0 ? errs.items[0].message : "invalid");
        return OW_EINVAL;
    }
    return OW_OK;
}

int serve_parse_path(const char *url, serve_route *r, char *why, size_t why_size)
{
    static const char req_prefix[] = "/v1/requests/";
    static const char ord_prefix[] = "/v1/orders/";
    const char *rest;
    const char *slash;

    memset(r, 0, sizeof(*r));
    if (strcmp(url, "/healthz") == 0) {
        r->kind = OW_ROUTE_HEALTH;
        return OW_OK;
    }
    if (strncmp(url, req_prefix, sizeof(req_prefix) - 1) == 0) {
        r->kind = OW_ROUTE_REQUEST;
        rest = url + sizeof(req_prefix) - 1;
    } else if (strncmp(url, ord_prefix, sizeof(ord_prefix) - 1) == 0) {
        r->kind = OW_ROUTE_ORDER;
        rest = url + sizeof(ord_prefix) - 1;
    } else {
        return OW_OK; /* OW_ROUTE_NONE */
    }
    slash = strchr(rest, '/');
    if (slash == NULL || parse_user(rest, (size_t)(slash - rest), &r->user_id) != OW_OK) {
        snprintf(why, why_size, "user_id: must be a decimal integer from 1 to %lld",
                 (long long)INT64_MAX);
        return OW_EINVAL;
    }
    return parse_second(slash + 1, strlen(slash + 1), r, why, why_size);
}
