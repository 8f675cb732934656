/* A program started with stdin and stdout closed (by a service manager, a
 * daemon's parent, `prog 0<&- >&-`): the loop's own descriptors (its
 * eventfd, epoll set, ring) and the pidfds of children must not take those
 * numbers, or the program's own weft_read(0) or weft_close(0) reaches them
 * — a closed wake-up eventfd leaves offload jobs, DNS lookups and posts
 * from other threads waiting forever.
 *
 * And O_NONBLOCK belongs to the description a standard descriptor shares
 * with the shell, the terminal, a pipeline: weft's calls on a pipe leave
 * it blocking, and one that weft has to make non-blocking (a terminal's
 * master, which cannot be reopened as itself) is put back as it was when
 * the program exits — not when a forked child of it exits, and not one
 * the program was given non-blocking already. */
#include "harness.h"

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>

static void *work(void *arg)
{
    return arg;
}

static int is_closed(int fd)
{
    return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
}

/* Runs while the fiber that spawned it is in weft_proc_wait(), which
 * holds a pidfd all along; then lets the child end. */
static int gate_w = -1;
static void *check_while_waiting(void *arg)
{
    CHECK(is_closed(0));
    CHECK(is_closed(1));
    CHECK_EQ(weft_close(0), -EBADF);
    CHECK_EQ(close(gate_w), 0);
    return arg;
}

/* A descriptor above 2, whatever is closed below it. */
static int high(int fd)
{
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    CHECK(hi > 2);
    CHECK_EQ(close(fd), 0);
    return hi;
}

static void *body(void *arg)
{
    /* Nothing of the loop's took the free standard numbers... */
    CHECK(is_closed(0));
    CHECK(is_closed(1));
    /* ...so they stay the program's: closed, as it found them. */
    char c;
    CHECK_EQ(weft_read(0, &c, 1, 0), -EBADF);
    CHECK_EQ(weft_close(0), -EBADF);
    CHECK_EQ(weft_close(1), -EBADF);

    /* The loop is woken from another thread as before. */
    void *res = NULL;
    CHECK_EQ(weft_offload(work, &c, NULL, &res, weft_deadline_in(10 * WEFT_SEC)), 0);
    CHECK(res == &c);

    /* A child's pidfd, kept in weft_proc_t, stays off them too. */
    weft_proc_t p;
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_NULL, WEFT_PROC_NULL, WEFT_PROC_INHERIT}};
    char *argv[] = {"sh", "-c", "exit 5", NULL};
    CHECK_EQ(weft_proc_spawn(&p, "/bin/sh", argv, &o), 0);
    CHECK(is_closed(0));
    CHECK(is_closed(1));
    CHECK_EQ(weft_close(0), -EBADF);
    int status = 0;
    CHECK_EQ(weft_proc_join(&p, &status, weft_deadline_in(10 * WEFT_SEC)), 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 5);
    CHECK_EQ(weft_proc_close(&p), 0);

    /* weft_proc_wait()'s pidfd, for as long as it waits: the child runs
     * until the checking fiber closes the gate. */
    int g[2];
    CHECK_EQ(pipe2(g, O_CLOEXEC), 0);
    int gate_r = high(g[0]);
    gate_w = high(g[1]);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(gate_w);
        while (read(gate_r, &c, 1) > 0)
            ;
        _exit(7);
    }
    CHECK_EQ(close(gate_r), 0);
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(check_while_waiting, NULL, NULL, &f), 0);
    CHECK_EQ(weft_proc_wait(pid, &status, weft_deadline_in(10 * WEFT_SEC)), 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 7);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    return arg;
}

static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0);
    return (fl & O_NONBLOCK) != 0;
}

/* Whether weft's read of stdin leaves it non-blocking (read_stdin_once). */
static int expect_nb;

static void *read_stdin_once(void *arg)
{
    char c;
    CHECK_EQ(weft_read(0, &c, 1, 0), -EAGAIN); /* nothing written yet */
    CHECK_EQ(nonblocking(0), expect_nb);
    /* A forked child's exit leaves its parent's description alone. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        exit(0);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(nonblocking(0), expect_nb);
    return arg;
}

/* A child whose stdin is @rd reads it under weft and exits (exit(3)):
 * whether the description is non-blocking afterwards. */
static int nonblocking_after_child(int rd, int nb_meanwhile)
{
    expect_nb = nb_meanwhile;
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(dup2(rd, 0), 0);
        CHECK_EQ(weft_run(read_stdin_once, NULL, NULL), 0);
        exit(0);
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return nonblocking(rd);
}

static void stdin_mode_restored_at_exit(void)
{
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK(!nonblocking(p[0]));
    CHECK_EQ(nonblocking_after_child(p[0], 0), 0); /* never made non-blocking */
    CHECK_EQ(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    CHECK_EQ(nonblocking_after_child(p[0], 1), 1); /* as it was given */
    CHECK_EQ(close(p[0]), 0);
    CHECK_EQ(close(p[1]), 0);
    int m, sl;
    CHECK_EQ(openpty(&m, &sl, NULL, NULL, NULL), 0);
    CHECK(!nonblocking(m));
    CHECK_EQ(nonblocking_after_child(m, 1), 0); /* blocking again */
    CHECK_EQ(close(m), 0);
    CHECK_EQ(close(sl), 0);
}

int main(void)
{
    stdin_mode_restored_at_exit();
    /* stdout is the log: keep a copy to put back for h_end's report. */
    fflush(stdout);
    int saved = fcntl(1, F_DUPFD_CLOEXEC, 3);
    CHECK(saved >= 0);
    close(0);
    close(1);
    h_begin("stdio");
    h_run(body, NULL);
    weft_offload_shutdown();
    CHECK_EQ(dup2(saved, 1), 1);
    CHECK_EQ(close(saved), 0);
    return h_end();
}
