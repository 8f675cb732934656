/* Loop health in weft_stats_t: exact counts in a scripted run — k fibers
 * spawned and ended, the peak alive, n sleeps (timers fired, deadlines
 * armed and ended), m reads that each had to wait (one read op or
 * readiness wait each), an accept that waited — and the clocks and the
 * ready-delay percentiles consistent. */
#include "harness.h"

#include <sys/socket.h>

#define K 10
#define N 5
#define M 4

static int sp[2], got;
static weft_fiber_t reader_h;

static void *nothing(void *arg) { return arg; }
static void *sleeper(void *arg)
{
    CHECK_EQ(weft_sleep(WEFT_MS), 0);
    return arg;
}
static void *reader(void *arg)
{
    char c;
    for (int i = 0; i < M; i++)
    {
        CHECK_EQ(weft_read(sp[0], &c, 1, WEFT_FOREVER), 1);
        got++;
    }
    return arg;
}

static int reader_waits;
static int look(const weft_fiber_info_t *in, void *arg)
{
    (void)arg;
    if (in->handle.id == reader_h.id)
        reader_waits = in->state == WEFT_FIBER_WAITING;
    return 0;
}

static int lfd, afd = -1;
static void *acceptor(void *arg)
{
    afd = weft_accept(lfd, NULL, NULL, WEFT_FOREVER);
    CHECK(afd >= 0);
    return arg;
}

static void *body(void *arg)
{
    weft_sched_t *s = weft_sched_self();
    int ring = strcmp(weft_sched_backend(s), "io_uring") == 0;
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    weft_stats_t a, b;
    CHECK_EQ(weft_sched_stats(s, &a), 0);
    CHECK_EQ(a.spawned, 1);
    CHECK_EQ(a.peak_fibers, 1);

    weft_fiber_t h[K];
    for (int i = 0; i < K; i++)
        CHECK_EQ(weft_spawn(nothing, NULL, NULL, &h[i]), 0);
    for (int i = 0; i < K; i++)
        CHECK_EQ(weft_join(h[i], NULL, WEFT_FOREVER), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(weft_spawn(sleeper, NULL, NULL, &h[i]), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(weft_join(h[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_spawn(reader, NULL, NULL, &reader_h), 0);
    for (int i = 0; i < M; i++) {
        /* each read waits: write only once the reader has read the last
         * byte and is blocked again */
        for (reader_waits = 0; !reader_waits || got != i;) {
            CHECK_EQ(weft_yield(), 0);
            weft_fibers_each(s, look, NULL);
        }
        CHECK_EQ(weft_write(sp[1], "x", 1, WEFT_FOREVER), 1);
    }
    CHECK_EQ(weft_join(reader_h, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_sched_stats(s, &b), 0);

    CHECK_EQ(b.spawned - a.spawned, K + N + 1);
    CHECK_EQ(b.ended - a.ended, K + N + 1);
    CHECK_EQ(b.peak_fibers, 1 + K);
    CHECK_EQ(b.fibers, 1);
    CHECK_EQ(b.timers_fired - a.timers_fired, N);
    CHECK_EQ(b.ops_submitted[WEFT_OPK_TIMEOUT] - a.ops_submitted[WEFT_OPK_TIMEOUT], N);
    CHECK_EQ(b.ops_completed[WEFT_OPK_TIMEOUT] - a.ops_completed[WEFT_OPK_TIMEOUT], N);
    CHECK_EQ(b.ops_submitted[WEFT_OPK_READ] - a.ops_submitted[WEFT_OPK_READ], M);
    CHECK_EQ(b.ops_completed[WEFT_OPK_READ] - a.ops_completed[WEFT_OPK_READ], M);
    /* writes to a socket are ring ops; elsewhere system calls that
     * never had to wait */
    CHECK_EQ(b.ops_submitted[WEFT_OPK_WRITE] - a.ops_submitted[WEFT_OPK_WRITE], ring ? M : 0);
    CHECK_EQ(b.ops_completed[WEFT_OPK_WRITE] - a.ops_completed[WEFT_OPK_WRITE], ring ? M : 0);
    for (int k = WEFT_OPK_ACCEPT; k < 8; k++) {
        if (k == WEFT_OPK_TIMEOUT)
            continue;
        CHECK_EQ(b.ops_submitted[k], a.ops_submitted[k]);
        CHECK_EQ(b.ops_completed[k], a.ops_completed[k]);
    }
    CHECK(b.iterations > a.iterations);
    CHECK(b.busy_ns > 0);
    CHECK(b.wait_ns >= a.wait_ns);
    CHECK(b.ready_delay_p50_ns >= 0);
    CHECK(b.ready_delay_p50_ns <= b.ready_delay_p99_ns);
    CHECK(b.ready_delay_p99_ns <= b.ready_delay_max_ns);
    CHECK_EQ(b.stalls, 0);

    /* An accept that waits: one of its kind. */
    H_CASE("accept");
    lfd = weft_tcp_listen("127.0.0.1", 0, 4, 0);
    CHECK(lfd >= 0);
    weft_fiber_t ah;
    CHECK_EQ(weft_spawn(acceptor, NULL, NULL, &ah), 0);
    CHECK_EQ(weft_yield(), 0); /* it blocks */
    CHECK_EQ(weft_sched_stats(s, &a), 0);
    int c = weft_tcp_connect("127.0.0.1", weft_local_port(lfd), WEFT_FOREVER);
    CHECK(c >= 0);
    CHECK_EQ(weft_join(ah, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_sched_stats(s, &b), 0);
    CHECK_EQ(b.ops_completed[WEFT_OPK_ACCEPT] - a.ops_completed[WEFT_OPK_ACCEPT], 1);
    CHECK(b.ops_submitted[WEFT_OPK_CONNECT] - a.ops_submitted[WEFT_OPK_CONNECT] <= 1);
    CHECK_EQ(b.ops_submitted[WEFT_OPK_CONNECT] - a.ops_submitted[WEFT_OPK_CONNECT],
             b.ops_completed[WEFT_OPK_CONNECT] - a.ops_completed[WEFT_OPK_CONNECT]);
    /* A read whose deadline passes: on io_uring its op is cancelled and
     * the wait re-armed for the op's own end, which must not count as a
     * second completion. */
    CHECK_EQ(weft_sched_stats(s, &a), 0);
    char c2;
    CHECK_EQ(weft_read(sp[0], &c2, 1, weft_deadline_in(5 * WEFT_MS)), -ETIMEDOUT);
    CHECK_EQ(weft_sched_stats(s, &b), 0);
    CHECK_EQ(b.ops_submitted[WEFT_OPK_READ] - a.ops_submitted[WEFT_OPK_READ], 1);
    CHECK_EQ(b.ops_completed[WEFT_OPK_READ] - a.ops_completed[WEFT_OPK_READ], 1);
    CHECK_EQ(b.ops_submitted[WEFT_OPK_TIMEOUT] - a.ops_submitted[WEFT_OPK_TIMEOUT], 1);
    CHECK_EQ(b.ops_completed[WEFT_OPK_TIMEOUT] - a.ops_completed[WEFT_OPK_TIMEOUT], 1);
    CHECK_EQ(weft_close(c), 0);
    CHECK_EQ(weft_close(afd), 0);
    CHECK_EQ(weft_close(lfd), 0);
    CHECK_EQ(weft_close(sp[0]), 0);
    CHECK_EQ(weft_close(sp[1]), 0);
    return arg;
}

int main(void)
{
    h_load_unwinder();
    h_begin("stats");
    h_run(body, NULL);
    weft_stats_t st;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
    /* everything handed to the backend has ended */
    for (int k = 0; k < 8; k++)
        CHECK_EQ(st.ops_submitted[k], st.ops_completed[k]);
    printf("iterations %llu busy %lld ns wait %lld ns delay p50 %lld p99 %lld max %lld ns\n",
           (unsigned long long)st.iterations, (long long)st.busy_ns, (long long)st.wait_ns,
           (long long)st.ready_delay_p50_ns, (long long)st.ready_delay_p99_ns,
           (long long)st.ready_delay_max_ns);
    return h_end();
}
