/* Process wait: exit codes, signals, deadlines, cancellation, refused
 * pids, non-children, on pidfd and on the polling fallback. */
#include "harness.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000LL

static pid_t child_exit(int code)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0)
        _exit(code);
    return p;
}

static pid_t child_sleeping(void)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        for (;;)
            pause();
    }
    return p;
}

static pid_t waited_pid;

static void *waiter(void *arg)
{
    (void)arg;
    int st;
    return (void *)(long)weft_proc_wait(waited_pid, &st, WEFT_FOREVER);
}

static void run_suite(void)
{
    int st = -1;
    /* exit codes */
    pid_t p = child_exit(0);
    CHECK_EQ(weft_proc_wait(p, &st, WEFT_FOREVER), 0);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    p = child_exit(42);
    CHECK_EQ(weft_proc_wait(p, &st, weft_deadline_in(10000 * MS)), 0);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 42);
    /* reaped: waiting again is -ECHILD */
    CHECK_EQ(weft_proc_wait(p, &st, 0), -ECHILD);

    /* a signal; the child runs until killed while we wait with a deadline */
    p = child_sleeping();
    CHECK_EQ(weft_proc_wait(p, &st, weft_deadline_in(5 * MS)), -ETIMEDOUT);
    CHECK_EQ(weft_proc_wait(p, &st, 0), -EAGAIN);
    CHECK_EQ(kill(p, SIGKILL), 0);
    CHECK_EQ(weft_proc_wait(p, &st, WEFT_FOREVER), 0);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(WTERMSIG(st), SIGKILL);
    p = child_sleeping();
    CHECK_EQ(kill(p, SIGTERM), 0);
    CHECK_EQ(weft_proc_wait(p, NULL, WEFT_FOREVER), 0);

    /* cancellation while waiting; the child is still ours afterwards */
    waited_pid = child_sleeping();
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(waiter, NULL, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f), 0);
    void *r;
    CHECK_EQ(weft_join(f, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    CHECK_EQ(kill(waited_pid, SIGUSR1), 0);
    CHECK_EQ(weft_proc_wait(waited_pid, &st, WEFT_FOREVER), 0);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(WTERMSIG(st), SIGUSR1);

    /* other fibers keep running while one waits */
    waited_pid = child_sleeping();
    CHECK_EQ(weft_spawn(waiter, NULL, NULL, &f), 0);
    CHECK_EQ(weft_sleep(MS), 0);
    CHECK_EQ(kill(waited_pid, SIGKILL), 0);
    CHECK_EQ(weft_join(f, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);

    /* refused and unknown pids */
    CHECK_EQ(weft_proc_wait(0, &st, WEFT_FOREVER), -EINVAL);
    CHECK_EQ(weft_proc_wait(-1, &st, WEFT_FOREVER), -EINVAL);
    CHECK_EQ(weft_proc_wait(-getpid(), &st, WEFT_FOREVER), -EINVAL);
    CHECK_EQ(weft_proc_wait(getpid(), &st, WEFT_FOREVER), -ECHILD);
    CHECK_EQ(weft_proc_wait(1, &st, -2), -EINVAL);
}

static void *body(void *arg)
{
    (void)arg;
    run_suite();                         /* pidfd (where available) */
    CHECK_EQ(setenv("WEFT_PROC_NO_PIDFD", "1", 1), 0);
    run_suite();                         /* polling fallback */
    CHECK_EQ(unsetenv("WEFT_PROC_NO_PIDFD"), 0);
    return NULL;
}

int main(void)
{
    h_begin("proc");
    h_run(body, NULL);
    return h_end();
}
