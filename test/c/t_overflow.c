/* A fiber that overflows its stack dies on the guard page with a clear
 * message (checked in a child process); a SIGSEGV sent with kill(2) still
 * ends the process. */
#include "harness.h"

#include <fcntl.h>
#include <sys/wait.h>

static volatile long sink;

static volatile long limit = 1L << 40; /* never reached: the stack ends first */

static long runaway(long n)
{
    volatile char frame[512];
    frame[0] = (char)n;
    sink += frame[0];
    if (n >= limit)
        return 0;
    return runaway(n + 1) + frame[0];
}

static void *overflow(void *arg)
{
    sink = runaway(0);
    return arg;
}

static void child(void)
{
    weft_spawn_opts_t o = {.stack_size = 32 * 1024};
    weft_sched_t *s = weft_sched_self();
    CHECK(s != NULL);
    CHECK_EQ(weft_spawn(overflow, NULL, &o, NULL), 0);
    weft_sched_run(s);
    _exit(0); /* not reached */
}

/* A SIGSEGV sent to the process (kill(2), as by `kill -SEGV`), not a
 * fault: it must end the process as it would without weft's handler,
 * which has no faulting instruction to run again. */
static void *send_segv(void *arg)
{
    kill(getpid(), SIGSEGV);
    weft_sleep(1000000);
    return arg;
}

static void sent_segv_kills(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2); /* ASan's report, where it handles SIGSEGV */
        weft_run(send_segv, NULL, NULL);
        _exit(0); /* survived */
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    if (WIFSIGNALED(status))
        CHECK_EQ(WTERMSIG(status), SIGSEGV);
}

int main(void)
{
    h_begin("overflow");
    sent_segv_kills();
    int errp[2];
    CHECK_EQ(pipe(errp), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* No scheduler exists yet in this process: the child makes its
         * own (fork without exec also works under qemu-user). */
        dup2(errp[1], 2);
        close(errp[0]);
        close(errp[1]);
        child();
    }
    close(errp[1]);
    char out[8192];
    size_t len = 0;
    ssize_t n;
    while ((n = read(errp[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = 0;
    close(errp[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    fprintf(stderr, "child said: %s\n", out);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    if (strstr(out, "AddressSanitizer")) {
        /* Under ASan its own handler reports the fault. */
        CHECK(strstr(out, "stack-overflow") || strstr(out, "SEGV"));
    } else {
        CHECK(WIFSIGNALED(status));
        CHECK_EQ(WTERMSIG(status), SIGSEGV);
        CHECK(strstr(out, "weft: fiber stack overflow") != NULL);
    }
    weft_sched_self(); /* for the teardown check */
    return h_end();
}
