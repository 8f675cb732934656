/* Signals: a pending signal at once, deadlines (past, future, forever),
 * signals sent to the process and to the thread (from another thread),
 * two signals in one set, a signal outside the set left pending, other
 * fibers running meanwhile, cancellation, close while waiting, several
 * waiters on one descriptor, bad input, the mask threads inherit, and the
 * mask left as it was when no descriptor can be opened. */
#include "harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/signalfd.h>

#define MS 1000000LL

static sigset_t usr;           /* SIGUSR1, SIGUSR2 */
static pthread_t loop_thread;

static void *send_later(void *arg)
{
    int sig = (int)(long)arg;
    CHECK_EQ(weft_sleep(3 * MS), 0);
    CHECK_EQ(kill(getpid(), sig), 0);
    return NULL;
}

typedef struct waiter {
    int sfd;
    int rc;
    int64_t deadline;
} waiter;

static void *wait_fiber(void *arg)
{
    waiter *w = arg;
    w->rc = weft_signal_wait(w->sfd, NULL, w->deadline);
    return NULL;
}

static long ticks;
static void *ticker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(weft_sleep(MS), 0);
        ticks++;
    }
    return NULL;
}

/* Another thread sends SIGUSR2 to the loop's thread, once the loop waits. */
static void *thread_sender(void *arg)
{
    (void)arg;
    sigset_t cur;
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    CHECK(sigismember(&cur, SIGUSR1) && sigismember(&cur, SIGUSR2)); /* inherited */
    usleep(5000);
    CHECK_EQ(pthread_kill(loop_thread, SIGUSR2), 0);
    return NULL;
}

static void basics(int sfd)
{
    struct signalfd_siginfo si;
    /* Pending before the wait: at once, with who sent it. */
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    memset(&si, 0, sizeof si);
    CHECK_EQ(weft_signal_wait(sfd, &si, 0), SIGUSR1);
    CHECK_EQ(si.ssi_signo, SIGUSR1);
    CHECK_EQ(si.ssi_pid, getpid());
    /* Nothing pending: past and future deadlines. */
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_signal_wait(sfd, NULL, weft_now() - 1), -ETIMEDOUT);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_signal_wait(sfd, NULL, weft_deadline_in(20 * MS)), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 20 * MS);
    /* Forever, while other fibers run; the signal comes from a fiber. */
    ticks = 0;
    CHECK_EQ(weft_spawn(ticker, NULL, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(send_later, (void *)(long)SIGUSR2, NULL, NULL), 0);
    CHECK_EQ(weft_signal_wait(sfd, &si, WEFT_FOREVER), SIGUSR2);
    CHECK(ticks >= 1);
    CHECK_EQ(weft_sleep(10 * MS), 0); /* the ticker ends */
    /* Both pending: both delivered, lowest number first. */
    CHECK_EQ(kill(getpid(), SIGUSR2), 0);
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), SIGUSR1);
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), SIGUSR2);
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), -EAGAIN);
    /* Standard signals do not queue: two before a wait are one. */
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), SIGUSR1);
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), -EAGAIN);
    /* A timeout scope bounds the wait. */
    int64_t saved;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(3 * MS), &saved), 0);
    CHECK_EQ(weft_signal_wait(sfd, NULL, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_scope_leave(saved), 0);
}

static void thread_directed(int sfd)
{
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, thread_sender, NULL), 0);
    struct signalfd_siginfo si;
    CHECK_EQ(weft_signal_wait(sfd, &si, weft_deadline_in(5000 * MS)), SIGUSR2);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

static void outside_the_set(void)
{
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR1);
    int only1 = weft_signal_open(&one);
    CHECK(only1 >= 0);
    CHECK_EQ(kill(getpid(), SIGUSR2), 0);
    CHECK_EQ(weft_signal_wait(only1, NULL, weft_deadline_in(2 * MS)), -ETIMEDOUT);
    CHECK_EQ(weft_close(only1), 0);
    /* Still pending for a descriptor that wants it. */
    sigset_t two;
    sigemptyset(&two);
    sigaddset(&two, SIGUSR2);
    int only2 = weft_signal_open(&two);
    CHECK(only2 >= 0);
    CHECK_EQ(weft_signal_wait(only2, NULL, 0), SIGUSR2);
    CHECK_EQ(weft_close(only2), 0);
}

static void cancel_close_many(int sfd)
{
    /* Cancellation. */
    waiter w = {sfd, 99, WEFT_FOREVER};
    h_interrupt(wait_fiber, &w, -1);
    CHECK_EQ(w.rc, -ECANCELED);

    /* Several waiters on one descriptor: each signal goes to one. */
    waiter ws[3];
    weft_fiber_t fs[3];
    for (int i = 0; i < 3; i++) {
        ws[i] = (waiter){sfd, 99, weft_deadline_in(5000 * MS)};
        CHECK_EQ(weft_spawn(wait_fiber, &ws[i], NULL, &fs[i]), 0);
    }
    CHECK_EQ(weft_sleep(2 * MS), 0);
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    CHECK_EQ(weft_sleep(5 * MS), 0);
    CHECK_EQ(kill(getpid(), SIGUSR2), 0);
    CHECK_EQ(weft_sleep(5 * MS), 0);
    int got = 0;
    for (int i = 0; i < 3; i++)
        got += ws[i].rc == SIGUSR1 || ws[i].rc == SIGUSR2;
    CHECK_EQ(got, 2);

    /* Close while waiting: the remaining waiter wakes with -EBADF. */
    int other = weft_signal_open(&usr);
    CHECK(other >= 0);
    waiter c = {other, 99, WEFT_FOREVER};
    h_interrupt(wait_fiber, &c, other);
    CHECK_EQ(c.rc, -EBADF);
    /* The third waiter of sfd gets a third signal. */
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_join(fs[i], NULL, WEFT_FOREVER), 0);
        CHECK(ws[i].rc == SIGUSR1 || ws[i].rc == SIGUSR2);
    }
}

static void bad_input(int sfd)
{
    sigset_t empty;
    sigemptyset(&empty);
    CHECK_EQ(weft_signal_open(NULL), -EINVAL);
    CHECK_EQ(weft_signal_open(&empty), -EINVAL);
    CHECK_EQ(weft_signal_block(NULL), -EINVAL);
    CHECK_EQ(weft_signal_wait(-1, NULL, 0), -EBADF);
    CHECK_EQ(weft_signal_wait(999999, NULL, 0), -EBADF);
    CHECK_EQ(weft_signal_wait(sfd, NULL, -2), -EINVAL);
    /* Not a signalfd: refused before anything is read from it. */
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    CHECK_EQ(weft_write_all(p[1], "data", 4, NULL, 0), 0);
    CHECK_EQ(weft_signal_wait(p[0], NULL, 0), -EINVAL);
    char buf[8];
    CHECK_EQ(weft_read(p[0], buf, sizeof buf, 0), 4); /* nothing lost */
    CHECK_EQ(weft_close(p[0]), 0);
    CHECK_EQ(weft_close(p[1]), 0);
}

/* A signalfd made as signalfd(2)'s example makes it, without
 * SFD_NONBLOCK: waiting on it must not hold the thread in read(2). */
static void blocking_signalfd(void)
{
    int b = signalfd(-1, &usr, SFD_CLOEXEC);
    CHECK(b >= 0);
    CHECK_EQ(weft_signal_wait(b, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_signal_wait(b, NULL, weft_deadline_in(2 * MS)), -ETIMEDOUT);
    CHECK_EQ(kill(getpid(), SIGUSR2), 0);
    CHECK_EQ(weft_signal_wait(b, NULL, weft_deadline_in(5000 * MS)), SIGUSR2);
    CHECK_EQ(weft_close(b), 0);
}

/* Out of descriptors: weft_signal_open() fails and leaves the mask as it
 * was, so that the signals it would have taken still reach the program
 * (a SIGTERM then ends it, where nothing would ever read it). */
static void open_fails_keeps_mask(void)
{
    sigset_t winch, cur;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    struct rlimit rl, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    low = rl;
    low.rlim_cur = rl.rlim_max < 64 ? rl.rlim_max : 64;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    int hog[64], n = 0, fd;
    while (n < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        hog[n++] = fd;
    CHECK_EQ(weft_signal_open(&winch), -EMFILE);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    CHECK(!sigismember(&cur, SIGWINCH));
    while (n > 0)
        close(hog[--n]);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void *body(void *arg)
{
    int sfd = *(int *)arg;
    blocking_signalfd();
    basics(sfd);
    thread_directed(sfd);
    outside_the_set();
    cancel_close_many(sfd);
    bad_input(sfd);
    CHECK_EQ(weft_close(sfd), 0);
    return NULL;
}

int main(void)
{
    h_begin("signal");
    open_fails_keeps_mask();
    loop_thread = pthread_self();
    sigemptyset(&usr);
    sigaddset(&usr, SIGUSR1);
    sigaddset(&usr, SIGUSR2);
    /* Before any thread exists (here: the offload pool, the sender). */
    CHECK_EQ(weft_signal_block(&usr), 0);
    sigset_t cur;
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    CHECK(sigismember(&cur, SIGUSR1) && sigismember(&cur, SIGUSR2));
    int sfd = weft_signal_open(&usr);
    CHECK(sfd >= 0);
    CHECK_EQ(weft_signal_wait(sfd, NULL, 0), -EPERM); /* outside a fiber */
    h_run(body, &sfd);
    return h_end();
}
