/*
 * uv_http — libuv hello-world HTTP/1.1 server, a peer for the HTTP
 * benchmark. One uv loop per --threads, each on its own thread with its own
 * SO_REUSEPORT listener (libuv 1.44 has no UV_TCP_REUSEPORT, so the socket
 * is made by hand and given to uv_tcp_open).
 *
 * Requests are parsed with Debian's http_parser 2.9 (Node.js's parser, the
 * one a C server on libuv would reach for): each read is fed to the
 * connection's parser, and every complete message gets the hello response
 * (with a Date header, as nginx, Go and weft's server send) in one output
 * buffer per read; it goes out with uv_try_write, falling back to uv_write
 * for what the socket did not take. A parse error gets a 400 and the
 * connection closes; so does a request without keep-alive, once answered.
 *
 *   uv_http --port P [--threads N]
 */
#define _GNU_SOURCE
#include "hello_resp.h"

#include <http_parser.h>
#include <uv.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 16384

static const char BAD[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
static const char NOTALLOWED[] =
    "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
static int port = 8080;

/* Per loop thread: the read buffer and the output of one read. */
static __thread struct {
    char in[BUF];
    char out[BUF];
    size_t outlen;
} T;

typedef struct conn {
    uv_tcp_t tcp;
    http_parser parser;
    int close_after; /* answered a request without keep-alive, or an error */
} conn;

typedef struct wreq {
    uv_write_t req;
    int close_after;
    char data[];
} wreq;

static void put(const char *p, size_t n)
{
    if (T.outlen + n <= sizeof T.out) {
        memcpy(T.out + T.outlen, p, n);
        T.outlen += n;
    }
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    if (c->close_after)
        return 0;
    if (p->method != HTTP_GET && p->method != HTTP_HEAD) {
        put(NOTALLOWED, sizeof NOTALLOWED - 1);
        c->close_after = 1;
        return 0;
    }
    int keep = http_should_keep_alive(p);
    int v = hello_variant(keep, p->http_minor);
    size_t len = hello.len[v];
    if (p->method == HTTP_HEAD)
        len -= sizeof HELLO - 1;
    put(hello.resp[v], len);
    c->close_after = !keep;
    return 0;
}

static http_parser_settings settings = {.on_message_complete = on_message_complete};

static void on_close(uv_handle_t *h) { free(h); }

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)h;
    (void)hint;
    *b = uv_buf_init(T.in, sizeof T.in);
}

static void on_write(uv_write_t *r, int status)
{
    wreq *w = (wreq *)r;
    if (status == 0 && w->close_after && !uv_is_closing((uv_handle_t *)r->handle))
        uv_close((uv_handle_t *)r->handle, on_close);
    free(r);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    conn *c = (conn *)s;
    if (n < 0) {
        uv_close((uv_handle_t *)s, on_close);
        return;
    }
    if (n == 0 || c->close_after)
        return;
    hello_refresh("libuv");
    T.outlen = 0;
    size_t done = http_parser_execute(&c->parser, &settings, b->base, (size_t)n);
    if (c->parser.http_errno != HPE_OK || (done != (size_t)n && !c->parser.upgrade)) {
        if (!c->close_after)
            put(BAD, sizeof BAD - 1);
        c->close_after = 1;
    }
    if (T.outlen == 0)
        return;
    uv_buf_t wb = uv_buf_init(T.out, (unsigned)T.outlen);
    int k = uv_try_write(s, &wb, 1);
    if (k < 0 && k != UV_EAGAIN) {
        uv_close((uv_handle_t *)s, on_close);
        return;
    }
    size_t sent = k > 0 ? (size_t)k : 0;
    if (sent < T.outlen) {
        wreq *w = malloc(sizeof *w + T.outlen - sent);
        w->close_after = c->close_after;
        memcpy(w->data, T.out + sent, T.outlen - sent);
        uv_buf_t rb = uv_buf_init(w->data, (unsigned)(T.outlen - sent));
        uv_write(&w->req, s, &rb, 1, on_write);
    } else if (c->close_after) {
        uv_close((uv_handle_t *)s, on_close);
    }
}

static void on_conn(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    conn *c = malloc(sizeof *c);
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->close_after = 0;
    uv_tcp_init(srv->loop, &c->tcp);
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void *run(void *arg)
{
    (void)arg;
    uv_loop_t loop;
    uv_loop_init(&loop);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("uv_http: bind");
        exit(1);
    }
    uv_tcp_t srv;
    uv_tcp_init(&loop, &srv);
    uv_tcp_open(&srv, fd);
    int rc = uv_listen((uv_stream_t *)&srv, SOMAXCONN, on_conn);
    if (rc) {
        fprintf(stderr, "uv_http: listen: %s\n", uv_strerror(rc));
        exit(1);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    printf("uv_http: listening on 127.0.0.1:%d with %d threads (libuv %s)\n", port,
           threads, uv_version_string());
    fflush(stdout);
    pthread_t t;
    for (int i = 1; i < threads; i++)
        pthread_create(&t, NULL, run, NULL);
    run(NULL);
    return 0;
}
