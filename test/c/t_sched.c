/* Scheduler objects: creation options and errors, backend selection, run and
 * destroy misuse, one scheduler per thread, stats. */
#include "harness.h"

#include <pthread.h>
#include <sys/socket.h>

static weft_sched_t *main_sched;

/* weft_run() where it cannot run a loop must not start its function. */
static int marked, cb_rc, cb_done;
static void *mark(void *arg)
{
    marked++;
    return arg;
}
static void run_from_callback(void *arg)
{
    (void)arg;
    cb_rc = weft_run(mark, NULL, NULL);
    cb_done = 1;
}

static void *try_misuse(void *arg)
{
    marked = cb_done = 0;
    CHECK_EQ(weft_run(mark, NULL, NULL), -EPERM);      /* from a fiber */
    CHECK_EQ(weft_sched_post(weft_sched_self(), run_from_callback, NULL), 0);
    while (!cb_done)
        CHECK_EQ(weft_sleep(1000000), 0);
    CHECK_EQ(cb_rc, -EBUSY);                           /* from a callback */
    CHECK_EQ(marked, 0);
    CHECK_EQ(weft_sched_run(main_sched), -EPERM);      /* from a fiber */
    CHECK_EQ(weft_sched_destroy(main_sched), -EBUSY);  /* while running */
    weft_sched_t *other;
    CHECK_EQ(weft_sched_create(&other, NULL), -EEXIST);
    CHECK_EQ(weft_in_fiber(), 1);
    CHECK(weft_self().id != 0);
    return arg;
}

static void *other_thread(void *arg)
{
    /* another thread: cannot destroy or run our scheduler, has its own */
    CHECK_EQ(weft_sched_destroy(main_sched), -EPERM);
    CHECK_EQ(weft_sched_run(main_sched), -EPERM);
    weft_sched_t *mine = weft_sched_self();
    CHECK(mine != NULL && mine != main_sched);
    void *res = NULL;
    CHECK_EQ(weft_run(try_misuse == NULL ? NULL : (weft_fn_t)arg, (void *)9, &res), 0);
    CHECK(res == (void *)9);
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(mine, &st), 0);
    CHECK_EQ(st.fibers, 0);
    CHECK_EQ(weft_sched_destroy(mine), 0);
    return NULL;
}

static void *ret(void *arg) { return arg; }

/* A thread that runs fibers and ends without weft_sched_destroy(): a
 * socket read and a sleep, so that its scheduler has made its ring or
 * epoll set, its wake-up descriptor and a cached stack. */
static void *reads_a_byte(void *arg)
{
    int *sv = arg;
    char c;
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
    CHECK_EQ(weft_read(sv[0], &c, 1, weft_deadline_in(5 * WEFT_SEC)), 1);
    return NULL;
}

static void *thread_runs_once(void *arg)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    CHECK_EQ(weft_run(reads_a_byte, sv, NULL), 0);
    CHECK_EQ(weft_close(sv[0]), 0);
    CHECK_EQ(close(sv[1]), 0);
    return arg;
}

int main(void)
{
    h_begin("sched");

    /* threads that end without destroying their schedulers: each is
     * destroyed as its thread exits (h_end finds no descriptor left) */
    for (int i = 0; i < 50; i++) {
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, thread_runs_once, NULL), 0);
        CHECK_EQ(pthread_join(t, NULL), 0);
    }

    const char *want = getenv("WEFT_BACKEND");

    /* bad options */
    weft_sched_t *s = NULL;
    CHECK_EQ(weft_sched_create(NULL, NULL), -EINVAL);
    weft_sched_opts_t bad = {.stack_size = 100};
    CHECK_EQ(weft_sched_create(&s, &bad), -EINVAL);
    bad = (weft_sched_opts_t){.backend = (weft_backend_t)42};
    CHECK_EQ(weft_sched_create(&s, &bad), -EINVAL);

    /* an unknown backend name is refused, not silently replaced */
    setenv("WEFT_BACKEND", "carrier-pigeon", 1);
    CHECK_EQ(weft_sched_create(&s, NULL), -EINVAL);
    /* ...also where the scheduler is made on first use: the reason, not
     * -ENOMEM */
    CHECK_EQ(weft_run(ret, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_spawn(ret, NULL, NULL, NULL), -EINVAL);
    if (want)
        setenv("WEFT_BACKEND", want, 1);
    else
        unsetenv("WEFT_BACKEND");

    /* explicit backends */
    weft_sched_opts_t o = {.backend = WEFT_BACKEND_POLL, .stack_size = 32768};
    CHECK_EQ(weft_sched_create(&s, &o), 0);
    CHECK(!strcmp(weft_sched_backend(s), "poll"));
    CHECK(weft_sched_self() == s);
    CHECK_EQ(weft_sched_destroy(s), 0);
    o.backend = WEFT_BACKEND_EPOLL;
    CHECK_EQ(weft_sched_create(&s, &o), 0);
    CHECK(!strcmp(weft_sched_backend(s), "epoll"));
    CHECK_EQ(weft_sched_destroy(s), 0);

    /* the default follows WEFT_BACKEND */
    main_sched = weft_sched_self();
    CHECK(main_sched != NULL);
    if (want && (!strcmp(want, "poll") || !strcmp(want, "epoll")))
        CHECK(!strcmp(weft_sched_backend(main_sched), want));

    /* misuse from fibers and from other threads */
    void *res = NULL;
    CHECK_EQ(weft_run(try_misuse, (void *)3, &res), 0);
    CHECK(res == (void *)3);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, other_thread, (void *)ret), 0);
    pthread_join(t, NULL);

    /* destroy refuses while fibers live; unjoined handles are released */
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(ret, NULL, NULL, &f), 0);
    CHECK_EQ(weft_sched_destroy(main_sched), -EBUSY);
    CHECK_EQ(weft_sched_run(main_sched), 0);
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(main_sched, &st), 0);
    CHECK_EQ(st.fibers, 0);
    CHECK_EQ(st.handles, 1);
    CHECK_EQ(st.spawned, 2);
    CHECK(st.stacks_cached >= 1);
    CHECK_EQ(st.stacks_unguarded, 0);
    CHECK_EQ(weft_detach(f), 0);

    /* NULLs */
    CHECK_EQ(weft_sched_run(NULL), -EINVAL);
    CHECK_EQ(weft_sched_destroy(NULL), -EINVAL);
    CHECK_EQ(weft_sched_stats(NULL, &st), -EINVAL);
    CHECK_EQ(weft_sched_stats(main_sched, NULL), -EINVAL);
    CHECK(weft_sched_backend(NULL) == NULL);
    CHECK_EQ(weft_unpark(NULL, (weft_fiber_t){0}), -ESRCH);
    CHECK_EQ(weft_run(NULL, NULL, NULL), -EINVAL);
    /* running an empty scheduler returns at once */
    CHECK_EQ(weft_sched_run(main_sched), 0);
    return h_end();
}
