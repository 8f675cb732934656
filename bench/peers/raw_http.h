/*
 * raw_http.h — what the raw C floors (raw_epoll.c, raw_uring.c, raw_stacks.c) share:
 * the response (hello_resp.h, the example server's bytes), the SO_REUSEPORT listener, answering every complete
 * request head in a buffer, and main(). Header-only; each floor is one
 * translation unit built by bench/parts/http.sh together with the
 * example server's parser (contrib/http/http_parse.c).
 */
#ifndef RAW_HTTP_H
#define RAW_HTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hello_resp.h"
#include "http_parse.h"

#define BUF 16384

static int port = 8080;

/* A listening socket on 127.0.0.1:port, SO_REUSEPORT so that every thread
 * has its own; @flags are added to the socket type (SOCK_NONBLOCK). */
static int raw_listener(const char *who, int flags)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, SOMAXCONN) < 0) {
        fprintf(stderr, "%s: listen: ", who);
        perror(NULL);
        exit(1);
    }
    return fd;
}

static void raw_put(char *out, size_t *outlen, const char *p, size_t n)
{
    memcpy(out + *outlen, p, n);
    *outlen += n;
}

/* Answer every complete request head in in[0, *inlen) — parsed by the
 * example server's parser (contrib/http/http_parse.c) with its default
 * limits, so the floor does the same HTTP work as weft's server and the
 * comparison measures what the fibers cost — by appending a response to
 * out (while it fits), and keep only the unanswered rest of the input.
 * GET and HEAD get the hello response whatever the target (the floor
 * serves no files); a malformed head or another method gets its error
 * status. Returns 1 when the connection is to close once out has gone
 * (an error, or a request without keep-alive), else 0. */
static int raw_answer(char *in, size_t *inlen, char *out, size_t *outlen)
{
    size_t off = 0;
    int close_after = 0;
    http_req req;
    hello_refresh("weft");
    while (off < *inlen && !close_after) {
        http_scan sc;
        http_scan_reset(&sc);
        int r = http_parse(&sc, in + off, *inlen - off, NULL, &req);
        if (r == 0)
            break;
        if (*outlen + 256 > BUF)
            break; /* answered once the output has gone */
        if (r > 0 && req.content_length > *inlen - off - (size_t)r)
            break; /* the body has not all arrived */
        if (r < 0 || (req.method != HTTP_M_GET && req.method != HTTP_M_HEAD)) {
            int st = r < 0 ? -r : req.method == HTTP_M_UNKNOWN ? 501 : 405;
            char e[128];
            int n = snprintf(e, sizeof e,
                             "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                             st, http_reason(st));
            raw_put(out, outlen, e, (size_t)n);
            off = *inlen;
            close_after = 1;
            break;
        }
        off += (size_t)r + (size_t)req.content_length; /* a body is skipped */
        int v = hello_variant(req.keep_alive, req.version_minor);
        size_t len = hello.len[v];
        if (req.method == HTTP_M_HEAD)
            len -= sizeof HELLO - 1;
        raw_put(out, outlen, hello.resp[v], len);
        close_after = !req.keep_alive;
    }
    memmove(in, in + off, *inlen - off);
    *inlen -= off;
    return close_after;
}

/* Port 0: a free port, taken by a socket bound (not listening) with
 * SO_REUSEPORT and kept open, so that every thread's listener can bind
 * it too and nothing else can meanwhile. */
static void raw_pick_port(const char *who)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        fprintf(stderr, "%s: port 0: ", who);
        perror(NULL);
        exit(1);
    }
    port = ntohs(a.sin_port);
}

/* --port P [--threads N]: run @loop on N threads (this one included).
 * --port 0 picks a free port; the first line printed names it. */
static int raw_main(int argc, char **argv, const char *who, void *(*loop)(void *))
{
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    if (port == 0)
        raw_pick_port(who);
    printf("%s: listening on 127.0.0.1:%d with %d threads\n", who, port, threads);
    fflush(stdout);
    pthread_t t;
    for (int i = 1; i < threads; i++)
        pthread_create(&t, NULL, loop, NULL);
    loop(NULL);
    return 0;
}

#endif
