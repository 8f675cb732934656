/* Deadlines on the hot paths: many timers that expire at once wake every
 * fiber exactly once; deadlines set and cleared by calls that never sleep
 * leave no timer behind; a deadline that fires while a read or a write is
 * in flight (a ring op on io_uring, a readiness wait elsewhere) loses no
 * byte and leaves the descriptor usable. */
#include "harness.h"

#include <stdint.h>

/* Nothing left behind by a case: only the main fiber, no timer, no wait. */
static void idle_but_me(void)
{
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    CHECK_EQ(st.fibers, 1);
    CHECK_EQ(st.handles, 1); /* weft_run's handle of it */
    CHECK_EQ(st.timers, 0);
    CHECK_EQ(st.waits, 0);
    CHECK_EQ(st.fd_waits, 0);
    CHECK_EQ(st.ops, 0);
}

/* ---- a storm: many deadlines at one instant ---------------------------- */

enum { STORM = 4000 };
static int64_t storm_at;
static int wakes[STORM];
static int results[STORM];
static weft_mutex_t storm_mu = WEFT_MUTEX_INIT;
static weft_cond_t storm_cv = WEFT_COND_INIT;
static int storm_pipe[2];

static void *storm_fiber(void *arg)
{
    long i = (long)(intptr_t)arg;
    int rc;
    /* Every tenth is cancelled before its deadline, which lies an hour
     * later so that a slow machine cannot let it pass first. */
    int64_t at = i % 10 == 0 ? storm_at + 3600 * WEFT_SEC : storm_at;
    switch (i % 3) {
    case 0: /* a sleep */
        rc = weft_sleep_until(at);
        break;
    case 1: /* a condition wait that times out */
        CHECK_EQ(weft_mutex_lock(&storm_mu, WEFT_FOREVER), 0);
        rc = weft_cond_wait(&storm_cv, &storm_mu, at);
        CHECK_EQ(weft_mutex_unlock(&storm_mu), 0);
        break;
    default: { /* a read that times out, many on one pipe */
        char c;
        rc = (int)weft_read(storm_pipe[0], &c, 1, at);
        break;
    }
    }
    wakes[i]++;
    results[i] = rc;
    if (rc != -ECANCELED)
        CHECK(weft_now() >= storm_at);
    return NULL;
}

static void storm(void)
{
    H_CASE("storm: every fiber woken exactly once");
    static weft_fiber_t f[STORM];
    CHECK_EQ(pipe(storm_pipe), 0);
    storm_at = weft_deadline_in(200 * 1000 * 1000);
    for (long i = 0; i < STORM; i++)
        CHECK_EQ(weft_spawn(storm_fiber, (void *)(intptr_t)i, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    /* Cancel every tenth: woken once, by the cancel, among the others'
     * timers. */
    for (long i = 0; i < STORM; i += 10)
        CHECK_EQ(weft_cancel(f[i]), 0);
    for (long i = 0; i < STORM; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    for (long i = 0; i < STORM; i++) {
        CHECK_EQ(wakes[i], 1);
        int want = i % 10 == 0 ? -ECANCELED : i % 3 == 0 ? 0 : -ETIMEDOUT;
        CHECK_EQ(results[i], want);
    }
    CHECK_EQ(weft_close(storm_pipe[0]), 0);
    CHECK_EQ(weft_close(storm_pipe[1]), 0);
    idle_but_me();
}

/* ---- deadlines set and cleared without sleeping ------------------------ */

static size_t armed_timers(void)
{
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    return st.timers;
}

static void *signaller(void *arg)
{
    weft_cond_t *cv = arg;
    CHECK_EQ(weft_mutex_lock(&storm_mu, WEFT_FOREVER), 0);
    CHECK_EQ(weft_cond_signal(cv), 0);
    CHECK_EQ(weft_mutex_unlock(&storm_mu), 0);
    return NULL;
}

static void no_sleep(void)
{
    H_CASE("no_sleep: a deadline on a call that does not block");
    int a, b;
    h_tcp_pair(&a, &b);
    int64_t far = weft_deadline_in(10LL * 1000 * 1000 * 1000);
    char buf[64];
    for (int i = 0; i < 2000; i++) {
        CHECK_EQ(weft_write(b, "x", 1, far), 1);
        /* The byte may still be on its way: a read can wait, briefly. */
        CHECK_EQ(weft_read(a, buf, sizeof buf, far), 1);
        CHECK_EQ(armed_timers(), 0);
        CHECK_EQ(weft_mutex_lock(&storm_mu, far), 0);
        CHECK_EQ(armed_timers(), 0);
        CHECK_EQ(weft_mutex_unlock(&storm_mu), 0);
        CHECK_EQ(weft_sleep_until(weft_now() - 1), 0);
        CHECK_EQ(armed_timers(), 0);
    }
    H_CASE("no_sleep: a wait ended by a signal before its deadline");
    weft_cond_t cv = WEFT_COND_INIT;
    for (int i = 0; i < 200; i++) {
        weft_fiber_t f;
        CHECK_EQ(weft_mutex_lock(&storm_mu, WEFT_FOREVER), 0);
        CHECK_EQ(weft_spawn(signaller, &cv, NULL, &f), 0);
        CHECK_EQ(weft_cond_wait(&cv, &storm_mu, far), 0);
        CHECK_EQ(armed_timers(), 0);
        CHECK_EQ(weft_mutex_unlock(&storm_mu), 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    }
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    idle_but_me();
}

/* ---- a deadline while the call is in flight ---------------------------- */

typedef struct race {
    int fd;
    int64_t at; /* when to write */
    long sent;
} race;

/* Write one byte of a counting stream at r->at. */
static void *write_at(void *arg)
{
    race *r = arg;
    CHECK_EQ(weft_sleep_until(r->at), 0);
    unsigned char c = (unsigned char)r->sent;
    CHECK_EQ(weft_write(r->fd, &c, 1, WEFT_FOREVER), 1);
    r->sent++;
    return NULL;
}

static void read_in_flight(void)
{
    H_CASE("read_in_flight: a read's deadline and its data at once");
    int a, b;
    h_tcp_pair(&a, &b);
    race r = {.fd = b};
    long got = 0;
    int timeouts = 0;
    for (int i = 0; i < 60; i++) {
        /* The byte is written from 200 us before the read's deadline to
         * 200 us after it: either may come first. */
        int64_t deadline = weft_deadline_in(1000 * 1000);
        r.at = deadline + (i % 5 - 2) * 100 * 1000;
        weft_fiber_t w;
        CHECK_EQ(weft_spawn(write_at, &r, NULL, &w), 0);
        unsigned char c;
        ssize_t n = weft_read(a, &c, 1, deadline);
        if (n == -ETIMEDOUT) {
            timeouts++;
            /* The byte that raced the deadline is still there to read. */
            n = weft_read(a, &c, 1, weft_deadline_in(5000000000LL));
        }
        CHECK_EQ(n, 1);
        CHECK_EQ(c, (unsigned char)got);
        got++;
        CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
        CHECK_EQ(armed_timers(), 0);
    }
    CHECK_EQ(got, r.sent);
    printf("  %d of 60 reads timed out first\n", timeouts);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    idle_but_me();
}

static void write_in_flight(void)
{
    H_CASE("write_in_flight: a write's deadline on a full socket");
    int a, b;
    h_tcp_pair(&a, &b);
    static unsigned char out[65536], in[65536];
    long written = 0, timeouts = 0;
    /* Fill the socket until writes time out; every byte reported written
     * must arrive, in order, and nothing else. */
    for (int round = 0; round < 3; round++) {
        for (;;) {
            for (size_t k = 0; k < sizeof out; k++)
                out[k] = (unsigned char)((written + (long)k) % 251);
            ssize_t n = weft_write(b, out, sizeof out, weft_deadline_in(20 * 1000 * 1000));
            if (n == -ETIMEDOUT) {
                timeouts++;
                break;
            }
            CHECK(n > 0);
            written += n;
        }
        CHECK_EQ(armed_timers(), 0);
    }
    CHECK_EQ(timeouts, 3);
    CHECK_EQ(weft_shutdown(b, SHUT_WR), 0);
    long got = 0;
    for (;;) {
        ssize_t n = weft_read(a, in, sizeof in, weft_deadline_in(5000000000LL));
        CHECK(n >= 0);
        if (n == 0)
            break;
        for (ssize_t k = 0; k < n; k++)
            CHECK_EQ(in[k], (unsigned char)((got + k) % 251));
        got += n;
    }
    CHECK_EQ(got, written);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    idle_but_me();
}

static void *body(void *arg)
{
    (void)arg;
    storm();
    no_sleep();
    read_in_flight();
    write_in_flight();
    return NULL;
}

int main(void)
{
    h_begin("deadline");
    h_run(body, NULL);
    return h_end();
}
