/* weft_write_behind / weft_flush. On io_uring small sends return before the
 * kernel has the bytes; on epoll and poll the calls succeed and change
 * nothing, so every case here holds on every backend, and the cases about
 * the write-behind error are checked where it exists. Covered: the byte
 * stream arrives whole and in order across appends, large sends, writev
 * and shutdown; close lets the bytes out first; a fiber that sends and
 * returns does not lose them; a peer that never reads ends in -ETIMEDOUT
 * that stays; a reset peer's error stays; forget with bytes in flight;
 * a send after shutdown(SHUT_WR) fails at once; bad arguments. The harness's teardown checks that no operation, wait or
 * descriptor is left. */
#include "harness.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DL() weft_deadline_in(5000000000LL)

static int uring(void)
{
    return strcmp(weft_sched_backend(weft_sched_self()), "io_uring") == 0;
}

/* Byte i of the stream. */
static unsigned char pat(size_t i)
{
    return (unsigned char)(i * 131 + (i >> 9));
}

#define STREAM_TOTAL (3u << 20)

typedef struct {
    int fd;
    size_t got;
    int bad;
} reader;

/* Read to EOF, checking every byte against pat(). */
static void *read_all(void *arg)
{
    reader *rd = arg;
    static char buf[65536];
    for (;;) {
        ssize_t n = weft_recv(rd->fd, buf, sizeof buf, 0, DL());
        CHECK(n >= 0);
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if ((unsigned char)buf[i] != pat(rd->got + (size_t)i))
                rd->bad++;
        rd->got += (size_t)n;
    }
    return NULL;
}

/* 1. Small sends (appended behind the bytes in flight), sends too large
 * for the buffer, writev and weft_write mixed: the peer sees one ordered
 * stream, then EOF from weft_shutdown. */
static void ordered_stream(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_write_behind(a, 1), 0);
    reader rd = {b, 0, 0};
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(read_all, &rd, NULL, &f), 0);
    static char out[20000];
    size_t sent = 0;
    unsigned seed = 7;
    for (int k = 0; sent < STREAM_TOTAL; k++) {
        seed = seed * 1103515245u + 12345u;
        size_t len = 1 + (seed >> 16) % 600;
        if (k % 97 == 0)
            len = 9000 + (seed >> 8) % 9000; /* larger than the buffer */
        if (len > STREAM_TOTAL - sent)
            len = STREAM_TOTAL - sent;
        for (size_t i = 0; i < len; i++)
            out[i] = (char)pat(sent + i);
        ssize_t n;
        if (k % 5 == 1) {
            size_t h = len / 3;
            struct iovec iov[3] = {{out, h}, {out + h, h}, {out + 2 * h, len - 2 * h}};
            n = weft_writev(a, iov, 3, DL());
        } else if (k % 5 == 2) {
            n = weft_write(a, out, len, DL());
        } else {
            n = weft_send(a, out, len, 0, DL());
        }
        CHECK(n > 0);
        sent += (size_t)n; /* a short write: the rest is re-sent next turn */
        if (k % 1000 == 0)
            CHECK_EQ(weft_yield(), 0);
    }
    CHECK_EQ(weft_flush(a, DL()), 0);
    CHECK_EQ(weft_shutdown(a, SHUT_WR), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(rd.got, (size_t)STREAM_TOTAL);
    CHECK_EQ(rd.bad, 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

/* 2. Closing right after many small sends lets them all out first. */
static void close_lets_out(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_write_behind(a, 1), 0);
    reader rd = {b, 0, 0};
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(read_all, &rd, NULL, &f), 0);
    char out[100];
    size_t sent = 0;
    for (int k = 0; k < 500; k++) {
        for (size_t i = 0; i < sizeof out; i++)
            out[i] = (char)pat(sent + i);
        CHECK_EQ(weft_send(a, out, sizeof out, 0, DL()), (ssize_t)sizeof out);
        sent += sizeof out;
    }
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(rd.got, sent);
    CHECK_EQ(rd.bad, 0);
    CHECK_EQ(weft_close(b), 0);
}

/* 3. A fiber that sends and returns at once: its bytes still arrive. */
static int quick_fd;
static void *send_and_go(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_send(quick_fd, "bye!", 4, 0, DL()), 4);
    return NULL;
}

static void sender_returns(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_write_behind(a, 1), 0);
    quick_fd = a;
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(send_and_go, NULL, NULL, &f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    char buf[8];
    size_t got = 0;
    while (got < 4) {
        ssize_t n = weft_recv(b, buf + got, sizeof buf - got, 0, DL());
        CHECK(n > 0);
        got += (size_t)n;
    }
    CHECK(memcmp(buf, "bye!", 4) == 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

/* Small send buffers, so a peer that does not read stalls us soon. */
static void small_buffers(int a, int b)
{
    int sz = 4096;
    CHECK_EQ(setsockopt(a, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz), 0);
    CHECK_EQ(setsockopt(b, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz), 0);
}

/* 4. The peer never reads: sends with a short deadline end in -ETIMEDOUT,
 * and with write-behind that error stays on the descriptor. */
static void stalled_peer(void)
{
    /* A unix socket pair: once full it stays full while its peer does not
     * read. A TCP peer's kernel may compact its receive queue and open the
     * window again, letting the stuck bytes out before their deadline. */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int a = sv[0], b = sv[1];
    small_buffers(a, b);
    CHECK_EQ(weft_write_behind(a, 1), 0);
    char out[1000];
    memset(out, 'x', sizeof out);
    ssize_t n = 0;
    size_t accepted = 0;
    for (int k = 0; k < 100000; k++) {
        n = weft_send(a, out, sizeof out, 0, weft_deadline_in(50000000));
        if (n < 0)
            break;
        accepted += (size_t)n;
    }
    CHECK_EQ(n, -ETIMEDOUT);
    CHECK(accepted > 0);
    if (uring()) {
        /* The buffer's own deadline passes too: its bytes are dropped and
         * the error is the descriptor's from now on, at once. */
        CHECK_EQ(weft_sleep(100000000), 0);
        CHECK_EQ(weft_send(a, out, 10, 0, DL()), -ETIMEDOUT);
        CHECK_EQ(weft_write(a, out, 10, DL()), -ETIMEDOUT);
        CHECK_EQ(weft_flush(a, DL()), -ETIMEDOUT);
    } else {
        CHECK_EQ(weft_flush(a, DL()), 0);
    }
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

/* 5. The peer resets the connection: once a send reports it, every later
 * send fails too (the socket's own error on readiness backends, the
 * descriptor's write-behind error on io_uring). */
static void reset_peer(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_write_behind(a, 1), 0);
    struct linger lg = {1, 0};
    CHECK_EQ(setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    CHECK_EQ(weft_close(b), 0); /* RST */
    ssize_t n = 0;
    for (int k = 0; k < 1000 && n >= 0; k++) {
        n = weft_send(a, "data", 4, 0, DL());
        if (n >= 0)
            CHECK_EQ(weft_sleep(1000000), 0);
    }
    CHECK(n == -ECONNRESET || n == -EPIPE);
    ssize_t again = weft_send(a, "data", 4, 0, DL());
    CHECK(again == -ECONNRESET || again == -EPIPE);
    CHECK_EQ(weft_close(a), 0);
}

/* 6. Forgetting a descriptor with bytes stuck in flight cancels them; the
 * teardown check then finds nothing left. */
static void forget_in_flight(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    small_buffers(a, b);
    CHECK_EQ(weft_write_behind(a, 1), 0);
    char out[1000];
    memset(out, 'y', sizeof out);
    ssize_t n;
    do
        n = weft_send(a, out, sizeof out, 0, weft_deadline_in(30000000));
    while (n > 0);
    CHECK_EQ(n, -ETIMEDOUT);
    CHECK_EQ(weft_fd_forget(a), 0);
    CHECK_EQ(close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

/* 7. After weft_shutdown(SHUT_WR) a send fails with -EPIPE at once, as
 * send(2) does, not later at a flush: the peer still gets the bytes sent
 * before, then EOF, and can still answer. */
static void after_shutdown(void)
{
    int how[] = {SHUT_WR, SHUT_RDWR};
    for (int k = 0; k < 2; k++) {
        int a, b;
        h_tcp_pair(&a, &b);
        CHECK_EQ(weft_write_behind(a, 1), 0);
        CHECK_EQ(weft_send(a, "abc", 3, 0, DL()), 3);
        CHECK_EQ(weft_shutdown(a, how[k]), 0);
        CHECK_EQ(weft_send(a, "def", 3, 0, DL()), -EPIPE);
        CHECK_EQ(weft_write(a, "def", 3, DL()), -EPIPE);
        CHECK_EQ(weft_flush(a, DL()), 0);
        char buf[8];
        size_t got = 0;
        CHECK_EQ(weft_read_full(b, buf, sizeof buf, &got, DL()), 1); /* EOF */
        CHECK_EQ(got, 3);
        CHECK(memcmp(buf, "abc", 3) == 0);
        CHECK_EQ(weft_write(b, "ok", 2, DL()), 2);
        if (how[k] == SHUT_WR) {
            CHECK_EQ(weft_read_full(a, buf, 2, NULL, DL()), 0);
            CHECK(memcmp(buf, "ok", 2) == 0);
        }
        CHECK_EQ(weft_close(a), 0);
        CHECK_EQ(weft_close(b), 0);
    }
}

/* 8. Bad arguments and descriptors that cannot take it. */
static void bad_args(void)
{
    CHECK_EQ(weft_write_behind(-1, 1), -EBADF);
    CHECK_EQ(weft_flush(-1, DL()), -EBADF);
    int a, b;
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_write_behind(a, 2), -EINVAL);
    CHECK_EQ(weft_write_behind(a, -1), -EINVAL);
    CHECK_EQ(weft_flush(a, DL()), 0); /* never on: nothing to wait for */
    CHECK_EQ(weft_write_behind(a, 1), 0);
    CHECK_EQ(weft_write_behind(a, 0), 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    int u = weft_socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(u >= 0);
    CHECK_EQ(weft_write_behind(u, 1), -EINVAL);
    CHECK_EQ(weft_close(u), 0);
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    CHECK_EQ(weft_write_behind(p[1], 1), -ENOTSOCK);
    CHECK_EQ(weft_close(p[0]), 0);
    CHECK_EQ(weft_close(p[1]), 0);
    CHECK_EQ(weft_write_behind(p[1], 1), -EBADF);
}

static void *body(void *arg)
{
    ordered_stream();
    close_lets_out();
    sender_returns();
    stalled_peer();
    reset_peer();
    forget_in_flight();
    after_shutdown();
    bad_args();
    return arg;
}

/* 9. The last fiber returns while a buffer is stuck behind a peer that
 * does not read, its deadline not yet passed: the run must still end, at
 * that deadline, with the send cancelled. */
static int left_a, left_b;
static void *leave_stuck(void *arg)
{
    h_tcp_pair(&left_a, &left_b);
    small_buffers(left_a, left_b);
    char out[1000];
    memset(out, 'z', sizeof out);
    /* Fill the socket behind weft's back, until it stays full (the
     * receiver's queue may be compacted once): the next send must wait. */
    for (int round = 0; round < 5; round++) {
        while (send(left_a, out, sizeof out, MSG_DONTWAIT) > 0)
            ;
        CHECK_EQ(weft_sleep(20000000), 0);
    }
    CHECK_EQ(weft_write_behind(left_a, 1), 0);
    ssize_t n = weft_send(left_a, out, 10, 0, weft_deadline_in(100000000));
    CHECK(uring() ? n == 10 : n == -ETIMEDOUT);
    return arg; /* on io_uring with the send held back, its deadline unarmed */
}

int main(void)
{
    CHECK_EQ(weft_write_behind(0, 1), -EPERM); /* no scheduler yet */
    h_begin("write_behind");
    h_run(body, NULL);
    h_run(leave_stuck, NULL);
    h_check_idle();
    CHECK_EQ(weft_close(left_a), 0); /* outside a fiber: no waiting */
    CHECK_EQ(weft_close(left_b), 0);
    return h_end();
}
