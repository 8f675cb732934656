/*
 * core_switch — nanoseconds per context switch.
 *
 *   core_switch raw   N REPS   weft__ctx_switch between two bare contexts
 *                              (no scheduler), each switching from its own
 *                              loop, as in the Boost.Context peer
 *   core_switch sym   N REPS   the same, both contexts switching from one
 *                              shared call site, as fibers do inside the
 *                              scheduler: the floor of a scheduler switch
 *   core_switch yield N REPS   two fibers ping-pong through the scheduler
 *                              with weft_yield(); each yield is one switch
 *
 * Prints one figure (ns per switch) per repetition, one per line.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static weft__ctx main_ctx, peer_ctx;

static void peer_entry(void *arg)
{
    (void)arg;
    for (;;)
        weft__ctx_switch(&peer_ctx, &main_ctx);
}

static double bench_raw(long n)
{
    static char *stack;
    const size_t size = 64 * 1024;
    if (!stack) {
        stack = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        weft__ctx_make(&peer_ctx, stack, size, peer_entry, NULL);
    }
    for (long i = 0; i < 1000; i++) /* warm up */
        weft__ctx_switch(&main_ctx, &peer_ctx);
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++)
        weft__ctx_switch(&main_ctx, &peer_ctx);
    int64_t t1 = weft_now();
    return (double)(t1 - t0) / (2.0 * (double)n); /* there and back */
}

static void *yielder(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++)
        weft_yield();
    return NULL;
}

/* Switches left. Each side decrements before switching; with an even
 * start the main side sees 0 and leaves, the peer stays in its switch. */
static long sym_left;

static __attribute__((noinline)) void sym_loop(weft__ctx *self, weft__ctx *other)
{
    while (sym_left-- > 0)
        weft__ctx_switch(self, other);
}

static void sym_entry(void *arg)
{
    (void)arg;
    for (;;)
        sym_loop(&peer_ctx, &main_ctx);
}

static double bench_sym(long n)
{
    static char *stack;
    const size_t size = 64 * 1024;
    if (!stack) {
        stack = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (stack == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        weft__ctx_make(&peer_ctx, stack, size, sym_entry, NULL);
    }
    sym_left = 1000;
    sym_loop(&main_ctx, &peer_ctx);
    sym_left = 2 * n;
    int64_t t0 = weft_now();
    sym_loop(&main_ctx, &peer_ctx);
    int64_t t1 = weft_now();
    return (double)(t1 - t0) / (2.0 * (double)n);
}

static double bench_yield(long n)
{
    weft_sched_t *s = weft_sched_self();
    long warm = 1000;
    weft_spawn(yielder, &warm, NULL, NULL);
    weft_spawn(yielder, &warm, NULL, NULL);
    weft_sched_run(s);
    weft_spawn(yielder, &n, NULL, NULL);
    weft_spawn(yielder, &n, NULL, NULL);
    int64_t t0 = weft_now();
    weft_sched_run(s);
    int64_t t1 = weft_now();
    return (double)(t1 - t0) / (2.0 * (double)n);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s raw|sym|yield [N [REPS]]\n", argv[0]);
        return 2;
    }
    long n = argc > 2 ? atol(argv[2]) : 10000000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    for (int r = 0; r < reps; r++) {
        double ns;
        if (!strcmp(argv[1], "raw"))
            ns = bench_raw(n);
        else if (!strcmp(argv[1], "sym"))
            ns = bench_sym(n);
        else if (!strcmp(argv[1], "yield"))
            ns = bench_yield(n);
        else {
            fprintf(stderr, "unknown mode %s\n", argv[1]);
            return 2;
        }
        printf("%.2f\n", ns);
        fflush(stdout);
    }
    return 0;
}
