/* Edge cases found in review: a close racing another close on io_uring,
 * transfers of 4 GiB and more, huge bogus descriptor numbers, a fork child
 * returning from the fiber that forked, and big frames hitting the guard. */
#include "harness.h"

#include <sys/mman.h>
#include <sys/wait.h>

static int victim;

static void *closer(void *arg)
{
    CHECK_EQ(weft_close(victim), 0);
    return arg;
}

static void *forgetter(void *arg)
{
    /* runs while the other fiber's close may still be in flight */
    weft_fd_forget(victim);
    return arg;
}

static int pp[2];
static void *bystander(void *arg)
{
    /* must never run in a fork child */
    CHECK_EQ(weft_sleep(20000000), 0);
    char msg[32];
    int n = snprintf(msg, sizeof msg, "%d\n", (int)getpid());
    CHECK_EQ(weft_write(pp[1], msg, (size_t)n, WEFT_FOREVER), n);
    return arg;
}

static void *forker(void *arg)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(weft_in_fiber(), 0);
        CHECK_EQ(weft_sleep(1), -EPERM); /* not the parent's loop */
        return NULL; /* ends the child with status 0 */
    }
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0)
        CHECK_EQ(weft_sleep(1000000), 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    return arg;
}

static void *body(void *arg)
{
    /* 1: close racing a forget/close of the same descriptor */
    for (int i = 0; i < 200; i++) {
        int p[2];
        CHECK_EQ(weft_pipe(p), 0);
        victim = p[0];
        weft_fiber_t a, b;
        CHECK_EQ(weft_spawn(closer, NULL, NULL, &a), 0);
        CHECK_EQ(weft_spawn(forgetter, NULL, NULL, &b), 0);
        CHECK_EQ(weft_join(a, NULL, WEFT_FOREVER), 0);
        CHECK_EQ(weft_join(b, NULL, WEFT_FOREVER), 0);
        weft_close(p[1]);
    }

    /* 2: a 4 GiB (+3) buffer reading a 10-byte file: 10 bytes, not a
     * truncated length */
    char path[] = "/tmp/weft-edge-XXXXXX";
    int f = mkstemp(path);
    CHECK(f >= 0);
    unlink(path);
    CHECK_EQ(write(f, "0123456789", 10), 10);
    size_t huge = ((size_t)4 << 30) + 3;
    char *big = mmap(NULL, huge, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(big != MAP_FAILED);
    CHECK_EQ(weft_pread(f, big, huge, 0, WEFT_FOREVER), 10);
    CHECK(!memcmp(big, "0123456789", 10));
    CHECK_EQ(lseek(f, 0, SEEK_SET), 0);
    CHECK_EQ(weft_read(f, big, huge, WEFT_FOREVER), 10);
    munmap(big, huge);
    weft_close(f);

    /* 3: bogus huge descriptor numbers are -EBADF, without growing tables */
    CHECK_EQ(weft_read(50000000, path, 1, 0), -EBADF);
    CHECK_EQ(weft_write(999999999, path, 1, WEFT_FOREVER), -EBADF);
    CHECK_EQ(weft_wait_fd(2000000000, WEFT_READABLE, 0), -EBADF);
    CHECK_EQ(weft_close(1999999999), -EBADF);

    /* 4: a fork child returning from the forking fiber exits; the parent's
     * other fibers do not run in it */
    CHECK_EQ(weft_pipe(pp), 0);
    weft_fiber_t by, fk;
    CHECK_EQ(weft_spawn(bystander, NULL, NULL, &by), 0);
    CHECK_EQ(weft_spawn(forker, NULL, NULL, &fk), 0);
    CHECK_EQ(weft_join(fk, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(by, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(pp[1]), 0);
    char out[256];
    size_t got = 0;
    CHECK_EQ(weft_read_full(pp[0], out, sizeof out - 1, &got, WEFT_FOREVER), 1);
    out[got] = 0;
    char mine[32];
    snprintf(mine, sizeof mine, "%d\n", (int)getpid());
    CHECK(!strcmp(out, mine)); /* exactly one line, from this process */
    weft_close(pp[0]);
    return arg;
}

/* 5: a frame bigger than a page still lands in the guard */
static volatile long sink;
static volatile long limit = 1L << 40;
static long big_frames(long n)
{
    volatile char frame[12 * 1024];
    frame[0] = (char)n;
    frame[sizeof frame - 1] = (char)n;
    sink += frame[0];
    if (n >= limit)
        return 0;
    return big_frames(n + 1) + frame[sizeof frame - 1];
}

static void *overflow(void *arg)
{
    sink = big_frames(0);
    return arg;
}

int main(void)
{
    h_begin("edge");
    h_run(body, NULL);

    int errp[2];
    CHECK_EQ(pipe(errp), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(errp[1], 2);
        close(errp[0]);
        close(errp[1]);
        weft_sched_t *s;
        CHECK_EQ(weft_sched_create(&s, NULL), 0);
        weft_spawn_opts_t o = {.stack_size = 64 * 1024};
        CHECK_EQ(weft_spawn(overflow, NULL, &o, NULL), 0);
        weft_sched_run(s);
        _exit(0);
    }
    close(errp[1]);
    char out[4096];
    ssize_t n = read(errp[0], out, sizeof out - 1);
    out[n > 0 ? n : 0] = 0;
    close(errp[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    if (!strstr(out, "AddressSanitizer"))
        CHECK(strstr(out, "weft: fiber stack overflow") != NULL);
    return h_end();
}
