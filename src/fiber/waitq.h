/*
 * waitq.h — intrusive FIFO queues of blocked fibers (weft_waitq_t), shared
 * by sync.c and future.c. Not installed.
 *
 * A node lives in the blocked fiber's stack frame. Invariants:
 *   - n->linked is true exactly while @n is in a queue;
 *   - a node whose wait already completed (timeout, cancel) may still be
 *     linked until its fiber runs again: wakers skip such "dead" nodes with
 *     wq_first_active(), which unlinks them;
 *   - the fiber unlinks its own node on every return path (wq_block).
 */
#ifndef WEFT_WAITQ_H
#define WEFT_WAITQ_H

#include "internal.h"

#include <errno.h>

typedef struct weft__wq_node {
    weft__node link;
    weft__wait w;
    bool linked;
    void *data;          /* per-primitive payload                         */
} weft__wq_node;

/* weft_waitq_t (public, opaque) is a weft__list. */
_Static_assert(sizeof(weft_waitq_t) == sizeof(weft__list) &&
                   offsetof(weft_waitq_t, head) == offsetof(weft__list, head) &&
                   offsetof(weft_waitq_t, tail) == offsetof(weft__list, tail),
               "weft_waitq_t must be laid out as a weft__list");

static inline weft__list *wq_list(weft_waitq_t *q)
{
    return (weft__list *)(void *)q;
}

static inline weft__wq_node *wq_head(weft_waitq_t *q)
{
    weft__node *n = wq_list(q)->head;
    return n ? weft__container(n, weft__wq_node, link) : NULL;
}

static inline void wq_push(weft_waitq_t *q, weft__wq_node *n)
{
    weft__list_push(wq_list(q), &n->link);
    n->linked = true;
}

static inline void wq_unlink(weft_waitq_t *q, weft__wq_node *n)
{
    weft__list_remove(wq_list(q), &n->link);
    n->linked = false;
}

/* The first node whose fiber still waits; dead nodes are dropped. */
static inline weft__wq_node *wq_first_active(weft_waitq_t *q)
{
    weft__wq_node *n;
    while ((n = wq_head(q)) && !n->w.active)
        wq_unlink(q, n);
    return n;
}

/* Unlink the first waiting node and complete its wait with @result.
 * Returns false if nobody waits. */
static inline bool wq_wake_one(weft_waitq_t *q, int result)
{
    weft__wq_node *n = wq_first_active(q);
    if (!n)
        return false;
    wq_unlink(q, n);
    weft__wait_complete(&n->w, result);
    return true;
}

static inline void wq_wake_all(weft_waitq_t *q, int result)
{
    weft__wq_node *n;
    while ((n = wq_head(q))) {
        wq_unlink(q, n);
        weft__wait_complete(&n->w, result); /* no-op for dead nodes */
    }
}

/*
 * Block the calling fiber (prechecks done) in @q until woken or @deadline
 * (@kind and @obj: what for, see weft__block).
 * Returns the wake result (0 or what the waker chose), -ETIMEDOUT,
 * -ECANCELED, or -ENOMEM from arming the timer. @n is never left linked.
 */
static inline int wq_block(weft_waitq_t *q, weft__wq_node *n, int64_t deadline,
                           int kind, const void *obj)
{
    weft_sched_t *s = weft__sched_tls();
    weft__wait_init(&n->w, &s->r, weft__fiber_wake, s->current);
    n->linked = false;
    int rc = weft__wait_arm_deadline(&n->w, deadline);
    if (rc < 0) {
        weft__wait_complete(&n->w, rc);
        return rc;
    }
    if (!n->w.active)
        return n->w.result; /* deadline already passed */
    wq_push(q, n);
    rc = weft__block(&n->w, kind, obj);
    if (n->linked)
        wq_unlink(q, n);
    return rc;
}

#endif
