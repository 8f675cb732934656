/*
 * io.h — the fiber I/O layer's internals, shared by io.c (fiber-blocking
 * system calls), wb.c (write-behind) and sock.c (the layer's state of
 * each descriptor; making and closing them). Not installed. Calls go one
 * way inside the layer: io.c uses sock.c and wb.c, sock.c uses wb.c, and
 * wb.c only this header (its teardown is a hook in weft__io).
 *
 * This layer sits on the scheduler (it blocks C fibers) and uses the
 * reactor below it; the reactor knows nothing of it. Its state lives in a
 * weft__io of its own that the scheduler only points to; per descriptor it
 * is a table (weft__iofd, a weft__fdtab_reach table) whose entry is
 * cleared whenever this layer resets the reactor's state of the
 * descriptor (weft__io_fd_reset: close, forget, a fresh descriptor).
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

/* The layer's state in one scheduler (weft_sched.io): made when it first
 * keeps something, freed by the scheduler's teardown. */
typedef struct weft__io {
    weft_sched_t *s;                    /* the scheduler it belongs to     */
    weft__iofd *fds;                    /* per descriptor                  */
    int nfds;                           /* entries allocated               */
    struct weft__wb *wb_all, *wb_free;  /* write-behind buffers (wb.c)     */
    struct weft__wb **wb_fresh;         /* submitted, deadline not armed   */
    uint32_t wb_fresh_n, wb_fresh_cap;
    int64_t wb_fresh_min;               /* no later than their earliest
                                           deadline; WEFT_FOREVER: none   */
    void (*wb_fini)(struct weft__io *io); /* set by wb.c with its first
                                             buffer; called at teardown  */
    /* System-call reads and writes one fiber made in a row within one
     * turn of the loop (io.c, io_fair): past a budget it yields, so that
     * I/O that never has to wait does not keep the other fibers and the
     * timers from running. */
    const void *run_fiber;
    uint64_t run_iter;
    uint32_t run_calls;
} weft__io;

/* Make @s's I/O state (sock.c), on first use; NULL = ENOMEM. */
weft__io *weft__io_make(weft_sched_t *s);
/* The I/O state of @fd (>= 0), growing the table to it; NULL = ENOMEM. */
static inline weft__iofd *weft__iofd_grow(weft_sched_t *s, int fd)
{
    weft__io *io = s->io ? s->io : weft__io_make(s);
    if (!io)
        return NULL;
    if (weft__fdtab_reach(&io->fds, &io->nfds, fd, sizeof *io->fds) < 0)
        return NULL;
    return &io->fds[fd];
}
static inline weft__iofd *weft__iofd_get(weft_sched_t *s, int fd)
{
    weft__io *io = s->io;
    if (WEFT_LIKELY(io != NULL && fd < io->nfds))
        return &io->fds[fd];
    return weft__iofd_grow(s, fd);
}
/* The I/O state of @fd if the table reaches it (else nothing is kept for
 * it: NULL), without growing it. */
static inline weft__iofd *weft__iofd_find(const weft_sched_t *s, int fd)
{
    weft__io *io = s->io;
    return io != NULL && fd >= 0 && fd < io->nfds ? &io->fds[fd] : NULL;
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

/* Checks shared by the blocking calls: in a fiber, not cancelled, a valid
 * deadline (weft__precheck), @fd not negative, and the reactor's and this
 * layer's tables grown to @fd (-ENOMEM if they cannot be). Whether @fd is
 * open is asked (fcntl) only when a table does not reach it yet, so that a
 * bogus huge number is -EBADF rather than a huge table; otherwise a closed
 * descriptor is found by the system call or op that follows. */
int weft__io_begin(int fd, int64_t deadline);
/* The I/O state of @fd after weft__io_begin(@fd) succeeded. */
static inline weft__iofd *weft__iofd_at(const weft_sched_t *s, int fd)
{
    return &s->io->fds[fd];
}
/* Block the current fiber until @fd is ready for @events or @deadline. */
int weft__io_wait(int fd, uint32_t events, int64_t deadline);
/* The same, saying what for: @kind and @obj as weft__block takes them,
 * @opk the stats kind (WEFT_OPK_ACCEPT, _CONNECT) or -1 (by @events). */
int weft__io_wait_as(int fd, uint32_t events, int64_t deadline, int kind,
                     const void *obj, int opk);
/* weft_wait_fd(), saying what for (weft__block's @kind, @obj): the process
 * and signal waits. */
int weft__wait_fd_as(int fd, int events, int64_t deadline, int kind, const void *obj);
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
/* How this layer's system calls on a descriptor keep from blocking
 * (weft__fdstate.nonblock). A standard descriptor is left blocking where
 * it can be, for the program's stdio (see io.c): its calls are made
 * non-blocking one at a time. */
enum {
    WEFT__NB_SET = 1,    /* O_NONBLOCK is set on the description          */
    WEFT__NB_RWF = 2,    /* each call with RWF_NOWAIT (a pipe: tried first
                            on a pipe or a FIFO, see nowait_rw)          */
    WEFT__NB_TOGGLE = 3  /* O_NONBLOCK set for each call and cleared after,
                            on a description this process alone has      */
};
/* @fd made non-blocking for this layer's calls, once (the descriptor
 * table remembers how: WEFT__NB_*); a standard descriptor that had to get
 * O_NONBLOCK itself is made blocking again at exit (io.c). 0 or -errno. */
int weft__ensure_nonblock(int fd);
/* @fd itself if it is above 2 (or negative), else a close-on-exec copy
 * above 2 with @fd closed: for descriptors weft holds, which must not take
 * the number of a closed stdin, stdout or stderr. -1 with errno set if
 * the copy fails. */
int weft__fd_above_std(int fd);
/* A new open file description of the file @fd is open on (flags @fl,
 * fstat @sb), through /proc/self/fd: for a pipe, a FIFO or a terminal
 * that reopens as itself (not a pseudo-terminal master). Opened with
 * @fl's access mode and O_APPEND, O_NONBLOCK and close-on-exec, at any
 * number; -1 where that cannot be done (another kind of file, no /proc,
 * a FIFO without reader, a different file there now). */
struct stat;
int weft__fd_reopen(int fd, int fl, const struct stat *sb);
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
ssize_t weft__wb_write(weft__io *io, int fd, const struct iovec *iov, int cnt,
                       int flags, int64_t deadline);
/* Wait (in a fiber) until @fd has no write-behind bytes: 0, the
 * descriptor's write-behind error, or why the wait ended. */
int weft__wb_drain(int fd, int64_t deadline);
/* In a fiber, before close/shutdown: let write-behind bytes go out. */
void weft__wb_settle_before(int fd);
/* Free the buffers (scheduler teardown, after the reactor's). */
void weft__wb_fini(weft__io *io);

#endif
