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
#include "reactor.h"
#include "workers.h"
#include "evmask.h"

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
    weft__node anode;            /* rsched.all: every wait (GVL only)  */
    weft__node rnode;            /* rsched.ready                       */
    weft__node onode;            /* fdinfo.w_waiters (owner waits)     */
    unsigned epoch;              /* scheduler epoch when begun (fork)  */
    int ofd;                     /* the descriptor of an owner wait    */
    uint8_t kind, queued, linked, olinked;
} rwait;

/* A pending interrupt for a fiber: a timeout_after timer or an exception
 * queued by fiber_interrupt. Lives on the fiber's stack (timeouts) or on
 * the heap (interrupts). */
typedef struct rintr {
    weft__node node;             /* rsched.intrs                       */
    weft__timer timer;
    rsched *s;
    VALUE fiber, klass, message, exc;
    unsigned epoch;
    uint8_t fired, delivered, heap, linked;
} rintr;

typedef struct fdinfo {
    VALUE io;         /* the IO object last seen on this fd number      */
    /* A fiber in the middle of one Ruby-level write that the IO layer
     * split into several hook calls with a wait between them (Ruby 3.1's
     * writev: the text, then io_wait, then the rest): other fibers'
     * writes to this descriptor wait until it is done, so one puts is
     * never split by another fiber's write. Qnil: none. */
    VALUE w_owner;
    weft__list w_waiters;    /* rwaits of fibers waiting for w_owner    */
    /* An attempt on this IO found it not ready, or a fiber waited on it:
     * from then on its single attempts may be ring ops (do_io). A fresh
     * connection's first read and write stay system calls: its request is
     * usually there already and its answer goes out at once. */
    uint8_t waited;
} fdinfo;

struct rsched {
    weft__reactor r;
    VALUE thread, loop_fiber;
    weft__list all;            /* rwait.anode: every wait               */
    weft__list ready;          /* rwait.rnode: completed, to dispatch    */
    st_table *waiting;         /* fiber -> rwait*                        */
    /* Fibers inside #exclusive (fiber -> depth) and their count: while
     * one of them waits for I/O, a timer or a file op, the reactor runs
     * on that fiber and no other fiber is switched into (wait_inline). */
    st_table *pins;
    long npins;
    /* Fibers this scheduler started (Fiber.schedule) and that have not
     * ended: only these are in a resume chain of the scheduler's making
     * (see "switching"). */
    st_table *own;
    weft__list intrs;          /* rintr.node                            */
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
    /* How the fiber now running was entered by this scheduler: `entered`
     * is the fiber the scheduler last switched into, `entered_chained`
     * whether that was a resume (Fiber.schedule) whose resumer expects it
     * back at its first wait. A running fiber that is not `entered` was
     * switched into by someone else (Fiber#resume, Fiber#raise). */
    VALUE entered;
    bool entered_chained;
    /* Fibers that died with an exception: the first one is raised by
     * #run / #close once every fiber has ended (then forgotten); `fatal`
     * (SystemExit, a signal) stops every fiber first. */
    VALUE first_error, fatal;
    bool report;               /* report_on_exception                    */
    /* Ruby 3.1 split-write detection (fdinfo.w_owner): the last hook call
     * that was a completed io_write, by whom, on which descriptor. */
    uint64_t hook_seq, lw_seq;
    VALUE lw_fiber;
    int lw_fd;
    /* The last transfer hook that found its descriptor not ready (-EAGAIN
     * with nothing moved): when, by whom (a key, never dereferenced), on
     * which descriptor, for which event (see s_io_wait). */
    uint64_t ea_seq;
    VALUE ea_fiber;
    int ea_fd, ea_ev;
    int closing;               /* close attempts begun (see s_close)     */
    unsigned stops;            /* stop_all calls so far (see start_body) */
    bool bound;                /* a hook ran on `thread`: owned for good */
    bool r_live, running, closed, close_pending;
};

#define RW_OF(n, member) ((n) ? weft__container((n), rwait, member) : NULL)
#define INTR_OF(n) ((n) ? weft__container((n), rintr, node) : NULL)

static VALUE mWeft, cScheduler, eWeftError, eStop, cFiber, eFiberError, eIOTimeout;
static ID id_new, id_closed_p, id_full_message, id_status, id_blocking_p;
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
    for (weft__node *n = s->all.head; n; n = n->next)
        rb_gc_mark(RW_OF(n, anode)->fiber);
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
        rb_gc_mark(ri->fiber);
        rb_gc_mark_movable(ri->klass);
        rb_gc_mark_movable(ri->message);
        rb_gc_mark_movable(ri->exc);
    }
    for (int i = 0; i < s->nfdi; i++) {
        rb_gc_mark_movable(s->fdi[i].io);
        rb_gc_mark_movable(s->fdi[i].w_owner);
    }
    rb_gc_mark_movable(s->first_error);
    rb_gc_mark_movable(s->fatal);
    /* Compared with the current fiber: kept alive so that no new fiber can
     * take a dead one's address while these still hold it. */
    rb_gc_mark_movable(s->entered);
    rb_gc_mark_movable(s->lw_fiber);
}

static void s_compact(void *p)
{
    rsched *s = p;
    s->thread = rb_gc_location(s->thread);
    s->loop_fiber = rb_gc_location(s->loop_fiber);
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
        ri->klass = rb_gc_location(ri->klass);
        ri->message = rb_gc_location(ri->message);
        ri->exc = rb_gc_location(ri->exc);
    }
    for (int i = 0; i < s->nfdi; i++) {
        s->fdi[i].io = rb_gc_location(s->fdi[i].io);
        s->fdi[i].w_owner = rb_gc_location(s->fdi[i].w_owner);
    }
    s->first_error = rb_gc_location(s->first_error);
    s->fatal = rb_gc_location(s->fatal);
    s->entered = rb_gc_location(s->entered);
    s->lw_fiber = rb_gc_location(s->lw_fiber);
}

static void free_heap_intrs(rsched *s)
{
    weft__node *n = s->intrs.head, *next;
    for (; n; n = next) {
        next = n->next;
        if (INTR_OF(n)->heap)
            xfree(INTR_OF(n));
    }
    s->intrs = (weft__list){NULL, NULL};
}

static void s_free(void *p)
{
    rsched *s = p;
    if (s->r_live)
        weft__reactor_fini(&s->r);
    free_heap_intrs(s);
    if (s->waiting)
        st_free_table(s->waiting);
    if (s->pins)
        st_free_table(s->pins);
    if (s->own)
        st_free_table(s->own);
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
    s->entered = Qnil;
    s->first_error = Qnil;
    s->fatal = Qnil;
    s->lw_fiber = Qnil;
    s->lw_fd = -1;
    s->ea_fiber = Qnil;
    s->ea_fd = -1;
    s->report = true;
    s->waiting = st_init_numtable();
    s->own = st_init_numtable();
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

/* A live reactor replaced by a new one of the same backend: the old one
 * closed (@abandon: only our descriptors, as after fork) first. */
static void remake_reactor(rsched *s, bool abandon, const char *what)
{
    if (!s->r_live)
        return;
    s->r_live = false;
    if (abandon)
        weft__reactor_abandon(&s->r);
    else
        weft__reactor_fini(&s->r);
    int rc = weft__reactor_init(&s->r, s->backend);
    if (rc < 0)
        rb_syserr_fail(-rc, what);
    s->r_live = true;
}

/* In a forked child: the inherited epoll set and eventfd are shared with
 * the parent, so drop them (closing only our copies) and start a fresh
 * reactor. Fibers that were waiting in the parent never run in the child:
 * their waits are forgotten. */
static void fork_reset(rsched *s)
{
    s->fork_gen = fork_generation;
    s->pid = getpid();
    s->epoch++;
    s->all = s->ready = (weft__list){NULL, NULL};
    st_clear(s->waiting);
    free_heap_intrs(s);
    for (int i = 0; i < s->nfdi; i++) {
        s->fdi[i].io = Qnil;
        s->fdi[i].w_owner = Qnil;
        s->fdi[i].w_waiters = (weft__list){NULL, NULL};
    }
    s->entered = s->lw_fiber = Qnil;
    pthread_mutex_init(&s->lock, NULL);
    /* Abandon closes our copies of the ring/epoll set/eventfd without
     * touching the parent's; the parent's in-flight state is not walked. */
    remake_reactor(s, true, "weft: reactor re-creation after fork");
    s->running = false;
    s->loop_fiber = Qnil;
    s->sweep_timer.idx = WEFT__TIMER_IDLE; /* its heap was abandoned */
}

static inline void check_fork(rsched *s)
{
    if (RB_UNLIKELY(s->fork_gen != fork_generation))
        fork_reset(s);
}

/* A scheduler belongs to the thread that uses it: Scheduler.new may run
 * in one thread and Fiber.set_scheduler in another, so the first hook call
 * binds it. Until then its reactor (made by #initialize, so that #backend
 * can answer) is re-made in the binding thread: an io_uring ring is owned
 * by the thread that submits to it (SINGLE_ISSUER). */
static void rebind(rsched *s, VALUE cur)
{
    if (s->bound || s->running || !weft__list_empty(&s->all) || (s->r_live && s->r.nwaits))
        rb_raise(rb_eThreadError,
                 "Weft::Scheduler used from a thread that does not own it");
    remake_reactor(s, false, "weft: reactor setup in the scheduler's thread");
    s->thread = cur;
}

/* Scheduler for a hook call: on the owner thread (bound at first use). */
static rsched *get_sched(VALUE self)
{
    rsched *s = get_raw(self);
    VALUE cur = rb_thread_current();
    if (RB_UNLIKELY(s->thread != cur))
        rebind(s, cur);
    check_fork(s);
    if (!s->r_live)
        rb_raise(eWeftError, "scheduler is closed");
    s->bound = true;
    s->hook_seq++;
    return s;
}

/* ---- ready list and waits -------------------------------------------- */

static void rq_push(rsched *s, rwait *rw)
{
    if (rw->queued)
        return;
    rw->queued = 1;
    weft__list_push(&s->ready, &rw->rnode);
}

static void rq_remove(rsched *s, rwait *rw)
{
    if (!rw->queued)
        return;
    weft__list_remove(&s->ready, &rw->rnode);
    rw->queued = 0;
}

static rwait *rq_pop(rsched *s)
{
    rwait *rw = RW_OF(s->ready.head, rnode);
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
    weft__list_push_front(&s->all, &rw->anode);
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
    weft__list_remove(&s->all, &rw->anode);
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

/* Unblocking function: Thread#raise, signals, Thread#kill reach a loop
 * sleeping in the kernel through the reactor's wake-up eventfd. It is
 * async-signal-safe and says so (RB_NOGVL_UBF_ASYNC_SAFE): otherwise Ruby
 * 3.1, in a process with one Ruby thread, starts a helper thread for every
 * blocking poll (to call the function from a thread rather than from its
 * signal handler), kills and joins it after, and leaks it when a trap
 * raises on the way out (test_blocking_poll.rb). */
static void poll_ubf(void *p)
{
    rsched *s = p;
    weft__reactor_wake(&s->r);
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
            if (!weft__list_empty(&s->r.fds[fd].waits) && !NIL_P(io) && io_closed(io)) {
                s->fdi[fd].io = Qnil;
                weft__reactor_fd_close(&s->r, fd, -EBADF);
            }
        }
    }
    if (s->sweep_timer.idx == WEFT__TIMER_IDLE) {
        s->sweep_timer.fire = sweep_timer_fired;
        (void)weft__timer_arm(&s->r, &s->sweep_timer, s->next_sweep);
    }
}

/* Block in the reactor, without the GVL, until something happens. */
static void poll_sleep(rsched *s)
{
    rb_nogvl(poll_nogvl, s, poll_ubf, s, RB_NOGVL_UBF_ASYNC_SAFE);
    rb_thread_check_ints();
}

static void poll_blocking(rsched *s)
{
    maybe_sweep(s);
    /* Collect what is ready now without giving up the GVL: releasing and
     * re-taking it costs far more than one extra non-blocking poll. */
    (void)weft__reactor_run_once(&s->r, false);
    if (!weft__list_empty(&s->ready))
        return;
    poll_sleep(s);
}

static inline bool rw_done(const rwait *rw)
{
    return !rw->w.active && !rw->queued;
}

/* ---- switching -----------------------------------------------------------
 *
 * Ruby has two ways into a fiber. A *resumed* fiber (Fiber#resume) returns
 * to its resumer with Fiber.yield or by ending, and its resumer cannot be
 * switched into until it does; a fiber entered by *transfer* has no
 * resumer and may transfer anywhere. The scheduler uses both:
 *
 *   - Fiber.schedule resumes the new fiber (as Ruby's reference scheduler
 *     does), so until its first wait it is in its starter's resume chain:
 *     Fiber.yield returns to the starter, which may #resume it later, and
 *     at its first wait it yields back, which is when Fiber.schedule
 *     returns.
 *   - Every later switch the scheduler makes is a transfer
 *     (rb_fiber_transfer, the C API, which may enter a fiber that last
 *     yielded): a waiting fiber hands off directly to the next ready one,
 *     or to the loop fiber when none is ready or after HANDOFF_MAX
 *     hand-offs in a row.
 *   - A waiting fiber that was switched into by someone else — Fiber#resume
 *     or Fiber#raise from user code (a parked scheduled fiber is entered by
 *     resume: it last yielded) — is in that caller's resume chain: its next
 *     wait yields back to the caller, so the caller continues, as Ruby
 *     specifies for Fiber#raise.
 *
 * `entered` records which fiber the scheduler itself last switched into,
 * and how; a fiber that wakes up and finds another value there was entered
 * by someone else. */

enum { M_TRANSFER, M_CHAINED, M_UNKNOWN };

static inline int entry_mode(const rsched *s, VALUE self)
{
    if (s->entered != self)
        return M_UNKNOWN;
    return s->entered_chained ? M_CHAINED : M_TRANSFER;
}

/* Transfer to @fiber (a dispatch: it runs in transfer mode). */
static inline void switch_to(rsched *s, VALUE fiber)
{
    s->entered = fiber;
    s->entered_chained = false;
    rb_fiber_transfer(fiber, 0, NULL);
}

static VALUE yield_body(VALUE unused)
{
    (void)unused;
    return rb_fiber_yield(0, NULL);
}

/* Yield to the current fiber's resumer. false (nothing happened) if it has
 * none: Fiber.yield raises FiberError before switching then. */
static bool try_yield(void)
{
    int state = 0;
    rb_protect(yield_body, Qnil, &state);
    if (!state)
        return true;
    VALUE err = rb_errinfo();
    if (rb_obj_is_kind_of(err, eFiberError)) {
        VALUE msg = rb_funcall(err, rb_intern("message"), 0);
        if (RB_TYPE_P(msg, T_STRING) &&
            strstr(StringValueCStr(msg), "not resumed")) {
            rb_set_errinfo(Qnil);
            return false;
        }
    }
    rb_jump_tag(state);
    return false;
}

struct loop_arg {
    rsched *s;
    rwait *until;
    VALUE until_fiber;          /* or run until this fiber has ended     */
    VALUE prev_loop;
    bool prev_running;
};

static VALUE loop_body(VALUE p)
{
    struct loop_arg *a = (struct loop_arg *)p;
    rsched *s = a->s;
    for (;;) {
        check_fork(s);
        if (a->until && (rw_done(a->until) || a->until->epoch != s->epoch))
            break;
        if (!NIL_P(a->until_fiber) && !RTEST(rb_fiber_alive_p(a->until_fiber)))
            break;
        rwait *rw = rq_pop(s);
        if (rw) {
            if (rw == a->until)
                break;
            s->handoffs = 0;
            switch_to(s, rw->fiber);
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
    weft__timer_disarm(&s->r, &s->sweep_timer);
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
static void run_loop(rsched *s, rwait *until, VALUE until_fiber)
{
    if (s->running && rb_fiber_current() != s->loop_fiber)
        rb_raise(eWeftError, "the scheduler loop is already running");
    struct loop_arg a = {s, until, until_fiber, s->loop_fiber, s->running};
    /* Keep the outer loop fiber if this is a nested until-run on it. */
    if (!s->running)
        s->loop_fiber = rb_fiber_current();
    s->running = true;
    rb_ensure(loop_body, (VALUE)&a, loop_ensure, (VALUE)&a);
}

static bool is_pinned(rsched *s, VALUE fiber)
{
    st_data_t depth;
    return s->pins && st_lookup(s->pins, (st_data_t)fiber, &depth) && depth > 0;
}

/* The wait of a fiber inside #exclusive: run the reactor on this fiber
 * until @rw completes, switching into no other fiber. Fibers that become
 * ready meanwhile stay on the ready list for the loop. */
static void wait_inline(rsched *s, rwait *rw)
{
    while (rw->epoch == s->epoch) {
        if (rw->queued) {
            rq_remove(s, rw);
            break;
        }
        if (!rw->w.active)
            break;
        maybe_sweep(s);
        (void)weft__reactor_run_once(&s->r, false);
        if (rw->queued || !rw->w.active)
            continue;
        poll_sleep(s);
    }
}

/* Switch away until @rw completes and the scheduler switches back to us. */
static void wait_for(rsched *s, rwait *rw)
{
    VALUE self = rw->fiber;
    /* Inside #exclusive only a wait that another fiber must end (block:
     * a Mutex, a Queue, a join) lets the others run. */
    if (RB_UNLIKELY(s->npins) && rw->kind != RW_BLOCK && is_pinned(s, self)) {
        wait_inline(s, rw);
        return;
    }
    if (self == s->loop_fiber) {
        /* The loop fiber itself waits (a fiber that called #run): run the
         * loop here until this wait is dispatched. */
        run_loop(s, rw, Qnil);
        rq_remove(s, rw);
        return;
    }
    int mode = entry_mode(s, self);
    while (!rw_done(rw) && rw->epoch == s->epoch) {
        if (mode == M_UNKNOWN && !st_is_member(s->own, (st_data_t)self)) {
            /* A fiber this scheduler did not start (an Enumerator's, on
             * Ruby >= 3.3 non-blocking like its creator; a Fiber.new of
             * the program's): a Fiber.yield would hand its resumer a value
             * (Enumerator#next would return nil). It waits as a fiber in
             * transfer mode does, and is transferred back into. */
            mode = M_TRANSFER;
            continue;
        }
        if (mode == M_CHAINED || mode == M_UNKNOWN) {
            /* Back to whoever resumed us; we come back when the scheduler
             * dispatches this wait (or someone resumes us again). */
            s->entered = Qnil;
            if (!try_yield()) {
                mode = M_TRANSFER; /* nobody resumed us: transfer mode */
                continue;
            }
        } else if (NIL_P(s->loop_fiber)) {
            /* No loop runs (a fiber entered by transfer from user code):
             * this fiber becomes the loop until its wait is done. */
            run_loop(s, rw, Qnil);
            rq_remove(s, rw);
            return;
        } else {
            rwait *next = NULL;
            if (!weft__list_empty(&s->ready) && s->handoffs < HANDOFF_MAX) {
                next = rq_pop(s);
                s->handoffs++;
                if (next == rw)
                    continue;
            }
            if (next) {
                switch_to(s, next->fiber);
            } else {
                s->handoffs = 0;
                switch_to(s, s->loop_fiber);
            }
        }
        mode = entry_mode(s, self);
    }
}

/* ---- interrupts (timeout_after, fiber_interrupt) ------------------------ */

static void intr_link(rsched *s, rintr *ri)
{
    ri->epoch = s->epoch;
    weft__list_push_front(&s->intrs, &ri->node);
    ri->linked = 1;
}

static void intr_unlink(rsched *s, rintr *ri)
{
    if (!ri->linked)
        return;
    ri->linked = 0;
    if (ri->epoch != s->epoch)
        return;
    weft__timer_disarm(&s->r, &ri->timer);
    weft__list_remove(&s->intrs, &ri->node);
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
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
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
    if (!weft__list_empty(&s->intrs))
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

static void owner_release(rsched *s, int fd);

/* The reactor's per-fd state outlives a Ruby IO: when another IO object
 * shows up on a descriptor number with no waiter, treat it as a new
 * descriptor (drops a stale epoll registration, bumps the generation). */
/* BasicSocket, once the socket library has defined it (Qnil until then). */
static VALUE basic_socket = Qnil;

/* Whether @io is a BasicSocket (so its descriptor is a socket). */
static bool is_socket_object(VALUE io)
{
    if (NIL_P(basic_socket)) {
        ID id = rb_intern("BasicSocket");
        if (!rb_const_defined_at(rb_cObject, id))
            return false;
        VALUE c = rb_const_get_at(rb_cObject, id);
        if (!RB_TYPE_P(c, T_CLASS))
            return false;
        basic_socket = c;
    }
    return RTEST(rb_obj_is_kind_of(io, basic_socket));
}

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
            s->fdi[i].w_owner = Qnil;
            s->fdi[i].w_waiters = (weft__list){NULL, NULL};
            s->fdi[i].waited = 0;
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
        if (!weft__list_empty(&st->waits) && (NIL_P(fi->io) || io_closed(fi->io)))
            weft__reactor_fd_close(&s->r, fd, -EBADF);
        if (weft__list_empty(&st->waits))
            weft__reactor_fd_new(&s->r, fd);
        if (!NIL_P(fi->w_owner))
            owner_release(s, fd); /* its writer's IO is gone */
        fi->io = io;
        fi->waited = 0;
        /* What the descriptor is: the reactor's one classification. A
         * BasicSocket is a socket (Ruby checked when it made the object,
         * and IO#reopen changes the class with the descriptor), and a
         * socket's O_NONBLOCK is never consulted (its transfers use
         * MSG_DONTWAIT): the fstat and the fcntl are two system calls per
         * accepted connection that a server under churn would pay. */
        if (is_socket_object(io)) {
            s->r.fds[fd].kind = WEFT__FD_SOCKET;
        } else {
            (void)weft__fd_kind(&s->r, fd);
            int fl = fcntl(fd, F_GETFL);
            s->r.fds[fd].nonblock = fl >= 0 && (fl & O_NONBLOCK);
        }
    }
    return fi;
}

/* Readiness right now (zero-timeout poll): the mask of @events ready, with
 * every requested event reported on error/hang-up; -EBADF if invalid. */
static int poll_now(int fd, int events)
{
    int rc = weft__ready_now(fd, (uint32_t)events);
    return rc > 0 ? rc & events : rc;
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
        VALUE rep = rb_hash_lookup2(opts, ID2SYM(rb_intern("report_on_exception")), Qundef);
        if (rep != Qundef)
            s->report = RTEST(rep);
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

/* ---- one writer at a time (Ruby 3.1 split writes) ----------------------
 *
 * Ruby 3.1 writes `puts "x"` to a synchronous IO as two hook calls, the
 * text and then the newline, with an io_wait(writable) between them (its
 * writev with a scheduler passes one buffer per call, and reports the rest
 * as EAGAIN). If that wait switched fibers, another fiber's write would
 * land between the two halves. So io_wait first looks whether the
 * descriptor is writable (it nearly always is: no switch), and if it must
 * really wait right after this fiber's own write to the descriptor, the
 * fiber becomes the descriptor's writer for as long as that wait lasts:
 * other fibers' io_write calls on it wait. Once the wait is over the
 * writer runs, and nothing else does until its next hook call, which is
 * the rest of the write; so the role ends with the wait. Keeping it any
 * longer would hang the others when no rest follows: a buffered IO
 * (sync = false) waits for writability inside a flush and then only
 * copies into its buffer. (Ruby 3.2+ holds the IO's write lock across the
 * whole call instead.) */

static void owner_unlink(rsched *s, rwait *rw)
{
    if (!rw->olinked)
        return;
    rw->olinked = 0;
    if (rw->epoch != s->epoch || rw->ofd >= s->nfdi)
        return;
    weft__list_remove(&s->fdi[rw->ofd].w_waiters, &rw->onode);
}

/* The writer of @fd is done (or gone): every waiting writer may go. */
static void owner_release(rsched *s, int fd)
{
    if (fd < 0 || fd >= s->nfdi)
        return;
    fdinfo *fi = &s->fdi[fd];
    fi->w_owner = Qnil;
    weft__node *n;
    while ((n = weft__list_pop(&fi->w_waiters))) {
        rwait *rw = RW_OF(n, onode);
        rw->olinked = 0;
        if (rw->w.active)
            weft__wait_complete(&rw->w, 0);
    }
}

static VALUE owner_wait_ensure(VALUE p)
{
    rwait *rw = (rwait *)p;
    owner_unlink(rw->s, rw);
    rw_end(rw);
    return Qnil;
}

/* Wait while another fiber is @fd's writer. */
static void owner_wait(rsched *s, int fd, VALUE cur)
{
    while (fd < s->nfdi && !NIL_P(s->fdi[fd].w_owner) && s->fdi[fd].w_owner != cur) {
        rwait rw;
        rw_begin(s, &rw, RW_BLOCK);
        fdinfo *fi = &s->fdi[fd];
        rw.ofd = fd;
        rw.olinked = 1;
        weft__list_push(&fi->w_waiters, &rw.onode);
        rb_ensure(wait_body, (VALUE)&rw, owner_wait_ensure, (VALUE)&rw);
        if (!weft__list_empty(&s->intrs))
            deliver_interrupts(s, cur);
    }
}

/* The IO's own timeout (IO#timeout, Ruby >= 3.2) as a deadline, or
 * WEFT_FOREVER. *@set tells whether there was one. */
static int64_t io_timeout_deadline(VALUE io, bool *set)
{
    *set = false;
#ifdef HAVE_RB_IO_TIMEOUT
    VALUE t = rb_io_timeout(rb_io_get_io(io));
    if (!NIL_P(t)) {
        *set = true;
        return to_deadline(t);
    }
#else
    (void)io;
#endif
    return WEFT_FOREVER;
}

/* What Ruby raises when an IO's own timeout passes (IO::TimeoutError, Ruby
 * >= 3.2). */
static void raise_io_timeout(int events)
{
    if (NIL_P(eIOTimeout))
        rb_syserr_fail(ETIMEDOUT, "IO timeout");
    rb_raise(eIOTimeout, "Timed out waiting for IO to become %s!",
             events & WEFT_WRITABLE ? "writable" : "readable");
}

struct iowait_arg {
    rsched *s;
    int fd, ev;
    int64_t deadline;
    int rc;
};

static VALUE iowait_body(VALUE p)
{
    struct iowait_arg *a = (struct iowait_arg *)p;
    a->rc = wait_fd(a->s, a->fd, a->ev, a->deadline);
    return Qnil;
}

/* io_wait(io, events, timeout) -> ready events (Integer) or false. A nil
 * timeout means the IO's own (IO#timeout, Ruby 3.2+): IO::TimeoutError
 * when it passes. */
static VALUE s_io_wait(VALUE self, VALUE io, VALUE events, VALUE timeout)
{
    rsched *s = get_sched(self);
    int fd = io_fd(io);
    int ev = NUM2INT(events) & (WEFT_READABLE | WEFT_PRIORITY | WEFT_WRITABLE);
    if (!ev)
        rb_raise(rb_eArgError, "io_wait: no events requested");
    bool io_tmo = false;
    int64_t deadline = NIL_P(timeout) ? io_timeout_deadline(io, &io_tmo)
                                      : to_deadline(timeout);
    VALUE cur = rb_fiber_current();
    if (!weft__list_empty(&s->intrs))
        deliver_interrupts(s, cur);
    /* epoll is edge-triggered: look first. A ring's POLL_ADD checks the
     * current state when it is submitted, so there the look is a wasted
     * system call for reads unless the caller will not wait at all; a
     * write rarely has to wait, and one that follows a split write must
     * not switch fibers needlessly. No look either right after this
     * fiber's transfer hook found the descriptor not ready (Ruby calls
     * io_wait at once after -EAGAIN, no other hook and no poll between):
     * whatever changes after that attempt reaches the wait — a ring POLL
     * checks at submission, epoll reports current readiness when the
     * descriptor is added or modified and an edge for every change after,
     * poll() is level-triggered. That saves a poll(2) per request of a
     * keep-alive server on epoll. */
    bool after_eagain = s->ea_seq + 1 == s->hook_seq && s->ea_fd == fd &&
                        s->ea_ev == ev && s->ea_fiber == cur;
    int rc = deadline == 0 || (!after_eagain &&
                               (!weft__reactor_has_ops(&s->r) || (ev & WEFT_WRITABLE)))
                 ? poll_now(fd, ev) : 0;
    if (rc == 0 && deadline != 0) {
        fdinfo *fi = fd_prepare(s, fd, io);
        fi->waited = 1;
        bool split = ev == WEFT_WRITABLE && s->lw_fiber == cur && s->lw_fd == fd &&
                     s->hook_seq == s->lw_seq + 1 &&
                     (NIL_P(fi->w_owner) || fi->w_owner == cur);
        if (!split) {
            rc = wait_fd(s, fd, ev, deadline);
        } else {
            fi->w_owner = cur; /* while this wait lasts */
            struct iowait_arg a = {s, fd, ev, deadline, 0};
            int state = 0;
            rb_protect(iowait_body, (VALUE)&a, &state);
            rc = a.rc;
            owner_release(s, fd);
            if (state)
                rb_jump_tag(state);
        }
    }
    if (rc > 0)
        return INT2NUM(rc);
    /* The IO's own timeout passed (no explicit one was given): raise, as
     * Ruby does for its own blocking calls without a scheduler (and as
     * Async does); an explicit timeout is the caller's to handle. */
    if (rc == -ETIMEDOUT && io_tmo)
        raise_io_timeout(ev);
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
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
        if (ri->fired && !ri->delivered && ri->fiber == fiber)
            return true;
    }
    return false;
}

/* Drive the reactor (GVL held, no fiber switch) until @w's op completes.
 * Completions of other fibers' waits only queue those fibers. */
static void reap_sync(rsched *s, weft__wait *w)
{
    while (w->op)
        (void)weft__reactor_run_once(&s->r, true);
}

/* Lock @buffer for an op that the kernel or a worker carries out, unless
 * it already is; true when the caller must unlock it afterwards. */
static bool lock_buffer(VALUE buffer)
{
    void *b;
    size_t sz;
    if (rb_io_buffer_get_bytes(buffer, &b, &sz) & RB_IO_BUFFER_LOCKED)
        return false;
    rb_io_buffer_lock(buffer);
    return true;
}

/* Run @d as one ring op for the current fiber, waiting until @deadline.
 * Returns the op's result (bytes or -errno), or why the wait ended (e.g.
 * -ETIMEDOUT, -ECANCELED, -EBADF) if the op was cancelled (see
 * weft__op_start in reactor.h). @buffer is locked for the op's lifetime
 * unless it already was. */
static int ring_io(rsched *s, VALUE buffer, const weft__opdesc *d,
                   int64_t deadline)
{
    bool locked = lock_buffer(buffer);
    rwait rw;
    rw_begin(s, &rw, RW_IO);
    int state = 0;
    if (weft__op_start(&rw.w, d, deadline) == 0) {
        s->ring_ops++;
        rb_protect(wait_body, (VALUE)&rw, &state);
    }
    int why = rw.w.result;
    /* The wait ended before its op: the kernel may still use the buffer.
     * Wait for the op's completion on the same wait, re-armed (nocancel),
     * letting other fibers run — or, unwinding, right here. */
    while (weft__op_pending(&rw.w) && rw.epoch == s->epoch) {
        if (state) {
            if (rw.w.active && !rw.w.nocancel)
                weft__wait_complete(&rw.w, -ECANCELED); /* cancels the op */
            reap_sync(s, &rw.w);
            break;
        }
        weft__op_rearm(&rw.w);
        rb_protect(wait_body, (VALUE)&rw, &state);
    }
    rw_end(&rw);
    if (locked)
        (void)rb_io_buffer_try_unlock(buffer);
    if (state)
        rb_jump_tag(state);
    return weft__op_result(&rw.w, why);
}

/* ---- regular files off the loop --------------------------------------
 *
 * A read or write of a regular file never returns EAGAIN, so a large one
 * would hold the whole loop (and every other fiber) while the kernel
 * copies it. On io_uring a positioned one (pread, pwrite) is a ring
 * READ/WRITE at its offset (IOSQE_ASYNC from FILE_ASYNC_MIN bytes: inline
 * completion from the page cache would copy inside the loop's own
 * io_uring_enter). Otherwise (epoll, poll, and transfers at the file
 * position on every backend: see do_io), those of FILE_OFFLOAD_MIN bytes
 * or more run on a thread of weft's offload pool while the fiber waits
 * (smaller ones cost less than the hand-over). The
 * wait cannot be cut short — the worker owns the buffer until it is done —
 * so interrupts are delivered once it is. */
#define FILE_ASYNC_MIN (64 * 1024)
#define FILE_OFFLOAD_MIN (64 * 1024)
/* Each op moves at most this much (a short transfer, which the hooks may
 * return): a worker that copies for tens of milliseconds on one of two
 * cores starves the thread Ruby 3.1 needs to hand its GVL back. */
#define FILE_CHUNK (1024 * 1024)

struct fileop {
    weft__rjob job;
    int fd, op;
    void *buf;
    size_t len;
    off_t off;
    ssize_t res;
    int err;
};

static void fileop_run(void *p)
{
    struct fileop *f = p;
    ssize_t n;
    do {
        switch (f->op) {
        case OP_READ:
            n = read(f->fd, f->buf, f->len);
            break;
        case OP_WRITE:
            n = write(f->fd, f->buf, f->len);
            break;
        case OP_PREAD:
            n = pread(f->fd, f->buf, f->len, f->off);
            break;
        default:
            n = pwrite(f->fd, f->buf, f->len, f->off);
            break;
        }
    } while (n < 0 && errno == EINTR);
    f->res = n;
    f->err = n < 0 ? errno : 0;
}

/* Run @f on the offload pool while the fiber waits; the byte count or
 * -errno. @buffer is locked meanwhile. */
static ssize_t file_offload(rsched *s, VALUE buffer, struct fileop *f)
{
    bool locked = lock_buffer(buffer);
    rwait rw;
    rw_begin(s, &rw, RW_IO);
    rw.w.nocancel = true;
    int rc = weft__rjob_submit(&f->job, &s->r, &rw.w, fileop_run, f);
    int state = 0;
    if (rc < 0) {
        weft__wait_complete(&rw.w, 0);
        fileop_run(f); /* no worker: do it here */
        f->job.done = true;
    } else {
        rb_protect(wait_body, (VALUE)&rw, &state);
    }
    rw_end(&rw);
    /* Unwinding (Thread#raise, kill): the worker still writes into the
     * buffer; wait for it here, without switching fibers. */
    while (!f->job.done && rw.epoch == s->epoch)
        (void)weft__reactor_run_once(&s->r, true);
    if (locked)
        (void)rb_io_buffer_try_unlock(buffer);
    if (state)
        rb_jump_tag(state);
    return f->res < 0 ? -f->err : f->res;
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
    const int kind = s->r.fds[fd].kind;
    const bool is_file = kind == WEFT__FD_FILE, is_sock = kind == WEFT__FD_SOCKET;
    const bool positioned = op == OP_PREAD || op == OP_PWRITE;
    if (positioned && from < 0)
        return INT2NUM(-EINVAL); /* as pread(2); a ring op would take -1 as "here" */
    const int ring_op = is_sock ? (writing_op ? WEFT__OP_SEND : WEFT__OP_RECV)
                                : (writing_op ? WEFT__OP_WRITE : WEFT__OP_READ);
    int ev = writing_op ? WEFT_WRITABLE : WEFT_READABLE;
    /* IO#timeout (Ruby >= 3.2) bounds the whole transfer; when it passes
     * before anything moved, IO::TimeoutError, as without a scheduler. */
    bool io_tmo;
    int64_t deadline = io_timeout_deadline(io, &io_tmo);
#define FAIL(rc_)                                                          \
    do {                                                                   \
        int f_ = (rc_);                                                    \
        if (!total && f_ == -ETIMEDOUT && io_tmo)                          \
            raise_io_timeout(ev);                                          \
        return total ? SIZET2NUM(total) : INT2NUM(f_);                     \
    } while (0)
    /* Ring ops (see ring_io) where the backend takes them: where they
     * wait (@length > 0), for positioned transfers of regular files
     * (which never say EAGAIN: see file_offload), and for the single attempt of a zero @length (Ruby's
     * own IO methods: readpartial, write, read_nonblock...) on a socket,
     * made one attempt by MSG_DONTWAIT: the kernel answers -EAGAIN at once
     * instead of waiting (a ring READ of a pipe waits even when the pipe
     * is O_NONBLOCK, so pipes keep the system call). Only while other
     * fibers are ready to run: the op then goes out in the same
     * io_uring_enter as theirs, where alone it would cost a loop round
     * trip, more than the system call; and so a write with nobody else
     * to run does not switch fibers (Ruby's own test_read_characters
     * relies on that). Only in a fiber this scheduler runs: one it did not
     * switch into (an Enumerator's, a fiber the user resumed) must not
     * wait where the system call would not have (Enumerator#next over a
     * socket: its fiber would yield to #next's caller). Only on an IO
     * found not ready before (fdinfo.waited): a fresh connection's
     * request is usually there already and its answer goes out at once,
     * so under connection churn the ring op only added two fiber switches
     * and a loop round per connection.
     * That costs a switch to the loop and back instead of a system call,
     * and wins: the loop submits every fiber's op in one io_uring_enter,
     * and a keep-alive Ruby server spends ~25% less CPU per request than
     * with send/recv (docs/ARCHITECTURE.md, "Ruby's single attempts on
     * the ring"). A zero deadline stays a non-blocking system call.
     * A regular file's read or write at the file position is never a ring
     * op: the ring reads the position when the op starts and stores it
     * when it ends, without the lock read(2) and write(2) take, so two
     * processes writing through one open file (a log both inherited as
     * stderr) overwrite each other's lines. Those are system calls, on an
     * offload thread from FILE_OFFLOAD_MIN bytes. */
    VALUE cur = rb_fiber_current();
    bool once = length == 0 && is_sock && !positioned && s->entered == cur &&
                fi->waited && !weft__list_empty(&s->ready);
    bool ring = deadline != 0 &&
                (is_file ? positioned : (length > 0 || once) && !positioned) &&
                weft__reactor_use_op(&s->r, kind, ring_op);
    size_t total = 0;
    for (;;) {
        size_t max = size - offset;
        if (max == 0)
            break;
        ssize_t n;
        int err = 0;
        if (ring) {
            if (!weft__list_empty(&s->intrs) && intr_pending(s, cur)) {
                if (total)
                    break; /* raised on the next call */
                deliver_interrupts(s, cur);
            }
            weft__opdesc d = {.fd = fd, .buf = (char *)base + offset,
                              .len = is_file && max > FILE_CHUNK ? FILE_CHUNK : max,
                              .off = -1,
                              .async = is_file && max >= FILE_ASYNC_MIN,
                              .flags = once ? MSG_DONTWAIT : 0,
                              .op = ring_op};
            if (positioned)
                d.off = (int64_t)from + (int64_t)total;
            int res = ring_io(s, buffer, &d, deadline);
            get_buffer(buffer, !writing_op, &base, &size);
            if (offset > size)
                break;
            if (res == -EINTR)
                continue;
            if (res == -EAGAIN && once) {
                n = -1; /* the single attempt found nothing to do */
                err = EAGAIN;
                goto would_block;
            }
            if (res == -EAGAIN) {
                /* A kernel that will not wait on an O_NONBLOCK file. */
                int rc = wait_fd(s, fd, ev, deadline);
                if (rc < 0)
                    FAIL(rc);
                get_buffer(buffer, !writing_op, &base, &size);
                if (offset > size)
                    break;
                continue;
            }
            if (res == -ECANCELED && !weft__list_empty(&s->intrs) && intr_pending(s, cur))
                continue; /* raised at the top (or the bytes returned) */
            if (res < 0)
                FAIL(res);
            n = res;
            goto moved;
        }
        if (is_file && deadline != 0 && max >= FILE_OFFLOAD_MIN) {
            struct fileop f = {.fd = fd, .op = op, .buf = (char *)base + offset,
                               .len = max > FILE_CHUNK ? FILE_CHUNK : max,
                               .off = from + (off_t)total};
            n = file_offload(s, buffer, &f);
            get_buffer(buffer, !writing_op, &base, &size);
            if (n < 0) {
                err = (int)-n;
                n = -1;
            }
            goto moved;
        }
        if (!s->r.fds[fd].nonblock && !is_file && !is_sock &&
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
            n = is_sock ? recv(fd, (char *)base + offset, max, MSG_DONTWAIT)
                            : read(fd, (char *)base + offset, max);
            break;
        case OP_WRITE:
            n = is_sock ? send(fd, (char *)base + offset, max,
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
            if ((size_t)n < length) {
                length -= (size_t)n;
                continue;
            }
            /* Enough has moved. Without a scheduler one call moves all of
             * a regular file's transfer (IO#pread of 3 MiB returns 3 MiB);
             * here it goes in FILE_CHUNK pieces, so a full piece with room
             * left in the buffer goes on. */
            if (is_file && (size_t)n == FILE_CHUNK && offset < size) {
                length = 0;
                continue;
            }
            break;
        }
        if (n == 0)
            break; /* EOF (or a zero-length write) */
        if (err == EINTR)
            continue;
    would_block:
        if ((err == EAGAIN || err == EWOULDBLOCK) && length > 0) {
            int rc = deadline == 0 ? -ETIMEDOUT : wait_fd(s, fd, ev, deadline);
            if (rc < 0)
                FAIL(rc);
            /* The buffer may have been resized while we waited. */
            get_buffer(buffer, !writing_op, &base, &size);
            if (offset > size)
                break;
            continue;
        }
        if (!total && (err == EAGAIN || err == EWOULDBLOCK)) {
            s->fdi[fd].waited = 1;
            s->ea_seq = s->hook_seq;
            s->ea_fiber = cur;
            s->ea_fd = fd;
            s->ea_ev = ev;
        }
        return total ? SIZET2NUM(total) : INT2NUM(-err);
    }
    return SIZET2NUM(total);
#undef FAIL
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

struct write_arg {
    rsched *s;
    int argc;
    VALUE *argv;
    int fd;
};

static VALUE write_body(VALUE p)
{
    struct write_arg *a = (struct write_arg *)p;
    size_t offset = a->argc > 3 ? NUM2SIZET(a->argv[3]) : 0;
    return do_io(a->s, a->argv[0], a->argv[1], NUM2SIZET(a->argv[2]), offset,
                 0, OP_WRITE);
}

static VALUE write_release(VALUE p)
{
    struct write_arg *a = (struct write_arg *)p;
    owner_release(a->s, a->fd);
    return Qnil;
}

/* io_write: one write call at a time per descriptor. A write that has to
 * wait (a full pipe, a ring WRITE to a file) keeps the descriptor's writer
 * role until it is done, so no other fiber's bytes land in the middle of
 * it; see "one writer at a time" for Ruby 3.1's split writes. */
static VALUE s_io_write(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 3, 4);
    rsched *s = get_sched(self);
    VALUE io = argv[0];
    int fd = io_fd(io);
    VALUE cur = rb_fiber_current();
    fd_prepare(s, fd, io);
    bool held = s->fdi[fd].w_owner == cur; /* in the middle of a split write */
    owner_wait(s, fd, cur);
    s->fdi[fd].w_owner = cur;
    struct write_arg a = {s, argc, argv, fd};
    int state = 0;
    VALUE r = rb_protect(write_body, (VALUE)&a, &state);
    bool moved = !state && FIXNUM_P(r) && FIX2LONG(r) > 0;
    /* The rest of a split write found the descriptor full again (a tty's
     * writability flaps): it stays this fiber's until the rest is out. */
    bool keep = !state && held && FIXNUM_P(r) && FIX2LONG(r) == -EAGAIN;
    if (!keep)
        write_release((VALUE)&a);
    if (state)
        rb_jump_tag(state);
    if (moved || keep) {
        s->lw_fiber = cur;
        s->lw_fd = fd;
        s->lw_seq = s->hook_seq;
    }
    return r;
}

static off_t file_offset(VALUE v, int encoded)
{
    off_t from = NUM2OFFT(v);
    /* Ruby 3.1's IO::Buffer passes OFFT2NUM(offset) where an off_t is
     * expected, so the hook sees 2 * offset + 1 (detected at load time by
     * lib/weft.rb, see Weft::Scheduler.offset_encoding=). */
    if (encoded && from > 0 && (from & 1))
        from = (from - 1) / 2;
    return from; /* a negative one: -EINVAL from do_io, as pread(2) */
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

/* IO#pwrite on Ruby 3.3 and 3.4 calls the io_pwrite hook from inside its
 * blocking region, without the GVL. A hook that waits then switches fibers
 * and runs Ruby code with the GVL released, which breaks the VM's thread
 * bookkeeping: the process later spins in the timer thread and hangs at
 * the next GVL hand-over. lib/weft/scheduler.rb routes IO#pwrite from
 * non-blocking fibers here instead: the same single positioned write, with
 * the GVL held throughout. Returns the byte count; raises as IO#pwrite. */
struct pwrite_string {
    rsched *s;
    VALUE io, buffer;
    off_t off;
};

static VALUE pwrite_string_body(VALUE p)
{
    struct pwrite_string *a = (struct pwrite_string *)p;
    return do_io(a->s, a->io, a->buffer, 0, 0, a->off, OP_PWRITE);
}

static VALUE s_io_pwrite_string(VALUE self, VALUE io, VALUE object, VALUE offset)
{
    rsched *s = get_sched(self);
    VALUE str = RB_TYPE_P(object, T_STRING) ? object : rb_obj_as_string(object);
    off_t off = NUM2OFFT(offset);
    VALUE wio = rb_io_get_write_io(rb_io_get_io(io));
    rb_io_t *fptr;
    GetOpenFile(wio, fptr);
    rb_io_check_writable(fptr);
    /* A frozen view: the bytes cannot change under the write. */
    VALUE frozen = rb_str_new_frozen(str);
    struct pwrite_string a = {
        s, wio,
        rb_io_buffer_new(RSTRING_PTR(frozen), (size_t)RSTRING_LEN(frozen),
                         RB_IO_BUFFER_EXTERNAL | RB_IO_BUFFER_READONLY),
        off,
    };
    VALUE r = rb_ensure(pwrite_string_body, (VALUE)&a, rb_io_buffer_free, a.buffer);
    RB_GC_GUARD(frozen);
    ssize_t n = NUM2SSIZET(r);
    if (n < 0)
#ifdef HAVE_RB_IO_PATH
        rb_syserr_fail_str((int)-n, rb_io_path(wio));
#else
        rb_syserr_fail_str((int)-n, fptr->pathv);
#endif
    return SSIZET2NUM(n);
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

/* ---- io_select --------------------------------------------------------
 *
 * IO.select(readables, writables, exceptables, timeout) on the reactor:
 * Ruby 3.3 calls this hook; on Ruby 3.1, which has none, lib/weft/
 * scheduler.rb routes IO.select and Kernel#select from non-blocking fibers
 * here. What is ready now (buffered input counts as readable, as for
 * Ruby) is answered at once; otherwise one wait per descriptor, all
 * waking the fiber, and a deadline; then the sets are looked at again.
 * Returns [readables, writables, exceptables] (the objects given, not
 * their #to_io) or nil when the timeout passes. A closed IO raises
 * IOError ("closed stream"), before or during the wait. */

enum { SEL_R, SEL_W, SEL_E };
static const uint32_t sel_events[3] = {WEFT_READABLE, WEFT_WRITABLE, WEFT_PRIORITY};

struct selent {
    VALUE obj, io;
    int fd, set;
};

struct select_arg {
    rsched *s;
    struct selent *e;
    long n;
    weft__wait *subs;
    rwait *rw;
    int64_t deadline;
};

static void sel_sub_wake(weft__wait *w)
{
    rwait *rw = w->owner;
    if (rw->w.active)
        weft__wait_complete(&rw->w, 0);
}

/* The current IO behind each entry (re-checked after a wait: a closed one
 * raises IOError). */
static void sel_refresh(struct select_arg *a)
{
    for (long i = 0; i < a->n; i++) {
        VALUE io = rb_io_get_io(a->e[i].obj);
        a->e[i].io = io;
        a->e[i].fd = rb_io_descriptor(io); /* IOError: closed stream */
    }
}

/* The ready entries now, as the result triple, or Qnil. */
static VALUE sel_ready(struct select_arg *a)
{
    VALUE out[3] = {Qnil, Qnil, Qnil};
    bool any = false;
    long n = a->n;
    struct pollfd pfd_small[16];
    struct pollfd *pfd = n <= 16 ? pfd_small : ALLOC_N(struct pollfd, n);
    for (long i = 0; i < n; i++) {
        pfd[i] = (struct pollfd){.fd = a->e[i].fd, .events = weft__ev_to_poll(sel_events[a->e[i].set])};
    }
    int rc;
    while ((rc = poll(pfd, (nfds_t)n, 0)) < 0 && errno == EINTR)
        ;
    int err = rc < 0 ? errno : 0;
    for (long i = 0; i < n && !err; i++) {
        bool ready = pfd[i].revents != 0;
        if (pfd[i].revents & POLLNVAL)
            err = EBADF;
        if (!ready && a->e[i].set == SEL_R) {
            rb_io_t *fptr;
            RB_IO_POINTER(a->e[i].io, fptr);
            ready = rb_io_read_pending(fptr) > 0;
        }
        if (ready) {
            int k = a->e[i].set;
            if (NIL_P(out[k]))
                out[k] = rb_ary_new();
            rb_ary_push(out[k], a->e[i].obj);
            any = true;
        }
    }
    if (pfd != pfd_small)
        xfree(pfd);
    if (err)
        rb_syserr_fail(err, "select");
    if (!any)
        return Qnil;
    for (int k = 0; k < 3; k++)
        if (NIL_P(out[k]))
            out[k] = rb_ary_new();
    return rb_ary_new_from_values(3, out);
}

static VALUE sel_wait_body(VALUE p)
{
    struct select_arg *a = (struct select_arg *)p;
    rsched *s = a->s;
    for (long i = 0; i < a->n; i++) {
        weft__wait *w = &a->subs[i];
        fd_prepare(s, a->e[i].fd, a->e[i].io);
        weft__wait_init(w, &s->r, sel_sub_wake, a->rw);
        int rc = weft__wait_arm_fd(w, a->e[i].fd, sel_events[a->e[i].set]);
        if (rc < 0) {
            weft__wait_complete(w, rc);
            weft__wait_complete(&a->rw->w, rc);
            break;
        }
    }
    wait_for(s, a->rw);
    return Qnil;
}

static VALUE sel_wait_ensure(VALUE p)
{
    struct select_arg *a = (struct select_arg *)p;
    for (long i = 0; i < a->n; i++)
        if (a->subs[i].r && a->subs[i].active)
            weft__wait_complete(&a->subs[i], -ECANCELED);
    rw_end(a->rw);
    return Qnil;
}

static VALUE s_io_select(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 1, 4);
    rsched *s = get_sched(self);
    int64_t deadline = to_deadline(argc > 3 ? argv[3] : Qnil);
    VALUE keep = rb_ary_new(); /* the objects, whatever happens to the sets */
    for (int k = 0; k < 3 && k < argc; k++) {
        if (NIL_P(argv[k]))
            continue;
        VALUE set = rb_convert_type(argv[k], T_ARRAY, "Array", "to_ary");
        for (long i = 0; i < RARRAY_LEN(set); i++) {
            rb_ary_push(keep, RARRAY_AREF(set, i));
            rb_ary_push(keep, INT2FIX(k));
        }
    }
    long n = RARRAY_LEN(keep) / 2;
    VALUE ev = 0, sv = 0;
    struct selent *e = ALLOCV_N(struct selent, ev, n ? n : 1);
    weft__wait *subs = ALLOCV_N(weft__wait, sv, n ? n : 1);
    memset(subs, 0, sizeof *subs * (size_t)(n ? n : 1));
    for (long i = 0; i < n; i++) {
        e[i].obj = RARRAY_AREF(keep, 2 * i);
        e[i].set = FIX2INT(RARRAY_AREF(keep, 2 * i + 1));
    }
    struct select_arg a = {s, e, n, subs, NULL, deadline};
    VALUE result = Qnil;
    VALUE cur = rb_fiber_current();
    for (;;) {
        if (!weft__list_empty(&s->intrs))
            deliver_interrupts(s, cur);
        sel_refresh(&a);
        result = sel_ready(&a);
        if (!NIL_P(result) || deadline == 0 ||
            (deadline != WEFT_FOREVER && weft_now() >= deadline))
            break;
        rwait rw;
        rw_begin(s, &rw, RW_IO);
        a.rw = &rw;
        memset(subs, 0, sizeof *subs * (size_t)(n ? n : 1));
        int rc = weft__wait_arm_deadline(&rw.w, deadline);
        if (rc < 0)
            weft__wait_complete(&rw.w, rc);
        rb_ensure(sel_wait_body, (VALUE)&a, sel_wait_ensure, (VALUE)&a);
        rc = rw.w.result;
        if (rc < 0 && rc != -ETIMEDOUT && rc != -EAGAIN && rc != -ECANCELED && rc != -EBADF)
            rb_syserr_fail(-rc, "select");
    }
    ALLOCV_END(ev);
    ALLOCV_END(sv);
    RB_GC_GUARD(keep);
    return result;
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
    return rc == -ETIMEDOUT || rc == -EAGAIN ? Qfalse : Qtrue; /* -EAGAIN: timeout 0 */
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

/* ---- fibers: start, end, errors ------------------------------------- */

static VALUE stop_exception(const char *why)
{
    return rb_exc_new_cstr(eStop, why);
}

/* Queue @exc for every fiber waiting in a hook and wake them all (a
 * nocancel wait is woken when its op is over). Returns how many. */
static long stop_all(rsched *s, VALUE exc)
{
    long n = 0;
    s->stops++;
    for (weft__node *a = s->all.head; a; a = a->next) {
        rwait *rw = RW_OF(a, anode);
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
    for (weft__node *a = s->all.head; a; a = a->next) {
        rwait *rw = RW_OF(a, anode);
        if (rw->w.active && !rw->w.nocancel)
            weft__wait_complete(&rw->w, -ECANCELED);
    }
    return n;
}

/* Raise (and forget) what ended fibers left: a fatal exception first,
 * else the first error. */
static void raise_pending(rsched *s)
{
    VALUE e = !NIL_P(s->fatal) ? s->fatal : s->first_error;
    s->fatal = s->first_error = Qnil;
    if (!NIL_P(e))
        rb_exc_raise(e);
}

/* The body of every scheduled fiber: the user's block. An exception that
 * ends it does not escape into whatever fiber runs next (the loop, a
 * fiber that handed off): Weft::Stop ends it quietly; SystemExit and
 * signals stop every fiber and are raised by #run / #close; any other is
 * reported on $stderr (report_on_exception) and the first one is raised
 * by #run / #close once every fiber has ended. In C rather than a Ruby
 * wrapper block: a fiber start costs ~25% less. */
struct entry_arg {
    VALUE proc;
    int argc;
    const VALUE *argv;
    bool quiet;                 /* the block of Weft.run: raised, not reported */
};

static VALUE entry_call(VALUE p)
{
    struct entry_arg *a = (struct entry_arg *)p;
    return rb_proc_call_with_block(a->proc, a->argc, a->argv, Qnil);
}

static void report_error(VALUE exc)
{
    VALUE msg = rb_sprintf("%"PRIsVALUE" terminated with exception "
                           "(report_on_exception is true):\n",
                           rb_inspect(rb_fiber_current()));
    VALUE opts = rb_hash_new();
    rb_hash_aset(opts, ID2SYM(rb_intern("highlight")), Qfalse);
    VALUE full = rb_funcallv_kw(exc, id_full_message, 1, &opts, RB_PASS_KEYWORDS);
    rb_str_append(msg, rb_obj_as_string(full));
    rb_io_write(rb_stderr, msg);
}

static VALUE report_body(VALUE exc)
{
    report_error(exc);
    return Qnil;
}

static VALUE entry_failed(VALUE p, VALUE exc)
{
    struct entry_arg *a = (struct entry_arg *)p;
    if (rb_obj_is_kind_of(exc, eStop))
        return Qnil;
    VALUE sched = rb_fiber_scheduler_get();
    if (NIL_P(sched) || !rb_typeddata_is_kind_of(sched, &sched_type))
        rb_exc_raise(exc); /* not ours any more: as Ruby would */
    rsched *s = get_raw(sched);
    if (rb_obj_is_kind_of(exc, rb_eSystemExit) ||
        rb_obj_is_kind_of(exc, rb_eSignal)) {
        if (NIL_P(s->fatal))
            s->fatal = exc;
        if (s->r_live)
            stop_all(s, stop_exception("stopped: another fiber raised SystemExit or a signal"));
        return Qnil;
    }
    if (NIL_P(s->first_error))
        s->first_error = exc;
    if (s->report && !a->quiet) {
        int state = 0;
        rb_protect(report_body, exc, &state); /* a closed $stderr loses nothing else */
        if (state)
            rb_set_errinfo(Qnil);
    }
    return Qnil;
}

static VALUE entry_body(VALUE p)
{
    return rb_rescue2(entry_call, p, entry_failed, p, rb_eException, (VALUE)0);
}

/* The fiber has ended: it is no longer one of the scheduler's own. */
static VALUE entry_done(VALUE p)
{
    (void)p;
    VALUE sched = rb_fiber_scheduler_get();
    if (!NIL_P(sched) && rb_typeddata_is_kind_of(sched, &sched_type)) {
        st_data_t key = (st_data_t)rb_fiber_current();
        st_delete(get_raw(sched)->own, &key, NULL);
    }
    return Qnil;
}

static VALUE entry_run(VALUE proc, int argc, const VALUE *argv, bool quiet)
{
    struct entry_arg a = {proc, argc, argv, quiet};
    return rb_ensure(entry_body, (VALUE)&a, entry_done, (VALUE)&a);
}

static VALUE fiber_entry(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, proc))
{
    (void)yielded;
    (void)blockarg;
    return entry_run(proc, argc, argv, false);
}

static VALUE fiber_entry_quiet(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, proc))
{
    (void)yielded;
    (void)blockarg;
    return entry_run(proc, argc, argv, true);
}

/* Fiber.schedule resumes the new fiber (see "switching"): it runs in the
 * caller's resume chain until its first wait or its end. */
struct start_arg {
    rsched *s;
    VALUE fiber;
    int argc;
    const VALUE *argv;
    VALUE saved;
    bool saved_chained;
};

/* A fiber suspended in Fiber.schedule's resume is not waiting in a hook,
 * so stop_all cannot reach it: if the fibers were stopped while it was
 * suspended (the new fiber raised Interrupt or SystemExit before its first
 * wait), it is stopped here as they were — a scheduled starter with
 * Weft::Stop, a blocking one (the thread's own fiber) with the signal or
 * exit itself, as if it had arrived there. */
static VALUE start_body(VALUE p)
{
    struct start_arg *a = (struct start_arg *)p;
    rsched *s = a->s;
    unsigned stops = s->stops;
    s->entered = a->fiber;
    s->entered_chained = true;
    rb_fiber_resume(a->fiber, a->argc, a->argv);
    if (s->stops != stops) {
        if (!RTEST(rb_funcall(rb_fiber_current(), id_blocking_p, 0)))
            rb_exc_raise(stop_exception("stopped: a fiber it started raised SystemExit or a signal"));
        if (!NIL_P(s->fatal)) {
            VALUE e = s->fatal;
            s->fatal = Qnil;
            rb_exc_raise(e);
        }
    }
    return Qnil;
}

static VALUE start_restore(VALUE p)
{
    struct start_arg *a = (struct start_arg *)p;
    a->s->entered = a->saved;
    a->s->entered_chained = a->saved_chained;
    return Qnil;
}

static VALUE start_fiber(VALUE self, int argc, VALUE *argv, bool quiet)
{
    rsched *s = get_sched(self);
    if (!rb_block_given_p())
        rb_raise(rb_eArgError, "Weft::Scheduler#fiber needs a block");
    VALUE proc = rb_block_proc();
    VALUE body = rb_proc_new(quiet ? fiber_entry_quiet : fiber_entry, proc);
    VALUE fiber = rb_funcall_with_block(cFiber, id_new, 0, NULL, body);
    st_insert(s->own, (st_data_t)fiber, 1);
    /* Both stay on this stack until Fiber#initialize has taken the block:
     * the passed block is no GC root, and Fiber.new allocates (under
     * GC.stress on Ruby 3.3 a collected @body crashed Fiber#initialize). */
    RB_GC_GUARD(proc);
    RB_GC_GUARD(body);
    struct start_arg a = {s, fiber, argc, argv, s->entered, s->entered_chained};
    rb_ensure(start_body, (VALUE)&a, start_restore, (VALUE)&a);
    return fiber;
}

/* fiber(*args) { |*args| ... }: Fiber.schedule — start a non-blocking
 * fiber now, passing it @args; returns when it first waits or ends. */
static VALUE s_fiber(int argc, VALUE *argv, VALUE self)
{
    return start_fiber(self, argc, argv, false);
}

/* _fiber_quiet { }: the same for a fiber whose exception the caller raises
 * itself (Weft.run's block): recorded for #run, not reported. */
static VALUE s_fiber_quiet(VALUE self)
{
    return start_fiber(self, 0, NULL, true);
}

/* run: drive the loop until no fiber waits, then raise what the fibers
 * left (see entry_failed). */
static VALUE s_run(VALUE self)
{
    rsched *s = get_sched(self);
    run_loop(s, NULL, Qnil);
    raise_pending(s);
    return Qnil;
}

/* _run_until(fiber): drive the loop until @fiber has ended (other fibers
 * may still wait). */
static VALUE s_run_until(VALUE self, VALUE fiber)
{
    rsched *s = get_sched(self);
    if (!rb_obj_is_kind_of(fiber, cFiber))
        rb_raise(rb_eTypeError, "not a Fiber");
    if (RTEST(rb_fiber_alive_p(fiber)))
        run_loop(s, NULL, fiber);
    return Qnil;
}

static bool thread_aborting(VALUE thread)
{
    VALUE st = rb_funcall(thread, id_status, 0);
    return RB_TYPE_P(st, T_STRING) && strcmp(StringValueCStr(st), "aborting") == 0;
}

/* Forget every waiting fiber without running it (a third close attempt):
 * their waits belong to an old epoch from now on, so nothing they do
 * touches this scheduler. */
static void abandon_fibers(rsched *s)
{
    s->epoch++;
    s->all = s->ready = (weft__list){NULL, NULL};
    st_clear(s->waiting);
    st_clear(s->own);
    if (s->pins)
        st_clear(s->pins);
    s->npins = 0;
    free_heap_intrs(s);
}

/* scheduler_close / close: run every fiber to its end, release the
 * reactor, then raise what the fibers left. When the owner thread is
 * being killed, or an earlier close was interrupted (a second Ctrl-C),
 * every fiber is first stopped with Weft::Stop (its ensure clauses run);
 * a third attempt gives up on the fibers still waiting. */
static VALUE s_close(VALUE self)
{
    rsched *s = get_raw(self);
    if (s->closed || !s->r_live)
        return Qnil;
    if (!s->bound && s->thread != rb_thread_current()) {
        finalize(s); /* never used: no fiber to run */
        return Qnil;
    }
    s = get_sched(self);
    if (s->running) {
        s->close_pending = true;
        return Qnil;
    }
    s->closing++;
    if (s->closing > 2) {
        abandon_fibers(s);
    } else {
        if (s->closing == 2 || thread_aborting(s->thread))
            stop_all(s, stop_exception("scheduler closed"));
        run_loop(s, NULL, Qnil);
    }
    if (s->r_live)
        finalize(s);
    raise_pending(s);
    return Qnil;
}

static VALUE s_closed_p(VALUE self)
{
    rsched *s = get_raw(self);
    return s->closed || !s->r_live ? Qtrue : Qfalse;
}

static VALUE s_report_get(VALUE self)
{
    return get_raw(self)->report ? Qtrue : Qfalse;
}

static VALUE s_report_set(VALUE self, VALUE v)
{
    get_raw(self)->report = RTEST(v);
    return v;
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
        if (weft__timer_arm(&s->r, &ri.timer, deadline) < 0) {
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
struct pin_arg {
    rsched *s;
    VALUE fiber;
};

static VALUE pin_body(VALUE p)
{
    (void)p;
    return rb_yield(Qnil);
}

static VALUE pin_release(VALUE p)
{
    struct pin_arg *a = (struct pin_arg *)p;
    rsched *s = a->s;
    st_data_t key = (st_data_t)a->fiber, depth;
    if (!s->pins || !st_lookup(s->pins, key, &depth))
        return Qnil; /* forgotten since (abandoned fibers) */
    if (depth > 1)
        st_insert(s->pins, key, depth - 1);
    else
        st_delete(s->pins, &key, NULL);
    s->npins--;
    return Qnil;
}

/*
 * exclusive { ... } -> the block's value
 *
 * Runs the block in the current fiber so that, while it waits for I/O, a
 * timer, a file operation or sleep, no other fiber of this scheduler
 * runs: the event loop runs on this fiber until its wait is over, and
 * fibers that became ready meanwhile run after the block. A wait that
 * only another fiber can end (Mutex, Queue, ConditionVariable, join)
 * still lets the others run, or it could never end. Nests; without a
 * scheduler loop it simply yields.
 *
 * Weft uses it around Kernel#require, #require_relative and #load on
 * Ruby 3.1, whose autoload and require treat a load begun by another fiber
 * of the same thread as finished (lib/weft/scheduler.rb).
 */
static VALUE s_exclusive(VALUE self)
{
    rb_need_block();
    rsched *s = get_sched(self);
    struct pin_arg a = {s, rb_fiber_current()};
    if (!s->pins)
        s->pins = st_init_numtable();
    st_data_t depth = 0;
    st_lookup(s->pins, (st_data_t)a.fiber, &depth);
    st_insert(s->pins, (st_data_t)a.fiber, depth + 1);
    s->npins++;
    return rb_ensure(pin_body, (VALUE)&a, pin_release, (VALUE)&a);
}

static VALUE s_stop(VALUE self, VALUE exc)
{
    rsched *s = get_sched(self);
    if (!rb_obj_is_kind_of(exc, rb_eException))
        rb_raise(rb_eTypeError, "not an exception");
    return LONG2NUM(stop_all(s, exc));
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
    for (weft__node *n = s->ready.head; n; n = n->next)
        ready++;
    for (weft__node *n = s->all.head; n; n = n->next)
        all++;
    rb_hash_aset(h, ID2SYM(rb_intern("waits")), SIZET2NUM(s->r_live ? s->r.nwaits : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("fd_waits")), SIZET2NUM(s->r_live ? s->r.nfd_waits : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("timers")), SIZET2NUM(s->r_live ? weft__reactor_timers(&s->r) : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("waiting_fibers")), SIZET2NUM(all));
    rb_hash_aset(h, ID2SYM(rb_intern("ready")), SIZET2NUM(ready));
    rb_hash_aset(h, ID2SYM(rb_intern("pid")), INT2NUM(s->pid));
    rb_hash_aset(h, ID2SYM(rb_intern("ring_ops")), ULL2NUM(s->ring_ops));
    rb_hash_aset(h, ID2SYM(rb_intern("ops_inflight")),
                 SIZET2NUM(s->r_live ? s->r.ops_inflight : 0));
    rb_hash_aset(h, ID2SYM(rb_intern("running")), s->running ? Qtrue : Qfalse);
    return h;
}

void weft__http_init(void); /* http.c: Weft::HTTP, for Weft::Server */

RUBY_FUNC_EXPORTED void Init_weft(void)
{
    rb_gc_register_address(&basic_socket);
    static int atfork_done;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, atfork_child);
        atfork_done = 1;
    }
    id_new = rb_intern("new");
    id_closed_p = rb_intern("closed?");
    id_full_message = rb_intern("full_message");
    id_status = rb_intern("status");
    id_blocking_p = rb_intern("blocking?");
    cFiber = rb_const_get(rb_cObject, rb_intern("Fiber"));
    rb_gc_register_mark_object(cFiber);
    eFiberError = rb_const_get(rb_cObject, rb_intern("FiberError"));
    rb_gc_register_mark_object(eFiberError);
    /* IO::TimeoutError (Ruby >= 3.2): what IO#timeout raises */
    eIOTimeout = Qnil;
    if (rb_const_defined(rb_cIO, rb_intern("TimeoutError"))) {
        eIOTimeout = rb_const_get(rb_cIO, rb_intern("TimeoutError"));
        rb_gc_register_mark_object(eIOTimeout);
    }
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
    rb_define_method(cScheduler, "_io_pwrite_string", s_io_pwrite_string, 3);
    rb_define_method(cScheduler, "io_select", s_io_select, -1);
    rb_define_method(cScheduler, "kernel_sleep", s_kernel_sleep, -1);
    rb_define_method(cScheduler, "block", s_block, -1);
    rb_define_method(cScheduler, "unblock", s_unblock, 2);
    rb_define_method(cScheduler, "fiber", s_fiber, -1);
    rb_define_method(cScheduler, "_fiber", s_fiber, -1);
    rb_define_method(cScheduler, "_fiber_quiet", s_fiber_quiet, 0);
    rb_define_method(cScheduler, "_run_until", s_run_until, 1);
    rb_define_method(cScheduler, "report_on_exception", s_report_get, 0);
    rb_define_method(cScheduler, "report_on_exception=", s_report_set, 1);
    rb_define_method(cScheduler, "stop", s_stop, 1);
    rb_define_method(cScheduler, "run", s_run, 0);
    rb_define_method(cScheduler, "close", s_close, 0);
    rb_define_method(cScheduler, "scheduler_close", s_close, 0);
    rb_define_method(cScheduler, "closed?", s_closed_p, 0);
    rb_define_method(cScheduler, "timeout_after", s_timeout_after, -1);
    rb_define_method(cScheduler, "fiber_interrupt", s_fiber_interrupt, 2);
    rb_define_method(cScheduler, "stats", s_stats, 0);
    rb_define_method(cScheduler, "exclusive", s_exclusive, 0);
    rb_define_singleton_method(cScheduler, "pidfd_open", s_pidfd_open, 1);
    rb_define_singleton_method(cScheduler, "_set_offset_encoding",
                               s_set_offset_encoding, 2);
    weft__http_init();
}
