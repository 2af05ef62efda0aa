/*
 * The flags every stage of the pipeline shares (runstate.c): stop, failure
 * and the stop's deadline, and the step a stop has reached. Private to the
 * pipeline.
 */
#ifndef OW_RUNSTATE_H
#define OW_RUNSTATE_H

#include <pthread.h>
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
/* 1 once stopping and past the stop deadline, or after a fatal error. */
int ow_runstate_give_up(ow_runstate *rs);
/* Records the step a stop has reached (a static string). */
void ow_runstate_step(ow_runstate *rs, const char *step);

/* Starts the stop: deadline_ms (monotonic) bounds it. The process's
 * watchdog (main.c) reads it with ow_runstate_stop_status. */
void ow_runstate_begin_stop(ow_runstate *rs, int64_t deadline_ms);
/* The stop of the process's worker: its deadline (0 before a stop began)
 * and the step it is in. */
void ow_runstate_stop_status(int64_t *deadline_ms, const char **step);

#endif
