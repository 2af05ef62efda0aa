/*
 * Keys already recorded, answered by one consistent read (issue 12).
 * Private to the store (decide.c calls it; store_known.c implements it).
 */
#ifndef OW_STORE_KNOWN_INTERNAL_H
#define OW_STORE_KNOWN_INTERNAL_H

#include "store_internal.h"

/* Decides items[0..n) in one transaction (decide.c's decide_batch). */
typedef int (*ow_decide_fn)(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                            ow_error *err);

/* Reads the batch's (user_id, key) rows with one non-locking SELECT. An item
 * whose key is recorded gets its final answer from the committed row (the
 * stored body with the same digest, IDEMPOTENCY_KEY_REUSED with another):
 * rows are written once in their final state, so a committed row is the
 * database's decision. The other items go to decide, which stays the judge
 * of everything new. A batch of replays writes nothing, locks nothing and
 * ends with a read-only COMMIT, which writes no redo. Same contract as
 * ow_store_decide: on error no item has a decision. */
int ow_store_decide_known(ow_store *s, ow_store_item *items, size_t n, int one_at_a_time,
                          ow_decide_fn decide, ow_error *err);

#endif
