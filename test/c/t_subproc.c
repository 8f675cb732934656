/* Subprocesses: 64 MiB through cat (a writer and a reader fiber at once,
 * every byte verified) while other fibers run; exit codes and signals;
 * stdout and stderr pipes, 2>&1, /dev/null, a given descriptor, low
 * descriptors; environment and working directory; the child's signal mask
 * is empty although ours blocks; join deadlines (past, future, forever),
 * cancellation of a join and of a pipe read, close while reading; kill;
 * exec errors reported by the call; bad input; the pidfd-less fallback. */
#include "harness.h"

#include <fcntl.h>
#include <sys/wait.h>

#define MS 1000000LL
#define BULK ((size_t)64 << 20)

static char *argv_cat[] = {"cat", NULL};
static char *argv_sleep[] = {"sleep", "100", NULL};

static uint8_t pattern(size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u;
    return (uint8_t)(x >> 24 ^ i);
}

typedef struct bulk {
    int fd;
    size_t done;
    int rc;
} bulk;

static long ticks;
static int ticking;
static long ticks_at[2]; /* when a quarter, and three quarters, were written */

static void *bulk_writer(void *arg)
{
    bulk *b = arg;
    static uint8_t chunk[65536 + 7];
    ticks_at[0] = ticks_at[1] = -1;
    while (b->done < BULK) {
        if (ticks_at[0] < 0 && b->done >= BULK / 4)
            ticks_at[0] = ticks;
        if (ticks_at[1] < 0 && b->done >= BULK / 4 * 3)
            ticks_at[1] = ticks;
        size_t n = BULK - b->done < sizeof chunk ? BULK - b->done : sizeof chunk;
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern(b->done + i);
        size_t w = 0;
        b->rc = weft_write_all(b->fd, chunk, n, &w, weft_deadline_in(30000 * MS));
        b->done += w;
        if (b->rc < 0)
            return NULL;
    }
    b->rc = weft_close(b->fd); /* cat sees end of file */
    return NULL;
}

static void *bulk_reader(void *arg)
{
    bulk *b = arg;
    static uint8_t buf[100003];
    for (;;) {
        ssize_t n = weft_read(b->fd, buf, sizeof buf, weft_deadline_in(30000 * MS));
        if (n <= 0) {
            b->rc = (int)n;
            return NULL;
        }
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != pattern(b->done + (size_t)i)) {
                b->rc = -EILSEQ;
                return NULL;
            }
        b->done += (size_t)n;
    }
}

static void *ticker(void *arg)
{
    (void)arg;
    while (ticking) {
        CHECK_EQ(weft_sleep(MS), 0);
        ticks++;
    }
    return NULL;
}

static void through_cat(void)
{
    weft_proc_t p;
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_PIPE, WEFT_PROC_PIPE, WEFT_PROC_INHERIT}};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), 0);
    CHECK(p.pid > 0 && p.in >= 0 && p.out >= 0 && p.err == -1);
    ticks = 0;
    ticking = 1;
    weft_fiber_t t, w, r;
    CHECK_EQ(weft_spawn(ticker, NULL, NULL, &t), 0);
    bulk wb = {p.in, 0, 0}, rb = {p.out, 0, 0};
    CHECK_EQ(weft_spawn(bulk_writer, &wb, NULL, &w), 0);
    CHECK_EQ(weft_spawn(bulk_reader, &rb, NULL, &r), 0);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(r, NULL, WEFT_FOREVER), 0);
    int64_t took = weft_now() - t0;
    ticking = 0;
    CHECK_EQ(weft_join(t, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(wb.rc, 0);
    CHECK_EQ(wb.done, BULK);
    CHECK_EQ(rb.rc, 0);
    CHECK_EQ(rb.done, BULK);
    p.in = -1; /* closed by the writer */
    /* The ticker ran while the bytes flowed: it ticked while the middle
     * 32 MiB went through (copying them takes well over its 1 ms), which
     * a thread blocked in the pipes' write(2) or read(2) would not let it.
     * No rate is asked: a loaded machine may run it seldom. */
    printf("64 MiB through cat in %.0f ms, %ld ticks of 1 ms meanwhile, "
           "%ld in the middle half\n", (double)took / 1e6, ticks, ticks_at[1] - ticks_at[0]);
    CHECK(ticks_at[0] >= 0 && ticks_at[1] > ticks_at[0]);
    int st;
    CHECK_EQ(weft_proc_join(&p, &st, weft_deadline_in(5000 * MS)), 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(weft_proc_close(&p), 0);
    CHECK_EQ(weft_proc_close(&p), 0); /* twice is fine */
}

/* Everything the child wrote to @fd, NUL-terminated, into @buf. */
static void slurp(int fd, char *buf, size_t cap)
{
    size_t got = 0;
    int rc = weft_read_full(fd, buf, cap - 1, &got, weft_deadline_in(5000 * MS));
    CHECK_EQ(rc, 1);
    buf[got] = '\0';
}

static int run_sh(const char *script, weft_proc_opts_t *o, char *out, char *err)
{
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    weft_proc_t p;
    int rc = weft_proc_spawn(&p, "/bin/sh", argv, o);
    if (rc < 0)
        return rc;
    if (out)
        slurp(p.out, out, 256);
    if (err)
        slurp(p.err, err, 256);
    int st;
    CHECK_EQ(weft_proc_join(&p, &st, weft_deadline_in(5000 * MS)), 0);
    CHECK_EQ(weft_proc_close(&p), 0);
    CHECK(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void stdio_modes(void)
{
    char out[256], err[256];
    /* Separate pipes, exit code. */
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_PIPE}};
    CHECK_EQ(run_sh("echo out; echo err >&2; exit 3", &o, out, err), 3);
    CHECK(strcmp(out, "out\n") == 0);
    CHECK(strcmp(err, "err\n") == 0);
    /* 2>&1 */
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_STDOUT}};
    CHECK_EQ(run_sh("echo a; echo b >&2", &o, out, NULL), 0);
    CHECK(strcmp(out, "a\nb\n") == 0);
    /* stdin from /dev/null: cat ends at once. */
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_NULL}};
    CHECK_EQ(run_sh("cat; echo done", &o, out, NULL), 0);
    CHECK(strcmp(out, "done\n") == 0);
    /* A descriptor of ours as stdout. */
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_FD, WEFT_PROC_NULL},
                           .stdio_fd = {0, p[1], 0}};
    CHECK_EQ(run_sh("echo via fd", &o, NULL, NULL), 0);
    CHECK_EQ(weft_close(p[1]), 0);
    slurp(p[0], out, sizeof out);
    CHECK(strcmp(out, "via fd\n") == 0);
    CHECK_EQ(weft_close(p[0]), 0);
    /* Environment and working directory. */
    char *env[] = {"WEFT_T=hello", NULL};
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_NULL},
                           .envp = env, .cwd = "/"};
    CHECK_EQ(run_sh("echo $WEFT_T; pwd", &o, out, NULL), 0);
    CHECK(strcmp(out, "hello\n/\n") == 0);
    /* The child's mask is empty although this thread blocks SIGUSR1. */
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_NULL}};
    CHECK_EQ(run_sh("grep SigBlk /proc/self/status", &o, out, NULL), 0);
    CHECK(strcmp(out, "SigBlk:\t0000000000000000\n") == 0);
    /* The descriptors weft makes do not reach the child (close-on-exec):
     * a pipe of ours moved to 100 and 101, and our ends of its pipes. */
    CHECK_EQ(weft_pipe(p), 0);
    int hi0 = fcntl(p[0], F_DUPFD_CLOEXEC, 100), hi1 = fcntl(p[1], F_DUPFD_CLOEXEC, 100);
    CHECK(hi0 >= 100 && hi1 >= 100);
    char script[128];
    snprintf(script, sizeof script,
             "for n in %d %d; do [ -e /proc/self/fd/$n ] && echo leak $n; done; echo checked",
             hi0, hi1);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_NULL}};
    CHECK_EQ(run_sh(script, &o, out, NULL), 0);
    CHECK(strcmp(out, "checked\n") == 0);
    weft_proc_t q;
    CHECK_EQ(weft_proc_spawn(&q, "cat", argv_cat, &(weft_proc_opts_t){.stdio = {1, 1, 1}}), 0);
    CHECK(fcntl(q.in, F_GETFD) & FD_CLOEXEC);
    CHECK(fcntl(q.out, F_GETFD) & FD_CLOEXEC);
    CHECK(fcntl(q.err, F_GETFD) & FD_CLOEXEC);
    CHECK(fcntl(q.out, F_GETFL) & O_NONBLOCK);
    CHECK_EQ(weft_close(q.in), 0);
    q.in = -1;
    CHECK_EQ(weft_proc_join(&q, NULL, weft_deadline_in(5000 * MS)), 0);
    CHECK_EQ(weft_proc_close(&q), 0);
    int fds[4] = {p[0], p[1], hi0, hi1};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_close(fds[i]), 0);
}

/* Our own descriptors 0 and 1 swapped into the child: stdin given as our
 * stdout's number and stdout as stdin's, each copied before it is
 * overwritten. Runs with 0 and 1 replaced by pipes. */
static void low_descriptors(void)
{
    int saved0 = dup(0), saved1 = dup(1);
    CHECK(saved0 >= 0 && saved1 >= 0);
    int a[2], b[2];
    CHECK(pipe2(a, O_CLOEXEC) == 0 && pipe2(b, O_CLOEXEC) == 0);
    CHECK(dup2(b[0], 1) == 1); /* our "1" is a readable pipe: the child's stdin */
    CHECK(dup2(a[1], 0) == 0); /* our "0" is a writable pipe: the child's stdout */
    close(a[1]);
    close(b[0]);
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_FD, WEFT_PROC_FD, WEFT_PROC_NULL},
                          .stdio_fd = {1, 0, 0}};
    weft_proc_t p;
    int rc = weft_proc_spawn(&p, "cat", argv_cat, &o);
    CHECK(write(b[1], "swap", 4) == 4);
    close(b[1]);
    dup2(saved0, 0);
    dup2(saved1, 1);
    close(saved0);
    close(saved1);
    CHECK_EQ(rc, 0);
    char buf[8];
    ssize_t n = read(a[0], buf, sizeof buf);
    CHECK_EQ(n, 4);
    CHECK(memcmp(buf, "swap", 4) == 0);
    close(a[0]);
    int st;
    CHECK_EQ(weft_proc_join(&p, &st, weft_deadline_in(5000 * MS)), 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(weft_proc_close(&p), 0);
}

/* The child's view of its descriptors 0 and 1: a shell that writes
 * "0:B 1:B" to its stderr, B 1 where O_NONBLOCK is set (as fdinfo shows
 * the shell's own descriptors, which its command substitutions leave as
 * they are). */
static void child_flags(weft_proc_opts_t *o, char *out)
{
    static const char script[] =
        "nb() { f=$(sed -n 's/^flags:[[:space:]]*//p' /proc/$$/fdinfo/$1);"
        " echo $(( (0$f & 04000) != 0 )); };"
        " echo \"0:$(nb 0) 1:$(nb 1)\" >&2";
    o->stdio[2] = WEFT_PROC_PIPE;
    CHECK_EQ(run_sh(script, o, NULL, out), 0);
    size_t n = strlen(out);
    if (n && out[n - 1] == '\n')
        out[n - 1] = '\0';
}

static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0);
    return !!(fl & O_NONBLOCK);
}

/* The child's standard descriptors block, as programs expect, although
 * weft made them non-blocking here (weft_accept, weft_pipe, weft_write on
 * our own stdout): a connected socket handed over inetd-style, a pipe
 * between two programs, a terminal. Pipes and terminals are opened anew
 * for the child, so ours stay non-blocking. */
static void blocking_stdio(void)
{
    char out[256];
    int a, b, p[2];
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_pipe(p), 0);
    CHECK(nonblocking(a) && nonblocking(p[1]));
    /* No child started: the connection is left as it was. */
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_FD, WEFT_PROC_FD},
                          .stdio_fd = {a, p[1]}};
    weft_proc_t none;
    CHECK_EQ(weft_proc_spawn(&none, "/nonexistent/program", argv_cat, &o), -ENOENT);
    CHECK(nonblocking(a));
    child_flags(&o, out);
    CHECK(strcmp(out, "0:0 1:0") == 0);
    CHECK(nonblocking(p[1])); /* ours: a description of its own */

    /* The connection moved to our stdin, inherited (inetd's way). */
    int saved0 = dup(0);
    CHECK(saved0 >= 0 && dup2(a, 0) == 0);
    CHECK(fcntl(a, F_SETFL, O_NONBLOCK | O_RDWR) == 0);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_INHERIT, WEFT_PROC_NULL}};
    child_flags(&o, out);
    CHECK(dup2(saved0, 0) == 0);
    close(saved0);
    CHECK(strcmp(out, "0:0 1:0") == 0);

    /* inetd: cat talks to the peer over the accepted connection. */
    weft_proc_t c;
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_FD, WEFT_PROC_FD, WEFT_PROC_NULL},
                           .stdio_fd = {a, a}};
    CHECK_EQ(weft_proc_spawn(&c, "cat", argv_cat, &o), 0);
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_write_all(b, "ping\n", 5, NULL, WEFT_FOREVER), 0);
    char buf[8];
    size_t got;
    CHECK_EQ(weft_read_full(b, buf, 5, &got, weft_deadline_in(5000 * MS)), 0);
    CHECK(memcmp(buf, "ping\n", 5) == 0);
    CHECK_EQ(weft_shutdown(b, SHUT_WR), 0);
    CHECK_EQ(weft_read(b, buf, sizeof buf, weft_deadline_in(5000 * MS)), 0);
    int st;
    CHECK_EQ(weft_proc_join(&c, &st, weft_deadline_in(5000 * MS)), 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(weft_proc_close(&c), 0);
    CHECK_EQ(weft_close(b), 0);

    /* Our own stdout, made non-blocking by weft, inherited. */
    fflush(stdout);
    int saved1 = dup(1);
    CHECK(saved1 >= 0 && dup2(p[1], 1) == 1);
    CHECK_EQ(weft_write(1, "x", 1, WEFT_FOREVER), 1);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_NULL, WEFT_PROC_INHERIT}};
    child_flags(&o, out);
    int still = nonblocking(1);
    CHECK(dup2(saved1, 1) == 1);
    close(saved1);
    CHECK(strcmp(out, "0:0 1:0") == 0);
    CHECK(still);
    CHECK_EQ(weft_close(p[0]), 0);
    CHECK_EQ(weft_close(p[1]), 0);

    /* A terminal; a pseudo-terminal's master is not reopened (that would
     * make a new one), and neither is a listening socket. */
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0);
    int t = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    CHECK(t >= 0);
    CHECK(fcntl(m, F_SETFL, O_NONBLOCK) == 0);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_FD, WEFT_PROC_FD},
                           .stdio_fd = {t, m}};
    child_flags(&o, out);
    CHECK(strcmp(out, "0:0 1:1") == 0);
    CHECK(nonblocking(t));
    close(t);
    close(m);
    int l = weft_tcp_listen("127.0.0.1", 0, 4, 0);
    CHECK(l >= 0);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_FD, WEFT_PROC_NULL},
                           .stdio_fd = {l}};
    child_flags(&o, out);
    CHECK(strcmp(out, "0:1 1:0") == 0);
    CHECK_EQ(weft_close(l), 0);
}

typedef struct job {
    weft_proc_t *p;
    int rc;
} job;

static void *joiner(void *arg)
{
    job *j = arg;
    j->rc = weft_proc_join(j->p, NULL, WEFT_FOREVER);
    return NULL;
}

static void *out_reader(void *arg)
{
    job *j = arg;
    char c;
    j->rc = (int)weft_read(j->p->out, &c, 1, WEFT_FOREVER);
    return NULL;
}

static void join_kill_cancel(void)
{
    weft_proc_t p;
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_NULL}};
    CHECK_EQ(weft_proc_spawn(&p, "sleep", argv_sleep, &o), 0);
    int st = -1;
    CHECK_EQ(weft_proc_join(&p, &st, 0), -EAGAIN);
    CHECK_EQ(weft_proc_join(&p, &st, weft_now() - 1), -ETIMEDOUT);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_proc_join(&p, &st, weft_deadline_in(20 * MS)), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 20 * MS);
    CHECK_EQ(weft_proc_kill(&p, 0), 0); /* still runs */
    /* Cancel a join and a pipe read. */
    job j = {&p, 99}, k = {&p, 99};
    weft_fiber_t f, g;
    CHECK_EQ(weft_spawn(joiner, &j, NULL, &f), 0);
    CHECK_EQ(weft_spawn(out_reader, &k, NULL, &g), 0);
    CHECK_EQ(weft_sleep(2 * MS), 0);
    CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_cancel(g), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(g, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j.rc, -ECANCELED);
    CHECK_EQ(k.rc, -ECANCELED);
    /* Close the pipe while a fiber reads it. */
    k.rc = 99;
    h_interrupt(out_reader, &k, p.out);
    p.out = -1;
    CHECK_EQ(k.rc, -EBADF);
    /* Two joiners, one kill: both see the end, forever deadline. */
    job j1 = {&p, 99}, j2 = {&p, 99};
    CHECK_EQ(weft_spawn(joiner, &j1, NULL, &f), 0);
    CHECK_EQ(weft_spawn(joiner, &j2, NULL, &g), 0);
    CHECK_EQ(weft_sleep(2 * MS), 0);
    CHECK_EQ(weft_proc_kill(&p, SIGTERM), 0); /* not blocked in the child */
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(g, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j1.rc, 0);
    CHECK_EQ(j2.rc, 0);
    CHECK_EQ(weft_proc_join(&p, &st, 0), 0); /* again: the same status */
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    CHECK_EQ(weft_proc_kill(&p, SIGKILL), -ESRCH);
    CHECK_EQ(weft_proc_close(&p), 0);
    CHECK_EQ(weft_proc_join(&p, &st, 0), 0); /* after close too */
    CHECK(WIFSIGNALED(st));

    /* Close without a join: the child stays ours, to be reaped. */
    CHECK_EQ(weft_proc_spawn(&p, "sleep", argv_sleep, NULL), 0);
    CHECK_EQ(weft_proc_close(&p), 0);
    CHECK_EQ(weft_proc_kill(&p, SIGKILL), 0);
    CHECK_EQ(weft_proc_wait(p.pid, &st, weft_deadline_in(5000 * MS)), 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void errors(void)
{
    weft_proc_t p;
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_PIPE, WEFT_PROC_PIPE, WEFT_PROC_PIPE}};
    int fds = h_fd_count();
    CHECK_EQ(weft_proc_spawn(&p, "/nonexistent/program", argv_cat, &o), -ENOENT);
    CHECK_EQ(weft_proc_spawn(&p, "no-such-program-in-path-xyz", argv_cat, &o), -ENOENT);
    CHECK_EQ(weft_proc_spawn(&p, "/etc/passwd", argv_cat, &o), -EACCES);
    CHECK_EQ(h_fd_count(), fds); /* no pipe left behind */
    CHECK_EQ(waitpid(-1, NULL, WNOHANG), -1); /* and no child */
    CHECK_EQ(errno, ECHILD);
    o = (weft_proc_opts_t){.cwd = "/nonexistent/dir"};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), -ENOENT);
    CHECK_EQ(weft_proc_spawn(NULL, "cat", argv_cat, NULL), -EINVAL);
    CHECK_EQ(weft_proc_spawn(&p, NULL, argv_cat, NULL), -EINVAL);
    CHECK_EQ(weft_proc_spawn(&p, "", argv_cat, NULL), -EINVAL);
    CHECK_EQ(weft_proc_spawn(&p, "cat", NULL, NULL), -EINVAL);
    char *none[] = {NULL};
    CHECK_EQ(weft_proc_spawn(&p, "cat", none, NULL), -EINVAL);
    o = (weft_proc_opts_t){.stdio = {7, 0, 0}};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), -EINVAL);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_STDOUT, 0, 0}};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), -EINVAL);
    o = (weft_proc_opts_t){.stdio = {0, WEFT_PROC_STDOUT, 0}};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), -EINVAL);
    o = (weft_proc_opts_t){.stdio = {WEFT_PROC_FD, 0, 0}, .stdio_fd = {-1, 0, 0}};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), -EBADF);
    o = (weft_proc_opts_t){.stdio = {0, WEFT_PROC_FD, 0}, .stdio_fd = {0, 999999, 0}};
    CHECK_EQ(weft_proc_spawn(&p, "cat", argv_cat, &o), -EBADF);
    CHECK_EQ(h_fd_count(), fds);
    weft_proc_t zero = {0};
    CHECK_EQ(weft_proc_join(NULL, NULL, 0), -EINVAL);
    CHECK_EQ(weft_proc_join(&zero, NULL, 0), -EINVAL);
    CHECK_EQ(weft_proc_kill(NULL, 0), -EINVAL);
    CHECK_EQ(weft_proc_kill(&zero, 0), -EINVAL);
    CHECK_EQ(weft_proc_close(NULL), -EINVAL);
    /* A bad signal number and a bad deadline, on a live child. */
    CHECK_EQ(weft_proc_spawn(&p, "sleep", argv_sleep, NULL), 0);
    CHECK_EQ(weft_proc_kill(&p, -1), -EINVAL);
    CHECK_EQ(weft_proc_kill(&p, 100000), -EINVAL);
    CHECK_EQ(weft_proc_join(&p, NULL, -2), -EINVAL);
    CHECK_EQ(weft_proc_kill(&p, SIGKILL), 0);
    CHECK_EQ(weft_proc_join(&p, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_proc_close(&p), 0);
}

static void *body(void *arg)
{
    (void)arg;
    through_cat();
    stdio_modes();
    low_descriptors();
    blocking_stdio();
    join_kill_cancel();
    errors();
    /* Without pidfd: joins poll (weft_proc_wait's fallback). */
    CHECK_EQ(setenv("WEFT_PROC_NO_PIDFD", "1", 1), 0);
    char out[256];
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_NULL, WEFT_PROC_PIPE, WEFT_PROC_NULL}};
    CHECK_EQ(run_sh("echo fallback; exit 5", &o, out, NULL), 5);
    CHECK(strcmp(out, "fallback\n") == 0);
    join_kill_cancel();
    CHECK_EQ(unsetenv("WEFT_PROC_NO_PIDFD"), 0);
    return NULL;
}

int main(void)
{
    h_begin("subproc");
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigaddset(&usr1, SIGTERM);
    CHECK_EQ(weft_signal_block(&usr1), 0);
    /* Spawning needs no fiber; joining does. */
    weft_proc_t p;
    CHECK_EQ(weft_proc_spawn(&p, "true", (char *[]){"true", NULL}, NULL), 0);
    CHECK_EQ(weft_proc_join(&p, NULL, WEFT_FOREVER), -EPERM);
    int st;
    CHECK_EQ(waitpid(p.pid, &st, 0), p.pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(weft_proc_close(&p), 0);
    h_run(body, NULL);
    return h_end();
}
