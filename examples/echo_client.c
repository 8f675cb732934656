/*
 * echo_client — many client fibers against an echo server, each sending a
 * pseudo-random payload in random-sized pieces and verifying every byte
 * that comes back.
 *
 *   build/examples/echo_client [--port P] [--host ADDR] [--clients N]
 *                              [--bytes B] [--timeout-ms MS]
 *
 * ADDR may be a name ("localhost") or a number (weft_dial()).
 */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char *host = "127.0.0.1";
static int port = 7000;
static long nclients = 300, nbytes = 64 * 1024;
static int64_t timeout_ns = 30LL * 1000000000;
static long ok, failed, connected, max_live, live;
static long long bytes_verified;
static const char *first_what; /* the first failure, for the summary */
static int first_err;

/* Count a failed client; the first failure's reason is kept. */
static void fail(const char *what, int err)
{
    failed++;
    if (!first_what) {
        first_what = what;
        first_err = err;
    }
}

static uint8_t byte_at(long client, long i)
{
    uint32_t x = (uint32_t)(client * 2654435761u) ^ (uint32_t)i * 40503u;
    x ^= x >> 13;
    return (uint8_t)(x * 0x5bd1e995u >> 24);
}

typedef struct reader_arg {
    int fd;
    long id;
    long long got;
    int err;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *ra = p;
    uint8_t buf[8192];
    int64_t deadline = weft_deadline_in(timeout_ns);
    while (ra->got < nbytes) {
        ssize_t n = weft_read(ra->fd, buf, sizeof buf, deadline);
        if (n <= 0) {
            ra->err = n == 0 ? -EPIPE : (int)n;
            return NULL;
        }
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != byte_at(ra->id, ra->got + i)) {
                ra->err = -EILSEQ;
                return NULL;
            }
        ra->got += n;
    }
    return NULL;
}

static void *client(void *arg)
{
    long id = (long)arg;
    int64_t deadline = weft_deadline_in(timeout_ns);
    int fd = weft_dial(host, port, SOCK_STREAM, deadline);
    if (fd < 0) {
        fail("connect", fd);
        return NULL;
    }
    connected++;
    if (++live > max_live)
        max_live = live;
    /* Reading and writing run in two fibers, so neither side's buffers
     * can deadlock the exchange. */
    reader_arg ra = {.fd = fd, .id = id};
    weft_fiber_t r;
    int rc = weft_spawn(reader, &ra, NULL, &r);
    uint8_t out[4096];
    long sent = 0;
    unsigned seed = (unsigned)id * 7919u + 1;
    while (rc == 0 && sent < nbytes) {
        seed = seed * 1103515245u + 12345u;
        long chunk = 1 + (long)(seed >> 16) % (long)sizeof out;
        if (chunk > nbytes - sent)
            chunk = nbytes - sent;
        for (long i = 0; i < chunk; i++)
            out[i] = byte_at(id, sent + i);
        rc = weft_write_all(fd, out, (size_t)chunk, NULL, deadline);
        sent += chunk;
    }
    if (rc == 0)
        weft_join(r, NULL, WEFT_FOREVER);
    else {
        weft_cancel(r);
        weft_join(r, NULL, WEFT_FOREVER);
    }
    weft_close(fd);
    live--;
    if (rc == 0 && ra.err == 0 && ra.got == nbytes) {
        ok++;
        bytes_verified += ra.got;
    } else if (rc < 0) {
        fail("write", rc);
    } else {
        fail(ra.err == -EILSEQ ? "echo differs" : "read", ra.err ? ra.err : -EPIPE);
    }
    return NULL;
}

static void *main_fiber(void *arg)
{
    (void)arg;
    for (long i = 0; i < nclients; i++) {
        int rc = weft_spawn(client, (void *)i, NULL, NULL);
        if (rc < 0)
            fail("spawn", rc);
    }
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
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--host") && i + 1 < argc)
            host = argv[++i];
        else if (!strcmp(argv[i], "--clients") && i + 1 < argc)
            nclients = atol(argv[++i]);
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            nbytes = atol(argv[++i]);
        else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc)
            timeout_ns = atoll(argv[++i]) * 1000000;
        else {
            fprintf(stderr, "usage: %s [--port P] [--host ADDR] [--clients N] "
                            "[--bytes B] [--timeout-ms MS]\n", argv[0]);
            return 2;
        }
    }
    if (nclients < 1 || nbytes < 0) {
        fprintf(stderr, "echo_client: --clients must be >= 1, --bytes >= 0\n");
        return 2;
    }
    int64_t t0 = weft_now();
    int rc = weft_run(main_fiber, NULL, NULL);
    double secs = (weft_now() - t0) / 1e9;
    if (rc < 0) {
        fprintf(stderr, "weft_run: %s\n", strerror(-rc));
        return 1;
    }
    weft_stats_t st;
    weft_sched_stats(weft_sched_self(), &st);
    printf("echo_client: %ld clients (%ld at once), %ld ok, %ld failed, "
           "%lld bytes echoed and verified in %.3f s (%.1f MB/s), "
           "%llu context switches, backend %s\n",
           nclients, max_live, ok, failed, bytes_verified, secs,
           2.0 * (double)bytes_verified / secs / 1e6,
           (unsigned long long)st.switches, weft_sched_backend(weft_sched_self()));
    if (first_what)
        fprintf(stderr, "echo_client: first failure: %s: %s\n", first_what,
                first_err == -EILSEQ ? "wrong bytes" : strerror(-first_err));
    return failed ? 1 : 0;
}
