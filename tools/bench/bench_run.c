/*
 * One worker run: a fresh database, group and output topics; the built
 * `order-worker run` as a child process configured by ORDER_WORKER_*
 * variables; a watch on the group's committed offsets until every input is
 * done; then SIGTERM, wait4() for the CPU time and peak RSS, and one read of
 * the results topic.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define POLL_MS 200
#define CHECK_EVERY_S 0.5

/* --- The worker's environment ----------------------------------------------- */

typedef struct {
    char buf[24][512];
    const char *v[24 + 2 * BM_MAX_ENV];
    size_t n_buf, n;
} envlist;

static void env_add(envlist *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void env_add(envlist *l, const char *fmt, ...)
{
    va_list ap;

    if (l->n_buf >= sizeof(l->buf) / sizeof(l->buf[0]))
        return;
    va_start(ap, fmt);
    vsnprintf(l->buf[l->n_buf], sizeof(l->buf[0]), fmt, ap);
    va_end(ap);
    l->v[l->n++] = l->buf[l->n_buf++];
}

static void worker_env(const bm_env *e, const bm_spec *s, const bm_topic *in, const bm_result *r,
                       envlist *l)
{
    env_add(l, "ORDER_WORKER_KAFKA_BOOTSTRAP_SERVERS=%s", e->bootstrap);
    env_add(l, "ORDER_WORKER_KAFKA_GROUP_ID=%s", r->group);
    env_add(l, "ORDER_WORKER_TOPIC_INPUT=%s", in->name);
    env_add(l, "ORDER_WORKER_TOPIC_RESULTS=%s", r->results);
    env_add(l, "ORDER_WORKER_TOPIC_DLQ=%s", r->dlq);
    env_add(l, "ORDER_WORKER_MYSQL_HOST=%s", e->mysql_host);
    env_add(l, "ORDER_WORKER_MYSQL_PORT=%u", e->mysql_port);
    env_add(l, "ORDER_WORKER_MYSQL_USER=%s", e->worker_user);
    env_add(l, "ORDER_WORKER_MYSQL_PASSWORD=");
    env_add(l, "ORDER_WORKER_MYSQL_PASSWORD_FILE=%s", e->password_file);
    env_add(l, "ORDER_WORKER_MYSQL_DATABASE=%s", r->database);
    if (s->lanes > 0)
        env_add(l, "ORDER_WORKER_WORKER_LANES=%d", s->lanes);
    if (s->batch > 0)
        env_add(l, "ORDER_WORKER_BATCH_MAX_MESSAGES=%d", s->batch);
    if (s->inflight > 0)
        env_add(l, "ORDER_WORKER_INFLIGHT_MAX_MESSAGES=%d", s->inflight);
    for (size_t i = 0; i < e->n_worker_env; i++)
        l->v[l->n++] = e->worker_env[i];
    for (size_t i = 0; i < s->n_env; i++)
        l->v[l->n++] = s->env[i];
}

/* --- Watching the group ---------------------------------------------------------- */

typedef struct {
    rd_kafka_t *meta;  /* watermarks, group state */
    rd_kafka_t *group; /* a consumer of the worker's group that never joins it */
    rd_kafka_topic_partition_list_t *parts;
} watcher;

rd_kafka_t *bm_kafka_client(const bm_env *e, rd_kafka_type_t type, const char *group)
{
    char errstr[256];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    rd_kafka_t *rk;

    rd_kafka_conf_set(c, "bootstrap.servers", e->bootstrap, errstr, sizeof(errstr));
    rd_kafka_conf_set(c, "log_level", "3", errstr, sizeof(errstr));
    if (group != NULL) {
        rd_kafka_conf_set(c, "group.id", group, errstr, sizeof(errstr));
        rd_kafka_conf_set(c, "enable.auto.commit", "false", errstr, sizeof(errstr));
    }
    rk = rd_kafka_new(type, c, errstr, sizeof(errstr));
    if (rk == NULL) {
        bm_log("kafka client: %s", errstr);
        rd_kafka_conf_destroy(c);
    }
    return rk;
}

static int watcher_init(watcher *w, const bm_env *e, const bm_topic *in, const char *group)
{
    memset(w, 0, sizeof(*w));
    w->meta = bm_kafka_client(e, RD_KAFKA_PRODUCER, NULL);
    w->group = bm_kafka_client(e, RD_KAFKA_CONSUMER, group);
    w->parts = rd_kafka_topic_partition_list_new(in->partitions);
    for (int p = 0; p < in->partitions; p++)
        rd_kafka_topic_partition_list_add(w->parts, in->name, p);
    return w->meta != NULL && w->group != NULL ? 0 : -1;
}

static void watcher_cleanup(watcher *w)
{
    if (w->parts != NULL)
        rd_kafka_topic_partition_list_destroy(w->parts);
    if (w->group != NULL)
        rd_kafka_destroy(w->group);
    if (w->meta != NULL)
        rd_kafka_destroy(w->meta);
    memset(w, 0, sizeof(*w));
}

/* Sum of the group's committed offsets (nothing committed counts as 0);
 * -1 when the broker did not answer. */
static long long committed_sum(watcher *w, int64_t *per_part)
{
    long long sum = 0;

    if (rd_kafka_committed(w->group, w->parts, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return -1;
    for (int i = 0; i < w->parts->cnt; i++) {
        int64_t off = w->parts->elems[i].offset;

        per_part[i] = off > 0 ? off : 0;
        sum += per_part[i];
    }
    return sum;
}

/* Messages in a topic (sum of high watermarks; topics here start at 0). */
static long long topic_count(watcher *w, const char *topic, int partitions)
{
    long long sum = 0;

    for (int p = 0; p < partitions; p++) {
        int64_t lo = 0, hi = 0;

        if (rd_kafka_query_watermark_offsets(w->meta, topic, p, &lo, &hi, 5000) !=
            RD_KAFKA_RESP_ERR_NO_ERROR)
            return -1;
        sum += hi;
    }
    return sum;
}

/* Waits until the group is Stable (the worker got its partitions). */
static int wait_group_stable(watcher *w, const char *group, int (*dead)(void *), void *arg,
                             int timeout_s)
{
    double deadline = bm_now() + timeout_s;

    while (bm_now() < deadline) {
        const struct rd_kafka_group_list *gl = NULL;
        int stable = 0;

        if (rd_kafka_list_groups(w->meta, group, &gl, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            stable = gl->group_cnt == 1 && gl->groups[0].state != NULL &&
                     strcmp(gl->groups[0].state, "Stable") == 0 && gl->groups[0].member_cnt > 0;
            rd_kafka_group_list_destroy(gl);
        }
        if (stable)
            return 0;
        if (dead(arg))
            return -1;
        nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
    }
    return -1;
}

/* The first idempotent producer on a fresh broker waits for the
 * transaction coordinator to load: let a throwaway message pay for it. */
static int warm_idempotence(const bm_env *e, double deadline)
{
    char topic[96];
    rd_kafka_t *p = kit_producer(e->bootstrap, NULL);
    int left = (int)((deadline - bm_now()) * 1000);
    int rc = p != NULL ? 0 : -1;

    snprintf(topic, sizeof(topic), "owb-%s-warmup", e->run_id);
    if (rc == 0)
        rc = kit_produce(p, topic, 0, "warmup", 6, "{}", 2);
    if (rc == 0)
        rc = kit_flush(p, left > 1000 ? left : 1000) == 0 ? 0 : -1;
    if (p != NULL)
        rd_kafka_destroy(p);
    return rc;
}

int bm_kafka_warmup(const bm_env *e, int timeout_s)
{
    char group[96];
    rd_kafka_t *rk;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    double deadline = bm_now() + timeout_s;
    int rc = -1;

    snprintf(group, sizeof(group), "owb-%s-warmup", e->run_id);
    rk = bm_kafka_client(e, RD_KAFKA_CONSUMER, group);
    rd_kafka_topic_partition_list_add(l, "owb-warmup", 0);
    while (rk != NULL && rc != 0 && bm_now() < deadline && !*e->interrupted)
        rc = rd_kafka_committed(rk, l, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
    rd_kafka_topic_partition_list_destroy(l);
    if (rk != NULL)
        rd_kafka_destroy(rk);
    return rc == 0 ? warm_idempotence(e, deadline) : rc;
}

/* Counts the worker's retries, warnings and errors (its log is JSON lines). */
static void scan_log(const bm_env *e, bm_result *r)
{
    char path[600], line[2048];
    long retries = 0, deadlocks = 0, lock_waits = 0, warns = 0, errors = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/worker-%s.log", e->out_dir, r->name);
    f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        int retry = strstr(line, "\"event\":\"db_retry\"") != NULL;

        retries += retry;
        deadlocks += retry && strstr(line, "\"code\":1213") != NULL;
        lock_waits += retry && strstr(line, "\"code\":1205") != NULL;
        warns += strstr(line, "\"level\":\"warn\"") != NULL && !retry;
        errors += strstr(line, "\"level\":\"error\"") != NULL;
    }
    fclose(f);
    snprintf(r->log_note, sizeof(r->log_note),
             "%ld db_retry (%ld deadlock 1213, %ld lock wait 1205), %ld other warnings, %ld errors",
             retries, deadlocks, lock_waits, warns, errors);
}

/* --- Producing while the worker runs (--rate) ------------------------------------------ */

typedef struct {
    bm_topic *in;
    const bm_env *e;
    double rate;
    int rc;
} producer_job;

static void *producer_main(void *arg)
{
    producer_job *j = arg;

    j->rc = bm_topic_produce(j->in, j->e, j->rate);
    return NULL;
}

/* --- The run --------------------------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int exited;
    int status;
    struct rusage ru;
} child;

/* Non-blocking check; returns 1 once the child has exited (rusage kept). */
static int child_exited(child *c)
{
    if (!c->exited && c->pid > 0 && bm_launcher_poll(c->pid, &c->status, &c->ru))
        c->exited = 1;
    return c->exited;
}

/* SIGTERM, then up to timeout_s for a clean exit; SIGKILL after that.
 * Samples the child's VmHWM meanwhile (shutdown may allocate too). */
static int stop_child(child *c, int timeout_s, long *hwm_kib)
{
    double deadline = bm_now() + timeout_s;
    int hung = 0;

    if (c->exited)
        return 0;
    kill(c->pid, SIGTERM);
    while (!child_exited(c)) {
        long hwm = bm_proc_status_kib(c->pid, "VmHWM:");

        if (hwm > *hwm_kib)
            *hwm_kib = hwm;
        if (!hung && bm_now() > deadline) {
            hung = 1;
            kill(c->pid, SIGKILL);
        }
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    }
    return hung;
}

typedef struct {
    long long committed;
    int64_t per_part[BM_MAX_PARTS];
    int done, failed;
    double t_done_wall;
    bm_tail *tail;      /* with bm_spec.visible_latency */
    bm_db_counters db0; /* the server's counters at the worker's start */
} watch_state;

/* Whether the outputs are all there: a result per keyed input and a
 * dead-letter copy per invalid one (counted by watermarks, not by reading). */
static int outputs_complete(watcher *w, const bm_topic *in, const bm_result *r)
{
    long long keyed = 0, invalid = 0;

    for (size_t i = 0; i < in->count; i++) {
        keyed += in->data->v[i].key != NULL;
        invalid += in->data->v[i].kind == KIT_INVALID;
    }
    return topic_count(w, r->results, in->partitions) >= keyed &&
           (invalid == 0 || topic_count(w, r->dlq, 1) >= invalid);
}

static int watch_step(const bm_env *e, const bm_spec *s, watcher *w, const bm_topic *in,
                      bm_result *r, watch_state *ws, double t_spawn, double *t_progress)
{
    long long c = committed_sum(w, ws->per_part);

    if (c > ws->committed) {
        ws->committed = c;
        *t_progress = bm_now();
    }
    if (ws->committed >= (long long)in->count && outputs_complete(w, in, r)) {
        ws->done = 1;
        r->complete = 1;
    } else if (s->time_limit_s > 0 && bm_now() - t_spawn > s->time_limit_s) {
        ws->done = 1;
        r->time_bounded = 1;
    } else if (bm_now() - *t_progress > e->stall_timeout_s) {
        bm_log("%s: nothing committed for %d s (%lld of %zu); giving up", r->name,
               e->stall_timeout_s, ws->committed, in->count);
        ws->failed = 1;
    }
    return ws->done || ws->failed;
}

/* The worker's RSS as the run passes each quarter (memory growth shows
 * as a rise from quarter to quarter, not just a high peak). */
static void note_rss(const bm_topic *in, const child *ch, const watch_state *ws, bm_result *r)
{
    for (int q = 0; q < 4; q++) {
        if (r->rss_at_kib[q] == 0 && ws->committed * 4 >= (long long)in->count * (q + 1))
            r->rss_at_kib[q] = bm_proc_rss_kib(ch->pid);
    }
}

static void watch(const bm_env *e, const bm_spec *s, watcher *w, const bm_topic *in, child *ch,
                  bm_result *r, watch_state *ws)
{
    bm_progress pr;
    double t_spawn = bm_now(), t_check = 0, t_progress = t_spawn;

    bm_progress_init(&pr, r->name);
    while (!ws->done && !ws->failed) {
        if (*e->interrupted) {
            ws->failed = 1;
            break;
        }
        if (child_exited(ch)) {
            bm_log("%s: the worker exited early with status %d", r->name, ch->status);
            ws->failed = 1;
            break;
        }
        if (bm_now() - t_check >= CHECK_EVERY_S) {
            t_check = bm_now();
            int end = watch_step(e, s, w, in, r, ws, t_spawn, &t_progress);

            note_rss(in, ch, ws, r);
            if (end)
                break;
            bm_progress_update(&pr, (size_t)ws->committed, in->count, bm_proc_rss_kib(ch->pid), 0);
        }
        nanosleep(&(struct timespec){0, POLL_MS * 1000000L}, NULL);
    }
    ws->t_done_wall = bm_wall();
    bm_progress_update(&pr, (size_t)ws->committed, in->count, bm_proc_rss_kib(ch->pid), 1);
    bm_progress_end(&pr);
}

/* A knob's value for the log ("default" when unset); three buffers. */
static const char *knob_text(int v, int slot)
{
    static char buf[3][16];

    if (v <= 0)
        return "default";
    snprintf(buf[slot], sizeof(buf[slot]), "%d", v);
    return buf[slot];
}

static void names(const bm_env *e, const bm_spec *s, bm_result *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", s->name);
    r->lanes = s->lanes;
    r->batch = s->batch;
    r->inflight = s->inflight;
    if (e->database != NULL)
        snprintf(r->database, sizeof(r->database), "%s", e->database);
    else
        snprintf(r->database, sizeof(r->database), "owb_%s_%.40s", e->run_id, s->name);
    for (char *p = r->database; *p != '\0'; p++)
        if (*p == '-')
            *p = '_';
    snprintf(r->group, sizeof(r->group), "owb-%s-%.40s", e->run_id, s->name);
    snprintf(r->results, sizeof(r->results), "owb-%s-%.40s-results", e->run_id, s->name);
    snprintf(r->dlq, sizeof(r->dlq), "owb-%s-%.40s-dlq", e->run_id, s->name);
    r->worker_status = -1;
}

static int prepare(const bm_env *e, const bm_topic *in, bm_result *r)
{
    if ((e->database != NULL ? bm_db_grant(e, r->database) : bm_db_create(e, r->database)) != 0)
        return -1;
    /* The broker stamps each result as it appends it, so a latency also
     * counts the worker's linger.ms and its produce round trip, which a
     * CreateTime (set when the worker hands the result to librdkafka)
     * leaves out. */
    if (kit_create_topic_with(e->bootstrap, r->results, in->partitions, "message.timestamp.type",
                              "LogAppendTime") != 0 ||
        kit_create_topic(e->bootstrap, r->dlq, 1) != 0) {
        bm_log("%s: cannot create the output topics", r->name);
        return -1;
    }
    return 0;
}

static pid_t spawn_worker(const bm_env *e, const bm_spec *s, const bm_topic *in, bm_result *r)
{
    envlist *l = bm_xcalloc(1, sizeof(*l));
    char log[600];
    char *argv[] = {(char *)(uintptr_t)e->worker_bin, "run", NULL};
    pid_t pid;

    worker_env(e, s, in, r, l);
    snprintf(log, sizeof(log), "%s/worker-%s.log", e->out_dir, r->name);
    pid = bm_launcher_spawn(argv, l->v, l->n, log);
    free(l);
    return pid;
}

/* Starts producing once the worker owns its partitions (--rate). */
static int child_dead(void *arg)
{
    return child_exited(arg);
}

static int start_producer(const bm_env *e, const bm_spec *s, watcher *w, bm_topic *in,
                          const bm_result *r, child *ch, producer_job *job, pthread_t *th)
{
    if (wait_group_stable(w, r->group, child_dead, ch, 60) != 0) {
        bm_log("%s: the worker did not join its group within 60 s", r->name);
        return -1;
    }
    job->in = in;
    job->e = e;
    job->rate = s->rate;
    job->rc = -1;
    if (pthread_create(th, NULL, producer_main, job) != 0) {
        bm_log("cannot start the producer thread");
        return -1;
    }
    return 0;
}

/* Each watched process's CPU seconds between the two samples. */
static void watched_cpu(const bm_cpu_sample *a, const bm_cpu_sample *b, bm_result *r)
{
    r->n_watched = a->n_watched < b->n_watched ? a->n_watched : b->n_watched;
    for (int i = 0; i < r->n_watched; i++) {
        snprintf(r->watched_name[i], sizeof(r->watched_name[i]), "%s", a->names[i]);
        r->watched_cpu_s[i] =
            a->watched[i] >= 0 && b->watched[i] >= 0 ? b->watched[i] - a->watched[i] : -1;
    }
}

/* The server's statements, commits and redo since the worker's start. */
static void db_work(const bm_env *e, const bm_db_counters *a, bm_result *r)
{
    bm_db_counters b;

    r->db_statements = r->db_commits = r->db_redo_bytes = -1;
    if (!a->ok || bm_db_counters_read(e, &b) != 0)
        return;
    r->db_statements = b.statements - a->statements;
    r->db_commits = b.commits - a->commits;
    r->db_redo_bytes = b.redo_bytes - a->redo_bytes;
}

/* After the watch: CPU and memory, stop, and the verdict on the outputs. */
static int finish(const bm_env *e, const bm_topic *in, child *ch, watch_state *ws,
                  double spawn_wall, const bm_cpu_sample *c0, bm_result *r)
{
    bm_cpu_sample c1;

    bm_cpu_sample_take(e, ch->pid, &c1);
    r->other_cores = bm_cpu_describe(c0, &c1, r->cpu_note, sizeof(r->cpu_note));
    watched_cpu(c0, &c1, r);
    db_work(e, &ws->db0, r);
    r->rss_end_kib = bm_proc_rss_kib(ch->pid);
    r->hwm_kib = bm_proc_status_kib(ch->pid, "VmHWM:");
    r->stop_s = bm_now();
    r->stop_hung = stop_child(ch, e->stop_timeout_s, &r->hwm_kib);
    r->stop_s = bm_now() - r->stop_s;
    r->worker_status = ch->status;
    scan_log(e, r);
    r->cpu_s = (double)(ch->ru.ru_utime.tv_sec + ch->ru.ru_stime.tv_sec) +
               (double)(ch->ru.ru_utime.tv_usec + ch->ru.ru_stime.tv_usec) / 1e6;
    r->rss_peak_kib = ch->ru.ru_maxrss;
    r->wall_s = ws->t_done_wall - spawn_wall;
    if (r->stop_hung)
        bm_log("%s: the worker did not exit within %d s of SIGTERM (killed)", r->name,
               e->stop_timeout_s);
    if (ws->tail != NULL) {
        /* Until the tail has seen nothing new for a second: the last
         * commit may come with the worker's stop. */
        r->visible_ms = bm_tail_stop(ws->tail, 1000, 15000);
        ws->tail = NULL;
    }
    if (ws->failed)
        return -1;
    if (bm_results_read(e, in, ws->per_part, r) != 0)
        return -1;
    if (r->visible_missed > 0)
        bm_log("%s: the tail missed %zu results (left out of the latency)", r->name,
               r->visible_missed);
    if (r->done > 0) {
        r->startup_s = r->first_result_wall - spawn_wall;
        r->tail_s = r->complete ? ws->t_done_wall - r->last_result_wall : 0.0;
    }
    if (r->lost > 0) {
        bm_log("%s: %zu committed inputs have no result", r->name, r->lost);
        return -1;
    }
    return 0;
}

/* Spawns the worker and watches it until done; fills ch, ws and c0. */
static void run_worker(const bm_env *e, const bm_spec *s, bm_topic *in, bm_result *r, child *ch,
                       watch_state *ws, bm_cpu_sample *c0, double *spawn_wall)
{
    watcher w;
    producer_job job;
    pthread_t th;
    int producing = 0;

    if (watcher_init(&w, e, in, r->group) != 0) {
        watcher_cleanup(&w);
        ws->failed = 1;
        return;
    }
    if (s->visible_latency) {
        ws->tail = bm_tail_start(e, in, r->results);
        if (ws->tail == NULL) {
            bm_log("%s: cannot start the results tail", r->name);
            watcher_cleanup(&w);
            ws->failed = 1;
            return;
        }
    }
    *spawn_wall = bm_wall();
    ch->pid = spawn_worker(e, s, in, r);
    ws->failed = ch->pid <= 0;
    if (!ws->failed) {
        bm_cpu_sample_take(e, ch->pid, c0);
        bm_db_counters_read(e, &ws->db0);
        if (s->rate > 0) {
            producing = start_producer(e, s, &w, in, r, ch, &job, &th) == 0;
            ws->failed = !producing;
        }
    }
    if (!ws->failed)
        watch(e, s, &w, in, ch, r, ws);
    if (producing) {
        __atomic_store_n(&in->stop, ws->failed, __ATOMIC_RELAXED);
        pthread_join(th, NULL);
        ws->failed |= job.rc != 0;
    }
    watcher_cleanup(&w);
}

/* The run after its names, database and output topics are ready. */
static int run_prepared(const bm_env *e, const bm_spec *s, bm_topic *in, bm_result *r)
{
    watch_state ws;
    child ch;
    double spawn_wall = 0;
    bm_cpu_sample c0;
    long long entries0;
    int rc;

    memset(&ws, 0, sizeof(ws));
    memset(&ch, 0, sizeof(ch));
    memset(&c0, 0, sizeof(c0));
    bm_log("%s: lanes=%s batch.max_messages=%s inflight.max_messages=%s, %zu batches%s", r->name,
           knob_text(s->lanes, 0), knob_text(s->batch, 1), knob_text(s->inflight, 2), in->count,
           s->rate > 0 ? " produced while it runs" : " in its topic before it starts");
    /* Counted while nothing runs, so that the counting is not in the CPU
     * the run measures; a preloaded database's millions of rows are not
     * counted. */
    entries0 = !e->preloaded ? bm_db_index_entries(e, r->database) : -1;

    run_worker(e, s, in, r, &ch, &ws, &c0, &spawn_wall);
    rc = ch.pid > 0 ? finish(e, in, &ch, &ws, spawn_wall, &c0, r) : -1;
    r->db_index_entries = -1;
    if (entries0 >= 0 && ch.pid > 0) {
        long long entries1 = bm_db_index_entries(e, r->database);

        r->db_index_entries = entries1 >= 0 ? entries1 - entries0 : -1;
    }
    if (ws.tail != NULL)
        free(bm_tail_stop(ws.tail, 0, 0));
    if (!e->keep_databases && e->database == NULL)
        bm_db_drop(e, r->database);
    return rc;
}

static void start_result(const bm_spec *s, const bm_topic *in, bm_result *r)
{
    r->capture = s->capture_bodies;
    r->inputs = in->count;
    snprintf(r->input, sizeof(r->input), "%s", in->name);
}

int bm_run_topic(const bm_env *e, const bm_spec *s, bm_topic *in, bm_result *r)
{
    names(e, s, r);
    start_result(s, in, r);
    if (prepare(e, in, r) != 0)
        return -1;
    return run_prepared(e, s, in, r);
}

int bm_run(const bm_env *e, const bm_spec *s, const bm_data *d, size_t count, bm_result *r)
{
    bm_topic in;
    int rc;

    names(e, s, r);
    rc = bm_topic_init(&in, e, s->name, d, count);
    start_result(s, &in, r);
    if (rc == 0)
        rc = prepare(e, &in, r);
    if (rc == 0 && s->rate <= 0)
        rc = bm_topic_produce(&in, e, 0);
    if (rc == 0)
        rc = run_prepared(e, s, &in, r);
    bm_topic_cleanup(&in);
    return rc;
}
