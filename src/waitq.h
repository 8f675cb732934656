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
    struct weft__wq_node *next, *prev;
    weft__wait w;
    bool linked;
    void *data;          /* per-primitive payload                         */
} weft__wq_node;

static inline void wq_push(weft_waitq_t *q, weft__wq_node *n)
{
    n->next = NULL;
    n->prev = q->tail;
    if (q->tail)
        ((weft__wq_node *)q->tail)->next = n;
    else
        q->head = n;
    q->tail = n;
    n->linked = true;
}

static inline void wq_unlink(weft_waitq_t *q, weft__wq_node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        q->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        q->tail = n->prev;
    n->next = n->prev = NULL;
    n->linked = false;
}

/* The first node whose fiber still waits; dead nodes are dropped. */
static inline weft__wq_node *wq_first_active(weft_waitq_t *q)
{
    weft__wq_node *n;
    while ((n = q->head) && !n->w.active)
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
    while ((n = q->head)) {
        wq_unlink(q, n);
        weft__wait_complete(&n->w, result); /* no-op for dead nodes */
    }
}

/*
 * Block the calling fiber (prechecks done) in @q until woken or @deadline.
 * Returns the wake result (0 or what the waker chose), -ETIMEDOUT,
 * -ECANCELED, or -ENOMEM from arming the timer. @n is never left linked.
 */
static inline int wq_block(weft_waitq_t *q, weft__wq_node *n, int64_t deadline)
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
    rc = weft__block(&n->w);
    if (n->linked)
        wq_unlink(q, n);
    return rc;
}

#endif
