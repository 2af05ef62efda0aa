/* Watching one database from a thread of its own (ow/store_watch.h). */
#include "ow/store_watch.h"

#include <stdlib.h>
#include <string.h>

#include "ow/log.h"
#include "ow/util.h"
#include "store_gate.h"
#include "store_parts.h"

#define PING_INTERVAL_MS 1000
#define NAME_MAX_LEN 160

struct ow_store_watch {
    ow_db_gate gate;
    char name[NAME_MAX_LEN];
    ow_store *probe; /* the thread's own connection */
    ow_idgen ids;    /* unused by pings; ow_store_new wants one */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* stop, and the thread's exit */
    pthread_t thread;
    int started, stop, exited;
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
    if (w->probe == NULL)
        ow_store_watch_free(&w);
    return w;
}

const char *ow_store_watch_name(const ow_store_watch *w)
{
    return w->name;
}

void ow_store_use_watch(ow_store *s, ow_store_watch *w)
{
    if (ow_gate_add(&w->gate, &s->cancel_mu, &s->sock) == OW_OK) {
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

static void *watch_main(void *arg)
{
    ow_store_watch *w = arg;

    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        ow_error err;
        struct timespec ts;
        int rc;

        pthread_mutex_unlock(&w->mu);
        ow_error_clear(&err);
        rc = ow_store_ping(w->probe, &err);
        pthread_mutex_lock(&w->mu);
        if (w->stop)
            break;
        log_change(w, ow_gate_set(&w->gate, rc, &err), rc, &err);
        ow_deadline_after_ms(PING_INTERVAL_MS, &ts);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
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
    ow_store_interrupt(w->probe); /* a ping waiting for an answer */
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
