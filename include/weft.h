/*
 * weft.h — fiber scheduler: sequential-looking blocking I/O on thousands of
 * cooperative fibers over one event loop per thread.
 *
 * Conventions used by every function in this header:
 *
 *   Errors     Functions that can fail return a negative errno value
 *              (-EINVAL, -ETIMEDOUT, -ECANCELED, ...). They never set errno.
 *              Functions returning a byte count return it as a non-negative
 *              ssize_t on success.
 *
 *   Deadlines  Every call that may block takes an absolute deadline in
 *              nanoseconds of the monotonic clock (see weft_now()).
 *              WEFT_FOREVER (-1) means no deadline; any deadline <= now
 *              (for instance 0) means "do not wait": the call makes its
 *              non-blocking attempt and returns -ETIMEDOUT if it would have to
 *              wait. Values below -1 are rejected with -EINVAL.
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
 *              -ECANCELED.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
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

/** No deadline: wait as long as it takes. */
#define WEFT_FOREVER ((int64_t)-1)

/**
 * weft_now — current time of the monotonic clock in nanoseconds.
 *
 * The origin is unspecified (boot time on Linux); only differences and
 * comparisons with deadlines are meaningful. Never fails.
 */
int64_t weft_now(void);

/**
 * weft_deadline_in — absolute deadline @ns nanoseconds from now.
 *
 * Returns WEFT_FOREVER when @ns is negative, and saturates instead of
 * overflowing for huge values, so weft_deadline_in(INT64_MAX) is a deadline
 * that never comes.
 */
int64_t weft_deadline_in(int64_t ns);

/* ------------------------------------------------------------------------ */
/* Schedulers                                                               */
/* ------------------------------------------------------------------------ */

typedef struct weft_sched weft_sched_t;

/** Which event-notification backend a scheduler uses. */
typedef enum weft_backend {
    WEFT_BACKEND_DEFAULT = 0, /* WEFT_BACKEND env var, else the best one  */
    WEFT_BACKEND_EPOLL = 1,
    WEFT_BACKEND_POLL = 2,
    WEFT_BACKEND_IO_URING = 3 /* reserved: not built into this version    */
} weft_backend_t;

/** Options for weft_sched_create(); zero-initialise, then set fields. */
typedef struct weft_sched_opts {
    weft_backend_t backend;    /* WEFT_BACKEND_DEFAULT: see weft_sched_create */
    size_t stack_size;         /* default fiber stack size; 0 = 64 KiB        */
    size_t stack_cache;        /* free stacks kept for reuse; 0 = 1024        */
    int no_overflow_handler;   /* 1: do not install the stack-overflow
                                  reporter (SIGSEGV on an alternate stack)  */
} weft_sched_opts_t;

/**
 * weft_sched_create — create the calling thread's scheduler.
 *
 * @out:  receives the scheduler.
 * @opts: options, or NULL for defaults.
 *
 * The backend is @opts->backend, or, when that is WEFT_BACKEND_DEFAULT, the
 * one named by the environment variable WEFT_BACKEND ("epoll" or "poll"),
 * else epoll. Unless disabled, and only when the process's SIGSEGV
 * disposition is still the default, a handler is installed that reports a
 * fiber stack overflow with a clear message before the process dies with
 * SIGSEGV as it would have anyway.
 *
 * Returns 0, -EEXIST if this thread already has a scheduler, -EINVAL for bad
 * options or an unknown WEFT_BACKEND value, -ENOMEM, or the error of the
 * backend's setup.
 */
int weft_sched_create(weft_sched_t **out, const weft_sched_opts_t *opts);

/**
 * weft_sched_self — the calling thread's scheduler, created with default
 * options on first use. Returns NULL only if creation failed.
 */
weft_sched_t *weft_sched_self(void);

/**
 * weft_sched_run — run fibers until none remain.
 *
 * Dispatches runnable fibers and waits for I/O, timers and cross-thread
 * posts. Must be called on the scheduler's thread, outside any fiber.
 * Returns 0 when the last fiber has finished, -EINVAL for NULL, -EPERM from
 * a fiber or another thread, -EBUSY if the scheduler is already running.
 */
int weft_sched_run(weft_sched_t *s);

/**
 * weft_sched_destroy — free a scheduler and everything it owns.
 *
 * Fails with -EBUSY while fibers are alive or the scheduler is running, and
 * with -EPERM from another thread. Callbacks posted but never run are
 * dropped. Unjoined handles of finished fibers are released.
 */
int weft_sched_destroy(weft_sched_t *s);

/**
 * weft_sched_backend — name of the scheduler's backend ("epoll", "poll").
 */
const char *weft_sched_backend(const weft_sched_t *s);

/**
 * weft_sched_post — run @fn(@arg) on @s's thread, from any thread.
 *
 * Thread-safe. The callback runs on the scheduler's own stack (not inside a
 * fiber) during its next loop iteration; it may spawn fibers and unpark
 * them but must not block. A sleeping loop is woken at once (eventfd).
 * Returns 0, -EINVAL for NULL arguments, -ENOMEM.
 */
int weft_sched_post(weft_sched_t *s, void (*fn)(void *arg), void *arg);

/** Counters used by tests and tools to check that nothing is left behind. */
typedef struct weft_stats {
    size_t fibers;        /* fibers alive (not finished)                     */
    size_t handles;       /* handles not yet joined or detached              */
    size_t timers;        /* armed timers                                    */
    size_t waits;         /* blocked waits of any kind                       */
    size_t fd_waits;      /* waits on file descriptors                       */
    size_t posted;        /* cross-thread callbacks not yet run              */
    size_t stacks_cached; /* free stacks kept for reuse                      */
    size_t stacks_unguarded; /* stacks created without a guard page          */
    uint64_t switches;    /* context switches so far                         */
    uint64_t spawned;     /* fibers spawned so far                           */
} weft_stats_t;

/**
 * weft_sched_stats — fill @st with @s's counters. Returns 0 or -EINVAL.
 */
int weft_sched_stats(const weft_sched_t *s, weft_stats_t *st);

/* ------------------------------------------------------------------------ */
/* Fibers                                                                   */
/* ------------------------------------------------------------------------ */

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
    size_t stack_size; /* usable stack bytes; 0 = scheduler default.
                          Rounded up to pages; 16 KiB .. 1 GiB.            */
} weft_spawn_opts_t;

/**
 * weft_spawn — start a fiber running @fn(@arg) on this thread's scheduler.
 *
 * The fiber is queued to run; the caller continues. The stack is mmap'd,
 * committed lazily and ends in a guard page.
 *
 * @out: if non-NULL, receives a handle the caller must later pass to
 *       weft_join() or weft_detach(). If NULL, the fiber is detached: it is
 *       freed as soon as it returns.
 *
 * Callable from a fiber or from the thread outside fibers (before or
 * between weft_sched_run() calls). Returns 0, -EINVAL (NULL @fn, bad stack
 * size), -ENOMEM, or -EPERM when called from a thread that does not own
 * the scheduler.
 */
int weft_spawn(weft_fn_t fn, void *arg, const weft_spawn_opts_t *opts,
               weft_fiber_t *out);

/**
 * weft_self — handle of the calling fiber; the zero handle outside fibers.
 */
weft_fiber_t weft_self(void);

/**
 * weft_in_fiber — 1 if the caller runs in a weft fiber, else 0.
 */
int weft_in_fiber(void);

/**
 * weft_yield — let every other runnable fiber run once, then continue.
 *
 * Also gives the event loop a chance to poll for I/O and timers when fibers
 * keep each other busy. Returns 0, -ECANCELED if the fiber was cancelled,
 * -EPERM outside a fiber.
 */
int weft_yield(void);

/**
 * weft_sleep_until — block the fiber until @deadline.
 *
 * Returns 0 once the deadline has passed (at once for a past deadline),
 * -ECANCELED, -EINVAL for a deadline below -1, -EPERM outside a fiber.
 * With WEFT_FOREVER it sleeps until cancelled.
 */
int weft_sleep_until(int64_t deadline);

/**
 * weft_sleep — block the fiber for @ns nanoseconds (>= 0).
 * Same returns as weft_sleep_until(); -EINVAL for a negative @ns.
 */
int weft_sleep(int64_t ns);

/**
 * weft_join — wait for fiber @f to finish and collect its result.
 *
 * @result: if non-NULL, receives the value the fiber's function returned.
 *
 * On success the handle is consumed. Returns 0; -ETIMEDOUT when @deadline
 * passes first (the handle stays valid); -ECANCELED; -EDEADLK when @f is
 * the caller; -ESRCH for a handle that is unknown, already joined or
 * detached; -EINVAL if another fiber is already joining @f; -EPERM outside
 * a fiber.
 */
int weft_join(weft_fiber_t f, void **result, int64_t deadline);

/**
 * weft_detach — give up the handle: the fiber is freed when it finishes
 * (at once if it already has). Returns 0 or -ESRCH for a stale handle.
 */
int weft_detach(weft_fiber_t f);

/**
 * weft_cancel — cancel fiber @f.
 *
 * The blocking call @f is in returns -ECANCELED as soon as @f runs again,
 * and so does every later blocking call it makes; it is up to @f to return.
 * Cancelling a finished (not yet joined) fiber does nothing. A fiber may
 * cancel itself. Returns 0 or -ESRCH for a stale handle.
 */
int weft_cancel(weft_fiber_t f);

/**
 * weft_cancelled — 1 if the calling fiber has been cancelled, else 0.
 */
int weft_cancelled(void);

/**
 * weft_park — block the calling fiber until weft_unpark(), a deadline, or
 * cancellation.
 *
 * A permit model: weft_unpark() on a fiber that is not parked leaves a
 * permit that makes its next weft_park() return 0 at once. Callers must
 * re-check the condition they wait for (wake-ups may come from earlier
 * unparks). Returns 0 when unparked, -ETIMEDOUT, -ECANCELED, -EPERM outside
 * a fiber, -EINVAL for a bad deadline.
 */
int weft_park(int64_t deadline);

/**
 * weft_unpark — wake fiber @f from weft_park(), or give it a permit.
 *
 * @s: the scheduler that owns @f, or NULL for the calling thread's.
 *
 * Thread-safe: from another thread (with @s given) the wake-up is posted
 * to the owner's loop, which is woken at once. Returns 0, -ESRCH for a
 * stale handle (checked on the owner's thread when posted: a finished fiber
 * is ignored), -ENOMEM.
 */
int weft_unpark(weft_sched_t *s, weft_fiber_t f);

/**
 * weft_run — run @fn(@arg) as a fiber on this thread's scheduler, together
 * with whatever else is or becomes runnable, until no fibers remain.
 *
 * @result: if non-NULL, receives @fn's return value.
 * Returns 0 or any error of weft_spawn()/weft_sched_run().
 */
int weft_run(weft_fn_t fn, void *arg, void **result);

/* Fiber-local storage ---------------------------------------------------- */

typedef unsigned weft_fls_key_t;

/** Maximum number of fiber-local keys a process may create. */
#define WEFT_FLS_MAX 64

/**
 * weft_fls_key_create — create a fiber-local storage key.
 *
 * @destructor: if non-NULL, called with the value when a fiber that set a
 * non-NULL value for the key finishes (on that fiber, before join returns).
 * Thread-safe. Returns 0, -EINVAL for NULL @key, -EAGAIN when
 * WEFT_FLS_MAX keys exist.
 */
int weft_fls_key_create(weft_fls_key_t *key, void (*destructor)(void *));

/**
 * weft_fls_set — set the calling fiber's value for @key.
 * Returns 0, -EINVAL for an unknown key, -EPERM outside a fiber, -ENOMEM.
 */
int weft_fls_set(weft_fls_key_t key, void *value);

/**
 * weft_fls_get — the calling fiber's value for @key; NULL if unset, for an
 * unknown key or outside a fiber.
 */
void *weft_fls_get(weft_fls_key_t key);

/* ------------------------------------------------------------------------ */
/* Fiber-blocking I/O                                                       */
/* ------------------------------------------------------------------------ */

/* Readiness events; the same bits as poll(2)'s POLLIN/POLLPRI/POLLOUT/... */
#define WEFT_READABLE 0x001
#define WEFT_PRIORITY 0x002
#define WEFT_WRITABLE 0x004
#define WEFT_ERROR    0x008 /* reported only */
#define WEFT_HANGUP   0x010 /* reported only */

/*
 * The file descriptors given to these calls are used in non-blocking mode:
 * sockets through MSG_DONTWAIT, other descriptors get O_NONBLOCK set the
 * first time weft sees them. Close descriptors weft has waited on with
 * weft_close() (or call weft_fd_forget() before closing them yourself), so
 * that waiters are woken and the number can be reused safely.
 *
 * Each call first tries the system call and waits only when it would
 * block. EINTR is retried. Writes never raise SIGPIPE: they return -EPIPE.
 */

/**
 * weft_wait_fd — wait until @fd is ready for @events.
 *
 * @events: a non-empty mask of WEFT_READABLE, WEFT_PRIORITY, WEFT_WRITABLE.
 *
 * Returns the ready events (a positive mask, which may include WEFT_ERROR
 * and WEFT_HANGUP) — at once if @fd is ready now — or -ETIMEDOUT,
 * -ECANCELED, -EBADF (bad @fd, or @fd closed with weft_close() while
 * waiting), -EINVAL, -EPERM outside a fiber.
 */
int weft_wait_fd(int fd, int events, int64_t deadline);

/**
 * weft_read — read up to @len bytes from @fd into @buf, like read(2).
 *
 * Returns the number of bytes read (short reads happen; 0 is end of file),
 * or -ETIMEDOUT, -ECANCELED, -EBADF, -ECONNRESET, any other read(2) error,
 * -EINVAL for a NULL buffer with non-zero length. @len 0 returns 0 at once.
 */
ssize_t weft_read(int fd, void *buf, size_t len, int64_t deadline);

/**
 * weft_write — write up to @len bytes, like write(2): returns as soon as
 * some bytes are committed, so the count may be short. Returns the count,
 * or -EPIPE, -ETIMEDOUT, -ECANCELED, -EBADF, other write(2) errors.
 * See weft_write_all() for writing everything.
 */
ssize_t weft_write(int fd, const void *buf, size_t len, int64_t deadline);

/**
 * weft_write_all — write all @len bytes, waiting as often as needed.
 *
 * @written: if non-NULL, receives the number of bytes committed, also on
 * failure, so that a caller can resume without losing or resending data.
 * Returns 0 when everything was written, else a negative errno.
 */
int weft_write_all(int fd, const void *buf, size_t len, size_t *written,
                   int64_t deadline);

/**
 * weft_read_full — read exactly @len bytes unless end of file comes first.
 *
 * @got: if non-NULL, receives the number of bytes read, also on failure.
 * Returns 0 when @len bytes were read, 1 if end of file came first (then
 * *@got < @len), or a negative errno as weft_read().
 */
int weft_read_full(int fd, void *buf, size_t len, size_t *got,
                   int64_t deadline);

/** weft_readv — scatter read, like readv(2); returns as weft_read(). */
ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt,
                   int64_t deadline);

/** weft_writev — gather write, like writev(2); returns as weft_write(). */
ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt,
                    int64_t deadline);

/**
 * weft_recv — receive from socket @fd, like recv(2) with @flags
 * (MSG_DONTWAIT is added). Returns as weft_read(); -ENOTSOCK for a
 * descriptor that is not a socket.
 */
ssize_t weft_recv(int fd, void *buf, size_t len, int flags, int64_t deadline);

/**
 * weft_send — send on socket @fd, like send(2) with @flags (MSG_DONTWAIT
 * and MSG_NOSIGNAL are added). Returns as weft_write(); -ENOTSOCK for a
 * descriptor that is not a socket.
 */
ssize_t weft_send(int fd, const void *buf, size_t len, int flags,
                  int64_t deadline);

/**
 * weft_accept — accept a connection on listening socket @fd.
 *
 * @addr, @addrlen: as accept(2); may be NULL.
 * Returns the new descriptor (non-blocking, close-on-exec), or -ETIMEDOUT,
 * -ECANCELED, -EBADF, -EMFILE/-ENFILE when out of descriptors (the pending
 * connection stays queued; back off before retrying), other accept(2)
 * errors. Aborted connections (ECONNABORTED) are skipped.
 */
int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen,
                int64_t deadline);

/**
 * weft_connect — connect socket @fd to @addr, waiting for the handshake.
 * Returns 0, -ECONNREFUSED, -ETIMEDOUT (the socket is then unusable: close
 * it), -ECANCELED, other connect(2) errors, -EINVAL for NULL @addr.
 */
int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
                 int64_t deadline);

/**
 * weft_shutdown — shutdown(2) on @fd; never blocks. Returns 0 or -errno.
 */
int weft_shutdown(int fd, int how);

/**
 * weft_close — close @fd, first waking every fiber waiting on it with
 * -EBADF and dropping its registration, so a reused descriptor number never
 * receives the old waits' events. Never blocks. Returns 0 or -errno
 * (-EBADF for a descriptor that is not open).
 */
int weft_close(int fd);

/**
 * weft_fd_forget — drop weft's state for @fd (waking its waiters with
 * -EBADF) without closing it; call it before closing a descriptor by other
 * means. Returns 0, -EBADF for a negative @fd.
 */
int weft_fd_forget(int fd);

/**
 * weft_socket — socket(2) with SOCK_NONBLOCK | SOCK_CLOEXEC added.
 * Returns the descriptor or -errno.
 */
int weft_socket(int domain, int type, int protocol);

/**
 * weft_pipe — pipe2(2) with O_NONBLOCK | O_CLOEXEC. Returns 0 or -errno.
 */
int weft_pipe(int fds[2]);

/**
 * weft_tcp_listen — a listening TCP socket on numeric address @host
 * ("127.0.0.1", "::1"; NULL or "" = all IPv4 addresses) and @port (0 picks
 * a free port; see weft_local_port()), with SO_REUSEADDR and, if @reuseport,
 * SO_REUSEPORT. @backlog <= 0 means SOMAXCONN. Returns the descriptor or
 * -errno (-EINVAL for a bad address or port).
 */
int weft_tcp_listen(const char *host, int port, int backlog, int reuseport);

/**
 * weft_tcp_connect — connect to numeric @host and @port with TCP_NODELAY
 * set. Returns the connected descriptor or -errno (as weft_connect()).
 */
int weft_tcp_connect(const char *host, int port, int64_t deadline);

/**
 * weft_local_port — the local port @fd is bound to, or -errno.
 */
int weft_local_port(int fd);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
