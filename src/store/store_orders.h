/*
 * The orders' side of the deciding transaction (store_orders.c), called by
 * store_decide.c only: the locking read of the orders that already exist,
 * the decision of each item as if its key were new, and the insert of the
 * new orders. Private to the store.
 */
#ifndef OW_STORE_ORDERS_H
#define OW_STORE_ORDERS_H

#include "store_parts.h"

/* The items of one transaction part: items[first .. first + count), with
 * n_orders orders among them. */
typedef struct {
    ow_store *s;
    ow_store_item *items;
    size_t first;
    size_t count;
    size_t n_orders;
    size_t inserted; /* request rows the server reported inserted (store_decide.c) */
} ow_decide_part;

/* The response context of an item: its user, key and digest. */
void ow_store_item_ctx(const ow_store_item *it, ow_response_ctx *ctx);
/* Room in the store's scratch for n items: where each item's orders'
 * references start. Clears every item's decision. */
int ow_orders_prepare(ow_store *s, ow_store_item *items, size_t n, ow_error *err);
/* Step 1: locks the orders of the part that already exist (SELECT ... FOR
 * UPDATE) and keeps them for the plan. */
int ow_orders_lock(ow_decide_part *p, ow_error *err);
/* Step 2: decides each item as if its key were new (an identical order is
 * reused, a differing one is a conflict, a new one gets a new id), draws
 * its request id and builds its body. */
int ow_orders_plan(ow_decide_part *p, ow_error *err);
/* Step 5: inserts the new orders of the items that are ours and CREATED. */
int ow_orders_insert(ow_decide_part *p, ow_error *err);

#endif
