/*
 * proc.c — wait for a child process without blocking the loop.
 *
 * A pidfd (Linux >= 5.3) becomes readable when the process terminates, so
 * the fiber waits on it like on any descriptor, then reaps the child with
 * waitpid(WNOHANG). Without pidfd_open (older kernels, seccomp filters
 * returning ENOSYS/EPERM) we poll waitpid(WNOHANG) with a bounded
 * exponential backoff rather than installing a SIGCHLD handler: weft never
 * changes the process's signal dispositions.
 */
#include "internal.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define POLL_MIN_NS ((int64_t)1000000)   /* 1 ms  */
#define POLL_MAX_NS ((int64_t)50000000)  /* 50 ms */

/* 1 reaped, 0 still running, or -errno. */
static int reap(pid_t pid, int *wstatus)
{
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r < 0)
        return -errno;
    if (r == 0)
        return 0;
    if (wstatus)
        *wstatus = st;
    return 1;
}

static int wait_polling(pid_t pid, int *wstatus, int64_t deadline)
{
    int64_t step = POLL_MIN_NS;
    for (;;) {
        int rc = reap(pid, wstatus);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        int64_t now = weft_now();
        if (deadline != WEFT_FOREVER && now >= deadline)
            return weft__expired(deadline);
        int64_t until = now + step;
        if (deadline != WEFT_FOREVER && until > deadline)
            until = deadline;
        rc = weft_sleep_until(until);
        if (rc < 0)
            return rc;
        if (step < POLL_MAX_NS)
            step = step * 2 > POLL_MAX_NS ? POLL_MAX_NS : step * 2;
    }
}

int weft_proc_wait(pid_t pid, int *wstatus, int64_t deadline)
{
    if (pid <= 0)
        return -EINVAL;
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    rc = reap(pid, wstatus); /* also: -ECHILD for a non-child */
    if (rc != 0)
        return rc < 0 ? rc : 0;

    int pfd = -1;
    if (!getenv("WEFT_PROC_NO_PIDFD"))
        pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    /* Held for the whole wait: not on a standard descriptor's number,
     * which another fiber may read or close as its stdin or stdout. */
    pfd = weft__fd_above_std(pfd);
    if (pfd < 0)
        return wait_polling(pid, wstatus, deadline);
    weft__reactor_fd_new(&weft__sched_tls()->r, pfd);
    for (;;) {
        rc = weft__wait_fd_as(pfd, WEFT_READABLE, deadline, WEFT_WAIT_PROCESS,
                              (const void *)(intptr_t)pid);
        if (rc < 0)
            break;
        rc = reap(pid, wstatus);
        if (rc != 0) {
            if (rc > 0)
                rc = 0;
            break;
        }
        /* readable but not reapable yet: cannot normally happen; retry */
    }
    weft_close(pfd);
    return rc;
}
