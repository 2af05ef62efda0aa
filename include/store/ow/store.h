/*
 * The store: MySQL/MariaDB connection, prepared statements, and the one
 * transaction that decides a micro-batch of requests.
 *
 * Correctness lives in the database. The unique key (user_id,
 * idempotency_key) decides which of two concurrent transactions creates a
 * request; the unique key (user_id, external_order_no) decides which creates
 * an order. The store never checks and then inserts: it inserts and reads
 * what the database decided. See docs/transactions.md.
 *
 * Errors are returned with a class: RETRIABLE (deadlock, lost connection,
 * server gone: back off and call again; the connection is re-established on
 * the next call), FATAL (configuration or schema problems), never
 * INVALID_INPUT (requests are validated before they get here).
 */
#ifndef OW_STORE_H
#define OW_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ow/digest.h"
#include "ow/error.h"
#include "ow/idgen.h"
#include "ow/request.h"
#include "ow/response.h"
#include "ow/shard.h"
#include "ow/store_server.h"
#include "ow/util.h"

typedef struct ow_store ow_store;

/* mysql.ssl_mode, with the meanings of the MySQL client's --ssl-mode. */
typedef enum {
    OW_SSL_DISABLED = 0,    /* never TLS */
    OW_SSL_PREFERRED,       /* TLS when the server offers it, no verification */
    OW_SSL_REQUIRED,        /* TLS or no session; the certificate is not checked */
    OW_SSL_VERIFY_CA,       /* and the server's chain must lead to mysql.ssl_ca */
    OW_SSL_VERIFY_IDENTITY, /* and its certificate must name mysql.host */
} ow_ssl_mode;

/* TLS settings; NULL or "" = not set. */
typedef struct {
    ow_ssl_mode mode;
    const char *ca;
    const char *capath;
    const char *cert;
    const char *key;
    const char *crl;
    const char *tls_version;
    const char *cipher;
} ow_store_tls;

/* "verify_ca" -> OW_SSL_VERIFY_CA; -1 for an unknown name. */
int ow_ssl_mode_parse(const char *name);
const char *ow_ssl_mode_name(ow_ssl_mode mode);

/* What a connection checks in the database's recorded shard map (table
 * ow_shard_map) right after it connects. A database that records another
 * map than the configuration gives it would route users to the wrong
 * place: their orders could be created twice, or a lookup could say "no
 * record" for a request that exists. */
typedef enum {
    OW_MAP_UNCHECKED = 0, /* migrate, which records maps, and the tools */
    OW_MAP_UNSHARDED,     /* one database: it may record no map, or a map of one shard */
    OW_MAP_SHARD          /* a shard: it must record exactly map */
} ow_map_check;

typedef struct {
    const char *host; /* a node, or the nodes of one cluster in the joined form of ow/nodes.h */
    unsigned port;
    const char *user;
    const char *password;
    const char *database;
    unsigned connect_timeout_s;
    unsigned lock_wait_timeout_s; /* the in-progress wait */
    /* Longest wait for one answer of the server; 0: long enough for the
     * longest lock wait (lock_wait_timeout_s + 2 * connect_timeout_s + 5). */
    unsigned read_timeout_s;
    /* 1 for a connection that only reads (the query service): its session
     * is READ ONLY and autocommits, so each statement is a transaction of
     * its own that reads one consistent snapshot and needs no ROLLBACK
     * after it, and the server refuses any write on it. 0: statements run
     * in a transaction that the caller commits or rolls back. */
    int read_only;
    ow_store_tls tls;
    ow_map_check map_check;
    ow_shard_map map; /* OW_MAP_SHARD: what the database must record */
    /* 1: every connection assesses the server's settings against needs and
     * checks the schema's version (ow/store_server.h), refusing with an
     * INVALID_INPUT error what the process cannot run against. */
    int check_server;
    ow_server_needs needs;
    unsigned db_index; /* the database's index in mysql.shards (0 without) */
} ow_store_params;

typedef enum {
    OW_DECISION_NONE = 0,
    OW_DECISION_CREATED,     /* new request, orders written (201) */
    OW_DECISION_CONFLICT,    /* new request recorded as FAILED (409 ORDER_ALREADY_EXISTS) */
    OW_DECISION_REPLAY,      /* same key and digest already recorded: stored body */
    OW_DECISION_KEY_REUSED,  /* same key, other digest: nothing written (409) */
    OW_DECISION_IN_PROGRESS, /* another transaction holds the key or its orders (409) */
    /* The request's record needs more than the server takes in one
     * statement (max_allowed_packet): nothing written, answered 400. */
    OW_DECISION_TOO_LARGE
} ow_decision;

typedef struct {
    /* Input, borrowed for the duration of the call. */
    const ow_request *req;
    const char *key;
    size_t key_len;
    unsigned char digest[OW_DIGEST_LEN];
    char digest_hex[OW_DIGEST_HEX_LEN + 1];
    /* Output. */
    ow_decision decision;
    ow_result_code code;
    ow_buf body;  /* the result value; owned by the item */
    int replayed; /* 1 when body is a stored response published again */
    /* KEY_REUSED: the first 8 hex digits of the recorded request's digest,
     * for the security log. */
    char stored_digest8[9];
    /* Private to the store. */
    unsigned char key_hash[OW_KEY_HASH_LEN]; /* the unique key's value (migration 004) */
    int64_t request_id;
    int ours;
} ow_store_item;

typedef struct {
    uint64_t transactions;
    uint64_t batch_fallbacks; /* micro-batches redone one message at a time */
    uint64_t order_races;     /* 1062 on an order insert: a concurrent creator */
    uint64_t id_collisions;
    uint64_t deadlocks;           /* decide calls the server chose as a deadlock victim (1213) */
    uint64_t known_keys;          /* items answered by the non-locking read of recorded keys */
    uint64_t key_hash_collisions; /* another (user_id, key) holds an item's key hash */
    /* One item at a time, a lock wait rolled back the whole transaction
     * (innodb_rollback_on_timeout): the items before it were redone. */
    uint64_t transaction_restarts;
} ow_store_stats;

struct ow_config;
/* The connection settings of a configuration (mysql.*, and
 * request.in_progress_wait_s as the lock wait). Borrows cfg's strings. */
void ow_store_params_from_config(const struct ow_config *cfg, ow_store_params *p);

/* The settings of shard `shard` of mysql.shards: the entry's
 * host, port and database with the mysql.* credentials and TLS. Without
 * mysql.shards, or for a shard past its end, those of mysql.host. */
void ow_store_params_for_shard(const struct ow_config *cfg, unsigned shard, ow_store_params *p);

/* Watches a database from a thread of its own (store_watch.c): whether it
 * answers, so that the connections that use it fail at once while it does
 * not, and a call blocked in a server that hangs is interrupted. */
typedef struct ow_store_watch ow_store_watch;

/* Creates a store; does not connect (the first call does). Copies params. */
ow_store *ow_store_new(const ow_store_params *params, ow_idgen *ids);
void ow_store_free(ow_store **store);

/* Connects if not connected. */
int ow_store_connect(ow_store *s, ow_error *err);
/* Checks the connection with a round trip; reconnects if it was lost. */
int ow_store_ping(ow_store *s, ow_error *err);
/* 1 while a connection is open (it may still turn out to be dead). */
int ow_store_connected(const ow_store *s);
/* The node of the connection, or of the last attempt: one name of the
 * host list (borrowed; valid while s lives). A list of nodes is tried in
 * order from its first node, or with a watch, only its current node. */
const char *ow_store_node_name(const ow_store *s);
/* From another thread: makes the call in progress fail at once (its socket
 * is shut down, so the server rolls the transaction back) and every later
 * connect fail too. A stop uses it on a lane blocked in the database past
 * its share of shutdown.timeout_ms. */
void ow_store_cancel(ow_store *s);

/* From now on s connects only while w says the database answers, and w
 * interrupts s's call in progress when it finds the database gone or
 * hung. w must outlive s. */
void ow_store_use_watch(ow_store *s, ow_store_watch *w);

/* Borrows req and key, and hashes them once for every decide of the item
 * (its key_hash). Returns 0, OW_EINVAL for a key over OW_KEY_MAX or
 * OW_ENOMEM; ow_store_item_cleanup is safe after any of them. */
int ow_store_item_init(ow_store_item *it, const ow_request *req, const char *key, size_t key_len);
void ow_store_item_cleanup(ow_store_item *it);

/* Decides items[0..n) in one transaction (store_decide.c). On success
 * every item has a decision and a body. On error nothing was committed and
 * no item has a decision. Set-based statements run first and the call
 * falls back to one item at a time, each under its own savepoint, when
 * the database reports a race; a call after one that failed on a deadlock
 * or a lock wait runs one item at a time too, so a caller only retries
 * RETRIABLE errors after a backoff. */
int ow_store_decide(ow_store *s, ow_store_item *items, size_t n, ow_error *err);

const ow_store_stats *ow_store_get_stats(const ow_store *s);

/* The most orders a request may carry so that its record fits every
 * database of the process (their max_allowed_packet as last read);
 * SIZE_MAX before any was read. */
size_t ow_store_orders_cap(void);
/* Connects if needed and assesses the server against the store's needs. */
int ow_store_server_report_of(ow_store *s, ow_server_report *r, ow_error *err);

/* --- Operations (used by subcommands; see ow/store_lookup.h, ow/store_purge.h and ow/store_audit.h). --- */

/* Applies the embedded sql/ migrations; returns the number applied in *applied. */
int ow_store_migrate(ow_store *s, FILE *log, int *applied, ow_error *err);

/* The shard map this database records (table ow_shard_map): write records
 * m where no map is recorded (replace: in place of the one recorded),
 * commits and reads it back: another map recorded there already is an
 * INVALID_INPUT error, and nothing changes. read returns OW_ENOTFOUND (err
 * untouched) when none was written or the table does not exist. */
int ow_store_shard_map_write(ow_store *s, const ow_shard_map *m, int replace, ow_error *err);
int ow_store_shard_map_read(ow_store *s, ow_shard_map *m, ow_error *err);

#endif
