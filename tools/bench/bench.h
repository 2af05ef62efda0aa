/*
 * ow-bench internals: the data set, topics with the positions of what was
 * produced, worker runs and what they measured, the database limit and the
 * report. See tools/ow_bench.c for the flow and scripts/bench.sh for the
 * services around it. Not part of the worker.
 */
#ifndef OW_BENCH_H
#define OW_BENCH_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "kit.h"

#define BM_MAX_PARTS 64
#define BM_MAX_ENV 48
#define BM_NAME_MAX 64

/* --- Environment: where the services and binaries are -------------------- */

typedef struct {
    const char *bootstrap;
    const char *mysql_host;
    unsigned mysql_port;
    const char *mysql_root_user;
    const char *mysql_root_password;
    const char *worker_bin; /* the built order-worker */
    const char *out_dir;
    char run_id[24];         /* makes topic, group and database names unique */
    char worker_user[32];    /* least-privilege database user for the worker */
    char password_file[512]; /* its password, mode 0600 */
    int keep_databases;
    int partitions;
    int stall_timeout_s; /* fail when nothing is committed for this long */
    int stop_timeout_s;  /* SIGTERM to exit */
    double warmup_s;     /* rate mode: latency also reported without the first warmup_s */
    int latency_csv;     /* write <out_dir>/latency-<run>.csv (one line per input) */
    const char *watch;   /* "name=pid,..." processes whose CPU is reported */
    const char *worker_env[BM_MAX_ENV]; /* extra NAME=value for every worker run */
    size_t n_worker_env;
    volatile sig_atomic_t *interrupted;
    const char *database; /* non-NULL: every run uses this existing, migrated database
                               * and keeps it (the growth benchmark's preloaded tables) */
    int preloaded;        /* database came from --database: its rows are not counted */
} bm_env;

/* --- The data set --------------------------------------------------------- */

typedef struct {
    char *key; /* NULL: no key */
    size_t key_len;
    char *value;
    size_t len;
    kit_kind kind;
    int n_orders;
} bm_msg;

typedef struct {
    bm_msg *v;
    size_t n;
    long kinds[KIT_KIND_COUNT];
    long long items;
    size_t bytes;
} bm_data;

typedef struct {
    long n;
    uint64_t seed;
    int pct_retry, pct_reuse, pct_clash, pct_invalid;
    int items_min, items_max;
    double items_mean; /* 0: uniform in items_min..items_max */
    uint64_t first;    /* messages are numbered from first + 1 (kit_gen_set_numbering) */
    int random_keys;
} bm_gen_opts;

int bm_data_generate(const bm_gen_opts *o, bm_data *d);
void bm_data_free(bm_data *d);

/* --- An input topic and where each message landed -------------------------- */

typedef struct {
    int32_t partition;
    int64_t offset;
    int64_t ts_ms; /* the broker-stored CreateTime; 0 until acknowledged */
} bm_pos;

typedef struct {
    char name[128];
    int partitions;
    const bm_data *data;
    size_t count;                    /* the first count messages of data */
    bm_pos *pos;                     /* per message */
    size_t *by_offset[BM_MAX_PARTS]; /* per partition: offset -> message index */
    int64_t ends[BM_MAX_PARTS];
    size_t produced; /* acknowledged so far (atomic: rate mode reads it) */
    int failed;
    int stop; /* atomic: set to make a producing thread give up */
} bm_topic;

int bm_topic_init(bm_topic *t, const bm_env *e, const char *suffix, const bm_data *d, size_t count);
/* Produces the topic's messages, rate per second (0: as fast as possible),
 * then indexes them by partition and offset. Returns 0 or -1. */
int bm_topic_produce(bm_topic *t, const bm_env *e, double rate);
void bm_topic_cleanup(bm_topic *t);

/* --- A worker run ----------------------------------------------------------- */

typedef struct {
    char name[BM_NAME_MAX];
    int lanes, batch, inflight;  /* 0: the worker's default */
    double time_limit_s;         /* 0: until every message is done */
    double rate;                 /* > 0: produce at this rate while the worker runs */
    const char *env[BM_MAX_ENV]; /* extra NAME=value for this run */
    size_t n_env;
    int capture_bodies; /* keep a SHA-256 of each input's result body (--replay) */
    /* Latency to the moment a read_committed consumer tailing the results
     * topic during the run received the result, instead of the result's
     * LogAppendTime: what a consumer sees when results wait for their
     * transaction's commit (--eos). */
    int visible_latency;
} bm_spec;

enum {
    BM_CODE_CREATED,
    BM_CODE_REPLAYED,
    BM_CODE_CONFLICT,
    BM_CODE_REUSED,
    BM_CODE_INVALID,
    BM_CODE_IN_PROGRESS,
    BM_CODE_OTHER,
    BM_CODE_COUNT
};

typedef struct {
    char name[BM_NAME_MAX];
    int lanes, batch, inflight;
    char database[128], group[128], input[128], results[128], dlq[128];
    size_t inputs;        /* messages in its input topic */
    size_t done;          /* inputs with a definitive result */
    size_t unkeyed;       /* inputs without a key: a dead letter, no result */
    long long items_done; /* their orders */
    size_t lost;          /* inputs below the committed offsets without a result */
    int complete;         /* every input done, every offset committed */
    int time_bounded;     /* stopped at its time limit */
    int worker_status;    /* exit status, 128+signal, -1 unknown */
    int stop_hung;        /* did not exit within stop_timeout_s of SIGTERM */
    double first_result_wall, last_result_wall; /* seconds since the epoch */
    double startup_s;                           /* spawn to first result */
    double window_s;                            /* first to last result */
    double tail_s;                              /* last result to every offset committed */
    double wall_s;                              /* spawn to done */
    double batches_per_s, orders_per_s;
    double p50_ms, p95_ms, p99_ms, max_ms;
    /* Inputs produced at least warmup_s after the first one (rate mode). */
    double steady_p50_ms, steady_p95_ms, steady_p99_ms, steady_p999_ms;
    size_t steady_n;
    /* p99 of the inputs produced in each 5 s of load (rate mode). */
    double p99_by_5s[64];
    int n_p99_by_5s;
    double cpu_s;            /* worker user + sys, whole life (wait4) */
    long rss_peak_kib;       /* ru_maxrss of the worker */
    long rss_end_kib;        /* VmRSS just before SIGTERM */
    long hwm_kib;            /* VmHWM (the worker's own peak) last seen before it exited */
    long rss_at_kib[4];      /* VmRSS when 25, 50, 75 and 100 % of the inputs were committed */
    double stop_s;           /* SIGTERM to exit */
    double gap_ms, gap_at_s; /* longest pause between consecutive results */
    long gaps_over_250ms;
    long codes[BM_CODE_COUNT];
    long results_total;      /* messages in the results topic */
    char cpu_note[512];      /* CPU of the machine and watched processes during the run */
    double other_cores;      /* CPU used by processes outside the run (other tenants) */
    double bps_min, bps_max; /* over repeated runs of this configuration (--repeat) */
    int repeats;
    char log_note[256]; /* retries, warnings and errors in the worker's log */
    /* CPU seconds of each watched process (--watch) from the worker's start
     * until every input was done; -1 when it could not be read. */
    int n_watched;
    char watched_name[8][24];
    double watched_cpu_s[8];
    /* The server's work between the same two moments (bm_db_counters, -1
     * when unknown), and the index entries the run added to its tables. */
    long long db_statements, db_commits, db_redo_bytes, db_index_entries;
    /* With bm_spec.capture_bodies (--replay): per input, the
     * SHA-256 of its first definitive result's body, and BM_BODY_SEEN | code << 2.
     * Allocated by bm_results_read; the caller frees them. */
    int capture;
    unsigned char (*body_sha)[32];
    unsigned char *body_flags;
    /* With bm_spec.visible_latency: per input, the wall-clock ms at which
     * the tail received its first definitive result (0: not seen), and how
     * many keyed inputs the tail did not see (their latency is left out). */
    int64_t *visible_ms;
    size_t visible_missed;
} bm_result;

#define BM_BODY_SEEN 1
#define BM_BODY_CODE(flags) ((flags) >> 2) /* BM_CODE_*; REPLAYED = header replayed: true */

/* Creates the run's input topic from the first count messages of d and
 * produces it just before the worker starts (or, with s->rate, while it
 * runs), then runs and measures the worker. Returns 0, or -1 when the run
 * did not complete (lost messages, stall, early exit, setup failure). */
int bm_run(const bm_env *e, const bm_spec *s, const bm_data *d, size_t count, bm_result *r);
/* The same on an input topic that is already produced (kept by the caller,
 * so that a second worker in a new group can read it again: --replay). */
int bm_run_topic(const bm_env *e, const bm_spec *s, bm_topic *in, bm_result *r);

/* A Kafka client of the benchmark (quiet logs); with a group, a consumer
 * that commits nothing. NULL (logged) when librdkafka refuses. */
rd_kafka_t *bm_kafka_client(const bm_env *e, rd_kafka_type_t type, const char *group);
/* Waits until the broker serves group coordination (the first group on a
 * fresh broker creates __consumer_offsets), so that the first run does not
 * pay for it. Returns 0, or -1 after timeout_s. */
int bm_kafka_warmup(const bm_env *e, int timeout_s);

/* --- Results and latency -------------------------------------------------------- */

/* Reads the results topic once and fills the result's counts, latency and
 * window. committed: the group's offsets per input partition (a
 * time-bounded run owes results only below them). */
int bm_results_read(const bm_env *e, const bm_topic *in, const int64_t *committed, bm_result *r);

/* A read_committed consumer of a run's results topic in a thread of its
 * own, noting when each input's first definitive result reached it. */
typedef struct bm_tail bm_tail;

bm_tail *bm_tail_start(const bm_env *e, const bm_topic *in, const char *results);
/* Stops it after it has been idle for idle_ms (at most max_ms) and returns
 * the per-input times (bm_result.visible_ms; the caller frees them). */
int64_t *bm_tail_stop(bm_tail *t, int idle_ms, int max_ms);

/* --- Database --------------------------------------------------------------------- */

typedef struct bm_db bm_db;

bm_db *bm_db_connect(const bm_env *e, const char *database);
void bm_db_close(bm_db **db);
/* A fresh database migrated by `order-worker migrate` (as root), on which
 * the worker user may SELECT, INSERT, UPDATE and DELETE. */
int bm_db_create(const bm_env *e, const char *name);
/* Grants the worker user what it needs on an existing database. */
int bm_db_grant(const bm_env *e, const char *name);
void bm_db_drop(const bm_env *e, const char *name);
/* Creates the worker user with a random password (written to
 * e->password_file). */
int bm_db_worker_user(bm_env *e);

/* What the server did for a run: its global counters (SHOW GLOBAL STATUS)
 * at two moments, and the rows of the run's database's tables before and
 * after it. The counters are the whole server's: the runs are alone on it. */
typedef struct {
    int ok;
    long long statements; /* Questions: every statement and prepared execution */
    long long commits;    /* Com_commit */
    long long redo_bytes; /* Innodb_os_log_written */
} bm_db_counters;

int bm_db_counters_read(const bm_env *e, bm_db_counters *c);
/* Index entries in database: the rows of each of its tables times the
 * indexes of that table (its clustered index included), -1 when unknown. */
long long bm_db_index_entries(const bm_env *e, const char *database);

typedef struct {
    size_t rows;
    double seconds;
    double rows_per_s;
    int rows_per_stmt, rows_per_commit;
    char cpu_note[512];
    int with_requests;   /* the fair limit */
    size_t request_rows; /* request rows written before the order rows */
    double request_mib;  /* their response bodies */
} bm_dblimit;

/* Inserts the orders of the NEW messages into a fresh orders table; with
 * with_requests (the fair limit), first their request rows with
 * the 201 bodies the worker stores. rows_per_s counts order rows only. */
int bm_db_limit(const bm_env *e, const bm_data *d, int rows_per_stmt, int rows_per_commit,
                int with_requests, bm_dblimit *out);

/* --- Processes and clocks ----------------------------------------------------------- */

double bm_now(void);  /* monotonic seconds */
double bm_wall(void); /* wall-clock seconds since the epoch */
pid_t bm_spawn(char *const argv[], const char *const env[], size_t n_env, const char *log_path);
/* Waits for a spawned process; status as kit_wait. */
int bm_wait_quiet(pid_t pid, int timeout_s);
long bm_proc_rss_kib(pid_t pid);
/* A "Name:   123 kB" field of /proc/PID/status in KiB, -1 if unknown. */
long bm_proc_status_kib(pid_t pid, const char *field);
/* CPU seconds (user + sys) of a process, -1 if gone. */
double bm_proc_cpu_s(pid_t pid);

/* The launcher (bench_launch.c): starts workers from a small helper process
 * forked at start, so that their ru_maxrss is their own. bm_launcher_poll
 * returns 1 with the exit status and rusage once pid has exited. */
int bm_launcher_start(void);
pid_t bm_launcher_spawn(char *const argv[], const char *const env[], size_t n_env,
                        const char *log_path);
int bm_launcher_poll(pid_t pid, int *status, struct rusage *ru);

/* Machine and watched-process CPU between two samples. */
typedef struct {
    double t;
    unsigned long long busy, iowait, total; /* /proc/stat jiffies */
    double worker, self;
    double watched[8];
    char names[8][24];
    pid_t pids[8];
    int n_watched;
} bm_cpu_sample;

void bm_cpu_sample_take(const bm_env *e, pid_t worker, bm_cpu_sample *s);
/* Describes the interval; returns the cores used by processes outside the
 * run (the machine's busy time minus the run's own processes). */
double bm_cpu_describe(const bm_cpu_sample *a, const bm_cpu_sample *b, char *out, size_t outsz);

/* --- Progress ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    double t0, last_print, last_t;
    size_t last_done;
    int tty;
    int printed;
} bm_progress;

void bm_progress_init(bm_progress *p, const char *name);
void bm_progress_update(bm_progress *p, size_t done, size_t total, long rss_kib, int force);
void bm_progress_end(bm_progress *p);

/* --- Report ---------------------------------------------------------------------------- */

void bm_report_table(FILE *out, const bm_result *r, size_t n, const bm_dblimit *dbl);
void bm_report_details(FILE *out, const bm_result *r);
int bm_report_csv(const char *path, const bm_result *r, size_t n);
/* Appends a run's CPU per batch to <dir>/cost.csv, one row per process:
 *   run,batches,process,cpu_s,us_per_batch
 * the worker's whole life (wait4) and each watched process over the run;
 * and the server's work to <dir>/dbwork.csv:
 *   run,batches,statements,commits,redo_bytes,index_entries */
int bm_report_cost(const char *dir, const bm_result *r);
/* r: one (median) result per grid point, with bps_min/bps_max/repeats. */
int bm_report_sweep(const char *dir, const bm_result *r, size_t n, const int *batches,
                    size_t n_batches);
/* "l4-b64: batches/s 4722 / 5100 / 8000 over 3 runs" lines. */
void bm_report_spread(FILE *out, const bm_result *all, size_t points, int repeats);

/* Logs to stderr with the tool's prefix. */
void bm_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *bm_xcalloc(size_t n, size_t size); /* exits with a message when memory runs out */
char *bm_xstrdup(const char *s);

#endif
