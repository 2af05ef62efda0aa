/* order-worker run. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
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
         "It first reads the shard map each database recorded (`migrate` records it)\n"
         "and refuses to start when it differs from mysql.shards: reordered, shorter,\n"
         "longer, or a shard's database used unsharded. A database that does not\n"
         "answer yet is checked whenever it does, before anything is decided there.\n"
         "\n"
         "Exit status: 0 after a clean stop, 1 after a fatal error (a supervisor should\n"
         "restart it), 2 for a configuration error or a shard map that disagrees.\n"
         "\n"
         "Configuration keys: order-worker config --help");
}

int ow_cmd_run(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    ow_config cfg;
    ow_error err;
    int code;

    code = ow_cli_begin(argc, argv, known, "run", &cfg);
    if (code != OW_EXIT_OK)
        return code;
    /* The worker checks each database's shard map as it starts (its
     * /healthz answers meanwhile); a refusal prints both maps here. */
    if (ow_worker_run(&cfg, stop, &err) != OW_OK) {
        fprintf(stderr, "order-worker: %s\n", err.msg);
        code = err.cls == OW_ERRCLASS_INVALID_INPUT ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
        if (code == OW_EXIT_USAGE && strncmp(err.msg, "shard map:", 10) == 0)
            ow_cli_check_shard_maps(&cfg, "run");
    }
    ow_config_cleanup(&cfg);
    return code;
}
