/* The query service's responses (serve_reply.h). They are built wherever
 * the answer is known, a database thread included, and queued by the
 * connection's serving thread: libmicrohttpd lets only that thread queue. */
#include <stdint.h>
#include <string.h>

#include "serve_reply.h"
#include "ow/json.h"
#include "ow/log.h"
#include "ow/util.h"

static serve_reply reply_new(unsigned status, const char *body, size_t len)
{
    serve_reply rep = {status, NULL};

    rep.r = MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    if (rep.r != NULL) {
        MHD_add_response_header(rep.r, "Content-Type", "application/json");
        MHD_add_response_header(rep.r, "Cache-Control", "no-store");
    }
    return rep;
}

serve_reply serve_reply_json(unsigned status, const char *body, size_t len, const char *h1,
                             const char *v1)
{
    serve_reply rep = reply_new(status, body, len);

    if (rep.r != NULL && h1 != NULL)
        MHD_add_response_header(rep.r, h1, v1);
    return rep;
}

serve_reply serve_reply_error(unsigned status, const char *code, const char *message,
                              const char *h1, const char *v1)
{
    serve_reply rep = {status, NULL};
    ow_buf out;

    ow_buf_init(&out);
    if (ow_buf_appendf(&out, "{\"status\":%u,\"code\":\"%s\",\"message\":", status, code) ==
            OW_OK &&
        ow_json_write_string(&out, message, strlen(message)) == OW_OK &&
        ow_buf_appendc(&out, '}') == OW_OK)
        rep = serve_reply_json(status, out.data, out.len, h1, v1);
    ow_buf_cleanup(&out);
    return rep;
}

serve_reply serve_reply_record(const ow_record *rec)
{
    serve_reply rep;

    if (rec->response_status < 200 || rec->response_status > 599 || rec->response.len == 0)
        return serve_reply_error(500, "INTERNAL_ERROR", "the stored record has no valid response",
                                 NULL, NULL);
    rep = reply_new((unsigned)rec->response_status, rec->response.data, rec->response.len);
    if (rep.r != NULL) {
        MHD_add_response_header(rep.r, "Idempotency-Replayed", "true");
        MHD_add_response_header(rep.r, "Request-Digest", rec->digest_hex);
    }
    return rep;
}

static int order_json(const ow_record_order *o, int64_t user_id, ow_buf *out)
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

serve_reply serve_reply_order(const ow_record_order *o, int64_t user_id)
{
    serve_reply rep;
    ow_buf out;

    ow_buf_init(&out);
    if (order_json(o, user_id, &out) == OW_OK)
        rep = serve_reply_json(200, out.data, out.len, NULL, NULL);
    else
        rep = serve_reply_error(500, "INTERNAL_ERROR", "out of memory", NULL, NULL);
    ow_buf_cleanup(&out);
    return rep;
}

serve_reply serve_reply_store_error(const ow_error *err)
{
    OW_LOG(OW_LOG_WARN, "api_database_error", OW_F_STR("class", ow_errclass_name(err->cls)),
           OW_F_STR("error", err->msg));
    if (err->cls == OW_ERRCLASS_RETRIABLE)
        return serve_reply_error(
            503, "DATABASE_UNAVAILABLE",
            "the database cannot be reached; retry after the Retry-After delay", "Retry-After",
            OW_SERVE_RETRY_AFTER_S);
    return serve_reply_error(500, "INTERNAL_ERROR", "the lookup failed; see the service's log",
                             NULL, NULL);
}

serve_reply serve_reply_stopping(void)
{
    return serve_reply_error(503, "STOPPING",
                             "the service is stopping; retry after the Retry-After delay, another "
                             "replica may answer",
                             "Retry-After", OW_SERVE_RETRY_AFTER_S);
}

enum MHD_Result serve_reply_send(struct MHD_Connection *c, serve_reply rep)
{
    enum MHD_Result rc;

    if (rep.r == NULL)
        return MHD_NO;
    rc = MHD_queue_response(c, rep.status, rep.r);
    MHD_destroy_response(rep.r);
    return rc;
}

void serve_reply_drop(serve_reply *rep)
{
    if (rep->r != NULL)
        MHD_destroy_response(rep->r);
    rep->r = NULL;
}
