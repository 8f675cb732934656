/*
 * chan.c — channels and select.
 *
 * A channel has a ring buffer (capacity may be 0) and two FIFO queues of
 * waiting operations. A blocked send/recv/select is one "selection" (a
 * weft__wait in the fiber's frame) plus one node per operation, queued on
 * that operation's channel. The operation that finds a waiting partner
 * performs the transfer itself — copies the element to or from the
 * partner's buffer — and completes the partner's selection, recording
 * which of its operations fired; the partner only unlinks its other nodes
 * when it runs. A node whose selection already completed (fired elsewhere,
 * timed out, cancelled) is dead and is skipped and unlinked by anyone who
 * meets it.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct selection {
    weft__wait w;
    size_t index;        /* which operation fired                          */
    int result;          /* its result: 0 or -EPIPE                        */
} selection;

typedef struct cnode {
    weft__node link;     /* in its channel's send or receive queue        */
    selection *sel;
    weft_chan_t *chan;
    void *elem;          /* sender: element to send; receiver: where to put */
    size_t index;
    bool linked;
} cnode;

typedef weft__list cqueue;

struct weft_chan {
    char *buf;
    size_t elem, cap, head, len;
    cqueue sendq, recvq;
    bool closed;
};

static void cq_push(cqueue *q, cnode *n)
{
    weft__list_push(q, &n->link);
    n->linked = true;
}

static void cq_unlink(cqueue *q, cnode *n)
{
    weft__list_remove(q, &n->link);
    n->linked = false;
}

static cnode *cq_head(const cqueue *q)
{
    return q->head ? weft__container(q->head, cnode, link) : NULL;
}

/* First node whose selection still waits; dead ones are unlinked. */
static inline cnode *cq_first(cqueue *q)
{
    cnode *n;
    while ((n = cq_head(q)) && !n->sel->w.active)
        cq_unlink(q, n);
    return n;
}

/* Complete @n's selection: operation @n fired with @result. */
static void fire(cqueue *q, cnode *n, int result)
{
    cq_unlink(q, n);
    n->sel->index = n->index;
    n->sel->result = result;
    weft__wait_complete(&n->sel->w, 0);
}

int weft_chan_create(weft_chan_t **out, size_t elem_size, size_t capacity)
{
    if (!out || (elem_size && capacity > SIZE_MAX / elem_size))
        return -EINVAL;
    weft_chan_t *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    size_t bytes = elem_size * capacity;
    if (bytes) {
        c->buf = malloc(bytes);
        if (!c->buf) {
            free(c);
            return -ENOMEM;
        }
    }
    c->elem = elem_size;
    c->cap = capacity;
    *out = c;
    return 0;
}

static inline char *slot(weft_chan_t *c, size_t i)
{
    if (!c->elem)
        return NULL; /* zero-size elements: no buffer */
    return c->buf + ((c->head + i) % c->cap) * c->elem;
}

static inline void copy(weft_chan_t *c, void *dst, const void *src)
{
    if (dst && c->elem)
        memcpy(dst, src, c->elem);
}

/* Non-blocking attempts: 0 done, -EPIPE closed, -EAGAIN would block. */
static int try_send(weft_chan_t *c, const void *elem)
{
    if (c->closed)
        return -EPIPE;
    cnode *r = cq_first(&c->recvq);
    if (r) { /* a receiver waits: the buffer is empty; hand over directly */
        copy(c, r->elem, elem);
        fire(&c->recvq, r, 0);
        return 0;
    }
    if (c->len < c->cap) {
        if (c->elem)
            memcpy(slot(c, c->len), elem, c->elem);
        c->len++;
        return 0;
    }
    return -EAGAIN;
}

static int try_recv(weft_chan_t *c, void *elem)
{
    if (c->len) {
        copy(c, elem, slot(c, 0));
        c->head = (c->head + 1) % c->cap;
        c->len--;
        cnode *s = cq_first(&c->sendq);
        if (s) { /* refill from the first waiting sender */
            if (c->elem)
                memcpy(slot(c, c->len), s->elem, c->elem);
            c->len++;
            fire(&c->sendq, s, 0);
        }
        return 0;
    }
    cnode *s = cq_first(&c->sendq);
    if (s) { /* unbuffered rendezvous */
        copy(c, elem, s->elem);
        fire(&c->sendq, s, 0);
        return 0;
    }
    return c->closed ? -EPIPE : -EAGAIN;
}

int weft_chan_select(weft_chan_op_t *ops, size_t n, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, ops && n > 0 && n <= (size_t)INT32_MAX);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (!ops[i].chan ||
            (ops[i].op != WEFT_CHAN_SEND && ops[i].op != WEFT_CHAN_RECV) ||
            (ops[i].op == WEFT_CHAN_SEND && !ops[i].elem && ops[i].chan->elem))
            return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        weft_chan_op_t *o = &ops[i];
        rc = o->op == WEFT_CHAN_SEND ? try_send(o->chan, o->elem)
                                     : try_recv(o->chan, o->elem);
        if (rc != -EAGAIN) {
            o->result = rc;
            return (int)i;
        }
    }

    weft_sched_t *s = weft__sched_tls();
    selection sel;
    weft__wait_init(&sel.w, &s->r, weft__fiber_wake, s->current);
    rc = weft__wait_arm_deadline(&sel.w, deadline);
    if (rc < 0) {
        weft__wait_complete(&sel.w, rc);
        return rc;
    }
    if (!sel.w.active)
        return sel.w.result;
    cnode small[4];
    cnode *nodes = small;
    if (n > 4 && !(nodes = malloc(n * sizeof *nodes))) {
        weft__wait_complete(&sel.w, -ENOMEM);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        cnode *cn = &nodes[i];
        cn->sel = &sel;
        cn->chan = ops[i].chan;
        cn->elem = ops[i].elem;
        cn->index = i;
        cq_push(ops[i].op == WEFT_CHAN_SEND ? &cn->chan->sendq
                                            : &cn->chan->recvq, cn);
    }
    rc = weft__block(&sel.w,
                     WEFT__WK(WEFT_WAIT_CHAN,
                              n != 1 ? 0 : ops[0].op == WEFT_CHAN_SEND ? WEFT_WRITABLE
                                                                      : WEFT_READABLE),
                     ops[0].chan);
    for (size_t i = 0; i < n; i++) {
        cnode *cn = &nodes[i];
        if (cn->linked)
            cq_unlink(ops[i].op == WEFT_CHAN_SEND ? &cn->chan->sendq
                                                  : &cn->chan->recvq, cn);
    }
    if (nodes != small)
        free(nodes);
    if (rc < 0)
        return rc;
    ops[sel.index].result = sel.result;
    return (int)sel.index;
}

int weft_chan_send(weft_chan_t *c, const void *elem, int64_t deadline)
{
    weft_chan_op_t op = {c, WEFT_CHAN_SEND, (void *)elem, 0};
    int rc = weft_chan_select(&op, 1, deadline);
    return rc < 0 ? rc : op.result;
}

int weft_chan_recv(weft_chan_t *c, void *elem, int64_t deadline)
{
    weft_chan_op_t op = {c, WEFT_CHAN_RECV, elem, 0};
    int rc = weft_chan_select(&op, 1, deadline);
    return rc < 0 ? rc : op.result;
}

int weft_chan_close(weft_chan_t *c)
{
    if (!c)
        return -EINVAL;
    if (c->closed)
        return -EALREADY;
    c->closed = true;
    cnode *n;
    while ((n = cq_first(&c->sendq)))
        fire(&c->sendq, n, -EPIPE);
    /* Waiting receivers imply an empty buffer. */
    while ((n = cq_first(&c->recvq)))
        fire(&c->recvq, n, -EPIPE);
    return 0;
}

size_t weft_chan_len(const weft_chan_t *c)
{
    return c ? c->len : 0;
}

int weft_chan_destroy(weft_chan_t *c)
{
    if (!c)
        return -EINVAL;
    cqueue *qs[2] = {&c->sendq, &c->recvq};
    for (int i = 0; i < 2; i++) {
        cnode *n;
        while ((n = cq_head(qs[i]))) {
            cq_unlink(qs[i], n);
            weft__wait_complete(&n->sel->w, -EIDRM);
        }
    }
    free(c->buf);
    free(c);
    return 0;
}
