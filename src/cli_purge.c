/* order-worker purge: retention of request records, in bounded batches. */
#include <stdio.h>
#include <unistd.h>

#include "ow/admin.h"
#include "ow/cli.h"

#define PURGE_ATTEMPTS 10 /* tries of one batch before giving up */

void ow_help_purge(void)
{
    puts("usage: order-worker purge --older-than DURATION [--batch N] [--dry-run]\n"
         "                          [--config FILE]\n"
         "\n"
         "Deletes the request records (idempotency_requests) created more than\n"
         "DURATION ago: 30d, 12h, 90m or 3600s. The cutoff is computed once, from the\n"
         "database's clock, when the command starts. Orders are kept: their\n"
         "request_id becomes NULL, which means \"the request that created it expired\".\n"
         "After a record is purged its key is forgotten: a redelivered message with\n"
         "that key is decided again as a new request.\n"
         "\n"
         "Works in batches of N records (default 1000, at most 100000), each one\n"
         "transaction, oldest first, so a purge can be interrupted (SIGINT or SIGTERM\n"
         "stops it between batches) and run again. A batch that fails with a\n"
         "transient error (deadlock, lost connection) is retried with backoff, up to\n"
         "10 times. A batch holds its rows' locks until it commits, so keep N moderate\n"
         "while workers run. Progress goes to stderr, the summary to stdout. The\n"
         "database user needs DELETE on idempotency_requests and UPDATE on orders.\n"
         "\n"
         "  --dry-run   only count the records that would be deleted\n"
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
    int64_t estimate; /* old records counted at the start */
    int64_t deleted;
    int64_t detached;
    int tty;
    uint64_t seed;
} purge_run;

static int purge_args(int argc, char **argv, int64_t *older_than, size_t *batch)
{
    static const char *const known[] = {"--config", "--older-than", "--batch", "--dry-run!", NULL};
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
    *batch = (size_t)n;
    return OW_EXIT_OK;
}

static void progress(purge_run *p)
{
    fprintf(stderr, "purge: deleted %lld of ~%lld records...%s", (long long)p->deleted,
            (long long)p->estimate, p->tty ? "\r" : "\n");
    fflush(stderr);
}

/* One batch, retried with backoff while its errors are transient. */
static int purge_batch(purge_run *p, ow_purge_batch *b, ow_error *err)
{
    for (unsigned attempt = 0;; attempt++) {
        int64_t delay;
        int rc = ow_admin_purge_batch(p->s, &p->cutoff, p->batch, b, err);

        if (rc == OW_OK || err->cls != OW_ERRCLASS_RETRIABLE || attempt + 1 >= PURGE_ATTEMPTS)
            return rc;
        delay = ow_backoff_ms(p->cfg->retry_backoff_ms, p->cfg->retry_backoff_max_ms, attempt,
                              &p->seed);
        fprintf(stderr, "%spurge: batch failed (%s); retrying in %lld ms\n", p->tty ? "\n" : "",
                err->msg, (long long)delay);
        ow_sleep_ms(delay, p->stop);
        if (*p->stop)
            return rc;
    }
}

/* Runs batches until none is left, a stop is requested, or an error. */
static int purge_loop(purge_run *p, ow_error *err)
{
    ow_purge_batch b;
    int rc = OW_OK;

    while (rc == OW_OK && !*p->stop) {
        rc = purge_batch(p, &b, err);
        if (rc != OW_OK)
            break;
        p->deleted += b.requests_deleted;
        p->detached += b.orders_detached;
        if (b.requests_selected > 0)
            progress(p);
        if (b.requests_selected < (int64_t)p->batch)
            break;
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
        return OW_EXIT_FAILURE;
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
    int rc = ow_admin_purge_cutoff(p->s, older_than, &p->cutoff, &err);

    if (rc == OW_OK)
        rc = ow_admin_purge_count(p->s, &p->cutoff, &p->estimate, &err);
    if (rc != OW_OK) {
        fprintf(stderr, "order-worker purge: %s\n", err.msg);
        return OW_EXIT_FAILURE;
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

int ow_cmd_purge(int argc, char **argv, const volatile sig_atomic_t *stop)
{
    purge_run p = {0};
    ow_config cfg;
    ow_idgen ids;
    int64_t older_than = 0;
    int code = purge_args(argc, argv, &older_than, &p.batch);

    if (code == OW_EXIT_OK)
        code = ow_cli_load_config(ow_cli_opt(argc, argv, "--config"), &cfg);
    if (code != OW_EXIT_OK)
        return code;
    p.cfg = &cfg;
    p.stop = stop;
    p.tty = isatty(fileno(stderr));
    p.seed = (uint64_t)ow_clock_mono_us() | 1;
    p.s = ow_cli_store_new(&cfg, &ids);
    if (p.s == NULL) {
        fprintf(stderr, "order-worker purge: out of memory\n");
        code = OW_EXIT_FAILURE;
    } else {
        code = purge_run_all(&p, older_than, ow_cli_flag(argc, argv, "--dry-run"));
    }
    ow_store_free(&p.s);
    ow_config_cleanup(&cfg);
    return code;
}
