/*
 * core_spawn — nanoseconds per spawn + run + exit of a fiber that returns
 * at once.
 *
 *   core_spawn warm N REPS   spawn detached fibers in batches of 100 from
 *                            outside fibers and run each batch to
 *                            completion: stacks come from the free cache
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

static void *nothing(void *arg) { return arg; }

static double bench(long n, int cold)
{
    weft_sched_t *s = weft_sched_self();
    int64_t t0 = weft_now();
    long done = 0;
    while (done < n) {
        long b = cold ? n : (n - done < BATCH ? n - done : BATCH);
        for (long i = 0; i < b; i++) {
            int rc = weft_spawn(nothing, NULL, NULL, NULL);
            if (rc < 0) {
                fprintf(stderr, "weft_spawn: %s\n", strerror(-rc));
                exit(1);
            }
        }
        weft_sched_run(s);
        done += b;
    }
    int64_t t1 = weft_now();
    return (double)(t1 - t0) / (double)n;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "warm") && strcmp(argv[1], "cold"))) {
        fprintf(stderr, "usage: %s warm|cold [N [REPS]]\n", argv[0]);
        return 2;
    }
    int cold = !strcmp(argv[1], "cold");
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    bench(cold ? 1000 : 10000, cold); /* warm up: page in the library */
    for (int r = 0; r < reps; r++) {
        printf("%.2f\n", bench(n, cold));
        fflush(stdout);
    }
    return 0;
}
