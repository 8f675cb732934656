/* Spawn, join, detach, results, handle misuse, many fibers. */
#include "harness.h"

static void *ret_arg(void *arg) { return arg; }

static void *sleeper(void *arg)
{
    CHECK_EQ(weft_sleep((int64_t)(long)arg), 0);
    return arg;
}

static long counter;
static void *count_and_exit(void *arg)
{
    CHECK_EQ(weft_sleep(1000000), 0); /* 1 ms: all 100k alive at once */
    counter++;
    return arg;
}

static void *join_self(void *arg)
{
    CHECK_EQ(weft_join(weft_self(), NULL, WEFT_FOREVER), -EDEADLK);
    return arg;
}

static weft_fiber_t target;
static void *first_joiner(void *arg)
{
    void *res = NULL;
    CHECK_EQ(weft_join(target, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)(long)20000000);
    return arg;
}

static void *body(void *arg)
{
    weft_fiber_t f;
    void *res;

    /* result passes through join; the handle is consumed */
    CHECK_EQ(weft_spawn(ret_arg, (void *)0xabc, NULL, &f), 0);
    CHECK(f.id != 0);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)0xabc);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), -ESRCH);   /* joined twice */
    CHECK_EQ(weft_detach(f), -ESRCH);
    CHECK_EQ(weft_cancel(f), -ESRCH);

    /* join a fiber that already finished */
    CHECK_EQ(weft_spawn(ret_arg, (void *)7, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_join(f, &res, 0), 0); /* deadline 0: no wait needed */
    CHECK(res == (void *)7);

    /* join with a deadline that passes first, then for real */
    CHECK_EQ(weft_spawn(sleeper, (void *)(long)50000000, NULL, &f), 0);
    CHECK_EQ(weft_join(f, &res, 0), -EAGAIN);
    CHECK_EQ(weft_join(f, &res, weft_deadline_in(1000000)), -ETIMEDOUT);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)(long)50000000);

    /* joining yourself, a second joiner, detached handles */
    CHECK_EQ(weft_spawn(join_self, NULL, NULL, &f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_spawn(sleeper, (void *)(long)20000000, NULL, &target), 0);
    weft_fiber_t j1;
    CHECK_EQ(weft_spawn(first_joiner, NULL, NULL, &j1), 0);
    CHECK_EQ(weft_yield(), 0); /* j1 is now waiting in weft_join */
    CHECK_EQ(weft_join(target, NULL, WEFT_FOREVER), -EINVAL);
    CHECK_EQ(weft_detach(target), -EINVAL);
    CHECK_EQ(weft_join(j1, NULL, WEFT_FOREVER), 0);

    CHECK_EQ(weft_spawn(sleeper, (void *)(long)1000000, NULL, &f), 0);
    CHECK_EQ(weft_detach(f), 0);
    CHECK_EQ(weft_detach(f), -EINVAL);                   /* detached already */
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), -EINVAL); /* not joinable */
    CHECK_EQ(weft_spawn(ret_arg, NULL, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_detach(f), 0);                          /* finished: freed */
    CHECK_EQ(weft_detach(f), -ESRCH);

    /* stale and forged handles */
    CHECK_EQ(weft_join((weft_fiber_t){0}, NULL, 0), -ESRCH);
    CHECK_EQ(weft_join((weft_fiber_t){~0ull}, NULL, 0), -ESRCH);
    CHECK_EQ(weft_cancel((weft_fiber_t){12345}), -ESRCH);

    /* bad spawn arguments */
    CHECK_EQ(weft_spawn(NULL, NULL, NULL, &f), -EINVAL);
    weft_spawn_opts_t tiny = {.stack_size = 4096};
    CHECK_EQ(weft_spawn(ret_arg, NULL, &tiny, &f), -EINVAL);
    weft_spawn_opts_t huge = {.stack_size = (size_t)1 << 40};
    CHECK_EQ(weft_spawn(ret_arg, NULL, &huge, &f), -EINVAL);
    weft_spawn_opts_t custom = {.stack_size = 100000};
    CHECK_EQ(weft_spawn(ret_arg, (void *)3, &custom, &f), 0);
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)3);

    /* 100,000 fibers that sleep and exit */
    counter = 0;
    for (long i = 0; i < 100000; i++)
        CHECK_EQ(weft_spawn(count_and_exit, NULL, NULL, NULL), 0);
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    CHECK(st.fibers >= 100000);
    CHECK_EQ(st.stacks_unguarded, 0);
    while (counter < 100000)
        CHECK_EQ(weft_sleep(2000000), 0);
    return arg;
}

/* Fibers spawned before the loop runs, and weft_run with a result. */
static void *early(void *arg)
{
    *(int *)arg = 1;
    return NULL;
}

int main(void)
{
    h_begin("spawn");
    int ran = 0;
    CHECK_EQ(weft_spawn(early, &ran, NULL, NULL), 0);
    CHECK_EQ(ran, 0);
    h_run(body, NULL);
    CHECK_EQ(ran, 1);
    void *res = NULL;
    CHECK_EQ(weft_run(ret_arg, (void *)42, &res), 0);
    CHECK(res == (void *)42);
    /* outside fibers: blocking calls refuse, weft_self is the zero handle */
    CHECK_EQ(weft_self().id, 0);
    CHECK_EQ(weft_in_fiber(), 0);
    CHECK_EQ(weft_yield(), -EPERM);
    CHECK_EQ(weft_sleep(1), -EPERM);
    CHECK_EQ(weft_park(0), -EPERM);
    CHECK_EQ(weft_join((weft_fiber_t){1}, NULL, 0), -EPERM);
    return h_end();
}
