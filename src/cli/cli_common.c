#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ow/kafka_conf.h"
#include "ow/log.h"

extern char **environ;

int ow_cli_load_config(const char *path, ow_config *cfg)
{
    ow_error err;
    int rc = ow_config_init(cfg, &err);

    if (rc == OW_OK && path != NULL)
        rc = ow_config_load_file(cfg, path, &err);
    if (rc == OW_OK)
        rc = ow_config_load_env(cfg, environ, &err);
    if (rc == OW_OK)
        rc = ow_config_finish(cfg, &err);
    if (rc == OW_OK)
        rc = ow_kafka_check_config(cfg, &err);
    if (rc != OW_OK) {
        fprintf(stderr, "order-worker: configuration error: %s\n", err.msg);
        ow_config_cleanup(cfg);
        return OW_EXIT_USAGE;
    }
    ow_log_set_level((int)cfg->log_level);
    return OW_EXIT_OK;
}

const char *ow_cli_opt(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0 && i + 1 < argc)
            return argv[i + 1];
        if (strncmp(argv[i], name, n) == 0 && argv[i][n] == '=')
            return argv[i] + n + 1;
    }
    return NULL;
}

int ow_cli_flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], name) == 0)
            return 1;
    }
    return 0;
}

/* Matches arg against the known options: returns the index of the option
 * in known and sets *takes_value, or returns -1. */
static int known_option(const char *arg, const char *const *known, int *takes_value)
{
    for (size_t k = 0; known[k] != NULL; k++) {
        size_t n = strlen(known[k]);
        int flag = n > 0 && known[k][n - 1] == '!';

        if (flag)
            n--;
        if (strncmp(arg, known[k], n) == 0 && (arg[n] == '\0' || (!flag && arg[n] == '='))) {
            *takes_value = !flag && arg[n] == '\0';
            return (int)k;
        }
    }
    return -1;
}

#define MAX_KNOWN 32

/* The value of the option at argv[i]: the next argument, unless it is
 * missing or itself one of the known options. A value may start with
 * dashes ("--key --abc" is a valid key). */
static int has_value(int argc, char **argv, int i, const char *const *known)
{
    int ignored = 0;

    return i + 1 < argc && known_option(argv[i + 1], known, &ignored) < 0;
}

/* Walks argv: options must be known, given once, and get their values; the
 * rest are positional: ignored when ignore_pos, else stored in pos (at
 * most max). */
static int walk_args(int argc, char **argv, const char *const *known, const char *cmd,
                     int ignore_pos, const char **pos, int max)
{
    char seen[MAX_KNOWN] = {0};
    int n = 0;

    for (int i = 1; i < argc; i++) {
        int takes_value = 0;
        int k;

        if (argv[i][0] != '-' || strcmp(argv[i], "-") == 0) {
            if (ignore_pos)
                continue;
            if (n >= max) {
                fprintf(stderr,
                        "order-worker %s: unexpected argument \"%s\" "
                        "(see order-worker %s --help)\n",
                        cmd, argv[i], cmd);
                return -1;
            }
            pos[n++] = argv[i];
            continue;
        }
        k = known_option(argv[i], known, &takes_value);
        if (k < 0) {
            fprintf(stderr, "order-worker %s: unknown option %s (see order-worker %s --help)\n",
                    cmd, argv[i], cmd);
            return -1;
        }
        /* Only the first of repeated options would count: refuse. */
        if (k < MAX_KNOWN && seen[k]++) {
            fprintf(stderr, "order-worker %s: %.*s given more than once\n", cmd,
                    (int)strcspn(known[k], "!"), known[k]);
            return -1;
        }
        if (takes_value) {
            if (!has_value(argc, argv, i, known)) {
                fprintf(stderr, "order-worker %s: %s needs a value\n", cmd, argv[i]);
                return -1;
            }
            i++;
        }
    }
    return n;
}

int ow_cli_check_args(int argc, char **argv, const char *const *known, const char *cmd)
{
    return walk_args(argc, argv, known, cmd, 0, NULL, 0) < 0 ? -1 : 0;
}

int ow_cli_begin(int argc, char **argv, const char *const *known, const char *cmd, ow_config *cfg)
{
    if (ow_cli_check_args(argc, argv, known, cmd) != 0)
        return OW_EXIT_USAGE;
    return ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), cfg);
}

int ow_cli_args(int argc, char **argv, const char *const *known, const char *cmd, const char **pos,
                int max)
{
    return walk_args(argc, argv, known, cmd, 0, pos, max);
}

const char *ow_cli_required(int argc, char **argv, const char *name, const char *cmd)
{
    const char *v = ow_cli_opt(argc, argv, name);

    if (v == NULL || *v == '\0') {
        fprintf(stderr, "order-worker %s: %s is required (see order-worker %s --help)\n", cmd, name,
                cmd);
        return NULL;
    }
    return v;
}

int ow_cli_user(int argc, char **argv, const char *cmd, int64_t *user)
{
    const char *v = ow_cli_required(argc, argv, "--user", cmd);

    if (v == NULL)
        return -1;
    if (ow_parse_int64(v, user) != OW_OK || *user <= 0) {
        fprintf(stderr, "order-worker %s: --user: must be a positive 64-bit integer, got \"%s\"\n",
                cmd, v);
        return -1;
    }
    return 0;
}

int ow_cli_int_range(const char *cmd, const char *name, const char *v, int64_t lo, int64_t hi,
                     const char *what, int64_t *out)
{
    if (ow_parse_int64(v, out) == OW_OK && *out >= lo && *out <= hi)
        return OW_EXIT_OK;
    fprintf(stderr, "order-worker %s: %s: must be an integer from %lld to %lld%s, got \"%s\"\n",
            cmd, name, (long long)lo, (long long)hi, what, v);
    return OW_EXIT_USAGE;
}

int ow_cli_exit_for(const ow_error *err)
{
    return err->cls == OW_ERRCLASS_INVALID_INPUT ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
}
