/* A program's stdio and weft's calls on the same standard descriptor. A
 * fiber that writes stdout with weft_write() and also prints with printf,
 * or reads a line of stdin with weft_read() and the rest with fgets, is
 * an ordinary program; with threads and blocking calls every line printed
 * arrives and fgets waits for the next line. Had weft left O_NONBLOCK on
 * the descriptor, printf to a full pipe or a slow terminal would fail with
 * EAGAIN and lose output, and fgets would see an error where it should
 * wait. The descriptor stays blocking; weft's own calls on it still wait
 * in the loop, not in the kernel, so that other fibers run meanwhile. */
#include "harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <pty.h>
#include <sys/stat.h>
#include <termios.h>

#define LINES 3000
#define LINE "a line printed with printf, after weft_write on the same descriptor\n"

static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0);
    return (fl & O_NONBLOCK) != 0;
}

/* Standard descriptor @fd replaced by @with (the original kept in
 * *@saved), and back. */
static void std_swap(int fd, int with, int *saved)
{
    fflush(NULL);
    *saved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    CHECK(*saved >= 0);
    CHECK_EQ(dup2(with, fd), fd);
}

static void std_back(int fd, int saved)
{
    fflush(NULL);
    CHECK_EQ(weft_fd_forget(fd), 0);
    CHECK_EQ(dup2(saved, fd), fd);
    CHECK_EQ(close(saved), 0);
}

/* ---- printf after weft_write, to a reader that lags ---------------------- */

#define PRINTED (2 + LINES * (sizeof LINE - 1))

typedef struct {
    int fd;
    size_t got;
} drain_arg;

/* Start reading only after a while, so that the writer fills the pipe or
 * the terminal first; then read what is to come (or until an error: a
 * loss shows as a short count, not as a hang). */
static void *drain(void *arg)
{
    drain_arg *d = arg;
    char buf[4096];
    usleep(50000);
    while (d->got < PRINTED) {
        ssize_t n = read(d->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        d->got += (size_t)n;
    }
    return NULL;
}

static void *print_lines(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_write(1, "x\n", 2, weft_deadline_in(5000000000LL)), 2);
    for (int i = 0; i < LINES; i++)
        CHECK(fputs(LINE, stdout) >= 0);
    CHECK_EQ(fflush(stdout), 0);
    CHECK(!ferror(stdout));
    CHECK(!nonblocking(1));
    return NULL;
}

static void printf_after_weft_write(int rd, int wr)
{
    drain_arg d = {rd, 0};
    pthread_t t;
    int saved;
    std_swap(1, wr, &saved);
    CHECK_EQ(close(wr), 0);
    CHECK_EQ(pthread_create(&t, NULL, drain, &d), 0);
    h_run(print_lines, NULL);
    /* A short count ends the drain at end of file once the last writer
     * has gone, with std_back. */
    std_back(1, saved);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(close(rd), 0);
    CHECK_EQ(d.got, PRINTED);
}

/* ---- fgets after weft_read, and a read that waits in the loop ------------ */

typedef struct {
    int wr;   /* stdin's writing end */
    int told; /* the reader says "first line read" here */
} feed_arg;

/* The second line goes in only once the first was read: fgets has to
 * wait for it, as it does on a thread. */
static void *feed(void *arg)
{
    feed_arg *f = arg;
    char c;
    CHECK_EQ(write(f->wr, "first\n", 6), 6);
    CHECK_EQ(read(f->told, &c, 1), 1);
    usleep(20000);
    CHECK_EQ(write(f->wr, "second\n", 7), 7);
    return NULL;
}

static void *read_lines(void *arg)
{
    int tell = *(int *)arg;
    char buf[32];
    CHECK_EQ(weft_read(0, buf, sizeof buf, weft_deadline_in(5000000000LL)), 6);
    CHECK(memcmp(buf, "first\n", 6) == 0);
    CHECK(!nonblocking(0));
    CHECK_EQ(write(tell, "r", 1), 1);
    CHECK(fgets(buf, sizeof buf, stdin) != NULL); /* waits: blocking, as on a thread */
    CHECK_EQ(strcmp(buf, "second\n"), 0);
    return NULL;
}

static void fgets_after_weft_read(void)
{
    int in[2], told[2], saved;
    CHECK_EQ(pipe(in), 0);
    CHECK_EQ(pipe(told), 0);
    std_swap(0, in[0], &saved);
    feed_arg f = {in[1], told[0]};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, feed, &f), 0);
    h_run(read_lines, &told[1]);
    CHECK_EQ(pthread_join(t, NULL), 0);
    clearerr(stdin);
    std_back(0, saved);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(close(in[i]), 0);
        CHECK_EQ(close(told[i]), 0);
    }
}

static int stdin_writer = -1;

static void *stdin_reader(void *arg)
{
    char buf[16];
    CHECK_EQ(weft_read(0, buf, sizeof buf, 0), -EAGAIN); /* nothing there yet */
    CHECK_EQ(weft_read(0, buf, sizeof buf, weft_deadline_in(5000000000LL)), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    *(int *)arg = 1;
    return NULL;
}

static void *stdin_feeder(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_sleep(1000000), 0); /* the reader waits first */
    CHECK_EQ(write(stdin_writer, "hello", 5), 5);
    return NULL;
}

static void *both(void *arg)
{
    CHECK_EQ(weft_spawn(stdin_reader, arg, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(stdin_feeder, NULL, NULL, NULL), 0);
    return NULL;
}

/* A weft_read of an empty stdin waits in the loop: the fiber that feeds it
 * runs meanwhile (a read left blocking in the kernel would hold the
 * thread, and the test, forever). */
static void read_waits_in_the_loop(int rd, int wr)
{
    int saved, done = 0;
    stdin_writer = wr;
    std_swap(0, rd, &saved);
    h_run(both, &done);
    CHECK_EQ(done, 1);
    CHECK(!nonblocking(0));
    std_back(0, saved);
    CHECK_EQ(close(rd), 0);
    CHECK_EQ(close(wr), 0);
}

int main(void)
{
    h_begin("std_nowait");
    int p[2];

    H_CASE("printf after weft_write, stdout a pipe");
    CHECK_EQ(pipe(p), 0);
    printf_after_weft_write(p[0], p[1]);

    H_CASE("printf after weft_write, stdout a terminal");
    int m, s;
    CHECK_EQ(openpty(&m, &s, NULL, NULL, NULL), 0);
    struct termios tio;
    CHECK_EQ(tcgetattr(s, &tio), 0);
    cfmakeraw(&tio); /* bytes as written: the count is exact */
    CHECK_EQ(tcsetattr(s, TCSANOW, &tio), 0);
    printf_after_weft_write(m, s);

    /* A named FIFO takes no RWF_NOWAIT (nor does a pipe before Linux
     * 6.4): the way for a kernel without it. */
    H_CASE("printf after weft_write, stdout a FIFO");
    char dir[] = "/tmp/weft-std-nowait.XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/fifo", dir);
    CHECK_EQ(mkfifo(path, 0600), 0);
    int rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* no writer yet */
    CHECK(rd >= 0);
    int wr = open(path, O_WRONLY | O_CLOEXEC);
    CHECK(wr >= 0);
    CHECK_EQ(fcntl(rd, F_SETFL, 0), 0);
    printf_after_weft_write(rd, wr);

    H_CASE("weft_read of stdin waits in the loop, a FIFO");
    rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    CHECK(rd >= 0);
    wr = open(path, O_WRONLY | O_CLOEXEC);
    CHECK(wr >= 0);
    CHECK_EQ(fcntl(rd, F_SETFL, 0), 0);
    read_waits_in_the_loop(rd, wr);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(rmdir(dir), 0);

    H_CASE("fgets after weft_read, stdin a pipe");
    fgets_after_weft_read();

    H_CASE("weft_read of stdin waits in the loop, a pipe");
    CHECK_EQ(pipe(p), 0);
    read_waits_in_the_loop(p[0], p[1]);
    return h_end();
}
