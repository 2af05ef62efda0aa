/* Who a query-service request is counted for, and its rate limit
 * (api_internal.h, ow/api.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_internal.h"
#include "ow/util.h"

/* --- Addresses ------------------------------------------------------------ */

static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int ow_api_addr_parse(const char *s, size_t n, ow_api_addr *out)
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

void ow_api_addr_format(const ow_api_addr *a, char *out, size_t size)
{
    if (memcmp(a->b, v4_mapped, sizeof(v4_mapped)) == 0)
        inet_ntop(AF_INET, a->b + 12, out, (socklen_t)size);
    else
        inet_ntop(AF_INET6, a->b, out, (socklen_t)size);
}

uint64_t api_addr_hash(const ow_api_addr *a)
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

int ow_api_parse_proxies(const char *list, ow_api_proxies *out, char *why, size_t why_size)
{
    size_t n = strlen(list);
    size_t pos = 0;

    out->n = 0;
    while (pos < n) {
        const char *e;
        size_t len;

        next_entry(list, n, &pos, &e, &len);
        if (out->n == OW_API_PROXIES_MAX) {
            snprintf(why, why_size, "api.trusted_proxies: more than %d addresses",
                     OW_API_PROXIES_MAX);
            return OW_EINVAL;
        }
        if (ow_api_addr_parse(e, len, &out->addr[out->n]) != OW_OK) {
            snprintf(why, why_size, "api.trusted_proxies: \"%.*s\" is not an IPv4 or IPv6 address",
                     (int)(len < 64 ? len : 64), e);
            return OW_EINVAL;
        }
        out->n++;
    }
    return OW_OK;
}

int ow_api_proxies_has(const ow_api_proxies *p, const ow_api_addr *a)
{
    for (size_t i = 0; i < p->n; i++) {
        if (memcmp(p->addr[i].b, a->b, sizeof(a->b)) == 0)
            return 1;
    }
    return 0;
}

/* Walks one X-Forwarded-For line from its right end. Returns 1 when the
 * walk is over (*client is the answer), 0 to go on with the line before. */
static int walk_line(const ow_api_proxies *p, const char *line, ow_api_addr *client)
{
    size_t end = strlen(line);

    for (;;) {
        size_t start = end;
        size_t pos;
        const char *e;
        size_t len;
        ow_api_addr hop;

        while (start > 0 && line[start - 1] != ',')
            start--;
        pos = start;
        next_entry(line, end, &pos, &e, &len);
        if (ow_api_addr_parse(e, len, &hop) != OW_OK)
            return 1; /* not an address: the hop to its right stands */
        *client = hop;
        if (!ow_api_proxies_has(p, &hop))
            return 1;
        if (start == 0)
            return 0;
        end = start - 1;
    }
}

void ow_api_forwarded_client(const ow_api_proxies *p, const char *const *xff, size_t n,
                             ow_api_addr *client)
{
    for (size_t i = n; i > 0; i--) {
        if (walk_line(p, xff[i - 1], client))
            return;
    }
}

/* --- The client of a request ---------------------------------------------- */

void api_client_peer(struct MHD_Connection *c, ow_api_addr *out)
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
    const char *lines[OW_API_XFF_LINES_MAX];
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
    if (x->n == OW_API_XFF_LINES_MAX) {
        x->too_many = 1;
        return MHD_NO;
    }
    x->lines[x->n++] = value;
    return MHD_YES;
}

void api_client_of(struct MHD_Connection *c, const api_conn *conn, const ow_api_proxies *trusted,
                   ow_api_addr *out)
{
    xff_lines x;

    *out = conn->peer;
    if (!conn->trusted)
        return;
    x.n = 0;
    x.too_many = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, collect_xff, &x);
    if (!x.too_many)
        ow_api_forwarded_client(trusted, x.lines, x.n, out);
}

/* --- The rate limit ------------------------------------------------------- */

/* Client addresses share RATE_SLOTS buckets by hash; a collision hands the
 * bucket to the newer address (it starts full), so a collision can only
 * make the limit looser, never refuse a client wrongly. */
#define RATE_SLOTS 4096

typedef struct {
    ow_api_addr addr;
    int used;
    double tokens;
    int64_t last_ms;
} rate_slot;

struct api_rate {
    unsigned per_s;
    pthread_mutex_t lock;
    rate_slot slots[RATE_SLOTS];
};

api_rate *api_rate_new(unsigned per_s)
{
    api_rate *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->per_s = per_s;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void api_rate_free(api_rate **rate)
{
    if (rate == NULL || *rate == NULL)
        return;
    pthread_mutex_destroy(&(*rate)->lock);
    free(*rate);
    *rate = NULL;
}

int api_rate_take(api_rate *r, const ow_api_addr *client, int64_t now_ms)
{
    uint32_t h = 2166136261u;
    rate_slot *slot;
    int ok;

    if (r->per_s == 0)
        return 1;
    for (size_t i = 0; i < sizeof(client->b); i++)
        h = (h ^ client->b[i]) * 16777619u;
    pthread_mutex_lock(&r->lock);
    slot = &r->slots[h % RATE_SLOTS];
    if (!slot->used || memcmp(slot->addr.b, client->b, sizeof(client->b)) != 0) {
        slot->addr = *client;
        slot->used = 1;
        slot->tokens = r->per_s;
    } else {
        slot->tokens += (double)(now_ms - slot->last_ms) * r->per_s / 1000.0;
        if (slot->tokens > r->per_s)
            slot->tokens = r->per_s;
    }
    slot->last_ms = now_ms;
    ok = slot->tokens >= 1.0;
    if (ok)
        slot->tokens -= 1.0;
    pthread_mutex_unlock(&r->lock);
    return ok;
}
