/*
 * User sharding: which database holds a user's rows. Pure: no
 * I/O.
 *
 * Both unique scopes contain the user ((user_id, key) and (user_id,
 * external_order_no)), so all of one user's rows live on one shard and
 * every decision stays one local transaction. The route is
 *
 *   bucket = ow_shard_hash(user_id) mod bucket_count
 *   shard  = bucket mod shard_count
 *
 * The hash is specified in docs/contract.md ("Shard routing") so that
 * other services can compute it. Going from N to 2N shards moves exactly
 * the buckets b with b mod 2N >= N, from shard b mod N to shard
 * (b mod N) + N; nothing else moves (docs/operations.md).
 */
#ifndef OW_SHARD_H
#define OW_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"
#include "ow/nodes.h"

#define OW_SHARD_MAX 64
#define OW_SHARD_BUCKETS_DEFAULT 4096
#define OW_SHARD_HOST_MAX OW_NODES_TEXT_MAX /* an entry's node list, joined */
#define OW_SHARD_DB_MAX 64

/* FNV-1a, 64 bits, over the user id's decimal digits (no sign, no leading
 * zeros). */
uint64_t ow_shard_hash(int64_t user_id);
uint32_t ow_shard_bucket(int64_t user_id, uint32_t bucket_count);
/* The shard of a bucket under a map of shard_count shards. */
unsigned ow_shard_of_bucket(uint32_t bucket, unsigned shard_count);
unsigned ow_shard_of_user(int64_t user_id, uint32_t bucket_count, unsigned shard_count);

/* One entry of mysql.shards: host[:port][/database], where host may be the
 * nodes of one cluster separated by '|' (10.0.0.1|10.0.0.2:3306/orders),
 * all on the one port; an IPv6 address in brackets ([::1]:3307/orders).
 * host holds the nodes in the joined form of ow/nodes.h ("10.0.0.1,10.0.0.2",
 * IPv6 addresses without brackets). port 0 and database "" mean "the
 * mysql.* default". */
typedef struct {
    char host[OW_SHARD_HOST_MAX + 1];
    unsigned port;
    char database[OW_SHARD_DB_MAX + 1];
} ow_shard_addr;

typedef struct {
    ow_shard_addr addr[OW_SHARD_MAX];
    unsigned n; /* 0: not sharded (mysql.shards unset) */
} ow_shard_list;

/* Parses a comma-separated mysql.shards value ("" gives n = 0). Errors
 * name the entry by its position and text. */
int ow_shard_list_parse(const char *text, ow_shard_list *out, ow_error *err);

/* What a shard recorded (table ow_shard_map) or what the configuration
 * says it should be. */
typedef struct {
    uint32_t bucket_count;
    unsigned shard_count;
    unsigned shard_index;
} ow_shard_map;

/* 1 when a shard's recorded map is the one the configuration gives it. */
int ow_shard_map_equal(const ow_shard_map *a, const ow_shard_map *b);

#endif
