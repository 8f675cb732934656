/*
 * soak_server — the C side of bench/soak.sh: on one weft scheduler, the
 * example HTTP server (contrib/http), an echo server, and a pool of
 * PostgreSQL connections (contrib/pg) kept busy by its own fibers; every
 * --interval seconds one line of the scheduler's and the parts' counters.
 *
 *   soak_server --http-port P --echo-port Q [--interval S] [--conninfo STR]
 *               [--db-fibers N] [--pool-size M]
 *
 * Prints "soak_server: ready" once listening, then one line per interval:
 *   stats T fibers F handles H timers T waits W fd_waits D ops O
 *         stacks_cached C http_open N http_requests R echo_open E
 *         echo_bytes B db_queries Q db_errors X pool_size S pool_created C
 *         pool_destroyed D
 * Without --conninfo (and $WEFT_PG_CONNINFO) the database part is off.
 * SIGINT/SIGTERM: the servers stop (graceful HTTP drain), the database
 * fibers finish, the pool closes, and the process exits 0 once every fiber
 * has ended.
 *
 * The database fibers run "select $1::int" through weft_pool_with() with
 * a use timeout, and every tenth query "select pg_sleep(0.002)", so that
 * queries overlap on the pool; the pool recycles a connection after 200
 * uses and closes idle ones after 2 s, so connections come and go all
 * along.
 */
#include "weft.h"
#include "http/http_srv.h"
#include "pg/wpg.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MS 1000000LL

static struct {
    int http_port, echo_port, db_fibers, pool_size;
    int64_t interval;
    const char *conninfo;
    int stopping;
    http_srv *http;
    int echo_lfd;
    weft_fiber_t echo_acceptor;
    long echo_open;
    unsigned long long echo_bytes, db_queries, db_errors;
    weft_pool_t *pool;
    weft_waitgroup_t db_wg;
    weft_fiber_t ticker;
} G = {.db_fibers = 16, .pool_size = 4, .interval = 10 * SEC};

/* ---- echo --------------------------------------------------------------- */

static void *echo_conn(void *arg)
{
    int fd = (int)(long)arg;
    char buf[16384];
    ssize_t n;
    G.echo_open++;
    while (!G.stopping &&
           (n = weft_read(fd, buf, sizeof buf, weft_deadline_in(5 * SEC))) > 0) {
        if (weft_write_all(fd, buf, (size_t)n, NULL, weft_deadline_in(5 * SEC)) < 0)
            break;
        G.echo_bytes += (unsigned long long)n;
    }
    weft_close(fd);
    G.echo_open--;
    return NULL;
}

static void *echo_accept(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = weft_accept(G.echo_lfd, NULL, NULL, WEFT_FOREVER);
        if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM || fd == -ENOBUFS) {
            weft_sleep(10 * MS);
            continue;
        }
        if (fd < 0)
            break;
        if (weft_spawn(echo_conn, (void *)(long)fd, NULL, NULL) < 0)
            weft_close(fd);
    }
    weft_close(G.echo_lfd);
    return NULL;
}

/* ---- the database pool ------------------------------------------------- */

static int db_use(void *arg, weft_pool_lease_t *l)
{
    unsigned long long n = *(unsigned long long *)arg;
    char v[24];
    snprintf(v, sizeof v, "%llu", n % 1000000);
    const char *params[1] = {v};
    long long got = -1;
    int rc;
    if (n % 10 == 0)
        rc = wpg_exec(l->res, "select pg_sleep(0.002)", 0, NULL, NULL, l->deadline);
    else if ((rc = wpg_exec_int(l->res, "select $1::int", 1, params, &got, l->deadline)) == 0 &&
             got != (long long)(n % 1000000))
        rc = -EPROTO;
    if (rc == -ECONNRESET || rc == -ETIMEDOUT)
        l->res = NULL; /* broken: the pool destroys it */
    return rc;
}

static void *db_fiber(void *arg)
{
    (void)arg;
    while (!G.stopping) {
        unsigned long long n = G.db_queries + G.db_errors;
        int rc = weft_pool_with(G.pool, db_use, &n, weft_deadline_in(10 * SEC));
        if (rc == -ESHUTDOWN || rc == -ECANCELED)
            break;
        if (rc < 0) {
            G.db_errors++;
            weft_sleep(100 * MS);
        } else {
            G.db_queries++;
        }
        weft_sleep(MS); /* about a thousand queries a second in all */
    }
    weft_waitgroup_done(&G.db_wg);
    return NULL;
}

/* ---- stats and stop ---------------------------------------------------- */

static void print_stats(int64_t t0)
{
    weft_stats_t st;
    weft_sched_stats(weft_sched_self(), &st);
    http_srv_stats hs;
    http_srv_get_stats(G.http, &hs);
    weft_pool_stats_t ps = {0};
    if (G.pool)
        weft_pool_stats(G.pool, &ps);
    printf("stats %.1f fibers %zu handles %zu timers %zu waits %zu fd_waits %zu ops %zu "
           "stacks_cached %zu http_open %llu http_requests %llu echo_open %ld "
           "echo_bytes %llu db_queries %llu db_errors %llu pool_size %zu "
           "pool_created %llu pool_destroyed %llu\n",
           (double)(weft_now() - t0) / SEC, st.fibers, st.handles, st.timers, st.waits,
           st.fd_waits, st.ops, st.stacks_cached, (unsigned long long)hs.open,
           (unsigned long long)hs.requests, G.echo_open, G.echo_bytes, G.db_queries,
           G.db_errors, ps.size, (unsigned long long)ps.created,
           (unsigned long long)ps.destroyed);
    fflush(stdout);
}

static void *ticker(void *arg)
{
    int64_t t0 = *(int64_t *)arg;
    while (weft_sleep(G.interval) == 0)
        print_stats(t0);
    return NULL;
}

static void *stopper(void *arg)
{
    sigset_t *mask = arg;
    int sfd = signalfd(-1, mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        perror("soak_server: signalfd");
        exit(1);
    }
    struct signalfd_siginfo si;
    ssize_t n = weft_read(sfd, &si, sizeof si, WEFT_FOREVER);
    weft_close(sfd);
    if (n != (ssize_t)sizeof si)
        return NULL;
    fprintf(stderr, "soak_server: %s, stopping\n", strsignal((int)si.ssi_signo));
    G.stopping = 1;
    http_srv_stop(G.http);
    weft_cancel(G.echo_acceptor);
    weft_cancel(G.ticker);
    if (G.pool) {
        weft_waitgroup_wait(&G.db_wg, weft_deadline_in(10 * SEC));
        weft_pool_close(G.pool, weft_deadline_in(10 * SEC));
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: soak_server --http-port P --echo-port Q [--interval S] "
                    "[--conninfo STR] [--db-fibers N] [--pool-size M]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    G.conninfo = getenv("WEFT_PG_CONNINFO");
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *a = argv[i], *v = argv[++i];
        if (!strcmp(a, "--http-port"))
            G.http_port = atoi(v);
        else if (!strcmp(a, "--echo-port"))
            G.echo_port = atoi(v);
        else if (!strcmp(a, "--interval"))
            G.interval = (int64_t)(atof(v) * SEC);
        else if (!strcmp(a, "--conninfo"))
            G.conninfo = v;
        else if (!strcmp(a, "--db-fibers"))
            G.db_fibers = atoi(v);
        else if (!strcmp(a, "--pool-size"))
            G.pool_size = atoi(v);
        else
            usage();
    }
    if (G.http_port < 0 || G.echo_port < 0 || G.interval <= 0 || G.db_fibers < 0 ||
        G.pool_size < 1)
        usage();
    if (G.conninfo && !*G.conninfo)
        G.conninfo = NULL;

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigset_t all = mask;
    sigaddset(&all, SIGPIPE); /* sendfile(2): the HTTP server's static files */
    pthread_sigmask(SIG_BLOCK, &all, NULL);

    weft_sched_t *s;
    int rc = weft_sched_create(&s, NULL);
    if (rc < 0) {
        fprintf(stderr, "soak_server: scheduler: %s\n", strerror(-rc));
        return 1;
    }
    int hfd = weft_tcp_listen("127.0.0.1", G.http_port, 0, 0);
    G.echo_lfd = weft_tcp_listen("127.0.0.1", G.echo_port, 0, 0);
    if (hfd < 0 || G.echo_lfd < 0) {
        fprintf(stderr, "soak_server: listen: %s\n", strerror(-(hfd < 0 ? hfd : G.echo_lfd)));
        return 1;
    }
    http_srv_opts ho = {0};
    ho.idle_timeout_ns = 5 * SEC;
    if ((rc = http_srv_start(&G.http, hfd, &ho)) < 0) {
        fprintf(stderr, "soak_server: http: %s\n", strerror(-rc));
        return 1;
    }
    weft_spawn(echo_accept, NULL, NULL, &G.echo_acceptor);
    weft_detach(G.echo_acceptor);
    if (G.conninfo && G.db_fibers > 0) {
        weft_pool_opts_t po = {0};
        po.max_size = (size_t)G.pool_size;
        po.idle_timeout = 2 * SEC;
        po.max_uses = 200;
        po.use_timeout = 5 * SEC;
        if ((rc = weft_pool_create(&G.pool, &wpg_pool_ops, (void *)G.conninfo, &po)) < 0) {
            fprintf(stderr, "soak_server: pool: %s\n", strerror(-rc));
            return 1;
        }
        weft_waitgroup_add(&G.db_wg, G.db_fibers);
        for (int i = 0; i < G.db_fibers; i++)
            weft_spawn(db_fiber, NULL, NULL, NULL);
    }
    int64_t t0 = weft_now();
    weft_spawn(ticker, &t0, NULL, &G.ticker);
    weft_detach(G.ticker);
    weft_spawn(stopper, &mask, NULL, NULL);
    printf("soak_server: ready: http %d, echo %d, %s backend, database %s\n",
           weft_local_port(hfd), weft_local_port(G.echo_lfd), weft_sched_backend(s),
           G.pool ? "on" : "off");
    fflush(stdout);
    rc = weft_sched_run(s);
    print_stats(t0);
    http_srv_free(G.http);
    if (G.pool)
        weft_pool_destroy(G.pool);
    weft_sched_destroy(s);
    return rc < 0;
}
