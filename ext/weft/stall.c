/*
 * stall.c — the stall watchdog's sampler, for Scheduler#stall_ms.
 *
 * A Ruby thread (lib/weft/dump.rb) waits in _stall_wait without the GVL:
 * every period it samples the loop thread's switch counter and whether it
 * is blocked in the backend. A counter that stays the same for stall_ms
 * while the loop thread is not in the backend is a stall: _stall_wait
 * returns and the thread reports it, with the backtrace of the code that
 * stalls. The loop pays nothing for it beyond the counter every switch
 * bumps anyway.
 *
 * That backtrace has to be taken while the stall goes on, and the
 * watchdog cannot take it itself then: the stalling loop holds the GVL,
 * and Ruby hands it over only at the end of a 100 ms time slice (so a
 * stall of 80 ms at stall_ms 50 would be counted and never reported).
 * So the sampler asks the loop thread for it: it sends that thread a
 * signal of its own (a real-time one nobody handles), whose handler only
 * triggers a postponed job, and Ruby runs the job in that thread at its
 * next interrupt check, inside the stall: the job takes the running
 * fiber and its backtrace (_stall_taken gives them to the watchdog). A
 * loop stalled in a system call outside the GVL gives the GVL up, and the
 * watchdog then takes the backtrace from its own thread as before.
 */
#include "rsched.h"

#include <errno.h>
#include <signal.h>
#include <time.h>
#include <ruby/debug.h>

static VALUE sym_stall, sym_ended;
static ID id_stall_label;

/* The stall watchdog's state (rsched.stall). */
struct rstall {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t ns;           /* stall_ms in ns; 0: off                     */
    bool stop;            /* closed (or stopped): _stall_wait returns nil */
    bool pending;         /* a stall was reported and has not ended     */
    bool watching;        /* a thread samples (in _stall_wait)          */
    uint64_t seq;         /* its switch count                           */
    int64_t first;        /* when that count was first seen             */
    uint64_t count;       /* stalls detected                            */
    bool want;            /* the loop thread was asked for stall want_seq */
    uint64_t want_seq;
    /* What the loop thread took in the stall (with the GVL: no lock). */
    uint64_t taken_seq;
    VALUE taken_fiber;    /* the fiber that stalls (false: the loop)    */
    VALUE taken_trace;    /* its backtrace, or nil                      */
    VALUE taken_label;    /* its name then (_stall_label), or nil       */
};

/* The signal the sampler sends the loop thread (0: none could be had),
 * and the postponed job its handler triggers. */
static int stall_signo;
static pthread_once_t stall_sig_once = PTHREAD_ONCE_INIT;
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
static rb_postponed_job_handle_t stall_job_handle = POSTPONED_JOB_HANDLE_INVALID;
#endif

void weft__rb_stall_mark(const rsched *s)
{
    if (s->stall) {
        rb_gc_mark(s->stall->taken_fiber);
        rb_gc_mark(s->stall->taken_trace);
        rb_gc_mark(s->stall->taken_label);
    }
}

uint64_t weft__rb_stall_count(const rsched *s)
{
    return s->stall ? __atomic_load_n(&s->stall->count, __ATOMIC_ACQUIRE) : 0;
}

static void stall_init(struct rstall *w)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &a);
    pthread_condattr_destroy(&a);
    pthread_mutex_init(&w->mu, NULL);
}

void weft__rb_stall_stop(rsched *s)
{
    struct rstall *w = s->stall;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* In a forked child: the watchdog thread is gone; its lock may be held. */
void weft__rb_stall_fork(rsched *s)
{
    if (s->stall) {
        stall_init(s->stall);
        s->stall->pending = false;
        s->stall->want = false;
    }
}

/* ---- the backtrace taken by the loop thread ---------------------------- */

struct wanting {
    pthread_t self;
    int n;
    VALUE obj[8];
};

/* Under the registry's lock: a scheduler of this thread whose watchdog
 * asked for a stall's backtrace. */
static void find_wanting(rsched *s, void *arg)
{
    struct wanting *a = arg;
    if (a->n < 8 && s->stall && s->pid == getpid() && pthread_equal(s->tid, a->self) &&
        __atomic_load_n(&s->stall->want, __ATOMIC_ACQUIRE))
        a->obj[a->n++] = s->self;
}

static VALUE label_call(VALUE a)
{
    const VALUE *v = (const VALUE *)a;
    return rb_funcall(v[0], id_stall_label, 1, v[1]);
}

/* The postponed job, in the loop thread with the GVL: for each of its
 * schedulers that asked, if the stall still goes on (no switch since),
 * the fiber running, its backtrace and its name (a server connection's
 * says the request it serves, which changes once the stall is over).
 * The objects found stay alive on this stack while these allocate. */
static void stall_job(void *arg)
{
    (void)arg;
    struct wanting a = {.self = pthread_self()};
    weft__rb_sched_each(find_wanting, &a);
    for (int i = 0; i < a.n; i++) {
        rsched *s = weft__rb_get_raw(a.obj[i]);
        struct rstall *w = s->stall;
        pthread_mutex_lock(&w->mu);
        bool want = w->want;
        uint64_t seq = w->want_seq;
        w->want = false;
        pthread_mutex_unlock(&w->mu);
        if (!want || __atomic_load_n(&s->switches, __ATOMIC_RELAXED) != seq)
            continue; /* it switched: over before the job could run */
        VALUE fiber = NIL_P(s->oncpu) ? Qfalse : s->oncpu;
        w->taken_trace = w->taken_label = Qnil;
        w->taken_fiber = fiber;
        w->taken_seq = seq;
        w->taken_trace = rb_make_backtrace();
        VALUE args[2] = {a.obj[i], fiber};
        int state = 0;
        VALUE label = rb_protect(label_call, (VALUE)args, &state);
        if (state)
            rb_set_errinfo(Qnil); /* named later, from the watchdog */
        else
            w->taken_label = label;
    }
    RB_GC_GUARD(a.obj[0]);
}

static void stall_on_signal(int sig)
{
    (void)sig;
    int saved = errno;
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
    rb_postponed_job_trigger(stall_job_handle);
#else
    rb_postponed_job_register_one(0, stall_job, NULL);
#endif
    errno = saved;
}

/* Once per process, with the GVL: the highest real-time signal that has
 * no handler becomes the watchdog's. None free: stall_signo stays 0 and
 * the watchdog takes backtraces as it can. */
static void stall_sig_install(void)
{
#ifdef HAVE_RB_POSTPONED_JOB_PREREGISTER
    stall_job_handle = rb_postponed_job_preregister(0, stall_job, NULL);
    if (stall_job_handle == POSTPONED_JOB_HANDLE_INVALID)
        return;
#endif
    for (int sig = SIGRTMAX; sig > SIGRTMAX - 8 && sig >= SIGRTMIN; sig--) {
        struct sigaction cur;
        if (sigaction(sig, NULL, &cur) != 0 || cur.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = stall_on_signal;
        sa.sa_flags = SA_RESTART;
        sigfillset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) {
            stall_signo = sig;
            return;
        }
    }
}

struct watch {
    rsched *s;
    int kind;             /* 0: stopped, 1: stall, 2: ended            */
    uint64_t seq;
    int64_t ran;
};

static void *watch_nogvl(void *p)
{
    struct watch *a = p;
    rsched *s = a->s;
    struct rstall *w = s->stall;
    uint64_t last = 0;
    int64_t first = 0;
    bool have = false;
    pthread_mutex_lock(&w->mu);
    w->watching = true;
    while (!w->stop && w->ns > 0) {
        int64_t period = w->ns / 5;
        if (period < 1000000)
            period = 1000000;
        if (period > 100000000)
            period = 100000000;
        int64_t until = weft_now() + period;
        struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop || w->ns <= 0)
            break;
        int64_t t = weft_now();
        uint64_t seq = __atomic_load_n(&s->switches, __ATOMIC_RELAXED);
        bool idle = __atomic_load_n(&s->idle, __ATOMIC_RELAXED);
        bool live = __atomic_load_n(&s->bound, __ATOMIC_RELAXED) &&
                    __atomic_load_n(&s->r_live, __ATOMIC_RELAXED);
        if (w->pending && seq != w->seq) {
            w->pending = false;
            a->kind = 2;
            a->seq = w->seq;
            a->ran = t - w->first;
            break;
        }
        if (!live || idle) {
            have = false;
            continue;
        }
        if (!have || seq != last) {
            have = true;
            last = seq;
            first = t;
            continue;
        }
        if (!w->pending && seq != w->seq && t - first >= w->ns) {
            w->pending = true;
            w->seq = seq;
            w->first = first;
            if (stall_signo && s->pid == getpid()) {
                /* The loop thread is alive: its scheduler is open (a
                 * thread's end closes it, which stops this first). */
                w->want_seq = seq;
                __atomic_store_n(&w->want, true, __ATOMIC_RELEASE);
                pthread_kill(s->tid, stall_signo);
            }
            /* Counted once the signal is on its way: code that sees the
             * count has the signal pending in its thread. */
            __atomic_store_n(&w->count, w->count + 1, __ATOMIC_RELEASE);
            a->kind = 1;
            a->seq = seq;
            a->ran = t - first;
            break;
        }
    }
    w->watching = false;
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void watch_ubf(void *p)
{
    struct watch *a = p;
    struct rstall *w = a->s->stall;
    pthread_mutex_lock(&w->mu);
    w->stop = true; /* interrupted (Thread#kill): the watchdog ends */
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* _stall_set(ns): stall_ms in ns, 0 off. */
static VALUE s_stall_set(VALUE self, VALUE ns)
{
    rsched *s = weft__rb_get_raw(self);
    int64_t v = NUM2LL(ns);
    if (!s->stall) {
        if (v <= 0)
            return Qnil;
        s->stall = ZALLOC(struct rstall);
        s->stall->taken_fiber = s->stall->taken_trace = s->stall->taken_label = Qnil;
        stall_init(s->stall);
    }
    if (v > 0)
        pthread_once(&stall_sig_once, stall_sig_install);
    pthread_mutex_lock(&s->stall->mu);
    s->stall->ns = v > 0 ? v : 0;
    s->stall->stop = s->closed || !s->r_live; /* closed: stays stopped */
    pthread_cond_broadcast(&s->stall->cv);
    pthread_mutex_unlock(&s->stall->mu);
    return Qnil;
}

/* _stall_wait -> [:stall, seq, ran_ns] (a new stall, going on now),
 * [:ended, seq, ran_ns] (a reported stall is over), or nil (stopped:
 * closed, turned off or interrupted). */
static VALUE s_stall_wait(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    if (!s->stall)
        return Qnil;
    struct watch a = {s, 0, 0, 0};
    rb_thread_call_without_gvl(watch_nogvl, &a, watch_ubf, &a);
    if (a.kind == 0)
        return Qnil;
    return rb_ary_new_from_args(3, a.kind == 1 ? sym_stall : sym_ended, ULL2NUM(a.seq), LL2NUM(a.ran));
}

/* _stall_watching? -> whether the watchdog thread is sampling now. */
static VALUE s_stall_watching(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    if (!s->stall)
        return Qfalse;
    pthread_mutex_lock(&s->stall->mu);
    bool on = s->stall->watching;
    pthread_mutex_unlock(&s->stall->mu);
    return on ? Qtrue : Qfalse;
}

/* _stall_fiber(seq) -> the fiber running now if the loop thread has not
 * switched since stall @seq (else nil). */
static VALUE s_stall_fiber(VALUE self, VALUE seq)
{
    rsched *s = weft__rb_get_raw(self);
    if (__atomic_load_n(&s->switches, __ATOMIC_RELAXED) != NUM2ULL(seq))
        return Qnil;
    return NIL_P(s->oncpu) ? Qfalse : s->oncpu;
}

/* _stall_taken(seq) -> [fiber or false, backtrace, name or nil] that the
 * loop thread took during stall @seq, or nil (not asked, not yet run, or
 * too late).
 * Either way the loop thread is no longer asked for it. */
static VALUE s_stall_taken(VALUE self, VALUE seqv)
{
    rsched *s = weft__rb_get_raw(self);
    struct rstall *w = s->stall;
    uint64_t seq = NUM2ULL(seqv);
    if (!w)
        return Qnil;
    pthread_mutex_lock(&w->mu);
    if (w->want_seq == seq)
        w->want = false;
    pthread_mutex_unlock(&w->mu);
    if (w->taken_seq != seq || NIL_P(w->taken_trace))
        return Qnil;
    VALUE r = rb_ary_new_from_args(3, w->taken_fiber, w->taken_trace, w->taken_label);
    w->taken_fiber = w->taken_trace = w->taken_label = Qnil;
    return r;
}

void weft__rb_init_stall(VALUE klass)
{
    sym_stall = ID2SYM(rb_intern("stall"));
    sym_ended = ID2SYM(rb_intern("ended"));
    id_stall_label = rb_intern("_stall_label");
    rb_define_method(klass, "_stall_set", s_stall_set, 1);
    rb_define_method(klass, "_stall_wait", s_stall_wait, 0);
    rb_define_method(klass, "_stall_fiber", s_stall_fiber, 1);
    rb_define_method(klass, "_stall_taken", s_stall_taken, 1);
    rb_define_method(klass, "_stall_watching?", s_stall_watching, 0);
}
