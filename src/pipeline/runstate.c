/* The flags every pipeline stage shares (runstate.h). */
#include <string.h>

#include "ow/log.h"
#include "ow/util.h"
#include "runstate.h"

/* The stop as the process's watchdog sees it: one worker per process.
 * The budget is -1 until a worker arms it. */
static _Atomic int64_t stop_deadline_ms;
static _Atomic int64_t stop_budget_ms = -1;
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

/* Starts the stop's clock at now unless it runs; returns the deadline (0
 * before a worker armed the budget). */
static int64_t start_clock(int64_t now_ms)
{
    int64_t budget = atomic_load(&stop_budget_ms);
    int64_t none = 0;

    if (budget >= 0)
        atomic_compare_exchange_strong(&stop_deadline_ms, &none, now_ms + budget);
    return atomic_load(&stop_deadline_ms);
}

void ow_runstate_arm(ow_runstate *rs, const volatile sig_atomic_t *stop, int64_t budget_ms)
{
    rs->stop = stop;
    atomic_store(&stop_deadline_ms, 0);
    atomic_store(&stop_budget_ms, budget_ms);
}

void ow_runstate_ask_stop(void)
{
    start_clock(ow_clock_mono_ms());
}

int64_t ow_runstate_deadline(const ow_runstate *rs)
{
    int64_t d = atomic_load(&stop_deadline_ms);

    if (d == 0 && rs->stop != NULL && *rs->stop)
        d = start_clock(ow_clock_mono_ms());
    return d;
}

int64_t ow_runstate_until(const ow_runstate *rs, int64_t ms)
{
    int64_t deadline = ow_clock_mono_ms() + ms;
    int64_t stop = ow_runstate_deadline(rs);

    if (stop > 0 && stop < deadline)
        deadline = stop;
    return deadline;
}

int ow_runstate_stop_asked(const ow_runstate *rs)
{
    return atomic_load(&rs->stopping) || ow_runstate_deadline(rs) > 0;
}

int64_t ow_runstate_reserve_ms(void)
{
    int64_t budget = atomic_load(&stop_budget_ms);
    int64_t r = budget > 0 ? budget / 4 : 0;

    return r < 2000 ? r : 2000;
}

int ow_runstate_give_up(const ow_runstate *rs)
{
    int64_t d;

    if (atomic_load(&rs->fatal))
        return 1;
    d = ow_runstate_deadline(rs);
    return d > 0 && ow_clock_mono_ms() > d;
}

void ow_runstate_step(ow_runstate *rs, const char *step)
{
    atomic_store(&rs->stop_step, step);
    atomic_store(&stop_step, step);
    OW_LOG(OW_LOG_DEBUG, "stop_step", OW_F_STR("step", step));
}

void ow_runstate_begin_stop(ow_runstate *rs)
{
    rs->deadline_ms = start_clock(ow_clock_mono_ms());
    atomic_store(&rs->stopping, 1);
}

void ow_runstate_stop_status(int64_t *deadline_ms, const char **step)
{
    *deadline_ms = atomic_load(&stop_deadline_ms);
    *step = atomic_load(&stop_step);
}
