/* Who a query-service request is counted for, and its rate limit
 * (serve_client.c). The address rules are pure and unit-tested. */
#ifndef OW_SERVE_CLIENT_H
#define OW_SERVE_CLIENT_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

/* An IPv6 address, or an IPv4 one as ::ffff:a.b.c.d, so that both kinds
 * compare as 16 bytes. */
typedef struct {
    unsigned char b[16];
} serve_addr;

#define OW_SERVE_PROXIES_MAX 32
/* X-Forwarded-For header lines read from one request; a request with more
 * is counted as its proxy's. */
#define OW_SERVE_XFF_LINES_MAX 16

typedef struct {
    serve_addr addr[OW_SERVE_PROXIES_MAX];
    size_t n;
} serve_proxies;

/* Parses an IPv4 or IPv6 literal of n bytes. Returns 0 or OW_EINVAL. */
int serve_addr_parse(const char *s, size_t n, serve_addr *out);
/* "a.b.c.d" for a mapped IPv4 address, the IPv6 text otherwise. */
void serve_addr_format(const serve_addr *a, char *out, size_t size);

/* Parses api.trusted_proxies: comma-separated addresses, blanks around them
 * ignored, "" for none. OW_EINVAL with why naming the bad entry. */
int serve_parse_proxies(const char *list, serve_proxies *out, char *why, size_t why_size);
int serve_proxies_has(const serve_proxies *p, const serve_addr *a);

/* The client of a request that came from the trusted proxy *client: the
 * X-Forwarded-For lines (xff[0..n), in the order received) are read from
 * the right, skipping trusted proxies; the first other address is the
 * client. Only that part of the header was written by proxies the service
 * trusts; anything further left may have been written by the client. An
 * entry that is not an address ends the walk at the hop to its right. */
void serve_forwarded_client(const serve_proxies *p, const char *const *xff, size_t n,
                            serve_addr *client);

typedef struct serve_rate serve_rate;

/* Client addresses the rate limit keeps a bucket for at most. */
#define OW_SERVE_RATE_ADDRESSES 4096

/* per_s requests per second per client address, bursts of as many; 0 =
 * no limit. */
serve_rate *serve_rate_new(unsigned per_s);
/* The same with max_addresses (at least 1) buckets and another hash (for
 * the unit test: a small table, addresses that share a hash). */
serve_rate *serve_rate_new_with(unsigned per_s, size_t max_addresses,
                                uint64_t (*hash)(const serve_addr *));
void serve_rate_free(serve_rate **rate);
/* 1 when client may make one more request now (and it is counted). */
int serve_rate_take(serve_rate *rate, const serve_addr *client, int64_t now_ms);

/* The hash connections and rate-limit buckets file an address under;
 * addresses with one hash are told apart by their bytes. */
uint64_t serve_addr_hash(const serve_addr *a);

/* The address of c's peer (zero when libmicrohttpd has none). */
void serve_client_peer(struct MHD_Connection *c, serve_addr *out);
/* The client a request is counted for: the peer, or, when the peer is a
 * trusted proxy, the forwarded address (serve_forwarded_client). */
void serve_client_of(struct MHD_Connection *c, const serve_addr *peer, int peer_trusted,
                     const serve_proxies *trusted, serve_addr *out);

#endif
