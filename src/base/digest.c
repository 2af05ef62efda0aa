/* libcrypto's low-level SHA-256 calls are deprecated since OpenSSL 3.0 but
 * kept in every 3.x release. They are used here because EVP allocates a
 * digest context on every EVP_Digest and, in OpenSSL 3.0, a fresh
 * algorithm context on every EVP_DigestInit_ex2 even when the EVP_MD_CTX is
 * reused; every message takes two digests (its request digest and its key
 * hash) on the poll thread. SHA256_Init/Update/Final use a context on the
 * stack and the same CPU-specific code. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "ow/digest.h"

#include <openssl/sha.h>
#include <string.h>

#include "ow/error.h"

int ow_sha256(const void *data, size_t len, unsigned char out[OW_DIGEST_LEN])
{
    SHA256_CTX c;

    if (SHA256_Init(&c) != 1 || SHA256_Update(&c, data, len) != 1 || SHA256_Final(out, &c) != 1)
        return OW_ENOMEM;
    return OW_OK;
}

/* Where the canonical text goes: appended to a buffer
 * (ow_digest_canonical), or into the hash a chunk at a time
 * (ow_digest_compute), so that a digest needs no memory but the stack. */
#define CANON_CHUNK 4096
/* The longest text of one order: the escaped external_order_no twice its
 * length, the largest amount and integers, and the member names. */
#define CANON_ITEM_MAX (2 * OW_EXT_NO_MAX + OW_AMOUNT_TEXT_MAX + 2 * 21 + 96)

typedef struct {
    char chunk[CANON_CHUNK];
    size_t len;
    SHA256_CTX *sha; /* NULL: text goes to out */
    ow_buf *out;
    int rc;
} canon_writer;

/* Makes room for n more bytes in the chunk: the hash takes what is there. */
static void canon_room(canon_writer *w, size_t n)
{
    if (w->len + n <= sizeof(w->chunk))
        return;
    if (w->sha != NULL) {
        if (SHA256_Update(w->sha, w->chunk, w->len) != 1)
            w->rc = OW_ENOMEM;
    } else if (w->rc == OW_OK) {
        w->rc = ow_buf_append(w->out, w->chunk, w->len);
    }
    w->len = 0;
}

/* n is at most CANON_ITEM_MAX: every call site writes bounded pieces. */
static void put(canon_writer *w, const char *s, size_t n)
{
    canon_room(w, n);
    memcpy(w->chunk + w->len, s, n);
    w->len += n;
}

#define PUT_LIT(w, lit) put((w), (lit), sizeof(lit) - 1)

static void put_int(canon_writer *w, long long v)
{
    char text[21];

    put(w, text, ow_format_int(v, text));
}

static void put_item(canon_writer *w, const ow_order_item *it)
{
    char amount[OW_AMOUNT_TEXT_MAX];
    char *p;

    /* Appends rather than formats: the digest is computed for every
     * message, and printf's machinery costs more than the text. */
    ow_amount_format(it->amount_cents, amount);
    canon_room(w, CANON_ITEM_MAX);
    PUT_LIT(w, "{\"amount\":\"");
    put(w, amount, strlen(amount));
    PUT_LIT(w, "\",\"external_order_no\":\"");
    /* external_order_no is printable ASCII, so only '"' and '\' need escapes. */
    p = w->chunk + w->len;
    for (size_t i = 0; i < it->ext_len; i++) {
        char c = it->external_order_no[i];

        if (c == '"' || c == '\\')
            *p++ = '\\';
        *p++ = c;
    }
    w->len = (size_t)(p - w->chunk);
    PUT_LIT(w, "\",\"product_id\":");
    if (it->product_id > 0)
        put_int(w, (long long)it->product_id);
    else
        PUT_LIT(w, "null");
    PUT_LIT(w, ",\"quantity\":");
    put_int(w, (long long)it->quantity);
    PUT_LIT(w, "}");
}

/* Writes the whole canonical text and hands the last chunk over. */
static int canon_write(canon_writer *w, const ow_request *req)
{
    PUT_LIT(w, "{\"orders\":[");
    for (size_t i = 0; i < req->n_orders; i++) {
        if (i > 0)
            PUT_LIT(w, ",");
        put_item(w, &req->orders[i]);
    }
    PUT_LIT(w, "],\"user_id\":");
    put_int(w, (long long)req->user_id);
    PUT_LIT(w, "}");
    canon_room(w, sizeof(w->chunk));
    return w->rc;
}

int ow_digest_canonical(const ow_request *req, ow_buf *out)
{
    canon_writer w;

    w.len = 0;
    w.sha = NULL;
    w.out = out;
    w.rc = OW_OK;
    return canon_write(&w, req);
}

int ow_digest_compute(const ow_request *req, unsigned char raw[OW_DIGEST_LEN],
                      char hex[OW_DIGEST_HEX_LEN + 1])
{
    SHA256_CTX sha;
    canon_writer w;
    int rc;

    w.len = 0;
    w.sha = &sha;
    w.out = NULL;
    w.rc = SHA256_Init(&sha) == 1 ? OW_OK : OW_ENOMEM;
    rc = canon_write(&w, req);
    if (rc == OW_OK && SHA256_Final(raw, &sha) != 1)
        rc = OW_ENOMEM;
    if (rc == OW_OK)
        ow_hex(raw, OW_DIGEST_LEN, hex);
    return rc;
}

int ow_key_hash(long long user_id, const char *key, size_t len, unsigned char out[OW_KEY_HASH_LEN])
{
    char text[22 + OW_KEY_MAX];
    unsigned char raw[OW_DIGEST_LEN];
    size_t n;

    if (len > OW_KEY_MAX)
        return OW_EINVAL;
    /* Digits as ow_buf_append_int writes them, without printf:
     * this runs for every message, on the poll thread. */
    n = ow_format_int(user_id, text);
    text[n++] = ':';
    memcpy(text + n, key, len);
    if (ow_sha256(text, n + len, raw) != OW_OK)
        return OW_ENOMEM;
    memcpy(out, raw, OW_KEY_HASH_LEN);
    return OW_OK;
}
