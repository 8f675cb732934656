/*
 * reactor.h — the reactor layer's contracts (not installed): timers,
 * waits, the descriptor table, cross-thread posts, the backends (epoll,
 * poll, io_uring) and what they offer their clients. Below the fiber
 * layer (internal.h, which includes this): nothing declared here knows
 * about stacks or fibers, so the reactor, its timers, backends and the
 * worker pool (workers.h) build and link on their own — the Ruby
 * extension links only them, and scripts/test.d/layers.sh checks it.
 */
#ifndef WEFT_REACTOR_H
#define WEFT_REACTOR_H

#include "weft.h"
#include "fault.h"
#include "timer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Intrusive doubly linked lists                                       */
/* ------------------------------------------------------------------ */
/* A weft__node lives inside the thing listed (often in a fiber's stack
 * frame); a weft__list is a head and a tail. Nothing allocates. Used for
 * the waits on a descriptor, wait queues, channel queues, the connection
 * pool's idle list and the Ruby extension's wait and ready lists. */
typedef struct weft__node {
    struct weft__node *next, *prev;
} weft__node;

typedef struct weft__list {
    weft__node *head, *tail;
} weft__list;

/* The structure of type @type whose member @member is at @ptr. */
#define weft__container(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline bool weft__list_empty(const weft__list *l)
{
    return l->head == NULL;
}

/* Put @n (not in any list) after @prev, or at the head when @prev is NULL. */
static inline void weft__list_insert_after(weft__list *l, weft__node *prev,
                                           weft__node *n)
{
    weft__node *next = prev ? prev->next : l->head;
    n->prev = prev;
    n->next = next;
    *(prev ? &prev->next : &l->head) = n;
    *(next ? &next->prev : &l->tail) = n;
}

/* Append @n (not in any list) at the tail. */
static inline void weft__list_push(weft__list *l, weft__node *n)
{
    weft__list_insert_after(l, l->tail, n);
}

/* Insert @n (not in any list) at the head. */
static inline void weft__list_push_front(weft__list *l, weft__node *n)
{
    weft__list_insert_after(l, NULL, n);
}

/* Take @n (in @l) out; its links are cleared. */
static inline void weft__list_remove(weft__list *l, weft__node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->tail = n->prev;
    n->next = n->prev = NULL;
}

/* Take the head out and return it, or NULL. */
static inline weft__node *weft__list_pop(weft__list *l)
{
    weft__node *n = l->head;
    if (n)
        weft__list_remove(l, n);
    return n;
}

/* ------------------------------------------------------------------ */
/* Sanitizer and Valgrind detection                                    */
/* ------------------------------------------------------------------ */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(WEFT_ASAN)
#define WEFT_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(WEFT_TSAN)
#define WEFT_TSAN 1
#endif

/* Valgrind's client requests (a dozen instructions each even natively,
 * so made only when RUNNING_ON_VALGRIND said so at init); WEFT_NO_VALGRIND
 * builds without them (bench/callgrind_http.sh counts the native path). */
#if defined(__has_include) && !defined(WEFT_NO_VALGRIND)
#if __has_include(<valgrind/valgrind.h>)
#define WEFT_VALGRIND 1
#endif
#endif

#define WEFT_LIKELY(x) __builtin_expect(!!(x), 1)
#define WEFT_UNLIKELY(x) __builtin_expect(!!(x), 0)


/* ------------------------------------------------------------------ */
/* Reactor                                                             */
/* ------------------------------------------------------------------ */
typedef struct weft__reactor weft__reactor;
typedef struct weft__wait weft__wait;

/*
 * A wait: something a client (a C fiber, a Ruby fiber) blocks on. It may
 * have an fd part, a deadline part and a completion op; whichever part
 * completes first completes the wait exactly once, unlinks the others,
 * stores the result and calls wake(). Waits live in the waiter's memory (a
 * fiber's stack frame). After completion the reactor no longer references
 * a wait — except a wait whose op is still in flight (w->op != NULL, see
 * weft__op_rearm below), into which the backend writes the op's outcome
 * when its completion arrives.
 */
struct weft__wait {
    /* First line (with a 64-byte aligned wait): what completing it reads
     * and writes, the op's outcome included. */
    void (*wake)(weft__wait *w);
    void *owner;
    weft__reactor *r;
    void *op;          /* in-flight completion record (io_uring), or NULL;
                          the wait itself when the backend keeps the
                          record in it (op_code)                          */
    int result;
    int fd;            /* -1: no fd part                                   */
    int op_res;        /* the op's own result (CQE res)                    */
    uint32_t events;   /* WEFT_READABLE|WEFT_WRITABLE|WEFT_PRIORITY        */
    uint32_t gen;      /* fd generation when linked                        */
    bool active;
    bool nocancel;     /* not ended by weft_cancel or timeout scopes: used
                          to wait for the CQE of an op being cancelled     */
    bool op_done;      /* the op's completion arrived (op_res is valid)    */
    uint8_t op_hint;   /* what the completion said of the source beyond the
                          result (WEFT__HINT_*), for backends that know    */
    uint8_t opk;       /* counted in the stats under code opk - 1
                          (WEFT__OPC_*) when handed to the backend; 0: not
                          (yet)                                            */
    uint8_t okind;     /* set by the client before arming: what the wait is
                          for (WEFT_OPK_ACCEPT, _CONNECT) + 1; 0: derived
                          from the op or the events                       */
    /* The op, when its record is kept in the wait: for ops whose waiter
     * waits for the completion (not polls), the backend needs no pooled
     * record, and the lines a request touches stay together. While such
     * an op's cancel waits for room in the ring, the backend lists the
     * wait through timer.pnext: a wait that has ended has no timer armed,
     * and one re-armed for the op's end (weft__op_rearm) arms none. */
    uint8_t op_code;
    /* Second line: the descriptor's list and the deadline. */
    weft__node fnode;  /* in its descriptor's list of waits             */
    weft__timer timer;
};

/* weft__wait.op_hint after an ACCEPT: whether more connections were queued
 * behind the one accepted (io_uring's IORING_CQE_F_SOCK_NONEMPTY, on a
 * kernel known to report it for accepts), or nothing known. */
enum { WEFT__HINT_NONE = 0, WEFT__HINT_MORE = 1, WEFT__HINT_EMPTY = 2 };

/* Completion-based operations, for backends that have them (io_uring). */
enum {
    WEFT__OP_READ, WEFT__OP_WRITE, WEFT__OP_READV, WEFT__OP_WRITEV,
    WEFT__OP_RECV, WEFT__OP_SEND, WEFT__OP_RECVMSG, WEFT__OP_SENDMSG,
    WEFT__OP_ACCEPT, WEFT__OP_CONNECT, WEFT__OP_POLL, WEFT__OP_CLOSE
};
/* What the stats count a wait under when it is handed to the backend
 * (weft__reactor.opc_sub): its op code, or for a readiness wait (and a
 * POLL op) WEFT__OPC_FD + its events & 7 (readable,
 * priority, writable), or, when the client named
 * one (weft__wait.okind), WEFT__OPC_KIND + a WEFT_OPK_* kind. Codes map to
 * kinds only when the stats are read (weft__reactor_op_counts): the hot
 * path does one increment. */
enum {
    WEFT__OPC_FD = WEFT__OP_CLOSE + 1,
    WEFT__OPC_KIND = WEFT__OPC_FD + 8, /* the direction: events & 7 */
    WEFT__OPC_N = WEFT__OPC_KIND + 8
};
typedef struct weft__opdesc {
    int op;
    int fd;
    void *buf;
    size_t len;
    const struct iovec *iov;
    int iovcnt;
    int64_t off;               /* -1: the file position                  */
    int flags;                 /* recv/send flags                        */
    struct sockaddr *addr;     /* accept (out) / connect (in)            */
    socklen_t *addrlen;        /* accept                                 */
    socklen_t alen;            /* connect                                */
    uint32_t events;           /* poll: WEFT_READABLE|...                */
    bool async;                /* run it off the submitting thread even if
                                  it could complete at once (a large file
                                  transfer from the page cache would copy
                                  inside the loop's io_uring_enter)      */
    bool poll_first;           /* accept: the queue was just seen empty;
                                  wait for a connection before trying
                                  (spares the kernel a futile attempt)   */
} weft__opdesc;

/* Every backend's completion record starts with this. */
typedef struct weft__oprec {
    weft__wait *wait;          /* NULL once abandoned                    */
} weft__oprec;

/* Backends add this to the events they report for a descriptor when the
 * peer shut down its side or the descriptor has an error (epoll: RDHUP,
 * HUP, ERR); the reactor notes it and strips it. */
#define WEFT__EV_PEER_GONE 0x100

/*
 * Tables indexed by descriptor number: the reactor's (weft__fdstate, below),
 * the epoll and poll backends' and the I/O layer's (weft__iofd, io.h). Each
 * grows through weft__fdtab_reach, and an entry of zeros means "nothing
 * known". A number's new life (a close, a forget, a descriptor weft made)
 * starts in weft__reactor_fd_close: waiters are woken, the backend drops
 * its registration (fd_forget), the reactor's entry is reset with its
 * generation bumped; a layer above with a table of its own clears its
 * entry (weft__fdtab_clear) in the one function through which it calls
 * that (the I/O layer's weft__io_fd_reset).
 */
/* Make the table at *@tabp (a pointer to @size-byte entries, @*n of them)
 * hold entry @fd (>= 0): doubling from 256, never past INT32_MAX entries,
 * the new entries zeroed, *@tabp and @*n updated. Returns 0, or -ENOMEM
 * (no memory, or @fd beyond any table: nothing changed). */
int weft__fdtab_reach(void *tabp, int *n, int fd, size_t size);
/* A new life of @fd: its entry (if the table reaches it) zeroed. */
static inline void weft__fdtab_clear(void *tab, int n, int fd, size_t size)
{
    if (fd >= 0 && fd < n)
        memset((char *)tab + (size_t)fd * size, 0, size);
}

/* Per-descriptor state, indexed by fd number: what the reactor knows of
 * a descriptor during one life of its number. Backends keep their own
 * per-descriptor state behind bstate. */
typedef struct weft__fdstate {
    weft__list waits;     /* waits linked to the descriptor (weft__wait.fnode) */
    uint32_t gen;         /* bumped on close/forget/new descriptor          */
    uint8_t kind;         /* what it is (weft__fd_kind), once learnt        */
    uint8_t nonblock;     /* how the client's calls on it keep from
                             blocking: 0 not known yet, else a client's
                             WEFT__NB_* (the I/O layer's, io.h; 1 is
                             always "O_NONBLOCK is set")                   */
    uint8_t always_ready; /* regular file etc.: backend cannot wait on it   */
    uint8_t rd_edge;      /* a readable edge was reported since the client
                             last cleared it (any waiter or none)           */
    uint8_t rd_hup;       /* the peer closed, or an error, was reported:
                             sticky for this life of the descriptor         */
} weft__fdstate;

/* Kinds of descriptor. A regular file (or block device) is never made
 * O_NONBLOCK: its reads go to the disk on io_uring, or to a thread. */
enum { WEFT__FD_UNKNOWN = 0, WEFT__FD_SOCKET = 1, WEFT__FD_OTHER = 2,
       WEFT__FD_FILE = 3, WEFT__FD_FIFO = 4, WEFT__FD_KINDS };

typedef struct weft__post {
    struct weft__post *next;
    void (*fn)(void *);
    void *arg;
    bool embedded;     /* caller-owned node (weft__reactor_post_node): the
                          drain does not free it                          */
} weft__post;

typedef struct weft__backend_ops {
    const char *name;
    size_t state_size; /* bstate's size: the reactor allocates it zeroed
                          before init and frees it after fini (or after
                          a failed init)                                 */
    /* Set up bstate; on failure release what it took and return -errno. */
    int (*init)(weft__reactor *r);
    /* Release what init took (called only when it succeeded). */
    void (*fini)(weft__reactor *r);
    /* The waiter set of @fd changed (first waiter, last waiter, events). */
    int (*fd_update)(weft__reactor *r, int fd);
    /* @fd is being closed or forgotten: drop any registration. */
    void (*fd_forget)(weft__reactor *r, int fd);
    /* Wait up to @timeout_ns (-1 forever, 0 poll) and dispatch events with
     * weft__reactor_fd_event(); call weft__reactor_drain_posts() when the
     * wake-up descriptor fired. Returns 0 or -errno. */
    int (*poll)(weft__reactor *r, int64_t timeout_ns);
    /* Optional (NULL for readiness backends): start @d for @w, linking the
     * record to w->op. Its completion sets w->op_res/op_done, clears w->op
     * and completes @w with the result. */
    int (*op_submit)(weft__reactor *r, weft__wait *w, const weft__opdesc *d);
    /* @w completed before its op: ask the kernel to cancel the op. Ops
     * without buffers (poll) are abandoned at once (w->op cleared); for the
     * others w->op stays set and the caller waits for the completion. */
    void (*op_cancel)(weft__reactor *r, weft__wait *w);
    /* Optional: how @w waits for @fd to be ready for @events, when it is
     * not a registration plus fd_update (io_uring: a POLL op). */
    int (*fd_wait)(weft__reactor *r, weft__wait *w, int fd, uint32_t events);
    /* Optional (completion backends): whether @op on a descriptor of @kind
     * runs as a completion op; otherwise the client makes the system call
     * and waits for readiness on EAGAIN. */
    bool (*op_ok)(int kind, int op);
    /* Optional, with op_submit: the same for the ops of one buffer at the
     * file position or on a socket (WEFT__OP_READ, _WRITE, _RECV, _SEND:
     * every request's read and answer), without an opdesc to fill in and
     * decode. */
    int (*op_buf)(weft__reactor *r, weft__wait *w, int op, int fd, void *buf,
                  size_t len, int flags);
} weft__backend_ops;

/* The members every backend has, named by one rule: backend @p's state
 * is p##state and its functions are p_init, p_fini, p_fd_update,
 * p_fd_forget and p_poll. */
#define WEFT__BACKEND_READINESS(label, p)                                   \
    .name = label, .state_size = sizeof(p##state), .init = p##_init,        \
    .fini = p##_fini, .fd_update = p##_fd_update,                           \
    .fd_forget = p##_fd_forget, .poll = p##_poll

extern const weft__backend_ops weft__backend_epoll;
extern const weft__backend_ops weft__backend_poll;
#if defined(__linux__) && defined(__has_include) && !defined(WEFT_NO_URING)
#if __has_include(<liburing.h>)
#define WEFT_HAVE_URING 1
extern const weft__backend_ops weft__backend_uring;
#endif
#endif

struct weft__reactor {
    const weft__backend_ops *ops;
    int wakefd;              /* eventfd for cross-thread wake-ups          */
    weft__fdstate *fds;
    int nfds;                /* entries allocated                          */
    weft__heap timers;
    size_t nwaits, nfd_waits;
    /* waits whose deadline a keeper stands for, and keepers armed (each
     * one of the timers): the stats count the former, not the latter */
    uint32_t nkept, nkeepers;
    /* cross-thread posts */
    pthread_mutex_t post_lock;
    weft__post *post_head, *post_tail;
    atomic_size_t posted;
    atomic_int wake_pending;
    void *bstate;            /* the backend's own state                  */
    size_t ops_inflight;     /* records the kernel still owns            */
    /* A client's deadlines kept outside the timers (weft__poll_hook):
     * consulted around a poll while hook_pending is non-zero. */
    const struct weft__poll_hook *hook;
    void *hook_arg;          /* what the hook's functions are called with */
    uint32_t hook_pending;
    /* op_mask[kind] bit op: the backend's op_ok, asked once at init */
    uint16_t op_mask[WEFT__FD_KINDS];
    /* Loop health (weft_stats_t). The clock is read once per iteration:
     * stamp is the time the backend's last wait ended (or, when no poll
     * was needed, the iteration's start), which clients use as "now" for
     * bookkeeping that must not read the clock itself. */
    int64_t stamp;
    int64_t poll_t0;         /* the current poll's start                   */
    bool poll_may_wait;      /* the current poll has a timeout other than 0 */
    int64_t wait_ns;         /* time inside the backends' waits            */
    uint64_t iterations;
    uint64_t timers_fired;
    /* waits handed to the backend and ended, by WEFT__OPC_* code + 1 (at
     * 0: ended waits that never reached the backend) */
    uint64_t opc_sub[WEFT__OPC_N + 1], opc_done[WEFT__OPC_N + 1];
    uint64_t timers_armed;   /* timers armed, ever (waits' deadlines and a
                                client's own timers): the ended ones are
                                this less those still armed               */
};

/* Backends call this right after their wait in the kernel returns, before
 * dispatching what it brought: the iteration's clock reading, for a poll
 * that may have waited (a poll with timeout 0 is busy time, and the
 * reading at the iteration's start stands). */
static inline void weft__reactor_polled(weft__reactor *r)
{
    if (!r->poll_may_wait)
        return;
    int64_t now = weft_now();
    r->wait_ns += now - r->poll_t0;
    r->stamp = now;
}

/*
 * A client of the reactor (the fiber layer's write-behind, wb.c) that keeps
 * some deadlines outside the timer structure, because most of the waits
 * they belong to complete inside the very poll that submits them (arming
 * and disarming a timer for each would cost more than the whole noting).
 * While r->hook_pending is non-zero, a poll that may sleep asks @deadline
 * for the earliest such deadline (WEFT_FOREVER: none) and sleeps no longer
 * than that; after the poll (events dispatched, before timers fire) it
 * calls @after, which arms a timer for each wait still in flight and
 * clears hook_pending. Both get r->hook_arg, which the client sets with
 * r->hook. The reactor knows nothing else of the client.
 */
typedef struct weft__poll_hook {
    int64_t (*deadline)(void *arg);
    void (*after)(void *arg);
} weft__poll_hook;

int weft__reactor_init(weft__reactor *r, weft_backend_t which);
void weft__reactor_fini(weft__reactor *r);
/* One loop iteration: wait for events (up to the next timer; forever if
 * @may_block and no timer; not at all otherwise), then fire due timers. */
int weft__reactor_run_once(weft__reactor *r, bool may_block);
/* Backends call this for every event. */
void weft__reactor_fd_event(weft__reactor *r, uint64_t token, uint32_t revents);
void weft__reactor_drain_posts(weft__reactor *r);
int weft__reactor_post(weft__reactor *r, void (*fn)(void *), void *arg);
/* Make a loop that sleeps in the backend's poll return, with nothing to
 * run. Async-signal-safe (a lock-free atomic and write(2)): callable from
 * a signal handler, or as Ruby's unblocking function declared so. */
void weft__reactor_wake(weft__reactor *r);
/* Post a caller-owned node (fn and arg set by the caller); never fails and
 * never allocates. The node must stay valid until p->fn runs, and must not
 * be posted again before then. Thread-safe. */
void weft__reactor_post_node(weft__reactor *r, weft__post *p);
/* The state of @fd (>= 0), growing the table to it; NULL = ENOMEM. The
 * lookup is inline: the I/O path makes it several times per call. */
weft__fdstate *weft__fd_grow(weft__reactor *r, int fd);
static inline weft__fdstate *weft__fd(weft__reactor *r, int fd)
{
    if (WEFT_LIKELY(fd < r->nfds))
        return &r->fds[fd];
    return weft__fd_grow(r, fd);
}
/* The first wait linked to a descriptor (NULL: none). */
static inline weft__wait *weft__fd_first(const weft__fdstate *st)
{
    return st->waits.head ? weft__container(st->waits.head, weft__wait, fnode) : NULL;
}
static inline weft__wait *weft__fd_next(const weft__wait *w)
{
    return w->fnode.next ? weft__container(w->fnode.next, weft__wait, fnode) : NULL;
}
static inline uint64_t weft__fd_token(int fd, uint32_t gen) {
    return (uint64_t)(uint32_t)fd | ((uint64_t)gen << 32);
}
#define WEFT__WAKE_TOKEN UINT64_MAX

/* @now + @ns as weft_deadline_in() makes a deadline: WEFT_FOREVER for a
 * negative @ns, saturating at INT64_MAX. */
static inline int64_t weft__deadline_after(int64_t now, int64_t ns)
{
    if (ns < 0)
        return WEFT_FOREVER;
    if (ns > INT64_MAX - now)
        return INT64_MAX;
    return now + ns;
}

/* What a wait whose @deadline has come ends with: -EAGAIN for the "try,
 * don't wait" deadline 0 (nothing was ready), -ETIMEDOUT for any other. */
static inline int weft__expired(int64_t deadline)
{
    return deadline == 0 ? -EAGAIN : -ETIMEDOUT;
}

/* Wait lifecycle. weft__wait_init, then arm any of fd/deadline parts, then
 * the client blocks until wake() is called. A deadline that has come
 * completes the wait at once with weft__expired(deadline). */
void weft__wait_timer_fired(weft__timer *t);
static inline void weft__wait_init(weft__wait *w, weft__reactor *r,
                                   void (*wake)(weft__wait *), void *owner)
{
    w->wake = wake;
    w->owner = owner;
    w->result = 0;
    w->fd = -1;
    w->events = 0;
    w->gen = 0;
    w->fnode.next = w->fnode.prev = NULL;
    w->timer.idx = WEFT__TIMER_IDLE;
    w->timer.fire = weft__wait_timer_fired;
    w->r = r;
    w->active = true;
    w->nocancel = false;
    w->op_done = false;
    w->op_hint = WEFT__HINT_NONE;
    w->op = NULL;
    w->op_res = 0;
    w->opk = 0;
    w->okind = 0;
    r->nwaits++;
}
int weft__wait_arm_deadline(weft__wait *w, int64_t deadline);
/* The same for a @deadline the caller has just seen to lie in the future
 * (or WEFT_FOREVER): no clock read. One that passed in between fires at the
 * next turn of the loop. Inline, below weft__timer_arm. */
static inline int weft__wait_arm_later(weft__wait *w, int64_t deadline);
/* Wait for @fd to be ready for @events: the backend decides how (a
 * registration, a poll array entry, a ring POLL). A descriptor the backend
 * cannot watch (a regular file with epoll) is always ready: the wait
 * completes at once with @events. Returns 0, -ENOMEM (the table cannot
 * grow to @fd), or the backend's error from registering it (epoll_ctl's
 * -EBADF, -ENOSPC..., a ring that cannot take the POLL), passed on as
 * it is. */
int weft__wait_arm_fd(weft__wait *w, int fd, uint32_t events);
/* Move @w's deadline to @deadline (a wait already armed; the new one may
 * be earlier or later): its timer is disarmed and armed again. Returns 0 or
 * -ENOMEM. */
int weft__wait_rearm_deadline(weft__wait *w, int64_t deadline);
/* Timers that are not waits' (a client's own timeouts, sweeps): @t->fire
 * set by the caller; weft__timer_arm is 0 or -ENOMEM, and a timer is armed
 * at most once at a time (disarm it first). */
static inline int weft__timer_arm(weft__reactor *r, weft__timer *t, int64_t deadline)
{
    t->deadline = deadline;
    r->timers_armed++; /* the ended ones are those armed less those left */
    return weft__heap_push(&r->timers, t);
}
static inline int weft__wait_arm_later(weft__wait *w, int64_t deadline)
{
    if (deadline == WEFT_FOREVER || !w->active)
        return 0;
    return weft__timer_arm(w->r, &w->timer, deadline);
}
static inline void weft__timer_disarm(weft__reactor *r, weft__timer *t)
{
    if (t->idx != WEFT__TIMER_IDLE)
        weft__heap_remove(&r->timers, t);
}
/* Deadlines in force: the armed timers, less the keepers among them,
 * plus the waits' deadlines the keepers stand for. */
static inline uint32_t weft__reactor_timers(const weft__reactor *r)
{
    return weft__heap_count(&r->timers) - r->nkeepers + r->nkept;
}

/*
 * Keepers. A server gives each request's read the same timeout, so each
 * read's deadline is a little later than the last one's, and the read
 * usually ends long before it: arming and disarming a timer for every read
 * is work (and lines of other waits' memory) spent on deadlines that never
 * come. A keeper is a timer that its waiter (a fiber) owns, and that
 * outlives the waiter's waits. weft__wait_keep gives a wait its deadline
 * through the waiter's keeper: the wait only records the deadline (marked
 * WEFT__TIMER_KEPT), and the keeper is armed only when it is not armed
 * already at or before that deadline — so a deadline that is moved later
 * at every call costs no timer operation at all, and ending the wait none
 * either.
 *
 * When the keeper fires, its owner finds the wait its waiter is blocked in
 * (NULL if none) and calls weft__keeper_fired, which ends that wait with
 * -ETIMEDOUT if it is kept and its deadline has come, or arms the keeper
 * again at the wait's deadline. Every wait so still ends at its own
 * deadline, as if it had a timer of its own; a keeper may fire for
 * nothing (its waiter since woken, or waiting without a kept deadline),
 * which costs one early look per keeper and deadline period. The owner
 * sets the keeper's fire function, starts it idle (idx WEFT__TIMER_IDLE),
 * and disarms it (weft__keeper_disarm) before its memory goes.
 */
/* @w's @deadline (not WEFT_FOREVER), kept by a keeper its owner knows to
 * be armed at or before it: the wait only records it. */
static inline void weft__wait_kept(weft__wait *w, int64_t deadline)
{
    if (!w->active)
        return;
    weft__reactor *r = w->r;
    w->timer.deadline = deadline;
    w->timer.idx = WEFT__TIMER_KEPT;
    r->nkept++;
    r->timers_armed++;
}
/* Arm @keeper (idle) at @deadline: 0 or -ENOMEM. */
static inline int weft__keeper_arm(weft__reactor *r, weft__timer *keeper, int64_t deadline)
{
    keeper->deadline = deadline;
    if (weft__heap_push(&r->timers, keeper) < 0)
        return -ENOMEM;
    r->nkeepers++;
    return 0;
}
static inline void weft__keeper_disarm(weft__reactor *r, weft__timer *keeper)
{
    if (keeper->idx != WEFT__TIMER_IDLE) {
        weft__heap_remove(&r->timers, keeper);
        r->nkeepers--;
    }
}
static inline int weft__wait_keep(weft__wait *w, weft__timer *keeper, int64_t deadline)
{
    if (deadline == WEFT_FOREVER || !w->active)
        return 0;
    if (WEFT_UNLIKELY(keeper->idx == WEFT__TIMER_IDLE || keeper->deadline > deadline)) {
        weft__keeper_disarm(w->r, keeper);
        if (weft__keeper_arm(w->r, keeper, deadline) < 0)
            return -ENOMEM;
    }
    weft__wait_kept(w, deadline);
    return 0;
}
/* Keeper @keeper fired (its owner's fire function calls this): @w is the
 * wait its waiter is blocked in, or NULL. */
void weft__keeper_fired(weft__reactor *r, weft__timer *keeper, weft__wait *w);
/* The end of @w's deadline (armed: not WEFT__TIMER_IDLE), whether its own
 * timer or one a keeper stands for. */
static inline void weft__wait_deadline_end(weft__reactor *r, weft__wait *w)
{
    if (w->timer.idx == WEFT__TIMER_KEPT) {
        w->timer.idx = WEFT__TIMER_IDLE;
        r->nkept--;
    } else {
        weft__heap_remove(&r->timers, &w->timer);
    }
}
/* The stats' ops by kind (WEFT_OPK_*, 8 each): handed to the backend
 * (@sub) and ended (@done). */
void weft__reactor_op_counts(const weft__reactor *r, uint64_t sub[8], uint64_t done[8]);
/* Complete @w with @result (first completion wins; later ones are no-ops). */
void weft__wait_complete(weft__wait *w, int result);
/* Unlinked from its descriptor's list of waits. */
static inline void weft__wait_fd_unlink(weft__reactor *r, weft__wait *w)
{
    weft__list_remove(&r->fds[w->fd].waits, &w->fnode);
    int fd = w->fd;
    w->fd = -1;
    r->nfd_waits--;
    /* A wait without events (an op's) is in no backend's interest set. */
    if (WEFT_UNLIKELY(w->events))
        (void)r->ops->fd_update(r, fd);
}
/* weft__wait_complete's body, inline where a backend hands over an op's
 * completion (two a request): there the wait's op has just been cleared,
 * so the cancel below drops out, and the call's frame with it. */
static inline void weft__wait_end(weft__wait *w, int result)
{
    if (!w->active)
        return;
    w->active = false;
    weft__reactor *r = w->r;
    if (w->timer.idx != WEFT__TIMER_IDLE)
        weft__wait_deadline_end(r, w);
    r->opc_done[w->opk]++; /* [0]: never handed to the backend */
    if (w->fd >= 0)
        weft__wait_fd_unlink(r, w);
    if (w->op)
        r->ops->op_cancel(r, w);
    r->nwaits--;
    w->result = result;
    w->wake(w);
}
/* Start a completion op for @w (backends with op_submit only). */
int weft__wait_arm_op(weft__wait *w, const weft__opdesc *d);
static inline bool weft__reactor_has_ops(const weft__reactor *r) {
    return r->ops->op_submit != NULL;
}
/* Whether @op (WEFT__OP_*) on a descriptor of @kind (WEFT__FD_*) should be
 * a completion op on this reactor (see weft__backend_ops.op_ok). */
static inline bool weft__reactor_use_op(const weft__reactor *r, int kind, int op) {
    return (r->op_mask[kind] >> op) & 1;
}
/*
 * Completion ops that may be cut short. A wait armed with an op (and maybe
 * a deadline) can end before the op does: its deadline passed, the client
 * was interrupted, the descriptor was closed. The op is then being
 * cancelled, but the kernel may still use its buffers, and the backend
 * still writes the op's outcome into the wait (op, op_done, op_res) when
 * its completion arrives. So after such a wait completes, while
 * weft__op_pending() says so, the client re-arms the same wait with
 * weft__op_rearm() (nocancel: nothing but the completion ends it) and
 * blocks on it again; only then is the wait's memory, and the buffer, its
 * own again. weft__op_result() then merges the outcomes: an op that
 * completed wins over the reason the wait ended (no data, no accepted
 * descriptor is lost); one that was cancelled reports that reason. C
 * fibers (io.c) and the Ruby extension both block this way.
 */
/* Arm @w (initialised, nothing armed yet) with @d and @deadline — a
 * deadline that has passed fires at the next poll, which cancels the op
 * unless it completed inside that poll's submission: one attempt. Returns
 * 0, or -errno with @w completed with it. */
int weft__op_start(weft__wait *w, const weft__opdesc *d, int64_t deadline);
static inline bool weft__op_pending(const weft__wait *w) { return w->op != NULL; }
void weft__op_rearm(weft__wait *w);
/* @why: the result the wait first ended with. */
int weft__op_result(const weft__wait *w, int why);
/* weft__wait_arm_buf by weft__wait_arm_op (reactor.c). */
int weft__wait_arm_buf_general(weft__wait *w, int op, int fd, void *buf, size_t len,
                               int flags);
/* Stats: @w is handed to the backend under @code (WEFT__OPC_*), or under
 * the kind the client named (okind). Each wait is counted where it
 * reaches the backend: a readiness wait that the backend turns into a POLL
 * op, in weft__wait_arm_op only. Index 0 of the arrays is "not counted"
 * (opk 0), so completion counts without a test. */
static inline void weft__wait_count_sub(weft__reactor *r, weft__wait *w, unsigned code)
{
    if (WEFT_UNLIKELY(w->okind))
        code = WEFT__OPC_KIND + w->okind - 1u;
    w->opk = (uint8_t)(code + 1);
    r->opc_sub[code + 1]++;
}
/* Linked to @fd's list of waits (the table reaches @fd), for @events. */
static inline void weft__wait_fd_link(weft__reactor *r, weft__wait *w, int fd,
                                      uint32_t events)
{
    weft__fdstate *st = &r->fds[fd];
    w->fd = fd;
    w->events = events;
    w->gen = st->gen;
    weft__list_push_front(&st->waits, &w->fnode);
    r->nfd_waits++;
}
/* weft__wait_arm_op for an op of one buffer (WEFT__OP_READ, _WRITE at the
 * file position, _RECV, _SEND with @flags), by the backend's path for
 * those (op_buf), on a descriptor the table reaches. Inline: every
 * request's read and answer start here, and a call of its own cost them
 * a frame each (docs/PERFORMANCE.md). Anything but an active wait on a
 * backend with op_buf takes the general path. */
static inline int weft__wait_arm_buf(weft__wait *w, int op, int fd, void *buf, size_t len,
                                     int flags)
{
    weft__reactor *r = w->r;
    if (WEFT_UNLIKELY(!w->active || !r->ops->op_buf))
        return weft__wait_arm_buf_general(w, op, fd, buf, len, flags);
    weft__wait_count_sub(r, w, (unsigned)op);
    int rc = r->ops->op_buf(r, w, op, fd, buf, len, flags);
    if (rc < 0)
        return rc;
    weft__wait_fd_link(r, w, fd, 0);
    return 0;
}

/* What @fd is (WEFT__FD_SOCKET, FILE, FIFO or OTHER), learnt with one
 * fstat per life of the descriptor and kept; -errno if @fd is not open,
 * -ENOMEM if the table cannot grow to it. */
int weft__fd_learn_kind(weft__reactor *r, int fd);
static inline int weft__fd_kind(weft__reactor *r, int fd)
{
    if (WEFT_LIKELY(fd < r->nfds && r->fds[fd].kind != WEFT__FD_UNKNOWN))
        return r->fds[fd].kind;
    return weft__fd_learn_kind(r, fd);
}
/* After fork(), in the child: release the parent's kernel objects (ring,
 * epoll set, eventfd) without touching the parent's. */
void weft__reactor_abandon(weft__reactor *r);
/* Wake every waiter on @fd with @err and drop its registration/state. */
void weft__reactor_fd_close(weft__reactor *r, int fd, int err);
/* Fresh descriptor created by weft (or just forgotten): reset its state. */
void weft__reactor_fd_new(weft__reactor *r, int fd);


#endif /* WEFT_REACTOR_H */
