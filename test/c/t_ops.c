/* Operations racing their own deadlines and cancellation (each completes or
 * is cancelled, exactly once: nothing lost, nothing doubled), 1-byte socket
 * I/O, positioned file I/O, and fork with a live loop. On io_uring these
 * are in-flight ring operations; on epoll/poll, readiness waits. */
#include "harness.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define RACES 3000

static int sv[2];
static int64_t write_at;

static void *late_byte(void *arg)
{
    (void)arg;
    while (weft_now() < write_at)
        CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_write(sv[1], "b", 1, WEFT_FOREVER), 1);
    return NULL;
}

static weft_fiber_t reader_fiber;
static int read_result;
static void *reader(void *arg)
{
    char c;
    read_result = (int)weft_read(sv[0], &c, 1, *(int64_t *)arg);
    if (read_result == 1)
        CHECK_EQ(c, 'b');
    return NULL;
}

static void *canceller(void *arg)
{
    (void)arg;
    while (weft_now() < write_at)
        CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(reader_fiber), 0);
    return NULL;
}

/* Exactly once: the byte was either read by the racing call or is still
 * there afterwards, and never both. */
static void settle(int result, int *won, int *lost)
{
    char c;
    ssize_t again = weft_read(sv[0], &c, 1, 0); /* the writer has finished */
    if (result == 1) {
        CHECK_EQ(again, -EAGAIN);
        (*won)++;
    } else {
        CHECK(result == -ETIMEDOUT || result == -ECANCELED);
        CHECK_EQ(again, 1);
        CHECK_EQ(c, 'b');
        (*lost)++;
    }
}

static void *body(void *arg)
{
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    int won = 0, lost = 0;
    /* deadline racing the data */
    for (int i = 0; i < RACES; i++) {
        int64_t now = weft_now();
        int64_t deadline = now + 20000 + (i % 7) * 3000;
        write_at = now + 20000 + (i % 11) * 2000;
        weft_fiber_t w;
        CHECK_EQ(weft_spawn(late_byte, NULL, NULL, &w), 0);
        char c;
        int rc = (int)weft_read(sv[0], &c, 1, deadline);
        CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
        settle(rc, &won, &lost);
    }
    printf("deadline races: %d read in time, %d timed out (byte kept)\n", won, lost);
    /* cancellation racing the data */
    won = lost = 0;
    for (int i = 0; i < RACES; i++) {
        int64_t forever = WEFT_FOREVER;
        int64_t now = weft_now();
        write_at = now + 10000 + (i % 5) * 3000;
        CHECK_EQ(weft_spawn(reader, &forever, NULL, &reader_fiber), 0);
        weft_fiber_t c, w;
        CHECK_EQ(weft_spawn(canceller, NULL, NULL, &c), 0);
        CHECK_EQ(weft_spawn(late_byte, NULL, NULL, &w), 0);
        CHECK_EQ(weft_join(c, NULL, WEFT_FOREVER), 0);
        CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
        CHECK_EQ(weft_join(reader_fiber, NULL, WEFT_FOREVER), 0);
        settle(read_result, &won, &lost);
    }
    printf("cancel races: %d read before the cancel, %d cancelled (byte kept)\n",
           won, lost);

    /* accept racing its deadline: a connection is never lost */
    int lfd = weft_tcp_listen("127.0.0.1", 0, 64, 0);
    CHECK(lfd >= 0);
    int port = weft_local_port(lfd);
    int accepted = 0, conns = 0;
    for (int i = 0; i < 200; i++) {
        int c = weft_tcp_connect("127.0.0.1", port, WEFT_FOREVER);
        CHECK(c >= 0);
        conns++;
        int a = weft_accept(lfd, NULL, NULL, weft_now() + (i % 3) * 1000);
        if (a >= 0) {
            accepted++;
            weft_close(a);
        } else {
            CHECK_EQ(a, -ETIMEDOUT);
        }
        weft_close(c);
    }
    for (int a; accepted < conns; accepted++) {
        a = weft_accept(lfd, NULL, NULL, weft_deadline_in(1000000000));
        CHECK(a >= 0);
        weft_close(a);
    }
    CHECK_EQ(weft_accept(lfd, NULL, NULL, weft_deadline_in(2000000)), -ETIMEDOUT);
    weft_close(lfd);

    /* 1-byte writes and reads over a socket */
    static char big[65536], back[65536];
    for (int i = 0; i < (int)sizeof big; i++)
        big[i] = (char)(i * 7 + 3);
    size_t got = 0, sent = 0;
    while (sent < sizeof big || got < sizeof big) {
        if (sent < sizeof big) {
            ssize_t n = weft_send(sv[1], big + sent, 1, 0, WEFT_FOREVER);
            CHECK_EQ(n, 1);
            sent++;
        }
        if (got < sent) {
            ssize_t n = weft_recv(sv[0], back + got, 1, 0, WEFT_FOREVER);
            CHECK_EQ(n, 1);
            got++;
        }
    }
    CHECK(memcmp(big, back, sizeof big) == 0);

    /* positioned file I/O: asynchronous on io_uring */
    char path[] = "/tmp/weft-ops-XXXXXX";
    int f = mkstemp(path);
    CHECK(f >= 0);
    unlink(path);
    CHECK_EQ(weft_pwrite(f, "world", 5, 6, WEFT_FOREVER), 5);
    CHECK_EQ(weft_pwrite(f, "hello ", 6, 0, WEFT_FOREVER), 6);
    char buf[32] = {0};
    CHECK_EQ(weft_pread(f, buf, sizeof buf, 0, WEFT_FOREVER), 11);
    CHECK(!memcmp(buf, "hello world", 11));
    CHECK_EQ(weft_pread(f, buf, 5, 6, WEFT_FOREVER), 5);
    CHECK(!memcmp(buf, "world", 5));
    CHECK_EQ(weft_pread(f, buf, 5, 100, WEFT_FOREVER), 0);
    CHECK_EQ(lseek(f, 0, SEEK_CUR), 0); /* position untouched */
    CHECK_EQ(weft_pread(f, buf, 5, -1, WEFT_FOREVER), -EINVAL);
    CHECK_EQ(weft_pread(sv[0], buf, 5, 0, WEFT_FOREVER), -ESPIPE);
    /* a file read through weft_read uses (and moves) the position */
    CHECK_EQ(weft_read(f, buf, 5, WEFT_FOREVER), 5);
    CHECK(!memcmp(buf, "hello", 5));
    CHECK_EQ(lseek(f, 0, SEEK_CUR), 5);
    weft_close(f);
    return arg;
}

/* A deadline that has already passed (but is not 0) means one attempt:
 * what is there is taken, what is not gives -ETIMEDOUT at once, and no
 * operation is left in flight. On io_uring the op is submitted and the
 * passed deadline cancels it in the same poll. */
static void *passed_body(void *arg)
{
    int a, b;
    h_tcp_pair(&a, &b);
    char buf[16];
    for (int i = 0; i < 200; i++) {
        int64_t past = weft_now() - 1 - i % 3;
        CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, past), -ETIMEDOUT);
        CHECK_EQ(weft_send(b, "xy", 2, 0, past), 2);     /* room: it goes */
        CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, WEFT_FOREVER), 2);
        CHECK_EQ(weft_send(b, "z", 1, 0, WEFT_FOREVER), 1);
        CHECK_EQ(weft_sleep(20000), 0);                  /* let it arrive */
        CHECK_EQ(weft_recv(a, buf, sizeof buf, 0, past), 1); /* there: taken */
        CHECK_EQ(buf[0], 'z');
        CHECK_EQ(weft_accept(a, NULL, NULL, past), -EINVAL); /* not listening */
        weft_stats_t st;
        CHECK_EQ(weft_sched_stats(weft_sched_self(), &st), 0);
        CHECK_EQ(st.ops, 0);
    }
    weft_close(a);
    weft_close(b);
    return arg;
}

/* fork with a live loop: the child gets a fresh scheduler of its own, the
 * parent's in-flight wait is unaffected */
static int pp[2];
static void *pending_reader(void *arg)
{
    char c;
    CHECK_EQ(weft_read(pp[0], &c, 1, WEFT_FOREVER), 1);
    CHECK_EQ(c, 'p');
    return arg;
}

static void *child_main(void *arg)
{
    int q[2];
    CHECK_EQ(weft_pipe(q), 0);
    CHECK_EQ(weft_write(q[1], "c", 1, WEFT_FOREVER), 1);
    char c;
    CHECK_EQ(weft_read(q[0], &c, 1, WEFT_FOREVER), 1);
    weft_close(q[0]);
    weft_close(q[1]);
    return c == 'c' ? NULL : arg;
}

static void *fork_body(void *arg)
{
    weft_sched_t *parent = weft_sched_self();
    CHECK_EQ(weft_pipe(pp), 0);
    weft_fiber_t r;
    CHECK_EQ(weft_spawn(pending_reader, NULL, NULL, &r), 0);
    CHECK_EQ(weft_yield(), 0); /* r now waits on the loop */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* no scheduler here yet: the parent's is not ours */
        CHECK_EQ(weft_in_fiber(), 0);
        weft_sched_t *mine = weft_sched_self();
        if (!mine || mine == parent)
            _exit(10);
        void *res = (void *)1;
        if (weft_run(child_main, (void *)2, &res) != 0 || res != NULL)
            _exit(11);
        if (strcmp(weft_sched_backend(mine), weft_sched_backend(parent)) != 0)
            _exit(12);
        _exit(weft_sched_destroy(mine) == 0 ? 0 : 13);
    }
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0)
        CHECK_EQ(weft_sleep(1000000), 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    /* the parent's loop and its waiting fiber still work */
    CHECK_EQ(weft_write(pp[1], "p", 1, WEFT_FOREVER), 1);
    CHECK_EQ(weft_join(r, NULL, WEFT_FOREVER), 0);
    weft_close(pp[0]);
    weft_close(pp[1]);
    return arg;
}

int main(void)
{
    h_begin("ops");
    h_run(body, NULL);
    h_run(fork_body, NULL);
    h_run(passed_body, NULL);
    weft_close(sv[0]);
    weft_close(sv[1]);
    return h_end();
}
