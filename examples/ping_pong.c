/*
 * ping_pong — the hello world of network programming, in fibers.
 *
 * A server fiber accepts one connection and answers every "ping" with
 * "pong"; a client fiber connects over loopback, sends N pings and checks
 * each answer. Both read like blocking code; neither blocks the thread.
 *
 *   build/examples/ping_pong [rounds]
 */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int port;
static long rounds = 5;

static void *server(void *arg)
{
    int lfd = *(int *)arg;
    int c = weft_accept(lfd, NULL, NULL, weft_deadline_in(5000000000));
    weft_close(lfd);
    if (c < 0) {
        fprintf(stderr, "accept: %s\n", strerror(-c));
        return (void *)1;
    }
    char buf[4];
    size_t got;
    while (weft_read_full(c, buf, 4, &got, WEFT_FOREVER) == 0) {
        if (memcmp(buf, "ping", 4) != 0)
            break;
        if (weft_write_all(c, "pong", 4, NULL, WEFT_FOREVER) < 0)
            break;
    }
    weft_close(c);
    return NULL;
}

static void *client(void *arg)
{
    (void)arg;
    int fd = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(5000000000));
    if (fd < 0) {
        fprintf(stderr, "connect: %s\n", strerror(-fd));
        return (void *)1;
    }
    for (long i = 1; i <= rounds; i++) {
        char buf[4];
        int64_t t0 = weft_now();
        if (weft_write_all(fd, "ping", 4, NULL, WEFT_FOREVER) < 0 ||
            weft_read_full(fd, buf, 4, NULL, weft_deadline_in(1000000000)) != 0 ||
            memcmp(buf, "pong", 4) != 0) {
            fprintf(stderr, "round %ld failed\n", i);
            weft_close(fd);
            return (void *)1;
        }
        printf("ping -> pong  #%ld  %.1f us\n", i, (weft_now() - t0) / 1e3);
    }
    weft_close(fd);
    return NULL;
}

static void *main_fiber(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    if (lfd < 0) {
        fprintf(stderr, "listen: %s\n", strerror(-lfd));
        return (void *)1;
    }
    port = weft_local_port(lfd);
    weft_fiber_t s, c;
    void *rs = NULL, *rc = NULL;
    weft_spawn(server, &lfd, NULL, &s);
    weft_spawn(client, NULL, NULL, &c);
    weft_join(c, &rc, WEFT_FOREVER);
    weft_join(s, &rs, WEFT_FOREVER);
    return (void *)((long)rs | (long)rc);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = strtol(argv[1], NULL, 10);
    if (rounds < 1)
        rounds = 1;
    void *res = NULL;
    int rc = weft_run(main_fiber, NULL, &res);
    if (rc < 0) {
        fprintf(stderr, "weft_run: %s\n", strerror(-rc));
        return 1;
    }
    printf("backend: %s\n", weft_sched_backend(weft_sched_self()));
    return res ? 1 : 0;
}
