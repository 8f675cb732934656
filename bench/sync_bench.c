/*
 * sync_bench — sync and future benchmarks (peer: bench/boost_fiber_sync.cpp,
 * the same workloads on Boost.Fiber).
 *
 *   sync_bench mutex N REPS   2 fibers, each N times: lock, yield, unlock —
 *                             every acquisition is a hand-off from the
 *                             other fiber; ns per lock/unlock
 *   sync_bench chan N REPS    ping-pong over two unbuffered int channels;
 *                             ns per round trip
 *   sync_bench then N REPS    promise -> 10 then steps -> set -> get,
 *                             N times; ns per chain
 *   sync_bench limit N REPS   N tasks (each yields once) through a task
 *                             limiter of 16; ns per task
 *
 * Prints one figure per repetition, one per line.
 */
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long n;
static double result;

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "failed: %s\n", #c); exit(1); } } while (0)

/* ---- mutex hand-off ---- */
static weft_mutex_t mu = WEFT_MUTEX_INIT;
static long counter;

static void *mutex_worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < n; i++) {
        CHECK(weft_mutex_lock(&mu, WEFT_FOREVER) == 0);
        counter++;
        weft_yield();
        CHECK(weft_mutex_unlock(&mu) == 0);
    }
    return NULL;
}

static void *mutex_main(void *arg)
{
    (void)arg;
    weft_fiber_t a, b;
    counter = 0;
    int64_t t0 = weft_now();
    CHECK(weft_spawn(mutex_worker, NULL, NULL, &a) == 0);
    CHECK(weft_spawn(mutex_worker, NULL, NULL, &b) == 0);
    weft_join(a, NULL, WEFT_FOREVER);
    weft_join(b, NULL, WEFT_FOREVER);
    CHECK(counter == 2 * n);
    result = (double)(weft_now() - t0) / (2.0 * (double)n);
    return NULL;
}

/* ---- channel ping-pong ---- */
static weft_chan_t *ping, *pong;

static void *chan_echo(void *arg)
{
    (void)arg;
    int v;
    while (weft_chan_recv(ping, &v, WEFT_FOREVER) == 0)
        weft_chan_send(pong, &v, WEFT_FOREVER);
    return NULL;
}

static void *chan_main(void *arg)
{
    (void)arg;
    CHECK(weft_chan_create(&ping, sizeof(int), 0) == 0);
    CHECK(weft_chan_create(&pong, sizeof(int), 0) == 0);
    weft_fiber_t e;
    CHECK(weft_spawn(chan_echo, NULL, NULL, &e) == 0);
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++) {
        int v = (int)i, w;
        weft_chan_send(ping, &v, WEFT_FOREVER);
        weft_chan_recv(pong, &w, WEFT_FOREVER);
        CHECK(w == v);
    }
    result = (double)(weft_now() - t0) / (double)n;
    weft_chan_close(ping);
    weft_join(e, NULL, WEFT_FOREVER);
    weft_chan_destroy(ping);
    weft_chan_destroy(pong);
    return NULL;
}

/* ---- 10-step then chain ---- */
static int step(void *arg, void *v, void **out)
{
    (void)arg;
    *out = (void *)((intptr_t)v + 1);
    return 0;
}

static void *then_main(void *arg)
{
    (void)arg;
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++) {
        weft_promise_t *p;
        CHECK(weft_promise_create(&p) == 0);
        weft_future_t *f = weft_promise_future(p);
        for (int k = 0; k < 10; k++)
            f = weft_then(f, step, NULL);
        weft_promise_set_value(p, (void *)(intptr_t)i);
        void *v;
        CHECK(weft_future_get(f, &v, WEFT_FOREVER) == 0);
        CHECK((intptr_t)v == i + 10);
        weft_future_release(f);
        weft_promise_release(p);
    }
    result = (double)(weft_now() - t0) / (double)n;
    return NULL;
}

/* ---- semaphore-limited spawn ---- */
static weft_limiter_t lim = WEFT_LIMITER_INIT(16);
static long tasks_done;

static void *task(void *arg)
{
    (void)arg;
    weft_yield();
    tasks_done++;
    return NULL;
}

static void *limit_main(void *arg)
{
    (void)arg;
    tasks_done = 0;
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++)
        CHECK(weft_limiter_spawn(&lim, task, NULL, WEFT_FOREVER) == 0);
    CHECK(weft_limiter_wait(&lim, WEFT_FOREVER) == 0);
    CHECK(tasks_done == n);
    result = (double)(weft_now() - t0) / (double)n;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sync_bench mutex|chan|then|limit [N [REPS]]\n");
        return 2;
    }
    weft_fn_t fn = !strcmp(argv[1], "mutex") ? mutex_main
                 : !strcmp(argv[1], "chan")  ? chan_main
                 : !strcmp(argv[1], "then")  ? then_main
                 : !strcmp(argv[1], "limit") ? limit_main : NULL;
    if (!fn)
        return 2;
    long want = argc > 2 ? atol(argv[2]) : 1000000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    n = want / 100 > 0 ? want / 100 : 1; /* warm up */
    CHECK(weft_run(fn, NULL, NULL) == 0);
    n = want;
    for (int r = 0; r < reps; r++) {
        CHECK(weft_run(fn, NULL, NULL) == 0);
        printf("%.2f\n", result);
        fflush(stdout);
    }
    return 0;
}
