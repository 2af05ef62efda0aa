/* The shard map of a database: what migrate records on each
 * shard and what run reads back before it decides anything. */
#include <string.h>

#include "ow/config.h"
#include "store_parts.h"

void ow_store_params_for_shard(const ow_config *cfg, unsigned shard, ow_store_params *p)
{
    ow_store_params_from_config(cfg, p);
    if (shard < cfg->shards.n) {
        p->host = cfg->shards.addr[shard].host;
        p->port = cfg->shards.addr[shard].port;
        p->database = cfg->shards.addr[shard].database;
        if (cfg->shard_passwords[shard] != NULL)
            p->password = cfg->shard_passwords[shard];
        p->map_check = OW_MAP_SHARD;
        p->map.bucket_count = (uint32_t)cfg->mysql_shard_buckets;
        p->map.shard_count = cfg->shards.n;
        p->map.shard_index = shard;
        p->db_index = shard;
    }
}

/* A map is recorded once; only a remap (scripts/reshard.sh) replaces it. */
static const char *const sql_map_insert =
    "INSERT IGNORE INTO ow_shard_map (id, bucket_count, shard_count, shard_index) "
    "VALUES (1, ?, ?, ?)";
static const char *const sql_map_replace =
    "INSERT INTO ow_shard_map (id, bucket_count, shard_count, shard_index) VALUES (1, ?, ?, ?)"
    " ON DUPLICATE KEY UPDATE bucket_count = VALUES(bucket_count),"
    " shard_count = VALUES(shard_count), shard_index = VALUES(shard_index),"
    " updated_at = CURRENT_TIMESTAMP(6)";

/* Writes m as the recorded map; commits. */
static int write_map(ow_store *s, const ow_shard_map *m, int replace, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    ow_params *p;
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK && replace)
        rc = ow_store_prepare(s, sql_map_replace, &st, err);
    else if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_map_insert, &st, err);
    if (rc != OW_OK)
        return rc;
    p = ow_store_params_for(s, 3, err);
    if (p != NULL) {
        ow_param_int(p, m->bucket_count);
        ow_param_int(p, m->shard_count);
        ow_param_int(p, m->shard_index);
        rc = ow_store_execute(s, st, p, "write shard map", err);
    } else {
        rc = OW_EFATAL;
    }
    mysql_stmt_close(st);
    if (rc == OW_OK)
        rc = ow_store_commit(s, err);
    return rc;
}

int ow_store_shard_map_write(ow_store *s, const ow_shard_map *m, int replace, ow_error *err)
{
    ow_shard_map now;
    int rc = write_map(s, m, replace, err);

    /* Read back: another migrate may have recorded a map first. */
    if (rc == OW_OK)
        rc = ow_store_map_fetch(s, &now, err);
    if (rc == OW_OK && !ow_shard_map_equal(&now, m))
        rc = ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                          "shard map: %s:%u/%s records shard %u of %u (%u buckets), not the "
                          "configured shard %u of %u (%u buckets); nothing was changed",
                          s->host, s->port, s->database, now.shard_index, now.shard_count,
                          now.bucket_count, m->shard_index, m->shard_count, m->bucket_count);
    else if (rc == OW_ENOTFOUND)
        rc = ow_error_set(err, OW_ERRCLASS_FATAL, 0, "shard map: written but not read back");
    return rc;
}

int ow_store_shard_map_read(ow_store *s, ow_shard_map *m, ow_error *err)
{
    int rc = ow_store_connect(s, err);

    return rc == OW_OK ? ow_store_map_fetch(s, m, err) : rc;
}
