/*
 * pool_demo — many concurrent requests, few database connections.
 *
 * Fetches N items over HTTP from the example server (GET PREFIX1.txt ..
 * PREFIXN.txt, static files of http_server --root) with C client fibers on
 * one thread, each with its own keep-alive connection, and stores every
 * body in PostgreSQL through a weft_pool of S connections (libpq in
 * non-blocking mode, contrib/pg/wpg.c). Prints progress and a summary:
 * items, time, most requests in flight at once, pool statistics, and a
 * check in the database that every item was stored exactly once. With
 * --compare the same job runs sequentially first (one fiber: fetch, store,
 * next), and the speedup is printed.
 *
 *   pool_demo --port P [--host 127.0.0.1] [--items N] [--concurrency C]
 *             [--pool-size S] [--prefix /items/] [--conninfo STR]
 *             [--delay-ms D] [--compare] [--json] [--quiet]
 *
 * --conninfo defaults to $WEFT_PG_CONNINFO (scripts/pg.sh sets it).
 * --delay-ms D waits D ms in the client before each request: a stand-in
 * for a slow remote server (the example server answers at once on
 * loopback); it is reported as simulated whenever used.
 * --json prints one JSON line per run instead of the summary.
 */
#include "weft.h"
#include "pg/wpg.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MS 1000000LL
#define SEC 1000000000LL

static struct {
    const char *host, *prefix, *conninfo;
    int port, items, concurrency, pool_size, delay_ms, compare, json, quiet;
} O = {"127.0.0.1", "/items/", NULL, 0, 1000, 200, 2, 0, 0, 0, 0};

/* One run of the job. */
typedef struct job {
    const char *label;     /* rows are stored under this run label       */
    int concurrency;
    int next;              /* next item to fetch                         */
    int fetched, stored, failed, retries;
    int in_flight, max_in_flight;
    int workers_left;
    int64_t t0, t1;
    weft_pool_t *pool;
    weft_pool_stats_t pst;
    long long rows, distinct_ids;
} job_t;

/* ---- a tiny HTTP/1.1 client (keep-alive, Content-Length bodies) --------- */
typedef struct http_conn {
    int fd;
    char buf[65536];
    size_t len;            /* bytes buffered                               */
} http_conn;

static int http_open(http_conn *h)
{
    h->len = 0;
    h->fd = weft_tcp_connect(O.host, O.port, weft_deadline_in(10 * SEC));
    return h->fd < 0 ? h->fd : 0;
}

static void http_close(http_conn *h)
{
    if (h->fd >= 0)
        weft_close(h->fd);
    h->fd = -1;
}

/* GET @path; on success the body is at *@body (in h->buf, valid until the
 * next call) and its length is returned. */
static ssize_t http_get(http_conn *h, const char *path, const char **body)
{
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, O.host);
    int64_t dl = weft_deadline_in(10 * SEC);
    int rc = weft_write_all(h->fd, req, (size_t)n, NULL, dl);
    if (rc < 0)
        return rc;
    h->len = 0;
    char *end = NULL;
    for (;;) {
        if (h->len == sizeof h->buf - 1)
            return -EMSGSIZE;
        ssize_t got = weft_recv(h->fd, h->buf + h->len, sizeof h->buf - 1 - h->len, 0, dl);
        if (got < 0)
            return got;
        if (got == 0)
            return -ECONNRESET; /* closed (e.g. keep-alive timeout) */
        h->len += (size_t)got;
        h->buf[h->len] = '\0';
        if ((end = strstr(h->buf, "\r\n\r\n")))
            break;
    }
    int status = 0;
    if (sscanf(h->buf, "HTTP/1.%*d %d", &status) != 1)
        return -EPROTO;
    long clen = -1;
    for (char *line = strstr(h->buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n"))
        if (!strncasecmp(line + 2, "Content-Length:", 15))
            clen = strtol(line + 17, NULL, 10);
    if (clen < 0)
        return -EPROTO;
    size_t head = (size_t)(end + 4 - h->buf);
    if (head + (size_t)clen >= sizeof h->buf)
        return -EMSGSIZE;
    while (h->len < head + (size_t)clen) {
        ssize_t got = weft_recv(h->fd, h->buf + h->len, head + (size_t)clen - h->len, 0, dl);
        if (got < 0)
            return got;
        if (got == 0)
            return -ECONNRESET;
        h->len += (size_t)got;
    }
    if (status != 200)
        return -ENOENT;
    h->buf[head + (size_t)clen] = '\0';
    *body = h->buf + head;
    return clen;
}

/* Store one item; a lost connection is replaced and the insert retried. */
static int store(job_t *j, int id, const char *body, size_t len)
{
    char ids[16], lens[24];
    snprintf(ids, sizeof ids, "%d", id);
    snprintf(lens, sizeof lens, "%zu", len);
    const char *params[4] = {j->label, ids, lens, body};
    for (int attempt = 0;; attempt++) {
        weft_pool_lease_t l;
        int rc = weft_pool_acquire(j->pool, &l, weft_deadline_in(30 * SEC));
        if (rc < 0)
            return rc;
        rc = wpg_exec(l.res, "insert into pool_demo_items(run, id, bytes, body) "
                             "values ($1, $2::int, $3::int, $4)",
                      4, params, NULL, l.deadline);
        if (rc == -EREMOTEIO)
            fprintf(stderr, "pool_demo: item %d: %s\n", id, wpg_error(l.res));
        bool broken = rc == -ECONNRESET || rc == -ETIMEDOUT;
        weft_pool_release(j->pool, &l, broken ? WEFT_POOL_BROKEN : 0);
        if (!broken || attempt == 2)
            return rc;
        j->retries++;
    }
}

static void *worker(void *arg)
{
    job_t *j = arg;
    http_conn *h = malloc(sizeof *h);
    if (!h) {
        j->workers_left--;
        return NULL;
    }
    h->fd = -1;
    int id;
    while ((id = j->next++) <= O.items) {
        char path[256];
        snprintf(path, sizeof path, "%s%d.txt", O.prefix, id);
        if (O.delay_ms)
            weft_sleep(O.delay_ms * MS);
        const char *body = NULL;
        ssize_t n = -ECONNRESET;
        j->in_flight++;
        if (j->in_flight > j->max_in_flight)
            j->max_in_flight = j->in_flight;
        for (int attempt = 0; attempt < 2 && n == -ECONNRESET; attempt++) {
            if (h->fd < 0 && (n = http_open(h)) < 0)
                break;
            n = http_get(h, path, &body);
            if (n < 0)
                http_close(h); /* reconnect once: keep-alive may have ended */
        }
        j->in_flight--;
        if (n < 0) {
            fprintf(stderr, "pool_demo: GET %s: %s\n", path, strerror((int)-n));
            j->failed++;
            continue;
        }
        j->fetched++;
        int rc = store(j, id, body, (size_t)n);
        if (rc < 0) {
            fprintf(stderr, "pool_demo: storing item %d: %s\n", id, strerror(-rc));
            j->failed++;
        } else {
            j->stored++;
        }
    }
    http_close(h);
    free(h);
    j->workers_left--;
    return NULL;
}

static void *progress(void *arg)
{
    job_t *j = arg;
    int tty = isatty(2);
    while (weft_sleep(tty ? 100 * MS : 500 * MS) == 0) {
        weft_pool_stats_t st;
        weft_pool_stats(j->pool, &st);
        fprintf(stderr, "%s  %-10s fetched %6d/%d  stored %6d  requests in flight %4d  "
                "db pool: %zu in use, %zu fibers waiting%s",
                tty ? "\r" : "", j->label, j->fetched, O.items, j->stored, j->in_flight,
                st.in_use, st.waiters, tty ? "   " : "\n");
    }
    if (tty)
        fprintf(stderr, "\r%*s\r", 110, "");
    return NULL;
}

static int run_job(job_t *j)
{
    weft_pool_opts_t po = {0};
    po.max_size = (size_t)O.pool_size;
    po.use_timeout = 10 * SEC;
    int rc = weft_pool_create(&j->pool, &wpg_pool_ops, (void *)O.conninfo, &po);
    if (rc < 0)
        return rc;
    /* Clear this run's rows (one pooled connection, like everything). */
    weft_pool_lease_t l;
    rc = weft_pool_acquire(j->pool, &l, weft_deadline_in(30 * SEC));
    if (rc < 0) {
        weft_pool_close(j->pool, 0);
        weft_pool_destroy(j->pool);
        return rc;
    }
    const char *lab[1] = {j->label};
    rc = wpg_exec(l.res, "create table if not exists pool_demo_items("
                         "run text, id int, bytes int not null, body text not null, "
                         "stored_at timestamptz default now(), primary key (run, id))",
                  0, NULL, NULL, l.deadline);
    if (rc == 0)
        rc = wpg_exec(l.res, "delete from pool_demo_items where run = $1", 1, lab, NULL, l.deadline);
    if (rc < 0)
        fprintf(stderr, "pool_demo: preparing the table: %s\n", wpg_error(l.res));
    weft_pool_release(j->pool, &l, 0);
    if (rc < 0)
        return rc;

    weft_fiber_t prog = {0};
    if (!O.quiet && !O.json)
        weft_spawn(progress, j, NULL, &prog);
    j->next = 1;
    j->t0 = weft_now();
    j->workers_left = j->concurrency;
    weft_fiber_t *fs = calloc((size_t)j->concurrency, sizeof *fs);
    if (!fs)
        return -ENOMEM;
    for (int i = 0; i < j->concurrency; i++)
        if (weft_spawn(worker, j, NULL, &fs[i]) < 0)
            j->workers_left--;
    for (int i = 0; i < j->concurrency; i++)
        if (fs[i].id)
            weft_join(fs[i], NULL, WEFT_FOREVER);
    free(fs);
    j->t1 = weft_now();
    if (prog.id) {
        weft_cancel(prog);
        weft_join(prog, NULL, WEFT_FOREVER);
    }
    /* Check in the database: every item exactly once. */
    rc = weft_pool_acquire(j->pool, &l, weft_deadline_in(30 * SEC));
    if (rc == 0) {
        rc = wpg_exec_int(l.res, "select count(*) from pool_demo_items where run = $1",
                          1, lab, &j->rows, l.deadline);
        if (rc == 0)
            rc = wpg_exec_int(l.res, "select count(distinct id) from pool_demo_items where run = $1",
                              1, lab, &j->distinct_ids, l.deadline);
        weft_pool_release(j->pool, &l, 0);
    }
    weft_pool_stats(j->pool, &j->pst);
    weft_pool_close(j->pool, weft_deadline_in(10 * SEC));
    weft_pool_destroy(j->pool);
    return rc;
}

static void report(const job_t *j)
{
    double secs = (double)(j->t1 - j->t0) / 1e9;
    if (O.json) {
        printf("{\"run\":\"%s\",\"items\":%d,\"concurrency\":%d,\"pool_size\":%d,"
               "\"seconds\":%.6f,\"items_per_s\":%.1f,\"max_in_flight\":%d,"
               "\"stored\":%d,\"failed\":%d,\"rows\":%lld,\"distinct\":%lld,"
               "\"db_created\":%llu,\"db_peak\":%zu,\"delay_ms\":%d}\n",
               j->label, O.items, j->concurrency, O.pool_size, secs,
               secs > 0 ? O.items / secs : 0.0, j->max_in_flight, j->stored, j->failed,
               j->rows, j->distinct_ids, (unsigned long long)j->pst.created,
               j->pst.peak_size, O.delay_ms);
        return;
    }
    printf("%s: %d items, %d client fiber%s, pool of %d database connection%s\n",
           j->label, O.items, j->concurrency, j->concurrency == 1 ? "" : "s",
           O.pool_size, O.pool_size == 1 ? "" : "s");
    printf("  time %.3f s (%.0f items/s), at most %d requests in flight at once\n",
           secs, secs > 0 ? O.items / secs : 0.0, j->max_in_flight);
    printf("  fetched %d, stored %d, failed %d, store retries on a lost connection %d\n",
           j->fetched, j->stored, j->failed, j->retries);
    printf("  pool: peak size %zu of %d, created %llu, destroyed %llu, acquired %llu, "
           "broken %llu, acquire timeouts %llu\n",
           j->pst.peak_size, O.pool_size, (unsigned long long)j->pst.created,
           (unsigned long long)j->pst.destroyed, (unsigned long long)j->pst.acquired,
           (unsigned long long)j->pst.broken, (unsigned long long)j->pst.timeouts);
    printf("  database: %lld rows, %lld distinct items: %s\n", j->rows, j->distinct_ids,
           (j->rows == O.items && j->distinct_ids == O.items) ? "every item stored exactly once"
                                                              : "MISMATCH");
}

static void *main_fiber(void *arg)
{
    int *status = arg;
    if (O.delay_ms && !O.json)
        printf("(simulated upstream latency: each request waits %d ms in the client first)\n",
               O.delay_ms);
    job_t seq = {0}, con = {0};
    double s_secs = 0;
    if (O.compare) {
        seq.label = "sequential";
        seq.concurrency = 1;
        if (run_job(&seq) < 0) {
            *status = 1;
            return NULL;
        }
        report(&seq);
        s_secs = (double)(seq.t1 - seq.t0) / 1e9;
        if (seq.rows != O.items || seq.distinct_ids != O.items || seq.failed)
            *status = 1;
    }
    con.label = "concurrent";
    con.concurrency = O.concurrency;
    if (run_job(&con) < 0) {
        *status = 1;
        return NULL;
    }
    report(&con);
    if (con.rows != O.items || con.distinct_ids != O.items || con.failed)
        *status = 1;
    double c_secs = (double)(con.t1 - con.t0) / 1e9;
    if (O.compare && !O.json && c_secs > 0)
        printf("speedup of %d concurrent fibers over sequential: %.1fx (%.3f s -> %.3f s), "
               "still with %d database connection%s\n",
               O.concurrency, s_secs / c_secs, s_secs, c_secs, O.pool_size,
               O.pool_size == 1 ? "" : "s");
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: pool_demo --port P [--host ADDR] [--items N] [--concurrency C]\n"
                    "                 [--pool-size S] [--prefix /items/] [--conninfo STR]\n"
                    "                 [--delay-ms D] [--compare] [--json] [--quiet]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with the progress lines */
    O.conninfo = getenv("WEFT_PG_CONNINFO");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--compare")) O.compare = 1;
        else if (!strcmp(a, "--json")) O.json = 1;
        else if (!strcmp(a, "--quiet")) O.quiet = 1;
        else if (!v) usage();
        else if (!strcmp(a, "--port")) O.port = atoi(v), i++;
        else if (!strcmp(a, "--host")) O.host = v, i++;
        else if (!strcmp(a, "--items")) O.items = atoi(v), i++;
        else if (!strcmp(a, "--concurrency")) O.concurrency = atoi(v), i++;
        else if (!strcmp(a, "--pool-size")) O.pool_size = atoi(v), i++;
        else if (!strcmp(a, "--prefix")) O.prefix = v, i++;
        else if (!strcmp(a, "--conninfo")) O.conninfo = v, i++;
        else if (!strcmp(a, "--delay-ms")) O.delay_ms = atoi(v), i++;
        else usage();
    }
    if (O.port <= 0 || O.items < 1 || O.concurrency < 1 || O.pool_size < 1 || O.delay_ms < 0)
        usage();
    if (!O.conninfo || !*O.conninfo) {
        fprintf(stderr, "pool_demo: no database: set WEFT_PG_CONNINFO or --conninfo "
                        "(scripts/pg.sh run starts a throw-away server)\n");
        return 2;
    }
    int status = 0;
    int rc = weft_run(main_fiber, &status, NULL);
    if (rc < 0) {
        fprintf(stderr, "pool_demo: %s\n", strerror(-rc));
        return 1;
    }
    weft_offload_shutdown();
    return status;
}
