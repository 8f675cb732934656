/*
 * http_load — an HTTP/1.1 load generator on weft: many client fibers, each
 * holding one keep-alive connection and sending requests back to back
 * (optionally pipelined), with a latency histogram.
 *
 *   http_load [--host ADDR] [--port P] [--connections C] [--duration SECS]
 *             [--threads T] [--path /] [--pipeline D] [--progress]
 *             [--json]
 *
 * C connections are spread over T threads (one weft scheduler each). A live
 * progress line goes to stderr when it is a terminal or with --progress.
 * The summary (requests, errors, req/s, p50/p90/p99/max latency) goes to
 * stdout, as one JSON object with --json. Exit status 0 when every request
 * got a 2xx answer and no socket error happened, else 1.
 *
 * Latency is measured per request from just before its send to the end of
 * its response; with --pipeline D the D requests of a batch share a start.
 */
#include "weft.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_THREADS 64
#define RBUF 65536

/* ---- latency histogram: 64 linear sub-buckets per power of two ---------- */

#define H_SUB 64
#define H_BUCKETS (128 + 58 * H_SUB)

typedef struct hist {
    uint64_t n[H_BUCKETS];
    uint64_t count, max;
} hist;

static int h_index(uint64_t v)
{
    if (v < 128)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* >= 7 */
    int sub = (int)((v >> (e - 6)) & (H_SUB - 1));
    return 128 + (e - 7) * H_SUB + sub;
}

static uint64_t h_value(int i) /* a representative value of bucket i */
{
    if (i < 128)
        return (uint64_t)i;
    int e = (i - 128) / H_SUB + 7, sub = (i - 128) % H_SUB;
    uint64_t lo = ((uint64_t)(H_SUB + sub)) << (e - 6);
    return lo + ((1ULL << (e - 6)) >> 1);
}

static void h_add(hist *h, uint64_t v)
{
    h->n[h_index(v)]++;
    h->count++;
    if (v > h->max)
        h->max = v;
}

static uint64_t h_pct(const hist *h, double p)
{
    if (!h->count)
        return 0;
    uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->count), seen = 0;
    if (want == 0)
        want = 1;
    for (int i = 0; i < H_BUCKETS; i++) {
        seen += h->n[i];
        if (seen >= want)
            return h_value(i) < h->max ? h_value(i) : h->max;
    }
    return h->max;
}

/* ---- options and per-thread state -------------------------------------- */

static struct {
    const char *host, *path;
    int port, conns, threads, pipeline, progress, json;
    double duration;
    int64_t start, end;
    char *req;
    size_t req_len;
} O = {.host = "127.0.0.1", .path = "/", .port = 8080, .conns = 100,
       .threads = 1, .pipeline = 1, .duration = 10};

typedef struct worker {
    int index, nconns;
    pthread_t tid;
    hist h;
    _Atomic uint64_t done_pub; /* responses, published for the progress line */
    _Atomic uint64_t err_pub;
    uint64_t done, bytes;
    uint64_t e_connect, e_io, e_status, e_timeout, e_parse;
} worker;

static worker W[MAX_THREADS];

static void publish(worker *w)
{
    atomic_store_explicit(&w->done_pub, w->done, memory_order_relaxed);
    atomic_store_explicit(&w->err_pub,
                          w->e_connect + w->e_io + w->e_status + w->e_timeout +
                              w->e_parse,
                          memory_order_relaxed);
}

/* Case-insensitive search for header @name in head [p, p+n). */
static const char *find_header(const char *p, size_t n, const char *name)
{
    size_t k = strlen(name);
    for (const char *q = p; q + k + 2 <= p + n; q++) {
        if ((q == p || q[-1] == '\n') && strncasecmp(q, name, k) == 0)
            return q + k;
    }
    return NULL;
}

/*
 * Read one response whose first byte may already be in buf[*have]; on
 * success the bytes after it are moved to the front. Returns 0, or a
 * negative errno / -EPROTO for a malformed response. *close_after is set
 * when the server announced it will close.
 */
static int read_response(int fd, char *buf, size_t *have, int *status,
                         int *close_after, int64_t deadline)
{
    size_t head = 0;
    for (;;) {
        char *e = *have >= 4 ? memmem(buf, *have, "\r\n\r\n", 4) : NULL;
        if (e) {
            head = (size_t)(e - buf) + 4;
            break;
        }
        if (*have == RBUF)
            return -EPROTO;
        ssize_t k = weft_recv(fd, buf + *have, RBUF - *have, 0, deadline);
        if (k == 0)
            return -ECONNRESET;
        if (k < 0)
            return (int)k;
        *have += (size_t)k;
    }
    if (head < 12 || memcmp(buf, "HTTP/1.", 7) != 0)
        return -EPROTO;
    *status = atoi(buf + 9);
    const char *cl = find_header(buf, head, "content-length:");
    if (!cl)
        return -EPROTO; /* this client only speaks Content-Length framing */
    size_t body = (size_t)strtoull(cl, NULL, 10);
    const char *ch = find_header(buf, head, "connection:");
    *close_after = ch && strncasecmp(ch + strspn(ch, " \t"), "close", 5) == 0;
    size_t total = head + body;
    while (*have < total) {
        /* Large bodies: drop what we have and keep counting. */
        size_t keep = *have;
        if (keep == RBUF) {
            total -= keep;
            keep = *have = 0;
        }
        ssize_t k = weft_recv(fd, buf + keep, RBUF - keep, 0, deadline);
        if (k == 0)
            return -ECONNRESET;
        if (k < 0)
            return (int)k;
        *have += (size_t)k;
    }
    memmove(buf, buf + total, *have - total);
    *have -= total;
    return 0;
}

static void count_error(worker *w, int rc)
{
    if (rc == -ETIMEDOUT)
        w->e_timeout++;
    else if (rc == -EPROTO)
        w->e_parse++;
    else
        w->e_io++;
}

static void *client_main(void *arg)
{
    worker *w = arg;
    char *buf = malloc(RBUF);
    if (!buf)
        return NULL;
    int fd = -1;
    while (weft_now() < O.end) {
        if (fd < 0) {
            fd = weft_tcp_connect(O.host, O.port, weft_deadline_in(5 * SEC));
            if (fd < 0) {
                w->e_connect++;
                publish(w);
                weft_sleep(SEC / 100);
                continue;
            }
        }
        int64_t t0 = weft_now();
        int64_t deadline = (t0 > O.end ? t0 : O.end) + 5 * SEC;
        size_t sent = 0;
        int rc = 0;
        while (rc == 0 && sent < O.req_len) {
            ssize_t k = weft_send(fd, O.req + sent, O.req_len - sent, 0, deadline);
            if (k < 0)
                rc = (int)k;
            else
                sent += (size_t)k;
        }
        size_t have = 0;
        int closing = 0;
        for (int i = 0; rc == 0 && i < O.pipeline; i++) {
            int status = 0;
            rc = read_response(fd, buf, &have, &status, &closing, deadline);
            if (rc < 0)
                break;
            h_add(&w->h, (uint64_t)(weft_now() - t0));
            w->done++;
            if (status < 200 || status > 299)
                w->e_status++;
            if (closing && i + 1 < O.pipeline)
                rc = -ECONNRESET; /* the rest of the batch is lost */
        }
        if (rc < 0)
            count_error(w, rc);
        publish(w);
        if (rc < 0 || closing) {
            weft_close(fd);
            fd = -1;
        }
    }
    if (fd >= 0)
        weft_close(fd);
    free(buf);
    return NULL;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    weft_sched_t *s;
    if (weft_sched_create(&s, NULL) < 0) {
        w->e_connect += (uint64_t)w->nconns;
        return NULL;
    }
    for (int i = 0; i < w->nconns; i++)
        if (weft_spawn(client_main, w, NULL, NULL) < 0)
            w->e_connect++;
    weft_sched_run(s);
    weft_sched_destroy(s);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: http_load [--host ADDR] [--port P] [--connections C] "
            "[--duration SECS]\n"
            "                 [--threads T] [--path /] [--pipeline D] "
            "[--progress] [--json]\n");
    exit(2);
}

static void fmt_lat(char *out, size_t n, uint64_t ns)
{
    if (ns < 1000000)
        snprintf(out, n, "%.1f us", (double)ns / 1e3);
    else if (ns < 1000000000)
        snprintf(out, n, "%.2f ms", (double)ns / 1e6);
    else
        snprintf(out, n, "%.2f s", (double)ns / 1e9);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--progress")) {
            O.progress = 1;
            continue;
        }
        if (!strcmp(a, "--json")) {
            O.json = 1;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--host"))
            O.host = v;
        else if (!strcmp(a, "--port"))
            O.port = atoi(v);
        else if (!strcmp(a, "--connections"))
            O.conns = atoi(v);
        else if (!strcmp(a, "--duration"))
            O.duration = atof(v);
        else if (!strcmp(a, "--threads"))
            O.threads = atoi(v);
        else if (!strcmp(a, "--path"))
            O.path = v;
        else if (!strcmp(a, "--pipeline"))
            O.pipeline = atoi(v);
        else
            usage();
    }
    if (O.conns < 1 || O.threads < 1 || O.threads > MAX_THREADS ||
        O.pipeline < 1 || O.pipeline > 256 || O.duration <= 0 || O.port <= 0)
        usage();
    if (O.threads > O.conns)
        O.threads = O.conns;
    if (!isatty(2) && !O.progress)
        O.progress = -1;

    char one[1024];
    int n = snprintf(one, sizeof one, "GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n",
                     O.path, O.host, O.port);
    if (n <= 0 || (size_t)n >= sizeof one)
        usage();
    O.req_len = (size_t)n * (size_t)O.pipeline;
    O.req = malloc(O.req_len);
    if (!O.req)
        return 1;
    for (int i = 0; i < O.pipeline; i++)
        memcpy(O.req + (size_t)i * (size_t)n, one, (size_t)n);

    O.start = weft_now();
    O.end = O.start + (int64_t)(O.duration * 1e9);
    for (int t = 0; t < O.threads; t++) {
        W[t].index = t;
        W[t].nconns = O.conns / O.threads + (t < O.conns % O.threads);
        if (pthread_create(&W[t].tid, NULL, worker_main, &W[t]) != 0) {
            fprintf(stderr, "http_load: cannot start thread\n");
            return 1;
        }
    }
    /* Live progress from the main thread, which runs no fibers. */
    uint64_t last = 0;
    int64_t last_t = O.start;
    while (weft_now() < O.end) {
        struct timespec ts = {0, 250 * 1000000L};
        nanosleep(&ts, NULL);
        if (O.progress < 0)
            continue;
        uint64_t done = 0, errs = 0;
        for (int t = 0; t < O.threads; t++) {
            done += atomic_load_explicit(&W[t].done_pub, memory_order_relaxed);
            errs += atomic_load_explicit(&W[t].err_pub, memory_order_relaxed);
        }
        int64_t now = weft_now();
        double rate = (double)(done - last) * 1e9 / (double)(now - last_t);
        fprintf(stderr, "\r  %5.1fs / %.0fs  %10llu requests  %9.0f req/s  %llu errors   ",
                (double)(now - O.start) / 1e9, O.duration, (unsigned long long)done,
                rate, (unsigned long long)errs);
        last = done;
        last_t = now;
    }
    for (int t = 0; t < O.threads; t++)
        pthread_join(W[t].tid, NULL);
    double secs = (double)(weft_now() - O.start) / 1e9;
    if (O.progress > 0)
        fputc('\n', stderr);

    static hist all;
    uint64_t done = 0, ec = 0, eio = 0, est = 0, eto = 0, ep = 0;
    for (int t = 0; t < O.threads; t++) {
        worker *w = &W[t];
        for (int i = 0; i < H_BUCKETS; i++)
            all.n[i] += w->h.n[i];
        all.count += w->h.count;
        if (w->h.max > all.max)
            all.max = w->h.max;
        done += w->done;
        ec += w->e_connect;
        eio += w->e_io;
        est += w->e_status;
        eto += w->e_timeout;
        ep += w->e_parse;
    }
    uint64_t errors = ec + eio + est + eto + ep;
    double rps = (double)done / secs;
    uint64_t p50 = h_pct(&all, 50), p90 = h_pct(&all, 90), p99 = h_pct(&all, 99);
    if (O.json) {
        printf("{\"requests\":%llu,\"errors\":%llu,\"seconds\":%.3f,\"rps\":%.1f,"
               "\"p50_ns\":%llu,\"p90_ns\":%llu,\"p99_ns\":%llu,\"max_ns\":%llu,"
               "\"connections\":%d,\"threads\":%d,\"pipeline\":%d}\n",
               (unsigned long long)done, (unsigned long long)errors, secs, rps,
               (unsigned long long)p50, (unsigned long long)p90,
               (unsigned long long)p99, (unsigned long long)all.max, O.conns,
               O.threads, O.pipeline);
    } else {
        char a[32], b[32], c[32], d[32];
        fmt_lat(a, sizeof a, p50);
        fmt_lat(b, sizeof b, p90);
        fmt_lat(c, sizeof c, p99);
        fmt_lat(d, sizeof d, all.max);
        printf("  %-12s %-8s %-12s %-10s %-10s %-10s %-10s\n", "requests", "errors",
               "req/s", "p50", "p90", "p99", "max");
        printf("  %-12llu %-8llu %-12.0f %-10s %-10s %-10s %-10s\n",
               (unsigned long long)done, (unsigned long long)errors, rps, a, b, c, d);
        printf("  (%d connections on %d thread%s, pipeline %d, %.1f s; errors: "
               "connect %llu, socket %llu, timeout %llu, non-2xx %llu, malformed %llu)\n",
               O.conns, O.threads, O.threads > 1 ? "s" : "", O.pipeline, secs,
               (unsigned long long)ec, (unsigned long long)eio,
               (unsigned long long)eto, (unsigned long long)est,
               (unsigned long long)ep);
    }
    free(O.req);
    return errors == 0 && done > 0 ? 0 : 1;
}
