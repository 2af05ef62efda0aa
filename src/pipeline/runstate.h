/*
 * The flags every stage of the pipeline shares (runstate.c): stop, failure
 * and the stop's deadline, and the step a stop has reached. Private to the
 * pipeline.
 */
#ifndef OW_RUNSTATE_H
#define OW_RUNSTATE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ow/error.h"

/* What the stages share: stop and failure flags and the stop deadline. */
typedef struct {
    _Atomic int fatal;
    _Atomic int stopping;            /* shutdown: lanes abandon what is queued */
    volatile int stop_sleep;         /* wakes backoff sleeps at shutdown or on a fatal error */
    int64_t deadline_ms;             /* shutdown deadline (monotonic), set before stopping */
    _Atomic int db_ok;               /* every database answers (their watches say so) */
    _Atomic(const char *) stop_step; /* the step a stop is in, for stop_overrun */
    pthread_mutex_t first_mu;        /* guards first */
    ow_error first;                  /* the error that stopped the worker, if one did */
    /* The flag a stop signal sets, or NULL. */
    const volatile sig_atomic_t *stop;
} ow_runstate;

void ow_runstate_init(ow_runstate *rs);
void ow_runstate_cleanup(ow_runstate *rs);
/* Stops the worker after an error that retrying cannot fix; logs once. */
void ow_runstate_set_fatal(ow_runstate *rs, const char *why);
/* The same, keeping err as the reason the worker reports (its class says
 * whether the configuration is to blame: a shard map that disagrees). */
void ow_runstate_fail(ow_runstate *rs, const ow_error *err, const char *why);
/* The error that stopped the worker into *err; 0 when none was kept. */
int ow_runstate_first(ow_runstate *rs, ow_error *err);
/* 1 once past the stop's deadline (ow_runstate_deadline), or after a
 * fatal error. */
int ow_runstate_give_up(const ow_runstate *rs);
/* Records the step a stop has reached (a static string). */
void ow_runstate_step(ow_runstate *rs, const char *step);

/* Gives the stop its budget (shutdown.timeout_ms) and the flag a stop
 * signal sets (stop, may be NULL). From then on the stop's deadline is the
 * budget after the moment the stop was first asked for: the signal, seen
 * by the process's watchdog (ow_runstate_ask_stop) or by a wait of the
 * worker's, whichever comes first; or the start of a stop after a fatal
 * error. So a stop is bounded even while the consumer thread is still in
 * a call that has not noticed the signal. One worker per process. */
void ow_runstate_arm(ow_runstate *rs, const volatile sig_atomic_t *stop, int64_t budget_ms);
/* A stop was asked for: starts the stop's clock unless it runs already.
 * Any thread; does nothing before ow_runstate_arm. */
void ow_runstate_ask_stop(void);
/* The stop's deadline (monotonic ms), or 0 while no stop was asked for or
 * begun. Starts the clock when it finds the stop flag set. */
int64_t ow_runstate_deadline(const ow_runstate *rs);
/* The end of a wait of ms: ms from now, or the stop's deadline when a stop
 * was asked for and its deadline comes first. */
int64_t ow_runstate_until(const ow_runstate *rs, int64_t ms);
/* 1 once a stop was asked for or begun. */
int ow_runstate_stop_asked(const ow_runstate *rs);
/* What the stop keeps, after the wait for the lanes and the flush of
 * results, for committing and leaving the group: a quarter of its budget,
 * at most 2 s. */
int64_t ow_runstate_reserve_ms(void);
/* Starts the stop: its deadline is ow_runstate_deadline's, or the budget
 * from now. The process's watchdog (main.c) reads it with
 * ow_runstate_stop_status. */
void ow_runstate_begin_stop(ow_runstate *rs);
/* The stop of the process's worker: its deadline (0 before a stop began)
 * and the step it is in. */
void ow_runstate_stop_status(int64_t *deadline_ms, const char **step);

#endif
