/* User sharding: the stable hash, the bucket map and the mysql.shards
 * list. */
#include "ow/shard.h"

#include <stdio.h>
#include <string.h>

#include "ow/util.h"

/* FNV-1a's published 64-bit parameters. Chosen because it is a few lines
 * in any language and its result does not depend on word size or byte
 * order: the input is the decimal text, not the integer's memory. */
#define FNV64_OFFSET 14695981039346656037ULL
#define FNV64_PRIME 1099511628211ULL

uint64_t ow_shard_hash(int64_t user_id)
{
    char digits[24];
    size_t n = 0;
    uint64_t v = user_id < 0 ? 0 - (uint64_t)user_id : (uint64_t)user_id;
    uint64_t h = FNV64_OFFSET;

    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0) {
        h ^= (unsigned char)digits[--n];
        h *= FNV64_PRIME;
    }
    return h;
}

uint32_t ow_shard_bucket(int64_t user_id, uint32_t bucket_count)
{
    return (uint32_t)(ow_shard_hash(user_id) % (bucket_count > 0 ? bucket_count : 1));
}

unsigned ow_shard_of_bucket(uint32_t bucket, unsigned shard_count)
{
    return shard_count > 0 ? bucket % shard_count : 0;
}

unsigned ow_shard_of_user(int64_t user_id, uint32_t bucket_count, unsigned shard_count)
{
    return ow_shard_of_bucket(ow_shard_bucket(user_id, bucket_count), shard_count);
}

int ow_shard_map_equal(const ow_shard_map *a, const ow_shard_map *b)
{
    return a->bucket_count == b->bucket_count && a->shard_count == b->shard_count &&
           a->shard_index == b->shard_index;
}

static int entry_error(ow_error *err, unsigned index, const char *text, size_t len, const char *why)
{
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "mysql.shards: entry %u \"%.*s\": %s",
                        index, (int)(len > 80 ? 80 : len), text, why);
}

/* 1 when s[0..n) is 1 to max letters, digits and bytes of extra. */
static int name_ok(const char *s, size_t n, size_t max, const char *extra)
{
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c != '\0' && strchr(extra, c) != NULL)))
            return 0;
    }
    return 1;
}

static int host_ok(const char *h, size_t n)
{
    return name_ok(h, n, OW_NODE_NAME_MAX, ".-_:");
}

static int db_ok(const char *d, size_t n)
{
    return name_ok(d, n, OW_SHARD_DB_MAX, "_$");
}

/* Splits "host[:port]" (host possibly "[v6]") at its port. */
static int split_host(const char *s, size_t n, const char **host, size_t *hlen, const char **port,
                      size_t *plen)
{
    const char *colon;

    *port = NULL;
    *plen = 0;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);

        if (close == NULL)
            return -1;
        *host = s + 1;
        *hlen = (size_t)(close - s) - 1;
        if (close + 1 < s + n) {
            if (close[1] != ':')
                return -1;
            *port = close + 2;
            *plen = (size_t)(s + n - *port);
        }
        return 0;
    }
    colon = memchr(s, ':', n);
    *host = s;
    *hlen = colon != NULL ? (size_t)(colon - s) : n;
    if (colon != NULL) {
        *port = colon + 1;
        *plen = (size_t)(s + n - *port);
    }
    return 0;
}

static int parse_port(const char *p, size_t n, unsigned *out)
{
    char buf[8];
    int64_t v = 0;

    if (n == 0 || n >= sizeof(buf))
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (ow_parse_int64(buf, &v) != OW_OK || v < 1 || v > 65535)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* One node of an entry, "host", "[v6]" or, for the last node only, either
 * with ":port". Appends the host to names (a '|' list, cap bytes). */
static int parse_node(const char *s, size_t n, int last, unsigned index, const char *entry,
                      size_t entry_len, char *names, size_t cap, ow_shard_addr *a, ow_error *err)
{
    const char *host, *port;
    size_t hlen, plen, used = strlen(names);
    char why[96];

    n = ow_trim_blanks(&s, n);
    if (split_host(s, n, &host, &hlen, &port, &plen) != 0)
        return entry_error(err, index, entry, entry_len, "expected host[:port][/database]");
    if (!host_ok(host, hlen)) {
        snprintf(why, sizeof(why), "%s%s", names[0] != '\0' || !last ? "a node name " : "the host ",
                 "is empty or has a character not allowed");
        return entry_error(err, index, entry, entry_len, why);
    }
    if (port != NULL && !last)
        return entry_error(err, index, entry, entry_len,
                           "the port is written once, after the last node");
    if (port != NULL && parse_port(port, plen, &a->port) != 0)
        return entry_error(err, index, entry, entry_len, "the port must be 1..65535");
    if (used + 1 + hlen + 1 > cap)
        return entry_error(err, index, entry, entry_len, "the node list is too long");
    if (used > 0)
        names[used++] = '|';
    memcpy(names + used, host, hlen);
    names[used + hlen] = '\0';
    return OW_OK;
}

static int parse_entry(const char *s, size_t n, unsigned index, ow_shard_addr *a, ow_error *err)
{
    const char *slash = memchr(s, '/', n);
    size_t hp = slash != NULL ? (size_t)(slash - s) : n;
    char names[OW_SHARD_HOST_MAX + 1] = "";
    char what[128];
    const char *p = s;

    memset(a, 0, sizeof(*a));
    for (;;) {
        const char *bar = memchr(p, '|', (size_t)(s + hp - p));
        size_t len = bar != NULL ? (size_t)(bar - p) : (size_t)(s + hp - p);

        if (parse_node(p, len, bar == NULL, index, s, n, names, sizeof(names), a, err) != OW_OK)
            return OW_EINVAL;
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    if (slash != NULL && !db_ok(slash + 1, n - hp - 1))
        return entry_error(err, index, s, n, "the database name must be 1..64 of A-Z a-z 0-9 _ $");
    snprintf(what, sizeof(what), "mysql.shards: entry %u \"%.*s\"", index, (int)(n > 80 ? 80 : n),
             s);
    if (ow_nodes_join(names, strlen(names), '|', what, a->host, sizeof(a->host), err) != OW_OK)
        return OW_EINVAL;
    if (slash != NULL)
        memcpy(a->database, slash + 1, n - hp - 1);
    return OW_OK;
}

int ow_shard_list_parse(const char *text, ow_shard_list *out, ow_error *err)
{
    const char *p = text;

    out->n = 0;
    if (ow_trim_blanks(&p, strlen(p)) == 0)
        return OW_OK;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *e = p;
        size_t n = ow_trim_blanks(&e, comma != NULL ? (size_t)(comma - p) : strlen(p));

        if (out->n == OW_SHARD_MAX)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "mysql.shards: more than %d entries", OW_SHARD_MAX);
        if (n == 0)
            return entry_error(err, out->n, "", 0, "empty entry");
        if (parse_entry(e, n, out->n, &out->addr[out->n], err) != OW_OK)
            return OW_EINVAL;
        out->n++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return OW_OK;
}
