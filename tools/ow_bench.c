/*
 * ow-bench: measures order-worker on a real MariaDB and Kafka broker.
 *
 * Default mode, on one generated data set:
 *   tuned   the worker with its defaults (or --tuned-*), over all N batches
 *   naive   lanes=1, batch.max_messages=1, inflight.max_messages=1, over the
 *           first --naive-prefix batches, bounded by --naive-time-limit
 *   serial  lanes=1, batch.max_messages=1, default in-flight budget, over
 *           the same prefix (one transaction per message without waiting
 *           for each result)
 *   db-limit the same orders inserted by multi-row INSERTs, large commits
 *   db-limit (fair) the request rows of the new batches with
 *           their 201 bodies, then the same orders, the same way
 * Each run gets its own input topic, produced from the same data just
 * before its worker starts (so the worker starts cold on a full topic and
 * latency means the same in every row), and a fresh database, group and
 * output topics. Prints a table and
 *   ratios: tuned/naive = X.XX (batches/s), tuned/db-limit = Y.YY (orders/s)
 *   ratios: tuned/db-limit = Z.ZZ (orders/s, fair: ...)
 *
 * --rate R: the tuned worker only, with the batches produced at R per
 *           second while it runs (latency under a given load). Latency is
 *           reported over every input and again without the inputs of the
 *           first --warmup seconds of load (the worker, the fresh tables and
 *           the new topic warming up), with the p99 of each 5 s of load and
 *           every input's latency in latency-rate.csv.
 * --sweep:  the worker over --lanes x --batches on --sweep-n batches,
 *           --repeat rounds (median per point); writes sweep.csv, sweep.dat
 *           and sweep.gp (gnuplot) in --out.
 *
 * --replay: decide N batches, then a cold worker in a new group reads the
 *           same topic against the same database, so that every input is a
 *           replay; checks that each replayed body is the first
 *           result's, byte for byte, with replayed: true, and prints
 *           ratios: replay/decide = X.XX (batches/s)
 *
 * --retry-storm: every batch sent three times within a second (blocks of
 *           STORM_BLOCK batches, each block sent three times in a row), with
 *           the retry cache on (the default cache.max_bytes) and off
 *           (cache.max_bytes=0); prints
 *           storm: cache on X batches/s, cache off Y batches/s, on/off = Z
 *
 * --eos:    the worker in each processing guarantee on the same data: first
 *           as fast as it goes over N batches (at-least-once, then
 *           exactly-once), then each at half the at-least-once maximum for
 *           --warmup + --eos-seconds (30) seconds, with latency measured to
 *           the moment a read_committed consumer tailing the results topic
 *           received the result (results of a transaction are visible only
 *           once it commits). --alo-env and --eo-env give each mode's
 *           worker variables (scripts/bench.sh --eos sets
 *           processing.guarantee); prints
 *           ratios: exactly-once/at-least-once = X.XX (batches/s)
 *           and the p99 of each mode at that rate.
 *
 * Every run appends its CPU per batch to cost.csv in --out: the worker's
 * (user + sys over its whole life, from wait4) and each --watch process's
 * from the worker's start until every input was done (scripts/bench-cost.sh
 * reads it).
 *
 * Exit status: 0 when every run completed without losing a message, 1 when
 * one did not, 2 for bad arguments or a setup failure. Timings are never
 * judged. scripts/bench.sh starts the services and runs this.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "ow/util.h"

#define MAX_GRID 16

typedef struct {
    bm_env env;
    bm_gen_opts gen;
    long naive_prefix; /* -1: min(N, 5000) */
    double naive_time_limit_s;
    int naive, serial, db_limit;
    int db_rows_per_stmt, db_rows_per_commit;
    int tuned_lanes, tuned_batch, tuned_inflight;
    double rate;
    int sweep;
    int replay;
    int storm;
    int eos;
    double eos_seconds;
    const char *alo_env[8], *eo_env[8];
    size_t n_alo_env, n_eo_env;
    int repeat;
    long sweep_n;
    int lanes[MAX_GRID], batches[MAX_GRID];
    size_t n_lanes, n_batches;
} options;

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* --- Options ------------------------------------------------------------------- */

static void usage(void)
{
    fputs("usage: ow-bench --bootstrap HOST:PORT --mysql-port P --worker BIN --out DIR\n"
          "  [--mysql-host H] [--mysql-user root] [--mysql-password PW]\n"
          "  data:    [-n N (100000)] [--seed S] [--retry PCT (10)] [--reuse PCT (1)]\n"
          "           [--clash PCT (1)] [--invalid PCT (0)] [--items-min A (1)] [--items-max B "
          "(20)]\n"
          "           [--items-mean M (5; 0 = uniform)] [--items-1000 (every batch 1000 items)]\n"
          "           [--partitions P (6)] [--first-number K (0): messages numbered from K+1]\n"
          "           [--random-keys (keys in random order, like UUIDs)]\n"
          "  runs:    [--naive-prefix K (min(N,5000))] [--naive-time-limit S (120)] [--no-naive]\n"
          "           [--no-serial] [--no-db-limit] [--db-rows-per-stmt R (1000)]\n"
          "           [--db-rows-per-commit R (10000)] [--tuned-lanes L] [--tuned-batch B]\n"
          "           [--tuned-inflight I] [--worker-env NAME=VALUE]...\n"
          "  modes:   [--rate R [--warmup S (10)]] | [--replay] | [--retry-storm]\n"
          "           | [--eos [--eos-seconds S (30)] [--alo-env NAME=VALUE]... [--eo-env "
          "NAME=VALUE]...]\n"
          "           | [--sweep [--sweep-n N (20000)] [--lanes 1,2,4,8]\n"
          "              [--batches 1,8,32,64,128] [--repeat K (1): K rounds, median per point]]\n"
          "  other:   [--database NAME (an existing migrated database, kept: --growth)]\n"
          "           [--stall-timeout S (120)] [--stop-timeout S (30)] [--keep-databases]\n"
          "           [--watch NAME=PID,...] (processes whose CPU time is reported)\n",
          stderr);
}

static int parse_long(const char *opt, const char *s, long min, long max, long *out)
{
    int64_t v;

    if (s == NULL || ow_parse_int64(s, &v) != 0 || v < min || v > max) {
        bm_log("%s: expected an integer in %ld..%ld, got '%s'", opt, min, max, s ? s : "");
        return -1;
    }
    *out = (long)v;
    return 0;
}

static int parse_int(const char *opt, const char *s, long min, long max, int *out)
{
    long v;

    if (parse_long(opt, s, min, max, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_double(const char *opt, const char *s, double min, double max, double *out)
{
    char *end = NULL;
    double v = s != NULL ? strtod(s, &end) : 0;

    if (s == NULL || end == s || *end != '\0' || v < min || v > max) {
        bm_log("%s: expected a number in %g..%g, got '%s'", opt, min, max, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

/* "1,2,4,8" into v; returns 0 or -1. */
static int parse_list(const char *opt, const char *s, int *v, size_t *n)
{
    char buf[256];
    char *save = NULL;

    *n = 0;
    if (s == NULL || strlen(s) >= sizeof(buf)) {
        bm_log("%s: expected a list such as 1,2,4,8", opt);
        return -1;
    }
    memcpy(buf, s, strlen(s) + 1);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_GRID || parse_int(opt, t, 1, 1000, &v[*n]) != 0)
            return -1;
        (*n)++;
    }
    return *n > 0 ? 0 : -1;
}

static void defaults(options *o)
{
    static const int lanes[] = {1, 2, 4, 8}, batches[] = {1, 8, 32, 64, 128};

    memset(o, 0, sizeof(*o));
    o->env.mysql_host = "127.0.0.1";
    o->env.mysql_root_user = "root";
    o->env.mysql_root_password = "";
    o->env.partitions = 6;
    o->env.stall_timeout_s = 120;
    o->env.stop_timeout_s = 30;
    o->env.warmup_s = 10;
    o->env.interrupted = &interrupted;
    o->gen = (bm_gen_opts){100000, 20261130, 10, 1, 1, 0, 1, 20, 5.0};
    o->naive_prefix = -1;
    o->naive_time_limit_s = 120;
    o->naive = o->serial = o->db_limit = 1;
    o->db_rows_per_stmt = 1000;
    o->db_rows_per_commit = 10000;
    o->sweep_n = 20000;
    o->repeat = 1;
    o->eos_seconds = 30;
    memcpy(o->lanes, lanes, sizeof(lanes));
    o->n_lanes = 4;
    memcpy(o->batches, batches, sizeof(batches));
    o->n_batches = 5;
}

/* Options without a value. Returns 1 when arg was one. */
static int parse_flag(options *o, const char *arg)
{
    if (strcmp(arg, "--no-naive") == 0)
        o->naive = 0;
    else if (strcmp(arg, "--no-serial") == 0)
        o->serial = 0;
    else if (strcmp(arg, "--no-db-limit") == 0)
        o->db_limit = 0;
    else if (strcmp(arg, "--sweep") == 0)
        o->sweep = 1;
    else if (strcmp(arg, "--replay") == 0)
        o->replay = 1;
    else if (strcmp(arg, "--retry-storm") == 0)
        o->storm = 1;
    else if (strcmp(arg, "--eos") == 0)
        o->eos = 1;
    else if (strcmp(arg, "--keep-databases") == 0)
        o->env.keep_databases = 1;
    else if (strcmp(arg, "--random-keys") == 0)
        o->gen.random_keys = 1;
    else if (strcmp(arg, "--items-1000") == 0) {
        o->gen.items_min = o->gen.items_max = 1000;
        o->gen.items_mean = 0;
    } else
        return 0;
    return 1;
}

static int parse_data_opt(options *o, const char *k, const char *v)
{
    bm_gen_opts *g = &o->gen;
    long seed;

    if (strcmp(k, "-n") == 0)
        return parse_long(k, v, 1, 100000000, &g->n);
    if (strcmp(k, "--seed") == 0) {
        if (parse_long(k, v, 1, 0x7fffffffL, &seed) != 0)
            return -1;
        g->seed = (uint64_t)seed;
        return 0;
    }
    if (strcmp(k, "--retry") == 0)
        return parse_int(k, v, 0, 100, &g->pct_retry);
    if (strcmp(k, "--reuse") == 0)
        return parse_int(k, v, 0, 100, &g->pct_reuse);
    if (strcmp(k, "--clash") == 0)
        return parse_int(k, v, 0, 100, &g->pct_clash);
    if (strcmp(k, "--invalid") == 0)
        return parse_int(k, v, 0, 100, &g->pct_invalid);
    if (strcmp(k, "--items-min") == 0)
        return parse_int(k, v, 1, 10000, &g->items_min);
    if (strcmp(k, "--items-max") == 0)
        return parse_int(k, v, 1, 10000, &g->items_max);
    if (strcmp(k, "--items-mean") == 0)
        return parse_double(k, v, 0, 10000, &g->items_mean);
    if (strcmp(k, "--first-number") == 0) {
        long first;

        if (parse_long(k, v, 0, 0x7fffffffffffL, &first) != 0)
            return -1;
        g->first = (uint64_t)first;
        return 0;
    }
    if (strcmp(k, "--partitions") == 0)
        return parse_int(k, v, 1, BM_MAX_PARTS, &o->env.partitions);
    return 1;
}

static int parse_run_opt(options *o, const char *k, const char *v)
{
    if (strcmp(k, "--naive-prefix") == 0)
        return parse_long(k, v, 1, 100000000, &o->naive_prefix);
    if (strcmp(k, "--naive-time-limit") == 0)
        return parse_double(k, v, 1, 86400, &o->naive_time_limit_s);
    if (strcmp(k, "--db-rows-per-stmt") == 0)
        return parse_int(k, v, 1, 10000, &o->db_rows_per_stmt);
    if (strcmp(k, "--db-rows-per-commit") == 0)
        return parse_int(k, v, 1, 10000000, &o->db_rows_per_commit);
    if (strcmp(k, "--tuned-lanes") == 0)
        return parse_int(k, v, 1, 64, &o->tuned_lanes);
    if (strcmp(k, "--tuned-batch") == 0)
        return parse_int(k, v, 1, 1000, &o->tuned_batch);
    if (strcmp(k, "--tuned-inflight") == 0)
        return parse_int(k, v, 1, 1000000, &o->tuned_inflight);
    if (strcmp(k, "--rate") == 0)
        return parse_double(k, v, 0.1, 1e7, &o->rate);
    if (strcmp(k, "--warmup") == 0)
        return parse_double(k, v, 0, 3600, &o->env.warmup_s);
    if (strcmp(k, "--sweep-n") == 0)
        return parse_long(k, v, 1, 100000000, &o->sweep_n);
    if (strcmp(k, "--repeat") == 0)
        return parse_int(k, v, 1, 20, &o->repeat);
    if (strcmp(k, "--eos-seconds") == 0)
        return parse_double(k, v, 5, 3600, &o->eos_seconds);
    if (strcmp(k, "--alo-env") == 0 || strcmp(k, "--eo-env") == 0) {
        int alo = k[2] == 'a';
        const char **list = alo ? o->alo_env : o->eo_env;
        size_t *n = alo ? &o->n_alo_env : &o->n_eo_env;

        if (strchr(v, '=') == NULL || strncmp(v, "ORDER_WORKER_", 13) != 0 || *n == 8) {
            bm_log("%s: expected ORDER_WORKER_NAME=value (at most 8), got '%s'", k, v);
            return -1;
        }
        list[(*n)++] = v;
        return 0;
    }
    if (strcmp(k, "--lanes") == 0)
        return parse_list(k, v, o->lanes, &o->n_lanes);
    if (strcmp(k, "--batches") == 0)
        return parse_list(k, v, o->batches, &o->n_batches);
    return 1;
}

static int parse_env_opt(options *o, const char *k, const char *v)
{
    bm_env *e = &o->env;
    long port;

    if (strcmp(k, "--bootstrap") == 0)
        e->bootstrap = v;
    else if (strcmp(k, "--mysql-host") == 0)
        e->mysql_host = v;
    else if (strcmp(k, "--mysql-port") == 0) {
        if (parse_long(k, v, 1, 65535, &port) != 0)
            return -1;
        e->mysql_port = (unsigned)port;
    } else if (strcmp(k, "--mysql-user") == 0)
        e->mysql_root_user = v;
    else if (strcmp(k, "--mysql-password") == 0)
        e->mysql_root_password = v;
    else if (strcmp(k, "--database") == 0) {
        e->database = v;
        e->preloaded = 1;
    } else if (strcmp(k, "--worker") == 0)
        e->worker_bin = v;
    else if (strcmp(k, "--out") == 0)
        e->out_dir = v;
    else if (strcmp(k, "--watch") == 0)
        e->watch = v;
    else if (strcmp(k, "--stall-timeout") == 0)
        return parse_int(k, v, 1, 86400, &e->stall_timeout_s);
    else if (strcmp(k, "--stop-timeout") == 0)
        return parse_int(k, v, 1, 3600, &e->stop_timeout_s);
    else if (strcmp(k, "--worker-env") == 0) {
        if (strchr(v, '=') == NULL || strncmp(v, "ORDER_WORKER_", 13) != 0 ||
            e->n_worker_env == BM_MAX_ENV / 2) {
            bm_log("--worker-env: expected ORDER_WORKER_NAME=value, got '%s'", v);
            return -1;
        }
        e->worker_env[e->n_worker_env++] = v;
    } else
        return 1;
    return 0;
}

static int check_options(const options *o)
{
    const bm_env *e = &o->env;
    const bm_gen_opts *g = &o->gen;

    if (e->bootstrap == NULL || e->mysql_port == 0 || e->worker_bin == NULL || e->out_dir == NULL) {
        bm_log("--bootstrap, --mysql-port, --worker and --out are required");
        return -1;
    }
    if (g->items_min > g->items_max ||
        (g->items_mean != 0 && (g->items_mean < g->items_min || g->items_mean > g->items_max))) {
        bm_log("items: need items-min <= items-mean <= items-max (mean 0 = uniform)");
        return -1;
    }
    if (g->pct_retry + g->pct_reuse + g->pct_clash + g->pct_invalid > 100) {
        bm_log("the percentages of retries, reuses, clashes and invalid add up to more than 100");
        return -1;
    }
    if (o->sweep + (o->rate > 0) + o->replay + o->storm + o->eos > 1) {
        bm_log("--sweep, --rate, --replay, --retry-storm and --eos are separate modes");
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        int rc;

        if (strcmp(k, "-h") == 0 || strcmp(k, "--help") == 0)
            return -1;
        if (parse_flag(o, k))
            continue;
        if (i + 1 >= argc) {
            bm_log("%s: unknown option or missing value", k);
            return -1;
        }
        rc = parse_env_opt(o, k, argv[i + 1]);
        if (rc == 1)
            rc = parse_data_opt(o, k, argv[i + 1]);
        if (rc == 1)
            rc = parse_run_opt(o, k, argv[i + 1]);
        if (rc != 0) {
            if (rc == 1)
                bm_log("unknown option %s", k);
            return -1;
        }
        i++;
    }
    return check_options(o);
}

/* --- Modes ------------------------------------------------------------------------ */

static void print_data(const bm_data *d, const options *o)
{
    const bm_gen_opts *g = &o->gen;

    printf("data: %zu order batches (new %ld, retry %ld, reused key %ld, clash %ld, invalid %ld), "
           "%lld orders (%.2f per batch; new batches %d..%d items, %s%.1f), %.1f MiB of values, "
           "seed %llu, %d partitions\n",
           d->n, d->kinds[KIT_NEW], d->kinds[KIT_RETRY], d->kinds[KIT_REUSE], d->kinds[KIT_CLASH],
           d->kinds[KIT_INVALID], d->items, d->n ? (double)d->items / (double)d->n : 0.0,
           g->items_min, g->items_max, g->items_mean != 0 ? "mean " : "uniform, mean ",
           g->items_mean != 0 ? g->items_mean : (g->items_min + g->items_max) / 2.0,
           (double)d->bytes / 1048576.0, (unsigned long long)g->seed, o->env.partitions);
}

static bm_spec spec(const char *name, int lanes, int batch, int inflight, double limit)
{
    bm_spec s;

    memset(&s, 0, sizeof(s));
    snprintf(s.name, sizeof(s.name), "%s", name);
    s.lanes = lanes;
    s.batch = batch;
    s.inflight = inflight;
    s.time_limit_s = limit;
    return s;
}

static void print_ratios(const bm_result *tuned, const bm_result *naive, const bm_dblimit *dbl)
{
    double r1 =
        naive != NULL && naive->batches_per_s > 0 ? tuned->batches_per_s / naive->batches_per_s : 0;
    double r2 = dbl != NULL && dbl->rows_per_s > 0 ? tuned->orders_per_s / dbl->rows_per_s : 0;

    printf("ratios: tuned/naive = %.2f (batches/s), tuned/db-limit = %.2f (orders/s)\n", r1, r2);
}

static void print_notes(const options *o, const bm_result *runs, size_t n, size_t prefix)
{
    printf("notes: rates are measured between a run's first and last result (see 'timing');\n"
           "       latency is input CreateTime -> first result LogAppendTime; each run's topic is\n"
           "       filled just before its worker starts, so latency includes the time a batch\n"
           "       waited in that backlog (use --rate for latency under a given load).\n");
    if (o->naive || o->serial)
        printf("       naive and serial ran on the first %zu batches of the same data%s.\n", prefix,
               o->naive ? "; naive is bounded by --naive-time-limit" : "");
    for (size_t i = 0; i < n; i++) {
        if (runs[i].time_bounded)
            printf("       %s: stopped at its %.0f s limit after %zu of %zu batches; compare "
                   "rates, not totals.\n",
                   runs[i].name, o->naive_time_limit_s, runs[i].done, runs[i].inputs);
    }
}

static int run_one(const options *o, const bm_spec *s, const bm_data *d, size_t count, bm_result *r)
{
    int rc = bm_run(&o->env, s, d, count, r);

    bm_report_details(stdout, r);
    bm_report_cost(o->env.out_dir, r);
    /* For scripts/bench.sh --verify: what ow-verify needs to find the run. */
    if (rc == 0 && r->complete && o->env.keep_databases)
        printf("run-names: %s %s %s %s %s %s\n", r->name, r->database, r->group, r->input,
               r->results, r->dlq);
    fflush(stdout);
    return rc;
}

static void run_db_limit(const options *o, const bm_data *d, int fair, bm_dblimit *dbl, int *rc)
{
    if (bm_db_limit(&o->env, d, o->db_rows_per_stmt, o->db_rows_per_commit, fair, dbl) != 0)
        *rc = 1;
    if (fair)
        printf("  db-limit (fair): %zu request rows with their 201 bodies (%.1f MiB), then %zu "
               "order rows, in %.2f s over one connection, %d rows per INSERT, COMMIT every %d "
               "rows\n    cpu during the inserts: %s\n",
               dbl->request_rows, dbl->request_mib, dbl->rows, dbl->seconds, dbl->rows_per_stmt,
               dbl->rows_per_commit, dbl->cpu_note);
    else
        printf("  db-limit: %zu order rows (those of the new batches) in %.2f s over one "
               "connection, %d rows per INSERT, COMMIT every %d rows\n    cpu during the "
               "inserts: %s\n",
               dbl->rows, dbl->seconds, dbl->rows_per_stmt, dbl->rows_per_commit, dbl->cpu_note);
}

static int mode_compare(const options *o, const bm_data *d)
{
    size_t prefix = o->naive_prefix > 0 ? (size_t)o->naive_prefix : (d->n < 5000 ? d->n : 5000);
    bm_result runs[3];
    bm_dblimit dbl = {0}, fair = {0};
    size_t n = 0;
    int rc = 0;
    bm_spec s;
    char path[600];

    memset(runs, 0, sizeof(runs));
    s = spec("tuned", o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
    rc |= run_one(o, &s, d, d->n, &runs[n++]);
    if (o->naive && !interrupted) {
        s = spec("naive", 1, 1, 1, o->naive_time_limit_s);
        rc |= run_one(o, &s, d, prefix, &runs[n++]);
    }
    if (o->serial && !interrupted) {
        s = spec("serial", 1, 1, 0, 0);
        rc |= run_one(o, &s, d, prefix, &runs[n++]);
    }
    if (o->db_limit && !interrupted)
        run_db_limit(o, d, 0, &dbl, &rc);
    if (o->db_limit && !interrupted)
        run_db_limit(o, d, 1, &fair, &rc);
    putchar('\n');
    bm_report_table(stdout, runs, n, o->db_limit ? &dbl : NULL);
    if (o->db_limit)
        printf("db-limit (fair): %.1f order rows/s, with a request row and its body per new "
               "batch\n",
               fair.rows_per_s);
    print_ratios(&runs[0], o->naive ? &runs[1] : NULL, o->db_limit ? &dbl : NULL);
    if (o->db_limit)
        printf("ratios: tuned/db-limit = %.2f (orders/s, fair: the same request rows with bodies "
               "and order rows)\n",
               fair.rows_per_s > 0 ? runs[0].orders_per_s / fair.rows_per_s : 0.0);
    print_notes(o, runs, n, prefix);
    snprintf(path, sizeof(path), "%s/runs.csv", o->env.out_dir);
    bm_report_csv(path, runs, n);
    return rc != 0 ? 1 : 0;
}

static int mode_rate(const options *o, const bm_data *d)
{
    bm_result r;
    bm_spec s = spec("rate", o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
    options ro = *o;
    int rc;

    s.rate = o->rate;
    ro.env.latency_csv = 1;
    rc = run_one(&ro, &s, d, d->n, &r);
    putchar('\n');
    bm_report_table(stdout, &r, 1, NULL);
    printf("rate mode: %zu batches produced at %.1f/s while the worker ran; latency is input "
           "CreateTime -> first result LogAppendTime\n",
           d->n, o->rate);
    if (o->env.warmup_s > 0) {
        printf("latency after a %.0f s warm-up: %zu inputs, p50/p95/p99 %.0f / %.0f / %.0f ms, "
               "p99.9 %.0f ms\n",
               o->env.warmup_s, r.steady_n, r.steady_p50_ms, r.steady_p95_ms, r.steady_p99_ms,
               r.steady_p999_ms);
        printf("p99 ms per 5 s of load:");
        for (int i = 0; i < r.n_p99_by_5s; i++)
            printf(" %.0f", r.p99_by_5s[i]);
        putchar('\n');
    }
    printf("every input's latency: %s/latency-rate.csv\n", o->env.out_dir);
    return rc != 0 ? 1 : 0;
}

/* Every replayed body against the first result of its input. */
static int check_replay(const bm_result *first, const bm_result *again, size_t n)
{
    size_t same = 0, replayed = 0, differ = 0, missing = 0, not_marked = 0, reused = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned a = first->body_flags[i], b = again->body_flags[i];

        if (!(a & BM_BODY_SEEN) || !(b & BM_BODY_SEEN)) {
            missing += (a & BM_BODY_SEEN) != (b & BM_BODY_SEEN);
            continue;
        }
        if (memcmp(first->body_sha[i], again->body_sha[i], 32) != 0) {
            differ++;
            continue;
        }
        same++;
        if (BM_BODY_CODE(b) == BM_CODE_REPLAYED)
            replayed++;
        else if (BM_BODY_CODE(b) == BM_CODE_REUSED)
            reused++; /* nothing stored to replay: the same 409 again, replayed: false */
        else
            not_marked++;
    }
    printf("replay check: %zu inputs; %zu bodies byte-identical to the first result (%zu with "
           "replayed: true, %zu IDEMPOTENCY_KEY_REUSED, which store nothing), %zu differ, "
           "%zu without replayed: true, %zu missing\n",
           n, same, replayed, reused, differ, not_marked, missing);
    return differ == 0 && not_marked == 0 && missing == 0 ? 0 : 1;
}

static int run_on_topic(const bm_env *e, const bm_spec *s, bm_topic *in, bm_result *r)
{
    int rc = bm_run_topic(e, s, in, r);

    bm_report_details(stdout, r);
    bm_report_cost(e->out_dir, r);
    fflush(stdout);
    return rc;
}

static int mode_replay(const options *o, const bm_data *d)
{
    bm_env e = o->env;
    bm_result runs[2];
    bm_topic in;
    bm_spec s;
    char db[128];
    int rc;

    memset(runs, 0, sizeof(runs));
    memset(&in, 0, sizeof(in));
    snprintf(db, sizeof(db), "owb_%s_replay", e.run_id);
    e.database = db;
    rc = bm_db_create(&e, db) != 0 || bm_topic_init(&in, &e, "replay", d, d->n) != 0 ||
         bm_topic_produce(&in, &e, 0) != 0;
    if (rc == 0) {
        s = spec("decide", o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
        s.capture_bodies = 1;
        rc |= run_on_topic(&e, &s, &in, &runs[0]) != 0;
    }
    if (rc == 0 && !interrupted) {
        s = spec("replay", o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
        s.capture_bodies = 1;
        rc |= run_on_topic(&e, &s, &in, &runs[1]) != 0;
    }
    if (rc == 0 && !interrupted) {
        putchar('\n');
        bm_report_table(stdout, runs, 2, NULL);
        rc |= check_replay(&runs[0], &runs[1], in.count);
        printf("ratios: replay/decide = %.2f (batches/s)\n",
               runs[0].batches_per_s > 0 ? runs[1].batches_per_s / runs[0].batches_per_s : 0.0);
    }
    for (int i = 0; i < 2; i++) {
        free(runs[i].body_sha);
        free(runs[i].body_flags);
    }
    if (!o->env.keep_databases)
        bm_db_drop(&e, db);
    bm_topic_cleanup(&in);
    return rc != 0 ? 1 : 0;
}

/* A block of batches, then the same block twice more: at the worker's
 * rates (5,000-15,000 batches/s) each copy follows its original within
 * 0.1-0.3 s. */
#define STORM_BLOCK 1000

/* d's messages, each block sent three times; shares d's strings. */
static void storm_data(const bm_data *d, bm_data *s)
{
    size_t k = 0;

    *s = *d;
    s->v = bm_xcalloc(3 * d->n + 1, sizeof(*s->v));
    for (size_t b = 0; b < d->n; b += STORM_BLOCK) {
        size_t end = b + STORM_BLOCK < d->n ? b + STORM_BLOCK : d->n;

        for (int copy = 0; copy < 3; copy++)
            for (size_t i = b; i < end; i++) {
                s->v[k] = d->v[i];
                if (copy > 0)
                    s->v[k].kind = KIT_RETRY;
                k++;
            }
    }
    s->n = k;
    s->items = 3 * d->items;
    s->bytes = 3 * d->bytes;
}

static int mode_storm(const options *o, const bm_data *d)
{
    static const char *off[] = {"ORDER_WORKER_CACHE_MAX_BYTES=0"};
    bm_data s;
    bm_result runs[2];
    bm_spec sp;
    int rc = 0;

    memset(runs, 0, sizeof(runs));
    storm_data(d, &s);
    printf("storm: %zu messages, each of %zu batches three times (blocks of %d)\n", s.n, d->n,
           STORM_BLOCK);
    sp = spec("cache-on", o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
    rc |= run_one(o, &sp, &s, s.n, &runs[0]);
    if (!interrupted) {
        sp = spec("cache-off", o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
        sp.env[sp.n_env++] = off[0];
        rc |= run_one(o, &sp, &s, s.n, &runs[1]);
    }
    if (rc == 0 && !interrupted) {
        putchar('\n');
        bm_report_table(stdout, runs, 2, NULL);
        printf("storm: cache on %.0f batches/s, cache off %.0f batches/s, on/off = %.2f\n",
               runs[0].batches_per_s, runs[1].batches_per_s,
               runs[1].batches_per_s > 0 ? runs[0].batches_per_s / runs[1].batches_per_s : 0.0);
    }
    free(s.v);
    return rc != 0 ? 1 : 0;
}

/* A run of --eos: one mode's worker variables, at a rate or not. */
static bm_spec eos_spec(const options *o, const char *name, int alo, double rate)
{
    bm_spec s = spec(name, o->tuned_lanes, o->tuned_batch, o->tuned_inflight, 0);
    size_t n = alo ? o->n_alo_env : o->n_eo_env;

    for (size_t i = 0; i < n; i++)
        s.env[s.n_env++] = alo ? o->alo_env[i] : o->eo_env[i];
    s.rate = rate;
    s.visible_latency = rate > 0;
    return s;
}

static void eos_report(const options *o, const bm_result *runs, double half)
{
    putchar('\n');
    bm_report_table(stdout, runs, 4, NULL);
    printf("ratios: exactly-once/at-least-once = %.2f (batches/s)\n",
           runs[0].batches_per_s > 0 ? runs[1].batches_per_s / runs[0].batches_per_s : 0.0);
    printf("latency at %.0f batches/s (half the at-least-once maximum), input CreateTime to the "
           "result reaching a read_committed consumer, without the first %.0f s: at-least-once "
           "p50/p99 %.0f / %.0f ms, exactly-once p50/p99 %.0f / %.0f ms\n",
           half, o->env.warmup_s, runs[2].steady_p50_ms, runs[2].steady_p99_ms,
           runs[3].steady_p50_ms, runs[3].steady_p99_ms);
    printf("worker variables: at-least-once:");
    for (size_t i = 0; i < o->n_alo_env; i++)
        printf(" %s", o->alo_env[i]);
    printf("; exactly-once:");
    for (size_t i = 0; i < o->n_eo_env; i++)
        printf(" %s", o->eo_env[i]);
    putchar('\n');
}

static int mode_eos(const options *o, const bm_data *d)
{
    bm_result runs[4];
    options ro = *o;
    bm_spec s;
    double half = 0;
    size_t count;
    int rc = 0;

    memset(runs, 0, sizeof(runs));
    ro.env.latency_csv = 1;
    s = eos_spec(o, "alo-max", 1, 0);
    rc |= run_one(o, &s, d, d->n, &runs[0]);
    if (rc == 0 && !interrupted) {
        s = eos_spec(o, "eo-max", 0, 0);
        rc |= run_one(o, &s, d, d->n, &runs[1]);
    }
    half = runs[0].batches_per_s / 2;
    count = (size_t)(half * (o->env.warmup_s + o->eos_seconds));
    if (count > d->n)
        count = d->n;
    if (rc == 0 && !interrupted && half > 0) {
        s = eos_spec(o, "alo-half", 1, half);
        rc |= run_one(&ro, &s, d, count, &runs[2]);
    }
    if (rc == 0 && !interrupted && half > 0) {
        s = eos_spec(o, "eo-half", 0, half);
        rc |= run_one(&ro, &s, d, count, &runs[3]);
    }
    if (rc == 0 && !interrupted)
        eos_report(o, runs, half);
    for (int i = 0; i < 4; i++)
        free(runs[i].visible_ms);
    return rc != 0 ? 1 : 0;
}

static int cmp_bps(const void *a, const void *b)
{
    double x = (*(const bm_result *const *)a)->batches_per_s;
    double y = (*(const bm_result *const *)b)->batches_per_s;

    return (x > y) - (x < y);
}

/* Per grid point, the run with the median batches/s, with the spread. */
static void medians(const bm_result *all, size_t points, int repeats, bm_result *med)
{
    const bm_result **v = bm_xcalloc((size_t)repeats, sizeof(*v));

    for (size_t p = 0; p < points; p++) {
        for (int k = 0; k < repeats; k++)
            v[k] = &all[(size_t)k * points + p];
        qsort(v, (size_t)repeats, sizeof(*v), cmp_bps);
        med[p] = *v[(repeats - 1) / 2];
        med[p].bps_min = v[0]->batches_per_s;
        med[p].bps_max = v[repeats - 1]->batches_per_s;
        med[p].repeats = repeats;
        snprintf(med[p].name, sizeof(med[p].name), "l%d-b%d", med[p].lanes, med[p].batch);
    }
    free(v);
}

/* The grid, --repeat times in rounds (so that a burst of load on a shared
 * machine hits one run of many points rather than every run of one). */
static int mode_sweep(const options *o, const bm_data *d)
{
    size_t points = o->n_lanes * o->n_batches, n = 0;
    bm_result *all = bm_xcalloc(points * (size_t)o->repeat, sizeof(*all));
    bm_result *med = bm_xcalloc(points, sizeof(*med));
    int rc = 0;

    for (int k = 0; k < o->repeat && !interrupted; k++) {
        for (size_t b = 0; b < o->n_batches && !interrupted; b++) {
            for (size_t l = 0; l < o->n_lanes && !interrupted; l++) {
                char name[BM_NAME_MAX];
                bm_spec s;

                snprintf(name, sizeof(name), o->repeat > 1 ? "l%d-b%d-r%d" : "l%d-b%d", o->lanes[l],
                         o->batches[b], k + 1);
                s = spec(name, o->lanes[l], o->batches[b], o->tuned_inflight, 0);
                rc |= run_one(o, &s, d, d->n, &all[n++]);
            }
        }
    }
    if (n == points * (size_t)o->repeat) {
        medians(all, points, o->repeat, med);
        putchar('\n');
        if (o->repeat > 1)
            bm_report_spread(stdout, all, points, o->repeat);
        bm_report_table(stdout, med, points, NULL);
        rc |= bm_report_sweep(o->env.out_dir, med, points, o->batches, o->n_batches);
        printf("sweep: %s/sweep.csv (%s), sweep.dat, sweep.gp\n", o->env.out_dir,
               o->repeat > 1 ? "the median run of each point" : "one run per point");
    }
    free(all);
    free(med);
    return rc != 0 ? 1 : 0;
}

static void install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv)
{
    options o;
    bm_data d;
    int rc;

    if (parse_args(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    install_signals();
    /* Before anything grows: workers are started from this small helper. */
    if (bm_launcher_start() != 0)
        return 2;
    snprintf(o.env.run_id, sizeof(o.env.run_id), "%lx%x", (unsigned long)time(NULL) & 0xfffff,
             (unsigned)getpid() & 0xfff);
    if (o.sweep)
        o.gen.n = o.sweep_n;
    if (bm_db_worker_user(&o.env) != 0 || bm_data_generate(&o.gen, &d) != 0)
        return 2;
    if (bm_kafka_warmup(&o.env, 60) != 0)
        bm_log("the broker's group coordinator did not answer within 60 s; going on");
    print_data(&d, &o);
    fflush(stdout);
    if (o.rate > 0)
        rc = mode_rate(&o, &d);
    else if (o.sweep)
        rc = mode_sweep(&o, &d);
    else if (o.replay)
        rc = mode_replay(&o, &d);
    else if (o.storm)
        rc = mode_storm(&o, &d);
    else if (o.eos)
        rc = mode_eos(&o, &d);
    else
        rc = mode_compare(&o, &d);
    bm_data_free(&d);
    if (interrupted) {
        bm_log("interrupted");
        rc = 1;
    }
    return rc;
}
