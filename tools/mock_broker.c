/*
 * ow-mockbroker: a librdkafka mock cluster (one broker) as a standalone
 * process, the fallback broker where Java or the Kafka jars are missing.
 * The mock listens on an ephemeral port; this program accepts bootstrap
 * connections on --port and forwards them there. Clients then talk to the
 * advertised broker address directly.
 *
 *   ow-mockbroker --port PORT     prints "bootstrap=127.0.0.1:PORT", runs until SIGTERM
 */
#include <arpa/inet.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static struct sockaddr_in target;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* Copies bytes both ways until either side closes. */
static void *pipe_main(void *arg)
{
    int client = (int)(intptr_t)arg;
    int upstream = socket(AF_INET, SOCK_STREAM, 0);
    struct pollfd fds[2];
    char buf[65536];

    if (upstream < 0 || connect(upstream, (struct sockaddr *)&target, sizeof(target)) != 0)
        goto out;
    fds[0].fd = client;
    fds[1].fd = upstream;
    fds[0].events = fds[1].events = POLLIN;
    while (!stop && poll(fds, 2, 500) >= 0) {
        for (int i = 0; i < 2; i++) {
            ssize_t n;

            if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0)
                continue;
            n = read(fds[i].fd, buf, sizeof(buf));
            if (n <= 0 || write(fds[1 - i].fd, buf, (size_t)n) != n)
                goto out;
        }
    }
out:
    close(client);
    if (upstream >= 0)
        close(upstream);
    return NULL;
}

int main(int argc, char **argv)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mc;
    const char *bootstraps;
    int port = 0;
    int lfd;
    struct sockaddr_in addr;
    int one = 1;

    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
    if (port <= 0) {
        fprintf(stderr, "usage: ow-mockbroker --port PORT\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    mc = rk != NULL ? rd_kafka_mock_cluster_new(rk, 1) : NULL;
    if (mc == NULL) {
        fprintf(stderr, "ow-mockbroker: cannot create the mock cluster: %s\n", errstr);
        return 1;
    }
    bootstraps = rd_kafka_mock_cluster_bootstraps(mc);
    memset(&target, 0, sizeof(target));
    target.sin_family = AF_INET;
    target.sin_port = htons((uint16_t)atoi(strrchr(bootstraps, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &target.sin_addr);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(lfd, 64) != 0) {
        perror("ow-mockbroker: bind");
        return 1;
    }
    printf("bootstrap=127.0.0.1:%d\nmock=%s\n", port, bootstraps);
    fflush(stdout);
    while (!stop) {
        struct pollfd p = {lfd, POLLIN, 0};
        pthread_t t;

        if (poll(&p, 1, 500) <= 0)
            continue;
        {
            int c = accept(lfd, NULL, NULL);

            if (c >= 0 && pthread_create(&t, NULL, pipe_main, (void *)(intptr_t)c) == 0)
                pthread_detach(t);
        }
    }
    close(lfd);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
