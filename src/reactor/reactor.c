/*
 * reactor.c — the event loop shared by every kind of fiber.
 *
 * It holds waits (an fd part, a deadline part, or neither), the timer heap,
 * the per-descriptor table and the cross-thread post queue, and it drives a
 * backend. It knows nothing about stacks: completing a wait stores the
 * result and calls the waiter's wake function, which for a C fiber puts the
 * fiber on its run queue and for a Ruby fiber schedules a transfer.
 */
#include "reactor.h"
#include "evmask.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t weft_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft_deadline_in(int64_t ns)
{
    return weft__deadline_after(ns < 0 ? 0 : weft_now(), ns);
}


/* ---- descriptor table ------------------------------------------------ */

int weft__fdtab_reach(void *tabp, int *n, int fd, size_t size)
{
    int old = *n, m = old ? old : 256;
    if (fd < old)
        return 0;
    while (m <= fd) {
        if (m > INT32_MAX / 2)
            return -ENOMEM;
        m *= 2;
    }
    char *t;
    memcpy(&t, tabp, sizeof t); /* tabp points to any object pointer type */
    t = realloc(t, (size_t)m * size);
    if (!t)
        return -ENOMEM;
    memset(t + (size_t)old * size, 0, (size_t)(m - old) * size);
    memcpy(tabp, &t, sizeof t);
    *n = m;
    return 0;
}

weft__fdstate *weft__fd_grow(weft__reactor *r, int fd)
{
    if (weft__fdtab_reach(&r->fds, &r->nfds, fd, sizeof *r->fds) < 0)
        return NULL;
    return &r->fds[fd];
}

/* ---- waits ------------------------------------------------------------ */

static int opc_kind(unsigned code)
{
    switch (code) {
    case WEFT__OP_READ: case WEFT__OP_READV: case WEFT__OP_RECV: case WEFT__OP_RECVMSG:
        return WEFT_OPK_READ;
    case WEFT__OP_WRITE: case WEFT__OP_WRITEV: case WEFT__OP_SEND: case WEFT__OP_SENDMSG:
        return WEFT_OPK_WRITE;
    case WEFT__OP_ACCEPT:
        return WEFT_OPK_ACCEPT;
    case WEFT__OP_CONNECT:
        return WEFT_OPK_CONNECT;
    }
    if (code >= WEFT__OPC_KIND)
        return (int)(code - WEFT__OPC_KIND);
    if (code >= WEFT__OPC_FD) {
        unsigned ev = code - WEFT__OPC_FD;
        return ev & WEFT_READABLE ? WEFT_OPK_READ
               : ev & WEFT_WRITABLE ? WEFT_OPK_WRITE : WEFT_OPK_OTHER;
    }
    return WEFT_OPK_OTHER; /* close */
}

void weft__reactor_op_counts(const weft__reactor *r, uint64_t sub[8], uint64_t done[8])
{
    for (int k = 0; k < 8; k++)
        sub[k] = done[k] = 0;
    for (unsigned c = 0; c < WEFT__OPC_N; c++) {
        int k = opc_kind(c);
        sub[k] += r->opc_sub[c + 1];
        done[k] += r->opc_done[c + 1];
    }
    sub[WEFT_OPK_TIMEOUT] = r->timers_armed;
    done[WEFT_OPK_TIMEOUT] = r->timers_armed - weft__reactor_timers(r);
}

void weft__wait_timer_fired(weft__timer *t)
{
    weft__wait *w = (weft__wait *)((char *)t - offsetof(weft__wait, timer));
    weft__wait_complete(w, -ETIMEDOUT);
}

int weft__wait_arm_deadline(weft__wait *w, int64_t deadline)
{
    if (deadline == WEFT_FOREVER || !w->active)
        return 0;
    if (deadline <= 0 || deadline <= weft_now()) {
        weft__wait_complete(w, weft__expired(deadline));
        return 0;
    }
    return weft__wait_arm_later(w, deadline);
}

int weft__wait_rearm_deadline(weft__wait *w, int64_t deadline)
{
    if (w->timer.idx != WEFT__TIMER_IDLE)
        weft__wait_deadline_end(w->r, w);
    return weft__wait_arm_deadline(w, deadline);
}

void weft__keeper_fired(weft__reactor *r, weft__timer *keeper, weft__wait *w)
{
    r->nkeepers--;
    if (w && w->active && w->timer.idx == WEFT__TIMER_KEPT) {
        if (w->timer.deadline <= weft_now()) {
            weft__wait_complete(w, -ETIMEDOUT);
            return; /* counted as the firing of w's deadline */
        }
        if (weft__keeper_arm(r, keeper, w->timer.deadline) < 0)
            weft__wait_complete(w, -ENOMEM);
    }
    r->timers_fired--; /* no deadline came: not a firing the stats count */
}

int weft__wait_arm_fd(weft__wait *w, int fd, uint32_t events)
{
    if (!w->active)
        return 0;
    weft__reactor *r = w->r;
    weft__fdstate *st = weft__fd(r, fd);
    if (!st)
        return -ENOMEM;
    if (st->always_ready) {
        /* Set for regular files; re-checked because the number may have
         * been closed behind weft's back and reused by something that
         * can block (a spin on EAGAIN otherwise). */
        struct stat sb;
        if (fstat(fd, &sb) == 0 && (S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))) {
            weft__wait_complete(w, (int)events);
            return 0;
        }
        st->always_ready = 0;
    }
    if (r->ops->fd_wait)
        return r->ops->fd_wait(r, w, fd, events); /* e.g. a ring POLL */
    weft__wait_count_sub(r, w, WEFT__OPC_FD + (events & 7u));
    weft__wait_fd_link(r, w, fd, events);
    int rc = r->ops->fd_update(r, fd);
    if (rc < 0) {
        weft__wait_fd_unlink(r, w);
        if (rc == -EPERM) {
            /* The backend cannot watch this kind of file (a regular file
             * with epoll): it is always ready. */
            r->fds[fd].always_ready = 1;
            weft__wait_complete(w, (int)events);
            return 0;
        }
        return rc;
    }
    return 0;
}

int weft__wait_arm_op(weft__wait *w, const weft__opdesc *d)
{
    if (!w->active)
        return 0;
    weft__reactor *r = w->r;
    if (!r->ops->op_submit)
        return -EOPNOTSUPP;
    if (d->fd >= 0 && !weft__fd(r, d->fd))
        return -ENOMEM;
    weft__wait_count_sub(r, w, d->op == WEFT__OP_POLL
                        ? WEFT__OPC_FD + (d->events & 7u)
                        : (unsigned)d->op);
    int rc = r->ops->op_submit(r, w, d);
    if (rc < 0)
        return rc;
    /* Linked to its descriptor (for polls with their events, so nothing
     * else matches) so that closing the descriptor ends the wait — except
     * the close itself, which nothing may end but its own completion. */
    if (d->fd >= 0 && d->op != WEFT__OP_CLOSE)
        weft__wait_fd_link(r, w, d->fd, d->op == WEFT__OP_POLL ? d->events : 0);
    return 0;
}

int weft__op_start(weft__wait *w, const weft__opdesc *d, int64_t deadline)
{
    int rc = weft__wait_arm_later(w, deadline);
    if (rc == 0)
        rc = weft__wait_arm_op(w, d);
    if (rc < 0)
        weft__wait_complete(w, rc);
    return rc;
}

/* weft__wait_arm_buf by the general path (an ended wait, a backend
 * without op_buf). Out of line: its opdesc would sit in every frame. */
__attribute__((noinline)) int weft__wait_arm_buf_general(weft__wait *w, int op, int fd,
                                                         void *buf, size_t len, int flags)
{
    weft__opdesc d = {.op = op, .fd = fd, .buf = buf, .len = len, .off = -1,
                      .flags = flags};
    return weft__wait_arm_op(w, &d);
}

void weft__op_rearm(weft__wait *w)
{
    /* Completed (so unlinked from its timer and descriptor), its op being
     * cancelled, its record still pointing here: only the op's completion
     * may end it now. */
    w->active = true;
    w->nocancel = true;
    w->result = 0;
    w->opk = 0; /* counted as ended already: the op's own end is not */
    w->r->nwaits++;
}

int weft__op_result(const weft__wait *w, int why)
{
    if (!w->op_done)
        return why; /* ended before the op was submitted */
    int res = w->op_res;
    if ((res == -ECANCELED || res == -EINTR) && why < 0 && why != res)
        return why;
    return res;
}

int weft__fd_learn_kind(weft__reactor *r, int fd)
{
    weft__fdstate *st = weft__fd(r, fd);
    if (!st)
        return -ENOMEM;
    if (st->kind != WEFT__FD_UNKNOWN)
        return st->kind;
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return -errno;
    st->kind = S_ISSOCK(sb.st_mode)                          ? WEFT__FD_SOCKET
               : S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode) ? WEFT__FD_FILE
               : S_ISFIFO(sb.st_mode)                       ? WEFT__FD_FIFO
                                                            : WEFT__FD_OTHER;
    return st->kind;
}

void weft__wait_complete(weft__wait *w, int result)
{
    weft__wait_end(w, result);
}

void weft__reactor_fd_event(weft__reactor *r, uint64_t token, uint32_t revents)
{
    if (token == WEFT__WAKE_TOKEN) {
        weft__reactor_drain_posts(r);
        return;
    }
    int fd = (int)(uint32_t)token;
    uint32_t gen = (uint32_t)(token >> 32);
    if (fd < 0 || fd >= r->nfds || r->fds[fd].gen != gen)
        return; /* stale: the descriptor was closed or reused */
    if (revents & (WEFT__EV_PEER_GONE | WEFT_ERROR | WEFT_HANGUP))
        r->fds[fd].rd_hup = 1;
    revents &= ~(uint32_t)WEFT__EV_PEER_GONE;
    if (weft__ev_answer(WEFT_READABLE, revents))
        r->fds[fd].rd_edge = 1;
    weft__wait *w = weft__fd_first(&r->fds[fd]), *next;
    for (; w; w = next) {
        next = weft__fd_next(w);
        uint32_t m = weft__ev_answer(w->events, revents);
        if (m)
            weft__wait_complete(w, (int)m);
    }
}

void weft__reactor_fd_close(weft__reactor *r, int fd, int err)
{
    if (fd < 0 || fd >= r->nfds)
        return;
    weft__wait *w;
    while ((w = weft__fd_first(&r->fds[fd])))
        weft__wait_complete(w, err);
    if (r->ops->fd_forget)
        r->ops->fd_forget(r, fd);
    /* Nothing linked any more: all zeros but the generation, which tells
     * events and ops of the old life from the new one's. */
    uint32_t gen = r->fds[fd].gen + 1;
    weft__fdtab_clear(r->fds, r->nfds, fd, sizeof r->fds[fd]);
    r->fds[fd].gen = gen;
}

void weft__reactor_fd_new(weft__reactor *r, int fd)
{
    weft__reactor_fd_close(r, fd, -EBADF);
}

/* ---- cross-thread posts ----------------------------------------------- */

int weft__reactor_post(weft__reactor *r, void (*fn)(void *), void *arg)
{
    weft__post *p = malloc(sizeof *p);
    if (!p)
        return -ENOMEM;
    *p = (weft__post){.fn = fn, .arg = arg, .embedded = false};
    weft__reactor_post_node(r, p);
    return 0;
}

void weft__reactor_post_node(weft__reactor *r, weft__post *p)
{
    p->next = NULL;
    pthread_mutex_lock(&r->post_lock);
    if (r->post_tail)
        r->post_tail->next = p;
    else
        r->post_head = p;
    r->post_tail = p;
    atomic_fetch_add(&r->posted, 1);
    /* Wake while still holding the lock: once the node is visible the
     * loop may run it (it sees `posted` without waiting for the eventfd),
     * its owner may then finish and close the reactor, and the eventfd's
     * number may belong to another file by the time a wake-up after the
     * unlock wrote to it (or the reactor's memory to someone else). The
     * loop takes the lock to drain, so it cannot get past this point
     * until the unlock, and nothing of @r is touched after it. */
    weft__reactor_wake(r);
    pthread_mutex_unlock(&r->post_lock);
}

void weft__reactor_wake(weft__reactor *r)
{
    /* Only the first waker after a drain writes the eventfd. */
    if (!atomic_exchange(&r->wake_pending, 1)) {
        int saved = errno; /* a signal handler must leave errno as it was */
        uint64_t one = 1;
        while (write(r->wakefd, &one, sizeof one) < 0 && errno == EINTR)
            ;
        errno = saved;
    }
}

void weft__reactor_drain_posts(weft__reactor *r)
{
    uint64_t v;
    while (read(r->wakefd, &v, sizeof v) < 0 && errno == EINTR)
        ;
    /* Clear before taking the list: a post that lands after the swap then
     * writes the eventfd again, so none is left waiting. */
    atomic_store(&r->wake_pending, 0);
    pthread_mutex_lock(&r->post_lock);
    weft__post *p = r->post_head;
    r->post_head = r->post_tail = NULL;
    pthread_mutex_unlock(&r->post_lock);
    while (p) {
        /* An embedded node may be freed by its own callback: read it all
         * first. */
        weft__post *next = p->next;
        bool embedded = p->embedded;
        atomic_fetch_sub(&r->posted, 1);
        p->fn(p->arg);
        if (!embedded)
            free(p);
        p = next;
    }
}

/* ---- life cycle and loop ----------------------------------------------- */

static const weft__backend_ops *best_backend(void)
{
#ifdef WEFT_HAVE_URING
    return &weft__backend_uring;
#else
    return &weft__backend_epoll;
#endif
}

static const weft__backend_ops *pick_backend(weft_backend_t which, int *err)
{
    *err = 0;
    if (which == WEFT_BACKEND_DEFAULT) {
        const char *env = getenv("WEFT_BACKEND");
        if (!env || !*env || !strcmp(env, "io_uring"))
            return best_backend();
        if (!strcmp(env, "epoll"))
            return &weft__backend_epoll;
        if (!strcmp(env, "poll"))
            return &weft__backend_poll;
        *err = -EINVAL;
        return NULL;
    }
    switch (which) {
    case WEFT_BACKEND_IO_URING:
        return best_backend();
    case WEFT_BACKEND_EPOLL:
        return &weft__backend_epoll;
    case WEFT_BACKEND_POLL:
        return &weft__backend_poll;
    default:
        *err = -EINVAL;
        return NULL;
    }
}

/* Start backend r->ops on a zeroed state; on failure none is left. */
static int backend_init(weft__reactor *r)
{
    r->bstate = calloc(1, r->ops->state_size);
    if (!r->bstate)
        return -ENOMEM;
    int rc = r->ops->init(r);
    if (rc < 0) {
        free(r->bstate);
        r->bstate = NULL;
    }
    return rc;
}

/* The backend's state goes (once: the fork path may come first). */
static void backend_fini(weft__reactor *r)
{
    if (r->bstate) {
        r->ops->fini(r);
        free(r->bstate);
    }
    r->bstate = NULL;
}

int weft__reactor_init(weft__reactor *r, weft_backend_t which)
{
    int err;
    memset(r, 0, sizeof *r);
    r->ops = pick_backend(which, &err);
    if (!r->ops)
        return err;
    /* The loop's own descriptors (this eventfd, the epoll set, the ring)
     * never take the numbers of stdin, stdout or stderr: in a program
     * started with one of those closed, the program's own read of stdin
     * or weft_close(0) would otherwise reach the loop's eventfd. An
     * eventfd that lands on 0..2 holds that number while the next one is
     * made (at most three), until the backend has its descriptors too. */
    int held[3], nheld = 0;
    while ((r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) >= 0 &&
           r->wakefd <= 2)
        held[nheld++] = r->wakefd;
    if (r->wakefd < 0) {
        int e = errno;
        while (nheld)
            close(held[--nheld]);
        return -e;
    }
    pthread_mutex_init(&r->post_lock, NULL);
    int rc = backend_init(r);
    if (rc < 0 && r->ops != &weft__backend_epoll &&
        r->ops != &weft__backend_poll) {
        /* io_uring denied (seccomp, container: EPERM/ENOSYS), too old, or
         * out of locked memory: the same program runs on epoll. */
        r->ops = &weft__backend_epoll;
        rc = backend_init(r);
    }
    while (nheld)
        close(held[--nheld]);
    if (rc < 0) {
        close(r->wakefd);
        pthread_mutex_destroy(&r->post_lock);
        return rc;
    }
    if (r->ops->op_ok)
        for (int k = 0; k < WEFT__FD_KINDS; k++)
            for (int op = WEFT__OP_READ; op <= WEFT__OP_CLOSE; op++)
                if (r->ops->op_ok(k, op))
                    r->op_mask[k] |= (uint16_t)(1u << op);
    return 0;
}

void weft__reactor_fini(weft__reactor *r)
{
    weft__post *p = r->post_head;
    while (p) {
        weft__post *next = p->next;
        if (!p->embedded)
            free(p);
        p = next;
    }
    r->post_head = r->post_tail = NULL;
    atomic_store(&r->posted, 0);
    backend_fini(r);
    /* A thread still inside weft__reactor_post_node (its node already
     * drained) leaves the lock before the lock and the eventfd go. */
    pthread_mutex_lock(&r->post_lock);
    pthread_mutex_unlock(&r->post_lock);
    close(r->wakefd);
    pthread_mutex_destroy(&r->post_lock);
    weft__heap_fini(&r->timers);
    free(r->fds);
    r->fds = NULL;
    r->nfds = 0;
}

int weft__reactor_run_once(weft__reactor *r, bool may_block)
{
    int64_t timeout = may_block ? -1 : 0;
    /* A poll that must not block can only complete waits and run posts:
     * skip the system call (made every WEFT__POLL_TICKS switches, it
     * would dominate a yield between busy fibers) while nothing waits and
     * no post is pending (docs/PERFORMANCE.md). */
    bool poll = may_block || r->nwaits ||
                atomic_load_explicit(&r->wake_pending, memory_order_relaxed);
    /* The iteration's one clock reading before the poll (the backend takes
     * the other when its wait ends: weft__reactor_polled). An iteration
     * that neither polls nor has timers (fibers that only yield) reads it
     * every 16th time: the reading cost such a yield 0.3 ns. */
    r->iterations++;
    int64_t t0 = r->stamp;
    if (poll || weft__heap_count(&r->timers) || (r->iterations & 15) == 0)
        t0 = weft_now();
    int64_t next = weft__heap_next(&r->timers);
    if (next != INT64_MAX && timeout != 0) {
        int64_t d = next - t0;
        timeout = d < 0 ? 0 : d;
    }
    if (WEFT_UNLIKELY(r->hook_pending != 0) && timeout != 0) {
        int64_t d = r->hook->deadline(r->hook_arg);
        if (d != WEFT_FOREVER) {
            d -= t0;
            if (timeout < 0 || d < timeout)
                timeout = d < 0 ? 0 : d;
        }
    }
    int rc = 0;
    r->poll_t0 = t0;
    r->poll_may_wait = timeout != 0;
    r->stamp = t0;
    if (poll)
        rc = r->ops->poll(r, timeout);
    if (WEFT_UNLIKELY(r->hook_pending != 0))
        r->hook->after(r->hook_arg);
    if (weft__heap_count(&r->timers)) {
        int64_t now = weft_now();
        weft__timer *t;
        weft__heap_due(&r->timers, now);
        while ((t = weft__heap_first_ordered(&r->timers)) && t->deadline <= now) {
            weft__heap_remove(&r->timers, t);
            r->timers_fired++;
            t->fire(t);
        }
    }
    return rc;
}

void weft__reactor_abandon(weft__reactor *r)
{
    /* In a forked child: the descriptors are copies of the parent's, and
     * closing them (or unmapping the ring) leaves the parent's untouched.
     * Memory is left as it is: it may be shared with nothing, but the
     * child must not walk structures whose kernel side it does not own. */
    backend_fini(r);
    close(r->wakefd);
    r->wakefd = -1;
}
