/*
 * raw_epoll — the floor for the HTTP benchmark: a hello-world HTTP/1.1
 * server in plain C on epoll, no fibers, no library. One thread per
 * --threads, each with its own epoll set and SO_REUSEPORT listener.
 *
 * Level-triggered; per readiness event one recv, then every complete
 * request head in the buffer ("\r\n\r\n"-terminated; no other parsing) is
 * answered with one send. Unsent bytes wait for EPOLLOUT. This is what the
 * weft server does minus the fibers, the parser and the limits.
 *
 *   raw_epoll --port P [--threads N]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 16384

static const char RESP[] = "HTTP/1.1 200 OK\r\nServer: raw\r\nContent-Type: text/plain\r\n"
                           "Content-Length: 13\r\n\r\nHello, World!";
static int port = 8080;

typedef struct conn {
    int fd;
    size_t inlen, outlen, outoff;
    char in[BUF];
    char out[BUF];
} conn;

static int listener(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, SOMAXCONN) < 0) {
        perror("raw_epoll: listen");
        exit(1);
    }
    return fd;
}

static void drop(int ep, conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

/* Send pending output; returns -1 when the connection is broken. */
static int flush(int ep, conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) {
                /* Stop reading until the peer takes our output. */
                struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                return 0;
            }
            return -1;
        }
        c->outoff += (size_t)n;
    }
    if (c->outoff) {
        c->outoff = c->outlen = 0;
    }
    return 0;
}

static void on_read(int ep, conn *c)
{
    ssize_t n = recv(c->fd, c->in + c->inlen, BUF - c->inlen, 0);
    if (n <= 0) {
        if (n < 0 && errno == EAGAIN)
            return;
        drop(ep, c);
        return;
    }
    c->inlen += (size_t)n;
    size_t off = 0;
    char *e;
    while ((e = memmem(c->in + off, c->inlen - off, "\r\n\r\n", 4))) {
        off = (size_t)(e - c->in) + 4;
        if (c->outlen + sizeof RESP - 1 > BUF)
            break;
        memcpy(c->out + c->outlen, RESP, sizeof RESP - 1);
        c->outlen += sizeof RESP - 1;
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    if (c->inlen == BUF || flush(ep, c) < 0)
        drop(ep, c);
}

static void *loop(void *arg)
{
    (void)arg;
    int lfd = listener();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct epoll_event evs[512];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn *nc = malloc(sizeof *nc);
                    nc->fd = fd;
                    nc->inlen = nc->outlen = nc->outoff = 0;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            if (evs[i].events & EPOLLOUT) {
                if (flush(ep, c) < 0) {
                    drop(ep, c);
                    continue;
                }
                if (c->outlen == 0) {
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &cev);
                }
                continue;
            }
            on_read(ep, c);
        }
    }
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
    printf("raw_epoll: listening on 127.0.0.1:%d with %d threads\n", port, threads);
    fflush(stdout);
    pthread_t t;
    for (int i = 1; i < threads; i++)
        pthread_create(&t, NULL, loop, NULL);
    loop(NULL);
    return 0;
}
