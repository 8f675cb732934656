/* A tiny ring: 2 submission entries (4 completion slots) against 2,000
 * concurrent operations, so the submission queue fills and completions
 * overflow into the kernel's list. Nothing may be lost. On epoll/poll the
 * same workload runs as a plain stress test. */
#include "harness.h"

#include <sys/socket.h>

#define PAIRS 1000

static int fds[PAIRS][2];
static long done;

static void *side(void *arg)
{
    long i = (long)arg;
    int me = (int)(i & 1), pair = (int)(i >> 1);
    int fd = fds[pair][me];
    char buf[8];
    for (int round = 0; round < 5; round++) {
        if ((round & 1) == me) {
            CHECK_EQ(weft_write_all(fd, "ping", 4, NULL, WEFT_FOREVER), 0);
        } else {
            size_t got = 0;
            CHECK_EQ(weft_read_full(fd, buf, 4, &got, WEFT_FOREVER), 0);
            CHECK(!memcmp(buf, "ping", 4));
        }
    }
    done++;
    return NULL;
}

/* A read on a quiet socket that times out: its op is cancelled. */
static int64_t expiry;
static void *quiet(void *arg)
{
    int fd = fds[(long)arg][0];
    char buf[8];
    CHECK_EQ(weft_recv(fd, buf, sizeof buf, 0, expiry), -ETIMEDOUT);
    /* The cancelled op is gone: the next read gets what is sent. */
    CHECK_EQ(weft_write_all(fds[(long)arg][1], "pong", 4, NULL, WEFT_FOREVER), 0);
    size_t got = 0;
    CHECK_EQ(weft_read_full(fd, buf, 4, &got, WEFT_FOREVER), 0);
    CHECK(!memcmp(buf, "pong", 4));
    done++;
    return NULL;
}

static void *body(void *arg)
{
    for (int i = 0; i < PAIRS; i++)
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            0, fds[i]), 0);
    weft_fiber_t f[2 * PAIRS];
    for (long i = 0; i < 2 * PAIRS; i++)
        CHECK_EQ(weft_spawn(side, (void *)i, NULL, &f[i]), 0);
    for (int i = 0; i < 2 * PAIRS; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(done, 2 * PAIRS);

    /* Every read times out in the same turn of the loop: a thousand
     * cancels through two submission entries. */
    done = 0;
    expiry = weft_deadline_in(50 * WEFT_MS);
    for (long i = 0; i < PAIRS; i++)
        CHECK_EQ(weft_spawn(quiet, (void *)i, NULL, &f[i]), 0);
    for (int i = 0; i < PAIRS; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(done, PAIRS);
    for (int i = 0; i < PAIRS; i++) {
        weft_close(fds[i][0]);
        weft_close(fds[i][1]);
    }
    return arg;
}

int main(void)
{
    setenv("WEFT_URING_ENTRIES", "2", 1);
    h_raise_nofile(2 * PAIRS + 100);
    h_begin("ring_tiny");
    h_run(body, NULL);
    return h_end();
}
