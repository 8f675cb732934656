/*
 * scheduler.c — the Weft::Scheduler object: its TypedData (mark, compact,
 * free), its life across fork, the thread it belongs to, #initialize,
 * #close and #stats, and Init_weft, which defines the class and has every
 * other file define its hooks (rsched.h lists the files).
 */
#include "rsched.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

VALUE weft__rb_eError, weft__rb_eStop, weft__rb_cFiber;
volatile unsigned weft__rb_fork_generation;
static ID id_status;

static void atfork_child(void) { weft__rb_fork_generation++; }

/* ---- TypedData ------------------------------------------------------- */

static int mark_own_value(st_data_t k, st_data_t v, st_data_t arg)
{
    (void)k;
    (void)arg;
    if (v > 1)
        rb_gc_mark((VALUE)v);
    return ST_CONTINUE;
}

/* Whether the IO last seen on @fd is kept alive: one with waiters or a
 * writer holding the descriptor (their waits end with it, and the sweep
 * and the dump ask it), or the one the current hook is about to wait on
 * (fd_prepare, then its wait: an allocation between them may collect).
 * Any other is forgotten at each collection, and its descriptor is
 * classified again when next seen: keeping it kept every IO a fiber had
 * touched, so its descriptor too, open until the scheduler ended (2,000
 * `File.open(path).read` in a fiber left 2,000 files open after
 * GC.start, where a thread leaves none). Another thread's collection may
 * read the wait lists while the loop reaps without the GVL; the loop
 * only removes waits there, so "none" is never wrong. */
static bool fd_held(const rsched *s, int fd)
{
    return fd == s->hot_fd || !NIL_P(s->fdi[fd].w_owner) ||
           (s->r_live && fd < s->r.nfds && !weft__list_empty(&s->r.fds[fd].waits));
}

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
        if (fd_held(s, i))
            rb_gc_mark_movable(s->fdi[i].io);
        else
            s->fdi[i].io = Qnil;
        rb_gc_mark_movable(s->fdi[i].w_owner);
    }
    rb_gc_mark_movable(s->first_error);
    rb_gc_mark_movable(s->fatal);
    /* Compared with the current fiber: kept alive so that no new fiber can
     * take a dead one's address while these still hold it. */
    rb_gc_mark_movable(s->entered);
    rb_gc_mark_movable(s->chain);
    rb_gc_mark_movable(s->lw_fiber);
    rb_gc_mark_movable(s->oncpu);
    weft__rb_stall_mark(s);
    /* The fibers this scheduler started, and their blocks (#dump lists
     * them): pinned, they are keys. */
    if (s->own)
        rb_mark_set(s->own);
    if (s->own)
        st_foreach(s->own, mark_own_value, 0);
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
    s->chain = rb_gc_location(s->chain);
    s->lw_fiber = rb_gc_location(s->lw_fiber);
    s->oncpu = rb_gc_location(s->oncpu);
    s->self = rb_gc_location(s->self);
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
    weft__rb_sched_unregister(s);
    weft__rb_stall_stop(s);
    xfree(s->stall);
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
    s->chain = Qnil;
    s->first_error = Qnil;
    s->fatal = Qnil;
    s->lw_fiber = Qnil;
    s->lw_fd = -1;
    s->hot_fd = -1;
    s->ea_fiber = Qnil;
    s->sw_fiber = Qnil;
    s->nw_fiber = Qnil;
    s->ea_fd = -1;
    s->report = true;
    s->waiting = st_init_numtable();
    s->own = st_init_numtable();
    pthread_mutex_init(&s->lock, NULL);
    s->fork_gen = weft__rb_fork_generation;
    s->pid = getpid();
    s->sweep_timer.idx = WEFT__TIMER_IDLE;
    s->self = obj;
    s->oncpu = Qnil;
    s->dump_gen = weft__rb_dump_gen;
    return obj;
}

rsched *weft__rb_get_raw(VALUE self)
{
    return rb_check_typeddata(self, &sched_type);
}

/* The scheduler @sched, or NULL if it is none of ours (nil, or another
 * class's). */
rsched *weft__rb_ours(VALUE sched)
{
    if (NIL_P(sched) || !rb_typeddata_is_kind_of(sched, &sched_type))
        return NULL;
    return weft__rb_get_raw(sched);
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
void weft__rb_fork_reset(rsched *s)
{
    s->fork_gen = weft__rb_fork_generation;
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
    s->entered = s->chain = s->lw_fiber = s->nw_fiber = Qnil;
    pthread_mutex_init(&s->lock, NULL);
    /* Abandon closes our copies of the ring/epoll set/eventfd without
     * touching the parent's; the parent's in-flight state is not walked. */
    remake_reactor(s, true, "weft: reactor re-creation after fork");
    s->running = false;
    s->loop_fiber = Qnil;
    s->sweep_timer.idx = WEFT__TIMER_IDLE; /* its heap was abandoned */
    weft__rb_stall_fork(s);
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
    s->tid = pthread_self();
}

/* Scheduler for a hook call: on the owner thread (bound at first use). */
rsched *weft__rb_get_sched(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    VALUE cur = rb_thread_current();
    if (RB_UNLIKELY(s->thread != cur))
        rebind(s, cur);
    weft__rb_check_fork(s);
    if (!s->r_live)
        rb_raise(weft__rb_eError, "scheduler is closed");
    s->bound = true;
    s->hook_seq++;
    return s;
}

/* Close the reactor: no post is accepted after `closed` is set, and the
 * ones already queued (late cross-thread unblocks) are run and freed. */
void weft__rb_finalize(rsched *s)
{
    weft__timer_disarm(&s->r, &s->sweep_timer);
    weft__rb_stall_stop(s);
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    pthread_mutex_unlock(&s->lock);
    weft__reactor_drain_posts(&s->r);
    s->r_live = false;
    weft__reactor_fini(&s->r);
}

/* ---- #initialize, #backend ---------------------------------------------- */

static VALUE s_initialize(int argc, VALUE *argv, VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    VALUE opts = Qnil;
    rb_scan_args(argc, argv, ":", &opts);
    weft_backend_t b = WEFT_BACKEND_DEFAULT;
    /* Without the option, what a thread started now would do. */
    s->report = RTEST(rb_funcall(rb_cThread, rb_intern("report_on_exception"), 0));
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
        rb_raise(weft__rb_eError, "scheduler already initialized");
    int rc = weft__reactor_init(&s->r, b);
    if (rc < 0)
        rb_syserr_fail(-rc, "weft: reactor setup (check WEFT_BACKEND)");
    s->backend = b;
    s->r_live = true;
    s->thread = rb_thread_current();
    s->tid = pthread_self();
    weft__rb_sched_register(s);
    return self;
}

static VALUE s_backend(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    return s->r_live ? rb_str_new_cstr(s->r.ops->name) : Qnil;
}

/* ---- #close ------------------------------------------------------------- */

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
    rsched *s = weft__rb_get_raw(self);
    if (s->closed || !s->r_live)
        return Qnil;
    if (!s->bound && s->thread != rb_thread_current()) {
        weft__rb_finalize(s); /* never used: no fiber to run */
        return Qnil;
    }
    s = weft__rb_get_sched(self);
    if (s->running) {
        s->close_pending = true;
        return Qnil;
    }
    s->closing++;
    if (s->closing > 2) {
        abandon_fibers(s);
    } else {
        if (s->closing == 2 || thread_aborting(s->thread))
            weft__rb_stop_all(s, weft__rb_stop_exception("scheduler closed"));
        weft__rb_run_loop(s, NULL, Qnil);
    }
    if (s->r_live)
        weft__rb_finalize(s);
    weft__rb_raise_pending(s);
    return Qnil;
}

static VALUE s_closed_p(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    return s->closed || !s->r_live ? Qtrue : Qfalse;
}

static VALUE s_report_get(VALUE self)
{
    return weft__rb_get_raw(self)->report ? Qtrue : Qfalse;
}

static VALUE s_report_set(VALUE self, VALUE v)
{
    weft__rb_get_raw(self)->report = RTEST(v);
    return v;
}

/* _child_waits! -> nil: a fiber of this scheduler waits for a child (called
 * by #process_wait); from now on each wait keeps its fiber's $? (loop.c,
 * weft__rb_wait_for). */
static VALUE s_child_waits(VALUE self)
{
    weft__rb_get_raw(self)->child_waits = true;
    return Qnil;
}

/* ---- pidfd_open, #stats, Init_weft ------------------------------------- */

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

/* {waits:, ready:, fd_waits:, timers:, pid:, ring_ops: (transfer-hook
 * ring ops submitted), ops_inflight: (records the kernel still owns),
 * running:} and the loop's health since it first ran (dump.c): iterations:,
 * busy_seconds:, wait_seconds:, utilisation:, ready_delay: {count:, p50:,
 * p99:, max:}, waits_begun: / waits_ended: per kind, timers_fired:,
 * fibers_spawned:, fibers_ended:, fibers_alive:, fibers_peak:, stalls: */
static VALUE s_stats(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    weft__rb_check_fork(s);
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
    weft__rb_stats_health(s, h);
    return h;
}

RUBY_FUNC_EXPORTED void Init_weft(void)
{
    static int atfork_done;
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, atfork_child);
        atfork_done = 1;
    }
    id_status = rb_intern("status");
    weft__rb_cFiber = rb_const_get(rb_cObject, rb_intern("Fiber"));
    rb_gc_register_mark_object(weft__rb_cFiber);
    VALUE mWeft = rb_define_module("Weft");
    weft__rb_eError = rb_define_class_under(mWeft, "Error", rb_eStandardError);
    /* Raised in waiting fibers by Scheduler#stop (see lib/weft/scheduler.rb) */
    weft__rb_eStop = rb_define_class_under(mWeft, "Stop", rb_eException);
    VALUE cScheduler = rb_define_class_under(mWeft, "Scheduler", rb_cObject);
    rb_define_alloc_func(cScheduler, s_alloc);
    rb_define_method(cScheduler, "initialize", s_initialize, -1);
    rb_define_method(cScheduler, "backend", s_backend, 0);
    rb_define_method(cScheduler, "report_on_exception", s_report_get, 0);
    rb_define_method(cScheduler, "report_on_exception=", s_report_set, 1);
    rb_define_method(cScheduler, "close", s_close, 0);
    rb_define_method(cScheduler, "scheduler_close", s_close, 0);
    rb_define_method(cScheduler, "closed?", s_closed_p, 0);
    rb_define_method(cScheduler, "stats", s_stats, 0);
    rb_define_private_method(cScheduler, "_child_waits!", s_child_waits, 0);
    rb_define_singleton_method(cScheduler, "pidfd_open", s_pidfd_open, 1);
    weft__rb_init_loop(cScheduler);
    weft__rb_init_intr(cScheduler);
    weft__rb_init_wait(cScheduler);
    weft__rb_init_writer(cScheduler);
    weft__rb_init_transfer(cScheduler);
    weft__rb_init_select(cScheduler);
    weft__rb_init_fiber(cScheduler);
    weft__rb_init_fileop(cScheduler);
    weft__rb_init_dump(cScheduler);
    weft__http_init();
}
