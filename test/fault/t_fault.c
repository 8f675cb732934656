/*
 * t_fault — every allocation and descriptor/mapping/thread creation the
 * workloads below reach is made to fail, one at a time (src/fault.h), and
 * after each run: the failing call returned its error (the workload checks
 * each result and unwinds), the scheduler is idle (no fiber, timer, wait,
 * post or op left), it destroys cleanly, and every descriptor the run
 * opened is closed. Built only with -DWEFT_FAULT (scripts/test.d/fault.sh,
 * clang ASan+UBSan, which also catches a leak or a use after free in any
 * of those paths); run once per backend by test/c/run.sh.
 *
 * For each workload: run n = 1, 2, ... in a child process each, with the
 * n-th fault point failing, until a run completes without the fault
 * firing (every point the workload reaches has failed once).
 */
#include "weft.h"
#include "fault.h"

#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000LL

/* In a child: a failed invariant. */
#define EXPECT(c)                                                           \
    do {                                                                    \
        if (!(c)) {                                                         \
            fprintf(stderr, "%s:%d: EXPECT failed: %s (fault at %s)\n",     \
                    __FILE__, __LINE__, #c,                                 \
                    weft__fault_fired() ? weft__fault_fired() : "none");    \
            _exit(3);                                                       \
        }                                                                   \
    } while (0)

/* A result that may be the injected failure: 0/positive, or one of the
 * errors a failed allocation or descriptor may give — or a consequence of
 * one elsewhere: a peer that gave up leaves a deadline to pass
 * (-ETIMEDOUT), a stream closed early (-EPIPE, -ECONNRESET), nothing to
 * read on a "try once" (-EAGAIN). */
static bool ok_or_injected(long rc)
{
    return rc >= 0 || rc == -ENOMEM || rc == -EMFILE || rc == -EAGAIN ||
           rc == -ENFILE || rc == -ENOSYS || rc == -ETIMEDOUT || rc == -EPIPE ||
           rc == -ECONNRESET;
}
#define CALL(x)                                                              \
    ({                                                                       \
        long rc_ = (long)(x);                                                \
        if (!ok_or_injected(rc_)) {                                          \
            fprintf(stderr, "%s:%d: %s = %ld (fault at %s)\n", __FILE__,     \
                    __LINE__, #x, rc_,                                       \
                    weft__fault_fired() ? weft__fault_fired() : "none");     \
            _exit(4);                                                        \
        }                                                                    \
        rc_;                                                                 \
    })

static int fd_count(void)
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
    return n - 1;
}

/* ---- workload: fibers, timers, sync, channels, futures ---------------- */

static weft_mutex_t mu = WEFT_MUTEX_INIT;
static weft_sem_t sem = WEFT_SEM_INIT(2);

static void *sleeper(void *arg)
{
    CALL(weft_sleep((int64_t)(intptr_t)arg * 100000));
    if (CALL(weft_mutex_lock(&mu, weft_deadline_in(100 * MS))) == 0) {
        CALL(weft_yield());
        weft_mutex_unlock(&mu);
    }
    if (CALL(weft_sem_acquire(&sem, weft_deadline_in(100 * MS))) == 0) {
        CALL(weft_sleep(10000));
        weft_sem_release(&sem);
    }
    return arg;
}

static void *chan_sender(void *arg)
{
    weft_chan_t *c = arg;
    for (int i = 0; i < 20; i++)
        if (CALL(weft_chan_send(c, &i, weft_deadline_in(100 * MS))) < 0)
            break;
    weft_chan_close(c);
    return NULL;
}

static int times2(void *a, void *v, void **out)
{
    (void)a;
    *out = (void *)((intptr_t)v * 2);
    return 0;
}

static void *w_core(void *unused)
{
    (void)unused;
    weft_fiber_t f[40];
    int n = 0;
    for (int i = 0; i < 40; i++)
        if (CALL(weft_spawn(sleeper, (void *)(intptr_t)(i % 5), NULL, &f[n])) == 0)
            n++;
    weft_chan_t *c = NULL;
    if (CALL(weft_chan_create(&c, sizeof(int), 2)) == 0) {
        weft_fiber_t s;
        if (CALL(weft_spawn(chan_sender, c, NULL, &s)) == 0) {
            int v;
            long rc;
            while ((rc = weft_chan_recv(c, &v, weft_deadline_in(200 * MS))) == 0)
                ;
            EXPECT(rc == -EPIPE || ok_or_injected(rc));
            EXPECT(weft_join(s, NULL, WEFT_FOREVER) == 0);
        }
        weft_chan_destroy(c);
    }
    weft_promise_t *p = NULL;
    if (CALL(weft_promise_create(&p)) == 0) {
        weft_future_t *fu = weft_promise_future(p);
        weft_future_t *g = weft_then(fu, times2, NULL);
        weft_promise_set_value(p, (void *)21);
        if (g) {
            void *v;
            long rc = CALL(weft_future_get(g, &v, weft_deadline_in(100 * MS)));
            EXPECT(rc < 0 || v == (void *)42);
            weft_future_release(g);
        }
        weft_promise_release(p);
    }
    for (int i = 0; i < n; i++)
        EXPECT(weft_join(f[i], NULL, WEFT_FOREVER) == 0);
    return NULL;
}

/* ---- workload: descriptors, completion ops, write-behind -------------- */

static void *echo_peer(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[256];
    ssize_t k;
    while ((k = CALL(weft_read(fd, buf, sizeof buf, weft_deadline_in(200 * MS)))) > 0)
        if (CALL(weft_write_all(fd, buf, (size_t)k, NULL, weft_deadline_in(200 * MS))) < 0)
            break;
    weft_close(fd);
    return NULL;
}

static void *w_io(void *unused)
{
    (void)unused;
    int l = (int)CALL(weft_tcp_listen("127.0.0.1", 0, 16, 0));
    if (l < 0)
        return NULL;
    for (int round = 0; round < 3; round++) {
        int c = (int)CALL(weft_tcp_connect("127.0.0.1", weft_local_port(l), weft_deadline_in(200 * MS)));
        if (c < 0)
            break;
        int a = (int)CALL(weft_accept(l, NULL, NULL, weft_deadline_in(200 * MS)));
        if (a < 0) {
            weft_close(c);
            break;
        }
        weft_fiber_t peer;
        if (CALL(weft_spawn(echo_peer, (void *)(intptr_t)a, NULL, &peer)) < 0) {
            weft_close(a);
            weft_close(c);
            break;
        }
        CALL(weft_write_behind(c, round & 1));
        char out[64], in[64];
        memset(out, 'a' + round, sizeof out);
        for (int i = 0; i < 10; i++) {
            if (CALL(weft_write(c, out, sizeof out, weft_deadline_in(200 * MS))) < 0)
                break;
            size_t got;
            if (CALL(weft_read_full(c, in, sizeof in, &got, weft_deadline_in(200 * MS))) != 0)
                break;
            EXPECT(memcmp(in, out, sizeof in) == 0);
        }
        /* Waits that time out with their op in flight: a read (its record
         * in the wait) and a readiness wait (a pooled poll), each op then
         * cancelled — or, when the cancel finds no room in the ring, once
         * there is. */
        long rc = weft_read(c, in, sizeof in, weft_deadline_in(2 * MS));
        EXPECT(rc == -ETIMEDOUT || ok_or_injected(rc));
        rc = weft_wait_fd(c, WEFT_READABLE, weft_deadline_in(2 * MS));
        EXPECT(rc == -ETIMEDOUT || ok_or_injected(rc));
        weft_close(c);
        EXPECT(weft_join(peer, NULL, WEFT_FOREVER) == 0);
    }
    weft_close(l);
    /* Pipes, and a descriptor far up the table (the tables grow to it). */
    int p[2];
    if (CALL(weft_pipe(p)) == 0) {
        int hi = dup2(p[1], 900);
        if (hi >= 0) {
            CALL(weft_write(hi, "x", 1, weft_deadline_in(100 * MS)));
            weft_close(hi);
        }
        char ch;
        CALL(weft_read(p[0], &ch, 1, 0));
        weft_close(p[0]);
        weft_close(p[1]);
    }
    return NULL;
}

/* ---- workload: offload pool, DNS, posts from threads, the pool -------- */

static void *work(void *arg) { return arg; }

static int res_create(void *ctx, void **out, int64_t deadline)
{
    (void)ctx;
    (void)deadline;
    int p[2];
    int rc = weft_pipe(p);
    if (rc < 0)
        return rc;
    int *r = malloc(2 * sizeof *r);
    if (!r) {
        weft_close(p[0]);
        weft_close(p[1]);
        return -ENOMEM;
    }
    r[0] = p[0];
    r[1] = p[1];
    *out = r;
    return 0;
}

static void res_destroy(void *ctx, void *res)
{
    (void)ctx;
    int *r = res;
    weft_close(r[0]);
    weft_close(r[1]);
    free(r);
}

static void *pool_user(void *arg)
{
    weft_pool_t *pool = arg;
    for (int i = 0; i < 5; i++) {
        weft_pool_lease_t l;
        if (CALL(weft_pool_acquire(pool, &l, weft_deadline_in(200 * MS))) != 0)
            continue;
        CALL(weft_sleep(100000));
        weft_pool_release(pool, &l, i == 2 ? WEFT_POOL_BROKEN : 0);
    }
    return NULL;
}

static void posted(void *arg) { (void)arg; }

static void *poster(void *arg)
{
    (void)weft_sched_post(arg, posted, NULL); /* -ENOMEM is fine */
    return NULL;
}

static void *w_threads(void *unused)
{
    (void)unused;
    void *r = NULL;
    long rc = CALL(weft_offload(work, (void *)7, NULL, &r, weft_deadline_in(1000 * MS)));
    EXPECT(rc < 0 || r == (void *)7);
    struct addrinfo *ai = NULL;
    rc = weft_getaddrinfo("localhost", "80", NULL, &ai, weft_deadline_in(2000 * MS));
    EXPECT(rc == 0 || rc == -ENOMEM || rc == -EAGAIN || rc == -ENOENT || rc == -EIO);
    if (rc == 0)
        freeaddrinfo(ai);
    pthread_t t;
    if (pthread_create(&t, NULL, poster, weft_sched_self()) == 0)
        pthread_join(t, NULL);
    weft_pool_ops_t ops = {res_create, res_destroy, NULL};
    weft_pool_opts_t o = {.max_size = 2, .idle_timeout = 5 * MS};
    weft_pool_t *pool = NULL;
    if (CALL(weft_pool_create(&pool, &ops, NULL, &o)) == 0) {
        weft_fiber_t f[4];
        int n = 0;
        for (int i = 0; i < 4; i++)
            if (CALL(weft_spawn(pool_user, pool, NULL, &f[n])) == 0)
                n++;
        for (int i = 0; i < n; i++)
            EXPECT(weft_join(f[i], NULL, WEFT_FOREVER) == 0);
        EXPECT(weft_pool_close(pool, weft_deadline_in(1000 * MS)) == 0);
        weft_pool_destroy(pool);
    }
    return NULL;
}

/* ---- the driver ---------------------------------------------------------- */

struct workload {
    const char *name;
    weft_fn_t fn;
};

/* One run in this (child) process; _exit(0) when every invariant held. */
static void run_one(const struct workload *w, long n)
{
    int fds = fd_count();
    weft__fault_arm(n);
    weft_sched_t *s = NULL;
    long rc = CALL(weft_sched_create(&s, NULL));
    if (rc == 0) {
        /* weft_run: spawn (which may fail), run to the end, collect. */
        CALL(weft_run(w->fn, NULL, NULL));
        weft_stats_t st;
        EXPECT(weft_sched_stats(s, &st) == 0);
        EXPECT(st.fibers == 0 && st.handles == 0 && st.timers == 0 && st.waits == 0 &&
               st.fd_waits == 0 && st.posted == 0 && st.ops == 0);
        EXPECT(weft_sched_destroy(s) == 0);
    }
    weft_offload_shutdown();
    EXPECT(fd_count() == fds);
    if (getenv("T_FAULT_ONE"))
        printf("run %ld: fault at %s\n", n, weft__fault_fired() ? weft__fault_fired() : "none");
    /* exit, not _exit: LeakSanitizer checks at exit (exit status 23). */
    exit(weft__fault_fired() ? 0 : 10); /* 10: the fault did not fire: done */
}

int main(int argc, char **argv)
{
    static const struct workload loads[] = {
        {"fibers, timers, sync, channels, futures", w_core},
        {"sockets, pipes, ring ops, write-behind", w_io},
        {"offload, DNS, posts, connection pool", w_threads},
    };
    int failed = 0;
    if (argc == 3) { /* by hand: t_fault WORKLOAD N */
        run_one(&loads[atoi(argv[1])], atol(argv[2]));
        return 0;
    }
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
        long n;
        for (n = 1; n < 5000; n++) {
            fflush(NULL);
            pid_t pid = fork();
            if (pid < 0) {
                perror("fork");
                return 1;
            }
            if (pid == 0)
                run_one(&loads[i], n);
            int st;
            if (waitpid(pid, &st, 0) < 0) {
                perror("waitpid");
                return 1;
            }
            if (WIFEXITED(st) && WEXITSTATUS(st) == 10)
                break; /* ran to its end with no fault left to inject */
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "t_fault: %s: the run failing fault point %ld went wrong (%s %d)\n",
                        loads[i].name, n, WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                failed++;
            }
        }
        printf("t_fault: %s: %ld fault points, each failed once\n", loads[i].name, n - 1);
    }
    if (failed)
        return 1;
    printf("PASS t_fault [%s]\n", getenv("WEFT_BACKEND") ? getenv("WEFT_BACKEND") : "default");
    return 0;
}
