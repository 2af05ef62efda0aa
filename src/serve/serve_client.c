/* Who a query-service request is counted for, and its rate limit
 * (serve_client.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "serve_client.h"
#include "ow/error.h"
#include "ow/htab.h"
#include "ow/util.h"

/* --- Addresses ------------------------------------------------------------ */

static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int serve_addr_parse(const char *s, size_t n, serve_addr *out)
{
    char text[INET6_ADDRSTRLEN];
    struct in_addr v4;

    if (n == 0 || n >= sizeof(text))
        return OW_EINVAL;
    memcpy(text, s, n);
    text[n] = '\0';
    if (inet_pton(AF_INET, text, &v4) == 1) {
        memcpy(out->b, v4_mapped, sizeof(v4_mapped));
        memcpy(out->b + 12, &v4, 4);
        return OW_OK;
    }
    return inet_pton(AF_INET6, text, out->b) == 1 ? OW_OK : OW_EINVAL;
}

void serve_addr_format(const serve_addr *a, char *out, size_t size)
{
    if (memcmp(a->b, v4_mapped, sizeof(v4_mapped)) == 0)
        inet_ntop(AF_INET, a->b + 12, out, (socklen_t)size);
    else
        inet_ntop(AF_INET6, a->b, out, (socklen_t)size);
}

uint64_t serve_addr_hash(const serve_addr *a)
{
    return ow_hash64(a->b, sizeof(a->b));
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The next comma-separated entry of s[*pos..n), without its blanks. */
static void next_entry(const char *s, size_t n, size_t *pos, const char **entry, size_t *len)
{
    size_t start = *pos;
    size_t end = start;

    while (end < n && s[end] != ',')
        end++;
    *pos = end + 1;
    while (start < end && is_blank(s[start]))
        start++;
    while (end > start && is_blank(s[end - 1]))
        end--;
    *entry = s + start;
    *len = end - start;
}

int serve_parse_proxies(const char *list, serve_proxies *out, char *why, size_t why_size)
{
    size_t n = strlen(list);
    size_t pos = 0;

    out->n = 0;
    while (pos < n) {
        const char *e;
        size_t len;

        next_entry(list, n, &pos, &e, &len);
        if (out->n == OW_SERVE_PROXIES_MAX) {
            snprintf(why, why_size, "api.trusted_proxies: more than %d addresses",
                     OW_SERVE_PROXIES_MAX);
            return OW_EINVAL;
        }
        if (serve_addr_parse(e, len, &out->addr[out->n]) != OW_OK) {
            snprintf(why, why_size, "api.trusted_proxies: \"%.*s\" is not an IPv4 or IPv6 address",
                     (int)(len < 64 ? len : 64), e);
            return OW_EINVAL;
        }
        out->n++;
    }
    return OW_OK;
}

int serve_proxies_has(const serve_proxies *p, const serve_addr *a)
{
    for (size_t i = 0; i < p->n; i++) {
        if (memcmp(p->addr[i].b, a->b, sizeof(a->b)) == 0)
            return 1;
    }
    return 0;
}

/* Walks one X-Forwarded-For line from its right end. Returns 1 when the
 * walk is over (*client is the answer), 0 to go on with the line before. */
static int walk_line(const serve_proxies *p, const char *line, serve_addr *client)
{
    size_t end = strlen(line);

    for (;;) {
        size_t start = end;
        size_t pos;
        const char *e;
        size_t len;
        serve_addr hop;

        while (start > 0 && line[start - 1] != ',')
            start--;
        pos = start;
        next_entry(line, end, &pos, &e, &len);
        if (serve_addr_parse(e, len, &hop) != OW_OK)
            return 1; /* not an address: the hop to its right stands */
        *client = hop;
        if (!serve_proxies_has(p, &hop))
            return 1;
        if (start == 0)
            return 0;
        end = start - 1;
    }
}

void serve_forwarded_client(const serve_proxies *p, const char *const *xff, size_t n,
                            serve_addr *client)
{
    for (size_t i = n; i > 0; i--) {
        if (walk_line(p, xff[i - 1], client))
            return;
    }
}

/* --- The client of a request ---------------------------------------------- */

void serve_client_peer(struct MHD_Connection *c, serve_addr *out)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;

    memset(out, 0, sizeof(*out));
    if (sa != NULL && sa->sa_family == AF_INET) {
        memcpy(out->b, v4_mapped, sizeof(v4_mapped));
        memcpy(out->b + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        memcpy(out->b, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    }
}

typedef struct {
    const char *lines[OW_SERVE_XFF_LINES_MAX];
    size_t n;
    int too_many;
} xff_lines;

static enum MHD_Result collect_xff(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    xff_lines *x = cls;

    (void)kind;
    if (strcasecmp(key, "X-Forwarded-For") != 0 || value == NULL)
        return MHD_YES;
    if (x->n == OW_SERVE_XFF_LINES_MAX) {
        x->too_many = 1;
        return MHD_NO;
    }
    x->lines[x->n++] = value;
    return MHD_YES;
}

void serve_client_of(struct MHD_Connection *c, const serve_addr *peer, int peer_trusted,
                     const serve_proxies *trusted, serve_addr *out)
{
    xff_lines x;

    *out = *peer;
    if (!peer_trusted)
        return;
    x.n = 0;
    x.too_many = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_xff, &x);
    if (!x.too_many)
        serve_forwarded_client(trusted, x.lines, x.n, out);
}

/* --- The rate limit ------------------------------------------------------- */

/* A token bucket per client address, OW_SERVE_RATE_ADDRESSES of them at most.
 * When a new address finds them all taken, the bucket that has been full
 * longest, or will be full soonest, is dropped for it: a full bucket is
 * what a new address starts with, so dropping one changes nothing, and
 * otherwise the dropped address starts full again when it returns, which
 * can only loosen its limit, never refuse a request wrongly. */

typedef struct {
    serve_addr addr;
    uint64_t hash;
    double tokens; /* at last_ms */
    int64_t last_ms;
} rate_bucket;

struct serve_rate {
    unsigned per_s;
    uint64_t (*hash)(const serve_addr *);
    pthread_mutex_t lock;
    ow_htab index; /* address hash -> position in buckets */
    rate_bucket *buckets;
    /* Per bucket, when it is or will be full again (ms): apart, so that
     * the search for the fullest reads them alone. */
    double *full_at;
    size_t n, max;
};

serve_rate *serve_rate_new_with(unsigned per_s, size_t max_addresses,
                                uint64_t (*hash)(const serve_addr *))
{
    serve_rate *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->buckets = calloc(max_addresses, sizeof(*r->buckets));
    r->full_at = calloc(max_addresses, sizeof(*r->full_at));
    if (r->buckets == NULL || r->full_at == NULL ||
        ow_htab_init(&r->index, max_addresses) != OW_OK) {
        free(r->buckets);
        free(r->full_at);
        free(r);
        return NULL;
    }
    r->per_s = per_s;
    r->hash = hash;
    r->max = max_addresses;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

serve_rate *serve_rate_new(unsigned per_s)
{
    return serve_rate_new_with(per_s, OW_SERVE_RATE_ADDRESSES, serve_addr_hash);
}

void serve_rate_free(serve_rate **rate)
{
    if (rate == NULL || *rate == NULL)
        return;
    pthread_mutex_destroy(&(*rate)->lock);
    ow_htab_free(&(*rate)->index);
    free((*rate)->buckets);
    free((*rate)->full_at);
    free(*rate);
    *rate = NULL;
}

/* The bucket that has been full longest or will be full soonest. A scan:
 * it runs only for a new address that finds every bucket taken. */
static size_t fullest(const serve_rate *r)
{
    size_t i = 0;
    double soonest = r->full_at[0];

    for (size_t j = 1; j < r->n; j++) {
        if (r->full_at[j] < soonest) {
            soonest = r->full_at[j];
            i = j;
        }
    }
    return i;
}

/* A bucket for client, whose hash is h: its own, or a new full one as of
 * now_ms. NULL when the table could not grow (out of memory); nothing
 * changed then. */
static rate_bucket *bucket_of(serve_rate *r, const serve_addr *client, uint64_t h, int64_t now_ms)
{
    ow_htab_walk w = OW_HTAB_START;
    uintptr_t v;
    size_t i;

    while (ow_htab_next(&r->index, h, &w, &v)) {
        if (memcmp(r->buckets[v].addr.b, client->b, sizeof(client->b)) == 0)
            return &r->buckets[v];
    }
    i = r->n < r->max ? r->n : fullest(r);
    if (ow_htab_put(&r->index, h, i) != OW_OK)
        return NULL;
    if (i == r->n)
        r->n++;
    else
        ow_htab_remove(&r->index, r->buckets[i].hash, i);
    r->buckets[i].addr = *client;
    r->buckets[i].hash = h;
    r->buckets[i].tokens = r->per_s;
    r->buckets[i].last_ms = now_ms;
    return &r->buckets[i];
}

int serve_rate_take(serve_rate *r, const serve_addr *client, int64_t now_ms)
{
    uint64_t h;
    rate_bucket *b;
    int ok = 1;

    if (r->per_s == 0)
        return 1;
    h = r->hash(client);
    pthread_mutex_lock(&r->lock);
    b = bucket_of(r, client, h, now_ms);
    /* Without a bucket (out of memory) the request is let through: like a
     * dropped bucket, it can only loosen the limit. */
    if (b != NULL) {
        b->tokens += (double)(now_ms - b->last_ms) * r->per_s / 1000.0;
        if (b->tokens > r->per_s)
            b->tokens = r->per_s;
        b->last_ms = now_ms;
        ok = b->tokens >= 1.0;
        if (ok)
            b->tokens -= 1.0;
        r->full_at[b - r->buckets] = (double)now_ms + (r->per_s - b->tokens) * 1000.0 / r->per_s;
    }
    pthread_mutex_unlock(&r->lock);
    return ok;
}
