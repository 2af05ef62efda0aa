/* order-worker migrate: the schema, and the shard map of each shard. */
#include <stdio.h>

#include "cli.h"
#include "ow/log.h"
#include "ow/store.h"

void ow_help_migrate(void)
{
    puts("usage: order-worker migrate --config FILE [--remap]\n"
         "\n"
         "Applies the schema migrations of sql/ (embedded in the binary) that the\n"
         "database has not seen yet, in order, and records them in\n"
         "ow_schema_migrations. Safe to run again. With mysql.shards set, it does so on\n"
         "every shard, in list order, and records the configured shard map on each\n"
         "shard that records none yet (mysql.shard_buckets, the number of shards, the\n"
         "shard's index). It never changes a recorded map: when a shard records another\n"
         "one (the list was reordered, shortened or lengthened) it migrates nothing,\n"
         "prints both maps and exits 2. Only --remap, which scripts/reshard.sh uses\n"
         "after it moved the rows, replaces shard i of N with shard i of 2N\n"
         "(docs/operations.md, \"Shards\"). The configured mysql.user needs\n"
         "CREATE and ALTER here; override it for this command only, e.g.\n"
         "  ORDER_WORKER_MYSQL_USER=admin order-worker migrate --config FILE");
}

/* What the workers' connections will find of the server's settings
 * (ow/store_server.h), one line each. */
static void print_server(ow_store *s)
{
    ow_server_report r;
    ow_error err;

    if (ow_store_server_report_of(s, &r, &err) != OW_OK) {
        printf("migrate: server settings not read: %s\n", err.msg);
        return;
    }
    for (size_t i = 0; i < r.n; i++)
        printf("migrate: server: %s = %s: %s%s%s\n", r.f[i].setting, r.f[i].value,
               r.f[i].level == OW_SERVER_REFUSE ? "the worker refuses to start: " : "",
               r.f[i].level == OW_SERVER_WARN ? "warning: " : "", r.f[i].why);
}

/* Migrates one database; with mysql.shards, also records its map. */
static int migrate_one(const ow_config *cfg, unsigned shard, int remap)
{
    ow_error err;
    ow_idgen ids;
    ow_store_params p;
    ow_store *s;
    ow_shard_map m = ow_cli_shard_map(cfg, shard);
    int applied = 0;
    int rc;

    /* Migrate records the map: its connection does not check it. */
    ow_store_params_for_shard(cfg, shard, &p);
    p.map_check = OW_MAP_UNCHECKED;
    /* It makes the schema the checks compare, and prints the server's
     * settings instead of refusing them. */
    p.check_server = 0;
    ow_idgen_init(&ids, 0, ow_clock_wall_ms);
    s = ow_store_new(&p, &ids);
    rc = s != NULL ? OW_OK : OW_ENOMEM;
    ow_cli_shard_header(cfg, shard, "migrate");
    if (rc == OW_OK)
        rc = ow_store_migrate(s, stdout, &applied, &err);
    if (rc == OW_OK && cfg->shards.n > 0)
        rc = ow_store_shard_map_write(s, &m, remap, &err);
    if (rc == OW_OK)
        print_server(s);
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
    if (rc != OW_OK && rc != OW_ENOMEM && err.cls == OW_ERRCLASS_INVALID_INPUT)
        return OW_EXIT_USAGE;
    return rc == OW_OK ? OW_EXIT_OK : OW_EXIT_FAILURE;
}

int ow_cmd_migrate(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    static const char *const known[] = {"--config", "--remap!", NULL};
    int remap = ow_cli_flag(argc, argv, "--remap");
    ow_config cfg;
    int code, checked;

    (void)stop;
    code = ow_cli_begin(argc, argv, known, "migrate", &cfg);
    if (code != OW_EXIT_OK)
        return code;
    if (remap && cfg.shards.n == 0) {
        fprintf(stderr, "order-worker migrate: --remap needs mysql.shards\n");
        code = OW_EXIT_USAGE;
    } else if (cfg.shards.n > 0) {
        code = ow_cli_check_migrate_maps(&cfg, remap);
    }
    checked = code;
    /* Every shard, even after one failed: each reports on its own line. */
    for (unsigned i = 0; checked == OW_EXIT_OK && i < ow_cli_shards(&cfg); i++) {
        int one = migrate_one(&cfg, i, remap);

        if (one != OW_EXIT_OK && code != OW_EXIT_USAGE)
            code = one;
    }
    ow_config_cleanup(&cfg);
    return code;
}
