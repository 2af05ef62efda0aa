/*
 * The server settings a store depends on, read on every connection, and
 * their assessment against what a process needs of its database: what it
 * cannot live with is refused at start, naming the setting, rather than
 * met later as a crash loop; what it copes with is named in the log
 * (docs/operations.md, "Database server requirements").
 */
#ifndef OW_STORE_SERVER_H
#define OW_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "ow/error.h"

/* The settings as the session sees them. A number the server does not
 * have (MySQL has no max_statement_time) reads as 0. */
typedef struct {
    int64_t max_allowed_packet; /* bytes */
    int64_t wait_timeout_s;
    int rollback_on_timeout; /* innodb_rollback_on_timeout */
    /* max_statement_time (MariaDB, seconds) or max_execution_time (MySQL,
     * milliseconds, for SELECT only) in milliseconds; 0 when unlimited. */
    int64_t statement_time_ms;
    const char *statement_time_name;
    int log_bin;
    char binlog_format[16];
    int64_t max_prepared_stmt_count;
    int64_t max_user_connections; /* the session's: the account's own limit when it has one */
    int64_t flush_log_at_trx_commit;
    int galera; /* the node runs wsrep with a provider */
} ow_server_vars;

/* What one process needs of a database. */
typedef struct {
    unsigned connections;        /* held at once: the lanes and the watch, or serve's threads */
    unsigned statements;         /* prepared statements one connection may cache */
    size_t max_orders;           /* request.max_orders: the largest record a request can get */
    unsigned lock_wait_s;        /* request.in_progress_wait_s */
    int writes;                  /* decides requests (run), rather than only reading (serve) */
    const char *connections_key; /* the configuration key that sets connections */
    /* Runs the deciding transaction, which takes back the new orders of a
     * request that conflicts: the account must be allowed to DELETE from
     * orders. */
    int decides;
} ow_server_needs;

typedef enum {
    OW_SERVER_OK = 0, /* fine; printed by migrate only */
    OW_SERVER_NOTE,   /* the worker copes, in a way worth knowing */
    OW_SERVER_WARN,   /* something is lost or slower than configured */
    OW_SERVER_REFUSE  /* the process cannot run against it */
} ow_server_level;

typedef struct {
    const char *setting;
    char value[32];
    ow_server_level level;
    char why[400];
} ow_server_finding;

#define OW_SERVER_FINDINGS_MAX 12
typedef struct {
    ow_server_finding f[OW_SERVER_FINDINGS_MAX];
    size_t n;
} ow_server_report;

/* The smallest max_allowed_packet the store works with: its largest
 * statement whose size no request sets (a read of 256 keys or orders)
 * fits with room to spare. */
#define OW_SERVER_PACKET_MIN 65536
/* What a statement's packet holds besides its parameters: header, command,
 * statement id, flags, the null bitmap of up to 2,048 parameters. */
#define OW_SERVER_PACKET_RESERVE 1024

/* Assesses v against need, one finding per setting it checks (pure). */
void ow_server_assess(const ow_server_vars *v, const ow_server_needs *need, ow_server_report *out);
/* The worst level of a report. */
ow_server_level ow_server_worst(const ow_server_report *r);
const char *ow_server_level_name(ow_server_level level);

/* The most orders a request may carry so that its record, whatever its
 * order numbers, fits one statement under packet bytes, at most
 * max_orders (pure; the last answer is remembered). */
size_t ow_server_orders_fitting(int64_t packet, size_t max_orders);

/* The bytes one request record takes in the statement that inserts it,
 * with the protocol's per-parameter overhead. */
size_t ow_server_record_bytes(size_t key_len, size_t body_len);

#endif
