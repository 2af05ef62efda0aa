/*
 * A lane's retry cache. Keys hash to lanes, so the retries of a
 * key that reach this replica all reach one lane, and each lane owns its
 * cache: no lock. A message answered here skips the database; a miss, an
 * expired entry or another digest goes to the deciding transaction, and
 * only what that transaction created and committed fills the cache.
 */
#include "lane_cache.h"

#include "metrics.h"

ow_cache *ow_lane_cache_new(const ow_config *cfg, size_t n_lanes, int *failed)
{
    size_t per_lane = (size_t)cfg->cache_max_bytes / (n_lanes > 0 ? n_lanes : 1);
    ow_cache *c = NULL;

    if (cfg->cache_max_bytes > 0)
        c = ow_cache_new(per_lane, cfg->cache_ttl_s * 1000);
    *failed = cfg->cache_max_bytes > 0 && c == NULL;
    return c;
}

void ow_lane_cache_fill(ow_cache *c, const ow_store_item *items, size_t n, int64_t since_ms)
{
    /* Entries age from before the deciding transaction began, never later
     * than their records' created_at: retries and a slow shard can hold a
     * decide for seconds, which must not stretch an entry past purge's
     * horizon. */
    for (size_t i = 0; c != NULL && i < n; i++) {
        const ow_store_item *it = &items[i];

        /* Only a record this transaction created and committed: its entry is
         * then never older than the record, so a TTL below purge's horizon
         * cannot answer for a purged record. A replay read from the
         * database is not kept (its record may be about to be purged), nor
         * KEY_REUSED or IN_PROGRESS, which the database did not store. */
        if (it->ours &&
            (it->decision == OW_DECISION_CREATED || it->decision == OW_DECISION_CONFLICT))
            ow_cache_put(c, it->req->user_id, it->key, it->key_len, it->digest, it->code,
                         it->body.data, it->body.len, since_ms);
    }
}
