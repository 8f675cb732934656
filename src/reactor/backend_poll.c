/*
 * backend_poll.c — portable poll(2) backend.
 *
 * Keeps a dense pollfd array of the descriptors that have waiters (slot 0
 * is the wake-up eventfd); each descriptor's slot asks for the union of its
 * waiters' events. Level-triggered by nature.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reactor.h"
#include "evmask.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>

/* The backend's own state (weft__reactor.bstate): the pollfd array (slot
 * 0 the wake-up eventfd) and each descriptor's slot in it. */
typedef struct plstate {
    struct pollfd *pfds;
    int npfds, cap;
    int32_t *slot;           /* slot[fd]: index in pfds, 0 none (pfds[0]
                                is the wake-up descriptor's)            */
    int nslot;
} plstate;

static plstate *S(weft__reactor *r) { return r->bstate; }

static int pl_init(weft__reactor *r)
{
    plstate *st = S(r);
    st->cap = 64;
    st->pfds = malloc((size_t)st->cap * sizeof *st->pfds);
    if (!st->pfds)
        return -ENOMEM;
    st->pfds[0] = (struct pollfd){.fd = r->wakefd, .events = POLLIN};
    st->npfds = 1;
    return 0;
}

static void pl_fini(weft__reactor *r)
{
    plstate *st = S(r);
    free(st->pfds);
    free(st->slot);
}

static int32_t slot_of(const plstate *st, int fd)
{
    return fd < st->nslot ? st->slot[fd] : 0;
}

static void slot_remove(plstate *st, int fd)
{
    int i = slot_of(st, fd), last = st->npfds - 1;
    if (i == 0)
        return;
    if (i != last) {
        st->pfds[i] = st->pfds[last];
        st->slot[st->pfds[i].fd] = i;
    }
    st->npfds--;
    st->slot[fd] = 0;
}

static int pl_fd_update(weft__reactor *r, int fd)
{
    plstate *st = S(r);
    uint32_t interest = 0;
    for (weft__wait *w = weft__fd_first(&r->fds[fd]); w; w = weft__fd_next(w))
        interest |= w->events;
    if (!interest) {
        slot_remove(st, fd);
        return 0;
    }
    if (weft__fdtab_reach(&st->slot, &st->nslot, fd, sizeof *st->slot) < 0)
        return -ENOMEM;
    if (st->slot[fd] == 0) {
        if (st->npfds == st->cap) {
            int ncap = st->cap * 2;
            struct pollfd *np = realloc(st->pfds, (size_t)ncap * sizeof *np);
            if (!np)
                return -ENOMEM;
            st->pfds = np;
            st->cap = ncap;
        }
        st->slot[fd] = st->npfds++;
        st->pfds[st->slot[fd]].fd = fd;
    }
    st->pfds[st->slot[fd]].events = weft__ev_to_poll(interest);
    st->pfds[st->slot[fd]].revents = 0;
    return 0;
}

static void pl_fd_forget(weft__reactor *r, int fd) { slot_remove(S(r), fd); }

static int pl_poll(weft__reactor *r, int64_t timeout_ns)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ns >= 0) {
        ts = weft__ns_timespec(timeout_ns);
        tp = &ts;
    }
    plstate *st = S(r);
    int n = ppoll(st->pfds, (nfds_t)st->npfds, tp, NULL);
    weft__reactor_polled(r);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    if (n == 0)
        return 0;
    /* Walk down: completing a descriptor's waiters may move the last slot
     * into the current one, never disturbing slots not yet visited. */
    for (int i = st->npfds - 1; i >= 1; i--) {
        struct pollfd p = st->pfds[i];
        if (!p.revents)
            continue;
        st->pfds[i].revents = 0;
        weft__reactor_fd_event(r, weft__fd_token(p.fd, r->fds[p.fd].gen),
                               weft__poll_to_ev((unsigned)p.revents));
    }
    if (st->pfds[0].revents) {
        st->pfds[0].revents = 0;
        weft__reactor_drain_posts(r);
    }
    return 0;
}

const weft__backend_ops weft__backend_poll = {
    WEFT__BACKEND_READINESS("poll", pl),
};
