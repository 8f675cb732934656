/*
 * io.c — fiber-blocking system calls.
 *
 * Every call tries the system call first and waits for readiness only when
 * it would block. Sockets are driven with MSG_DONTWAIT (no fcntl needed)
 * and MSG_NOSIGNAL; other descriptors get O_NONBLOCK once and, since
 * MSG_NOSIGNAL does not exist for pipes, writes to them block SIGPIPE in
 * the calling thread's mask for the duration of the call and consume the
 * signal the kernel queued, so the process's dispositions are never
 * touched and the caller sees -EPIPE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"
#include "waitq.h"
#include "evmask.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Block the current fiber until @fd is ready for @events. */
static int io_wait(int fd, uint32_t events, int64_t deadline)
{
    weft_sched_t *s = weft__sched_tls();
    weft__wait w;
    weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
    int rc = weft__wait_arm_deadline(&w, deadline);
    if (rc == 0)
        rc = weft__wait_arm_fd(&w, fd, events);
    if (rc < 0) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    return weft__block(&w);
}

/* A deadline of 0 is the explicit "try once": the system call does that
 * best. Any other deadline is not compared with the clock here (a read
 * per call, ~25-40 ns): one that has passed already makes the timer fire
 * in the poll that submits the op, which cancels it unless it completed
 * inside that submission — the same single attempt. */
static bool ring_ok(int64_t deadline)
{
    weft_sched_t *s = weft__sched_tls();
    return deadline != 0 && weft__reactor_has_ops(&s->r);
}

/*
 * Run one completion op for the current fiber and return its result.
 *
 * If the wait ends first (deadline, cancel, close), the op is cancelled and
 * the fiber waits — uninterruptibly — for its completion before returning,
 * because the kernel may still be using the caller's buffer. An op that
 * completed after all wins over the reason for cancelling it, so no data
 * (and no accepted descriptor) is lost: each op completes or is cancelled,
 * exactly once.
 */
/* @w ended while its op may still be in flight: wait, uncancellably, for
 * the op's own completion (its result lands in w->op_res/op_done). */
static void wait_op_out(weft_sched_t *s, weft__wait *w)
{
    while (w->op) {
        weft__wait w2;
        weft__wait_init(&w2, &s->r, weft__fiber_wake, s->current);
        w2.nocancel = true;
        weft__wait_move_op(w, &w2);
        weft__block(&w2);
        w->op_done = w2.op_done;
        w->op_res = w2.op_res;
    }
}

/* Callers have just checked ring_ok(@deadline). */
static ssize_t ring_op(const weft__opdesc *d, int64_t deadline)
{
    weft_sched_t *s = weft__sched_tls();
    weft__wait w;
    weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
    int rc = weft__wait_arm_later(&w, deadline); /* a passed one fires in the next poll */
    if (rc == 0)
        rc = weft__wait_arm_op(&w, d);
    if (rc < 0) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    int why = weft__block(&w);
    wait_op_out(s, &w);
    if (!w.op_done)
        return why; /* ended before the op was submitted */
    int res = w.op_res;
    if ((res == -ECANCELED || res == -EINTR) && why < 0 && why != res)
        return why;
    return res;
}

static weft__fdstate *fdst(int fd)
{
    return weft__fd(&weft__sched_tls()->r, fd);
}

static int ensure_nonblock(int fd)
{
    weft__fdstate *st = fdst(fd);
    if (st && st->nonblock)
        return 0;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    if (st)
        st->nonblock = 1;
    return 0;
}

/* Kind of @fd as far as we know; ENOTSOCK from a socket call flips it. */
static int fd_kind(int fd)
{
    weft__fdstate *st = fdst(fd);
    return st ? st->kind : WEFT__FD_UNKNOWN;
}

static void fd_set_kind(int fd, int kind);

/* @fd is not a socket: a regular file (left blocking, so io_uring reads
 * really wait for the disk) or something pollable (made non-blocking). */
static int learn_not_socket(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode))) {
        fd_set_kind(fd, WEFT__FD_FILE);
        return 0;
    }
    fd_set_kind(fd, WEFT__FD_OTHER);
    return ensure_nonblock(fd);
}

static void fd_set_kind(int fd, int kind)
{
    weft__fdstate *st = fdst(fd);
    if (st)
        st->kind = (uint8_t)kind;
}

static int begin(int fd, int64_t deadline)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    if (fd < 0)
        return -EBADF;
    /* Beyond the table: make sure the descriptor exists before growing
     * the table to its number (a bogus huge number is -EBADF, not a
     * gigabyte memset). */
    if (fd >= weft__sched_tls()->r.nfds && fcntl(fd, F_GETFD) < 0)
        return -EBADF;
    if (!fdst(fd))
        return -ENOMEM;
    return 0;
}

static void adopt(int fd, int kind);

/*
 * Readiness backends: after a stream socket read that came back short (the
 * receive queue was empty at that moment), the next read would most often
 * fail with EAGAIN, a wasted system call per request in a request/response
 * protocol. While no readable edge has been reported since, wait for one
 * first. Safe with epoll's edge triggering because any data that arrives
 * later raises a new edge, which the reactor records even with no waiter
 * (rd_edge); the poll backend is level-triggered anyway. A deadline that
 * passes during that wait still gets its one non-blocking attempt.
 */
static bool read_waits_first(const weft__fdstate *st, int flags)
{
    return st->rd_drained && !st->rd_edge && !st->rd_hup && !(flags & MSG_PEEK);
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
    size_t t = 0;
    for (int i = 0; i < cnt; i++)
        t += iov[i].iov_len;
    return t;
}

static void note_read(weft__fdstate *st, int fd, ssize_t n, size_t asked, int flags)
{
    if (n <= 0 || (size_t)n >= asked || (flags & MSG_PEEK)) {
        st->rd_drained = 0;
        return;
    }
    if (!st->stream) {
        int type = 0;
        socklen_t len = sizeof type;
        st->stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
                             type == SOCK_STREAM ? 1 : 2;
    }
    /* A short datagram says nothing about the next one. */
    st->rd_drained = st->stream == 1;
}

/* The errno of a failed call: 0 means "would block, wait", else -errno. */
static inline int failed(void)
{
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK)
        return 0;
    return -e;
}

/* writev on a non-socket without letting SIGPIPE reach the process. */
static ssize_t writev_nosigpipe(int fd, const struct iovec *iov, int cnt)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t n = writev(fd, iov, cnt);
    int e = errno;
    if (n < 0 && e == EPIPE && !sigismember(&old, SIGPIPE)) {
        /* The SIGPIPE this write raised is pending on this thread:
         * take it before unblocking. */
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return n;
}

/* ---- write-behind (io_uring) ---------------------------------------------
 *
 * With weft_write_behind(fd, 1), a small send on a stream socket is copied
 * into a buffer the reactor owns and submitted as a SEND; the call returns
 * at once and the fiber is not resumed for the send's completion (one
 * resume per request/response instead of two). Later small sends are
 * appended behind the bytes in flight and go out when those complete;
 * anything that must come after them (a larger or flagged send, weft_flush,
 * weft_shutdown, weft_close) first waits for the buffer to empty. The
 * buffer keeps the deadline of the latest call that added to it: if it
 * passes, or the send fails, the bytes not yet sent are dropped and every
 * later write on the descriptor returns that error (-ETIMEDOUT, -EPIPE,
 * -ECONNRESET...), as a socket error would. The loop runs until every
 * buffer has gone out or failed.
 */
#define WB_CAP 3840

typedef struct weft__wb {
    weft__wait w;              /* the SEND in flight                       */
    weft__wait tail;           /* its completion after w ended early       */
    weft_waitq_t waiters;      /* fibers waiting for the buffer to empty   */
    struct weft__wb *next;     /* free list                                */
    struct weft__wb *all_next; /* every buffer of the reactor              */
    int64_t deadline;
    int fd;
    int why;                   /* why w ended early                        */
    bool failed;               /* w ended early: append nothing more       */
    bool polling;              /* w is a wait for writability, not a send
                                  (set by every submission)               */
    size_t off, len;           /* [off, len) not yet sent                  */
    char buf[WB_CAP];
} weft__wb;

/* A value no write returns: "not a write-behind, take the usual path". */
#define WB_PASS ((ssize_t)INT_MIN)

static weft__wb *wb_get(weft__reactor *r)
{
    weft__wb *wb = r->wb_free;
    if (wb) {
        r->wb_free = wb->next;
        return wb;
    }
    wb = malloc(sizeof *wb);
    if (wb) {
        wb->all_next = r->wb_all;
        r->wb_all = wb;
    }
    return wb;
}

static void wb_put(weft__reactor *r, weft__wb *wb)
{
    wb->next = r->wb_free;
    r->wb_free = wb;
}

void weft__wb_fini(weft__reactor *r)
{
    free(r->wb_fresh);
    r->wb_fresh = NULL;
    r->wb_fresh_n = r->wb_fresh_cap = 0;
    weft__wb *wb = r->wb_all;
    while (wb) {
        weft__wb *next = wb->all_next;
        free(wb);
        wb = next;
    }
    r->wb_all = r->wb_free = NULL;
}

static void wb_nop(weft__wait *w)
{
    (void)w;
}

static void wb_wake(weft__wait *w);

/*
 * A send with room in the socket completes inside the io_uring_enter that
 * submits it, so most write-behinds are done by the time the loop reaps:
 * their deadline is not put in the timer heap at submission (a push and a
 * removal, each touching timers in other fibers' stacks) but noted here,
 * and armed after the poll only for those still in flight. The poll does
 * not sleep past the earliest noted deadline.
 */
static int wb_note_fresh(weft__reactor *r, weft__wb *wb)
{
    if (r->wb_fresh_n == r->wb_fresh_cap) {
        uint32_t ncap = r->wb_fresh_cap ? r->wb_fresh_cap * 2 : 64;
        weft__wb **n = realloc(r->wb_fresh, ncap * sizeof *n);
        if (!n)
            return weft__wait_arm_later(&wb->w, wb->deadline);
        r->wb_fresh = n;
        r->wb_fresh_cap = ncap;
    }
    r->wb_fresh[r->wb_fresh_n++] = wb;
    return 0;
}

int64_t weft__wb_fresh_min(const weft__reactor *r)
{
    int64_t m = WEFT_FOREVER;
    for (uint32_t i = 0; i < r->wb_fresh_n; i++) {
        const weft__wb *wb = r->wb_fresh[i];
        if (wb->w.active && wb->deadline != WEFT_FOREVER &&
            (m == WEFT_FOREVER || wb->deadline < m))
            m = wb->deadline;
    }
    return m;
}

void weft__wb_arm_fresh(weft__reactor *r)
{
    /* No fiber ran since these were noted, so none was reused: a buffer
     * whose send completed is inactive (or active again for its next
     * send, which needs the deadline too). */
    uint32_t n = r->wb_fresh_n;
    r->wb_fresh_n = 0;
    for (uint32_t i = 0; i < n; i++) {
        weft__wb *wb = r->wb_fresh[i];
        if (wb->w.active && wb->w.timer.idx == WEFT__TIMER_IDLE &&
            weft__wait_arm_later(&wb->w, wb->deadline) < 0)
            weft__wait_complete(&wb->w, -ENOMEM);
    }
}

/*
 * Submit, with the buffer's deadline, a SEND of [off, len) or a POLL for
 * writability. Sends carry MSG_DONTWAIT: a full socket answers -EAGAIN
 * and the buffer then waits with a POLL, the same on every kernel (some
 * would otherwise wait inside the ring, some answer -EAGAIN for a
 * non-blocking socket anyway).
 */
static int wb_submit(weft__reactor *r, weft__wb *wb, bool poll)
{
    weft__wait_init(&wb->w, r, wb_wake, wb);
    wb->polling = poll;
    int rc = wb_note_fresh(r, wb);
    if (rc == 0) {
        weft__opdesc d = {.op = WEFT__OP_SEND, .fd = wb->fd, .off = -1,
                          .flags = MSG_DONTWAIT,
                          .buf = wb->buf + wb->off, .len = wb->len - wb->off};
        if (poll)
            d = (weft__opdesc){.op = WEFT__OP_POLL, .fd = wb->fd, .off = -1,
                               .events = WEFT_WRITABLE};
        rc = weft__wait_arm_op(&wb->w, &d);
    }
    if (rc < 0) {
        wb->w.wake = wb_nop;
        weft__wait_complete(&wb->w, rc);
    }
    return rc;
}

/* The descriptor's state if @wb is still its buffer; closing or
 * forgetting the descriptor detaches the buffer. */
static weft__fdstate *wb_owner(weft__reactor *r, const weft__wb *wb)
{
    return wb->fd < r->nfds && r->fds[wb->fd].wb == wb ? &r->fds[wb->fd] : NULL;
}

/* The send of [off, len) ended with @res (bytes sent or -errno). */
static void wb_settle(weft__reactor *r, weft__wb *wb, int res)
{
    weft__fdstate *st = wb_owner(r, wb);
    if (res > 0) {
        wb->off += (size_t)res;
        res = 0;
        if (wb->off < wb->len) {
            /* A short send, or bytes appended meanwhile. */
            res = st ? wb_submit(r, wb, false) : -EBADF;
            if (res == 0)
                return;
        }
    } else if (res == 0) {
        res = -EPIPE; /* a stream send of n > 0 bytes never returns 0 */
    }
    if (st) {
        if (res < 0)
            st->wb_err = res;
        st->wb = NULL;
    }
    wq_wake_all(&wb->waiters, 0);
    wb_put(r, wb);
}

/* The kernel's answer to a send whose wait had ended early. */
static void wb_tail_wake(weft__wait *w)
{
    weft__wb *wb = w->owner;
    int res = w->op_done ? w->op_res : wb->why;
    /* Completed after all: nothing was lost. */
    if (!(res > 0 && wb->off + (size_t)res == wb->len))
        res = wb->why;
    wb_settle(w->r, wb, res);
}

static void wb_wake(weft__wait *w)
{
    weft__wb *wb = w->owner;
    if (w->op) {
        /* Ended first (deadline; the descriptor closed or forgotten): the
         * kernel may still read the buffer, so wait for its answer. */
        wb->failed = true;
        wb->why = w->result;
        weft__wait_init(&wb->tail, w->r, wb_tail_wake, wb);
        wb->tail.nocancel = true;
        weft__wait_move_op(w, &wb->tail);
        return;
    }
    weft__reactor *r = w->r;
    int res = w->result;
    if (wb->polling || res == -EAGAIN) {
        /* After a poll (writable, or an error the send will report):
         * send again. After -EAGAIN (the socket is full): poll. */
        bool poll = !wb->polling;
        if (res >= 0 || res == -EAGAIN) {
            res = wb_owner(r, wb) ? wb_submit(r, wb, poll) : -EBADF;
            if (res == 0)
                return;
        }
    }
    wb_settle(r, wb, res);
}

static void wb_copy(weft__wb *wb, const struct iovec *iov, int cnt)
{
    for (int i = 0; i < cnt; i++) {
        memcpy(wb->buf + wb->len, iov[i].iov_base, iov[i].iov_len);
        wb->len += iov[i].iov_len;
    }
}

/* Wait (in a fiber) until @fd has no write-behind bytes; returns 0, the
 * descriptor's write-behind error, or why the wait ended. */
static int wb_drain(int fd, int64_t deadline)
{
    weft__reactor *r = &weft__sched_tls()->r;
    while (fd < r->nfds && r->fds[fd].wb) {
        weft__wq_node n;
        int rc = wq_block(&r->fds[fd].wb->waiters, &n, deadline);
        if (rc < 0)
            return rc;
    }
    return fd < r->nfds ? r->fds[fd].wb_err : 0;
}

/* A write on a descriptor with write-behind on, or bytes still behind. */
static ssize_t wb_write(int fd, const struct iovec *iov, int cnt, int flags,
                        int64_t deadline)
{
    weft__reactor *r = &weft__sched_tls()->r;
    weft__fdstate *st = &r->fds[fd];
    if (st->wb_err)
        return st->wb_err;
    size_t total = iov_total(iov, cnt);
    bool small = st->wb_on && flags == 0 && total > 0 && total <= WB_CAP;
    weft__wb *wb = st->wb;
    if (wb) {
        if (small && !wb->failed && wb->len + total <= WB_CAP) {
            wb_copy(wb, iov, cnt); /* goes out after the bytes in flight */
            wb->deadline = deadline;
            if (wb->w.timer.idx != WEFT__TIMER_IDLE) {
                /* Stuck for a while already: the new deadline applies. */
                weft__heap_remove(&r->timers, &wb->w.timer);
                if (weft__wait_arm_later(&wb->w, deadline) < 0)
                    weft__wait_complete(&wb->w, -ENOMEM);
            }
            return (ssize_t)total;
        }
        int rc = wb_drain(fd, deadline);
        if (rc < 0)
            return rc;
        st = &r->fds[fd];
    }
    if (!small || !ring_ok(deadline) || !(wb = wb_get(r)))
        return WB_PASS;
    wb->waiters = (weft_waitq_t)WEFT_WAITQ_INIT;
    wb->fd = fd;
    wb->deadline = deadline;
    wb->failed = false;
    wb->off = wb->len = 0;
    wb_copy(wb, iov, cnt);
    st->wb = wb;
    if (wb_submit(r, wb, false) < 0) {
        st->wb = NULL;
        wb_put(r, wb);
        return WB_PASS;
    }
    return (ssize_t)total;
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
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return -errno;
    if (type != SOCK_STREAM)
        return -EINVAL;
    weft__fdstate *st = weft__fd(&s->r, fd);
    if (!st)
        return -ENOMEM;
    st->kind = WEFT__FD_SOCKET;
    /* Readiness backends send with a system call that returns as soon as
     * the kernel has the bytes: nothing to gain. */
    st->wb_on = on && weft__reactor_has_ops(&s->r);
    return 0;
}

int weft_flush(int fd, int64_t deadline)
{
    int rc = begin(fd, deadline);
    return rc < 0 ? rc : wb_drain(fd, deadline);
}

/* ---- reading and writing ------------------------------------------------ */

/*
 * One loop for both directions. On io_uring: sockets, regular files and
 * (for reads) pipes go through the ring; writes to pipes and other
 * non-sockets stay system calls, because a ring write to a broken pipe
 * raises SIGPIPE, which the guarded syscall turns into -EPIPE. Elsewhere:
 * the system call first, a readiness wait on EAGAIN.
 */
static ssize_t do_rw(int fd, const struct iovec *iov, int cnt, int flags,
                     int64_t deadline, bool socket_only, bool write)
{
    int rc = begin(fd, deadline);
    if (rc < 0)
        return rc;
    const uint32_t ready = write ? WEFT_WRITABLE : WEFT_READABLE;
    weft__reactor *r = &weft__sched_tls()->r;
    if (write && WEFT_UNLIKELY(r->fds[fd].wb_on || r->fds[fd].wb || r->fds[fd].wb_err)) {
        ssize_t n = wb_write(fd, iov, cnt, flags, deadline);
        if (n != WB_PASS)
            return n;
    }
    const bool readiness = !weft__reactor_has_ops(r);
    bool last_try = false;
    if (readiness && !write && read_waits_first(&r->fds[fd], flags)) {
        rc = io_wait(fd, ready, deadline);
        if (rc == -ETIMEDOUT)
            last_try = true;
        else if (rc < 0)
            return rc;
    }
    for (;;) {
        ssize_t n;
        int kind = fd_kind(fd);
        if (socket_only && (kind == WEFT__FD_OTHER || kind == WEFT__FD_FILE))
            return -ENOTSOCK;
        bool sock = kind == WEFT__FD_SOCKET;
        bool ring_kind = sock || kind == WEFT__FD_FILE ||
                         (kind == WEFT__FD_OTHER && !write);
        if (ring_kind && ring_ok(deadline)) {
            weft__opdesc d = {.fd = fd, .flags = flags, .off = -1,
                              .iov = iov, .iovcnt = cnt};
            if (cnt == 1) {
                d.op = sock ? (write ? WEFT__OP_SEND : WEFT__OP_RECV)
                            : (write ? WEFT__OP_WRITE : WEFT__OP_READ);
                d.buf = iov[0].iov_base;
                d.len = iov[0].iov_len;
            } else {
                d.op = sock ? (write ? WEFT__OP_SENDMSG : WEFT__OP_RECVMSG)
                            : (write ? WEFT__OP_WRITEV : WEFT__OP_READV);
            }
            n = ring_op(&d, deadline);
            if (n == -EINTR)
                continue;
            if (n != -EAGAIN)
                return n;
            /* An older kernel that will not wait on O_NONBLOCK files. */
            rc = io_wait(fd, ready, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        if (sock || kind == WEFT__FD_UNKNOWN) {
            struct msghdr m = {.msg_iov = (struct iovec *)iov,
                               .msg_iovlen = (size_t)cnt};
            if (!write)
                r->fds[fd].rd_edge = 0;
            /* One buffer: send/recv, which spare the kernel copying in a
             * msghdr and importing an iovec (~0.15 us a call here). */
            if (cnt == 1)
                n = write ? send(fd, iov[0].iov_base, iov[0].iov_len,
                                 flags | MSG_DONTWAIT | MSG_NOSIGNAL)
                          : recv(fd, iov[0].iov_base, iov[0].iov_len, flags | MSG_DONTWAIT);
            else
                n = write ? sendmsg(fd, &m, flags | MSG_DONTWAIT | MSG_NOSIGNAL)
                          : recvmsg(fd, &m, flags | MSG_DONTWAIT);
            if (n >= 0 && kind == WEFT__FD_UNKNOWN)
                fd_set_kind(fd, WEFT__FD_SOCKET);
            if (readiness && !write && (n >= 0 || errno != EINTR))
                note_read(&r->fds[fd], fd, n, iov_total(iov, cnt), flags);
            if (n < 0 && errno == ENOTSOCK) {
                if (socket_only)
                    return -ENOTSOCK;
                if ((rc = learn_not_socket(fd)) < 0)
                    return rc;
                continue;
            }
        } else if (!write) {
            n = readv(fd, iov, cnt);
        } else if (kind == WEFT__FD_FILE) {
            n = writev(fd, iov, cnt);
        } else {
            n = writev_nosigpipe(fd, iov, cnt);
        }
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if ((rc = failed()) < 0)
            return rc;
        if (last_try)
            return -ETIMEDOUT;
        rc = io_wait(fd, ready, deadline);
        if (rc < 0)
            return rc;
    }
}

static ssize_t do_readv(int fd, const struct iovec *iov, int cnt, int flags,
                        int64_t deadline, bool socket_only)
{
    return do_rw(fd, iov, cnt, flags, deadline, socket_only, false);
}

static ssize_t do_writev(int fd, const struct iovec *iov, int cnt, int flags,
                         int64_t deadline, bool socket_only)
{
    return do_rw(fd, iov, cnt, flags, deadline, socket_only, true);
}

ssize_t weft_read(int fd, void *buf, size_t len, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    if (len == 0) {
        int rc = begin(fd, deadline);
        return rc < 0 ? rc : 0;
    }
    struct iovec iov = {buf, len};
    return do_readv(fd, &iov, 1, 0, deadline, false);
}

ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt, int64_t deadline)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX || (!iov && iovcnt))
        return -EINVAL;
    return do_readv(fd, iov, iovcnt, 0, deadline, false);
}

ssize_t weft_recv(int fd, void *buf, size_t len, int flags, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    struct iovec iov = {buf, len};
    return do_readv(fd, &iov, 1, flags, deadline, true);
}

int weft_read_full(int fd, void *buf, size_t len, size_t *got, int64_t deadline)
{
    size_t done = 0;
    int rc = 0;
    if (!buf && len)
        rc = -EINVAL;
    while (rc == 0 && done < len) {
        ssize_t n = weft_read(fd, (char *)buf + done, len - done, deadline);
        if (n < 0)
            rc = (int)n;
        else if (n == 0)
            rc = 1;
        else
            done += (size_t)n;
    }
    if (got)
        *got = done;
    return rc;
}

/* ---- writing ------------------------------------------------------------ */

ssize_t weft_write(int fd, const void *buf, size_t len, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    if (len == 0) {
        int rc = begin(fd, deadline);
        return rc < 0 ? rc : 0;
    }
    struct iovec iov = {(void *)buf, len};
    return do_writev(fd, &iov, 1, 0, deadline, false);
}

ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt, int64_t deadline)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX || (!iov && iovcnt))
        return -EINVAL;
    return do_writev(fd, iov, iovcnt, 0, deadline, false);
}

ssize_t weft_send(int fd, const void *buf, size_t len, int flags,
                  int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    struct iovec iov = {(void *)buf, len};
    return do_writev(fd, &iov, 1, flags, deadline, true);
}

int weft_write_all(int fd, const void *buf, size_t len, size_t *written,
                   int64_t deadline)
{
    size_t done = 0;
    int rc = 0;
    if (!buf && len)
        rc = -EINVAL;
    while (rc == 0 && done < len) {
        ssize_t n = weft_write(fd, (const char *)buf + done, len - done,
                               deadline);
        if (n < 0)
            rc = (int)n;
        else
            done += (size_t)n;
    }
    if (written)
        *written = done;
    return rc;
}

/* ---- readiness ---------------------------------------------------------- */

int weft_wait_fd(int fd, int events, int64_t deadline)
{
    int rc = begin(fd, deadline);
    if (rc < 0)
        return rc;
    const int valid = WEFT_READABLE | WEFT_PRIORITY | WEFT_WRITABLE;
    if (!events || (events & ~valid))
        return -EINVAL;
    /* Readiness that already exists is reported at once (and edge-triggered
     * backends need the check: no new edge may come). */
    rc = weft__ready_now(fd, (uint32_t)events);
    if (rc != 0)
        return rc;
    rc = io_wait(fd, (uint32_t)events, deadline);
    if (rc > 0)
        rc &= events | WEFT_ERROR | WEFT_HANGUP;
    return rc;
}

/* ---- sockets ------------------------------------------------------------ */

static void adopt(int fd, int kind)
{
    weft_sched_t *s = weft__sched_tls();
    if (!s)
        return;
    weft__reactor_fd_new(&s->r, fd);
    weft__fdstate *st = weft__fd(&s->r, fd);
    if (st) {
        st->kind = (uint8_t)kind;
        st->nonblock = 1;
    }
}

int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen,
                int64_t deadline)
{
    int rc = begin(fd, deadline);
    if (rc < 0)
        return rc;
    if (addr && !addrlen)
        return -EINVAL;
    if ((rc = ensure_nonblock(fd)) < 0)
        return rc;
    for (;;) {
        if (ring_ok(deadline)) {
            weft__opdesc d = {.op = WEFT__OP_ACCEPT, .fd = fd, .addr = addr,
                              .addrlen = addrlen};
            int c = (int)ring_op(&d, deadline);
            if (c >= 0) {
                adopt(c, WEFT__FD_SOCKET);
                return c;
            }
            if (c == -EINTR || c == -ECONNABORTED || c == -EPROTO)
                continue;
            if (c != -EAGAIN)
                return c;
            rc = io_wait(fd, WEFT_READABLE, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        int c = accept4(fd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c >= 0) {
            adopt(c, WEFT__FD_SOCKET);
            return c;
        }
        int e = errno;
        if (e == EINTR || e == ECONNABORTED || e == EPROTO)
            continue;
        if ((rc = failed()) < 0)
            return rc;
        rc = io_wait(fd, WEFT_READABLE, deadline);
        if (rc < 0)
            return rc;
    }
}

int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
                 int64_t deadline)
{
    int rc = begin(fd, deadline);
    if (rc < 0)
        return rc;
    if (!addr)
        return -EINVAL;
    if ((rc = ensure_nonblock(fd)) < 0)
        return rc;
    if (ring_ok(deadline)) {
        weft__opdesc d = {.op = WEFT__OP_CONNECT, .fd = fd,
                          .addr = (struct sockaddr *)addr, .alen = addrlen};
        ssize_t n;
        do
            n = ring_op(&d, deadline);
        while (n == -EINTR);
        if (n != -EAGAIN && n != -EINPROGRESS && n != -EALREADY)
            return n == -EISCONN ? 0 : (int)n;
        /* fall through: finish the handshake by readiness */
    }
    for (;;) {
        if (connect(fd, addr, addrlen) == 0)
            return 0;
        int e = errno;
        if (e == EISCONN)
            return 0;
        if (e == EINPROGRESS || e == EINTR || e == EALREADY) {
            rc = io_wait(fd, WEFT_WRITABLE, deadline);
            if (rc < 0)
                return rc;
            int err = 0;
            socklen_t l = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                return -errno;
            return err ? -err : 0;
        }
        if (e == EAGAIN) { /* a full Unix socket backlog: wait and retry */
            rc = io_wait(fd, WEFT_WRITABLE, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        return -e;
    }
}

/* In a fiber: let write-behind bytes on @fd go out first (bounded by
 * their own deadline). */
static void wb_settle_before(int fd)
{
    weft_sched_t *s = weft__sched_tls();
    if (s && fd < s->r.nfds && s->r.fds[fd].wb && !s->current->is_main &&
        !s->current->cancelled)
        (void)wb_drain(fd, WEFT_FOREVER);
}

int weft_shutdown(int fd, int how)
{
    if (fd < 0)
        return -EBADF;
    if (how != SHUT_RD)
        wb_settle_before(fd);
    return shutdown(fd, how) < 0 ? -errno : 0;
}

int weft_fd_forget(int fd)
{
    if (fd < 0)
        return -EBADF;
    weft_sched_t *s = weft__sched_tls();
    if (s)
        weft__reactor_fd_close(&s->r, fd, -EBADF);
    return 0;
}

int weft_close(int fd)
{
    if (fd < 0)
        return -EBADF;
    wb_settle_before(fd);
    weft_fd_forget(fd);
    weft_sched_t *s = weft__sched_tls();
    if (s && !s->current->is_main && !s->current->cancelled &&
        weft__reactor_has_ops(&s->r)) {
        /* Batched with the loop's other submissions. A close never waits
         * for a peer, so the op completes in the next loop iteration. */
        weft__opdesc d = {.op = WEFT__OP_CLOSE, .fd = fd};
        weft__wait w;
        weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
        w.nocancel = true;
        int rc = fd < s->r.nfds ? weft__wait_arm_op(&w, &d) : -EBADF;
        if (rc == 0) {
            weft__block(&w);
            /* Only the close's own completion ends this wait (it is not
             * linked to the descriptor, cannot be cancelled and has no
             * deadline); stay defensive all the same. */
            wait_op_out(s, &w);
            if (w.op_done)
                return w.op_res == -EINTR ? 0 : w.op_res;
            return 0;
        }
        weft__wait_complete(&w, rc);
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
    adopt(fd, WEFT__FD_SOCKET);
    return fd;
}

int weft_pipe(int fds[2])
{
    if (!fds)
        return -EINVAL;
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
        return -errno;
    adopt(fds[0], WEFT__FD_OTHER);
    adopt(fds[1], WEFT__FD_OTHER);
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

/* ---- positioned file I/O ------------------------------------------------ */

static ssize_t positioned(int fd, void *buf, size_t len, off_t off,
                          int64_t deadline, bool write)
{
    int rc = begin(fd, deadline);
    if (rc < 0)
        return rc;
    if (!buf && len)
        return -EINVAL;
    if (off < 0)
        return -EINVAL;
    if (len == 0)
        return 0;
    int kind = fd_kind(fd);
    if (kind == WEFT__FD_UNKNOWN) {
        struct stat sb;
        if (fstat(fd, &sb) < 0)
            return -errno;
        if (S_ISSOCK(sb.st_mode))
            fd_set_kind(fd, kind = WEFT__FD_SOCKET);
        else if ((rc = learn_not_socket(fd)) < 0)
            return rc;
        kind = fd_kind(fd);
    }
    /* A ring read "at an offset" of a socket would just wait for data. */
    if (kind == WEFT__FD_SOCKET)
        return -ESPIPE;
    if (kind == WEFT__FD_FILE && ring_ok(deadline)) {
        /* Truly asynchronous file I/O: the fiber waits, the loop runs. */
        weft__opdesc d = {.op = write ? WEFT__OP_WRITE : WEFT__OP_READ,
                          .fd = fd, .buf = buf, .len = len, .off = off};
        for (;;) {
            ssize_t n = ring_op(&d, deadline);
            if (n != -EINTR && n != -EAGAIN)
                return n;
            if (n == -EAGAIN && (rc = io_wait(fd, write ? WEFT_WRITABLE
                                                        : WEFT_READABLE,
                                              deadline)) < 0)
                return rc;
        }
    }
    for (;;) {
        ssize_t n = write ? pwrite(fd, buf, len, off) : pread(fd, buf, len, off);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if ((rc = failed()) < 0)
            return rc;
        rc = io_wait(fd, write ? WEFT_WRITABLE : WEFT_READABLE, deadline);
        if (rc < 0)
            return rc;
    }
}

ssize_t weft_pread(int fd, void *buf, size_t len, off_t off, int64_t deadline)
{
    return positioned(fd, buf, len, off, deadline, false);
}

ssize_t weft_pwrite(int fd, const void *buf, size_t len, off_t off,
                    int64_t deadline)
{
    return positioned(fd, (void *)buf, len, off, deadline, true);
}
