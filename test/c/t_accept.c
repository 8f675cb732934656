/* Accepting under connection churn: a burst of queued connections is
 * taken without blocking for each one (the system call goes first while
 * the queue is not known to be empty), an accept that finds the queue
 * empty waits (on io_uring a ring ACCEPT told to wait for a connection
 * before trying) and wakes for the next connection, with its address;
 * deadlines, cancellation and a closed listener end such a wait and lose
 * no connection; the steady one-connection-at-a-time pattern of a churn
 * benchmark; and an accepted socket is known to be a stream socket (or
 * not) from its listener, so write-behind is accepted or refused without
 * asking the kernel. Every backend. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#define SEC 1000000000LL
#define BURST 100

static uint64_t switches(void)
{
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    return st.switches;
}

/* A plain blocking client socket connected to 127.0.0.1:@port (the
 * handshake completes in the kernel, without an accept). */
static int client(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static int client_port(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

/* Each accepted connection's first byte names the client. */
static int accept_and_read(int lfd, int64_t deadline)
{
    int c = weft_accept(lfd, NULL, NULL, deadline);
    if (c < 0)
        return c;
    unsigned char b = 0;
    CHECK_EQ(weft_recv(c, &b, 1, 0, weft_deadline_in(5 * SEC)), 1);
    CHECK_EQ(weft_close(c), 0);
    return b;
}

static void burst(int lfd, int port)
{
    H_CASE("burst");
    int cl[BURST];
    /* Leave the listener in the "queue empty" state first. */
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -EAGAIN);
    for (int i = 0; i < BURST; i++) {
        cl[i] = client(port);
        unsigned char b = (unsigned char)i;
        CHECK_EQ(write(cl[i], &b, 1), 1);
    }
    /* Every queued connection, each exactly once, and without a wait per
     * connection: at most the first accept may block (a ring ACCEPT that
     * then says more are queued). */
    bool seen[BURST] = {false};
    int fds[BURST];
    uint64_t sw0 = switches();
    for (int i = 0; i < BURST; i++) {
        fds[i] = weft_accept(lfd, NULL, NULL, weft_deadline_in(5 * SEC));
        CHECK(fds[i] >= 0);
    }
    uint64_t sw = switches() - sw0;
    CHECK(sw <= 4);
    for (int i = 0; i < BURST; i++) {
        unsigned char b = 0;
        CHECK_EQ(weft_recv(fds[i], &b, 1, 0, weft_deadline_in(5 * SEC)), 1);
        CHECK(b < BURST && !seen[b]);
        seen[b] = true;
        CHECK_EQ(weft_close(fds[i]), 0);
    }
    /* Drained: a try says so, a wait times out. */
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_accept(lfd, NULL, NULL, weft_deadline_in(2000000)), -ETIMEDOUT);
    for (int i = 0; i < BURST; i++)
        close(cl[i]);
}

/* A fiber that connects after a short sleep, so that the accept waits. */
typedef struct {
    int port;
    int fd;
    int64_t delay_ns;
} late_arg;

static void *late_client(void *arg)
{
    late_arg *a = arg;
    CHECK_EQ(weft_sleep(a->delay_ns), 0);
    a->fd = weft_tcp_connect("127.0.0.1", a->port, weft_deadline_in(5 * SEC));
    CHECK(a->fd >= 0);
    return NULL;
}

static void waits_then_wakes(int lfd, int port)
{
    H_CASE("waits then wakes");
    /* The queue was just seen empty: this accept waits, then takes the
     * connection that arrives, with its address. */
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -EAGAIN);
    for (int round = 0; round < 3; round++) {
        late_arg a = {.port = port, .fd = -1, .delay_ns = 2000000};
        weft_fiber_t f;
        CHECK_EQ(weft_spawn(late_client, &a, NULL, &f), 0);
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        memset(&ss, 0, sizeof ss);
        int c = weft_accept(lfd, (struct sockaddr *)&ss, &len, weft_deadline_in(5 * SEC));
        CHECK(c >= 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
        CHECK_EQ(ss.ss_family, AF_INET);
        CHECK_EQ(len, sizeof(struct sockaddr_in));
        CHECK_EQ(ntohs(((struct sockaddr_in *)&ss)->sin_port), client_port(a.fd));
        CHECK_EQ(weft_send(a.fd, "x", 1, 0, WEFT_FOREVER), 1);
        char b;
        CHECK_EQ(weft_recv(c, &b, 1, 0, weft_deadline_in(5 * SEC)), 1);
        CHECK_EQ(weft_close(c), 0);
        CHECK_EQ(weft_close(a.fd), 0);
    }
}

/* One connection at a time, each accepted while the next client is not
 * yet there: the churn pattern. */
static void churn(int lfd, int port)
{
    H_CASE("churn");
    for (int i = 0; i < 200; i++) {
        int cl = client(port);
        unsigned char b = (unsigned char)i;
        CHECK_EQ(write(cl, &b, 1), 1);
        CHECK_EQ(accept_and_read(lfd, weft_deadline_in(5 * SEC)), b);
        close(cl);
    }
    /* and alternating with waits */
    for (int i = 0; i < 20; i++) {
        late_arg a = {.port = port, .fd = -1, .delay_ns = 200000};
        weft_fiber_t f;
        CHECK_EQ(weft_spawn(late_client, &a, NULL, &f), 0);
        int c = weft_accept(lfd, NULL, NULL, weft_deadline_in(5 * SEC));
        CHECK(c >= 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
        CHECK_EQ(weft_close(c), 0);
        CHECK_EQ(weft_close(a.fd), 0);
        int cl = client(port);
        c = weft_accept(lfd, NULL, NULL, weft_deadline_in(5 * SEC));
        CHECK(c >= 0);
        CHECK_EQ(weft_close(c), 0);
        close(cl);
    }
}

static void *waiting_acceptor(void *arg)
{
    int *p = arg;
    *p = weft_accept(p[1], NULL, NULL, WEFT_FOREVER);
    return NULL;
}

/* A wait that ends without a connection (deadline, cancellation, the
 * listener closed) loses none: the next accept takes it. */
static void interrupted(void)
{
    H_CASE("deadline");
    int lfd = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    CHECK(lfd >= 0);
    int port = weft_local_port(lfd);
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_accept(lfd, NULL, NULL, weft_deadline_in(3000000)), -ETIMEDOUT);
    int cl = client(port);
    unsigned char b = 7;
    CHECK_EQ(write(cl, &b, 1), 1);
    CHECK_EQ(accept_and_read(lfd, weft_deadline_in(5 * SEC)), 7);
    close(cl);

    H_CASE("cancelled");
    int st[2] = {0, lfd};
    h_interrupt(waiting_acceptor, st, -1);
    CHECK_EQ(st[0], -ECANCELED);
    cl = client(port);
    b = 8;
    CHECK_EQ(write(cl, &b, 1), 1);
    CHECK_EQ(accept_and_read(lfd, weft_deadline_in(5 * SEC)), 8);
    close(cl);

    H_CASE("listener closed");
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -EAGAIN);
    st[0] = 0;
    h_interrupt(waiting_acceptor, st, lfd);
    CHECK_EQ(st[0], -EBADF);
}

/* The listener's socket type carries over to what it accepts. */
static void stream_kind(void)
{
    H_CASE("write-behind on accepted sockets");
    int lfd = weft_tcp_listen("127.0.0.1", 0, 4, 0);
    CHECK(lfd >= 0);
    int cl = client(weft_local_port(lfd));
    int c = weft_accept(lfd, NULL, NULL, weft_deadline_in(5 * SEC));
    CHECK(c >= 0);
    CHECK_EQ(weft_write_behind(c, 1), 0);
    CHECK_EQ(weft_send(c, "hi", 2, 0, weft_deadline_in(5 * SEC)), 2);
    char buf[2];
    /* (not read(2): the held-back send goes out when the loop runs) */
    size_t got = 0;
    CHECK_EQ(weft_read_full(cl, buf, 2, &got, weft_deadline_in(5 * SEC)), 0);
    CHECK_EQ(weft_close(c), 0);
    close(cl);
    CHECK_EQ(weft_close(lfd), 0);

    H_CASE("seqpacket listener");
    int u = weft_socket(AF_UNIX, SOCK_SEQPACKET, 0);
    CHECK(u >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "weft-t-accept-%d", (int)getpid());
    socklen_t slen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                                 strlen(sa.sun_path + 1));
    CHECK_EQ(bind(u, (struct sockaddr *)&sa, slen), 0);
    CHECK_EQ(listen(u, 4), 0);
    CHECK_EQ(weft_write_behind(u, 1), -EINVAL);
    int uc = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    CHECK(uc >= 0);
    CHECK_EQ(connect(uc, (struct sockaddr *)&sa, slen), 0);
    int ua = weft_accept(u, NULL, NULL, weft_deadline_in(5 * SEC));
    CHECK(ua >= 0);
    CHECK_EQ(weft_write_behind(ua, 1), -EINVAL); /* not a byte stream */
    CHECK_EQ(weft_send(ua, "p", 1, 0, weft_deadline_in(5 * SEC)), 1);
    CHECK_EQ(weft_recv(uc, buf, 2, 0, weft_deadline_in(5 * SEC)), 1);
    CHECK_EQ(weft_close(ua), 0);
    close(uc);
    CHECK_EQ(weft_close(u), 0);

    H_CASE("datagram socket");
    int d = weft_socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(d >= 0);
    CHECK_EQ(weft_write_behind(d, 1), -EINVAL);
    CHECK_EQ(weft_close(d), 0);
    CHECK_EQ(weft_write_behind(d, 1), -EBADF); /* closed: asked again */
}

static void *body(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
    CHECK(lfd >= 0);
    int port = weft_local_port(lfd);
    burst(lfd, port);
    waits_then_wakes(lfd, port);
    churn(lfd, port);
    burst(lfd, port); /* again, after the listener has waited in the ring */
    CHECK_EQ(weft_close(lfd), 0);
    interrupted();
    stream_kind();
    return NULL;
}

int main(void)
{
    h_begin("t_accept");
    h_raise_nofile(4 * BURST + 64);
    h_run(body, NULL);
    return h_end();
}
