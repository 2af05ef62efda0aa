/* order-worker run / migrate. */
#include <mysql.h>
#include <stdio.h>

#include "ow/cli.h"
#include "ow/log.h"
#include "ow/store.h"
#include "ow/worker.h"

void ow_help_run(void)
{
    puts("usage: order-worker run --config FILE\n"
         "\n"
         "Consumes order batches from topic.input, decides each in MySQL and publishes\n"
         "the result to topic.results (invalid messages also to topic.dlq) before the\n"
         "message's offset is committed. Runs until SIGTERM, SIGINT or SIGHUP (all three\n"
         "stop it the same way), then finishes or abandons what is in flight, flushes\n"
         "results, commits and leaves the group.\n"
         "\n"
         "Exit status: 0 after a clean stop, 1 after a fatal error (a supervisor should\n"
         "restart it), 2 for a configuration error.\n"
         "\n"
         "Configuration keys: order-worker config --help");
}

int ow_cmd_run(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    ow_config cfg;
    ow_error err;
    int code;

    if (ow_cli_check_args(argc, argv, known, "run") != 0)
        return OW_EXIT_USAGE;
    code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    if (ow_worker_run(&cfg, stop, &err) != OW_OK) {
        fprintf(stderr, "order-worker: %s\n", err.msg);
        code = err.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
    }
    ow_config_cleanup(&cfg);
    return code;
}

void ow_help_migrate(void)
{
    puts("usage: order-worker migrate --config FILE\n"
         "\n"
         "Applies the schema migrations of sql/ (embedded in the binary) that the\n"
         "database has not seen yet, in order, and records them in\n"
         "ow_schema_migrations. Safe to run again. The configured mysql.user needs\n"
         "CREATE and ALTER here; override it for this command only, e.g.\n"
         "  ORDER_WORKER_MYSQL_USER=admin order-worker migrate --config FILE");
}

int ow_cmd_migrate(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    ow_config cfg;
    ow_error err;
    ow_idgen ids;
    ow_store *s;
    int applied = 0;
    int code;

    (void)stop;
    if (ow_cli_check_args(argc, argv, known, "migrate") != 0)
        return OW_EXIT_USAGE;
    code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    s = ow_cli_store_new(&cfg, &ids);
    if (s == NULL || ow_store_migrate(s, stdout, &applied, &err) != OW_OK) {
        fprintf(stderr, "order-worker migrate: %s\n", s == NULL ? "out of memory" : err.msg);
        code = OW_EXIT_FAILURE;
    } else {
        printf("migrate: %d migration(s) applied to %s\n", applied, cfg.mysql_database);
    }
    ow_store_free(&s);
    ow_config_cleanup(&cfg);
    return code;
}
