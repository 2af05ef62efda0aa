#include "testcli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kit_proc.h"

const char *testcli_bin(void)
{
    const char *b = getenv("OW_TEST_WORKER_BIN");

    return b != NULL && *b != '\0' ? b : NULL;
}

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void child(char *const argv[], char **envp, int in[2], int out[2], int err[2])
{
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    execve(argv[0], argv, envp);
    _exit(127);
}

static int append(char **buf, size_t *len, int fd)
{
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof(chunk));
    char *p;

    if (n <= 0)
        return n == 0 || (errno != EINTR && errno != EAGAIN) ? 0 : 1;
    p = realloc(*buf, *len + (size_t)n + 1);
    if (p == NULL)
        return 0;
    memcpy(p + *len, chunk, (size_t)n);
    *len += (size_t)n;
    p[*len] = '\0';
    *buf = p;
    return 1;
}

/* Feeds stdin and drains stdout/stderr until both close or the deadline;
 * closes the three descriptors. */
static int pump(int in_fd, const char *in, size_t in_len, int out_fd, int err_fd,
                long long deadline, testcli_result *r)
{
    size_t sent = 0;
    struct pollfd p[3];
    int rc = 0;

    if (in_len == 0) {
        close(in_fd);
        in_fd = -1;
    }
    while (rc == 0 && (out_fd >= 0 || err_fd >= 0)) {
        long long left = deadline - now_ms();

        if (left <= 0) {
            rc = -1;
            break;
        }
        p[0] = (struct pollfd){in_fd, POLLOUT, 0};
        p[1] = (struct pollfd){out_fd, POLLIN, 0};
        p[2] = (struct pollfd){err_fd, POLLIN, 0};
        if (poll(p, 3, (int)(left < 200 ? left : 200)) < 0 && errno != EINTR)
            rc = -1;
        if (in_fd >= 0 && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t n = write(in_fd, in + sent, in_len - sent);

            sent += n > 0 ? (size_t)n : 0;
            if (n < 0 || sent == in_len) {
                close(in_fd);
                in_fd = -1;
            }
        }
        if (out_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !append(&r->out, &r->out_len, out_fd)) {
            close(out_fd);
            out_fd = -1;
        }
        if (err_fd >= 0 && (p[2].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !append(&r->err, &r->err_len, err_fd)) {
            close(err_fd);
            err_fd = -1;
        }
    }
    if (in_fd >= 0)
        close(in_fd);
    if (out_fd >= 0)
        close(out_fd);
    if (err_fd >= 0)
        close(err_fd);
    return rc;
}

/* kit_wait until the deadline; a child still running then is killed. */
static int wait_child(pid_t pid, long long deadline)
{
    long long left = deadline - now_ms();
    int status = kit_wait(pid, left > 0 ? (int)left : 0);

    if (status < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return status;
}

int testcli_run(char *const argv[], char *const env[], const char *in, size_t in_len,
                int timeout_ms, testcli_result *r)
{
    long long deadline = now_ms() + timeout_ms;
    int pin[2], pout[2], perr[2];
    char **envp = kit_env_merge((const char *const *)env, SIZE_MAX);
    int timed_out;
    pid_t pid;

    memset(r, 0, sizeof(*r));
    r->status = -1;
    if (envp == NULL || pipe(pin) != 0 || pipe(pout) != 0 || pipe(perr) != 0) {
        free(envp);
        return -1;
    }
    signal(SIGPIPE, SIG_IGN);
    pid = fork();
    if (pid == 0)
        child(argv, envp, pin, pout, perr);
    free(envp);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (pid < 0) {
        close(pin[1]);
        close(pout[0]);
        close(perr[0]);
        return -1;
    }
    timed_out = pump(pin[1], in, in != NULL ? in_len : 0, pout[0], perr[0], deadline, r) != 0;
    if (timed_out)
        kill(pid, SIGKILL);
    r->status = wait_child(pid, deadline);
    /* Killed at the deadline: -1 as documented, also when the wait already
     * reaped the kill as 128 + SIGKILL (seen once in the purge kill test). */
    if (timed_out)
        r->status = -1;
    if (r->out == NULL)
        r->out = calloc(1, 1);
    if (r->err == NULL)
        r->err = calloc(1, 1);
    return 0;
}

void testcli_result_free(testcli_result *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof(*r));
}
