/* The query service's responses (serve_reply.c). */
#ifndef OW_SERVE_REPLY_H
#define OW_SERVE_REPLY_H

#include <microhttpd.h>

#include "ow/store_lookup.h"
#include "ow/error.h"

/* What a 503 tells the client to wait. */
#define OW_SERVE_RETRY_AFTER_S "2"

/* --- Replies (serve_reply.c) ------------------------------------------------ */

/* A response and its status: built on any thread, queued on the
 * connection's own. r is NULL when it could not be built (out of memory). */
typedef struct {
    unsigned status;
    struct MHD_Response *r;
} serve_reply;

/* A JSON body (copied) with up to one extra header (h1 NULL: none). */
serve_reply serve_reply_json(unsigned status, const char *body, size_t len, const char *h1,
                             const char *v1);
/* {"status":N,"code":"X","message":"..."} with up to one extra header. */
serve_reply serve_reply_error(unsigned status, const char *code, const char *message,
                              const char *h1, const char *v1);
/* A stored record: its response bytes, status and digest. */
serve_reply serve_reply_record(const ow_record *rec);
serve_reply serve_reply_order(const ow_record_order *o, int64_t user_id);
/* A failed lookup: 503 for a retriable error, 500 otherwise (logged). */
serve_reply serve_reply_store_error(const ow_error *err);
/* 503 for a request that came while the service stops. */
serve_reply serve_reply_stopping(void);
/* Queues rep on c and releases it. MHD_NO (close the connection) when it
 * could not be built or queued. */
enum MHD_Result serve_reply_send(struct MHD_Connection *c, serve_reply rep);
void serve_reply_drop(serve_reply *rep);

#endif
