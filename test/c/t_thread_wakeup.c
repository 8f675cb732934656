/* Cross-thread wake-ups: other threads post callbacks and unpark fibers of
 * this loop while it sleeps in the kernel; none is lost. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS 4
#define POSTS_PER_THREAD 50000
#define UNPARKS 20000

static weft_sched_t *loop;
static atomic_long posted_runs;
static long local_runs;
static weft_fiber_t parker;
static atomic_int parker_ready;
static atomic_long unparks_done;
static long wakes_seen;

static void on_post(void *arg)
{
    /* runs on the loop's thread */
    CHECK(weft_sched_self() == loop);
    local_runs++;
    atomic_fetch_add(&posted_runs, (long)arg);
}

static void *poster(void *arg)
{
    (void)arg;
    for (int i = 0; i < POSTS_PER_THREAD; i++)
        CHECK_EQ(weft_sched_post(loop, on_post, (void *)1L), 0);
    return NULL;
}

static void *unparker(void *arg)
{
    (void)arg;
    while (!atomic_load(&parker_ready))
        sched_yield();
    for (int i = 0; i < UNPARKS; i++) {
        CHECK_EQ(weft_unpark(loop, parker), 0);
        atomic_fetch_add(&unparks_done, 1);
        /* pace a little so that many unparks find the fiber parked */
        if (i % 64 == 0)
            sched_yield();
    }
    return NULL;
}

static void *parker_fiber(void *arg)
{
    (void)arg;
    atomic_store(&parker_ready, 1);
    /* Each unpark wakes the fiber or leaves a permit; either way the fiber
     * keeps up until the unparker is done, and the final state is seen. */
    for (;;) {
        int rc = weft_park(weft_deadline_in(2000000000));
        CHECK(rc == 0 || rc == -ETIMEDOUT);
        if (rc == 0)
            wakes_seen++;
        if (atomic_load(&unparks_done) == UNPARKS && rc == -ETIMEDOUT)
            break;
        if (atomic_load(&unparks_done) == UNPARKS) {
            /* drain the last permit, then one timed park proves quiet */
            rc = weft_park(weft_deadline_in(5000000));
            if (rc == 0)
                wakes_seen++;
            break;
        }
    }
    return NULL;
}

static void *waiter(void *arg)
{
    /* The loop must sleep in the kernel while waiting for the threads:
     * this fiber just waits until every post has run. */
    while (atomic_load(&posted_runs) < THREADS * POSTS_PER_THREAD)
        CHECK_EQ(weft_sleep(1000000), 0);
    return arg;
}

static void *body(void *arg)
{
    pthread_t th[THREADS], up;
    CHECK_EQ(weft_spawn(parker_fiber, NULL, NULL, &parker), 0);
    weft_fiber_t w;
    CHECK_EQ(weft_spawn(waiter, NULL, NULL, &w), 0);
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, poster, NULL), 0);
    CHECK_EQ(pthread_create(&up, NULL, unparker, NULL), 0);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(parker, NULL, WEFT_FOREVER), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_join(up, NULL);
    CHECK_EQ(atomic_load(&posted_runs), THREADS * POSTS_PER_THREAD);
    CHECK_EQ(local_runs, THREADS * POSTS_PER_THREAD);
    CHECK(wakes_seen >= 1 && wakes_seen <= UNPARKS);
    /* a stale handle posted from another thread is ignored on arrival */
    return arg;
}

/* A loop asleep with nothing else to do is woken by a post at once. */
static void wake_cb(void *arg) { CHECK_EQ(weft_unpark(NULL, *(weft_fiber_t *)arg), 0); }

static void *sleepy(void *arg)
{
    CHECK_EQ(weft_park(WEFT_FOREVER), 0);
    return arg;
}

static void *late_post(void *arg)
{
    usleep(20000);
    CHECK_EQ(weft_sched_post(loop, wake_cb, arg), 0);
    return NULL;
}

int main(void)
{
    h_begin("thread_wakeup");
    loop = weft_sched_self();
    CHECK(loop != NULL);
    h_run(body, NULL);

    weft_fiber_t f;
    CHECK_EQ(weft_spawn(sleepy, NULL, NULL, &f), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, late_post, &f), 0);
    CHECK_EQ(weft_sched_run(loop), 0);
    pthread_join(t, NULL);
    CHECK_EQ(weft_detach(f), 0);

    CHECK_EQ(weft_sched_post(NULL, wake_cb, NULL), -EINVAL);
    CHECK_EQ(weft_sched_post(loop, NULL, NULL), -EINVAL);
    printf("thread_wakeup: %d posts, %ld of %d unparks woke the fiber\n",
           THREADS * POSTS_PER_THREAD, wakes_seen, UNPARKS);
    return h_end();
}
