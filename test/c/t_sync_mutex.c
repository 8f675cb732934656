/* Mutex and condition variable: FIFO hand-off, deadlines, cancellation
 * while waiting, destroy with waiters. */
#include "harness.h"

#define MS 1000000LL

static weft_mutex_t gm = WEFT_MUTEX_INIT; /* static initializer */
static int order[16], norder;

static void *locker(void *arg)
{
    CHECK_EQ(weft_mutex_lock(&gm, WEFT_FOREVER), 0);
    order[norder++] = (int)(long)arg;
    CHECK_EQ(weft_yield(), 0); /* hold it across a switch */
    CHECK_EQ(weft_mutex_unlock(&gm), 0);
    return NULL;
}

static void test_fifo(void)
{
    weft_fiber_t f[8];
    norder = 0;
    CHECK_EQ(weft_mutex_lock(&gm, WEFT_FOREVER), 0);
    for (long i = 0; i < 8; i++)
        CHECK_EQ(weft_spawn(locker, (void *)i, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0); /* all 8 queue up in spawn order */
    CHECK_EQ(weft_mutex_unlock(&gm), 0);
    /* Hand-off: the unlocker cannot take it back ahead of the queue. */
    CHECK_EQ(weft_mutex_trylock(&gm), -EBUSY);
    CHECK_EQ(weft_mutex_lock(&gm, WEFT_FOREVER), 0);
    CHECK_EQ(norder, 8);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(order[i], i);
    CHECK_EQ(weft_mutex_unlock(&gm), 0);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
}

static weft_mutex_t m2;

static void *timed_locker(void *arg)
{
    (void)arg;
    return (void *)(long)weft_mutex_lock(&m2, weft_deadline_in(5 * MS));
}

static void *plain_locker(void *arg)
{
    (void)arg;
    int rc = weft_mutex_lock(&m2, WEFT_FOREVER);
    if (rc == 0)
        CHECK_EQ(weft_mutex_unlock(&m2), 0);
    return (void *)(long)rc;
}

static void test_deadline_cancel(void)
{
    CHECK_EQ(weft_mutex_init(&m2), 0);
    CHECK_EQ(weft_mutex_lock(&m2, 0), 0); /* free: deadline 0 still locks */
    CHECK_EQ(weft_mutex_lock(&m2, 0), -EDEADLK);
    weft_fiber_t a, b, c;
    void *r;
    CHECK_EQ(weft_spawn(timed_locker, NULL, NULL, &a), 0);
    CHECK_EQ(weft_spawn(plain_locker, NULL, NULL, &b), 0);
    CHECK_EQ(weft_spawn(plain_locker, NULL, NULL, &c), 0);
    CHECK_EQ(weft_join(a, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ETIMEDOUT);
    CHECK_EQ(weft_cancel(b), 0);
    CHECK_EQ(weft_join(b, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    /* The timed-out and cancelled waiters left the queue: c gets it. */
    CHECK_EQ(weft_mutex_unlock(&m2), 0);
    CHECK_EQ(weft_join(c, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    CHECK(m2.owner == NULL && m2.q.head == NULL);
    /* Unlock by a non-owner. */
    CHECK_EQ(weft_mutex_unlock(&m2), -EPERM);
    CHECK_EQ(weft_mutex_lock(&m2, 1), 0); /* deadline in the past, free */
    CHECK_EQ(weft_mutex_unlock(&m2), 0);
}

static void test_destroy(void)
{
    weft_mutex_t m = WEFT_MUTEX_INIT;
    m2 = m;
    CHECK_EQ(weft_mutex_lock(&m2, WEFT_FOREVER), 0);
    weft_fiber_t f[3];
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(plain_locker, NULL, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_mutex_destroy(&m2), 0);
    for (int i = 0; i < 3; i++) {
        void *r;
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, -EIDRM);
    }
    CHECK(m2.owner == NULL);
}

/* ---- condition variable ---- */

static weft_mutex_t cm = WEFT_MUTEX_INIT;
static weft_cond_t cv = WEFT_COND_INIT;
static int ready_count, woke[8], nwoke;

static void *cond_waiter(void *arg)
{
    CHECK_EQ(weft_mutex_lock(&cm, WEFT_FOREVER), 0);
    ready_count++;
    int rc = weft_cond_wait(&cv, &cm, WEFT_FOREVER);
    CHECK(cm.owner != NULL); /* holds the mutex on every path */
    if (rc == 0)
        woke[nwoke++] = (int)(long)arg;
    CHECK_EQ(weft_mutex_unlock(&cm), 0);
    return (void *)(long)rc;
}

static void test_cond(void)
{
    weft_fiber_t f[4];
    void *r;
    for (long i = 0; i < 4; i++)
        CHECK_EQ(weft_spawn(cond_waiter, (void *)i, NULL, &f[i]), 0);
    while (ready_count < 4)
        CHECK_EQ(weft_yield(), 0);
    /* signal wakes in FIFO order */
    CHECK_EQ(weft_cond_signal(&cv), 0);
    CHECK_EQ(weft_cond_signal(&cv), 0);
    CHECK_EQ(weft_join(f[0], &r, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(f[1], &r, WEFT_FOREVER), 0);
    CHECK_EQ(nwoke, 2);
    CHECK_EQ(woke[0], 0);
    CHECK_EQ(woke[1], 1);
    /* cancel one while it waits: returns -ECANCELED holding the mutex */
    CHECK_EQ(weft_cancel(f[2]), 0);
    CHECK_EQ(weft_join(f[2], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    CHECK_EQ(weft_cond_broadcast(&cv), 0);
    CHECK_EQ(weft_join(f[3], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);

    /* timeout, with the mutex re-acquired although another fiber held it */
    CHECK_EQ(weft_mutex_lock(&cm, WEFT_FOREVER), 0);
    CHECK_EQ(weft_cond_wait(&cv, &cm, weft_deadline_in(2 * MS)), -ETIMEDOUT);
    CHECK(cm.owner != NULL);
    CHECK_EQ(weft_cond_wait(&cv, &cm, 0), -EAGAIN);
    CHECK_EQ(weft_mutex_unlock(&cm), 0);
    CHECK_EQ(weft_cond_wait(&cv, &cm, WEFT_FOREVER), -EPERM);

    /* destroy with waiters */
    ready_count = 0;
    for (long i = 0; i < 2; i++)
        CHECK_EQ(weft_spawn(cond_waiter, (void *)i, NULL, &f[i]), 0);
    while (ready_count < 2)
        CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cond_destroy(&cv), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, -EIDRM);
    }
}

static void *body(void *arg)
{
    (void)arg;
    test_fifo();
    test_deadline_cancel();
    test_destroy();
    test_cond();
    return NULL;
}

int main(void)
{
    h_begin("sync_mutex");
    weft_mutex_t m = WEFT_MUTEX_INIT;
    CHECK_EQ(weft_mutex_lock(&m, WEFT_FOREVER), -EPERM); /* not a fiber */
    h_run(body, NULL);
    return h_end();
}
