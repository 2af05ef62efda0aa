#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kit.h"

pid_t kit_spawn(char *const argv[], char *const env[], const char *log_path)
{
    pid_t pid = fork();

    if (pid != 0)
        return pid;
    if (log_path != NULL) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);

        if (fd >= 0) {
            dup2(fd, 2);
            close(fd);
        }
    }
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        putenv(env[i]);
    execv(argv[0], argv);
    _exit(127);
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
