/*
 * future.c — promises, futures, then/any/all, await.
 *
 * One heap "state" per result, shared by the promise handle and any number
 * of future handles (weft_promise_t / weft_future_t are both pointers to
 * it), with an atomic reference count. The state machine
 *
 *     PENDING --CAS--> SETTING --store(release)--> SET
 *
 * lets any thread settle it exactly once. Delivery — waking awaiting fibers
 * and running callbacks — happens only on the owner loop's thread, which is
 * the only thread that touches the callback list, the waiter queue and the
 * `delivered` flag: inline when settled there, else through a post node
 * embedded in the state (so a cross-thread set never allocates).
 *
 * A then() stage is a state whose "link" callback node is embedded in it and
 * registered on the source, so each stage costs one allocation. Delivery
 * nests (a settled stage settles the next inline); past a depth of 64 the
 * next delivery is posted to the loop instead, so long chains cannot
 * overflow a fiber stack.
 */
#include "waitq.h"

#include <stdlib.h>

enum { F_PENDING = 0, F_SETTING = 1, F_SET = 2 };
enum { K_NONE = 0, K_VALUE = 1, K_FUTURE = 2 };
#define MAX_DEPTH 64

typedef struct cbnode {
    weft__node node;         /* in fstate.cbs                              */
    weft_future_cb fn;
    void *arg;
    bool heap;
} cbnode;

typedef struct fstate fstate;
struct fstate {
    int refs;                /* atomic                                     */
    int state;               /* atomic: F_PENDING / F_SETTING / F_SET      */
    int err;                 /* written before F_SET, read after           */
    void *value;
    weft_sched_t *sched;     /* owner loop; immutable                      */
    /* owner thread only */
    bool delivered;
    weft__list cbs;          /* cbnode.node, in subscription order         */
    weft_waitq_t waiters;
    weft__post post;         /* cross-thread or deferred delivery          */
    /* this state as the output of a then() */
    int kind;
    weft_then_fn vfn;
    weft_then_future_fn ffn;
    void *fn_arg;
    fstate *src;             /* reference held until the link fires        */
    cbnode link;             /* registered on src                          */
    cbnode fwd;              /* registered on the inner future             */
    fstate *inner;
    /* any / all */
    int remaining;           /* atomic                                     */
    int first_err;           /* atomic                                     */
};

static __thread int depth;

static inline fstate *S(const void *h) { return (fstate *)h; }

static inline int st_load(const fstate *st)
{
    return __atomic_load_n(&st->state, __ATOMIC_ACQUIRE);
}

static void ref(fstate *st)
{
    __atomic_fetch_add(&st->refs, 1, __ATOMIC_RELAXED);
}

static void unref(fstate *st)
{
    if (__atomic_fetch_sub(&st->refs, 1, __ATOMIC_ACQ_REL) != 1)
        return;
    weft__node *n;
    while ((n = weft__list_pop(&st->cbs))) {
        cbnode *c = weft__container(n, cbnode, node);
        if (c->heap)
            free(c);
    }
    free(st);
}

static fstate *st_new(int refs)
{
    weft_sched_t *s = weft_sched_self();
    if (!s)
        return NULL;
    fstate *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->refs = refs;
    st->sched = s;
    return st;
}

static void deliver(fstate *st)
{
    st->delivered = true;
    ref(st);
    depth++;
    wq_wake_all(&st->waiters, 0);
    weft__node *n;
    while ((n = weft__list_pop(&st->cbs))) {
        cbnode *c = weft__container(n, cbnode, node);
        weft_future_cb fn = c->fn;
        void *arg = c->arg;
        if (c->heap)
            free(c);
        fn(arg, st->err, st->value);
    }
    depth--;
    unref(st);
}

static void posted_deliver(void *p)
{
    fstate *st = p;
    deliver(st);
    unref(st); /* the post's reference */
}

/* Settle from any thread. 0, or -EALREADY if it already was. */
static int settle(fstate *st, int err, void *value)
{
    int expect = F_PENDING;
    if (!__atomic_compare_exchange_n(&st->state, &expect, F_SETTING, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return -EALREADY;
    st->err = err;
    st->value = err ? NULL : value;
    __atomic_store_n(&st->state, F_SET, __ATOMIC_RELEASE);
    if (weft__sched_tls() == st->sched && depth < MAX_DEPTH) {
        deliver(st);
    } else {
        ref(st);
        st->post.fn = posted_deliver;
        st->post.arg = st;
        st->post.embedded = true;
        weft__reactor_post_node(&st->sched->r, &st->post);
    }
    return 0;
}

/* Owner thread: run @c when @st settles (now if already delivered). */
static void subscribe_node(fstate *st, cbnode *c)
{
    if (st->delivered) {
        weft_future_cb fn = c->fn;
        void *arg = c->arg;
        if (c->heap)
            free(c);
        fn(arg, st->err, st->value);
        return;
    }
    weft__list_push(&st->cbs, &c->node);
}

static inline bool on_owner(const fstate *st)
{
    return weft__sched_tls() == st->sched;
}

/* ---- promise ------------------------------------------------------------ */

int weft_promise_create(weft_promise_t **out)
{
    if (!out)
        return -EINVAL;
    fstate *st = st_new(1);
    if (!st)
        return -ENOMEM;
    *out = (weft_promise_t *)st;
    return 0;
}

weft_future_t *weft_promise_future(weft_promise_t *p)
{
    if (!p)
        return NULL;
    ref(S(p));
    return (weft_future_t *)p;
}

int weft_promise_set_value(weft_promise_t *p, void *value)
{
    return p ? settle(S(p), 0, value) : -EINVAL;
}

int weft_promise_set_error(weft_promise_t *p, int err)
{
    if (!p || err >= 0)
        return -EINVAL;
    return settle(S(p), err, NULL);
}

int weft_promise_try_set(weft_promise_t *p, int err, void *value)
{
    if (!p || err > 0)
        return -EINVAL;
    return settle(S(p), err, value) == 0 ? 1 : 0;
}

int weft_promise_is_set(const weft_promise_t *p)
{
    return p && st_load(S(p)) != F_PENDING;
}

void weft_promise_release(weft_promise_t *p)
{
    if (!p)
        return;
    (void)settle(S(p), -EPIPE, NULL);
    unref(S(p));
}

/* ---- future ------------------------------------------------------------- */

static weft_future_t *ready(int err, void *value)
{
    fstate *st = st_new(1);
    if (!st)
        return NULL;
    st->err = err;
    st->value = value;
    st->state = F_SET;
    st->delivered = true;
    return (weft_future_t *)st;
}

weft_future_t *weft_future_ready(void *value) { return ready(0, value); }

weft_future_t *weft_future_failed(int err)
{
    return err < 0 ? ready(err, NULL) : NULL;
}

weft_future_t *weft_future_ref(weft_future_t *f)
{
    if (f)
        ref(S(f));
    return f;
}

void weft_future_release(weft_future_t *f)
{
    if (f)
        unref(S(f));
}

int weft_future_is_set(const weft_future_t *f)
{
    return f && st_load(S(f)) == F_SET;
}

int weft_future_try_get(const weft_future_t *f, void **value)
{
    if (!f)
        return -EINVAL;
    const fstate *st = S(f);
    if (st_load(st) != F_SET)
        return -EAGAIN;
    if (st->err)
        return st->err;
    if (value)
        *value = st->value;
    return 0;
}

int weft_future_get(weft_future_t *f, void **value, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, f != NULL);
    if (rc < 0)
        return rc;
    fstate *st = S(f);
    if (!on_owner(st))
        return -EPERM;
    /* Wait for the delivery, not just the value: once get() returns, no
     * posted delivery of @f is left in the loop's queue (a loop that then
     * exits leaves nothing behind). */
    if (!st->delivered) {
        weft__wq_node n;
        rc = wq_block(&st->waiters, &n, deadline, WEFT_WAIT_FUTURE, f);
        if (rc < 0 && !((rc == -ETIMEDOUT || rc == -EAGAIN) && st_load(st) == F_SET))
            return rc;
    }
    return weft_future_try_get(f, value);
}

int weft_future_subscribe(weft_future_t *f, weft_future_cb cb, void *arg)
{
    if (!f || !cb)
        return -EINVAL;
    fstate *st = S(f);
    if (!on_owner(st))
        return -EPERM;
    cbnode *c = malloc(sizeof *c);
    if (!c)
        return -ENOMEM;
    *c = (cbnode){.fn = cb, .arg = arg, .heap = true};
    subscribe_node(st, c);
    return 0;
}

/* ---- then ---------------------------------------------------------------- */

static void fwd_fired(void *arg, int err, void *value)
{
    fstate *dst = arg;
    fstate *inner = dst->inner;
    dst->inner = NULL;
    (void)settle(dst, err, value);
    unref(inner);
    unref(dst); /* the link's reference, carried by fwd */
}

static void link_fired(void *arg, int err, void *value)
{
    fstate *dst = arg;
    fstate *src = dst->src;
    dst->src = NULL;
    if (err) {
        (void)settle(dst, err, NULL);
    } else if (dst->kind == K_VALUE) {
        void *out = NULL;
        int rc = dst->vfn(dst->fn_arg, value, &out);
        (void)settle(dst, rc < 0 ? rc : 0, out);
    } else {
        weft_future_t *inner = dst->ffn(dst->fn_arg, value);
        if (!inner) {
            (void)settle(dst, -ENOMEM, NULL);
        } else if (!on_owner(S(inner))) {
            (void)settle(dst, -EXDEV, NULL);
            unref(S(inner));
        } else {
            dst->inner = S(inner);
            dst->fwd = (cbnode){.fn = fwd_fired, .arg = dst, .heap = false};
            subscribe_node(S(inner), &dst->fwd); /* keeps dst's link ref */
            unref(src);
            return;
        }
    }
    unref(src);
    unref(dst); /* the link's reference */
}

static weft_future_t *then_common(weft_future_t *f, int kind, weft_then_fn vfn,
                                  weft_then_future_fn ffn, void *arg)
{
    if (!f)
        return NULL;
    fstate *src = S(f);
    fstate *dst = (vfn || ffn) && on_owner(src) ? st_new(2) : NULL;
    if (!dst) {
        unref(src);
        return NULL;
    }
    dst->kind = kind;
    dst->vfn = vfn;
    dst->ffn = ffn;
    dst->fn_arg = arg;
    dst->src = src; /* takes over the caller's reference */
    dst->link = (cbnode){.fn = link_fired, .arg = dst, .heap = false};
    subscribe_node(src, &dst->link);
    return (weft_future_t *)dst;
}

weft_future_t *weft_then(weft_future_t *f, weft_then_fn fn, void *arg)
{
    return then_common(f, K_VALUE, fn, NULL, arg);
}

weft_future_t *weft_then_future(weft_future_t *f, weft_then_future_fn fn,
                                void *arg)
{
    return then_common(f, K_FUTURE, NULL, fn, arg);
}

/* ---- any / all ------------------------------------------------------------ */

static void any_fired(void *arg, int err, void *value)
{
    fstate *dst = arg;
    (void)settle(dst, err, value);
    unref(dst);
}

static void all_fired(void *arg, int err, void *value)
{
    (void)value;
    fstate *dst = arg;
    if (err) {
        int zero = 0;
        __atomic_compare_exchange_n(&dst->first_err, &zero, err, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    if (__atomic_fetch_sub(&dst->remaining, 1, __ATOMIC_ACQ_REL) == 1)
        (void)settle(dst, __atomic_load_n(&dst->first_err, __ATOMIC_ACQUIRE),
                     NULL);
    unref(dst);
}

static weft_future_t *combine(weft_future_t *const *fs, size_t n,
                              weft_future_cb cb)
{
    if (n == 0)
        return cb == all_fired ? weft_future_ready(NULL)
                               : weft_future_failed(-EINVAL);
    if (!fs || n > (size_t)INT32_MAX - 1)
        return weft_future_failed(-EINVAL);
    for (size_t i = 0; i < n; i++)
        if (!fs[i] || !on_owner(S(fs[i])))
            return weft_future_failed(fs[i] ? -EXDEV : -EINVAL);
    fstate *dst = st_new((int)n + 1);
    if (!dst)
        return NULL;
    dst->remaining = (int)n;
    for (size_t i = 0; i < n; i++) {
        cbnode *c = malloc(sizeof *c);
        if (!c) {
            (void)settle(dst, -ENOMEM, NULL);
            for (size_t j = i; j < n; j++)
                unref(dst);
            break;
        }
        *c = (cbnode){.fn = cb, .arg = dst, .heap = true};
        subscribe_node(S(fs[i]), c);
    }
    return (weft_future_t *)dst;
}

weft_future_t *weft_future_any(weft_future_t *const *fs, size_t n)
{
    return combine(fs, n, any_fired);
}

weft_future_t *weft_future_all(weft_future_t *const *fs, size_t n)
{
    return combine(fs, n, all_fired);
}

/* ---- adapting a callback API ---------------------------------------------- */

static void adapter_done(void *done_arg, int err, void *value)
{
    weft_promise_t *p = done_arg;
    (void)weft_promise_try_set(p, err < 0 ? err : 0, value);
    weft_promise_release(p);
}

weft_future_t *weft_future_from_callback(
    int (*start)(void *arg, weft_done_fn done, void *done_arg), void *arg)
{
    if (!start)
        return weft_future_failed(-EINVAL);
    weft_promise_t *p;
    if (weft_promise_create(&p) < 0)
        return NULL;
    weft_future_t *f = weft_promise_future(p);
    int rc = start(arg, adapter_done, p);
    if (rc < 0) {
        (void)weft_promise_set_error(p, rc);
        weft_promise_release(p);
    }
    return f;
}
