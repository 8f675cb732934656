/* Context switching: callee-saved registers, floating-point state and the
 * FP control registers survive switches; deep stacks; many fibers. */
#include "harness.h"

#include <fenv.h>
#include <math.h>

#define ROUNDS 1000

static volatile double sink;

/* Keeps values live in callee-saved registers across each yield. */
static void *reg_keeper(void *arg)
{
    long id = (long)arg;
    long a = id * 3, b = id * 5, c = id * 7, d = id * 11, e = id * 13, f = id;
    double x = (double)id * 1.5, y = (double)id * 2.25;
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_EQ(weft_yield(), 0);
        a += 1; b += 2; c += 3; d += 4; e += 5; f += 6;
        x += 0.5; y += 0.25;
    }
    CHECK_EQ(a, id * 3 + ROUNDS);
    CHECK_EQ(b, id * 5 + 2 * ROUNDS);
    CHECK_EQ(c, id * 7 + 3 * ROUNDS);
    CHECK_EQ(d, id * 11 + 4 * ROUNDS);
    CHECK_EQ(e, id * 13 + 5 * ROUNDS);
    CHECK_EQ(f, id + 6 * ROUNDS);
    CHECK(x == (double)id * 1.5 + 0.5 * ROUNDS);
    CHECK(y == (double)id * 2.25 + 0.25 * ROUNDS);
    return NULL;
}

/* Each fiber keeps its own rounding mode (MXCSR / FPCR) across switches. */
static void *rounding(void *arg)
{
    int mode = (int)(long)arg;
    CHECK_EQ(fesetround(mode), 0);
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(weft_yield(), 0);
        CHECK_EQ(fegetround(), mode);
        volatile double one = 1.0, three = 3.0;
        double q = one / three;
        sink = q;
    }
    /* The loop context must not inherit our mode: restore for tidiness. */
    fesetround(FE_TONEAREST);
    return NULL;
}

static long recurse(int depth)
{
    volatile char pad[256];
    pad[0] = (char)depth;
    if (depth == 0)
        return pad[0];
    long r = recurse(depth - 1) + 1;
    if (depth % 50 == 0)
        CHECK_EQ(weft_yield(), 0);
    return r + pad[0] - (char)depth;
}

static void *deep(void *arg)
{
    /* ~100 KiB of frames on a 256 KiB stack, yielding on the way. */
    CHECK_EQ(recurse(400), 400);
    return arg;
}

static void *body(void *arg)
{
    weft_fiber_t f[16];
    for (long i = 0; i < 16; i++)
        CHECK_EQ(weft_spawn(reg_keeper, (void *)(i + 1), NULL, &f[i]), 0);
    for (int i = 0; i < 16; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);

    int modes[4] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_spawn(rounding, (void *)(long)modes[i], NULL, &f[i]), 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(fegetround(), FE_TONEAREST);

    weft_spawn_opts_t big = {.stack_size = 256 * 1024};
    void *res = NULL;
    CHECK_EQ(weft_spawn(deep, (void *)0x1234, &big, &f[0]), 0);
    CHECK_EQ(weft_join(f[0], &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)0x1234);
    return arg;
}

int main(void)
{
    h_begin("switch");
    h_run(body, NULL);
    return h_end();
}
