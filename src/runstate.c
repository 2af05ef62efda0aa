/* The flags every pipeline stage shares (pipeline_internal.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ow/log.h"
#include "ow/util.h"
#include "runstate.h"

void ow_runstate_init(ow_runstate *rs)
{
    memset(rs, 0, sizeof(*rs));
    pthread_mutex_init(&rs->first_mu, NULL);
}

void ow_runstate_cleanup(ow_runstate *rs)
{
    pthread_mutex_destroy(&rs->first_mu);
}

void ow_runstate_set_fatal(ow_runstate *rs, const char *why)
{
    if (atomic_exchange(&rs->fatal, 1) == 0)
        OW_LOG(OW_LOG_ERROR, "worker_fatal", OW_F_STR("reason", why));
    rs->stop_sleep = 1;
}

void ow_runstate_fail(ow_runstate *rs, const ow_error *err, const char *why)
{
    pthread_mutex_lock(&rs->first_mu);
    if (rs->first.cls == OW_ERRCLASS_NONE)
        rs->first = *err;
    pthread_mutex_unlock(&rs->first_mu);
    ow_runstate_set_fatal(rs, why);
}

int ow_runstate_first(ow_runstate *rs, ow_error *err)
{
    int kept;

    pthread_mutex_lock(&rs->first_mu);
    kept = rs->first.cls != OW_ERRCLASS_NONE;
    if (kept)
        *err = rs->first;
    pthread_mutex_unlock(&rs->first_mu);
    return kept;
}

int ow_runstate_give_up(ow_runstate *rs)
{
    return atomic_load(&rs->fatal) ||
           (atomic_load(&rs->stopping) && ow_clock_mono_ms() > rs->deadline_ms);
}

void ow_runstate_step(ow_runstate *rs, const char *step)
{
    atomic_store(&rs->stop_step, step);
    OW_LOG(OW_LOG_DEBUG, "stop_step", OW_F_STR("step", step));
}

static void *stopguard_main(void *arg)
{
    ow_stopguard *g = arg;
    int64_t end = g->rs->deadline_ms + OW_STOP_GRACE_MS;
    int done;

    pthread_mutex_lock(&g->mu);
    while (!g->done && ow_clock_mono_ms() < end) {
        struct timespec ts;

        ow_deadline_after_ms(end - ow_clock_mono_ms(), &ts);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    done = g->done;
    pthread_mutex_unlock(&g->mu);
    if (!done) {
        const char *step = atomic_load(&g->rs->stop_step);

        OW_LOG(OW_LOG_ERROR, "stop_overrun", OW_F_STR("step", step != NULL ? step : "unknown"),
               OW_F_INT("grace_ms", OW_STOP_GRACE_MS),
               OW_F_STR("effect", "exiting now; what was not committed is redelivered"));
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

void ow_stopguard_start(ow_stopguard *g, ow_runstate *rs)
{
    g->rs = rs;
    g->done = 0;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->started = pthread_create(&g->thread, NULL, stopguard_main, g) == 0;
}

void ow_stopguard_end(ow_stopguard *g)
{
    if (!g->started)
        return;
    pthread_mutex_lock(&g->mu);
    g->done = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    g->started = 0;
}
