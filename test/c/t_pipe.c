/* Pipes: reads, writes, vectors, partial I/O, EOF, EPIPE without SIGPIPE,
 * readiness waits, deadlines, regular files. */
#include "harness.h"

#include <fcntl.h>
#include <sys/uio.h>

#define BIG (1 << 20)

static int pfd[2];
static unsigned char *src, *dst;

static void *writer(void *arg)
{
    size_t done = 0;
    CHECK_EQ(weft_write_all(pfd[1], src, BIG, &done, WEFT_FOREVER), 0);
    CHECK_EQ(done, BIG);
    CHECK_EQ(weft_close(pfd[1]), 0);
    return arg;
}

static void *one_byte_reader(void *arg)
{
    /* 1-byte reads of a 1 MiB stream: short reads everywhere */
    size_t got = 0;
    unsigned char extra;
    for (;;) {
        /* past the expected end, probe for EOF into a scratch byte */
        unsigned char *at = got < BIG ? dst + got : &extra;
        ssize_t n = weft_read(pfd[0], at, 1, WEFT_FOREVER);
        CHECK(n >= 0);
        if (n == 0)
            break;
        CHECK(got < BIG); /* never more than was written */
        got += (size_t)n;
    }
    CHECK_EQ(got, BIG);
    return arg;
}

static void *late_writer(void *arg)
{
    CHECK_EQ(weft_sleep(5000000), 0);
    CHECK_EQ(weft_write(*(int *)arg, "hi", 2, WEFT_FOREVER), 2);
    return NULL;
}

static void *body(void *arg)
{
    src = malloc(BIG);
    dst = malloc(BIG);
    CHECK(src && dst);
    for (int i = 0; i < BIG; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 9));

    /* 1 MiB through a pipe, writer fiber against 1-byte reads */
    CHECK_EQ(weft_pipe(pfd), 0);
    weft_fiber_t w, r;
    CHECK_EQ(weft_spawn(writer, NULL, NULL, &w), 0);
    CHECK_EQ(weft_spawn(one_byte_reader, NULL, NULL, &r), 0);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(r, NULL, WEFT_FOREVER), 0);
    CHECK(memcmp(src, dst, BIG) == 0);
    CHECK_EQ(weft_close(pfd[0]), 0);

    /* a pipe made elsewhere (blocking): weft makes it non-blocking */
    int raw[2];
    CHECK_EQ(pipe(raw), 0);
    char buf[16];
    CHECK_EQ(weft_read(raw[0], buf, sizeof buf, 0), -EAGAIN);
    CHECK_EQ(weft_read(raw[0], buf, sizeof buf, weft_deadline_in(2000000)), -ETIMEDOUT);
    CHECK(fcntl(raw[0], F_GETFL) & O_NONBLOCK);
    weft_fiber_t lw;
    CHECK_EQ(weft_spawn(late_writer, &raw[1], NULL, &lw), 0);
    CHECK_EQ(weft_read(raw[0], buf, sizeof buf, WEFT_FOREVER), 2);
    CHECK(memcmp(buf, "hi", 2) == 0);
    CHECK_EQ(weft_join(lw, NULL, WEFT_FOREVER), 0);

    /* readiness waits */
    CHECK_EQ(weft_wait_fd(raw[0], WEFT_READABLE, 0), -EAGAIN);
    CHECK_EQ(weft_wait_fd(raw[1], WEFT_WRITABLE, 0), WEFT_WRITABLE);
    CHECK_EQ(weft_spawn(late_writer, &raw[1], NULL, &lw), 0);
    CHECK_EQ(weft_wait_fd(raw[0], WEFT_READABLE, WEFT_FOREVER), WEFT_READABLE);
    /* already readable: reported at once, even though the edge is old */
    CHECK_EQ(weft_wait_fd(raw[0], WEFT_READABLE, WEFT_FOREVER), WEFT_READABLE);
    CHECK_EQ(weft_read(raw[0], buf, sizeof buf, 0), 2);
    CHECK_EQ(weft_join(lw, NULL, WEFT_FOREVER), 0);

    /* vectored I/O */
    struct iovec wv[3] = {{"abc", 3}, {"", 0}, {"defgh", 5}};
    CHECK_EQ(weft_writev(raw[1], wv, 3, WEFT_FOREVER), 8);
    char a[2], b[10];
    struct iovec rv[2] = {{a, 2}, {b, 10}};
    CHECK_EQ(weft_readv(raw[0], rv, 2, WEFT_FOREVER), 8);
    CHECK(memcmp(a, "ab", 2) == 0 && memcmp(b, "cdefgh", 6) == 0);
    CHECK_EQ(weft_readv(raw[0], rv, -1, 0), -EINVAL);
    CHECK_EQ(weft_writev(raw[1], NULL, 2, 0), -EINVAL);

    /* read_full across EOF */
    CHECK_EQ(weft_write(raw[1], "xyz", 3, 0), 3);
    CHECK_EQ(weft_close(raw[1]), 0);
    size_t got = 0;
    CHECK_EQ(weft_read_full(raw[0], buf, 10, &got, WEFT_FOREVER), 1);
    CHECK_EQ(got, 3);
    CHECK_EQ(weft_read(raw[0], buf, 10, WEFT_FOREVER), 0); /* EOF */
    /* hang-up is reported by readiness waits, no busy loop */
    int ev = weft_wait_fd(raw[0], WEFT_READABLE, WEFT_FOREVER);
    CHECK(ev > 0 && (ev & WEFT_READABLE));
    /* ... with readable (a read would not block) but not priority data,
     * which only POLLPRI reports: a wait for priority data alone ends
     * with the hang-up only */
    ev = weft_wait_fd(raw[0], WEFT_READABLE | WEFT_PRIORITY, WEFT_FOREVER);
    CHECK(ev > 0 && (ev & WEFT_READABLE) && (ev & WEFT_HANGUP) && !(ev & WEFT_PRIORITY));
    ev = weft_wait_fd(raw[0], WEFT_PRIORITY, weft_deadline_in(5000000000));
    CHECK_EQ(ev, WEFT_HANGUP);
    CHECK_EQ(weft_close(raw[0]), 0);

    /* EPIPE instead of SIGPIPE (the disposition is the default: a signal
     * would kill this process) */
    CHECK_EQ(weft_pipe(pfd), 0);
    CHECK_EQ(weft_close(pfd[0]), 0);
    CHECK_EQ(weft_write(pfd[1], "x", 1, WEFT_FOREVER), -EPIPE);
    struct iovec one = {"y", 1};
    CHECK_EQ(weft_writev(pfd[1], &one, 1, WEFT_FOREVER), -EPIPE);
    size_t wr = 99;
    CHECK_EQ(weft_write_all(pfd[1], "zz", 2, &wr, WEFT_FOREVER), -EPIPE);
    CHECK_EQ(wr, 0);
    sigset_t pending;
    sigpending(&pending);
    CHECK(!sigismember(&pending, SIGPIPE));
    CHECK_EQ(weft_close(pfd[1]), 0);

    /* a full pipe: write with a deadline reports the committed prefix */
    CHECK_EQ(weft_pipe(pfd), 0);
    size_t committed = 0;
    CHECK_EQ(weft_write_all(pfd[1], src, BIG, &committed,
                            weft_deadline_in(3000000)), -ETIMEDOUT);
    CHECK(committed > 0 && committed < BIG);
    size_t back = 0;
    while (back < committed) {
        ssize_t n = weft_read(pfd[0], dst + back, committed - back, 0);
        CHECK(n > 0);
        back += (size_t)n;
    }
    CHECK(memcmp(src, dst, committed) == 0);
    CHECK_EQ(weft_read(pfd[0], dst, 1, 0), -EAGAIN); /* nothing extra */
    CHECK_EQ(weft_close(pfd[0]), 0);
    CHECK_EQ(weft_close(pfd[1]), 0);

    /* regular files: never "would block" */
    char path[] = "/tmp/weft-test-XXXXXX";
    int f = mkstemp(path);
    CHECK(f >= 0);
    unlink(path);
    CHECK_EQ(weft_write(f, "file data", 9, WEFT_FOREVER), 9);
    CHECK_EQ(lseek(f, 0, SEEK_SET), 0);
    CHECK_EQ(weft_read(f, buf, sizeof buf, WEFT_FOREVER), 9);
    CHECK(memcmp(buf, "file data", 9) == 0);
    CHECK_EQ(weft_read(f, buf, sizeof buf, WEFT_FOREVER), 0);
    CHECK(weft_wait_fd(f, WEFT_READABLE, WEFT_FOREVER) & WEFT_READABLE);
    CHECK_EQ(weft_close(f), 0);

    /* bad descriptors and arguments */
    CHECK_EQ(weft_read(-1, buf, 1, 0), -EBADF);
    CHECK_EQ(weft_write(-5, buf, 1, 0), -EBADF);
    CHECK_EQ(weft_read(f, buf, 1, 0), -EBADF); /* closed */
    CHECK_EQ(weft_wait_fd(f, WEFT_READABLE, 0), -EBADF);
    CHECK_EQ(weft_read(0, NULL, 5, 0), -EINVAL);
    CHECK_EQ(weft_wait_fd(0, 0, 0), -EINVAL);
    CHECK_EQ(weft_wait_fd(0, 0x100, 0), -EINVAL);
    CHECK_EQ(weft_read(0, buf, 1, -9), -EINVAL);
    CHECK_EQ(weft_pipe(NULL), -EINVAL);
    CHECK_EQ(weft_close(-1), -EBADF);
    CHECK_EQ(weft_close(f), -EBADF);

    free(src);
    free(dst);
    return arg;
}

int main(void)
{
    h_begin("pipe");
    h_run(body, NULL);
    return h_end();
}
