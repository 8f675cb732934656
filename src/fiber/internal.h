/*
 * internal.h — the fiber layer's contracts (not installed): the context
 * switch, stacks, the scheduler and its fibers, on top of the reactor layer
 * (reactor.h). The layers and what each may call: src/README.md.
 */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "reactor.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>


/* ------------------------------------------------------------------ */
/* Context switch                                                      */
/* ------------------------------------------------------------------ */
#if !defined(WEFT_CTX_UCONTEXT) && !defined(__x86_64__) && !defined(__aarch64__)
#define WEFT_CTX_UCONTEXT 1
#endif

#ifdef WEFT_CTX_UCONTEXT
#include <ucontext.h>
typedef struct weft__ctx {
    ucontext_t uc;
} weft__ctx;
#elif defined(__x86_64__)
/* (unused), rsp, rbx, rbp, r12-r15, then MXCSR and the x87 control word
 * (offsets 64 and 68); the resume address is on top of the saved stack. */
typedef struct weft__ctx {
    uint64_t r[8];
    uint32_t mxcsr;
    uint16_t fpucw;
    uint16_t unused;
} weft__ctx;
#else /* aarch64 */
/* x19-x28, x29, x30, sp, d8-d15, fpcr */
typedef struct weft__ctx {
    uint64_t r[22];
} weft__ctx;
#endif

/* Save the current context into @from and resume @to. */
void weft__ctx_switch(weft__ctx *from, weft__ctx *to);
#if defined(WEFT_CTX_UCONTEXT) && defined(__x86_64__)
/* Whether @c was made by weft__ctx_make and never entered (dumps). */
bool weft__ctx_is_new(const weft__ctx *c);
#endif
/* Resume @to without saving the current context, which is never resumed
 * again (a finished fiber leaving its stack). Call it through
 * weft__ctx_exit. */
_Noreturn void weft__ctx_jump(weft__ctx *to);
/* weft__ctx_jump(@to), entered on x86-64 by a jump rather than a call,
 * which would push a return stack entry that nothing takes (see
 * arch/ctx_x86_64.S). */
static inline _Noreturn void weft__ctx_exit(weft__ctx *to)
{
#if defined(__x86_64__) && !defined(WEFT_CTX_UCONTEXT)
    __asm__ volatile("jmp weft__ctx_jump" : : "D"(to) : "memory");
    __builtin_unreachable();
#else
    weft__ctx_jump(to);
#endif
}
/* Prepare @c to call @entry(@arg) on the stack [@lo, @lo + @size). @entry
 * must never return. The new context starts with the caller's
 * floating-point control state (MXCSR and x87 control word, FPCR), as a
 * new thread inherits its creator's. Inline for the assembly switch (it
 * is on the spawn path), in arch/ctx.c for ucontext. */
#ifdef WEFT_CTX_UCONTEXT
void weft__ctx_make(weft__ctx *c, void *lo, size_t size,
                    void (*entry)(void *), void *arg);
#else
/* First code run on a new stack (arch/ctx_*.S): calls entry(arg). */
void weft__ctx_trampoline(void);
static inline void weft__ctx_make(weft__ctx *c, void *lo, size_t size,
                                  void (*entry)(void *), void *arg)
{
    uintptr_t top = ((uintptr_t)lo + size) & ~(uintptr_t)15;
#if defined(__x86_64__)
    /* The switch resumes a context with `ret` (or pop + jmp): the first
     * one takes the trampoline's address and leaves rsp 16-byte aligned.
     * The control registers go straight into the context: through a
     * temporary on the stack, the load back could wait behind the stores
     * that just zeroed the fiber record (the same page offset: 4 KiB
     * aliasing). */
    top -= 8;
    *(uint64_t *)top = (uint64_t)(uintptr_t)weft__ctx_trampoline;
    c->r[0] = 0;
    c->r[1] = top;
    c->r[2] = 0;                               /* rbx */
    c->r[3] = 0;                               /* rbp: ends frame chains */
    c->r[4] = (uint64_t)(uintptr_t)entry;      /* r12 */
    c->r[5] = (uint64_t)(uintptr_t)arg;        /* r13 */
    c->r[6] = 0;
    c->r[7] = 0;
    c->unused = 0;
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(c->mxcsr), "=m"(c->fpucw));
#else /* aarch64 */
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    for (int i = 0; i < 22; i++)
        c->r[i] = 0;
    c->r[0] = (uint64_t)(uintptr_t)entry;                 /* x19 */
    c->r[1] = (uint64_t)(uintptr_t)arg;                   /* x20 */
    c->r[11] = (uint64_t)(uintptr_t)weft__ctx_trampoline; /* x30 */
    c->r[12] = top;                                       /* sp  */
    c->r[21] = fpcr;
#endif
}
#endif


/* ------------------------------------------------------------------ */
/* Stacks                                                              */
/* ------------------------------------------------------------------ */
typedef struct weft__stack {
    char *base;        /* start of the mapping (guard page first)       */
    size_t map_size;   /* whole mapping                                 */
    uint32_t guard;    /* bytes of guard at base (0 = none)             */
    unsigned vg_id;    /* Valgrind stack id                             */
    union {
        struct weft__stack *next; /* while cached: the next cached stack */
        const void *spawn_ra; /* in a live fiber's record: the return
                                 address in weft_spawn's caller (dumps)  */
    };
} weft__stack;

/* Free stacks of one size, last in first out. A cached stack's descriptor
 * lies inside that stack (in a finished fiber's record, in its top page),
 * so caching needs no memory of its own and cannot fail. */
typedef struct weft__stack_cache {
    weft__stack *head;    /* most recently cached stack, or NULL        */
    size_t n;             /* stacks cached                              */
    size_t limit;         /* max cached                                 */
    size_t map_size;      /* only stacks of this size are cached        */
    size_t unguarded;     /* stacks made without a guard                */
} weft__stack_cache;

size_t weft__page_size(void);
/* Bytes of guard below every stack: several pages, so that a frame larger
 * than a page (a big local array, without -fstack-clash-protection) still
 * lands in the guard instead of jumping it into the neighbouring stack.
 * With MADV_GUARD_INSTALL a guard costs neither memory nor a VMA. */
size_t weft__guard_size(void);
/* Map a new stack of @map_size bytes, guard included (see also
 * weft__stack_pop below). */
int weft__stack_map(weft__stack_cache *c, size_t map_size, weft__stack *out);
/* Release @st: cache it if weft__stack_cacheable, else unmap it. @st must
 * lie inside the stack it describes, and nothing may run on that stack
 * any more. */
void weft__stack_put(weft__stack_cache *c, weft__stack *st);
void weft__stack_cache_fini(weft__stack_cache *c);

/* Take a cached stack of @map_size bytes: its descriptor, which lies in
 * the stack (the caller copies it out before writing there), or NULL when
 * none is cached (then weft__stack_map). */
static inline weft__stack *weft__stack_pop(weft__stack_cache *c, size_t map_size)
{
    weft__stack *st = c->head;
    if (WEFT_LIKELY(st != NULL && map_size == c->map_size)) {
        c->head = st->next;
        c->n--;
        __builtin_prefetch(c->head, 1); /* the next spawn's: its record's
                                         * line and TLB entry */
        return st;
    }
    return NULL;
}

/* Would weft__stack_keep take @st (right size, room in the cache)? */
static inline bool weft__stack_cacheable(const weft__stack_cache *c,
                                         const weft__stack *st)
{
    return st->map_size == c->map_size && c->n < c->limit;
}

/* Cache @st, which lies inside the stack it describes (see
 * weft__stack_put). Only when weft__stack_cacheable. A fiber finishing on
 * that very stack may call it before it leaves: nothing takes the stack
 * until that fiber has switched away. */
static inline void weft__stack_keep(weft__stack_cache *c, weft__stack *st)
{
    st->next = c->head;
    c->head = st;
    c->n++;
}


/* ------------------------------------------------------------------ */
/* Scheduler and fibers                                                */
/* ------------------------------------------------------------------ */
typedef struct weft__fiber weft__fiber;

enum {
    WEFT__F_READY = 1,    /* on the run queue                          */
    WEFT__F_RUNNING = 2,
    WEFT__F_BLOCKED = 3,
    WEFT__F_DEAD = 4
};

struct weft__fiber {
    weft__ctx ctx;
    /* What every switch, wake and blocking call touches, together: on
     * x86-64 the rest of the context's line (the record is 64-byte
     * aligned), so that a request's round touches two lines of it. */
    weft__fiber *next;        /* run queue                                 */
    int64_t kept_at;          /* the keeper's deadline while it is armed,
                                 else 0 (the keeper's fields are then not
                                 set up: a spawn leaves them zeroed)       */
    weft__wait *wait;         /* the wait this fiber is blocked in         */
    int64_t stamp;            /* the loop's clock (r.stamp) when it last
                                 blocked or became ready (dump.c, the
                                 ready delay)                              */
    int64_t scope_deadline;   /* timeout scope (scope.c): 0 = none, else
                                 the absolute deadline every blocking call
                                 is clamped to (a past one is stored as 1) */
    const void *wait_obj;     /* for dumps, set when it blocks: the object */
    uint16_t wait_kind;       /* and WEFT__WK (weft_wait_kind_t, direction) */
    uint8_t state;
    uint8_t cancelled;
    uint8_t permit;           /* weft_unpark() before weft_park()          */
    uint8_t is_main;
    uint8_t parked;           /* blocked in weft_park()                   */
    /* The rest: at start, at exit, and for fiber-local values. */
    weft_sched_t *sched;      /* its scheduler (a wake, on the scheduler's
                                 own thread, reads the thread's instead)   */
    weft_fn_t fn;
    void *arg;
    void **fls;               /* fiber-local values, WEFT_FLS_MAX entries  */
    weft__wait *joiner;       /* a fiber joining this one                  */
    weft__stack stack;
    uint32_t slot;            /* index in the handle table                 */
    /* Stands for the deadlines of its I/O waits (weft__wait_keep,
     * reactor.h): its own timer, armed at one of them, kept across
     * requests. Valid only while kept_at is not 0; disarmed at exit. */
    weft__timer keeper;
#ifdef WEFT_ASAN
    void *asan_fake;
    const void *asan_from_bottom;
    size_t asan_from_size;
#endif
#ifdef WEFT_TSAN
    void *tsan_fiber;
#endif
};
#if defined(__x86_64__) && !defined(WEFT_CTX_UCONTEXT)
_Static_assert(offsetof(weft__fiber, parked) < 128,
               "a fiber's hot fields fit the context's second line");
#endif

/* One per handle (16 bytes: with a million fibers, one of the few things
 * a parked fiber has outside its stack page). */
typedef struct weft__slot {
    union {
        weft__fiber *fiber;   /* live or detached: the running fiber     */
        void *result;         /* finished: what it returned              */
        uint32_t next_free;   /* free: free list link                    */
    } u;
    uint32_t gen;
    uint8_t state;            /* 0 free, 1 live, 2 finished, 3 detached    */
    uint8_t joining;          /* a fiber waits in weft_join() for this one:
                                 from its join until it has resumed (the
                                 slot may be finished meanwhile)           */
} weft__slot;

/* Per handle slot, beside the slot table (not in the fiber record, which
 * stays three cache lines): what dumps say of a fiber besides its wait. */
typedef struct weft__slot_obs {
    char *name;               /* weft_fiber_set_name(): malloc'd, or NULL;
                                 freed when the fiber ends (looked at only
                                 while nnames > 0)                        */
} weft__slot_obs;

struct weft_sched {
    weft__reactor r;
    weft__fiber main;         /* the thread's own stack                    */
    weft__fiber *current;
    weft__fiber *rq_head, *rq_tail;
    weft__fiber *zombie;      /* finished fiber whose stack to release     */
    weft__stack_cache stacks;
    size_t default_stack;
    weft__slot *slots;
    uint32_t nslots, slot_cap, free_slot;
    size_t live, handles;
    uint64_t switches;        /* written with relaxed atomic stores: the
                                 stall watchdog reads it from its thread  */
    atomic_int stall_flag;    /* the watchdog saw a stall in progress: read
                                 by every switch, so beside switches       */
    int64_t delay_max;        /* ready -> running, ns                     */
    uint64_t spawned;
    unsigned tick;
    /* loop health (weft_stats_t) */
    size_t peak_live;
    int64_t run_ns, run_t0;   /* time inside weft_sched_run()             */
    uint64_t delay_hist[64];  /* by bit length of the delay in ns          */
    /* dump on a signal: set by the handler, taken by the loop */
    atomic_int dump_req;
    int dump_slot;            /* index in dump.c's table + 1; 0: none     */
    /* stall detector (dump.c), NULL when off */
    struct weft__stall *stall;
    weft__slot_obs *sobs;     /* slot_cap entries, beside slots; NULL until
                                 the first weft_fiber_set_name()           */
    size_t nnames;            /* names in sobs                            */
    uint64_t stalls;          /* stalls noted                             */
    atomic_int idle;          /* for the watchdog: the loop waits in the
                                 backend, or is not running at all         */
    bool obs_pending;         /* a stall report waits for the loop        */
    /* the fiber I/O layer's state (weft__io, io.h), NULL until it first
     * keeps some; that layer sets io_fini then, and weft_sched_destroy
     * calls it (after the reactor's teardown): the scheduler knows nothing
     * else of that layer */
    struct weft__io *io;
    void (*io_fini)(weft_sched_t *s);
    pthread_t owner;
    bool running;
    bool forked;              /* this is a fork child's copy: see sched.c */
    /* overflow reporter */
    void *altstack;
    size_t altstack_size;
    bool altstack_installed;
#ifdef WEFT_ASAN
    const void *main_stack_lo;
    size_t main_stack_size;
#endif
#ifdef WEFT_VALGRIND
    bool on_valgrind;         /* RUNNING_ON_VALGRIND, asked once          */
#endif
};

/* How many fiber-to-fiber switches happen before the loop is given a
 * chance to poll for I/O and timers (it always polls when idle). */
#define WEFT__POLL_TICKS 64

/* This thread's scheduler (NULL if none). Inline: read on every I/O call.
 * Hidden and initial-exec: read from the thread pointer, with no call to
 * __tls_get_addr in the objects (the -fPIC default, general dynamic,
 * compiles each read as a call: the linker turns it into a load in a
 * program, but the code around it still saved registers for the call).
 * libweft.so needs 8 bytes of static TLS, which dlopen finds in glibc's
 * reserve. */
extern __thread weft_sched_t *weft__tls_sched
    __attribute__((visibility("hidden"), tls_model("initial-exec")));
static inline weft_sched_t *weft__sched_tls(void) { return weft__tls_sched; }
weft__fiber *weft__current(void); /* NULL outside fibers */
/* Block the current fiber in @w until it completes; returns w->result.
 * The wait must be armed. Handles cancellation. @kind says what the fiber
 * waits for, for dumps: WEFT__WK(a weft_wait_kind_t, the direction
 * WEFT_READABLE / WEFT_WRITABLE or 0); @obj the object waited on (a
 * descriptor for WEFT_WAIT_FD: WEFT__FDOBJ(fd); a pid, a fiber id). */
#define WEFT__WK(kind, events) ((int)(kind) | (int)(events) << 8)
#define WEFT__FDOBJ(fd) ((const void *)(intptr_t)(fd))
int weft__block(weft__wait *w, int kind, const void *obj);
/* Wake function of C fibers: put the wait's owner on its run queue. */
void weft__fiber_wake(weft__wait *w);
/* The fire function of fibers' keepers (sched.c). */
void weft__fiber_keeper_fired(weft__timer *t);
/* @f->kept_at after its keeper may have changed. */
static inline void weft__fiber_kept_sync(weft__fiber *f)
{
    f->kept_at = f->keeper.idx != WEFT__TIMER_IDLE ? f->keeper.deadline : 0;
}
/* weft__fiber_keep when the keeper is idle or armed later than
 * @deadline (sched.c): out of line, so that the kept case, every read
 * of a keep-alive connection but the first, costs no call. */
int weft__fiber_keep_arm(weft__fiber *f, weft__wait *w, int64_t deadline);
/* Give @w, a wait of the current fiber @f, its @deadline through @f's
 * keeper (weft__wait_keep): when the keeper is armed at or before it
 * (kept_at says so, from the record's hot line), the wait only records
 * it. A deadline of 0 or less ("try once", or already due at the epoch)
 * takes a timer of its own, so that kept_at 0 can mean "idle". */
static inline __attribute__((always_inline)) int
weft__fiber_keep(weft__fiber *f, weft__wait *w, int64_t deadline)
{
    if (deadline == WEFT_FOREVER)
        return 0;
    if (WEFT_LIKELY(f->kept_at != 0 && f->kept_at <= deadline)) {
        weft__wait_kept(w, deadline);
        return 0;
    }
    return weft__fiber_keep_arm(f, w, deadline);
}
/* Whether the current fiber @f's timeout scope has expired: -ETIMEDOUT or
 * 0 (out of line: a clock read). */
int weft__precheck_scope(const weft__fiber *f);
/* Checks before a blocking call in @s's thread (NULL: none): in a fiber,
 * not cancelled, deadline ok, its timeout scope not expired. Inline: a
 * call here was a large part of a yield and of every socket call. */
static inline int weft__precheck_in(const weft_sched_t *s, int64_t deadline)
{
    if (!s || s->current->is_main)
        return -EPERM;
    if (deadline < -1)
        return -EINVAL;
    if (s->current->cancelled)
        return -ECANCELED;
    if (WEFT_UNLIKELY(s->current->scope_deadline != 0))
        return weft__precheck_scope(s->current);
    return 0;
}
static inline int weft__precheck(int64_t deadline)
{
    return weft__precheck_in(weft__tls_sched, deadline);
}
/* dump.c: the stall watchdog flagged a stall: note who (@f, the fiber
 * switching away, or the loop) and how long; the loop reports it. */
void weft__stall_note(weft_sched_t *s, weft__fiber *f);
/* dump.c: free the name of handle slot @idx's fiber, which has ended. */
void weft__name_drop(weft_sched_t *s, uint32_t idx);
/* dump.c: once per loop iteration, when something is pending (a dump
 * asked for by a signal, a stall to report). */
void weft__obs_loop(weft_sched_t *s);
/* dump.c: at scheduler creation (WEFT_DUMP_SIGNAL, WEFT_STALL_MS) and
 * destruction. */
void weft__obs_init(weft_sched_t *s);
void weft__obs_fini(weft_sched_t *s);
/* weft__precheck(), then -EINVAL unless @args_ok: how a blocking call that
 * takes objects begins (a bad deadline or a cancel is reported first). */
static inline int weft__precheck_args(int64_t deadline, bool args_ok)
{
    int rc = weft__precheck(deadline);
    return rc < 0 ? rc : args_ok ? 0 : -EINVAL;
}
void weft__overflow_install(weft_sched_t *s);
void weft__overflow_remove(weft_sched_t *s);

static inline bool weft__deadline_ok(int64_t d) { return d >= -1; }

#endif /* WEFT_INTERNAL_H */

