/* The kit's process helpers: starting the built binary with an environment
 * of its own and waiting for it. No Kafka, so that a store-only test can
 * run the binary without linking librdkafka. */
#ifndef OW_KIT_PROC_H
#define OW_KIT_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* The parent's environment for a child: its variables, except those env
 * sets, then env's "NAME=value" entries. env holds n_env entries or ends
 * earlier at a NULL (SIZE_MAX: a NULL-terminated list). The array is
 * allocated (free() it); the strings are borrowed. Build it before fork():
 * after fork, a child of a multi-threaded parent (librdkafka threads) may
 * only call async-signal-safe functions, so it must not allocate. NULL when
 * memory runs out. */
char **kit_env_merge(const char *const env[], size_t n_env);
/* Starts argv with extra environment ("NAME=value", NULL-terminated);
 * stderr goes to log_path (appended) when not NULL. The child gets SIGKILL
 * when the calling thread ends (PR_SET_PDEATHSIG). Returns the pid or -1. */
pid_t kit_spawn(char *const argv[], char *const env[], const char *log_path);
/* Waits up to timeout_ms; returns the exit status (or 128+signal), -1 on timeout. */
int kit_wait(pid_t pid, int timeout_ms);

#endif
