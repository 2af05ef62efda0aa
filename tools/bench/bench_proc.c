/* Processes, /proc sampling and the progress line. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* posix_spawn: safe in a parent with librdkafka threads. stdout and stderr
 * go to log_path (appended); stdin is /dev/null. */
pid_t bm_spawn(char *const argv[], const char *const env[], size_t n_env, const char *log_path)
{
    posix_spawn_file_actions_t fa;
    char **envp = kit_env_merge(env, n_env);
    pid_t pid = -1;
    int rc;

    if (envp == NULL) {
        bm_log("cannot start %s: out of memory", argv[0]);
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (rc != 0) {
        bm_log("cannot start %s: %s", argv[0], strerror(rc));
        return -1;
    }
    return pid;
}

int bm_wait_quiet(pid_t pid, int timeout_s)
{
    return kit_wait(pid, timeout_s * 1000);
}

/* Reads a small /proc file into buf; returns its length or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

long bm_proc_status_kib(pid_t pid, const char *field)
{
    char path[64], buf[4096];
    const char *p;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (read_small(path, buf, sizeof(buf)) < 0)
        return -1;
    p = strstr(buf, field);
    return p != NULL ? strtol(p + strlen(field), NULL, 10) : -1;
}

long bm_proc_rss_kib(pid_t pid)
{
    return bm_proc_status_kib(pid, "VmRSS:");
}

double bm_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    const char *p;
    unsigned long long ut = 0, st = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (read_small(path, buf, sizeof(buf)) < 0)
        return -1;
    p = strrchr(buf, ')'); /* the command name may hold spaces */
    /* After ")": state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime (fields 3..15 of proc(5)). */
    if (p == NULL ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void machine_jiffies(bm_cpu_sample *s)
{
    char buf[1024];
    unsigned long long v[8] = {0};

    s->busy = s->iowait = s->total = 0;
    if (read_small("/proc/stat", buf, sizeof(buf)) < 0 ||
        sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) != 8)
        return;
    /* user nice system idle iowait irq softirq steal */
    s->busy = v[0] + v[1] + v[2] + v[5] + v[6];
    s->iowait = v[4];
    s->total = s->busy + v[3] + v[4] + v[7];
}

/* e->watch is "name=pid,name=pid". */
static void parse_watch(const bm_env *e, bm_cpu_sample *s)
{
    const char *p = e->watch;

    s->n_watched = 0;
    while (p != NULL && *p != '\0' && s->n_watched < 8) {
        const char *eq = strchr(p, '=');
        const char *comma = strchr(p, ',');
        size_t len;

        if (eq == NULL || (comma != NULL && comma < eq))
            break;
        len =
            (size_t)(eq - p) < sizeof(s->names[0]) - 1 ? (size_t)(eq - p) : sizeof(s->names[0]) - 1;
        memcpy(s->names[s->n_watched], p, len);
        s->names[s->n_watched][len] = '\0';
        s->pids[s->n_watched] = (pid_t)strtol(eq + 1, NULL, 10);
        s->n_watched++;
        p = comma != NULL ? comma + 1 : NULL;
    }
}

void bm_cpu_sample_take(const bm_env *e, pid_t worker, bm_cpu_sample *s)
{
    memset(s, 0, sizeof(*s));
    s->t = bm_now();
    machine_jiffies(s);
    s->worker = worker > 0 ? bm_proc_cpu_s(worker) : -1;
    s->self = bm_proc_cpu_s(getpid());
    parse_watch(e, s);
    for (int i = 0; i < s->n_watched; i++)
        s->watched[i] = bm_proc_cpu_s(s->pids[i]);
}

static size_t add_share(char *out, size_t outsz, size_t n, const char *name, double a, double b,
                        double dt)
{
    int w;

    if (n >= outsz || a < 0 || b < 0)
        return n;
    w = snprintf(out + n, outsz - n, ", %s %.2f s (%.0f%% of a core)", name, b - a,
                 dt > 0 ? 100.0 * (b - a) / dt : 0.0);
    return w > 0 ? n + (size_t)w : n;
}

/* CPU seconds used between two samples by everything this run accounts for. */
static double ours(const bm_cpu_sample *a, const bm_cpu_sample *b)
{
    double sum = 0;

    if (a->worker >= 0 && b->worker >= 0)
        sum += b->worker - a->worker;
    for (int i = 0; i < a->n_watched && i < b->n_watched; i++) {
        if (a->watched[i] >= 0 && b->watched[i] >= 0)
            sum += b->watched[i] - a->watched[i];
    }
    return sum + (b->self - a->self);
}

/* "machine 87% busy of 2 cores, iowait 0%, worker 4.15 s (34% of a core),
 * ..., other processes ~0.9 cores": the last figure is the machine's busy
 * time minus what the run's own processes used, i.e. other tenants. */
double bm_cpu_describe(const bm_cpu_sample *a, const bm_cpu_sample *b, char *out, size_t outsz)
{
    double dt = b->t - a->t;
    unsigned long long total = b->total - a->total;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double busy = total > 0 ? (double)(b->busy - a->busy) / (double)total : 0.0;
    int w =
        snprintf(out, outsz, "machine %.0f%% busy of %ld cores, iowait %.0f%%", 100.0 * busy, ncpu,
                 total > 0 ? 100.0 * (double)(b->iowait - a->iowait) / (double)total : 0.0);
    size_t n = w > 0 ? (size_t)w : 0;
    double others = dt > 0 ? busy * (double)ncpu - ours(a, b) / dt : 0.0;

    if (a->worker >= 0)
        n = add_share(out, outsz, n, "worker", a->worker, b->worker, dt);
    for (int i = 0; i < a->n_watched && i < b->n_watched; i++)
        n = add_share(out, outsz, n, a->names[i], a->watched[i], b->watched[i], dt);
    n = add_share(out, outsz, n, "ow-bench", a->self, b->self, dt);
    others = others > 0 ? others : 0.0;
    if (n < outsz)
        snprintf(out + n, outsz - n, ", other processes ~%.2f cores", others);
    return others;
}

/* --- Progress ------------------------------------------------------------------ */

void bm_progress_init(bm_progress *p, const char *name)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->t0 = p->last_t = bm_now();
    p->tty = isatty(2);
}

/* A line on stderr: rewritten in place every second on a terminal, else a
 * new line every 5 s. */
void bm_progress_update(bm_progress *p, size_t done, size_t total, long rss_kib, int force)
{
    double now = bm_now();
    double every = p->tty ? 1.0 : 5.0;
    double el = now - p->t0;
    double recent;

    if (!force && now - p->last_print < every)
        return;
    recent = now > p->last_t ? (double)(done - p->last_done) / (now - p->last_t) : 0.0;
    fprintf(stderr,
            "%s[%s] %6.1f s  committed %zu/%zu (%5.1f%%)  %.0f msg/s (mean %.0f)  rss %.1f MiB%s",
            p->tty ? "\r" : "", p->name, el, done, total,
            total > 0 ? 100.0 * (double)done / (double)total : 0.0, recent,
            el > 0 ? (double)done / el : 0.0, rss_kib > 0 ? (double)rss_kib / 1024.0 : 0.0,
            p->tty ? "   " : "\n");
    fflush(stderr);
    p->last_print = now;
    p->last_t = now;
    p->last_done = done;
    p->printed = 1;
}

void bm_progress_end(bm_progress *p)
{
    if (p->tty && p->printed)
        fputc('\n', stderr);
}
