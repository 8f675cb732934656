/*
 * pool.c — bounded resource pool (weft_pool_*).
 *
 * Every resource lives in a slot. The pool counts each slot in exactly one
 * of: idle (on the idle list), in_use (handed out), creating (create
 * callback running, slot reserved) or destroying (destroy callback
 * running), and size = the sum never exceeds max_size: a place is given
 * back only after destroy has returned, so an external limit (a database's
 * connection limit) sees at most max_size resources, including ones being
 * torn down.
 *
 * Waiting acquirers are weft__wq_nodes in their own frames, FIFO
 * (waitq.h). Whoever frees something hands it to the first live waiter
 * before that waiter runs: a healthy resource directly (result 0, node
 * data = slot), or a reserved place to create one in (result POOL_CREATE,
 * creating already counted). That is what keeps the order fair: a fiber
 * arriving in between finds nothing to take.
 *
 * The idle list is LIFO (the most recently used resource is reused first),
 * so surplus resources sink to the tail and are the ones idle_timeout
 * expires; the reaper fiber looks only at the tail.
 */
#include "waitq.h"

#include <stdlib.h>
#include <string.h>

#define POOL_CREATE 1 /* wake result: a place was reserved, create one */

typedef struct pool_slot {
    weft__node link;               /* idle list, while idle             */
    weft_pool_t *pool;
    void *res;
    uint64_t uses;
    int64_t idle_since;
    bool out;                      /* handed out to a lease             */
} pool_slot;

struct weft_pool {
    weft_pool_ops_t ops;
    void *ctx;
    weft_pool_opts_t o;
    weft__list idle;       /* most recently used first                  */
    size_t nidle, in_use, creating, destroying;
    size_t nwaiters, nclosers;
    weft_waitq_t q;        /* acquirers                                  */
    weft_waitq_t closeq;   /* fibers in weft_pool_close()                */
    weft_waitq_t reaperq;  /* the reaper fiber, sleeping                 */
    bool closed;
    bool reaper_alive;
    weft_pool_stats_t st;  /* cumulative counters (gauges are computed)  */
};

static size_t pool_size(const weft_pool_t *p)
{
    return p->nidle + p->in_use + p->creating + p->destroying;
}

static void note_peak(weft_pool_t *p)
{
    size_t n = pool_size(p);
    if (n > p->st.peak_size)
        p->st.peak_size = n;
}

/* Closers re-check their condition whenever something may have ended. */
static void wake_closers(weft_pool_t *p)
{
    if (p->closed)
        wq_wake_all(&p->closeq, 0);
}

static bool drained(const weft_pool_t *p)
{
    return p->in_use == 0 && p->creating == 0 && p->destroying == 0 &&
           p->nwaiters == 0 && !p->reaper_alive && p->nidle == 0;
}

static void idle_push(weft_pool_t *p, pool_slot *s)
{
    weft__list_push_front(&p->idle, &s->link);
    p->nidle++;
}

static void idle_unlink(weft_pool_t *p, pool_slot *s)
{
    weft__list_remove(&p->idle, &s->link);
    p->nidle--;
}

/* The most recently (@first) or least recently idled slot, or NULL. */
static pool_slot *idle_end(const weft_pool_t *p, bool first)
{
    weft__node *n = first ? p->idle.head : p->idle.tail;
    return n ? weft__container(n, pool_slot, link) : NULL;
}

/* The caller has already taken @s out of the idle/in_use counts. */
static void destroy_slot(weft_pool_t *p, pool_slot *s)
{
    p->destroying++;
    p->ops.destroy(p->ctx, s->res);
    p->destroying--;
    p->st.destroyed++;
    free(s);
}

/* A place became free: give it to the first waiter to create in. */
static void place_freed(weft_pool_t *p)
{
    if (!p->closed && pool_size(p) < p->o.max_size) {
        weft__wq_node *n = wq_first_active(&p->q);
        if (n) {
            wq_unlink(&p->q, n);
            p->creating++;
            note_peak(p);
            weft__wait_complete(&n->w, POOL_CREATE);
        }
    }
    wake_closers(p);
}

static void lease_fill(weft_pool_t *p, weft_pool_lease_t *lease, pool_slot *s)
{
    s->out = true;
    s->uses++;
    lease->res = s->res;
    lease->uses = s->uses;
    lease->slot_ = s;
    lease->deadline = p->o.use_timeout > 0 ? weft_deadline_in(p->o.use_timeout)
                                           : WEFT_FOREVER;
    p->st.acquired++;
}

/* Create in the place reserved for the caller (creating counted). */
static int do_create(weft_pool_t *p, weft_pool_lease_t *lease, int64_t deadline)
{
    pool_slot *s = calloc(1, sizeof *s);
    int rc = s ? p->ops.create(p->ctx, &s->res, deadline) : -ENOMEM;
    p->creating--;
    if (rc < 0) {
        if (s)
            p->st.create_failed++;
        free(s);
        place_freed(p); /* the next waiter tries for itself */
        return rc;
    }
    p->st.created++;
    s->pool = p;
    if (p->closed) { /* closed while we were creating */
        destroy_slot(p, s);
        wake_closers(p);
        return -ESHUTDOWN;
    }
    p->in_use++;
    lease_fill(p, lease, s);
    return 0;
}

static void *reaper_main(void *arg)
{
    weft_pool_t *p = arg;
    while (!p->closed && idle_end(p, false)) {
        pool_slot *s = idle_end(p, false);
        int64_t expiry = s->idle_since + p->o.idle_timeout;
        if (weft_now() >= expiry) {
            idle_unlink(p, s);
            p->st.expired++;
            destroy_slot(p, s);
            place_freed(p);
            continue;
        }
        weft__wq_node n;
        if (wq_block(&p->reaperq, &n, expiry, WEFT_WAIT_POOL, p) == -ECANCELED)
            break;
    }
    p->reaper_alive = false;
    wake_closers(p);
    return NULL;
}

static void ensure_reaper(weft_pool_t *p)
{
    if (p->o.idle_timeout <= 0 || p->reaper_alive || p->closed)
        return;
    /* If the fiber cannot be started, idle resources just do not expire
     * until the next release tries again. */
    if (weft_spawn(reaper_main, p, NULL, NULL) == 0)
        p->reaper_alive = true;
}

int weft_pool_create(weft_pool_t **out, const weft_pool_ops_t *ops,
                     void *ctx, const weft_pool_opts_t *opts)
{
    if (!out || !ops || !ops->create || !ops->destroy || !opts ||
        opts->max_size == 0 || opts->idle_timeout < 0 || opts->use_timeout < 0)
        return -EINVAL;
    weft_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->ops = *ops;
    p->ctx = ctx;
    p->o = *opts;
    *out = p;
    return 0;
}

int weft_pool_acquire(weft_pool_t *p, weft_pool_lease_t *lease, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, p && lease);
    if (rc < 0)
        return rc;
    memset(lease, 0, sizeof *lease);
    if (p->closed)
        return -ESHUTDOWN;
    if (!wq_first_active(&p->q)) { /* nobody ahead of us */
        while (idle_end(p, true)) {
            pool_slot *s = idle_end(p, true);
            idle_unlink(p, s);
            p->in_use++;
            if (p->ops.validate) {
                s->out = true; /* not idle while validate may block */
                int v = p->ops.validate(p->ctx, s->res);
                s->out = false;
                if (v < 0 || p->closed) {
                    p->in_use--;
                    if (v < 0)
                        p->st.invalid++;
                    /* Keep the place: destroy, then create in it (no
                     * fiber switch between the two counts). */
                    destroy_slot(p, s);
                    if (p->closed) {
                        wake_closers(p);
                        return -ESHUTDOWN;
                    }
                    p->creating++;
                    return do_create(p, lease, deadline);
                }
            }
            lease_fill(p, lease, s);
            return 0;
        }
        if (pool_size(p) < p->o.max_size) {
            p->creating++;
            note_peak(p);
            return do_create(p, lease, deadline);
        }
    }
    weft__wq_node n;
    n.data = NULL;
    p->nwaiters++;
    rc = wq_block(&p->q, &n, deadline, WEFT_WAIT_POOL, p);
    p->nwaiters--;
    if (rc == 0) {
        lease_fill(p, lease, n.data); /* handed over, in_use counted */
        return 0;
    }
    if (rc == POOL_CREATE)
        return do_create(p, lease, deadline);
    if (rc == -ETIMEDOUT)
        p->st.timeouts++;
    wake_closers(p);
    return rc;
}

int weft_pool_release(weft_pool_t *p, weft_pool_lease_t *lease, int flags)
{
    if (!p || !lease || !lease->slot_ || (flags & ~WEFT_POOL_BROKEN))
        return -EINVAL;
    pool_slot *s = lease->slot_;
    if (s->pool != p || !s->out)
        return -EINVAL;
    memset(lease, 0, sizeof *lease);
    s->out = false;
    p->in_use--;
    if (flags & WEFT_POOL_BROKEN) {
        p->st.broken++;
    } else if (p->closed) {
        /* destroyed below */
    } else if (p->o.max_uses && s->uses >= p->o.max_uses) {
        p->st.recycled++;
    } else {
        weft__wq_node *n = wq_first_active(&p->q);
        if (n) { /* hand-off: the waiter owns it before it runs */
            wq_unlink(&p->q, n);
            p->in_use++;
            n->data = s;
            weft__wait_complete(&n->w, 0);
        } else {
            s->idle_since = weft_now();
            idle_push(p, s);
            ensure_reaper(p);
        }
        return 0;
    }
    destroy_slot(p, s);
    place_freed(p);
    return 0;
}

struct with_ctx {
    int (*fn)(void *, weft_pool_lease_t *);
    void *arg;
    weft_pool_lease_t *lease;
};

static int with_trampoline(void *arg)
{
    struct with_ctx *c = arg;
    return c->fn(c->arg, c->lease);
}

int weft_pool_with(weft_pool_t *p, int (*fn)(void *arg, weft_pool_lease_t *lease),
                   void *arg, int64_t deadline)
{
    if (!fn)
        return weft__current() ? -EINVAL : -EPERM;
    weft_pool_lease_t lease;
    int rc = weft_pool_acquire(p, &lease, deadline);
    if (rc < 0)
        return rc;
    struct with_ctx c = {fn, arg, &lease};
    rc = weft_scope_run(lease.deadline, with_trampoline, &c);
    bool broken = lease.res == NULL ||
                  (rc == -ETIMEDOUT && lease.deadline != WEFT_FOREVER &&
                   weft_now() >= lease.deadline);
    weft_pool_release(p, &lease, broken ? WEFT_POOL_BROKEN : 0);
    return rc;
}

int weft_pool_close(weft_pool_t *p, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, p != NULL);
    if (rc < 0)
        return rc;
    p->closed = true;
    wq_wake_all(&p->q, -ESHUTDOWN);
    wq_wake_all(&p->reaperq, 0);
    while (idle_end(p, true)) {
        pool_slot *s = idle_end(p, true);
        idle_unlink(p, s);
        destroy_slot(p, s);
    }
    while (!drained(p)) {
        weft__wq_node n;
        p->nclosers++;
        rc = wq_block(&p->closeq, &n, deadline, WEFT_WAIT_POOL, p);
        p->nclosers--;
        if (rc < 0)
            return rc;
    }
    return 0;
}

int weft_pool_destroy(weft_pool_t *p)
{
    if (!p)
        return -EINVAL;
    if (p->in_use || p->creating || p->destroying || p->nwaiters ||
        p->nclosers || p->reaper_alive)
        return -EBUSY;
    while (idle_end(p, true)) {
        pool_slot *s = idle_end(p, true);
        idle_unlink(p, s);
        destroy_slot(p, s);
    }
    free(p);
    return 0;
}

int weft_pool_stats(const weft_pool_t *p, weft_pool_stats_t *st)
{
    if (!p || !st)
        return -EINVAL;
    *st = p->st;
    st->idle = p->nidle;
    st->in_use = p->in_use;
    st->creating = p->creating;
    st->size = pool_size(p);
    st->waiters = p->nwaiters;
    return 0;
}
