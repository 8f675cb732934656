/* PostgreSQL through the pool, libpq in non-blocking mode on weft fd waits
 * (contrib/pg/wpg.c), against a real server: WEFT_PG_CONNINFO, set by
 * scripts/test.d/pg.sh (scripts/pg.sh starts a throw-away cluster).
 *   - 300 fibers each write one row through a pool of 2 connections: every
 *     row exactly once, never more than 2 server connections;
 *   - the loop keeps running while a query is in flight;
 *   - SQL errors come back as -EREMOTEIO with the SQLSTATE, the connection
 *     stays usable;
 *   - a killed backend (pg_terminate_backend) is detected: idle (by the
 *     pool's validate), in use (-ECONNRESET, released broken), and
 *     mid-query; the pool replaces it;
 *   - a use that exceeds the pool's use_timeout is cut off (-ETIMEDOUT);
 *   - a refused connection is a create failure passed through. */
#include "harness.h"
#include "pg/wpg.h"

#define MS 1000000LL
#define NROWS 300

static const char *conninfo;
static int quiet_connect_errors;
static char appname_ci[1024];
static char appname[64];

static int c_create(void *ctx, void **out, int64_t deadline)
{
    (void)ctx;
    char err[256];
    wpg *c;
    int rc = wpg_connect(&c, appname_ci, deadline, err, sizeof err);
    if (rc < 0) {
        if (!quiet_connect_errors)
            fprintf(stderr, "connect: %s (%d)\n", err, rc);
        return rc;
    }
    *out = c;
    return 0;
}

static void c_destroy(void *ctx, void *res)
{
    (void)ctx;
    wpg_close(res);
}

static int c_validate(void *ctx, void *res)
{
    (void)ctx;
    return wpg_check(res);
}

static const weft_pool_ops_t pg_ops = {c_create, c_destroy, c_validate};

static weft_pool_t *mkpool(size_t max, int64_t use_timeout)
{
    weft_pool_opts_t o = {0};
    o.max_size = max;
    o.use_timeout = use_timeout;
    weft_pool_t *p;
    CHECK_EQ(weft_pool_create(&p, &pg_ops, NULL, &o), 0);
    return p;
}

static void close_pool(weft_pool_t *p)
{
    CHECK_EQ(weft_pool_close(p, weft_deadline_in(10000 * MS)), 0);
    CHECK_EQ(weft_pool_destroy(p), 0);
}

/* A separate admin connection, outside the pool. */
static wpg *admin;

static long long admin_int(const char *sql, const char *param)
{
    long long v = -1;
    const char *params[1] = {param};
    int rc = wpg_exec_int(admin, sql, param ? 1 : 0, params, &v,
                          weft_deadline_in(10000 * MS));
    if (rc < 0)
        fprintf(stderr, "admin query failed: %s\n", wpg_error(admin));
    CHECK_EQ(rc, 0);
    return v;
}

/* Terminate backend @pid and wait until it has exited (its socket is
 * closed by then). */
static void kill_backend(int pid)
{
    char p[16];
    snprintf(p, sizeof p, "%d", pid);
    CHECK_EQ(admin_int("select pg_terminate_backend($1::int)::int", p), 1);
    for (int i = 0; i < 1000; i++) {
        if (admin_int("select count(*) from pg_stat_activity where pid = $1::int", p) == 0)
            return;
        CHECK_EQ(weft_sleep(5 * MS), 0);
    }
    CHECK(!"backend did not exit");
}

static long long our_connections(void)
{
    return admin_int("select count(*) from pg_stat_activity "
                     "where application_name = $1", appname);
}

/* Backends exit shortly after their client has gone: wait for the count
 * to come down to @n. */
static void wait_our_connections(long long n)
{
    for (int i = 0; i < 2000 && our_connections() != n; i++)
        CHECK_EQ(weft_sleep(5 * MS), 0);
    CHECK_EQ(our_connections(), n);
}

/* ---- every row exactly once ------------------------------------------- */
typedef struct writer {
    weft_pool_t *p;
    int id;
    int done;
    long long peak_conns;
} writer_t;

static int write_row(weft_pool_t *p, int id)
{
    char ids[16], val[32];
    snprintf(ids, sizeof ids, "%d", id);
    snprintf(val, sizeof val, "row-%d", id);
    const char *params[2] = {ids, val};
    weft_pool_lease_t l;
    int rc = weft_pool_acquire(p, &l, weft_deadline_in(30000 * MS));
    if (rc < 0)
        return rc;
    rc = wpg_exec(l.res, "insert into t_pg_rows(id, val) values ($1::int, $2)",
                  2, params, NULL, l.deadline);
    weft_pool_release(p, &l, (rc == -ECONNRESET || rc == -ETIMEDOUT) ? WEFT_POOL_BROKEN : 0);
    return rc;
}

static void *writer_fiber(void *arg)
{
    writer_t *w = arg;
    CHECK_EQ(write_row(w->p, w->id), 0);
    w->done = 1;
    return NULL;
}

static void *ticker(void *arg)
{
    long *ticks = arg;
    while (weft_sleep(MS) == 0)
        (*ticks)++;
    return NULL;
}

static void test_rows(void)
{
    wait_our_connections(0); /* the last test's have exited */
    weft_pool_t *p = mkpool(2, 0);
    PGresult *r;
    CHECK_EQ(wpg_exec(admin, "drop table if exists t_pg_rows; "
                             "create table t_pg_rows(id int primary key, val text not null)",
                      0, NULL, &r, weft_deadline_in(10000 * MS)), 0);
    PQclear(r);
    static writer_t w[NROWS];
    weft_fiber_t h[NROWS];
    for (int i = 0; i < NROWS; i++) {
        w[i] = (writer_t){p, i + 1, 0, 0};
        CHECK_EQ(weft_spawn(writer_fiber, &w[i], NULL, &h[i]), 0);
    }
    /* While they run, the server never sees more than 2 of our connections. */
    long long peak = 0;
    for (int round = 0; round < 3; round++) {
        long long n = our_connections();
        if (n > peak)
            peak = n;
        weft_yield();
    }
    for (int i = 0; i < NROWS; i++)
        CHECK_EQ(weft_join(h[i], NULL, WEFT_FOREVER), 0);
    CHECK(peak <= 2);
    CHECK_EQ(our_connections(), 2); /* idle in the pool now */
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.peak_size, 2);
    CHECK_EQ(st.created, 2);
    CHECK_EQ(st.acquired, NROWS);
    CHECK_EQ(admin_int("select count(*) from t_pg_rows", NULL), NROWS);
    CHECK_EQ(admin_int("select count(distinct id) from t_pg_rows", NULL), NROWS);
    CHECK_EQ(admin_int("select count(*) from t_pg_rows where val = 'row-' || id", NULL), NROWS);
    CHECK_EQ(admin_int("select min(id) from t_pg_rows", NULL), 1);
    CHECK_EQ(admin_int("select max(id) from t_pg_rows", NULL), NROWS);
    /* writing a row again is a constraint error, not a second row */
    CHECK_EQ(write_row(p, 7), -EREMOTEIO);
    CHECK_EQ(admin_int("select count(*) from t_pg_rows", NULL), NROWS);

    /* The loop runs while a query waits on the server. */
    long ticks = 0;
    weft_fiber_t t;
    CHECK_EQ(weft_spawn(ticker, &ticks, NULL, &t), 0);
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK_EQ(wpg_exec(l.res, "select pg_sleep(0.1)", 0, NULL, NULL, WEFT_FOREVER), 0);
    CHECK(ticks > 0);
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_cancel(t), 0);
    CHECK_EQ(weft_join(t, NULL, WEFT_FOREVER), 0);
    close_pool(p);
    wait_our_connections(0);
}

/* ---- SQL errors are errors ---------------------------------------------- */
static void test_sql_errors(void)
{
    weft_pool_t *p = mkpool(1, 0);
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    wpg *c = l.res;
    PGresult *r;
    CHECK_EQ(wpg_exec(c, "select * from no_such_table", 0, NULL, &r, WEFT_FOREVER), -EREMOTEIO);
    CHECK(r == NULL);
    CHECK(strcmp(wpg_sqlstate(c), "42P01") == 0);
    CHECK(strstr(wpg_error(c), "no_such_table") != NULL);
    CHECK_EQ(wpg_exec(c, "selec 1", 0, NULL, NULL, WEFT_FOREVER), -EREMOTEIO);
    CHECK(strcmp(wpg_sqlstate(c), "42601") == 0);
    const char *zero[1] = {"0"};
    CHECK_EQ(wpg_exec(c, "select 1 / $1::int", 1, zero, NULL, WEFT_FOREVER), -EREMOTEIO);
    CHECK(strcmp(wpg_sqlstate(c), "22012") == 0);
    /* an error in the middle of a multi-statement string */
    CHECK_EQ(wpg_exec(c, "select 1; select 1/0; select 3", 0, NULL, NULL, WEFT_FOREVER), -EREMOTEIO);
    /* the connection is still fine */
    long long v = 0;
    const char *two[1] = {"41"};
    CHECK_EQ(wpg_exec_int(c, "select $1::int + 1", 1, two, &v, WEFT_FOREVER), 0);
    CHECK_EQ(v, 42);
    CHECK(wpg_sqlstate(c)[0] == '\0');
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.created, 1);
    close_pool(p);
}

/* ---- killed backends ------------------------------------------------------ */
static void *sleeper_query(void *arg)
{
    weft_pool_lease_t *l = arg;
    return (void *)(long)wpg_exec(l->res, "select pg_sleep(30)", 0, NULL, NULL,
                                  weft_deadline_in(20000 * MS));
}

static void test_killed_backend(void)
{
    weft_pool_t *p = mkpool(1, 0);
    weft_pool_lease_t l;
    /* idle: the pool's validate notices and replaces it */
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    int pid1 = wpg_backend_pid(l.res);
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    kill_backend(pid1);
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    int pid2 = wpg_backend_pid(l.res);
    CHECK(pid2 != pid1);
    CHECK_EQ(wpg_exec(l.res, "select 1", 0, NULL, NULL, WEFT_FOREVER), 0);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.invalid, 1);
    CHECK_EQ(st.destroyed, 1);
    /* in use: the next statement fails with -ECONNRESET */
    kill_backend(pid2);
    CHECK_EQ(wpg_exec(l.res, "select 1", 0, NULL, NULL, WEFT_FOREVER), -ECONNRESET);
    CHECK_EQ(weft_pool_release(p, &l, WEFT_POOL_BROKEN), 0);
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    int pid3 = wpg_backend_pid(l.res);
    CHECK(pid3 != pid2 && pid3 != pid1);
    /* mid-query: the waiting fiber wakes with -ECONNRESET */
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(sleeper_query, &l, NULL, &f), 0);
    for (int i = 0; i < 2000; i++) {
        char pp[16];
        snprintf(pp, sizeof pp, "%d", pid3);
        if (admin_int("select count(*) from pg_stat_activity where pid = $1::int "
                      "and query like 'select pg_sleep(30)%'", pp) == 1)
            break;
        CHECK_EQ(weft_sleep(2 * MS), 0);
    }
    kill_backend(pid3);
    void *res;
    CHECK_EQ(weft_join(f, &res, WEFT_FOREVER), 0);
    CHECK_EQ((long)res, -ECONNRESET);
    CHECK(strcmp(wpg_sqlstate(l.res), "57P01") == 0 || wpg_error(l.res)[0]);
    CHECK_EQ(weft_pool_release(p, &l, WEFT_POOL_BROKEN), 0);
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), 0);
    CHECK_EQ(wpg_exec(l.res, "select 1", 0, NULL, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_pool_release(p, &l, 0), 0);
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.created, 4);
    CHECK_EQ(st.broken, 2);
    close_pool(p);
}

/* ---- use timeout, refused connection ------------------------------------ */
static int slow_use(void *arg, weft_pool_lease_t *l)
{
    (void)arg;
    return wpg_exec(l->res, "select pg_sleep(30)", 0, NULL, NULL, l->deadline);
}

static void test_timeouts(void)
{
    weft_pool_t *p = mkpool(1, 50 * MS);
    CHECK_EQ(weft_pool_with(p, slow_use, NULL, WEFT_FOREVER), -ETIMEDOUT);
    weft_pool_stats_t st;
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.broken, 1); /* cut off mid-statement: not reused */
    CHECK_EQ(st.destroyed, 1);
    close_pool(p);

    /* a port nobody listens on: the create error comes back as is */
    int lfd = weft_tcp_listen("127.0.0.1", 0, 1, 0);
    CHECK(lfd >= 0);
    int port = weft_local_port(lfd);
    CHECK_EQ(weft_close(lfd), 0);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", appname_ci);
    snprintf(appname_ci, sizeof appname_ci, "host=127.0.0.1 port=%d user=weft dbname=postgres", port);
    quiet_connect_errors = 1;
    p = mkpool(1, 0);
    weft_pool_lease_t l;
    CHECK_EQ(weft_pool_acquire(p, &l, WEFT_FOREVER), -ECONNREFUSED);
    CHECK_EQ(weft_pool_stats(p, &st), 0);
    CHECK_EQ(st.create_failed, 1);
    CHECK_EQ(st.size, 0);
    close_pool(p);
    snprintf(appname_ci, sizeof appname_ci, "%s", saved);
    quiet_connect_errors = 0;
}

static void *main_fiber(void *arg)
{
    (void)arg;
    char err[256];
    int rc = wpg_connect(&admin, conninfo, weft_deadline_in(10000 * MS), err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "t_pg: cannot connect to %s: %s (%d)\n", conninfo, err, rc);
        exit(1);
    }
    test_sql_errors();
    test_rows();
    test_killed_backend();
    test_timeouts();
    wait_our_connections(0);
    wpg_close(admin);
    return NULL;
}

int main(void)
{
    conninfo = getenv("WEFT_PG_CONNINFO");
    if (!conninfo || !*conninfo) {
        fprintf(stderr, "t_pg: WEFT_PG_CONNINFO is not set: run it through "
                        "scripts/pg.sh run (make test does, via scripts/test.d/pg.sh)\n");
        return 1;
    }
    /* Our own application_name: another run's backends may still be
     * exiting when this one starts. */
    snprintf(appname, sizeof appname, "weft_t_pg_%d", (int)getpid());
    snprintf(appname_ci, sizeof appname_ci, "%s application_name=%s", conninfo, appname);
    h_begin("pg");
    h_run(main_fiber, NULL);
    return h_end();
}
