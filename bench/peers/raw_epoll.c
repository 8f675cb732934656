/*
 * raw_epoll — the floor for the HTTP benchmark: a hello-world HTTP/1.1
 * server in plain C on epoll, no fibers, no library. One thread per
 * --threads, each with its own epoll set and SO_REUSEPORT listener.
 *
 * Level-triggered; per readiness event one recv, then every complete
 * request head in the buffer is parsed (the example server's parser) and
 * answered, all with one send. Unsent bytes wait for EPOLLOUT. This is
 * what the weft server does for "GET /", minus the fibers.
 *
 *   raw_epoll --port P [--threads N]
 */
#define _GNU_SOURCE
#include "raw_http.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>


typedef struct conn {
    int fd;
    int close_after; /* close once the output has gone */
    size_t inlen, outlen, outoff;
    char in[BUF];
    char out[BUF];
} conn;

static void drop(int ep, conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

/* Send pending output; returns -1 when the connection is broken, or is
 * done (all sent and close_after set). */
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
    return c->close_after ? -1 : 0;
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
    c->close_after = raw_answer(c->in, &c->inlen, c->out, &c->outlen);
    if (c->inlen == BUF || flush(ep, c) < 0)
        drop(ep, c);
}

static void *loop(void *arg)
{
    (void)arg;
    int lfd = raw_listener("raw_epoll", SOCK_NONBLOCK);
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
                    nc->close_after = 0;
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
    return raw_main(argc, argv, "raw_epoll", loop);
}
