/*
 * scheduler.c — Weft::Scheduler: Ruby's Fiber::Scheduler interface on
 * weft's reactor.
 *
 * One reactor, two kinds of fiber: this file is the reactor's Ruby client.
 * A Ruby fiber that must wait builds an `rwait` on its own machine stack
 * (a weft__wait plus the fiber), arms it on the reactor and switches away.
 * The reactor completes the wait and calls rw_wake(), which only links the
 * rwait on the scheduler's ready list: that code may run with the GVL
 * released (inside weft__reactor_run_once), so it touches no Ruby object.
 * The loop fiber (the fiber that called #run, or that first called
 * Fiber.schedule) pops ready waits and Fiber#transfer's to their fibers; a
 * fiber that waits hands off directly to the next ready fiber for a bounded
 * number of switches, then returns to the loop so I/O is polled.
 *
 * Invariants:
 *   - the "all" list and the `waiting` table (fiber -> rwait) change only on
 *     the owner thread with the GVL held; GC marks every fiber on the list;
 *   - the ready list and the reactor change only on the owner thread (with
 *     or without the GVL); nothing else reads them;
 *   - every rwait is unlinked by rb_ensure on every exit path (normal wake,
 *     exception, Fiber#raise, Thread#raise);
 *   - other threads reach the loop only through weft__reactor_post().
 */
#include "internal.h"

#include <ruby.h>
#include <ruby/io.h>
#include <ruby/io/buffer.h>
#include <ruby/thread.h>
#include <ruby/fiber/scheduler.h>
#include <ruby/st.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Fibers handed off to directly before the loop gets to poll. */
#define HANDOFF_MAX 64
/* Loop dispatches between non-blocking polls while fibers stay ready. */
#define POLL_EVERY 64
/* Period of the closed-IO sweep while descriptors are waited on. */
#define SWEEP_NS (200 * 1000000LL)

enum { RW_IO = 1, RW_SLEEP, RW_BLOCK, RW_YIELD };

typedef struct rsched rsched;

typedef struct rwait {
    weft__wait w;
    rsched *s;
    VALUE fiber;
    struct rwait *anext, *aprev; /* all waits (GVL only)               */
    struct rwait *rnext, *rprev; /* ready list                         */
    unsigned epoch;              /* scheduler epoch when begun (fork)  */
    uint8_t kind, queued, linked;
} rwait;

/* A pending interrupt for a fiber: a timeout_after timer or an exception
 * queued by fiber_interrupt. Lives on the fiber's stack (timeouts) or on
 * the heap (interrupts). */
typedef struct rintr {
    struct rintr *next, *prev;
    weft__timer timer;
    rsched *s;
    VALUE fiber, klass, message, exc;
    unsigned epoch;
    uint8_t fired, delivered, heap, linked;
} rintr;

typedef struct fdinfo {
    VALUE io;         /* the IO object last seen on this fd number      */
    uint8_t is_sock, is_reg, is_fifo, nonblock;
} fdinfo;

struct rsched {
    weft__reactor r;
    VALUE thread, loop_fiber;
    rwait *all;
    rwait *rq_head, *rq_tail;
    st_table *waiting;         /* fiber -> rwait*                        */
    rintr *intrs;
    fdinfo *fdi;
    int nfdi;
    pthread_mutex_t lock;      /* closed/r_live against other threads    */
    unsigned fork_gen, epoch;
    pid_t pid;
    int handoffs;
    uint64_t ticks;
    uint64_t ring_ops;         /* transfer-hook ring ops submitted        */
    weft_backend_t backend;
    weft__timer sweep_timer;   /* bounds a blocking poll while fds wait  */
    int64_t next_sweep;
    bool r_live, running, closed, close_pending;
};

static VALUE mWeft, cScheduler, eWeftError, eStop, cFiber;
static ID id_new, id_closed_p;
static int pread_offset_encoded, pwrite_offset_encoded;
static volatile unsigned fork_generation;

static void atfork_child(void) { fork_generation++; }

/* ---- TypedData ------------------------------------------------------- */

static void s_mark(void *p)
{
    rsched *s = p;
    rb_gc_mark_movable(s->thread);
    rb_gc_mark_movable(s->loop_fiber);
    /* Waiting fibers are pinned: they are keys of `waiting`. */
    for (rwait *rw = s->all; rw; rw = rw->anext)
        rb_gc_mark(rw->fiber);
    for (rintr *ri = s->intrs; ri; ri = ri->next) {
        rb_gc_mark(ri->fiber);
        rb_gc_mark_movable(ri->klass);
        rb_gc_mark_movable(ri->message);
        rb_gc_mark_movable(ri->exc);
    }
    for (int i = 0; i < s->nfdi; i++)
        rb_gc_mark_movable(s->fdi[i].io);
}

static void s_compact(void *p)
{
    rsched *s = p;
    s->thread = rb_gc_location(s->thread);
    s->loop_fiber = rb_gc_location(s->loop_fiber);
    for (rintr *ri = s->intrs; ri; ri = ri->next) {
        ri->klass = rb_gc_location(ri->klass);
        ri->message = rb_gc_location(ri->message);
        ri->exc = rb_gc_location(ri->exc);
    }
    for (int i = 0; i < s->nfdi; i++)
        s->fdi[i].io = rb_gc_location(s->fdi[i].io);
}

static void free_heap_intrs(rsched *s)
{
    rintr *ri = s->intrs, *next;
    for (; ri; ri = next) {
        next = ri->next;
        if (ri->heap)
            xfree(ri);
    }
    s->intrs = NULL;
}

static void s_free(void *p)
{
    rsched *s = p;
    if (s->r_live)
        weft__reactor_fini(&s->r);
    free_heap_intrs(s);
    if (s->waiting)
        st_free_table(s->waiting);
    xfree(s->fdi);
    pthread_mutex_destroy(&s->lock);
    xfree(s);
}

static size_t s_memsize(const void *p)
{
    const rsched *s = p;
    return sizeof *s + (size_t)s->nfdi * sizeof(fdinfo) +
           (size_t)s->r.nfds * sizeof(weft__fdstate) +
           weft__heap_bytes(&s->r.timers);
}

static const rb_data_type_t sched_type = {
    .wrap_struct_name = "Weft::Scheduler",
    .function = {
        .dmark = s_mark,
        .dfree = s_free,
        .dsize = s_memsize,
        .dcompact = s_compact,
    },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static VALUE s_alloc(VALUE klass)
{
    rsched *s;
    VALUE obj = TypedData_Make_Struct(klass, rsched, &sched_type, s);
    s->thread = Qnil;
    s->loop_fiber = Qnil;
    s->waiting = st_init_numtable();
    pthread_mutex_init(&s->lock, NULL);
    s->fork_gen = fork_generation;
    s->pid = getpid();
    s->sweep_timer.idx = WEFT__TIMER_IDLE;
    return obj;
}

static rsched *get_raw(VALUE self)
{
    return rb_check_typeddata(self, &sched_type);
}

/* ---- fork ---------------------------------------------------------------- */

/* In a forked child: the inherited epoll set and eventfd are shared with
 * the parent, so drop them (closing only our copies) and start a fresh
 * reactor. Fibers that were waiting in the parent never run in the child:
 * their waits are forgotten. */
static void fork_reset(rsched *s)
{
    s->fork_gen = fork_generation;
    s->pid = getpid();
    s->epoch++;
    s->all = NULL;
    s->rq_head = s->rq_tail = NULL;
    st_clear(s->waiting);
    free_heap_intrs(s);
    for (int i = 0; i < s->nfdi; i++)
        s->fdi[i].io = Qnil;
    pthread_mutex_init(&s->lock, NULL);
    if (s->r_live) {
        s->r_live = false;
        /* Closes our copies of the ring/epoll set/eventfd without touching
         * the parent's; the parent's in-flight state is not walked. */
        weft__reactor_abandon(&s->r);
        int rc = weft__reactor_init(&s->r, s->backend);
        if (rc < 0)
            rb_syserr_fail(-rc, "weft: reactor re-creation after fork");
        s->r_live = true;
    }
    s->running = false;
    s->loop_fiber = Qnil;
    s->sweep_timer.idx = WEFT__TIMER_IDLE; /* its heap was abandoned */
}

static inline void check_fork(rsched *s)
{
    if (RB_UNLIKELY(s->fork_gen != fork_generation))
        fork_reset(s);
}

/* Scheduler for a hook call on the owner thread. */
static rsched *get_sched(VALUE self)
{
    rsched *s = get_raw(self);
    if (s->thread != rb_thread_current())
        rb_raise(rb_eThreadError,
                 "Weft::Scheduler used from a thread that does not own it");
    check_fork(s);
    if (!s->r_live)
        rb_raise(eWeftError, "scheduler is closed");
    return s;
}

/* ---- ready list and waits -------------------------------------------- */

static void rq_push(rsched *s, rwait *rw)
{
    if (rw->queued)
        return;
    rw->queued = 1;
    rw->rnext = NULL;
    rw->rprev = s->rq_tail;
    if (s->rq_tail)
        s->rq_tail->rnext = rw;
    else
        s->rq_head = rw;
    s->rq_tail = rw;
}

static void rq_remove(rsched *s, rwait *rw)
{
    if (!rw->queued)
        return;
    if (rw->rprev)
        rw->rprev->rnext = rw->rnext;
    else
        s->rq_head = rw->rnext;
    if (rw->rnext)
        rw->rnext->rprev = rw->rprev;
    else
        s->rq_tail = rw->rprev;
    rw->rnext = rw->rprev = NULL;
    rw->queued = 0;
}

static rwait *rq_pop(rsched *s)
{
    rwait *rw = s->rq_head;
    if (rw)
        rq_remove(s, rw);
    return rw;
}

/* Wake function: may run without the GVL. */
static void rw_wake(weft__wait *w)
{
    rwait *rw = w->owner;
    rq_push(rw->s, rw);
}

static void rw_begin(rsched *s, rwait *rw, int kind)
{
    memset(rw, 0, sizeof *rw);
    rw->s = s;
    rw->kind = (uint8_t)kind;
    rw->fiber = rb_fiber_current();
    rw->epoch = s->epoch;
    weft__wait_init(&rw->w, &s->r, rw_wake, rw);
    rw->anext = s->all;
    if (s->all)
        s->all->aprev = rw;
    s->all = rw;
    rw->linked = 1;
    st_insert(s->waiting, (st_data_t)rw->fiber, (st_data_t)rw);
}

static void rw_end(rwait *rw)
{
    rsched *s = rw->s;
    if (!rw->linked)
        return;
    rw->linked = 0;
    if (rw->epoch != s->epoch)
        return; /* begun before a fork: the lists were reset */
    if (rw->w.active)
        weft__wait_complete(&rw->w, -ECANCELED);
    rq_remove(s, rw);
    if (rw->aprev)
        rw->aprev->anext = rw->anext;
    else
        s->all = rw->anext;
    if (rw->anext)
        rw->anext->aprev = rw->aprev;
    st_data_t key = (st_data_t)rw->fiber, val;
    if (st_lookup(s->waiting, key, &val) && (rwait *)val == rw)
        st_delete(s->waiting, &key, NULL);
}

static rwait *waiting_of(rsched *s, VALUE fiber)
{
    st_data_t val;
    if (st_lookup(s->waiting, (st_data_t)fiber, &val))
        return (rwait *)val;
    return NULL;
}

/* ---- the loop ---------------------------------------------------------- */

static void *poll_nogvl(void *p)
{
    rsched *s = p;
    (void)weft__reactor_run_once(&s->r, true);
    return NULL;
}

static void noop_post(void *arg) { (void)arg; }

/* Unblocking function: Thread#raise, signals, Thread#kill reach a loop
 * sleeping in the kernel through the reactor's wake-up channel. */
static void poll_ubf(void *p)
{
    rsched *s = p;
    (void)weft__reactor_post(&s->r, noop_post, NULL);
}

static bool io_closed(VALUE io)
{
    return RTEST(rb_funcall(io, id_closed_p, 0));
}

static void sweep_timer_fired(weft__timer *t) { (void)t; }

/* Ruby < 4.0 closes an IO without telling the scheduler (no io_close
 * hook): the kernel then drops the epoll registration silently and a fiber
 * waiting on it would wait forever. Every SWEEP_NS while descriptors are
 * waited on, wake the waiters of IOs that were closed, with EBADF. */
static void maybe_sweep(rsched *s)
{
    if (!s->r.nfd_waits)
        return;
    int64_t now = weft_now();
    if (now >= s->next_sweep) {
        s->next_sweep = now + SWEEP_NS;
        int n = s->nfdi < s->r.nfds ? s->nfdi : s->r.nfds;
        for (int fd = 0; fd < n; fd++) {
            VALUE io = s->fdi[fd].io;
            if (s->r.fds[fd].head && !NIL_P(io) && io_closed(io)) {
                s->fdi[fd].io = Qnil;
                weft__reactor_fd_close(&s->r, fd, -EBADF);
            }
        }
    }
    if (s->sweep_timer.idx == WEFT__TIMER_IDLE) {
        s->sweep_timer.fire = sweep_timer_fired;
        s->sweep_timer.deadline = s->next_sweep;
        (void)weft__heap_push(&s->r.timers, &s->sweep_timer);
    }
}

static void poll_blocking(rsched *s)
{
    maybe_sweep(s);
    /* Collect what is ready now without giving up the GVL: releasing and
     * re-taking it costs far more than one extra non-blocking poll. */
    (void)weft__reactor_run_once(&s->r, false);
    if (s->rq_head)
        return;
    rb_thread_call_without_gvl(poll_nogvl, s, poll_ubf, s);
    rb_thread_check_ints();
}

struct loop_arg {
    rsched *s;
    rwait *until;
    VALUE prev_loop;
    bool prev_running;
};

static inline bool rw_done(const rwait *rw)
{
    return !rw->w.active && !rw->queued;
}

static VALUE loop_body(VALUE p)
{
    struct loop_arg *a = (struct loop_arg *)p;
    rsched *s = a->s;
    for (;;) {
        check_fork(s);
        if (a->until && (rw_done(a->until) || a->until->epoch != s->epoch))
            break;
        rwait *rw = rq_pop(s);
        if (rw) {
            if (rw == a->until)
                break;
            s->handoffs = 0;
            rb_fiber_transfer(rw->fiber, 0, NULL);
            if ((++s->ticks % POLL_EVERY) == 0) {
                (void)weft__reactor_run_once(&s->r, false);
                maybe_sweep(s);
            }
            continue;
        }
        if (!a->until && s->r.nwaits == 0)
            break;
        poll_blocking(s);
    }
    return Qnil;
}

/* Close the reactor: no post is accepted after `closed` is set, and the
 * ones already queued (late cross-thread unblocks) are run and freed. */
static void finalize(rsched *s)
{
    if (s->sweep_timer.idx != WEFT__TIMER_IDLE)
        weft__heap_remove(&s->r.timers, &s->sweep_timer);
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    pthread_mutex_unlock(&s->lock);
    weft__reactor_drain_posts(&s->r);
    s->r_live = false;
    weft__reactor_fini(&s->r);
}

static VALUE loop_ensure(VALUE p)
{
    struct loop_arg *a = (struct loop_arg *)p;
    rsched *s = a->s;
    s->running = a->prev_running;
    s->loop_fiber = a->prev_loop;
    if (!s->running && s->close_pending && s->r_live) {
        s->close_pending = false;
        finalize(s);
    }
    return Qnil;
}

/* Run the loop on the current fiber until @until completes (or, NULL,
 * until nothing is left to wait for). */
static void run_loop(rsched *s, rwait *until)
{
    if (s->running && rb_fiber_current() != s->loop_fiber)
        rb_raise(eWeftError, "the scheduler loop is already running");
    struct loop_arg a = {s, until, s->loop_fiber, s->running};
    /* Keep the outer loop fiber if this is a nested until-run on it. */
    if (!s->running)
        s->loop_fiber = rb_fiber_current();
    s->running = true;
    rb_ensure(loop_body, (VALUE)&a, loop_ensure, (VALUE)&a);
}

static inline bool in_loop_context(rsched *s, VALUE cur)
{
    return cur == s->loop_fiber || NIL_P(s->loop_fiber);
}

/* Switch away until @rw completes and is dispatched back to us. */
static void wait_for(rsched *s, rwait *rw)
{
    if (in_loop_context(s, rw->fiber)) {
        run_loop(s, rw);
        rq_remove(s, rw);
        return;
    }
    while (!rw_done(rw) && rw->epoch == s->epoch) {
        rwait *next = NULL;
        if (s->rq_head && s->handoffs < HANDOFF_MAX) {
            next = rq_pop(s);
            s->handoffs++;
            if (next == rw)
                continue;
        }
        if (next) {
            rb_fiber_transfer(next->fiber, 0, NULL);
        } else {
            s->handoffs = 0;
            rb_fiber_transfer(s->loop_fiber, 0, NULL);
        }
    }
}

/* ---- interrupts (timeout_after, fiber_interrupt) ------------------------ */

static void intr_link(rsched *s, rintr *ri)
{
    ri->epoch = s->epoch;
    ri->prev = NULL;
    ri->next = s->intrs;
    if (s->intrs)
        s->intrs->prev = ri;
    s->intrs = ri;
    ri->linked = 1;
}

static void intr_unlink(rsched *s, rintr *ri)
{
    if (!ri->linked)
        return;
    ri->linked = 0;
    if (ri->epoch != s->epoch)
        return;
    if (ri->timer.idx != WEFT__TIMER_IDLE)
        weft__heap_remove(&s->r.timers, &ri->timer);
    if (ri->prev)
        ri->prev->next = ri->next;
    else
        s->intrs = ri->next;
    if (ri->next)
        ri->next->prev = ri->prev;
}

/* Wake @fiber if it waits in one of our hooks (it then delivers). A
 * nocancel wait (for the completion of a ring op being cancelled) is left
 * alone: the interrupt is delivered once the op is over. */
static void intr_kick(rsched *s, VALUE fiber)
{
    rwait *rw = waiting_of(s, fiber);
    if (rw && rw->w.active && !rw->w.nocancel)
        weft__wait_complete(&rw->w, -ECANCELED);
}

/* Timer callback: may run without the GVL. */
static void intr_timer_fired(weft__timer *t)
{
    rintr *ri = (rintr *)((char *)t - offsetof(rintr, timer));
    ri->fired = 1;
    intr_kick(ri->s, ri->fiber);
}

/* Raise the first pending interrupt of the current fiber, if any. */
static void deliver_interrupts(rsched *s, VALUE fiber)
{
    for (rintr *ri = s->intrs; ri; ri = ri->next) {
        if (!ri->fired || ri->delivered || ri->fiber != fiber)
            continue;
        ri->delivered = 1;
        VALUE exc;
        if (ri->heap) {
            exc = ri->exc;
            intr_unlink(s, ri);
            xfree(ri);
        } else if (NIL_P(ri->message)) {
            exc = rb_funcall(ri->klass, id_new, 0);
        } else {
            exc = rb_funcall(ri->klass, id_new, 1, ri->message);
        }
        rb_exc_raise(exc);
    }
}

/* ---- waiting ------------------------------------------------------------ */

static VALUE wait_body(VALUE p)
{
    rwait *rw = (rwait *)p;
    wait_for(rw->s, rw);
    return Qnil;
}

static VALUE wait_ensure(VALUE p)
{
    rw_end((rwait *)p);
    return Qnil;
}

/* Block in @rw (begun and armed); returns its result. @yield: switch away
 * even if it already completed (sleep 0, Fiber.schedule from a fiber). */
static int rw_wait(rsched *s, rwait *rw, bool yield)
{
    if (!rw->w.active && !yield) {
        rw_end(rw);
    } else {
        rb_ensure(wait_body, (VALUE)rw, wait_ensure, (VALUE)rw);
    }
    if (s->intrs)
        deliver_interrupts(s, rw->fiber);
    return rw->w.result;
}

/* Absolute deadline from a Ruby timeout (nil = forever). */
static int64_t to_deadline(VALUE t)
{
    if (NIL_P(t))
        return WEFT_FOREVER;
    if (!RB_INTEGER_TYPE_P(t) && !RB_FLOAT_TYPE_P(t) &&
        !rb_obj_is_kind_of(t, rb_cNumeric))
        rb_raise(rb_eTypeError, "timeout must be nil or a Numeric, not %s",
                 rb_obj_classname(t));
    double d = NUM2DBL(t);
    if (isnan(d) || d < 0)
        rb_raise(rb_eArgError, "timeout must not be negative");
    if (d == 0)
        return 0;
    if (d > 9.0e9)
        return INT64_MAX;
    return weft_deadline_in((int64_t)(d * 1e9));
}

static int io_fd(VALUE io)
{
    VALUE x = rb_io_get_io(io); /* TypeError for non-IO objects */
    return rb_io_descriptor(x);  /* IOError for a closed stream */
}

/* The reactor's per-fd state outlives a Ruby IO: when another IO object
 * shows up on a descriptor number with no waiter, treat it as a new
 * descriptor (drops a stale epoll registration, bumps the generation). */
static fdinfo *fd_prepare(rsched *s, int fd, VALUE io)
{
    if (fd < 0)
        rb_syserr_fail(EBADF, "weft: bad descriptor");
    io = rb_io_get_io(io);
    if (fd >= s->nfdi) {
        int n = s->nfdi ? s->nfdi : 64;
        while (n <= fd)
            n *= 2;
        REALLOC_N(s->fdi, fdinfo, n);
        for (int i = s->nfdi; i < n; i++) {
            s->fdi[i].io = Qnil;
            s->fdi[i].is_sock = s->fdi[i].is_reg = s->fdi[i].is_fifo = 0;
            s->fdi[i].nonblock = 0;
        }
        s->nfdi = n;
    }
    fdinfo *fi = &s->fdi[fd];
    if (fi->io != io) {
        weft__fdstate *st = weft__fd(&s->r, fd);
        if (!st)
            rb_memerror();
        /* Waiters left by an IO that was closed under them (the number was
         * reused since): they get EBADF; the new IO starts afresh. */
        if (st->head && (NIL_P(fi->io) || io_closed(fi->io)))
            weft__reactor_fd_close(&s->r, fd, -EBADF);
        if (!st->head)
            weft__reactor_fd_new(&s->r, fd);
        fi->io = io;
        struct stat sb;
        fi->is_sock = fi->is_reg = fi->is_fifo = 0;
        if (fstat(fd, &sb) == 0) {
            fi->is_sock = S_ISSOCK(sb.st_mode);
            fi->is_fifo = S_ISFIFO(sb.st_mode);
            fi->is_reg = S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode);
        }
        int fl = fcntl(fd, F_GETFL);
        fi->nonblock = fl >= 0 && (fl & O_NONBLOCK);
    }
    return fi;
}

/* Readiness right now (zero-timeout poll): the mask of @events ready, with
 * every requested event reported on error/hang-up; -EBADF if invalid. */
static int poll_now(int fd, int events)
{
    struct pollfd p = {.fd = fd, .events = 0};
    if (events & WEFT_READABLE)
        p.events |= POLLIN | POLLRDHUP;
    if (events & WEFT_PRIORITY)
        p.events |= POLLPRI;
    if (events & WEFT_WRITABLE)
        p.events |= POLLOUT;
    int n;
    while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return -errno;
    if (n == 0)
        return 0;
    if (p.revents & POLLNVAL)
        return -EBADF;
    if (p.revents & (POLLERR | POLLHUP))
        return events;
    int m = 0;
    if (p.revents & (POLLIN | POLLRDHUP))
        m |= WEFT_READABLE;
    if (p.revents & POLLPRI)
        m |= WEFT_PRIORITY;
    if (p.revents & POLLOUT)
        m |= WEFT_WRITABLE;
    return m & events;
}

/* Wait until @fd is ready for @events or @deadline: ready mask or -errno. */
static int wait_fd(rsched *s, int fd, int events, int64_t deadline)
{
    rwait rw;
    rw_begin(s, &rw, RW_IO);
    int rc = weft__wait_arm_deadline(&rw.w, deadline);
    if (rc == 0)
        rc = weft__wait_arm_fd(&rw.w, fd, (uint32_t)events);
    if (rc < 0)
        weft__wait_complete(&rw.w, rc);
    rc = rw_wait(s, &rw, false);
    if (rc > 0 && (rc & (WEFT_ERROR | WEFT_HANGUP)))
        rc = events;
    else if (rc > 0)
        rc &= events;
    return rc;
}

/* ---- hooks -------------------------------------------------------------- */

static VALUE s_initialize(int argc, VALUE *argv, VALUE self)
{
    rsched *s = get_raw(self);
    VALUE opts = Qnil;
    rb_scan_args(argc, argv, ":", &opts);
    weft_backend_t b = WEFT_BACKEND_DEFAULT;
    if (!NIL_P(opts)) {
        VALUE v = rb_hash_aref(opts, ID2SYM(rb_intern("backend")));
        if (!NIL_P(v)) {
            const char *name = RB_SYMBOL_P(v) ? rb_id2name(SYM2ID(v))
                                              : StringValueCStr(v);
            if (!strcmp(name, "epoll"))
                b = WEFT_BACKEND_EPOLL;
            else if (!strcmp(name, "poll"))
                b = WEFT_BACKEND_POLL;
            else if (!strcmp(name, "io_uring"))
                b = WEFT_BACKEND_IO_URING;
            else
                rb_raise(rb_eArgError, "unknown backend: %s", name);
        }
    }
    if (s->r_live)
        rb_raise(eWeftError, "scheduler already initialized");
    int rc = weft__reactor_init(&s->r, b);
    if (rc < 0)
        rb_syserr_fail(-rc, "weft: reactor setup (check WEFT_BACKEND)");
    s->backend = b;
    s->r_live = true;
    s->thread = rb_thread_current();
    return self;
}

static VALUE s_backend(VALUE self)
{
    rsched *s = get_raw(self);
    return s->r_live ? rb_str_new_cstr(s->r.ops->name) : Qnil;
}

/* io_wait(io, events, timeout) -> ready events (Integer) or false */
static VALUE s_io_wait(VALUE self, VALUE io, VALUE events, VALUE timeout)
{
    rsched *s = get_sched(self);
    int fd = io_fd(io);
    int ev = NUM2INT(events) & (WEFT_READABLE | WEFT_PRIORITY | WEFT_WRITABLE);
    if (!ev)
        rb_raise(rb_eArgError, "io_wait: no events requested");
    int64_t deadline = to_deadline(timeout);
    if (s->intrs)
        deliver_interrupts(s, rb_fiber_current());
    /* epoll is edge-triggered: look first. A ring's POLL_ADD checks the
     * current state when it is submitted, so there the look is a wasted
     * system call (Ruby calls io_wait after EAGAIN) unless the caller
     * will not wait at all. */
    int rc = deadline == 0 || !weft__reactor_has_ops(&s->r) ? poll_now(fd, ev) : 0;
    if (rc == 0 && deadline != 0) {
        fd_prepare(s, fd, io);
        rc = wait_fd(s, fd, ev, deadline);
    }
    if (rc > 0)
        return INT2NUM(rc);
    if (rc == 0 || rc == -ETIMEDOUT)
        return Qfalse;
    if (rc == -EBADF)
        rb_raise(rb_eIOError, "closed stream");
    rb_syserr_fail(-rc, "io_wait");
    return Qnil;
}

static void get_buffer(VALUE buffer, bool writing, void **base, size_t *size)
{
    if (writing) {
        rb_io_buffer_get_bytes_for_writing(buffer, base, size);
    } else {
        const void *b;
        rb_io_buffer_get_bytes_for_reading(buffer, &b, size);
        *base = (void *)b;
    }
}

enum { OP_READ, OP_WRITE, OP_PREAD, OP_PWRITE };

/* ---- ring operations (io_uring) ------------------------------------------
 *
 * On a reactor with completion ops, the transfer hooks hand the IO::Buffer's
 * memory to the kernel: RECV/SEND on sockets, READ on pipes, READ/WRITE at
 * the file position or at an offset on regular files. (Not writes to pipes:
 * a ring write to a pipe whose reader is gone raises SIGPIPE; those stay
 * guarded system calls.)
 *
 * The kernel may write into the buffer until the op's completion (CQE)
 * arrives, so no op outlives the hook call that started it:
 *   - the buffer is locked (IO::Buffer#locked) while the op is in flight,
 *     so #resize/#free/#transfer raise instead of moving the memory;
 *   - if the wait ends before the op (IO#timeout deadline, a timeout_after
 *     or fiber_interrupt kick, the IO closed under it), the op was cancelled
 *     by weft__wait_complete and the fiber waits, uncancellably (nocancel),
 *     for the CQE, letting other fibers run; a CQE that reports success
 *     wins: its bytes are returned and the interrupt is raised on the next
 *     hook call;
 *   - if the fiber unwinds while the op is in flight (Fiber#raise,
 *     Thread#raise, Thread#kill, an exception raised in the wait), the
 *     cleanup reaps the reactor synchronously, on the fiber's own stack and
 *     without switching fibers, until the CQE arrives (reap_sync). Switching
 *     fibers during an unwind would hand control back to whoever raised
 *     before the fiber finished unwinding; the CQE of a cancelled socket or
 *     pipe op arrives at once, a file op's when the disk is done. */

/* Has @fiber a fired interrupt not yet raised? */
static bool intr_pending(rsched *s, VALUE fiber)
{
    for (rintr *ri = s->intrs; ri; ri = ri->next)
        if (ri->fired && !ri->delivered && ri->fiber == fiber)
            return true;
    return false;
}

/* Drive the reactor (GVL held, no fiber switch) until @w's op completes.
 * Completions of other fibers' waits only queue those fibers. */
static void reap_sync(rsched *s, weft__wait *w)
{
    while (w->op)
        (void)weft__reactor_run_once(&s->r, true);
}

/* @rw ended with its op still in flight (cancel requested): wait for the
 * op's completion in a nocancel wait, then copy its result into @rw. */
static void ring_finish(rsched *s, rwait *rw)
{
    rwait rw2;
    rw_begin(s, &rw2, RW_IO);
    rw2.w.nocancel = true;
    weft__wait_move_op(&rw->w, &rw2.w);
    int state = 0;
    rb_protect(wait_body, (VALUE)&rw2, &state);
    rw_end(&rw2);
    if (rw2.w.op && rw2.epoch == s->epoch)
        reap_sync(s, &rw2.w);
    rw->w.op_done = rw2.w.op_done;
    rw->w.op_res = rw2.w.op_res;
    if (state)
        rb_jump_tag(state);
}

struct finish_arg {
    rsched *s;
    rwait *rw;
};

static VALUE ring_finish_body(VALUE p)
{
    struct finish_arg *a = (struct finish_arg *)p;
    ring_finish(a->s, a->rw);
    return Qnil;
}

/* Run @d as one ring op for the current fiber, waiting until @deadline.
 * Returns the op's result (bytes or -errno), or why the wait ended (e.g.
 * -ETIMEDOUT, -ECANCELED, -EBADF) if the op was cancelled. @buffer is
 * locked for the op's lifetime unless it already was. */
static int ring_io(rsched *s, VALUE buffer, const weft__opdesc *d,
                   int64_t deadline)
{
    void *b;
    size_t sz;
    bool locked = false;
    if (!(rb_io_buffer_get_bytes(buffer, &b, &sz) & RB_IO_BUFFER_LOCKED)) {
        rb_io_buffer_lock(buffer);
        locked = true;
    }
    rwait rw;
    rw_begin(s, &rw, RW_IO);
    int rc = weft__wait_arm_deadline(&rw.w, deadline);
    if (rc == 0)
        rc = weft__wait_arm_op(&rw.w, d);
    if (rc < 0)
        weft__wait_complete(&rw.w, rc);
    else
        s->ring_ops++;
    int state = 0;
    if (rw.w.active)
        rb_protect(wait_body, (VALUE)&rw, &state);
    rw_end(&rw);
    if (rw.w.op && rw.epoch == s->epoch) {
        if (state)
            reap_sync(s, &rw.w);
        else {
            struct finish_arg fa = {s, &rw};
            rb_protect(ring_finish_body, (VALUE)&fa, &state);
        }
    }
    if (locked)
        (void)rb_io_buffer_try_unlock(buffer);
    if (state)
        rb_jump_tag(state);
    int why = rw.w.result;
    if (!rw.w.op_done)
        return why; /* ended before the op was submitted */
    int res = rw.w.op_res;
    if ((res == -ECANCELED || res == -EINTR) && why < 0 && why != res)
        return why;
    return res;
}

/* One loop for the four transfer hooks: transfer at least @length bytes
 * (0: a single attempt, -EAGAIN if it would block), waiting through the
 * reactor on EAGAIN. Returns the byte count, or -errno if nothing moved. */
static VALUE do_io(rsched *s, VALUE io, VALUE buffer, size_t length,
                   size_t offset, off_t from, int op)
{
    int fd = io_fd(io);
    bool writing_op = op == OP_WRITE || op == OP_PWRITE;
    void *base;
    size_t size;
    get_buffer(buffer, !writing_op, &base, &size);
    if (offset > size)
        rb_raise(rb_eArgError, "offset %zu beyond buffer size %zu", offset, size);
    if (length > size - offset)
        length = size - offset;
    fdinfo *fi = fd_prepare(s, fd, io);
    int ev = writing_op ? WEFT_WRITABLE : WEFT_READABLE;
    int64_t deadline = WEFT_FOREVER;
#ifdef HAVE_RB_IO_TIMEOUT
    /* IO#timeout (Ruby >= 3.2) bounds the whole transfer. */
    VALUE tmo = rb_io_timeout(rb_io_get_io(io));
    if (!NIL_P(tmo))
        deadline = to_deadline(tmo);
#endif
    /* Ring ops (see ring_io) where they wait; a zero @length (a single
     * attempt) and a zero deadline stay non-blocking system calls. */
    bool ring = length > 0 && deadline != 0 && weft__reactor_has_ops(&s->r) &&
                (fi->is_reg ||
                 (fi->is_sock && (op == OP_READ || op == OP_WRITE)) ||
                 (fi->is_fifo && op == OP_READ));
    VALUE cur = ring ? rb_fiber_current() : Qnil;
    size_t total = 0;
    for (;;) {
        size_t max = size - offset;
        if (max == 0)
            break;
        ssize_t n;
        int err = 0;
        if (ring) {
            if (s->intrs && intr_pending(s, cur)) {
                if (total)
                    break; /* raised on the next call */
                deliver_interrupts(s, cur);
            }
            weft__opdesc d = {.fd = fd, .buf = (char *)base + offset,
                              .len = max, .off = -1};
            switch (op) {
            case OP_READ:
                d.op = fi->is_sock ? WEFT__OP_RECV : WEFT__OP_READ;
                break;
            case OP_WRITE:
                d.op = fi->is_sock ? WEFT__OP_SEND : WEFT__OP_WRITE;
                break;
            case OP_PREAD:
                d.op = WEFT__OP_READ;
                d.off = (int64_t)from + (int64_t)total;
                break;
            default:
                d.op = WEFT__OP_WRITE;
                d.off = (int64_t)from + (int64_t)total;
                break;
            }
            int res = ring_io(s, buffer, &d, deadline);
            get_buffer(buffer, !writing_op, &base, &size);
            if (offset > size)
                break;
            if (res == -EINTR)
                continue;
            if (res == -EAGAIN) {
                /* A kernel that will not wait on an O_NONBLOCK file. */
                int rc = wait_fd(s, fd, ev, deadline);
                if (rc < 0)
                    return total ? SIZET2NUM(total) : INT2NUM(rc);
                get_buffer(buffer, !writing_op, &base, &size);
                if (offset > size)
                    break;
                continue;
            }
            if (res == -ECANCELED && s->intrs && intr_pending(s, cur))
                continue; /* raised at the top (or the bytes returned) */
            if (res < 0)
                return total ? SIZET2NUM(total) : INT2NUM(res);
            n = res;
            goto moved;
        }
        if (!fi->nonblock && !fi->is_reg && !fi->is_sock &&
            (op == OP_READ || op == OP_WRITE)) {
            /* A blocking descriptor we must not switch to O_NONBLOCK
             * (it may be shared with other processes): wait first. */
            int rc = poll_now(fd, ev);
            if (rc < 0)
                return INT2NUM(total ? (long)total : rc);
            if (rc == 0) {
                n = -1;
                err = EAGAIN;
                goto would_block;
            }
        }
        switch (op) {
        case OP_READ:
            n = fi->is_sock ? recv(fd, (char *)base + offset, max, MSG_DONTWAIT)
                            : read(fd, (char *)base + offset, max);
            break;
        case OP_WRITE:
            n = fi->is_sock ? send(fd, (char *)base + offset, max,
                                   MSG_DONTWAIT | MSG_NOSIGNAL)
                            : write(fd, (char *)base + offset, max);
            break;
        case OP_PREAD:
            n = pread(fd, (char *)base + offset, max, from + (off_t)total);
            break;
        default:
            n = pwrite(fd, (char *)base + offset, max, from + (off_t)total);
            break;
        }
        err = n < 0 ? errno : 0;
    moved:
        if (n > 0) {
            total += (size_t)n;
            offset += (size_t)n;
            if ((size_t)n >= length)
                break;
            length -= (size_t)n;
            continue;
        }
        if (n == 0)
            break; /* EOF (or a zero-length write) */
        if (err == EINTR)
            continue;
    would_block:
        if ((err == EAGAIN || err == EWOULDBLOCK) && length > 0) {
            int rc = deadline == 0 ? -ETIMEDOUT : wait_fd(s, fd, ev, deadline);
            if (rc < 0)
                return total ? SIZET2NUM(total) : INT2NUM(rc);
            /* The buffer may have been resized while we waited. */
            get_buffer(buffer, !writing_op, &base, &size);
            if (offset > size)
                break;
            continue;
        }
        return total ? SIZET2NUM(total) : INT2NUM(-err);
    }
    return SIZET2NUM(total);
}

/* io_read(io, buffer, length)          (3.1)
 * io_read(io, buffer, length, offset)  (3.2+) */
static VALUE s_io_read(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 3, 4);
    rsched *s = get_sched(self);
    size_t offset = argc > 3 ? NUM2SIZET(argv[3]) : 0;
    return do_io(s, argv[0], argv[1], NUM2SIZET(argv[2]), offset, 0, OP_READ);
}

static VALUE s_io_write(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 3, 4);
    rsched *s = get_sched(self);
    size_t offset = argc > 3 ? NUM2SIZET(argv[3]) : 0;
    return do_io(s, argv[0], argv[1], NUM2SIZET(argv[2]), offset, 0, OP_WRITE);
}

static off_t file_offset(VALUE v, int encoded)
{
    off_t from = NUM2OFFT(v);
    /* Ruby 3.1's IO::Buffer passes OFFT2NUM(offset) where an off_t is
     * expected, so the hook sees 2 * offset + 1 (detected at load time by
     * lib/weft.rb, see Weft::Scheduler.offset_encoding=). */
    if (encoded && from > 0 && (from & 1))
        from = (from - 1) / 2;
    if (from < 0)
        rb_raise(rb_eArgError, "negative file offset");
    return from;
}

/* io_pread/io_pwrite(io, buffer, length, from)          (3.1, IO::Buffer)
 * io_pread/io_pwrite(io, buffer, from, length, offset)  (3.3+)
 * @encoded: whether this Ruby mis-encodes the 3.1-form offset. */
static VALUE positioned_hook(int argc, VALUE *argv, VALUE self, int encoded,
                             int op)
{
    rb_check_arity(argc, 4, 5);
    rsched *s = get_sched(self);
    if (argc == 4)
        return do_io(s, argv[0], argv[1], NUM2SIZET(argv[2]), 0,
                     file_offset(argv[3], encoded), op);
    return do_io(s, argv[0], argv[1], NUM2SIZET(argv[3]), NUM2SIZET(argv[4]),
                 file_offset(argv[2], 0), op);
}

static VALUE s_io_pread(int argc, VALUE *argv, VALUE self)
{
    return positioned_hook(argc, argv, self, pread_offset_encoded, OP_PREAD);
}

static VALUE s_io_pwrite(int argc, VALUE *argv, VALUE self)
{
    return positioned_hook(argc, argv, self, pwrite_offset_encoded, OP_PWRITE);
}

/* io_close(fd) (4.0) or io_close(io): wake its waiters with EBADF and drop
 * the reactor's state before the descriptor is released. */
static VALUE s_io_close(VALUE self, VALUE io)
{
    rsched *s = get_sched(self);
    int fd = RB_INTEGER_TYPE_P(io) ? NUM2INT(io) : rb_io_descriptor(rb_io_get_io(io));
    if (fd < 0)
        return Qfalse;
    weft__reactor_fd_close(&s->r, fd, -EBADF);
    if (fd < s->nfdi)
        s->fdi[fd].io = Qnil;
    return Qtrue;
}

/* kernel_sleep(duration = nil) */
static VALUE s_kernel_sleep(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 0, 1);
    rsched *s = get_sched(self);
    int64_t deadline = to_deadline(argc ? argv[0] : Qnil);
    rwait rw;
    rw_begin(s, &rw, RW_SLEEP);
    if (deadline == 0)
        weft__wait_complete(&rw.w, 0); /* sleep(0): just yield */
    else
        (void)weft__wait_arm_deadline(&rw.w, deadline);
    rw_wait(s, &rw, true);
    return Qtrue;
}

/* block(blocker, timeout = nil) -> true if unblocked, false on timeout */
static VALUE s_block(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 1, 2);
    rsched *s = get_sched(self);
    int64_t deadline = to_deadline(argc > 1 ? argv[1] : Qnil);
    rwait rw;
    rw_begin(s, &rw, RW_BLOCK);
    (void)weft__wait_arm_deadline(&rw.w, deadline);
    int rc = rw_wait(s, &rw, true);
    return rc == -ETIMEDOUT ? Qfalse : Qtrue;
}

static void unblock_local(rsched *s, VALUE fiber)
{
    rwait *rw = waiting_of(s, fiber);
    if (rw && (rw->kind == RW_BLOCK || rw->kind == RW_SLEEP) && rw->w.active)
        weft__wait_complete(&rw->w, 0);
}

typedef struct unblock_msg {
    rsched *s;
    VALUE fiber; /* used as a key only, never dereferenced */
} unblock_msg;

/* Runs on the loop thread (maybe without the GVL). */
static void unblock_post(void *p)
{
    unblock_msg *m = p;
    unblock_local(m->s, m->fiber);
    free(m);
}

/* unblock(blocker, fiber): thread-safe. */
static VALUE s_unblock(VALUE self, VALUE blocker, VALUE fiber)
{
    (void)blocker;
    rsched *s = get_raw(self);
    if (s->thread == rb_thread_current()) {
        check_fork(s);
        if (s->r_live)
            unblock_local(s, fiber);
        return Qnil;
    }
    unblock_msg *m = malloc(sizeof *m);
    if (!m)
        rb_memerror();
    m->s = s;
    m->fiber = fiber;
    int rc = -ESHUTDOWN;
    pthread_mutex_lock(&s->lock);
    if (s->r_live && !s->closed)
        rc = weft__reactor_post(&s->r, unblock_post, m);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        free(m);
    return Qnil;
}

/* Start @fiber (created by #fiber): transfer to it now. The caller goes
 * back on the ready list, unless it is the loop fiber (or becomes it). */
struct start_arg {
    rsched *s;
    rwait *rw;
    VALUE fiber;
    int argc;
    const VALUE *argv;
};

/* The body of every scheduled fiber: the user's block, with Weft::Stop
 * (Scheduler#stop) ending the fiber quietly. In C rather than a Ruby
 * wrapper block: a fiber start costs ~25% less. */
struct entry_arg {
    VALUE proc;
    int argc;
    const VALUE *argv;
};

static VALUE entry_call(VALUE p)
{
    struct entry_arg *a = (struct entry_arg *)p;
    return rb_proc_call_with_block(a->proc, a->argc, a->argv, Qnil);
}

static VALUE entry_stopped(VALUE p, VALUE exc)
{
    (void)p;
    (void)exc;
    return Qnil;
}

static VALUE fiber_entry(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, proc))
{
    (void)yielded;
    (void)blockarg;
    struct entry_arg a = {proc, argc, argv};
    return rb_rescue2(entry_call, (VALUE)&a, entry_stopped, Qnil, eStop, (VALUE)0);
}

static VALUE start_body(VALUE p)
{
    struct start_arg *a = (struct start_arg *)p;
    rb_fiber_transfer(a->fiber, a->argc, a->argv);
    wait_for(a->s, a->rw);
    return Qnil;
}

/* fiber(*args) { |*args| ... }: Fiber.schedule — start a non-blocking
 * fiber now, passing it @args. A fiber ended by Weft::Stop ends quietly. */
static VALUE s_fiber(int argc, VALUE *argv, VALUE self)
{
    rsched *s = get_sched(self);
    if (!rb_block_given_p())
        rb_raise(rb_eArgError, "Weft::Scheduler#fiber needs a block");
    VALUE proc = rb_block_proc();
    VALUE body = rb_proc_new(fiber_entry, proc);
    VALUE fiber = rb_funcall_with_block(cFiber, id_new, 0, NULL, body);
    RB_GC_GUARD(proc);
    VALUE cur = rb_fiber_current();
    if (!s->running && (cur == s->loop_fiber || NIL_P(s->loop_fiber) ||
                        rb_fiber_scheduler_current() != self)) {
        s->loop_fiber = cur;
        rb_fiber_transfer(fiber, argc, argv);
        return fiber;
    }
    if (s->running && cur == s->loop_fiber) {
        rb_fiber_transfer(fiber, argc, argv);
        return fiber;
    }
    rwait rw;
    rw_begin(s, &rw, RW_YIELD);
    weft__wait_complete(&rw.w, 0);
    struct start_arg a = {s, &rw, fiber, argc, argv};
    rb_ensure(start_body, (VALUE)&a, wait_ensure, (VALUE)&rw);
    return fiber;
}

/* run: drive the loop until no fiber waits. */
static VALUE s_run(VALUE self)
{
    rsched *s = get_sched(self);
    run_loop(s, NULL);
    return Qnil;
}

/* scheduler_close / close: run to completion, then release the reactor. */
static VALUE s_close(VALUE self)
{
    rsched *s = get_raw(self);
    if (s->closed || !s->r_live)
        return Qnil;
    s = get_sched(self);
    if (s->running) {
        s->close_pending = true;
        return Qnil;
    }
    run_loop(s, NULL);
    if (s->r_live)
        finalize(s);
    return Qnil;
}

static VALUE s_closed_p(VALUE self)
{
    rsched *s = get_raw(self);
    return s->closed || !s->r_live ? Qtrue : Qfalse;
}

/* timeout_after(duration, klass, message) { |duration| ... } */
static VALUE timeout_ensure(VALUE p)
{
    rintr *ri = (rintr *)p;
    intr_unlink(ri->s, ri);
    return Qnil;
}

static VALUE s_timeout_after(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 1, 3);
    rsched *s = get_sched(self);
    rb_need_block();
    int64_t deadline = to_deadline(argv[0]);
    rintr ri;
    memset(&ri, 0, sizeof ri);
    ri.s = s;
    ri.fiber = rb_fiber_current();
    ri.klass = argc > 1 && !NIL_P(argv[1]) ? argv[1] : rb_eRuntimeError;
    ri.message = argc > 2 ? argv[2] : Qnil;
    ri.exc = Qnil;
    ri.timer.idx = WEFT__TIMER_IDLE;
    ri.timer.fire = intr_timer_fired;
    intr_link(s, &ri);
    if (deadline != WEFT_FOREVER) {
        ri.timer.deadline = deadline;
        if (weft__heap_push(&s->r.timers, &ri.timer) < 0) {
            intr_unlink(s, &ri);
            rb_memerror();
        }
    }
    return rb_ensure(rb_yield, argv[0], timeout_ensure, (VALUE)&ri);
}

/* fiber_interrupt(fiber, exception): raise @exception in @fiber when it
 * next waits in (or wakes from) a hook; wakes it now if it waits. */
static VALUE s_fiber_interrupt(VALUE self, VALUE fiber, VALUE exc)
{
    rsched *s = get_sched(self);
    if (!rb_obj_is_kind_of(fiber, cFiber))
        rb_raise(rb_eTypeError, "not a Fiber");
    if (!rb_obj_is_kind_of(exc, rb_eException))
        rb_raise(rb_eTypeError, "not an exception");
    rintr *ri = ZALLOC(rintr);
    ri->s = s;
    ri->fiber = fiber;
    ri->klass = ri->message = Qnil;
    ri->exc = exc;
    ri->heap = 1;
    ri->fired = 1;
    ri->timer.idx = WEFT__TIMER_IDLE;
    intr_link(s, ri);
    intr_kick(s, fiber);
    return Qnil;
}

/* stop(exception): queue @exception for every fiber waiting in a hook and
 * wake them all (Weft.run uses it with Weft::Stop on Interrupt). Returns
 * the number of fibers interrupted. */
static VALUE s_stop(VALUE self, VALUE exc)
{
    rsched *s = get_sched(self);
    if (!rb_obj_is_kind_of(exc, rb_eException))
        rb_raise(rb_eTypeError, "not an exception");
    long n = 0;
    for (rwait *rw = s->all; rw; rw = rw->anext) {
        rintr *ri = ZALLOC(rintr);
        ri->s = s;
        ri->fiber = rw->fiber;
        ri->klass = ri->message = Qnil;
        ri->exc = exc;
        ri->heap = 1;
        ri->fired = 1;
        ri->timer.idx = WEFT__TIMER_IDLE;
        intr_link(s, ri);
        n++;
    }
    for (rwait *rw = s->all; rw; rw = rw->anext)
        if (rw->w.active && !rw->w.nocancel)
            weft__wait_complete(&rw->w, -ECANCELED);
    return LONG2NUM(n);
}

/* pidfd_open(pid) -> fd; raises SystemCallError (ENOSYS, ESRCH, ...) */
static VALUE s_pidfd_open(VALUE klass, VALUE pid)
{
    (void)klass;
    long fd = syscall(SYS_pidfd_open, (pid_t)NUM2INT(pid), 0);
    if (fd < 0)
        rb_sys_fail("pidfd_open");
    (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    return INT2NUM((int)fd);
}

static VALUE s_set_offset_encoding(VALUE klass, VALUE pread_enc, VALUE pwrite_enc)
{
    (void)klass;
    pread_offset_encoded = RTEST(pread_enc);
    pwrite_offset_encoded = RTEST(pwrite_enc);
    return Qnil;
}

/* Introspection for tests: {waits:, ready:, fd_waits:, timers:, pid:,
 * ring_ops: (transfer-hook ring ops submitted), ops_inflight: (records the
 * kernel still owns)} */
static VALUE s_stats(VALUE self)
{
    rsched *s = get_raw(self);
    check_fork(s);
    VALUE h = rb_hash_new();
    size_t ready = 0, all = 0;
    for (rwait *rw = s->rq_head; rw; rw = rw->rnext)
        ready++;
    for (rwait *rw = s->all; rw; rw = rw->anext)
        all++;
    rb_hash_aset(h, ID2SYM(rb_intern("waits")), SIZET2NUM(s->r_live ? s->r.nwaits : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("fd_waits")), SIZET2NUM(s->r_live ? s->r.nfd_waits : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("timers")), SIZET2NUM(s->r_live ? weft__heap_count(&s->r.timers) : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("waiting_fibers")), SIZET2NUM(all));
    rb_hash_aset(h, ID2SYM(rb_intern("ready")), SIZET2NUM(ready));
    rb_hash_aset(h, ID2SYM(rb_intern("pid")), INT2NUM(s->pid));
    rb_hash_aset(h, ID2SYM(rb_intern("ring_ops")), ULL2NUM(s->ring_ops));
    rb_hash_aset(h, ID2SYM(rb_intern("ops_inflight")),
                 SIZET2NUM(s->r_live ? s->r.ops_inflight : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("running")), s->running ? Qtrue : Qfalse);
    return h;
}

RUBY_FUNC_EXPORTED void Init_weft(void)
{
    static int atfork_done;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, atfork_child);
        atfork_done = 1;
    }
    id_new = rb_intern("new");
    id_closed_p = rb_intern("closed?");
    cFiber = rb_const_get(rb_cObject, rb_intern("Fiber"));
    rb_gc_register_mark_object(cFiber);
    mWeft = rb_define_module("Weft");
    eWeftError = rb_define_class_under(mWeft, "Error", rb_eStandardError);
    /* Raised in waiting fibers by Scheduler#stop (see lib/weft/scheduler.rb) */
    eStop = rb_define_class_under(mWeft, "Stop", rb_eException);
    cScheduler = rb_define_class_under(mWeft, "Scheduler", rb_cObject);
    rb_define_alloc_func(cScheduler, s_alloc);
    rb_define_method(cScheduler, "initialize", s_initialize, -1);
    rb_define_method(cScheduler, "backend", s_backend, 0);
    rb_define_method(cScheduler, "io_wait", s_io_wait, 3);
    rb_define_method(cScheduler, "io_read", s_io_read, -1);
    rb_define_method(cScheduler, "io_write", s_io_write, -1);
    rb_define_method(cScheduler, "io_pread", s_io_pread, -1);
    rb_define_method(cScheduler, "io_pwrite", s_io_pwrite, -1);
    rb_define_method(cScheduler, "io_close", s_io_close, 1);
    rb_define_method(cScheduler, "kernel_sleep", s_kernel_sleep, -1);
    rb_define_method(cScheduler, "block", s_block, -1);
    rb_define_method(cScheduler, "unblock", s_unblock, 2);
    rb_define_method(cScheduler, "fiber", s_fiber, -1);
    rb_define_method(cScheduler, "_fiber", s_fiber, -1);
    rb_define_method(cScheduler, "stop", s_stop, 1);
    rb_define_method(cScheduler, "run", s_run, 0);
    rb_define_method(cScheduler, "close", s_close, 0);
    rb_define_method(cScheduler, "scheduler_close", s_close, 0);
    rb_define_method(cScheduler, "closed?", s_closed_p, 0);
    rb_define_method(cScheduler, "timeout_after", s_timeout_after, -1);
    rb_define_method(cScheduler, "fiber_interrupt", s_fiber_interrupt, 2);
    rb_define_method(cScheduler, "stats", s_stats, 0);
    rb_define_singleton_method(cScheduler, "pidfd_open", s_pidfd_open, 1);
    rb_define_singleton_method(cScheduler, "_set_offset_encoding",
                               s_set_offset_encoding, 2);
}
