/* The query service's database threads (serve_lookup.c). */
#ifndef OW_SERVE_LOOKUP_H
#define OW_SERVE_LOOKUP_H

#include <microhttpd.h>
#include <stdint.h>

#include "ow/store.h"
#include "serve_reply.h"
#include "serve_route.h"

typedef struct serve_lookups serve_lookups;
typedef struct serve_job serve_job;

/* What the database side needs of ow_serve_params. */
typedef struct {
    ow_store_params store; /* borrowed for the call */
    const ow_store_params *shards;
    unsigned n_shards;
    uint32_t shard_buckets;
    unsigned threads; /* database threads per shard */
    unsigned lookup_timeout_ms;
} serve_lookup_params;

/* Creates the database connections of every shard (api.threads each),
 * checks one per shard (as ow_serve_start documents) and starts their
 * threads. */
int serve_lookups_new(const serve_lookup_params *p, serve_lookups **out, ow_error *err);
/* Suspends c and queues the lookup of route on its user's shard; *job is
 * then the connection's reference, and c is resumed once the job has its
 * reply. OW_EINVAL when the service is stopping (nothing suspended). */
int serve_lookups_submit(serve_lookups *l, struct MHD_Connection *c, const serve_route *route,
                         serve_job **job);
/* The reply of an answered job (the caller sends it), releasing the
 * connection's reference. OW_ERETRY, job kept, when it has none yet. */
int serve_lookups_take(serve_lookups *l, serve_job **job, serve_reply *out);
/* Releases the connection's reference without taking the reply (the
 * connection closed first). */
void serve_lookups_release(serve_lookups *l, serve_job **job);
/* Answers every lookup past its bound with 503. */
void serve_lookups_tick(serve_lookups *l, int64_t now_ms);
/* Answers every pending lookup with 503, interrupts the database calls in
 * progress and joins the threads; later submits fail. */
void serve_lookups_stop(serve_lookups *l);
void serve_lookups_free(serve_lookups **l);

#endif
