/* The rounds of a lane's micro-batch (ow/admit.h). */
#include "ow/admit.h"

#include <string.h>

#include "ow/error.h"

static uint64_t order_hash(const ow_request *req, size_t i)
{
    return ow_order_hash(req->user_id, req->orders[i].external_order_no, req->orders[i].ext_len);
}

int ow_admit_init(ow_admit *a, size_t requests, size_t orders, size_t max_orders)
{
    memset(a, 0, sizeof(*a));
    a->max_orders = max_orders;
    if (ow_htab_init(&a->keys, requests) != OW_OK || ow_htab_init(&a->orders, orders) != OW_OK)
        return OW_ENOMEM;
    return OW_OK;
}

void ow_admit_free(ow_admit *a)
{
    ow_htab_free(&a->keys);
    ow_htab_free(&a->orders);
}

void ow_admit_reset(ow_admit *a, int db_up)
{
    ow_htab_clear(&a->keys);
    ow_htab_clear(&a->orders);
    a->taken = 0;
    a->taken_orders = 0;
    a->db_up = db_up;
    a->db_wait = 0;
}

int ow_admit_key_held(const ow_admit *a, uint64_t key_hash)
{
    return ow_htab_has(&a->keys, key_hash);
}

int ow_admit_orders_fit(const ow_admit *a, const ow_request *req)
{
    for (size_t i = 0; i < req->n_orders; i++) {
        if (ow_htab_has(&a->orders, order_hash(req, i)))
            return 0;
    }
    return a->taken == 0 || a->taken_orders + req->n_orders <= a->max_orders;
}

int ow_admit_hold(ow_admit *a, uint64_t key_hash, const ow_request *req, ow_admit_take take)
{
    if (!ow_htab_has(&a->keys, key_hash) && ow_htab_put(&a->keys, key_hash, 0) != OW_OK)
        return OW_ENOMEM;
    for (size_t i = 0; req != NULL && i < req->n_orders; i++) {
        uint64_t h = order_hash(req, i);

        if (!ow_htab_has(&a->orders, h) && ow_htab_put(&a->orders, h, 0) != OW_OK)
            return OW_ENOMEM;
    }
    a->taken += take != OW_ADMIT_LEFT;
    if (take == OW_ADMIT_COUNTED && req != NULL)
        a->taken_orders += req->n_orders;
    return OW_OK;
}

ow_admit_take ow_admit_consider(ow_admit *a, ow_cache *cache, const ow_admit_ask *q, int64_t now_ms,
                                ow_result_code *code, ow_buf *body)
{
    if (ow_admit_key_held(a, q->key_hash))
        return OW_ADMIT_LEFT;
    if (q->req == NULL)
        return OW_ADMIT_COUNTED;
    if (cache != NULL &&
        ow_cache_get(cache, q->req->user_id, q->key, q->key_len, q->digest, now_ms, code, body))
        return OW_ADMIT_FREE;
    if (!a->db_up) {
        a->db_wait = 1;
        return OW_ADMIT_LEFT;
    }
    return ow_admit_orders_fit(a, q->req) ? OW_ADMIT_COUNTED : OW_ADMIT_LEFT;
}
