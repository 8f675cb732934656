/*
 * sock.c — descriptors and sockets: the layer's state of each (made on
 * first use, reset on a new life, torn down with the scheduler), making
 * them (weft_socket, weft_pipe), their write-behind switch
 * (weft_write_behind), shutting them down, forgetting and closing them.
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

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the layer's own descriptor table ---------------------------------- */

/* The scheduler's teardown: this layer's tables and buffers. */
static void io_fini(weft_sched_t *s)
{
    weft__io *io = s->io;
    if (!io)
        return;
    if (io->wb_fini)
        io->wb_fini(io);
    free(io->fds);
    free(io);
    s->io = NULL;
}

weft__io *weft__io_make(weft_sched_t *s)
{
    weft__io *io = calloc(1, sizeof *io);
    if (!io)
        return NULL;
    io->s = s;
    io->wb_fresh_min = WEFT_FOREVER;
    s->io = io;
    s->io_fini = io_fini;
    return io;
}

void weft__io_fd_reset(weft_sched_t *s, int fd, int err)
{
    weft__reactor_fd_close(&s->r, fd, err);
    /* a write-behind in flight was cancelled above */
    if (s->io)
        weft__fdtab_clear(s->io->fds, s->io->nfds, fd, sizeof *s->io->fds);
}

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
    const weft__iofd *known = weft__iofd_find(s, fd);
    if (known && known->stream)
        return known->stream;
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
    if (how == SHUT_RD)
        return shutdown(fd, how) < 0 ? -errno : 0;
    weft__wb_settle_before(fd);
    if (shutdown(fd, how) < 0)
        return -errno;
    /* No send can succeed now: a later one goes to the kernel and fails
     * with -EPIPE, as send(2) does, instead of being taken into a
     * write-behind buffer and reported as sent. */
    weft_sched_t *s = weft__sched_tls();
    weft__iofd *io = s ? weft__iofd_find(s, fd) : NULL;
    if (io)
        io->wb_on = 0;
    return 0;
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
            int why = weft__block(&w, WEFT_WAIT_FD, WEFT__FDOBJ(fd));
            while (weft__op_pending(&w)) { /* defensive: see above */
                weft__op_rearm(&w);
                weft__block(&w, WEFT_WAIT_FD, WEFT__FDOBJ(fd));
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

int weft_write_behind(int fd, int on)
{
    weft_sched_t *s = weft__sched_tls();
    if (fd < 0)
        return -EBADF;
    if (on != 0 && on != 1)
        return -EINVAL;
    if (!s)
        return -EPERM;
    /* Known for the sockets weft made or accepted, else asked once. */
    int stream = weft__io_stream(s, fd);
    if (stream < 0)
        return stream;
    if (stream != 1)
        return -EINVAL;
    weft__fdstate *fs = weft__fd(&s->r, fd);
    weft__iofd *st = weft__iofd_get(s, fd);
    if (!fs || !st)
        return -ENOMEM;
    fs->kind = WEFT__FD_SOCKET;
    /* Readiness backends send with a system call that returns as soon as
     * the kernel has the bytes: nothing to gain. */
    st->wb_on = on && weft__reactor_use_op(&s->r, WEFT__FD_SOCKET, WEFT__OP_SEND);
    return 0;
}
