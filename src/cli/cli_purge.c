/* order-worker purge: retention of request records, in bounded batches. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "archive.h"
#include "ow/store_purge.h"
#include "cli.h"

#define PURGE_ATTEMPTS 10 /* tries of one batch before giving up */

void ow_help_purge(void)
{
    puts("usage: order-worker purge --older-than DURATION [--batch N] [--max-rate R]\n"
         "                          [--archive DIR] [--workers-cache-ttl S] [--dry-run]\n"
         "                          [--config FILE]\n"
         "\n"
         "Deletes the request records (idempotency_requests) created more than\n"
         "DURATION ago: 30d, 12h, 90m or 3600s. The cutoff is computed once, from the\n"
         "database's clock, when the command starts. Orders are kept: their\n"
         "request_id becomes NULL, which means \"the request that created it expired\".\n"
         "After a record is purged its key is forgotten: a redelivered message with\n"
         "that key is decided again as a new request.\n"
         "\n"
         "A worker's retry cache answers a retry from memory for up to its\n"
         "cache.ttl_s after the record was created, so DURATION must be longer than\n"
         "the longest cache.ttl_s of the workers on this database, or a retry could\n"
         "be answered for a record lookup no longer finds. purge cannot read the\n"
         "workers' settings: it assumes 86400 s (the key's maximum), so DURATION must\n"
         "exceed a day, unless --workers-cache-ttl states their longest cache.ttl_s.\n"
         "\n"
         "Works in chunks of N records (default 1000, at most 100000), oldest first,\n"
         "walking the creation-time index from where the last chunk ended. A chunk is\n"
         "one short transaction that locks only its own rows (records, and their\n"
         "orders when archiving) from its read to its commit, so a worker deciding\n"
         "beside it waits at most one chunk's transaction, and only when it touches\n"
         "one of those records or their orders (a late retry); a second purge waits\n"
         "for the chunk and then skips the records it deleted. A purge can be\n"
         "interrupted (SIGINT or SIGTERM stops it between chunks) or killed, and run\n"
         "again: it continues with the oldest records left. A chunk that fails with a\n"
         "transient error (deadlock, lock wait timeout, lost connection) is retried\n"
         "whole with backoff, up to 10 times. Progress goes to stderr, the summary to\n"
         "stdout. The database user needs SELECT and DELETE on idempotency_requests\n"
         "and SELECT, UPDATE on orders.\n"
         "\n"
         "  --max-rate R   delete at most R records per second (default: no limit)\n"
         "  --archive DIR  while a chunk is locked and before it is deleted, write its\n"
         "                 records with their orders' ids and numbers to\n"
         "                 DIR/requests-<first id>-<last id>.jsonl.gz (gzip, one JSON\n"
         "                 object per line), fsync it and rename it into place. A crash\n"
         "                 between that and the commit archives the chunk again on the\n"
         "                 next run: a record may be in the archive twice (each copy\n"
         "                 complete), never deleted without being in it.\n"
         "                 `order-worker lookup --archive DIR` reads it back.\n"
         "  --workers-cache-ttl S\n"
         "                 the longest cache.ttl_s (seconds, 1 to 86400) of the workers\n"
         "                 that use this database; refused when shorter than this\n"
         "                 configuration's own cache.ttl_s\n"
         "  --dry-run      only count the records that would be deleted\n"
         "\n"
         "With mysql.shards set, each shard is purged in turn (same cutoff rule, its\n"
         "own clock), each report under a line naming the shard.\n"
         "\n"
         "Exit status: 0 done, 1 database error or interrupted, 2 bad arguments or\n"
         "configuration.");
}

typedef struct {
    ow_store *s;
    const ow_config *cfg;
    const volatile sig_atomic_t *stop;
    ow_timestamp cutoff;
    char cutoff_text[OW_TIMESTAMP_TEXT_MAX];
    size_t batch;
    int64_t max_rate;    /* records per second; 0: no limit */
    const char *archive; /* NULL: no archive */
    int64_t workers_ttl; /* --workers-cache-ttl, or 0 when not given */
    int64_t estimate;    /* old records counted at the start */
    int64_t deleted;
    int64_t detached;
    int64_t started_us;
    char archive_err[OW_ARCHIVE_ERR_MAX];
    ow_purge_pos pos;
    ow_purge_chunk chunk;
    int tty;
    uint64_t seed;
} purge_run;

static int purge_args(int argc, char **argv, int64_t *older_than, purge_run *p)
{
    static const char *const known[] = {
        "--config",   "--older-than",        "--batch", "--max-rate", "--archive",
        "--dry-run!", "--workers-cache-ttl", NULL};
    const char *v;
    const char *why = NULL;
    int64_t n = OW_PURGE_BATCH_DEFAULT;

    if (ow_cli_args(argc, argv, known, "purge", NULL, 0) < 0)
        return OW_EXIT_USAGE;
    v = ow_cli_required(argc, argv, "--older-than", "purge");
    if (v == NULL)
        return OW_EXIT_USAGE;
    if (ow_duration_parse(v, older_than, &why) != OW_OK) {
        fprintf(stderr, "order-worker purge: --older-than: \"%s\" %s\n", v, why);
        return OW_EXIT_USAGE;
    }
    v = ow_cli_opt(argc, argv, "--batch");
    if (v != NULL && (ow_parse_int64(v, &n) != OW_OK || n < 1 || n > OW_PURGE_BATCH_MAX)) {
        fprintf(stderr,
                "order-worker purge: --batch: must be an integer from 1 to %d, got \"%s\"\n",
                OW_PURGE_BATCH_MAX, v);
        return OW_EXIT_USAGE;
    }
    p->batch = (size_t)n;
    v = ow_cli_opt(argc, argv, "--max-rate");
    if (v != NULL && (ow_parse_int64(v, &p->max_rate) != OW_OK || p->max_rate < 1)) {
        fprintf(stderr,
                "order-worker purge: --max-rate: must be a positive integer (records per "
                "second), got \"%s\"\n",
                v);
        return OW_EXIT_USAGE;
    }
    v = ow_cli_opt(argc, argv, "--workers-cache-ttl");
    if (v != NULL && ow_cli_int_range("purge", "--workers-cache-ttl", v, 1, OW_CACHE_TTL_MAX_S,
                                      " (seconds, as cache.ttl_s)", &p->workers_ttl) != OW_EXIT_OK)
        return OW_EXIT_USAGE;
    p->archive = ow_cli_opt(argc, argv, "--archive");
    if (p->archive != NULL && ow_archive_check_dir(p->archive, p->archive_err) != 0) {
        fprintf(stderr, "order-worker purge: %s\n", p->archive_err);
        return OW_EXIT_USAGE;
    }
    return OW_EXIT_OK;
}

static void progress(purge_run *p)
{
    fprintf(stderr, "purge: deleted %lld of ~%lld records...%s", (long long)p->deleted,
            (long long)p->estimate, p->tty ? "\r" : "\n");
    fflush(stderr);
}

/* One chunk in one transaction: lock its records (and, when archiving,
 * their orders), write the archive file while the locks are held, then
 * detach, delete and commit. A record is therefore deleted by the
 * transaction that archived it with its orders, and never before the file
 * holding it is durable. */
static int chunk_once(purge_run *p, ow_purge_batch *b, ow_error *err)
{
    int rc = ow_store_purge_lock(p->s, &p->cutoff, &p->pos, p->batch, p->archive != NULL, &p->chunk,
                                 err);

    if (rc != OW_OK)
        return rc;
    if (p->archive != NULL && ow_archive_write(p->archive, &p->chunk, p->archive_err) != 0) {
        ow_store_purge_abort(p->s);
        return ow_error_set(err, OW_ERRCLASS_FATAL, 0, "%s; this chunk was not deleted",
                            p->archive_err);
    }
    return ow_store_purge_delete(p->s, &p->chunk, &p->pos, b, err);
}

/* A chunk, retried whole with backoff while its errors are transient: a
 * retry locks the chunk again and rewrites its file, since a record
 * another purge deleted meanwhile is no longer in it. */
static int retried(purge_run *p, ow_purge_batch *b, ow_error *err)
{
    for (unsigned attempt = 0;; attempt++) {
        int64_t delay;
        int rc = chunk_once(p, b, err);

        if (rc == OW_OK || err->cls != OW_ERRCLASS_RETRIABLE || attempt + 1 >= PURGE_ATTEMPTS)
            return rc;
        delay = ow_backoff_ms(p->cfg->retry_backoff_ms, p->cfg->retry_backoff_max_ms, attempt,
                              &p->seed);
        fprintf(stderr, "%spurge: chunk failed (%s); retrying in %lld ms\n", p->tty ? "\n" : "",
                err->msg, (long long)delay);
        ow_sleep_ms(delay, p->stop);
        if (*p->stop)
            return rc;
    }
}

/* Sleeps until deleting p->deleted records has taken 1 / max_rate s each. */
static void throttle(purge_run *p)
{
    int64_t due_us, now_us;

    if (p->max_rate <= 0)
        return;
    due_us = p->started_us + p->deleted * 1000000 / p->max_rate;
    now_us = ow_clock_mono_us();
    if (due_us > now_us)
        ow_sleep_ms((due_us - now_us + 999) / 1000, p->stop);
}

/* Lock, archive, delete: one chunk. *last set when no chunk follows. */
static int purge_chunk(purge_run *p, int *last, ow_error *err)
{
    ow_purge_batch b;
    int rc = retried(p, &b, err);

    *last = 1;
    if (rc != OW_OK || p->chunk.n == 0)
        return rc;
    p->deleted += b.requests_deleted;
    p->detached += b.orders_detached;
    progress(p);
    *last = p->chunk.n < p->batch;
    return OW_OK;
}

/* Runs chunks until none is left, a stop is requested, or an error. */
static int purge_loop(purge_run *p, ow_error *err)
{
    int rc = OW_OK;
    int last = 0;

    p->started_us = ow_clock_mono_us();
    while (rc == OW_OK && !last && !*p->stop) {
        rc = purge_chunk(p, &last, err);
        if (rc == OW_OK && !last)
            throttle(p);
    }
    if (p->tty && p->deleted > 0)
        fputc('\n', stderr);
    return rc;
}

static int purge_report(purge_run *p, int rc, const ow_error *err)
{
    printf("purge: deleted %lld request records created before %s; %lld orders kept with "
           "request_id NULL\n",
           (long long)p->deleted, p->cutoff_text, (long long)p->detached);
    if (rc != OW_OK) {
        fprintf(stderr, "order-worker purge: %s\n", err->msg);
        return ow_cli_exit_for(err);
    }
    if (*p->stop) {
        fprintf(stderr, "order-worker purge: interrupted; run it again to finish\n");
        return OW_EXIT_FAILURE;
    }
    return OW_EXIT_OK;
}

static int purge_run_all(purge_run *p, int64_t older_than, int dry_run)
{
    ow_error err;
    int rc = ow_store_purge_cutoff(p->s, older_than, &p->cutoff, &err);

    if (rc == OW_OK)
        rc = ow_store_purge_count(p->s, &p->cutoff, &p->estimate, &err);
    if (rc != OW_OK) {
        fprintf(stderr, "order-worker purge: %s\n", err.msg);
        return ow_cli_exit_for(&err);
    }
    ow_timestamp_format(&p->cutoff, p->cutoff_text);
    if (dry_run) {
        printf("purge: dry run: %lld request records created before %s would be deleted\n",
               (long long)p->estimate, p->cutoff_text);
        return OW_EXIT_OK;
    }
    rc = purge_loop(p, &err);
    return purge_report(p, rc, &err);
}

/* Purges one shard with the run's options; p's counters start afresh. */
static int purge_one(purge_run *p, unsigned shard, int64_t older_than, int dry_run)
{
    ow_idgen ids;
    int code;

    ow_cli_shard_header(p->cfg, shard, "purge");
    memset(&p->pos, 0, sizeof(p->pos));
    p->deleted = p->detached = p->estimate = 0;
    p->s = ow_cli_shard_store_new(p->cfg, shard, &ids, 1);
    if (p->s == NULL) {
        fprintf(stderr, "order-worker purge: out of memory\n");
        code = OW_EXIT_FAILURE;
    } else {
        code = purge_run_all(p, older_than, dry_run);
    }
    ow_store_free(&p->s);
    return code;
}

/* A worker's retry cache answers a retry of a record for up to its
 * cache.ttl_s after the record was created (its entry ages from before the
 * deciding transaction), so a purge may delete only records older than the
 * longest cache.ttl_s of the workers, or a retry would be answered from
 * memory for a record that lookup and audit no longer find. Purge cannot
 * read the workers' settings: without workers_ttl it assumes the key's
 * maximum. A stated workers_ttl shorter than this configuration's own
 * contradicts it, since a worker started from it keeps outcomes longer. */
static int purge_guard(int64_t older_than, int64_t workers_ttl, const ow_config *cfg)
{
    if (workers_ttl > 0 && workers_ttl < cfg->cache_ttl_s) {
        fprintf(stderr,
                "order-worker purge: --workers-cache-ttl: %lld s is shorter than this "
                "configuration's cache.ttl_s (%lld s), which a worker started from it would "
                "use; state the longest cache.ttl_s of the workers on this database\n",
                (long long)workers_ttl, (long long)cfg->cache_ttl_s);
        return OW_EXIT_USAGE;
    }
    if (workers_ttl > 0 && older_than <= workers_ttl) {
        fprintf(stderr,
                "order-worker purge: --older-than: %lld s is not longer than --workers-cache-ttl "
                "(%lld s), for which a worker's retry cache may still answer a retry; purge "
                "older records\n",
                (long long)older_than, (long long)workers_ttl);
        return OW_EXIT_USAGE;
    }
    if (workers_ttl == 0 && older_than <= OW_CACHE_TTL_MAX_S) {
        fprintf(stderr,
                "order-worker purge: --older-than: %lld s is not longer than %d s, the longest "
                "cache.ttl_s a worker may have, for which its retry cache may still answer a "
                "retry; purge older records, or state the workers' longest cache.ttl_s with "
                "--workers-cache-ttl S\n",
                (long long)older_than, OW_CACHE_TTL_MAX_S);
        return OW_EXIT_USAGE;
    }
    return OW_EXIT_OK;
}

/* Purges every shard in turn; p->cfg is loaded. */
static int purge_shards(purge_run *p, int64_t older_than, int dry_run,
                        const volatile sig_atomic_t *stop)
{
    int code = OW_EXIT_OK;

    p->stop = stop;
    p->tty = isatty(fileno(stderr));
    p->seed = (uint64_t)ow_clock_mono_us() | 1;
    for (unsigned i = 0; i < ow_cli_shards(p->cfg) && !*stop; i++) {
        int one = purge_one(p, i, older_than, dry_run);

        if (one != OW_EXIT_OK && code != OW_EXIT_USAGE)
            code = one == OW_EXIT_USAGE ? OW_EXIT_USAGE : OW_EXIT_FAILURE;
    }
    ow_purge_chunk_cleanup(&p->chunk);
    return code;
}

int ow_cmd_purge(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    purge_run p = {0};
    ow_config cfg;
    int64_t older_than = 0;
    int code = purge_args(argc, argv, &older_than, &p);

    if (code == OW_EXIT_OK)
        code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    p.cfg = &cfg;
    code = purge_guard(older_than, p.workers_ttl, &cfg);
    if (code == OW_EXIT_OK)
        code = ow_cli_check_shard_maps(&cfg, "purge");
    if (code == OW_EXIT_OK)
        code = purge_shards(&p, older_than, ow_cli_flag(argc, argv, "--dry-run"), stop);
    ow_config_cleanup(&cfg);
    return code;
}
