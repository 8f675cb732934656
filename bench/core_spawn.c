/*
 * core_spawn — nanoseconds per spawn + run + exit of a fiber that returns
 * at once.
 *
 *   core_spawn warm N REPS   spawn detached fibers in batches of 100 from
 *                            outside fibers and run each batch to
 *                            completion: stacks come from the free cache
 *   core_spawn wg N REPS     the same from inside a fiber: it spawns 100
 *                            detached fibers that each call
 *                            weft_waitgroup_done, and waits on the group
 *   core_spawn join N REPS   one at a time from inside a fiber: spawn one
 *                            fiber, weft_join it, repeat
 *   core_spawn cold N REPS   spawn N fibers at once, then run them: every
 *                            stack is a fresh mapping with a guard page,
 *                            and most are unmapped again at exit
 *
 * Prints one figure (ns per fiber) per repetition, one per line.
 */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 100

enum mode { WARM, WG, JOIN, COLD };

static void *nothing(void *arg) { return arg; }

static void *done_one(void *arg)
{
    weft_waitgroup_done(arg);
    return NULL;
}

static void check(const char *what, int rc)
{
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", what, strerror(-rc));
        exit(1);
    }
}

static void run_outside(long n, int cold)
{
    weft_sched_t *s = weft_sched_self();
    long done = 0;
    while (done < n) {
        long b = cold ? n : (n - done < BATCH ? n - done : BATCH);
        for (long i = 0; i < b; i++)
            check("weft_spawn", weft_spawn(nothing, NULL, NULL, NULL));
        check("weft_sched_run", weft_sched_run(s));
        done += b;
    }
}

static void *run_wg(void *arg)
{
    long n = *(long *)arg, done = 0;
    weft_waitgroup_t wg = WEFT_WAITGROUP_INIT;
    while (done < n) {
        long b = n - done < BATCH ? n - done : BATCH;
        weft_waitgroup_add(&wg, b);
        for (long i = 0; i < b; i++)
            check("weft_spawn", weft_spawn(done_one, &wg, NULL, NULL));
        check("weft_waitgroup_wait", weft_waitgroup_wait(&wg, WEFT_FOREVER));
        done += b;
    }
    return NULL;
}

static void *run_join(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++) {
        weft_fiber_t f;
        void *res;
        check("weft_spawn", weft_spawn(nothing, &f, NULL, &f));
        check("weft_join", weft_join(f, &res, WEFT_FOREVER));
        if (res != &f) {
            fprintf(stderr, "weft_join: wrong result\n");
            exit(1);
        }
    }
    return NULL;
}

static double bench(long n, enum mode m)
{
    int64_t t0 = weft_now();
    if (m == WARM || m == COLD) {
        run_outside(n, m == COLD);
    } else {
        check("weft_spawn", weft_spawn(m == WG ? run_wg : run_join, &n, NULL, NULL));
        check("weft_sched_run", weft_sched_run(weft_sched_self()));
    }
    int64_t t1 = weft_now();
    return (double)(t1 - t0) / (double)n;
}

int main(int argc, char **argv)
{
    static const char *names[] = {"warm", "wg", "join", "cold"};
    int m = -1;
    for (int i = 0; argc >= 2 && i < 4; i++)
        if (!strcmp(argv[1], names[i]))
            m = i;
    if (m < 0) {
        fprintf(stderr, "usage: %s warm|wg|join|cold [N [REPS]]\n", argv[0]);
        return 2;
    }
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    bench(m == COLD ? 1000 : 10000, (enum mode)m); /* warm up: page in the library */
    for (int r = 0; r < reps; r++) {
        printf("%.2f\n", bench(n, (enum mode)m));
        fflush(stdout);
    }
    return 0;
}
