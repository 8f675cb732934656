/*
 * backend_epoll.c — Linux epoll backend.
 *
 * A descriptor is added once, edge-triggered for input, output and
 * priority data, the first time a fiber waits on it, and stays registered
 * until weft closes or forgets it: no epoll_ctl per wait. Edge triggering is
 * safe because every wait follows a system call that returned EAGAIN (or,
 * for weft_wait_fd, a zero-timeout poll that found the fd not ready), and
 * EPOLL_CTL_ADD reports readiness that already exists.
 */
#include "reactor.h"
#include "evmask.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define EP_BATCH 256

/* The backend's own state (weft__reactor.bstate): the epoll set and which
 * descriptors are in it. */
typedef struct epstate {
    int epfd;
    uint8_t *reg;            /* reg[fd]: added to the set               */
    int nreg;
} epstate;

static epstate *S(weft__reactor *r) { return r->bstate; }

static int ep_init(weft__reactor *r)
{
    epstate *st = S(r);
    st->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (st->epfd < 0)
        return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = WEFT__WAKE_TOKEN};
    if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, r->wakefd, &ev) < 0) {
        int e = errno;
        close(st->epfd);
        return -e;
    }
    return 0;
}

static void ep_fini(weft__reactor *r)
{
    epstate *st = S(r);
    close(st->epfd);
    free(st->reg);
}

static int ep_fd_update(weft__reactor *r, int fd)
{
    epstate *st = S(r);
    weft__fdstate *fs = &r->fds[fd];
    if ((fd < st->nreg && st->reg[fd]) || weft__list_empty(&fs->waits))
        return 0;
    if (weft__fdtab_reach(&st->reg, &st->nreg, fd, sizeof *st->reg) < 0)
        return -ENOMEM;
    struct epoll_event ev = {
        .events = EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP | EPOLLET,
        .data.u64 = weft__fd_token(fd, fs->gen),
    };
    if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        /* Still registered from a previous life (a dup of it is open). */
        if (errno != EEXIST || epoll_ctl(st->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
            return -errno;
    }
    st->reg[fd] = 1;
    return 0;
}

static void ep_fd_forget(weft__reactor *r, int fd)
{
    epstate *st = S(r);
    if (fd < st->nreg && st->reg[fd]) {
        struct epoll_event ev = {0};
        (void)epoll_ctl(st->epfd, EPOLL_CTL_DEL, fd, &ev);
        st->reg[fd] = 0;
    }
}

static int ep_poll(weft__reactor *r, int64_t timeout_ns)
{
    struct epoll_event evs[EP_BATCH];
    int n;
    /* epoll_pwait2 (Linux 5.11) takes a nanosecond timeout; without it
     * (ENOSYS, or EPERM/EINVAL from a seccomp profile that predates it)
     * epoll_wait with the timeout rounded up to milliseconds. */
    static atomic_int no_pwait2;
    if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
        struct timespec ts, *tp = NULL;
        if (timeout_ns >= 0) {
            ts = weft__ns_timespec(timeout_ns);
            tp = &ts;
        }
        n = epoll_pwait2(S(r)->epfd, evs, EP_BATCH, tp, NULL);
        if (n < 0 && (errno == ENOSYS || errno == EPERM || errno == EINVAL ||
                      errno == EOPNOTSUPP)) {
            atomic_store(&no_pwait2, 1);
            return ep_poll(r, timeout_ns);
        }
    } else {
        int ms = timeout_ns < 0 ? -1
                 : timeout_ns > (int64_t)INT32_MAX * 1000000
                     ? INT32_MAX
                     : (int)((timeout_ns + 999999) / 1000000);
        n = epoll_wait(S(r)->epfd, evs, EP_BATCH, ms);
    }
    weft__reactor_polled(r);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    /* epoll's bits are poll's on Linux. */
    _Static_assert(EPOLLIN == POLLIN && EPOLLPRI == POLLPRI && EPOLLOUT == POLLOUT &&
                       EPOLLERR == POLLERR && EPOLLHUP == POLLHUP && EPOLLRDHUP == POLLRDHUP,
                   "epoll and poll event bits differ");
    for (int i = 0; i < n; i++) {
        uint32_t e = evs[i].events, m = weft__poll_to_ev(e);
        if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            m |= WEFT__EV_PEER_GONE;
        weft__reactor_fd_event(r, evs[i].data.u64, m);
    }
    return 0;
}

const weft__backend_ops weft__backend_epoll = {
    WEFT__BACKEND_READINESS("epoll", ep),
};
