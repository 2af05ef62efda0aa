/* Watching one database from a thread of its own (ow/store_watch.h). */
#include "ow/store_watch.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "ow/util.h"
#include "store_gate.h"
#include "store_parts.h"

#define PING_INTERVAL_MS 1000
/* The shortest pause between two rounds when lost connections wake the
 * watch early. */
#define WAKE_MIN_MS 100
/* How often a watch on a later node of its list probes the earlier ones,
 * and how many probes in a row one must pass before the watch returns to
 * it: a node that has just rejoined its cluster is given a few seconds to
 * show that it stays. */
#define RETURN_PROBE_MS 3000
#define RETURN_PROBES 2
#define NAME_MAX_LEN 512
#define NO_NODE UINT_MAX

struct ow_store_watch {
    ow_db_gate gate;
    char name[NAME_MAX_LEN];
    ow_store *probe; /* the thread's connection to the current node */
    ow_store *scout; /* the thread's connection to an earlier node, one probe at a time */
    ow_idgen ids;    /* unused by pings; ow_store_new wants one */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* stop, and the thread's exit */
    pthread_t thread;
    int started, stop, exited;
    /* The thread's own. */
    unsigned current;       /* the node the gate names */
    int on_node;            /* current answered ready at the last round */
    int64_t next_return_ms; /* the next probe of the earlier nodes */
    unsigned return_node, return_count;
    int chosen; /* a node was found ready once */
};

ow_store_watch *ow_store_watch_new(const ow_store_params *p, const char *name)
{
    ow_store_watch *w = calloc(1, sizeof(*w));
    ow_store_params probe = *p;

    if (w == NULL)
        return NULL;
    ow_gate_init(&w->gate);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    snprintf(w->name, sizeof(w->name), "%s", name);
    /* A server that accepts the connection but never answers is found
     * within the connect timeout, not the longest lock wait. */
    probe.read_timeout_s = p->connect_timeout_s;
    ow_idgen_init(&w->ids, 0, ow_clock_wall_ms);
    w->probe = ow_store_new(&probe, &w->ids);
    w->scout = ow_store_new(&probe, &w->ids);
    w->return_node = NO_NODE;
    if (w->probe == NULL || w->scout == NULL)
        ow_store_watch_free(&w);
    return w;
}

const char *ow_store_watch_name(const ow_store_watch *w)
{
    return w->name;
}

const char *ow_store_watch_node(ow_store_watch *w)
{
    return w->probe->nodes[ow_gate_node(&w->gate)];
}

unsigned ow_store_watch_nodes(const ow_store_watch *w)
{
    return w->probe->n_nodes;
}

void ow_store_use_watch(ow_store *s, ow_store_watch *w)
{
    if (ow_gate_add(&w->gate, &s->cancel_mu, &s->sock, &s->node) == OW_OK) {
        s->gate = &w->gate;
        s->gate_name = w->name;
    }
}

static void log_change(const ow_store_watch *w, ow_watch_state was, int rc, const ow_error *err)
{
    ow_watch_state now = rc == OW_OK                         ? OW_WATCH_UP
                         : err->cls == OW_ERRCLASS_RETRIABLE ? OW_WATCH_DOWN
                                                             : OW_WATCH_REFUSED;

    if (now == was)
        return;
    if (now == OW_WATCH_UP && was != OW_WATCH_UNKNOWN)
        OW_LOG(OW_LOG_INFO, "database_up", OW_F_STR("database", w->name));
    else if (now != OW_WATCH_UP)
        OW_LOG(now == OW_WATCH_DOWN ? OW_LOG_WARN : OW_LOG_ERROR,
               now == OW_WATCH_DOWN ? "database_down" : "database_refused",
               OW_F_STR("database", w->name), OW_F_INT("code", err->code),
               OW_F_STR("error", err->msg));
}

/* Makes node the current one, for the gate and in the log. */
static void switch_to(ow_store_watch *w, unsigned node, int lost, const char *why)
{
    unsigned from = w->current;

    w->current = node;
    w->return_node = NO_NODE;
    w->return_count = 0;
    w->next_return_ms = ow_clock_mono_ms() + RETURN_PROBE_MS;
    ow_gate_set_node(&w->gate, node, lost);
    if (w->probe->n_nodes > 1)
        OW_LOG(lost ? OW_LOG_WARN : OW_LOG_INFO, "db_node", OW_F_STR("database", w->name),
               OW_F_STR("node", w->probe->nodes[node]), OW_F_INT("index", node),
               OW_F_STR("from", w->probe->nodes[from]), OW_F_STR("reason", why));
}

/* The current node, on the probe's connection (made anew if it is on
 * another node or was lost): ready, or the error. */
static int check_current(ow_store_watch *w, ow_error *err)
{
    if (ow_store_connected(w->probe) && w->probe->node == w->current)
        return ow_store_node_ready(w->probe, err);
    return ow_store_connect_node(w->probe, w->current, err);
}

/* The first node in order, other than skip, that connects and is ready,
 * with the probe connected to it; NO_NODE when none is (err: the first
 * node's failure) or one refuses what another would refuse too (err). */
static unsigned find_node(ow_store_watch *w, unsigned skip, ow_error *err)
{
    ow_error e;
    int first = 1;

    for (unsigned i = 0; i < w->probe->n_nodes; i++) {
        if (i == skip)
            continue;
        if (ow_store_connect_node(w->probe, i, &e) == OW_OK)
            return i;
        if (first || e.cls != OW_ERRCLASS_RETRIABLE)
            *err = e;
        first = 0;
        if (e.cls != OW_ERRCLASS_RETRIABLE)
            break;
    }
    return NO_NODE;
}

/* On a later node of the list: every RETURN_PROBE_MS, the first earlier
 * node that is ready; after RETURN_PROBES such probes in a row of the same
 * node, the watch returns to it. */
static void probe_earlier(ow_store_watch *w)
{
    unsigned found = NO_NODE;
    ow_error e;

    if (w->current == 0 || ow_clock_mono_ms() < w->next_return_ms)
        return;
    w->next_return_ms = ow_clock_mono_ms() + RETURN_PROBE_MS;
    for (unsigned i = 0; i < w->current && found == NO_NODE; i++) {
        if (ow_store_connect_node(w->scout, i, &e) == OW_OK)
            found = i;
        ow_store_disconnect(w->scout);
    }
    w->return_count = found != NO_NODE && found == w->return_node ? w->return_count + 1 : 1;
    w->return_node = found;
    if (found != NO_NODE && w->return_count >= RETURN_PROBES)
        switch_to(w, found, 0, "an earlier node of the list is ready again");
}

static int stopping(ow_store_watch *w)
{
    int stop;

    pthread_mutex_lock(&w->mu);
    stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    return stop;
}

/* One round of the watch: the current node, and when it fails (or none
 * answered ready at the last round) the first ready node in order; then
 * the gate learns the outcome. A stop leaves the gate as it is: a check
 * that the stop interrupted says nothing about the database. */
static void watch_round(ow_store_watch *w)
{
    ow_error err, lost_err;
    unsigned lost = NO_NODE, node;
    int rc = OW_OK;

    ow_error_clear(&err);
    if (w->on_node) {
        rc = check_current(w, &err);
        if (rc == OW_OK)
            probe_earlier(w);
        lost = w->current;
        lost_err = err;
    }
    if (!w->on_node || (rc != OW_OK && err.cls == OW_ERRCLASS_RETRIABLE)) {
        node = find_node(w, rc != OW_OK ? lost : NO_NODE, &err);
        rc = node != NO_NODE ? OW_OK : err.cls == OW_ERRCLASS_RETRIABLE ? OW_ERETRY : OW_EFATAL;
        if (stopping(w))
            return;
        if (rc == OW_OK && (node != w->current || !w->chosen))
            switch_to(w, node, w->on_node, w->on_node ? lost_err.msg : "the first ready node");
        w->chosen |= rc == OW_OK;
    }
    if (stopping(w))
        return;
    w->on_node = rc == OW_OK;
    log_change(w, ow_gate_set(&w->gate, rc, &err), rc, &err);
}

static void *watch_main(void *arg)
{
    ow_store_watch *w = arg;

    while (!stopping(w)) {
        int64_t start = ow_clock_mono_ms();

        watch_round(w);
        ow_gate_nap(&w->gate, start + PING_INTERVAL_MS, ow_clock_mono_ms() + WAKE_MIN_MS);
    }
    pthread_mutex_lock(&w->mu);
    w->exited = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int ow_store_watch_start(ow_store_watch *w, ow_error *err)
{
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "cannot start the watch of %s", w->name);
    w->started = 1;
    return OW_OK;
}

void ow_store_watch_stop(ow_store_watch *w, int64_t deadline_ms)
{
    int exited;

    if (w == NULL || !w->started)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    ow_gate_wake(&w->gate);       /* the pause between rounds */
    ow_store_interrupt(w->probe); /* a ping waiting for an answer */
    ow_store_interrupt(w->scout);
    pthread_mutex_lock(&w->mu);
    while (!w->exited && ow_clock_mono_ms() < deadline_ms) {
        struct timespec ts;

        ow_deadline_after_ms(deadline_ms - ow_clock_mono_ms(), &ts);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    exited = w->exited;
    pthread_mutex_unlock(&w->mu);
    if (exited) {
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
}

void ow_store_watch_free(ow_store_watch **wp)
{
    ow_store_watch *w = wp != NULL ? *wp : NULL;

    if (w == NULL)
        return;
    *wp = NULL;
    /* Still in a connect that the stop could not cut short: the thread
     * owns the watch until the process exits. */
    if (w->started)
        return;
    ow_store_free(&w->probe);
    ow_store_free(&w->scout);
    ow_gate_cleanup(&w->gate);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

ow_watch_state ow_store_watch_state(ow_store_watch *w, ow_error *why)
{
    return ow_gate_state(&w->gate, why);
}

ow_watch_state ow_store_watch_first(ow_store_watch *w, int64_t deadline_ms, ow_error *why)
{
    ow_gate_wait_known(&w->gate, deadline_ms);
    return ow_gate_state(&w->gate, why);
}

int ow_store_watch_wait_up(ow_store_watch *w, int64_t deadline_ms, const volatile int *stop)
{
    return ow_gate_wait_up(&w->gate, deadline_ms, stop);
}
