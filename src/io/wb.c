/*
 * wb.c — write-behind (io_uring).
 *
 * With weft_write_behind(fd, 1), a small send on a stream socket is copied
 * into a buffer the scheduler owns and submitted as a SEND; the call
 * returns at once and the fiber is not resumed for the send's completion
 * (one resume per request/response instead of two). Later small sends are
 * appended behind the bytes in flight and go out when those complete;
 * anything that must come after them (a larger or flagged send,
 * weft_flush, weft_shutdown, weft_close) first waits for the buffer to
 * empty. The buffer keeps the deadline of the latest call that added to
 * it: if it passes, or the send fails, the bytes not yet sent are dropped
 * and every later write on the descriptor returns that error (-ETIMEDOUT,
 * -EPIPE, -ECONNRESET...), as a socket error would. The loop runs until
 * every buffer has gone out or failed.
 *
 * Deadlines of fresh sends are kept outside the timers and plugged into
 * the reactor through its poll hook (weft__poll_hook, reactor.h): see
 * wb_note_fresh. The reactor knows nothing else of this file.
 */
#include "io.h"
#include "waitq.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define WB_CAP 3840

typedef struct weft__wb {
    weft__wait w;              /* the SEND (or POLL) in flight             */
    weft_waitq_t waiters;      /* fibers waiting for the buffer to empty   */
    weft__io *io;              /* the I/O state it belongs to              */
    struct weft__wb *next;     /* free list                                */
    struct weft__wb *all_next; /* every buffer of that state               */
    int64_t deadline;
    int fd;
    int why;                   /* why w ended early                        */
    bool failed;               /* w ended early: append nothing more       */
    bool polling;              /* w is a wait for writability, not a send
                                  (set by every submission)               */
    size_t off, len;           /* [off, len) not yet sent                  */
    char buf[WB_CAP];
} weft__wb;


static weft__wb *wb_get(weft__io *io)
{
    weft__wb *wb = io->wb_free;
    if (wb) {
        io->wb_free = wb->next;
        return wb;
    }
    /* 64-byte aligned: its wait on two lines (see weft__wait). */
    void *mem = NULL;
    wb = posix_memalign(&mem, 64, sizeof *wb) == 0 ? mem : NULL;
    if (wb) {
        io->wb_fini = weft__wb_fini;
        wb->io = io;
        wb->all_next = io->wb_all;
        io->wb_all = wb;
    }
    return wb;
}

static void wb_put(weft__wb *wb)
{
    wb->next = wb->io->wb_free;
    wb->io->wb_free = wb;
}

void weft__wb_fini(weft__io *io)
{
    free(io->wb_fresh);
    io->wb_fresh = NULL;
    io->wb_fresh_n = io->wb_fresh_cap = 0;
    io->s->r.hook_pending = 0;
    weft__wb *wb = io->wb_all;
    while (wb) {
        weft__wb *next = wb->all_next;
        free(wb);
        wb = next;
    }
    io->wb_all = io->wb_free = NULL;
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
static int64_t wb_fresh_min(void *arg);
static void wb_arm_fresh(void *arg);

static const weft__poll_hook wb_hook = {wb_fresh_min, wb_arm_fresh};

/* Fold @deadline into the earliest of the fresh sends'. Kept as they are
 * noted rather than found by a walk of the list before each poll (which
 * cost ~11 instructions per request): one that ends before the poll
 * leaves the figure early, which at worst wakes the poll once for
 * nothing. As unsigned, WEFT_FOREVER (-1) is the latest of all. */
static inline void wb_fresh_fold(weft__io *io, int64_t deadline)
{
    if ((uint64_t)deadline < (uint64_t)io->wb_fresh_min)
        io->wb_fresh_min = deadline;
}

static int wb_note_fresh(weft__reactor *r, weft__wb *wb)
{
    weft__io *io = wb->io;
    if (io->wb_fresh_n == io->wb_fresh_cap) {
        uint32_t ncap = io->wb_fresh_cap ? io->wb_fresh_cap * 2 : 64;
        weft__wb **n = realloc(io->wb_fresh, ncap * sizeof *n);
        if (!n)
            return weft__wait_arm_later(&wb->w, wb->deadline);
        io->wb_fresh = n;
        io->wb_fresh_cap = ncap;
    }
    io->wb_fresh[io->wb_fresh_n++] = wb;
    wb_fresh_fold(io, wb->deadline);
    r->hook = &wb_hook;
    r->hook_arg = io;
    r->hook_pending = io->wb_fresh_n;
    return 0;
}

/* The poll hook: the earliest deadline of the fresh sends. */
static int64_t wb_fresh_min(void *arg)
{
    const weft__io *io = arg;
    return io->wb_fresh_min;
}

/* The poll hook, after the poll: a timer for each fresh send still in
 * flight. */
static void wb_arm_fresh(void *arg)
{
    weft__io *io = arg;
    /* No fiber ran since these were noted, so none was reused: a buffer
     * whose send completed is inactive (or active again for its next
     * send, which needs the deadline too). */
    uint32_t n = io->wb_fresh_n;
    io->wb_fresh_n = 0;
    io->wb_fresh_min = WEFT_FOREVER;
    io->s->r.hook_pending = 0;
    for (uint32_t i = 0; i < n; i++) {
        weft__wb *wb = io->wb_fresh[i];
        /* Not a wait re-armed for the end of a send it gave up on
         * (nocancel): only that completion may end it. */
        if (wb->w.active && !wb->w.nocancel && wb->w.timer.idx == WEFT__TIMER_IDLE &&
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
    if (rc == 0 && poll) {
        weft__opdesc d = {.op = WEFT__OP_POLL, .fd = wb->fd, .off = -1,
                          .events = WEFT_WRITABLE};
        rc = weft__wait_arm_op(&wb->w, &d);
    } else if (rc == 0) {
        rc = weft__wait_arm_buf(&wb->w, WEFT__OP_SEND, wb->fd, wb->buf + wb->off,
                                wb->len - wb->off, MSG_DONTWAIT);
    }
    if (rc < 0) {
        wb->w.wake = wb_nop;
        weft__wait_complete(&wb->w, rc);
    }
    return rc;
}

/* The descriptor's state if @wb is still its buffer; closing or
 * forgetting the descriptor detaches the buffer. */
static weft__iofd *wb_owner(const weft__wb *wb)
{
    const weft__io *io = wb->io;
    return wb->fd < io->nfds && io->fds[wb->fd].wb == wb ? &io->fds[wb->fd] : NULL;
}

/* The send of [off, len) ended with @res (bytes sent or -errno). */
static void wb_settle(weft__reactor *r, weft__wb *wb, int res)
{
    weft__iofd *st = wb_owner(wb);
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
    wb_put(wb);
}

/* The kernel's answer to a send whose wait had ended early. */
static void wb_tail_wake(weft__wait *w)
{
    weft__wb *wb = w->owner;
    w->wake = wb_wake;
    int res = w->op_done ? w->op_res : wb->why;
    /* Completed after all: nothing was lost. */
    if (!(res > 0 && wb->off + (size_t)res == wb->len))
        res = wb->why;
    wb_settle(w->r, wb, res);
}

static void wb_wake(weft__wait *w)
{
    weft__wb *wb = w->owner;
    if (weft__op_pending(w)) {
        /* Ended first (deadline; the descriptor closed or forgotten): the
         * kernel may still read the buffer, so wait for its answer on the
         * same wait, re-armed. */
        wb->failed = true;
        wb->why = w->result;
        w->wake = wb_tail_wake;
        weft__op_rearm(w);
        return;
    }
    weft__reactor *r = w->r;
    int res = w->result;
    if (wb->polling || res == -EAGAIN) {
        /* After a poll (writable, or an error the send will report):
         * send again. After -EAGAIN (the socket is full): poll. */
        bool poll = !wb->polling;
        if (res >= 0 || res == -EAGAIN) {
            res = wb_owner(wb) ? wb_submit(r, wb, poll) : -EBADF;
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

int weft__wb_drain(int fd, int64_t deadline)
{
    weft_sched_t *s = weft__sched_tls();
    weft__iofd *st;
    while ((st = weft__iofd_find(s, fd)) && st->wb) {
        weft__wq_node n;
        int rc = wq_block(&st->wb->waiters, &n, deadline,
                          WEFT__WK(WEFT_WAIT_FD, WEFT_WRITABLE), WEFT__FDOBJ(fd));
        if (rc < 0)
            return rc;
    }
    return st ? st->wb_err : 0;
}

/* A write on a descriptor with write-behind on, or bytes still behind:
 * its length, an error, or WEFT__WB_PASS (go on the usual way). */
ssize_t weft__wb_write(weft__io *io, int fd, const struct iovec *iov, int cnt,
                       int flags, int64_t deadline)
{
    weft__reactor *r = &io->s->r;
    weft__iofd *st = &io->fds[fd];
    if (st->wb_err)
        return st->wb_err;
    size_t total = 0;
    for (int i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    bool small = st->wb_on && flags == 0 && total > 0 && total <= WB_CAP;
    weft__wb *wb = st->wb;
    if (wb) {
        if (small && !wb->failed && wb->len + total <= WB_CAP) {
            wb_copy(wb, iov, cnt); /* goes out after the bytes in flight */
            wb->deadline = deadline;
            if (io->wb_fresh_n) /* it may be one of them */
                wb_fresh_fold(io, deadline);
            /* Stuck for a while already: the new deadline applies. One of
             * 0 (a try) ends the buffer as a passed one does: timed out,
             * the error every later write gets (-EAGAIN would read as
             * "try again"). */
            if (wb->w.timer.idx != WEFT__TIMER_IDLE) {
                if (deadline == 0)
                    weft__wait_complete(&wb->w, -ETIMEDOUT);
                else if (weft__wait_rearm_deadline(&wb->w, deadline) < 0)
                    weft__wait_complete(&wb->w, -ENOMEM);
            }
            return (ssize_t)total;
        }
        int rc = weft__wb_drain(fd, deadline);
        if (rc < 0)
            return rc;
        st = &io->fds[fd];
    }
    if (!small || !weft__io_use_op(WEFT__FD_SOCKET, WEFT__OP_SEND, deadline) ||
        !(wb = wb_get(io)))
        return WEFT__WB_PASS;
    wb->waiters = (weft_waitq_t)WEFT_WAITQ_INIT;
    wb->fd = fd;
    wb->deadline = deadline;
    wb->failed = false;
    wb->off = wb->len = 0;
    wb_copy(wb, iov, cnt);
    st->wb = wb;
    if (wb_submit(r, wb, false) < 0) {
        st->wb = NULL;
        wb_put(wb);
        return WEFT__WB_PASS;
    }
    return (ssize_t)total;
}

void weft__wb_settle_before(int fd)
{
    weft_sched_t *s = weft__sched_tls();
    const weft__iofd *st = s ? weft__iofd_find(s, fd) : NULL;
    if (st && st->wb && !s->current->is_main &&
        !s->current->cancelled)
        (void)weft__wb_drain(fd, WEFT_FOREVER);
}
