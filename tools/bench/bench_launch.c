/*
 * The launcher: a helper process forked when ow-bench starts, while it is
 * still small, that starts the workers and reaps them with wait4().
 *
 * Why: Linux gives a child the high-water RSS of the memory it was forked
 * from (ru_maxrss survives exec), with fork() and posix_spawn() alike. A
 * worker started directly by ow-bench, which holds the whole data set,
 * would report ow-bench's size as its peak RSS (measured here: /bin/true
 * forked from a 300 MB heap reports 296 MB). Forked from this helper, a
 * worker's ru_maxrss is its own (the helper is a few MiB, less than any
 * worker's baseline).
 *
 * Protocol over two pipes: a request is a length-prefixed blob
 * "log\0argv0\0argv1\0...\0\0env1\0env2\0...\0\0" (empty strings end the
 * lists); replies are fixed-size records: 'S' with the new pid (or -1), and
 * 'X' with a pid, its exit status and rusage when a child exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define REQ_MAX (1u << 16)
#define ARGS_MAX 64
#define EXITS_MAX 16

typedef struct {
    char type; /* 'S' spawned, 'X' exited */
    int32_t pid;
    int32_t status;
    struct rusage ru;
} reply;

static int req_fd = -1, rep_fd = -1;
static pid_t live[EXITS_MAX];  /* in the helper: children not yet reaped */
static reply exits[EXITS_MAX]; /* exits read while waiting for something else */
static size_t n_exits;

/* --- The helper ---------------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;

    while (n > 0) {
        ssize_t w = write(fd, c, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;

    while (n > 0) {
        ssize_t r = read(fd, c, n);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Splits a NUL-separated list ending with an empty string; returns the
 * position after it, or NULL when the blob is malformed. */
static char *split_list(char *p, const char *end, char **out, size_t max, size_t *n)
{
    *n = 0;
    while (p < end && *p != '\0') {
        if (*n + 1 >= max)
            return NULL;
        out[(*n)++] = p;
        p += strlen(p) + 1;
    }
    out[*n] = NULL;
    return p < end ? p + 1 : NULL;
}

/* In the helper (single-threaded): fork, then exec with the merged
 * environment (kit_env_merge); the helper's ignored signals are restored
 * first. */
static pid_t helper_spawn(char *blob, size_t len)
{
    char *end = blob + len, *log = blob, *argv[ARGS_MAX], *env[2 * BM_MAX_ENV];
    size_t argc = 0, envc = 0;
    char *p = memchr(blob, '\0', len) != NULL ? blob + strlen(blob) + 1 : NULL;
    char **envp;
    pid_t pid;

    p = p != NULL ? split_list(p, end, argv, ARGS_MAX, &argc) : NULL;
    p = p != NULL ? split_list(p, end, env, 2 * BM_MAX_ENV, &envc) : NULL;
    envp = p != NULL && argc > 0 ? kit_env_merge((const char *const *)env, envc) : NULL;
    if (envp == NULL)
        return -1;
    pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int nul = open("/dev/null", O_RDONLY);

        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (fd < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    free(envp);
    return pid;
}

static void helper_reap(int out)
{
    for (;;) {
        reply r;
        int status = 0;
        pid_t pid;

        memset(&r, 0, sizeof(r));
        pid = wait4(-1, &status, WNOHANG, &r.ru);
        if (pid <= 0)
            return;
        for (size_t i = 0; i < EXITS_MAX; i++)
            live[i] = live[i] == pid ? 0 : live[i];
        r.type = 'X';
        r.pid = pid;
        r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (write_all(out, &r, sizeof(r)) != 0)
            return;
    }
}

static void helper_main(int in, int out)
{
    char *blob = malloc(REQ_MAX);

    signal(SIGINT, SIG_IGN); /* ow-bench decides when workers stop */
    signal(SIGTERM, SIG_IGN);
    while (blob != NULL) {
        struct pollfd pfd = {in, POLLIN, 0};
        uint32_t len;
        reply r;

        helper_reap(out);
        if (poll(&pfd, 1, 20) <= 0)
            continue;
        if (read_all(in, &len, sizeof(len)) != 0 || len == 0 || len > REQ_MAX ||
            read_all(in, blob, len) != 0)
            break; /* ow-bench is gone: see below */
        memset(&r, 0, sizeof(r));
        r.type = 'S';
        r.pid = helper_spawn(blob, len);
        for (size_t i = 0; r.pid > 0 && i < EXITS_MAX; i++) {
            if (live[i] == 0) {
                live[i] = r.pid;
                break;
            }
        }
        if (write_all(out, &r, sizeof(r)) != 0)
            break;
    }
    free(blob);
    /* Nobody is left to stop the workers: stop them cleanly. */
    for (size_t i = 0; i < EXITS_MAX; i++) {
        if (live[i] > 0) {
            kill(live[i], SIGTERM);
            waitpid(live[i], NULL, 0);
        }
    }
}

int bm_launcher_start(void)
{
    int req[2], rep[2];
    pid_t pid;

    if (pipe(req) != 0 || pipe(rep) != 0) {
        bm_log("launcher: pipe: %s", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        bm_log("launcher: fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(req[1]);
        close(rep[0]);
        helper_main(req[0], rep[1]);
        _exit(0);
    }
    close(req[0]);
    close(rep[1]);
    req_fd = req[1];
    rep_fd = rep[0];
    fcntl(req_fd, F_SETFD, FD_CLOEXEC);
    fcntl(rep_fd, F_SETFD, FD_CLOEXEC);
    return 0;
}

/* --- ow-bench's side ------------------------------------------------------------- */

static int put(char *blob, size_t *len, const char *s)
{
    size_t n = strlen(s) + 1;

    if (*len + n > REQ_MAX)
        return -1;
    memcpy(blob + *len, s, n);
    *len += n;
    return 0;
}

/* Reads one reply; exits are kept for bm_launcher_poll. */
static int next_reply(reply *r)
{
    if (read_all(rep_fd, r, sizeof(*r)) != 0)
        return -1;
    if (r->type == 'X' && n_exits < EXITS_MAX)
        exits[n_exits++] = *r;
    return 0;
}

pid_t bm_launcher_spawn(char *const argv[], const char *const env[], size_t n_env,
                        const char *log_path)
{
    char *blob = bm_xcalloc(REQ_MAX, 1);
    size_t len = 0;
    uint32_t len32;
    int rc = put(blob, &len, log_path);
    reply r = {0};

    for (size_t i = 0; rc == 0 && argv[i] != NULL; i++)
        rc = put(blob, &len, argv[i]);
    rc |= put(blob, &len, "");
    for (size_t i = 0; rc == 0 && i < n_env; i++)
        rc = put(blob, &len, env[i]);
    rc |= put(blob, &len, "");
    len32 = (uint32_t)len;
    if (rc != 0 || req_fd < 0 || write_all(req_fd, &len32, sizeof(len32)) != 0 ||
        write_all(req_fd, blob, len) != 0) {
        free(blob);
        bm_log("launcher: cannot send the request to start %s", argv[0]);
        return -1;
    }
    free(blob);
    do {
        if (next_reply(&r) != 0) {
            bm_log("launcher: no answer");
            return -1;
        }
    } while (r.type != 'S');
    if (r.pid <= 0)
        bm_log("launcher: cannot start %s", argv[0]);
    return r.pid;
}

int bm_launcher_poll(pid_t pid, int *status, struct rusage *ru)
{
    struct pollfd pfd = {rep_fd, POLLIN, 0};

    while (poll(&pfd, 1, 0) > 0) {
        reply r;

        if (next_reply(&r) != 0)
            break;
    }
    for (size_t i = 0; i < n_exits; i++) {
        if (exits[i].pid == pid) {
            *status = exits[i].status;
            *ru = exits[i].ru;
            exits[i] = exits[--n_exits];
            return 1;
        }
    }
    return 0;
}
