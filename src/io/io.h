/*
 * io.h — the fiber I/O layer's internals, shared by io.c (fiber-blocking
 * system calls), wb.c (write-behind) and sock.c (descriptor and socket
 * helpers). Not installed.
 *
 * This layer sits on the scheduler (it blocks C fibers) and uses the
 * reactor below it; the reactor knows nothing of it. Its own state per
 * descriptor is a table of its own (weft__iofd), reset whenever this layer
 * resets the reactor's state of the descriptor (close, forget, a fresh
 * descriptor).
 */
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include "internal.h"

#include <sys/uio.h>

/* Per-descriptor state of the I/O layer. */
typedef struct weft__iofd {
    struct weft__wb *wb;  /* write-behind bytes in flight (wb.c), or NULL   */
    int32_t wb_err;       /* a write-behind failed: every later write gets it */
    uint8_t wb_on;        /* weft_write_behind() enabled for this socket    */
    /* Readiness backends, stream sockets: a read came back short, so the
     * receive queue was empty then, and no readable edge has been reported
     * since: the next read waits for one before trying. */
    uint8_t rd_drained;
    uint8_t stream;       /* 0 unknown, 1 SOCK_STREAM, 2 another socket type */
    /* A listening socket on a completion backend: the last accept found
     * its queue empty (a system call's EAGAIN, or the ring's word that
     * nothing was left behind the connection it took), so the next one
     * goes to the ring and waits before trying; otherwise (nothing known,
     * or more connections queued) the next one tries the system call
     * first, which takes a burst of connections without a loop iteration
     * for each. */
    uint8_t acc_empty;
} weft__iofd;

/* The I/O state of @fd (>= 0), growing the table to it; NULL = ENOMEM. */
weft__iofd *weft__iofd_grow(weft_sched_t *s, int fd);
static inline weft__iofd *weft__iofd_get(weft_sched_t *s, int fd)
{
    if (WEFT_LIKELY(fd < s->niofd))
        return &s->iofd[fd];
    return weft__iofd_grow(s, fd);
}
/* @fd starts a new life: forget this layer's state of it (and the
 * reactor's: waiters get @err). */
void weft__io_fd_reset(weft_sched_t *s, int fd, int err);
/* A descriptor weft just made (socket, accept, pipe): a new life of its
 * number, of @kind, O_NONBLOCK; @stream as in weft__iofd (0: not known,
 * or not a socket). */
void weft__io_adopt(weft_sched_t *s, int fd, int kind, int stream);
/* Whether socket @fd is SOCK_STREAM (1) or not (2), learnt once per life
 * of the descriptor (getsockopt, unless weft made it); -errno. */
int weft__io_stream(weft_sched_t *s, int fd);
/* Free the table (scheduler teardown). */
void weft__iofd_fini(weft_sched_t *s);

/* Checks shared by the blocking calls: in a fiber, not cancelled, a valid
 * deadline, an open descriptor whose state could be had. */
int weft__io_begin(int fd, int64_t deadline);
/* Block the current fiber until @fd is ready for @events or @deadline. */
int weft__io_wait(int fd, uint32_t events, int64_t deadline);
/* Whether to run @op on @fd (of @kind) as a completion op now: the backend
 * has it for that kind, and the call may wait (a deadline of exactly 0 is
 * the explicit "try once", which the system call does best). */
static inline bool weft__io_use_op(int kind, int op, int64_t deadline)
{
    return deadline != 0 && weft__reactor_use_op(&weft__sched_tls()->r, kind, op);
}
/* Run one completion op for the current fiber (see weft__op_start): its
 * result, or why the wait ended if it was cancelled; *@hint (if not NULL)
 * gets what the completion said beyond it (weft__wait.op_hint). */
ssize_t weft__io_op(const weft__opdesc *d, int64_t deadline, uint8_t *hint);
/* The kind of @fd (weft__fd_kind), with a non-socket made O_NONBLOCK
 * unless it is a regular file; -errno. */
int weft__io_kind_slow(int fd);
static inline int weft__io_kind(int fd)
{
    weft__reactor *r = &weft__sched_tls()->r;
    if (WEFT_LIKELY(fd < r->nfds)) {
        const weft__fdstate *st = &r->fds[fd];
        if (st->kind == WEFT__FD_SOCKET || st->kind == WEFT__FD_FILE ||
            (st->kind != WEFT__FD_UNKNOWN && st->nonblock))
            return st->kind;
    }
    return weft__io_kind_slow(fd);
}

/* Write-behind (wb.c). */
#define WEFT__WB_PASS ((ssize_t)INT32_MIN) /* "not a write-behind, go on"  */
ssize_t weft__wb_write(weft_sched_t *s, int fd, const struct iovec *iov, int cnt,
                       int flags, int64_t deadline);
/* Wait (in a fiber) until @fd has no write-behind bytes: 0, the
 * descriptor's write-behind error, or why the wait ended. */
int weft__wb_drain(int fd, int64_t deadline);
/* In a fiber, before close/shutdown: let write-behind bytes go out. */
void weft__wb_settle_before(int fd);
/* Free the buffers (scheduler teardown, after the reactor's). */
void weft__wb_fini(weft_sched_t *s);

#endif
