/**
 * @file weft.h
 * fiber scheduler: sequential-looking blocking I/O on thousands of
 * cooperative fibers over one event loop per thread.
 *
 * Conventions used by every function in this header:
 * @code{.unparsed}
 *   Errors     Functions that can fail return a negative errno value
 *              (-EINVAL, -ETIMEDOUT, -ECANCELED, ...), never -1 with errno.
 *              errno itself is left unspecified after a weft call (the
 *              system calls it makes may change it), and is not kept per
 *              fiber: read it right after the call that set it, before a
 *              blocking call lets another fiber run.
 *              Functions returning a byte count return it as a non-negative
 *              ssize_t on success.
 *
 *   Deadlines  Every call that may block takes an absolute deadline in
 *              nanoseconds of the monotonic clock (see weft_now()).
 *              WEFT_FOREVER (-1) means no deadline. 0 means "try, don't
 *              wait": the call makes its non-blocking attempt and returns
 *              -EAGAIN if it would have to wait (a lock held, nothing to
 *              read, a fiber not finished), as a non-blocking system call
 *              does. A deadline that has passed (> 0, <= now) makes the
 *              same single attempt but returns -ETIMEDOUT, as does a call
 *              whose deadline passes while it waits. Values below -1 are
 *              rejected with -EINVAL. A timeout scope that has expired
 *              wins over both: -ETIMEDOUT.
 *              weft_deadline_in(ns) converts a relative timeout.
 *
 *   Threads    Each thread has at most one scheduler. Fibers, file
 *              descriptors registered with a scheduler and all blocking calls
 *              belong to the thread that owns the scheduler. Only the
 *              functions documented as thread-safe (weft_sched_post(),
 *              weft_unpark() on a fiber of another thread) may be called from
 *              other threads.
 *
 *   Blocking   Blocking calls must be made from inside a fiber; called from
 *              a thread's ordinary stack they return -EPERM.
 *
 *   Cancel     Once a fiber is cancelled (weft_cancel()), the blocking call it
 *              is in, and every blocking call it makes afterwards, returns
 *              -ECANCELED — except that an operation the kernel has already
 *              carried out when the cancel lands (a read that got its bytes,
 *              an accept that got its connection: possible with io_uring,
 *              where the operation is in the kernel while the fiber waits)
 *              returns its result, so nothing is lost; the fiber's next
 *              blocking call returns -ECANCELED. The same on every backend.
 * @endcode
 */
#ifndef WEFT_H
#define WEFT_H

#include <errno.h>      /* the E* codes that every call returns negated */
#include <stddef.h>
#include <stdio.h>      /* FILE: weft_dump() */
#include <signal.h>     /* sigset_t: weft_signal_*() */
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Time                                                                     */
/* ------------------------------------------------------------------------ */
/** @defgroup time Time
 *  @{ */

/** No deadline: wait as long as it takes. */
#define WEFT_FOREVER ((int64_t)-1)

/** One second in nanoseconds: weft_deadline_in(5 * WEFT_SEC). */
#define WEFT_SEC ((int64_t)1000000000)
/** One millisecond in nanoseconds. */
#define WEFT_MS ((int64_t)1000000)
/** One microsecond in nanoseconds. */
#define WEFT_US ((int64_t)1000)

/**
 * current time of the monotonic clock in nanoseconds.
 *
 * The origin is unspecified (boot time on Linux); only differences and
 * comparisons with deadlines are meaningful. Never fails. Thread-safe.
 */
int64_t weft_now(void);

/**
 * absolute deadline @p ns nanoseconds from now.
 *
 * @return WEFT_FOREVER when @p ns is negative, and saturates instead of
 * overflowing for huge values, so weft_deadline_in(INT64_MAX) is a deadline
 * that never comes. Thread-safe.
 */
int64_t weft_deadline_in(int64_t ns);

/**
 * the loop's reading of the monotonic clock, without reading it again.
 *
 * In a fiber, or in a callback of a running weft_sched_run(): the clock
 * as the loop last read it, which it does on every iteration that polls
 * for events or has timers (and on every 16th of the others), when the
 * iteration begins and when a wait for events ends; while fibers are
 * ready the loop iterates every 64 switches. It is behind weft_now() by as
 * long as fibers have run since: on a busy server a few dozen requests'
 * worth, after a fiber that computed for a second, that second.
 * Reading it is a load where weft_now() is a clock read, a large part of
 * a short request's bookkeeping. Anywhere else (another thread, before or
 * after weft_sched_run()): weft_now(). Thread-safe.
 *
 * Meant for long timeouts taken often, such as a server's idle timeout per
 * request: a deadline made from it ends a wait at most that far early.
 * Where a wait must last at least its timeout, use weft_deadline_in().
 */
int64_t weft_loop_now(void);

/**
 * absolute deadline @p ns nanoseconds after weft_loop_now().
 *
 * The same rules as weft_deadline_in() (WEFT_FOREVER for a negative
 * @p ns, saturating), from the loop's clock reading: see weft_loop_now()
 * for how early that may be. Thread-safe.
 */
int64_t weft_loop_deadline_in(int64_t ns);

/** @} */

/* ------------------------------------------------------------------------ */
/* Schedulers                                                               */
/* ------------------------------------------------------------------------ */
/** @defgroup sched Schedulers
 *  @{ */

/** A scheduler: one event loop and its fibers, owned by one thread. */
typedef struct weft_sched weft_sched_t;

/** Which event-notification backend a scheduler uses. */
typedef enum weft_backend {
    WEFT_BACKEND_DEFAULT = 0, /**< WEFT_BACKEND env var, else the best one */
    WEFT_BACKEND_EPOLL = 1,
    WEFT_BACKEND_POLL = 2,
    WEFT_BACKEND_IO_URING = 3 /* falls back to epoll where io_uring is
                                 denied, too old or not built in         */
} weft_backend_t;

/** Options for weft_sched_create(); zero-initialise, then set fields. */
typedef struct weft_sched_opts {
    weft_backend_t backend;    /**< WEFT_BACKEND_DEFAULT: see weft_sched_create */
    size_t stack_size;         /**< default fiber stack size; 0 = 64 KiB       */
    size_t stack_cache;        /**< free stacks kept for reuse; 0 = 1024       */
    int no_overflow_handler;   /**< 1: do not install the stack-overflow
                                  reporter (SIGSEGV on an alternate stack)  */
} weft_sched_opts_t;

/**
 * create the calling thread's scheduler.
 *
 * @param out receives the scheduler.
 * @param opts options, or NULL for defaults.
 *
 * The backend is @p opts->backend, or, when that is WEFT_BACKEND_DEFAULT, the
 * one named by the environment variable WEFT_BACKEND ("io_uring", "epoll"
 * or "poll"), else io_uring. When io_uring cannot be used (io_uring_setup
 * denied by a seccomp filter or container with EPERM/ENOSYS, a kernel
 * without the needed features, no liburing at build time) the scheduler
 * silently runs on epoll; weft_sched_backend() tells which one runs.
 *
 * Fork: in a child process the thread that called fork() has no scheduler
 * (the parent's ring, epoll set and eventfd are closed in the child, which
 * does not affect the parent's); the parent's fibers do not run there. The
 * child may create a new scheduler. A child forked inside a fiber is outside
 * any fiber (blocking calls return -EPERM); if it returns from that fiber's
 * function, the child process exits with status 0 (exit(3)), as if main()
 * had returned. Unless disabled, and only when the process's SIGSEGV
 * disposition is still the default, a handler is installed that reports a
 * fiber stack overflow with a clear message before the process dies with
 * SIGSEGV as it would have anyway.
 *
 * @return 0, -EEXIST if this thread already has a scheduler, -EINVAL for bad
 * options or an unknown WEFT_BACKEND value, -ENOMEM, or the error of the
 * backend's setup.
 */
int weft_sched_create(weft_sched_t **out, const weft_sched_opts_t *opts);

/**
 * the calling thread's scheduler, created with default
 * options on first use. @return NULL only if creation failed.
 */
weft_sched_t *weft_sched_self(void);

/**
 * run fibers until none remain.
 *
 * Dispatches runnable fibers and waits for I/O, timers and cross-thread
 * posts. Must be called on the scheduler's thread, outside any fiber.
 * @return 0 when the last fiber has finished, -EINVAL for NULL, -EPERM from
 * a fiber or another thread, -EBUSY if the scheduler is already running.
 */
int weft_sched_run(weft_sched_t *s);

/**
 * free a scheduler and everything it owns.
 *
 * Fails with -EBUSY while fibers are alive or the scheduler is running, and
 * with -EPERM from another thread. Callbacks posted but never run are
 * dropped. Unjoined handles of finished fibers are released. A thread
 * other than the main one that exits without calling this has its
 * scheduler destroyed as it exits, if no fiber is alive then.
 */
int weft_sched_destroy(weft_sched_t *s);

/**
 * name of the scheduler's backend: "io_uring",
 * "epoll" or "poll".
 */
const char *weft_sched_backend(const weft_sched_t *s);

/**
 * run @p fn(@p arg) on @p s's thread, from any thread.
 *
 * Thread-safe. The callback runs on the scheduler's own stack (not inside a
 * fiber) during its next loop iteration; it may spawn fibers and unpark
 * them but must not block. A sleeping loop is woken at once (eventfd).
 * @return 0, -EINVAL for NULL arguments, -ENOMEM.
 */
int weft_sched_post(weft_sched_t *s, void (*fn)(void *arg), void *arg);

/** Counters used by tests and tools to check that nothing is left behind. */
typedef struct weft_stats {
    size_t fibers;        /**< fibers alive (not finished)                    */
    size_t handles;       /**< handles not yet joined or detached             */
    size_t timers;        /**< armed timers                                   */
    size_t waits;         /**< blocked waits of any kind                      */
    size_t fd_waits;      /**< waits on file descriptors                      */
    size_t posted;        /**< cross-thread callbacks not yet run             */
    size_t stacks_cached; /**< free stacks kept for reuse                     */
    size_t stacks_unguarded; /**< stacks created without a guard page         */
    size_t ops;           /**< io_uring operations still owned by the kernel  */
    uint64_t switches;    /**< context switches so far                        */
    uint64_t spawned;     /**< fibers spawned so far                          */
    /* Loop health (fields added at the end: older programs see a prefix). */
    uint64_t ended;       /**< fibers that have finished so far               */
    size_t peak_fibers;   /**< most fibers alive at once                      */
    uint64_t iterations;  /**< loop iterations (backend polls, or turns of the
                               loop that found nothing to poll)               */
    int64_t busy_ns;      /**< time in weft_sched_run() outside the backend's
                               wait: running fibers, callbacks, timers        */
    int64_t wait_ns;      /**< time blocked in the backend's wait
                               (epoll_wait, poll, io_uring_enter)             */
    uint64_t timers_fired; /**< deadlines and timers that fired               */
    /** Waits handed to the backend, by kind (WEFT_OPK_*): a completion op
     *  (io_uring) or a readiness wait (epoll, poll) each count once;
     *  WEFT_OPK_TIMEOUT counts deadlines armed. */
    uint64_t ops_submitted[8];
    /** Of those, the ones that have ended (completed, timed out, cancelled). */
    uint64_t ops_completed[8];
    /** Ready-to-running delay of fibers, in nanoseconds, since the scheduler
     *  was created: median, 99th percentile (upper bounds of a power-of-two
     *  histogram bucket) and maximum. Sampled once per loop iteration:
     *  the fiber at the head of the run queue (the one that has waited
     *  longest) when the loop dispatches. The clock is read once per
     *  iteration, so a fiber that runs in the iteration in which it became
     *  ready counts 0 (below 2 ns); a delay says how many iterations' worth
     *  of time it waited on the run queue. */
    int64_t ready_delay_p50_ns;
    int64_t ready_delay_p99_ns; /**< see ready_delay_p50_ns */
    int64_t ready_delay_max_ns; /**< see ready_delay_p50_ns */
    uint64_t stalls;      /**< stalls seen by the stall detector              */
} weft_stats_t;

/** Kinds of weft_stats_t.ops_submitted / ops_completed (indices). */
typedef enum weft_op_kind {
    WEFT_OPK_READ = 0,    /**< reads, receives, readability waits            */
    WEFT_OPK_WRITE = 1,   /**< writes, sends, writability waits              */
    WEFT_OPK_ACCEPT = 2,  /**< accepts (or the readability wait before one)   */
    WEFT_OPK_CONNECT = 3, /**< connects (or the writability wait of one)      */
    WEFT_OPK_TIMEOUT = 4, /**< deadlines armed on waits                       */
    WEFT_OPK_OTHER = 5,   /**< everything else (close, priority polls)        */
    WEFT_OPK_COUNT = 6    /**< kinds in use (the arrays have room for 8)      */
} weft_op_kind_t;

/**
 * fill @p st with @p s's counters. @return 0 or -EINVAL.
 */
int weft_sched_stats(const weft_sched_t *s, weft_stats_t *st);

/** @} */

/* ------------------------------------------------------------------------ */
/* Fibers                                                                   */
/* ------------------------------------------------------------------------ */
/** @defgroup fiber Fibers
 *  @{ */

/**
 * A fiber handle: a generation-checked id, not a pointer, so a stale handle
 * (a fiber already joined or detached) is detected instead of touching
 * reused memory. The zero value is never a valid handle.
 */
typedef struct weft_fiber {
    uint64_t id;
} weft_fiber_t;

/** A fiber body. Its return value is what weft_join() hands back. */
typedef void *(*weft_fn_t)(void *arg);

/** Options for weft_spawn(); zero-initialise, then set fields. */
typedef struct weft_spawn_opts {
    size_t stack_size; /**< usable stack bytes; 0 = scheduler default.
                          Rounded up to pages; 16 KiB .. 1 GiB.            */
} weft_spawn_opts_t;

/**
 * start a fiber running @p fn(@p arg) on this thread's scheduler.
 *
 * The fiber is queued to run; the caller continues. The stack is mmap'd,
 * committed lazily and ends in a guard page.
 *
 * @param out if non-NULL, receives a handle the caller must later pass to
 *       weft_join() or weft_detach(). If NULL, the fiber is detached: it is
 *       freed as soon as it returns.
 *
 * The fiber belongs to the calling thread's scheduler (created on first
 * use, see weft_sched_self()), and runs when that thread runs it; to start
 * work on another thread's loop, use weft_sched_post(). Callable from a
 * fiber or from the thread outside fibers (before or between
 * weft_sched_run() calls). @return 0, -EINVAL (NULL @p fn, bad stack size),
 * -ENOMEM; where this call creates the thread's scheduler, the error of
 * weft_sched_create() (-EMFILE, -EINVAL for an unknown WEFT_BACKEND...).
 */
int weft_spawn(weft_fn_t fn, void *arg, const weft_spawn_opts_t *opts,
               weft_fiber_t *out);

/**
 * handle of the calling fiber; the zero handle outside fibers.
 */
weft_fiber_t weft_self(void);

/**
 * 1 if the caller runs in a weft fiber, else 0.
 */
int weft_in_fiber(void);

/**
 * let every other runnable fiber run once, then continue.
 *
 * Also gives the event loop a chance to poll for I/O and timers when fibers
 * keep each other busy. @return 0, -ECANCELED if the fiber was cancelled,
 * -ETIMEDOUT inside a timeout scope whose deadline has passed, -EPERM
 * outside a fiber.
 */
int weft_yield(void);

/**
 * block the fiber until @p deadline.
 *
 * @return 0 once the deadline has passed (at once for a past deadline),
 * -ECANCELED, -EINVAL for a deadline below -1, -EPERM outside a fiber.
 * With WEFT_FOREVER it sleeps until cancelled.
 */
int weft_sleep_until(int64_t deadline);

/**
 * block the fiber for @p ns nanoseconds (>= 0).
 * @return as weft_sleep_until(); -EINVAL for a negative @p ns.
 */
int weft_sleep(int64_t ns);

/**
 * wait for fiber @p f to finish and collect its result.
 *
 * @param result if non-NULL, receives the value the fiber's function returned.
 *
 * On success the handle is consumed. @return 0; -ETIMEDOUT when @p deadline
 * passes first (the handle stays valid); -ECANCELED; -EDEADLK when @p f is
 * the caller; -ESRCH for a handle that is unknown or already joined (or
 * whose detached fiber has finished); -EINVAL if @p f is detached or another
 * fiber is already joining it; -EPERM outside a fiber.
 */
int weft_join(weft_fiber_t f, void **result, int64_t deadline);

/**
 * give up the handle: the fiber is freed when it finishes
 * (at once if it already has). A detached fiber can still be cancelled and
 * unparked through its handle (as weft_self() gives it) while it lives.
 * @return 0, -ESRCH for a stale handle, -EINVAL if already detached or
 * another fiber is joining it.
 */
int weft_detach(weft_fiber_t f);

/**
 * cancel fiber @p f.
 *
 * The blocking call @p f is in returns -ECANCELED as soon as @p f runs again,
 * and so does every later blocking call it makes; it is up to @p f to return.
 * One exception, so that no data is lost: if the kernel had already carried
 * out the call's operation when the cancel landed (with io_uring the
 * operation is in the kernel while the fiber waits: a read may complete in
 * the same moment), the call returns that result — the bytes read, the
 * accepted descriptor — and the next blocking call returns -ECANCELED.
 * Cancelling a finished (not yet joined) fiber does nothing. A fiber may
 * cancel itself. @return 0 or -ESRCH for a stale handle.
 */
int weft_cancel(weft_fiber_t f);

/**
 * 1 if the calling fiber has been cancelled, else 0.
 */
int weft_cancelled(void);

/**
 * block the calling fiber until weft_unpark(), a deadline, or
 * cancellation.
 *
 * A permit model: weft_unpark() on a fiber that is not parked leaves a
 * permit that makes its next weft_park() return 0 at once. Callers must
 * re-check the condition they wait for (wake-ups may come from earlier
 * unparks). @return 0 when unparked, -ETIMEDOUT, -ECANCELED, -EPERM outside
 * a fiber, -EINVAL for a bad deadline.
 */
int weft_park(int64_t deadline);

/**
 * wake fiber @p f from weft_park(), or give it a permit.
 *
 * @param s the scheduler that owns @p f, or NULL for the calling thread's.
 *
 * Thread-safe: from another thread (with @p s given) the wake-up is posted
 * to the owner's loop, which is woken at once. @return 0, -ESRCH for a
 * stale handle (checked on the owner's thread when posted: a finished fiber
 * is ignored), -ENOMEM.
 */
int weft_unpark(weft_sched_t *s, weft_fiber_t f);

/**
 * run @p fn(@p arg) as a fiber on this thread's scheduler, together
 * with whatever else is or becomes runnable, until no fibers remain.
 *
 * @param result if non-NULL, receives @p fn's return value.
 * @return 0 or any error of weft_spawn()/weft_sched_run(): -EPERM from a
 * fiber, -EBUSY from a callback of the running loop (weft_sched_post()),
 * and then @p fn is not run.
 */
int weft_run(weft_fn_t fn, void *arg, void **result);

/* Fiber-local storage ---------------------------------------------------- */
/** @defgroup fls Fiber-local storage
 *  @{ */

/** A fiber-local storage key (weft_fls_key_create()). */
typedef unsigned weft_fls_key_t;

/** Maximum number of fiber-local keys a process may create. */
#define WEFT_FLS_MAX 64

/**
 * create a fiber-local storage key.
 *
 * @param destructor if non-NULL, called with the value when a fiber that set a
 * non-NULL value for the key finishes (on that fiber, before join returns).
 * Thread-safe. @return 0, -EINVAL for NULL @p key, -EAGAIN when
 * WEFT_FLS_MAX keys exist.
 */
int weft_fls_key_create(weft_fls_key_t *key, void (*destructor)(void *));

/**
 * set the calling fiber's value for @p key.
 * @return 0, -EINVAL for an unknown key, -EPERM outside a fiber, -ENOMEM.
 */
int weft_fls_set(weft_fls_key_t key, void *value);

/**
 * the calling fiber's value for @p key; NULL if unset, for an
 * unknown key or outside a fiber.
 */
void *weft_fls_get(weft_fls_key_t key);

/** @} */
/** @} */

/* ------------------------------------------------------------------------ */
/* Observability                                                            */
/* ------------------------------------------------------------------------ */
/** @defgroup debug Observability: fiber dumps and the stall detector
 *
 * What every fiber is doing (weft_dump(), weft_fibers_each()), a dump on a
 * signal (weft_dump_on_signal(), WEFT_DUMP_SIGNAL), and a watchdog that
 * reports a fiber that runs too long without letting others run
 * (weft_sched_set_stall(), WEFT_STALL_MS). The loop's health is in
 * weft_stats_t (weft_sched_stats()).
 *
 * Environment, read when a scheduler is created:
 * @code{.unparsed}
 *   WEFT_DUMP_SIGNAL=QUIT   dump every fiber to stderr on SIGQUIT (a name,
 *                           with or without SIG, or a number)
 *   WEFT_STALL_MS=50        report fibers that run 50 ms without switching
 * @endcode
 * @{ */

/** Where a fiber is (weft_fiber_info_t.state). */
typedef enum weft_fiber_state {
    WEFT_FIBER_RUNNING = 1, /**< the one running now (the caller's)       */
    WEFT_FIBER_READY = 2,   /**< on the run queue                          */
    WEFT_FIBER_WAITING = 3  /**< blocked: see weft_fiber_info_t.wait       */
} weft_fiber_state_t;

/** What a waiting fiber waits for (weft_fiber_info_t.wait). */
typedef enum weft_wait_kind {
    WEFT_WAIT_NONE = 0,      /**< not waiting (running or ready)           */
    WEFT_WAIT_FD = 1,        /**< a descriptor: fd, events (readable,
                                  writable; 0 for a close in flight)      */
    WEFT_WAIT_SLEEP = 2,     /**< weft_sleep(), weft_sleep_until()         */
    WEFT_WAIT_PARK = 3,      /**< weft_park()                              */
    WEFT_WAIT_MUTEX = 4,     /**< weft_mutex_lock(): object = the mutex    */
    WEFT_WAIT_COND = 5,      /**< weft_cond_wait(): object = the condition */
    WEFT_WAIT_SEM = 6,       /**< weft_sem_acquire(): object = the semaphore */
    WEFT_WAIT_NOTIFICATION = 7, /**< weft_notification_wait()              */
    WEFT_WAIT_LIMITER = 8,   /**< weft_limiter_spawn(), weft_limiter_wait() */
    WEFT_WAIT_WAITGROUP = 9, /**< weft_waitgroup_wait()                    */
    WEFT_WAIT_CHAN = 10,     /**< a channel: object = the channel, events =
                                  WEFT_READABLE to receive, WEFT_WRITABLE to
                                  send; weft_chan_select(): object = the
                                  first channel, events = 0                */
    WEFT_WAIT_FUTURE = 11,   /**< weft_future_get(): object = the future   */
    WEFT_WAIT_JOIN = 12,     /**< weft_join(): target = the fiber's id     */
    WEFT_WAIT_PROCESS = 13,  /**< weft_proc_wait(), weft_proc_join():
                                  target = the pid, fd = its pidfd or -1   */
    WEFT_WAIT_SIGNAL = 14,   /**< weft_signal_wait(): fd = the signalfd    */
    WEFT_WAIT_OFFLOAD = 15,  /**< weft_offload(), weft_getaddrinfo(): a job
                                  on the worker pool                       */
    WEFT_WAIT_POOL = 16,     /**< a connection pool: object = the pool     */
    WEFT_WAIT_OTHER = 17     /**< anything else                            */
} weft_wait_kind_t;

/** Frames kept of a parked fiber's stack (weft_fiber_info_t.frames). */
#define WEFT_DUMP_FRAMES 16

/**
 * One fiber, as weft_fibers_each() reports it. Valid during the callback
 * only (the name and frames are the fiber's).
 */
typedef struct weft_fiber_info {
    weft_fiber_t handle;      /**< its handle (also for a detached fiber)  */
    const char *name;         /**< weft_fiber_set_name(), or NULL           */
    weft_fiber_state_t state; /**< running, ready or waiting               */
    weft_wait_kind_t wait;    /**< what it waits for, if waiting            */
    const void *object;       /**< the mutex, channel... waited on, or NULL */
    int fd;                   /**< the descriptor waited on, or -1          */
    int events;               /**< WEFT_READABLE, WEFT_WRITABLE (fd, chan)  */
    uint64_t target;          /**< join: the fiber's id; process: the pid   */
    int64_t since;            /**< weft_now() time it started to wait, or
                                   became ready (the loop's clock, read once
                                   per iteration); 0 if unknown            */
    int64_t deadline;         /**< when the wait ends by itself, or
                                   WEFT_FOREVER                             */
    weft_fn_t fn;             /**< the function it runs                    */
    const void *spawn_caller; /**< the return address in its spawner:
                                   where weft_spawn() was called           */
    int detached;             /**< spawned without a handle, or detached   */
    int nframes;              /**< frames in @c frames (0: never ran, or
                                   nothing to unwind by)                   */
    void *frames[WEFT_DUMP_FRAMES]; /**< return addresses of a waiting or
                                   ready fiber's saved stack, innermost
                                   first                                   */
} weft_fiber_info_t;

/**
 * call @p cb(@p info, @p arg) for every fiber of @p s.
 *
 * Every live fiber, joined or not, detached or not, in handle order.
 * Call it on @p s's thread, from a fiber or from the loop's own stack
 * (a weft_sched_post() callback). @p cb must not spawn, switch or block;
 * it may stop the walk early by returning non-zero.
 *
 * A waiting or ready fiber's frames are unwound from its saved context.
 * On x86-64, where libweft was built with libunwind's header (Debian:
 * libunwind-dev), the unwinder follows each object's DWARF call-frame
 * information, so code built with or without frame pointers unwinds; the
 * first call loads libunwind.so.8 (libunwind8) with dlopen(3), and
 * libunwind then keeps a pipe (two descriptors) open for the life of the
 * process; where libunwind.so.8 is not installed at run time, or under
 * Valgrind, only the innermost frame (the resume address) is reported.
 * Without libunwind's header at build time (aarch64), the walk follows
 * frame pointers (libweft is then built with -fno-omit-frame-pointer; code
 * built without them ends the chain early), and a ucontext build there
 * reports none.
 *
 * @return the number of fibers reported, -EINVAL for NULL @p s or @p cb,
 * -EPERM from another thread.
 */
int weft_fibers_each(weft_sched_t *s,
                     int (*cb)(const weft_fiber_info_t *info, void *arg),
                     void *arg);

/**
 * write every fiber of this thread's scheduler to @p out.
 *
 * A header line (how many fibers, running, ready, waiting; the loop's
 * iterations and its time busy and asleep), then one paragraph per fiber:
 * its id and name, state, what it waits for (kind, object, descriptor and
 * direction), for how long, its deadline, the function it runs and where
 * it was spawned, and its saved stack, innermost frame first (see
 * weft_fibers_each()). Addresses are symbolised with dladdr(3) where the
 * symbol is exported (link programs with -rdynamic for theirs), and each
 * shows its object file and offset, which addr2line(1) turns into a file
 * and line. Call it on the scheduler's thread (a fiber, or the loop's
 * stack); to get a dump from outside, use weft_dump_on_signal(). A fiber
 * of examples/echo_server:
 * @code{.unparsed}
 *   fiber 4 "conn fd 7" (detached): waiting for 1.325 s on fd 7 readable, deadline 24045179829947 (in 58.675 s)
 *       runs (echo_server+0x5d10), spawned at (echo_server+0x5cb5)
 *       #0 0x55647700c89b weft__block+0xfb (echo_server+0x989b)
 *       #1 0x55647700ef88 weft__io_op+0x98 (echo_server+0xbf88)
 *       #2 0x55647700f46d (echo_server+0xc46d)
 *       #3 0x55647700fc90 weft_read+0x50 (echo_server+0xcc90)
 *       ...
 * @endcode
 *
 * @return 0, -EINVAL for NULL @p out, -EPERM without a scheduler on this
 * thread.
 */
int weft_dump(FILE *out);

/**
 * dump every fiber to stderr (weft_dump()) when signal @p signo arrives.
 *
 * The handler does nothing but note the signal and wake the loop
 * (async-signal-safe); the dump is written by the loop of each scheduler
 * that asked, at its next iteration, not from the handler. A signal sent
 * to the process may be taken by any thread. @p signo 0 stops it for this
 * thread's scheduler (the previous disposition comes back when no
 * scheduler wants the signal). The environment variable WEFT_DUMP_SIGNAL
 * (QUIT, SIGQUIT or 3) does the same when a scheduler is created.
 *
 * @return 0, -EINVAL for a signal that cannot be caught, another signal
 * while one is in use, -ENOMEM (no scheduler), -EBUSY (more than 64
 * schedulers).
 */
int weft_dump_on_signal(int signo);

/**
 * name a fiber, for dumps and stall reports.
 *
 * @p name is copied (up to 63 bytes); NULL removes the name. Use
 * weft_self() to name the calling fiber. On the fiber's own thread.
 * @return 0, -ESRCH for a handle that names no live fiber of this thread,
 * -ENOMEM.
 */
int weft_fiber_set_name(weft_fiber_t f, const char *name);

/** A stall, as weft_sched_set_stall() reports it. */
typedef struct weft_stall_info {
    weft_fiber_t handle;      /**< the fiber that ran too long ({0}: the
                                   loop itself, between fibers)            */
    const char *name;         /**< its name, or NULL                        */
    weft_fn_t fn;             /**< the function it runs                    */
    const void *spawn_caller; /**< where weft_spawn() was called           */
    int64_t ran_ns;           /**< how long it ran without switching (at
                                   least; the watchdog's tick is a quarter
                                   of the limit)                           */
    uint64_t suppressed;      /**< stalls not reported since the last
                                   report (the rate limit)                 */
} weft_stall_info_t;

/** A stall report callback (weft_sched_set_stall()). */
typedef void (*weft_stall_fn)(const weft_stall_info_t *info, void *arg);

/**
 * report fibers that run longer than @p ms milliseconds without switching.
 *
 * Off by default (or WEFT_STALL_MS=N in the environment when the
 * scheduler is created). A watchdog thread looks at the scheduler's switch
 * counter every @p ms / 4 milliseconds; when it has not moved for @p ms
 * while the loop is not waiting in the backend, the fiber running is
 * stalling every other. It is reported once per stall, when it finally
 * switches away (so with how long it ran), by the loop: @p cb(info, @p arg)
 * on the loop's stack, or a line on stderr when @p cb is NULL:
 * @code{.unparsed}
 *   weft: stall: fiber 7 "worker" ran 212 ms without switching; spawned: spin (./prog+0x1a2b) from main+0x31 (./prog+0x1c40)
 * @endcode
 * At most one report a second: stalls in between are counted
 * (weft_stall_info_t.suppressed) and weft_stats_t.stalls counts them all.
 * The cost with the detector on is one load per switch and the watchdog
 * thread's wake-ups; off, one load per switch.
 *
 * @param s the scheduler (on its thread).
 * @param ms the limit, or 0 to turn the detector off.
 * @return 0, -EINVAL for NULL @p s or a negative @p ms, -EPERM from
 * another thread, or pthread_create's error.
 */
int weft_sched_set_stall(weft_sched_t *s, int64_t ms, weft_stall_fn cb,
                         void *arg);

/** @} */

/* ------------------------------------------------------------------------ */
/* Fiber-blocking I/O                                                       */
/* ------------------------------------------------------------------------ */
/** @defgroup io Fiber-blocking I/O
 * The file descriptors given to these calls are used in non-blocking mode:
 * sockets through MSG_DONTWAIT, other descriptors get O_NONBLOCK set the
 * first time weft sees them (the standard ones: see below). Close descriptors weft has waited on with
 * weft_close() (or call weft_fd_forget() before closing them yourself), so
 * that waiters are woken and the number can be reused safely: after a
 * plain close(2), weft keeps what it learnt of the old descriptor for the
 * next one given that number by pipe(2), socketpair(2) or open(2), which
 * may then not be made non-blocking (a read holds the whole thread) or,
 * on epoll, never be reported ready. dup2(2) and dup3(2) onto a number
 * weft has used close the old descriptor the same way: call
 * weft_fd_forget() on that number right after them.
 *
 * O_NONBLOCK belongs to the open file description, which every copy of
 * the descriptor shares, and the standard descriptors (0, 1 and 2) are
 * also the program's stdio and are shared with the shell, the terminal
 * and the rest of a pipeline. So weft leaves them blocking where it can,
 * and makes each of its own calls on them non-blocking by itself: on a
 * pipe with RWF_NOWAIT (Linux 6.4 and later), otherwise (a terminal, a
 * FIFO) by giving the descriptor a description of its own (opened anew
 * through /proc/self/fd onto the same number) on which O_NONBLOCK is set
 * only for the length of each call. printf and fgets on the same descriptor, before or after
 * weft_write(1, ...) or weft_read(0, ...), thus wait as they would
 * without weft (another thread's printf to a full terminal during one of
 * weft's calls on it is the one exception). Where neither can be done (a
 * pseudo-terminal master, or no /proc where RWF_NOWAIT is not had),
 * O_NONBLOCK is set on the shared description and stays
 * set: stdio on it and processes that share it without weft_proc_spawn()
 * (which gives its children their standard descriptors blocking) get
 * EAGAIN where they expect to block, and lose output when a pipe or
 * terminal is full. A standard descriptor that weft made non-blocking so
 * is made blocking again when the process exits (exit(3) or returning
 * from main; not _exit(2), and not in a forked child), so that the shell,
 * the terminal and the next program in a pipeline find it as it was.
 *
 * Each call first tries the system call and waits only when it would
 * block. EINTR is retried. Writes never raise SIGPIPE: they return -EPIPE.
 * A fiber whose calls never have to wait (a regular file, /dev/zero, a
 * socket whose peer keeps up, on a backend that makes the system call)
 * lets the other fibers and the timers run every 64 such calls in a row,
 * as a thread would be preempted: that call yields first (weft_yield()),
 * and returns -ECANCELED if the fiber was cancelled meanwhile.
 * @{
 */

/* Readiness events; the same bits as poll(2)'s POLLIN/POLLPRI/POLLOUT/... */
#define WEFT_READABLE 0x001 /**< readable (POLLIN) */
#define WEFT_PRIORITY 0x002 /**< priority data (POLLPRI) */
#define WEFT_WRITABLE 0x004 /**< writable (POLLOUT) */
#define WEFT_ERROR    0x008 /**< error (POLLERR); reported only */
#define WEFT_HANGUP   0x010 /**< hang-up (POLLHUP); reported only */

/**
 * wait until @p fd is ready for @p events.
 *
 * @param events a non-empty mask of WEFT_READABLE, WEFT_PRIORITY, WEFT_WRITABLE.
 *
 * @return the ready events (a positive mask, which may include WEFT_ERROR
 * and WEFT_HANGUP; after an error or a hang-up it holds WEFT_READABLE and
 * WEFT_WRITABLE if asked for, since neither would block, but
 * WEFT_PRIORITY only when priority data is there) — at once if @p fd is
 * ready now — or -ETIMEDOUT,
 * -ECANCELED, -EBADF (bad @p fd, or @p fd closed with weft_close() while
 * waiting), -EINVAL, -EPERM outside a fiber.
 */
int weft_wait_fd(int fd, int events, int64_t deadline);

/**
 * read up to @p len bytes from @p fd into @p buf, like read(2).
 *
 * @return the number of bytes read (short reads happen; 0 is end of file),
 * or -ETIMEDOUT, -ECANCELED, -EBADF, -ECONNRESET, any other read(2) error,
 * -EINVAL for a NULL buffer with non-zero length. @p len 0 reads nothing and
 * returns 0 once the checks every call makes have passed (so it can still
 * return -EPERM outside a fiber, -ECANCELED, -ETIMEDOUT for a timeout scope
 * that has passed, -EBADF).
 *
 * A regular file is read at its file position with read(2) on every
 * backend, in the loop's thread (the position may be shared with other
 * threads and processes, and only the system call takes and advances it
 * atomically); weft_pread() is the asynchronous read of a file.
 */
ssize_t weft_read(int fd, void *buf, size_t len, int64_t deadline);

/**
 * write up to @p len bytes, like write(2): returns as soon as
 * some bytes are committed, so the count may be short. @return the count,
 * or -EPIPE, -ETIMEDOUT, -ECANCELED, -EBADF, other write(2) errors.
 * See weft_write_all() for writing everything. A regular file is written
 * at its file position with write(2), as weft_read() reads it (lines that
 * several processes write to one inherited log file never overwrite each
 * other); weft_pwrite() is the asynchronous write of a file.
 */
ssize_t weft_write(int fd, const void *buf, size_t len, int64_t deadline);

/**
 * write all @p len bytes, waiting as often as needed.
 *
 * @param written if non-NULL, receives the number of bytes committed, also on
 * failure, so that a caller can resume without losing or resending data.
 * @return 0 when everything was written, else a negative errno.
 */
int weft_write_all(int fd, const void *buf, size_t len, size_t *written,
                   int64_t deadline);

/**
 * read exactly @p len bytes unless end of file comes first.
 *
 * @param got if non-NULL, receives the number of bytes read, also on failure.
 * @return 0 when @p len bytes were read, 1 if end of file came first (then
 * *@p got < @p len), or a negative errno as weft_read().
 */
int weft_read_full(int fd, void *buf, size_t len, size_t *got,
                   int64_t deadline);

/**
 * read up to @p len bytes at offset @p off, like pread(2); the
 * file position is not used or changed. On io_uring this is an
 * asynchronous ring operation (the loop keeps running while the disk
 * works); on epoll/poll it is pread(2). @return the count (0 at end of
 * file) or -errno; -EINVAL for a negative offset, -ESPIPE for pipes and
 * sockets.
 */
ssize_t weft_pread(int fd, void *buf, size_t len, off_t off, int64_t deadline);

/** write at offset @p off, like pwrite(2); see weft_pread(). */
ssize_t weft_pwrite(int fd, const void *buf, size_t len, off_t off,
                    int64_t deadline);

/** scatter read, like readv(2); returns as weft_read(). */
ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt,
                   int64_t deadline);

/** gather write, like writev(2); returns as weft_write(). */
ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt,
                    int64_t deadline);

/**
 * receive from socket @p fd, like recv(2) with @p flags
 * (MSG_DONTWAIT is added). MSG_WAITALL on a stream socket waits until
 * @p len bytes came, as recv(2) does; end of file, an error, the
 * deadline or a cancel returns the bytes received until then (not with
 * MSG_PEEK). @return as weft_read(); -ENOTSOCK for a descriptor that is
 * not a socket.
 */
ssize_t weft_recv(int fd, void *buf, size_t len, int flags, int64_t deadline);

/**
 * send on socket @p fd, like send(2) with @p flags (MSG_DONTWAIT
 * and MSG_NOSIGNAL are added). @return as weft_write(); -ENOTSOCK for a
 * descriptor that is not a socket.
 */
ssize_t weft_send(int fd, const void *buf, size_t len, int flags,
                  int64_t deadline);

/**
 * accept a connection on listening socket @p fd.
 *
 * @param addr,addrlen as accept(2); may be NULL.
 * @return the new descriptor (non-blocking, close-on-exec), or -ETIMEDOUT,
 * -ECANCELED, -EBADF, -EMFILE/-ENFILE when out of descriptors (the pending
 * connection stays queued; back off before retrying), other accept(2)
 * errors. Aborted connections (ECONNABORTED) are skipped.
 */
int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen,
                int64_t deadline);

/**
 * connect socket @p fd to @p addr, waiting for the handshake.
 * @return 0, -ECONNREFUSED, -ETIMEDOUT (the socket is then unusable: close
 * it), -ECANCELED, other connect(2) errors, -EINVAL for NULL @p addr.
 */
int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
                 int64_t deadline);

/**
 * shutdown(2) on @p fd. Never waits for a peer; in a fiber,
 * write-behind bytes (weft_write_behind()) go out first unless @p how is
 * SHUT_RD, which waits at most until their deadline. After SHUT_WR or
 * SHUT_RDWR write-behind is off for @p fd, so a later send fails with
 * -EPIPE as send(2) does. @return 0 or -errno.
 */
int weft_shutdown(int fd, int how);

/**
 * let small sends on stream socket @p fd return before
 * the kernel has taken the bytes (@p on 1), or stop that for new sends
 * (@p on 0).
 *
 * On io_uring a fiber's send of up to ~3.7 KiB with no flags (weft_send,
 * weft_write, weft_writev) is copied into a buffer the scheduler owns,
 * submitted, and the call returns the full length at once: the fiber is
 * not resumed again for the send's completion, which in a request/response
 * server halves the resumes per request. Further small sends are appended
 * behind the bytes in flight, so order is kept; a larger or flagged send,
 * weft_flush(), weft_shutdown() and weft_close() first wait until the
 * buffer has gone out. The buffer carries the deadline of the latest call
 * that added to it. If that deadline passes or the send fails, the bytes
 * not yet sent are dropped and every later write on @p fd returns that error
 * (-ETIMEDOUT, -EPIPE, -ECONNRESET...) until it is closed, the way a
 * socket error persists. weft_sched_run() returns only when every buffer
 * has gone out or failed.
 *
 * Do not write to @p fd by other means (write(2), sendfile(2), splice(2))
 * without weft_flush() first: those would overtake the buffered bytes.
 * Shut it down with weft_shutdown() and close it with weft_close(), which
 * let the bytes out first: a plain shutdown(2) right after a send ends the
 * stream before them, and the peer sees end of file without them.
 * On the epoll and poll backends a send already returns once the kernel
 * has the bytes; there the call succeeds and changes nothing. The setting
 * ends when @p fd is closed or forgotten (weft_close, weft_fd_forget).
 *
 * @return 0; -EBADF for a bad descriptor; -ENOTSOCK; -EINVAL for a socket
 * that is not SOCK_STREAM or @p on other than 0 or 1; -EPERM with no
 * scheduler on this thread; -ENOMEM.
 */
int weft_write_behind(int fd, int on);

/**
 * wait until no write-behind bytes (weft_write_behind()) of
 * @p fd are left in the scheduler's hands, i.e. all were passed to the
 * kernel, as a blocking send would have. @return 0 (also when write-behind
 * was never on), the descriptor's write-behind error, -ETIMEDOUT when
 * @p deadline passes first (the bytes stay queued under their own deadline),
 * -ECANCELED, -EBADF, -EPERM outside a fiber.
 */
int weft_flush(int fd, int64_t deadline);

/**
 * close @p fd, first waking every fiber waiting on it with
 * -EBADF (and cancelling its in-flight io_uring operations) and dropping
 * its registration, so a reused descriptor number never receives the old
 * waits' events. In a fiber on io_uring the close is a ring operation
 * batched with the others (the fiber resumes in the next loop iteration),
 * elsewhere close(2). It does not wait for a peer, except that write-behind
 * bytes (weft_write_behind()) are let out first when called from a fiber
 * that is not cancelled — at most until their deadline, as a blocking send
 * would have waited; from outside a fiber, or once cancelled, they are
 * dropped. @return 0 or -errno (-EBADF for a descriptor that is not open).
 */
int weft_close(int fd);

/**
 * drop weft's state for @p fd (waking its waiters with
 * -EBADF) without closing it; call it before closing a descriptor by other
 * means, and after dup2(2) or dup3(2) onto @p fd, which closes the one that
 * had the number. @return 0, -EBADF for a negative @p fd.
 */
int weft_fd_forget(int fd);

/**
 * socket(2) with SOCK_NONBLOCK | SOCK_CLOEXEC added.
 * @return the descriptor or -errno.
 */
int weft_socket(int domain, int type, int protocol);

/**
 * pipe2(2) with O_NONBLOCK | O_CLOEXEC. @return 0 or -errno.
 */
int weft_pipe(int fds[2]);

/**
 * a listening TCP socket on @p host, a numeric address
 * ("127.0.0.1", "::1"; NULL or "" = all IPv4 addresses) or a name
 * (resolved as weft_listen() does: "localhost"), and @p port (0 picks
 * a free port; see weft_local_port()), with SO_REUSEADDR and, if @p reuseport,
 * SO_REUSEPORT. @p backlog <= 0 means SOMAXCONN. @return the descriptor or
 * -errno (-EINVAL for a bad port, -ENOENT for a name that does not exist).
 */
int weft_tcp_listen(const char *host, int port, int backlog, int reuseport);

/**
 * connect to @p host and @p port with TCP_NODELAY set. A numeric
 * @p host is connected to at once; a name is resolved and its addresses
 * raced as weft_dial() does. @return the connected descriptor or -errno
 * (as weft_connect(); -ENOENT for a name that does not exist).
 */
int weft_tcp_connect(const char *host, int port, int64_t deadline);

/**
 * the local port @p fd is bound to, or -errno.
 */
int weft_local_port(int fd);

/** @} */

/* ------------------------------------------------------------------------ */
/* Datagrams and messages                                                   */
/* ------------------------------------------------------------------------ */
/** @defgroup dgram Datagrams and messages
 * recvfrom(2), sendto(2), recvmsg(2) and sendmsg(2) that block only the
 * calling fiber: the system call first (with MSG_DONTWAIT, and
 * MSG_NOSIGNAL on sends), a readiness wait (weft_wait_fd()) when it would
 * block. For UDP, Unix datagram and any other socket; on a stream socket
 * with write-behind on (weft_write_behind()), call weft_flush() before a
 * send through these. A datagram larger than the buffer is cut to it
 * (MSG_TRUNC in @p flags returns its real length, as recv(2) does).
 * MSG_WAITALL on a stream socket waits until the buffers are full, as
 * recv(2) does; end of file, an error, the deadline or a cancel returns
 * the bytes received until then (not with MSG_PEEK, nor with a control
 * buffer for recvmsg: then it returns what is there).
 * @{
 */

/**
 * receive from socket @p fd and learn the sender's address, like
 * recvfrom(2).
 *
 * @param addr,addrlen where to store the sender's address, as recvfrom(2):
 *   *@p addrlen is the room at @p addr on entry, the address's length on
 *   return; both NULL when the address is not wanted.
 * @return the number of bytes received (0 is an empty datagram, or end of
 * file on a stream socket), or -ETIMEDOUT, -ECANCELED, -EBADF (also when
 * @p fd is closed with weft_close() while waiting), -ENOTSOCK, other
 * recvfrom(2) errors, -EINVAL (NULL @p buf with non-zero @p len, @p addr
 * without @p addrlen), -EPERM outside a fiber.
 */
ssize_t weft_recvfrom(int fd, void *buf, size_t len, int flags,
                      struct sockaddr *addr, socklen_t *addrlen,
                      int64_t deadline);

/**
 * send @p len bytes to @p addr on socket @p fd, like sendto(2); with
 * @p addr NULL, to the socket's connected peer.
 *
 * @return the number of bytes sent (a datagram goes whole or not at all),
 * or -ETIMEDOUT, -ECANCELED, -EBADF, -ENOTSOCK, -EMSGSIZE (a datagram too
 * large for the protocol), -ECONNREFUSED (an ICMP error from an earlier
 * datagram of a connected UDP socket), other sendto(2) errors, -EINVAL,
 * -EPERM outside a fiber. Never raises SIGPIPE.
 */
ssize_t weft_sendto(int fd, const void *buf, size_t len, int flags,
                    const struct sockaddr *addr, socklen_t addrlen,
                    int64_t deadline);

/**
 * receive a message into @p msg, like recvmsg(2): scatter buffers,
 * the sender's address (msg_name), ancillary data (msg_control, for
 * instance SCM_RIGHTS descriptors on a Unix socket) and msg_flags.
 * @return as weft_recvfrom(); -EINVAL for a NULL @p msg.
 */
ssize_t weft_recvmsg(int fd, struct msghdr *msg, int flags, int64_t deadline);

/**
 * send the message @p msg, like sendmsg(2).
 * @return as weft_sendto(); -EINVAL for a NULL @p msg.
 */
ssize_t weft_sendmsg(int fd, const struct msghdr *msg, int flags,
                     int64_t deadline);

/** @} */

/* ------------------------------------------------------------------------ */
/* Names, addresses, Unix-domain sockets                                    */
/* ------------------------------------------------------------------------ */
/** @defgroup net Names, addresses, Unix-domain sockets
 * Connecting to and listening on host names. A numeric address ("127.0.0.1",
 * "::1", "fe80::1%eth0") is parsed on the spot; any other host is looked up
 * with weft_getaddrinfo(), which blocks only the calling fiber.
 * Unix-domain socket paths that start with '@' name the abstract namespace
 * (Linux): "@app" is the name "\0app", with no file (write "./@app" for a
 * file of that name). Every descriptor returned is non-blocking and
 * close-on-exec, as weft_socket() makes them.
 * @{
 */

/** Flag of weft_listen(): set SO_REUSEPORT (several listeners share a port). */
#define WEFT_REUSEPORT 1
/** Flag of weft_unix_listen(): replace a stale socket file left at the path
 *  by a server that is gone (never a live one, never a file that is not a
 *  socket). */
#define WEFT_UNIX_UNLINK 2

/**
 * resolve @p host and @p port to one socket address: the first that
 * getaddrinfo(3) gives for @p type.
 *
 * @param type SOCK_STREAM, SOCK_DGRAM, or 0 for any.
 * @param addr,addrlen receive the address (a struct sockaddr_storage has
 *   room for any), for instance for weft_sendto().
 *
 * A numeric @p host never waits. @return 0; -EINVAL (NULL or empty @p host,
 * @p port outside 0..65535, bad @p type, NULL @p addr or @p addrlen); the
 * errors of weft_getaddrinfo() (-ENOENT: no such name, -ETIMEDOUT,
 * -ECANCELED, -EPERM outside a fiber for a name).
 */
int weft_resolve(const char *host, int port, int type,
                 struct sockaddr_storage *addr, socklen_t *addrlen,
                 int64_t deadline);

/**
 * connect to @p host (a name or a numeric address) and @p port.
 *
 * @param type SOCK_STREAM (TCP, with TCP_NODELAY set) or SOCK_DGRAM (a
 *   connected UDP socket: weft_send() and weft_recv() exchange datagrams
 *   with that peer).
 *
 * A name's addresses are tried in the order the resolver gives them, the
 * address families alternating; for TCP a new attempt starts when the one
 * before fails, or once it has gone 250 ms without an answer ("happy
 * eyeballs", RFC 8305) while the earlier attempts keep going; the first
 * connection made wins and the others are closed. Every attempt shares
 * @p deadline. The losing attempts are closed by fibers of their own, which
 * weft_dial() does not wait for: it can return, with a connection or an
 * error, before they are closed (on io_uring each first waits for the
 * kernel to answer its cancelled connect), so a program that counts its
 * open descriptors right after a dial may still see them; they are gone
 * after a few turns of the loop.
 *
 * @return the connected descriptor; -EINVAL (NULL or empty @p host, @p port
 * outside 1..65535, another @p type); the resolver's errors (-ENOENT for a
 * name that does not exist); when every address failed, the error of the
 * first one (-ECONNREFUSED, -ENETUNREACH...); -ETIMEDOUT; -ECANCELED;
 * -EPERM outside a fiber.
 */
int weft_dial(const char *host, int port, int type, int64_t deadline);

/**
 * a socket bound to @p host (a name or a numeric address; NULL or "" for
 * every IPv4 address) and @p port (0 picks a free port: see
 * weft_local_port()): listening for TCP connections when @p type is
 * SOCK_STREAM (with SO_REUSEADDR), or a UDP socket ready for
 * weft_recvfrom() when it is SOCK_DGRAM.
 *
 * @param backlog the listen(2) backlog; <= 0 means SOMAXCONN. Ignored for
 *   SOCK_DGRAM.
 * @param flags 0 or WEFT_REUSEPORT.
 *
 * The addresses of a name are tried in order and the first that binds is
 * used ("localhost": the loopback address the resolver lists first). A name
 * is resolved with weft_getaddrinfo() in a fiber (until @p deadline), and
 * with getaddrinfo(3) on the calling thread outside fibers; a numeric
 * address never waits.
 *
 * @return the descriptor; -EINVAL (@p port outside 0..65535, another
 * @p type, unknown @p flags); the resolver's errors; the bind(2) or
 * listen(2) error of the first address (-EADDRINUSE, -EACCES,
 * -EADDRNOTAVAIL...).
 */
int weft_listen(const char *host, int port, int type, int backlog, int flags,
                int64_t deadline);

/**
 * a Unix-domain socket bound to @p path ("@name" for the abstract
 * namespace): listening when @p type is SOCK_STREAM or SOCK_SEQPACKET,
 * bound only for SOCK_DGRAM.
 *
 * @param backlog the listen(2) backlog; <= 0 means SOMAXCONN.
 * @param flags 0 or WEFT_UNIX_UNLINK: if a socket file is left at @p path
 *   and nothing accepts connections on it any more (connect(2) is
 *   refused), it is removed and the bind tried again. Without it, or when
 *   the file is a live socket or not a socket at all, the call fails with
 *   -EADDRINUSE. The socket file stays after close: unlink(2) it when done.
 *
 * Never waits. @return the descriptor; -EINVAL (NULL or empty @p path, "@"
 * alone, another @p type, unknown @p flags); -ENAMETOOLONG (longer than
 * sockaddr_un holds: 107 bytes for a path, 107 after the '@' for an
 * abstract name); -EADDRINUSE; other socket(2), bind(2) and listen(2)
 * errors (-ENOENT for a missing directory, -EACCES).
 */
int weft_unix_listen(const char *path, int type, int backlog, int flags);

/**
 * connect a Unix-domain socket of @p type (SOCK_STREAM, SOCK_SEQPACKET or
 * SOCK_DGRAM) to @p path ("@name" for the abstract namespace).
 *
 * A server whose backlog is full makes the call wait until @p deadline
 * for room, trying again every 1 ms, then 2, 4... up to every 50 ms (the
 * kernel tells a non-blocking connect nothing about room becoming free).
 * @return the connected descriptor; -EINVAL, -ENAMETOOLONG (as
 * weft_unix_listen()); -ENOENT (no such file); -ECONNREFUSED (nothing
 * listens there); -EPROTOTYPE (a socket of another type); -ETIMEDOUT;
 * -ECANCELED; -EPERM outside a fiber.
 */
int weft_unix_connect(const char *path, int type, int64_t deadline);

/**
 * write socket address @p addr as text into @p buf: "192.0.2.1:80",
 * "[2001:db8::1]:443" (with "%scope" for a scoped address), a Unix
 * socket's path, "@name" for an abstract one and "" for an unnamed one.
 *
 * @param len the address's length, as accept(2) or weft_recvfrom() give it.
 * @return the length of the text (the NUL not counted); -ENOSPC when
 * @p size cannot hold it and the NUL (@p buf then holds as much as fits,
 * NUL-terminated, if @p size > 0); -EAFNOSUPPORT for another family;
 * -EINVAL (NULL @p addr or @p buf, @p len too short for the family).
 * Never blocks.
 */
int weft_addr_format(const struct sockaddr *addr, socklen_t len, char *buf,
                     size_t size);

/** @} */

/* ------------------------------------------------------------------------ */
/* Buffered reading                                                         */
/* ------------------------------------------------------------------------ */
/** @defgroup reader Buffered reading
 * A reader buffers what weft_read() gets from a descriptor, so that a
 * program can take it a line (or any delimited piece) at a time. Lines
 * are handed out in place, as pointers into the reader's buffer: no copy,
 * and the longest line is bounded by the buffer, so a peer cannot make
 * the program allocate without limit. Nothing read is ever dropped: a call
 * that fails (timeout, cancellation, a line too long) leaves every byte
 * it had buffered for the next call. A piece already buffered is handed
 * out without a blocking call; reading the descriptor is one (a fiber, a
 * deadline, -ECANCELED once cancelled). A reader belongs to one fiber at a
 * time; its memory is the caller's (the buffer is allocated by
 * weft_reader_init() and freed by weft_reader_destroy()).
 * @{
 */

/** A buffered reader over a descriptor (weft_reader_init()). */
typedef struct weft_reader {
    int fd;                /**< the descriptor it reads from              */
    char *buf_;            /**< internal: the buffer (size_ + 1 bytes)     */
    size_t size_;          /**< internal                                  */
    size_t start_, end_;   /**< internal: buffered bytes are [start_, end_) */
    int eof_;              /**< internal: end of file seen                */
} weft_reader_t;

/**
 * prepare @p r to read from @p fd with a buffer of @p size bytes (0: 16
 * KiB), which is also the longest line it can return.
 *
 * @p fd stays the caller's: weft_reader_destroy() does not close it.
 * Never blocks. @return 0; -EINVAL (NULL @p r, @p size above 1 GiB);
 * -EBADF for a negative @p fd; -ENOMEM.
 */
int weft_reader_init(weft_reader_t *r, int fd, size_t size);

/**
 * free @p r's buffer (bytes still buffered are dropped); the descriptor is
 * left open. A zeroed or already destroyed reader is fine.
 */
void weft_reader_destroy(weft_reader_t *r);

/**
 * read up to and including the next @p delim byte.
 *
 * @param line receives a pointer into the reader's buffer to the bytes
 *   returned, valid until the next call on @p r. They are not
 *   NUL-terminated; at end of file the last piece may lack @p delim.
 * @param limit the most bytes a piece may have, the delimiter included;
 *   0 means the buffer's size, which is also the largest allowed.
 *
 * @return the number of bytes (> 0); 0 at end of file with nothing
 * buffered; -EMSGSIZE when @p limit bytes are buffered and none of them is
 * @p delim: nothing is consumed, *@p line points at the buffered bytes and
 * weft_reader_buffered() says how many (take them with
 * weft_reader_read(), or close the connection); the errors of weft_read()
 * (-ETIMEDOUT, -ECANCELED, -EBADF, -ECONNRESET...), which also keep what
 * was buffered; -EINVAL (NULL argument, @p limit above the buffer's size,
 * @p delim outside 0..255).
 */
ssize_t weft_read_until(weft_reader_t *r, int delim, char **line,
                        size_t limit, int64_t deadline);

/**
 * read one text line: weft_read_until() with '\n', then the line ending
 * ("\n" or "\r\n") is replaced by a NUL.
 *
 * @param line receives the NUL-terminated line, in the reader's buffer,
 *   valid until the next call on @p r; the last line of a stream may end
 *   without a newline.
 * @param len if non-NULL, receives the line's length (the line ending not
 *   counted; the text may itself contain NUL bytes).
 * @param limit as weft_read_until(), the line ending included.
 *
 * @return 1 with a line; 0 at end of file; a negative errno as
 * weft_read_until() (-EMSGSIZE for a line longer than @p limit, with the
 * bytes kept).
 */
int weft_read_line(weft_reader_t *r, char **line, size_t *len, size_t limit,
                   int64_t deadline);

/**
 * read up to @p len bytes: the buffered ones first, then, only when none
 * is buffered, from the descriptor (one weft_read(), straight into
 * @p buf). For the body after the header lines of a protocol, or to take
 * the bytes of a line refused with -EMSGSIZE.
 * @return the count (0 at end of file) or the errors of weft_read().
 */
ssize_t weft_reader_read(weft_reader_t *r, void *buf, size_t len,
                         int64_t deadline);

/** the number of bytes buffered in @p r, not yet handed out. */
size_t weft_reader_buffered(const weft_reader_t *r);

/** @} */

/* ------------------------------------------------------------------------ */
/* Signals                                                                  */
/* ------------------------------------------------------------------------ */
/** @defgroup signal Signals
 * Waiting for signals in a fiber, through a signalfd(2) per loop.
 *
 * @code{.unparsed}
 *   Masks      A signalfd sees only signals that are blocked: unblocked,
 *              they run their handler or default action (SIGINT, SIGTERM:
 *              the process ends) instead. The mask is per thread, and a
 *              signal sent to the process goes to any one thread that does
 *              not block it. So a program must block the signals it waits
 *              for in EVERY thread: call weft_signal_block() (or
 *              weft_signal_open()) in main() before it creates any thread,
 *              since threads inherit their creator's mask. weft's own
 *              offload threads block every signal.
 *   Delivery   A signal sent to the process is taken by exactly one wait:
 *              with several loops waiting for it, whichever reads first.
 *              A signal sent to a thread (pthread_kill) is seen only by the
 *              signalfds read on that thread: wait on the loop of the
 *              thread that opened the descriptor. Standard signals do not
 *              queue: two SIGTERMs before a wait are one.
 *   Children   weft_proc_spawn() starts children with an empty signal mask
 *              (and SIGPIPE at its default), so a blocked mask is not
 *              inherited by the programs it runs.
 * @endcode
 * weft never installs a signal handler nor changes a disposition.
 * @{
 */

struct signalfd_siginfo;

/**
 * block the signals of @p set in the calling thread (pthread_sigmask(3)
 * with SIG_BLOCK), keeping those already blocked. Call it in main() before
 * creating threads, which inherit the mask. Callable anywhere.
 * @return 0, -EINVAL for a NULL @p set.
 */
int weft_signal_block(const sigset_t *set);

/**
 * a descriptor that waits for the signals of @p set: blocks @p set in the
 * calling thread (as weft_signal_block()), then opens a signalfd(2) for it,
 * non-blocking and close-on-exec. Pass it to weft_signal_wait() on this
 * thread's loop; close it with weft_close(). SIGKILL and SIGSTOP cannot be
 * waited for and are ignored in @p set. When it fails, the thread's
 * signal mask is left as it was (what nothing reads must still end the
 * program).
 * @return the descriptor; -EINVAL for a NULL or empty @p set; -EMFILE,
 * -ENFILE, -ENOMEM.
 */
int weft_signal_open(const sigset_t *set);

/**
 * wait until a signal of descriptor @p sfd's set is pending, and take it.
 *
 * @param sfd a descriptor from weft_signal_open(), or any signalfd (one
 *   made without SFD_NONBLOCK gets O_NONBLOCK set, as the descriptors of
 *   the I/O calls do).
 * @param info if non-NULL, receives what the kernel tells about the signal
 *   (struct signalfd_siginfo of <sys/signalfd.h>: ssi_signo, ssi_pid of
 *   the sender, ssi_code...).
 *
 * A signal already pending returns at once. Several fibers may wait on
 * one descriptor: each signal goes to one of them.
 * @return the signal number (> 0); -ETIMEDOUT; -ECANCELED; -EBADF (also
 * when @p sfd is closed with weft_close() while waiting); -EINVAL for a
 * descriptor that is not a signalfd or a bad deadline; -EPERM outside a
 * fiber.
 */
int weft_signal_wait(int sfd, struct signalfd_siginfo *info, int64_t deadline);

/** @} */

/* ------------------------------------------------------------------------ */
/* Subprocesses                                                             */
/* ------------------------------------------------------------------------ */
/** @defgroup subproc Subprocesses
 * Running a program with optional pipes to its standard input, output and
 * error. The pipes' ends in this process are ordinary non-blocking
 * descriptors for weft_read(), weft_write(), a weft_reader_t...; the child
 * is watched through a pidfd (Linux >= 5.3; elsewhere weft_proc_wait()'s
 * polling), so no SIGCHLD handler is needed or installed.
 * @{
 */

/** What a child's standard descriptor is (weft_proc_opts_t.stdio). */
#define WEFT_PROC_INHERIT 0 /**< this process's own (the default)          */
#define WEFT_PROC_PIPE    1 /**< a new pipe; this process's end in weft_proc_t */
#define WEFT_PROC_NULL    2 /**< /dev/null                                 */
#define WEFT_PROC_FD      3 /**< the descriptor in weft_proc_opts_t.stdio_fd */
#define WEFT_PROC_STDOUT  4 /**< stderr only: wherever stdout goes (2>&1)  */

/** Options for weft_proc_spawn(); zero-initialise, then set fields. */
typedef struct weft_proc_opts {
    int stdio[3];          /**< WEFT_PROC_* for stdin, stdout, stderr      */
    int stdio_fd[3];       /**< the descriptors for WEFT_PROC_FD           */
    char *const *envp;     /**< the environment; NULL: this process's      */
    const char *cwd;       /**< working directory; NULL: this process's    */
} weft_proc_opts_t;

/** A running (or finished) child process; the caller's memory. */
typedef struct weft_proc {
    pid_t pid;             /**< the child's process id                     */
    int in;                /**< write end of its stdin pipe, or -1         */
    int out;               /**< read end of its stdout pipe, or -1         */
    int err;               /**< read end of its stderr pipe, or -1         */
    int pidfd_;            /**< internal                                   */
    int status_;           /**< internal: its wait status, once reaped     */
    int reaped_;           /**< internal                                   */
} weft_proc_t;

/**
 * start @p file with arguments @p argv (argv[0] included, NULL-terminated)
 * as a child process, with pipes or other descriptors as @p opts says.
 *
 * @param file a path if it contains a '/' (relative to @p opts->cwd when
 *   that is set), else a name searched in this process's PATH.
 * @param opts NULL for all three descriptors inherited, the parent's
 *   environment and working directory.
 *
 * posix_spawn(3): the child shares no memory with this process once it has
 * started; its signal mask is empty and SIGPIPE is at its default, whatever
 * this thread blocks or ignores; no descriptor of this process that is
 * close-on-exec (every one weft makes) reaches it.
 *
 * The child's standard descriptors block, as programs expect of their
 * stdin, stdout and stderr, also those weft made non-blocking here (a
 * connection from weft_accept() handed over inetd-style, an end of a
 * weft_pipe(), a standard descriptor of this process that weft could not
 * leave blocking), given with WEFT_PROC_FD or WEFT_PROC_INHERIT. A pipe, FIFO or terminal
 * is opened anew for the child (through /proc/self/fd): a description of
 * its own, so this process's stays non-blocking. A connected socket has
 * one description only: it is made blocking, which weft's own calls on it
 * do not mind (they pass MSG_DONTWAIT), but recv(2) and send(2) without
 * it then wait. A listening socket, a pseudo-terminal's master, and any
 * descriptor when /proc is missing, are given as they are. Callable outside fibers;
 * never waits for the child (the calling thread is held only while the
 * child is being started).
 *
 * On success fills @p p (pipes in @p p->in, @p p->out, @p p->err, -1 for
 * the others): join it with weft_proc_join() and release it with
 * weft_proc_close(). A pipe end may be closed earlier with weft_close() —
 * closing @p p->in is how the child sees end of file — and then set to -1.
 * @return 0; -ENOENT (no such program), -EACCES, -ENOEXEC and the other
 * errors of execve(2), reported by the call itself (no child is left);
 * -EINVAL (NULL @p p, @p file or @p argv, empty @p file, an unknown stdio
 * mode, WEFT_PROC_STDOUT for stdin or stdout); -EBADF (a WEFT_PROC_FD
 * descriptor that is not open); -EMFILE; -ENOMEM; -EAGAIN.
 */
int weft_proc_spawn(weft_proc_t *p, const char *file, char *const argv[],
                    const weft_proc_opts_t *opts);

/**
 * wait until child @p p terminates, and reap it.
 *
 * @param wstatus if non-NULL, receives the status as waitpid(2) gives it
 *   (WIFEXITED/WEXITSTATUS, WIFSIGNALED/WTERMSIG).
 *
 * Joining again (also after weft_proc_close()) gives the same status. Its
 * pipes are not touched: read them to the end first, or a child that
 * fills a pipe nobody reads never terminates.
 * @return 0; -ETIMEDOUT (the child runs on: join again, or kill it);
 * -ECANCELED; -ECHILD when something else reaped it (waitpid(-1), SIGCHLD
 * ignored); -EINVAL (NULL or never started @p p, a bad deadline); -EPERM
 * outside a fiber.
 */
int weft_proc_join(weft_proc_t *p, int *wstatus, int64_t deadline);

/**
 * send signal @p sig (0: only check that it runs) to child @p p. Through
 * its pidfd (pidfd_send_signal(2)) where there is one, so never to another
 * process that got its number. Never blocks.
 * @return 0; -ESRCH once it has been reaped; -EINVAL (NULL @p p, a bad
 * signal number); -EPERM.
 */
int weft_proc_kill(weft_proc_t *p, int sig);

/**
 * close the pipes of @p p still open (waking fibers that wait on them with
 * -EBADF, as weft_close() does) and its pidfd, and reap the child if it has
 * terminated. It neither waits for nor kills a child that still runs: that
 * one stays this process's child, to be reaped with
 * weft_proc_wait(@p p->pid, ...) (or it remains a zombie until this process
 * ends). Closing twice is fine. @return 0, -EINVAL for NULL.
 */
int weft_proc_close(weft_proc_t *p);

/** @} */

/* ------------------------------------------------------------------------ */
/* Sync primitives                                                          */
/* ------------------------------------------------------------------------ */
/** @defgroup sync Sync primitives
 * Mutex, condition variable, notification, semaphore, task limiter, wait
 * group and channel. All are fiber-aware: blocking parks the calling fiber,
 * never the thread. Rules common to all of them:
 *
 * @code{.unparsed}
 *   Thread     An object belongs to the scheduler thread whose fibers use
 *              it. Only weft_notification_set() and weft_notification_is_set()
 *              may be called from other threads.
 *   Memory     The caller owns the object's memory (a struct member, a
 *              global, a fiber's stack frame); channels are the exception
 *              (weft_chan_create() allocates). The static initializers need
 *              no destroy call when the object is idle.
 *   Waiting    Waiters queue in arrival order (FIFO); a release hands the
 *              resource to the first waiter directly, so a late arrival
 *              cannot overtake it. Every wait takes an absolute deadline and
 *              returns -ETIMEDOUT when it passes, -ECANCELED when the fiber
 *              is cancelled, -EPERM outside a fiber; a waiter that gives up
 *              is removed from the queue before the call returns.
 *   Destroy    weft_*_destroy() wakes every fiber still waiting with -EIDRM
 *              (the object has been removed); once it returns, the memory
 *              may be freed. The exceptions (-EBUSY) are listed per call.
 *   Scopes     Inside a timeout scope (weft_scope_run()) every wait is
 *              also bounded by the scope's deadline.
 * @endcode
 * @{
 */

/** Intrusive FIFO of waiting fibers. Internal: never touch its fields. */
typedef struct weft_waitq {
    void *head, *tail;
} weft_waitq_t;
#define WEFT_WAITQ_INIT { NULL, NULL }

/* Mutex ------------------------------------------------------------------- */
/** @defgroup mutex Mutex
 *  @{ */

/** A fiber mutex, not recursive. Initialise with WEFT_MUTEX_INIT or
 *  weft_mutex_init(). */
typedef struct weft_mutex {
    void *owner;         /**< the owning fiber, NULL when unlocked */
    weft_waitq_t q;
} weft_mutex_t;
#define WEFT_MUTEX_INIT { NULL, WEFT_WAITQ_INIT }

/** initialise @p m unlocked. @return 0 or -EINVAL. */
int weft_mutex_init(weft_mutex_t *m);

/**
 * lock @p m, waiting until @p deadline if another fiber
 * holds it. Ownership passes from the unlocking fiber straight to the
 * longest-waiting fiber (FIFO hand-off). @return 0, -ETIMEDOUT,
 * -ECANCELED, -EDEADLK if the caller already holds @p m, -EIDRM if @p m was
 * destroyed while waiting, -EPERM outside a fiber, -EINVAL.
 */
int weft_mutex_lock(weft_mutex_t *m, int64_t deadline);

/** lock @p m if free. @return 0, -EBUSY, -EDEADLK,
 *  -EPERM outside a fiber, -EINVAL. Never blocks. */
int weft_mutex_trylock(weft_mutex_t *m);

/**
 * unlock @p m, handing it to the first waiter if any
 * (that fiber becomes runnable; the caller keeps running). @return 0,
 * -EPERM if the calling fiber does not hold @p m, -EINVAL.
 */
int weft_mutex_unlock(weft_mutex_t *m);

/**
 * wake every waiter with -EIDRM and reset @p m to
 * unlocked. @return 0, or -EBUSY (nothing done) while @p m is held by a
 * fiber other than the caller.
 */
int weft_mutex_destroy(weft_mutex_t *m);

/** @} */

/* Condition variable ------------------------------------------------------ */
/** @defgroup cond Condition variable
 *  @{ */

/** A fiber condition variable. Initialise with WEFT_COND_INIT or
 *  weft_cond_init(). */
typedef struct weft_cond {
    weft_waitq_t q;
} weft_cond_t;
#define WEFT_COND_INIT { WEFT_WAITQ_INIT }

/** initialise @p c. @return 0 or -EINVAL. */
int weft_cond_init(weft_cond_t *c);

/**
 * atomically unlock @p m (which the caller must hold) and
 * wait on @p c until signalled, then lock @p m again before returning — on
 * every return path, also timeout, cancellation and -EIDRM, as with
 * pthread_cond_wait(). Wake-ups are FIFO; no spurious wake-ups, but the
 * caller should still re-check its predicate (another fiber may have run
 * first). @return 0 when signalled, -ETIMEDOUT, -ECANCELED, -EIDRM, -EPERM
 * if the caller does not hold @p m or is not a fiber, -EINVAL.
 */
int weft_cond_wait(weft_cond_t *c, weft_mutex_t *m, int64_t deadline);

/** wake the first waiter, if any. @return 0 or -EINVAL. */
int weft_cond_signal(weft_cond_t *c);

/** wake every waiter. @return 0 or -EINVAL. */
int weft_cond_broadcast(weft_cond_t *c);

/** wake every waiter with -EIDRM. @return 0, -EINVAL. */
int weft_cond_destroy(weft_cond_t *c);

/** @} */

/* Notification ------------------------------------------------------------ */
/** @defgroup notification Notification
 *  @{ */

/**
 * A one-shot event: once set it stays set and every wait returns at once.
 * It may be set from any thread; waiters run on their own loop. The first
 * fiber to wait binds it to its scheduler: all waiters must belong to that
 * same scheduler.
 */
typedef struct weft_notification {
    int state;            /**< accessed atomically                           */
    void *sched;          /**< scheduler of the waiters                      */
    weft_waitq_t q;
    void *post_[4];       /**< storage for the cross-thread wake-up          */
} weft_notification_t;
#define WEFT_NOTIFICATION_INIT { 0, NULL, WEFT_WAITQ_INIT, { NULL } }

/** initialise @p n unset. @return 0 or -EINVAL. */
int weft_notification_init(weft_notification_t *n);

/**
 * wait until @p n is set. @return 0 (at once if it
 * is already set), -ETIMEDOUT, -ECANCELED, -EIDRM, -EPERM outside a fiber
 * or when @p n already has waiters on another scheduler, -EINVAL.
 */
int weft_notification_wait(weft_notification_t *n, int64_t deadline);

/**
 * set @p n and wake every waiter. Thread-safe: from
 * a thread other than the waiters' the wake-up is posted to their loop
 * (no allocation). @return 0, -EALREADY if @p n was already set, -EINVAL.
 */
int weft_notification_set(weft_notification_t *n);

/** 1 if set, else 0. Thread-safe. */
int weft_notification_is_set(const weft_notification_t *n);

/**
 * wake every waiter with -EIDRM and reset @p n
 * to unset. @return 0, -EINVAL, or -EBUSY (nothing done) while a wake-up
 * posted by another thread's weft_notification_set() has not yet run:
 * let the loop poll (e.g. weft_sleep() briefly) and retry. No other thread
 * may still be about to set @p n when it is destroyed.
 */
int weft_notification_destroy(weft_notification_t *n);

/** @} */

/* Semaphore --------------------------------------------------------------- */
/** @defgroup sem Semaphore
 *  @{ */

/** A counting semaphore of fibers. Initialise with WEFT_SEM_INIT(n) or
 *  weft_sem_init(). */
typedef struct weft_sem {
    long count;
    weft_waitq_t q;
} weft_sem_t;
#define WEFT_SEM_INIT(n) { (n), WEFT_WAITQ_INIT }

/** initialise @p s with @p count (>= 0) permits. */
int weft_sem_init(weft_sem_t *s, long count);

/**
 * take one permit, waiting until @p deadline for one.
 * @return 0, -ETIMEDOUT, -ECANCELED, -EIDRM, -EPERM outside a fiber,
 * -EINVAL.
 */
int weft_sem_acquire(weft_sem_t *s, int64_t deadline);

/** take a permit if one is free and nobody waits.
 *  @return 0, -EAGAIN, -EINVAL. Never blocks; callable outside fibers. */
int weft_sem_try_acquire(weft_sem_t *s);

/** give one permit back: to the first waiter if any,
 *  else to the count. @return 0, -EOVERFLOW, -EINVAL. */
int weft_sem_release(weft_sem_t *s);

/** permits currently free (never negative). */
long weft_sem_value(const weft_sem_t *s);

/** wake every waiter with -EIDRM. @return 0, -EINVAL. */
int weft_sem_destroy(weft_sem_t *s);

/** @} */

/* Task limiter ------------------------------------------------------------ */
/** @defgroup limiter Task limiter
 *  @{ */

/**
 * Runs fibers with at most @p limit of them alive at once: spawning blocks
 * while @p limit spawned tasks are still running. The limiter must outlive
 * its tasks (weft_limiter_wait() then destroy).
 */
typedef struct weft_limiter {
    long limit;
    long running;
    weft_waitq_t q;      /**< spawners waiting for a slot                   */
    weft_waitq_t idle;   /**< fibers in weft_limiter_wait()                 */
} weft_limiter_t;
#define WEFT_LIMITER_INIT(n) { (n), 0, WEFT_WAITQ_INIT, WEFT_WAITQ_INIT }

/** initialise @p l for at most @p limit (>= 1) tasks. */
int weft_limiter_init(weft_limiter_t *l, long limit);

/**
 * spawn a detached fiber running @p fn(@p arg) once fewer
 * than the limit of @p l's tasks are running, waiting until @p deadline for a
 * slot (FIFO among spawners). @p fn's return value is discarded. @return 0,
 * -ETIMEDOUT, -ECANCELED (the task is not spawned), -EIDRM, any error of
 * weft_spawn(), -EPERM outside a fiber, -EINVAL.
 */
int weft_limiter_spawn(weft_limiter_t *l, weft_fn_t fn, void *arg,
                       int64_t deadline);

/** tasks of @p l currently running. */
long weft_limiter_running(const weft_limiter_t *l);

/**
 * wait until no task of @p l is running. @return 0,
 * -ETIMEDOUT, -ECANCELED, -EIDRM, -EPERM outside a fiber, -EINVAL.
 */
int weft_limiter_wait(weft_limiter_t *l, int64_t deadline);

/**
 * returns -EBUSY (nothing done) while tasks run,
 * since they still refer to @p l; otherwise wakes waiters with -EIDRM and
 * returns 0.
 */
int weft_limiter_destroy(weft_limiter_t *l);

/** @} */

/* Wait group -------------------------------------------------------------- */
/** @defgroup waitgroup Wait group
 *  @{ */

/** A wait group: fibers wait until its count drops to 0. Initialise with
 *  WEFT_WAITGROUP_INIT or weft_waitgroup_init(). */
typedef struct weft_waitgroup {
    long count;
    weft_waitq_t q;
} weft_waitgroup_t;
#define WEFT_WAITGROUP_INIT { 0, WEFT_WAITQ_INIT }

/** initialise @p wg with a count of 0. */
int weft_waitgroup_init(weft_waitgroup_t *wg);

/**
 * add @p n (may be negative) to the count; when it
 * reaches 0 every waiter wakes. @return 0, -EINVAL if the count would go
 * below 0 (nothing changes), -EOVERFLOW.
 */
int weft_waitgroup_add(weft_waitgroup_t *wg, long n);

/** the same as weft_waitgroup_add(@p wg, -1). */
int weft_waitgroup_done(weft_waitgroup_t *wg);

/**
 * wait until the count is 0. @return 0 (at once if
 * it is), -ETIMEDOUT, -ECANCELED, -EIDRM, -EPERM outside a fiber, -EINVAL.
 */
int weft_waitgroup_wait(weft_waitgroup_t *wg, int64_t deadline);

/** wake every waiter with -EIDRM. */
int weft_waitgroup_destroy(weft_waitgroup_t *wg);

/** @} */

/* Channels ---------------------------------------------------------------- */
/** @defgroup chan Channels
 *  @{ */

/**
 * A typed-by-size channel of fixed-size elements: unbuffered (capacity 0:
 * a send waits for a receiver, and the element is copied straight from the
 * sender to the receiver) or buffered. Senders and receivers are served in
 * FIFO order.
 */
typedef struct weft_chan weft_chan_t;

/**
 * a channel of @p elem_size-byte elements (0 allowed:
 * pure signals) holding up to @p capacity buffered elements. @return 0,
 * -EINVAL, -ENOMEM. Callable outside fibers.
 */
int weft_chan_create(weft_chan_t **out, size_t elem_size, size_t capacity);

/**
 * send the element at @p elem, waiting until @p deadline for
 * a receiver or buffer space. @return 0, -EPIPE if the channel is or gets
 * closed (the element was not sent), -ETIMEDOUT, -ECANCELED, -EIDRM,
 * -EPERM outside a fiber, -EINVAL. With a deadline of 0 it never blocks.
 */
int weft_chan_send(weft_chan_t *c, const void *elem, int64_t deadline);

/**
 * receive an element into @p elem (may be NULL to drop it).
 * @return 0, -EPIPE once the channel is closed and empty, -ETIMEDOUT,
 * -ECANCELED, -EIDRM, -EPERM outside a fiber, -EINVAL.
 */
int weft_chan_recv(weft_chan_t *c, void *elem, int64_t deadline);

/**
 * close @p c: buffered elements can still be received;
 * waiting senders and, once empty, receivers get -EPIPE. @return 0,
 * -EALREADY, -EINVAL. Never blocks.
 */
int weft_chan_close(weft_chan_t *c);

/** elements buffered now. */
size_t weft_chan_len(const weft_chan_t *c);

/**
 * wake every fiber waiting on @p c (also in a select)
 * with -EIDRM and free it; buffered elements are dropped. @return 0 or
 * -EINVAL.
 */
int weft_chan_destroy(weft_chan_t *c);

#define WEFT_CHAN_SEND 1
#define WEFT_CHAN_RECV 2

/** One operation of a select. */
typedef struct weft_chan_op {
    weft_chan_t *chan;
    int op;              /**< WEFT_CHAN_SEND or WEFT_CHAN_RECV             */
    void *elem;          /**< element to send / where to receive (or NULL) */
    int result;          /**< out: 0 or -EPIPE for the chosen operation    */
} weft_chan_op_t;

/**
 * perform exactly one of the @p n operations in @p ops,
 * waiting until @p deadline for one to become possible. When several are
 * possible at once the first in @p ops order is chosen.
 *
 * @return the index of the operation performed, with its result in
 * ops[i].result (0, or -EPIPE when it completed because its channel is
 * closed); or -ETIMEDOUT, -ECANCELED, -EIDRM (a channel was destroyed),
 * -ENOMEM, -EPERM outside a fiber, -EINVAL (bad @p ops, @p n == 0).
 */
int weft_chan_select(weft_chan_op_t *ops, size_t n, int64_t deadline);

/** @} */
/** @} */

/* ------------------------------------------------------------------------ */
/* Futures and promises                                                     */
/* ------------------------------------------------------------------------ */
/** @defgroup future Futures and promises
 * A promise is the write side, a future the read side of one result: a
 * value (void *) or an error (a negative errno).
 *
 * Memory: both are handles to one reference-counted shared state. The
 * promise handle holds one reference, every future handle one more; the
 * state is freed when the last is released. Each call below says whether
 * it consumes (takes over) a handle; the others borrow. Releasing a promise
 * that was never set settles its future with -EPIPE ("broken promise").
 * The value pointer is never dereferenced or freed by weft: what it points
 * to stays the caller's to manage.
 *
 * Threads: a state belongs to the scheduler of the thread that created it
 * (its loop). Settling (weft_promise_*set*, the done function of
 * weft_future_from_callback()), weft_future_is_set(), weft_future_try_get()
 * and the release calls are thread-safe. Everything else is called on the
 * owner loop's thread. Callbacks and awaiting fibers always run on the
 * owner loop: when a promise is set on that thread, callbacks run inline
 * before the set call returns; from another thread, the delivery is posted
 * to the owner loop (no allocation). Callbacks run outside any blocking
 * context: they must not block. A posted delivery holds a reference until
 * the owner loop runs it: a future nobody awaits with weft_future_get() may
 * still have one queued when the last fiber ends; keep the loop running
 * until weft_sched_stats() reports no posted callbacks before destroying
 * it, or those states leak.
 * @{
 */
/** The write side of one result (weft_promise_create()). */
typedef struct weft_promise weft_promise_t;
/** The read side of one result: a reference-counted handle. */
typedef struct weft_future weft_future_t;

/**
 * a pending promise on the calling thread's
 * scheduler (created if needed). @return 0, -EINVAL, -ENOMEM.
 */
int weft_promise_create(weft_promise_t **out);

/**
 * a new future handle for @p p's result (release it
 * with weft_future_release()). NULL only for a NULL @p p.
 */
weft_future_t *weft_promise_future(weft_promise_t *p);

/** settle with @p value. Thread-safe. @return 0,
 *  -EALREADY if already settled, -EINVAL. */
int weft_promise_set_value(weft_promise_t *p, void *value);

/** settle with error @p err (< 0). Thread-safe.
 *  @return 0, -EALREADY, -EINVAL. */
int weft_promise_set_error(weft_promise_t *p, int err);

/**
 * settle with @p value if @p err is 0, else with @p err,
 * unless already settled. Thread-safe. @return 1 if this call settled it,
 * 0 if it already was, -EINVAL.
 */
int weft_promise_try_set(weft_promise_t *p, int err, void *value);

/** 1 if settled, else 0. Thread-safe. */
int weft_promise_is_set(const weft_promise_t *p);

/** drop the promise handle (consumes @p p); if the
 *  promise was never set, its future fails with -EPIPE. Thread-safe. */
void weft_promise_release(weft_promise_t *p);

/**
 * an already settled future with @p value.
 * @return the future, NULL on allocation failure.
 */
weft_future_t *weft_future_ready(void *value);

/**
 * an already failed future with error @p err (< 0).
 * @return the future, NULL on allocation failure or bad @p err.
 */
weft_future_t *weft_future_failed(int err);

/** another handle to @p f's state (release it too). */
weft_future_t *weft_future_ref(weft_future_t *f);

/** drop the handle (consumes @p f). Thread-safe. */
void weft_future_release(weft_future_t *f);

/** 1 if settled, else 0. Thread-safe. */
int weft_future_is_set(const weft_future_t *f);

/**
 * the result if settled: returns 0 and stores the
 * value in *@p value (if non-NULL), or the error it failed with; -EAGAIN
 * while pending; -EINVAL. Never blocks. Thread-safe.
 */
int weft_future_try_get(const weft_future_t *f, void **value);

/**
 * await @p f from a fiber of its loop (WaitFor): wait until
 * it settles or @p deadline passes. @return 0 with the value in *@p value, the
 * error @p f failed with, or -ETIMEDOUT / -ECANCELED (@p f stays pending and
 * usable), -EPERM outside a fiber of @p f's loop, -EINVAL. To tell a failure
 * of @p f apart from a timeout, check weft_future_is_set(). When @p f was set
 * from another thread, it returns once the delivery has run on this loop
 * (callbacks included), so nothing of @p f is left queued.
 */
int weft_future_get(weft_future_t *f, void **value, int64_t deadline);

/** Callback of weft_future_subscribe(): @p err is 0 and @p value the value, or
 *  @p err is the error. */
typedef void (*weft_future_cb)(void *arg, int err, void *value);

/**
 * call @p cb(@p arg, err, value) once @p f settles, on
 * @p f's loop; inline before returning if it has already settled. Callbacks
 * run in subscription order. @return 0, -ENOMEM, -EPERM on another thread,
 * -EINVAL.
 */
int weft_future_subscribe(weft_future_t *f, weft_future_cb cb, void *arg);

/** A value transformation: return 0 and store the new value in *@p out, or
 *  return a negative errno to fail the resulting future. */
typedef int (*weft_then_fn)(void *arg, void *value, void **out);

/** A transformation that starts more work: return a future (ownership
 *  passes to weft) whose result becomes the chain's, or NULL to fail the
 *  chain with -ENOMEM. */
typedef weft_future_t *(*weft_then_future_fn)(void *arg, void *value);

/**
 * a future of @p fn applied to @p f's value. Consumes @p f (pass a
 * weft_future_ref() to keep using it). If @p f fails, @p fn is skipped and the
 * error propagates. @p fn runs on @p f's loop when @p f settles. @return NULL
 * only if allocation fails or @p fn is NULL (then @p f is released); call on
 * @p f's loop thread.
 */
weft_future_t *weft_then(weft_future_t *f, weft_then_fn fn, void *arg);

/**
 * like weft_then(), for an @p fn that returns a future:
 * the resulting future settles with that future's result (flattened).
 */
weft_future_t *weft_then_future(weft_future_t *f, weft_then_future_fn fn,
                                void *arg);

/**
 * a future that settles like the first of the @p n
 * futures in @p fs to settle, value or error (the others are ignored).
 * Borrows @p fs (the caller still releases them). @p n == 0 gives a future
 * failed with -EINVAL. NULL on allocation failure. All on the caller's loop.
 */
weft_future_t *weft_future_any(weft_future_t *const *fs, size_t n);

/**
 * a barrier: settles once every one of the @p n futures in
 * @p fs has settled — with value NULL if all succeeded, else with the error
 * of the first to fail (in time). Read the individual results with
 * weft_future_try_get(). Borrows @p fs. NULL on allocation failure.
 */
weft_future_t *weft_future_all(weft_future_t *const *fs, size_t n);

/** Completion function handed to a callback-style API: settle with @p err
 *  (< 0) or, for @p err 0, @p value. Call it exactly once, from any thread. */
typedef void (*weft_done_fn)(void *done_arg, int err, void *value);

/**
 * adapt a callback API to a future: calls
 * @p start(@p arg, done, done_arg) at once; the API later calls
 * done(done_arg, err, value) exactly once, from any thread, which settles
 * the returned future. If @p start returns a negative errno, it must not
 * call done, and the future fails with that error. NULL on allocation
 * failure.
 */
weft_future_t *weft_future_from_callback(
    int (*start)(void *arg, weft_done_fn done, void *done_arg), void *arg);

/** @} */

/* ------------------------------------------------------------------------ */
/* Offload pool, DNS, process wait                                          */
/* ------------------------------------------------------------------------ */
/** @defgroup offload Offload pool, DNS, process wait
 *  @{ */

/**
 * run @p fn(@p arg) on a worker thread of the process-wide
 * offload pool while the calling fiber waits until @p deadline; other
 * fibers keep running.
 *
 * @param cleanup if non-NULL, called as @p cleanup(@p arg, r) with @p fn's result r
 *   when the caller stopped waiting (timeout, cancellation) before @p fn
 *   finished: @p fn still runs to completion, its result is discarded
 *   safely, and @p cleanup then releases whatever it holds — on the worker
 *   thread or on the caller's loop. @p arg must stay valid until then.
 * @param result if non-NULL, receives @p fn's result on success.
 *
 * The pool starts lazily with 4 threads (see weft_offload_start()).
 * @return 0, -ETIMEDOUT, -ECANCELED, -ENOMEM, -EAGAIN (no thread could be
 * started; or a deadline of 0: a job cannot finish without a wait, so
 * nothing is run), -EPERM outside a fiber, -EINVAL.
 */
int weft_offload(void *(*fn)(void *arg), void *arg,
                 void (*cleanup)(void *arg, void *result), void **result,
                 int64_t deadline);

/**
 * start the pool with @p nthreads workers (1..256) if it
 * is not running. Thread-safe. @return 0, -EALREADY if already running,
 * -EINVAL, -EAGAIN.
 */
int weft_offload_start(unsigned nthreads);

/**
 * let the workers finish every queued job, then
 * join them. Blocks the calling thread; call it outside fibers, when no
 * fiber is waiting in weft_offload(). A later weft_offload() starts the
 * pool again. Thread-safe.
 */
void weft_offload_shutdown(void);

/**
 * getaddrinfo(3) that blocks only the calling fiber:
 * the lookup runs in the offload pool (glibc's resolver and NSS, exactly
 * as the process would resolve the name). Names in the reserved ".invalid"
 * domain fail at once (RFC 6761). A numeric @p node ("192.0.2.1", "::1",
 * "fe80::1%eth0") or none, with a numeric @p service (a port number) or
 * none, consults no resolver: it is parsed on the calling fiber and never
 * waits, so it is answered also with a deadline of 0 and while the pool
 * is busy (unless AI_CANONNAME is asked for).
 *
 * On success returns 0 and *@p res, to be freed with freeaddrinfo(3). If the
 * caller stops waiting, the lookup finishes in the background and its
 * result is freed. Errors: -ENOENT (EAI_NONAME: no such name or service),
 * -ENODATA (EAI_NODATA), -EAGAIN (EAI_AGAIN: temporary failure),
 * -EIO (EAI_FAIL), -EAFNOSUPPORT (EAI_FAMILY), -ESOCKTNOSUPPORT
 * (EAI_SOCKTYPE), -EINVAL (EAI_BADFLAGS, or both @p node and @p service NULL),
 * -ENOMEM, the errno of EAI_SYSTEM, -ETIMEDOUT, -ECANCELED, -EPERM outside
 * a fiber.
 */
struct addrinfo;
int weft_getaddrinfo(const char *node, const char *service,
                     const struct addrinfo *hints, struct addrinfo **res,
                     int64_t deadline);

/**
 * wait until child process @p pid terminates, and reap it.
 *
 * Waits on a pidfd (pidfd_open, Linux >= 5.3) with the loop's descriptor
 * wait; where pidfd_open is unavailable, polls waitpid(WNOHANG) with a
 * backoff of 1 ms doubling to 50 ms. Setting the environment variable
 * WEFT_PROC_NO_PIDFD forces the polling fallback. No signal handler is
 * installed. Process groups (@p pid <= 0) are refused.
 *
 * @param wstatus if non-NULL, receives the status as waitpid(2) does: use
 *   WIFEXITED/WEXITSTATUS for the exit code, WIFSIGNALED/WTERMSIG for the
 *   signal that killed it.
 *
 * @return 0; -EINVAL for @p pid <= 0 or a bad deadline; -ECHILD when @p pid
 * is not an unwaited child of this process; -ETIMEDOUT (the child is left
 * unreaped: wait again later); -ECANCELED; -EPERM outside a fiber.
 */
int weft_proc_wait(pid_t pid, int *wstatus, int64_t deadline);

/** @} */

/* ------------------------------------------------------------------------ */
/* Timeout scopes                                                           */
/* ------------------------------------------------------------------------ */
/** @defgroup scope Timeout scopes
 * A timeout scope bounds every blocking call a fiber makes while inside it
 * by the scope's deadline, as if each call had been given
 * min(its deadline, scope deadline). Once the scope's deadline has passed,
 * every blocking call in it (including weft_yield() and calls that could
 * have completed at once) returns -ETIMEDOUT, and a call that is waiting
 * when it passes wakes with -ETIMEDOUT; weft_sleep*() returns -ETIMEDOUT
 * rather than 0 when cut short by the scope. Scopes nest: an inner scope
 * can shorten but never extend the outer one. A scope belongs to its fiber:
 * fibers spawned inside do not inherit it.
 * @{
 */

/**
 * run @p fn(@p arg) in the calling fiber under a scope with
 * @p deadline, and return what @p fn returns. WEFT_FOREVER adds no bound.
 * @return -EPERM outside a fiber, -EINVAL for a NULL @p fn or a bad
 * deadline (without calling @p fn).
 */
int weft_scope_run(int64_t deadline, int (*fn)(void *arg), void *arg);

/**
 * enter a timeout scope with @p deadline: weft_scope_run() split into a
 * pair, for code that cannot be a callback. Stores the previous scope in
 * *@p saved, for weft_scope_leave(); pairs nest, innermost left first.
 * @return 0, -EPERM outside a fiber, -EINVAL.
 */
int weft_scope_enter(int64_t deadline, int64_t *saved);

/**
 * leave the scope that the matching weft_scope_enter() entered, given the
 * value it stored in its *saved; innermost scope first.
 * @return 0, -EPERM outside a fiber, -EINVAL.
 */
int weft_scope_leave(int64_t saved);

/**
 * the calling fiber's effective scope deadline, or
 * WEFT_FOREVER when it is in no scope (or not a fiber).
 */
int64_t weft_scope_deadline(void);

/** @} */

/* ------------------------------------------------------------------------ */
/* Resource pool                                                            */
/* ------------------------------------------------------------------------ */
/** @defgroup pool Resource pool
 * A bounded pool of reusable resources (database connections, upstream
 * sockets): at most max_size exist at any moment — idle, handed out, or
 * being created — however many fibers ask. Resources are made on demand by
 * a create callback and ended by a destroy callback that runs exactly once
 * per resource that create returned.
 *
 * @code{.unparsed}
 *   Waiting    A fiber that finds no idle resource and no room to create
 *              one queues FIFO. A resource released healthy goes straight
 *              to the first waiter (a late arrival cannot overtake it);
 *              when a resource is destroyed (broken, recycled, expired),
 *              the first waiter is given its place and creates a new one.
 *   Memory     weft_pool_create() allocates; weft_pool_destroy() frees.
 *              Leases (weft_pool_lease_t) are the caller's memory.
 *   Thread     A pool belongs to the scheduler thread whose fibers use it.
 *   Callbacks  create, destroy and validate run in the fiber that caused
 *              them (an acquirer, a releaser, the closer, or the pool's
 *              idle reaper fiber) and may block; weft_pool_destroy() runs
 *              destroy outside fibers when idle resources remain, where a
 *              blocking call returns -EPERM, so close first if destroy
 *              must do I/O.
 *   Idle       With idle_timeout set, a resource idle that long is destroyed
 *              in the background by a fiber of the pool, which exists only
 *              while idle resources do (it keeps weft_sched_run() going
 *              until they expire or the pool is closed).
 * @endcode
 * @{
 */
/** A bounded pool of resources (weft_pool_create()). */
typedef struct weft_pool weft_pool_t;

/** Resource callbacks of a pool. @p ctx is the pool's context pointer. */
typedef struct weft_pool_ops {
    /** Make a resource: store it in *@p res and return 0, or return a
     * negative errno, which weft_pool_acquire() passes back unchanged.
     * @p deadline is the acquirer's deadline (give it to blocking calls). */
    int (*create)(void *ctx, void **res, int64_t deadline);
    /** End a resource. Called exactly once per resource create returned. */
    void (*destroy)(void *ctx, void *res);
    /** Optional: check an idle resource before it is handed out; return 0
     * if usable, else a negative errno: it is then destroyed and another
     * one taken or created. NULL: idle resources are trusted. */
    int (*validate)(void *ctx, void *res);
} weft_pool_ops_t;

/** Options for weft_pool_create(); zero-initialise, then set fields. */
typedef struct weft_pool_opts {
    size_t max_size;       /**< most resources alive at once (>= 1)         */
    int64_t idle_timeout;  /**< ns a resource may stay idle before it is
                              destroyed in the background; 0 = forever     */
    uint64_t max_uses;     /**< destroy a resource after this many
                              acquires (recycling); 0 = no limit           */
    int64_t use_timeout;   /**< ns each use may take: the lease's deadline
                              (the read timeout of a use); 0 = none        */
} weft_pool_opts_t;

/** A resource handed out by weft_pool_acquire(). The caller's memory;
 *  valid from acquire to release. */
typedef struct weft_pool_lease {
    void *res;             /**< the resource                                */
    int64_t deadline;      /**< the end of this use: acquire time plus
                              use_timeout, or WEFT_FOREVER. Pass it (or an
                              earlier one) to every blocking call made on
                              the resource.                                */
    uint64_t uses;         /**< 1 on the resource's first use, then 2, ...  */
    void *slot_;           /**< internal                                    */
} weft_pool_lease_t;

/** Pool counters (weft_pool_stats()). */
typedef struct weft_pool_stats {
    size_t size;           /**< resources alive or being created (<= max)   */
    size_t idle;           /**< idle resources                              */
    size_t in_use;         /**< resources handed out                        */
    size_t creating;       /**< create calls in progress                    */
    size_t waiters;        /**< fibers waiting in weft_pool_acquire()       */
    size_t peak_size;      /**< largest size so far                         */
    uint64_t created;      /**< create calls that succeeded                 */
    uint64_t destroyed;    /**< destroy calls                               */
    uint64_t create_failed;/**< create calls that failed                    */
    uint64_t acquired;     /**< successful acquires                         */
    uint64_t timeouts;     /**< acquires that ended with -ETIMEDOUT         */
    uint64_t broken;       /**< resources released as broken                */
    uint64_t recycled;     /**< resources destroyed after max_uses uses     */
    uint64_t expired;      /**< idle resources destroyed after idle_timeout */
    uint64_t invalid;      /**< idle resources that failed validation       */
} weft_pool_stats_t;

/**
 * a pool of at most @p opts->max_size resources made by
 * @p ops->create and ended by @p ops->destroy, both given @p ctx.
 *
 * No resource is created until the first acquire. Callable outside fibers.
 * @return 0 and the pool in *@p out, -EINVAL (NULL argument, missing create
 * or destroy callback, max_size 0, a negative timeout), -ENOMEM.
 */
int weft_pool_create(weft_pool_t **out, const weft_pool_ops_t *ops,
                     void *ctx, const weft_pool_opts_t *opts);

/**
 * get a resource for exclusive use until
 * weft_pool_release().
 *
 * Takes the most recently released idle resource (checked with validate,
 * if set), else creates one if fewer than max_size exist, else waits in
 * FIFO order until @p deadline for a resource to be released or for room to
 * create one. @p deadline also bounds the create callback. Fills @p lease:
 * the resource, its per-use deadline and use count.
 *
 * @return 0; -ETIMEDOUT when @p deadline passed while waiting; the negative
 * errno the create callback returned (nothing is retried: the caller
 * decides); -ESHUTDOWN when the pool is or gets closed; -ECANCELED;
 * -EPERM outside a fiber; -EINVAL. Blocks (switches fibers) only when it
 * waits, or when create or validate does.
 */
int weft_pool_acquire(weft_pool_t *p, weft_pool_lease_t *lease,
                      int64_t deadline);

/** Flags of weft_pool_release(). */
#define WEFT_POOL_BROKEN 1 /* the resource is unusable: destroy it */

/**
 * give back the resource of @p lease.
 *
 * @param flags 0 for a healthy resource, WEFT_POOL_BROKEN for one that must
 * not be used again (a lost connection, a use that timed out midway).
 * A healthy resource goes to the first waiter, else becomes idle, unless
 * it has had max_uses uses or the pool is closed: then, like a broken one,
 * it is destroyed here (the destroy callback runs in the calling fiber and
 * may block) and the first waiter, if any, is let create a replacement.
 * Never waits otherwise. The lease is cleared.
 *
 * @return 0, -EINVAL (NULL, a lease not acquired from @p p, unknown flags).
 */
int weft_pool_release(weft_pool_t *p, weft_pool_lease_t *lease, int flags);

/**
 * acquire (until @p deadline), run @p fn(@p arg, lease) inside
 * a timeout scope ending at the lease's deadline (see weft_scope_run(), so
 * every blocking call of the use is bounded by use_timeout), and release.
 *
 * The resource is released as broken if @p fn sets lease->res to NULL or
 * returns -ETIMEDOUT after the lease's deadline passed (a use cut short
 * leaves the resource in an unknown state), else as healthy. @return the
 * acquire error, or what @p fn returned.
 */
int weft_pool_with(weft_pool_t *p, int (*fn)(void *arg,
                   weft_pool_lease_t *lease), void *arg, int64_t deadline);

/**
 * stop the pool: later acquires fail with -ESHUTDOWN,
 * fibers waiting in acquire wake with -ESHUTDOWN, idle resources are
 * destroyed (here), the idle reaper ends, and then the call waits until
 * @p deadline for every resource in use (or being created) to come back;
 * each is destroyed on release.
 *
 * @return 0 once nothing is in use; -ETIMEDOUT if resources are still out
 * at @p deadline (the pool stays closed; call again to keep waiting);
 * -ECANCELED; -EPERM outside a fiber; -EINVAL. Closing again is allowed.
 */
int weft_pool_close(weft_pool_t *p, int64_t deadline);

/**
 * free @p p. Idle resources left (a pool never closed)
 * are destroyed here. @return 0, -EINVAL, or -EBUSY (nothing done) while
 * resources are in use or being created, fibers wait in acquire or close,
 * or the idle reaper runs (close the pool first). Callable outside fibers.
 */
int weft_pool_destroy(weft_pool_t *p);

/** fill @p st with @p p's counters. @return 0 or -EINVAL. */
int weft_pool_stats(const weft_pool_t *p, weft_pool_stats_t *st);

/** @} */

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
