/* The flags every pipeline stage shares (runstate.h). */
#include <string.h>

#include "ow/log.h"
#include "ow/util.h"
#include "runstate.h"

/* The stop as the process's watchdog sees it: one worker per process. */
static _Atomic int64_t stop_deadline_ms;
static _Atomic(const char *) stop_step;

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
    atomic_store(&stop_step, step);
    OW_LOG(OW_LOG_DEBUG, "stop_step", OW_F_STR("step", step));
}

void ow_runstate_begin_stop(ow_runstate *rs, int64_t deadline_ms)
{
    rs->deadline_ms = deadline_ms;
    atomic_store(&stop_deadline_ms, deadline_ms);
    atomic_store(&rs->stopping, 1);
}

void ow_runstate_stop_status(int64_t *deadline_ms, const char **step)
{
    *deadline_ms = atomic_load(&stop_deadline_ms);
    *step = atomic_load(&stop_step);
}
