/* The spawn and exit paths: the free-stack cache (a stack is cached by
 * its finishing fiber, or released by the next context when it cannot
 * be: an odd size, a full cache), the exit switch into each kind of next
 * context (a new fiber, a resumed one, the loop), join one at a time, and
 * the floating-point control state a new fiber inherits. */
#include "harness.h"

#include <fenv.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>

#define CACHE 8

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define H_TSAN 1
#endif
#endif
#if !defined(H_TSAN) && defined(__SANITIZE_THREAD__)
#define H_TSAN 1
#endif
#ifndef H_TSAN
#define H_TSAN 0
#endif

static size_t cached(void)
{
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    return st.stacks_cached;
}

/* Whether the page holding @p is mapped (mincore fails with ENOMEM on
 * an unmapped range). */
static bool mapped(const void *p)
{
    unsigned char v;
    uintptr_t page = (uintptr_t)p & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    if (mincore((void *)page, 1, &v) == 0)
        return true;
    CHECK_EQ(errno, ENOMEM);
    return false;
}

/* Where each of these fibers' stacks was (an address in its top page). */
static const void *where[100];
static void *note_stack(void *arg)
{
    volatile char here = 0;
    where[(long)arg] = (const void *)&here;
    return arg;
}

static void *ret_arg(void *arg) { return arg; }

/* Uses much of a 64 KiB stack (~40 KiB; ~50 KiB with ASan's redzones),
 * so a reused stack must be whole. */
static long deep(int depth)
{
    volatile char pad[512];
    pad[0] = (char)depth;
    pad[511] = (char)depth;
    if (depth == 0)
        return 0;
    return deep(depth - 1) + 1 + pad[0] - pad[511];
}

static void *use_stack(void *arg)
{
    CHECK_EQ(deep(70), 70);
    return arg;
}

static long order[16], norder;
static void *note(void *arg)
{
    order[norder++] = (long)arg;
    return arg;
}

static void *yield_then_note(void *arg)
{
    CHECK_EQ(weft_yield(), 0);
    return note(arg);
}

static void *join_one(void *arg)
{
    weft_fiber_t f = *(weft_fiber_t *)arg;
    void *res = NULL;
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)5);
    return NULL;
}

static void *round_mode(void *arg)
{
    (void)arg;
    return (void *)(long)fegetround();
}

/* Spawned from a fiber with its own rounding mode. */
static void *spawn_in_mode(void *arg)
{
    int mode = (int)(long)arg;
    CHECK_EQ(fesetround(mode), 0);
    weft_fiber_t f;
    void *res = NULL;
    CHECK_EQ(weft_spawn(round_mode, NULL, NULL, &f), 0);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK_EQ((long)res, mode);
    CHECK_EQ(fesetround(FE_TONEAREST), 0);
    return NULL;
}

static void *body(void *arg)
{
    weft_fiber_t f, g;
    void *res;

    /* One at a time with join: the finishing fiber caches its stack, the
     * next spawn takes it back. */
    size_t c0 = cached();
    for (long i = 0; i < 1000; i++) {
        CHECK_EQ(weft_spawn(ret_arg, (void *)i, NULL, &f), 0);
        CHECK_EQ(cached(), c0 > 0 ? c0 - 1 : 0);
        CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
        CHECK(res == (void *)i);
        CHECK_EQ(cached(), c0 > 0 ? c0 : 1);
        c0 = cached();
    }

    /* Reused stacks are whole: deep frames on every cached stack. Of the
     * 16 finishing fibers the first 8 fill the cache and the last 8 are
     * released by the next context (the next new fiber; the joiner for
     * the last). */
    weft_fiber_t many[CACHE * 2];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < CACHE * 2; i++)
            CHECK_EQ(weft_spawn(use_stack, (void *)(long)i, NULL, &many[i]), 0);
        for (int i = 0; i < CACHE * 2; i++) {
            CHECK_EQ(weft_join(many[i], &res, WEFT_FOREVER), 0);
            CHECK(res == (void *)(long)i);
        }
        CHECK_EQ(cached(), CACHE);
    }

    /* A finishing fiber's next context: a new fiber, a fiber resuming
     * from a yield, a joiner. */
    CHECK_EQ(cached(), CACHE);
    norder = 0;
    CHECK_EQ(weft_spawn(yield_then_note, (void *)3, NULL, &g), 0);
    CHECK_EQ(weft_spawn(note, (void *)1, NULL, &f), 0);
    CHECK_EQ(weft_detach(f), 0);
    CHECK_EQ(weft_spawn(note, (void *)2, NULL, NULL), 0);
    CHECK_EQ(weft_join(g, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)3);
    CHECK_EQ(norder, 3);
    CHECK_EQ(order[0], 1);
    CHECK_EQ(order[1], 2);
    CHECK_EQ(order[2], 3);
    CHECK_EQ(cached(), CACHE);

    /* A joiner of a joiner: two exits in a row into resumed fibers. */
    CHECK_EQ(weft_spawn(ret_arg, (void *)5, NULL, &f), 0);
    CHECK_EQ(weft_spawn(join_one, &f, NULL, &g), 0);
    CHECK_EQ(weft_join(g, NULL, WEFT_FOREVER), 0);

    /* Stacks of another size are never cached: unmapped on exit, as are
     * default-size stacks beyond the cache's limit. */
    weft_spawn_opts_t odd = {.stack_size = 100000};
    for (long i = 0; i < 50; i++)
        CHECK_EQ(weft_spawn(note_stack, (void *)i, &odd, NULL), 0);
    for (long i = 50; i < 100; i++)
        CHECK_EQ(weft_spawn(note_stack, (void *)i, NULL, NULL), 0);
    CHECK_EQ(cached(), 0);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(cached(), CACHE);
    if (!H_TSAN) { /* TSan maps memory of its own into freed ranges */
        int still = 0;
        for (int i = 0; i < 50; i++)
            CHECK(!mapped(where[i]));
        for (int i = 50; i < 100; i++)
            still += mapped(where[i]);
        CHECK_EQ(still, CACHE);
    }

    /* A new fiber starts with its spawner's rounding mode: a fiber's,
     * on a cached stack and on a fresh one. */
    int modes[4] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(weft_spawn(spawn_in_mode, (void *)(long)modes[i], NULL, &f), 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    }
    weft_spawn_opts_t fresh = {.stack_size = 200000};
    CHECK_EQ(fesetround(FE_UPWARD), 0);
    CHECK_EQ(weft_spawn(round_mode, NULL, &fresh, &f), 0);
    CHECK_EQ(fesetround(FE_TONEAREST), 0);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK_EQ((long)res, FE_UPWARD);
    return arg;
}

static long mode_seen;
static void *record_mode(void *arg)
{
    (void)arg;
    mode_seen = fegetround();
    return NULL;
}

int main(void)
{
    h_begin("spawn_cache");
    weft_sched_t *s;
    weft_sched_opts_t o = {.stack_cache = CACHE};
    CHECK_EQ(weft_sched_create(&s, &o), 0);

    /* Spawned outside fibers, run by the loop: the last one to finish
     * switches to the loop's own context, which releases its stack (the
     * cache is full by then). */
    for (long i = 0; i < 3 * CACHE; i++)
        CHECK_EQ(weft_spawn(ret_arg, NULL, NULL, NULL), 0);
    CHECK_EQ(cached(), 0);
    CHECK_EQ(weft_sched_run(s), 0);
    CHECK_EQ(cached(), CACHE);

    /* From the loop's context, with its own rounding mode. */
    CHECK_EQ(fesetround(FE_DOWNWARD), 0);
    CHECK_EQ(weft_spawn(record_mode, NULL, NULL, NULL), 0);
    CHECK_EQ(fesetround(FE_TONEAREST), 0);
    CHECK_EQ(weft_sched_run(s), 0);
    CHECK_EQ(mode_seen, FE_DOWNWARD);

    h_run(body, NULL);
    CHECK_EQ(cached(), CACHE);
    return h_end();
}
