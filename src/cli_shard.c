/* Subcommands over user shards (issue 14): a store per shard, their names
 * in reports, and the check of the recorded shard map before run. */
#include <stdio.h>
#include <string.h>

#include "ow/cli.h"
#include "ow/log.h"

unsigned ow_cli_shards(const ow_config *cfg)
{
    return cfg->shards.n > 0 ? cfg->shards.n : 1;
}

ow_store *ow_cli_shard_store_new(const ow_config *cfg, unsigned shard, ow_idgen *ids)
{
    ow_store_params p;

    ow_store_params_for_shard(cfg, shard, &p);
    ow_idgen_init(ids, 0, ow_clock_wall_ms);
    return ow_store_new(&p, ids);
}

const char *ow_cli_shard_name(const ow_config *cfg, unsigned shard, char *buf, size_t cap)
{
    const ow_shard_addr *a = &cfg->shards.addr[shard];
    int v6 = strchr(a->host, ':') != NULL;

    snprintf(buf, cap, "shard %u (%s%s%s:%u/%s)", shard, v6 ? "[" : "", a->host, v6 ? "]" : "",
             a->port, a->database);
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

/* --- run: the recorded map must be the configured one ---------------------- */

typedef struct {
    int found; /* 1 recorded, 0 none recorded */
    ow_shard_map m;
} recorded;

/* Reads shard i's map, retrying while the shard is unreachable (a worker
 * started before its databases waits for them, as an unsharded one does);
 * returns OW_OK, OW_EFATAL for an error retrying cannot fix, or OW_ERETRY
 * when stopped. */
static int read_one(const ow_config *cfg, unsigned i, recorded *r,
                    const volatile sig_atomic_t *stop)
{
    ow_idgen ids;
    ow_store *s = ow_cli_shard_store_new(cfg, i, &ids);
    uint64_t seed = (uint64_t)ow_clock_mono_us() | 1;
    char name[OW_CLI_SHARD_NAME_MAX];
    int rc = s != NULL ? OW_ERETRY : OW_EFATAL;

    ow_cli_shard_name(cfg, i, name, sizeof(name));
    for (unsigned attempt = 0; s != NULL && !*stop; attempt++) {
        ow_error err;

        rc = ow_store_shard_map_read(s, &r->m, &err);
        r->found = rc == OW_OK;
        if (rc == OW_OK || rc == OW_ENOTFOUND) {
            rc = OW_OK;
            break;
        }
        if (err.cls != OW_ERRCLASS_RETRIABLE) {
            fprintf(stderr, "order-worker: %s: cannot read the shard map: %s\n", name, err.msg);
            rc = OW_EFATAL;
            break;
        }
        OW_LOG(OW_LOG_WARN, "shard_map_wait", OW_F_INT("shard", i), OW_F_STR("error", err.msg));
        ow_sleep_ms(ow_backoff_ms(cfg->retry_backoff_ms, cfg->retry_backoff_max_ms, attempt, &seed),
                    stop);
        rc = OW_ERETRY;
    }
    ow_store_free(&s);
    return rc;
}

static void print_maps(const ow_config *cfg, const recorded *rec)
{
    char name[OW_CLI_SHARD_NAME_MAX];

    fprintf(stderr, "  configured map (mysql.shards): %lld buckets over %u shards\n",
            (long long)cfg->mysql_shard_buckets, cfg->shards.n);
    for (unsigned i = 0; i < cfg->shards.n; i++)
        fprintf(stderr, "    %s\n", ow_cli_shard_name(cfg, i, name, sizeof(name)));
    fprintf(stderr, "  recorded map (table ow_shard_map of each database):\n");
    for (unsigned i = 0; i < cfg->shards.n; i++) {
        ow_cli_shard_name(cfg, i, name, sizeof(name));
        if (!rec[i].found)
            fprintf(stderr, "    %s: no map recorded (never migrated as a shard)\n", name);
        else
            fprintf(stderr, "    %s: %u buckets over %u shards, recorded as shard %u\n", name,
                    rec[i].m.bucket_count, rec[i].m.shard_count, rec[i].m.shard_index);
    }
}

int ow_cli_check_shard_maps(const ow_config *cfg, const volatile sig_atomic_t *stop)
{
    recorded rec[OW_SHARD_MAX];
    int same = 1;

    if (cfg->shards.n == 0)
        return OW_EXIT_OK;
    for (unsigned i = 0; i < cfg->shards.n; i++) {
        ow_shard_map want = ow_cli_shard_map(cfg, i);
        int rc = read_one(cfg, i, &rec[i], stop);

        if (rc != OW_OK)
            return OW_EXIT_FAILURE; /* a fatal error, or stopped while waiting */
        same &= rec[i].found && ow_shard_map_equal(&rec[i].m, &want);
    }
    if (same)
        return OW_EXIT_OK;
    fprintf(stderr,
            "order-worker: mysql.shards disagrees with the shard map the databases recorded; "
            "routing users by it could create their orders twice. Restore the recorded list, "
            "or change the map on purpose as docs/operations.md (\"Shards\") describes.\n");
    print_maps(cfg, rec);
    return OW_EXIT_USAGE;
}
