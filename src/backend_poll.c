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
#include "internal.h"
#include "evmask.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>

static struct pollfd *pfds(weft__reactor *r) { return r->pfds; }

static int pl_init(weft__reactor *r)
{
    r->pfd_cap = 64;
    r->pfds = malloc((size_t)r->pfd_cap * sizeof(struct pollfd));
    if (!r->pfds)
        return -ENOMEM;
    pfds(r)[0] = (struct pollfd){.fd = r->wakefd, .events = POLLIN};
    r->npfds = 1;
    return 0;
}

static void pl_fini(weft__reactor *r)
{
    free(r->pfds);
    r->pfds = NULL;
    r->npfds = r->pfd_cap = 0;
}

static void slot_remove(weft__reactor *r, int fd)
{
    weft__fdstate *st = &r->fds[fd];
    int i = st->pidx, last = r->npfds - 1;
    if (i < 0)
        return;
    if (i != last) {
        pfds(r)[i] = pfds(r)[last];
        r->fds[pfds(r)[i].fd].pidx = i;
    }
    r->npfds--;
    st->pidx = -1;
}

static int pl_fd_update(weft__reactor *r, int fd)
{
    weft__fdstate *st = &r->fds[fd];
    uint32_t interest = 0;
    for (weft__wait *w = weft__fd_first(st); w; w = weft__fd_next(w))
        interest |= w->events;
    if (!interest) {
        slot_remove(r, fd);
        return 0;
    }
    if (st->pidx < 0) {
        if (r->npfds == r->pfd_cap) {
            int ncap = r->pfd_cap * 2;
            struct pollfd *np = realloc(r->pfds, (size_t)ncap * sizeof *np);
            if (!np)
                return -ENOMEM;
            r->pfds = np;
            r->pfd_cap = ncap;
        }
        st->pidx = r->npfds++;
        pfds(r)[st->pidx].fd = fd;
    }
    pfds(r)[st->pidx].events = weft__ev_to_poll(interest);
    pfds(r)[st->pidx].revents = 0;
    return 0;
}

static void pl_fd_forget(weft__reactor *r, int fd) { slot_remove(r, fd); }

static int pl_poll(weft__reactor *r, int64_t timeout_ns)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ns >= 0) {
        ts = weft__ns_timespec(timeout_ns);
        tp = &ts;
    }
    int n = ppoll(pfds(r), (nfds_t)r->npfds, tp, NULL);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    if (n == 0)
        return 0;
    /* Walk down: completing a descriptor's waiters may move the last slot
     * into the current one, never disturbing slots not yet visited. */
    for (int i = r->npfds - 1; i >= 1; i--) {
        struct pollfd p = pfds(r)[i];
        if (!p.revents)
            continue;
        pfds(r)[i].revents = 0;
        weft__reactor_fd_event(r, weft__fd_token(p.fd, r->fds[p.fd].gen),
                               weft__poll_to_ev((unsigned)p.revents));
    }
    if (pfds(r)[0].revents) {
        pfds(r)[0].revents = 0;
        weft__reactor_drain_posts(r);
    }
    return 0;
}

const weft__backend_ops weft__backend_poll = {
    .name = "poll",
    .init = pl_init,
    .fini = pl_fini,
    .fd_update = pl_fd_update,
    .fd_forget = pl_fd_forget,
    .poll = pl_poll,
};
