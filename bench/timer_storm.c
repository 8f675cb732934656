/*
 * timer_storm — N fibers whose sleeps end at one deadline, against the
 * same N fibers woken by one condition-variable broadcast (the floor: a
 * wake-up with no timer at all).
 *
 *   timer_storm sleep N REPS       each fiber: weft_sleep_until(D), the
 *                                  same D for all
 *   timer_storm broadcast N REPS   each fiber: weft_cond_wait(), then one
 *                                  weft_cond_broadcast()
 *
 * The figure is ns per fiber of the active time: from the first spawn
 * until the last fiber has parked, plus from the wake-up (D, or the
 * broadcast) until the last fiber has run again. The idle wait for D
 * between the two is not counted (D is set far enough ahead that every
 * fiber parks before it; a run where one did not is repeated with more
 * room). Every fiber must wake exactly once, after D. Prints one figure
 * per repetition, one per line.
 */
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "failed: %s\n", #c); exit(1); } } while (0)

static long n;
static int use_sleep;
static int64_t deadline;
static long parked, woken, late;
static int64_t t_parked, t_last;
static weft_mutex_t mu = WEFT_MUTEX_INIT;
static weft_cond_t cv = WEFT_COND_INIT;
static int go;

static void *sleeper(void *arg)
{
    (void)arg;
    if (weft_now() >= deadline)
        late++;
    if (++parked == n)
        t_parked = weft_now();
    CHECK(weft_sleep_until(deadline) == 0);
    CHECK(weft_now() >= deadline);
    woken++;
    t_last = weft_now();
    return NULL;
}

static void *waiter(void *arg)
{
    (void)arg;
    CHECK(weft_mutex_lock(&mu, WEFT_FOREVER) == 0);
    if (++parked == n)
        t_parked = weft_now();
    while (!go)
        CHECK(weft_cond_wait(&cv, &mu, WEFT_FOREVER) == 0);
    CHECK(weft_mutex_unlock(&mu) == 0);
    woken++;
    t_last = weft_now();
    return NULL;
}

static double result;

static void *storm_main(void *arg)
{
    int64_t room = *(int64_t *)arg;
    parked = woken = late = 0;
    go = 0;
    int64_t t0 = weft_now();
    deadline = t0 + room;
    for (long i = 0; i < n; i++)
        CHECK(weft_spawn(use_sleep ? sleeper : waiter, NULL, NULL, NULL) == 0);
    while (parked < n)
        CHECK(weft_yield() == 0);
    int64_t t_wake;
    if (use_sleep) {
        t_wake = deadline;
        CHECK(weft_sleep_until(deadline) == 0);
    } else {
        CHECK(weft_mutex_lock(&mu, WEFT_FOREVER) == 0);
        go = 1;
        t_wake = weft_now();
        CHECK(weft_cond_broadcast(&cv) == 0);
        CHECK(weft_mutex_unlock(&mu) == 0);
    }
    while (woken < n)
        CHECK(weft_yield() == 0);
    if (late) {
        result = -1; /* a fiber parked after D: run again with more room */
        return NULL;
    }
    CHECK(woken == n && t_last >= t_wake);
    result = (double)((t_parked - t0) + (t_last - t_wake)) / (double)n;
    return NULL;
}

static double run_once(int64_t *room)
{
    for (;;) {
        CHECK(weft_run(storm_main, room, NULL) == 0);
        if (result >= 0)
            return result;
        *room *= 2;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "sleep") && strcmp(argv[1], "broadcast"))) {
        fprintf(stderr, "usage: timer_storm sleep|broadcast [N [REPS]]\n");
        return 2;
    }
    use_sleep = !strcmp(argv[1], "sleep");
    long want = argc > 2 ? atol(argv[2]) : 100000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    CHECK(want > 0 && reps > 0);
    /* Room before D: a guess at parking time, doubled when too short. */
    int64_t room = 20 * 1000 * 1000 + (int64_t)want * 10 * 1000;
    n = want / 100 > 0 ? want / 100 : 1; /* warm up */
    (void)run_once(&room);
    n = want;
    for (int r = 0; r < reps; r++) {
        printf("%.1f\n", run_once(&room));
        fflush(stdout);
    }
    return 0;
}
