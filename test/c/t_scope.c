/* Timeout scopes: every blocking call inside returns -ETIMEDOUT once the
 * scope's deadline passes; a waiting call is woken; scopes nest and an
 * inner one cannot extend the outer; the previous scope comes back. */
#include "harness.h"

#include <signal.h>
#include <unistd.h>

#define MS 1000000LL

static int pipefd[2];

static int body_read(void *arg)
{
    (void)arg;
    char c;
    /* nothing is ever written: only the scope can end this */
    return (int)weft_read(pipefd[0], &c, 1, WEFT_FOREVER);
}

static int body_sleep(void *arg)
{
    (void)arg;
    return weft_sleep(1000 * MS);
}

static weft_mutex_t mu = WEFT_MUTEX_INIT;
static int body_lock(void *arg)
{
    (void)arg;
    return weft_mutex_lock(&mu, WEFT_FOREVER);
}

static int release_holder;
static void *holder(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_mutex_lock(&mu, WEFT_FOREVER), 0);
    while (!release_holder)
        CHECK_EQ(weft_sleep(MS), 0);
    CHECK_EQ(weft_mutex_unlock(&mu), 0);
    return NULL;
}

static int body_expired(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_sleep(3 * MS), -ETIMEDOUT);
    /* once expired, even calls that need not wait fail */
    CHECK_EQ(weft_yield(), -ETIMEDOUT);
    CHECK_EQ(weft_write(pipefd[1], "x", 1, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_sleep(0), -ETIMEDOUT);
    return 7;
}

static int inner_longer(void *arg)
{
    (void)arg;
    int64_t outer = weft_scope_deadline();
    /* the inner scope asks for 10 s: the outer 3 ms still applies */
    int64_t saved;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(10000 * MS), &saved), 0);
    CHECK_EQ(weft_scope_deadline(), outer);
    int rc = weft_sleep(1000 * MS);
    CHECK_EQ(weft_scope_leave(saved), 0);
    return rc;
}

static int inner_shorter_body(void *arg)
{
    (void)arg;
    return weft_sleep(1000 * MS);
}

static int inner_shorter(void *arg)
{
    int *inner_rc = arg;
    *inner_rc = weft_scope_run(weft_deadline_in(2 * MS), inner_shorter_body,
                               NULL);
    /* back in the outer scope, which has not expired */
    CHECK(weft_scope_deadline() != WEFT_FOREVER);
    return weft_sleep(1 * MS);
}

/* Every kind of blocking call of the sync layer honours the scope. */
static weft_cond_t cv = WEFT_COND_INIT;
static weft_sem_t sem = WEFT_SEM_INIT(0);
static weft_waitgroup_t wg = WEFT_WAITGROUP_INIT;
static weft_notification_t note = WEFT_NOTIFICATION_INIT;

static void *slow_job(void *arg)
{
    (void)arg;
    usleep(5000);
    return NULL;
}

static int k_chan(void *arg)
{
    (void)arg;
    weft_chan_t *c;
    CHECK_EQ(weft_chan_create(&c, sizeof(int), 0), 0);
    int v, rc = weft_chan_recv(c, &v, WEFT_FOREVER);
    CHECK_EQ(weft_chan_destroy(c), 0);
    return rc;
}

static int k_future(void *arg)
{
    (void)arg;
    weft_promise_t *p;
    CHECK_EQ(weft_promise_create(&p), 0);
    weft_future_t *f = weft_promise_future(p);
    void *x;
    int rc = weft_future_get(f, &x, WEFT_FOREVER);
    weft_future_release(f);
    weft_promise_release(p);
    return rc;
}

static int k_cond(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_mutex_lock(&mu, WEFT_FOREVER), 0);
    int rc = weft_cond_wait(&cv, &mu, WEFT_FOREVER);
    CHECK(mu.owner != NULL); /* re-locked although the scope expired */
    CHECK_EQ(weft_mutex_unlock(&mu), 0);
    return rc;
}

static int k_sem(void *arg) { (void)arg; return weft_sem_acquire(&sem, WEFT_FOREVER); }

static int k_waitgroup(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_waitgroup_add(&wg, 1), 0);
    int rc = weft_waitgroup_wait(&wg, WEFT_FOREVER);
    CHECK_EQ(weft_waitgroup_done(&wg), 0);
    return rc;
}

static int k_note(void *arg) { (void)arg; return weft_notification_wait(&note, WEFT_FOREVER); }

static int k_offload(void *arg)
{
    (void)arg;
    return weft_offload(slow_job, NULL, NULL, NULL, WEFT_FOREVER);
}

static pid_t kid;
static int k_proc(void *arg) { (void)arg; return weft_proc_wait(kid, NULL, WEFT_FOREVER); }

static int (*const kinds[])(void *) = {k_chan, k_future, k_cond, k_sem,
                                       k_waitgroup, k_note, k_offload, k_proc};

/* Holds the thread, without yielding, until both deadlines of
 * late_sleep have passed: the loop then finds them due at once. */
static int64_t late_until;
static void *hog(void *arg)
{
    (void)arg;
    while (weft_now() < late_until)
        ;
    return NULL;
}

static void late_sleep(void)
{
    weft_fiber_t h;
    CHECK_EQ(weft_spawn(hog, NULL, NULL, &h), 0); /* runs once we block */
    int64_t saved;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(20 * MS), &saved), 0);
    late_until = weft_deadline_in(80 * MS);
    /* The scope (20 ms) ends this sleep (40 ms), though the loop, held
     * up, looks only after both have passed. */
    CHECK_EQ(weft_sleep(40 * MS), -ETIMEDOUT);
    CHECK(weft_now() >= late_until);
    CHECK_EQ(weft_scope_leave(saved), 0);
    CHECK_EQ(weft_join(h, NULL, WEFT_FOREVER), 0);
}

static void *body(void *arg)
{
    (void)arg;
    /* a loop that wakes after both the scope and the sleep */
    late_sleep();
    CHECK_EQ(weft_pipe(pipefd), 0);
    CHECK_EQ(weft_scope_deadline(), WEFT_FOREVER);

    CHECK_EQ(weft_scope_run(weft_deadline_in(3 * MS), body_read, NULL),
             -ETIMEDOUT);
    CHECK_EQ(weft_scope_run(weft_deadline_in(3 * MS), body_sleep, NULL),
             -ETIMEDOUT);
    CHECK_EQ(weft_scope_deadline(), WEFT_FOREVER); /* restored */

    /* a mutex held by another fiber */
    weft_fiber_t h;
    CHECK_EQ(weft_spawn(holder, NULL, NULL, &h), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_scope_run(weft_deadline_in(3 * MS), body_lock, NULL),
             -ETIMEDOUT);
    CHECK(mu.q.head == NULL); /* the waiter left the queue */
    release_holder = 1;
    CHECK_EQ(weft_join(h, NULL, WEFT_FOREVER), 0);
    /* we hold it: locking again inside a scope is -EDEADLK */
    CHECK_EQ(weft_mutex_lock(&mu, WEFT_FOREVER), 0);
    CHECK_EQ(weft_scope_run(weft_deadline_in(3 * MS), body_lock, NULL),
             -EDEADLK);
    CHECK_EQ(weft_mutex_unlock(&mu), 0);

    CHECK_EQ(weft_scope_run(weft_deadline_in(1 * MS), body_expired, NULL), 7);
    CHECK_EQ(weft_scope_run(0, body_expired, NULL), 7); /* past deadline */

    /* nesting */
    CHECK_EQ(weft_scope_run(weft_deadline_in(3 * MS), inner_longer, NULL),
             -ETIMEDOUT);
    int inner_rc = 0;
    CHECK_EQ(weft_scope_run(weft_deadline_in(10000 * MS), inner_shorter,
                            &inner_rc), 0);
    CHECK_EQ(inner_rc, -ETIMEDOUT);
    /* WEFT_FOREVER adds no bound and keeps the outer one */
    int64_t saved, saved2;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(2 * MS), &saved), 0);
    int64_t d = weft_scope_deadline();
    CHECK_EQ(weft_scope_enter(WEFT_FOREVER, &saved2), 0);
    CHECK_EQ(weft_scope_deadline(), d);
    CHECK_EQ(weft_park(WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_scope_leave(saved2), 0);
    CHECK_EQ(weft_scope_leave(saved), 0);
    CHECK_EQ(weft_scope_deadline(), WEFT_FOREVER);

    /* every kind of wait of the sync layer: the scope expires while it
     * waits, with no deadline of its own */
    kid = fork();
    CHECK(kid >= 0);
    if (kid == 0) {
        pause();
        _exit(0);
    }
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        int64_t t0 = weft_now();
        CHECK_EQ(weft_scope_run(t0 + 2 * MS, kinds[i], NULL), -ETIMEDOUT);
        CHECK(weft_now() >= t0 + 2 * MS); /* it did wait for the scope */
    }
    CHECK_EQ(kill(kid, SIGKILL), 0);
    CHECK_EQ(weft_proc_wait(kid, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_notification_destroy(&note), 0);
    weft_offload_shutdown(); /* the abandoned job finishes */

    /* after the scope, normal deadlines again */
    CHECK_EQ(weft_sleep(MS), 0);
    CHECK_EQ(weft_scope_run(WEFT_FOREVER, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_scope_run(-2, body_sleep, NULL), -EINVAL);
    CHECK_EQ(weft_close(pipefd[0]), 0);
    CHECK_EQ(weft_close(pipefd[1]), 0);
    return NULL;
}

static int never(void *arg)
{
    (void)arg;
    return 0;
}

int main(void)
{
    h_begin("scope");
    CHECK_EQ(weft_scope_run(WEFT_FOREVER, never, NULL), -EPERM);
    h_run(body, NULL);
    return h_end();
}
