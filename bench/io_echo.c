/*
 * io_echo — loopback I/O through one weft loop, for comparing backends
 * (WEFT_BACKEND=io_uring|epoll|poll) in the same run.
 *
 *   io_echo pingpong CONNS SECONDS SIZE   -> round trips per second
 *   io_echo stream   CONNS SECONDS SIZE   -> MB/s received
 *
 * pingpong: CONNS client fibers each send SIZE bytes and wait for the echo,
 * over and over; one server fiber per connection echoes. stream: CONNS
 * client fibers write SIZE-byte blocks as fast as they can; the server
 * fibers read and count. Client and server share the loop, so both sides
 * run on the backend under test. Prints one number.
 */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int port, stream_mode;
static long conns, size;
static int64_t stop_at;
static long long rounds, bytes;
static volatile int stop;

static void *server_conn(void *arg)
{
    int fd = (int)(long)arg;
    char *buf = malloc((size_t)size);
    for (;;) {
        ssize_t n = weft_read(fd, buf, (size_t)size, WEFT_FOREVER);
        if (n <= 0)
            break;
        if (stream_mode)
            bytes += n;
        else if (weft_write_all(fd, buf, (size_t)n, NULL, WEFT_FOREVER) < 0)
            break;
    }
    free(buf);
    weft_close(fd);
    return NULL;
}

static void *acceptor(void *arg)
{
    int lfd = (int)(long)arg;
    for (long i = 0; i < conns; i++) {
        int c = weft_accept(lfd, NULL, NULL, WEFT_FOREVER);
        if (c < 0) {
            fprintf(stderr, "accept: %s\n", strerror(-c));
            exit(1);
        }
        weft_spawn(server_conn, (void *)(long)c, NULL, NULL);
    }
    weft_close(lfd);
    return NULL;
}

static void *client(void *arg)
{
    (void)arg;
    int fd = weft_tcp_connect("127.0.0.1", port, WEFT_FOREVER);
    if (fd < 0) {
        fprintf(stderr, "connect: %s\n", strerror(-fd));
        exit(1);
    }
    char *buf = calloc(1, (size_t)size);
    while (!stop) {
        if (weft_write_all(fd, buf, (size_t)size, NULL, WEFT_FOREVER) < 0)
            break;
        if (!stream_mode) {
            if (weft_read_full(fd, buf, (size_t)size, NULL, WEFT_FOREVER) != 0)
                break;
            rounds++;
        }
    }
    free(buf);
    weft_close(fd);
    return NULL;
}

static void *timer(void *arg)
{
    weft_sleep_until(stop_at);
    stop = 1;
    return arg;
}

static void *main_fiber(void *arg)
{
    (void)arg;
    int lfd = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
    if (lfd < 0) {
        fprintf(stderr, "listen: %s\n", strerror(-lfd));
        exit(1);
    }
    port = weft_local_port(lfd);
    weft_spawn(acceptor, (void *)(long)lfd, NULL, NULL);
    for (long i = 0; i < conns; i++)
        weft_spawn(client, NULL, NULL, NULL);
    weft_spawn(timer, NULL, NULL, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[1], "pingpong") && strcmp(argv[1], "stream"))) {
        fprintf(stderr, "usage: %s pingpong|stream CONNS SECONDS SIZE\n", argv[0]);
        return 2;
    }
    stream_mode = !strcmp(argv[1], "stream");
    conns = atol(argv[2]);
    double secs = atof(argv[3]);
    size = atol(argv[4]);
    if (conns < 1 || secs <= 0 || size < 1)
        return 2;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int64_t t0 = weft_now();
    stop_at = t0 + (int64_t)(secs * 1e9);
    if (weft_run(main_fiber, NULL, NULL) < 0)
        return 1;
    double el = (double)(stop_at - t0) / 1e9;
    if (stream_mode)
        printf("%.1f\n", (double)bytes / el / 1e6);
    else
        printf("%.0f\n", (double)rounds / el);
    fprintf(stderr, "io_echo %s conns=%ld size=%ld backend=%s\n", argv[1], conns,
            size, weft_sched_backend(weft_sched_self()));
    return 0;
}
