/* Cancellation during each blocking call, of self, of finished fibers, and
 * stickiness: every later blocking call of a cancelled fiber fails too. */
#include "harness.h"

#include <netinet/in.h>
#include <sys/socket.h>

typedef struct {
    int kind;
    int fd;
    int result;
    int after; /* result of a second blocking call after the cancel */
    weft_fiber_t other;
} job;

enum { K_SLEEP, K_PARK, K_JOIN, K_READ, K_WRITE, K_ACCEPT, K_CONNECT,
       K_WAITFD, K_RECV, K_SEND, K_YIELD_LOOP, K_COUNT };

static void *forever_fiber(void *arg)
{
    weft_sleep_until(WEFT_FOREVER);
    return arg;
}

static void *blocker(void *arg)
{
    job *j = arg;
    static char big[65536];
    memset(big, 'x', sizeof big);
    char c;
    switch (j->kind) {
    case K_SLEEP: j->result = weft_sleep_until(WEFT_FOREVER); break;
    case K_PARK: j->result = weft_park(WEFT_FOREVER); break;
    case K_JOIN: j->result = weft_join(j->other, NULL, WEFT_FOREVER); break;
    case K_READ: j->result = (int)weft_read(j->fd, &c, 1, WEFT_FOREVER); break;
    case K_RECV: j->result = (int)weft_recv(j->fd, &c, 1, 0, WEFT_FOREVER); break;
    case K_WRITE:
    case K_SEND:
        for (;;) { /* fill the pipe/socket until it blocks */
            ssize_t n = j->kind == K_WRITE
                            ? weft_write(j->fd, big, sizeof big, WEFT_FOREVER)
                            : weft_send(j->fd, big, sizeof big, 0, WEFT_FOREVER);
            if (n < 0) {
                j->result = (int)n;
                break;
            }
        }
        break;
    case K_ACCEPT: j->result = weft_accept(j->fd, NULL, NULL, WEFT_FOREVER); break;
    case K_CONNECT: {
        /* A listener whose backlog is full leaves connect pending. */
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)weft_local_port(j->fd)),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int results = 0;
        for (int i = 0; i < 64 && results == 0; i++) {
            int s = weft_socket(AF_INET, SOCK_STREAM, 0);
            CHECK(s >= 0);
            results = weft_connect(s, (struct sockaddr *)&a, sizeof a, WEFT_FOREVER);
            weft_close(s);
        }
        j->result = results;
        break;
    }
    case K_WAITFD: j->result = weft_wait_fd(j->fd, WEFT_READABLE, WEFT_FOREVER); break;
    case K_YIELD_LOOP:
        for (;;) {
            int rc = weft_yield();
            if (rc < 0) {
                j->result = rc;
                break;
            }
        }
        break;
    }
    /* Sticky: the next blocking call fails at once too. */
    j->after = weft_sleep(1000000000);
    return NULL;
}

static void run_kind(int kind)
{
    job j = {.kind = kind, .fd = -1};
    int p[2] = {-1, -1}, sv[2] = {-1, -1}, lfd = -1;
    if (kind == K_READ || kind == K_WRITE || kind == K_WAITFD) {
        CHECK_EQ(weft_pipe(p), 0);
        j.fd = kind == K_WRITE ? p[1] : p[0];
    } else if (kind == K_RECV || kind == K_SEND) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        j.fd = sv[0];
    } else if (kind == K_ACCEPT) {
        lfd = weft_tcp_listen("127.0.0.1", 0, 1, 0);
        CHECK(lfd >= 0);
        j.fd = lfd;
    } else if (kind == K_CONNECT) {
        lfd = weft_tcp_listen("127.0.0.1", 0, 1, 0);
        CHECK(lfd >= 0);
        j.fd = lfd;
    } else if (kind == K_JOIN) {
        CHECK_EQ(weft_spawn(forever_fiber, NULL, NULL, &j.other), 0);
    }
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(blocker, &j, NULL, &f), 0);
    /* Let it block (the connect case needs a few round trips). */
    for (int i = 0; i < 5; i++)
        CHECK_EQ(weft_sleep(2000000), 0);
    CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    if (kind == K_CONNECT) {
        /* connects may also time out in the kernel; cancel must win here */
        CHECK_EQ(j.result, -ECANCELED);
    } else {
        CHECK_EQ(j.result, -ECANCELED);
    }
    CHECK_EQ(j.after, -ECANCELED);
    if (kind == K_JOIN) {
        CHECK_EQ(weft_cancel(j.other), 0);
        CHECK_EQ(weft_join(j.other, NULL, WEFT_FOREVER), 0);
    }
    if (p[0] >= 0) { weft_close(p[0]); weft_close(p[1]); }
    if (sv[0] >= 0) { weft_close(sv[0]); weft_close(sv[1]); }
    if (lfd >= 0) weft_close(lfd);
}

static void *self_cancel(void *arg)
{
    CHECK_EQ(weft_cancelled(), 0);
    CHECK_EQ(weft_cancel(weft_self()), 0);
    CHECK_EQ(weft_cancelled(), 1);
    CHECK_EQ(weft_sleep(0), -ECANCELED);
    CHECK_EQ(weft_yield(), -ECANCELED);
    CHECK_EQ(weft_park(0), -ECANCELED);
    return arg;
}

static void *quick(void *arg) { return arg; }

static void *body(void *arg)
{
    for (int k = 0; k < K_COUNT; k++)
        run_kind(k);
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(self_cancel, (void *)5, NULL, &f), 0);
    void *res;
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)5);
    /* Cancelling a finished, unjoined fiber does nothing. */
    CHECK_EQ(weft_spawn(quick, (void *)6, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)6);
    /* A fiber cancelled before it first runs sees it at its first call. */
    job j = {.kind = K_SLEEP};
    CHECK_EQ(weft_spawn(blocker, &j, NULL, &f), 0);
    CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j.result, -ECANCELED);
    return arg;
}

int main(void)
{
    h_begin("cancel");
    h_run(body, NULL);
    return h_end();
}
