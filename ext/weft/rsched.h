/*
 * rsched.h — the private header of Weft::Scheduler (Ruby's Fiber::Scheduler
 * interface on weft's reactor): the structures every file of the extension
 * shares and the functions one file offers the others.
 *
 * One reactor, two kinds of fiber: the extension is the reactor's Ruby
 * client. A Ruby fiber that must wait builds an `rwait` on its own machine
 * stack (a weft__wait plus the fiber), arms it on the reactor and switches
 * away. The reactor completes the wait and calls the wake function, which
 * only links the rwait on the scheduler's ready list: that code may run
 * with the GVL released (inside weft__reactor_run_once), so it touches no
 * Ruby object. The loop fiber (the fiber that called #run, or that first
 * called Fiber.schedule) pops ready waits and Fiber#transfer's to their
 * fibers; a fiber that waits hands off directly to the next ready fiber for
 * a bounded number of switches, then returns to the loop so I/O is polled.
 *
 * Invariants:
 *   - the "all" list and the `waiting` table (fiber -> rwait) change only on
 *     the owner thread with the GVL held; GC marks every fiber on the list;
 *   - the ready list and the reactor change only on the owner thread (with
 *     or without the GVL); nothing else reads them;
 *   - every rwait is unlinked by rb_ensure on every exit path (normal wake,
 *     exception, Fiber#raise, Thread#raise);
 *   - other threads reach the loop only through weft__reactor_post().
 *
 * The files, one concern each:
 *   scheduler.c  the object: TypedData, fork, thread binding, #initialize,
 *                #close, #stats; Init_weft
 *   loop.c       the ready list, the loop, switching between fibers,
 *                #exclusive, and blocking in a wait (weft__rb_rw_wait)
 *   intr.c       interrupts: timeout_after, fiber_interrupt, #stop
 *   wait.c       descriptors and the waiting hooks: io_wait, io_close,
 *                kernel_sleep, block, unblock
 *   writer.c     one writer at a time per descriptor (io_write)
 *   transfer.c   the transfer hooks io_read, io_pread, io_pwrite and their
 *                loop, weft__rb_do_io
 *   ring.c       transfers as io_uring ops (the buffer handed to the kernel)
 *   fileop.c     regular-file transfers on the offload pool
 *   select.c     io_select
 *   fiber.c      fibers: start (Fiber.schedule), end, errors; #run
 *   dump.c       observability: the fiber list behind #dump, #stats'
 *                loop health, the dump signal, the stall watchdog
 *   http.c       Weft::HTTP (the request-head parser, for Weft::Server)
 *
 * Names: weft__rb_ for what one file offers the others (declared here);
 * everything else is static to its file. Each file that defines hooks
 * defines them in its weft__rb_init_<file>(), called by Init_weft.
 */
#ifndef WEFT_RSCHED_H
#define WEFT_RSCHED_H

#include "reactor.h"
#include "workers.h"
#include "evmask.h"
#include "rbdef.h"

#include <ruby.h>
#include <ruby/io.h>
#include <ruby/io/buffer.h>
#include <ruby/thread.h>
#include <ruby/fiber/scheduler.h>
#include <ruby/st.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/types.h>

/* What an rwait waits for (rwait.kind). */
enum { RW_IO = 1, RW_SLEEP, RW_BLOCK, RW_YIELD };

/* What exactly (rwait.what), for #dump and #stats: the argument of
 * weft__rb_rw_begin, which derives the kind from it. */
enum {
    WAIT_FD,      /* readiness of rw.w.fd for rw.w.events (io_wait)       */
    WAIT_RING,    /* an io_uring op (rw.aux: the op, rw.xfd: its fd)      */
    WAIT_FILE,    /* a regular-file transfer on the offload pool (xfd)    */
    WAIT_SELECT,  /* IO.select                                            */
    WAIT_SLEEP,   /* kernel_sleep                                          */
    WAIT_BLOCK,   /* block: rw.obj is the blocker (Mutex, Queue, Thread)  */
    WAIT_WRITER,  /* another fiber's write to rw.ofd (writer.c)           */
    WAIT_NKINDS
};

/* The four transfer hooks (weft__rb_do_io, struct fileop). */
enum { OP_READ, OP_WRITE, OP_PREAD, OP_PWRITE };
/* Or'd into OP_WRITE or OP_PWRITE for weft__rb_do_io: Ruby 3.1's hook
 * forms, whose length (when not 0) is how many bytes to write at most,
 * not at least. */
enum { OP_UPTO = 0x10 };

typedef struct rsched rsched;

/* One fiber's wait in a hook, on that fiber's stack from
 * weft__rb_rw_begin to weft__rb_rw_end. */
typedef struct rwait {
    weft__wait w;       /* the reactor's wait; its result is the hook's     */
    rsched *s;          /* the scheduler it waits in                        */
    VALUE fiber;        /* the fiber that waits (a key of rsched.waiting)   */
    weft__node anode;   /* link on rsched.all, every wait (GVL only)        */
    weft__node rnode;   /* link on rsched.ready, once completed             */
    weft__node onode;   /* link on fdinfo.w_waiters (an owner wait)         */
    unsigned epoch;     /* rsched.epoch when begun: a fork or an abandon
                         * since means the lists it was on are gone        */
    int ofd;            /* the descriptor of an owner wait (writer.c)       */
    uint8_t kind;       /* RW_IO, RW_SLEEP, RW_BLOCK or RW_YIELD            */
    uint8_t queued;     /* on rsched.ready                                  */
    uint8_t linked;     /* begun and not yet ended (weft__rb_rw_end)        */
    uint8_t quick;      /* a yield (sleep(0)): complete from the start,
                         * so not in rsched.waiting                        */
    uint8_t olinked;    /* on its descriptor's w_waiters                    */
    uint8_t what;       /* WAIT_FD ... WAIT_WRITER                          */
    uint8_t wakeable;   /* a sleep without a duration: Thread#wakeup and
                         * #run of the scheduler's thread end it           */
    int aux;            /* WAIT_RING: the op (WEFT__OP_*)                   */
    int xfd;            /* WAIT_RING, WAIT_FILE: the descriptor             */
    VALUE behalf;       /* a fiber the scheduler did not start (an
                         * Enumerator's) that waits inside the resume of
                         * this scheduled fiber: the interrupts (timeouts)
                         * of that fiber end the wait and are raised in
                         * it, as Thread#raise raises in the fiber a
                         * thread runs; Qnil otherwise                     */
    VALUE obj;          /* WAIT_BLOCK: the blocker (on the waiter's stack,
                         * so it stays put while the fiber waits)         */
    int64_t since;      /* rsched.now when begun (the loop's clock)         */
    int64_t ready_at;   /* the loop's clock when first seen ready; 0 until */
} rwait;

/* A pending interrupt for a fiber: a timeout_after timer or an exception
 * queued by fiber_interrupt or #stop. Lives on the fiber's stack (timeouts)
 * or on the heap (interrupts). */
typedef struct rintr {
    weft__node node;    /* link on rsched.intrs                             */
    weft__timer timer;  /* timeout_after's timer (idle for the others)     */
    rsched *s;          /* the scheduler it belongs to                      */
    VALUE fiber;        /* the fiber to interrupt                           */
    VALUE klass;        /* timeout_after: the exception class to raise      */
    VALUE message;      /* timeout_after: its message, or Qnil              */
    VALUE exc;          /* heap interrupts: the exception object to raise   */
    VALUE arg;          /* timeout_after: the duration given to the block   */
    VALUE exit_class;   /* timeout_after, exit: raised inside the block     */
    unsigned long serial; /* timeout_after, exit: names its own exception   */
    unsigned epoch;     /* rsched.epoch when linked (see rwait.epoch)       */
    uint8_t fired;      /* due: the timer fired, or queued already fired    */
    uint8_t delivered;  /* raised in its fiber (at most once)               */
    uint8_t heap;       /* allocated with ZALLOC: freed when delivered      */
    uint8_t linked;     /* on rsched.intrs                                  */
    uint8_t exit;       /* timeout_after for Timeout::Error: see intr.c     */
    uint8_t masked;     /* deferred by Thread.handle_interrupt(... => :never) */
} rintr;

/* What the extension knows of one descriptor number (rsched.fdi). */
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
     * from then on its single attempts may be ring ops (weft__rb_do_io).
     * A fresh connection's first read and write stay system calls: its
     * request is usually there already and its answer goes out at once. */
    uint8_t waited;
    /* A terminal (asked once, with the IO's kind): a larger write to a
     * blocking one waits on the offload pool (transfer.c). */
    uint8_t tty;
} fdinfo;

/* A Weft::Scheduler (the TypedData of scheduler.c). */
struct rsched {
    weft__reactor r;           /* the reactor, live while r_live          */
    VALUE thread;              /* the owner thread (bound at first use)   */
    int hot_fd;                /* the descriptor last prepared (its IO is
                                * kept alive: scheduler.c, fd_held)       */
    pthread_t tid;             /* its native thread (the stall watchdog
                                * signals it)                            */
    VALUE loop_fiber;          /* the fiber running the loop, or Qnil     */
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
     * (see "switching" in loop.c). */
    st_table *own;
    weft__list intrs;          /* rintr.node: pending interrupts         */
    fdinfo *fdi;               /* per-descriptor state, by fd number     */
    int nfdi;                  /* entries in fdi                          */
    pthread_mutex_t lock;      /* closed/r_live against other threads    */
    unsigned fork_gen;         /* weft__rb_fork_generation when made/reset */
    unsigned epoch;            /* bumped by a fork or an abandon: older
                                * waits and interrupts are forgotten     */
    pid_t pid;                 /* the process it was made (or reset) in   */
    int handoffs;              /* direct fiber-to-fiber hand-offs in a row */
    uint64_t ticks;            /* loop dispatches, for POLL_EVERY         */
    uint64_t ring_ops;         /* transfer-hook ring ops submitted        */
    weft_backend_t backend;    /* the backend asked for at #initialize    */
    weft__timer sweep_timer;   /* bounds a blocking poll while fds wait  */
    int64_t next_sweep;        /* when the closed-IO sweep runs next      */
    /* How the fiber now running was entered by this scheduler: `entered`
     * is the fiber the scheduler last switched into, `entered_chained`
     * whether that was a resume (Fiber.schedule) whose resumer expects it
     * back at its first wait. A running fiber that is not `entered` was
     * switched into by someone else (Fiber#resume, Fiber#raise). */
    VALUE entered;
    bool entered_chained;
    /* A fiber of this scheduler has waited for a child (process_wait):
     * from then on every wait keeps its fiber's $? (weft__rb_wait_for). */
    bool child_waits;
    /* The fiber this scheduler started whose resume chain runs now (a
     * scheduled fiber, or one that it resumed, an Enumerator's): set when
     * a scheduled fiber starts or a wait ends, Qnil while a fiber is away
     * in a wait. A wait of a fiber the scheduler did not start records it
     * (rwait.behalf). */
    VALUE chain;
    /* Fibers that died with an exception: the first one is raised by
     * #run / #close once every fiber has ended (then forgotten); `fatal`
     * (SystemExit, a signal) stops every fiber first. */
    VALUE first_error, fatal;
    bool report;               /* report_on_exception                    */
    /* Ruby 3.1 split-write detection (fdinfo.w_owner): the last hook call
     * that was a completed io_write (its hook_seq), by whom, on which
     * descriptor. hook_seq counts hook calls (weft__rb_get_sched). */
    uint64_t hook_seq, lw_seq;
    VALUE lw_fiber;
    int lw_fd;
    /* The last io_wait that held a descriptor's writer role for a split
     * write (its hook_seq), by whom (a key, never dereferenced), on which
     * descriptor: the fiber's next hook call, if it is an io_write there,
     * is the rest of that write (see writer.c). */
    uint64_t sw_seq;
    VALUE sw_fiber;
    int sw_fd;
    /* The last transfer hook that found its descriptor not ready (-EAGAIN
     * with nothing moved): when, by whom (a key, never dereferenced), on
     * which descriptor, for which event (see io_wait in wait.c). */
    uint64_t ea_seq;
    VALUE ea_fiber;
    int ea_fd, ea_ev;
    /* Transfers that never waited (transfer.c, weft__rb_fair_turn): the
     * fiber (a key, never dereferenced) whose transfer hooks completed
     * nw_count times in a row without any switch, as of nw_switches. */
    VALUE nw_fiber;
    uint64_t nw_switches;
    unsigned nw_count;
    int closing;               /* close attempts begun (see s_close)     */
    unsigned stops;            /* stop_all calls so far (see start_body) */
    bool bound;                /* a hook ran on `thread`: owned for good */
    bool r_live;               /* the reactor is set up                   */
    bool running;              /* a loop runs (on loop_fiber)             */
    bool closed;               /* closed: no post is accepted any more    */
    bool close_pending;        /* #close was called inside the loop       */
    /* ---- observability (dump.c) ---- */
    VALUE self;                /* the Weft::Scheduler object              */
    int64_t now;               /* the loop's clock: read once per loop pass
                                * (and after a blocking poll), never per op */
    VALUE oncpu;               /* the fiber last switched into (or the loop) */
    uint64_t switches;         /* every switch and every return from the
                                * backend: read by the stall watchdog     */
    bool idle;                 /* blocked in the backend (GVL released)   */
    unsigned dump_gen;         /* weft__rb_dump_gen when last dumped      */
    struct rstats {
        uint64_t iterations;   /* reactor polls by the loop              */
        int64_t started;       /* the clock when the loop first ran      */
        int64_t wait_ns;       /* blocked in the backend                 */
        uint64_t begun[WAIT_NKINDS], ended[WAIT_NKINDS];
        uint64_t timers_fired; /* waits ended by their deadline, timeouts */
        uint64_t spawned, finished, peak;
        uint64_t delays, delay_max, hist[64]; /* ready -> resume, ns, log2 */
    } st;
    struct rstall *stall;      /* the stall watchdog's state, or NULL     */
    weft__node snode;          /* on the list of live schedulers (dump.c) */
};

#define RW_OF(n, member) ((n) ? weft__container((n), rwait, member) : NULL)
#define INTR_OF(n) ((n) ? weft__container((n), rintr, node) : NULL)

/* Regular files (see fileop.c): a positioned ring op of this many bytes or
 * more is IOSQE_ASYNC; a transfer at the file position (or any, on epoll
 * and poll) of this many bytes or more goes to the offload pool. */
#define FILE_ASYNC_MIN (64 * 1024)
#define FILE_OFFLOAD_MIN (64 * 1024)
/* Each op moves at most this much (a short transfer, which the hooks may
 * return): a worker that copies for tens of milliseconds on one of two
 * cores starves the thread Ruby 3.1 needs to hand its GVL back. */
#define FILE_CHUNK (1024 * 1024)

/* One regular-file transfer run by a worker (weft__rb_file_offload). */
struct fileop {
    weft__rjob job;     /* the offload pool's job                           */
    int fd;             /* the descriptor                                   */
    int op;             /* OP_READ, OP_WRITE, OP_PREAD or OP_PWRITE         */
    void *buf;          /* the bytes (the locked IO::Buffer's memory)       */
    size_t len;         /* how many, at most                                */
    off_t off;          /* the file offset of OP_PREAD and OP_PWRITE        */
    ssize_t res;        /* the system call's return value                   */
    int err;            /* its errno when res < 0                           */
};

/* Shared Ruby objects, set by Init_weft. */
extern VALUE weft__rb_eError;   /* Weft::Error                            */
extern VALUE weft__rb_eStop;    /* Weft::Stop: ends a fiber quietly       */
extern VALUE weft__rb_cFiber;   /* Fiber                                  */

/* scheduler.c */
extern volatile unsigned weft__rb_fork_generation; /* forks seen so far */
rsched *weft__rb_get_raw(VALUE self);   /* the struct, whatever its state */
rsched *weft__rb_get_sched(VALUE self); /* for a hook: bound, live, forked */
rsched *weft__rb_ours(VALUE sched);     /* NULL if @sched is not ours     */
void weft__rb_fork_reset(rsched *s);
void weft__rb_finalize(rsched *s);

/* In a forked child, forget the parent's waits and reactor. */
static inline void weft__rb_check_fork(rsched *s)
{
    if (RB_UNLIKELY(s->fork_gen != weft__rb_fork_generation))
        weft__rb_fork_reset(s);
}

/* loop.c */
void weft__rb_rw_begin(rsched *s, rwait *rw, int what);
/* Begin a wait that is over at once (sleep(0): the fiber only lets the
 * others run) and complete it. Not entered in rsched.waiting (a table of
 * every waiting fiber, cold among 10,000 fibers: bench/ruby/churn.rb):
 * nothing can unblock it. */
void weft__rb_rw_begin_yield(rsched *s, rwait *rw, int what);
void weft__rb_rw_end(rwait *rw);
rwait *weft__rb_waiting_of(rsched *s, VALUE fiber);
bool weft__rb_io_closed(VALUE io);
void weft__rb_run_loop(rsched *s, rwait *until, VALUE until_fiber);
void weft__rb_wait_for(rsched *s, rwait *rw);
VALUE weft__rb_wait_body(VALUE rw);
int weft__rb_rw_wait(rsched *s, rwait *rw, bool yield);
/* Before blocking in @rw: a wait made on behalf of a scheduled fiber
 * (rwait.behalf) whose interrupt is pending (a timeout that fired while
 * this fiber ran) ends at once, with -ECANCELED. */
void weft__rb_behalf_check(rsched *s, rwait *rw);

/* intr.c */
void weft__rb_deliver_interrupts(rsched *s, VALUE fiber);
bool weft__rb_intr_pending(rsched *s, VALUE fiber);
VALUE weft__rb_stop_exception(const char *why);
long weft__rb_stop_all(rsched *s, VALUE exc);

/* wait.c */
/* A hook's timeout (seconds, nil = none) as a deadline; a value that is
 * no time interval raises what Ruby raises for it. */
int64_t weft__rb_to_deadline(VALUE t);
/* The same, with a negative number meaning "do not wait" (the timeouts
 * of Thread#join and Queue#pop/#push, which the block hook gets). */
int64_t weft__rb_to_deadline_or_now(VALUE t);
/* The same for sleep, IO.select and IO#wait, whose thread versions take
 * their timeout through rb_time_interval: what it refuses as too large
 * (Infinity, 1e20, a Bignum) raises its RangeError here too, where
 * weft__rb_to_deadline makes anything past 9e9 s "forever" (as the
 * timeouts of Thread#join and Queue#pop do on threads). */
int64_t weft__rb_to_interval_deadline(VALUE t);
int weft__rb_io_fd(VALUE io);
fdinfo *weft__rb_fd_prepare(rsched *s, int fd, VALUE io);
int weft__rb_poll_now(int fd, int events);
/* A zero timeout that found nothing ready (io_wait, io_select): let the
 * other fibers run once, as sleep(0) does, before the caller looks again. */
void weft__rb_yield_once(rsched *s);
/* A fiber whose transfers never wait: poll the reactor without blocking
 * and let the ready fibers run once (loop.c). */
void weft__rb_fair_turn(rsched *s, VALUE cur);
int weft__rb_wait_fd(rsched *s, int fd, int events, int64_t deadline);
int64_t weft__rb_io_timeout_deadline(VALUE io, bool *set);
__attribute__((noreturn)) void weft__rb_raise_io_timeout(int events);

/* writer.c */
void weft__rb_owner_release(rsched *s, int fd);

/* transfer.c */
VALUE weft__rb_do_io(rsched *s, VALUE io, VALUE buffer, size_t length,
                     size_t offset, off_t from, int op);

/* ring.c */
bool weft__rb_lock_buffer(VALUE buffer);
int weft__rb_ring_io(rsched *s, VALUE buffer, const weft__opdesc *d,
                     int64_t deadline);

/* fileop.c */
ssize_t weft__rb_file_offload(rsched *s, VALUE buffer, struct fileop *f);

/* fiber.c */
void weft__rb_raise_pending(rsched *s);

/* dump.c */
extern volatile unsigned weft__rb_dump_gen; /* dump requests so far */
void weft__rb_dump_now(rsched *s);          /* on the loop: to stderr  */
void weft__rb_sched_register(rsched *s);
void weft__rb_sched_unregister(rsched *s);
void weft__rb_sched_each(void (*fn)(rsched *s, void *arg), void *arg);
void weft__rb_stall_stop(rsched *s);
void weft__rb_stall_fork(rsched *s);
void weft__rb_init_dump(VALUE klass);
void weft__rb_init_stall(VALUE klass); /* stall.c */
/* Stalls the watchdog has detected so far (stall.c). */
uint64_t weft__rb_stall_count(const rsched *s);
/* Marks what the stall watchdog took during a stall (stall.c). */
void weft__rb_stall_mark(const rsched *s);
void weft__rb_stats_health(rsched *s, VALUE h);

/* The fiber @f now runs (a switch, or the loop back from the backend):
 * two stores, read by the stall watchdog from its own thread. */
static inline void weft__rb_on_cpu(rsched *s, VALUE f)
{
    s->oncpu = f;
    __atomic_store_n(&s->switches, s->switches + 1, __ATOMIC_RELAXED);
}

/* A ready wait is dispatched: its ready -> resume delay, by the loop's
 * clock (log2 histogram). */
static inline void weft__rb_note_resume(rsched *s, const rwait *rw)
{
    uint64_t d = rw->ready_at && s->now > rw->ready_at ? (uint64_t)(s->now - rw->ready_at) : 0;
    s->st.hist[d ? 63 - __builtin_clzll(d) : 0]++;
    s->st.delays++;
    if (d > s->st.delay_max)
        s->st.delay_max = d;
}

/* Each file's hooks and objects, defined on Weft::Scheduler by Init_weft. */
void weft__rb_init_loop(VALUE klass);
void weft__rb_init_intr(VALUE klass);
void weft__rb_init_wait(VALUE klass);
void weft__rb_init_writer(VALUE klass);
void weft__rb_init_transfer(VALUE klass);
void weft__rb_init_select(VALUE klass);
void weft__rb_init_fiber(VALUE klass);
void weft__rb_init_fileop(VALUE klass);
void weft__http_init(void); /* http.c: Weft::HTTP, for Weft::Server */

#endif
