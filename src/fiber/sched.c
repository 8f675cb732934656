/*
 * sched.c — fibers on top of the reactor.
 *
 * A fiber's control block lives at the top of its own stack mapping, so a
 * parked fiber that has used little stack costs a single page. Handles are
 * (index, generation) pairs into a slot table, so stale handles are caught.
 * Switches go fiber to fiber directly; the loop's own context (the thread's
 * stack) runs only when nothing is runnable or every WEFT__POLL_TICKS
 * switches, to poll for I/O and timers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#ifdef WEFT_VALGRIND
#include <valgrind/memcheck.h>
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef WEFT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#define DEFAULT_STACK ((size_t)64 * 1024)
#define MIN_STACK ((size_t)16 * 1024)
#define MAX_STACK ((size_t)1 << 30)

enum { SLOT_FREE = 0, SLOT_LIVE = 1, SLOT_FINISHED = 2, SLOT_DETACHED = 3 };

__thread weft_sched_t *weft__tls_sched __attribute__((tls_model("initial-exec")));

weft__fiber *weft__current(void)
{
    weft_sched_t *s = weft__tls_sched;
    if (!s || s->current->is_main)
        return NULL;
    return s->current;
}

int weft_in_fiber(void) { return weft__current() != NULL; }

/* ---- run queue ---------------------------------------------------------- */

static inline void rq_push(weft_sched_t *s, weft__fiber *f)
{
    f->state = WEFT__F_READY;
    f->next = NULL;
    f->stamp = s->r.stamp;
    if (s->rq_tail)
        s->rq_tail->next = f;
    else
        s->rq_head = f;
    s->rq_tail = f;
}

static inline weft__fiber *rq_pop(weft_sched_t *s)
{
    weft__fiber *f = s->rq_head;
    if (f) {
        s->rq_head = f->next;
        if (!s->rq_head)
            s->rq_tail = NULL;
    }
    return f;
}

void weft__fiber_wake(weft__wait *w)
{
    weft__fiber *f = w->owner;
    /* A wait completed while being armed (a past deadline, a ready fd)
     * belongs to a fiber that is still running: nothing to wake. */
    if (f->state == WEFT__F_BLOCKED)
        rq_push(weft__tls_sched, f); /* its own: waits complete on its thread */
}

int weft__fiber_keep_arm(weft__fiber *f, weft__wait *w, int64_t deadline)
{
    if (WEFT_UNLIKELY(deadline <= 0))
        return weft__wait_arm_later(w, deadline);
    if (f->kept_at == 0) { /* idle: (re)initialised here, not at spawn */
        f->keeper.idx = WEFT__TIMER_IDLE;
        f->keeper.fire = weft__fiber_keeper_fired;
    }
    int rc = weft__wait_keep(w, &f->keeper, deadline);
    weft__fiber_kept_sync(f);
    return rc;
}

/* A fiber's keeper fired (weft__wait_keep): the wait it is blocked in, if
 * any, is the one whose deadline it may stand for. */
void weft__fiber_keeper_fired(weft__timer *t)
{
    weft__fiber *f = weft__container(t, weft__fiber, keeper);
    weft__keeper_fired(&f->sched->r, t, f->state == WEFT__F_BLOCKED ? f->wait : NULL);
    weft__fiber_kept_sync(f);
}

/* ---- switching ---------------------------------------------------------- */

/* The stack of a fiber that finished and could not cache it itself (see
 * fiber_finish): released by the next context, off that stack. */
static void release_zombie(weft_sched_t *s)
{
    weft__fiber *z = s->zombie;
    s->zombie = NULL;
#ifdef WEFT_TSAN
    __tsan_destroy_fiber(z->tsan_fiber);
#endif
    weft__stack_put(&s->stacks, &z->stack);
}

static inline void after_switch(weft_sched_t *s, weft__fiber *self)
{
#ifdef WEFT_ASAN
    __sanitizer_finish_switch_fiber(self->asan_fake, NULL, NULL);
#else
    (void)self;
#endif
    if (WEFT_UNLIKELY(s->zombie != NULL))
        release_zombie(s);
}

/* What every switch into @to does before the jump: @to becomes the
 * running fiber, and the sanitizers learn of the stack change (@from: the
 * fiber leaving, whose fake stack ASan keeps; NULL when it never runs
 * again). Always inlined: after __tsan_switch_to_fiber nothing may return
 * through an instrumented frame before the switch (TSan's function-exit
 * hook would run on the new fiber's shadow stack and crash). */
static inline __attribute__((always_inline)) void switch_to(weft_sched_t *s,
                                                            weft__fiber *from,
                                                            weft__fiber *to)
{
    (void)from;
    s->current = to;
    to->state = WEFT__F_RUNNING;
    /* Relaxed atomic: a plain store, which the watchdog may read. */
    __atomic_store_n(&s->switches, s->switches + 1, __ATOMIC_RELAXED);
#ifdef WEFT_ASAN
    const void *lo;
    size_t size;
    if (to->is_main) {
        lo = s->main_stack_lo;
        size = s->main_stack_size;
    } else {
        lo = to->stack.base + to->stack.guard;
        size = to->stack.map_size - to->stack.guard;
    }
    __sanitizer_start_switch_fiber(from ? &from->asan_fake : NULL, lo, size);
#endif
#ifdef WEFT_TSAN
    __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
}

/* switch_to, after asking whether the stall watchdog (dump.c) flagged the
 * fiber now leaving: it has run too long. One load of a line every switch
 * touches anyway. */
static inline __attribute__((always_inline)) void switch_in(weft_sched_t *s,
                                                            weft__fiber *from,
                                                            weft__fiber *to)
{
    if (WEFT_UNLIKELY(atomic_load_explicit(&s->stall_flag, memory_order_relaxed)))
        weft__stall_note(s, s->current);
    switch_to(s, from, to);
}

static inline void do_switch(weft_sched_t *s, weft__fiber *from, weft__fiber *to)
{
    switch_in(s, from, to);
    weft__ctx_switch(&from->ctx, &to->ctx);
    after_switch(s, from);
}

/* The last switch of a finished fiber: its context is not saved, and
 * fiber_finish has asked the watchdog's flag already (a flag raised since
 * is dropped by weft__stall_note as a stall that ended). */
static _Noreturn void exit_switch(weft_sched_t *s, weft__fiber *to)
{
    switch_to(s, NULL, to);
    weft__ctx_exit(&to->ctx);
}

/* The next context to run after the current fiber stops running. */
static inline weft__fiber *next_to_run(weft_sched_t *s)
{
    if (s->rq_head && ++s->tick < WEFT__POLL_TICKS)
        return rq_pop(s);
    return &s->main;
}

/* Inlined at both callers: when the compiler kept it out of line, a
 * channel round trip paid two more calls (bench/sync_bench chan). */
static inline __attribute__((always_inline)) void switch_away(weft_sched_t *s,
                                                              weft__fiber *self)
{
    weft__fiber *n = next_to_run(s);
    if (n != self)
        do_switch(s, self, n);
    else
        self->state = WEFT__F_RUNNING;
}

/* A timeout scope (scope.c) bounds every wait of its fiber: a wait whose
 * own deadline is later (or absent) ends at the scope's deadline with
 * -ETIMEDOUT. */
static void scope_clamp(weft__wait *w, int64_t scope)
{
    if (w->timer.idx != WEFT__TIMER_IDLE && w->timer.deadline <= scope)
        return;
    int rc = weft__wait_rearm_deadline(w, scope);
    if (rc < 0)
        weft__wait_complete(w, rc);
}

/* The saved stack pointer of a context switched away from. */
static inline const char *ctx_sp(const weft__ctx *c)
{
#if defined(WEFT_CTX_UCONTEXT)
    (void)c;
    return NULL;
#elif defined(__x86_64__)
    return (const char *)(uintptr_t)c->r[1];
#else
    return (const char *)(uintptr_t)c->r[12];
#endif
}

/*
 * A fiber that blocks on I/O hands the thread to the next ready one; with a
 * thousand connections, each resumed fiber's record, wait and parked stack
 * frames have left the cache since it last ran, a dozen misses before it
 * does anything. So, as one fiber blocks, warm the fiber after the next:
 * its parked stack (the frames the resume will pop) and its wait, from its
 * record, which the previous block warmed; and the record of the one
 * after it. The next fiber's own lines are already on their way (it runs
 * now). Only I/O waits do this (a channel or mutex ping-pong, with a few
 * fibers, has its lines in cache).
 */
static inline void warm_ahead(const weft_sched_t *s)
{
    const weft__fiber *n1 = s->rq_head, *n2 = n1 ? n1->next : NULL;
    if (!n2)
        return;
    const char *sp = ctx_sp(&n2->ctx);
    if (sp)
        for (int i = 0; i < 8; i++)
            __builtin_prefetch(sp + 64 * i);
    if (n2->wait) {
        __builtin_prefetch(n2->wait);
        __builtin_prefetch((const char *)n2->wait + 64);
    }
    if (n2->next) {
        __builtin_prefetch(n2->next);
        __builtin_prefetch((const char *)n2->next + 64);
    }
}

int weft__block(weft__wait *w, int kind, const void *obj)
{
    weft_sched_t *s = weft__tls_sched;
    weft__fiber *f = s->current;
    if (WEFT_UNLIKELY(f->scope_deadline != 0) && w->active && !w->nocancel)
        scope_clamp(w, f->scope_deadline);
    if (w->active) {
        /* What it waits for, for dumps: on the record's line written
         * below anyway. */
        f->wait_kind = (uint16_t)kind;
        f->wait_obj = obj;
        f->stamp = s->r.stamp;
        f->wait = w;
        f->state = WEFT__F_BLOCKED;
        if ((kind & 0xff) == WEFT_WAIT_FD)
            warm_ahead(s);
        switch_away(s, f);
        f->wait = NULL;
    }
    return w->result;
}

/* Out of line: the clock read inlined into weft_yield() made it save two
 * more registers on every yield. */
__attribute__((noinline, cold)) int weft__precheck_scope(const weft__fiber *f)
{
    return f->scope_deadline <= weft_now() ? -ETIMEDOUT : 0;
}

/* ---- handles ------------------------------------------------------------ */

static inline weft_fiber_t handle_of(weft_sched_t *s, uint32_t idx)
{
    return (weft_fiber_t){((uint64_t)s->slots[idx].gen << 32) | (idx + 1)};
}

/* The fiber of a live or detached slot; NULL once it has finished. */
static inline weft__fiber *slot_fiber(const weft__slot *sl)
{
    return sl->state == SLOT_LIVE || sl->state == SLOT_DETACHED ? sl->u.fiber : NULL;
}

static weft__slot *slot_lookup(weft_sched_t *s, weft_fiber_t h)
{
    if (!s)
        return NULL;
    uint32_t idx = (uint32_t)h.id - 1;
    uint32_t gen = (uint32_t)(h.id >> 32);
    if (h.id == 0 || idx >= s->nslots)
        return NULL;
    weft__slot *sl = &s->slots[idx];
    if (sl->gen != gen || sl->state == SLOT_FREE)
        return NULL;
    return sl;
}

static int slot_alloc(weft_sched_t *s, uint32_t *out)
{
    if (s->free_slot != UINT32_MAX) {
        *out = s->free_slot;
        s->free_slot = s->slots[*out].u.next_free;
        return 0;
    }
    if (s->nslots == s->slot_cap) {
        if (s->slot_cap >= UINT32_MAX / 2)
            return -ENOMEM;
        uint32_t ncap = s->slot_cap ? s->slot_cap * 2 : 256;
        if (s->sobs) { /* made by the first weft_fiber_set_name */
            weft__slot_obs *no = realloc(s->sobs, (size_t)ncap * sizeof *no);
            if (!no)
                return -ENOMEM;
            memset(no + s->slot_cap, 0, (size_t)(ncap - s->slot_cap) * sizeof *no);
            s->sobs = no;
        }
        weft__slot *ns = realloc(s->slots, (size_t)ncap * sizeof *ns);
        if (!ns)
            return -ENOMEM;
        s->slots = ns;
        s->slot_cap = ncap;
    }
    *out = s->nslots++;
    s->slots[*out].gen = 1;
    s->slots[*out].joining = 0;
    return 0;
}

static void slot_free(weft_sched_t *s, uint32_t idx)
{
    weft__slot *sl = &s->slots[idx];
    if (sl->state == SLOT_LIVE || sl->state == SLOT_FINISHED)
        s->handles--;
    sl->state = SLOT_FREE;
    if (++sl->gen == 0)
        sl->gen = 1;
    sl->u.next_free = s->free_slot;
    s->free_slot = idx;
}

/* ---- fiber-local storage ------------------------------------------------ */

static atomic_uint fls_count;
static void (*_Atomic fls_dtors[WEFT_FLS_MAX])(void *);

int weft_fls_key_create(weft_fls_key_t *key, void (*destructor)(void *))
{
    if (!key)
        return -EINVAL;
    unsigned n = atomic_load(&fls_count);
    do {
        if (n >= WEFT_FLS_MAX)
            return -EAGAIN;
    } while (!atomic_compare_exchange_weak(&fls_count, &n, n + 1));
    atomic_store(&fls_dtors[n], destructor);
    *key = n;
    return 0;
}

int weft_fls_set(weft_fls_key_t key, void *value)
{
    weft__fiber *f = weft__current();
    if (!f)
        return -EPERM;
    if (key >= atomic_load(&fls_count))
        return -EINVAL;
    if (!f->fls) {
        if (!value)
            return 0;
        f->fls = calloc(WEFT_FLS_MAX, sizeof(void *));
        if (!f->fls)
            return -ENOMEM;
    }
    f->fls[key] = value;
    return 0;
}

void *weft_fls_get(weft_fls_key_t key)
{
    weft__fiber *f = weft__current();
    if (!f || !f->fls || key >= WEFT_FLS_MAX)
        return NULL;
    return f->fls[key];
}

static void fls_run_destructors(weft__fiber *f)
{
    if (!f->fls)
        return;
    for (int round = 0; round < 4; round++) {
        bool any = false;
        for (unsigned k = 0; k < WEFT_FLS_MAX; k++) {
            void *v = f->fls[k];
            void (*d)(void *) = atomic_load(&fls_dtors[k]);
            if (v && d) {
                f->fls[k] = NULL;
                d(v);
                any = true;
            }
        }
        if (!any)
            break;
    }
    free(f->fls);
    f->fls = NULL;
}

/* ---- fiber life --------------------------------------------------------- */

static _Noreturn void fiber_finish(weft_sched_t *s, weft__fiber *f, void *res)
{
    if (WEFT_UNLIKELY(s->forked)) {
        /* A fork child returning from the fiber that forked: the other
         * fibers are the parent's and must not run here. The child ends
         * as if its main() had returned. */
        exit(0);
    }
    /* Before the stack cache reuses the record's spawn_ra (stack.next). */
    if (WEFT_UNLIKELY(atomic_load_explicit(&s->stall_flag, memory_order_relaxed)))
        weft__stall_note(s, f);
    fls_run_destructors(f);
    /* Its name, if it has one (not in weft_spawn: a call there would make
     * the fast path save registers). */
    if (WEFT_UNLIKELY(s->nnames != 0))
        weft__name_drop(s, f->slot);
    weft__slot *sl = &s->slots[f->slot];
    if (sl->state == SLOT_DETACHED) {
        slot_free(s, f->slot);
    } else {
        sl->state = SLOT_FINISHED;
        sl->u.result = res;
    }
    if (f->joiner)
        weft__wait_complete(f->joiner, 0);
    if (f->kept_at)
        weft__keeper_disarm(&s->r, &f->keeper);
    s->live--;
    f->state = WEFT__F_DEAD;
    weft__fiber *n = next_to_run(s);
    /* Fibers that finish one after another are usually a batch of new
     * ones: warm the record of the one after the next (its line and TLB
     * entry) while the next runs. Not in rq_pop: a yield or a wake-up
     * would pay for it too. */
    if (s->rq_head)
        __builtin_prefetch(s->rq_head, 1);
    /* Cache the stack now, from its own record: nothing can take it
     * before we have left it. Otherwise (an odd size, a full cache: to be
     * unmapped; a TSan fiber to destroy) the next context releases it. */
#ifndef WEFT_TSAN
    if (WEFT_LIKELY(weft__stack_cacheable(&s->stacks, &f->stack)))
        weft__stack_keep(&s->stacks, &f->stack);
    else
#endif
        s->zombie = f;
    exit_switch(s, n);
}

static void fiber_entry(void *p)
{
    weft__fiber *f = p;
    weft_sched_t *s = f->sched;
    after_switch(s, f);
    void *res = f->fn(f->arg);
    fiber_finish(s, f, res);
}

/*
 * Stack placement against cache and TLB aliasing. Stacks are mapped one
 * after another, so with 64 KiB stacks and 64 KiB guards every fiber's
 * top sat at the same page offset (the same L1 set: 8 ways for all fibers'
 * hottest line) and 32 pages from the next (a stride that reaches only a
 * quarter of a 128-set TLB). A spare page in each mapping makes the stride
 * odd, and the fiber record, with the frames below it, starts up to 2 KiB
 * below the top in 64-byte steps: within the top page, so a parked fiber
 * still touches one page. The step is the stack's color, a hash of its
 * address: fixed for the stack, so a fiber spawned on a cached stack puts
 * its record and first frames on the lines its predecessor used, still in
 * cache (a color that cycled with each spawn made every reuse touch new
 * lines). The usable stack is at least what was asked for.
 */
#define STACK_COLOR_BITS 5 /* 32 colors */
#define STACK_COLOR_STEP 64
static inline size_t stack_color(const char *base)
{
    uint64_t h = ((uint64_t)(uintptr_t)base >> 12) * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> (64 - STACK_COLOR_BITS));
}
static size_t stack_map_size(size_t usable)
{
    return usable + weft__page_size() + weft__guard_size();
}

/* Make the fiber on a stack it now owns (@st: copied out first, it may lie
 * where the record goes) with handle slot @idx, and queue it. */
static inline __attribute__((always_inline)) void
spawn_on(weft_sched_t *s, weft_fn_t fn, void *arg, weft_fiber_t *out,
         uint32_t idx, const weft__stack *st, const void *ra)
{
    /* The descriptor in scalars: a cached one lies where the record is
     * about to be written, and a struct copy went through the spawner's
     * stack (a load after the record's stores, at the same page offset:
     * 4 KiB aliasing). */
    char *base = st->base;
    size_t map_size = st->map_size;
    uint32_t guard = st->guard;
    unsigned vg_id = st->vg_id;
    char *lo = base + guard;
#ifdef WEFT_ASAN
    __asan_unpoison_memory_region(lo, map_size - guard);
#endif
    size_t fsz = (sizeof(weft__fiber) + 63) & ~(size_t)63;
    weft__fiber *f = (weft__fiber *)(base + map_size - fsz -
                                     STACK_COLOR_STEP * stack_color(base));
#ifdef WEFT_VALGRIND
    /* A cached stack: the record (and the first frame below it) may now
     * lie where the previous fiber's frames were, below the stack pointer
     * Valgrind last saw there. The whole stack is fresh. (The request is
     * a dozen instructions even natively: made only under Valgrind.) */
    if (WEFT_UNLIKELY(s->on_valgrind))
        VALGRIND_MAKE_MEM_UNDEFINED(lo, map_size - guard);
#endif
    /* Zero the (64-byte aligned) block with vector stores: gcc turns a
     * memset of this size into `rep stos`, whose start-up cost shows in
     * every spawn (bench/core_spawn warm). */
    typedef uint64_t zero16 __attribute__((vector_size(16)));
#pragma GCC unroll 16
    for (size_t i = 0; i < fsz / sizeof(zero16); i++)
        ((zero16 *)(void *)f)[i] = (zero16){0, 0};
    f->sched = s;
    f->fn = fn;
    f->arg = arg;
    f->stack.spawn_ra = ra;
    f->stack.base = base;
    f->stack.map_size = map_size;
    f->stack.guard = guard;
    f->stack.vg_id = vg_id;
    f->slot = idx;
    weft__ctx_make(&f->ctx, lo, (size_t)((char *)f - lo), fiber_entry, f);
#ifdef WEFT_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
    weft__slot *sl = &s->slots[idx];
    sl->u.fiber = f;
    sl->state = out ? SLOT_LIVE : SLOT_DETACHED;
    if (out) {
        s->handles++;
        *out = handle_of(s, idx);
    }
    s->live++;
    if (WEFT_UNLIKELY(s->live > s->peak_live))
        s->peak_live = s->live;
    s->spawned++;
    rq_push(s, f);
}

/* weft_sched_self(), saying why it has none: 0 with *@out the calling
 * thread's scheduler, or weft_sched_create()'s error (-EMFILE, -EINVAL for
 * an unknown WEFT_BACKEND...), not a blanket -ENOMEM. */
static int sched_self_err(weft_sched_t **out)
{
    *out = weft__tls_sched;
    return *out ? 0 : weft_sched_create(out, NULL);
}

/* Every case weft_spawn does not take inline: no scheduler yet, a stack
 * size given, no free slot (the table grows), no cached stack (a new
 * mapping), errors. */
static __attribute__((noinline)) int spawn_slow(weft_fn_t fn, void *arg,
                                                const weft_spawn_opts_t *opts,
                                                weft_fiber_t *out, const void *ra)
{
    if (!fn)
        return -EINVAL;
    weft_sched_t *s;
    int err = sched_self_err(&s);
    if (err < 0)
        return err;
    size_t map_size = s->stacks.map_size; /* the default size's */
    if (opts && opts->stack_size) {
        size_t page = weft__page_size(), want = opts->stack_size;
        if (want < MIN_STACK || want > MAX_STACK)
            return -EINVAL;
        map_size = stack_map_size((want + page - 1) & ~(page - 1));
    }
    uint32_t idx;
    int rc = slot_alloc(s, &idx);
    if (rc < 0)
        return rc;
    weft__stack *cached = weft__stack_pop(&s->stacks, map_size), st;
    if (!cached) {
        rc = weft__stack_map(&s->stacks, map_size, &st);
        if (rc < 0) {
            s->slots[idx].state = SLOT_LIVE; /* so slot_free keeps counts right */
            s->handles++;
            slot_free(s, idx);
            return rc;
        }
        cached = &st;
    }
    spawn_on(s, fn, arg, out, idx, cached, ra);
    return 0;
}

/* Inline here: the default stack size with a free slot and a cached
 * stack, which calls nothing (so saves no registers); else spawn_slow. */
int weft_spawn(weft_fn_t fn, void *arg, const weft_spawn_opts_t *opts,
               weft_fiber_t *out)
{
    weft_sched_t *s = weft__tls_sched;
    const void *ra = __builtin_return_address(0); /* the spawn site */
    if (WEFT_UNLIKELY(!fn || !s || (opts && opts->stack_size) ||
                      s->free_slot == UINT32_MAX || !s->stacks.head))
        return spawn_slow(fn, arg, opts, out, ra);
    uint32_t idx = s->free_slot;
    s->free_slot = s->slots[idx].u.next_free;
    spawn_on(s, fn, arg, out, idx, weft__stack_pop(&s->stacks, s->stacks.map_size), ra);
    return 0;
}

weft_fiber_t weft_self(void)
{
    weft__fiber *f = weft__current();
    if (!f)
        return (weft_fiber_t){0};
    return handle_of(f->sched, f->slot);
}

int weft_yield(void)
{
    int rc = weft__precheck_in(weft__tls_sched, WEFT_FOREVER);
    if (rc < 0)
        return rc;
    weft_sched_t *s = weft__tls_sched;
    weft__fiber *f = s->current;
    rq_push(s, f);
    switch_away(s, f);
    return f->cancelled ? -ECANCELED : 0;
}

static int wait_deadline(int64_t deadline, bool park)
{
    weft_sched_t *s = weft__tls_sched;
    weft__fiber *f = s->current;
    weft__wait w;
    weft__wait_init(&w, &s->r, weft__fiber_wake, f);
    int rc = weft__wait_arm_deadline(&w, deadline);
    if (rc < 0) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    f->parked = park;
    rc = weft__block(&w, park ? WEFT_WAIT_PARK : WEFT_WAIT_SLEEP, NULL);
    f->parked = 0;
    return rc;
}

int weft_sleep_until(int64_t deadline)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    rc = wait_deadline(deadline, false);
    /* A timeout scope may cut the sleep short: that is -ETIMEDOUT. Known
     * from the deadlines, not the clock: a loop that wakes late (a loaded
     * machine) finds both passed, and the scope's still ended the sleep
     * (weft__block clamped its timer to it). */
    int64_t scope = weft__tls_sched->current->scope_deadline;
    if (rc == -ETIMEDOUT && scope != 0 && (deadline == WEFT_FOREVER || scope < deadline))
        return rc;
    return rc == -ETIMEDOUT || rc == -EAGAIN ? 0 : rc;
}

int weft_sleep(int64_t ns)
{
    if (ns < 0)
        return -EINVAL;
    return weft_sleep_until(weft_deadline_in(ns));
}

int weft_park(int64_t deadline)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    weft__fiber *f = weft__tls_sched->current;
    if (f->permit) {
        f->permit = 0;
        return 0;
    }
    return wait_deadline(deadline, true);
}

static int unpark_local(weft_sched_t *s, weft_fiber_t h)
{
    weft__slot *sl = slot_lookup(s, h);
    weft__fiber *f = sl ? slot_fiber(sl) : NULL;
    if (!f)
        return -ESRCH;
    if (f->state == WEFT__F_BLOCKED && f->parked && f->wait)
        weft__wait_complete(f->wait, 0);
    else
        f->permit = 1;
    return 0;
}

typedef struct remote_unpark {
    weft_sched_t *s;
    weft_fiber_t h;
} remote_unpark;

static void remote_unpark_cb(void *p)
{
    remote_unpark *ru = p;
    (void)unpark_local(ru->s, ru->h);
    free(ru);
}

int weft_unpark(weft_sched_t *s, weft_fiber_t h)
{
    if (!s)
        s = weft__tls_sched;
    if (!s || h.id == 0)
        return -ESRCH;
    if (s == weft__tls_sched)
        return unpark_local(s, h);
    remote_unpark *ru = malloc(sizeof *ru);
    if (!ru)
        return -ENOMEM;
    ru->s = s;
    ru->h = h;
    int rc = weft__reactor_post(&s->r, remote_unpark_cb, ru);
    if (rc < 0)
        free(ru);
    return rc;
}

int weft_cancel(weft_fiber_t h)
{
    weft_sched_t *s = weft__tls_sched;
    weft__slot *sl = slot_lookup(s, h);
    if (!sl)
        return -ESRCH;
    weft__fiber *f = slot_fiber(sl);
    if (!f)
        return 0; /* finished */
    f->cancelled = 1;
    if (f->state == WEFT__F_BLOCKED && f->wait && !f->wait->nocancel)
        weft__wait_complete(f->wait, -ECANCELED);
    return 0;
}

int weft_cancelled(void)
{
    weft__fiber *f = weft__current();
    return f && f->cancelled;
}

int weft_join(weft_fiber_t h, void **result, int64_t deadline)
{
    weft_sched_t *s = weft__tls_sched;
    int rc = weft__precheck_in(s, deadline);
    if (rc < 0)
        return rc;
    weft__slot *sl = slot_lookup(s, h);
    if (!sl)
        return -ESRCH;
    if (sl->state == SLOT_DETACHED)
        return -EINVAL;
    if (slot_fiber(sl) == s->current)
        return -EDEADLK;
    if (sl->joining)
        return -EINVAL; /* another fiber is joining it */
    if (sl->state == SLOT_LIVE) {
        weft__fiber *f = sl->u.fiber;
        weft__wait w;
        weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
        rc = weft__wait_arm_deadline(&w, deadline);
        if (rc < 0) {
            weft__wait_complete(&w, rc);
            return rc;
        }
        f->joiner = &w;
        sl->joining = 1; /* until we resume, even if it finishes first */
        rc = weft__block(&w, WEFT_WAIT_JOIN, (const void *)(uintptr_t)h.id);
        /* The table may have moved; the slot is still ours (joining). */
        sl = &s->slots[(uint32_t)h.id - 1];
        sl->joining = 0;
        if (rc < 0) {
            if (sl->state == SLOT_LIVE && sl->u.fiber->joiner == &w)
                sl->u.fiber->joiner = NULL;
            return rc;
        }
    }
    if (result)
        *result = sl->u.result;
    slot_free(s, (uint32_t)h.id - 1);
    return 0;
}

int weft_detach(weft_fiber_t h)
{
    weft_sched_t *s = weft__tls_sched;
    weft__slot *sl = slot_lookup(s, h);
    if (!sl)
        return -ESRCH;
    if (sl->state == SLOT_DETACHED || sl->joining)
        return -EINVAL; /* detached, or a fiber is joining it */
    if (sl->state == SLOT_FINISHED) {
        slot_free(s, (uint32_t)h.id - 1);
    } else {
        sl->state = SLOT_DETACHED;
        s->handles--;
    }
    return 0;
}

/* ---- scheduler ---------------------------------------------------------- */

/* After fork() the child must not touch the parent's ring, epoll set or
 * eventfd: it starts with no scheduler (see weft_sched_create). */
static void atfork_child(void)
{
    weft_sched_t *s = weft__tls_sched;
    if (!s)
        return;
    weft__reactor_abandon(&s->r);
    weft__overflow_remove(s);
    s->forked = true;
    weft__tls_sched = NULL;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void) { pthread_atfork(NULL, NULL, atfork_child); }

/*
 * A thread that ends without weft_sched_destroy() (a worker that called
 * weft_run() and returned) would leave its scheduler for good: the ring or
 * epoll set, the wake-up descriptor, the cached stacks. Its thread-specific
 * value destroys it at the thread's exit, when it can (no fiber alive:
 * otherwise it is left as before). The main thread's exit(3) runs no such
 * destructor; the process ends anyway.
 */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static bool exit_key_ok;

static void destroy_at_thread_exit(void *p)
{
    if (weft__tls_sched == p)
        (void)weft_sched_destroy(p);
}

static void exit_key_make(void)
{
    exit_key_ok = pthread_key_create(&exit_key, destroy_at_thread_exit) == 0;
}

int weft_sched_create(weft_sched_t **out, const weft_sched_opts_t *opts)
{
    pthread_once(&atfork_once, atfork_register);
    if (!out)
        return -EINVAL;
    if (weft__tls_sched)
        return -EEXIST;
    weft_sched_opts_t o = {0};
    if (opts)
        o = *opts;
    if (o.stack_size && (o.stack_size < MIN_STACK || o.stack_size > MAX_STACK))
        return -EINVAL;
    if ((unsigned)o.backend > WEFT_BACKEND_IO_URING)
        return -EINVAL;
    weft_sched_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    size_t page = weft__page_size();
    s->default_stack = o.stack_size ? (o.stack_size + page - 1) & ~(page - 1)
                                    : DEFAULT_STACK;
    s->stacks.limit = o.stack_cache ? o.stack_cache : 1024;
    s->stacks.map_size = stack_map_size(s->default_stack);
    s->free_slot = UINT32_MAX;
    s->owner = pthread_self();
    s->main.is_main = 1;
    s->main.state = WEFT__F_RUNNING;
    s->main.sched = s;
    s->current = &s->main;
#ifdef WEFT_VALGRIND
    s->on_valgrind = RUNNING_ON_VALGRIND != 0;
#endif
    int rc = weft__reactor_init(&s->r, o.backend);
    if (rc < 0) {
        free(s);
        return rc;
    }
#ifdef WEFT_ASAN
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *lo;
        size_t size;
        if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
            s->main_stack_lo = lo;
            s->main_stack_size = size;
        }
        pthread_attr_destroy(&attr);
    }
#endif
#ifdef WEFT_TSAN
    s->main.tsan_fiber = __tsan_get_current_fiber();
#endif
    if (!o.no_overflow_handler && !getenv("WEFT_NO_OVERFLOW_HANDLER"))
        weft__overflow_install(s);
    atomic_init(&s->idle, 1);
    s->r.stamp = weft_now();
    weft__tls_sched = s;
    weft__obs_init(s);
    pthread_once(&exit_once, exit_key_make);
    if (exit_key_ok)
        (void)pthread_setspecific(exit_key, s);
    *out = s;
    return 0;
}

static inline int64_t loop_now(void)
{
    const weft_sched_t *s = weft__tls_sched;
    return s && s->running ? s->r.stamp : weft_now();
}

int64_t weft_loop_now(void)
{
    return loop_now();
}

int64_t weft_loop_deadline_in(int64_t ns)
{
    return weft__deadline_after(ns < 0 ? 0 : loop_now(), ns);
}

weft_sched_t *weft_sched_self(void)
{
    weft_sched_t *s = weft__tls_sched;
    if (!s && weft_sched_create(&s, NULL) < 0)
        return NULL;
    return s;
}

/* Ready -> running delay, sampled once per loop iteration (each poll of
 * the reactor): the fiber at the head of the run queue, the one that has
 * waited longest, at the loop clock's resolution (a bucket by the delay's
 * bit length). Not per dispatch: that cost every spawn and yield. */
static inline void sample_delay(weft_sched_t *s)
{
    weft__fiber *f = s->rq_head;
    if (!f)
        return;
    int64_t d = s->r.stamp - f->stamp;
    s->delay_hist[63 - __builtin_clzll((uint64_t)d | 1)]++;
    if (d > s->delay_max)
        s->delay_max = d;
}

int weft_sched_run(weft_sched_t *s)
{
    if (!s)
        return -EINVAL;
    if (s != weft__tls_sched || !s->current->is_main)
        return -EPERM;
    if (s->running)
        return -EBUSY;
    s->running = true;
    s->run_t0 = weft_now();
    s->r.stamp = s->run_t0; /* weft_loop_now() before the first iteration */
    atomic_store_explicit(&s->idle, 0, memory_order_relaxed);
    int rc = 0;
    for (;;) {
        if (s->rq_head) {
            if (s->tick >= WEFT__POLL_TICKS) {
                s->tick = 0;
                rc = weft__reactor_run_once(&s->r, false);
                if (rc < 0)
                    break;
                sample_delay(s);
                if (WEFT_UNLIKELY(s->obs_pending ||
                                  atomic_load_explicit(&s->dump_req, memory_order_relaxed)))
                    weft__obs_loop(s);
            }
            do_switch(s, &s->main, rq_pop(s));
            continue;
        }
        /* Ops abandoned to the kernel (cancelled polls) complete soon:
         * collect them so nothing is left in flight; and a post that
         * arrived while the last fibers ran is run before returning. */
        if (s->live == 0 && s->r.ops_inflight == 0) {
            if (atomic_load(&s->r.posted) == 0)
                break;
            if ((rc = weft__reactor_run_once(&s->r, false)) < 0)
                break;
            continue;
        }
        s->tick = 0;
        atomic_store_explicit(&s->idle, 1, memory_order_relaxed);
        rc = weft__reactor_run_once(&s->r, true);
        atomic_store_explicit(&s->idle, 0, memory_order_relaxed);
        if (rc < 0)
            break;
        sample_delay(s);
        if (WEFT_UNLIKELY(s->obs_pending ||
                          atomic_load_explicit(&s->dump_req, memory_order_relaxed)))
            weft__obs_loop(s);
    }
    atomic_store_explicit(&s->idle, 1, memory_order_relaxed);
    if (WEFT_UNLIKELY(s->obs_pending))
        weft__obs_loop(s); /* a stall of the last fiber */
    s->run_ns += weft_now() - s->run_t0;
    s->running = false;
    return rc;
}

int weft_sched_destroy(weft_sched_t *s)
{
    if (!s)
        return -EINVAL;
    if (s != weft__tls_sched)
        return -EPERM;
    if (s->running || s->live || !s->current->is_main)
        return -EBUSY;
    weft__obs_fini(s);
    weft__reactor_fini(&s->r);
    if (s->io_fini)
        s->io_fini(s);
    weft__stack_cache_fini(&s->stacks);
    for (uint32_t i = 0; s->sobs && i < s->nslots; i++)
        free(s->sobs[i].name);
    free(s->sobs);
    free(s->slots);
    weft__overflow_remove(s);
    weft__tls_sched = NULL;
    if (exit_key_ok)
        (void)pthread_setspecific(exit_key, NULL);
    free(s);
    return 0;
}

const char *weft_sched_backend(const weft_sched_t *s)
{
    return s ? s->r.ops->name : NULL;
}

int weft_sched_post(weft_sched_t *s, void (*fn)(void *), void *arg)
{
    if (!s || !fn)
        return -EINVAL;
    return weft__reactor_post(&s->r, fn, arg);
}

int weft_run(weft_fn_t fn, void *arg, void **result)
{
    weft_sched_t *s;
    int err = sched_self_err(&s);
    if (err < 0)
        return err;
    /* weft_sched_run()'s refusals, before @fn is spawned: from a fiber
     * (or a posted callback) it would run as one more fiber of the loop
     * already running, its handle never joined. */
    if (!s->current->is_main)
        return -EPERM;
    if (s->running)
        return -EBUSY;
    weft_fiber_t h;
    int rc = weft_spawn(fn, arg, NULL, &h);
    if (rc < 0)
        return rc;
    rc = weft_sched_run(s);
    if (rc < 0)
        return rc;
    weft__slot *sl = slot_lookup(s, h);
    if (sl && sl->state == SLOT_FINISHED) {
        if (result)
            *result = sl->u.result;
        slot_free(s, (uint32_t)h.id - 1);
    }
    return 0;
}
