/*
 * io.c — fiber-blocking system calls: reading, writing, readiness,
 * accepting, connecting, positioned file I/O.
 *
 * Each call does its work the way the reactor's backend prefers
 * (weft__reactor_use_op): on io_uring as a completion op submitted to the
 * ring (the fiber blocks at once, the completion carries the result, no
 * system call of its own); elsewhere as the system call first, and a
 * readiness wait when it would block. Sockets are driven with MSG_DONTWAIT
 * (no fcntl needed) and MSG_NOSIGNAL; other descriptors get O_NONBLOCK
 * once (regular files excepted) and, since MSG_NOSIGNAL does not exist for
 * pipes, writes to them block SIGPIPE in the calling thread's mask for the
 * duration of the call and consume the signal the kernel queued, so the
 * process's dispositions are never touched and the caller sees -EPIPE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "io.h"
#include "evmask.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- shared steps ---------------------------------------------------------- */

int weft__io_begin(int fd, int64_t deadline)
{
    weft_sched_t *s = weft__sched_tls();
    int rc = weft__precheck_in(s, deadline);
    if (rc < 0)
        return rc;
    if (fd < 0)
        return -EBADF;
    /* Beyond the tables: make sure the descriptor exists before growing
     * them to its number (a bogus huge number is -EBADF, not a gigabyte
     * memset). */
    if ((fd >= s->r.nfds || !weft__iofd_find(s, fd)) && fcntl(fd, F_GETFD) < 0)
        return -EBADF;
    if (!weft__fd(&s->r, fd) || !weft__iofd_get(s, fd))
        return -ENOMEM;
    return 0;
}

/* A fiber whose reads and writes never wait (a regular file, /dev/zero, a
 * socket whose peer keeps up, on a backend that makes the system call)
 * would keep every other fiber and every timer from running, where a
 * thread making the same calls is preempted. So the WEFT__IO_BUDGET-th
 * such call that one fiber makes in a row, within one turn of the loop,
 * yields first. Ops (io_uring) need no budget: each one blocks. */
enum { WEFT__IO_BUDGET = 64 };

static __attribute__((noinline, cold)) int io_budget_spent(weft__io *io)
{
    io->run_calls = 0;
    return weft_yield();
}

static inline int io_fair(weft_sched_t *s)
{
    weft__io *io = s->io; /* the caller is a fiber with its I/O state */
    if (io->run_fiber != s->current || io->run_iter != s->r.iterations) {
        io->run_fiber = s->current;
        io->run_iter = s->r.iterations;
        io->run_calls = 0;
        return 0;
    }
    if (WEFT_LIKELY(++io->run_calls < WEFT__IO_BUDGET))
        return 0;
    return io_budget_spent(io);
}

int weft__io_wait(int fd, uint32_t events, int64_t deadline)
{
    return weft__io_wait_as(fd, events, deadline, WEFT__WK(WEFT_WAIT_FD, events),
                            WEFT__FDOBJ(fd), -1);
}

/* A blocking call's @deadline for its wait @w, given through the calling
 * fiber's keeper (weft__wait_keep): a connection's calls, each with the
 * same timeout, arm no timer of their own. Like weft__wait_arm_later, a
 * deadline that has passed ends the wait at the next turn of the loop. */
static inline int keep_deadline(weft_sched_t *s, weft__wait *w, int64_t deadline)
{
    return weft__fiber_keep(s->current, w, deadline);
}

int weft__io_wait_as(int fd, uint32_t events, int64_t deadline, int kind,
                     const void *obj, int opk)
{
    weft_sched_t *s = weft__sched_tls();
    weft__wait w;
    weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
    w.okind = (uint8_t)(opk + 1);
    /* 0, "try once", ends the wait now with -EAGAIN. */
    int rc = deadline > 0 ? keep_deadline(s, &w, deadline)
                          : weft__wait_arm_deadline(&w, deadline);
    if (rc == 0)
        rc = weft__wait_arm_fd(&w, fd, events);
    if (rc < 0) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    return weft__block(&w, kind, obj);
}

/* What a completion op waits for, for dumps. */
static int op_wkind(const weft__opdesc *d)
{
    uint32_t ev;
    switch (d->op) {
    case WEFT__OP_READ: case WEFT__OP_READV: case WEFT__OP_RECV:
    case WEFT__OP_RECVMSG: case WEFT__OP_ACCEPT:
        ev = WEFT_READABLE;
        break;
    case WEFT__OP_POLL:
        ev = d->events;
        break;
    case WEFT__OP_CLOSE:
        ev = 0;
        break;
    default:
        ev = WEFT_WRITABLE;
        break;
    }
    return WEFT__WK(WEFT_WAIT_FD, ev);
}

/* A deadline of 0 is the explicit "try once": the system call does that
 * best. Any other deadline is not compared with the clock here (a clock
 * read on every call): one that has passed already makes the timer fire
 * in the poll that submits the op, which cancels it unless it completed
 * inside that submission — the same single attempt. */
/* A started op's wait on @fd (weft__block's @wk): block until it ends,
 * then until its op has; the merged result (weft__op_result). */
static inline ssize_t op_wait(weft__wait *w, int wk, int fd, uint8_t *hint)
{
    int why = weft__block(w, wk, WEFT__FDOBJ(fd));
    while (weft__op_pending(w)) {
        /* Ended first: the kernel may still use the caller's buffer. */
        weft__op_rearm(w);
        weft__block(w, wk, WEFT__FDOBJ(fd));
    }
    if (hint)
        *hint = w->op_hint;
    return weft__op_result(w, why);
}

ssize_t weft__io_op(const weft__opdesc *d, int64_t deadline, uint8_t *hint)
{
    weft_sched_t *s = weft__sched_tls();
    /* Aligned: its two lines (see weft__wait), not three. */
    weft__wait w __attribute__((aligned(64)));
    weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
    int rc = keep_deadline(s, &w, deadline);
    if (WEFT_UNLIKELY(rc < 0)) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    rc = weft__op_start(&w, d, WEFT_FOREVER);
    if (rc < 0)
        return rc;
    return op_wait(&w, op_wkind(d), d->fd, hint);
}

/* weft__io_op for an op of one buffer at the file position or on a
 * socket (weft__wait_arm_buf): every request's read and answer. */
static ssize_t io_op_buf(int op, int fd, void *buf, size_t len, int flags,
                         int64_t deadline)
{
    weft_sched_t *s = weft__sched_tls();
    weft__wait w __attribute__((aligned(64)));
    weft__wait_init(&w, &s->r, weft__fiber_wake, s->current);
    int rc = keep_deadline(s, &w, deadline);
    if (WEFT_UNLIKELY(rc < 0)) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    rc = weft__wait_arm_buf(&w, op, fd, buf, len, flags);
    if (WEFT_UNLIKELY(rc < 0)) {
        weft__wait_complete(&w, rc);
        return rc;
    }
    bool rd = op == WEFT__OP_RECV || op == WEFT__OP_READ;
    return op_wait(&w, WEFT__WK(WEFT_WAIT_FD, rd ? WEFT_READABLE : WEFT_WRITABLE), fd, NULL);
}

/*
 * O_NONBLOCK belongs to the open file description, which a program's
 * stdin, stdout and stderr share with its shell, its terminal and the
 * processes around it: left set, the next program in the same terminal or
 * pipeline, and the program's own stdio after exit, get EAGAIN where they
 * expect to block. Weft leaves them blocking where it can (std_nowait);
 * those it has to make non-blocking are put back as they were when the
 * process that did so exits (exit(3), returning from main) — the same file
 * still on that number, and not in a forked child, whose exit must not
 * change the description under its parent. Nothing is done after _exit(2)
 * or a fatal signal.
 */
static struct {
    bool set; /* weft set O_NONBLOCK on this one */
    pid_t pid;
    dev_t dev;
    ino_t ino;
} std_nb[3];
static pthread_mutex_t std_nb_lock = PTHREAD_MUTEX_INITIALIZER;

static void std_nb_restore(void)
{
    /* Not waited for: a forked child may have copied it locked. */
    if (pthread_mutex_trylock(&std_nb_lock) != 0)
        return;
    for (int fd = 0; fd < 3; fd++) {
        struct stat sb;
        if (!std_nb[fd].set || std_nb[fd].pid != getpid() || fstat(fd, &sb) < 0 ||
            sb.st_dev != std_nb[fd].dev || sb.st_ino != std_nb[fd].ino)
            continue;
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK))
            (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    }
    pthread_mutex_unlock(&std_nb_lock);
}

/* Standard descriptor @fd was just made non-blocking by weft. */
static void std_nb_note(int fd)
{
    static bool registered;
    struct stat sb;
    if (fstat(fd, &sb) < 0)
        return;
    pthread_mutex_lock(&std_nb_lock);
    if (!registered)
        registered = atexit(std_nb_restore) == 0;
    if (registered) {
        std_nb[fd].pid = getpid();
        std_nb[fd].dev = sb.st_dev;
        std_nb[fd].ino = sb.st_ino;
        std_nb[fd].set = true;
    }
    pthread_mutex_unlock(&std_nb_lock);
}

int weft__fd_above_std(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    close(fd);
    errno = e;
    return hi;
}

/* A terminal that reopens as itself: not a pseudo-terminal master, which
 * /proc/self/fd reopens as /dev/ptmx, a new master. */
static bool reopens_as_itself(int fd, const struct stat *sb)
{
    if (S_ISFIFO(sb->st_mode))
        return true; /* a pipe or a FIFO: the same pipe */
    unsigned pty;
    return S_ISCHR(sb->st_mode) && isatty(fd) && ioctl(fd, TIOCGPTN, &pty) < 0;
}

int weft__fd_reopen(int fd, int fl, const struct stat *sb)
{
    if (!reopens_as_itself(fd, sb))
        return -1;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    /* O_NONBLOCK for the open itself too: a FIFO opened for reading would
     * wait for a writer. */
    int nfd = open(path, (fl & (O_ACCMODE | O_APPEND)) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (nfd < 0)
        return -1;
    struct stat nb;
    if (fstat(nfd, &nb) < 0 || nb.st_ino != sb->st_ino || nb.st_dev != sb->st_dev ||
        nb.st_rdev != sb->st_rdev) {
        close(nfd);
        return -1;
    }
    return nfd;
}

/* Standard descriptor @fd (flags @fl) gets an open file description of
 * its own, in place (weft__fd_reopen, then dup3 over it), as blocking as
 * the one it had: the description it shared with the other standard
 * descriptors, the shell and the terminal is never changed, and this one
 * only for a call at a time (WEFT__NB_TOGGLE). 0, or -1 where that cannot
 * be done (a socket, no /proc, a FIFO without reader...). */
static int std_own(int fd, int fl)
{
    struct stat sb;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fstat(fd, &sb) < 0)
        return -1;
    int nfd = weft__fd_reopen(fd, fl, &sb);
    if (nfd < 0)
        return -1;
    int rc = fcntl(nfd, F_SETFL, fl) == 0 &&
             dup3(nfd, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) == fd ? 0 : -1;
    close(nfd);
    return rc;
}

/* Standard descriptor @fd (flags @fl, blocking) as a last resort: O_NONBLOCK
 * set on the description it has, and undone at exit. */
static int std_set_nonblock(int fd, int fl)
{
    if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    std_nb_note(fd);
    return WEFT__NB_SET;
}

/*
 * How weft's calls on a blocking standard descriptor keep from blocking
 * (WEFT__NB_*). The program's stdio writes and reads the same descriptor
 * with plain blocking calls, which O_NONBLOCK left on it would turn into
 * lost output (printf to a full pipe or a slow terminal fails with EAGAIN)
 * and false end of input (fgets after a weft_read). So the description
 * stays blocking: a pipe or a FIFO takes RWF_NOWAIT on each call (the
 * kernel's per-call O_NONBLOCK: pipes have it from Linux 6.4; before, and
 * for a named FIFO or a pipe reopened through /proc, it answers
 * EOPNOTSUPP, and nowait_rw goes the other way), anything else (a
 * terminal) a description of its own on which O_NONBLOCK is set only for
 * the length of a call.
 * Where neither can be had, O_NONBLOCK is set for good (and undone at
 * exit).
 */
/* Standard descriptor @fd without a per-call flag: a description of its
 * own, non-blocking for a call at a time, else O_NONBLOCK for good. */
static int std_toggle(int fd, int fl)
{
    return std_own(fd, fl) == 0 ? WEFT__NB_TOGGLE : std_set_nonblock(fd, fl);
}

static int std_nowait(int fd, int fl)
{
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISFIFO(sb.st_mode))
        return WEFT__NB_RWF;
    return std_toggle(fd, fl);
}

int weft__ensure_nonblock(int fd)
{
    weft__fdstate *st = weft__fd(&weft__sched_tls()->r, fd);
    if (st && st->nonblock)
        return 0;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    int nb = WEFT__NB_SET;
    if (!(fl & O_NONBLOCK)) {
        if (fd <= 2)
            nb = st ? std_nowait(fd, fl) : std_set_nonblock(fd, fl);
        else if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
            nb = -errno;
    }
    if (nb < 0)
        return nb;
    if (st)
        st->nonblock = (uint8_t)nb;
    return 0;
}

int weft__io_kind_slow(int fd)
{
    int kind = weft__fd_kind(&weft__sched_tls()->r, fd);
    if (kind < 0 || kind == WEFT__FD_FILE || kind == WEFT__FD_SOCKET)
        return kind;
    int rc = weft__ensure_nonblock(fd);
    return rc < 0 ? rc : kind;
}

/*
 * Readiness backends: after a stream socket read that came back short (the
 * receive queue was empty at that moment), the next read would most often
 * fail with EAGAIN, a wasted system call per request in a request/response
 * protocol. While no readable edge has been reported since, wait for one
 * first. Safe with epoll's edge triggering because any data that arrives
 * later raises a new edge, which the reactor records even with no waiter
 * (rd_edge); the poll backend is level-triggered anyway. A deadline that
 * passes during that wait still gets its one non-blocking attempt.
 */
static bool read_waits_first(const weft__fdstate *st, const weft__iofd *io, int flags)
{
    return io->rd_drained && !st->rd_edge && !st->rd_hup && !(flags & MSG_PEEK);
}

static size_t iov_total(const struct iovec *iov, int cnt)
{
    size_t t = 0;
    for (int i = 0; i < cnt; i++)
        t += iov[i].iov_len;
    return t;
}

static void note_read(weft__iofd *io, int fd, ssize_t n, size_t asked, int flags)
{
    if (n <= 0 || (size_t)n >= asked || (flags & MSG_PEEK)) {
        io->rd_drained = 0;
        return;
    }
    if (!io->stream) {
        int type = 0;
        socklen_t len = sizeof type;
        io->stream = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
                             type == SOCK_STREAM ? 1 : 2;
    }
    /* A short datagram says nothing about the next one. */
    io->rd_drained = io->stream == 1;
}

/* The errno of a failed call: 0 means "would block, wait", else -errno. */
static inline int failed(void)
{
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK)
        return 0;
    return -e;
}

/* writev on a non-socket without letting SIGPIPE reach the process
 * (pwritev2 at the file position with @rwf, if not 0). */
static ssize_t writev_nosigpipe(int fd, const struct iovec *iov, int cnt, int rwf)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t n = rwf ? pwritev2(fd, iov, cnt, -1, rwf) : writev(fd, iov, cnt);
    int e = errno;
    if (n < 0 && e == EPIPE && !sigismember(&old, SIGPIPE)) {
        /* The SIGPIPE this write raised is pending on this thread:
         * take it before unblocking. */
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return n;
}

/* readv, or writev_nosigpipe (@wr), on a standard descriptor left
 * blocking (@st->nonblock WEFT__NB_RWF or _TOGGLE, see std_nowait), made
 * non-blocking for this call alone. */
static __attribute__((noinline, cold)) ssize_t
nowait_rw(weft__fdstate *st, int fd, const struct iovec *iov, int cnt, bool wr)
{
    int rwf = st->nonblock == WEFT__NB_RWF ? RWF_NOWAIT : 0;
    if (rwf) {
        ssize_t n = wr ? writev_nosigpipe(fd, iov, cnt, rwf) : preadv2(fd, iov, cnt, -1, rwf);
        if (n >= 0 || errno != EOPNOTSUPP)
            return n;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    if (rwf) {
        /* No RWF_NOWAIT for this file (a kernel before 6.4, a named
         * FIFO): the way std_nowait takes for a terminal. */
        int nb = std_toggle(fd, fl);
        if (nb < 0)
            return -1; /* errno: fcntl's */
        st->nonblock = (uint8_t)nb;
    }
    bool toggle = st->nonblock == WEFT__NB_TOGGLE; /* else O_NONBLOCK is set for good */
    if (toggle && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    ssize_t n = wr ? writev_nosigpipe(fd, iov, cnt, 0) : readv(fd, iov, cnt);
    int e = errno;
    if (toggle)
        (void)fcntl(fd, F_SETFL, fl);
    errno = e;
    return n;
}

/* Whether @fd's calls are made non-blocking one at a time (nowait_rw). */
static inline bool per_call(const weft_sched_t *s, int fd)
{
    return s->r.fds[fd].nonblock > WEFT__NB_SET;
}

/* ---- the retry tails shared by every read and write -------------------- */

/* Run @d, a completion op on @fd, until it is done: again after -EINTR, and
 * after a readiness wait for @ready on -EAGAIN (an older kernel that will
 * not wait on O_NONBLOCK files). */
/* After a completion op on @fd ended with *@n: whether to run it again
 * (-EINTR; -EAGAIN, once @fd is ready for @ready), else *@n stays, or
 * becomes why the readiness wait failed. */
static inline bool op_again(ssize_t *n, int fd, uint32_t ready, int64_t deadline)
{
    if (*n == -EINTR)
        return true;
    if (*n != -EAGAIN)
        return false;
    int rc = weft__io_wait(fd, ready, deadline);
    if (rc < 0)
        *n = rc;
    return rc >= 0;
}

static ssize_t op_until_done(const weft__opdesc *d, uint32_t ready, int64_t deadline)
{
    ssize_t n;
    do
        n = weft__io_op(d, deadline, NULL);
    while (op_again(&n, d->fd, ready, deadline));
    return n;
}

/* After a system call on @fd that failed (errno set): 0 = call it again
 * (interrupted, or @fd became ready for @ready), else why to give up: the
 * call's error, or why the readiness wait ended. @last_try: the deadline
 * has passed already, so "would block" ends the call. */
static int retry_after(int fd, uint32_t ready, int64_t deadline, bool last_try)
{
    int rc;
    if (errno == EINTR)
        return 0;
    if ((rc = failed()) < 0)
        return rc;
    if (last_try)
        return weft__expired(deadline);
    return weft__io_wait(fd, ready, deadline);
}

/* The op for @cnt buffers on a descriptor of @kind. */
static int read_op(int kind, int cnt)
{
    if (kind == WEFT__FD_SOCKET)
        return cnt == 1 ? WEFT__OP_RECV : WEFT__OP_RECVMSG;
    return cnt == 1 ? WEFT__OP_READ : WEFT__OP_READV;
}

static int write_op(int kind, int cnt)
{
    if (kind == WEFT__FD_SOCKET)
        return cnt == 1 ? WEFT__OP_SEND : WEFT__OP_SENDMSG;
    return cnt == 1 ? WEFT__OP_WRITE : WEFT__OP_WRITEV;
}

/* The checks of weft__io_begin, then the kind of @fd (-ENOTSOCK if
 * @socket_only and it is not a socket). */
static int rw_kind(int fd, int64_t deadline, bool socket_only)
{
    int kind = weft__io_begin(fd, deadline);
    if (kind < 0)
        return kind;
    kind = weft__io_kind(fd);
    if (kind >= 0 && socket_only && kind != WEFT__FD_SOCKET)
        return -ENOTSOCK;
    return kind;
}

/* rw_kind's common case: a socket this thread's tables reach and whose
 * kind is known, in a fiber not cancelled and without a timeout scope,
 * with a valid deadline — the checks of weft__io_begin without its slow
 * parts (rw_kind makes them, and reports errors, otherwise). */
static inline bool sock_known(const weft_sched_t *s, int fd, int64_t deadline)
{
    if (WEFT_UNLIKELY(!s) || fd < 0 || fd >= s->r.nfds || !s->io || fd >= s->io->nfds)
        return false;
    const weft__fiber *f = s->current;
    return !f->is_main && !f->cancelled && f->scope_deadline == 0 && deadline >= -1 &&
           s->r.fds[fd].kind == WEFT__FD_SOCKET;
}

/* How every read and write begins: the kind of @fd (rw_kind, sock_known
 * first), and in *@op the op (@op_for: read_op or write_op) for @cnt
 * buffers on it. */
static inline __attribute__((always_inline)) int
rw_begin(const weft_sched_t *s, int fd, int64_t deadline, bool socket_only, int cnt,
         int (*op_for)(int, int), int *op)
{
    int kind = WEFT_LIKELY(sock_known(s, fd, deadline)) ? WEFT__FD_SOCKET
                                                         : rw_kind(fd, deadline, socket_only);
    if (kind >= 0)
        *op = op_for(kind, cnt);
    return kind;
}

/* Run @op on @cnt buffers as a completion op (see op_until_done). */
static ssize_t rw_by_op(int op, int fd, const struct iovec *iov, int cnt,
                        int flags, uint32_t ready, int64_t deadline)
{
    if (cnt == 1) { /* RECV, SEND, READ, WRITE: the path for one buffer */
        ssize_t n;
        do
            n = io_op_buf(op, fd, iov[0].iov_base, iov[0].iov_len, flags, deadline);
        while (op_again(&n, fd, ready, deadline));
        return n;
    }
    weft__opdesc d = {.op = op, .fd = fd, .flags = flags, .off = -1,
                      .iov = iov, .iovcnt = cnt};
    return op_until_done(&d, ready, deadline);
}

/* ---- reading ------------------------------------------------------------ */

/* One buffer: recv, which spares the kernel copying in a msghdr and
 * importing an iovec. */
static ssize_t sock_recv(int fd, const struct iovec *iov, int cnt, int flags)
{
    if (cnt == 1)
        return recv(fd, iov[0].iov_base, iov[0].iov_len, flags | MSG_DONTWAIT);
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    return recvmsg(fd, &m, flags | MSG_DONTWAIT);
}

/* A socket read by system call. On a readiness backend, also a readable
 * edge cleared before it and what it says of the receive queue noted after
 * it (see read_waits_first). */
static ssize_t sock_read(weft_sched_t *s, int fd, const struct iovec *iov,
                         int cnt, int flags, int64_t deadline)
{
    const bool readiness = !weft__reactor_has_ops(&s->r);
    bool last_try = false;
    int rc;
    if (readiness && read_waits_first(&s->r.fds[fd], weft__iofd_at(s, fd), flags)) {
        rc = weft__io_wait(fd, WEFT_READABLE, deadline);
        if (rc == -ETIMEDOUT || rc == -EAGAIN)
            last_try = true;
        else if (rc < 0)
            return rc;
    }
    for (;;) {
        s->r.fds[fd].rd_edge = 0;
        ssize_t n = sock_recv(fd, iov, cnt, flags);
        if (readiness && (n >= 0 || errno != EINTR))
            note_read(weft__iofd_at(s, fd), fd, n, iov_total(iov, cnt), flags);
        if (n >= 0)
            return n;
        if ((rc = retry_after(fd, WEFT_READABLE, deadline, last_try)) < 0)
            return rc;
    }
}

/* Every read: the op the backend prefers, else the system call and a
 * readiness wait when it would block. A regular file at its file position
 * is always the system call: the position belongs to the open file, which
 * other threads and processes may share, and read(2) takes and advances it
 * under the kernel's lock, where a ring op reads it when it starts and
 * stores it when it ends (two at once read the same bytes, or overwrite
 * each other's when writing). weft_pread()/weft_pwrite() stay ring ops. */
/* Inlined into each caller: one frame less under a fiber parked in a
 * read (each line of a parked stack is a miss again when it resumes, at
 * a thousand connections). */
static inline __attribute__((always_inline)) ssize_t
do_read(int fd, const struct iovec *iov, int cnt, int flags, int64_t deadline,
        bool socket_only)
{
    weft_sched_t *s = weft__sched_tls();
    int op, kind = rw_begin(s, fd, deadline, socket_only, cnt, read_op, &op);
    if (kind < 0)
        return kind;
    if (kind != WEFT__FD_FILE && deadline != 0 && weft__reactor_use_op(&s->r, kind, op) &&
        (kind == WEFT__FD_SOCKET || !per_call(s, fd)))
        return rw_by_op(op, fd, iov, cnt, flags, WEFT_READABLE, deadline);
    int frc = io_fair(s);
    if (WEFT_UNLIKELY(frc < 0))
        return frc;
    if (kind == WEFT__FD_SOCKET)
        return sock_read(s, fd, iov, cnt, flags, deadline);
    for (;;) {
        ssize_t n = per_call(s, fd) ? nowait_rw(&s->r.fds[fd], fd, iov, cnt, false)
                                    : readv(fd, iov, cnt);
        if (n >= 0)
            return n;
        int rc = retry_after(fd, WEFT_READABLE, deadline, false);
        if (rc < 0)
            return rc;
    }
}

/* ---- writing ------------------------------------------------------------ */

static ssize_t sock_send(int fd, const struct iovec *iov, int cnt, int flags)
{
    if (cnt == 1)
        return send(fd, iov[0].iov_base, iov[0].iov_len,
                    flags | MSG_DONTWAIT | MSG_NOSIGNAL);
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    return sendmsg(fd, &m, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Every write: write-behind first where it is on (or bytes are still
 * behind), then the op the backend prefers, else the system call and a
 * readiness wait when it would block (a regular file: the system call, see
 * do_read). */
static inline __attribute__((always_inline)) ssize_t
do_write(int fd, const struct iovec *iov, int cnt, int flags, int64_t deadline,
         bool socket_only)
{
    weft_sched_t *s = weft__sched_tls();
    int op, kind = rw_begin(s, fd, deadline, socket_only, cnt, write_op, &op);
    if (kind < 0)
        return kind;
    const weft__iofd *io = weft__iofd_at(s, fd);
    if (WEFT_UNLIKELY(io->wb_on || io->wb || io->wb_err)) {
        ssize_t n = weft__wb_write(s->io, fd, iov, cnt, flags, deadline);
        if (n != WEFT__WB_PASS)
            return n;
    }
    if (kind != WEFT__FD_FILE && deadline != 0 && weft__reactor_use_op(&s->r, kind, op) &&
        (kind == WEFT__FD_SOCKET || !per_call(s, fd)))
        return rw_by_op(op, fd, iov, cnt, flags, WEFT_WRITABLE, deadline);
    int frc = io_fair(s);
    if (WEFT_UNLIKELY(frc < 0))
        return frc;
    for (;;) {
        ssize_t n = kind == WEFT__FD_SOCKET ? sock_send(fd, iov, cnt, flags)
                  : kind == WEFT__FD_FILE   ? writev(fd, iov, cnt)
                  : per_call(s, fd)         ? nowait_rw(&s->r.fds[fd], fd, iov, cnt, true)
                                            : writev_nosigpipe(fd, iov, cnt, 0);
        if (n >= 0)
            return n;
        int rc = retry_after(fd, WEFT_WRITABLE, deadline, false);
        if (rc < 0)
            return rc;
    }
}

ssize_t weft_read(int fd, void *buf, size_t len, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    if (len == 0) {
        int rc = weft__io_begin(fd, deadline);
        return rc < 0 ? rc : 0;
    }
    struct iovec iov = {buf, len};
    return do_read(fd, &iov, 1, 0, deadline, false);
}

ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt, int64_t deadline)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX || (!iov && iovcnt))
        return -EINVAL;
    return do_read(fd, iov, iovcnt, 0, deadline, false);
}

/* weft_recv with MSG_WAITALL that got @got < @len bytes: on a stream
 * socket, the rest, as recv(2) waits for it (the readiness backends'
 * recv is made with MSG_DONTWAIT, which returns what is there). End of
 * file, an error, the deadline or a cancel returns what came. */
static __attribute__((noinline)) ssize_t recv_rest(int fd, char *buf, size_t len, size_t got,
                                                   int flags, int64_t deadline)
{
    int type = 0;
    socklen_t tl = sizeof type;
    if ((flags & MSG_PEEK) || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
        type != SOCK_STREAM)
        return (ssize_t)got;
    while (got < len) {
        struct iovec iov = {buf + got, len - got};
        ssize_t n = do_read(fd, &iov, 1, flags & ~MSG_WAITALL, deadline, true);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

ssize_t weft_recv(int fd, void *buf, size_t len, int flags, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    struct iovec iov = {buf, len};
    ssize_t n = do_read(fd, &iov, 1, flags, deadline, true);
    if (WEFT_UNLIKELY(flags & MSG_WAITALL) && n > 0 && (size_t)n < len)
        n = recv_rest(fd, buf, len, (size_t)n, flags, deadline);
    return n;
}

int weft_read_full(int fd, void *buf, size_t len, size_t *got, int64_t deadline)
{
    size_t done = 0;
    int rc = 0;
    if (!buf && len)
        rc = -EINVAL;
    while (rc == 0 && done < len) {
        ssize_t n = weft_read(fd, (char *)buf + done, len - done, deadline);
        if (n < 0)
            rc = (int)n;
        else if (n == 0)
            rc = 1;
        else
            done += (size_t)n;
    }
    if (got)
        *got = done;
    return rc;
}

ssize_t weft_write(int fd, const void *buf, size_t len, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    if (len == 0) {
        int rc = weft__io_begin(fd, deadline);
        return rc < 0 ? rc : 0;
    }
    struct iovec iov = {(void *)buf, len};
    return do_write(fd, &iov, 1, 0, deadline, false);
}

ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt, int64_t deadline)
{
    if (iovcnt < 0 || iovcnt > IOV_MAX || (!iov && iovcnt))
        return -EINVAL;
    return do_write(fd, iov, iovcnt, 0, deadline, false);
}

ssize_t weft_send(int fd, const void *buf, size_t len, int flags,
                  int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    struct iovec iov = {(void *)buf, len};
    return do_write(fd, &iov, 1, flags, deadline, true);
}

int weft_write_all(int fd, const void *buf, size_t len, size_t *written,
                   int64_t deadline)
{
    size_t done = 0;
    int rc = 0;
    if (!buf && len)
        rc = -EINVAL;
    while (rc == 0 && done < len) {
        ssize_t n = weft_write(fd, (const char *)buf + done, len - done,
                               deadline);
        if (n < 0)
            rc = (int)n;
        else
            done += (size_t)n;
    }
    if (written)
        *written = done;
    return rc;
}

int weft_flush(int fd, int64_t deadline)
{
    int rc = weft__io_begin(fd, deadline);
    return rc < 0 ? rc : weft__wb_drain(fd, deadline);
}

/* ---- readiness ---------------------------------------------------------- */

int weft_wait_fd(int fd, int events, int64_t deadline)
{
    return weft__wait_fd_as(fd, events, deadline,
                            WEFT__WK(WEFT_WAIT_FD, (uint32_t)events & 0xff), WEFT__FDOBJ(fd));
}

int weft__wait_fd_as(int fd, int events, int64_t deadline, int kind, const void *obj)
{
    int rc = weft__io_begin(fd, deadline);
    if (rc < 0)
        return rc;
    const int valid = WEFT_READABLE | WEFT_PRIORITY | WEFT_WRITABLE;
    if (!events || (events & ~valid))
        return -EINVAL;
    /* Readiness that already exists is reported at once (and edge-triggered
     * backends need the check: no new edge may come). */
    rc = weft__ready_now(fd, (uint32_t)events);
    if (rc != 0)
        return rc;
    rc = weft__io_wait_as(fd, (uint32_t)events, deadline, kind, obj, -1);
    if (rc > 0)
        rc &= events | WEFT_ERROR | WEFT_HANGUP;
    return rc;
}

/* ---- accepting and connecting ----------------------------------------------- */

/*
 * On io_uring an accept that has to wait is a ring ACCEPT, and one that
 * need not is best a system call: a ring op costs a loop iteration, and a
 * burst of connections would come in one per iteration. So the system
 * call goes first unless the last accept found the queue empty (acc_empty):
 * then the ACCEPT goes to the ring and, where the kernel can, waits for a
 * connection before trying (a futile attempt allocates and frees a socket
 * and a file), and its completion says whether more were left queued
 * (then the next accept is a system call again). A steady trickle of
 * connections thus costs one ring op each and no futile attempt; a burst,
 * one system call each and one that finds the queue empty.
 */
int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen,
                int64_t deadline)
{
    int rc = weft__io_begin(fd, deadline);
    if (rc < 0)
        return rc;
    if (addr && !addrlen)
        return -EINVAL;
    if ((rc = weft__ensure_nonblock(fd)) < 0)
        return rc;
    weft_sched_t *s = weft__sched_tls();
    const bool ring = weft__io_use_op(WEFT__FD_SOCKET, WEFT__OP_ACCEPT, deadline);
    /* accept(2) hands over a connected socket of the listener's type. */
    int stream = weft__io_stream(s, fd);
    if (stream < 0)
        stream = 0;
    for (;;) {
        int c;
        if (ring && weft__iofd_at(s, fd)->acc_empty) {
            weft__opdesc d = {.op = WEFT__OP_ACCEPT, .fd = fd, .addr = addr,
                              .addrlen = addrlen, .poll_first = true};
            uint8_t hint = WEFT__HINT_NONE;
            c = (int)weft__io_op(&d, deadline, &hint);
            if (c >= 0)
                weft__iofd_at(s, fd)->acc_empty = hint == WEFT__HINT_EMPTY;
            else
                errno = -c;
        } else {
            c = accept4(fd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (ring && c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                weft__iofd_at(s, fd)->acc_empty = 1;
                continue; /* wait in the ring */
            }
        }
        if (c >= 0) {
            weft__io_adopt(s, c, WEFT__FD_SOCKET, stream);
            return c;
        }
        int e = errno;
        if (e == EINTR || e == ECONNABORTED || e == EPROTO)
            continue;
        if (e != EAGAIN && e != EWOULDBLOCK)
            return -e;
        if ((rc = weft__io_wait_as(fd, WEFT_READABLE, deadline,
                                   WEFT__WK(WEFT_WAIT_FD, WEFT_READABLE),
                                   WEFT__FDOBJ(fd), WEFT_OPK_ACCEPT)) < 0)
            return rc;
    }
}

int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
                 int64_t deadline)
{
    int rc = weft__io_begin(fd, deadline);
    if (rc < 0)
        return rc;
    if (!addr)
        return -EINVAL;
    if ((rc = weft__ensure_nonblock(fd)) < 0)
        return rc;
    if (weft__io_use_op(WEFT__FD_SOCKET, WEFT__OP_CONNECT, deadline)) {
        weft__opdesc d = {.op = WEFT__OP_CONNECT, .fd = fd,
                          .addr = (struct sockaddr *)addr, .alen = addrlen};
        ssize_t n;
        do
            n = weft__io_op(&d, deadline, NULL);
        while (n == -EINTR);
        if (n != -EAGAIN && n != -EINPROGRESS && n != -EALREADY)
            return n == -EISCONN ? 0 : (int)n;
        /* fall through: finish the handshake by readiness */
    }
    int64_t pause = WEFT_MS;
    for (;;) {
        if (connect(fd, addr, addrlen) == 0)
            return 0;
        int e = errno;
        if (e == EISCONN)
            return 0;
        if (e == EINPROGRESS || e == EINTR || e == EALREADY) {
            if ((rc = weft__io_wait_as(fd, WEFT_WRITABLE, deadline,
                                       WEFT__WK(WEFT_WAIT_FD, WEFT_WRITABLE),
                                       WEFT__FDOBJ(fd), WEFT_OPK_CONNECT)) < 0)
                return rc;
            int err = 0;
            socklen_t l = sizeof err;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                return -errno;
            return err ? -err : 0;
        }
        if (e == EAGAIN) {
            /* A Unix stream or seqpacket listener whose backlog is full:
             * nothing can be waited for (the unconnected socket polls
             * writable all along, and the kernel wakes only blocking
             * connects when room appears), so try again after 1 ms,
             * doubling to 50 ms, until the deadline. */
            int64_t now = weft_now();
            if (deadline != WEFT_FOREVER && now >= deadline)
                return weft__expired(deadline);
            bool last = deadline != WEFT_FOREVER && deadline - now <= pause;
            if ((rc = weft_sleep_until(last ? deadline : now + pause)) < 0)
                return rc;
            pause = pause >= 25 * WEFT_MS ? 50 * WEFT_MS : 2 * pause;
            continue;
        }
        return -e;
    }
}

/* ---- positioned file I/O ------------------------------------------------ */

static ssize_t positioned(int fd, void *buf, size_t len, off_t off,
                          int64_t deadline, bool write)
{
    int rc = weft__io_begin(fd, deadline);
    if (rc < 0)
        return rc;
    if (!buf && len)
        return -EINVAL;
    if (off < 0)
        return -EINVAL;
    if (len == 0)
        return 0;
    int kind = weft__io_kind(fd);
    if (kind < 0)
        return kind;
    /* A ring read "at an offset" of a socket would just wait for data. */
    if (kind == WEFT__FD_SOCKET)
        return -ESPIPE;
    const int op = write ? WEFT__OP_WRITE : WEFT__OP_READ;
    const uint32_t ready = write ? WEFT_WRITABLE : WEFT_READABLE;
    if (kind == WEFT__FD_FILE && weft__io_use_op(kind, op, deadline)) {
        /* Truly asynchronous file I/O: the fiber waits, the loop runs. */
        weft__opdesc d = {.op = op, .fd = fd, .buf = buf, .len = len, .off = off};
        return op_until_done(&d, ready, deadline);
    }
    for (;;) {
        ssize_t n = write ? pwrite(fd, buf, len, off) : pread(fd, buf, len, off);
        if (n >= 0)
            return n;
        if ((rc = retry_after(fd, ready, deadline, false)) < 0)
            return rc;
    }
}

ssize_t weft_pread(int fd, void *buf, size_t len, off_t off, int64_t deadline)
{
    return positioned(fd, buf, len, off, deadline, false);
}

ssize_t weft_pwrite(int fd, const void *buf, size_t len, off_t off,
                    int64_t deadline)
{
    return positioned(fd, (void *)buf, len, off, deadline, true);
}
