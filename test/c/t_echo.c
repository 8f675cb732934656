/* 5,000 concurrent loopback connections through a fiber-per-connection echo
 * server, every byte verified. */
#include "harness.h"

#define CONNS 5000
#define BYTES 8192

static int lfd, port;
static long accepted, verified, live_clients, max_live, conns_target;

static unsigned char pattern(long c, long i)
{
    return (unsigned char)((c * 7919 + i * 31 + (i >> 8)) & 0xff);
}

static void *echo_conn(void *arg)
{
    int fd = (int)(long)arg;
    char buf[4096];
    for (;;) {
        ssize_t n = weft_read(fd, buf, sizeof buf, WEFT_FOREVER);
        CHECK(n >= 0);
        if (n == 0)
            break;
        CHECK_EQ(weft_write_all(fd, buf, (size_t)n, NULL, WEFT_FOREVER), 0);
    }
    CHECK_EQ(weft_close(fd), 0);
    return NULL;
}

static void *acceptor(void *arg)
{
    while (accepted < conns_target) {
        int c = weft_accept(lfd, NULL, NULL, WEFT_FOREVER);
        CHECK(c >= 0);
        accepted++;
        CHECK_EQ(weft_spawn(echo_conn, (void *)(long)c, NULL, NULL), 0);
    }
    return arg;
}

static void *client(void *arg)
{
    long id = (long)arg;
    int fd = weft_tcp_connect("127.0.0.1", port, WEFT_FOREVER);
    CHECK(fd >= 0);
    if (++live_clients > max_live)
        max_live = live_clients;
    /* Every client connects before anyone starts talking, so all are
     * open at the same time. */
    while (max_live < conns_target)
        CHECK_EQ(weft_sleep(1000000), 0);
    unsigned char out[BYTES], in[BYTES];
    for (long i = 0; i < BYTES; i++)
        out[i] = pattern(id, i);
    /* Send in uneven pieces, read back everything. */
    size_t sent = 0;
    long piece = 1 + id % 1500;
    while (sent < BYTES) {
        size_t n = (size_t)piece;
        if (n > BYTES - sent)
            n = BYTES - sent;
        CHECK_EQ(weft_write_all(fd, out + sent, n, NULL, WEFT_FOREVER), 0);
        sent += n;
    }
    size_t got = 0;
    CHECK_EQ(weft_read_full(fd, in, BYTES, &got, WEFT_FOREVER), 0);
    CHECK(memcmp(in, out, BYTES) == 0);
    CHECK_EQ(weft_shutdown(fd, SHUT_WR), 0);
    char extra;
    CHECK_EQ(weft_read(fd, &extra, 1, WEFT_FOREVER), 0); /* server closed */
    CHECK_EQ(weft_close(fd), 0);
    verified++;
    return NULL;
}

static void *body(void *arg)
{
    lfd = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
    CHECK(lfd >= 0);
    port = weft_local_port(lfd);
    weft_fiber_t acc;
    CHECK_EQ(weft_spawn(acceptor, NULL, NULL, &acc), 0);
    for (long i = 0; i < conns_target; i++)
        CHECK_EQ(weft_spawn(client, (void *)i, NULL, NULL), 0);
    CHECK_EQ(weft_join(acc, NULL, WEFT_FOREVER), 0);
    while (verified < conns_target)
        CHECK_EQ(weft_sleep(5000000), 0);
    CHECK_EQ(weft_close(lfd), 0);
    return arg;
}

int main(void)
{
    h_begin("echo");
    long lim = h_raise_nofile(2 * CONNS + 200);
    conns_target = CONNS;
    if (lim < 2 * CONNS + 100) {
        /* Say so loudly instead of silently testing less. */
        fprintf(stderr, "t_echo: descriptor limit %ld is below %d: "
                        "cannot open %d connections\n", lim, 2 * CONNS + 100, CONNS);
        return 1;
    }
    h_run(body, NULL);
    CHECK_EQ(verified, CONNS);
    CHECK_EQ(max_live, CONNS);
    printf("echo: %ld connections open at once, %ld verified\n", max_live, verified);
    return h_end();
}
