/* HTTPS: the HTTP server of contrib/http with its TLS transport
 * (contrib/http/http_tls.c), in-process next to weft_tls client fibers:
 * keep-alive and pipelining, ALPN http/1.1, a 300 KiB static file copied
 * through TLS (no sendfile) and byte-verified, Connection: close ending
 * with close_notify, a slow head answered 408, a silent client dropped at
 * the header timeout, plain HTTP on the TLS port refused, and a graceful
 * stop. */
#include "tls_util.h"
#include "http/http_srv.h"
#include "http/http_tls.h"

#include <sys/stat.h>

#define FILE_LEN (300 * 1024)

static tls_pki pki;
static weft_tls_ctx_t *cctx;
static http_srv *srv;
static http_transport tls;
static int port;
static char root[64];

typedef struct conn {
    weft_tls_t *t;
    char buf[FILE_LEN + 4096];
    size_t have;
} conn;

static void open_conn(conn *c)
{
    c->have = 0;
    int rc = weft_tls_dial(&c->t, cctx, "localhost", port, weft_deadline_in(5 * TLS_SEC));
    if (rc < 0)
        fprintf(stderr, "dial: %s\n", weft_tls_error_string(NULL));
    CHECK_EQ(rc, 0);
    CHECK(weft_tls_alpn(c->t) && strcmp(weft_tls_alpn(c->t), "http/1.1") == 0);
}

static void send_str(conn *c, const char *s)
{
    CHECK_EQ(weft_tls_write_all(c->t, s, strlen(s), NULL, weft_deadline_in(5 * TLS_SEC)), 0);
}

/* One response: its status; the body goes to @body (Content-Length). */
static int read_resp(conn *c, char **body, size_t *body_len)
{
    size_t head = 0, len = 0;
    for (;;) {
        char *e = c->have >= 4 ? memmem(c->buf, c->have, "\r\n\r\n", 4) : NULL;
        if (e) {
            head = (size_t)(e - c->buf) + 4;
            const char *cl = memmem(c->buf, head, "Content-Length: ", 16);
            CHECK(cl != NULL);
            len = (size_t)atol(cl + 16);
            if (c->have >= head + len)
                break;
        }
        CHECK(c->have < sizeof c->buf);
        ssize_t n = weft_tls_read(c->t, c->buf + c->have, sizeof c->buf - c->have,
                                  weft_deadline_in(5 * TLS_SEC));
        if (n <= 0)
            fprintf(stderr, "read: %zd %s\n", n, weft_tls_error_string(c->t));
        CHECK(n > 0);
        c->have += (size_t)n;
    }
    int status = atoi(c->buf + 9);
    static char out[FILE_LEN + 1];
    memcpy(out, c->buf + head, len);
    if (body)
        *body = out;
    if (body_len)
        *body_len = len;
    memmove(c->buf, c->buf + head + len, c->have - head - len);
    c->have -= head + len;
    return status;
}

static void requests(void)
{
    static conn c;
    open_conn(&c);
    /* Pipelined: three requests in one write, three answers in order. */
    send_str(&c, "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /missing HTTP/1.1\r\nHost: a\r\n\r\n"
                 "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    char *body;
    size_t n;
    CHECK_EQ(read_resp(&c, &body, &n), 200);
    CHECK(n == 13 && memcmp(body, "Hello, World!", 13) == 0);
    CHECK_EQ(read_resp(&c, NULL, NULL), 404);
    CHECK_EQ(read_resp(&c, NULL, NULL), 200);
    /* A static file: read and sent in chunks through TLS. */
    send_str(&c, "GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK_EQ(read_resp(&c, &body, &n), 200);
    CHECK_EQ(n, FILE_LEN);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ((uint8_t)body[i], tls_pattern(i));
    /* Connection: close — the answer, then close_notify (a clean 0). */
    send_str(&c, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    CHECK_EQ(read_resp(&c, NULL, NULL), 200);
    char b[16];
    CHECK_EQ(weft_tls_read(c.t, b, sizeof b, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(c.t), 0);
}

static void slow_and_wrong_clients(void)
{
    /* A head that never ends: 408 after the header timeout. */
    static conn c;
    open_conn(&c);
    send_str(&c, "GET / HTTP/1.1\r\nHost");
    int64_t t0 = weft_now();
    char *body;
    CHECK_EQ(read_resp(&c, &body, NULL), 408);
    CHECK(weft_now() - t0 < 5 * TLS_SEC);
    CHECK_EQ(weft_tls_close(c.t), 0);

    /* A client that connects and never says hello: dropped at the header
     * timeout. */
    int fd = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(TLS_SEC));
    CHECK(fd >= 0);
    char b[64];
    CHECK_EQ(weft_read(fd, b, sizeof b, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_close(fd), 0);

    /* Plain HTTP to the TLS port: no handshake, no answer, closed. */
    fd = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(TLS_SEC));
    CHECK(fd >= 0);
    CHECK_EQ(weft_write_all(fd, "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27, NULL, WEFT_FOREVER), 0);
    ssize_t n;
    size_t got = 0;
    while ((n = weft_read(fd, b, sizeof b, weft_deadline_in(5 * TLS_SEC))) > 0)
        got += (size_t)n; /* at most an alert */
    CHECK(n == 0 || n == -ECONNRESET);
    CHECK(got < 64);
    CHECK_EQ(weft_close(fd), 0);

    /* The server is fine. */
    open_conn(&c);
    send_str(&c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK_EQ(read_resp(&c, NULL, NULL), 200);
    CHECK_EQ(weft_tls_close(c.t), 0);
}

static void *body_fiber(void *arg)
{
    weft_tls_ctx_opts_t co = {.ca_file = pki.ca, .alpn = "h2,http/1.1"};
    CHECK_EQ(weft_tls_ctx_new(&cctx, &co), 0);
    char err[256];
    CHECK_EQ(http_tls_transport(&tls, pki.srv, pki.srv_key, err, sizeof err), 0);
    int lfd = weft_tcp_listen("127.0.0.1", 0, 64, 0);
    CHECK(lfd >= 0);
    port = weft_local_port(lfd);
    http_srv_opts o = {.root = root, .header_timeout_ns = TLS_SEC / 5,
                       .idle_timeout_ns = 2 * TLS_SEC, .transport = &tls};
    CHECK_EQ(http_srv_start(&srv, lfd, &o), 0);
    requests();
    slow_and_wrong_clients();
    /* Graceful stop with an idle keep-alive connection open. */
    static conn c;
    open_conn(&c);
    send_str(&c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK_EQ(read_resp(&c, NULL, NULL), 200);
    http_srv_stop(srv);
    char b[16];
    ssize_t n = weft_tls_read(c.t, b, sizeof b, weft_deadline_in(5 * TLS_SEC));
    CHECK(n == 0 || n == -ECONNABORTED); /* closed while idle (cancelled) */
    CHECK_EQ(weft_tls_close(c.t), 0);
    weft_tls_ctx_free(cctx);
    return arg;
}

int main(void)
{
    h_begin("tls_http");
    tls_pki_make(&pki);
    snprintf(root, sizeof root, "/tmp/t_tls_http.XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/big.bin", root);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (size_t i = 0; i < FILE_LEN; i++)
        fputc(tls_pattern(i), f);
    CHECK_EQ(fclose(f), 0);

    h_run(body_fiber, NULL);
    http_srv_stats st;
    http_srv_get_stats(srv, &st);
    CHECK(st.open == 0 && st.timed_out >= 1 && st.accepted >= 5);
    http_srv_free(srv);
    http_tls_transport_free(&tls);

    unlink(path);
    CHECK_EQ(rmdir(root), 0);
    tls_pki_remove(&pki);
    return h_end();
}
