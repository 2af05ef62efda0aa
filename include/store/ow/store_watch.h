/*
 * Watching one database (a shard, or the only database) from a thread of
 * its own, so that no connection that serves messages or queries ever pays
 * for finding out that the server is gone or hangs.
 *
 * The thread pings the database about every second on a connection of its
 * own whose connect and read timeouts are mysql.connect_timeout_s. A ping
 * that fails (the server refuses, the connection is lost, or no answer
 * comes in time: a server that hangs) marks the database down, and every
 * store that uses the watch (ow_store_use_watch) has its call in progress
 * interrupted: its socket is shut down, the server rolls back what was
 * open, and a COMMIT whose answer is lost so is settled by the next
 * attempt, which reads what the database decided. While the database is
 * down those stores fail at once, without a network round trip. The first
 * ping that is answered marks it up again.
 *
 * A database given as the nodes of one cluster (a Galera cluster) has one
 * current node, which every store of the watch uses, so that writes do not
 * spread over nodes and conflict. The first round takes the first node of
 * the list that is ready. When the current node fails (lost, refusing, or
 * on Galera not ready: out of the Primary component, not Synced), the
 * watch takes the first other ready node in order, logs db_node, and
 * interrupts the calls still on the old node; the stores reconnect to the
 * new one. While on a later node it probes the earlier ones every few
 * seconds and returns to the first that is ready at two probes in a row;
 * that move interrupts nothing: each store moves at its next call. Only
 * when no node is ready is the database down.
 *
 * A failure that waiting cannot cure (bad credentials, a shard map that
 * disagrees with the configuration, a missing table) marks it refused; the
 * error says why.
 */
#ifndef OW_STORE_WATCH_H
#define OW_STORE_WATCH_H

#include <stdint.h>

#include "ow/error.h"
#include "ow/store.h"
#include "ow/store_state.h"

/* A watch of the database p describes, named name in logs and errors
 * ("shard 1 (127.0.0.1:3307/orders)"). Copies both. NULL when out of
 * memory. */
ow_store_watch *ow_store_watch_new(const ow_store_params *p, const char *name);
/* Starts the watching thread. */
int ow_store_watch_start(ow_store_watch *w, ow_error *err);
/* Stops the thread, waiting for it until deadline_ms (monotonic): a ping
 * blocked in a connect cannot be cut short, and a watch whose thread is
 * still running then is left to the process's exit by ow_store_watch_free. */
void ow_store_watch_stop(ow_store_watch *w, int64_t deadline_ms);
void ow_store_watch_free(ow_store_watch **w);

const char *ow_store_watch_name(const ow_store_watch *w);
/* The node every store of the watch uses now (borrowed), and how many
 * nodes its list has. */
const char *ow_store_watch_node(ow_store_watch *w);
unsigned ow_store_watch_nodes(const ow_store_watch *w);
/* The state, and in *why (may be NULL) the error of the last failed ping. */
ow_watch_state ow_store_watch_state(ow_store_watch *w, ow_error *why);
/* Waits until the first ping finished or deadline_ms passed; returns the
 * state then. */
ow_watch_state ow_store_watch_first(ow_store_watch *w, int64_t deadline_ms, ow_error *why);
/* Waits until the database is up, deadline_ms passes or *stop is set;
 * returns 1 when it is up. */
int ow_store_watch_wait_up(ow_store_watch *w, int64_t deadline_ms, const volatile int *stop);

#endif
