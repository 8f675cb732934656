/* Deadlines on the hot paths: many timers that expire at once wake every
 * fiber exactly once; deadlines set and cleared by calls that never sleep
 * leave no timer behind; a deadline that fires while a read or a write is
 * in flight (a ring op on io_uring, a readiness wait elsewhere) loses no
 * byte and leaves the descriptor usable. */
#include "harness.h"

#include <stdint.h>
#include <sys/socket.h>

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

/* ---- deadlines kept across calls ------------------------------------------
 * A fiber's reads and writes of one buffer give their deadline to a timer
 * the fiber keeps across calls (armed at or before the deadline, moved
 * only when a call's deadline is earlier). Each call must still end at its
 * own deadline: not at an earlier one the keeper was armed for, and not at
 * a later one. */

static const int64_t HOUR = 3600 * WEFT_SEC;

typedef struct later_write {
    int fd;
    int64_t at;
} later_write;

static void *write_later(void *arg)
{
    later_write *lw = arg;
    CHECK_EQ(weft_sleep_until(lw->at), 0);
    CHECK_EQ(weft_write(lw->fd, "y", 1, WEFT_FOREVER), 1);
    return NULL;
}

static void kept_earlier(void)
{
    H_CASE("kept: a deadline earlier than the last call's");
    int a, b;
    h_tcp_pair(&a, &b);
    char c;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_write(b, "x", 1, WEFT_FOREVER), 1);
        /* An hour away: the keeper is armed there... */
        CHECK_EQ(weft_read(a, &c, 1, weft_deadline_in(HOUR)), 1);
        /* ...and this read, with nothing to read, must end at its own
         * deadline (the test's timeout, not an hour, ends it otherwise). */
        int64_t soon = weft_deadline_in(20 * WEFT_MS);
        CHECK_EQ(weft_read(a, &c, 1, soon), -ETIMEDOUT);
        CHECK(weft_now() >= soon);
        CHECK_EQ(weft_recv(a, &c, 1, 0, weft_deadline_in(10 * WEFT_MS)), -ETIMEDOUT);
    }
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    idle_but_me();
}

static void kept_later(void)
{
    H_CASE("kept: a later deadline outlives the keeper's first firing");
    int a, b;
    h_tcp_pair(&a, &b);
    char c;
    CHECK_EQ(weft_write(b, "x", 1, WEFT_FOREVER), 1);
    int64_t first = weft_deadline_in(10 * WEFT_MS);
    CHECK_EQ(weft_read(a, &c, 1, first), 1); /* the keeper: armed at first */
    /* The byte comes well after the keeper fires, well before this read's
     * own deadline: the firing must arm the keeper again, not end it. */
    later_write lw = {.fd = b, .at = first + 60 * WEFT_MS};
    weft_fiber_t w;
    CHECK_EQ(weft_spawn(write_later, &lw, NULL, &w), 0);
    CHECK_EQ(weft_read(a, &c, 1, weft_deadline_in(HOUR)), 1);
    CHECK_EQ(c, 'y');
    CHECK(weft_now() >= lw.at);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    /* Nothing in force now; the keeper, still armed, fires for nothing. */
    CHECK_EQ(armed_timers(), 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    idle_but_me();
}

static int exit_fd;

static void *read_then_exit(void *arg)
{
    (void)arg;
    char c;
    CHECK_EQ(weft_read(exit_fd, &c, 1, weft_deadline_in(20 * WEFT_MS)), 1);
    return NULL;
}

static void kept_exit(void)
{
    H_CASE("kept: a fiber ends with its keeper armed");
    int a, b;
    h_tcp_pair(&a, &b);
    exit_fd = a;
    /* An odd stack size: not cached, unmapped when the fiber ends, so a
     * keeper left armed in its record would fire into unmapped memory. */
    weft_spawn_opts_t o = {.stack_size = 200 * 1024};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(weft_write(b, "x", 1, WEFT_FOREVER), 1);
        weft_fiber_t f;
        CHECK_EQ(weft_spawn(read_then_exit, NULL, &o, &f), 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    }
    CHECK_EQ(weft_sleep(60 * WEFT_MS), 0); /* past every keeper's deadline */
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
    idle_but_me();
}

enum { KEPT_N = 500 };
static int kept_fd[KEPT_N][2];
static int kept_wakes[KEPT_N], kept_res[KEPT_N];
static int64_t kept_at;

static void *kept_storm_fiber(void *arg)
{
    long i = (long)(intptr_t)arg;
    char c;
    /* A read that ends at once with a far deadline, then one that waits
     * for the common deadline (every tenth an hour later: cancelled). */
    CHECK_EQ(weft_read(kept_fd[i][0], &c, 1, weft_deadline_in(HOUR)), 1);
    int64_t at = i % 10 == 0 ? kept_at + HOUR : kept_at;
    kept_res[i] = (int)weft_read(kept_fd[i][0], &c, 1, at);
    kept_wakes[i]++;
    if (kept_res[i] != -ECANCELED)
        CHECK(weft_now() >= kept_at);
    return NULL;
}

static void kept_storm(void)
{
    H_CASE("kept: many kept deadlines at one instant, each woken once");
    static weft_fiber_t f[KEPT_N];
    for (long i = 0; i < KEPT_N; i++) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, kept_fd[i]), 0);
        CHECK_EQ(write(kept_fd[i][1], "x", 1), 1);
    }
    kept_at = weft_deadline_in(150 * WEFT_MS);
    for (long i = 0; i < KEPT_N; i++)
        CHECK_EQ(weft_spawn(kept_storm_fiber, (void *)(intptr_t)i, NULL, &f[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    for (long i = 0; i < KEPT_N; i += 10)
        CHECK_EQ(weft_cancel(f[i]), 0);
    for (long i = 0; i < KEPT_N; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    for (long i = 0; i < KEPT_N; i++) {
        CHECK_EQ(kept_wakes[i], 1);
        CHECK_EQ(kept_res[i], i % 10 == 0 ? -ECANCELED : -ETIMEDOUT);
        CHECK_EQ(weft_close(kept_fd[i][0]), 0);
        CHECK_EQ(weft_close(kept_fd[i][1]), 0);
    }
    idle_but_me();
}

static int scoped_read(void *arg)
{
    int fd = *(int *)arg;
    char c;
    return (int)weft_read(fd, &c, 1, weft_deadline_in(HOUR));
}

static void kept_scope(void)
{
    H_CASE("kept: a timeout scope ends a kept read at the scope's deadline");
    int a, b;
    h_tcp_pair(&a, &b);
    char c;
    CHECK_EQ(weft_write(b, "x", 1, WEFT_FOREVER), 1);
    CHECK_EQ(weft_read(a, &c, 1, weft_deadline_in(HOUR)), 1);
    int64_t at = weft_deadline_in(20 * WEFT_MS);
    CHECK_EQ(weft_scope_run(at, scoped_read, &a), -ETIMEDOUT);
    CHECK(weft_now() >= at);
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
    kept_earlier();
    kept_later();
    kept_exit();
    kept_storm();
    kept_scope();
    return NULL;
}

int main(void)
{
    h_begin("deadline");
    h_run(body, NULL);
    return h_end();
}
