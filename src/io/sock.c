/*
 * sock.c — descriptors and sockets: making them (weft_socket, weft_pipe,
 * the TCP helpers), shutting them down, forgetting and closing them.
 *
 * A descriptor weft makes starts a new life of its number in the reactor
 * and the I/O layer (weft__io_adopt): whatever a previous descriptor with
 * that number left there (a stale registration, a kind, a write-behind
 * error) is gone. Closing wakes every fiber waiting on the descriptor with
 * -EBADF and bumps its generation before close(2), so the number may be
 * reused at once.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void weft__io_adopt(weft_sched_t *s, int fd, int kind, int stream)
{
    weft__io_fd_reset(s, fd, -EBADF);
    weft__fdstate *st = weft__fd(&s->r, fd);
    if (st) {
        st->kind = (uint8_t)kind;
        st->nonblock = 1;
    }
    weft__iofd *io = stream ? weft__iofd_get(s, fd) : NULL;
    if (io)
        io->stream = (uint8_t)stream;
}

int weft__io_stream(weft_sched_t *s, int fd)
{
    if (fd < s->niofd && s->iofd[fd].stream)
        return s->iofd[fd].stream;
    /* Asked before the table grows to @fd: a bogus number fails here. */
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return -errno;
    int stream = type == SOCK_STREAM ? 1 : 2;
    weft__iofd *io = weft__iofd_get(s, fd);
    if (io)
        io->stream = (uint8_t)stream;
    return stream;
}

int weft_shutdown(int fd, int how)
{
    if (fd < 0)
        return -EBADF;
    if (how != SHUT_RD)
        weft__wb_settle_before(fd);
    return shutdown(fd, how) < 0 ? -errno : 0;
}

int weft_fd_forget(int fd)
{
    if (fd < 0)
        return -EBADF;
    weft_sched_t *s = weft__sched_tls();
    if (s)
        weft__io_fd_reset(s, fd, -EBADF);
    return 0;
}

int weft_close(int fd)
{
    if (fd < 0)
        return -EBADF;
    weft__wb_settle_before(fd);
    weft_fd_forget(fd);
    weft_sched_t *s = weft__sched_tls();
    if (s && !s->current->is_main && !s->current->cancelled &&
        weft__reactor_use_op(&s->r, WEFT__FD_OTHER, WEFT__OP_CLOSE) && fd < s->r.nfds) {
        /* Batched with the loop's other submissions. A close never waits
         * for a peer, so the op completes in the next loop iteration; it is
         * not linked to the descriptor and has no deadline, and nothing but
         * its own completion ends it (nocancel). */
        weft__opdesc d = {.op = WEFT__OP_CLOSE, .fd = fd};
        weft__wait w;
        weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
        w.nocancel = true;
        if (weft__op_start(&w, &d, WEFT_FOREVER) == 0) {
            int why = weft__block(&w);
            while (weft__op_pending(&w)) { /* defensive: see above */
                weft__op_rearm(&w);
                weft__block(&w);
            }
            int rc = weft__op_result(&w, why);
            return rc == -EINTR ? 0 : rc;
        }
    }
    /* On Linux the descriptor is released even when close reports EINTR. */
    if (close(fd) < 0 && errno != EINTR)
        return -errno;
    return 0;
}

int weft_socket(int domain, int type, int protocol)
{
    int fd = socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
    if (fd < 0)
        return -errno;
    weft_sched_t *s = weft__sched_tls();
    if (s)
        weft__io_adopt(s, fd, WEFT__FD_SOCKET,
                       (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_STREAM ? 1 : 2);
    return fd;
}

int weft_pipe(int fds[2])
{
    if (!fds)
        return -EINVAL;
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    weft_sched_t *s = weft__sched_tls();
    if (s) {
        weft__io_adopt(s, fds[0], WEFT__FD_FIFO, 0);
        weft__io_adopt(s, fds[1], WEFT__FD_FIFO, 0);
    }
    return 0;
}

static int parse_addr(const char *host, int port, struct sockaddr_storage *ss,
                      socklen_t *len)
{
    if (port < 0 || port > 65535)
        return -EINVAL;
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (!host || !*host) {
        v4->sin_family = AF_INET;
        v4->sin_addr.s_addr = htonl(INADDR_ANY);
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
        return 0;
    }
    return -EINVAL;
}

int weft_tcp_listen(const char *host, int port, int backlog, int reuseport)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_addr(host, port, &ss, &len);
    if (rc == -EINVAL && host && port >= 0 && port <= 65535) /* a name */
        return weft_listen(host, port, SOCK_STREAM, backlog,
                           reuseport ? WEFT_REUSEPORT : 0, WEFT_FOREVER);
    if (rc < 0)
        return rc;
    int fd = weft_socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return fd;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (reuseport &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        goto fail;
    if (bind(fd, (struct sockaddr *)&ss, len) < 0)
        goto fail;
    if (listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0)
        goto fail;
    return fd;
fail:
    rc = -errno;
    weft_close(fd);
    return rc;
}

int weft_tcp_connect(const char *host, int port, int64_t deadline)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_addr(host, port, &ss, &len);
    if (rc == -EINVAL && host && port > 0 && port <= 65535) /* a name */
        return weft_dial(host, port, SOCK_STREAM, deadline);
    if (rc < 0)
        return rc;
    if (!host || !*host || port == 0)
        return -EINVAL;
    if ((rc = weft__precheck(deadline)) < 0)
        return rc;
    int fd = weft_socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        return fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    rc = weft_connect(fd, (struct sockaddr *)&ss, len, deadline);
    if (rc < 0) {
        weft_close(fd);
        return rc;
    }
    return fd;
}

int weft_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -EAFNOSUPPORT;
}

