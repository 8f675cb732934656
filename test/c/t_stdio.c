/* A program started with stdin and stdout closed (by a service manager, a
 * daemon's parent, `prog 0<&- >&-`): the loop's own descriptors (its
 * eventfd, epoll set, ring) and a child's pidfd must not take those
 * numbers, or the program's own weft_read(0) or weft_close(0) reaches them
 * — a closed wake-up eventfd leaves offload jobs, DNS lookups and posts
 * from other threads waiting forever. */
#include "harness.h"

#include <fcntl.h>
#include <sys/wait.h>

static void *work(void *arg)
{
    return arg;
}

static int is_closed(int fd)
{
    return fcntl(fd, F_GETFD) < 0 && errno == EBADF;
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
    return arg;
}

int main(void)
{
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
