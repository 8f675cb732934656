/*
 * udp_echo — a UDP echo server and client in fibers.
 *
 *   build/examples/udp_echo [--host H] [--port P]
 *       server: sends every datagram back to its sender; prints
 *       "udp_echo: listening on ADDR" first; stops on SIGINT/SIGTERM
 *       (a fiber waits for them with weft_signal_wait()).
 *   build/examples/udp_echo --client [--host H] [--port P] [--count N]
 *                           [--timeout-ms MS]
 *       client: sends N numbered datagrams one after another, waits for
 *       each echo (sending again after a timeout, at most 3 times: UDP
 *       may lose datagrams) and prints the round-trip times.
 *   build/examples/udp_echo --both [--count N]
 *       a server and a client fiber in one process, on a free port.
 *
 * H may be a name ("localhost") or a number; the server binds the first
 * address it resolves to, the client sends to the first address.
 */
#include <weft.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *host = "127.0.0.1";
static int port = 7001;
static long count = 10;
static int64_t timeout_ns = 500 * WEFT_MS;
static sigset_t stop_signals; /* SIGINT, SIGTERM */

static void *server(void *arg)
{
    int fd = *(int *)arg;
    static char buf[65536]; /* the largest datagram; not on the fiber's stack */
    char who[128];
    long served = 0;
    for (;;) {
        struct sockaddr_storage from;
        socklen_t len = sizeof from;
        ssize_t n = weft_recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from,
                                  &len, WEFT_FOREVER);
        if (n < 0) /* -ECANCELED: asked to stop */
            break;
        if (weft_sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len,
                        weft_deadline_in(WEFT_SEC)) < 0 &&
            weft_addr_format((struct sockaddr *)&from, len, who, sizeof who) >= 0)
            fprintf(stderr, "udp_echo: could not answer %s\n", who);
        served++;
    }
    fprintf(stderr, "udp_echo: stopped after %ld datagrams\n", served);
    return NULL;
}

/* Waits for SIGINT or SIGTERM, then cancels the server fiber. */
static void *stopper(void *arg)
{
    weft_fiber_t *srv = arg;
    int sfd = weft_signal_open(&stop_signals);
    if (sfd < 0) {
        fprintf(stderr, "udp_echo: signals: %s\n", strerror(-sfd));
        return NULL;
    }
    int sig = weft_signal_wait(sfd, NULL, WEFT_FOREVER);
    weft_close(sfd);
    if (sig > 0) {
        fprintf(stderr, "udp_echo: %s\n", strsignal(sig));
        weft_cancel(*srv);
    }
    return NULL;
}

static void *client(void *arg)
{
    (void)arg;
    struct sockaddr_storage to;
    socklen_t tolen;
    int rc = weft_resolve(host, port, SOCK_DGRAM, &to, &tolen, weft_deadline_in(5 * WEFT_SEC));
    int fd = rc < 0 ? rc : weft_socket(to.ss_family, SOCK_DGRAM, 0);
    if (fd < 0) {
        fprintf(stderr, "udp_echo: %s: %s\n", host, strerror(-fd));
        return "failed";
    }
    char addr[128], out[64], in[64];
    weft_addr_format((struct sockaddr *)&to, tolen, addr, sizeof addr);
    long ok = 0, lost = 0;
    int64_t best = INT64_MAX, worst = 0, sum = 0;
    for (long i = 0; i < count; i++) {
        int n = snprintf(out, sizeof out, "datagram %ld", i);
        int64_t t0 = weft_now();
        ssize_t got = -ETIMEDOUT;
        for (int tries = 0; tries < 3 && got == -ETIMEDOUT; tries++) {
            if (weft_sendto(fd, out, (size_t)n, 0, (struct sockaddr *)&to, tolen,
                            WEFT_FOREVER) < 0)
                break;
            /* Skip stale echoes of earlier tries until ours comes back. */
            int64_t deadline = weft_deadline_in(timeout_ns);
            while ((got = weft_recvfrom(fd, in, sizeof in, 0, NULL, NULL, deadline)) >= 0 &&
                   (got != n || memcmp(in, out, (size_t)n) != 0))
                ;
        }
        if (got < 0) {
            lost++;
            continue;
        }
        int64_t rtt = weft_now() - t0;
        ok++;
        sum += rtt;
        best = rtt < best ? rtt : best;
        worst = rtt > worst ? rtt : worst;
    }
    weft_close(fd);
    if (ok)
        printf("udp_echo: %ld/%ld echoed by %s, round trip min %.1f us, avg %.1f us, max %.1f us\n",
               ok, count, addr, best / 1e3, sum / 1e3 / ok, worst / 1e3);
    else
        printf("udp_echo: no answer from %s\n", addr);
    return lost ? "lost" : NULL;
}

/* --both: a server fiber on a free port, the client against it. */
static void *both(void *arg)
{
    int *lfd = arg;
    weft_fiber_t srv;
    if (weft_spawn(server, lfd, NULL, &srv) < 0)
        return "failed";
    port = weft_local_port(*lfd);
    void *r = client(NULL);
    weft_cancel(srv);
    weft_join(srv, NULL, WEFT_FOREVER);
    return r;
}

static void *serve(void *arg)
{
    weft_fiber_t srv, stop;
    if (weft_spawn(server, arg, NULL, &srv) < 0 || weft_spawn(stopper, &srv, NULL, &stop) < 0)
        return "failed";
    weft_join(srv, NULL, WEFT_FOREVER);
    weft_cancel(stop); /* when the server ended by itself */
    weft_join(stop, NULL, WEFT_FOREVER);
    return NULL;
}

int main(int argc, char **argv)
{
    int mode = 0; /* 0 server, 1 client, 2 both */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--client"))
            mode = 1;
        else if (!strcmp(a, "--both"))
            mode = 2;
        else if (!strcmp(a, "--host") && v)
            host = argv[++i];
        else if (!strcmp(a, "--port") && v)
            port = atoi(argv[++i]);
        else if (!strcmp(a, "--count") && v)
            count = atol(argv[++i]);
        else if (!strcmp(a, "--timeout-ms") && v)
            timeout_ns = atol(argv[++i]) * WEFT_MS;
        else {
            fprintf(stderr, "usage: udp_echo [--client | --both] [--host H] [--port P] "
                            "[--count N] [--timeout-ms MS]\n");
            return 2;
        }
    }
    void *failed = NULL;
    if (mode == 1)
        return weft_run(client, NULL, &failed) < 0 || failed;
    /* Blocked before anything else starts, so that no thread of this
     * process runs SIGINT's default action instead of the stopper seeing it. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    weft_signal_block(&stop_signals);
    int fd = weft_listen(host, mode == 2 ? 0 : port, SOCK_DGRAM, 0, 0, WEFT_FOREVER);
    if (fd < 0) {
        fprintf(stderr, "udp_echo: %s:%d: %s\n", host, port, strerror(-fd));
        return 1;
    }
    if (mode == 2) {
        int rc = weft_run(both, &fd, &failed);
        weft_close(fd);
        return rc < 0 || failed;
    }
    struct sockaddr_storage me;
    socklen_t len = sizeof me;
    char addr[128] = "?";
    if (getsockname(fd, (struct sockaddr *)&me, &len) == 0)
        weft_addr_format((struct sockaddr *)&me, len, addr, sizeof addr);
    printf("udp_echo: listening on %s\n", addr);
    fflush(stdout);
    int rc = weft_run(serve, &fd, &failed);
    weft_close(fd);
    return rc < 0 || failed;
}
