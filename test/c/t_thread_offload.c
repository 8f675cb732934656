/* Offload pool and DNS: blocking work runs on worker threads while other
 * fibers keep running; deadlines and cancellation abandon the wait and the
 * result is cleaned up; getaddrinfo of localhost and of a name that does
 * not resolve. Crosses threads: runs under TSan. */
#include "harness.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

static void nap(long ns)
{
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static atomic_int cleanups;
static pthread_t loop_thread;

static void *square_job(void *arg)
{
    CHECK(!pthread_equal(pthread_self(), loop_thread));
    intptr_t v = (intptr_t)arg;
    nap(200000);
    return (void *)(v * v);
}

/* A job that blocks until released, returning a heap result. */
static atomic_int gate, runs;
static void *gated_job(void *arg)
{
    (void)arg;
    atomic_fetch_add(&runs, 1);
    while (!atomic_load(&gate))
        nap(100000);
    int *r = malloc(sizeof *r);
    *r = 5;
    return r;
}

static void free_result(void *arg, void *result)
{
    (void)arg;
    free(result);
    atomic_fetch_add(&cleanups, 1);
}

static int ticks;
static void *ticker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(weft_sleep(100000), 0);
        ticks++;
    }
    return NULL;
}

static void *offloader(void *arg)
{
    void *r;
    int rc = weft_offload(square_job, arg, NULL, &r, WEFT_FOREVER);
    CHECK_EQ(rc, 0);
    return r;
}

static void *gated_waiter(void *arg)
{
    (void)arg;
    void *r = NULL;
    return (void *)(intptr_t)weft_offload(gated_job, NULL, free_result, &r,
                                          WEFT_FOREVER);
}

static void test_offload(void)
{
    /* several jobs in parallel while another fiber keeps ticking */
    weft_fiber_t t, f[8];
    CHECK_EQ(weft_spawn(ticker, NULL, NULL, &t), 0);
    for (intptr_t i = 0; i < 8; i++)
        CHECK_EQ(weft_spawn(offloader, (void *)i, NULL, &f[i]), 0);
    for (intptr_t i = 0; i < 8; i++) {
        void *r;
        CHECK_EQ(weft_join(f[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((intptr_t)r, i * i);
    }
    CHECK_EQ(weft_join(t, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(ticks, 5);

    /* deadline: the fiber stops waiting; the result is cleaned up later */
    void *r = NULL;
    atomic_store(&gate, 0);
    CHECK_EQ(weft_offload(gated_job, NULL, free_result, &r,
                          weft_deadline_in(2 * MS)), -ETIMEDOUT);
    CHECK_EQ(weft_offload(gated_job, NULL, free_result, &r, 0), -EAGAIN);
    /* cancellation while waiting */
    weft_fiber_t g;
    CHECK_EQ(weft_spawn(gated_waiter, NULL, NULL, &g), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(g), 0);
    CHECK_EQ(weft_join(g, &r, WEFT_FOREVER), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
    CHECK_EQ(atomic_load(&cleanups), 0);
    atomic_store(&gate, 1);
    while (atomic_load(&cleanups) < 2)
        CHECK_EQ(weft_sleep(MS), 0);
    /* a successful gated job: no cleanup, result handed over */
    CHECK_EQ(weft_offload(gated_job, NULL, free_result, &r, WEFT_FOREVER), 0);
    CHECK_EQ(*(int *)r, 5);
    free(r);
    CHECK_EQ(atomic_load(&cleanups), 2);

    /* the race where the job finishes just as the fiber gives up, many
     * times over: every result is either returned or cleaned up */
    atomic_store(&cleanups, 0);
    atomic_store(&runs, 0);
    int returned = 0;
    for (int i = 0; i < 200; i++) {
        r = NULL;
        int rc = weft_offload(gated_job, NULL, free_result, &r,
                              weft_deadline_in((i % 7) * 5000));
        if (rc == 0) {
            free(r);
            returned++;
        } else {
            CHECK_EQ(rc, -ETIMEDOUT);
        }
    }
    /* Jobs whose deadline passed before submission never ran. Let every
     * submitted job finish (shutdown joins the workers; it blocks this loop
     * briefly, which is fine as no fiber waits in weft_offload), then let
     * the loop run the cleanups posted to it. */
    weft_offload_shutdown();
    weft_stats_t st;
    do {
        CHECK_EQ(weft_sleep(MS), 0);
        CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    } while (st.posted);
    CHECK_EQ(returned + atomic_load(&cleanups), atomic_load(&runs));
    CHECK(atomic_load(&runs) >= returned);
    CHECK_EQ(weft_offload(NULL, NULL, NULL, NULL, WEFT_FOREVER), -EINVAL);
}

static void test_dns(void)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    CHECK_EQ(weft_getaddrinfo("localhost", "80", &hints, &res, WEFT_FOREVER), 0);
    CHECK(res != NULL);
    struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_addr;
    CHECK_EQ(sin->sin_family, AF_INET);
    CHECK_EQ(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
    CHECK_EQ(ntohs(sin->sin_port), 80);
    freeaddrinfo(res);
    /* no hints, numeric */
    CHECK_EQ(weft_getaddrinfo("127.0.0.1", NULL, NULL, &res, WEFT_FOREVER), 0);
    freeaddrinfo(res);
    /* reserved names never resolve (RFC 6761), without the network */
    res = NULL;
    CHECK_EQ(weft_getaddrinfo("nonexistent.invalid", NULL, NULL, &res,
                              weft_deadline_in(5000 * MS)), -ENOENT);
    CHECK(res == NULL);
    CHECK_EQ(weft_getaddrinfo("INVALID.", NULL, NULL, &res, WEFT_FOREVER),
             -ENOENT);
    /* glibc's own "no such name", through the pool and the error mapping,
     * without touching the network: a numeric-only lookup of a name */
    struct addrinfo numeric = {0};
    numeric.ai_flags = AI_NUMERICHOST;
    CHECK_EQ(weft_getaddrinfo("not-a-number.example", NULL, &numeric, &res,
                              WEFT_FOREVER), -ENOENT);
    CHECK_EQ(weft_getaddrinfo("::1", NULL, &numeric, &res, WEFT_FOREVER), 0);
    CHECK_EQ(res->ai_family, AF_INET6);
    freeaddrinfo(res);
    /* a deadline already passed: nothing is submitted */
    CHECK_EQ(weft_getaddrinfo("localhost", NULL, NULL, &res, 0), -EAGAIN);
    /* an unknown service */
    CHECK_EQ(weft_getaddrinfo("localhost", "no-such-service-xyz", &hints, &res,
                              WEFT_FOREVER), -ENOENT);
    CHECK_EQ(weft_getaddrinfo(NULL, NULL, NULL, &res, WEFT_FOREVER), -EINVAL);
    CHECK_EQ(weft_getaddrinfo("localhost", NULL, NULL, NULL, WEFT_FOREVER),
             -EINVAL);
}

/* A gated job whose result is freed by the fiber that waited for it. */
static void *gated_freeing_waiter(void *arg)
{
    (void)arg;
    void *r = NULL;
    CHECK_EQ(weft_offload(gated_job, NULL, free_result, &r, WEFT_FOREVER), 0);
    free(r);
    return NULL;
}

/* A numeric address needs no resolver, as getaddrinfo(3) on a thread
 * answers it at once: not with a deadline of 0 (-EAGAIN, "would wait")
 * nor behind the pool's jobs when every worker is busy (-ETIMEDOUT). */
static void test_dns_numeric(void)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    CHECK_EQ(weft_getaddrinfo("127.0.0.1", "8080", &hints, &res, 0), 0);
    struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_addr;
    CHECK_EQ(sin->sin_family, AF_INET);
    CHECK_EQ(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
    CHECK_EQ(ntohs(sin->sin_port), 8080);
    freeaddrinfo(res);
    CHECK_EQ(weft_getaddrinfo("::1", NULL, &hints, &res, 0), 0);
    CHECK_EQ(res->ai_family, AF_INET6);
    freeaddrinfo(res);
    CHECK_EQ(weft_getaddrinfo(NULL, "80", &hints, &res, 0), 0);
    freeaddrinfo(res);
    /* A deadline that has passed: the one attempt is all it takes. */
    CHECK_EQ(weft_getaddrinfo("127.0.0.1", NULL, NULL, &res, 1), 0);
    freeaddrinfo(res);
    /* Bad numeric requests are refused at once too. */
    hints.ai_family = AF_INET6;
    hints.ai_flags = AI_NUMERICHOST;
    CHECK_EQ(weft_getaddrinfo("127.0.0.1", NULL, &hints, &res, 0), -ENODATA);
    hints.ai_family = 0;
    CHECK_EQ(weft_getaddrinfo("not-a-number", NULL, &hints, &res, 0), -ENOENT);
    hints.ai_flags = 0;
    /* A name still goes through the pool: deadline 0 cannot wait for it. */
    CHECK_EQ(weft_getaddrinfo("localhost", "80", &hints, &res, 0), -EAGAIN);

    /* Every worker busy: a numeric lookup is answered all the same. */
    atomic_store(&gate, 0);
    atomic_store(&runs, 0);
    weft_fiber_t w[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_spawn(gated_freeing_waiter, NULL, NULL, &w[i]), 0);
    while (atomic_load(&runs) < 4)
        CHECK_EQ(weft_sleep(MS), 0);
    CHECK_EQ(weft_getaddrinfo("127.0.0.1", "443", &hints, &res,
                              weft_deadline_in(20 * MS)), 0);
    freeaddrinfo(res);
    atomic_store(&gate, 1);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_join(w[i], NULL, WEFT_FOREVER), 0);
}

/* A child of fork() gets a pool of its own (the parent's workers do not
 * exist there). The child is a plain process: it runs its own loop. */
static void *child_body(void *arg)
{
    (void)arg;
    void *r;
    if (weft_offload(square_job, (void *)(intptr_t)9, NULL, &r,
                     weft_deadline_in(10000 * MS)) != 0 || (intptr_t)r != 81)
        return (void *)1;
    return NULL;
}

static void *child_thread_main(void *arg)
{
    (void)arg;
    void *res = (void *)1;
    if (weft_run(child_body, NULL, &res) != 0)
        return (void *)1;
    return res;
}

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

static void test_fork(void)
{
#ifdef UNDER_TSAN
    /* TSan cannot start threads in the child of a multi-threaded fork */
    printf("fork test skipped under TSan\n");
    return;
#endif
    void *r;
    CHECK_EQ(weft_offload(square_job, (void *)(intptr_t)3, NULL, &r,
                          WEFT_FOREVER), 0); /* the pool runs */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* a new thread: this one's scheduler belongs to the parent */
        pthread_t t;
        void *res = (void *)1;
        loop_thread = pthread_self();
        if (pthread_create(&t, NULL, child_thread_main, NULL) == 0)
            pthread_join(t, &res);
        weft_offload_shutdown();
        _exit(res == NULL ? 0 : 1);
    }
    int st;
    CHECK_EQ(weft_proc_wait(pid, &st, weft_deadline_in(30000 * MS)), 0);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

static void *body(void *arg)
{
    (void)arg;
    test_offload();
    test_dns();
    test_dns_numeric();
    test_fork();
    return NULL;
}

int main(void)
{
    h_begin("thread_offload");
    loop_thread = pthread_self();
    h_run(body, NULL);
    weft_offload_shutdown(); /* joins the workers; the oracle then runs */
    /* cleanups that ran on the loop are done; the rest ran on workers */
    return h_end();
}
