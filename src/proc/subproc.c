/*
 * subproc.c — running a program with pipes to its standard descriptors.
 *
 * posix_spawn(3) starts the child: glibc does it with clone(CLONE_VM |
 * CLONE_VFORK) on a small stack of its own, so nothing of this process's
 * memory is copied (fork of a large server would copy its page tables),
 * exec failures come back as the call's own error, and the child's signal
 * mask and dispositions are set before exec. Then pidfd_open(2) gives a
 * descriptor that becomes readable when the child terminates, which is
 * race-free here: the child is ours and unreaped, so its pid cannot have
 * been reused. clone3(CLONE_PIDFD) would give the pidfd atomically, but
 * only by re-implementing what posix_spawn already does right (vfork
 * stack, signal handling in the child, error pipe); glibc's own
 * pidfd_spawn() is 2.39 and later.
 *
 * Pipes: both ends are made close-on-exec (no other thread's child can
 * inherit them); the child's end becomes its descriptor 0, 1 or 2 through
 * a dup2 file action (which clears close-on-exec on the copy) and stays
 * blocking, since O_NONBLOCK belongs to the open file and the child
 * expects blocking I/O; this process's end is made non-blocking.
 */
#include "internal.h"
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

extern char **environ;

/* What the spawn needs closed afterwards, in this process. */
typedef struct fds {
    int ours[3];      /* this process's pipe ends (kept on success)     */
    int theirs[3];    /* the child's pipe ends, or copies of low fds    */
    int made_blocking[3]; /* sockets made blocking for the child, or -1:
                             non-blocking again if it does not start   */
} fds;

static void close_all(int *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] >= 0) {
            close(v[i]);
            v[i] = -1;
        }
}

/* A pipe for the child's descriptor @i: its end in f->theirs[i], ours
 * (non-blocking) in f->ours[i]; both above 2, so that the child's dup2
 * onto 0, 1 and 2 cannot overwrite a source before it is copied. */
static int make_pipe(fds *f, int i)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    int child = i == 0 ? p[0] : p[1], parent = i == 0 ? p[1] : p[0];
    f->theirs[i] = weft__fd_above_std(child);
    f->ours[i] = weft__fd_above_std(parent);
    if (f->theirs[i] < 0 || f->ours[i] < 0)
        return -errno;
    if (fcntl(f->ours[i], F_SETFL, O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

static int check_opts(const weft_proc_opts_t *o)
{
    for (int i = 0; i < 3; i++) {
        switch (o->stdio[i]) {
        case WEFT_PROC_INHERIT:
        case WEFT_PROC_PIPE:
        case WEFT_PROC_NULL:
            break;
        case WEFT_PROC_FD:
            if (o->stdio_fd[i] < 0 || fcntl(o->stdio_fd[i], F_GETFD) < 0)
                return -EBADF;
            break;
        case WEFT_PROC_STDOUT:
            if (i != 2)
                return -EINVAL;
            break;
        default:
            return -EINVAL;
        }
    }
    return 0;
}

/*
 * The child's standard descriptors must block, as every program expects
 * of its stdin, stdout and stderr: a non-blocking one makes it fail with
 * EAGAIN (cat: Resource temporarily unavailable) or lose output where it
 * would have waited. O_NONBLOCK belongs to the open file description,
 * which weft sets on the descriptors it makes (weft_pipe, weft_accept...)
 * and on those it reads and writes. So, for a descriptor @fd given to the
 * child that is non-blocking:
 *   - a pipe, FIFO or terminal is opened anew through /proc/self/fd: a
 *     description of its own for the child, blocking, while this process's
 *     stays as it is. Returns the new descriptor (close-on-exec, above 2).
 *   - a connected socket is made blocking: it has one description only,
 *     and weft needs no O_NONBLOCK on it (its calls pass MSG_DONTWAIT). A
 *     listening socket is left alone.
 * Else, or when that fails (no /proc, a FIFO without reader), -1: the
 * child gets @fd as it is.
 */
static int blocking_for_child(fds *f, int i, int fd)
{
    int fl = fcntl(fd, F_GETFL);
    struct stat sb;
    if (fl < 0 || !(fl & O_NONBLOCK) || fstat(fd, &sb) < 0)
        return -1;
    if (S_ISSOCK(sb.st_mode)) {
        int listening = 0;
        socklen_t len = sizeof listening;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 &&
            !listening && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0)
            f->made_blocking[i] = fd;
        return -1;
    }
    int nfd = weft__fd_reopen(fd, fl, &sb);
    if (nfd < 0)
        return -1;
    nfd = weft__fd_above_std(nfd);
    if (nfd >= 0 && fcntl(nfd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        close(nfd);
        nfd = -1;
    }
    return nfd;
}

/* The file actions for descriptor @i of the child. */
static int plan_stdio(posix_spawn_file_actions_t *fa, const weft_proc_opts_t *o,
                      fds *f, int i)
{
    int rc = 0;
    switch (o->stdio[i]) {
    case WEFT_PROC_PIPE:
        if ((rc = make_pipe(f, i)) < 0)
            return rc;
        return -posix_spawn_file_actions_adddup2(fa, f->theirs[i], i);
    case WEFT_PROC_NULL:
        return -posix_spawn_file_actions_addopen(fa, i, "/dev/null",
                                                 i == 0 ? O_RDONLY : O_WRONLY, 0);
    case WEFT_PROC_FD: {
        int src = o->stdio_fd[i];
        /* A blocking description of its own is above 2 too; else a copy
         * above 2: the dup2 onto a lower number must not destroy a source
         * still to be copied. */
        if ((f->theirs[i] = blocking_for_child(f, i, src)) < 0 && src <= 2 &&
            src != i && (f->theirs[i] = fcntl(src, F_DUPFD_CLOEXEC, 3)) < 0)
            return -errno;
        if (f->theirs[i] >= 0)
            src = f->theirs[i];
        return -posix_spawn_file_actions_adddup2(fa, src, i);
    }
    case WEFT_PROC_INHERIT:
        /* This process's own, made non-blocking by weft_read(0, ...) or
         * weft_write(1, ...), or a connection from weft_accept() moved
         * there: the child gets it blocking. */
        if ((f->theirs[i] = blocking_for_child(f, i, i)) < 0)
            return 0;
        return -posix_spawn_file_actions_adddup2(fa, f->theirs[i], i);
    case WEFT_PROC_STDOUT:
        return -posix_spawn_file_actions_adddup2(fa, 1, 2);
    default:
        return 0;
    }
}

static int start(weft_proc_t *p, const char *file, char *const argv[],
                 const weft_proc_opts_t *o, fds *f)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int rc = -posix_spawn_file_actions_init(&fa);
    if (rc < 0)
        return rc;
    if ((rc = -posix_spawnattr_init(&at)) < 0) {
        posix_spawn_file_actions_destroy(&fa);
        return rc;
    }
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = plan_stdio(&fa, o, f, i);
    if (rc == 0 && o->cwd)
        rc = -posix_spawn_file_actions_addchdir_np(&fa, o->cwd);
    /* The child starts with nothing blocked (the signals this program
     * waits for through weft_signal_open() are blocked here) and with
     * SIGPIPE at its default even if this program ignores it. */
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    if (rc == 0)
        rc = -posix_spawnattr_setsigmask(&at, &none);
    if (rc == 0)
        rc = -posix_spawnattr_setsigdefault(&at, &dfl);
    if (rc == 0)
        rc = -posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
                                                POSIX_SPAWN_SETSIGDEF);
    if (rc == 0)
        rc = -posix_spawnp(&p->pid, file, &fa, &at, argv,
                           o->envp ? o->envp : environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

int weft_proc_spawn(weft_proc_t *p, const char *file, char *const argv[],
                    const weft_proc_opts_t *opts)
{
    if (!p || !file || !*file || !argv || !argv[0])
        return -EINVAL;
    const weft_proc_opts_t none = {{0}, {0}, NULL, NULL};
    const weft_proc_opts_t *o = opts ? opts : &none;
    int rc = check_opts(o);
    if (rc < 0)
        return rc;
    weft_proc_t np = {.pid = -1, .in = -1, .out = -1, .err = -1, .pidfd_ = -1};
    fds f = {{-1, -1, -1}, {-1, -1, -1}, {-1, -1, -1}};
    rc = start(&np, file, argv, o, &f);
    close_all(f.theirs, 3);
    if (rc < 0) {
        close_all(f.ours, 3);
        for (int i = 0; i < 3; i++) /* no child: as they were */
            if (f.made_blocking[i] >= 0)
                fcntl(f.made_blocking[i], F_SETFL,
                      fcntl(f.made_blocking[i], F_GETFL) | O_NONBLOCK);
        return rc;
    }
    np.in = f.ours[0];
    np.out = f.ours[1];
    np.err = f.ours[2];
    if (!getenv("WEFT_PROC_NO_PIDFD"))
        np.pidfd_ = (int)syscall(SYS_pidfd_open, np.pid, 0);
    /* Kept as long as @p: not on a standard descriptor's number, which
     * the program may close or read as its own stdin/stdout/stderr. */
    np.pidfd_ = weft__fd_above_std(np.pidfd_);
    /* New numbers: forget any earlier file weft knew under them. */
    int mine[4] = {np.in, np.out, np.err, np.pidfd_};
    for (int i = 0; i < 4; i++)
        if (mine[i] >= 0)
            weft_fd_forget(mine[i]);
    *p = np;
    return 0;
}

/* 1 reaped (status in @p), 0 still running, or -errno. */
static int reap(weft_proc_t *p)
{
    int st;
    pid_t r;
    while ((r = waitpid(p->pid, &st, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r < 0)
        return -errno;
    if (r == 0)
        return 0;
    p->status_ = st;
    p->reaped_ = 1;
    return 1;
}

int weft_proc_join(weft_proc_t *p, int *wstatus, int64_t deadline)
{
    int rc = weft__precheck_args(deadline, p && p->pid > 0);
    if (rc < 0)
        return rc;
    while (!p->reaped_) {
        if (p->pidfd_ < 0) {
            int st;
            rc = weft_proc_wait(p->pid, &st, deadline);
            if (rc < 0 && p->reaped_)
                break; /* another fiber's join reaped it meanwhile */
            if (rc < 0)
                return rc;
            p->status_ = st;
            p->reaped_ = 1;
            break;
        }
        if ((rc = reap(p)) < 0)
            return rc;
        if (rc == 0 && (rc = weft__wait_fd_as(p->pidfd_, WEFT_READABLE, deadline,
                                                WEFT_WAIT_PROCESS,
                                                (const void *)(intptr_t)p->pid)) < 0)
            return rc;
    }
    if (wstatus)
        *wstatus = p->status_;
    return 0;
}

int weft_proc_kill(weft_proc_t *p, int sig)
{
    if (!p || p->pid <= 0 || sig < 0 || sig >= NSIG)
        return -EINVAL;
    if (p->reaped_)
        return -ESRCH;
    if (p->pidfd_ >= 0) {
        if (syscall(SYS_pidfd_send_signal, p->pidfd_, sig, NULL, 0) == 0)
            return 0;
        if (errno != ENOSYS)
            return -errno;
    }
    return kill(p->pid, sig) < 0 ? -errno : 0;
}

int weft_proc_close(weft_proc_t *p)
{
    if (!p)
        return -EINVAL;
    int *mine[4] = {&p->in, &p->out, &p->err, &p->pidfd_};
    for (int i = 0; i < 4; i++)
        if (*mine[i] >= 0) {
            weft_close(*mine[i]);
            *mine[i] = -1;
        }
    if (p->pid > 0 && !p->reaped_)
        reap(p);
    return 0;
}
