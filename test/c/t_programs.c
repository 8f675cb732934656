/* An ordinary program, run twice: on fibers with weft's calls, and on
 * threads with plain blocking calls, the reference. Several workers at
 * once read a file and pass it through a socket pair and a pipe, print
 * with printf into a pipe that is read slowly, run a child process and
 * read its output, serve clients that connect to "localhost" over TCP,
 * and meet errors (a closed reader, a closed descriptor). Both runs must
 * give the same results. */
#include "harness.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define FILE_BYTES (1 << 20)
#define PRINTERS 4
#define PRINT_LINES 2000
#define CHILD_LINES 2000
#define CLIENTS 8
#define ROUNDS 50
#define SEC 1000000000LL

extern char **environ;

/* ---- the two ways to run it ---------------------------------------------- */

/* A fiber, a thread or a child, as the way to run it knows it. */
typedef union handle {
    weft_fiber_t fiber;
    pthread_t thread;
    weft_proc_t *proc;
    pid_t pid;
} handle;

typedef struct ops {
    const char *name;
    ssize_t (*read)(int fd, void *buf, size_t len);
    ssize_t (*write)(int fd, const void *buf, size_t len); /* n or -errno */
    int (*shut_wr)(int fd);
    int (*close)(int fd);
    void (*yield)(void);
    int (*go)(void *(*fn)(void *), void *arg, handle *h);
    void (*join)(handle h);
    /* sh -c @cmd with its stdout on a pipe: *@out, and what waits for it */
    int (*child)(const char *cmd, int *out, handle *h);
    int (*child_wait)(handle h); /* its wait status */
    int (*accept)(int lfd);
    int (*dial)(const char *host, int port); /* a connected TCP socket */
} ops;

static ssize_t f_read(int fd, void *b, size_t n) { return weft_read(fd, b, n, weft_deadline_in(30 * SEC)); }
static ssize_t f_write(int fd, const void *b, size_t n) { return weft_write(fd, b, n, weft_deadline_in(30 * SEC)); }
static int f_shut_wr(int fd) { return weft_shutdown(fd, SHUT_WR); }
static int f_close(int fd) { return weft_close(fd); }
static void f_yield(void) { CHECK_EQ(weft_yield(), 0); }
static int f_go(void *(*fn)(void *), void *arg, handle *h)
{
    weft_fiber_t f;
    int rc = weft_spawn(fn, arg, NULL, &f);
    h->fiber = f;
    return rc;
}
static void f_join(handle h) { CHECK_EQ(weft_join(h.fiber, NULL, WEFT_FOREVER), 0); }
static int f_child(const char *cmd, int *out, handle *h)
{
    weft_proc_t *p = calloc(1, sizeof *p);
    CHECK(p != NULL);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_INHERIT, WEFT_PROC_PIPE, WEFT_PROC_INHERIT}};
    int rc = weft_proc_spawn(p, "sh", argv, &o);
    *out = p->out;
    p->out = -1; /* closed by the reader */
    h->proc = p;
    return rc;
}
static int f_child_wait(handle h)
{
    weft_proc_t *p = h.proc;
    int st = -1;
    CHECK_EQ(weft_proc_join(p, &st, weft_deadline_in(30 * SEC)), 0);
    CHECK_EQ(weft_proc_close(p), 0);
    free(p);
    return st;
}
static int f_accept(int lfd)
{
    int fd = weft_accept(lfd, NULL, NULL, weft_deadline_in(30 * SEC));
    if (fd >= 0)
        CHECK_EQ(weft_write_behind(fd, 1), 0); /* as a server would */
    return fd;
}
static int f_dial(const char *host, int port) { return weft_dial(host, port, SOCK_STREAM, weft_deadline_in(30 * SEC)); }
static const ops fibers = {"fibers", f_read, f_write, f_shut_wr, f_close, f_yield,
                           f_go, f_join, f_child, f_child_wait, f_accept, f_dial};

static ssize_t t_read(int fd, void *b, size_t n)
{
    ssize_t k;
    while ((k = read(fd, b, n)) < 0 && errno == EINTR)
        ;
    return k < 0 ? -errno : k;
}
static ssize_t t_write(int fd, const void *b, size_t n)
{
    ssize_t k;
    while ((k = write(fd, b, n)) < 0 && errno == EINTR)
        ;
    return k < 0 ? -errno : k;
}
static int t_shut_wr(int fd) { return shutdown(fd, SHUT_WR) < 0 ? -errno : 0; }
static int t_close(int fd) { return close(fd) < 0 ? -errno : 0; }
static void t_yield(void) { sched_yield(); }
static int t_go(void *(*fn)(void *), void *arg, handle *h)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, fn, arg);
    h->thread = t;
    return -rc;
}
static void t_join(handle h) { CHECK_EQ(pthread_join(h.thread, NULL), 0); }
static int t_child(const char *cmd, int *out, handle *h)
{
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    *out = p[0];
    h->pid = pid;
    return -rc;
}
static int t_child_wait(handle h)
{
    int st = -1;
    CHECK_EQ(waitpid(h.pid, &st, 0), h.pid);
    return st;
}
static int t_accept(int lfd)
{
    int fd;
    while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0 && errno == EINTR)
        ;
    return fd < 0 ? -errno : fd;
}
static int t_dial(const char *host, int port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai, *a;
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    if (getaddrinfo(host, serv, &hints, &ai) != 0)
        return -ENOENT;
    int fd = -ECONNREFUSED;
    for (a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -errno;
    }
    freeaddrinfo(ai);
    return fd;
}
static const ops threads = {"threads", t_read, t_write, t_shut_wr, t_close, t_yield,
                            t_go, t_join, t_child, t_child_wait, t_accept, t_dial};

/* ---- the program ---------------------------------------------------------- */

typedef struct result {
    uint64_t hash;        /* of what came out of the pipeline */
    size_t bytes, lines;  /* of it */
    size_t child_lines;
    int child_status;
    ssize_t epipe;        /* a write to a pipe whose reader has gone */
    ssize_t ebadf;        /* a read of a closed descriptor */
    size_t answers;       /* right answers the clients got */
} result;

typedef struct run {
    const ops *o;
    const char *path;     /* the input file */
    int sp[2];            /* reader -> upper */
    int pp[2];            /* upper -> counter */
    int lfd, port;        /* the server's */
    pthread_mutex_t lock; /* of r.answers: the clients may be threads */
    result r;
} run;

static ssize_t write_all(const ops *o, int fd, const char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = o->write(fd, p + done, n - done);
        if (k < 0)
            return k;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

/* The file, in 4 KiB reads, into the socket pair; then its end. */
static void *reader(void *arg)
{
    run *x = arg;
    int fd = open(x->path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    char buf[4096];
    ssize_t n;
    while ((n = x->o->read(fd, buf, sizeof buf)) > 0) {
        CHECK_EQ(write_all(x->o, x->sp[0], buf, (size_t)n), n);
        x->o->yield();
    }
    CHECK_EQ(n, 0);
    CHECK_EQ(x->o->close(fd), 0);
    CHECK_EQ(x->o->shut_wr(x->sp[0]), 0);
    return NULL;
}

/* Upper-cased from the socket pair into the pipe, then closes it. */
static void *upper(void *arg)
{
    run *x = arg;
    char buf[3000]; /* not a multiple of the reader's: reads end anywhere */
    ssize_t n;
    while ((n = x->o->read(x->sp[1], buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] >= 'a' && buf[i] <= 'z')
                buf[i] = (char)(buf[i] - 'a' + 'A');
        CHECK_EQ(write_all(x->o, x->pp[1], buf, (size_t)n), n);
    }
    CHECK_EQ(n, 0);
    CHECK_EQ(x->o->close(x->pp[1]), 0);
    return NULL;
}

static void *counter(void *arg)
{
    run *x = arg;
    char buf[1500];
    uint64_t h = 1469598103934665603ull;
    ssize_t n;
    while ((n = x->o->read(x->pp[0], buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
            x->r.lines += buf[i] == '\n';
        }
        x->r.bytes += (size_t)n;
    }
    CHECK_EQ(n, 0);
    x->r.hash = h;
    return NULL;
}

typedef struct printer_arg {
    const ops *o;
    long id;
} printer_arg;

/* Lines with printf, taking turns with the others. */
static void *printer(void *arg)
{
    const printer_arg *p = arg;
    for (int i = 0; i < PRINT_LINES; i++) {
        CHECK(printf("printer %ld line %d\n", p->id, i) > 0);
        if (i % 50 == 0)
            p->o->yield();
    }
    return NULL;
}

static void *child(void *arg)
{
    run *x = arg;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); done; exit 3",
             CHILD_LINES);
    int out;
    handle h;
    CHECK_EQ(x->o->child(cmd, &out, &h), 0);
    char buf[512];
    ssize_t n;
    while ((n = x->o->read(out, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++)
            x->r.child_lines += buf[i] == '\n';
    CHECK_EQ(n, 0);
    CHECK_EQ(x->o->close(out), 0);
    x->r.child_status = x->o->child_wait(h);
    return NULL;
}

static void *errors(void *arg)
{
    run *x = arg;
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(x->o->close(p[0]), 0);
    x->r.epipe = x->o->write(p[1], "x", 1);
    CHECK_EQ(x->o->close(p[1]), 0);
    /* A number far above the others: nothing opened meanwhile takes it. */
    int fd = fcntl(2, F_DUPFD_CLOEXEC, 900);
    CHECK(fd >= 900);
    CHECK_EQ(x->o->close(fd), 0);
    char c;
    x->r.ebadf = x->o->read(fd, &c, 1);
    return NULL;
}

/* A line: the bytes up to '\n' (at most @cap - 1), without it; its length,
 * 0 at end of file, or -errno. One byte per read: the peer's next line
 * must stay in the socket. */
static ssize_t read_line(const ops *o, int fd, char *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t k = o->read(fd, buf + n, 1);
        if (k <= 0)
            return k < 0 ? k : (ssize_t)n;
        if (buf[n] == '\n' || ++n == cap - 1)
            break;
    }
    buf[n] = '\0';
    return (ssize_t)n;
}

typedef struct conn_arg {
    run *x;
    int fd;
} conn_arg;

/* Answers each line with it reversed, until the client's end. */
static void *serve_conn(void *arg)
{
    conn_arg *c = arg;
    const ops *o = c->x->o;
    char line[64], out[66];
    ssize_t n;
    while ((n = read_line(o, c->fd, line, sizeof line)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            out[i] = line[n - 1 - i];
        out[n] = '\n';
        CHECK_EQ(write_all(o, c->fd, out, (size_t)n + 1), n + 1);
    }
    CHECK_EQ(n, 0);
    CHECK_EQ(o->close(c->fd), 0);
    free(c);
    return NULL;
}

/* Takes CLIENTS connections, each served by a worker of its own. */
static void *server(void *arg)
{
    run *x = arg;
    handle h[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        conn_arg *c = malloc(sizeof *c);
        CHECK(c != NULL);
        c->x = x;
        c->fd = x->o->accept(x->lfd);
        CHECK(c->fd >= 0);
        CHECK_EQ(x->o->go(serve_conn, c, &h[i]), 0);
    }
    for (int i = 0; i < CLIENTS; i++)
        x->o->join(h[i]);
    return NULL;
}

static void *client(void *arg)
{
    run *x = arg;
    const ops *o = x->o;
    int fd = o->dial("localhost", x->port); /* a name: resolved, maybe raced */
    CHECK(fd >= 0);
    size_t right = 0;
    for (int i = 0; i < ROUNDS; i++) {
        char q[32], a[64];
        int n = snprintf(q, sizeof q, "request %d\n", i);
        CHECK_EQ(write_all(o, fd, q, (size_t)n), n);
        CHECK_EQ(read_line(o, fd, a, sizeof a), n - 1);
        char want[32];
        for (int k = 0; k < n - 1; k++)
            want[k] = q[n - 2 - k];
        right += memcmp(a, want, (size_t)n - 1) == 0;
    }
    CHECK_EQ(o->shut_wr(fd), 0);
    char c;
    CHECK_EQ(o->read(fd, &c, 1), 0); /* the server's end */
    CHECK_EQ(o->close(fd), 0);
    pthread_mutex_lock(&x->lock);
    x->r.answers += right;
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

/* Everything at once, then wait for all of it. */
static void *program(void *arg)
{
    run *x = arg;
    const ops *o = x->o;
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x->sp), 0);
    CHECK_EQ(pipe2(x->pp, O_CLOEXEC), 0);
    handle h[6 + PRINTERS + CLIENTS];
    int k = 0;
    /* The errors first, alone: a child being started at the same time
     * holds a copy of every descriptor until its exec has closed them (the
     * parent may go on before that), and a copy of the pipe's reader would
     * let the write succeed, on threads as on fibers. */
    CHECK_EQ(o->go(errors, x, &h[0]), 0);
    o->join(h[0]);
    CHECK_EQ(o->go(counter, x, &h[k++]), 0);
    CHECK_EQ(o->go(upper, x, &h[k++]), 0);
    CHECK_EQ(o->go(reader, x, &h[k++]), 0);
    /* A heading written with the call of the way it runs, before the
     * lines printed with printf on the same descriptor. */
    CHECK_EQ(o->write(1, "results\n", 8), 8);
    printer_arg pa[PRINTERS];
    for (long i = 0; i < PRINTERS; i++) {
        pa[i] = (printer_arg){o, i};
        CHECK_EQ(o->go(printer, &pa[i], &h[k++]), 0);
    }
    CHECK_EQ(o->go(child, x, &h[k++]), 0);
    CHECK_EQ(o->go(server, x, &h[k++]), 0);
    for (int i = 0; i < CLIENTS; i++)
        CHECK_EQ(o->go(client, x, &h[k++]), 0);
    for (int i = 0; i < k; i++)
        o->join(h[i]);
    CHECK_EQ(fflush(stdout), 0);
    CHECK(!ferror(stdout));
    CHECK_EQ(o->close(x->sp[0]), 0);
    CHECK_EQ(o->close(x->sp[1]), 0);
    CHECK_EQ(o->close(x->pp[0]), 0);
    CHECK_EQ(o->close(x->lfd), 0);
    return NULL;
}

/* ---- stdout, read slowly -------------------------------------------------- */

typedef struct drain {
    int fd;
    int next[PRINTERS]; /* the line each printer should print next */
    int headings;       /* "results" lines */
    int bad;            /* a line out of order, or not a printer's */
} drain;

static void *drain_main(void *arg)
{
    drain *d = arg;
    char buf[4096], line[64];
    size_t ll = 0;
    usleep(20000); /* let the pipe fill first */
    ssize_t n;
    while ((n = read(d->fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') {
                if (ll < sizeof line - 1)
                    line[ll++] = buf[i];
                continue;
            }
            line[ll] = '\0';
            ll = 0;
            long id;
            int no;
            if (strcmp(line, "results") == 0)
                d->headings++;
            else if (sscanf(line, "printer %ld line %d", &id, &no) != 2 || id < 0 ||
                id >= PRINTERS || no != d->next[id])
                d->bad++;
            else
                d->next[id]++;
        }
    }
    return NULL;
}

static result run_once(const ops *o, const char *path)
{
    run x = {.o = o, .path = path, .lock = PTHREAD_MUTEX_INITIALIZER};
    /* The listener on the loopback address "localhost" names too, on a
     * port picked now: made the same way for both runs. */
    x.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(x.lfd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    CHECK_EQ(bind(x.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(listen(x.lfd, CLIENTS), 0);
    CHECK_EQ(getsockname(x.lfd, (struct sockaddr *)&sa, &sl), 0);
    x.port = ntohs(sa.sin_port);
    int p[2], saved;
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    drain d = {.fd = p[0]};
    pthread_t dt;
    CHECK_EQ(pthread_create(&dt, NULL, drain_main, &d), 0);
    fflush(stdout);
    saved = fcntl(1, F_DUPFD_CLOEXEC, 3);
    CHECK(saved >= 0);
    CHECK_EQ(dup2(p[1], 1), 1);
    CHECK_EQ(close(p[1]), 0);
    if (o == &fibers) {
        h_run(program, &x);
    } else {
        struct sigaction ign = {.sa_handler = SIG_IGN}, old;
        CHECK_EQ(sigaction(SIGPIPE, &ign, &old), 0); /* as weft's calls do */
        program(&x);
        CHECK_EQ(sigaction(SIGPIPE, &old, NULL), 0);
    }
    fflush(stdout);
    if (o == &fibers)
        CHECK_EQ(weft_fd_forget(1), 0);
    CHECK_EQ(dup2(saved, 1), 1); /* the pipe's last writer gone */
    CHECK_EQ(close(saved), 0);
    CHECK_EQ(pthread_join(dt, NULL), 0);
    CHECK_EQ(close(p[0]), 0);
    CHECK_EQ(d.bad, 0);
    CHECK_EQ(d.headings, 1);
    for (int i = 0; i < PRINTERS; i++)
        CHECK_EQ(d.next[i], PRINT_LINES);
    return x.r;
}

int main(void)
{
    h_begin("programs");
    char path[] = "/tmp/weft-programs-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    /* Text lines of varying length, the same every run. */
    static char buf[FILE_BYTES];
    uint32_t seed = 12345;
    size_t n = 0;
    while (n < sizeof buf) {
        seed = seed * 1103515245u + 12345u;
        buf[n++] = (seed >> 16) % 23 == 0 ? '\n' : (char)('a' + (seed >> 16) % 26);
    }
    CHECK_EQ(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
    CHECK_EQ(close(fd), 0);

    H_CASE("threads, the reference");
    result t = run_once(&threads, path);
    H_CASE("fibers");
    result f = run_once(&fibers, path);
    CHECK_EQ(unlink(path), 0);

    CHECK_EQ(t.bytes, FILE_BYTES);
    CHECK_EQ(f.bytes, t.bytes);
    CHECK_EQ(f.lines, t.lines);
    CHECK(f.hash == t.hash);
    CHECK_EQ(t.child_lines, CHILD_LINES);
    CHECK_EQ(f.child_lines, t.child_lines);
    CHECK(WIFEXITED(t.child_status) && WEXITSTATUS(t.child_status) == 3);
    CHECK_EQ(f.child_status, t.child_status);
    CHECK_EQ(t.epipe, -EPIPE);
    CHECK_EQ(f.epipe, t.epipe);
    CHECK_EQ(t.ebadf, -EBADF);
    CHECK_EQ(f.ebadf, t.ebadf);
    CHECK_EQ(t.answers, CLIENTS * ROUNDS);
    CHECK_EQ(f.answers, t.answers);
    return h_end();
}
