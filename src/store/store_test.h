/*
 * Switches of the store that only tests use: they reach behaviour that
 * production never asks for. Not part of the store's interface (ow/store.h).
 */
#ifndef OW_STORE_TEST_H
#define OW_STORE_TEST_H

#include "ow/store.h"

/* On by default: ow_store_decide answers recorded keys from one
 * non-locking read before it decides the rest. Off, every item goes
 * through the deciding transaction, which reaches the races that read
 * cannot see coming (a row committed between the read and the insert). */
void ow_store_test_known_read(ow_store *s, int enabled);

#endif
