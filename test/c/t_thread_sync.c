/* Cross-thread: 10^6 wake-ups of fibers by promises set on other threads
 * (none lost, each value intact), notifications set from another thread,
 * a fiber of another loop woken, work posted to another loop, callbacks run
 * on the owner loop, destroy while a cross-thread wake-up is in flight. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define MS 1000000LL
#define THREADS 4
#define BATCH 1000
#define TOTAL 1000000

/* ---- 10^6 wake-ups ---- */
static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static weft_promise_t *batch[BATCH];
static long batch_no; /* guarded by lk; -1 = stop */
static int batch_left;

static void *setter_thread(void *arg)
{
    long tid = (long)arg, seen = 0;
    for (;;) {
        pthread_mutex_lock(&lk);
        while (batch_no == seen)
            pthread_cond_wait(&cv, &lk);
        long b = batch_no;
        pthread_mutex_unlock(&lk);
        if (b < 0)
            return NULL;
        seen = b;
        for (int i = (int)tid; i < BATCH; i += THREADS) {
            CHECK_EQ(weft_promise_set_value(batch[i],
                                            (void *)(intptr_t)(b * BATCH + i)),
                     0);
        }
        pthread_mutex_lock(&lk);
        batch_left--;
        pthread_mutex_unlock(&lk);
    }
}

static void test_million(void)
{
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, setter_thread, (void *)i), 0);
    weft_future_t *fs[BATCH];
    long got = 0, blocked_before = 0;
    for (long b = 1; b <= TOTAL / BATCH; b++) {
        for (int i = 0; i < BATCH; i++) {
            CHECK_EQ(weft_promise_create(&batch[i]), 0);
            fs[i] = weft_promise_future(batch[i]);
        }
        pthread_mutex_lock(&lk);
        batch_no = b;
        batch_left = THREADS;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&lk);
        for (int i = 0; i < BATCH; i++) {
            void *v;
            if (!weft_future_is_set(fs[i]))
                blocked_before++;
            CHECK_EQ(weft_future_get(fs[i], &v, WEFT_FOREVER), 0);
            CHECK_EQ((intptr_t)v, b * BATCH + i);
            got++;
        }
        /* the setters are done with this batch before it is released */
        for (;;) {
            pthread_mutex_lock(&lk);
            int left = batch_left;
            pthread_mutex_unlock(&lk);
            if (!left)
                break;
            CHECK_EQ(weft_sleep(10000), 0);
        }
        for (int i = 0; i < BATCH; i++) {
            weft_promise_release(batch[i]);
            weft_future_release(fs[i]);
        }
    }
    pthread_mutex_lock(&lk);
    batch_no = -1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&lk);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(got, TOTAL);
    /* get() returns once the value is published; the deliveries posted by
     * the setters (holding references) run when the loop next polls. */
    weft_stats_t st;
    do {
        CHECK_EQ(weft_sleep(1000), 0);
        CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    } while (st.posted);
    printf("wake-ups: %ld, of which the fiber was blocked before %ld\n", got,
           blocked_before);
}

/* ---- notification set from another thread ---- */
static weft_notification_t note;
static atomic_int armed;

static void *note_thread(void *arg)
{
    int rounds = (int)(long)arg;
    for (int i = 1; i <= rounds; i++) {
        while (atomic_load(&armed) != i)
            sched_yield();
        CHECK_EQ(weft_notification_set(&note), 0);
    }
    return NULL;
}

static void test_notification_thread(void)
{
    enum { ROUNDS = 2000 };
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, note_thread, (void *)(long)ROUNDS), 0);
    for (int i = 1; i <= ROUNDS; i++) {
        CHECK_EQ(weft_notification_init(&note), 0);
        atomic_store(&armed, i);
        CHECK_EQ(weft_notification_wait(&note, WEFT_FOREVER), 0);
        CHECK_EQ(weft_notification_is_set(&note), 1);
        /* a posted wake-up may still be in flight: destroy says so */
        int rc;
        while ((rc = weft_notification_destroy(&note)) == -EBUSY)
            CHECK_EQ(weft_sleep(1000), 0);
        CHECK_EQ(rc, 0);
    }
    pthread_join(th, NULL);
}

/* destroy refused while the wake-up is posted but not yet run */
static void *late_set_thread(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_notification_set(&note), 0);
    return NULL;
}

static void test_destroy_in_flight(void)
{
    CHECK_EQ(weft_notification_init(&note), 0);
    /* a waiter that times out leaves the notification bound to this loop */
    CHECK_EQ(weft_notification_wait(&note, weft_deadline_in(MS)), -ETIMEDOUT);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, late_set_thread, NULL), 0);
    pthread_join(th, NULL); /* the post is queued; the loop has not run */
    CHECK_EQ(weft_notification_is_set(&note), 1);
    CHECK_EQ(weft_notification_destroy(&note), -EBUSY);
    CHECK_EQ(weft_sleep(MS), 0); /* the loop drains its posts */
    CHECK_EQ(weft_notification_destroy(&note), 0);
}

/* ---- another loop ---- */
static weft_sched_t *loop_b;
static pthread_t thread_b;
static weft_notification_t note_b;
static weft_promise_t *prom_b;
static weft_fiber_t parker_b;
static atomic_int b_ready, b_posts, b_callback_on_b;
static weft_notification_t b_done; /* set by B when finished */

static void on_b_post(void *arg)
{
    (void)arg;
    CHECK(pthread_equal(pthread_self(), thread_b));
    atomic_fetch_add(&b_posts, 1);
}

static void on_b_future(void *arg, int err, void *value)
{
    (void)arg;
    CHECK_EQ(err, 0);
    CHECK_EQ((intptr_t)value, 99);
    atomic_store(&b_callback_on_b, pthread_equal(pthread_self(), thread_b));
}

static void *b_main(void *arg)
{
    (void)arg;
    parker_b = weft_self();
    weft_future_t *f = weft_promise_future(prom_b);
    CHECK_EQ(weft_future_subscribe(f, on_b_future, NULL), 0);
    atomic_store(&b_ready, 1);
    /* woken by a fiber of loop A */
    CHECK_EQ(weft_notification_wait(&note_b, WEFT_FOREVER), 0);
    void *v;
    CHECK_EQ(weft_future_get(f, &v, WEFT_FOREVER), 0);
    CHECK_EQ((intptr_t)v, 99);
    weft_future_release(f);
    /* unparked from loop A */
    CHECK_EQ(weft_park(WEFT_FOREVER), 0);
    CHECK_EQ(weft_notification_set(&b_done), 0); /* wakes loop A's fiber */
    return NULL;
}

static void *b_thread(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_sched_create(&loop_b, NULL), 0);
    CHECK_EQ(weft_promise_create(&prom_b), 0);
    h_run(b_main, NULL);
    CHECK_EQ(weft_sched_destroy(loop_b), 0);
    return NULL;
}

static void test_other_loop(void)
{
    CHECK_EQ(weft_notification_init(&note_b), 0);
    CHECK_EQ(weft_notification_init(&b_done), 0);
    CHECK_EQ(pthread_create(&thread_b, NULL, b_thread, NULL), 0);
    while (!atomic_load(&b_ready))
        CHECK_EQ(weft_sleep(100000), 0);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(weft_sched_post(loop_b, on_b_post, NULL), 0);
    CHECK_EQ(weft_promise_set_value(prom_b, (void *)(intptr_t)99), 0);
    CHECK_EQ(weft_notification_set(&note_b), 0);
    CHECK_EQ(weft_unpark(loop_b, parker_b), 0);
    CHECK_EQ(weft_notification_wait(&b_done, WEFT_FOREVER), 0);
    pthread_join(thread_b, NULL);
    weft_promise_release(prom_b);
    CHECK_EQ(atomic_load(&b_posts), 100);
    CHECK_EQ(atomic_load(&b_callback_on_b), 1);
    int rc;
    while ((rc = weft_notification_destroy(&b_done)) == -EBUSY)
        CHECK_EQ(weft_sleep(1000), 0);
    CHECK_EQ(rc, 0);
}

/* ---- a then-chain whose root is set on another thread ---- */
static pthread_t loop_a;
static atomic_int steps_on_loop;

static int step_on_loop(void *arg, void *v, void **out)
{
    (void)arg;
    if (pthread_equal(pthread_self(), loop_a))
        atomic_fetch_add(&steps_on_loop, 1);
    *out = (void *)((intptr_t)v * 2 + 1);
    return 0;
}

static int step_fail(void *arg, void *v, void **out)
{
    (void)arg;
    (void)v;
    (void)out;
    return -EPROTO;
}

static void *chain_setter(void *arg)
{
    weft_promise_t **p = arg;
    CHECK_EQ(weft_promise_set_value(p[0], (void *)(intptr_t)1), 0);
    CHECK_EQ(weft_promise_set_error(p[1], -ENOLINK), 0);
    weft_promise_release(p[0]); /* the last handle may drop on this thread */
    weft_promise_release(p[1]);
    return NULL;
}

static void test_chain_from_thread(void)
{
    loop_a = pthread_self();
    weft_promise_t *p[2];
    weft_future_t *f[2];
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(weft_promise_create(&p[i]), 0);
        f[i] = weft_promise_future(p[i]);
        for (int k = 0; k < 3; k++)
            f[i] = weft_then(f[i], step_on_loop, NULL);
    }
    f[0] = weft_then(f[0], step_on_loop, NULL); /* 4 steps: 1 -> 31 */
    weft_future_t *failing = weft_then(weft_future_ref(f[0]), step_fail, NULL);
    weft_future_t *all = weft_future_all(f, 2);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, chain_setter, p), 0);
    void *v;
    CHECK_EQ(weft_future_get(all, &v, WEFT_FOREVER), -ENOLINK);
    CHECK_EQ(weft_future_get(f[0], &v, WEFT_FOREVER), 0);
    CHECK_EQ((intptr_t)v, 31);
    CHECK_EQ(weft_future_get(f[1], &v, WEFT_FOREVER), -ENOLINK);
    CHECK_EQ(weft_future_get(failing, &v, WEFT_FOREVER), -EPROTO);
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&steps_on_loop), 4); /* f[1]'s steps were skipped */
    weft_future_release(all);
    weft_future_release(failing);
    weft_future_release(f[0]);
    weft_future_release(f[1]);
}

static void *body(void *arg)
{
    (void)arg;
    test_chain_from_thread();
    test_notification_thread();
    test_destroy_in_flight();
    test_other_loop();
    test_million();
    return NULL;
}

int main(void)
{
    h_begin("thread_sync");
    h_run(body, NULL);
    return h_end();
}
