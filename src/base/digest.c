#include "ow/digest.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>

#include "ow/error.h"

/* OpenSSL 3 looks EVP_sha256()'s implementation up in its provider table on
 * every EVP_Digest call; fetched once, the lookup goes, and every message
 * takes two digests (its request digest and its key hash). The fetched
 * method is shared by all threads and kept for the process's life. */
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_fetched;

static void fetch_sha256(void)
{
    sha256_fetched = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int ow_sha256(const void *data, size_t len, unsigned char out[OW_DIGEST_LEN])
{
    pthread_once(&sha256_once, fetch_sha256);
    if (EVP_Digest(data, len, out, NULL, sha256_fetched != NULL ? sha256_fetched : EVP_sha256(),
                   NULL) != 1)
        return OW_ENOMEM;
    return OW_OK;
}

static int append_item(const ow_order_item *it, ow_buf *out)
{
    char amount[OW_AMOUNT_TEXT_MAX];
    int rc;

    /* Appends rather than formats: the digest is computed for every
     * message, and printf's machinery costs more than the text. */
    ow_amount_format(it->amount_cents, amount);
    rc = ow_buf_appends(out, "{\"amount\":\"");
    if (rc == OW_OK)
        rc = ow_buf_appends(out, amount);
    if (rc == OW_OK)
        rc = ow_buf_appends(out, "\",\"external_order_no\":\"");
    /* external_order_no is printable ASCII, so only '"' and '\' need escapes. */
    for (size_t i = 0; rc == OW_OK && i < it->ext_len; i++) {
        char c = it->external_order_no[i];

        if (c == '"' || c == '\\')
            rc = ow_buf_appendc(out, '\\');
        if (rc == OW_OK)
            rc = ow_buf_appendc(out, c);
    }
    if (rc != OW_OK)
        return rc;
    rc = ow_buf_appends(out, "\",\"product_id\":");
    if (rc == OW_OK && it->product_id > 0)
        rc = ow_buf_append_int(out, (long long)it->product_id);
    else if (rc == OW_OK)
        rc = ow_buf_appends(out, "null");
    if (rc == OW_OK)
        rc = ow_buf_appends(out, ",\"quantity\":");
    if (rc == OW_OK)
        rc = ow_buf_append_int(out, (long long)it->quantity);
    return rc == OW_OK ? ow_buf_appendc(out, '}') : rc;
}

int ow_digest_canonical(const ow_request *req, ow_buf *out)
{
    int rc = ow_buf_appends(out, "{\"orders\":[");

    for (size_t i = 0; rc == OW_OK && i < req->n_orders; i++) {
        if (i > 0)
            rc = ow_buf_appendc(out, ',');
        if (rc == OW_OK)
            rc = append_item(&req->orders[i], out);
    }
    if (rc == OW_OK)
        rc = ow_buf_appends(out, "],\"user_id\":");
    if (rc == OW_OK)
        rc = ow_buf_append_int(out, (long long)req->user_id);
    return rc == OW_OK ? ow_buf_appendc(out, '}') : rc;
}

int ow_digest_compute(const ow_request *req, unsigned char raw[OW_DIGEST_LEN],
                      char hex[OW_DIGEST_HEX_LEN + 1])
{
    ow_buf canon;
    int rc;

    ow_buf_init(&canon);
    /* An item's canonical text is 80-100 bytes with typical values: one
     * allocation instead of the doublings from 64 bytes. */
    rc = ow_buf_reserve(&canon, 32 + 128 * req->n_orders);
    if (rc == OW_OK)
        rc = ow_digest_canonical(req, &canon);
    if (rc == OW_OK)
        rc = ow_sha256(canon.data, canon.len, raw);
    if (rc == OW_OK)
        ow_hex(raw, OW_DIGEST_LEN, hex);
    ow_buf_cleanup(&canon);
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
