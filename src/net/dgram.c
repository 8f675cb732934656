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

ssize_t weft_recvfrom(int fd, void *buf, size_t len, int flags,
                      struct sockaddr *addr, socklen_t *addrlen,
                      int64_t deadline)
{
    if ((!buf && len) || (addr && !addrlen))
        return -EINVAL;
    struct iovec iov = {buf, len};
    struct msghdr m = {.msg_name = addr, .msg_namelen = addr ? *addrlen : 0,
                       .msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n = msg_io(fd, &m, flags, deadline, false);
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
    return msg_io(fd, msg, flags, deadline, false);
}

ssize_t weft_sendmsg(int fd, const struct msghdr *msg, int flags,
                     int64_t deadline)
{
    if (!msg)
        return -EINVAL;
    return msg_io(fd, (struct msghdr *)msg, flags, deadline, true);
}
