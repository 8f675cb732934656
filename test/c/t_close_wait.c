/* Closing a descriptor other fibers wait on wakes them with -EBADF before
 * the number is released; a reused number never gets the old waits' events;
 * hang-ups wake waiters without a busy loop. */
#include "harness.h"

#include <sys/socket.h>

typedef struct {
    int fd;
    int events;
    int result;
    int woke;
} waiter;

static void *wait_read(void *arg)
{
    waiter *w = arg;
    char c;
    w->result = (int)weft_read(w->fd, &c, 1, WEFT_FOREVER);
    w->woke = 1;
    return NULL;
}

static void *wait_fd(void *arg)
{
    waiter *w = arg;
    w->result = weft_wait_fd(w->fd, w->events, WEFT_FOREVER);
    w->woke = 1;
    return NULL;
}

static void *wait_write(void *arg)
{
    waiter *w = arg;
    static char big[1 << 16];
    for (;;) {
        ssize_t n = weft_write(w->fd, big, sizeof big, WEFT_FOREVER);
        if (n < 0) {
            w->result = (int)n;
            break;
        }
    }
    w->woke = 1;
    return NULL;
}

static void *closer(void *arg)
{
    CHECK_EQ(weft_sleep(2000000), 0);
    CHECK_EQ(weft_close(*(int *)arg), 0);
    return NULL;
}

static void *body(void *arg)
{
    /* several fibers waiting on one pipe; another fiber closes it */
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    waiter w[4] = {{.fd = p[0]}, {.fd = p[0]}, {.fd = p[0], .events = WEFT_READABLE},
                   {.fd = p[0], .events = WEFT_READABLE | WEFT_PRIORITY}};
    weft_fiber_t f[4], c;
    CHECK_EQ(weft_spawn(wait_read, &w[0], NULL, &f[0]), 0);
    CHECK_EQ(weft_spawn(wait_read, &w[1], NULL, &f[1]), 0);
    CHECK_EQ(weft_spawn(wait_fd, &w[2], NULL, &f[2]), 0);
    CHECK_EQ(weft_spawn(wait_fd, &w[3], NULL, &f[3]), 0);
    CHECK_EQ(weft_spawn(closer, &p[0], NULL, &c), 0);
    CHECK_EQ(weft_join(c, NULL, WEFT_FOREVER), 0);
    /* The closer's weft_close woke them; the number may be reused now. */
    int reuse[2];
    CHECK_EQ(weft_pipe(reuse), 0);
    CHECK_EQ(reuse[0], p[0]); /* lowest free number: the one just closed */
    CHECK_EQ(weft_write(reuse[1], "z", 1, WEFT_FOREVER), 1);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
        CHECK_EQ(w[i].result, -EBADF);
    }
    /* the data on the reused descriptor was not consumed by old waiters */
    char ch;
    CHECK_EQ(weft_read(reuse[0], &ch, 1, 0), 1);
    CHECK_EQ(ch, 'z');
    weft_close(reuse[0]);
    weft_close(reuse[1]);
    weft_close(p[1]);

    /* a writer blocked on a full pipe; the write end is closed under it */
    CHECK_EQ(weft_pipe(p), 0);
    waiter ww = {.fd = p[1]};
    weft_fiber_t wf;
    CHECK_EQ(weft_spawn(wait_write, &ww, NULL, &wf), 0);
    CHECK_EQ(weft_spawn(closer, &p[1], NULL, &c), 0);
    CHECK_EQ(weft_join(c, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(wf, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(ww.result, -EBADF);
    weft_close(p[0]);

    /* fd reuse with a stale registration: the old fd's event must not
     * reach a waiter of the new one */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    waiter a = {.fd = sv[0]};
    weft_fiber_t af;
    CHECK_EQ(weft_spawn(wait_read, &a, NULL, &af), 0);
    CHECK_EQ(weft_yield(), 0);
    int keep = dup(sv[0]); /* the open file lives on through the dup */
    CHECK(keep >= 0);
    CHECK_EQ(weft_close(sv[0]), 0);
    CHECK_EQ(weft_join(af, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(a.result, -EBADF);
    CHECK_EQ(weft_pipe(p), 0); /* likely takes sv[0]'s number */
    waiter b = {.fd = p[0]};
    weft_fiber_t bf;
    CHECK_EQ(weft_spawn(wait_read, &b, NULL, &bf), 0);
    CHECK_EQ(weft_yield(), 0);
    /* make the OLD file readable: a stale registration would fire */
    CHECK_EQ(write(sv[1], "old", 3), 3);
    CHECK_EQ(weft_sleep(5000000), 0);
    CHECK_EQ(b.woke, 0);
    CHECK_EQ(weft_write(p[1], "n", 1, WEFT_FOREVER), 1);
    CHECK_EQ(weft_join(bf, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(b.result, 1);
    weft_close(p[0]);
    weft_close(p[1]);
    close(keep);
    weft_close(sv[1]);

    /* hang-up wakes a reader exactly once, with EOF, and the loop idles
     * afterwards instead of spinning */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    waiter h = {.fd = sv[0]};
    weft_fiber_t hf;
    CHECK_EQ(weft_spawn(wait_read, &h, NULL, &hf), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_close(sv[1]), 0);
    CHECK_EQ(weft_join(hf, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(h.result, 0);
    weft_stats_t s0, s1;
    weft_sched_stats(weft_sched_self(), &s0);
    CHECK_EQ(weft_sleep(20000000), 0);
    weft_sched_stats(weft_sched_self(), &s1);
    /* one switch out and one back for the sleep: no wake-ups in between */
    CHECK(s1.switches - s0.switches <= 4);
    weft_close(sv[0]);

    /* waiting on a closed descriptor */
    CHECK_EQ(weft_wait_fd(sv[0], WEFT_READABLE, WEFT_FOREVER), -EBADF);
    char buf[4];
    CHECK_EQ(weft_read(sv[0], buf, 4, WEFT_FOREVER), -EBADF);
    /* weft_fd_forget wakes waiters without closing */
    CHECK_EQ(weft_pipe(p), 0);
    waiter g = {.fd = p[0]};
    weft_fiber_t gf;
    CHECK_EQ(weft_spawn(wait_read, &g, NULL, &gf), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_fd_forget(p[0]), 0);
    CHECK_EQ(weft_join(gf, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(g.result, -EBADF);
    CHECK_EQ(weft_write(p[1], "k", 1, 0), 1);
    CHECK_EQ(weft_read(p[0], buf, 1, WEFT_FOREVER), 1); /* still usable */
    CHECK_EQ(weft_fd_forget(-3), -EBADF);
    weft_close(p[0]);
    weft_close(p[1]);
    return arg;
}

int main(void)
{
    h_begin("close_wait");
    h_run(body, NULL);
    return h_end();
}
