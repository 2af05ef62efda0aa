#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kit_proc.h"

extern char **environ;

char **kit_env_merge(const char *const env[], size_t n_env)
{
    size_t n = 0, m = 0, k = 0;
    char **out;

    while (environ[n] != NULL)
        n++;
    while (env != NULL && m < n_env && env[m] != NULL)
        m++;
    out = calloc(n + m + 1, sizeof(*out));
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t len = strcspn(environ[i], "=");
        int replaced = 0;

        for (size_t j = 0; j < m && !replaced; j++)
            replaced = strncmp(env[j], environ[i], len) == 0 && env[j][len] == '=';
        if (!replaced)
            out[k++] = environ[i];
    }
    /* execve() takes char *const[]; the strings are only read. */
    for (size_t j = 0; j < m; j++)
        out[k++] = (char *)(uintptr_t)env[j];
    return out;
}

/*
 * The child is killed when the process that spawned it ends, however it
 * ends. A test process that aborted (librdkafka 2.0.2's
 * rd_kafka_broker_destroy_final assertion in one of its own client threads,
 * confluentinc/librdkafka#3608, in integration.mock_faults on 2026-12-03)
 * left its worker running; the worker held the stdout it inherited, and
 * ctest waited on that pipe until its 900 s timeout. The death signal
 * belongs to the spawning thread: every caller spawns from its main thread.
 */
pid_t kit_spawn(char *const argv[], char *const env[], const char *log_path)
{
    char **envp = kit_env_merge((const char *const *)env, SIZE_MAX);
    pid_t parent = getpid();
    pid_t pid;
    int fd;

    if (envp == NULL)
        return -1;
    fd = log_path != NULL ? open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    pid = fork();
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        if (fd >= 0)
            dup2(fd, 2);
        execve(argv[0], argv, envp);
        _exit(127);
    }
    if (fd >= 0)
        close(fd);
    free(envp);
    return pid;
}

int kit_wait(pid_t pid, int timeout_ms)
{
    for (int waited = 0;; waited += 20) {
        int status = 0;
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0 && errno != EINTR)
            return -1;
        if (waited >= timeout_ms)
            return -1;
        {
            struct timespec ts = {0, 20 * 1000000L};

            nanosleep(&ts, NULL);
        }
    }
}
