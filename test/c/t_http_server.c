/*
 * t_http_server — the HTTP server of contrib/http, run in-process as
 * fibers next to weft client fibers on the same scheduler:
 *   - every bad-input status (400, 405, 413, 414, 431, 501, 505), each
 *     followed by a check that the server still answers;
 *   - a slow client that never finishes its head gets 408 and is closed;
 *     an idle keep-alive connection is closed;
 *   - keep-alive and pipelining: a burst of requests in one write, and one
 *     request fed byte by byte, answered in order; many concurrent clients;
 *   - static files from the root, and no way out of it;
 *   - graceful stop: idle connections close, an in-flight request still
 *     gets its answer (with Connection: close), the listener goes away.
 */
#include "harness.h"
#include "http/http_srv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#define SEC 1000000000LL
#define DL() weft_deadline_in(20 * SEC)

static int port;          /* the server the current check talks to */
static http_srv *srv;     /* short timeouts: 408 and idle checks      */
static http_srv *srv2;    /* default timeouts: the graceful-stop check */
static http_srv *srv3;    /* small socket buffers: date_while_stalled */
static int port1, port2;
static char root[64];

typedef struct resp {
    int status;
    int close;          /* Connection: close */
    char body[256];
    size_t body_len;    /* Content-Length */
} resp;

static int connect_srv(void)
{
    int fd = weft_tcp_connect("127.0.0.1", port, DL());
    CHECK(fd >= 0);
    return fd;
}

static void send_str(int fd, const char *s, size_t n)
{
    CHECK_EQ(weft_write_all(fd, s, n, NULL, DL()), 0);
}

/* Connection state for reading responses. */
typedef struct rd {
    int fd;
    char buf[65536];
    size_t have;
} rd;

static const char *hdr(const char *head, size_t n, const char *name)
{
    size_t k = strlen(name);
    for (size_t i = 0; i + k < n; i++)
        if ((i == 0 || head[i - 1] == '\n') && strncasecmp(head + i, name, k) == 0)
            return head + i + k;
    return NULL;
}

/* Read one response (no body for HEAD). Returns 0, or -1 on EOF before
 * any byte of it. */
static int read_resp(rd *r, resp *out, int head_req)
{
    size_t head;
    for (;;) {
        char *e = r->have >= 4 ? memmem(r->buf, r->have, "\r\n\r\n", 4) : NULL;
        if (e) {
            head = (size_t)(e - r->buf) + 4;
            break;
        }
        CHECK(r->have < sizeof r->buf);
        ssize_t n = weft_recv(r->fd, r->buf + r->have, sizeof r->buf - r->have, 0, DL());
        if (n == 0 && r->have == 0)
            return -1;
        CHECK(n > 0);
        r->have += (size_t)n;
    }
    CHECK(memcmp(r->buf, "HTTP/1.1 ", 9) == 0);
    out->status = atoi(r->buf + 9);
    const char *cl = hdr(r->buf, head, "Content-Length:");
    CHECK(cl != NULL);
    out->body_len = strtoul(cl, NULL, 10);
    const char *c = hdr(r->buf, head, "Connection:");
    out->close = c && strncmp(c, " close", 6) == 0;
    size_t body = head_req ? 0 : out->body_len;
    CHECK(body < sizeof out->body);
    while (r->have < head + body) {
        ssize_t n = weft_recv(r->fd, r->buf + r->have, sizeof r->buf - r->have, 0, DL());
        CHECK(n > 0);
        r->have += (size_t)n;
    }
    memcpy(out->body, r->buf + head, body);
    out->body[body] = '\0';
    memmove(r->buf, r->buf + head + body, r->have - head - body);
    r->have -= head + body;
    return 0;
}

/* The connection must now be at end of file. */
static void expect_eof(rd *r)
{
    CHECK_EQ(r->have, 0);
    char c;
    ssize_t n = weft_recv(r->fd, &c, 1, 0, DL());
    CHECK(n == 0 || n == -ECONNRESET);
}

/* One fresh connection, one request, the status; checks the server closed
 * when it said it would. */
static int one_shot(const char *req, size_t len)
{
    static rd r;
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, req, len);
    resp p;
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    if (p.close)
        expect_eof(&r);
    weft_close(r.fd);
    return p.status;
}

static void still_up(void)
{
    static rd r;
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 27);
    resp p;
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 200);
    CHECK(strcmp(p.body, "Hello, World!") == 0);
    CHECK_EQ(p.close, 0);
    weft_close(r.fd);
}

static int bad(const char *req)
{
    int st = one_shot(req, strlen(req));
    still_up();
    return st;
}

static void bad_inputs(void)
{
    static char big[40000];
    size_t n;

    CHECK_EQ(bad("GET / HTTP/1.1 x\r\nHost: t\r\n\r\n"), 400);
    CHECK_EQ(bad("GET / HTTP/1.1\r\nHost t\r\n\r\n"), 400);
    CHECK_EQ(bad("GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n"), 400);
    CHECK_EQ(bad("GET / HTTP/1.1\r\n\r\n"), 400);
    {
        static const char nul[] = "GET /a\0 HTTP/1.1\r\nHost: t\r\n\r\n";
        CHECK_EQ(one_shot(nul, sizeof nul - 1), 400);
        still_up();
    }
    CHECK_EQ(bad("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n"
                 "Content-Length: 2\r\n\r\nab"), 400);
    CHECK_EQ(bad("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n"
                 "Transfer-Encoding: chunked\r\n\r\nab"), 400);
    CHECK_EQ(bad("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nab"), 405);
    CHECK_EQ(bad("DELETE /x HTTP/1.1\r\nHost: t\r\n\r\n"), 405);
    CHECK_EQ(bad("BREW / HTTP/1.1\r\nHost: t\r\n\r\n"), 501);
    CHECK_EQ(bad("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 501);
    CHECK_EQ(bad("GET / HTTP/2.0\r\nHost: t\r\n\r\n"), 505);
    CHECK_EQ(bad("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 999999999\r\n\r\n"), 413);

    /* 414: a 20 KB request line. */
    n = (size_t)sprintf(big, "GET /");
    memset(big + n, 'a', 20000);
    n += 20000;
    n += (size_t)sprintf(big + n, " HTTP/1.1\r\nHost: t\r\n\r\n");
    CHECK_EQ(one_shot(big, n), 414);
    still_up();
    /* 431: too many header fields. */
    n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 200; i++)
        n += (size_t)sprintf(big + n, "X-%d: v\r\n", i);
    n += (size_t)sprintf(big + n, "\r\n");
    CHECK_EQ(one_shot(big, n), 431);
    still_up();
    /* 431: one header field too large. */
    n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: t\r\nCookie: ");
    memset(big + n, 'c', 10000);
    n += 10000;
    n += (size_t)sprintf(big + n, "\r\n\r\n");
    CHECK_EQ(one_shot(big, n), 431);
    still_up();
    /* 431: a head too large in total, sent without its end. */
    n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 8; i++) {
        n += (size_t)sprintf(big + n, "X-%d: ", i);
        memset(big + n, 'v', 4000);
        n += 4000;
        n += (size_t)sprintf(big + n, "\r\n");
    }
    CHECK_EQ(one_shot(big, n), 431);
    still_up();

    /* A GET with a body: the body is skipped, the next request answered. */
    static rd r;
    r.fd = connect_srv();
    r.have = 0;
    const char *two = "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
                      "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n";
    send_str(r.fd, two, strlen(two));
    resp p;
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 200);
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 404);
    weft_close(r.fd);
}

/* A client that sends part of a head and then nothing gets 408 and is
 * closed: the header deadline does not move while bytes trickle in. */
static void slow_clients(void)
{
    static rd r;
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, "GET / HTTP/1.1\r\nHo", 18);
    for (int i = 0; i < 3; i++) { /* trickle: each byte restarts nothing */
        weft_sleep(SEC / 20);
        (void)weft_send(r.fd, "s", 1, 0, DL()); /* may race with the 408 */
    }
    resp p;
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 408);
    CHECK_EQ(p.close, 1);
    expect_eof(&r);
    weft_close(r.fd);

    /* Idle keep-alive connection: answered, then closed by the server. */
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 27);
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 200);
    expect_eof(&r);
    weft_close(r.fd);
    still_up();
}

/* The Date header while another client's answer is stuck: a client that
 * sends lone requests (one per read of the server: the answer is sent
 * straight from the prebuilt response) and never reads leaves its
 * connection's fiber blocked sending an answer; the server's answers to
 * everyone else must still carry the current date. A server of its own,
 * with small socket buffers, so that the stall comes soon. */
static void date_while_stalled(void)
{
    int small = 2048;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 0, 1);
    CHECK(lfd >= 0);
    CHECK_EQ(setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    CHECK_EQ(setsockopt(lfd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    CHECK_EQ(http_srv_start(&srv3, lfd, NULL), 0);
    int saved = port;
    port = weft_local_port(lfd);
    int hog = connect_srv();
    CHECK_EQ(setsockopt(hog, SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
    CHECK_EQ(setsockopt(hog, SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    static const char rq[] = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
    /* One request, then a turn of the loop for the server to read it
     * alone; until twenty turns in a row found no room: the server reads
     * no more, its fiber for this client is blocked sending. */
    size_t off = 0;
    for (int stuck = 0; stuck < 20;) {
        ssize_t k = weft_send(hog, rq + off, sizeof rq - 1 - off, 0, 0);
        if (k == -EAGAIN) {
            stuck++;
        } else {
            CHECK(k > 0);
            off = (off + (size_t)k) % (sizeof rq - 1);
            stuck = 0;
            if (off != 0)
                continue; /* the rest of this request first */
        }
        weft_sleep(SEC / 1000);
    }
    /* Two seconds of the clock later, a new client's answer. */
    time_t t0 = time(NULL);
    while (time(NULL) < t0 + 2)
        weft_sleep(SEC / 20);
    time_t before = time(NULL);
    static rd r;
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 27);
    while (!memmem(r.buf, r.have, "\r\n\r\n", 4)) { /* the head */
        ssize_t n = weft_recv(r.fd, r.buf + r.have, sizeof r.buf - r.have, 0, DL());
        CHECK(n > 0);
        r.have += (size_t)n;
    }
    CHECK(memcmp(r.buf, "HTTP/1.1 200 ", 13) == 0);
    const char *d = hdr(r.buf, r.have, "Date: ");
    CHECK(d != NULL);
    struct tm tm = {0};
    CHECK(strptime(d, "%a, %d %b %Y %H:%M:%S GMT", &tm) != NULL);
    CHECK(timegm(&tm) >= before);
    weft_close(r.fd);
    weft_close(hog);
    http_srv_stop(srv3);
    port = saved;
}

/* Pipelining: 60 requests in one write (GET /, HEAD /, GET /missing in
 * turn, the last asking to close), answered in order. */
static void pipelining(void)
{
    static char reqs[8192];
    size_t n = 0;
    for (int i = 0; i < 60; i++) {
        const char *m = i % 3 == 1 ? "HEAD" : "GET";
        const char *t = i % 3 == 2 ? "/missing" : "/";
        n += (size_t)sprintf(reqs + n, "%s %s HTTP/1.1\r\nHost: t\r\n%s\r\n", m, t,
                             i == 59 ? "Connection: close\r\n" : "");
    }
    static rd r;
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, reqs, n);
    for (int i = 0; i < 60; i++) {
        resp p;
        CHECK_EQ(read_resp(&r, &p, i % 3 == 1), 0);
        CHECK_EQ(p.status, i % 3 == 2 ? 404 : 200);
        if (i % 3 != 2)
            CHECK_EQ(p.body_len, 13);
        if (i % 3 == 0)
            CHECK(strcmp(p.body, "Hello, World!") == 0);
        CHECK_EQ(p.close, i == 59);
    }
    expect_eof(&r);
    weft_close(r.fd);

    /* One request fed a byte at a time, then a second on the same
     * connection: incremental parsing and keep-alive. */
    r.fd = connect_srv();
    r.have = 0;
    const char *one = "GET / HTTP/1.1\r\nHost: t\r\nUser-Agent: slow\r\n\r\n";
    for (size_t i = 0; one[i]; i++) {
        send_str(r.fd, one + i, 1);
        weft_yield();
    }
    resp p;
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 200);
    send_str(r.fd, one, strlen(one));
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 200);
    CHECK(strcmp(p.body, "Hello, World!") == 0);
    weft_close(r.fd);

    /* A valid head much larger than the connection's first buffer (which
     * is small), pipelined between two ordinary requests: the buffer
     * grows without losing the bytes around the switch, and keep-alive
     * goes on. */
    static char big[12000];
    n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: t\r\n\r\n"
                             "GET / HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 3; i++) {
        n += (size_t)sprintf(big + n, "X-Big-%d: ", i);
        memset(big + n, 'a' + i, 3000);
        n += 3000;
        n += (size_t)sprintf(big + n, "\r\n");
    }
    n += (size_t)sprintf(big + n, "\r\nHEAD / HTTP/1.1\r\nHost: t\r\n\r\n");
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, big, n);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(read_resp(&r, &p, i == 2), 0);
        CHECK_EQ(p.status, 200);
        CHECK_EQ(p.close, 0);
        CHECK_EQ(p.body_len, 13);
    }
    send_str(r.fd, one, strlen(one));
    CHECK_EQ(read_resp(&r, &p, 0), 0);
    CHECK_EQ(p.status, 200);
    CHECK(strcmp(p.body, "Hello, World!") == 0);
    weft_close(r.fd);
}

/* 40 client fibers, 25 keep-alive requests each, pipelined in pairs. */
static int clients_ok;
static void *client_fiber(void *arg)
{
    (void)arg;
    rd *r = malloc(sizeof *r);
    CHECK(r != NULL);
    r->fd = connect_srv();
    r->have = 0;
    const char *two = "GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /x HTTP/1.1\r\nHost: t\r\n\r\n";
    for (int i = 0; i < 25; i++) {
        send_str(r->fd, two, strlen(two));
        resp p;
        CHECK_EQ(read_resp(r, &p, 0), 0);
        CHECK_EQ(p.status, 200);
        CHECK(strcmp(p.body, "Hello, World!") == 0);
        CHECK_EQ(read_resp(r, &p, 0), 0);
        CHECK_EQ(p.status, 404);
    }
    weft_close(r->fd);
    free(r);
    clients_ok++;
    return NULL;
}

static void concurrent(void)
{
    weft_fiber_t f[40];
    for (int i = 0; i < 40; i++)
        CHECK_EQ(weft_spawn(client_fiber, NULL, NULL, &f[i]), 0);
    for (int i = 0; i < 40; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(clients_ok, 40);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
    close(fd);
}

static int get(const char *target, resp *p)
{
    static rd r;
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", target);
    r.fd = connect_srv();
    r.have = 0;
    send_str(r.fd, req, (size_t)n);
    CHECK_EQ(read_resp(&r, p, 0), 0);
    weft_close(r.fd);
    return p->status;
}

static void static_files(void)
{
    resp p;
    CHECK_EQ(get("/hello.txt", &p), 200);
    CHECK(strcmp(p.body, "file body\n") == 0);
    CHECK_EQ(get("/sub/../hello.txt", &p), 404); /* no ".." at all */
    CHECK_EQ(get("/./sub//inner.txt?x=1", &p), 200);
    CHECK(strcmp(p.body, "inner\n") == 0);
    CHECK_EQ(get("/sub%2finner.txt", &p), 404);
    CHECK_EQ(get("/%2e%2e/etc/passwd", &p), 404);
    CHECK_EQ(get("/../../../../etc/passwd", &p), 404);
    CHECK_EQ(get("/..%2f..%2fetc%2fpasswd", &p), 404);
    CHECK_EQ(get("/escape/passwd", &p), 404); /* a symlink out of the root */
    CHECK_EQ(get("/sub", &p), 404);           /* directories are not served */
    CHECK_EQ(get("/missing", &p), 404);
    CHECK_EQ(get("/bad%zz", &p), 400);
    CHECK_EQ(get("http://t/hello.txt", &p), 200); /* absolute-form */
    CHECK(strcmp(p.body, "file body\n") == 0);
    CHECK_EQ(get("http://t", &p), 200);
    CHECK(strcmp(p.body, "Hello, World!") == 0);
    still_up();
}

/* Graceful stop with one idle and one in-flight connection (on the server
 * with default timeouts, so a slow machine cannot turn the in-flight
 * request into a 408). */
static void graceful_stop(void)
{
    static rd idle, busy;
    port = port2;
    idle.fd = connect_srv();
    idle.have = 0;
    busy.fd = connect_srv();
    busy.have = 0;
    send_str(busy.fd, "GET / HTTP/1.1\r\nHo", 18); /* a head in progress */
    weft_sleep(SEC / 50);                           /* both are now waiting */
    http_srv_stop(srv2);
    expect_eof(&idle);                              /* idle: closed at once */
    send_str(busy.fd, "st: t\r\n\r\n", 9);
    resp p;
    CHECK_EQ(read_resp(&busy, &p, 0), 0);           /* in-flight: answered */
    CHECK_EQ(p.status, 200);
    CHECK_EQ(p.close, 1);
    expect_eof(&busy);
    weft_close(idle.fd);
    weft_close(busy.fd);
    int fd = weft_tcp_connect("127.0.0.1", port, DL());
    CHECK_EQ(fd, -ECONNREFUSED);                    /* the listener is gone */
}

static void *main_fiber(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 0, 1);
    CHECK(lfd >= 0);
    port = port1 = weft_local_port(lfd);
    CHECK(port > 0);
    http_srv_opts o = {0};
    o.root = root;
    o.header_timeout_ns = SEC / 2;
    o.idle_timeout_ns = SEC / 2;
    CHECK_EQ(http_srv_start(&srv, lfd, &o), 0);
    int lfd2 = weft_tcp_listen("127.0.0.1", 0, 0, 1);
    CHECK(lfd2 >= 0);
    port2 = weft_local_port(lfd2);
    CHECK_EQ(http_srv_start(&srv2, lfd2, NULL), 0);

    bad_inputs();
    slow_clients();
    date_while_stalled();
    pipelining();
    concurrent();
    static_files();
    http_srv_stop(srv);
    graceful_stop();
    return NULL;
}

int main(void)
{
    h_begin("t_http_server");
    /* A root with a file, a subdirectory and a symlink pointing out. */
    snprintf(root, sizeof root, "/tmp/t_http_server.XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    write_file(root, "hello.txt", "file body\n");
    char path[256];
    snprintf(path, sizeof path, "%s/sub", root);
    CHECK_EQ(mkdir(path, 0755), 0);
    write_file(path, "inner.txt", "inner\n");
    snprintf(path, sizeof path, "%s/escape", root);
    CHECK_EQ(symlink("/etc", path), 0);

    h_run(main_fiber, NULL);
    http_srv_stats st;
    http_srv_get_stats(srv, &st);
    CHECK_EQ(st.open, 0);
    CHECK(st.timed_out >= 1);
    http_srv_free(srv);
    http_srv_get_stats(srv2, &st);
    CHECK_EQ(st.open, 0);
    http_srv_free(srv2);
    http_srv_free(srv3);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ(system(cmd), 0);
    return h_end();
}
