/*
 * The gate of one database: what its watch last found (up, down, refused),
 * the node of its cluster that every connection uses (the current node),
 * and the sockets of the connections that use it. Private to the store:
 * connections ask it before they connect (store.c) and publish their
 * socket to it; the watch (store_watch.c) sets its state, and interrupts
 * those sockets when the database goes down or hangs.
 */
#ifndef OW_STORE_GATE_H
#define OW_STORE_GATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"
#include "ow/store_state.h"

/* A connection's socket, guarded by the connection's own mutex: a socket
 * is shut down only while that mutex is held, so a descriptor that was
 * closed and reused is never touched. */
typedef struct {
    pthread_mutex_t *mu;
    const int *sock;      /* -1: no connection */
    const unsigned *node; /* the node that socket leads to */
} ow_gate_user;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* state changes */
    ow_watch_state state;
    ow_error why;  /* the last failure */
    unsigned node; /* the current node: an index into the database's node list */
    int wake;      /* a connection was lost: the watch checks now */
    ow_gate_user *users;
    size_t n_users, cap_users;
} ow_db_gate;

void ow_gate_init(ow_db_gate *g);
void ow_gate_cleanup(ow_db_gate *g);
int ow_gate_add(ow_db_gate *g, pthread_mutex_t *mu, const int *sock, const unsigned *node);
void ow_gate_remove(ow_db_gate *g, const int *sock);
/* OW_OK when a connection to node may be made or used now: the database
 * is up or not yet known, and node is the current node. While it is down,
 * a RETRIABLE error naming name; while refused, the refusal's error; on
 * another node, a RETRIABLE error. */
int ow_gate_check(ow_db_gate *g, const char *name, unsigned node, ow_error *err);
/* The current node. */
unsigned ow_gate_node(ow_db_gate *g);
/* Makes node the current node. With interrupt (the old node was lost),
 * the sockets of connections on any other node are shut down at once;
 * without (a return to an earlier node that answers again), each moves at
 * its next call, so that no transaction on a working node is cut. */
void ow_gate_set_node(ow_db_gate *g, unsigned node, int interrupt);
/* Records a ping's outcome (rc, err); a database that stops answering
 * interrupts every user's socket. Returns the state before. */
ow_watch_state ow_gate_set(ow_db_gate *g, int rc, const ow_error *err);
ow_watch_state ow_gate_state(ow_db_gate *g, ow_error *why);
/* From a connection that was just lost on the current node: the watch
 * runs its check now instead of at its next round. */
void ow_gate_wake(ow_db_gate *g);
/* The watch's pause between rounds: until deadline_ms, or a wake that
 * comes after not_before_ms (so that lost connections cannot make it
 * check without pause). */
void ow_gate_nap(ow_db_gate *g, int64_t deadline_ms, int64_t not_before_ms);
/* Waits while the state is unknown, until deadline_ms. */
void ow_gate_wait_known(ow_db_gate *g, int64_t deadline_ms);
/* Waits until up, deadline_ms or *stop; 1 when up. */
int ow_gate_wait_up(ow_db_gate *g, int64_t deadline_ms, const volatile int *stop);

#endif
