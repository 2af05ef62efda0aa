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
         "With mysql.shards set, it first reads the shard map every shard recorded\n"
         "(waiting for shards that do not answer yet) and refuses to start when it\n"
         "differs from the configured list: reordered, shorter or longer.\n"
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

    if (ow_cli_check_args(argc, argv, known, "run") != 0)
        return OW_EXIT_USAGE;
    code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    code = ow_cli_check_shard_maps(&cfg, stop);
    if (code != OW_EXIT_OK) {
        ow_config_cleanup(&cfg);
        return code;
    }
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
         "ow_schema_migrations. Safe to run again. With mysql.shards set, it does so on\n"
         "every shard, in list order, and records the configured shard map on each\n"
         "(mysql.shard_buckets, the number of shards, the shard's index): that is how a\n"
         "new map is adopted (docs/operations.md, \"Shards\"). The configured mysql.user needs\n"
         "CREATE and ALTER here; override it for this command only, e.g.\n"
         "  ORDER_WORKER_MYSQL_USER=admin order-worker migrate --config FILE");
}

/* Migrates one database; with mysql.shards, also records its map. */
static int migrate_one(const ow_config *cfg, unsigned shard)
{
    ow_error err;
    ow_idgen ids;
    ow_store *s = ow_cli_shard_store_new(cfg, shard, &ids);
    ow_shard_map m = ow_cli_shard_map(cfg, shard);
    int applied = 0;
    int rc = s != NULL ? OW_OK : OW_ENOMEM;

    ow_cli_shard_header(cfg, shard, "migrate");
    if (rc == OW_OK)
        rc = ow_store_migrate(s, stdout, &applied, &err);
    if (rc == OW_OK && cfg->shards.n > 0)
        rc = ow_store_shard_map_write(s, &m, &err);
    if (rc != OW_OK) {
        fprintf(stderr, "order-worker migrate: %s\n", s == NULL ? "out of memory" : err.msg);
    } else if (cfg->shards.n > 0) {
        printf("migrate: %d migration(s) applied to %s; map recorded: %u buckets over %u "
               "shards, this is shard %u\n",
               applied, cfg->shards.addr[shard].database, m.bucket_count, m.shard_count,
               m.shard_index);
    } else {
        printf("migrate: %d migration(s) applied to %s\n", applied, cfg->mysql_database);
    }
    ow_store_free(&s);
    return rc == OW_OK ? OW_EXIT_OK : OW_EXIT_FAILURE;
}

int ow_cmd_migrate(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", NULL};
    ow_config cfg;
    int code;

    (void)stop;
    if (ow_cli_check_args(argc, argv, known, "migrate") != 0)
        return OW_EXIT_USAGE;
    code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    /* Every shard, even after one failed: each reports on its own line. */
    for (unsigned i = 0; i < ow_cli_shards(&cfg); i++) {
        if (migrate_one(&cfg, i) != OW_EXIT_OK)
            code = OW_EXIT_FAILURE;
    }
    ow_config_cleanup(&cfg);
    return code;
}
