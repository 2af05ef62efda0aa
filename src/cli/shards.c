/* Subcommands over user shards: a store per shard, their names
 * in reports, and the check of the recorded shard map before run. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ow/log.h"
#include "ow/nodes.h"

unsigned ow_cli_shards(const ow_config *cfg)
{
    return cfg->shards.n > 0 ? cfg->shards.n : 1;
}

ow_store *ow_cli_shard_store_new(const ow_config *cfg, unsigned shard, ow_idgen *ids, int writes)
{
    ow_store_params p;

    ow_store_params_for_shard(cfg, shard, &p);
    p.needs.connections = 1;
    p.needs.connections_key = "the command's one connection";
    p.needs.writes = writes;
    p.needs.decides = 0;
    ow_idgen_init(ids, 0, ow_clock_wall_ms);
    return ow_store_new(&p, ids);
}

/* An entry's nodes as mysql.shards spells them: '|' between them, an
 * IPv6 address in brackets. */
static void entry_nodes(const ow_shard_addr *a, char *buf, size_t cap)
{
    char node[OW_NODE_NAME_MAX + 1];
    size_t used = 0;

    buf[0] = '\0';
    for (unsigned i = 0; used < cap && ow_nodes_get(a->host, i, node, sizeof(node)) == OW_OK; i++) {
        int v6 = strchr(node, ':') != NULL;
        int n = snprintf(buf + used, cap - used, "%s%s%s%s", i > 0 ? "|" : "", v6 ? "[" : "", node,
                         v6 ? "]" : "");

        used += n > 0 ? (size_t)n : 0;
    }
}

const char *ow_cli_shard_name(const ow_config *cfg, unsigned shard, char *buf, size_t cap)
{
    const ow_shard_addr *a = &cfg->shards.addr[shard];
    char nodes[OW_SHARD_HOST_MAX + 1];

    entry_nodes(a, nodes, sizeof(nodes));
    snprintf(buf, cap, "shard %u (%s:%u/%s)", shard, nodes, a->port, a->database);
    return buf;
}

void ow_cli_shard_header(const ow_config *cfg, unsigned shard, const char *cmd)
{
    char name[OW_CLI_SHARD_NAME_MAX];

    if (cfg->shards.n > 0)
        printf("%s%s: %s\n", shard > 0 ? "\n" : "", cmd,
               ow_cli_shard_name(cfg, shard, name, sizeof(name)));
}

ow_shard_map ow_cli_shard_map(const ow_config *cfg, unsigned shard)
{
    ow_shard_map m;

    m.bucket_count = (uint32_t)cfg->mysql_shard_buckets;
    m.shard_count = cfg->shards.n;
    m.shard_index = shard;
    return m;
}

/* --- Every subcommand: the recorded map must be the configured one --------- */

typedef struct {
    int state; /* READ_FOUND, READ_NONE, READ_UNREACHABLE */
    ow_shard_map m;
    char why[256]; /* READ_UNREACHABLE */
} recorded;

enum { READ_FOUND, READ_NONE, READ_UNREACHABLE };

/* Reads database i's recorded map with one connection attempt; a fatal
 * error (a wrong password, say) is returned, an unreachable database is
 * noted in r. */
static int read_one(const ow_config *cfg, unsigned i, recorded *r, ow_error *err)
{
    ow_idgen ids;
    ow_store_params p;
    ow_store *s;
    int rc;

    ow_store_params_for_shard(cfg, i, &p);
    p.map_check = OW_MAP_UNCHECKED; /* we read it to compare it ourselves */
    p.check_server = 0;             /* the command's own connections check the server */
    ow_idgen_init(&ids, 0, ow_clock_wall_ms);
    s = ow_store_new(&p, &ids);
    if (s == NULL)
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "out of memory");
    rc = ow_store_shard_map_read(s, &r->m, err);
    ow_store_free(&s);
    r->state = rc == OW_OK ? READ_FOUND : READ_NONE;
    if (rc == OW_OK || rc == OW_ENOTFOUND)
        return OW_OK;
    if (err->cls != OW_ERRCLASS_RETRIABLE)
        return rc;
    r->state = READ_UNREACHABLE;
    snprintf(r->why, sizeof(r->why), "%s", err->msg);
    return OW_OK;
}

static void print_maps(const ow_config *cfg, const recorded *rec)
{
    char name[OW_CLI_SHARD_NAME_MAX];

    if (cfg->shards.n > 0)
        fprintf(stderr, "  configured map (mysql.shards): %lld buckets over %u shards\n",
                (long long)cfg->mysql_shard_buckets, cfg->shards.n);
    else
        fprintf(stderr, "  configured map (mysql.shards): empty, one database holds every user\n");
    for (unsigned i = 0; i < cfg->shards.n; i++)
        fprintf(stderr, "    %s\n", ow_cli_shard_name(cfg, i, name, sizeof(name)));
    fprintf(stderr, "  recorded map (table ow_shard_map of each database):\n");
    for (unsigned i = 0; i < ow_cli_shards(cfg); i++) {
        if (cfg->shards.n > 0)
            ow_cli_shard_name(cfg, i, name, sizeof(name));
        else
            snprintf(name, sizeof(name), "%s:%lld/%s", cfg->mysql_host, (long long)cfg->mysql_port,
                     cfg->mysql_database);
        if (rec[i].state == READ_UNREACHABLE)
            fprintf(stderr, "    %s: not read (%s)\n", name, rec[i].why);
        else if (rec[i].state == READ_NONE)
            fprintf(stderr, "    %s: no map recorded (never migrated as a shard)\n", name);
        else
            fprintf(stderr, "    %s: %u buckets over %u shards, recorded as shard %u\n", name,
                    rec[i].m.bucket_count, rec[i].m.shard_count, rec[i].m.shard_index);
    }
}

/* 1 when database i may be used as the configuration says, as far as its
 * recorded map tells (an unreachable one tells nothing). */
static int agrees(const ow_config *cfg, unsigned i, const recorded *r)
{
    ow_shard_map want = ow_cli_shard_map(cfg, i);

    if (r->state == READ_UNREACHABLE)
        return 1;
    if (cfg->shards.n == 0)
        return r->state == READ_NONE || r->m.shard_count <= 1;
    return r->state == READ_FOUND && ow_shard_map_equal(&r->m, &want);
}

static const char *const map_refusal =
    "mysql.shards disagrees with the shard map the databases recorded; routing users by it "
    "could create their orders twice or answer \"no record\" for requests that exist. "
    "Restore the recorded list, or change the map on purpose as docs/operations.md "
    "(\"Shards\") describes";

int ow_cli_check_shard_maps(const ow_config *cfg, const char *cmd)
{
    recorded rec[OW_SHARD_MAX];
    int same = 1;

    for (unsigned i = 0; i < ow_cli_shards(cfg); i++) {
        ow_error err;

        if (read_one(cfg, i, &rec[i], &err) != OW_OK) {
            fprintf(stderr, "order-worker %s: %s\n", cmd, err.msg);
            return OW_EXIT_FAILURE;
        }
        same &= agrees(cfg, i, &rec[i]);
    }
    if (!same) {
        fprintf(stderr, "order-worker %s: %s.\n", cmd, map_refusal);
        print_maps(cfg, rec);
        return OW_EXIT_USAGE;
    }
    return OW_EXIT_OK;
}

/* A recorded map that migrate --remap may replace: shard i of N becoming
 * shard i of 2N over the same buckets (docs/operations.md, "Adding
 * shards"), which moves no user that scripts/reshard.sh did not move. */
static int doubling(const ow_config *cfg, unsigned i, const recorded *r)
{
    return r->state == READ_FOUND && r->m.bucket_count == (uint32_t)cfg->mysql_shard_buckets &&
           2 * r->m.shard_count == cfg->shards.n && r->m.shard_index == i;
}

int ow_cli_check_migrate_maps(const ow_config *cfg, int remap)
{
    recorded rec[OW_SHARD_MAX];
    int ok = 1;

    for (unsigned i = 0; i < cfg->shards.n; i++) {
        ow_error err;

        if (read_one(cfg, i, &rec[i], &err) != OW_OK) {
            fprintf(stderr, "order-worker migrate: %s\n", err.msg);
            return OW_EXIT_FAILURE;
        }
        if (rec[i].state == READ_UNREACHABLE) {
            fprintf(stderr, "order-worker migrate: cannot read the shard map of every shard:\n");
            print_maps(cfg, rec);
            return OW_EXIT_FAILURE;
        }
        ok &= rec[i].state == READ_NONE || agrees(cfg, i, &rec[i]) ||
              (remap && doubling(cfg, i, &rec[i]));
    }
    if (ok)
        return OW_EXIT_OK;
    fprintf(stderr,
            "order-worker migrate: %s; migrate never changes a recorded map (only "
            "scripts/reshard.sh does, with --remap, for a doubling). Nothing was migrated.\n",
            map_refusal);
    print_maps(cfg, rec);
    return OW_EXIT_USAGE;
}

int ow_cli_config_with_maps(int argc, char **argv, const char *cmd, ow_config *cfg)
{
    int code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), cfg);

    if (code != OW_EXIT_OK)
        return code;
    code = ow_cli_check_shard_maps(cfg, cmd);
    if (code != OW_EXIT_OK)
        ow_config_cleanup(cfg);
    return code;
}
