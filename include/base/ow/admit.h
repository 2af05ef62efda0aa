/*
 * Which queued requests one deciding transaction takes together (a lane's
 * micro-batch). A round looks at the queue in order, and every request it
 * looks at holds its key, and a valid one its orders, whether it is taken
 * or not: a later request with the same key, or with one of the same
 * orders, is never decided before it or beside it. Pure: no I/O (asking
 * the retry cache refreshes or expires its entry, in memory).
 */
#ifndef OW_ADMIT_H
#define OW_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "ow/cache.h"
#include "ow/htab.h"
#include "ow/request.h"

/* What became of a request a round looked at. */
typedef enum {
    OW_ADMIT_LEFT = 0, /* stays queued for a later round */
    OW_ADMIT_COUNTED,  /* taken; counts against the batch, its orders against the transaction */
    OW_ADMIT_FREE      /* taken, answered without the transaction (a cached retry) */
} ow_admit_take;

typedef struct {
    ow_htab keys;   /* key hashes held this round */
    ow_htab orders; /* ow_order_hash of the orders held this round */
    size_t taken;   /* requests taken this round */
    size_t taken_orders;
    size_t max_orders; /* orders one transaction takes at most */
    int db_up;         /* the database answers this round */
    int db_wait;       /* a request of this round was left because it does not */
} ow_admit;

/* A request as a round sees it. */
typedef struct {
    uint64_t key_hash;
    const ow_request *req; /* NULL: an invalid message, answered without a database */
    const char *key;
    size_t key_len;
    const unsigned char *digest; /* OW_DIGEST_LEN bytes */
} ow_admit_ask;

/* Empty, for transactions of at most max_orders orders, with room for
 * rounds of requests keys and orders orders; the sets grow past that and
 * keep their memory from one round to the next. Returns 0 or OW_ENOMEM (a
 * failed init is still safe to free). */
int ow_admit_init(ow_admit *a, size_t requests, size_t orders, size_t max_orders);
void ow_admit_free(ow_admit *a);
/* Starts a round: nothing held, nothing taken; db_up says whether the
 * database answers during it. */
void ow_admit_reset(ow_admit *a, int db_up);
/* Whether the round takes q now. LEFT when an earlier request holds its
 * key. An invalid message is COUNTED (it needs no database). A retry that
 * cache answers at now_ms is FREE, with the stored answer in *code and
 * body. Otherwise q needs the database: LEFT while it does not answer
 * (db_wait is then set), and LEFT when its orders do not fit
 * (ow_admit_orders_fit); else COUNTED. cache may be NULL. Nothing is
 * held: that is ow_admit_hold's. */
ow_admit_take ow_admit_consider(ow_admit *a, ow_cache *cache, const ow_admit_ask *q, int64_t now_ms,
                                ow_result_code *code, ow_buf *body);
/* 1 when an earlier request of this round holds key_hash. */
int ow_admit_key_held(const ow_admit *a, uint64_t key_hash);
/* 1 when req may join the transaction: none of its orders is held, and
 * the orders taken stay within max_orders. While the round has taken
 * nothing (no request of any kind) the limit does not apply, so that a
 * request larger than it can still be decided alone; a held order still
 * keeps it out. */
int ow_admit_orders_fit(const ow_admit *a, const ow_request *req);
/* Records a request the round looked at: holds key_hash, and req's orders
 * when req is not NULL (an invalid message has none), and counts it by
 * take. Returns 0 or OW_ENOMEM (the round then ends). */
int ow_admit_hold(ow_admit *a, uint64_t key_hash, const ow_request *req, ow_admit_take take);

#endif
