/*
 * ops_fuzz — libFuzzer target that reads its input as a program of weft
 * calls for a few fibers and checks, while it runs and after, what weft
 * promises about them.
 *
 * Input: byte 0 configures the run (2..5 worker fibers, the buffered
 * channel's capacity, the semaphore's permits, which workers start at
 * once, whether the run is slow: then byte 1 picks the call to stall, see
 * stall_past); then two bytes per instruction: [worker:3 | op:5] [arg]. Each
 * worker runs its own instructions in order; a worker not started by the
 * driver or by a SPAWN instruction is started after the program's last
 * deadline, so every instruction runs. Ops: yield, sleep, spawn, join,
 * detach, cancel, park, unpark, mutex lock/trylock/unlock, condition
 * wait/signal/broadcast, semaphore acquire/try/release, channel
 * send/recv/select/close (a buffered and an unbuffered channel), pipe
 * write/write_all/read/wait/close (two pipes), promise set/try_set and
 * future get, then/then_future/any/all, timeout scope enter/leave.
 *
 * Determinism: the scheduler is deterministic (FIFO run queue, timers in
 * (deadline, arming order)), and every deadline is a point of a fixed grid
 * from the run's start (0 = try once, T0+1, +2, +4 ms), never "now plus",
 * so timers fire in an order fixed by the program; only a run whose CPU
 * work between two grid points exceeds a millisecond can see a deadline
 * already passed, and the oracles allow for it (expired_since). A slow
 * run makes that happen on purpose at one call. Nothing waits past the
 * last grid point: every run ends.
 *
 * Oracles, checked as the program runs:
 *   - precedence: a blocking call made by a cancelled fiber returns
 *     -ECANCELED; one made in a timeout scope that has expired returns
 *     -ETIMEDOUT; spawned fibers inherit no scope; weft_scope_deadline()
 *     matches the model of nested scopes;
 *   - every call returns one of its documented results for the state the
 *     model knows (join: -EDEADLK on self, -ESRCH when joined, the worker's
 *     value; unlock without holding: -EPERM; ...);
 *   - mutual exclusion: a lock (or a condition wait's return, on every
 *     path) never finds another fiber holding the mutex in the model;
 *     semaphore holders never exceed its permits;
 *   - channels: every element received was sent and is received once; a
 *     receiver sees each sender's elements in the order they were sent;
 *     -EPIPE only on a closed channel;
 *   - pipes: bytes arrive in order, unchanged; end of file only after the
 *     write end was closed and every byte was read; -EPIPE only after the
 *     read end was closed; after weft_close() the descriptor is closed;
 *   - promises: a settle callback runs exactly once, with what the one
 *     successful set gave; weft_future_get returns that; then adds one,
 *     then_future two; any settles like the first input to settle; all
 *     after both, with the first error in time;
 * and after the run (the teardown oracle): the driver joined every worker
 * (a join that outlives the last deadline by 10 s is a lost wake-up), all
 * written bytes were read, every channel element was received once, the
 * mutex is free, the semaphore has its permits back, every promise and
 * derived future settled exactly once, the scheduler reports no fibers,
 * handles, timers, waits, descriptor waits, posts or ring ops, and the
 * process has exactly the descriptors it had before the run.
 *
 *   build and run: scripts/test.d/fuzz_ops.sh (make test: 15,000 programs
 *   from a fixed seed on one backend); fuzz/README.md for longer runs.
 */
#include "weft.h"
#include "harness.h" /* test/c: h_fd_count() */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NW 5         /* workers at most                        */
#define MAXI 256     /* instructions per worker                */
#define NCH 2        /* channel 0 buffered, channel 1 not      */
#define NPIPE 2
#define NP 3         /* promises                               */
#define MAXD 16      /* derived futures                        */
#define MAXDEPTH 3   /* nested scopes                          */
#define BIG 70000    /* more than a pipe holds                 */
#define DELTA (1 * WEFT_MS)
#define SAFETY (10 * WEFT_SEC)

enum {
    OP_YIELD, OP_SLEEP, OP_SPAWN, OP_JOIN, OP_DETACH, OP_CANCEL, OP_PARK,
    OP_UNPARK, OP_LOCK, OP_TRYLOCK, OP_UNLOCK, OP_CWAIT, OP_CSIGNAL,
    OP_CBROADCAST, OP_SEM_ACQ, OP_SEM_TRY, OP_SEM_REL, OP_SEND, OP_RECV,
    OP_SELECT, OP_CLOSE_CH, OP_PWRITE, OP_PREAD, OP_PWAIT, OP_PCLOSE,
    OP_PSET, OP_FGET, OP_THEN, OP_ANY, OP_ALL, OP_SCOPE_IN, OP_SCOPE_OUT,
    OP_COUNT
};
static const char *const op_names[OP_COUNT] = {
    "yield", "sleep", "spawn", "join", "detach", "cancel", "park", "unpark",
    "lock", "trylock", "unlock", "cond_wait", "cond_signal", "cond_broadcast",
    "sem_acquire", "sem_try", "sem_release", "chan_send", "chan_recv",
    "chan_select", "chan_close", "pipe_write", "pipe_read", "pipe_wait",
    "pipe_close", "promise_set", "future_get", "then", "any", "all",
    "scope_enter", "scope_leave"};

typedef struct insn {
    uint8_t op, arg;
} insn;

enum { D_THEN, D_THEN_FUTURE, D_ANY, D_ALL };

typedef struct derived {
    weft_future_t *f;
    int kind, a, b;
    int created_seq;   /* settle sequence when it was made */
    int calls;
} derived;

static struct run {
    int64_t t0;
    int nw;
    int slow, calls;   /* a slow run: stall before call number slow */
    insn prog[NW][MAXI];
    int plen[NW];
    /* fibers */
    weft_fiber_t h[NW];
    uint8_t spawned[NW], joined[NW], detached[NW], finished[NW], joining[NW];
    int64_t cancelled_at[NW], finished_at[NW]; /* 0: not yet            */
    /* mutex, condition, semaphore */
    weft_mutex_t mu;
    weft_cond_t cv;
    int mu_owner;
    weft_sem_t sem;
    long sem_init, sem_total;
    int sem_held[NW];
    /* channels: element = sender << 16 | sequence */
    weft_chan_t *ch[NCH];
    uint8_t ch_closed[NCH];
    uint32_t sent[NCH][NW];             /* elements sent by each worker   */
    uint8_t sending[NCH][NW];           /* a send of the next one runs    */
    uint32_t last[NCH][NW][NW + 1];     /* per receiver: last seq + 1     */
    uint8_t got[NCH][NW][NW * MAXI];    /* times each element arrived     */
    /* pipes */
    struct {
        int fd[2];
        uint8_t open[2], busy[2];
        int64_t closed_at[2];
        uint64_t wctr, rctr;
    } p[NPIPE];
    /* promises */
    weft_promise_t *pr[NP];
    weft_future_t *fu[NP];
    struct {
        int calls, err, seq;
        void *val;
    } st[NP];
    int settle_seq;
    derived d[MAXD];
    int nd;
    /* scopes (model): eff[w][depth] is the effective deadline */
    int depth[NW];
    int64_t saved[NW][MAXDEPTH];
    int64_t eff[NW][MAXDEPTH + 1];
    /* the last operations, printed on failure */
    struct {
        uint8_t w, op, arg;
        long rc;
    } trace[64];
    unsigned ntrace;
} R;

static uint8_t wbuf[NW][BIG], rbuf[NW][BIG];

static void dump_trace(void)
{
    unsigned n = R.ntrace < 64 ? R.ntrace : 64;
    fprintf(stderr, "ops_fuzz: last %u operations (worker op arg -> result):\n", n);
    for (unsigned i = R.ntrace - n; i < R.ntrace; i++) {
        const typeof(R.trace[0]) *t = &R.trace[i % 64];
        fprintf(stderr, "  %u: w%u %s %u -> %ld\n", i, t->w,
                t->op < OP_COUNT ? op_names[t->op] : "driver", t->arg, t->rc);
    }
}

#define FAIL(...)                                                         \
    do {                                                                  \
        fprintf(stderr, "ops_fuzz: %s:%d: ", __FILE__, __LINE__);         \
        fprintf(stderr, __VA_ARGS__);                                     \
        fprintf(stderr, "\n");                                            \
        dump_trace();                                                     \
        abort();                                                          \
    } while (0)
/* EXPECT(condition, "format", ...) */
#define EXPECT(c, ...)                                                    \
    do {                                                                  \
        if (!(c)) {                                                       \
            fprintf(stderr, "ops_fuzz: %s:%d: `%s` does not hold: ",      \
                    __FILE__, __LINE__, #c);                              \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            dump_trace();                                                 \
            abort();                                                      \
        }                                                                 \
    } while (0)

/* OPS_FUZZ_TRACE=1 prints every operation as it completes (replaying an
 * input: build/fuzz/ops_fuzz FILE). */
static void note(int w, int op, int arg, long rc)
{
    static int print = -1;
    if (print < 0)
        print = getenv("OPS_FUZZ_TRACE") != NULL;
    if (print)
        fprintf(stderr, "w%d %s %d -> %ld\n", w, op_names[op], arg, rc);
    unsigned i = R.ntrace++ % 64;
    R.trace[i].w = (uint8_t)w;
    R.trace[i].op = (uint8_t)op;
    R.trace[i].arg = (uint8_t)arg;
    R.trace[i].rc = rc;
}

static int64_t grid(int sel)
{
    static const int k[4] = {0, 1, 2, 4};
    return (sel & 3) == 0 ? 0 : R.t0 + k[sel & 3] * DELTA;
}

/* ---- the precedence oracle --------------------------------------------- */

typedef struct pre {
    int w, cancelled, expired;
    int64_t now, scope;
} pre;

static pre before(int w)
{
    pre p;
    p.w = w;
    p.now = weft_now();
    p.cancelled = weft_cancelled();
    p.scope = R.eff[w][R.depth[w]];
    p.expired = p.scope != WEFT_FOREVER && p.now >= p.scope;
    return p;
}

/* The deadline a wait of the call really had: its own, or the scope's. */
static int64_t until(pre p, int64_t dl)
{
    return p.scope != WEFT_FOREVER && p.scope < dl ? p.scope : dl;
}

/* An event at @at (0: none) that must have ended a wait with deadline @dl
 * before the wait's own timer could fire: a wait that still timed out
 * lost a wake-up. Times are taken after the event, so they are late, never
 * early: @at < @dl means the event came first. */
static void woken_by(const char *what, const char *event, long rc, int64_t at, int64_t dl)
{
    EXPECT(!(rc == -ETIMEDOUT && at && dl > 0 && at < dl),
           "%s timed out at its deadline %lld although %s %lld ns before it", what,
           (long long)dl, event, (long long)(dl - at));
}

/* Every wait of a blocking call ends with -ECANCELED once its fiber is
 * cancelled (unless something else ended it first). */
static void cancel_wakes(pre p, const char *what, long rc, int64_t dl)
{
    if (!p.cancelled)
        woken_by(what, "its fiber was cancelled", rc, R.cancelled_at[p.w], until(p, dl));
}

/* Common to every blocking call: returns 1 when the precheck decided. */
static int prechecked(pre p, long rc, const char *what)
{
    if (p.cancelled) {
        EXPECT(rc == -ECANCELED, "%s in a cancelled fiber -> %ld", what, rc);
        return 1;
    }
    if (p.expired) {
        EXPECT(rc == -ETIMEDOUT, "%s in an expired scope -> %ld", what, rc);
        return 1;
    }
    return 0;
}

/* The scope's deadline passed after before() looked and before the call's
 * own precheck did (a slow or preempted run: the grid is 1 ms), so the call
 * rightly said -ETIMEDOUT where the state alone would give another error. */
static int expired_since(pre p, long rc)
{
    return rc == -ETIMEDOUT && p.scope != WEFT_FOREVER && weft_now() >= p.scope;
}

static int waited_out(long rc)
{
    return rc == -ETIMEDOUT || rc == -EAGAIN || rc == -ECANCELED;
}

/* The try rule (weft.h, Deadlines): a call given deadline 0 that would
 * have to wait says -EAGAIN, never -ETIMEDOUT unless a timeout scope
 * bounds it; a call given any other deadline never says -EAGAIN; a scope
 * that had expired before the call wins (-ETIMEDOUT). */
static void try_rule(int op, pre p, long rc, int64_t dl)
{
    switch (op) {
    case OP_SLEEP: case OP_JOIN: case OP_PARK: case OP_LOCK: case OP_CWAIT:
    case OP_SEM_ACQ: case OP_SEND: case OP_RECV: case OP_SELECT:
    case OP_PWRITE: case OP_PREAD: case OP_PWAIT: case OP_FGET:
        break;
    default:
        return; /* takes no deadline */
    }
    EXPECT(!(rc == -EAGAIN && (dl != 0 || p.expired)),
           "%s with deadline %lld%s -> -EAGAIN", op_names[op], (long long)dl,
           p.expired ? " in an expired scope" : "");
    EXPECT(!(rc == -ETIMEDOUT && dl == 0 && p.scope == WEFT_FOREVER),
           "%s with deadline 0 and no scope -> -ETIMEDOUT (a try says -EAGAIN)",
           op_names[op]);
}

/* After a blocking call: 1 when the precedence oracle decided its result
 * (then nothing else applies); else check that no cancellation and, with
 * @closed_at, no close of its descriptor came before its deadline unseen. */
static int ended(pre p, const char *what, long rc, int64_t dl, int64_t closed_at)
{
    if (prechecked(p, rc, what))
        return 1;
    cancel_wakes(p, what, rc, dl);
    woken_by(what, "its descriptor was closed", rc, closed_at, until(p, dl));
    return 0;
}

/* ---- promises -------------------------------------------------------- */

static void settled_cb(void *arg, int err, void *value)
{
    int k = (int)(intptr_t)arg;
    R.st[k].calls++;
    EXPECT(R.st[k].calls == 1, "promise %d settled %d times", k, R.st[k].calls);
    R.st[k].err = err;
    R.st[k].val = value;
    R.st[k].seq = ++R.settle_seq;
}

static int plus_one(void *arg, void *value, void **out)
{
    (void)arg;
    *out = (char *)value + 1;
    return 0;
}

static weft_future_t *plus_two_later(void *arg, void *value)
{
    (void)arg;
    return weft_future_ready((char *)value + 2);
}

/* The result @d must have, given its inputs' settlements: 1 if it matches. */
static int derived_ok(const derived *d, int err, void *value)
{
    const typeof(R.st[0]) *a = &R.st[d->a], *b = &R.st[d->b];
    switch (d->kind) {
    case D_THEN:
    case D_THEN_FUTURE:
        if (a->calls != 1)
            return 0;
        if (a->err)
            return err == a->err;
        return err == 0 && value == (char *)a->val + (d->kind == D_THEN ? 1 : 2);
    case D_ANY: {
        /* like the first input to settle; inputs settled before it was
         * made may be taken in either order */
        int ok = 0;
        for (int i = 0; i < 2; i++) {
            const typeof(R.st[0]) *x = i ? b : a, *y = i ? a : b;
            if (x->calls != 1)
                continue;
            int first = y->calls != 1 || x->seq <= y->seq ||
                        (x->seq <= d->created_seq && y->seq <= d->created_seq);
            if (first && err == x->err && (err || value == x->val))
                ok = 1;
        }
        return ok;
    }
    default: /* D_ALL */
        if (a->calls != 1 || b->calls != 1)
            return 0;
        if (!a->err && !b->err)
            return err == 0 && value == NULL;
        if (!a->err || !b->err)
            return err == (a->err ? a->err : b->err);
        if (a->seq <= d->created_seq && b->seq <= d->created_seq)
            return err == a->err || err == b->err;
        return err == (a->seq < b->seq ? a->err : b->err);
    }
}

static void derived_cb(void *arg, int err, void *value)
{
    derived *d = arg;
    d->calls++;
    EXPECT(d->calls == 1, "derived future (kind %d) settled %d times", d->kind, d->calls);
    EXPECT(derived_ok(d, err, value),
           "derived future kind %d of promises %d,%d settled with err %d value %p "
           "(inputs: err %d val %p seq %d / err %d val %p seq %d, made at %d)",
           d->kind, d->a, d->b, err, value, R.st[d->a].err, R.st[d->a].val,
           R.st[d->a].seq, R.st[d->b].err, R.st[d->b].val, R.st[d->b].seq,
           d->created_seq);
}

static void add_derived(int kind, int a, int b)
{
    if (R.nd == MAXD)
        return;
    derived *d = &R.d[R.nd];
    d->kind = kind;
    d->a = a;
    d->b = b;
    d->calls = 0;
    d->created_seq = R.settle_seq;
    switch (kind) {
    case D_THEN:
        d->f = weft_then(weft_future_ref(R.fu[a]), plus_one, NULL);
        break;
    case D_THEN_FUTURE:
        d->f = weft_then_future(weft_future_ref(R.fu[a]), plus_two_later, NULL);
        break;
    default: {
        weft_future_t *in[2] = {R.fu[a], R.fu[b]};
        d->f = kind == D_ANY ? weft_future_any(in, 2) : weft_future_all(in, 2);
        break;
    }
    }
    EXPECT(d->f != NULL, "derived future kind %d: NULL", kind);
    R.nd++;
    EXPECT(weft_future_subscribe(d->f, derived_cb, d) == 0, "subscribe");
}

/* ---- channels -------------------------------------------------------- */

static void received(int c, int receiver, uint32_t v)
{
    int s = (int)(v >> 16);
    uint32_t seq = v & 0xffff;
    /* a sender blocked in its send may be handed over to a receiver that
     * runs before the sender returns */
    EXPECT(s < R.nw && (seq < R.sent[c][s] || (seq == R.sent[c][s] && R.sending[c][s])),
           "channel %d: element %#x was never sent (sender %d sent %u)", c, v, s,
           s < NW ? R.sent[c][s] : 0);
    EXPECT(R.got[c][s][seq] == 0, "channel %d: element %#x received twice", c, v);
    R.got[c][s][seq] = 1;
    EXPECT(seq + 1 > R.last[c][s][receiver],
           "channel %d: receiver %d got %#x after seq %u of the same sender", c,
           receiver, v, R.last[c][s][receiver] - 1);
    R.last[c][s][receiver] = seq + 1;
}

/* ---- pipes ----------------------------------------------------------- */

static const size_t plens[4] = {1, 512, 4096, BIG};

static void fill(uint8_t *b, size_t n, uint64_t from)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)((from + i) % 251);
}

static void check_bytes(int pi, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        EXPECT(b[i] == (uint8_t)((R.p[pi].rctr + i) % 251),
               "pipe %d: byte %llu is %u", pi, (unsigned long long)(R.p[pi].rctr + i), b[i]);
    R.p[pi].rctr += n;
}

static void pipe_close(int pi, int end)
{
    R.p[pi].open[end] = 0;
    int fd = R.p[pi].fd[end];
    int rc = weft_close(fd);
    EXPECT(rc == 0, "weft_close(pipe %d end %d) -> %d", pi, end, rc);
    EXPECT(fcntl(fd, F_GETFD) < 0 && errno == EBADF,
           "pipe %d end %d still open after weft_close", pi, end);
    R.p[pi].closed_at[end] = weft_now();
}

/* One reader and one writer at a time per pipe, so that the bytes each
 * sees are checkable: 1 if the end is open and now ours. */
static int claim(int pi, int end)
{
    if (!R.p[pi].open[end] || R.p[pi].busy[end])
        return 0;
    R.p[pi].busy[end] = 1;
    return 1;
}

/* ---- one instruction -------------------------------------------------- */

static void *worker(void *arg);

static void spawn_worker(int j)
{
    int rc = weft_spawn(worker, (void *)(intptr_t)j, NULL, &R.h[j]);
    EXPECT(rc == 0, "spawn worker %d -> %d", j, rc);
    R.spawned[j] = 1;
}

static void release_mutex(int w)
{
    EXPECT(R.mu_owner == w, "unlock by %d, model owner %d", w, R.mu_owner);
    R.mu_owner = -1;
    int rc = weft_mutex_unlock(&R.mu);
    EXPECT(rc == 0, "unlock -> %d", rc);
}

static void took_mutex(int w, const char *how)
{
    EXPECT(R.mu_owner == -1, "%s by %d while %d holds the mutex", how, w, R.mu_owner);
    R.mu_owner = w;
}

/* A slow run (bit 7 of byte 0; byte 1 then says which call, K) stalls the
 * thread before the K-th call the workers make, after the oracle has
 * looked at the state, until just past the deadline the call will have
 * (its own or its scope's), as a slow or preempted machine may: the
 * oracles must hold when a deadline passes in between. */
static void stall_past(int64_t dl)
{
    if (!R.slow || ++R.calls != R.slow)
        return;
    int64_t now = weft_now();
    if (dl <= now || dl == WEFT_FOREVER)
        return;
    int64_t ns = dl - now + 20 * WEFT_US;
    struct timespec ts = {(time_t)(ns / WEFT_SEC), (long)(ns % WEFT_SEC)};
    nanosleep(&ts, NULL);
}

static void exec(int w, insn in)
{
    int a = in.arg;
    int64_t dl = grid(a);
    pre p = before(w);
    stall_past(dl == 0 ? p.scope : until(p, dl));
    long rc = 0;
    switch (in.op % OP_COUNT) {
    case OP_YIELD:
        rc = weft_yield();
        if (!prechecked(p, rc, "yield"))
            EXPECT(rc == 0 || waited_out(rc), "yield -> %ld", rc);
        break;
    case OP_SLEEP:
        rc = weft_sleep_until(dl);
        if (!prechecked(p, rc, "sleep")) {
            EXPECT(!(rc == 0 && R.cancelled_at[w] && R.cancelled_at[w] < until(p, dl)),
                   "sleep slept through its cancellation");
            if (rc == 0)
                EXPECT(weft_now() >= dl, "sleep returned 0 before its deadline");
            else if (rc == -ETIMEDOUT)
                EXPECT(R.eff[w][R.depth[w]] != WEFT_FOREVER &&
                       weft_now() >= R.eff[w][R.depth[w]],
                       "sleep -> -ETIMEDOUT outside an expired scope");
            else
                EXPECT(rc == -ECANCELED && weft_cancelled(), "sleep -> %ld", rc);
        }
        break;
    case OP_SPAWN: {
        int j = (a >> 2) % R.nw;
        if (!R.spawned[j])
            spawn_worker(j);
        break;
    }
    case OP_JOIN: {
        int j = (a >> 2) % R.nw;
        void *res = NULL;
        int was_joined = R.joined[j], was_detached = R.detached[j];
        int others = R.joining[j];
        R.joining[j]++;
        rc = weft_join(R.h[j], &res, dl);
        R.joining[j]--;
        if (ended(p, "join", rc, dl, 0))
            break;
        if (!was_joined && !was_detached && j != w && R.spawned[j])
            woken_by("join", "the fiber finished", rc, R.finished_at[j], until(p, dl));
        if (expired_since(p, rc)) {
            ;
        } else if (rc == 0) {
            EXPECT(R.spawned[j] && !was_joined && !was_detached && j != w,
                   "join of worker %d succeeded (spawned %d joined %d detached %d)",
                   j, R.spawned[j], was_joined, was_detached);
            EXPECT(res == (void *)(intptr_t)(0x100 + j) && R.finished[j],
                   "join of worker %d gave %p", j, res);
            EXPECT(!R.joined[j], "worker %d joined twice", j);
            R.joined[j] = 1;
        } else if (!R.spawned[j] || was_joined) {
            EXPECT(rc == -ESRCH, "join of a %s handle -> %ld",
                   R.spawned[j] ? "joined" : "zero", rc);
        } else if (was_detached) {
            EXPECT(rc == -EINVAL || rc == -ESRCH, "join of a detached fiber -> %ld", rc);
        } else if (j == w) {
            EXPECT(rc == -EDEADLK, "join of self -> %ld", rc);
        } else if (others) {
            EXPECT(rc == -EINVAL || rc == -ESRCH || waited_out(rc),
                   "second joiner -> %ld", rc);
        } else {
            EXPECT(waited_out(rc) || (rc == -ESRCH && R.joined[j]),
                   "join of worker %d -> %ld", j, rc);
        }
        break;
    }
    case OP_DETACH: {
        int j = (a >> 2) % R.nw;
        rc = weft_detach(R.h[j]);
        if (rc == 0) {
            EXPECT(R.spawned[j] && !R.joined[j] && !R.detached[j] && !R.joining[j],
                   "detach of worker %d succeeded", j);
            R.detached[j] = 1;
        } else if (!R.spawned[j] || R.joined[j]) {
            EXPECT(rc == -ESRCH, "detach of a stale handle -> %ld", rc);
        } else {
            EXPECT(rc == -EINVAL || (rc == -ESRCH && R.detached[j]),
                   "detach -> %ld", rc);
        }
        break;
    }
    case OP_CANCEL: {
        int j = (a >> 2) % R.nw;
        rc = weft_cancel(R.h[j]);
        if (rc == 0 && !R.cancelled_at[j])
            R.cancelled_at[j] = weft_now();
        if (!R.spawned[j] || R.joined[j])
            EXPECT(rc == -ESRCH, "cancel of a stale handle -> %ld", rc);
        else
            EXPECT(rc == 0 || (rc == -ESRCH && R.detached[j] && R.finished[j]),
                   "cancel of worker %d -> %ld", j, rc);
        break;
    }
    case OP_PARK:
        rc = weft_park(dl);
        cancel_wakes(p, "park", rc, dl);
        if (!prechecked(p, rc, "park"))
            EXPECT(rc == 0 || waited_out(rc), "park -> %ld", rc);
        break;
    case OP_UNPARK: {
        int j = (a >> 2) % R.nw;
        rc = weft_unpark(NULL, R.h[j]);
        EXPECT(rc == 0 || rc == -ESRCH, "unpark -> %ld", rc);
        if (R.spawned[j] && !R.joined[j] && !R.finished[j])
            EXPECT(rc == 0, "unpark of a live worker -> %ld", rc);
        break;
    }
    case OP_LOCK:
        rc = weft_mutex_lock(&R.mu, dl);
        if (ended(p, "lock", rc, dl, 0) || expired_since(p, rc))
            break;
        if (R.mu_owner == w)
            EXPECT(rc == -EDEADLK, "relock -> %ld", rc);
        else if (rc == 0)
            took_mutex(w, "lock");
        else
            EXPECT(waited_out(rc), "lock -> %ld", rc);
        break;
    case OP_TRYLOCK:
        rc = weft_mutex_trylock(&R.mu);
        if (R.mu_owner == w)
            EXPECT(rc == -EDEADLK, "trylock of own mutex -> %ld", rc);
        else if (rc == 0)
            took_mutex(w, "trylock");
        else
            EXPECT(rc == -EBUSY, "trylock -> %ld", rc);
        break;
    case OP_UNLOCK:
        if (R.mu_owner == w) {
            release_mutex(w);
        } else {
            rc = weft_mutex_unlock(&R.mu);
            EXPECT(rc == -EPERM, "unlock without holding -> %ld", rc);
        }
        break;
    case OP_CWAIT:
        if (R.mu_owner != w) {
            rc = weft_cond_wait(&R.cv, &R.mu, dl);
            EXPECT(rc == -EPERM || (rc == -ECANCELED && p.cancelled) ||
                   (rc == -ETIMEDOUT && p.expired) || expired_since(p, rc),
                   "cond_wait without the mutex -> %ld", rc);
            break;
        }
        R.mu_owner = -1;
        rc = weft_cond_wait(&R.cv, &R.mu, dl);
        took_mutex(w, "cond_wait's return");
        cancel_wakes(p, "cond_wait", rc, dl);
        if (!prechecked(p, rc, "cond_wait"))
            EXPECT(rc == 0 || waited_out(rc), "cond_wait -> %ld", rc);
        break;
    case OP_CSIGNAL:
        rc = (a & 4) ? weft_cond_broadcast(&R.cv) : weft_cond_signal(&R.cv);
        EXPECT(rc == 0, "cond signal -> %ld", rc);
        break;
    case OP_CBROADCAST:
        rc = weft_cond_broadcast(&R.cv);
        EXPECT(rc == 0, "broadcast -> %ld", rc);
        break;
    case OP_SEM_ACQ:
    case OP_SEM_TRY:
        if (in.op % OP_COUNT == OP_SEM_TRY) {
            rc = weft_sem_try_acquire(&R.sem);
            if (rc < 0) {
                EXPECT(rc == -EAGAIN, "sem_try -> %ld", rc);
                break;
            }
        } else {
            rc = weft_sem_acquire(&R.sem, dl);
            if (ended(p, "sem_acquire", rc, dl, 0))
                break;
            if (rc < 0) {
                EXPECT(waited_out(rc), "sem_acquire -> %ld", rc);
                break;
            }
        }
        EXPECT(R.sem_total < R.sem_init, "semaphore: %ld holders of %ld permits",
               R.sem_total + 1, R.sem_init);
        R.sem_total++;
        R.sem_held[w]++;
        break;
    case OP_SEM_REL:
        if (R.sem_held[w]) {
            R.sem_held[w]--;
            R.sem_total--;
            rc = weft_sem_release(&R.sem);
            EXPECT(rc == 0, "sem_release -> %ld", rc);
        }
        break;
    case OP_SEND: {
        int c = (a >> 2) & 1;
        uint32_t v = (uint32_t)w << 16 | R.sent[c][w];
        R.sending[c][w] = 1;
        rc = weft_chan_send(R.ch[c], &v, dl);
        R.sending[c][w] = 0;
        if (ended(p, "chan_send", rc, dl, 0))
            break;
        if (rc == 0)
            R.sent[c][w]++;
        else if (rc == -EPIPE)
            EXPECT(R.ch_closed[c], "send -> -EPIPE on an open channel");
        else
            EXPECT(waited_out(rc), "send -> %ld", rc);
        break;
    }
    case OP_RECV: {
        int c = (a >> 2) & 1;
        uint32_t v = 0;
        rc = weft_chan_recv(R.ch[c], &v, dl);
        if (ended(p, "chan_recv", rc, dl, 0))
            break;
        if (rc == 0)
            received(c, w, v);
        else if (rc == -EPIPE)
            EXPECT(R.ch_closed[c], "recv -> -EPIPE on an open channel");
        else
            EXPECT(waited_out(rc), "recv -> %ld", rc);
        break;
    }
    case OP_SELECT: {
        int cs = (a >> 2) & 1, cr = (a >> 3) & 1;
        uint32_t out = (uint32_t)w << 16 | R.sent[cs][w], in_v = 0;
        weft_chan_op_t ops[2] = {
            {.chan = R.ch[cs], .op = WEFT_CHAN_SEND, .elem = &out},
            {.chan = R.ch[cr], .op = WEFT_CHAN_RECV, .elem = &in_v},
        };
        if (a & 0x10) { /* receive first */
            weft_chan_op_t t = ops[0];
            ops[0] = ops[1];
            ops[1] = t;
        }
        R.sending[cs][w] = 1;
        rc = weft_chan_select(ops, 2, dl);
        R.sending[cs][w] = 0;
        if (ended(p, "chan_select", rc, dl, 0))
            break;
        if (rc < 0) {
            EXPECT(waited_out(rc), "select -> %ld", rc);
            break;
        }
        EXPECT(rc == 0 || rc == 1, "select -> %ld", rc);
        weft_chan_op_t *o = &ops[rc];
        int c = o->op == WEFT_CHAN_SEND ? cs : cr;
        if (o->result == -EPIPE)
            EXPECT(R.ch_closed[c], "select: -EPIPE on an open channel");
        else if (o->op == WEFT_CHAN_SEND && o->result == 0)
            R.sent[cs][w]++;
        else if (o->op == WEFT_CHAN_RECV && o->result == 0)
            received(cr, w, in_v);
        else
            FAIL("select result %d", o->result);
        break;
    }
    case OP_CLOSE_CH: {
        int c = (a >> 2) & 1;
        int was = R.ch_closed[c];
        R.ch_closed[c] = 1;
        rc = weft_chan_close(R.ch[c]);
        EXPECT(rc == (was ? -EALREADY : 0), "chan_close -> %ld", rc);
        break;
    }
    case OP_PWRITE: {
        int pi = (a >> 2) & 1;
        size_t len = plens[(a >> 3) & 3];
        if (!claim(pi, 1))
            break;
        fill(wbuf[w], len, R.p[pi].wctr);
        size_t done = 0;
        if (a & 0x20) {
            rc = weft_write_all(R.p[pi].fd[1], wbuf[w], len, &done, dl);
            EXPECT(rc < 0 || done == len, "write_all -> 0 with %zu of %zu", done, len);
        } else {
            rc = weft_write(R.p[pi].fd[1], wbuf[w], len, dl);
            if (rc > 0)
                done = (size_t)rc;
        }
        EXPECT(done <= len, "wrote %zu of %zu", done, len);
        R.p[pi].wctr += done;
        R.p[pi].busy[1] = 0;
        if (ended(p, "pipe write", rc, dl, R.p[pi].closed_at[1]))
            break;
        if (rc == -EPIPE)
            EXPECT(!R.p[pi].open[0], "write -> -EPIPE with the read end open");
        else if (rc == -EBADF)
            EXPECT(!R.p[pi].open[1], "write -> -EBADF with the write end open");
        else
            EXPECT(rc >= 0 || waited_out(rc), "pipe write -> %ld", rc);
        break;
    }
    case OP_PREAD: {
        int pi = (a >> 2) & 1;
        size_t len = plens[(a >> 3) & 3];
        if (!claim(pi, 0))
            break;
        rc = weft_read(R.p[pi].fd[0], rbuf[w], len, dl);
        R.p[pi].busy[0] = 0;
        if (rc > 0) {
            EXPECT((size_t)rc <= len, "read %ld of %zu", rc, len);
            check_bytes(pi, rbuf[w], (size_t)rc);
        }
        if (ended(p, "pipe read", rc, dl, R.p[pi].closed_at[0]))
            break;
        if (rc == 0)
            EXPECT(!R.p[pi].open[1] && R.p[pi].rctr == R.p[pi].wctr,
                   "end of file with the write end %s, %llu of %llu bytes read",
                   R.p[pi].open[1] ? "open" : "closed",
                   (unsigned long long)R.p[pi].rctr, (unsigned long long)R.p[pi].wctr);
        else if (rc == -EBADF)
            EXPECT(!R.p[pi].open[0], "read -> -EBADF with the read end open");
        else
            EXPECT(rc > 0 || waited_out(rc), "pipe read -> %ld", rc);
        break;
    }
    case OP_PWAIT: {
        int pi = (a >> 2) & 1, end = (a >> 3) & 1;
        if (!R.p[pi].open[end])
            break;
        rc = weft_wait_fd(R.p[pi].fd[end], end ? WEFT_WRITABLE : WEFT_READABLE, dl);
        if (ended(p, "wait_fd", rc, dl, R.p[pi].closed_at[end]))
            break;
        if (rc == -EBADF)
            EXPECT(!R.p[pi].open[end], "wait_fd -> -EBADF with the end open");
        else
            EXPECT(rc > 0 || waited_out(rc), "wait_fd -> %ld", rc);
        break;
    }
    case OP_PCLOSE: {
        int pi = (a >> 2) & 1, end = (a >> 3) & 1;
        if (R.p[pi].open[end])
            pipe_close(pi, end);
        break;
    }
    case OP_PSET: {
        int k = ((a >> 2) & 3) % NP;
        static const int errs[4] = {-EIO, -ENOENT, -EPROTO, -EDOM};
        int err = (a & 0x10) ? errs[(a >> 5) & 3] : 0;
        void *val = (void *)(intptr_t)(0x10000 * (k + 1) + (a & 0xe0));
        int was = R.st[k].calls;
        if (a & 0x40)
            rc = weft_promise_try_set(R.pr[k], err, val);
        else
            rc = err ? weft_promise_set_error(R.pr[k], err)
                     : weft_promise_set_value(R.pr[k], val);
        int set_now = (a & 0x40) ? rc == 1 : rc == 0;
        if (was) {
            EXPECT(rc == ((a & 0x40) ? 0 : -EALREADY), "second set -> %ld", rc);
        } else {
            EXPECT(set_now, "first set -> %ld", rc);
            EXPECT(R.st[k].calls == 1 && R.st[k].err == err &&
                       (err || R.st[k].val == val),
                   "promise %d: callback saw err %d val %p, set err %d val %p", k,
                   R.st[k].err, R.st[k].val, err, val);
        }
        break;
    }
    case OP_FGET: {
        int k = ((a >> 2) & 3) % NP;
        void *v = NULL;
        rc = weft_future_get(R.fu[k], &v, dl);
        if (ended(p, "future_get", rc, dl, 0))
            break;
        if (rc == 0)
            EXPECT(R.st[k].calls == 1 && !R.st[k].err && v == R.st[k].val,
                   "future_get -> 0, %p", v);
        else if (R.st[k].calls == 1 && rc == R.st[k].err)
            ;
        else
            EXPECT(waited_out(rc), "future_get -> %ld (settled %d err %d)", rc,
                   R.st[k].calls, R.st[k].err);
        break;
    }
    case OP_THEN: {
        int k = ((a >> 2) & 3) % NP;
        add_derived((a & 0x10) ? D_THEN_FUTURE : D_THEN, k, k);
        break;
    }
    case OP_ANY:
    case OP_ALL:
        add_derived(in.op % OP_COUNT == OP_ANY ? D_ANY : D_ALL, ((a >> 2) & 3) % NP,
                    ((a >> 4) & 3) % NP);
        break;
    case OP_SCOPE_IN: {
        int d = R.depth[w];
        if (d == MAXDEPTH)
            break;
        rc = weft_scope_enter(dl, &R.saved[w][d]);
        EXPECT(rc == 0, "scope_enter -> %ld", rc);
        int64_t v = dl < 1 ? 1 : dl, outer = R.eff[w][d];
        R.eff[w][d + 1] = outer != WEFT_FOREVER && outer < v ? outer : v;
        R.depth[w] = d + 1;
        EXPECT(weft_scope_deadline() == R.eff[w][d + 1],
               "scope deadline %lld, model %lld", (long long)weft_scope_deadline(),
               (long long)R.eff[w][d + 1]);
        break;
    }
    case OP_SCOPE_OUT: {
        int d = R.depth[w];
        if (d == 0)
            break;
        rc = weft_scope_leave(R.saved[w][d - 1]);
        EXPECT(rc == 0, "scope_leave -> %ld", rc);
        R.depth[w] = d - 1;
        EXPECT(weft_scope_deadline() == R.eff[w][d - 1], "scope deadline after leave");
        break;
    }
    }
    try_rule(in.op % OP_COUNT, p, rc, dl);
    note(w, in.op % OP_COUNT, a, rc);
}

static void *worker(void *arg)
{
    int w = (int)(intptr_t)arg;
    EXPECT(weft_scope_deadline() == WEFT_FOREVER, "worker %d inherited a scope", w);
    for (int i = 0; i < R.plen[w]; i++)
        exec(w, R.prog[w][i]);
    while (R.depth[w] > 0) {
        R.depth[w]--;
        EXPECT(weft_scope_leave(R.saved[w][R.depth[w]]) == 0, "final scope_leave");
    }
    if (R.mu_owner == w)
        release_mutex(w);
    while (R.sem_held[w]) {
        R.sem_held[w]--;
        R.sem_total--;
        EXPECT(weft_sem_release(&R.sem) == 0, "final sem_release");
    }
    R.finished[w] = 1;
    R.finished_at[w] = weft_now();
    return (void *)(intptr_t)(0x100 + w);
}

/* ---- the driver: setup, start, join, drain, check -------------------- */

static void drain_pipes(void)
{
    for (int pi = 0; pi < NPIPE; pi++) {
        if (R.p[pi].open[1])
            pipe_close(pi, 1);
        if (!R.p[pi].open[0])
            continue;
        for (;;) {
            ssize_t n = weft_read(R.p[pi].fd[0], rbuf[0], BIG, R.t0 + SAFETY);
            EXPECT(n >= 0, "draining pipe %d -> %zd", pi, n);
            if (n == 0)
                break;
            check_bytes(pi, rbuf[0], (size_t)n);
        }
        EXPECT(R.p[pi].rctr == R.p[pi].wctr, "pipe %d: %llu bytes written, %llu read", pi,
               (unsigned long long)R.p[pi].wctr, (unsigned long long)R.p[pi].rctr);
        pipe_close(pi, 0);
    }
}

static void drain_channels(void)
{
    for (int c = 0; c < NCH; c++) {
        uint32_t v;
        int rc;
        while ((rc = weft_chan_recv(R.ch[c], &v, 0)) == 0)
            received(c, NW, v);
        EXPECT(rc == (R.ch_closed[c] ? -EPIPE : -EAGAIN), "drain channel %d -> %d", c, rc);
        EXPECT(weft_chan_len(R.ch[c]) == 0, "channel %d not empty", c);
        for (int s = 0; s < R.nw; s++) {
            for (uint32_t q = 0; q < R.sent[c][s]; q++)
                EXPECT(R.got[c][s][q] == 1, "channel %d: element %#x of %u sent never received",
                       c, (unsigned)s << 16 | q, R.sent[c][s]);
            /* a send that failed must not have delivered its element */
            EXPECT(R.got[c][s][R.sent[c][s]] == 0,
                   "channel %d: element %#x received, but its send failed", c,
                   (unsigned)s << 16 | R.sent[c][s]);
        }
        EXPECT(weft_chan_destroy(R.ch[c]) == 0, "chan_destroy");
    }
}

static void *driver(void *arg)
{
    (void)arg;
    /* Join the workers that run; then start those nobody started (their
     * deadlines may have passed by then: they try once); until all ran. */
    int64_t give_up = R.t0 + SAFETY;
    for (;;) {
        int progress = 0;
        for (int j = 0; j < R.nw; j++) {
            if (!R.spawned[j] || R.joined[j] || R.detached[j])
                continue;
            void *res;
            R.joining[j]++;
            int rc = weft_join(R.h[j], &res, give_up);
            R.joining[j]--;
            if (rc == 0) {
                EXPECT(res == (void *)(intptr_t)(0x100 + j) && R.finished[j],
                       "driver's join of %d gave %p", j, res);
                R.joined[j] = 1;
            } else if (rc == -EINVAL && (R.joining[j] || R.detached[j])) {
                /* a worker joins it (or detached it meanwhile) */
                weft_sleep(DELTA);
            } else if (rc == -ESRCH && R.joined[j]) {
                ;
            } else {
                FAIL("driver's join of worker %d -> %d (a lost wake-up if -ETIMEDOUT)", j, rc);
            }
            progress = 1;
        }
        for (int j = 0; j < R.nw && !progress; j++)
            if (!R.spawned[j]) {
                spawn_worker(j);
                progress = 1;
            }
        if (!progress)
            break;
        EXPECT(weft_now() < give_up, "workers still running 10 s after the last deadline");
    }
    for (int j = 0; j < R.nw; j++)
        while (!R.finished[j]) {
            EXPECT(weft_now() < give_up, "detached worker %d never finished", j);
            weft_sleep(DELTA);
        }
    drain_pipes();
    drain_channels();
    EXPECT(R.mu_owner == -1, "mutex held after the run");
    EXPECT(weft_mutex_destroy(&R.mu) == 0, "mutex_destroy");
    EXPECT(weft_cond_destroy(&R.cv) == 0, "cond_destroy");
    EXPECT(R.sem_total == 0 && weft_sem_value(&R.sem) == R.sem_init,
           "semaphore: %ld permits free of %ld", weft_sem_value(&R.sem), R.sem_init);
    EXPECT(weft_sem_destroy(&R.sem) == 0, "sem_destroy");
    /* Unset promises break (-EPIPE); then everything has settled once. */
    for (int k = 0; k < NP; k++) {
        int was = R.st[k].calls;
        weft_promise_release(R.pr[k]);
        if (!was)
            EXPECT(R.st[k].calls == 1 && R.st[k].err == -EPIPE,
                   "released promise %d: calls %d err %d", k, R.st[k].calls, R.st[k].err);
        EXPECT(R.st[k].calls == 1, "promise %d settled %d times", k, R.st[k].calls);
    }
    for (int i = 0; i < R.nd; i++) {
        EXPECT(R.d[i].calls == 1, "derived future %d (kind %d) settled %d times", i,
               R.d[i].kind, R.d[i].calls);
        weft_future_release(R.d[i].f);
    }
    for (int k = 0; k < NP; k++)
        weft_future_release(R.fu[k]);
    return NULL;
}

static void setup(const uint8_t *data, size_t size)
{
    memset(&R, 0, sizeof R);
    uint8_t cfg = data[0];
    R.nw = 2 + (cfg & 3);
    if (R.nw > NW)
        R.nw = NW;
    size_t start = 1;
    if ((cfg & 0x80) && size > 1) {
        R.slow = 1 + data[1];
        start = 2;
    }
    for (size_t i = start; i + 1 < size; i += 2) {
        int w = (data[i] >> 5) % R.nw;
        if (R.plen[w] < MAXI)
            R.prog[w][R.plen[w]++] = (insn){(uint8_t)(data[i] & 31), data[i + 1]};
    }
    R.t0 = weft_now();
    R.mu_owner = -1;
    weft_mutex_init(&R.mu);
    weft_cond_init(&R.cv);
    R.sem_init = 1 + ((cfg >> 4) & 3);
    weft_sem_init(&R.sem, R.sem_init);
    EXPECT(weft_chan_create(&R.ch[0], sizeof(uint32_t), (cfg >> 2) & 3) == 0, "chan_create");
    EXPECT(weft_chan_create(&R.ch[1], sizeof(uint32_t), 0) == 0, "chan_create");
    for (int pi = 0; pi < NPIPE; pi++) {
        EXPECT(weft_pipe(R.p[pi].fd) == 0, "weft_pipe");
        R.p[pi].open[0] = R.p[pi].open[1] = 1;
    }
    for (int k = 0; k < NP; k++) {
        EXPECT(weft_promise_create(&R.pr[k]) == 0, "promise_create");
        R.fu[k] = weft_promise_future(R.pr[k]);
        EXPECT(weft_future_subscribe(R.fu[k], settled_cb, (void *)(intptr_t)k) == 0,
               "subscribe");
    }
    for (int w = 0; w < NW; w++)
        for (int d = 0; d <= MAXDEPTH; d++)
            R.eff[w][d] = WEFT_FOREVER;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int fds = h_fd_count();
    weft_sched_t *s;
    int rc = weft_sched_create(&s, NULL);
    EXPECT(rc == 0, "weft_sched_create -> %d", rc);
    setup(data, size);
    EXPECT(weft_spawn(driver, NULL, NULL, NULL) == 0, "spawn driver");
    /* worker 0 always starts with the driver; bit 6 starts worker 1 too */
    spawn_worker(0);
    if (data[0] & 0x40)
        spawn_worker(1);
    EXPECT(weft_sched_run(s) == 0, "weft_sched_run");
    weft_stats_t st;
    EXPECT(weft_sched_stats(s, &st) == 0, "stats");
    EXPECT(st.fibers == 0 && st.handles == 0 && st.timers == 0 && st.waits == 0 &&
               st.fd_waits == 0 && st.posted == 0 && st.ops == 0,
           "left behind: fibers %zu handles %zu timers %zu waits %zu fd_waits %zu "
           "posted %zu ops %zu",
           st.fibers, st.handles, st.timers, st.waits, st.fd_waits, st.posted, st.ops);
    EXPECT(weft_sched_destroy(s) == 0, "weft_sched_destroy");
    EXPECT(h_fd_count() == fds, "descriptors: %d before the run, %d after", fds, h_fd_count());
    return 0;
}
