/*
 * The worker: consumes order batches, decides them in lanes, publishes each
 * result before the message's offset may be committed.
 *
 *   consumer thread ──dispatch by key──▶ lane 1..N (own DB connection)
 *        ▲  rebalance, backpressure          │ decide micro-batch, produce
 *        │                                   ▼
 *   offsets_store ◀── delivery reports ── producer (idempotent, acks=all)
 *
 * See docs/architecture.md.
 */
#ifndef OW_WORKER_H
#define OW_WORKER_H

#include <signal.h>
#include <stdint.h>

#include "ow/config.h"
#include "ow/error.h"

/* Runs until *stop becomes non-zero (then shuts down cleanly and returns 0)
 * or a fatal error (returns a negative code with err filled). */
int ow_worker_run(const ow_config *cfg, const volatile sig_atomic_t *stop, ow_error *err);

/* The worker's stop, for the process's watchdog: its deadline (monotonic
 * ms, 0 before a stop was asked for or began) and the step it is in (a
 * static string, NULL before the first). Every wait of a stop is bounded
 * by the deadline. */
void ow_worker_stop_status(int64_t *deadline_ms, const char **step);
/* For the process's watchdog, which calls it when it sees the stop
 * signal: the stop's deadline counts from now (shutdown.timeout_ms after
 * it), even while the worker's consumer thread is still in a call that
 * has not noticed the signal yet. Any thread; idempotent. */
void ow_worker_stop_asked(void);

#endif
