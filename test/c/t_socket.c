/* TCP sockets: accept/connect, send/recv, shutdown, EOF, peer reset,
 * refused connections, hang-ups waking waiters. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

static int port;

static void *server_once(void *arg)
{
    int lfd = *(int *)arg;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int c = weft_accept(lfd, (struct sockaddr *)&ss, &len, WEFT_FOREVER);
    CHECK(c >= 0);
    CHECK_EQ(ss.ss_family, AF_INET);
    char buf[64];
    ssize_t n = weft_recv(c, buf, sizeof buf, 0, WEFT_FOREVER);
    CHECK_EQ(n, 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_EQ(weft_send(c, "world", 5, 0, WEFT_FOREVER), 5);
    /* the client shuts down its write side: we see EOF */
    CHECK_EQ(weft_read(c, buf, sizeof buf, WEFT_FOREVER), 0);
    CHECK_EQ(weft_write(c, "bye", 3, WEFT_FOREVER), 3);
    CHECK_EQ(weft_close(c), 0);
    return NULL;
}

static void *resetter(void *arg)
{
    int lfd = *(int *)arg;
    int c = weft_accept(lfd, NULL, NULL, WEFT_FOREVER);
    CHECK(c >= 0);
    CHECK_EQ(weft_sleep(5000000), 0);
    /* SO_LINGER 0: close sends RST */
    struct linger lg = {1, 0};
    CHECK_EQ(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    CHECK_EQ(weft_close(c), 0);
    return NULL;
}

static void *body(void *arg)
{
    int lfd = weft_tcp_listen("127.0.0.1", 0, 64, 0);
    CHECK(lfd >= 0);
    port = weft_local_port(lfd);
    CHECK(port > 0);

    /* nobody connects: accept honours its deadline */
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_accept(lfd, NULL, NULL, weft_deadline_in(2000000)), -ETIMEDOUT);

    weft_fiber_t s;
    CHECK_EQ(weft_spawn(server_once, &lfd, NULL, &s), 0);
    int c = weft_tcp_connect("127.0.0.1", port, WEFT_FOREVER);
    CHECK(c >= 0);
    CHECK_EQ(weft_send(c, "hello", 5, 0, WEFT_FOREVER), 5);
    char buf[64];
    size_t got = 0;
    CHECK_EQ(weft_read_full(c, buf, 5, &got, WEFT_FOREVER), 0);
    CHECK(memcmp(buf, "world", 5) == 0);
    CHECK_EQ(weft_shutdown(c, SHUT_WR), 0);
    CHECK_EQ(weft_read_full(c, buf, 3, &got, WEFT_FOREVER), 0);
    CHECK(memcmp(buf, "bye", 3) == 0);
    CHECK_EQ(weft_read(c, buf, sizeof buf, WEFT_FOREVER), 0); /* EOF */
    CHECK_EQ(weft_recv(c, buf, sizeof buf, 0, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(s, NULL, WEFT_FOREVER), 0);
    /* writing after the peer closed: EPIPE or ECONNRESET, never SIGPIPE */
    int wrc = 0;
    for (int i = 0; i < 100 && wrc >= 0; i++) {
        wrc = (int)weft_send(c, "x", 1, 0, WEFT_FOREVER);
        if (wrc >= 0)
            CHECK_EQ(weft_sleep(1000000), 0);
    }
    CHECK(wrc == -EPIPE || wrc == -ECONNRESET);
    CHECK_EQ(weft_close(c), 0);

    /* peer reset while we wait in read */
    CHECK_EQ(weft_spawn(resetter, &lfd, NULL, &s), 0);
    c = weft_tcp_connect("127.0.0.1", port, WEFT_FOREVER);
    CHECK(c >= 0);
    CHECK_EQ(weft_read(c, buf, sizeof buf, WEFT_FOREVER), -ECONNRESET);
    CHECK_EQ(weft_join(s, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(c), 0);

    /* refused: nothing listens on a port we just released */
    int tmp = weft_tcp_listen("127.0.0.1", 0, 1, 0);
    CHECK(tmp >= 0);
    int dead_port = weft_local_port(tmp);
    CHECK_EQ(weft_close(tmp), 0);
    CHECK_EQ(weft_tcp_connect("127.0.0.1", dead_port, WEFT_FOREVER), -ECONNREFUSED);

    /* IPv6 loopback, if this machine has it */
    int l6 = weft_tcp_listen("::1", 0, 4, 0);
    if (l6 >= 0) {
        int c6 = weft_tcp_connect("::1", weft_local_port(l6), WEFT_FOREVER);
        CHECK(c6 >= 0);
        int a6 = weft_accept(l6, NULL, NULL, WEFT_FOREVER);
        CHECK(a6 >= 0);
        CHECK_EQ(weft_write(c6, "v6", 2, WEFT_FOREVER), 2);
        CHECK_EQ(weft_read(a6, buf, 2, WEFT_FOREVER), 2);
        weft_close(a6);
        weft_close(c6);
        weft_close(l6);
    }

    /* a socket made with plain socket(2), blocking: still works */
    int raw = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(raw >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(weft_spawn(server_once, &lfd, NULL, &s), 0);
    CHECK_EQ(weft_connect(raw, (struct sockaddr *)&a, sizeof a, WEFT_FOREVER), 0);
    CHECK_EQ(weft_write(raw, "hello", 5, WEFT_FOREVER), 5);
    CHECK_EQ(weft_read_full(raw, buf, 5, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_shutdown(raw, SHUT_WR), 0);
    CHECK_EQ(weft_read_full(raw, buf, 3, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(s, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(raw), 0);

    /* bad arguments */
    CHECK_EQ(weft_tcp_listen("no-such-host.invalid", 0, 1, 0), -ENOENT); /* a name */
    CHECK_EQ(weft_tcp_listen("127.0.0.1", 70000, 1, 0), -EINVAL);
    CHECK_EQ(weft_tcp_listen("127.0.0.1", -1, 1, 0), -EINVAL);
    CHECK_EQ(weft_tcp_connect(NULL, port, 0), -EINVAL);
    CHECK_EQ(weft_tcp_connect("127.0.0.1", 0, 0), -EINVAL);
    CHECK_EQ(weft_connect(lfd, NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_accept(lfd, (struct sockaddr *)&a, NULL, 0), -EINVAL);
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    CHECK_EQ(weft_recv(p[0], buf, 1, 0, 0), -ENOTSOCK);
    CHECK_EQ(weft_send(p[1], buf, 1, 0, 0), -ENOTSOCK);
    CHECK_EQ(weft_shutdown(p[0], SHUT_RD), -ENOTSOCK);
    CHECK_EQ(weft_shutdown(-1, SHUT_RD), -EBADF);
    weft_close(p[0]);
    weft_close(p[1]);
    CHECK_EQ(weft_local_port(-1), -EBADF);
    CHECK_EQ(weft_close(lfd), 0);
    return arg;
}

int main(void)
{
    h_begin("socket");
    h_run(body, NULL);
    return h_end();
}
