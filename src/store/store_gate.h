/*
 * The gate of one database: what its watch last found (up, down, refused),
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
    const int *sock; /* -1: no connection */
} ow_gate_user;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* state changes */
    ow_watch_state state;
    ow_error why; /* the last failure */
    ow_gate_user *users;
    size_t n_users, cap_users;
} ow_db_gate;

void ow_gate_init(ow_db_gate *g);
void ow_gate_cleanup(ow_db_gate *g);
int ow_gate_add(ow_db_gate *g, pthread_mutex_t *mu, const int *sock);
void ow_gate_remove(ow_db_gate *g, const int *sock);
/* OW_OK when a connection may be made now: the database is up or not yet
 * known. While it is down, a RETRIABLE error naming name; while refused,
 * the refusal's error. */
int ow_gate_check(ow_db_gate *g, const char *name, ow_error *err);
/* Records a ping's outcome (rc, err); a database that stops answering
 * interrupts every user's socket. Returns the state before. */
ow_watch_state ow_gate_set(ow_db_gate *g, int rc, const ow_error *err);
ow_watch_state ow_gate_state(ow_db_gate *g, ow_error *why);
/* Waits while the state is unknown, until deadline_ms. */
void ow_gate_wait_known(ow_db_gate *g, int64_t deadline_ms);
/* Waits until up, deadline_ms or *stop; 1 when up. */
int ow_gate_wait_up(ow_db_gate *g, int64_t deadline_ms, const volatile int *stop);

#endif
