/* Notification, semaphore, task limiter, wait group (single thread):
 * FIFO, deadlines, cancellation while waiting, destroy with waiters. */
#include "harness.h"

#define MS 1000000LL

/* ---- notification ---- */
static weft_notification_t note = WEFT_NOTIFICATION_INIT;

static void *note_waiter(void *arg)
{
    (void)arg;
    return (void *)(long)weft_notification_wait(&note, WEFT_FOREVER);
}

static void test_notification(void)
{
    weft_fiber_t f[3];
    void *r;
    CHECK_EQ(weft_notification_is_set(&note), 0);
    CHECK_EQ(weft_notification_wait(&note, weft_deadline_in(MS)), -ETIMEDOUT);
    CHECK_EQ(weft_notification_wait(&note, 0), -EAGAIN);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(note_waiter, NULL, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f[1]), 0);
    CHECK_EQ(weft_join(f[1], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    CHECK_EQ(weft_notification_set(&note), 0);
    CHECK_EQ(weft_notification_set(&note), -EALREADY);
    CHECK_EQ(weft_notification_is_set(&note), 1);
    CHECK_EQ(weft_join(f[0], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    CHECK_EQ(weft_join(f[2], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    CHECK_EQ(weft_notification_wait(&note, 0), 0); /* stays set */
    CHECK_EQ(weft_notification_destroy(&note), 0);
    CHECK_EQ(weft_notification_is_set(&note), 0);
    /* destroy with waiters */
    for (int i = 0; i < 2; i++)
        CHECK_EQ(weft_spawn(note_waiter, NULL, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_notification_destroy(&note), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, -EIDRM);
    }
    /* set before anyone waits */
    CHECK_EQ(weft_notification_init(&note), 0);
    CHECK_EQ(weft_notification_set(&note), 0);
    CHECK_EQ(weft_notification_wait(&note, WEFT_FOREVER), 0);
}

/* ---- semaphore ---- */
static weft_sem_t sem = WEFT_SEM_INIT(2);
static int sem_order[8], nsem;

static void *sem_user(void *arg)
{
    int rc = weft_sem_acquire(&sem, WEFT_FOREVER);
    if (rc == 0) {
        sem_order[nsem++] = (int)(long)arg;
        CHECK_EQ(weft_yield(), 0);
        CHECK_EQ(weft_sem_release(&sem), 0);
    }
    return (void *)(long)rc;
}

static void test_semaphore(void)
{
    void *r;
    CHECK_EQ(weft_sem_value(&sem), 2);
    CHECK_EQ(weft_sem_acquire(&sem, WEFT_FOREVER), 0);
    CHECK_EQ(weft_sem_try_acquire(&sem), 0);
    CHECK_EQ(weft_sem_try_acquire(&sem), -EAGAIN);
    CHECK_EQ(weft_sem_acquire(&sem, weft_deadline_in(MS)), -ETIMEDOUT);
    weft_fiber_t f[6];
    for (long i = 0; i < 6; i++)
        CHECK_EQ(weft_spawn(sem_user, (void *)i, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f[2]), 0); /* a waiter gives up */
    CHECK_EQ(weft_sem_release(&sem), 0);
    CHECK_EQ(weft_sem_release(&sem), 0);
    /* A release hands the permit to a waiter: none is left to take. */
    CHECK_EQ(weft_sem_try_acquire(&sem), -EAGAIN);
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, i == 2 ? -ECANCELED : 0);
    }
    CHECK_EQ(nsem, 5);
    int expect[5] = {0, 1, 3, 4, 5};
    for (int i = 0; i < 5; i++)
        CHECK_EQ(sem_order[i], expect[i]);
    CHECK_EQ(weft_sem_value(&sem), 2);
    /* destroy with waiters */
    CHECK_EQ(weft_sem_init(&sem, 0), 0);
    for (long i = 0; i < 2; i++)
        CHECK_EQ(weft_spawn(sem_user, (void *)i, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_sem_destroy(&sem), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, -EIDRM);
    }
    CHECK_EQ(weft_sem_init(&sem, -1), -EINVAL);
}

/* ---- task limiter ---- */
static weft_limiter_t lim = WEFT_LIMITER_INIT(3);
static int live, max_live, done_tasks, start_order[32], nstart;

static void *task(void *arg)
{
    start_order[nstart++] = (int)(long)arg;
    live++;
    if (live > max_live)
        max_live = live;
    for (int i = 0; i < 5; i++)
        CHECK_EQ(weft_yield(), 0);
    live--;
    done_tasks++;
    return NULL;
}

static int gate_open;

static void *gated_task(void *arg)
{
    start_order[nstart++] = (int)(long)arg;
    while (!gate_open)
        CHECK_EQ(weft_yield(), 0);
    return NULL;
}

static void *spawner(void *arg)
{
    return (void *)(long)weft_limiter_spawn(&lim, gated_task, arg,
                                            WEFT_FOREVER);
}

static void test_limiter(void)
{
    for (long i = 0; i < 20; i++)
        CHECK_EQ(weft_limiter_spawn(&lim, task, (void *)i, WEFT_FOREVER), 0);
    CHECK(weft_limiter_running(&lim) <= 3);
    CHECK_EQ(weft_limiter_destroy(&lim), -EBUSY);
    CHECK_EQ(weft_limiter_wait(&lim, WEFT_FOREVER), 0);
    CHECK_EQ(done_tasks, 20);
    CHECK_EQ(max_live, 3);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(start_order[i], i);
    CHECK_EQ(weft_limiter_running(&lim), 0);

    /* FIFO among blocked spawners, a timed-out and a cancelled spawner */
    nstart = 0;
    for (long i = 0; i < 3; i++)
        CHECK_EQ(weft_limiter_spawn(&lim, gated_task, (void *)(100 + i), 0), 0);
    CHECK_EQ(weft_limiter_spawn(&lim, gated_task, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_limiter_spawn(&lim, gated_task, NULL, weft_deadline_in(10000)),
             -ETIMEDOUT);
    weft_fiber_t sp[4];
    for (long i = 0; i < 4; i++)
        CHECK_EQ(weft_spawn(spawner, (void *)(200 + i), NULL, &sp[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(sp[1]), 0);
    CHECK_EQ(weft_limiter_running(&lim), 3);
    gate_open = 1;
    void *r;
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(weft_join(sp[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, i == 1 ? -ECANCELED : 0);
    }
    CHECK_EQ(weft_limiter_wait(&lim, WEFT_FOREVER), 0);
    int expect[6] = {100, 101, 102, 200, 202, 203};
    CHECK_EQ(nstart, 6);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(start_order[i], expect[i]);
    CHECK_EQ(weft_limiter_destroy(&lim), 0);
    CHECK_EQ(weft_limiter_init(&lim, 0), -EINVAL);
}

/* ---- wait group ---- */
static weft_waitgroup_t wg = WEFT_WAITGROUP_INIT;
static int wg_done;

static void *wg_worker(void *arg)
{
    CHECK_EQ(weft_sleep((long)arg * 100000), 0);
    wg_done++;
    CHECK_EQ(weft_waitgroup_done(&wg), 0);
    return NULL;
}

static void *wg_waiter(void *arg)
{
    (void)arg;
    return (void *)(long)weft_waitgroup_wait(&wg, WEFT_FOREVER);
}

static void test_waitgroup(void)
{
    CHECK_EQ(weft_waitgroup_wait(&wg, 0), 0);
    CHECK_EQ(weft_waitgroup_add(&wg, 5), 0);
    for (long i = 0; i < 5; i++)
        CHECK_EQ(weft_spawn(wg_worker, (void *)i, NULL, NULL), 0);
    CHECK_EQ(weft_waitgroup_wait(&wg, 0), -EAGAIN);
    CHECK_EQ(weft_waitgroup_wait(&wg, WEFT_FOREVER), 0);
    CHECK_EQ(wg_done, 5);
    CHECK_EQ(weft_waitgroup_done(&wg), -EINVAL);
    /* cancel and destroy with waiters */
    CHECK_EQ(weft_waitgroup_add(&wg, 1), 0);
    weft_fiber_t f[3];
    void *r;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(wg_waiter, NULL, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f[0]), 0);
    CHECK_EQ(weft_join(f[0], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    CHECK_EQ(weft_waitgroup_destroy(&wg), 0);
    for (int i = 1; i < 3; i++) {
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, -EIDRM);
    }
}

static void *body(void *arg)
{
    (void)arg;
    test_notification();
    test_semaphore();
    test_limiter();
    test_waitgroup();
    return NULL;
}

int main(void)
{
    h_begin("sync_prims");
    h_run(body, NULL);
    return h_end();
}
