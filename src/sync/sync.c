/*
 * sync.c — mutex, condition variable, notification, semaphore, task limiter
 * and wait group for fibers of one scheduler.
 *
 * Each blocked fiber is a weft__wq_node in its own stack frame, queued FIFO
 * (waitq.h). Releases hand the resource to the first live waiter directly
 * (ownership or permit transferred before it runs), which is what makes
 * the queues fair: a fiber arriving later cannot take the resource between
 * the release and the waiter's resumption. Only the notification crosses
 * threads: its set() claims the state with an atomic exchange and posts
 * the wake-up to the waiters' loop through a node embedded in the object.
 */
#include "waitq.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The end of an object whose only state is wait queue @q (NULL: no
 * object): its waiters return -EIDRM. */
static int end_queue(weft_waitq_t *q)
{
    if (!q)
        return -EINVAL;
    wq_wake_all(q, -EIDRM);
    return 0;
}

/* ---- mutex -------------------------------------------------------------- */

int weft_mutex_init(weft_mutex_t *m)
{
    if (!m)
        return -EINVAL;
    *m = (weft_mutex_t)WEFT_MUTEX_INIT;
    return 0;
}

/* Lock without prechecks: re-acquires the mutex in weft_cond_wait(), which
 * must return holding it, so the wait is neither cancellable nor bounded by
 * a timeout scope (nocancel). */
static void mutex_lock_always(weft_mutex_t *m, weft__fiber *self)
{
    weft_sched_t *s = weft__sched_tls();
    while (m->owner != self) {
        if (!m->owner) { /* free, or freed by destroy while we waited */
            m->owner = self;
            break;
        }
        weft__wq_node n;
        weft__wait_init(&n.w, &s->r, weft__fiber_wake, self);
        n.w.nocancel = true;
        wq_push(&m->q, &n);
        (void)weft__block(&n.w, WEFT_WAIT_MUTEX, m); /* 0: handed over, -EIDRM: destroyed */
        if (n.linked)
            wq_unlink(&m->q, &n);
    }
}

int weft_mutex_lock(weft_mutex_t *m, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, m != NULL);
    if (rc < 0)
        return rc;
    weft__fiber *self = weft__current();
    if (!m->owner) {
        m->owner = self;
        return 0;
    }
    if (m->owner == self)
        return -EDEADLK;
    weft__wq_node n;
    return wq_block(&m->q, &n, deadline, WEFT_WAIT_MUTEX, m); /* 0: the unlocker made us owner */
}

int weft_mutex_trylock(weft_mutex_t *m)
{
    weft__fiber *self = weft__current();
    if (!self)
        return -EPERM;
    if (!m)
        return -EINVAL;
    if (m->owner == self)
        return -EDEADLK;
    if (m->owner)
        return -EBUSY;
    m->owner = self;
    return 0;
}

int weft_mutex_unlock(weft_mutex_t *m)
{
    if (!m)
        return -EINVAL;
    weft__fiber *self = weft__current();
    if (!self || m->owner != self)
        return -EPERM;
    weft__wq_node *n = wq_first_active(&m->q);
    if (n) {
        wq_unlink(&m->q, n);
        m->owner = n->w.owner; /* hand-off */
        weft__wait_complete(&n->w, 0);
    } else {
        m->owner = NULL;
    }
    return 0;
}

int weft_mutex_destroy(weft_mutex_t *m)
{
    if (!m)
        return -EINVAL;
    if (m->owner && m->owner != weft__current())
        return -EBUSY;
    wq_wake_all(&m->q, -EIDRM);
    m->owner = NULL;
    return 0;
}

/* ---- condition variable ------------------------------------------------- */

int weft_cond_init(weft_cond_t *c)
{
    if (!c)
        return -EINVAL;
    *c = (weft_cond_t)WEFT_COND_INIT;
    return 0;
}

int weft_cond_wait(weft_cond_t *c, weft_mutex_t *m, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, c && m);
    if (rc < 0)
        return rc;
    weft__fiber *self = weft__current();
    if (m->owner != self)
        return -EPERM;
    weft_sched_t *s = weft__sched_tls();
    weft__wq_node n;
    weft__wait_init(&n.w, &s->r, weft__fiber_wake, self);
    n.linked = false;
    rc = weft__wait_arm_deadline(&n.w, deadline);
    if (rc < 0) {
        weft__wait_complete(&n.w, rc);
        return rc;
    }
    if (!n.w.active)
        return n.w.result; /* past deadline: still holding @m */
    wq_push(&c->q, &n);
    (void)weft_mutex_unlock(m);
    rc = weft__block(&n.w, WEFT_WAIT_COND, c);
    if (n.linked)
        wq_unlink(&c->q, &n);
    mutex_lock_always(m, self);
    return rc;
}

int weft_cond_signal(weft_cond_t *c)
{
    if (!c)
        return -EINVAL;
    (void)wq_wake_one(&c->q, 0);
    return 0;
}

int weft_cond_broadcast(weft_cond_t *c)
{
    if (!c)
        return -EINVAL;
    wq_wake_all(&c->q, 0);
    return 0;
}

int weft_cond_destroy(weft_cond_t *c)
{
    return end_queue(c ? &c->q : NULL);
}

/* ---- notification ------------------------------------------------------- */

enum { N_UNSET = 0, N_WAITING = 1, N_SET = 2, N_POSTING = 3 };

_Static_assert(sizeof(weft__post) <= sizeof(((weft_notification_t *)0)->post_),
               "weft_notification_t.post_ too small");

static inline int n_load(const weft_notification_t *n)
{
    return __atomic_load_n(&n->state, __ATOMIC_ACQUIRE);
}

static inline bool n_cas(weft_notification_t *n, int *expect, int to)
{
    return __atomic_compare_exchange_n(&n->state, expect, to, false,
                                       __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int weft_notification_init(weft_notification_t *n)
{
    if (!n)
        return -EINVAL;
    memset(n, 0, sizeof *n);
    return 0;
}

int weft_notification_wait(weft_notification_t *n, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, n != NULL);
    if (rc < 0)
        return rc;
    weft_sched_t *s = weft__sched_tls();
    int st = n_load(n);
    for (;;) {
        if (st == N_SET || st == N_POSTING)
            return 0;
        if (st == N_WAITING)
            break;
        /* N_UNSET: only the waiters' thread writes sched, and only before
         * publishing N_WAITING (release), after which setters read it. */
        n->sched = s;
        if (n_cas(n, &st, N_WAITING))
            break;
    }
    if (n->sched != s)
        return -EPERM;
    weft__wq_node w;
    return wq_block(&n->q, &w, deadline, WEFT_WAIT_NOTIFICATION, n);
}

static void notification_posted(void *arg)
{
    weft_notification_t *n = arg;
    wq_wake_all(&n->q, 0);
    /* Last touch: once N_SET is visible the owner may free @n. */
    __atomic_store_n(&n->state, N_SET, __ATOMIC_RELEASE);
}

int weft_notification_set(weft_notification_t *n)
{
    if (!n)
        return -EINVAL;
    weft_sched_t *me = weft__sched_tls();
    int st = n_load(n);
    for (;;) {
        if (st == N_SET || st == N_POSTING)
            return -EALREADY;
        if (st == N_UNSET) {
            if (n_cas(n, &st, N_SET))
                return 0;
            continue;
        }
        weft_sched_t *s = n->sched; /* N_WAITING seen with acquire */
        if (s == me) {
            if (n_cas(n, &st, N_SET)) {
                wq_wake_all(&n->q, 0);
                return 0;
            }
            continue;
        }
        if (n_cas(n, &st, N_POSTING)) {
            weft__post *p = (weft__post *)(void *)n->post_;
            p->fn = notification_posted;
            p->arg = n;
            p->embedded = true;
            weft__reactor_post_node(&s->r, p);
            return 0;
        }
    }
}

int weft_notification_is_set(const weft_notification_t *n)
{
    if (!n)
        return 0;
    int st = n_load(n);
    return st == N_SET || st == N_POSTING;
}

int weft_notification_destroy(weft_notification_t *n)
{
    if (!n)
        return -EINVAL;
    if (n_load(n) == N_POSTING)
        return -EBUSY;
    wq_wake_all(&n->q, -EIDRM);
    memset(n, 0, sizeof *n);
    return 0;
}

/* ---- semaphore ---------------------------------------------------------- */

int weft_sem_init(weft_sem_t *s, long count)
{
    if (!s || count < 0)
        return -EINVAL;
    *s = (weft_sem_t)WEFT_SEM_INIT(count);
    return 0;
}

int weft_sem_acquire(weft_sem_t *s, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, s != NULL);
    if (rc < 0)
        return rc;
    if (s->count > 0 && !wq_first_active(&s->q)) {
        s->count--;
        return 0;
    }
    weft__wq_node n;
    return wq_block(&s->q, &n, deadline, WEFT_WAIT_SEM, s); /* 0: a permit was handed over */
}

int weft_sem_try_acquire(weft_sem_t *s)
{
    if (!s)
        return -EINVAL;
    if (s->count > 0 && !wq_first_active(&s->q)) {
        s->count--;
        return 0;
    }
    return -EAGAIN;
}

int weft_sem_release(weft_sem_t *s)
{
    if (!s)
        return -EINVAL;
    if (wq_wake_one(&s->q, 0))
        return 0;
    if (s->count == LONG_MAX)
        return -EOVERFLOW;
    s->count++;
    return 0;
}

long weft_sem_value(const weft_sem_t *s)
{
    return s ? s->count : 0;
}

int weft_sem_destroy(weft_sem_t *s)
{
    return end_queue(s ? &s->q : NULL);
}

/* ---- task limiter ------------------------------------------------------- */

typedef struct limiter_task {
    weft_limiter_t *l;
    weft_fn_t fn;
    void *arg;
} limiter_task;

int weft_limiter_init(weft_limiter_t *l, long limit)
{
    if (!l || limit < 1)
        return -EINVAL;
    *l = (weft_limiter_t)WEFT_LIMITER_INIT(limit);
    return 0;
}

/* A task finished (or never started): pass its slot on. */
static void limiter_slot_done(weft_limiter_t *l)
{
    if (wq_wake_one(&l->q, 0))
        return; /* the slot goes to the first spawner; running unchanged */
    if (--l->running == 0)
        wq_wake_all(&l->idle, 0);
}

static void *limiter_trampoline(void *p)
{
    limiter_task t = *(limiter_task *)p;
    free(p);
    (void)t.fn(t.arg);
    limiter_slot_done(t.l);
    return NULL;
}

int weft_limiter_spawn(weft_limiter_t *l, weft_fn_t fn, void *arg,
                       int64_t deadline)
{
    int rc = weft__precheck_args(deadline, l && fn && l->limit >= 1);
    if (rc < 0)
        return rc;
    limiter_task *t = malloc(sizeof *t);
    if (!t)
        return -ENOMEM;
    *t = (limiter_task){.l = l, .fn = fn, .arg = arg};
    if (l->running < l->limit && !wq_first_active(&l->q)) {
        l->running++;
    } else {
        weft__wq_node n;
        rc = wq_block(&l->q, &n, deadline, WEFT_WAIT_LIMITER, l);
        if (rc < 0) {
            free(t);
            return rc;
        }
        /* 0: a finishing task handed its slot over */
    }
    rc = weft_spawn(limiter_trampoline, t, NULL, NULL);
    if (rc < 0) {
        free(t);
        limiter_slot_done(l);
    }
    return rc;
}

long weft_limiter_running(const weft_limiter_t *l)
{
    return l ? l->running : 0;
}

/* The wait of weft_limiter_wait() and weft_waitgroup_wait(): until *@count
 * is 0, on @q, which is woken when it gets there. */
static int wait_for_zero(const long *count, weft_waitq_t *q, int64_t deadline,
                         int kind, const void *obj)
{
    int rc = weft__precheck_args(deadline, count != NULL);
    if (rc < 0 || *count == 0)
        return rc;
    weft__wq_node n;
    return wq_block(q, &n, deadline, kind, obj);
}

int weft_limiter_wait(weft_limiter_t *l, int64_t deadline)
{
    return wait_for_zero(l ? &l->running : NULL, l ? &l->idle : NULL, deadline,
                         WEFT_WAIT_LIMITER, l);
}

int weft_limiter_destroy(weft_limiter_t *l)
{
    if (!l)
        return -EINVAL;
    if (l->running > 0)
        return -EBUSY;
    wq_wake_all(&l->q, -EIDRM);
    wq_wake_all(&l->idle, -EIDRM);
    return 0;
}

/* ---- wait group --------------------------------------------------------- */

int weft_waitgroup_init(weft_waitgroup_t *wg)
{
    if (!wg)
        return -EINVAL;
    *wg = (weft_waitgroup_t)WEFT_WAITGROUP_INIT;
    return 0;
}

int weft_waitgroup_add(weft_waitgroup_t *wg, long n)
{
    if (!wg)
        return -EINVAL;
    if (n < 0 && wg->count < -n)
        return -EINVAL;
    if (n > 0 && wg->count > LONG_MAX - n)
        return -EOVERFLOW;
    wg->count += n;
    if (wg->count == 0)
        wq_wake_all(&wg->q, 0);
    return 0;
}

int weft_waitgroup_done(weft_waitgroup_t *wg)
{
    return weft_waitgroup_add(wg, -1);
}

int weft_waitgroup_wait(weft_waitgroup_t *wg, int64_t deadline)
{
    return wait_for_zero(wg ? &wg->count : NULL, wg ? &wg->q : NULL, deadline,
                         WEFT_WAIT_WAITGROUP, wg);
}

int weft_waitgroup_destroy(weft_waitgroup_t *wg)
{
    return end_queue(wg ? &wg->q : NULL);
}
