/*
 * echo_server — one fiber per connection, each echoing what it reads.
 *
 *   build/examples/echo_server [--port P] [--host ADDR] [--idle-ms MS]
 *
 * ADDR may be a name ("localhost") or a number. Each fiber has a name, for
 * weft_dump(): run it with WEFT_DUMP_SIGNAL=QUIT and `kill -QUIT` shows
 * what every fiber is doing (README, "When something is stuck").
 * Stops on SIGINT/SIGTERM:
 * a fiber waits for them (weft_signal_wait(); main() blocks them before
 * anything else, the library never touches signal dispositions), stops
 * accepting, and cancels the connections still open.
 */
#include <weft.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int lfd = -1;
static long served, open_conns;
static int64_t idle_ns = 60LL * 1000000000;
static int stopping;
static sigset_t stop_signals; /* SIGINT, SIGTERM */

static void *connection(void *arg)
{
    int fd = (int)(long)arg;
    char buf[16384];
    char name[32];
    snprintf(name, sizeof name, "conn fd %d", fd);
    weft_fiber_set_name(weft_self(), name);
    for (;;) {
        ssize_t n = weft_read(fd, buf, sizeof buf, weft_deadline_in(idle_ns));
        if (n <= 0)
            break; /* EOF, error, idle timeout or cancelled */
        if (weft_write_all(fd, buf, (size_t)n, NULL, weft_deadline_in(idle_ns)) < 0)
            break;
    }
    weft_close(fd);
    open_conns--;
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    weft_fiber_set_name(weft_self(), "acceptor");
    int short_of = 0; /* the accept error being backed off from, once said */
    while (!stopping) {
        int c = weft_accept(lfd, NULL, NULL, WEFT_FOREVER);
        if (c == -EMFILE || c == -ENFILE || c == -ENOBUFS || c == -ENOMEM) {
            /* Out of descriptors: the connection stays queued; back off
             * instead of spinning, and accept again when fds free up.
             * Say so once, not at every retry. */
            if (c != short_of)
                fprintf(stderr, "echo_server: accept: %s with %ld connections "
                        "open; new ones wait until some close\n",
                        strerror(-c), open_conns);
            short_of = c;
            weft_sleep(10 * 1000000);
            continue;
        }
        if (c < 0) {
            if (c != -ECANCELED)
                fprintf(stderr, "echo_server: accept: %s\n", strerror(-c));
            break; /* cancelled on shutdown, or the listener was closed */
        }
        if (short_of)
            fprintf(stderr, "echo_server: accepting again\n");
        short_of = 0;
        served++;
        open_conns++; /* here, not in the fiber: it has not run yet */
        if (weft_spawn(connection, (void *)(long)c, NULL, NULL) < 0) {
            weft_close(c);
            open_conns--;
        }
    }
    return NULL;
}

static void *signals(void *arg)
{
    weft_fiber_t acc = *(weft_fiber_t *)arg;
    weft_fiber_set_name(weft_self(), "signals");
    int sfd = weft_signal_open(&stop_signals);
    if (sfd < 0)
        return NULL;
    int sig = weft_signal_wait(sfd, NULL, WEFT_FOREVER);
    if (sig > 0)
        fprintf(stderr, "echo_server: %s, shutting down\n", strsignal(sig));
    stopping = 1;
    weft_cancel(acc);
    weft_join(acc, NULL, WEFT_FOREVER);
    weft_close(lfd);
    weft_close(sfd);
    /* The open connections finish on their own within the idle timeout;
     * exit now instead of waiting for slow peers. */
    fprintf(stderr, "echo_server: served %ld connections, %ld still open\n",
            served, open_conns);
    exit(0);
}

static void *main_fiber(void *arg)
{
    weft_fiber_t acc;
    weft_spawn(acceptor, NULL, NULL, &acc);
    weft_spawn(signals, &acc, NULL, NULL);
    (void)arg;
    return NULL;
}

/* Many connections need many descriptors: use all the hard limit allows. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    raise_fd_limit();
    const char *host = "127.0.0.1";
    int port = 7000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--host") && i + 1 < argc)
            host = argv[++i];
        else if (!strcmp(argv[i], "--idle-ms") && i + 1 < argc)
            idle_ns = atoll(argv[++i]) * 1000000;
        else {
            fprintf(stderr, "usage: %s [--port P] [--host ADDR] [--idle-ms MS]\n",
                    argv[0]);
            return 2;
        }
    }
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    weft_signal_block(&stop_signals);
    lfd = weft_listen(host, port, SOCK_STREAM, 4096, 0, WEFT_FOREVER);
    if (lfd < 0) {
        fprintf(stderr, "echo_server: listen on %s:%d: %s\n", host, port,
                strerror(-lfd));
        return 1;
    }
    printf("echo_server: listening on %s:%d (%s backend)\n", host,
           weft_local_port(lfd), weft_sched_backend(weft_sched_self()));
    fflush(stdout);
    int rc = weft_run(main_fiber, NULL, NULL);
    return rc < 0;
}
