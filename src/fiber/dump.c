/*
 * dump.c — what every fiber is doing (weft_fibers_each, weft_dump), the
 * dump on a signal, the stall detector and the counters
 * (weft_sched_stats).
 *
 * Nothing here runs on a hot path. What the hot paths pay for it is in
 * sched.c: weft__block stores what a fiber waits for (a kind and an
 * object) and the loop's clock reading into the fiber's record; a switch
 * loads the stall flag; the loop looks at two flags once per iteration.
 *
 * Backtraces of a parked fiber start from its saved context. With
 * libunwind (WEFT_HAVE_UNWIND: x86-64 with its header at build time), the
 * context becomes an unw_context_t and libunwind follows the DWARF
 * call-frame information, through frames with or without frame pointers;
 * it is loaded with dlopen when the first dump is taken, so no program
 * links it; the loading runs on a thread of its own (it goes deep). A
 * build without libunwind's header (aarch64) follows frame pointers: the
 * switch saves rbp (x29 on aarch64), and such a build keeps them (the
 * Makefile). A build with the header whose libunwind.so.8 is missing at
 * run time (or that runs under Valgrind) reports the resume address
 * alone. Either walk stops at the fiber's own stack's bounds.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#ifdef WEFT_HAVE_UNWIND
#define UNW_LOCAL_ONLY
#include <execinfo.h>
#include <libunwind.h>
#include <pthread.h>
#include <ucontext.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- one fiber's state ---------------------------------------------------- */

enum { SLOT_LIVE = 1, SLOT_DETACHED = 3 }; /* weft__slot.state (sched.c) */

/* Follow a frame-pointer chain that starts at @fp, within [@lo, @hi).
 * (Unused in a ucontext build with libunwind.) */
__attribute__((no_sanitize("address"), unused))
static int fp_walk(uintptr_t pc0, uintptr_t fp, uintptr_t lo, uintptr_t hi,
                   void **pcs, int max)
{
    int n = 0;
    if (pc0 && n < max)
        pcs[n++] = (void *)pc0;
    while (n < max && fp >= lo && fp <= hi - 2 * sizeof(uintptr_t) &&
           (fp & (sizeof(uintptr_t) - 1)) == 0) {
        uintptr_t next = ((const uintptr_t *)fp)[0];
        uintptr_t ret = ((const uintptr_t *)fp)[1];
        if (ret == 0)
            break;
        pcs[n++] = (void *)ret;
        if (next <= fp)
            break;
        fp = next;
    }
    return n;
}

#ifdef WEFT_HAVE_UNWIND
/* libunwind's local unwinder, loaded on the first dump. Its functions are
 * macros naming per-architecture symbols (unw_step is _ULx86_64_step):
 * UW_SYM spells the symbol the header would have linked. */
#define UW_SYM2(x) #x
#define UW_SYM(x) UW_SYM2(x)
static struct {
    pthread_once_t once;
    int (*init_local)(unw_cursor_t *, unw_context_t *);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
} uw = {.once = PTHREAD_ONCE_INIT};

static void uw_load_here(void)
{
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    void *i = dlsym(h, UW_SYM(unw_init_local));
    void *st = dlsym(h, UW_SYM(unw_step));
    void *g = dlsym(h, UW_SYM(unw_get_reg));
    if (!i || !st || !g)
        return; /* kept loaded: cheaper than a second failing dlopen */
    uw.init_local = (int (*)(unw_cursor_t *, unw_context_t *))i;
    uw.step = (int (*)(unw_cursor_t *))st;
    uw.get_reg = (int (*)(unw_cursor_t *, unw_regnum_t, unw_word_t *))g;
    /* libunwind sets itself up (and opens the pipe it keeps) at its first
     * cursor: here, on this frame, rather than inside some later walk. */
    unw_context_t uc;
    unw_cursor_t c;
    if (getcontext(&uc) == 0)
        uw.init_local(&c, &uc);
}

static void *uw_load_thread(void *unused)
{
    (void)unused;
    uw_load_here();
    /* glibc's backtrace() (the walk of the calling fiber) loads libgcc_s
     * at its first call: here too. */
    void *pc[2];
    (void)backtrace(pc, 2);
    return NULL;
}

/* Loading (dlopen, libunwind's and libgcc's set-up) runs deep: on a
 * thread of its own, not on the stack of a fiber that may have asked for
 * a dump with a few KiB left. */
static void uw_load(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, uw_load_thread, NULL) == 0)
        pthread_join(t, NULL);
    else
        uw_load_thread(NULL);
}

/* Whether libunwind is here (loaded at the first call). Not under
 * Valgrind: libunwind checks addresses by writing them to a pipe, which
 * Valgrind reports as uninitialised bytes; the frame-pointer walk stands
 * in there. */
static bool uw_ready(const weft_sched_t *s)
{
#ifdef WEFT_VALGRIND
    if (s->on_valgrind)
        return false;
#else
    (void)s;
#endif
    pthread_once(&uw.once, uw_load);
    return uw.init_local != NULL;
}

/* Unwind from @uc, a parked fiber's registers, while the frames stay in
 * the fiber's stack [@lo, @hi). -1: libunwind is not available. */
static int uw_walk(const weft_sched_t *s, unw_context_t *uc, uintptr_t lo, uintptr_t hi,
                   void **pcs, int max)
{
    if (!uw_ready(s))
        return -1;
    unw_cursor_t c;
    if (uw.init_local(&c, uc) < 0)
        return 0;
    int n = 0;
    do {
        unw_word_t ip, sp;
        if (uw.get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0 ||
            uw.get_reg(&c, UNW_REG_SP, &sp) < 0 || sp < lo || sp > hi)
            break;
        pcs[n++] = (void *)(uintptr_t)ip;
    } while (n < max && uw.step(&c) > 0);
    return n;
}
#endif

static int backtrace_of(const weft_sched_t *s, const weft__fiber *f, void **pcs, int max)
{
    uintptr_t lo = (uintptr_t)(f->stack.base + f->stack.guard);
    uintptr_t hi = (uintptr_t)f; /* the record tops the stack */
    if (f == s->current) {
        /* The caller's own stack: from here. */
#ifdef WEFT_HAVE_UNWIND
        /* glibc's backtrace() unwinds the running stack by the same
         * tables; it ends at the fiber's trampoline (no return address
         * there). Drop this function's own frame. */
        void *buf[WEFT_DUMP_FRAMES + 1];
        int n = backtrace(buf, (max < WEFT_DUMP_FRAMES ? max : WEFT_DUMP_FRAMES) + 1);
        if (n <= 1)
            return 0;
        memcpy(pcs, buf + 1, (size_t)(n - 1) * sizeof *pcs);
        return n - 1;
#else
        return fp_walk(0, (uintptr_t)__builtin_frame_address(0), lo, hi, pcs, max);
#endif
    }
#if defined(WEFT_CTX_UCONTEXT)
#ifdef WEFT_HAVE_UNWIND
    /* The saved context is a ucontext_t: libunwind's own context type.
     * One made by makecontext and never entered starts at a function's
     * first instruction, which an unwinder (looking up the address less
     * one) would take for the function before it. */
    if (weft__ctx_is_new(&f->ctx))
        return 0;
    unw_context_t uc = f->ctx.uc;
    int n = uw_walk(s, &uc, lo, hi, pcs, max);
    return n < 0 ? 0 : n;
#else
    (void)lo;
    (void)hi;
    (void)pcs;
    (void)max;
    return 0;
#endif
#elif defined(__x86_64__)
    uintptr_t sp = (uintptr_t)f->ctx.r[1];
    if (sp < lo || sp >= hi)
        return 0;
    uintptr_t pc0 = *(const uintptr_t *)sp; /* the resume address */
    if (pc0 == (uintptr_t)weft__ctx_trampoline)
        return 0; /* never ran */
#ifdef WEFT_HAVE_UNWIND
    /* The registers as the switch's caller will see them on return: the
     * resume address popped, the callee-saved ones restored. */
    unw_context_t uc;
    memset(&uc, 0, sizeof uc);
    greg_t *g = uc.uc_mcontext.gregs;
    g[REG_RIP] = (greg_t)pc0;
    g[REG_RSP] = (greg_t)(sp + 8);
    g[REG_RBX] = (greg_t)f->ctx.r[2];
    g[REG_RBP] = (greg_t)f->ctx.r[3];
    g[REG_R12] = (greg_t)f->ctx.r[4];
    g[REG_R13] = (greg_t)f->ctx.r[5];
    g[REG_R14] = (greg_t)f->ctx.r[6];
    g[REG_R15] = (greg_t)f->ctx.r[7];
    int n = uw_walk(s, &uc, lo, hi, pcs, max);
    if (n >= 0)
        return n;
    /* No libunwind after all (not installed; Valgrind): this build keeps
     * no frame pointers to follow, so only the resume address is known. */
    if (max <= 0)
        return 0;
    pcs[0] = (void *)pc0;
    return 1;
#else
    return fp_walk(pc0, (uintptr_t)f->ctx.r[3], lo, hi, pcs, max);
#endif
#else /* aarch64: x29 at 10, x30 at 11 */
    if ((uintptr_t)f->ctx.r[11] == (uintptr_t)weft__ctx_trampoline)
        return 0;
    return fp_walk((uintptr_t)f->ctx.r[11], (uintptr_t)f->ctx.r[10], lo, hi, pcs, max);
#endif
}

static void fill_info(weft_sched_t *s, uint32_t idx, weft_fiber_info_t *in)
{
    const weft__slot *sl = &s->slots[idx];
    const weft__fiber *f = sl->u.fiber;
    memset(in, 0, sizeof *in);
    in->handle.id = ((uint64_t)sl->gen << 32) | (idx + 1);
    in->name = s->sobs ? s->sobs[idx].name : NULL;
    in->fn = f->fn;
    in->spawn_caller = f->stack.spawn_ra;
    in->detached = sl->state == SLOT_DETACHED;
    in->fd = -1;
    in->deadline = WEFT_FOREVER;
    in->wait = WEFT_WAIT_NONE;
    if (f == s->current) {
        in->state = WEFT_FIBER_RUNNING;
    } else if (f->state == WEFT__F_READY) {
        in->state = WEFT_FIBER_READY;
        in->since = f->stamp;
    } else {
        in->state = WEFT_FIBER_WAITING;
        in->since = f->stamp;
        const weft__wait *w = f->wait;
        const void *obj = w ? f->wait_obj : NULL;
        in->wait = w ? (weft_wait_kind_t)(f->wait_kind & 0xff) : WEFT_WAIT_OTHER;
        in->events = w ? f->wait_kind >> 8 : 0;
        if (w && w->timer.idx != WEFT__TIMER_IDLE)
            in->deadline = w->timer.deadline;
        switch (in->wait) {
        case WEFT_WAIT_FD:
            in->fd = (int)(intptr_t)obj;
            break;
        case WEFT_WAIT_JOIN:
        case WEFT_WAIT_PROCESS:
            in->target = (uint64_t)(uintptr_t)obj;
            if (w && in->wait == WEFT_WAIT_PROCESS)
                in->fd = w->fd;
            break;
        case WEFT_WAIT_SIGNAL:
            in->fd = (int)(intptr_t)obj;
            break;
        default:
            in->object = obj;
            break;
        }
    }
    in->nframes = backtrace_of(s, f, in->frames, WEFT_DUMP_FRAMES);
}

int weft_fibers_each(weft_sched_t *s,
                     int (*cb)(const weft_fiber_info_t *info, void *arg),
                     void *arg)
{
    if (!s || !cb)
        return -EINVAL;
    if (!pthread_equal(s->owner, pthread_self()))
        return -EPERM;
#ifdef WEFT_HAVE_UNWIND
    (void)uw_ready(s); /* every call, so that its pipe opens at the first */
#endif
    weft_fiber_info_t in;
    int n = 0;
    for (uint32_t i = 0; i < s->nslots; i++) {
        uint8_t st = s->slots[i].state;
        if (st != SLOT_LIVE && st != SLOT_DETACHED)
            continue;
        fill_info(s, i, &in);
        n++;
        if (cb(&in, arg))
            break;
    }
    return n;
}

/* ---- text ------------------------------------------------------------------ */

static const char *const kind_names[] = {
    [WEFT_WAIT_NONE] = "nothing",     [WEFT_WAIT_FD] = "fd",
    [WEFT_WAIT_SLEEP] = "sleep",      [WEFT_WAIT_PARK] = "park",
    [WEFT_WAIT_MUTEX] = "mutex",      [WEFT_WAIT_COND] = "cond",
    [WEFT_WAIT_SEM] = "semaphore",    [WEFT_WAIT_NOTIFICATION] = "notification",
    [WEFT_WAIT_LIMITER] = "limiter",  [WEFT_WAIT_WAITGROUP] = "waitgroup",
    [WEFT_WAIT_CHAN] = "channel",     [WEFT_WAIT_FUTURE] = "future",
    [WEFT_WAIT_JOIN] = "join",        [WEFT_WAIT_PROCESS] = "process",
    [WEFT_WAIT_SIGNAL] = "signal",    [WEFT_WAIT_OFFLOAD] = "offload",
    [WEFT_WAIT_POOL] = "pool",        [WEFT_WAIT_OTHER] = "other",
};

static const char *kind_name(int k)
{
    return k >= 0 && k < (int)(sizeof kind_names / sizeof *kind_names) && kind_names[k]
               ? kind_names[k] : "?";
}

/* "name+0x1f (object+0x1234)", or the bare address. @ret: a return
 * address, looked up one byte back (the call, not what follows it). */
static void put_addr(FILE *out, const void *pc, int ret)
{
    Dl_info di;
    const char *q = (const char *)pc - (ret && pc ? 1 : 0);
    if (pc && dladdr(q, &di) && di.dli_fname) {
        const char *obj = strrchr(di.dli_fname, '/');
        obj = obj ? obj + 1 : di.dli_fname;
        if (!*obj)
            obj = "?";
        if (di.dli_sname && di.dli_saddr)
            fprintf(out, "%s+0x%tx ", di.dli_sname, (const char *)pc - (const char *)di.dli_saddr);
        fprintf(out, "(%s+0x%tx)", obj, (const char *)pc - (const char *)di.dli_fbase);
    } else {
        fprintf(out, "%p", pc);
    }
}

static void put_secs(FILE *out, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    if (ns < 1000000000)
        fprintf(out, "%.3f ms", (double)ns / 1e6);
    else
        fprintf(out, "%.3f s", (double)ns / 1e9);
}

typedef struct dump_ctx {
    FILE *out;
    int64_t now;
} dump_ctx;

static void put_wait(FILE *out, const weft_fiber_info_t *in)
{
    fputs(kind_name(in->wait), out);
    switch (in->wait) {
    case WEFT_WAIT_FD:
        fprintf(out, " %d %s", in->fd,
                in->events & WEFT_WRITABLE   ? (in->events & WEFT_READABLE ? "readable+writable" : "writable")
                : in->events & WEFT_READABLE ? "readable"
                : in->events & WEFT_PRIORITY ? "priority"
                                             : "(close)");
        break;
    case WEFT_WAIT_JOIN:
        fprintf(out, " fiber %u", (unsigned)(uint32_t)in->target);
        break;
    case WEFT_WAIT_PROCESS:
        fprintf(out, " %llu", (unsigned long long)in->target);
        if (in->fd >= 0)
            fprintf(out, " (pidfd %d)", in->fd);
        break;
    case WEFT_WAIT_SIGNAL:
        fprintf(out, " (signalfd %d)", in->fd);
        break;
    case WEFT_WAIT_SLEEP:
    case WEFT_WAIT_PARK:
    case WEFT_WAIT_OFFLOAD:
        if (in->object)
            fprintf(out, " %p", in->object);
        break;
    default:
        fprintf(out, " %p", in->object);
        if (in->wait == WEFT_WAIT_CHAN)
            fputs(in->events & WEFT_WRITABLE ? " (send)"
                  : in->events & WEFT_READABLE ? " (receive)" : " (select)", out);
        break;
    }
}

static int dump_one(const weft_fiber_info_t *in, void *arg)
{
    dump_ctx *c = arg;
    FILE *out = c->out;
    fprintf(out, "fiber %u", (unsigned)(uint32_t)in->handle.id);
    if (in->name)
        fprintf(out, " \"%s\"", in->name);
    if (in->detached)
        fputs(" (detached)", out);
    switch (in->state) {
    case WEFT_FIBER_RUNNING:
        fputs(": running (the caller)\n", out);
        break;
    case WEFT_FIBER_READY:
        fputs(": ready for ", out);
        put_secs(out, c->now - in->since);
        fputc('\n', out);
        break;
    default:
        fputs(": waiting for ", out);
        put_secs(out, c->now - in->since);
        fputs(" on ", out);
        put_wait(out, in);
        if (in->deadline == WEFT_FOREVER) {
            fputs(", no deadline\n", out);
        } else {
            fprintf(out, ", deadline %lld (in ", (long long)in->deadline);
            put_secs(out, in->deadline - c->now);
            fputs(")\n", out);
        }
        break;
    }
    fputs("    runs ", out);
    put_addr(out, (const void *)(uintptr_t)in->fn, 0);
    fputs(", spawned at ", out);
    put_addr(out, in->spawn_caller, 1);
    fputc('\n', out);
    for (int i = 0; i < in->nframes; i++) {
        fprintf(out, "    #%d %p ", i, in->frames[i]);
        put_addr(out, in->frames[i], 1);
        fputc('\n', out);
    }
    return 0;
}

static int count_state(const weft_fiber_info_t *in, void *arg)
{
    size_t *n = arg;
    n[in->state]++;
    return 0;
}

static void dump_sched(weft_sched_t *s, FILE *out)
{
    size_t n[4] = {0};
    weft_fibers_each(s, count_state, n);
    dump_ctx c = {out, weft_now()};
    weft_stats_t st;
    weft_sched_stats(s, &st);
    fprintf(out, "weft: %zu fibers on %s at %lld: %zu running, %zu ready, %zu waiting"
                 " (loop: %llu iterations, busy ",
            n[1] + n[2] + n[3], weft_sched_backend(s), (long long)c.now, n[1], n[2], n[3],
            (unsigned long long)st.iterations);
    put_secs(out, st.busy_ns);
    fputs(", waited ", out);
    put_secs(out, st.wait_ns);
    fputs(")\n", out);
    weft_fibers_each(s, dump_one, &c);
    fputs("weft: end of dump\n", out);
    fflush(out);
}

int weft_dump(FILE *out)
{
    if (!out)
        return -EINVAL;
    weft_sched_t *s = weft__sched_tls();
    if (!s)
        return -EPERM;
    dump_sched(s, out);
    return 0;
}

void weft__name_drop(weft_sched_t *s, uint32_t idx)
{
    if (s->sobs[idx].name) {
        free(s->sobs[idx].name);
        s->sobs[idx].name = NULL;
        s->nnames--;
    }
}

int weft_fiber_set_name(weft_fiber_t h, const char *name)
{
    weft_sched_t *s = weft__sched_tls();
    uint32_t idx = (uint32_t)h.id - 1;
    if (!s || h.id == 0 || idx >= s->nslots)
        return -ESRCH;
    weft__slot *sl = &s->slots[idx];
    if (sl->gen != (uint32_t)(h.id >> 32) ||
        (sl->state != SLOT_LIVE && sl->state != SLOT_DETACHED))
        return -ESRCH;
    if (!s->sobs) {
        /* The first name: the table beside the slots is made now, so
         * that a program that names no fiber pays nothing per fiber. */
        if (!name)
            return 0;
        if (!(s->sobs = calloc(s->slot_cap, sizeof *s->sobs)))
            return -ENOMEM;
    }
    char *copy = NULL;
    if (name && !(copy = strndup(name, 63)))
        return -ENOMEM;
    weft__name_drop(s, idx);
    s->sobs[idx].name = copy;
    if (copy)
        s->nnames++;
    return 0;
}

/* ---- the dump on a signal ----------------------------------------------- */

/*
 * The handler only marks the schedulers that asked and wakes their loops
 * (weft__reactor_wake is async-signal-safe); each loop dumps at its next
 * iteration (weft__obs_loop). A scheduler leaves the table before it is
 * freed, and waits for any handler that may still hold it.
 */
#define DUMP_MAX 64
static weft_sched_t *_Atomic dump_tab[DUMP_MAX];
static atomic_int dump_inflight;
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;
static int dump_signo, dump_users;
static struct sigaction dump_old;

static void dump_handler(int sig)
{
    (void)sig;
    atomic_fetch_add(&dump_inflight, 1);
    for (int i = 0; i < DUMP_MAX; i++) {
        weft_sched_t *s = atomic_load(&dump_tab[i]);
        if (s) {
            atomic_store(&s->dump_req, 1);
            weft__reactor_wake(&s->r);
        }
    }
    atomic_fetch_sub(&dump_inflight, 1);
}

static void dump_unregister(weft_sched_t *s)
{
    if (!s->dump_slot)
        return;
    pthread_mutex_lock(&dump_lock);
    atomic_store(&dump_tab[s->dump_slot - 1], NULL);
    s->dump_slot = 0;
    while (atomic_load(&dump_inflight) != 0)
        ; /* a handler that may have seen us: it never blocks */
    if (--dump_users == 0) {
        sigaction(dump_signo, &dump_old, NULL);
        dump_signo = 0;
    }
    pthread_mutex_unlock(&dump_lock);
}

static int dump_register(weft_sched_t *s, int signo)
{
    if (signo == 0) {
        dump_unregister(s);
        return 0;
    }
    if (signo < 1 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP)
        return -EINVAL;
    int rc = 0;
    pthread_mutex_lock(&dump_lock);
    if (dump_signo && dump_signo != signo) {
        rc = -EINVAL;
    } else if (!s->dump_slot) {
        int i = 0;
        while (i < DUMP_MAX && atomic_load(&dump_tab[i]))
            i++;
        if (i == DUMP_MAX) {
            rc = -EBUSY;
        } else {
            if (!dump_signo) {
                struct sigaction sa;
                memset(&sa, 0, sizeof sa);
                sa.sa_handler = dump_handler;
                sa.sa_flags = SA_RESTART;
                sigemptyset(&sa.sa_mask);
                if (sigaction(signo, &sa, &dump_old) < 0)
                    rc = -errno;
                else
                    dump_signo = signo;
            }
            if (rc == 0) {
                dump_users++;
                s->dump_slot = i + 1;
                atomic_store(&dump_tab[i], s);
            }
        }
    }
    pthread_mutex_unlock(&dump_lock);
    return rc;
}

int weft_dump_on_signal(int signo)
{
    weft_sched_t *s = weft_sched_self();
    if (!s)
        return -ENOMEM;
    return dump_register(s, signo);
}

/* "QUIT", "SIGQUIT" or "3"; 0 if none. */
static int parse_signal(const char *v)
{
    static const struct { const char *name; int no; } names[] = {
        {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
        {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"WINCH", SIGWINCH}, {"PWR", SIGPWR},
        {"TRAP", SIGTRAP}, {"ALRM", SIGALRM}, {"URG", SIGURG}, {"TTIN", SIGTTIN},
        {"TTOU", SIGTTOU}, {"PROF", SIGPROF}, {"VTALRM", SIGVTALRM},
    };
    if (!v || !*v)
        return 0;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end == '\0')
        return n > 0 && n < NSIG ? (int)n : 0;
    if (!strncasecmp(v, "SIG", 3))
        v += 3;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcasecmp(v, names[i].name))
            return names[i].no;
    return 0;
}

/* ---- the stall detector ------------------------------------------------- */

/*
 * A watchdog thread per scheduler that asked. Every limit/4 it reads the
 * scheduler's switch counter (written with relaxed atomic stores) and its
 * idle flag (set while the loop waits in the backend or is not running).
 * When the counter has not moved for the limit while the loop was busy,
 * whatever runs is stalling everything else: the watchdog raises
 * stall_flag, once per stall. The next switch (a load of that flag, in
 * sched.c) notes the fiber that leaves and how long it ran; the loop
 * reports it at its next iteration, at most once a second.
 */
struct weft__stall {
    weft_sched_t *s;
    int64_t limit_ns;
    weft_stall_fn cb;
    void *arg;
    pthread_t thr;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
    atomic_llong since;         /* when the stalled stretch began (at least) */
    atomic_ullong at_count;     /* the switch counter during it              */
    /* the loop's side */
    int64_t last_report;
    uint64_t suppressed;
    bool have;                  /* rec is waiting to be reported            */
    weft_stall_info_t rec;
    char name[64];
};

static void *watchdog(void *p)
{
    struct weft__stall *st = p;
    weft_sched_t *s = st->s;
    int64_t tick = st->limit_ns / 4;
    if (tick < 1000000)
        tick = 1000000;
    uint64_t last = __atomic_load_n(&s->switches, __ATOMIC_RELAXED);
    int64_t seen = weft_now();
    bool flagged = false;
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t t = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + tick;
        ts.tv_sec = t / 1000000000;
        ts.tv_nsec = t % 1000000000;
        pthread_cond_timedwait(&st->cond, &st->lock, &ts);
        if (st->stop)
            break;
        uint64_t c = __atomic_load_n(&s->switches, __ATOMIC_RELAXED);
        int64_t now = weft_now();
        if (c != last || atomic_load_explicit(&s->idle, memory_order_relaxed)) {
            last = c;
            seen = now;
            flagged = false;
            continue;
        }
        if (!flagged && now - seen >= st->limit_ns) {
            flagged = true;
            atomic_store(&st->since, seen);
            atomic_store(&st->at_count, c);
            atomic_store_explicit(&s->stall_flag, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

void weft__stall_note(weft_sched_t *s, weft__fiber *f)
{
    atomic_store_explicit(&s->stall_flag, 0, memory_order_relaxed);
    struct weft__stall *st = s->stall;
    if (!st)
        return;
    s->stalls++;
    /* The flag may have been raised just as the stalled one switched
     * away: then the one leaving now is not it. */
    if (atomic_load(&st->at_count) != __atomic_load_n(&s->switches, __ATOMIC_RELAXED)) {
        st->suppressed++;
        return;
    }
    if (st->have) {
        st->suppressed++;
        return;
    }
    weft_stall_info_t *r = &st->rec;
    memset(r, 0, sizeof *r);
    r->ran_ns = weft_now() - atomic_load(&st->since);
    if (!f->is_main) {
        r->handle.id = ((uint64_t)s->slots[f->slot].gen << 32) | (f->slot + 1);
        r->fn = f->fn;
        r->spawn_caller = f->stack.spawn_ra;
        if (s->sobs && s->sobs[f->slot].name) {
            snprintf(st->name, sizeof st->name, "%s", s->sobs[f->slot].name);
            r->name = st->name;
        }
    }
    st->have = true;
    s->obs_pending = true;
}

static void stall_report(weft_sched_t *s)
{
    struct weft__stall *st = s->stall;
    if (!st || !st->have)
        return;
    st->have = false;
    int64_t now = weft_now();
    if (st->last_report && now - st->last_report < 1000000000) {
        st->suppressed++;
        return;
    }
    st->last_report = now;
    st->rec.suppressed = st->suppressed;
    st->suppressed = 0;
    if (st->cb) {
        st->cb(&st->rec, st->arg);
        return;
    }
    const weft_stall_info_t *r = &st->rec;
    FILE *out = stderr;
    if (r->handle.id == 0) {
        fputs("weft: stall: the loop (no fiber) ran ", out);
        put_secs(out, r->ran_ns);
        fputs(" without switching", out);
    } else {
        fprintf(out, "weft: stall: fiber %u", (unsigned)(uint32_t)r->handle.id);
        if (r->name)
            fprintf(out, " \"%s\"", r->name);
        fputs(" ran ", out);
        put_secs(out, r->ran_ns);
        fputs(" without switching; runs ", out);
        put_addr(out, (const void *)(uintptr_t)r->fn, 0);
        fputs(", spawned at ", out);
        put_addr(out, r->spawn_caller, 1);
    }
    if (r->suppressed)
        fprintf(out, "; %llu more stalls since the last report",
                (unsigned long long)r->suppressed);
    fputc('\n', out);
    fflush(out);
}

static void stall_stop(weft_sched_t *s)
{
    struct weft__stall *st = s->stall;
    if (!st)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = true;
    pthread_cond_signal(&st->cond);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->thr, NULL);
    stall_report(s);
    s->stall = NULL;
    s->obs_pending = false;
    atomic_store(&s->stall_flag, 0);
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

int weft_sched_set_stall(weft_sched_t *s, int64_t ms, weft_stall_fn cb, void *arg)
{
    if (!s || ms < 0)
        return -EINVAL;
    if (!pthread_equal(s->owner, pthread_self()))
        return -EPERM;
    stall_stop(s);
    if (ms == 0)
        return 0;
    struct weft__stall *st = calloc(1, sizeof *st);
    if (!st)
        return -ENOMEM;
    st->s = s;
    st->limit_ns = ms > INT64_MAX / 1000000 ? INT64_MAX : ms * 1000000;
    st->cb = cb;
    st->arg = arg;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&st->lock, NULL);
    /* The watchdog blocks every signal: they are the program's threads'. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&st->thr, NULL, watchdog, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&st->cond);
        pthread_mutex_destroy(&st->lock);
        free(st);
        return -rc;
    }
    s->stall = st;
    return 0;
}

/* ---- the loop's side ------------------------------------------------------ */

void weft__obs_loop(weft_sched_t *s)
{
    if (atomic_exchange(&s->dump_req, 0))
        dump_sched(s, stderr);
    if (s->obs_pending) {
        s->obs_pending = false;
        stall_report(s);
    }
}

void weft__obs_init(weft_sched_t *s)
{
    int sig = parse_signal(getenv("WEFT_DUMP_SIGNAL"));
    if (sig)
        (void)dump_register(s, sig);
    const char *ms = getenv("WEFT_STALL_MS");
    if (ms && atoll(ms) > 0)
        (void)weft_sched_set_stall(s, atoll(ms), NULL, NULL);
}

void weft__obs_fini(weft_sched_t *s)
{
    stall_stop(s);
    dump_unregister(s);
}

/* ---- counters (weft_sched_stats) --------------------------------------- */

int weft_sched_stats(const weft_sched_t *s, weft_stats_t *st)
{
    if (!s || !st)
        return -EINVAL;
    memset(st, 0, sizeof *st);
    st->fibers = s->live;
    st->handles = s->handles;
    st->timers = weft__reactor_timers(&s->r);
    st->waits = s->r.nwaits;
    st->fd_waits = s->r.nfd_waits;
    st->posted = atomic_load(&((weft_sched_t *)s)->r.posted);
    st->stacks_cached = s->stacks.n;
    st->stacks_unguarded = s->stacks.unguarded;
    st->ops = s->r.ops_inflight;
    st->switches = s->switches;
    st->spawned = s->spawned;
    st->ended = s->spawned - s->live;
    st->peak_fibers = s->peak_live;
    st->iterations = s->r.iterations;
    st->wait_ns = s->r.wait_ns;
    int64_t run = s->run_ns + (s->running ? weft_now() - s->run_t0 : 0);
    st->busy_ns = run > s->r.wait_ns ? run - s->r.wait_ns : 0;
    st->timers_fired = s->r.timers_fired;
    weft__reactor_op_counts(&s->r, st->ops_submitted, st->ops_completed);
    uint64_t n = 0;
    for (int b = 0; b < 64; b++)
        n += s->delay_hist[b];
    /* A bucket's upper bound: bucket b holds delays below 2^(b+1). */
    uint64_t acc = 0;
    int64_t p50 = -1, p99 = -1;
    for (int b = 0; b < 64 && n; b++) {
        acc += s->delay_hist[b];
        int64_t hi = b >= 62 ? INT64_MAX : ((int64_t)1 << (b + 1)) - 1;
        if (p50 < 0 && acc * 2 >= n)
            p50 = hi;
        if (p99 < 0 && acc * 100 >= n * 99)
            p99 = hi;
    }
    st->ready_delay_p50_ns = p50 < 0 ? 0 : p50 > s->delay_max ? s->delay_max : p50;
    st->ready_delay_p99_ns = p99 < 0 ? 0 : p99 > s->delay_max ? s->delay_max : p99;
    st->ready_delay_max_ns = s->delay_max;
    st->stalls = s->stalls;
    return 0;
}
