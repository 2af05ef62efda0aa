/* The gate of one database (store_gate.h). */
#include "store_gate.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ow/util.h"

void ow_gate_init(ow_db_gate *g)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
}

void ow_gate_cleanup(ow_db_gate *g)
{
    free(g->users);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

int ow_gate_add(ow_db_gate *g, pthread_mutex_t *mu, const int *sock, const unsigned *node)
{
    int rc = OW_OK;

    pthread_mutex_lock(&g->mu);
    if (g->n_users == g->cap_users) {
        size_t cap = g->cap_users != 0 ? 2 * g->cap_users : 8;
        ow_gate_user *u = realloc(g->users, cap * sizeof(*u));

        if (u == NULL) {
            rc = OW_ENOMEM;
        } else {
            g->users = u;
            g->cap_users = cap;
        }
    }
    if (rc == OW_OK)
        g->users[g->n_users++] = (ow_gate_user){mu, sock, node};
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void ow_gate_remove(ow_db_gate *g, const int *sock)
{
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->n_users; i++) {
        if (g->users[i].sock == sock) {
            g->users[i] = g->users[--g->n_users];
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

int ow_gate_check(ow_db_gate *g, const char *name, unsigned node, ow_error *err)
{
    int rc = OW_OK;

    pthread_mutex_lock(&g->mu);
    if (g->state == OW_WATCH_DOWN)
        rc = ow_error_set(err, OW_ERRCLASS_RETRIABLE, g->why.code, "%s is not answering: %s", name,
                          g->why.msg);
    else if (g->state == OW_WATCH_REFUSED)
        rc = ow_error_set(err, g->why.cls, g->why.code, "%s", g->why.msg);
    else if (node != g->node)
        rc = ow_error_set(err, OW_ERRCLASS_RETRIABLE, 0,
                          "%s moved to another node of its cluster while connecting", name);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

unsigned ow_gate_node(ow_db_gate *g)
{
    unsigned node;

    pthread_mutex_lock(&g->mu);
    node = g->node;
    pthread_mutex_unlock(&g->mu);
    return node;
}

/* Shuts down the sockets of the users on a node other than keep (all of
 * them when keep is UINT_MAX), each under its own mutex; g->mu held. */
static void interrupt_others(ow_db_gate *g, unsigned keep)
{
    for (size_t i = 0; i < g->n_users; i++) {
        pthread_mutex_lock(g->users[i].mu);
        if (*g->users[i].sock >= 0 && *g->users[i].node != keep)
            shutdown(*g->users[i].sock, SHUT_RDWR);
        pthread_mutex_unlock(g->users[i].mu);
    }
}

void ow_gate_set_node(ow_db_gate *g, unsigned node, int interrupt)
{
    pthread_mutex_lock(&g->mu);
    g->node = node;
    if (interrupt)
        interrupt_others(g, node);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

ow_watch_state ow_gate_set(ow_db_gate *g, int rc, const ow_error *err)
{
    ow_watch_state was;

    pthread_mutex_lock(&g->mu);
    was = g->state;
    g->state = OW_WATCH_UP;
    if (rc != OW_OK) {
        g->state = err->cls == OW_ERRCLASS_RETRIABLE ? OW_WATCH_DOWN : OW_WATCH_REFUSED;
        g->why = *err;
    }
    if (g->state == OW_WATCH_DOWN && was != OW_WATCH_DOWN)
        interrupt_others(g, UINT_MAX);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return was;
}

ow_watch_state ow_gate_state(ow_db_gate *g, ow_error *why)
{
    ow_watch_state st;

    pthread_mutex_lock(&g->mu);
    st = g->state;
    if (why != NULL)
        *why = g->why;
    pthread_mutex_unlock(&g->mu);
    return st;
}

/* Waits on the gate's condition until deadline_ms, in slices so that a
 * stop flag is seen soon; g->mu held. */
static void wait_slice(ow_db_gate *g, int64_t deadline_ms)
{
    struct timespec ts;
    int64_t left = deadline_ms - ow_clock_mono_ms();

    ow_deadline_after_ms(left < 50 ? left : 50, &ts);
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
}

void ow_gate_wake(ow_db_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->wake = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void ow_gate_nap(ow_db_gate *g, int64_t deadline_ms, int64_t not_before_ms)
{
    pthread_mutex_lock(&g->mu);
    while (ow_clock_mono_ms() < deadline_ms && !(g->wake && ow_clock_mono_ms() >= not_before_ms))
        wait_slice(g, deadline_ms);
    g->wake = 0;
    pthread_mutex_unlock(&g->mu);
}

void ow_gate_wait_known(ow_db_gate *g, int64_t deadline_ms)
{
    pthread_mutex_lock(&g->mu);
    while (g->state == OW_WATCH_UNKNOWN && ow_clock_mono_ms() < deadline_ms)
        wait_slice(g, deadline_ms);
    pthread_mutex_unlock(&g->mu);
}

int ow_gate_wait_up(ow_db_gate *g, int64_t deadline_ms, const volatile int *stop)
{
    int up;

    pthread_mutex_lock(&g->mu);
    while (g->state != OW_WATCH_UP && ow_clock_mono_ms() < deadline_ms && (stop == NULL || !*stop))
        wait_slice(g, deadline_ms);
    up = g->state == OW_WATCH_UP;
    pthread_mutex_unlock(&g->mu);
    return up;
}
