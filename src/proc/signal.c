/*
 * signal.c — waiting for signals in a fiber.
 *
 * A signalfd per loop, owned by the program (weft_signal_open() gives the
 * descriptor): the signals are blocked in the thread's mask, stay pending,
 * and the fiber reads them from the descriptor. Reads are read(2) on the
 * loop's own thread after a readiness wait, never a ring read: a signalfd
 * reports the signals pending for the thread that reads it, and an
 * io_uring read may run on a kernel worker thread instead of ours, where a
 * signal sent to our thread (pthread_kill) would not be seen.
 *
 * Nothing here keeps state: no handler, no disposition change, no hidden
 * descriptor that would outlive the scheduler.
 */
#include "internal.h"
#include "io.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

int weft_signal_block(const sigset_t *set)
{
    if (!set)
        return -EINVAL;
    return -pthread_sigmask(SIG_BLOCK, set, NULL);
}

int weft_signal_open(const sigset_t *set)
{
    if (!set || sigisemptyset(set))
        return -EINVAL;
    sigset_t old;
    int rc = -pthread_sigmask(SIG_BLOCK, set, &old);
    if (rc < 0)
        return rc;
    int fd = signalfd(-1, set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) {
        /* Nothing will read them: leave the mask as it was, so that
         * SIGINT or SIGTERM still ends a program that could not open its
         * descriptor (EMFILE) instead of being held pending forever. */
        rc = -errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return rc;
    }
    /* A new number: drop whatever weft remembers of an earlier file that
     * had it and was closed behind weft's back. */
    weft_fd_forget(fd);
    return fd;
}

int weft_signal_wait(int sfd, struct signalfd_siginfo *info, int64_t deadline)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    if (sfd < 0)
        return -EBADF;
    /* A pipe, socket or file given by mistake would lose the bytes the
     * read takes; a signalfd is an anonymous inode (no file type bits). */
    struct stat sb;
    if (fstat(sfd, &sb) < 0)
        return -errno;
    if ((sb.st_mode & S_IFMT) != 0)
        return -EINVAL;
    /* One made without SFD_NONBLOCK (as signalfd(2)'s own example makes
     * it) would hold the whole thread in read(2), past the deadline: make
     * it non-blocking, as the I/O calls do with the descriptors they get. */
    rc = weft__ensure_nonblock(sfd);
    if (rc < 0)
        return rc;
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(sfd, &si, sizeof si);
        if (n == (ssize_t)sizeof si) {
            if (info)
                *info = si;
            return (int)si.ssi_signo;
        }
        if (n >= 0)
            return -EINVAL; /* not a signalfd after all */
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return -errno;
        rc = weft__wait_fd_as(sfd, WEFT_READABLE, deadline, WEFT_WAIT_SIGNAL,
                              (const void *)(intptr_t)sfd);
        if (rc < 0)
            return rc;
    }
}
