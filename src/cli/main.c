/* order-worker: arguments, signals, exit status, and the watchdog of a
 * stop. Everything else lives in the modules; this is the only file that
 * decides the process's fate. */
#include <librdkafka/rdkafka.h>
#include <malloc.h>
#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ow/config.h"
#include "ow/log.h"
#include "ow/util.h"
#include "ow/worker.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A hang-up (a closed terminal, a supervisor's reload) stops gracefully
     * like SIGTERM; its default action killed the worker without a flush,
     * commit or group leave. There is nothing to reload. */
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The last resort of a stop: every wait of the worker's stop is bounded by
 * its deadline (shutdown.timeout_ms), but a library call that never
 * returns (librdkafka's, after the revoke of a first assignment, say)
 * would hold the process. The watchdog ends it WATCHDOG_GRACE_MS after the
 * deadline with exit status 1 and a stop_overrun line naming the step.
 * The deadline counts from the signal, which the watchdog passes on as
 * soon as it sees it: a consumer thread held in a call when the signal
 * came would otherwise start the stop's clock only once the call
 * returned. Such an exit loses nothing: offsets are committed only for
 * what was acknowledged, and the rest is redelivered. */
#define WATCHDOG_GRACE_MS 2000
#define WATCHDOG_TICK_MS 100

static _Atomic int watchdog_done;

static void *watchdog(void *arg)
{
    (void)arg;
    while (!atomic_load(&watchdog_done)) {
        int64_t deadline;
        const char *step;

        ow_sleep_ms(WATCHDOG_TICK_MS, NULL);
        if (stop_requested)
            ow_worker_stop_asked();
        ow_worker_stop_status(&deadline, &step);
        if (deadline > 0 && ow_clock_mono_ms() > deadline + WATCHDOG_GRACE_MS) {
            OW_LOG(OW_LOG_ERROR, "stop_overrun", OW_F_STR("step", step != NULL ? step : "unknown"),
                   OW_F_INT("grace_ms", WATCHDOG_GRACE_MS),
                   OW_F_STR("effect", "exiting now; what was not committed is redelivered"));
            fflush(stderr);
            _exit(1);
        }
    }
    return NULL;
}

/* Runs a command, under the watchdog when it runs the worker. */
static int run_command(const ow_command *c, int argc, char **argv)
{
    pthread_t guard;
    int guarded = c->run == ow_cmd_run && pthread_create(&guard, NULL, watchdog, NULL) == 0;
    int code = c->run(argc, argv, &stop_requested);

    if (guarded) {
        atomic_store(&watchdog_done, 1);
        pthread_join(guard, NULL);
    }
    return code;
}

const ow_command ow_commands[] = {
    {"run", "consume, decide and publish until stopped", ow_cmd_run, ow_help_run},
    {"migrate", "apply the schema migrations of sql/", ow_cmd_migrate, ow_help_migrate},
    {"lookup", "print one request record and its orders as JSON", ow_cmd_lookup, ow_help_lookup},
    {"purge", "delete request records older than a duration", ow_cmd_purge, ow_help_purge},
    {"audit", "check the stored data against the invariants", ow_cmd_audit, ow_help_audit},
    {"send", "produce one order batch (and optionally wait for its result)", ow_cmd_send,
     ow_help_send},
    {"config", "print the effective configuration or the key reference", ow_cmd_config,
     ow_help_config},
    {"serve", "answer result and order queries over HTTP (read-only)", ow_cmd_serve, ow_help_serve},
    {NULL, NULL, NULL, NULL},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: order-worker COMMAND [--config FILE] [options]\n\ncommands:\n");
    for (const ow_command *c = ow_commands; c->name != NULL; c++)
        fprintf(out, "  %-9s %s\n", c->name, c->summary);
    fprintf(out, "\n  order-worker COMMAND --help   details of one command\n"
                 "  order-worker --version\n");
}

int main(int argc, char **argv)
{
    int code = OW_EXIT_USAGE;

#ifdef M_ARENA_MAX
    /* glibc gives every thread that allocates its own heap arena; with the
     * lanes and librdkafka's threads that fragments memory
     * (docs/tuning.md, "Memory"). */
    mallopt(M_ARENA_MAX, 2);
#endif
#ifdef M_MMAP_THRESHOLD
    /* A fixed threshold: glibc otherwise raises it (up to 32 MiB) after the
     * first large free, and librdkafka's fetch buffers then stay in the heap
     * when freed, and the peak RSS drifts upwards over a long run. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif

    if (argc < 2) {
        usage(stderr);
        return OW_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        putchar('\n');
        ow_help_config_keys();
        return OW_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("order-worker %s (librdkafka %s, %s)\n", OW_VERSION, rd_kafka_version_str(),
               mysql_get_client_info());
        return OW_EXIT_OK;
    }
    for (const ow_command *c = ow_commands; c->name != NULL; c++) {
        if (strcmp(argv[1], c->name) != 0)
            continue;
        if (ow_cli_flag(argc - 1, argv + 1, "--help")) {
            c->help();
            return OW_EXIT_OK;
        }
        install_signals();
        if (mysql_library_init(0, NULL, NULL) != 0) {
            fprintf(stderr, "order-worker: cannot initialise the MySQL client library\n");
            return OW_EXIT_FAILURE;
        }
        code = run_command(c, argc - 1, argv + 1);
        mysql_library_end();
        return code;
    }
    fprintf(stderr, "order-worker: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return code;
}
