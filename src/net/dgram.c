/*
 * dgram.c — recvfrom/sendto/recvmsg/sendmsg for fibers.
 *
 * The system call first, with MSG_DONTWAIT (and MSG_NOSIGNAL for sends),
 * and on EAGAIN a readiness wait through weft_wait_fd(), then again. On
 * every backend the same path: a datagram server spends its time in the
 * receive, which usually finds data waiting, and a ring RECVMSG would have
 * to carry the caller's msghdr and address buffer through the kernel's
 * completion; the readiness wait keeps them in the caller's hands.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static ssize_t msg_io(int fd, struct msghdr *m, int flags, int64_t deadline,
                      bool out)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    if (fd < 0)
        return -EBADF;
    for (;;) {
        ssize_t n = out ? sendmsg(fd, m, flags | MSG_DONTWAIT | MSG_NOSIGNAL)
                        : recvmsg(fd, m, flags | MSG_DONTWAIT);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        rc = weft_wait_fd(fd, out ? WEFT_WRITABLE : WEFT_READABLE, deadline);
        if (rc < 0)
            return rc;
    }
}

static size_t iov_total(const struct iovec *iov, size_t cnt)
{
    size_t t = 0;
    for (size_t i = 0; i < cnt; i++)
        t += iov[i].iov_len;
    return t;
}

static bool is_stream(int fd)
{
    int type = 0;
    socklen_t len = sizeof type;
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
           type == SOCK_STREAM;
}

/*
 * A receive. MSG_WAITALL on a stream socket waits, as recv(2) does, until
 * the buffers are full, not only until some bytes came: MSG_DONTWAIT, which
 * every receive here adds, makes the kernel return what it has, so the
 * rest is received here, the buffers advanced past what came, after
 * readiness waits. End of file, an error, the deadline or a cancel ends it
 * early: the bytes received so far are returned (the next call meets the
 * error), as recv(2) returns a short count when interrupted. Not with
 * MSG_PEEK (nothing is consumed to advance past), nor with a control
 * buffer (descriptors sent with a later part would be lost).
 */
static ssize_t recv_io(int fd, struct msghdr *m, int flags, int64_t deadline)
{
    ssize_t n = msg_io(fd, m, flags, deadline, false);
    if (!(flags & MSG_WAITALL) || (flags & MSG_PEEK) || n <= 0 ||
        m->msg_controllen || (m->msg_flags & MSG_TRUNC))
        return n;
    size_t want = iov_total(m->msg_iov, m->msg_iovlen);
    if ((size_t)n >= want || !is_stream(fd))
        return n;
    struct iovec small[8], *iov = small;
    size_t cnt = m->msg_iovlen;
    if (cnt > 8 && !(iov = malloc(cnt * sizeof *iov)))
        return n;
    memcpy(iov, m->msg_iov, cnt * sizeof *iov);
    struct msghdr rest = {.msg_iov = iov, .msg_iovlen = cnt};
    size_t got = (size_t)n;
    size_t skip = got;
    while (got < want) {
        /* Past the bytes received: whole buffers dropped, one cut. */
        while (skip && skip >= rest.msg_iov->iov_len) {
            skip -= rest.msg_iov->iov_len;
            rest.msg_iov++;
            rest.msg_iovlen--;
        }
        rest.msg_iov->iov_base = (char *)rest.msg_iov->iov_base + skip;
        rest.msg_iov->iov_len -= skip;
        n = msg_io(fd, &rest, flags & ~MSG_WAITALL, deadline, false);
        if (n <= 0)
            break;
        got += (size_t)n;
        skip = (size_t)n;
    }
    if (iov != small)
        free(iov);
    return (ssize_t)got;
}

ssize_t weft_recvfrom(int fd, void *buf, size_t len, int flags,
                      struct sockaddr *addr, socklen_t *addrlen,
                      int64_t deadline)
{
    if ((!buf && len) || (addr && !addrlen))
        return -EINVAL;
    struct iovec iov = {buf, len};
    struct msghdr m = {.msg_name = addr, .msg_namelen = addr ? *addrlen : 0,
                       .msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n = recv_io(fd, &m, flags, deadline);
    if (n >= 0 && addr)
        *addrlen = m.msg_namelen;
    return n;
}

ssize_t weft_sendto(int fd, const void *buf, size_t len, int flags,
                    const struct sockaddr *addr, socklen_t addrlen,
                    int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    struct iovec iov = {(void *)buf, len};
    struct msghdr m = {.msg_name = (void *)addr, .msg_namelen = addr ? addrlen : 0,
                       .msg_iov = &iov, .msg_iovlen = 1};
    return msg_io(fd, &m, flags, deadline, true);
}

ssize_t weft_recvmsg(int fd, struct msghdr *msg, int flags, int64_t deadline)
{
    if (!msg)
        return -EINVAL;
    return recv_io(fd, msg, flags, deadline);
}

ssize_t weft_sendmsg(int fd, const struct msghdr *msg, int flags,
                     int64_t deadline)
{
    if (!msg)
        return -EINVAL;
    return msg_io(fd, (struct msghdr *)msg, flags, deadline, true);
}
