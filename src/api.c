/* The result query service (ow/api.h, issue 15). */
#include "ow/api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "ow/admin.h"
#include "ow/log.h"
#include "ow/response.h"
#include "ow/shard.h"
#include "ow/util.h"

_Static_assert(OW_KEY_MAX >= OW_EXT_NO_MAX, "ow_route.segment holds either");

/* Client addresses share RATE_SLOTS buckets by hash; a collision hands the
 * bucket to the newer address (it starts full), so a collision can only
 * make the limit looser, never refuse a client wrongly. */
#define RATE_SLOTS 4096
/* What a 503 tells the client to wait; the database reconnects on the
 * next request, so a short wait is enough. */
#define RETRY_AFTER_S "2"

typedef struct {
    unsigned char addr[16];
    int used;
    double tokens;
    int64_t last_ms;
} rate_slot;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t freed;
    ow_store **stores;
    ow_store **free_stores;
    size_t n_stores, n_free;
} api_pool;

struct ow_api {
    struct MHD_Daemon *daemon;
    unsigned char token_hash[SHA256_DIGEST_LENGTH];
    unsigned timeout_s;
    unsigned rate_limit;
    /* The database connections: one small pool per shard (one pool when
     * unsharded), each as big as the serving threads, so a request waits
     * only while another thread's request holds the one it would have used.
     * A user's records are read on the shard the workers route it to. */
    api_pool *pools;
    unsigned n_pools;
    uint32_t shard_buckets;
    ow_idgen ids; /* unused by lookups; ow_store_new wants one */
    pthread_mutex_t rate_lock;
    rate_slot *rate;
};

/* --- Path parsing -------------------------------------------------------- */

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
static int parse_second(const char *p, size_t n, ow_route *r, char *why, size_t why_size)
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

int ow_api_parse_path(const char *url, ow_route *r, char *why, size_t why_size)
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

/* --- Replies ------------------------------------------------------------- */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, const char *body,
                             size_t len, const char *h1, const char *v1)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result rc;

    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (h1 != NULL)
        MHD_add_response_header(r, h1, v1);
    rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* {"status":N,"code":"X","message":"..."} with one optional header. */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                                   const char *message, const char *h1, const char *v1)
{
    ow_buf out;
    enum MHD_Result rc = MHD_NO;

    ow_buf_init(&out);
    if (ow_buf_appendf(&out, "{\"status\":%u,\"code\":\"%s\",\"message\":", status, code) ==
            OW_OK &&
        ow_json_write_string(&out, message, strlen(message)) == OW_OK &&
        ow_buf_appendc(&out, '}') == OW_OK)
        rc = queue(c, status, out.data, out.len, h1, v1);
    ow_buf_cleanup(&out);
    return rc;
}

static enum MHD_Result reply_store_error(struct MHD_Connection *c, const ow_error *err)
{
    OW_LOG(OW_LOG_WARN, "api_database_error", OW_F_STR("class", ow_errclass_name(err->cls)),
           OW_F_STR("error", err->msg));
    if (err->cls == OW_ERRCLASS_RETRIABLE)
        return reply_error(c, 503, "DATABASE_UNAVAILABLE",
                           "the database cannot be reached; retry after the Retry-After delay",
                           "Retry-After", RETRY_AFTER_S);
    return reply_error(c, 500, "INTERNAL_ERROR", "the lookup failed; see the service's log", NULL,
                       NULL);
}

/* --- The pool ------------------------------------------------------------ */

/* The pool of the user's shard (docs/contract.md, "Shard routing"). */
static api_pool *pool_of(ow_api *a, int64_t user_id)
{
    if (a->n_pools == 1)
        return &a->pools[0];
    return &a->pools[ow_shard_of_user(user_id, a->shard_buckets, a->n_pools)];
}

static ow_store *pool_take(api_pool *pool, unsigned timeout_s)
{
    struct timespec until;
    ow_store *s = NULL;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&pool->lock);
    while (pool->n_free == 0) {
        if (pthread_cond_timedwait(&pool->freed, &pool->lock, &until) == ETIMEDOUT)
            break;
    }
    if (pool->n_free > 0)
        s = pool->free_stores[--pool->n_free];
    pthread_mutex_unlock(&pool->lock);
    return s;
}

static void pool_give(api_pool *pool, ow_store *s)
{
    pthread_mutex_lock(&pool->lock);
    pool->free_stores[pool->n_free++] = s;
    pthread_cond_signal(&pool->freed);
    pthread_mutex_unlock(&pool->lock);
}

/* --- Access: rate limit and token ---------------------------------------- */

static int rate_ok(ow_api *a, struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci;
    unsigned char addr[16] = {0};
    uint32_t h = 2166136261u;
    rate_slot *slot;
    int64_t now;
    int ok;

    if (a->rate_limit == 0)
        return 1;
    ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci != NULL && ci->client_addr != NULL && ci->client_addr->sa_family == AF_INET)
        memcpy(addr, &((const struct sockaddr_in *)(const void *)ci->client_addr)->sin_addr, 4);
    else if (ci != NULL && ci->client_addr != NULL && ci->client_addr->sa_family == AF_INET6)
        memcpy(addr, &((const struct sockaddr_in6 *)(const void *)ci->client_addr)->sin6_addr, 16);
    for (size_t i = 0; i < sizeof(addr); i++)
        h = (h ^ addr[i]) * 16777619u;
    now = ow_clock_mono_ms();
    pthread_mutex_lock(&a->rate_lock);
    slot = &a->rate[h % RATE_SLOTS];
    if (!slot->used || memcmp(slot->addr, addr, sizeof(addr)) != 0) {
        memcpy(slot->addr, addr, sizeof(addr));
        slot->used = 1;
        slot->tokens = a->rate_limit;
    } else {
        slot->tokens += (double)(now - slot->last_ms) * a->rate_limit / 1000.0;
        if (slot->tokens > a->rate_limit)
            slot->tokens = a->rate_limit;
    }
    slot->last_ms = now;
    ok = slot->tokens >= 1.0;
    if (ok)
        slot->tokens -= 1.0;
    pthread_mutex_unlock(&a->rate_lock);
    return ok;
}

/* Compares SHA-256 digests with CRYPTO_memcmp, so that neither the
 * content nor the length of the token leaks through timing. */
static int token_ok(const ow_api *a, struct MHD_Connection *c)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    unsigned char h[SHA256_DIGEST_LENGTH];

    if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
        return 0;
    auth += 7;
    SHA256((const unsigned char *)auth, strlen(auth), h);
    return CRYPTO_memcmp(h, a->token_hash, sizeof(h)) == 0;
}

/* --- Handlers ------------------------------------------------------------ */

static enum MHD_Result reply_record(struct MHD_Connection *c, const ow_admin_record *rec)
{
    struct MHD_Response *r;
    enum MHD_Result rc;

    if (rec->response_status < 200 || rec->response_status > 599 || rec->response.len == 0)
        return reply_error(c, 500, "INTERNAL_ERROR", "the stored record has no valid response",
                           NULL, NULL);
    r = MHD_create_response_from_buffer(rec->response.len, rec->response.data,
                                        MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "Idempotency-Replayed", "true");
    MHD_add_response_header(r, "Request-Digest", rec->digest_hex);
    rc = MHD_queue_response(c, (unsigned)rec->response_status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result serve_request(ow_api *a, struct MHD_Connection *c, const ow_route *route)
{
    ow_admin_record rec;
    ow_error err;
    api_pool *pool = pool_of(a, route->user_id);
    ow_store *s = pool_take(pool, a->timeout_s);
    enum MHD_Result mrc;
    int rc;

    if (s == NULL)
        return reply_error(c, 503, "BUSY", "every database connection is busy; retry",
                           "Retry-After", RETRY_AFTER_S);
    ow_admin_record_init(&rec);
    rc = ow_admin_lookup(s, route->user_id, route->segment, route->segment_len, &rec, &err);
    pool_give(pool, s);
    if (rc == OW_ENOTFOUND)
        mrc = reply_error(c, 404, "NOT_FOUND",
                          "no request record for this user and key: it was never decided, or "
                          "it was purged; sending the message again is safe",
                          NULL, NULL);
    else if (rc != OW_OK)
        mrc = reply_store_error(c, &err);
    else
        mrc = reply_record(c, &rec);
    ow_admin_record_cleanup(&rec);
    return mrc;
}

static int order_json(const ow_admin_order *o, int64_t user_id, ow_buf *out)
{
    int rc = ow_buf_appendf(out, "{\"order_id\":%lld,\"order_no\":", (long long)o->id);

    if (rc == OW_OK)
        rc = ow_json_write_string(out, o->order_no, strlen(o->order_no));
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"user_id\":%lld,\"external_order_no\":", (long long)user_id);
    if (rc == OW_OK)
        rc = ow_json_write_string(out, o->external_order_no, o->ext_len);
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"amount\":\"%s\",\"product_id\":", o->amount);
    if (rc == OW_OK)
        rc = o->product_id > 0 ? ow_buf_appendf(out, "%lld", (long long)o->product_id)
                               : ow_buf_appends(out, "null");
    if (rc == OW_OK)
        rc = ow_buf_appendf(out, ",\"quantity\":%lld}", (long long)o->quantity);
    return rc;
}

static enum MHD_Result serve_order(ow_api *a, struct MHD_Connection *c, const ow_route *route)
{
    ow_admin_order o;
    ow_error err;
    ow_buf out;
    api_pool *pool = pool_of(a, route->user_id);
    ow_store *s = pool_take(pool, a->timeout_s);
    enum MHD_Result mrc;
    int rc;

    if (s == NULL)
        return reply_error(c, 503, "BUSY", "every database connection is busy; retry",
                           "Retry-After", RETRY_AFTER_S);
    rc = ow_admin_order_get(s, route->user_id, route->segment, route->segment_len, &o, &err);
    pool_give(pool, s);
    if (rc == OW_ENOTFOUND)
        return reply_error(c, 404, "NOT_FOUND",
                           "no order with this external_order_no for this user", NULL, NULL);
    if (rc != OW_OK)
        return reply_store_error(c, &err);
    ow_buf_init(&out);
    if (order_json(&o, route->user_id, &out) == OW_OK)
        mrc = queue(c, 200, out.data, out.len, NULL, NULL);
    else
        mrc = reply_error(c, 500, "INTERNAL_ERROR", "out of memory", NULL, NULL);
    ow_buf_cleanup(&out);
    return mrc;
}

static int headers_seen;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **ptr)
{
    ow_api *a = cls;
    ow_route route;
    char why[200];

    (void)version;
    (void)upload_data;
    /* Answering on the first call (headers only) would be an "early"
     * response after which libmicrohttpd closes the connection; waiting
     * for the second keeps it alive for the client's next request. */
    if (*ptr == NULL) {
        *ptr = &headers_seen;
        return MHD_YES;
    }
    if (*upload_size != 0)
        return MHD_NO; /* a body on a read-only service: drop the connection */
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_error(c, 405, "METHOD_NOT_ALLOWED", "only GET and HEAD are served", "Allow",
                           "GET, HEAD");
    if (strcmp(url, "/healthz") == 0)
        return queue(c, 200, "{\"status\":\"ok\"}", 15, NULL, NULL);
    if (!rate_ok(a, c))
        return reply_error(c, 429, "RATE_LIMITED", "too many requests from this address",
                           "Retry-After", "1");
    if (!token_ok(a, c))
        return reply_error(c, 401, "UNAUTHORIZED", "a valid bearer token is required",
                           "WWW-Authenticate", "Bearer");
    if (ow_api_parse_path(url, &route, why, sizeof(why)) != OW_OK)
        return reply_error(c, 400, "INVALID_PATH", why, NULL, NULL);
    if (route.kind == OW_ROUTE_REQUEST)
        return serve_request(a, c, &route);
    if (route.kind == OW_ROUTE_ORDER)
        return serve_order(a, c, &route);
    return reply_error(c, 404, "NO_SUCH_ROUTE",
                       "paths are /v1/requests/{user_id}/{key} and "
                       "/v1/orders/{user_id}/{external_order_no}",
                       NULL, NULL);
}

/* Keeps the path as the client sent it: segments are decoded one by one
 * after the split, so that %2F stays inside its segment. */
static size_t keep_raw(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

/* --- Start and stop ------------------------------------------------------ */

static void pool_cleanup(api_pool *pool)
{
    for (size_t i = 0; i < pool->n_stores; i++)
        ow_store_free(&pool->stores[i]);
    free(pool->stores);
    free(pool->free_stores);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->freed);
}

static void api_free(ow_api *a)
{
    for (unsigned i = 0; a->pools != NULL && i < a->n_pools; i++)
        pool_cleanup(&a->pools[i]);
    free(a->pools);
    free(a->rate);
    pthread_mutex_destroy(&a->rate_lock);
    free(a);
}

static int pool_init(api_pool *pool, const ow_store_params *sp, unsigned threads, ow_idgen *ids)
{
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->freed, NULL);
    pool->stores = calloc(threads, sizeof(*pool->stores));
    pool->free_stores = calloc(threads, sizeof(*pool->free_stores));
    if (pool->stores == NULL || pool->free_stores == NULL)
        return -1;
    for (; pool->n_stores < threads; pool->n_stores++) {
        pool->stores[pool->n_stores] = ow_store_new(sp, ids);
        if (pool->stores[pool->n_stores] == NULL)
            return -1;
        pool->free_stores[pool->n_free++] = pool->stores[pool->n_stores];
    }
    return 0;
}

static ow_api *api_new(const ow_api_params *p)
{
    ow_api *a = calloc(1, sizeof(*a));
    unsigned n = p->n_shards > 0 ? p->n_shards : 1;

    if (a == NULL)
        return NULL;
    pthread_mutex_init(&a->rate_lock, NULL);
    a->timeout_s = p->timeout_s;
    a->rate_limit = p->rate_limit;
    a->shard_buckets = p->shard_buckets;
    SHA256((const unsigned char *)p->token, p->token_len, a->token_hash);
    ow_idgen_init(&a->ids, 0, ow_clock_wall_ms);
    a->rate = calloc(RATE_SLOTS, sizeof(*a->rate));
    a->pools = calloc(n, sizeof(*a->pools));
    if (a->rate == NULL || a->pools == NULL) {
        api_free(a);
        return NULL;
    }
    for (; a->n_pools < n; a->n_pools++) {
        const ow_store_params *sp = p->n_shards > 0 ? &p->shards[a->n_pools] : &p->store;

        if (pool_init(&a->pools[a->n_pools], sp, p->threads, &a->ids) != 0) {
            a->n_pools++; /* cleaned up with the others */
            api_free(a);
            return NULL;
        }
    }
    return a;
}

/* One connection per shard at start: wrong credentials or a missing
 * database stop the service now; a shard that is merely down does not (503
 * for its users until it is back). */
static int first_connect(ow_api *a, ow_error *err)
{
    for (unsigned i = 0; i < a->n_pools; i++) {
        int rc = ow_store_ping(a->pools[i].stores[0], err);

        if (rc != OW_OK && err->cls != OW_ERRCLASS_RETRIABLE)
            return rc;
        if (rc != OW_OK)
            OW_LOG(OW_LOG_WARN, "api_database_unavailable", OW_F_INT("shard", i),
                   OW_F_STR("error", err->msg));
    }
    return OW_OK;
}

int ow_api_start(const ow_api_params *p, ow_api **out, ow_error *err)
{
    struct sockaddr_in sa;
    ow_api *a;

    *out = NULL;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)p->port);
    if (p->port == 0 || p->port > 65535 || inet_pton(AF_INET, p->address, &sa.sin_addr) != 1)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "api.address: \"%s\" is not an IPv4 address, or api.port is 0",
                            p->address);
    a = api_new(p);
    if (a == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    if (first_connect(a, err) != OW_OK) {
        api_free(a);
        return OW_EFATAL;
    }
    a->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, (uint16_t)p->port, NULL, NULL, on_request,
        a, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)p->threads, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)p->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)p->timeout_s, MHD_OPTION_UNESCAPE_CALLBACK,
        keep_raw, NULL, MHD_OPTION_END);
    if (a->daemon == NULL) {
        api_free(a);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0,
                            "api: cannot listen on %s:%u (in use, or not a local address)",
                            p->address, p->port);
    }
    *out = a;
    return OW_OK;
}

void ow_api_stop(ow_api **api)
{
    if (api == NULL || *api == NULL)
        return;
    MHD_stop_daemon((*api)->daemon);
    api_free(*api);
    *api = NULL;
}
