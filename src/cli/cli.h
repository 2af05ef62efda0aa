/* Subcommands of the order-worker binary. Each returns a process exit code. */
#ifndef OW_CLI_H
#define OW_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ow/config.h"
#include "ow/idgen.h"
#include "ow/store.h"

enum {
    OW_EXIT_OK = 0,
    OW_EXIT_FAILURE = 1, /* runtime failure (database, broker) */
    OW_EXIT_USAGE = 2,   /* bad arguments or configuration */
    OW_EXIT_NOT_FOUND = 3,
    OW_EXIT_FINDINGS = 4,        /* audit found violations */
    OW_EXIT_OUTPUT_TOO_LARGE = 5 /* send --wait: a notice stands in for the result */
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
/* A subcommand's start: refuses options not in known, then loads --config.
 * Returns OW_EXIT_OK with cfg loaded, or the exit code (printed). */
int ow_cli_begin(int argc, char **argv, const char *const *known, const char *cmd, ow_config *cfg);
/* Loads --config and checks every database's recorded shard map (see
 * ow_cli_check_shard_maps). Returns OW_EXIT_OK with cfg loaded, or the exit
 * code (printed) with nothing left to clean up. */
int ow_cli_config_with_maps(int argc, char **argv, const char *cmd, ow_config *cfg);
/* The value v of option name as an integer from lo to hi into *out; else
 * prints "order-worker CMD: NAME: must be an integer from LO to HI<what>,
 * got "V"" and returns OW_EXIT_USAGE. what (may be "") says more. */
int ow_cli_int_range(const char *cmd, const char *name, const char *v, int64_t lo, int64_t hi,
                     const char *what, int64_t *out);
/* Finds "--name VALUE" style options; returns the value or NULL. */
const char *ow_cli_opt(int argc, char **argv, const char *name);
int ow_cli_flag(int argc, char **argv, const char *name);
/* Rejects options not in the NULL-terminated list (flags end with '!',
 * e.g. "--dry-run!"). Prints the error. Returns 0 when all are known. */
int ow_cli_check_args(int argc, char **argv, const char *const *known, const char *cmd);
/* Like ow_cli_check_args, and also collects the arguments that are neither
 * options nor option values into pos (at most max, pos may be NULL when max
 * is 0; "-" counts as one).
 * Prints the error and returns -1 for an unknown option or too many
 * arguments; otherwise returns how many were found. */
int ow_cli_args(int argc, char **argv, const char *const *known, const char *cmd, const char **pos,
                int max);
/* The value of a required option; prints "--name is required" and returns
 * NULL when it is absent or empty. */
const char *ow_cli_required(int argc, char **argv, const char *name, const char *cmd);
/* The exit status of a failed store call: OW_EXIT_USAGE for what the
 * configuration or the server's settings must change (INVALID_INPUT: a
 * schema of another version, a setting the command cannot run against),
 * else OW_EXIT_FAILURE. */
int ow_cli_exit_for(const ow_error *err);

/* --user as a positive 64-bit integer; prints the error and returns -1. */
int ow_cli_user(int argc, char **argv, const char *cmd, int64_t *user);

/* Shards (src/cli/shards.c). Without mysql.shards there is one
 * "shard", the mysql.host database, and headers print nothing. */
#define OW_CLI_SHARD_NAME_MAX (OW_SHARD_HOST_MAX + OW_SHARD_DB_MAX + 64)
unsigned ow_cli_shards(const ow_config *cfg);
/* A store on shard `shard` for a subcommand's one connection; writes says
 * whether the command writes (purge), which the server checks consider. */
ow_store *ow_cli_shard_store_new(const ow_config *cfg, unsigned shard, ow_idgen *ids, int writes);
/* "shard 1 (host:port/database)" into buf. */
const char *ow_cli_shard_name(const ow_config *cfg, unsigned shard, char *buf, size_t cap);
/* Prints "CMD: shard N (...)" before a shard's part of a report (sharded only). */
void ow_cli_shard_header(const ow_config *cfg, unsigned shard, const char *cmd);
/* The map migrate records on a shard: mysql.shard_buckets, the number of
 * shards, its index. */
ow_shard_map ow_cli_shard_map(const ow_config *cfg, unsigned shard);
/* Before a subcommand uses its databases: every database's recorded map
 * (table ow_shard_map) must be the configured one. With mysql.shards each
 * shard must record its own place in the list; without, the database may
 * record none, or a map of one shard. One connection attempt each; a
 * database that does not answer is left to the command's connections,
 * which check the map whenever they connect. Prints both maps and returns
 * OW_EXIT_USAGE on a difference, OW_EXIT_FAILURE on an error that retrying
 * cannot fix, else OW_EXIT_OK. */
int ow_cli_check_shard_maps(const ow_config *cfg, const char *cmd);
/* migrate's check, every shard answering: a shard may record no map yet
 * or the configured one; with remap also the map of which the configured
 * one is the doubling (shard i of N as shard i of 2N). */
int ow_cli_check_migrate_maps(const ow_config *cfg, int remap);

int ow_cmd_run(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_migrate(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_lookup(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_purge(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_audit(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_send(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_config(int argc, char **argv, const volatile sig_atomic_t *stop);
int ow_cmd_serve(int argc, char **argv, const volatile sig_atomic_t *stop);
void ow_help_run(void);
void ow_help_migrate(void);
void ow_help_lookup(void);
void ow_help_purge(void);
void ow_help_audit(void);
void ow_help_send(void);
void ow_help_config(void);
void ow_help_serve(void);
/* The configuration key reference, as `order-worker --help` ends. */
void ow_help_config_keys(void);

#endif
