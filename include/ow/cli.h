/* Subcommands of the order-worker binary. Each returns a process exit code. */
#ifndef OW_CLI_H
#define OW_CLI_H

#include <signal.h>

#include "ow/config.h"

enum {
    OW_EXIT_OK = 0,
    OW_EXIT_FAILURE = 1, /* runtime failure (database, broker) */
    OW_EXIT_USAGE = 2,   /* bad arguments or configuration */
    OW_EXIT_NOT_FOUND = 3,
    OW_EXIT_FINDINGS = 4 /* audit found violations */
};

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv, const volatile sig_atomic_t *stop);
    void (*help)(void);
} ow_command;

extern const ow_command ow_commands[];

/* Shared by subcommands: --config FILE plus the environment. Prints the
 * error and returns OW_EXIT_USAGE on failure. */
int ow_cli_load_config(const char *path, ow_config *cfg);
/* Finds "--name VALUE" style options; returns the value or NULL. */
const char *ow_cli_opt(int argc, char **argv, const char *name);
int ow_cli_flag(int argc, char **argv, const char *name);
/* Rejects options not in the NULL-terminated list (flags end with '!',
 * e.g. "--dry-run!"). Prints the error. Returns 0 when all are known. */
int ow_cli_check_args(int argc, char **argv, const char *const *known, const char *cmd);

int ow_cmd_run(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_migrate(int argc, char **argv, const volatile sig_atomic_t *stop);
void ow_help_run(void);
void ow_help_migrate(void);

#endif
