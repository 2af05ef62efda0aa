/*
 * Which queued requests one deciding transaction takes together (a lane's
 * micro-batch). A round looks at the queue in order, and every request it
 * looks at holds its key, and a valid one its orders, whether it is taken
 * or not: a later request with the same key, or with one of the same
 * orders, is never decided before it or beside it. Pure: no I/O.
 */
#ifndef OW_ADMIT_H
#define OW_ADMIT_H

#include <stddef.h>
#include <stdint.h>

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
} ow_admit;

/* Empty, for transactions of at most max_orders orders, with room for
 * rounds of requests keys and orders orders; the sets grow past that and
 * keep their memory from one round to the next. Returns 0 or OW_ENOMEM (a
 * failed init is still safe to free). */
int ow_admit_init(ow_admit *a, size_t requests, size_t orders, size_t max_orders);
void ow_admit_free(ow_admit *a);
/* Starts a round: nothing held, nothing taken. */
void ow_admit_reset(ow_admit *a);
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
