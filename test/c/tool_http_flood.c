/*
 * tool_http_flood — the client side of scripts/test.d/emfile.sh: more
 * connections than a server's descriptor limit allows, and a check that
 * every one of them is served.
 *
 *   tool_http_flood --port P [--host 127.0.0.1] [--clients 1000]
 *                   [--residents 50] [--recovery 200] [--timeout-s 60]
 *                   [--hold-ms 200]
 *
 * Three phases, one fiber per connection, all on one weft loop:
 *   residents  R keep-alive connections opened first; each sends a request
 *              every 20 ms for as long as the flood lasts (the server must
 *              keep serving the connections it has while it is out of
 *              descriptors), then closes;
 *   flood      C clients connect at once; each sends a request, reads the
 *              answer, holds the connection for --hold-ms, sends a second
 *              request on it, reads the answer and closes. The kernel completes every handshake into the accept
 *              queue, so a server limited to a few hundred descriptors
 *              accepts them as earlier ones close;
 *   recovery   once everything is closed, M more clients the same way.
 * Every answer must be a complete "200" response with the body
 * "Hello, World!" (examples/http_server and examples/ruby/http_server.rb).
 *
 * Prints one line per phase and a last line
 *   "connections N requests Q errors E"
 * (N and Q are what the server must report as accepted and answered); exit
 * status 0 only with zero errors and every resident answered at least once
 * while the flood went on (a server that stopped serving what it had until
 * the flood was over fails; how fast it answered is printed, not judged:
 * a loaded machine may be slow).
 */
#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MS 1000000LL
#define SEC 1000000000LL

static const char *host = "127.0.0.1";
static int port, nclients = 1000, nresidents = 50, nrecovery = 200;
static int64_t timeout_ns = 60 * SEC, hold_ns = 200 * MS;

static const char REQ[] = "GET / HTTP/1.1\r\nHost: flood\r\n\r\n";
static const char BODY[] = "Hello, World!";

static struct {
    long connections, requests, errors;
    long resident_requests;  /* answered while the flood went on       */
    int residents_served;    /* residents with one of those at least   */
    int64_t resident_max_ns;
    int flood_done;          /* residents stop once the flood is over */
    char first_error[160];
} G;

static weft_waitgroup_t wg_phase = WEFT_WAITGROUP_INIT;

static void fail(const char *what, long rc)
{
    G.errors++;
    if (!G.first_error[0])
        snprintf(G.first_error, sizeof G.first_error, "%s: %s", what,
                 rc < 0 ? strerror((int)-rc) : "bad response");
}

/* One request and its response on @fd; 0 or a negative errno (-EPROTO for
 * a response that is not the expected one). */
static int exchange(int fd, int64_t deadline)
{
    int rc = weft_write_all(fd, REQ, sizeof REQ - 1, NULL, deadline);
    if (rc < 0)
        return rc;
    char buf[1024];
    size_t have = 0;
    for (;;) {
        ssize_t n = weft_read(fd, buf + have, sizeof buf - 1 - have, deadline);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return -ECONNRESET;
        have += (size_t)n;
        buf[have] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) {
            if (have == sizeof buf - 1)
                return -EPROTO;
            continue;
        }
        if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0)
            return -EPROTO;
        char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (!cl || cl > end)
            return -EPROTO;
        long len = strtol(cl + 17, NULL, 10);
        size_t total = (size_t)(end + 4 - buf) + (size_t)len;
        if (len != (long)sizeof BODY - 1 || total > sizeof buf - 1)
            return -EPROTO;
        if (have < total)
            continue;
        if (have > total) /* nothing was pipelined: nothing may follow */
            return -EPROTO;
        if (memcmp(end + 4, BODY, sizeof BODY - 1) != 0)
            return -EPROTO;
        return 0;
    }
}

/* A connection counted as made, or -1 (counted as an error). */
static int dial(const char *what, int64_t deadline)
{
    int fd = weft_tcp_connect(host, port, deadline);
    if (fd < 0) {
        fail(what, fd);
        return -1;
    }
    G.connections++;
    return fd;
}

static void *resident(void *arg)
{
    (void)arg;
    int64_t deadline = weft_deadline_in(timeout_ns);
    int fd = dial("resident connect", deadline);
    if (fd < 0) {
        weft_waitgroup_done(&wg_phase);
        return NULL;
    }
    int rc = exchange(fd, deadline);
    G.requests += rc == 0;
    weft_waitgroup_done(&wg_phase); /* connected and served once */
    long during = 0;
    while (rc == 0 && !G.flood_done) {
        weft_sleep(20 * MS);
        int64_t t0 = weft_now();
        rc = exchange(fd, t0 + timeout_ns);
        if (rc < 0)
            break;
        G.requests++;
        if (G.flood_done)
            break; /* answered, but after the flood */
        G.resident_requests++;
        G.residents_served += during++ == 0;
        int64_t dt = weft_now() - t0;
        if (dt > G.resident_max_ns)
            G.resident_max_ns = dt;
    }
    if (rc < 0)
        fail("resident request", rc);
    weft_close(fd);
    return NULL;
}

static void *client(void *arg)
{
    (void)arg;
    int64_t deadline = weft_deadline_in(timeout_ns);
    int fd = dial("connect", deadline);
    if (fd >= 0) {
        int rc = 0;
        for (int i = 0; i < 2 && rc == 0; i++) {
            if (i > 0) /* hold the connection (and the server's descriptor) */
                weft_sleep(hold_ns);
            rc = exchange(fd, deadline);
            G.requests += rc == 0;
        }
        if (rc < 0)
            fail("request", rc);
        weft_close(fd);
    }
    weft_waitgroup_done(&wg_phase);
    return NULL;
}

/* Start @n fibers of @fn, wait until every one has counted down. */
static int phase(weft_fn_t fn, int n, weft_fiber_t *keep)
{
    weft_waitgroup_add(&wg_phase, n);
    for (int i = 0; i < n; i++) {
        int rc = weft_spawn(fn, NULL, NULL, keep ? &keep[i] : NULL);
        if (rc < 0) {
            fail("spawn", rc);
            weft_waitgroup_add(&wg_phase, -(n - i));
            return rc;
        }
    }
    return weft_waitgroup_wait(&wg_phase, weft_deadline_in(timeout_ns + 10 * SEC));
}

static void *run(void *arg)
{
    (void)arg;
    weft_fiber_t *res = calloc((size_t)(nresidents ? nresidents : 1), sizeof *res);
    if (!res)
        return "out of memory";
    int64_t t0 = weft_now();
    if (phase(resident, nresidents, res) < 0)
        fail("residents: not all connected in time", -ETIMEDOUT);
    printf("residents: %d connected, errors %ld\n", nresidents, G.errors);
    fflush(stdout);

    int64_t t1 = weft_now();
    long e0 = G.errors;
    if (phase(client, nclients, NULL) < 0)
        fail("flood: not all clients done in time", -ETIMEDOUT);
    printf("flood: %d clients x 2 requests in %.2f s, errors %ld\n", nclients,
           (double)(weft_now() - t1) / SEC, G.errors - e0);
    G.flood_done = 1;
    for (int i = 0; i < nresidents; i++)
        weft_join(res[i], NULL, WEFT_FOREVER);
    free(res);
    printf("residents: %ld requests during the flood, %d of %d residents served, slowest %.1f ms\n",
           G.resident_requests, G.residents_served, nresidents, (double)G.resident_max_ns / MS);

    int64_t t2 = weft_now();
    e0 = G.errors;
    if (phase(client, nrecovery, NULL) < 0)
        fail("recovery: not all clients done in time", -ETIMEDOUT);
    printf("recovery: %d clients x 2 requests in %.2f s, errors %ld\n", nrecovery,
           (double)(weft_now() - t2) / SEC, G.errors - e0);
    printf("total %.2f s\n", (double)(weft_now() - t0) / SEC);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: tool_http_flood --port P [--host A] [--clients N] "
                    "[--residents R] [--recovery M] [--timeout-s S] "
                    "[--hold-ms MS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *a = argv[i], *v = argv[++i];
        if (!strcmp(a, "--port"))
            port = atoi(v);
        else if (!strcmp(a, "--host"))
            host = v;
        else if (!strcmp(a, "--clients"))
            nclients = atoi(v);
        else if (!strcmp(a, "--residents"))
            nresidents = atoi(v);
        else if (!strcmp(a, "--recovery"))
            nrecovery = atoi(v);
        else if (!strcmp(a, "--timeout-s"))
            timeout_ns = atoll(v) * SEC;
        else if (!strcmp(a, "--hold-ms"))
            hold_ns = atoll(v) * MS;
        else
            usage();
    }
    if (port <= 0 || nclients < 0 || nresidents < 0 || nrecovery < 0)
        usage();
    /* Every connection of a phase is open at once on this side. */
    struct rlimit rl;
    long need = nclients + nresidents + nrecovery + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (long)rl.rlim_cur < need) {
        rl.rlim_cur = (rlim_t)need;
        if (rl.rlim_max < rl.rlim_cur)
            rl.rlim_max = rl.rlim_cur;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            fprintf(stderr, "tool_http_flood: cannot raise the descriptor limit to %ld\n", need);
            return 2;
        }
    }
    void *res = NULL;
    int rc = weft_run(run, NULL, &res);
    if (rc < 0 || res) {
        fprintf(stderr, "tool_http_flood: %s\n", res ? (const char *)res : strerror(-rc));
        return 1;
    }
    printf("connections %ld requests %ld errors %ld\n", G.connections, G.requests,
           G.errors);
    if (G.errors)
        printf("first error: %s\n", G.first_error);
    int starved = G.residents_served < nresidents;
    if (starved)
        printf("FAIL: %d of %d resident connections got no answer while the flood went on\n",
               nresidents - G.residents_served, nresidents);
    return G.errors || starved;
}
