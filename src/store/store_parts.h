/* Private to the store modules (store*.c). */
#ifndef OW_STORE_PARTS_H
#define OW_STORE_PARTS_H

#include <mysql.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ow/htab.h"
#include "ow/store.h"
#include "ow/store_lookup.h"
#include "ow/store_server.h"
#include "store_gate.h"

/* MariaDB Connector/C declares is_null as my_bool*, MySQL 8 as bool*. */
#ifdef MARIADB_BASE_VERSION
typedef my_bool ow_mybool;
#else
typedef bool ow_mybool;
#endif

/* MariaDB Connector/C sends a one-row statement with arrays of values, one
 * per row, as one bulk execution (COM_STMT_BULK_EXECUTE); the MySQL client
 * library has no such call. */
#if defined(MARIADB_PACKAGE_VERSION_ID) && MARIADB_PACKAGE_VERSION_ID >= 30000
#define OW_HAVE_BULK 1
#else
#define OW_HAVE_BULK 0
#endif

#define OW_STMT_BUCKETS 9 /* statements for 1, 2, 4, ... 256 rows */
#define OW_STMT_MAX_ROWS 256
#define OW_STMT_SLOTS 13 /* shapes the cache can hold */
/* Which cache slots each module's shapes use (slot numbers are unique). */
enum {
    OW_SLOT_DECIDE = 0, /* 6 shapes: store_orders.c and store_decide.c */
    OW_SLOT_PURGE = 6,  /* 3 shapes: store_purge.c */
    OW_SLOT_KNOWN = 9,  /* 1 shape: store_decide.c's read of recorded keys */
    OW_SLOT_LOOKUP = 10 /* 2 shapes: store_lookup.c */
};
/* The shapes one writing connection may hold (the deciding transaction's
 * and the known-key read), and one reading connection (the lookups'): a
 * prepared statement for each row bucket of each, and one more prepared
 * for the moment. */
#define OW_STMT_WRITER_SHAPES 7
#define OW_STMT_READER_SHAPES 2

/* A statement shape, owned by the module whose SQL it is: head,
 * the tuple repeated for each row (comma separated), tail. A row's
 * parameters are the tuple's placeholders; head and tail may hold
 * placeholders of their own. A statement without a list is a shape whose
 * tuple and tail are empty, used with bucket 0. The connection caches one
 * prepared statement per shape (slot < OW_STMT_SLOTS, unique per shape)
 * and row bucket. Static text only: scripts/check-sql.sh checks it. */
typedef struct {
    unsigned slot;
    const char *head, *tuple, *tail;
} ow_sql_shape;

/* Bound parameters for one execution, with storage that outlives the binds.
 * One bind per parameter; or, for a bulk execution (ow_params_bulk), one
 * bind per column of rows rows, whose values are stored column by column
 * so that each bind points at an array (MariaDB Connector/C's column-wise
 * array binding). */
typedef struct {
    MYSQL_BIND *b;
    long long *ival;
    unsigned long *len;
    char (*text)[OW_AMOUNT_TEXT_MAX];
    MYSQL_TIME *time;
    ow_mybool *isnull;
    const void **ptr; /* bulk: the address of each text value */
    char *ind;        /* bulk: each value's indicator (NULL or not) */
    size_t n;
    size_t cap;
    size_t rows, cols; /* bulk: 0 when the binds are one per parameter */
} ow_params;

/* An order that already existed, as read after its insert was skipped. */
typedef struct {
    long long id;
    char order_no[OW_ORDER_NO_MAX + 1];
    long long user_id;
    char ext[OW_EXT_NO_MAX + 1];
    size_t ext_len;
    int64_t cents;        /* -1 when the stored amount could not be read back */
    long long product_id; /* 0 when NULL */
    long long quantity;
} ow_existing;

/* One order of the deciding transaction's part: its item (an index into
 * the part's items) and order index, and what became of its row. */
typedef struct {
    size_t item;
    size_t order;
    int inserted; /* the row went in: the transaction created it */
} ow_order_slot;

/* Scratch space reused by every decide call of one store. */
typedef struct {
    ow_existing *rows;
    size_t n_rows;
    size_t rows_cap;
    ow_htab existing;   /* (user_id, external_order_no) hash -> index in rows */
    ow_order_ref *refs; /* per order of every item */
    size_t refs_cap;
    size_t *ref_start; /* per item: its first entry in refs */
    size_t ref_start_cap;
    ow_conflict *conflicts;
    size_t conflicts_cap;
    size_t *picks; /* the items whose request records are written */
    size_t picks_cap;
    ow_buf blob; /* a fetched response body */
    /* The part's orders as the deciding transaction inserts them: item and
     * order index of each, and whether its row went in (store_orders.c). */
    ow_order_slot *slots;
    size_t n_slots;
    size_t slots_cap;
    ow_htab by_id; /* order id -> index in slots */
    int64_t *ids;  /* order ids to read back or delete */
    size_t ids_cap;
} ow_scratch;

struct ow_store {
    char *hosts;      /* the node list as given (mysql.host or a shard's nodes) */
    char **nodes;     /* its nodes, in order (ow/nodes.h) */
    unsigned n_nodes; /* at least 1 */
    /* The node of the connection, or of the attempt in progress: an index
     * into nodes, written under cancel_mu (the gate reads it), and its name. */
    unsigned node;
    const char *host;
    int galera; /* that node runs wsrep: its readiness is checked, reads wait (store_node.c) */
    char *user;
    char *password;
    char *database;
    unsigned port;
    unsigned connect_timeout_s;
    unsigned lock_wait_timeout_s;
    unsigned read_timeout_s; /* 0: room for the longest lock wait */
    int read_only;           /* ow_store_params.read_only */
    ow_map_check map_check;
    ow_shard_map map;
    ow_db_gate *gate;      /* the database's watch says when to connect; NULL: always */
    const char *gate_name; /* the database's name in the watch's errors */
    int64_t last_used_ms;  /* the last ow_store_connect that found or made a connection */
    /* No read or write timeout on the socket: migrate's table rebuilds run
     * for minutes on a large table (migration 004), and a client that
     * gives up leaves the server rolling back. */
    int long_statements;
    ow_store_tls tls; /* owned copies (store_tls.c) */
    MYSQL *db;
    /* ow_store_cancel's view of the connection: its socket (-1 when none),
     * under cancel_mu, and whether it was cancelled, which never goes back
     * and is read without the lock. */
    pthread_mutex_t cancel_mu;
    int sock;
    _Atomic int cancelled;
    /* The connection failed: its handles stay valid (callers may still hold
     * a statement) until the next ow_store_connect replaces it. */
    int broken;
    MYSQL_STMT *stmts[OW_STMT_SLOTS][OW_STMT_BUCKETS];
    ow_params params;
    ow_scratch scratch;
    ow_idgen *ids;
    uint64_t rng;
    /* How the next decide splits its items: into 2^split groups, each
     * decided set-based under a savepoint (0: the whole call at once). A
     * deadlock doubles the groups of the next call, a lock wait makes them
     * single items; a call that succeeds resets it (store_decide.c). */
    unsigned next_split;
    int no_known_read; /* ow_store_test_known_read(s, 0) */
    /* What the connection's server and client library take, learned at
     * each connect (store_server.c): INSERT ... RETURNING (MariaDB 10.5
     * and later), and a bulk execution of a one-row statement (MariaDB
     * with Connector/C). Without them the orders' inserts are read back
     * by id, and rows travel in multi-row statements. */
    int returning;
    int bulk;
    int plain_sql; /* ow_store_test_plain_sql(s, 1): neither, as on MySQL */
    ow_store_stats stats;
    /* The server's settings, read on every connection (store_server.c),
     * and what this process needs of them: checked when check_server. */
    ow_server_vars server;
    ow_server_needs needs;
    int check_server;
    unsigned db_index;
    /* The largest statement a retry sends after a large one was refused
     * on its way (1153, or the connection lost under it): 0 when none
     * was, else half of that one's bytes, for as long as the store lives. */
    size_t packet_cap;
};

/* Reads the server's settings into s->server (store_server.c). */
int ow_store_read_server(ow_store *s, ow_error *err);
/* Assesses them against s->needs: logs what the process copes with once
 * per process, and refuses (INVALID_INPUT) what it cannot run against,
 * then checks the schema's version. */
int ow_store_check_server(ow_store *s, ow_error *err);
/* Publishes the most orders a request may carry on s's database. */
void ow_store_note_orders_cap(ow_store *s);
/* Logs a db_setting line, once per process for each database, setting
 * and value. */
void ow_store_log_once(int level, const char *db, const char *setting, const char *value,
                       const char *why);
/* The bytes one statement may take on s's connection: what the server's
 * max_allowed_packet allows (limit), and that or less after a large
 * statement was refused on its way (budget). A record over the limit is
 * never sent; one over the budget goes alone. */
size_t ow_store_packet_limit(const ow_store *s);
size_t ow_store_packet_budget(const ow_store *s);
/* A statement of bytes failed with err: when it was large and the error
 * is one a packet over a limit ends in, later statements get half its
 * size (logged). */
void ow_store_statement_refused(ow_store *s, size_t bytes, const ow_error *err);
/* 1153 (the server refused the packet), or the connection lost under it. */
int ow_store_packet_refusal(int code);

/* Connects to node (an index into s->nodes), whatever the gate says:
 * the watch's own connections, which find the node the others use. */
int ow_store_connect_node(ow_store *s, unsigned node, ow_error *err);
/* After a connect: learns whether the node runs wsrep and, on a Galera
 * node, refuses one that is not ready (RETRIABLE) and makes reads wait for
 * the cluster's commits (store_node.c). */
int ow_store_node_setup(ow_store *s, ow_error *err);
/* On an open connection: a ping, and on a Galera node the readiness check. */
int ow_store_node_ready(ow_store *s, ow_error *err);

/* Whether a MySQL error number is one a retry may cure: the connection
 * was lost or refused, or the server refused for the moment (deadlock,
 * lock wait, read-only during a failover). */
int ow_store_error_retriable(unsigned e);
/* Whether the server's text of error e can quote row data (a duplicate
 * key's value): then only its number is reported. */
int ow_store_error_quotes_data(unsigned e);
/* The cause and the setting behind error e, for its message; NULL when
 * the server's text says enough. */
const char *ow_store_error_hint(unsigned e);

/* The connection's socket and node, published under cancel_mu for
 * ow_store_cancel and the watch; whether a cancel came. */
void ow_store_set_sock(ow_store *s, int sock);
void ow_store_set_node(ow_store *s, unsigned node);
int ow_store_cancelled(ow_store *s);

/* The shard map this connection's database records: OW_OK, OW_ENOTFOUND
 * (err untouched) when none is recorded or the table does not exist yet,
 * or an error. Needs a connection; leaves no transaction open. */
int ow_store_map_fetch(ow_store *s, ow_shard_map *m, ow_error *err);
/* The recorded shard map against the one this connection expects (its
 * params' map_check): OW_OK, or OW_EINVAL with an error naming both. */
int ow_store_check_map(ow_store *s, ow_error *err);

/* Shuts down the socket of s's connection, so that a call blocked in it
 * returns at once (a lost connection). Unlike ow_store_cancel, later
 * connects are allowed. */
void ow_store_interrupt(ow_store *s);

/* Classifies the last error of the connection or statement. Lost-connection
 * errors also mark the connection broken, so that the next ow_store_connect
 * replaces it (its statements stay valid until then). */
int ow_store_fail(ow_store *s, unsigned errnum, const char *what, ow_error *err);
/* ow_store_fail with the statement's own error number and text: a
 * statement's error is not always the connection's. */
int ow_store_fail_stmt(ow_store *s, MYSQL_STMT *st, const char *what, ow_error *err);
/* Runs one static statement (no parameters, no result). */
int ow_store_exec_static(ow_store *s, const char *sql, ow_error *err);
/* Fills err for an allocation that failed (FATAL) and returns its code. */
int ow_store_oom(ow_error *err);
/* A prepared statement from the cache: shape for 2^bucket rows, with
 * s->params reset and room reserved for all its parameters. */
int ow_store_stmt(ow_store *s, const ow_sql_shape *shape, unsigned bucket, MYSQL_STMT **out,
                  ow_error *err);
/* The cached statement of shape whose list holds rows tuples, padded to
 * the next power of two (*padded): the caller binds padded tuples,
 * repeating the last, which fills an IN list without changing what it
 * matches. */
int ow_store_stmt_padded(ow_store *s, const ow_sql_shape *shape, size_t rows, MYSQL_STMT **out,
                         size_t *padded, ow_error *err);
/* The bucket of the largest power of two <= rows, at most
 * OW_STMT_MAX_ROWS: a batch is inserted as a sum of such statements. */
unsigned ow_store_bucket_floor(size_t rows);

/* Rows for one statement shape whose tuple takes cols parameters: bind
 * binds row r's parameters through ow_param_*, bytes bounds what row r
 * adds to a statement's packet, and returned (may be NULL) reads the rows
 * a statement returned (INSERT ... RETURNING): given, every execution must
 * return them. */
typedef struct {
    const ow_sql_shape *shape;
    size_t rows;
    size_t cols;
    void *ctx;
    void (*bind)(void *ctx, size_t r, ow_params *p);
    size_t (*bytes)(const void *ctx, size_t r);
    int (*returned)(void *ctx, MYSQL_STMT *st, ow_error *err);
    const char *what;
} ow_rows;
/* Sends rows: as bulk executions of the shape's one-row statement where
 * the connection takes them, else as multi-row statements of a power of
 * two rows; each statement within the packet budget (a row over it goes
 * alone). *affected: the rows the server reported written. */
int ow_store_send_rows(ow_store *s, const ow_rows *rows, size_t *affected, ow_error *err);
/* Learns what the connection takes (s->returning, s->bulk). */
void ow_store_learn_features(ow_store *s);
/* Reads column col (len bytes, as the fetch reported it) of the current
 * row into out, which is replaced and NUL-terminated. */
int ow_store_fetch_column(ow_store *s, MYSQL_STMT *st, unsigned col, unsigned long len, ow_buf *out,
                          const char *what, ow_error *err);
/* Prepares arbitrary static SQL (not cached); caller closes it. */
int ow_store_prepare(ow_store *s, const char *sql, MYSQL_STMT **out, ow_error *err);
int ow_store_execute(ow_store *s, MYSQL_STMT *st, ow_params *p, const char *what, ow_error *err);
int ow_store_commit(ow_store *s, ow_error *err);
void ow_store_rollback(ow_store *s);
/* Ends the transaction a read began: a ROLLBACK, except on a read-only
 * connection, whose every statement is a transaction of its own. */
void ow_store_end_read(ow_store *s);
/* Closes the connection and its cached statements now. */
void ow_store_disconnect(ow_store *s);
/* Where the client library connects, for messages: "host:port", or for
 * mysql.host = localhost the Unix socket it uses instead. */
#define OW_STORE_SERVER_TEXT_MAX 512
void ow_store_server_text(const ow_store *s, char *out, size_t outsz);

/* Small reads (store_query.c), shared by lookup, purge and audit. */
/* Fetches the one row of an executed statement whose result is one column. */
int ow_store_fetch_single(ow_store *s, MYSQL_STMT *st, MYSQL_BIND *res, const char *what,
                          ow_error *err);
/* Runs sql (parameters in params, may be NULL) and reads one integer. check-sql.sh
 * holds its callers to literal SQL. */
int ow_store_query_int(ow_store *s, const char *sql, ow_params *params, int64_t *v,
                       const char *what, ow_error *err);
/* Starts a read-only transaction that sees one consistent snapshot. The
 * caller ends it with ow_store_rollback. */
int ow_store_begin_snapshot(ow_store *s, ow_error *err);
/* The length of a fetched text of len bytes kept in a buffer of cap bytes
 * with its NUL (a longer one was cut by the fetch). */
size_t ow_store_text_len(unsigned long len, size_t cap);
/* A DATETIME value to and from the client library's form. */
void ow_store_time_to(const ow_timestamp *t, MYSQL_TIME *m);
void ow_store_time_from(const MYSQL_TIME *m, ow_timestamp *t);

/* TLS (store_tls.c). Copies src's strings into dst. */
int ow_store_tls_copy(ow_store_tls *dst, const ow_store_tls *src);
void ow_store_tls_free(ow_store_tls *t);
/* Sets the TLS options of s->tls on s->db before mysql_real_connect. */
void ow_store_tls_options(ow_store *s);
/* After mysql_real_connect failed with e: if it is a TLS failure, logs
 * db_tls_failed once per process and returns a FATAL error; else returns
 * OW_OK and leaves err alone. */
int ow_store_tls_connect_failed(ow_store *s, unsigned e, ow_error *err);
/* After mysql_real_connect failed with e, an error retrying cannot fix
 * (access denied, unknown database): logs db_connect_failed once per
 * process, with the TLS mode (a plaintext login of a REQUIRE SSL user is
 * "Access denied" too), and returns a FATAL error. */
int ow_store_tls_refused(ow_store *s, unsigned e, ow_error *err);
/* After a connect: refuses a plaintext session that the mode forbids, logs
 * the cipher and TLS version, warns about plaintext beyond loopback. */
int ow_store_tls_check_session(ow_store *s, ow_error *err);

void ow_params_reset(ow_params *p);
/* s->params, emptied, with room for n parameters (NULL, err set, when
 * memory runs out). Every statement binds through the ow_param_* helpers. */
ow_params *ow_store_params_for(ow_store *s, size_t n, ow_error *err);
int ow_params_reserve(ow_params *p, size_t extra);
/* Empties p for a bulk execution of rows rows of cols parameters each,
 * bound in row order through ow_param_*; p->b then holds cols binds. */
int ow_params_bulk(ow_params *p, size_t rows, size_t cols);
void ow_params_free(ow_params *p);
void ow_param_int(ow_params *p, long long v);
void ow_param_null(ow_params *p);
void ow_param_bytes(ow_params *p, const void *data, size_t len);
void ow_param_amount(ow_params *p, int64_t cents);
void ow_param_time(ow_params *p, const MYSQL_TIME *t);

/* Binds a result column. */
void ow_result_int(MYSQL_BIND *b, long long *v, ow_mybool *isnull);
void ow_result_bytes(MYSQL_BIND *b, void *buf, size_t cap, unsigned long *len, ow_mybool *isnull);
void ow_result_time(MYSQL_BIND *b, MYSQL_TIME *t, ow_mybool *isnull);

#define OW_ER_WSREP_NOT_READY 1047 /* ER_UNKNOWN_COM_ERROR: a Galera node not ready */
#define OW_ER_ERROR_DURING_COMMIT 1180
#define OW_ER_DUP_ENTRY 1062
#define OW_ER_LOCK_WAIT_TIMEOUT 1205
#define OW_ER_LOCK_DEADLOCK 1213
#define OW_ER_NO_SUCH_TABLE 1146
#define OW_ER_NET_PACKET_TOO_LARGE 1153
#define OW_ER_SP_DOES_NOT_EXIST 1305 /* ROLLBACK TO a savepoint the server dropped */
#define OW_ER_STATEMENT_TIMEOUT 1969 /* MariaDB's max_statement_time */
#define OW_ER_QUERY_TIMEOUT 3024     /* MySQL's max_execution_time */

#endif
