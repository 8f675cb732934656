/*
 * harness.h — shared test scaffolding.
 *
 * Each test is its own program run in its own process (test/c/run.sh adds a
 * timeout and picks the backend with WEFT_BACKEND). h_begin() records the
 * open descriptors before weft creates anything; h_end() is the teardown
 * oracle: no live fibers, handles, timers, waits or posts, the scheduler
 * destroys cleanly, and every descriptor opened since h_begin() is closed.
 */
#ifndef WEFT_TEST_HARNESS_H
#define WEFT_TEST_HARNESS_H

#include "weft.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/*
 * Named cases. A failure names the case it happened in: the one set last
 * with H_CASE("...") (a case that is a part of a function), else the
 * function the check is in (each test function is a case).
 */
static const char *h_case_name;
#define H_CASE(name) (h_case_name = (name), printf("case: %s\n", h_case_name))
static inline const char *h_case(const char *fn)
{
    return h_case_name ? h_case_name : fn;
}

#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "%s:%d: [case %s] CHECK failed: %s\n", __FILE__,  \
                    __LINE__, h_case(__func__), #c);                          \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define CHECK_EQ(a, b)                                                        \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_) {                                                       \
            fprintf(stderr, "%s:%d: [case %s] CHECK_EQ failed: %s == %lld, "  \
                    "%s == %lld\n", __FILE__, __LINE__, h_case(__func__), #a,  \
                    a_, #b, b_);                                              \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static int h_fds_at_start;
static const char *h_name;

static inline int h_fd_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* For tests that walk fibers (weft_fibers_each, weft_dump): the first walk
 * loads libunwind where weft was built with it, which keeps a pipe for the
 * life of the process. Take that before h_begin() counts descriptors; a
 * later walk must open none (h_end checks). */
static inline int h_walk_nothing(const weft_fiber_info_t *in, void *arg)
{
    (void)in;
    (void)arg;
    return 0;
}
static inline void h_load_unwinder(void)
{
    weft_sched_t *s;
    if (weft_sched_create(&s, NULL) == 0) {
        weft_fibers_each(s, h_walk_nothing, NULL);
        weft_sched_destroy(s);
    }
}

static inline void h_begin(const char *name)
{
    h_name = name;
    h_fds_at_start = h_fd_count();
    /* The library must never need SIGPIPE ignored: keep the default. */
    signal(SIGPIPE, SIG_DFL);
}

/* Raise the descriptor limit to @want (root may raise the hard limit too),
 * else as far as the hard limit allows. Returns the soft limit now. */
static inline long h_raise_nofile(long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if ((long)rl.rlim_cur >= want)
        return (long)rl.rlim_cur;
    struct rlimit up = {(rlim_t)want, rl.rlim_max > (rlim_t)want ? rl.rlim_max : (rlim_t)want};
    if (setrlimit(RLIMIT_NOFILE, &up) != 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    return (long)rl.rlim_cur;
}

/* In a fiber: a connected TCP pair over loopback, @a the accepted side,
 * @b the connecting one. */
static inline void h_tcp_pair(int *a, int *b)
{
    int l = weft_tcp_listen("127.0.0.1", 0, 4, 0);
    CHECK(l >= 0);
    *b = weft_tcp_connect("127.0.0.1", weft_local_port(l), weft_deadline_in(5000000000LL));
    CHECK(*b >= 0);
    *a = weft_accept(l, NULL, NULL, weft_deadline_in(5000000000LL));
    CHECK(*a >= 0);
    CHECK_EQ(weft_close(l), 0);
}

/* In a fiber: start @fn(@arg) in a fiber of its own, give it 2 ms to
 * block, then end its wait by cancelling it (@close_fd < 0) or by closing
 * @close_fd under it, and return once it has finished. */
static inline void h_interrupt(weft_fn_t fn, void *arg, int close_fd)
{
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(fn, arg, NULL, &f), 0);
    CHECK_EQ(weft_sleep(2000000), 0);
    if (close_fd >= 0)
        CHECK_EQ(weft_close(close_fd), 0);
    else
        CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
}

static inline void h_check_idle(void)
{
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    CHECK_EQ(st.fibers, 0);
    CHECK_EQ(st.handles, 0);
    CHECK_EQ(st.timers, 0);
    CHECK_EQ(st.waits, 0);
    CHECK_EQ(st.fd_waits, 0);
    CHECK_EQ(st.posted, 0);
    CHECK_EQ(st.ops, 0);
}

static inline int h_end(void)
{
    weft_sched_t *s = weft_sched_self();
    CHECK(s != NULL);
    const char *backend = weft_sched_backend(s);
    /* test/c/run.sh says which backend this run is for: a silent fallback
     * must not pass as a run on another backend. */
    const char *expect = getenv("WEFT_EXPECT_BACKEND");
    if (expect && *expect && strcmp(expect, backend) != 0) {
        fprintf(stderr, "expected backend %s, ran on %s\n", expect, backend);
        exit(1);
    }
    h_check_idle();
    CHECK_EQ(weft_sched_destroy(s), 0);
    CHECK_EQ(h_fd_count(), h_fds_at_start);
    printf("PASS %s [%s]\n", h_name, backend);
    return 0;
}

/* Send stderr to an unlinked temporary file until h_stderr_end(). */
typedef struct h_capture {
    int saved, fd;
} h_capture;
static inline h_capture h_stderr_begin(void)
{
    fflush(stderr);
    h_capture c = {dup(2), -1};
    char path[] = "/tmp/weft-test-XXXXXX";
    c.fd = mkstemp(path);
    CHECK(c.saved >= 0 && c.fd >= 0);
    unlink(path);
    CHECK_EQ(dup2(c.fd, 2), 2);
    return c;
}
/* Put stderr back and read what was written into @buf (@size bytes,
 * NUL-terminated); returns the length, > 0. */
static inline size_t h_stderr_end(h_capture c, char *buf, size_t size)
{
    fflush(stderr);
    CHECK_EQ(dup2(c.saved, 2), 2);
    close(c.saved);
    ssize_t n = pread(c.fd, buf, size - 1, 0);
    close(c.fd);
    CHECK(n > 0);
    buf[n] = '\0';
    return (size_t)n;
}

/* Run @fn as the main fiber of this test and check it returned NULL. */
static inline void h_run(weft_fn_t fn, void *arg)
{
    void *res = (void *)1;
    CHECK_EQ(weft_run(fn, arg, &res), 0);
    CHECK(res == NULL);
}

#endif
