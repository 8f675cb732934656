/*
 * uv_http — libuv hello-world HTTP/1.1 server, a peer for the HTTP
 * benchmark. One uv loop per --threads, each on its own thread with its own
 * SO_REUSEPORT listener (libuv 1.44 has no UV_TCP_REUSEPORT, so the socket
 * is made by hand and given to uv_tcp_open).
 *
 * Per read callback, every complete request head ("\r\n\r\n"; no other
 * parsing) is answered; the responses go out with uv_try_write, falling
 * back to uv_write for what the socket did not take.
 *
 *   uv_http --port P [--threads N]
 */
#define _GNU_SOURCE
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

static const char RESP[] = "HTTP/1.1 200 OK\r\nServer: libuv\r\nContent-Type: text/plain\r\n"
                           "Content-Length: 13\r\n\r\nHello, World!";
static int port = 8080;

typedef struct conn {
    uv_tcp_t tcp;
    size_t inlen;
    char in[BUF];
} conn;

typedef struct wreq {
    uv_write_t req;
    char data[];
} wreq;

static void on_close(uv_handle_t *h) { free(h); }

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    (void)hint;
    conn *c = (conn *)h;
    *b = uv_buf_init(c->in + c->inlen, (unsigned)(BUF - c->inlen));
}

static void on_write(uv_write_t *r, int status)
{
    (void)status;
    free(r);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    conn *c = (conn *)s;
    if (n < 0) {
        uv_close((uv_handle_t *)s, on_close);
        return;
    }
    c->inlen += (size_t)n;
    char out[BUF];
    size_t outlen = 0, off = 0;
    char *e;
    while ((e = memmem(c->in + off, c->inlen - off, "\r\n\r\n", 4))) {
        off = (size_t)(e - c->in) + 4;
        if (outlen + sizeof RESP - 1 > sizeof out)
            break;
        memcpy(out + outlen, RESP, sizeof RESP - 1);
        outlen += sizeof RESP - 1;
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    if (outlen == 0)
        return;
    uv_buf_t wb = uv_buf_init(out, (unsigned)outlen);
    int k = uv_try_write(s, &wb, 1);
    if (k < 0 && k != UV_EAGAIN) {
        uv_close((uv_handle_t *)s, on_close);
        return;
    }
    size_t done = k > 0 ? (size_t)k : 0;
    if (done < outlen) {
        wreq *w = malloc(sizeof *w + outlen - done);
        memcpy(w->data, out + done, outlen - done);
        uv_buf_t rb = uv_buf_init(w->data, (unsigned)(outlen - done));
        uv_write(&w->req, s, &rb, 1, on_write);
    }
}

static void on_conn(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    conn *c = malloc(sizeof *c);
    c->inlen = 0;
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
