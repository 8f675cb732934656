/*
 * backend_uring.c — io_uring backend (liburing).
 *
 * Operations are completions, not readiness: a fiber's read becomes an
 * IORING_OP_RECV/READ whose CQE carries the bytes, so a request/response
 * round costs no system call of its own. Submissions accumulate in the SQ
 * while fibers run and go to the kernel in one io_uring_enter per loop
 * iteration, which also waits for completions; completions already in the
 * CQ are reaped without a system call.
 *
 * Every in-flight operation owns a pooled record (struct uop). The kernel
 * gets pointers only to the record and to the caller's buffers, and a
 * caller whose wait ends early (deadline, cancel, close) waits for the
 * operation's CQE before returning (see io.c), so the kernel never writes
 * into memory that may be gone. Poll operations have no buffer: when their
 * wait ends early the record is abandoned to the kernel (cancelled, freed
 * when its CQE arrives).
 *
 * Cross-thread wake-ups: a multishot poll on the reactor's eventfd.
 */
#include "reactor.h"
#include "evmask.h"

#ifdef WEFT_HAVE_URING

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef WEFT_VALGRIND
#include <valgrind/memcheck.h>
/* Record in @u what the kernel will write for its op (Valgrind only). */
#define VG_NOTE(u, field, val) \
    do { if (WEFT_UNLIKELY(st->on_valgrind)) (u)->field = (val); } while (0)
#else
#define VG_NOTE(u, field, val) ((void)0)
#endif

#define WAKE_UD ((uint64_t)1)
#define IGNORE_UD ((uint64_t)0)
#define PROBE_UD ((uint64_t)2)
/* Accept flags (sqe->ioprio) of Linux 6.10, not in older headers. */
#ifndef IORING_ACCEPT_DONTWAIT
#define IORING_ACCEPT_DONTWAIT (1U << 1)
#endif
#ifndef IORING_ACCEPT_POLL_FIRST
#define IORING_ACCEPT_POLL_FIRST (1U << 2)
#endif
#define REAP_BATCH 256
#define DEFAULT_ENTRIES 1024

typedef struct uop {
    weft__oprec h;           /* must be first                           */
    struct uop *next;        /* free list / all-records list            */
    struct uop *all_next;
    uint8_t op;
    struct msghdr msg;
#ifdef WEFT_VALGRIND
    /* What the kernel writes behind Valgrind's back: set and marked only
     * under Valgrind (urstate.on_valgrind). */
    void *vg_buf;            /* a buffer                                */
    size_t vg_len;
    const struct iovec *vg_iov;
    int vg_iovcnt;
    socklen_t *vg_alen;      /* accept: the address and its length      */
    struct sockaddr *vg_addr;
#endif
} uop;

typedef struct urstate {
    struct io_uring ring;
    uop *free;
    uop *all;                /* every record ever allocated            */
    uop *cancels;            /* cancels that found no free SQE yet     */
    weft__wait *wcancels;    /* the same for records kept in waits     */
    bool wake_armed;
    /* The kernel takes IORING_ACCEPT_POLL_FIRST and reports, with
     * IORING_CQE_F_SOCK_NONEMPTY, whether connections are left queued
     * behind the one an ACCEPT took (Linux 6.10, which added both with
     * IORING_ACCEPT_DONTWAIT: probed at init). */
    bool accept_hints;
    bool inner;              /* reaping from inside get_sqe            */
    bool wake_deferred;      /* the eventfd fired during an inner reap */
#ifdef WEFT_VALGRIND
    bool on_valgrind;        /* RUNNING_ON_VALGRIND, asked at init      */
#endif
} urstate;

static void reap(weft__reactor *r);

static urstate *S(weft__reactor *r) { return r->bstate; }

/* get_sqe when the SQ is full: hand what is queued to the kernel. If the
 * kernel will not take it (-EBUSY: completions back up), make room by
 * reaping first; wake-ups only queue fibers, and posted callbacks are left
 * for the loop. Out of line: the common path's frame stays small (at a
 * thousand connections each stack line a request pushes to is a miss). */
static __attribute__((noinline)) struct io_uring_sqe *get_sqe_slow(weft__reactor *r)
{
    urstate *st = S(r);
    struct io_uring_sqe *sqe = NULL;
    for (int tries = 0; !sqe && tries < 8; tries++) {
        if (io_uring_submit(&st->ring) < 0 && !st->inner) {
            st->inner = true;
            reap(r);
            st->inner = false;
        }
        sqe = io_uring_get_sqe(&st->ring);
    }
    return sqe;
}

static inline struct io_uring_sqe *get_sqe(weft__reactor *r)
{
#ifdef WEFT_FAULT
    /* As if the kernel would take nothing, every try (tests). */
    if (weft__fault_hit(WEFT__FAULT_HERE))
        return NULL;
#endif
    struct io_uring_sqe *sqe = io_uring_get_sqe(&S(r)->ring);
    return WEFT_LIKELY(sqe != NULL) ? sqe : get_sqe_slow(r);
}

static int arm_wake(weft__reactor *r)
{
    urstate *st = S(r);
    struct io_uring_sqe *sqe = get_sqe(r);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_poll_multishot(sqe, r->wakefd, POLLIN);
    io_uring_sqe_set_data64(sqe, WAKE_UD);
    st->wake_armed = true;
    return 0;
}

/*
 * Whether accepts can be told to wait first and report a non-empty queue:
 * an ACCEPT of descriptor -1 with IORING_ACCEPT_DONTWAIT fails with
 * -EINVAL on a kernel that does not know the flag (the SQE is checked
 * first) and with -EBADF on one that does. Queued with the wake-up poll and
 * answered in the first poll, before any accept of the loop's completes.
 */
static void probe_accept(weft__reactor *r)
{
    struct io_uring_sqe *sqe = get_sqe(r);
    if (!sqe)
        return; /* no hints: accepts go on without them */
    io_uring_prep_accept(sqe, -1, NULL, NULL, 0);
    sqe->ioprio = IORING_ACCEPT_DONTWAIT;
    io_uring_sqe_set_data64(sqe, PROBE_UD);
}

static unsigned ring_entries(void)
{
    const char *e = getenv("WEFT_URING_ENTRIES"); /* tests use tiny rings */
    if (e && *e) {
        long v = strtol(e, NULL, 10);
        if (v >= 1 && v <= 32768)
            return (unsigned)v;
    }
    return DEFAULT_ENTRIES;
}

static bool probe_ops(struct io_uring *ring)
{
    struct io_uring_probe *p = io_uring_get_probe_ring(ring);
    if (!p)
        return false;
    static const int need[] = {
        IORING_OP_READ, IORING_OP_WRITE, IORING_OP_READV, IORING_OP_WRITEV,
        IORING_OP_RECV, IORING_OP_SEND, IORING_OP_RECVMSG, IORING_OP_SENDMSG,
        IORING_OP_ACCEPT, IORING_OP_CONNECT, IORING_OP_POLL_ADD,
        IORING_OP_ASYNC_CANCEL, IORING_OP_CLOSE,
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!io_uring_opcode_supported(p, need[i]))
            ok = false;
    io_uring_free_probe(p);
    return ok;
}

static int ur_init(weft__reactor *r)
{
    urstate *st = S(r);
    unsigned entries = ring_entries();
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    /* One thread submits; completions run when that thread enters. */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN;
    int rc = io_uring_queue_init_params(entries, &st->ring, &p);
    if (rc == -EINVAL) {
        memset(&p, 0, sizeof p);
        rc = io_uring_queue_init_params(entries, &st->ring, &p);
    }
    if (rc < 0)
        return rc;
    /* Needed: CQEs never dropped on overflow, and waits with a timeout
     * that do not consume an SQE. */
    if (!(p.features & IORING_FEAT_NODROP) || !(p.features & IORING_FEAT_EXT_ARG) ||
        !probe_ops(&st->ring)) {
        io_uring_queue_exit(&st->ring);
        return -ENOSYS;
    }
    rc = arm_wake(r);
    if (rc < 0) {
        io_uring_queue_exit(&st->ring);
        return rc;
    }
    probe_accept(r);
#ifdef WEFT_VALGRIND
    st->on_valgrind = RUNNING_ON_VALGRIND != 0;
#endif
    return 0;
}

static void ur_fini(weft__reactor *r)
{
    urstate *st = S(r);
    io_uring_queue_exit(&st->ring);
    uop *u = st->all;
    while (u) {
        uop *next = u->all_next;
        free(u);
        u = next;
    }
}

static int ur_fd_update(weft__reactor *r, int fd)
{
    (void)r;
    (void)fd;
    return 0; /* readiness waits are poll ops, armed per wait */
}

static void ur_fd_forget(weft__reactor *r, int fd)
{
    (void)r;
    (void)fd; /* the waits on it were completed, cancelling their ops */
}

static uop *uop_get(urstate *st)
{
    uop *u = st->free;
    if (u) {
        st->free = u->next;
        return u;
    }
    u = calloc(1, sizeof *u);
    if (u) {
        u->all_next = st->all;
        st->all = u;
    }
    return u;
}

static void uop_put(urstate *st, uop *u)
{
    u->h.wait = NULL;
    u->next = st->free;
    st->free = u;
}

/*
 * Op records. A pooled record (uop) carries what the kernel may need after
 * the submission (a msghdr) and what must outlive the wait (a poll, which
 * a wait that ends early abandons). Every other op keeps its record in its
 * wait (weft__wait.op_code, op_next), since its waiter waits for the
 * completion: the CQE's user data is then the wait's address with the low
 * bit set (waits are aligned; a pooled record's address has it clear, and
 * the special values 0-2 are below any address).
 */
#define IN_WAIT 1u
/* (for user data other than the special values) */
static inline bool in_wait(uint64_t ud) { return ud & IN_WAIT; }
static inline weft__wait *wait_of(uint64_t ud)
{
    return (weft__wait *)(uintptr_t)(ud & ~(uint64_t)IN_WAIT);
}
static inline uint64_t ud_of(weft__wait *w, void *rec)
{
    return rec == (void *)w ? (uint64_t)(uintptr_t)w | IN_WAIT : (uint64_t)(uintptr_t)rec;
}
/* The list of waits whose cancel waits for room (urstate.wcancels) runs
 * through their timers' links (see weft__wait.op_code). */
static inline weft__wait *wcancel_next(const weft__wait *w)
{
    return w->timer.pnext ? weft__container(w->timer.pnext, weft__wait, timer) : NULL;
}
static inline void wcancel_set_next(weft__wait *w, weft__wait *next)
{
    w->timer.pnext = next ? &next->timer : NULL;
}

static bool pooled_op(const urstate *st, int op)
{
#ifdef WEFT_VALGRIND
    if (WEFT_UNLIKELY(st->on_valgrind))
        return true; /* the record keeps what to mark */
#else
    (void)st;
#endif
    return op == WEFT__OP_POLL || op == WEFT__OP_RECVMSG || op == WEFT__OP_SENDMSG;
}

/* The SQE's length is 32 bits: a larger request becomes a short transfer
 * (the kernel's own limit per call), which the API allows. */
static inline unsigned sqe_len(size_t len)
{
    return len > 0x7ffff000 ? 0x7ffff000 : (unsigned)len;
}

/* Fill @sqe for an op of one buffer: RECV, SEND (without SIGPIPE), READ
 * or WRITE at @off (-1: the file position). */
static inline void prep_buf(struct io_uring_sqe *sqe, int op, int fd, void *buf,
                            unsigned len, uint64_t off, int flags)
{
    switch (op) {
    case WEFT__OP_RECV:
        io_uring_prep_recv(sqe, fd, buf, len, flags);
        break;
    case WEFT__OP_SEND:
        io_uring_prep_send(sqe, fd, buf, len, flags | MSG_NOSIGNAL);
        break;
    case WEFT__OP_READ:
        io_uring_prep_read(sqe, fd, buf, len, off);
        break;
    default:
        io_uring_prep_write(sqe, fd, buf, len, off);
        break;
    }
}

static int ur_op_submit(weft__reactor *r, weft__wait *w, const weft__opdesc *d)
{
    urstate *st = S(r);
    uop *u = NULL; /* NULL: the record is kept in the wait */
    if (WEFT_UNLIKELY(pooled_op(st, d->op))) {
        u = uop_get(st);
        if (!u)
            return -ENOMEM;
    }
    struct io_uring_sqe *sqe = get_sqe(r);
    if (!sqe) {
        if (u)
            uop_put(st, u);
        return -EAGAIN;
    }
    if (!u)
        w->op_code = (uint8_t)d->op;
    else
        u->op = (uint8_t)d->op;
#ifdef WEFT_VALGRIND
    if (WEFT_UNLIKELY(st->on_valgrind)) { /* a pooled record: see pooled_op */
        u->vg_buf = NULL;
        u->vg_len = 0;
        u->vg_iov = NULL;
        u->vg_iovcnt = 0;
        u->vg_alen = NULL;
        u->vg_addr = NULL;
    }
#endif
    uint64_t off = d->off < 0 ? (uint64_t)-1 : (uint64_t)d->off;
    unsigned len = sqe_len(d->len);
    switch (d->op) {
    case WEFT__OP_READ:
    case WEFT__OP_RECV:
        VG_NOTE(u, vg_buf, d->buf);
        VG_NOTE(u, vg_len, len);
        /* fall through */
    case WEFT__OP_WRITE:
    case WEFT__OP_SEND:
        prep_buf(sqe, d->op, d->fd, d->buf, len, off, d->flags);
        break;
    case WEFT__OP_READV:
        io_uring_prep_readv(sqe, d->fd, d->iov, (unsigned)d->iovcnt, off);
        VG_NOTE(u, vg_iov, d->iov);
        VG_NOTE(u, vg_iovcnt, d->iovcnt);
        break;
    case WEFT__OP_WRITEV:
        io_uring_prep_writev(sqe, d->fd, d->iov, (unsigned)d->iovcnt, off);
        break;
    case WEFT__OP_RECVMSG:
    case WEFT__OP_SENDMSG:
        memset(&u->msg, 0, sizeof u->msg);
        u->msg.msg_iov = (struct iovec *)d->iov;
        u->msg.msg_iovlen = (size_t)d->iovcnt;
        if (d->op == WEFT__OP_RECVMSG) {
            io_uring_prep_recvmsg(sqe, d->fd, &u->msg, (unsigned)d->flags);
            VG_NOTE(u, vg_iov, d->iov);
            VG_NOTE(u, vg_iovcnt, d->iovcnt);
        }
        else
            io_uring_prep_sendmsg(sqe, d->fd, &u->msg,
                                  (unsigned)d->flags | MSG_NOSIGNAL);
        break;
    case WEFT__OP_ACCEPT:
        io_uring_prep_accept(sqe, d->fd, d->addr, d->addrlen,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (d->poll_first && st->accept_hints)
            sqe->ioprio |= IORING_ACCEPT_POLL_FIRST;
        VG_NOTE(u, vg_alen, d->addrlen);
        VG_NOTE(u, vg_addr, d->addr);
        break;
    case WEFT__OP_CONNECT:
        io_uring_prep_connect(sqe, d->fd, d->addr, d->alen);
        break;
    case WEFT__OP_POLL:
        io_uring_prep_poll_add(sqe, d->fd, (unsigned)weft__ev_to_poll(d->events));
        break;
    case WEFT__OP_CLOSE:
        io_uring_prep_close(sqe, d->fd);
        break;
    default:
        /* Not queued: give the SQE back as a no-op nobody waits for. */
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, IGNORE_UD);
        if (u)
            uop_put(st, u);
        return -EINVAL;
    }
    if (d->async)
        io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
    if (!u) {
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)w | IN_WAIT);
        w->op = w;
    } else {
        io_uring_sqe_set_data(sqe, u);
        u->h.wait = w;
        w->op = u;
    }
    r->ops_inflight++;
    return 0;
}

/* Fill @sqe for a one-buffer op of @w (see ur_op_buf). */
static inline void op_buf_fill(weft__reactor *r, weft__wait *w, struct io_uring_sqe *sqe,
                               int op, int fd, void *buf, size_t len, int flags)
{
    prep_buf(sqe, op, fd, buf, sqe_len(len), (uint64_t)-1, flags);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)w | IN_WAIT);
    w->op_code = (uint8_t)op;
    w->op = w;
    r->ops_inflight++;
}

/* ur_op_buf when the SQ is full (get_sqe_slow), under Valgrind (a pooled
 * record: see pooled_op) or in the fault build. */
static __attribute__((noinline)) int op_buf_slow(weft__reactor *r, weft__wait *w, int op,
                                                 int fd, void *buf, size_t len, int flags)
{
#ifdef WEFT_VALGRIND
    if (S(r)->on_valgrind) {
        weft__opdesc d = {.op = op, .fd = fd, .buf = buf, .len = len, .off = -1,
                          .flags = flags};
        return ur_op_submit(r, w, &d);
    }
#endif
    struct io_uring_sqe *sqe = get_sqe(r);
    if (!sqe)
        return -EAGAIN;
    op_buf_fill(r, w, sqe, op, fd, buf, len, flags);
    return 0;
}

/* ur_op_submit for the ops of one buffer (see weft__backend_ops.op_buf):
 * a record in the wait, and the SQE filled in place. Anything but a free
 * SQE goes to op_buf_slow, so that this path saves no registers. */
static int ur_op_buf(weft__reactor *r, weft__wait *w, int op, int fd, void *buf,
                     size_t len, int flags)
{
    urstate *st = S(r);
#ifdef WEFT_VALGRIND
    if (WEFT_UNLIKELY(st->on_valgrind))
        return op_buf_slow(r, w, op, fd, buf, len, flags);
#endif
#ifdef WEFT_FAULT
    struct io_uring_sqe *sqe = NULL; /* every one by get_sqe, which may fail */
    (void)st;
#else
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
#endif
    if (WEFT_UNLIKELY(!sqe))
        return op_buf_slow(r, w, op, fd, buf, len, flags);
    op_buf_fill(r, w, sqe, op, fd, buf, len, flags);
    return 0;
}

static bool queue_cancel(weft__reactor *r, uint64_t ud)
{
    struct io_uring_sqe *sqe = get_sqe(r);
    if (!sqe)
        return false;
    io_uring_prep_cancel64(sqe, ud, 0);
    io_uring_sqe_set_data64(sqe, IGNORE_UD);
    return true;
}

static void ur_op_cancel(weft__reactor *r, weft__wait *w)
{
    urstate *st = S(r);
    void *rec = w->op;
    struct io_uring_sqe *sqe = get_sqe(r);
    if (w->op != rec) {
        /* It completed during a reap inside get_sqe and its record may
         * already serve another op: cancel nothing. */
        if (sqe) {
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data64(sqe, IGNORE_UD);
        }
        return;
    }
    if (sqe) {
        io_uring_prep_cancel64(sqe, ud_of(w, rec), 0);
        io_uring_sqe_set_data64(sqe, IGNORE_UD);
    } else if (rec == (void *)w) {
        /* No SQE to be had right now: the loop retries before it enters
         * the kernel again. */
        wcancel_set_next(w, st->wcancels);
        st->wcancels = w;
        return;
    } else {
        /* The same for a pooled record (its free-list link is unused
         * while it is in flight, so it carries the pending list). */
        uop *u = rec;
        u->next = st->cancels;
        st->cancels = u;
    }
    uop *u = rec;
    if (rec != (void *)w && u->op == WEFT__OP_POLL) {
        /* Nothing of the waiter's is in the kernel's hands: let go. */
        u->h.wait = NULL;
        w->op = NULL;
    }
}

static int poll_result(const weft__wait *w, int res)
{
    if (res < 0)
        return res;
    return (int)weft__ev_answer(w->events, weft__poll_to_ev((unsigned)res));
}

#ifdef WEFT_VALGRIND
/* What the kernel wrote for @u's op, which ended with @res, behind
 * Valgrind's back: now defined. */
static void vg_mark(const uop *u, int res)
{
    if (res > 0 && u->vg_buf)
        VALGRIND_MAKE_MEM_DEFINED(u->vg_buf, (size_t)res < u->vg_len ? (size_t)res : u->vg_len);
    if (res > 0 && u->vg_iov) {
        size_t left = (size_t)res;
        for (int i = 0; i < u->vg_iovcnt && left; i++) {
            size_t n = u->vg_iov[i].iov_len < left ? u->vg_iov[i].iov_len : left;
            VALGRIND_MAKE_MEM_DEFINED(u->vg_iov[i].iov_base, n);
            left -= n;
        }
    }
    if (res >= 0 && u->vg_alen) {
        VALGRIND_MAKE_MEM_DEFINED(u->vg_alen, sizeof *u->vg_alen);
        if (u->vg_addr)
            VALGRIND_MAKE_MEM_DEFINED(u->vg_addr, *u->vg_alen);
    }
}
#endif

static void handle(weft__reactor *r, uint64_t ud, int res, unsigned flags)
{
    urstate *st = S(r);
    if (WEFT_UNLIKELY(ud <= PROBE_UD)) {
        if (ud == PROBE_UD)
            st->accept_hints = res == -EBADF;
        if (ud != WAKE_UD)
            return;
        if (!(flags & IORING_CQE_F_MORE))
            st->wake_armed = false; /* re-armed before the next enter */
        if (st->inner)
            st->wake_deferred = true; /* posts run on the loop's stack */
        else
            weft__reactor_drain_posts(r);
        return;
    }
    weft__wait *w;
    int op;
    r->ops_inflight--;
    if (in_wait(ud)) {
        w = wait_of(ud);
        op = w->op_code;
        if (WEFT_UNLIKELY(st->wcancels != NULL)) {
            /* completed before its pending cancel went out: drop it */
            weft__wait *prev = NULL;
            for (weft__wait *x = st->wcancels; x; prev = x, x = wcancel_next(x))
                if (x == w) {
                    if (prev)
                        wcancel_set_next(prev, wcancel_next(w));
                    else
                        st->wcancels = wcancel_next(w);
                    break;
                }
        }
    } else {
        uop *u = (uop *)(uintptr_t)ud;
        w = u->h.wait;
        if (WEFT_UNLIKELY(st->cancels != NULL)) {
            for (uop **pp = &st->cancels; *pp; pp = &(*pp)->next)
                if (*pp == u) {
                    *pp = u->next;
                    break;
                }
        }
#ifdef WEFT_VALGRIND
        if (WEFT_UNLIKELY(st->on_valgrind))
            vg_mark(u, res);
#endif
        op = u->op;
        uop_put(st, u);
        if (!w)
            return; /* abandoned */
    }
    w->op = NULL;
    w->op_done = true;
    w->op_res = op == WEFT__OP_POLL ? poll_result(w, res) : res;
    if (op == WEFT__OP_ACCEPT && st->accept_hints && res >= 0)
        w->op_hint = (flags & IORING_CQE_F_SOCK_NONEMPTY) ? WEFT__HINT_MORE
                                                           : WEFT__HINT_EMPTY;
    weft__wait_end(w, w->op_res);
}

static void reap(weft__reactor *r)
{
    urstate *st = S(r);
    struct io_uring_cqe *cqes[REAP_BATCH];
    struct {
        uint64_t ud;
        int res;
        unsigned flags;
    } batch[REAP_BATCH];
    for (;;) {
        unsigned n = io_uring_peek_batch_cqe(&st->ring, cqes, REAP_BATCH);
        if (n == 0) {
            /* Completions the CQ had no room for wait in the kernel's
             * overflow list: flush them in, then reap again. */
            if (io_uring_cq_has_overflow(&st->ring)) {
                io_uring_get_events(&st->ring);
                if (io_uring_cq_ready(&st->ring))
                    continue;
            }
            return;
        }
        /* Copy, then release the CQ slots before running any wake-ups:
         * those may queue new submissions (cancels) or even enter. */
        for (unsigned i = 0; i < n; i++) {
            batch[i].ud = cqes[i]->user_data;
            batch[i].res = cqes[i]->res;
            batch[i].flags = cqes[i]->flags;
        }
        io_uring_cq_advance(&st->ring, n);
        for (unsigned i = 0; i < n; i++)
            handle(r, batch[i].ud, batch[i].res, batch[i].flags);
        if (n < REAP_BATCH && !io_uring_cq_has_overflow(&st->ring))
            return;
    }
}

static int ur_poll(weft__reactor *r, int64_t timeout_ns)
{
    urstate *st = S(r);
    struct io_uring *ring = &st->ring;
    int rc = 0;
    /* Work that found the SQ full earlier: pending cancels, the
     * cross-thread wake-up poll, posts seen during an inner reap. */
    /* No reaping inside get_sqe meanwhile (inner): a completion reaped
     * there would unlink the head being sent, or the one after it, from
     * under these loops, and a record reused since would be cancelled. */
    bool was_inner = st->inner;
    st->inner = true;
    while (st->cancels) {
        uop *u = st->cancels;
        if (!queue_cancel(r, (uint64_t)(uintptr_t)u))
            break;
        st->cancels = u->next;
    }
    while (st->wcancels) {
        weft__wait *w = st->wcancels;
        if (!queue_cancel(r, (uint64_t)(uintptr_t)w | IN_WAIT))
            break;
        st->wcancels = wcancel_next(w);
    }
    st->inner = was_inner;
    if (!st->wake_armed)
        arm_wake(r);
    if (st->wake_deferred) {
        st->wake_deferred = false;
        weft__reactor_drain_posts(r);
    }
    if (timeout_ns == 0 || io_uring_cq_ready(ring)) {
        if (io_uring_sq_ready(ring))
            rc = io_uring_submit(ring);
        else if (io_uring_cq_has_overflow(ring))
            io_uring_get_events(ring);
    } else {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts, *tp = NULL;
        if (timeout_ns > 0) {
            struct timespec t = weft__ns_timespec(timeout_ns);
            ts.tv_sec = t.tv_sec;
            ts.tv_nsec = t.tv_nsec;
            tp = &ts;
        }
        rc = io_uring_submit_and_wait_timeout(ring, &cqe, 1, tp, NULL);
    }
    weft__reactor_polled(r);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN &&
        rc != -EBUSY)
        return rc;
    reap(r);
    return 0;
}

/* Readiness waits are POLL ops (one per wait, no registration). */
static int ur_fd_wait(weft__reactor *r, weft__wait *w, int fd, uint32_t events)
{
    (void)r;
    weft__opdesc d = {.op = WEFT__OP_POLL, .fd = fd, .events = events};
    return weft__wait_arm_op(w, &d);
}

/* What goes through the ring: everything on sockets; reads and writes of
 * regular files (truly asynchronous, unlike the system calls); reads of
 * pipes and other descriptors, but not writes: a ring write to a pipe
 * whose reader is gone raises SIGPIPE in the submitting thread, which the
 * guarded system call turns into -EPIPE instead. */
static bool ur_op_ok(int kind, int op)
{
    switch (kind) {
    case WEFT__FD_SOCKET:
        return true;
    case WEFT__FD_FILE:
        return op == WEFT__OP_READ || op == WEFT__OP_WRITE || op == WEFT__OP_READV ||
               op == WEFT__OP_WRITEV || op == WEFT__OP_CLOSE;
    default:
        return op == WEFT__OP_READ || op == WEFT__OP_READV || op == WEFT__OP_CLOSE;
    }
}

const weft__backend_ops weft__backend_uring = {
    WEFT__BACKEND_READINESS("io_uring", ur),
    .op_submit = ur_op_submit,
    .op_cancel = ur_op_cancel,
    .fd_wait = ur_fd_wait,
    .op_ok = ur_op_ok,
    .op_buf = ur_op_buf,
};

#endif /* WEFT_HAVE_URING */
