/* The shard map of a database (issue 14): what migrate records on each
 * shard and what run reads back before it decides anything. */
#include <string.h>

#include "ow/config.h"
#include "store_internal.h"

void ow_store_params_for_shard(const ow_config *cfg, unsigned shard, ow_store_params *p)
{
    ow_store_params_from_config(cfg, p);
    if (shard < cfg->shards.n) {
        p->host = cfg->shards.addr[shard].host;
        p->port = cfg->shards.addr[shard].port;
        p->database = cfg->shards.addr[shard].database;
        if (cfg->shard_passwords[shard] != NULL)
            p->password = cfg->shard_passwords[shard];
    }
}

static const char *const sql_map_write =
    "INSERT INTO ow_shard_map (id, bucket_count, shard_count, shard_index) VALUES (1, ?, ?, ?)"
    " ON DUPLICATE KEY UPDATE bucket_count = VALUES(bucket_count),"
    " shard_count = VALUES(shard_count), shard_index = VALUES(shard_index),"
    " updated_at = CURRENT_TIMESTAMP(6)";

int ow_store_shard_map_write(ow_store *s, const ow_shard_map *m, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    int rc = ow_store_connect(s, err);

    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_map_write, &st, err);
    if (rc != OW_OK)
        return rc;
    ow_params_reset(&s->params);
    rc = ow_params_reserve(&s->params, 3);
    if (rc == OW_OK) {
        ow_param_int(&s->params, m->bucket_count);
        ow_param_int(&s->params, m->shard_count);
        ow_param_int(&s->params, m->shard_index);
        rc = ow_store_execute(s, st, &s->params, "write shard map", err);
    } else {
        rc = ow_store_oom(err);
    }
    mysql_stmt_close(st);
    if (rc == OW_OK)
        rc = ow_store_commit(s, err);
    return rc;
}

static const char *const sql_map_read =
    "SELECT bucket_count, shard_count, shard_index FROM ow_shard_map WHERE id = 1";

int ow_store_shard_map_read(ow_store *s, ow_shard_map *m, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[3];
    long long v[3] = {0, 0, 0};
    ow_mybool nul[3] = {0, 0, 0};
    int rc = ow_store_connect(s, err);
    int fetched;

    if (rc == OW_OK)
        rc = ow_store_prepare(s, sql_map_read, &st, err);
    /* A database never migrated has no table: no map recorded either. */
    if (rc != OW_OK && err->code == OW_ER_NO_SUCH_TABLE)
        return OW_ENOTFOUND;
    if (rc != OW_OK)
        return rc;
    rc = ow_store_execute(s, st, NULL, "read shard map", err);
    memset(res, 0, sizeof(res));
    for (int i = 0; i < 3; i++)
        ow_result_int(&res[i], &v[i], &nul[i]);
    if (rc == OW_OK && mysql_stmt_bind_result(st, res) != 0)
        rc = ow_store_fail_stmt(s, st, "read shard map", err);
    if (rc == OW_OK) {
        fetched = mysql_stmt_fetch(st);
        if (fetched == MYSQL_NO_DATA)
            rc = OW_ENOTFOUND;
        else if (fetched != 0)
            rc = ow_store_fail_stmt(s, st, "read shard map", err);
    }
    mysql_stmt_close(st);
    ow_store_rollback(s); /* ends the read's snapshot */
    if (rc == OW_OK) {
        m->bucket_count = (uint32_t)v[0];
        m->shard_count = (unsigned)v[1];
        m->shard_index = (unsigned)v[2];
    }
    return rc;
}
