/* The printed table, the per-run details, the CSV files and the sweep plot. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MIB(kib) ((double)(kib) / 1024.0)

static const char *knob(int v, char *buf, size_t size)
{
    if (v > 0)
        snprintf(buf, size, "%d", v);
    else
        snprintf(buf, size, "dflt");
    return buf;
}

static void table_rule(FILE *out)
{
    fputs("+----------------+-------+-------+--------+----------+------------+------------+"
          "---------------------------+---------+----------+\n",
          out);
}

void bm_report_table(FILE *out, const bm_result *r, size_t n, const bm_dblimit *dbl)
{
    char a[16], b[16], c[16];

    table_rule(out);
    fprintf(out, "| %-14s | %5s | %5s | %6s | %8s | %10s | %10s | %25s | %7s | %8s |\n", "config",
            "lanes", "batch", "inflt", "batches", "batches/s", "orders/s", "latency p50/p95/p99 ms",
            "CPU s", "RSS MiB");
    table_rule(out);
    for (size_t i = 0; i < n; i++) {
        char lat[40];

        snprintf(lat, sizeof(lat), "%.0f / %.0f / %.0f", r[i].p50_ms, r[i].p95_ms, r[i].p99_ms);
        fprintf(out,
                "| %-14s | %5s | %5s | %6s | %8zu | %10.1f | %10.1f | %25s | %7.2f | %8.1f |\n",
                r[i].name, knob(r[i].lanes, a, sizeof(a)), knob(r[i].batch, b, sizeof(b)),
                knob(r[i].inflight, c, sizeof(c)), r[i].done, r[i].batches_per_s, r[i].orders_per_s,
                lat, r[i].cpu_s, MIB(r[i].rss_peak_kib));
    }
    if (dbl != NULL && dbl->rows > 0)
        fprintf(out, "| %-14s | %5s | %5s | %6s | %8s | %10s | %10.1f | %25s | %7s | %8s |\n",
                "db-limit", "1", "-", "-", "-", "-", dbl->rows_per_s, "-", "-", "-");
    table_rule(out);
}

static void codes_line(FILE *out, const bm_result *r)
{
    fprintf(out,
            "    results: %ld messages: created %ld, replayed %ld, order conflict %ld, key reused "
            "%ld, invalid %ld, in progress %ld, other %ld\n",
            r->results_total, r->codes[BM_CODE_CREATED], r->codes[BM_CODE_REPLAYED],
            r->codes[BM_CODE_CONFLICT], r->codes[BM_CODE_REUSED], r->codes[BM_CODE_INVALID],
            r->codes[BM_CODE_IN_PROGRESS], r->codes[BM_CODE_OTHER]);
}

void bm_report_details(FILE *out, const bm_result *r)
{
    char unkeyed[64] = "";

    if (r->unkeyed > 0)
        snprintf(unkeyed, sizeof(unkeyed), " (%zu without a key: dead letter only)", r->unkeyed);
    fprintf(out, "  %s: %zu of %zu inputs have a result%s%s; worker exit %d%s\n", r->name, r->done,
            r->inputs, unkeyed,
            r->complete ? ", all offsets committed"
            : r->time_bounded
                ? " (stopped at its time limit: the rate is measured on what was done)"
                : " (INCOMPLETE)",
            r->worker_status, r->stop_hung ? " (hung on SIGTERM, killed)" : "");
    fprintf(out,
            "    timing: startup %.2f s (spawn to first result), window %.2f s (first to last "
            "result), tail %.2f s (last result to all committed), wall %.2f s\n",
            r->startup_s, r->window_s, r->tail_s, r->wall_s);
    fprintf(out,
            "    latency max %.0f ms; longest pause between results %.0f ms at %.2f s into the "
            "window; %ld pauses over 250 ms\n",
            r->max_ms, r->gap_ms, r->gap_at_s, r->gaps_over_250ms);
    char q[4][16];

    for (int i = 0; i < 4; i++) {
        if (r->rss_at_kib[i] > 0)
            snprintf(q[i], sizeof(q[i]), "%.1f", MIB(r->rss_at_kib[i]));
        else
            snprintf(q[i], sizeof(q[i]), "-");
    }
    fprintf(
        out,
        "    memory: peak RSS %.1f MiB (ru_maxrss; VmHWM last seen %.1f MiB); RSS at 25/50/75/100 "
        "%% committed %s / %s / %s / %s MiB, before SIGTERM %.1f MiB\n",
        MIB(r->rss_peak_kib), MIB(r->hwm_kib), q[0], q[1], q[2], q[3], MIB(r->rss_end_kib));
    fprintf(out, "    cpu: %.2f s user+sys (wait4), %.2f ms per batch; SIGTERM to exit %.2f s\n",
            r->cpu_s, r->done > 0 ? 1000.0 * r->cpu_s / (double)r->done : 0.0, r->stop_s);
    fprintf(out, "    cpu during the run: %s\n", r->cpu_note);
    fprintf(out, "    worker log: %s\n", r->log_note);
    codes_line(out, r);
    fprintf(out, "    names: database %s, group %s, results %s\n", r->database, r->group,
            r->results);
}

static void csv_row(FILE *f, const bm_result *r, int with_name)
{
    if (with_name)
        fprintf(f, "%s,", r->name);
    fprintf(f, "%d,%d,%zu,%.2f,%.2f,%.1f,%.1f,%.1f,%.2f,%.1f\n", r->lanes, r->batch, r->done,
            r->batches_per_s, r->orders_per_s, r->p50_ms, r->p95_ms, r->p99_ms, r->cpu_s,
            MIB(r->rss_peak_kib));
}

static const char csv_header[] = "lanes,batch_max_messages,batches,batches_per_s,orders_per_s,p50_"
                                 "ms,p95_ms,p99_ms,cpu_s,rss_mib\n";

int bm_report_csv(const char *path, const bm_result *r, size_t n)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        bm_log("cannot write %s", path);
        return -1;
    }
    fprintf(f, "config,%s", csv_header);
    for (size_t i = 0; i < n; i++)
        csv_row(f, &r[i], 1);
    return fclose(f) == 0 ? 0 : -1;
}

static void cost_row(FILE *f, const bm_result *r, const char *process, double cpu_s)
{
    double per = r->done > 0 && cpu_s >= 0 ? 1e6 * cpu_s / (double)r->done : -1;

    fprintf(f, "%s,%zu,%s,%.6f,%.1f\n", r->name, r->done, process, cpu_s, per);
}

/* The server's work in the run, in dbwork.csv beside cost.csv: totals,
 * -1 when unknown (scripts/bench-cost.sh divides them by the batches). */
static int report_db_work(const char *dir, const bm_result *r)
{
    char path[600];
    FILE *f;

    snprintf(path, sizeof(path), "%s/dbwork.csv", dir);
    f = fopen(path, "a");
    if (f == NULL) {
        bm_log("cannot write %s", path);
        return -1;
    }
    if (ftell(f) == 0)
        fputs("run,batches,statements,commits,redo_bytes,index_entries\n", f);
    fprintf(f, "%s,%zu,%lld,%lld,%lld,%lld\n", r->name, r->done, r->db_statements, r->db_commits,
            r->db_redo_bytes, r->db_index_entries);
    return fclose(f) == 0 ? 0 : -1;
}

int bm_report_cost(const char *dir, const bm_result *r)
{
    char path[600];
    FILE *f;

    snprintf(path, sizeof(path), "%s/cost.csv", dir);
    f = fopen(path, "a");
    if (f == NULL) {
        bm_log("cannot write %s", path);
        return -1;
    }
    if (ftell(f) == 0)
        fputs("run,batches,process,cpu_s,us_per_batch\n", f);
    cost_row(f, r, "worker", r->cpu_s);
    for (int i = 0; i < r->n_watched; i++)
        cost_row(f, r, r->watched_name[i], r->watched_cpu_s[i]);
    if (fclose(f) != 0)
        return -1;
    return report_db_work(dir, r);
}

/* gnuplot data: one block per batch size (lanes, batches/s), for `index`. */
static int write_dat(const char *path, const bm_result *r, size_t n, const int *batches,
                     size_t n_batches)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    for (size_t b = 0; b < n_batches; b++) {
        fprintf(f,
                "# batch.max_messages=%d\n"
                "# lanes batches_per_s(median) min max orders_per_s p99_ms\n",
                batches[b]);
        for (size_t i = 0; i < n; i++) {
            if (r[i].batch == batches[b])
                fprintf(f, "%d %.2f %.2f %.2f %.2f %.1f\n", r[i].lanes, r[i].batches_per_s,
                        r[i].bps_min, r[i].bps_max, r[i].orders_per_s, r[i].p99_ms);
        }
        fputs("\n\n", f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static int write_gp(const char *path, const char *dir, const bm_result *r, const int *batches,
                    size_t n_batches)
{
    int reps = r->repeats > 1 ? r->repeats : 1;
    char what[96];
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    if (reps > 1)
        snprintf(what, sizeof(what), "median of %d runs, bars min-max", reps);
    else
        snprintf(what, sizeof(what), "one run each");
    fprintf(f,
            "# Written by ow-bench: gnuplot %s\n"
            "set terminal pngcairo noenhanced size 960,600 font 'sans,11'\n"
            "set output '%s/sweep.png'\n"
            "set title 'order-worker throughput by worker.lanes and batch.max_messages "
            "(%zu batches, %s)'\n"
            "set xlabel 'worker.lanes (database connections)'\n"
            "set ylabel 'order batches per second'\n"
            "set logscale x 2\nset xtics (1,2,4,8,16,32,64)\n"
            "set yrange [0:*]\nset grid\nset key outside right top title 'batch.max_messages'\n"
            "set label 'a shared machine: compare shapes and ratios, not absolute values' "
            "at screen 0.5, screen 0.02 center font 'sans,9'\n"
            "set bmargin 5\nset offsets graph 0.05, graph 0.05, 0, 0\n"
            "set linetype 1 lc rgb '#7b3294'\nset linetype 2 lc rgb '#008837'\n"
            "set linetype 3 lc rgb '#0571b0'\nset linetype 4 lc rgb '#e66101'\n"
            "set linetype 5 lc rgb '#404040'\nset linetype 6 lc rgb '#ca0020'\n"
            "set linetype 7 lc rgb '#8c510a'\nset linetype 8 lc rgb '#01665e'\n"
            "set linetype cycle 8\n"
            "plot for [i=0:%zu] '%s/sweep.dat' index i using 1:2%s lw 2 pt 7 "
            "title word('",
            path, dir, r->inputs, what, n_batches - 1, dir,
            reps > 1 ? ":3:4 with yerrorlines" : " with linespoints");
    for (size_t b = 0; b < n_batches; b++)
        fprintf(f, "%s%d", b ? " " : "", batches[b]);
    fputs("', i+1)\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

int bm_report_sweep(const char *dir, const bm_result *r, size_t n, const int *batches,
                    size_t n_batches)
{
    char path[600];
    FILE *f;
    int rc;

    snprintf(path, sizeof(path), "%s/sweep.csv", dir);
    f = fopen(path, "w");
    if (f == NULL) {
        bm_log("cannot write %s", path);
        return -1;
    }
    fputs(csv_header, f);
    for (size_t i = 0; i < n; i++)
        csv_row(f, &r[i], 0);
    rc = fclose(f) == 0 ? 0 : -1;
    snprintf(path, sizeof(path), "%s/sweep.dat", dir);
    if (rc == 0)
        rc = write_dat(path, r, n, batches, n_batches);
    snprintf(path, sizeof(path), "%s/sweep.gp", dir);
    if (rc == 0 && n > 0)
        rc = write_gp(path, dir, &r[0], batches, n_batches);
    if (rc != 0)
        bm_log("cannot write the sweep files in %s", dir);
    return rc;
}

void bm_report_spread(FILE *out, const bm_result *all, size_t points, int repeats)
{
    for (size_t p = 0; p < points; p++) {
        fprintf(out, "  l%d-b%-5d batches/s", all[p].lanes, all[p].batch);
        for (int k = 0; k < repeats; k++) {
            const bm_result *r = &all[(size_t)k * points + p];

            fprintf(out, "%s %.0f (others ~%.1f cores)", k ? " /" : "", r->batches_per_s,
                    r->other_cores);
        }
        fputc('\n', out);
    }
}
