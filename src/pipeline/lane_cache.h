/*
 * A lane's retry cache (lane_cache.c): recent outcomes of the lane's keys,
 * asked (ow_cache_get) while the lane takes a batch and filled here after
 * its transaction committed.
 * Private to the pipeline.
 */
#ifndef OW_LANE_CACHE_H
#define OW_LANE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "ow/cache.h"
#include "ow/config.h"

/* A lane's share of cache.max_bytes among n_lanes lanes. NULL, with
 * *failed 0, when the cache is off; NULL with *failed 1 when out of
 * memory. */
ow_cache *ow_lane_cache_new(const ow_config *cfg, size_t n_lanes, int *failed);
/* After the deciding transaction committed: keeps items' recorded answers,
 * aged from since_ms (monotonic), taken before the transaction began. */
void ow_lane_cache_fill(ow_cache *c, const ow_store_item *items, size_t n, int64_t since_ms);

#endif
