/*
 * stall.c — the stall watchdog's sampler, for Scheduler#stall_ms.
 *
 * A Ruby thread (lib/weft/dump.rb) waits in _stall_wait without the GVL:
 * every period it samples the loop thread's switch counter and whether it
 * is blocked in the backend. A counter that stays the same for stall_ms
 * while the loop thread is not in the backend is a stall: _stall_wait
 * returns, the thread takes the GVL (Ruby hands it over at the spinning
 * fiber's next time-slice end), takes the loop thread's backtrace — still
 * inside the stall, which it checks with _stall_fiber — and reports. The
 * loop pays nothing for it beyond the counter every switch bumps anyway.
 */
#include "rsched.h"

#include <time.h>

static VALUE sym_stall, sym_ended;

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
};

uint64_t weft__rb_stall_count(const rsched *s)
{
    return s->stall ? s->stall->count : 0;
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
            w->count++;
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
        stall_init(s->stall);
    }
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

void weft__rb_init_stall(VALUE klass)
{
    sym_stall = ID2SYM(rb_intern("stall"));
    sym_ended = ID2SYM(rb_intern("ended"));
    rb_define_method(klass, "_stall_set", s_stall_set, 1);
    rb_define_method(klass, "_stall_wait", s_stall_wait, 0);
    rb_define_method(klass, "_stall_fiber", s_stall_fiber, 1);
    rb_define_method(klass, "_stall_watching?", s_stall_watching, 0);
}
