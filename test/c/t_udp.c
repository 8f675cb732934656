/* Datagrams: recvfrom/sendto with addresses over UDP (IPv4 and IPv6),
 * recvmsg/sendmsg with scatter/gather and the sender's address, SCM_RIGHTS
 * over a Unix datagram pair, truncation and MSG_TRUNC, 1,000 round trips
 * between fibers, deadlines (past, future, forever), cancellation, close
 * while waiting, a send that waits for room, bad input. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#define MS 1000000LL

static int udp_bound(const char *host)
{
    int fd = weft_listen(host, 0, SOCK_DGRAM, 0, 0, 0);
    CHECK(fd >= 0);
    return fd;
}

static void addresses(const char *host)
{
    int a = udp_bound(host), b = udp_bound(host);
    struct sockaddr_storage to, from;
    socklen_t tolen = sizeof to, fromlen;
    CHECK_EQ(getsockname(b, (struct sockaddr *)&to, &tolen), 0);
    CHECK_EQ(weft_sendto(a, "hello", 5, 0, (struct sockaddr *)&to, tolen, WEFT_FOREVER), 5);
    char buf[64], text[64];
    fromlen = sizeof from;
    CHECK_EQ(weft_recvfrom(b, buf, sizeof buf, 0, (struct sockaddr *)&from, &fromlen,
                           weft_deadline_in(1000 * MS)), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_EQ(weft_local_port(a), ntohs(from.ss_family == AF_INET
                                           ? ((struct sockaddr_in *)&from)->sin_port
                                           : ((struct sockaddr_in6 *)&from)->sin6_port));
    CHECK(weft_addr_format((struct sockaddr *)&from, fromlen, text, sizeof text) > 0);
    printf("datagram from %s\n", text);
    /* Reply to the address it came from; no address wanted this time. */
    CHECK_EQ(weft_sendto(b, "back", 4, 0, (struct sockaddr *)&from, fromlen, WEFT_FOREVER), 4);
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, NULL, NULL, weft_deadline_in(1000 * MS)), 4);

    /* Truncation: the buffer's worth, or the real length with MSG_TRUNC. */
    CHECK_EQ(weft_sendto(a, "0123456789", 10, 0, (struct sockaddr *)&to, tolen, WEFT_FOREVER), 10);
    CHECK_EQ(weft_recvfrom(b, buf, 4, 0, NULL, NULL, weft_deadline_in(1000 * MS)), 4);
    CHECK_EQ(weft_sendto(a, "0123456789", 10, 0, (struct sockaddr *)&to, tolen, WEFT_FOREVER), 10);
    CHECK_EQ(weft_recvfrom(b, buf, 4, MSG_TRUNC, NULL, NULL, weft_deadline_in(1000 * MS)), 10);
    /* An empty datagram is 0 bytes, not end of file. */
    CHECK_EQ(weft_sendto(a, "", 0, 0, (struct sockaddr *)&to, tolen, WEFT_FOREVER), 0);
    CHECK_EQ(weft_recvfrom(b, buf, sizeof buf, 0, NULL, NULL, weft_deadline_in(1000 * MS)), 0);

    /* recvmsg/sendmsg: gather on send, scatter on receive, msg_name. */
    struct iovec out[3] = {{"ab", 2}, {"cde", 3}, {"f", 1}};
    struct msghdr m = {.msg_name = &to, .msg_namelen = tolen, .msg_iov = out, .msg_iovlen = 3};
    CHECK_EQ(weft_sendmsg(a, &m, 0, WEFT_FOREVER), 6);
    char p1[4], p2[8];
    struct iovec in[2] = {{p1, sizeof p1}, {p2, sizeof p2}};
    struct msghdr r = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = in, .msg_iovlen = 2};
    CHECK_EQ(weft_recvmsg(b, &r, 0, weft_deadline_in(1000 * MS)), 6);
    CHECK(memcmp(p1, "abcd", 4) == 0 && memcmp(p2, "ef", 2) == 0);
    CHECK_EQ(r.msg_namelen, fromlen);
    CHECK_EQ(r.msg_flags & MSG_TRUNC, 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

/* A descriptor passed over a Unix datagram pair. */
static void rights(void)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {"fd", 2};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
                       .msg_controllen = sizeof ctl.space};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &p[1], sizeof(int));
    CHECK_EQ(weft_sendmsg(sv[0], &m, 0, WEFT_FOREVER), 2);
    char buf[4];
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } rctl;
    struct iovec riov = {buf, sizeof buf};
    struct msghdr r = {.msg_iov = &riov, .msg_iovlen = 1, .msg_control = rctl.space,
                       .msg_controllen = sizeof rctl.space};
    CHECK_EQ(weft_recvmsg(sv[1], &r, MSG_CMSG_CLOEXEC, weft_deadline_in(1000 * MS)), 2);
    struct cmsghdr *rc = CMSG_FIRSTHDR(&r);
    CHECK(rc && rc->cmsg_type == SCM_RIGHTS);
    int got;
    memcpy(&got, CMSG_DATA(rc), sizeof got);
    CHECK(got >= 0 && got != p[1]);
    CHECK_EQ(weft_write_all(got, "x", 1, NULL, WEFT_FOREVER), 0); /* the same pipe */
    CHECK_EQ(weft_read(p[0], buf, 1, weft_deadline_in(1000 * MS)), 1);
    int fds[5] = {got, p[0], p[1], sv[0], sv[1]};
    for (int i = 0; i < 5; i++)
        CHECK_EQ(weft_close(fds[i]), 0);
}

typedef struct echo {
    int fd;
    int rounds;
} echo;

static void *echo_server(void *arg)
{
    echo *e = arg;
    char buf[256];
    for (int i = 0; i < e->rounds; i++) {
        struct sockaddr_storage from;
        socklen_t fl = sizeof from;
        ssize_t n = weft_recvfrom(e->fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl,
                                  weft_deadline_in(5000 * MS));
        CHECK(n >= 0);
        CHECK_EQ(weft_sendto(e->fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl,
                             WEFT_FOREVER), n);
    }
    return NULL;
}

static void round_trips(void)
{
    echo e = {udp_bound("127.0.0.1"), 1000};
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(echo_server, &e, NULL, &f), 0);
    int c = weft_dial("127.0.0.1", weft_local_port(e.fd), SOCK_DGRAM, weft_deadline_in(1000 * MS));
    CHECK(c >= 0);
    char out[64], in[64];
    for (int i = 0; i < e.rounds; i++) {
        int n = snprintf(out, sizeof out, "round %d", i);
        CHECK_EQ(weft_send(c, out, (size_t)n, 0, WEFT_FOREVER), n);
        CHECK_EQ(weft_recvfrom(c, in, sizeof in, 0, NULL, NULL, weft_deadline_in(5000 * MS)), n);
        CHECK(memcmp(in, out, (size_t)n) == 0);
    }
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(c), 0);
    CHECK_EQ(weft_close(e.fd), 0);
}

typedef struct waiter {
    int fd;
    int rc;
    int send; /* 1: a sendmsg that waits for room */
} waiter;

static void *waiter_fiber(void *arg)
{
    waiter *w = arg;
    static char buf[65536]; /* not on the fiber's 64 KiB stack */
    if (w->send) {
        memset(buf, 'w', sizeof buf);
        struct iovec iov = {buf, 60000};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
        for (;;) {
            ssize_t n = weft_sendmsg(w->fd, &m, 0, WEFT_FOREVER);
            if (n < 0) {
                w->rc = (int)n;
                return NULL;
            }
        }
    }
    w->rc = (int)weft_recvfrom(w->fd, buf, sizeof buf, 0, NULL, NULL, WEFT_FOREVER);
    return NULL;
}

static void deadlines_cancel_close(void)
{
    int a = udp_bound("127.0.0.1");
    char buf[16];
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, NULL, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, NULL, NULL, weft_now() - 1), -ETIMEDOUT);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, NULL, NULL, weft_deadline_in(20 * MS)), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 20 * MS);
    struct iovec one = {buf, 1};
    struct msghdr m = {.msg_iov = &one, .msg_iovlen = 1};
    CHECK_EQ(weft_recvmsg(a, &m, 0, 0), -EAGAIN);
    int64_t saved;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(3 * MS), &saved), 0);
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, NULL, NULL, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_scope_leave(saved), 0);

    /* Cancel a waiting receive, then close under another. */
    waiter w = {a, 99, 0};
    h_interrupt(waiter_fiber, &w, -1);
    CHECK_EQ(w.rc, -ECANCELED);
    w.rc = 99;
    h_interrupt(waiter_fiber, &w, a);
    CHECK_EQ(w.rc, -EBADF);

    /* A send that waits for room (a Unix datagram pair nobody reads),
     * cancelled, and one ended by close. */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    waiter s = {sv[0], 99, 1};
    h_interrupt(waiter_fiber, &s, -1);
    CHECK_EQ(s.rc, -ECANCELED);
    s.rc = 99;
    h_interrupt(waiter_fiber, &s, sv[0]);
    CHECK_EQ(s.rc, -EBADF);
    CHECK_EQ(weft_close(sv[1]), 0);
}

static void bad_input(void)
{
    int a = udp_bound("127.0.0.1");
    char buf[4];
    struct sockaddr_storage ss;
    CHECK_EQ(weft_recvfrom(-1, buf, sizeof buf, 0, NULL, NULL, 0), -EBADF);
    CHECK_EQ(weft_recvfrom(999999, buf, sizeof buf, 0, NULL, NULL, 0), -EBADF);
    CHECK_EQ(weft_recvfrom(a, NULL, 4, 0, NULL, NULL, 0), -EINVAL);
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, (struct sockaddr *)&ss, NULL, 0), -EINVAL);
    CHECK_EQ(weft_recvfrom(a, buf, sizeof buf, 0, NULL, NULL, -2), -EINVAL);
    CHECK_EQ(weft_sendto(a, NULL, 4, 0, NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_sendto(a, "x", 1, 0, NULL, 0, 0), -EDESTADDRREQ); /* not connected */
    CHECK_EQ(weft_recvmsg(a, NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_sendmsg(a, NULL, 0, 0), -EINVAL);
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    CHECK_EQ(weft_recvfrom(p[0], buf, sizeof buf, 0, NULL, NULL, 0), -ENOTSOCK);
    CHECK_EQ(weft_sendto(p[1], "x", 1, 0, NULL, 0, 0), -ENOTSOCK);
    /* Too large for UDP. */
    static char huge[70000];
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(weft_sendto(a, huge, sizeof huge, 0, (struct sockaddr *)&to, sizeof to, 0), -EMSGSIZE);
    int fds[3] = {a, p[0], p[1]};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_close(fds[i]), 0);
}

static int have_ipv6(void)
{
    int fd = weft_listen("::1", 0, SOCK_DGRAM, 0, 0, 0);
    if (fd < 0)
        return 0;
    weft_close(fd);
    return 1;
}

typedef struct later {
    int fd;
    const char *text;
} later;

/* Writes its text once the fiber that spawned it waits. */
static void *write_later(void *arg)
{
    later *l = arg;
    CHECK_EQ(weft_write_all(l->fd, l->text, strlen(l->text), NULL, WEFT_FOREVER), 0);
    return NULL;
}

/* MSG_WAITALL on a TCP connection waits for the whole buffer, as recv(2)
 * does, though the bytes come in two parts: the second is written only
 * once the receiver waits. End of file and the deadline end it with the
 * bytes that came; a datagram is one datagram still. */
static void stream_waitall(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    char buf[16] = {0};
    weft_fiber_t w;
    later l = {b, "defgh"};
    CHECK_EQ(weft_write_all(b, "abc", 3, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_spawn(write_later, &l, NULL, &w), 0);
    CHECK_EQ(weft_recvfrom(a, buf, 8, MSG_WAITALL, NULL, NULL,
                           weft_deadline_in(5000 * MS)), 8);
    CHECK(memcmp(buf, "abcdefgh", 8) == 0);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);

    /* weft_recv too. */
    memset(buf, 0, sizeof buf);
    l.text = "efgh";
    CHECK_EQ(weft_write_all(b, "abcd", 4, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_spawn(write_later, &l, NULL, &w), 0);
    CHECK_EQ(weft_recv(a, buf, 8, MSG_WAITALL, weft_deadline_in(5000 * MS)), 8);
    CHECK(memcmp(buf, "abcdefgh", 8) == 0);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_write_all(b, "q", 1, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_recv(a, buf, 4, MSG_WAITALL, weft_deadline_in(2 * MS)), 1);
    CHECK_EQ(buf[0], 'q');

    /* recvmsg: scattered over three buffers, the cut inside the second. */
    char p1[3], p2[4], p3[2];
    struct iovec iov[3] = {{p1, 3}, {p2, 4}, {p3, 2}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 3};
    l.text = "45678";
    CHECK_EQ(weft_write_all(b, "0123", 4, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_spawn(write_later, &l, NULL, &w), 0);
    CHECK_EQ(weft_recvmsg(a, &m, MSG_WAITALL, weft_deadline_in(5000 * MS)), 9);
    CHECK(memcmp(p1, "012", 3) == 0 && memcmp(p2, "3456", 4) == 0 &&
          memcmp(p3, "78", 2) == 0);
    CHECK(iov[1].iov_base == p2 && iov[1].iov_len == 4); /* the caller's, intact */
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);

    /* The deadline passes, then end of file: what came is returned. */
    CHECK_EQ(weft_write_all(b, "p", 1, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_recvfrom(a, buf, 4, MSG_WAITALL, NULL, NULL,
                           weft_deadline_in(2 * MS)), 1);
    CHECK_EQ(weft_write_all(b, "xy", 2, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_shutdown(b, SHUT_WR), 0);
    CHECK_EQ(weft_recvfrom(a, buf, 8, MSG_WAITALL, NULL, NULL,
                           weft_deadline_in(5000 * MS)), 2);
    CHECK(memcmp(buf, "xy", 2) == 0);
    CHECK_EQ(weft_recvfrom(a, buf, 8, MSG_WAITALL, NULL, NULL,
                           weft_deadline_in(5000 * MS)), 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);

    int u = udp_bound("127.0.0.1");
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    CHECK_EQ(getsockname(u, (struct sockaddr *)&ss, &sl), 0);
    CHECK_EQ(weft_sendto(u, "dg", 2, 0, (struct sockaddr *)&ss, sl, WEFT_FOREVER), 2);
    CHECK_EQ(weft_recvfrom(u, buf, 8, MSG_WAITALL, NULL, NULL,
                           weft_deadline_in(5000 * MS)), 2);
    CHECK_EQ(weft_close(u), 0);
}

static void *body(void *arg)
{
    (void)arg;
    stream_waitall();
    addresses("127.0.0.1");
    if (have_ipv6())
        addresses("::1");
    rights();
    round_trips();
    deadlines_cancel_close();
    bad_input();
    return NULL;
}

int main(void)
{
    h_begin("udp");
    int a = weft_listen("127.0.0.1", 0, SOCK_DGRAM, 0, 0, 0);
    CHECK(a >= 0);
    char c;
    CHECK_EQ(weft_recvfrom(a, &c, 1, 0, NULL, NULL, 0), -EPERM); /* outside a fiber */
    CHECK_EQ(weft_sendto(a, &c, 1, 0, NULL, 0, 0), -EPERM);
    CHECK_EQ(weft_close(a), 0);
    h_run(body, NULL);
    return h_end();
}
