/*
 * run_cmd — run a program and show its output line by line as it comes,
 * each line stamped with the time since the start and the stream it came
 * from; stop the program at a timeout or on Ctrl-C.
 *
 *   build/examples/run_cmd [--timeout-ms MS] [--max-line N] -- PROGRAM [ARG...]
 *
 *       12.4 ms out| a line the program wrote to stdout
 *       12.9 ms err| and one to stderr
 *
 * Fibers: one reads the program's stdout and one its stderr, a line at a
 * time (weft_read_line(); a line longer than --max-line bytes, default
 * 200, is shown in pieces marked "+|"), one waits for SIGINT/SIGTERM
 * (weft_signal_wait()), and the main fiber waits for the program until the
 * timeout (weft_proc_join()). On a signal or the timeout the program gets
 * SIGTERM, and SIGKILL one second later if it is still there. The exit
 * status is the program's (128 + N when signal N ended it).
 */
#include <weft.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int64_t timeout_ns = WEFT_FOREVER, start;
static size_t max_line = 200;
static char **command;
static weft_proc_t proc;
static sigset_t stop_signals; /* SIGINT, SIGTERM */

typedef struct stream {
    int fd;
    const char *name;
} stream;

static void show(const char *name, const char *mark, const char *text, size_t len)
{
    printf("%9.1f ms %s%s %.*s\n", (double)(weft_now() - start) / 1e6, name, mark,
           (int)len, text);
}

static void *reader(void *arg)
{
    stream *st = arg;
    weft_reader_t r;
    int rc = weft_reader_init(&r, st->fd, max_line);
    if (rc < 0) {
        fprintf(stderr, "run_cmd: %s: %s\n", st->name, strerror(-rc));
        weft_close(st->fd); /* the program gets EPIPE rather than waiting */
        return NULL;
    }
    char *line;
    size_t len;
    const char *mark = "|";
    for (;;) {
        rc = weft_read_line(&r, &line, &len, 0, WEFT_FOREVER);
        if (rc == 1) {
            show(st->name, mark, line, len);
            mark = "|";
        } else if (rc == -EMSGSIZE) {
            /* Longer than the buffer: show what is there, go on with the rest. */
            char piece[4096];
            ssize_t n = weft_reader_read(&r, piece, max_line < sizeof piece ? max_line : sizeof piece,
                                         WEFT_FOREVER);
            if (n <= 0)
                break;
            show(st->name, mark, piece, (size_t)n);
            mark = "+|";
        } else {
            break; /* 0: end of output */
        }
    }
    weft_reader_destroy(&r);
    return NULL;
}

/* SIGINT or SIGTERM: ask the program to stop. */
static void *signals(void *arg)
{
    (void)arg;
    int sfd = weft_signal_open(&stop_signals);
    if (sfd < 0)
        return NULL;
    int sig;
    while ((sig = weft_signal_wait(sfd, NULL, WEFT_FOREVER)) > 0) {
        fprintf(stderr, "run_cmd: %s: stopping %s\n", strsignal(sig), command[0]);
        weft_proc_kill(&proc, SIGTERM);
    }
    weft_close(sfd);
    return NULL;
}

static void *run(void *arg)
{
    int *status = arg;
    weft_proc_opts_t o = {.stdio = {WEFT_PROC_INHERIT, WEFT_PROC_PIPE, WEFT_PROC_PIPE}};
    start = weft_now();
    int rc = weft_proc_spawn(&proc, command[0], command, &o);
    if (rc < 0) {
        fprintf(stderr, "run_cmd: %s: %s\n", command[0], strerror(-rc));
        *status = 127;
        return NULL;
    }
    stream out = {proc.out, "out"}, err = {proc.err, "err"};
    weft_fiber_t fo, fe, fs;
    weft_spawn(reader, &out, NULL, &fo);
    weft_spawn(reader, &err, NULL, &fe);
    weft_spawn(signals, NULL, NULL, &fs);
    int st = 0;
    rc = weft_proc_join(&proc, &st, timeout_ns == WEFT_FOREVER ? WEFT_FOREVER
                                                                : start + timeout_ns);
    if (rc == -ETIMEDOUT) {
        fprintf(stderr, "run_cmd: %s still runs after %.0f ms: SIGTERM\n", command[0],
                (double)timeout_ns / 1e6);
        weft_proc_kill(&proc, SIGTERM);
        if (weft_proc_join(&proc, &st, weft_deadline_in(WEFT_SEC)) == -ETIMEDOUT) {
            weft_proc_kill(&proc, SIGKILL);
            rc = weft_proc_join(&proc, &st, WEFT_FOREVER);
        }
    }
    /* The output ends once the program and whatever it started are gone;
     * a child of its that lives on and keeps a pipe open would keep a
     * reader waiting: give them a second, then stop reading. */
    weft_fiber_t readers[2] = {fo, fe};
    int64_t grace = weft_deadline_in(WEFT_SEC);
    for (int i = 0; i < 2; i++)
        if (weft_join(readers[i], NULL, grace) < 0) {
            weft_cancel(readers[i]);
            weft_join(readers[i], NULL, WEFT_FOREVER);
        }
    weft_cancel(fs);
    weft_join(fs, NULL, WEFT_FOREVER);
    weft_proc_close(&proc);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    fprintf(stderr, "run_cmd: %s exited with %d after %.1f ms\n", command[0], *status,
            (double)(weft_now() - start) / 1e6);
    return NULL;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc)
            timeout_ns = atol(argv[++i]) * WEFT_MS;
        else if (!strcmp(argv[i], "--max-line") && i + 1 < argc)
            max_line = (size_t)atol(argv[++i]);
        else
            break;
    }
    if (i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc || max_line < 1) {
        fprintf(stderr, "usage: run_cmd [--timeout-ms MS] [--max-line N] -- PROGRAM [ARG...]\n");
        return 2;
    }
    command = argv + i + 1;
    /* Before any thread starts (the offload pool inherits the mask). */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    weft_signal_block(&stop_signals);
    int status = 1;
    if (weft_run(run, &status, NULL) < 0)
        return 1;
    return status;
}
