/* Store: the shard map a database records, read back and compared with
 * the one a connection expects. */
#include <string.h>

#include "store_parts.h"

static const char *const sql_map_read =
    "SELECT bucket_count, shard_count, shard_index FROM ow_shard_map WHERE id = 1";

int ow_store_map_fetch(ow_store *s, ow_shard_map *m, ow_error *err)
{
    MYSQL_STMT *st = NULL;
    MYSQL_BIND res[3];
    long long v[3] = {0, 0, 0};
    ow_mybool nul[3] = {0, 0, 0};
    int rc = ow_store_prepare(s, sql_map_read, &st, err);
    int fetched;

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
    ow_store_end_read(s);
    if (rc == OW_OK) {
        m->bucket_count = (uint32_t)v[0];
        m->shard_count = (unsigned)v[1];
        m->shard_index = (unsigned)v[2];
    }
    return rc;
}

/* The recorded shard map against the one this connection expects
 * (params' map_check). */
int ow_store_check_map(ow_store *s, ow_error *err)
{
    ow_shard_map rec;
    int rc = ow_store_map_fetch(s, &rec, err);
    int found = rc == OW_OK;

    if (rc != OW_OK && rc != OW_ENOTFOUND)
        return rc;
    if (s->map_check == OW_MAP_UNSHARDED && (!found || rec.shard_count <= 1))
        return OW_OK;
    if (s->map_check == OW_MAP_SHARD && found && ow_shard_map_equal(&rec, &s->map))
        return OW_OK;
    if (!found)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "shard map: %s:%u/%s records no shard map (never migrated as a shard), "
                            "but mysql.shards makes it shard %u of %u",
                            s->host, s->port, s->database, s->map.shard_index, s->map.shard_count);
    if (s->map_check == OW_MAP_UNSHARDED)
        return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                            "shard map: %s:%u/%s records shard %u of %u (%u buckets), but "
                            "mysql.shards is empty: it would be read as the only database",
                            s->host, s->port, s->database, rec.shard_index, rec.shard_count,
                            rec.bucket_count);
    return ow_error_set(err, OW_ERRCLASS_INVALID_INPUT, 0,
                        "shard map: %s:%u/%s records shard %u of %u (%u buckets), but "
                        "mysql.shards makes it shard %u of %u (%u buckets)",
                        s->host, s->port, s->database, rec.shard_index, rec.shard_count,
                        rec.bucket_count, s->map.shard_index, s->map.shard_count,
                        s->map.bucket_count);
}
