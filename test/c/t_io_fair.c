/* A fiber whose I/O never has to wait — reading a regular file, /dev/zero,
 * or a socket its peer keeps full — must still let the other fibers run,
 * as a thread doing the same blocking calls would: a fiber that is ready
 * to run gets its turn within a bounded number of such calls, and a timer
 * (a sleep, a watchdog that cancels the copy) comes due. Each case makes
 * another fiber runnable, then makes up to ROUNDS calls that complete at
 * once, and checks that the other fiber ran meanwhile. No timing: the
 * other fiber is runnable from the start. */
#include "harness.h"

#include <fcntl.h>
#include <sys/socket.h>

#define ROUNDS 100000

static int ran;

static void *mark(void *arg)
{
    ran = 1;
    return arg;
}

typedef ssize_t (*io_fn)(int fd, char *buf, size_t len);

static ssize_t do_read(int fd, char *buf, size_t len)
{
    ssize_t n = weft_read(fd, buf, len, WEFT_FOREVER);
    if (n == 0) /* a regular file: start again at its beginning */
        CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
    return n;
}

static ssize_t do_write(int fd, char *buf, size_t len)
{
    if (lseek(fd, 0, SEEK_CUR) >= 65536) /* a regular file stays small */
        CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
    return weft_write(fd, buf, len, WEFT_FOREVER);
}

/* One case: the fiber makes calls on @fd that never wait until the other
 * fiber has run; it must have run before ROUNDS calls. */
static void one_case(const char *name, int fd, io_fn fn, size_t len)
{
    static char buf[4096];
    H_CASE(name);
    ran = 0;
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(mark, NULL, NULL, &f), 0);
    long calls = 0;
    while (!ran && calls < ROUNDS) {
        CHECK(fn(fd, buf, len) >= 0);
        calls++;
    }
    CHECK(ran); /* the other fiber never got its turn */
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
}

/* A socket pair whose peer side always has data: each round writes and
 * reads the same small message, so neither call ever waits. */
static int ping[2];
static ssize_t do_ping(int fd, char *buf, size_t len)
{
    (void)fd;
    CHECK_EQ(weft_write(ping[1], buf, len, WEFT_FOREVER), (ssize_t)len);
    return weft_read(ping[0], buf, len, WEFT_FOREVER);
}

static void *body(void *arg)
{
    char path[] = "/tmp/weft-fair-XXXXXX";
    int file = mkstemp(path);
    CHECK(file >= 0);
    CHECK_EQ(unlink(path), 0);
    static char block[65536];
    CHECK_EQ(write(file, block, sizeof block), (ssize_t)sizeof block);
    CHECK_EQ(lseek(file, 0, SEEK_SET), 0);

    one_case("regular file read", file, do_read, 4096);
    one_case("regular file write", file, do_write, 512);
    CHECK_EQ(weft_close(file), 0);

    int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    CHECK(zero >= 0);
    one_case("/dev/zero read", zero, do_read, 4096);
    CHECK_EQ(weft_close(zero), 0);

    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(null >= 0);
    one_case("/dev/null write", null, do_write, 4096);
    CHECK_EQ(weft_close(null), 0);

    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ping), 0);
    one_case("socket ping-pong", -1, do_ping, 100);
    CHECK_EQ(weft_close(ping[0]), 0);
    CHECK_EQ(weft_close(ping[1]), 0);
    return arg;
}

int main(void)
{
    h_begin("io_fair");
    h_run(body, NULL);
    return h_end();
}
