/*
 * loop.c — the ready list, the loop and switching between fibers: how a
 * fiber waits in a hook (weft__rb_rw_begin, weft__rb_rw_wait,
 * weft__rb_rw_end), how the loop fiber dispatches completed waits, how a
 * waiting fiber hands off to the next ready one, and #exclusive, which
 * keeps the others from running while one fiber waits.
 */
#include "rsched.h"

static VALUE eFiberError;
static ID id_closed_p;


/* Fibers handed off to directly before the loop gets to poll. */
#define HANDOFF_MAX 64
/* Loop dispatches between non-blocking polls while fibers stay ready. */
#define POLL_EVERY 64
/* Period of the closed-IO sweep while descriptors are waited on. */
#define SWEEP_NS (200 * 1000000LL)

/* ---- ready list and waits -------------------------------------------- */

static void rq_push(rsched *s, rwait *rw)
{
    if (rw->queued)
        return;
    rw->queued = 1;
    rw->ready_at = 0; /* stamped by the loop's next clock read */
    weft__list_push(&s->ready, &rw->rnode);
}

/* The loop read its clock: waits that became ready since its last read
 * (a suffix of the ready list: pushes go to the tail) are stamped with
 * it, so each is stamped once and the walk costs O(1) per wait. */
static void rq_stamp(rsched *s)
{
    for (weft__node *n = s->ready.tail; n; n = n->prev) {
        rwait *rw = RW_OF(n, rnode);
        if (rw->ready_at)
            break;
        rw->ready_at = s->now;
    }
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
    if (rw) {
        rq_remove(s, rw);
        weft__rb_note_resume(s, rw);
    }
    return rw;
}

/* Wake function: may run without the GVL. */
static void rw_wake(weft__wait *w)
{
    rwait *rw = w->owner;
    rq_push(rw->s, rw);
}

static const uint8_t kind_of[WAIT_NKINDS] = {
    [WAIT_FD] = RW_IO, [WAIT_RING] = RW_IO, [WAIT_FILE] = RW_IO,
    [WAIT_SELECT] = RW_IO, [WAIT_SLEEP] = RW_SLEEP, [WAIT_BLOCK] = RW_BLOCK,
    [WAIT_WRITER] = RW_BLOCK,
};

static void rw_init(rsched *s, rwait *rw, int what)
{
    memset(rw, 0, sizeof *rw);
    rw->s = s;
    rw->what = (uint8_t)what;
    rw->kind = kind_of[what];
    rw->obj = rw->behalf = Qnil;
    rw->since = s->now;
    s->st.begun[what]++;
    rw->fiber = rb_fiber_current();
    /* A fiber the scheduler did not start, waiting inside a scheduled
     * fiber's resume of it (Enumerator#next): on whose behalf. */
    if (!NIL_P(s->chain) && s->chain != rw->fiber &&
        !st_is_member(s->own, (st_data_t)rw->fiber))
        rw->behalf = s->chain;
    rw->epoch = s->epoch;
    weft__wait_init(&rw->w, &s->r, rw_wake, rw);
    weft__list_push_front(&s->all, &rw->anode);
    rw->linked = 1;
}

void weft__rb_rw_begin(rsched *s, rwait *rw, int what)
{
    rw_init(s, rw, what);
    st_insert(s->waiting, (st_data_t)rw->fiber, (st_data_t)rw);
}

void weft__rb_rw_begin_yield(rsched *s, rwait *rw, int what)
{
    rw_init(s, rw, what);
    rw->kind = RW_YIELD; /* nothing to unblock */
    rw->quick = 1;
    weft__wait_complete(&rw->w, 0);
}

void weft__rb_rw_end(rwait *rw)
{
    rsched *s = rw->s;
    if (!rw->linked)
        return;
    rw->linked = 0;
    if (rw->epoch != s->epoch)
        return; /* begun before a fork: the lists were reset */
    s->st.ended[rw->what]++;
    if (rw->w.result == -ETIMEDOUT)
        s->st.timers_fired++;
    if (rw->w.active)
        weft__wait_complete(&rw->w, -ECANCELED);
    rq_remove(s, rw);
    weft__list_remove(&s->all, &rw->anode);
    if (rw->quick)
        return;
    st_data_t key = (st_data_t)rw->fiber, val;
    if (st_lookup(s->waiting, key, &val) && (rwait *)val == rw)
        st_delete(s->waiting, &key, NULL);
}

rwait *weft__rb_waiting_of(rsched *s, VALUE fiber)
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

bool weft__rb_io_closed(VALUE io)
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
            if (!weft__list_empty(&s->r.fds[fd].waits) && !NIL_P(io) && weft__rb_io_closed(io)) {
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
    int64_t t0 = weft_now();
    __atomic_store_n(&s->idle, true, __ATOMIC_RELAXED);
    rb_nogvl(poll_nogvl, s, poll_ubf, s, RB_NOGVL_UBF_ASYNC_SAFE);
    __atomic_store_n(&s->idle, false, __ATOMIC_RELAXED);
    s->now = weft_now();
    s->st.wait_ns += s->now - t0;
    weft__rb_on_cpu(s, rb_fiber_current());
    rq_stamp(s);
    rb_thread_check_ints();
}

static void poll_blocking(rsched *s)
{
    maybe_sweep(s);
    /* Collect what is ready now without giving up the GVL: releasing and
     * re-taking it costs far more than one extra non-blocking poll. */
    s->st.iterations++;
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
    weft__rb_on_cpu(s, fiber);
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
    if (!s->st.started)
        s->st.started = weft_now();
    for (;;) {
        weft__rb_check_fork(s);
        /* The loop's clock: one read per pass (see rsched.now). */
        s->now = weft_now();
        rq_stamp(s);
        if (RB_UNLIKELY(s->dump_gen != weft__rb_dump_gen)) {
            s->dump_gen = weft__rb_dump_gen;
            weft__rb_dump_now(s);
        }
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
            weft__rb_on_cpu(s, s->loop_fiber); /* the loop runs on it */
            if ((++s->ticks % POLL_EVERY) == 0) {
                s->st.iterations++;
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


static VALUE loop_ensure(VALUE p)
{
    struct loop_arg *a = (struct loop_arg *)p;
    rsched *s = a->s;
    s->running = a->prev_running;
    s->loop_fiber = a->prev_loop;
    if (!s->running && s->close_pending && s->r_live) {
        s->close_pending = false;
        weft__rb_finalize(s);
    }
    return Qnil;
}

/* Run the loop on the current fiber until @until completes (or, NULL,
 * until nothing is left to wait for). */
void weft__rb_run_loop(rsched *s, rwait *until, VALUE until_fiber)
{
    if (s->running && rb_fiber_current() != s->loop_fiber)
        rb_raise(weft__rb_eError, "the scheduler loop is already running");
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
        s->st.iterations++;
        (void)weft__reactor_run_once(&s->r, false);
        if (rw->queued || !rw->w.active)
            continue;
        poll_sleep(s);
    }
}

static void wait_for(rsched *s, rwait *rw);

/* Switch away until @rw completes and the scheduler switches back to us.
 * Meanwhile no chain runs on this fiber's account (rsched.chain). */
static inline void wait_unchained(rsched *s, rwait *rw)
{
    s->chain = Qnil;
    wait_for(s, rw);
    s->chain = NIL_P(rw->behalf) ? rw->fiber : rw->behalf;
}

/* $? is the thread's: a fiber that waited for its child and then for
 * anything else (a query, a log line to a full pipe) read the status of
 * whichever fiber's child was waited for last, where each thread reads
 * its own. Once a fiber of this scheduler has waited for a child
 * (process_wait: the way $? changes under a scheduler), a wait that saw
 * $? change under it puts this fiber's back, as a status of the same pid
 * and value (Ruby has no call that sets the object itself, nor one that
 * makes it nil again). Out of line and cold: until then a wait pays one
 * test (two more calls and a value kept across the switch on every wait
 * cost 3% of a sleep(0) among 100 fibers and 6% among 10,000). */
static __attribute__((noinline, cold)) void wait_keeping_status(rsched *s, rwait *rw)
{
    VALUE st = rb_last_status_get();
    wait_unchained(s, rw);
    if (rb_last_status_get() != st && !NIL_P(st)) {
        VALUE status = rb_funcall(st, rb_intern("to_i"), 0);
        VALUE pid = rb_funcall(st, rb_intern("pid"), 0);
        rb_last_status_set(NUM2INT(status), NUM2PIDT(pid));
    }
    RB_GC_GUARD(st);
}

void weft__rb_wait_for(rsched *s, rwait *rw)
{
    if (RB_UNLIKELY(s->child_waits))
        wait_keeping_status(s, rw);
    else
        wait_unchained(s, rw);
}

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
        weft__rb_run_loop(s, rw, Qnil);
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
        if (mode == M_CHAINED) {
            /* Back to the fiber that resumed us (we know there is one);
             * we come back when the scheduler dispatches this wait (or
             * someone resumes us again). Not through try_yield: its
             * rb_protect frame (a jmp_buf) would stay on the stack of
             * every fiber parked at its first wait, and push one that
             * waits on a socket onto one more page (bench/ruby/idle_rss.rb). */
            s->entered = Qnil;
            rb_fiber_yield(0, NULL);
            weft__rb_on_cpu(s, self);
        } else if (mode == M_UNKNOWN) {
            /* The same, unless nobody resumed us. */
            s->entered = Qnil;
            if (!try_yield()) {
                mode = M_TRANSFER; /* nobody resumed us: transfer mode */
                continue;
            }
            weft__rb_on_cpu(s, self);
        } else if (NIL_P(s->loop_fiber)) {
            /* No loop runs (a fiber entered by transfer from user code):
             * this fiber becomes the loop until its wait is done. */
            weft__rb_run_loop(s, rw, Qnil);
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

/* ---- waiting ------------------------------------------------------------ */

VALUE weft__rb_wait_body(VALUE p)
{
    rwait *rw = (rwait *)p;
    weft__rb_wait_for(rw->s, rw);
    return Qnil;
}

static VALUE wait_ensure(VALUE p)
{
    weft__rb_rw_end((rwait *)p);
    return Qnil;
}

/* Block in @rw (begun and armed); returns its result. @yield: switch away
 * even if it already completed (sleep 0, Fiber.schedule from a fiber). */
void weft__rb_behalf_check(rsched *s, rwait *rw)
{
    if (!NIL_P(rw->behalf) && rw->w.active && !rw->w.nocancel &&
        !weft__list_empty(&s->intrs) && weft__rb_intr_pending(s, rw->behalf))
        weft__wait_complete(&rw->w, -ECANCELED);
}

int weft__rb_rw_wait(rsched *s, rwait *rw, bool yield)
{
    weft__rb_behalf_check(s, rw);
    if (!rw->w.active && !yield) {
        weft__rb_rw_end(rw);
    } else {
        rb_ensure(weft__rb_wait_body, (VALUE)rw, wait_ensure, (VALUE)rw);
    }
    if (!weft__list_empty(&s->intrs)) {
        weft__rb_deliver_interrupts(s, rw->fiber);
        if (!NIL_P(rw->behalf))
            weft__rb_deliver_interrupts(s, rw->behalf);
    }
    return rw->w.result;
}

/* ---- transfers that never wait ------------------------------------------
 *
 * A fiber whose reads and writes never have to wait (a streamed answer to
 * a client that keeps up, a socket whose peer always has data, a pipe
 * with room) never reaches the loop: nothing else runs, timers do not
 * fire, and I/O that became ready is not even looked at until it waits.
 * A thread is preempted; here weft__rb_do_io counts the transfers a fiber
 * completes in a row with no switch, and at FAIR_EVERY of them calls this
 * before the next one: the reactor is polled without blocking (timers
 * and I/O that became ready) and, if any fiber is ready, they run once
 * before this one goes on. Nothing is ready: no switch at all (a timeout
 * of this fiber's that has passed is raised). Only in a fiber this
 * scheduler switched into (an Enumerator's or a fiber the user resumed
 * would hand its resumer a value) and never inside #exclusive. */
void weft__rb_fair_turn(rsched *s, VALUE cur)
{
    s->nw_count = 0;
    if (s->entered != cur || cur == s->loop_fiber || s->npins)
        return;
    if (weft__list_empty(&s->ready)) {
        s->st.iterations++;
        (void)weft__reactor_run_once(&s->r, false);
        maybe_sweep(s);
        if (weft__list_empty(&s->ready)) {
            /* A timeout of this fiber's that has passed: raised now. */
            if (!weft__list_empty(&s->intrs) && weft__rb_intr_pending(s, cur))
                weft__rb_deliver_interrupts(s, cur);
            return;
        }
    }
    weft__rb_yield_once(s);
}

/* ---- exclusive ---------------------------------------------------------- */

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
    rsched *s = weft__rb_get_sched(self);
    struct pin_arg a = {s, rb_fiber_current()};
    if (!s->pins)
        s->pins = st_init_numtable();
    st_data_t depth = 0;
    st_lookup(s->pins, (st_data_t)a.fiber, &depth);
    st_insert(s->pins, (st_data_t)a.fiber, depth + 1);
    s->npins++;
    return rb_ensure(pin_body, (VALUE)&a, pin_release, (VALUE)&a);
}

void weft__rb_init_loop(VALUE klass)
{
    id_closed_p = rb_intern("closed?");
    eFiberError = rb_const_get(rb_cObject, rb_intern("FiberError"));
    rb_gc_register_mark_object(eFiberError);
    rb_define_method(klass, "exclusive", s_exclusive, 0);
}
