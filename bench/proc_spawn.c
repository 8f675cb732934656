/*
 * proc_spawn — start /bin/true and wait for it, over and over: weft's
 * weft_proc_spawn() + weft_proc_join() in a fiber (pidfd, readiness wait
 * on the loop) against posix_spawn(3) + waitpid(2) on a plain thread.
 *
 *   proc_spawn weft|plain N REPS   -> REPS lines, each the mean
 *                                     microseconds per spawn + wait of N
 *
 * Most of either is the kernel's and the dynamic loader's work for a new
 * process; the difference is what weft adds (pidfd_open, the wait through
 * the event loop, close, the signal mask and SIGPIPE reset of the child).
 */
#include <weft.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;
static char *argv_true[] = {"true", NULL};
static long n, reps;

static double plain_once(void)
{
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++) {
        pid_t pid;
        int st;
        if (posix_spawn(&pid, "/bin/true", NULL, NULL, argv_true, environ) != 0 ||
            waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) {
            fprintf(stderr, "proc_spawn: posix_spawn failed\n");
            exit(1);
        }
    }
    return (double)(weft_now() - t0) / 1e3 / (double)n;
}

static double weft_once(void)
{
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++) {
        weft_proc_t p;
        int st;
        if (weft_proc_spawn(&p, "/bin/true", argv_true, NULL) < 0 ||
            weft_proc_join(&p, &st, WEFT_FOREVER) < 0 || !WIFEXITED(st)) {
            fprintf(stderr, "proc_spawn: weft_proc_spawn failed\n");
            exit(1);
        }
        weft_proc_close(&p);
    }
    return (double)(weft_now() - t0) / 1e3 / (double)n;
}

static void *weft_main(void *arg)
{
    (void)arg;
    weft_once(); /* warm-up */
    for (long r = 0; r < reps; r++)
        printf("%.1f\n", weft_once());
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (n = atol(argv[2])) <= 0 || (reps = atol(argv[3])) <= 0) {
        fprintf(stderr, "usage: proc_spawn weft|plain N REPS\n");
        return 2;
    }
    if (!strcmp(argv[1], "weft"))
        return weft_run(weft_main, NULL, NULL) < 0;
    plain_once();
    for (long r = 0; r < reps; r++)
        printf("%.1f\n", plain_once());
    return 0;
}
