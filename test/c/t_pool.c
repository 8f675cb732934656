/* Resource pool (weft_pool_*): the size limit under 1,000 competing fibers,
 * FIFO hand-off, acquire deadlines, idle expiry, max_uses recycling,
 * broken-resource replacement, create failures, validation, per-use
 * timeouts, close with waiters and with resources in use; every resource
 * destroyed exactly once (the resources are heap objects, so ASan also
 * catches a double destroy or a leak). */
#include "harness.h"

#define MS 1000000LL
#define MAXRES 20000

typedef struct res {
    int id;
    int destroyed;
    int bad;             /* validate fails for it */
} res_t;

/* The context of every test pool: counts what the callbacks saw. */
typedef struct env {
    res_t *all[MAXRES];
    int ncreated, ndestroyed, live, live_peak;
    int fail_next;       /* create fails this many more times           */
    int create_sleep;    /* create blocks (yields) this many times      */
} env_t;

static env_t *env_new(void)
{
    env_t *e = calloc(1, sizeof *e);
    CHECK(e != NULL);
    return e;
}

static int r_create(void *ctx, void **out, int64_t deadline)
{
    env_t *e = ctx;
    for (int i = 0; i < e->create_sleep; i++) {
        int rc = weft_yield();
        if (rc < 0)
            return rc;
    }
    (void)deadline;
    if (e->fail_next > 0) {
        e->fail_next--;
        return -ECONNREFUSED;
    }
    CHECK(e->ncreated < MAXRES);
    res_t *r = calloc(1, sizeof *r);
    CHECK(r != NULL);
    r->id = e->ncreated;
    e->all[e->ncreated++] = r;
    if (++e->live > e->live_peak)
        e->live_peak = e->live;
    *out = r;
    return 0;
}

static void r_destroy(void *ctx, void *p)
{
    env_t *e = ctx;
    res_t *r = p;
    CHECK_EQ(r->destroyed, 0);
    r->destroyed = 1;
    e->ndestroyed++;
    e->live--;
}

static int r_validate(void *ctx, void *p)
{
    (void)ctx;
    return ((res_t *)p)->bad ? -ECONNRESET : 0;
}

static const weft_pool_ops_t ops = {r_create, r_destroy, NULL};
static const weft_pool_ops_t vops = {r_create, r_destroy, r_validate};

/* Close, destroy, and check that each resource was destroyed once. */
static void finish(weft_pool_t *p, env_t *e)
{
    CHECK_EQ(weft_pool_close(p, WEFT_FOREVER), 0);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.size, 0);
    CHECK_EQ(st.created, (uint64_t)e->ncreated);
    CHECK_EQ(st.destroyed, (uint64_t)e->ndestroyed);
    CHECK_EQ(weft_pool_destroy(p), 0);
    CHECK_EQ(e->live, 0);
    CHECK_EQ(e->ncreated, e->ndestroyed);
    for (int i = 0; i < e->ncreated; i++) {
        CHECK_EQ(e->all[i]->destroyed, 1);
        free(e->all[i]);
    }
    free(e);
}

static weft_pool_t *mkpool(env_t *e, const weft_pool_ops_t *o, size_t max,
                           int64_t idle, uint64_t max_uses, int64_t use_to)
{
    weft_pool_opts_t opts = {0};
    opts.max_size = max;
    opts.idle_timeout = idle;
    opts.max_uses = max_uses;
    opts.use_timeout = use_to;
    weft_pool_t *p = NULL;
    CHECK_EQ(weft_pool_create(&p, o, e, &opts), 0);
    return p;
}

/* ---- 1,000 fibers compete for 4 resources ------------------------------ */
typedef struct stress {
    weft_pool_t *p;
    env_t *e;
    int using, using_peak, done, rounds;
    unsigned seed;
} stress_t;

static void *stress_fiber(void *arg)
{
    stress_t *s = arg;
    for (int i = 0; i < s->rounds; i++) {
        weft_pool_lease_t l;
        CHECK_EQ(weft_pool_acquire(s->p, &l, WEFT_FOREVER), 0);
        res_t *r = l.res;
        CHECK(r != NULL && !r->destroyed);
        if (++s->using > s->using_peak)
            s->using_peak = s->using;
        weft_pool_stats_t st;
        CHECK_EQ(weft_pool_stats(s->p, &st), 0);
        CHECK(st.size <= 4);
        CHECK(s->e->live <= 4);
        s->seed = s->seed * 1103515245u + 12345u;
        unsigned k = (s->seed >> 16) % 16;
        for (unsigned y = 0; y < k % 3; y++)
            CHECK_EQ(weft_yield(), 0);
        if (k == 0)
            CHECK_EQ(weft_sleep(10000), 0);
        s->using--;
        CHECK_EQ(weft_pool_release(s->p, &l, k == 7 ? WEFT_POOL_BROKEN : 0), 0);
        CHECK(l.res == NULL);
    }
    s->done++;
    return NULL;
}

static void test_limit_1000(void)
{
    env_t *e = env_new();
    e->create_sleep = 2; /* creates overlap with other fibers' acquires */
    weft_pool_t *p = mkpool(e, &ops, 4, 0, 50, 0);
    stress_t s = {p, e, 0, 0, 0, 5, 7};
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(weft_spawn(stress_fiber, &s, NULL, NULL), 0);
    while (s.done < 1000) {
        weft_pool_stats_t st;
        CHECK_EQ(weft_pool_stats(p, &st), 0);
        CHECK(st.size <= 4);
        CHECK_EQ(weft_sleep(MS), 0);
    }
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK(st.peak_size <= 4);
    CHECK_EQ(st.peak_size, 4); /* 1,000 fibers did fill it */
    CHECK_EQ(s.using_peak, 4);
    CHECK(e->live_peak <= 4);
    CHECK_EQ(st.acquired, 5000);
    CHECK(st.broken > 0 && st.recycled > 0);
    CHECK_EQ(st.waiters, 0);
    CHECK_EQ(st.in_use, 0);
    finish(p, e);
}

/* ---- FIFO: waiters get the resource in arrival order ------------------- */
typedef struct fifo {
    weft_pool_t *p;
    int order[16], n;
} fifo_t;

typedef struct fifo_arg {
    fifo_t *f;
    int idx;
} fifo_arg_t;

static void *fifo_waiter(void *arg)
{
    fifo_arg_t *a = arg;
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(a->f->p, &l, WEFT_FOREVER), 0);
    a->f->order[a->f->n++] = a->idx;
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_pool_release(a->f->p, &l, 0), 0);
    return NULL;
}

static void test_fifo(void)
{
    env_t *e = env_new();
    fifo_t f = {mkpool(e, &ops, 1, 0, 0, 0), {0}, 0};
    weft_pool_lease_t l, l2;
    CHECK_EQ(weft_pool_acquire(f.p, &l, WEFT_FOREVER), 0);
    fifo_arg_t a[10];
    weft_fiber_t h[10];
    for (int i = 0; i < 10; i++) {
        a[i] = (fifo_arg_t){&f, i};
        CHECK_EQ(weft_spawn(fifo_waiter, &a[i], NULL, &h[i]), 0);
        CHECK_EQ(weft_yield(), 0); /* each queues before the next starts */
    }
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(f.p, &st), 0);
    CHECK_EQ(st.waiters, 10);
    CHECK_EQ(weft_pool_release(f.p, &l, 0), 0);
    /* Handed to the first waiter already: a late arrival cannot take it. */
    CHECK_EQ(weft_pool_acquire(f.p, &l2, 0), -EAGAIN);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(weft_join(h[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(f.n, 10);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(f.order[i], i);
    CHECK_EQ(e->ncreated, 1);
    finish(f.p, e);
}

/* ---- acquire deadline, cancellation while waiting ----------------------- */
static void *acquire_forever(void *arg)
{
    weft_pool_lease_t l;
    int rc = weft_pool_acquire(arg, &l, WEFT_FOREVER);
    if (rc == 0)
        weft_pool_release(arg, &l, 0);
    return (void *)(long)rc;
}

static void test_deadline_cancel(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 1, 0, 0, 0);
    weft_pool_lease_t l, l2;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK(l.res != NULL);
    CHECK_EQ(l.uses, 1);
    CHECK_EQ(l.deadline, WEFT_FOREVER);
    CHECK_EQ(weft_pool_acquire(p, &l2, 0), -EAGAIN);
    int64_t t0 = weft_now();
    int64_t dl = weft_deadline_in(5 * MS);
    CHECK_EQ(weft_pool_acquire(p, &l2, dl), -ETIMEDOUT);
    CHECK(weft_now() >= dl && t0 < dl);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.timeouts, 1); /* the try (deadline 0) did not time out */
    CHECK_EQ(st.waiters, 0);
    /* a cancelled waiter leaves the queue; the next one is served */
    weft_fiber_t a, b;
    void *r;
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &a), 0);
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &b), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(a), 0);
    CHECK_EQ(weft_join(a, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_join(b, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    /* bad arguments */
    CHECK_EQ(weft_pool_acquire(NULL, &l, 0), -EINVAL);
    CHECK_EQ(weft_pool_acquire(p, NULL, 0), -EINVAL);
    CHECK_EQ(weft_pool_acquire(p, &l, -2), -EINVAL);
    CHECK_EQ(weft_pool_release(p, NULL, 0), -EINVAL);
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK_EQ(weft_pool_release(p, &l, 2), -EINVAL);
    weft_pool_lease_t copy = l;
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_pool_release(p, &copy, 0), -EINVAL); /* twice */
    weft_pool_opts_t bad = {0};
    weft_pool_t *q;
    CHECK_EQ(weft_pool_create(&q, &ops, e, &bad), -EINVAL);
    bad.max_size = 1;
    weft_pool_ops_t noc = {NULL, r_destroy, NULL};
    CHECK_EQ(weft_pool_create(&q, &noc, e, &bad), -EINVAL);
    bad.idle_timeout = -1;
    CHECK_EQ(weft_pool_create(&q, &ops, e, &bad), -EINVAL);
    finish(p, e);
}

/* ---- idle expiry in the background -------------------------------------- */
static void *hold_briefly(void *arg)
{
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(arg, &l, WEFT_FOREVER), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_pool_release(arg, &l, 0), 0);
    return NULL;
}

static void test_idle(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 3, 20 * MS, 0, 0);
    weft_fiber_t h[3];
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(hold_briefly, p, NULL, &h[i]), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_join(h[i], NULL, WEFT_FOREVER), 0);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.idle, 3);
    CHECK_EQ(e->live, 3);
    /* The reaper's deadline (release + 20 ms) comes before ours. */
    CHECK_EQ(weft_sleep(200 * MS), 0);
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.idle, 0);
    CHECK_EQ(st.size, 0);
    CHECK_EQ(st.expired, 3);
    CHECK_EQ(e->live, 0);
    CHECK_EQ(e->ndestroyed, 3);
    /* the reaper fiber has ended: the scheduler only runs us */
    weft_stats_t ss;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &ss), 0);
    CHECK_EQ(ss.fibers, 1);
    /* usable again: creates a fresh one; close ends the new reaper */
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK_EQ(((res_t *)l.res)->id, 3);
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &ss), 0);
    CHECK_EQ(ss.fibers, 2);
    finish(p, e);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &ss), 0);
    CHECK_EQ(ss.fibers, 1);
}

/* ---- max_uses recycling -------------------------------------------------- */
static void test_max_uses(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 1, 0, 3, 0);
    static const int want_uses[7] = {1, 2, 3, 1, 2, 3, 1};
    static const int want_id[7] = {0, 0, 0, 1, 1, 1, 2};
    for (int i = 0; i < 7; i++) {
        weft_pool_lease_t l;
        CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
        CHECK_EQ(l.uses, want_uses[i]);
        CHECK_EQ(((res_t *)l.res)->id, want_id[i]);
        CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    }
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.recycled, 2);
    CHECK_EQ(st.created, 3);
    CHECK_EQ(st.destroyed, 2);
    finish(p, e);
}

/* ---- broken resources are destroyed and replaced on demand -------------- */
static void test_broken(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 1, 0, 0, 0);
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    res_t *first = l.res;
    CHECK_EQ(weft_pool_release(p, &l, WEFT_POOL_BROKEN), 0);
    CHECK_EQ(first->destroyed, 1);
    CHECK_EQ(e->live, 0); /* not replaced until someone asks */
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK_EQ(((res_t *)l.res)->id, 1);
    /* with a waiter: it gets a freshly created one */
    weft_fiber_t w;
    void *r;
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &w), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_pool_release(p, &l, WEFT_POOL_BROKEN), 0);
    CHECK_EQ(weft_join(w, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    CHECK_EQ(e->ncreated, 3);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.broken, 2);
    CHECK_EQ(st.idle, 1);
    /* validation: a bad idle resource is replaced before it is handed out */
    finish(p, e);
    e = env_new();
    p = mkpool(e, &vops, 1, 0, 0, 0);
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    ((res_t *)l.res)->bad = 1;
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK_EQ(((res_t *)l.res)->id, 1);
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.invalid, 1);
    CHECK_EQ(e->all[0]->destroyed, 1);
    finish(p, e);
}

/* ---- create failures are passed through --------------------------------- */
static void test_create_failure(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 1, 0, 0, 0);
    weft_pool_lease_t l;
    e->fail_next = 1;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), -ECONNREFUSED);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.size, 0);
    CHECK_EQ(st.create_failed, 1);
    /* waiters: the first one's create fails, the next one tries itself */
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    weft_fiber_t a, b;
    void *r;
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &a), 0);
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &b), 0);
    CHECK_EQ(weft_yield(), 0);
    e->fail_next = 1;
    CHECK_EQ(weft_pool_release(p, &l, WEFT_POOL_BROKEN), 0);
    CHECK_EQ(weft_join(a, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECONNREFUSED);
    CHECK_EQ(weft_join(b, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.create_failed, 2);
    CHECK_EQ(st.idle, 1);
    finish(p, e);
}

/* ---- per-use timeout through weft_pool_with ----------------------------- */
static int use_quick(void *arg, weft_pool_lease_t *l)
{
    (void)arg;
    CHECK(l->deadline != WEFT_FOREVER);
    CHECK_EQ(weft_scope_deadline(), l->deadline);
    return 7;
}

static int use_stuck(void *arg, weft_pool_lease_t *l)
{
    (void)arg;
    (void)l;
    return weft_sleep_until(WEFT_FOREVER); /* cut by the use timeout */
}

static int use_drop(void *arg, weft_pool_lease_t *l)
{
    (void)arg;
    l->res = NULL; /* "this connection is gone" */
    return -ECONNRESET;
}

static void test_use_timeout(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 1, 0, 0, 10 * MS);
    CHECK_EQ(weft_pool_with(p, use_quick, NULL, WEFT_FOREVER), 7);
    CHECK_EQ(weft_pool_with(p, use_stuck, NULL, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_pool_with(p, use_drop, NULL, WEFT_FOREVER), -ECONNRESET);
    CHECK_EQ(weft_pool_with(p, NULL, NULL, WEFT_FOREVER), -EINVAL);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.broken, 2); /* the stuck use and the dropped one */
    CHECK_EQ(e->ncreated, 2);
    CHECK_EQ(e->all[0]->destroyed, 1);
    CHECK_EQ(e->all[1]->destroyed, 1);
    CHECK_EQ(weft_scope_deadline(), WEFT_FOREVER);
    finish(p, e);
}

/* ---- close ---------------------------------------------------------------- */
typedef struct holder {
    weft_pool_t *p;
    weft_pool_lease_t l;
    int64_t release_at;
} holder_t;

static void *hold_then_release(void *arg)
{
    holder_t *h = arg;
    CHECK_EQ(weft_sleep_until(h->release_at), 0);
    CHECK_EQ(weft_pool_release(h->p, &h->l, 0), 0);
    return NULL;
}

static void test_close(void)
{
    env_t *e = env_new();
    weft_pool_t *p = mkpool(e, &ops, 2, 0, 0, 0);
    holder_t h = {p, {0}, 0};
    weft_pool_lease_t l2;
    CHECK_EQ(weft_pool_acquire(p, &h.l, WEFT_FOREVER), 0);
    CHECK_EQ(weft_pool_acquire(p, &l2, WEFT_FOREVER), 0);
    CHECK_EQ(weft_pool_release(p, &l2, 0), 0);
    CHECK_EQ(weft_pool_acquire(p, &l2, WEFT_FOREVER), 0);
    weft_fiber_t w[3];
    void *r;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &w[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    /* In use at the deadline: -ETIMEDOUT, waiters already woken. */
    CHECK_EQ(weft_pool_close(p, weft_deadline_in(2 * MS)), -ETIMEDOUT);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_join(w[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, -ESHUTDOWN);
    }
    weft_pool_lease_t l3;
    CHECK_EQ(weft_pool_acquire(p, &l3, 0), -ESHUTDOWN);
    CHECK_EQ(weft_pool_destroy(p), -EBUSY);
    /* released after close: destroyed at once */
    CHECK_EQ(weft_pool_release(p, &l2, 0), 0);
    CHECK_EQ(e->live, 1);
    /* close waits for the last one */
    h.release_at = weft_deadline_in(5 * MS);
    weft_fiber_t hf;
    CHECK_EQ(weft_spawn(hold_then_release, &h, NULL, &hf), 0);
    CHECK_EQ(weft_pool_close(p, WEFT_FOREVER), 0);
    CHECK_EQ(e->live, 0);
    CHECK_EQ(weft_join(hf, NULL, WEFT_FOREVER), 0);
    finish(p, e); /* closing again is fine */
    /* never closed: destroy ends idle resources itself */
    e = env_new();
    p = mkpool(e, &ops, 2, 0, 0, 0);
    CHECK_EQ(weft_pool_acquire(p, &l2, WEFT_FOREVER), 0);
    CHECK_EQ(weft_pool_destroy(p), -EBUSY);
    CHECK_EQ(weft_pool_release(p, &l2, 0), 0);
    CHECK_EQ(weft_pool_destroy(p), 0);
    CHECK_EQ(e->live, 0);
    free(e->all[0]);
    free(e);
}

/* ---- close while a create is in progress ------------------------------- */
static void test_close_during_create(void)
{
    env_t *e = env_new();
    e->create_sleep = 5; /* create yields 5 times */
    weft_pool_t *p = mkpool(e, &ops, 1, 0, 0, 0);
    weft_fiber_t a, b;
    void *r;
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &a), 0); /* creates */
    CHECK_EQ(weft_spawn(acquire_forever, p, NULL, &b), 0); /* waits */
    CHECK_EQ(weft_yield(), 0);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.creating, 1);
    CHECK_EQ(st.size, 1);
    CHECK_EQ(weft_pool_close(p, WEFT_FOREVER), 0); /* waits for the create */
    CHECK_EQ(weft_join(a, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ESHUTDOWN); /* made, then destroyed: pool closed */
    CHECK_EQ(weft_join(b, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ESHUTDOWN);
    CHECK_EQ(e->ncreated, 1);
    CHECK_EQ(e->all[0]->destroyed, 1);
    finish(p, e);
}

static void *main_fiber(void *arg)
{
    (void)arg;
    test_limit_1000();
    test_fifo();
    test_deadline_cancel();
    test_idle();
    test_max_uses();
    test_broken();
    test_create_failure();
    test_use_timeout();
    test_close();
    test_close_during_create();
    return NULL;
}

int main(void)
{
    h_begin("pool");
    h_run(main_fiber, NULL);
    return h_end();
}
