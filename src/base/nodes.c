/* Node lists (ow/nodes.h). */
#include "ow/nodes.h"

#include <string.h>

#include "ow/util.h"

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > OW_NODE_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':'))
            return 0;
    }
    return 1;
}

static int node_error(ow_error *err, const char *what, unsigned index, const char *text, size_t n,
                      const char *why)
{
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: node %u \"%.*s\": %s", what, index,
                        (int)(n > 80 ? 80 : n), text, why);
}

/* 1 when the joined list out[0..len) already holds name[0..n). */
static int listed(const char *out, size_t len, const char *name, size_t n)
{
    const char *p = out;

    while (p < out + len) {
        const char *comma = memchr(p, ',', (size_t)(out + len - p));
        size_t k = comma != NULL ? (size_t)(comma - p) : (size_t)(out + len - p);

        if (k == n && memcmp(p, name, n) == 0)
            return 1;
        p += k + 1;
    }
    return 0;
}

int ow_nodes_join(const char *text, size_t len, char sep, const char *what, char *out, size_t cap,
                  ow_error *err)
{
    const char *p = text, *end = text + len;
    size_t used = 0;
    unsigned i = 0;

    for (;; i++) {
        const char *next = memchr(p, sep, (size_t)(end - p));
        const char *name = p;
        size_t n = ow_trim_blanks(&name, next != NULL ? (size_t)(next - p) : (size_t)(end - p));

        if (i == OW_NODES_MAX)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0, "%s: more than %d nodes", what,
                                OW_NODES_MAX);
        if (n == 0)
            return node_error(err, what, i, "", 0, "empty node name");
        if (!name_ok(name, n))
            return node_error(err, what, i, name, n,
                              "a node name is 1..255 letters, digits and . - _ : (IPv6)");
        if (listed(out, used, name, n))
            return node_error(err, what, i, name, n, "listed twice");
        if (used + (i > 0) + n + 1 > cap)
            return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                                "%s: the node list is longer than %zu bytes", what, cap - 1);
        if (i > 0)
            out[used++] = ',';
        memcpy(out + used, name, n);
        used += n;
        out[used] = '\0';
        if (next == NULL)
            return OW_OK;
        p = next + 1;
    }
}

unsigned ow_nodes_count(const char *joined)
{
    unsigned n = *joined != '\0';

    for (const char *c = joined; *c != '\0'; c++)
        n += *c == ',';
    return n;
}

int ow_nodes_get(const char *joined, unsigned i, char *buf, size_t cap)
{
    const char *p = joined;
    size_t n;

    for (unsigned k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (p == NULL)
            return OW_ENOTFOUND;
        p++;
    }
    n = strcspn(p, ",");
    while (n > 0 && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return OW_OK;
}
