/* The query service: its path rules (segments are
 * percent-decoded one by one and checked with the message rules), its
 * client addresses, the rate limit's buckets, and a running service
 * against a database that refuses connections or never answers: the
 * protocol, the request deadline, the per-address limit and the lookup
 * bound, none of which needs a real one. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ow/serve.h"
#include "serve_client.h"
#include "serve_route.h"
#include "ow/error.h"
#include "ow/util.h"

static void test_request_route(void **state)
{
    serve_route r;
    char why[200];

    (void)state;
    assert_int_equal(serve_parse_path("/v1/requests/42/idem_2026:a.b-c", &r, why, sizeof(why)),
                     OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_REQUEST);
    assert_int_equal(r.user_id, 42);
    assert_int_equal(r.segment_len, 15);
    assert_string_equal(r.segment, "idem_2026:a.b-c");
    assert_int_equal(
        serve_parse_path("/v1/requests/9223372036854775807/k%41", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.user_id, INT64_MAX);
    assert_string_equal(r.segment, "kA");
}

static void test_order_route_decodes_its_segment(void **state)
{
    serve_route r;
    char why[200];

    (void)state;
    assert_int_equal(serve_parse_path("/v1/orders/7/A%2FB%20c", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_ORDER);
    assert_int_equal(r.user_id, 7);
    assert_string_equal(r.segment, "A/B c");
}

static void test_other_paths(void **state)
{
    serve_route r;
    char why[200];

    (void)state;
    assert_int_equal(serve_parse_path("/healthz", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_HEALTH);
    assert_int_equal(serve_parse_path("/v1/requestsX/1/k", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_NONE);
    assert_int_equal(serve_parse_path("/", &r, why, sizeof(why)), OW_OK);
    assert_int_equal(r.kind, OW_ROUTE_NONE);
}

static void expect_bad(const char *url, const char *why_prefix)
{
    serve_route r;
    char why[200] = "";

    if (serve_parse_path(url, &r, why, sizeof(why)) != OW_EINVAL)
        fail_msg("%s: accepted", url);
    if (strncmp(why, why_prefix, strlen(why_prefix)) != 0)
        fail_msg("%s: \"%s\" does not start with \"%s\"", url, why, why_prefix);
}

static void test_bad_segments(void **state)
{
    char long_key[200];

    (void)state;
    expect_bad("/v1/requests/0/k", "user_id: ");
    expect_bad("/v1/requests/01/k", "user_id: ");
    expect_bad("/v1/requests/-1/k", "user_id: ");
    expect_bad("/v1/requests/9223372036854775808/k", "user_id: ");
    expect_bad("/v1/requests/12a/k", "user_id: ");
    expect_bad("/v1/requests/42", "user_id: ");
    expect_bad("/v1/requests/42/", "key: is empty");
    expect_bad("/v1/requests/42/a'b", "key: byte 2 is not one of");
    expect_bad("/v1/requests/42/a%27b", "key: byte 2 is not one of");
    expect_bad("/v1/requests/42/a;b", "key: byte 2");
    expect_bad("/v1/requests/42/a%2Fb", "key: byte 2");
    expect_bad("/v1/requests/42/a/b", "key: must be one path segment");
    expect_bad("/v1/requests/42/%", "key: malformed percent-encoding");
    expect_bad("/v1/requests/42/%4", "key: malformed percent-encoding");
    expect_bad("/v1/requests/42/%zz", "key: malformed percent-encoding");
    memset(long_key, 'k', 81);
    long_key[81] = '\0';
    {
        char url[300];

        snprintf(url, sizeof(url), "/v1/requests/42/%s", long_key);
        expect_bad(url, "key: is too long");
    }
    expect_bad("/v1/orders/42/%00", "external_order_no: byte 1 is not printable ASCII");
    expect_bad("/v1/orders/42/a%7Fb", "external_order_no: byte 2");
    expect_bad("/v1/orders/42/", "external_order_no: must be 1 to 64 bytes");
}

/* --- Client addresses ---------------------------------------------------- */

static serve_addr addr(const char *text)
{
    serve_addr a;

    if (serve_addr_parse(text, strlen(text), &a) != OW_OK)
        fail_msg("%s: not an address", text);
    return a;
}

static void test_trusted_proxies_list(void **state)
{
    static const struct {
        const char *list;
        const char *why; /* NULL: accepted */
    } cases[] = {
        {"", NULL},
        {"10.0.0.1", NULL},
        {" 10.0.0.1 ,\t192.168.1.2, ::1,2001:db8::7 ", NULL},
        {"10.0.0.1,,10.0.0.2", "api.trusted_proxies: \"\" is not an IPv4 or IPv6 address"},
        {"10.0.0.1, proxy.example", "api.trusted_proxies: \"proxy.example\" is not"},
        {"10.0.0.256", "api.trusted_proxies: \"10.0.0.256\" is not"},
        {"10.0.0.0/8", "api.trusted_proxies: \"10.0.0.0/8\" is not"},
        {"10.0.0.1:8080", "api.trusted_proxies: \"10.0.0.1:8080\" is not"},
    };
    serve_proxies p;
    serve_addr v6, other;
    char why[200];
    char many[33 * 16] = "";

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = serve_parse_proxies(cases[i].list, &p, why, sizeof(why));

        if (cases[i].why == NULL && rc != OW_OK)
            fail_msg("\"%s\": refused: %s", cases[i].list, why);
        if (cases[i].why != NULL &&
            (rc != OW_EINVAL || strncmp(why, cases[i].why, strlen(cases[i].why)) != 0))
            fail_msg("\"%s\": got \"%s\", want \"%s\"", cases[i].list, rc == OW_OK ? "" : why,
                     cases[i].why);
    }
    assert_int_equal(serve_parse_proxies(" 10.0.0.1 ,\t::1", &p, why, sizeof(why)), OW_OK);
    assert_int_equal(p.n, 2);
    v6 = addr("::1");
    other = addr("10.0.0.2");
    assert_true(serve_proxies_has(&p, &v6));
    assert_false(serve_proxies_has(&p, &other));
    /* IPv4 is kept mapped into IPv6, so that it cannot collide with an
     * IPv6 address of the same first four bytes. */
    v6 = addr("a00:1::");
    other = addr("10.0.0.1");
    assert_memory_not_equal(other.b, v6.b, 16);
    for (int i = 0; i < 33; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "10.0.0.%d,", i + 1);
    assert_int_equal(serve_parse_proxies(many, &p, why, sizeof(why)), OW_EINVAL);
    assert_string_equal(why, "api.trusted_proxies: more than 32 addresses");
}

static void test_forwarded_client(void **state)
{
    static const struct {
        const char *lines[3];
        const char *client;
    } cases[] = {
        {{NULL}, "127.0.0.1"},                          /* no header: the proxy */
        {{"203.0.113.5"}, "203.0.113.5"},               /* one hop */
        {{" 203.0.113.5 "}, "203.0.113.5"},             /* blanks */
        {{"198.51.100.9, 203.0.113.5"}, "203.0.113.5"}, /* the left was the client's */
        {{"203.0.113.5, 10.0.0.1"}, "203.0.113.5"},     /* a trusted hop skipped */
        {{"203.0.113.5", "10.0.0.1"}, "203.0.113.5"},   /* over two lines */
        {{"198.51.100.9", "203.0.113.5,10.0.0.1"}, "203.0.113.5"},
        {{"10.0.0.1, 127.0.0.1"}, "10.0.0.1"}, /* all trusted: the first */
        {{"not-an-address, 203.0.113.5"}, "203.0.113.5"},
        {{"203.0.113.5, not-an-address"}, "127.0.0.1"}, /* the hop right of it */
        {{"203.0.113.5, , 10.0.0.1"}, "10.0.0.1"},
        {{""}, "127.0.0.1"},
        {{"2001:db8::5, 10.0.0.1"}, "2001:db8::5"},
    };
    serve_proxies p;
    char why[200];
    char got[64];

    (void)state;
    assert_int_equal(serve_parse_proxies("127.0.0.1,10.0.0.1", &p, why, sizeof(why)), OW_OK);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        serve_addr client = addr("127.0.0.1");
        serve_addr want = addr(cases[i].client);
        size_t n = 0;

        while (n < 3 && cases[i].lines[n] != NULL)
            n++;
        serve_forwarded_client(&p, cases[i].lines, n, &client);
        serve_addr_format(&client, got, sizeof(got));
        if (memcmp(client.b, want.b, 16) != 0)
            fail_msg("case %zu (%s): client %s, want %s", i, n > 0 ? cases[i].lines[n - 1] : "-",
                     got, cases[i].client);
    }
}

/* 2001:db8::n, for n below 65536. */
static serve_addr nth_addr(unsigned n)
{
    char text[32];

    snprintf(text, sizeof(text), "2001:db8::%x", n);
    return addr(text);
}

/* At 1 request/s, each of OW_SERVE_RATE_ADDRESSES addresses has one request
 * and then none: every address keeps a bucket of its own. */
static void test_rate_keeps_every_address_apart(void **state)
{
    serve_rate *r = serve_rate_new(1);
    unsigned again = 0;

    (void)state;
    assert_non_null(r);
    for (unsigned i = 0; i < OW_SERVE_RATE_ADDRESSES; i++) {
        serve_addr a = nth_addr(i);

        assert_int_equal(serve_rate_take(r, &a, 1000), 1);
    }
    for (unsigned i = 0; i < OW_SERVE_RATE_ADDRESSES; i++) {
        serve_addr a = nth_addr(i);

        again += (unsigned)serve_rate_take(r, &a, 1000);
    }
    assert_int_equal(again, 0);
    serve_rate_free(&r);
    assert_null(r);
}

/* Three buckets of 2 requests/s. A new address drops the bucket that will
 * be full soonest, not the least recently used one. */
static void test_rate_full_table_drops_the_fullest_bucket(void **state)
{
    serve_rate *r = serve_rate_new_with(2, 3, serve_addr_hash);
    serve_addr a = nth_addr(1), b = nth_addr(2), c = nth_addr(3), d = nth_addr(4);

    (void)state;
    assert_int_equal(serve_rate_take(r, &a, 0), 1);
    assert_int_equal(serve_rate_take(r, &a, 0), 1);   /* empty, full at 1000 */
    assert_int_equal(serve_rate_take(r, &b, 100), 1); /* one left, full at 600 */
    assert_int_equal(serve_rate_take(r, &c, 200), 1);
    assert_int_equal(serve_rate_take(r, &c, 200), 1); /* empty, full at 1200 */
    assert_int_equal(serve_rate_take(r, &d, 300), 1); /* drops b's bucket */
    /* a kept its bucket (0.6 of a request), the oldest though it is. */
    assert_int_equal(serve_rate_take(r, &a, 300), 0);
    /* b starts again with a full bucket: two requests, not 1.4. */
    assert_int_equal(serve_rate_take(r, &b, 300), 1);
    assert_int_equal(serve_rate_take(r, &b, 300), 1);
    serve_rate_free(&r);
}

static uint64_t one_hash(const serve_addr *a)
{
    (void)a;
    return 7;
}

/* Addresses under one hash are told apart by their bytes, also when one
 * of them is dropped for another. */
static void test_rate_addresses_under_one_hash(void **state)
{
    serve_rate *r = serve_rate_new_with(1, 2, one_hash);
    serve_addr a = nth_addr(1), b = nth_addr(2), c = nth_addr(3);

    (void)state;
    assert_int_equal(serve_rate_take(r, &a, 0), 1);
    assert_int_equal(serve_rate_take(r, &b, 10), 1);
    assert_int_equal(serve_rate_take(r, &a, 10), 0);
    assert_int_equal(serve_rate_take(r, &b, 10), 0);
    assert_int_equal(serve_rate_take(r, &c, 20), 1); /* drops a's, full soonest */
    assert_int_equal(serve_rate_take(r, &b, 20), 0);
    assert_int_equal(serve_rate_take(r, &c, 20), 0);
    assert_int_equal(serve_rate_take(r, &a, 20), 1);
    serve_rate_free(&r);
}

/* --- A running service --------------------------------------------------- */

#define TOKEN "0123456789abcdef0123456789abcdef"

static unsigned free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* A "database" that accepts TCP connections into its backlog and never
 * says a word, as a stopped (SIGSTOP) MariaDB does. */
static int silent_database(unsigned *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* Parameters of a service whose database port refuses connections: a
 * lookup gets 503 at once, everything before it works. */
static ow_serve_params params(unsigned port, unsigned db_port)
{
    ow_serve_params p;

    memset(&p, 0, sizeof(p));
    p.address = "127.0.0.1";
    p.port = port;
    p.threads = 2;
    p.max_connections = 64;
    p.max_per_address = 0;
    p.timeout_s = 10;
    p.lookup_timeout_ms = 2000;
    p.trusted_proxies = "";
    p.token = TOKEN;
    p.token_len = strlen(TOKEN);
    p.store.host = "127.0.0.1";
    p.store.port = db_port;
    p.store.user = "nobody";
    p.store.password = "";
    p.store.database = "nothing";
    p.store.connect_timeout_s = 1;
    p.store.lock_wait_timeout_s = 1;
    p.store.tls.mode = OW_SSL_DISABLED;
    return p;
}

static ow_serve *start(const ow_serve_params *p)
{
    ow_serve *api = NULL;
    ow_error err;

    if (ow_serve_start(p, &api, &err) != OW_OK)
        fail_msg("ow_api_start: %s", err.msg);
    return api;
}

/* A connection to the service from src (NULL: any loopback address). */
static int dial(const char *src, unsigned port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct timeval tv = {5, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    if (src != NULL) {
        assert_int_equal(inet_pton(AF_INET, src, &sa.sin_addr), 1);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    }
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_text(int fd, const char *text)
{
    size_t len = strlen(text);

    assert_int_equal(send(fd, text, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads one response into buf; returns its status, or -1 when the
 * connection ended (or timed out) before a whole one. */
static int read_response(int fd, char *buf, size_t cap)
{
    size_t have = 0;
    char *end = NULL;
    const char *cl;
    size_t body = 0;

    while (end == NULL || have < (size_t)(end + 4 - buf) + body) {
        ssize_t n = recv(fd, buf + have, cap - 1 - have, 0);

        if (n <= 0)
            return -1;
        have += (size_t)n;
        buf[have] = '\0';
        if (end == NULL && (end = strstr(buf, "\r\n\r\n")) != NULL) {
            cl = strstr(buf, "Content-Length: ");
            body = cl != NULL && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
        }
    }
    return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : -1;
}

/* One GET of path on fd with the token and one extra header line ("" for
 * none); the response stays in buf. */
static int get(int fd, const char *path, const char *token, const char *header, char *buf,
               size_t cap)
{
    char req[600];

    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n%s%s%s%s\r\n", path,
             token != NULL ? "Authorization: Bearer " : "", token != NULL ? token : "",
             token != NULL ? "\r\n" : "", header);
    send_text(fd, req);
    return read_response(fd, buf, cap);
}

/* 1 when the service has closed fd (its end of stream arrived). */
static int closed_by_peer(int fd, int wait_ms)
{
    struct pollfd pfd = {fd, POLLIN, 0};
    char c;

    if (poll(&pfd, 1, wait_ms) != 1)
        return 0;
    return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

static void test_methods_and_bodies_are_answered(void **state)
{
    ow_serve_params p = params(free_port(), free_port());
    ow_serve *api = start(&p);
    char buf[4096];
    int fd = dial(NULL, p.port);

    (void)state;
    send_text(fd, "POST /v1/requests/42/k HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    assert_int_equal(read_response(fd, buf, sizeof(buf)), 405);
    assert_non_null(strstr(buf, "\r\nAllow: GET, HEAD\r\n"));
    assert_non_null(strstr(buf, "\"code\":\"METHOD_NOT_ALLOWED\""));
    /* The same connection: the body was read, so the next request is
     * understood. */
    send_text(fd, "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    assert_int_equal(read_response(fd, buf, sizeof(buf)), 400);
    assert_non_null(strstr(buf, "\"code\":\"BODY_NOT_ALLOWED\""));
    send_text(fd, "DELETE /healthz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "4\r\nabcd\r\n0\r\n\r\n");
    assert_int_equal(read_response(fd, buf, sizeof(buf)), 405);
    send_text(fd, "PUT /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_int_equal(read_response(fd, buf, sizeof(buf)), 405);
    assert_int_equal(get(fd, "/healthz", NULL, "", buf, sizeof(buf)), 200);
    close(fd);
    ow_serve_stop(&api);
}

/* Wrong tokens are refused before the rate limit is counted: a client
 * that then sends the right one has all its requests. "/v1/requests/0/k"
 * breaks the path rules, which are checked after the rate limit, so its
 * 400 shows the request passed the limit without touching the database. */
static void test_wrong_tokens_cost_no_rate(void **state)
{
    ow_serve_params p = params(free_port(), free_port());
    ow_serve *api;
    char buf[4096];
    int fd;

    (void)state;
    p.rate_limit = 2;
    api = start(&p);
    fd = dial(NULL, p.port);
    for (int i = 0; i < 6; i++)
        assert_int_equal(
            get(fd, "/v1/requests/0/k", "wrong-token-0123456789", "", buf, sizeof(buf)), 401);
    assert_int_equal(get(fd, "/v1/requests/0/k", NULL, "", buf, sizeof(buf)), 401);
    assert_int_equal(get(fd, "/v1/requests/0/k", TOKEN, "", buf, sizeof(buf)), 400);
    assert_int_equal(get(fd, "/v1/requests/0/k", TOKEN, "", buf, sizeof(buf)), 400);
    /* The limit itself still holds. */
    assert_int_equal(get(fd, "/v1/requests/0/k", TOKEN, "", buf, sizeof(buf)), 429);
    close(fd);
    ow_serve_stop(&api);
}

static int get_as(unsigned port, const char *xff)
{
    char header[200] = "";
    char buf[4096];
    int fd = dial(NULL, port);
    int status;

    if (xff != NULL)
        snprintf(header, sizeof(header), "X-Forwarded-For: %s\r\n", xff);
    status = get(fd, "/v1/requests/0/k", TOKEN, header, buf, sizeof(buf));
    close(fd);
    return status;
}

/* With a rate limit of 1 request/s, 400 means the client's bucket had a
 * request left, 429 that it was empty. */
static void test_forwarded_clients_have_their_own_buckets(void **state)
{
    ow_serve_params p = params(free_port(), free_port());
    ow_serve *api;

    (void)state;
    p.rate_limit = 1;
    p.trusted_proxies = "127.0.0.1";
    api = start(&p);
    assert_int_equal(get_as(p.port, "203.0.113.1"), 400);
    assert_int_equal(get_as(p.port, "203.0.113.2"), 400);
    assert_int_equal(get_as(p.port, "203.0.113.1"), 429);
    assert_int_equal(get_as(p.port, "203.0.113.3, 127.0.0.1"), 400);
    /* A client cannot pick its bucket by writing the header itself: the
     * proxy appends the address it saw, and that one counts. */
    assert_int_equal(get_as(p.port, "203.0.113.9, 203.0.113.2"), 429);
    assert_int_equal(get_as(p.port, NULL), 400); /* the proxy's own requests */
    assert_int_equal(get_as(p.port, NULL), 429);
    ow_serve_stop(&api);
    /* From a peer that is not a trusted proxy, the header counts for
     * nothing. */
    p = params(free_port(), free_port());
    p.rate_limit = 1;
    api = start(&p);
    assert_int_equal(get_as(p.port, "203.0.113.1"), 400);
    assert_int_equal(get_as(p.port, "203.0.113.2"), 429);
    ow_serve_stop(&api);
}

/* A client that sends its headers a byte at a time is inside the
 * inactivity timeout at every byte; the request's deadline still ends it. */
static void test_slow_request_is_cut_at_its_deadline(void **state)
{
    ow_serve_params p = params(free_port(), free_port());
    ow_serve *api;
    char buf[4096];
    int fd;
    int64_t t0;
    int closed = 0;

    (void)state;
    p.timeout_s = 1;
    api = start(&p);
    fd = dial(NULL, p.port);
    t0 = ow_clock_mono_ms();
    send_text(fd, "GET /v1/requests/42/k HTTP/1.1\r\nHost: t\r\nX-Slow: ");
    while (!closed && ow_clock_mono_ms() - t0 < 4000) {
        closed = closed_by_peer(fd, 200);
        if (!closed && send(fd, "a", 1, MSG_NOSIGNAL) != 1)
            closed = 1;
    }
    assert_true(closed);
    assert_in_range(ow_clock_mono_ms() - t0, 900, 2500);
    close(fd);
    /* A client that sends its request at once is not affected, before or
     * after an idle pause shorter than the timeout. */
    fd = dial(NULL, p.port);
    assert_int_equal(get(fd, "/healthz", NULL, "", buf, sizeof(buf)), 200);
    ow_sleep_ms(600, NULL);
    assert_int_equal(get(fd, "/healthz", NULL, "", buf, sizeof(buf)), 200);
    ow_sleep_ms(600, NULL);
    assert_int_equal(get(fd, "/healthz", NULL, "", buf, sizeof(buf)), 200);
    close(fd);
    ow_serve_stop(&api);
}

static unsigned count_closed(const int *fds, int n)
{
    unsigned closed = 0;

    for (int i = 0; i < n; i++)
        closed += (unsigned)closed_by_peer(fds[i], 100);
    return closed;
}

static void test_connections_per_address(void **state)
{
    ow_serve_params p = params(free_port(), free_port());
    ow_serve *api;
    char buf[4096];
    int fds[6];
    int other;

    (void)state;
    p.max_per_address = 3;
    api = start(&p);
    for (int i = 0; i < 6; i++)
        fds[i] = dial("127.0.0.2", p.port);
    assert_int_equal(count_closed(fds, 6), 3);
    other = dial("127.0.0.3", p.port);
    assert_int_equal(get(other, "/healthz", NULL, "", buf, sizeof(buf)), 200);
    close(other);
    /* Closing one makes room for one. */
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    ow_sleep_ms(200, NULL);
    for (int i = 0; i < 3; i++)
        fds[i] = dial("127.0.0.2", p.port);
    assert_int_equal(count_closed(fds, 3), 0);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    ow_serve_stop(&api);
    /* A trusted proxy carries many clients: it is not limited. */
    p = params(free_port(), free_port());
    p.max_per_address = 3;
    p.trusted_proxies = "127.0.0.2";
    api = start(&p);
    for (int i = 0; i < 6; i++)
        fds[i] = dial("127.0.0.2", p.port);
    assert_int_equal(count_closed(fds, 6), 0);
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    ow_serve_stop(&api);
}

typedef struct {
    unsigned port;
    int status;
    int64_t ms;
    int retry_after; /* the response says Retry-After: 2 */
    char body[512];
} lookup_call;

static void *one_lookup(void *arg)
{
    lookup_call *call = arg;
    char buf[4096];
    int fd = dial(NULL, call->port);
    int64_t t0 = ow_clock_mono_ms();
    char *body;

    call->status = get(fd, "/v1/requests/42/k", TOKEN, "", buf, sizeof(buf));
    call->ms = ow_clock_mono_ms() - t0;
    call->retry_after = strstr(buf, "\r\nRetry-After: 2\r\n") != NULL;
    body = strstr(buf, "\r\n\r\n");
    snprintf(call->body, sizeof(call->body), "%.500s", body != NULL ? body + 4 : buf);
    close(fd);
    return NULL;
}

/* The database accepts connections and never answers (as a stopped
 * mariadbd does). /healthz must answer every probe at once, and every
 * lookup must get 503 with Retry-After within lookup_timeout_ms, whether
 * it was running on one of the two database connections or waiting for
 * one. */
static void test_hung_database(void **state)
{
    unsigned db_port;
    int db = silent_database(&db_port);
    ow_serve_params p = params(free_port(), db_port);
    lookup_call calls[6];
    pthread_t threads[6];
    ow_serve *api;
    char buf[4096];
    int64_t t0;

    (void)state;
    p.lookup_timeout_ms = 400;
    api = start(&p); /* its first connection waits out connect_timeout_s */
    for (int i = 0; i < 6; i++) {
        calls[i].port = p.port;
        assert_int_equal(pthread_create(&threads[i], NULL, one_lookup, &calls[i]), 0);
    }
    for (int i = 0; i < 5; i++) {
        int fd = dial(NULL, p.port);

        t0 = ow_clock_mono_ms();
        assert_int_equal(get(fd, "/healthz", NULL, "", buf, sizeof(buf)), 200);
        assert_in_range(ow_clock_mono_ms() - t0, 0, 200);
        close(fd);
        ow_sleep_ms(100, NULL);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(threads[i], NULL);
        if (calls[i].status != 503 || calls[i].ms > 400 + 300 || !calls[i].retry_after ||
            (strstr(calls[i].body, "\"code\":\"DATABASE_UNAVAILABLE\"") == NULL &&
             strstr(calls[i].body, "\"code\":\"BUSY\"") == NULL))
            fail_msg("lookup %d: %d after %lld ms: %s", i, calls[i].status, (long long)calls[i].ms,
                     calls[i].body);
    }
    t0 = ow_clock_mono_ms();
    ow_serve_stop(&api);
    /* A database thread inside a connection attempt finishes it first. */
    assert_in_range(ow_clock_mono_ms() - t0, 0, 1000 * p.store.connect_timeout_s + 500);
    close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_route),
        cmocka_unit_test(test_order_route_decodes_its_segment),
        cmocka_unit_test(test_other_paths),
        cmocka_unit_test(test_bad_segments),
        cmocka_unit_test(test_trusted_proxies_list),
        cmocka_unit_test(test_forwarded_client),
        cmocka_unit_test(test_rate_keeps_every_address_apart),
        cmocka_unit_test(test_rate_full_table_drops_the_fullest_bucket),
        cmocka_unit_test(test_rate_addresses_under_one_hash),
        cmocka_unit_test(test_methods_and_bodies_are_answered),
        cmocka_unit_test(test_wrong_tokens_cost_no_rate),
        cmocka_unit_test(test_forwarded_clients_have_their_own_buckets),
        cmocka_unit_test(test_slow_request_is_cut_at_its_deadline),
        cmocka_unit_test(test_connections_per_address),
        cmocka_unit_test(test_hung_database),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
