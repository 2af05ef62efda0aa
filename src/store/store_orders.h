/*
 * The orders' side of the deciding transaction (store_orders.c), called by
 * store_decide.c only: every order inserted as if it were new, the orders
 * that already existed read and each item decided, and the orders of the
 * items that keep none taken back. Private to the store.
 */
#ifndef OW_STORE_ORDERS_H
#define OW_STORE_ORDERS_H

#include "store_parts.h"

/* What a step returns besides OW_OK and errors: a race that this
 * transaction cannot settle for the items together (the part is redone
 * one item at a time), and a whole transaction that the server rolled back
 * under the items (innodb_rollback_on_timeout). */
#define OW_STORE_FALLBACK 1
#define OW_STORE_RESTART 2

/* The items of one transaction part: items[first .. first + count), with
 * n_orders orders among them. */
typedef struct {
    ow_store *s;
    ow_store_item *items;
    size_t first;
    size_t count;
    size_t inserted; /* request rows the server reported inserted (store_decide.c) */
} ow_decide_part;

/* The response context of an item: its user, key and digest. */
void ow_store_item_ctx(const ow_store_item *it, ow_response_ctx *ctx);
/* Room in the store's scratch for n items: where each item's orders'
 * references start. Clears every item's decision. */
int ow_orders_prepare(ow_store *s, ow_store_item *items, size_t n, ow_error *err);
/* Step 1: draws each item's request id and a new id for each of its orders,
 * as if every order were new. */
int ow_orders_draw(ow_decide_part *p, ow_error *err);
/* Step 2: inserts every order of the part (INSERT IGNORE) and learns which
 * went in: an order that exists, or that a concurrent transaction created
 * while this one waited on its unique key, is skipped. */
int ow_orders_insert(ow_decide_part *p, ow_error *err);
/* Step 3: reads the orders that were skipped and decides each item: an
 * identical existing order is the item's, a differing one is a conflict;
 * builds its body. */
int ow_orders_settle(ow_decide_part *p, ow_error *err);
/* Step 6: deletes the orders this transaction inserted for items that
 * write none: a conflict, a record too large, a key recorded first. */
int ow_orders_undo(ow_decide_part *p, ow_error *err);

#endif
