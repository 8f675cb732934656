/* Reads after a short read. On readiness backends a stream read that came
 * back short makes the next read wait for a readable edge before trying
 * (io.c). These cases must still see every byte, EOF and error at once:
 * an EOF that arrived with the data, data that arrived while the reader
 * ran without the loop turning, a deadline of 0, datagrams (a short one
 * says nothing), and a peer that writes again much later. Over TCP and a
 * Unix stream socket pair. */
#include "harness.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DL() weft_deadline_in(5000000000LL)

/* Two connected stream sockets, @a read by weft fibers, @b the peer. */
static void stream_pair(int tcp, int *a, int *b)
{
    if (!tcp) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        *a = sv[0];
        *b = sv[1];
        return;
    }
    h_tcp_pair(a, b);
}

static int peer_fd;
static void *late_writer(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_sleep(30000000), 0); /* the reader is waiting by now */
    CHECK_EQ(weft_send(peer_fd, "later", 5, 0, DL()), 5);
    return NULL;
}

static void *close_after(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_send(peer_fd, "abc", 3, 0, DL()), 3);
    CHECK_EQ(weft_shutdown(peer_fd, SHUT_WR), 0);
    return NULL;
}

static void stream_cases(int tcp)
{
    char buf[256];
    int a, b;

    /* 1. EOF that arrives with the last data, after the reader has waited
     * once (so the descriptor is registered and its edge is consumed by
     * the wake-up): data (short), then 0 at once, then 0 again. */
    stream_pair(tcp, &a, &b);
    peer_fd = b;
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(close_after, NULL, NULL, &f), 0);
    ssize_t n = weft_recv(a, buf, sizeof buf, 0, DL());
    CHECK(n > 0);
    size_t got = (size_t)n;
    while (got < 3) {
        n = weft_recv(a, buf + got, sizeof buf - got, 0, DL());
        CHECK(n > 0);
        got += (size_t)n;
    }
    CHECK(memcmp(buf, "abc", 3) == 0);
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, DL()), 0);
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, 0), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);

    /* 2. Data written by the peer while the reader runs without letting
     * the loop turn: a deadline-0 read takes it, and so does a blocking
     * one. */
    stream_pair(tcp, &a, &b);
    CHECK_EQ(weft_send(b, "x", 1, 0, DL()), 1);
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, DL()), 1); /* short */
    CHECK_EQ(send(b, "yz", 2, MSG_DONTWAIT), 2);
    CHECK_EQ(weft_recv(a, buf, 1, 0, 0), 1); /* deadline 0: one attempt */
    CHECK_EQ(buf[0], 'y');
    CHECK_EQ(send(b, "w", 1, MSG_DONTWAIT), 1);
    n = weft_recv(a, buf, sizeof buf, 0, DL());
    CHECK_EQ(n, 2);
    CHECK(memcmp(buf, "zw", 2) == 0);

    /* 3. Nothing arrives: a deadline ends the wait, after one last try. */
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, weft_deadline_in(20000000)), -ETIMEDOUT);
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, 0), -EAGAIN);

    /* 4. The peer writes again much later: the waiting reader gets it. */
    peer_fd = b;
    CHECK_EQ(weft_spawn(late_writer, NULL, NULL, &f), 0);
    n = weft_recv(a, buf, sizeof buf, 0, DL());
    CHECK_EQ(n, 5);
    CHECK(memcmp(buf, "later", 5) == 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);

    /* 5. A read that fills the buffer is not short: the rest is read
     * without waiting for a new edge. */
    CHECK_EQ(send(b, "0123456789", 10, MSG_DONTWAIT), 10);
    CHECK_EQ(weft_recv(a, buf, 4, 0, DL()), 4);
    CHECK_EQ(weft_recv(a, buf, 4, 0, 0), 4);
    CHECK_EQ(weft_recv(a, buf, 4, 0, 0), 2);
    CHECK(memcmp(buf, "89", 2) == 0);

    /* 6. The peer resets or closes while the reader waits after a short
     * read: it wakes with EOF or the error. */
    CHECK_EQ(send(b, "q", 1, MSG_DONTWAIT), 1);
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, DL()), 1);
    peer_fd = b;
    CHECK_EQ(weft_spawn(close_after, NULL, NULL, &f), 0);
    got = 0;
    while (got < 3) {
        n = weft_recv(a, buf + got, sizeof buf - got, 0, DL());
        CHECK(n > 0);
        got += (size_t)n;
    }
    CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, DL()), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

static void datagrams(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    char buf[64];
    CHECK_EQ(send(sv[1], "one", 3, 0), 3);
    CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0, DL()), 3); /* short */
    CHECK_EQ(send(sv[1], "two", 3, 0), 3);
    CHECK_EQ(send(sv[1], "three", 5, 0), 5);
    CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0, 0), 3);
    CHECK(memcmp(buf, "two", 3) == 0);
    CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0, 0), 5);
    CHECK(memcmp(buf, "three", 5) == 0);
    CHECK_EQ(weft_close(sv[0]), 0);
    CHECK_EQ(weft_close(sv[1]), 0);
}

static void *body(void *arg)
{
    stream_cases(1);
    stream_cases(0);
    datagrams();
    return arg;
}

int main(void)
{
    h_begin("drained");
    h_run(body, NULL);
    return h_end();
}
