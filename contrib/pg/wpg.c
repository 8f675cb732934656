/*
 * wpg.c — libpq driven by weft fd waits (see wpg.h).
 *
 * libpq's non-blocking protocol: PQsendQuery* queues the statement,
 * PQflush sends it (1 = more to send: wait for writable, and also read
 * when readable, since the server may block on us reading), then
 * PQconsumeInput + PQisBusy until a result can be taken without blocking,
 * then PQgetResult until NULL.
 */
#include "wpg.h"

#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *dst, size_t len, const char *msg)
{
    if (!dst || !len)
        return;
    snprintf(dst, len, "%s", msg ? msg : "");
    size_t n = strlen(dst);
    while (n && (dst[n - 1] == '\n' || dst[n - 1] == ' '))
        dst[--n] = '\0';
}

static int connect_errno(const char *msg)
{
    if (!msg)
        return -ECONNABORTED;
    if (strstr(msg, "refused") || strstr(msg, "No route") ||
        strstr(msg, "unreachable") || strstr(msg, "No such file"))
        return -ECONNREFUSED;
    if (strstr(msg, "timeout") || strstr(msg, "timed out"))
        return -ETIMEDOUT;
    if (strstr(msg, "authentication") || strstr(msg, "password"))
        return -EACCES;
    if (strstr(msg, "does not exist"))
        return -ENOENT;
    return -ECONNABORTED;
}

/* Notices are kept as the last error instead of being printed on stderr.
 * An ERROR that arrives while the connection is idle is delivered here
 * too: a FATAL one is the server saying why it is about to close the
 * connection (pg_terminate_backend, shutdown), which may be all there is to
 * see before the end of the stream arrives. */
static void on_notice(void *arg, const PGresult *r)
{
    wpg *c = arg;
    set_err(c->err, sizeof c->err, PQresultErrorMessage(r));
    const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (sev && (!strcmp(sev, "FATAL") || !strcmp(sev, "PANIC")))
        c->fatal = 1;
}

int wpg_connect(wpg **out, const char *conninfo, int64_t deadline,
                char *errbuf, size_t errlen)
{
    if (!out || !conninfo)
        return -EINVAL;
    set_err(errbuf, errlen, "");
    wpg *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->fd = -1;
    c->conn = PQconnectStart(conninfo);
    if (!c->conn) {
        free(c);
        return -ENOMEM;
    }
    int rc = 0;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    if (PQstatus(c->conn) == CONNECTION_BAD)
        st = PGRES_POLLING_FAILED;
    while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
        int fd = PQsocket(c->conn);
        if (fd < 0) {
            st = PGRES_POLLING_FAILED;
            break;
        }
        int r = weft_wait_fd(fd, st == PGRES_POLLING_READING ? WEFT_READABLE
                                                            : WEFT_WRITABLE,
                             deadline);
        /* libpq may close this socket and open another (next address,
         * SSL/GSS fallback), possibly with the same number: drop weft's
         * state for it before every step. */
        weft_fd_forget(fd);
        if (r < 0) {
            rc = r;
            break;
        }
        st = PQconnectPoll(c->conn);
    }
    if (rc == 0 && st == PGRES_POLLING_FAILED)
        rc = connect_errno(PQerrorMessage(c->conn));
    if (rc == 0 && PQsetnonblocking(c->conn, 1) != 0)
        rc = -ECONNABORTED;
    if (rc < 0) {
        set_err(errbuf, errlen, PQerrorMessage(c->conn));
        PQfinish(c->conn); /* weft already forgot its socket */
        free(c);
        return rc;
    }
    c->fd = PQsocket(c->conn);
    PQsetNoticeReceiver(c->conn, on_notice, c);
    *out = c;
    return 0;
}

static int conn_lost(wpg *c)
{
    if (!c->fatal || !c->err[0])
        set_err(c->err, sizeof c->err, PQerrorMessage(c->conn));
    return -ECONNRESET;
}

/* Wait until a result can be read without blocking. */
static int wait_result(wpg *c, int64_t deadline)
{
    while (PQisBusy(c->conn)) {
        int r = weft_wait_fd(c->fd, WEFT_READABLE, deadline);
        if (r < 0)
            return r;
        if (!PQconsumeInput(c->conn))
            return conn_lost(c);
    }
    return 0;
}

int wpg_exec(wpg *c, const char *sql, int nparams, const char *const *params,
             PGresult **res, int64_t deadline)
{
    if (res)
        *res = NULL;
    if (!c || !sql || nparams < 0 || (nparams && !params))
        return -EINVAL;
    c->sqlstate[0] = '\0';
    c->err[0] = '\0';
    if (PQstatus(c->conn) != CONNECTION_OK || c->fatal)
        return conn_lost(c);
    int sent = nparams ? PQsendQueryParams(c->conn, sql, nparams, NULL, params,
                                           NULL, NULL, 0)
                       : PQsendQuery(c->conn, sql);
    if (!sent)
        return PQstatus(c->conn) == CONNECTION_BAD ? conn_lost(c)
                                                  : (set_err(c->err, sizeof c->err,
                                                             PQerrorMessage(c->conn)),
                                                     -EPROTO);
    int f;
    while ((f = PQflush(c->conn)) == 1) {
        int r = weft_wait_fd(c->fd, WEFT_READABLE | WEFT_WRITABLE, deadline);
        if (r < 0)
            return r;
        if ((r & WEFT_READABLE) && !PQconsumeInput(c->conn))
            return conn_lost(c);
    }
    if (f < 0)
        return conn_lost(c);
    PGresult *last = NULL, *failed = NULL;
    int rc = 0;
    for (;;) {
        rc = wait_result(c, deadline);
        if (rc < 0)
            break;
        PGresult *r = PQgetResult(c->conn);
        if (!r)
            break;
        ExecStatusType es = PQresultStatus(r);
        if (es == PGRES_FATAL_ERROR || es == PGRES_BAD_RESPONSE ||
            es == PGRES_NONFATAL_ERROR) {
            if (!failed) {
                failed = r;
                continue;
            }
        } else if (!failed) {
            PQclear(last);
            last = r;
            continue;
        }
        PQclear(r);
    }
    if (rc == 0 && PQstatus(c->conn) == CONNECTION_BAD)
        rc = -ECONNRESET;
    if (failed) {
        const char *ss = PQresultErrorField(failed, PG_DIAG_SQLSTATE);
        snprintf(c->sqlstate, sizeof c->sqlstate, "%s", ss ? ss : "");
        set_err(c->err, sizeof c->err, PQresultErrorMessage(failed));
        PQclear(failed);
        /* Class 57 (operator intervention: terminated, shutting down) and
         * 08 (connection exception) end the connection. */
        if (rc == 0)
            rc = (!strncmp(c->sqlstate, "57", 2) || !strncmp(c->sqlstate, "08", 2))
                     ? -ECONNRESET : -EREMOTEIO;
    } else if (rc == -ECONNRESET && !c->err[0]) {
        set_err(c->err, sizeof c->err, PQerrorMessage(c->conn));
    }
    if (rc == 0 && res)
        *res = last;
    else
        PQclear(last);
    return rc;
}

int wpg_exec_int(wpg *c, const char *sql, int nparams,
                 const char *const *params, long long *out, int64_t deadline)
{
    PGresult *r;
    int rc = wpg_exec(c, sql, nparams, params, &r, deadline);
    if (rc < 0)
        return rc;
    if (PQntuples(r) < 1 || PQnfields(r) < 1 || PQgetisnull(r, 0, 0)) {
        PQclear(r);
        return -ENODATA;
    }
    if (out)
        *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return 0;
}

int wpg_check(wpg *c)
{
    if (!c || PQstatus(c->conn) != CONNECTION_OK || c->fatal)
        return -ECONNRESET;
    int r = weft_wait_fd(c->fd, WEFT_READABLE, 0);
    if (r > 0) {
        if (!PQconsumeInput(c->conn) || PQstatus(c->conn) != CONNECTION_OK)
            return conn_lost(c);
        PGresult *res; /* an idle connection has nothing to say but errors */
        while (!PQisBusy(c->conn) && (res = PQgetResult(c->conn))) {
            PQclear(res);
        }
        PGnotify *n;
        while ((n = PQnotifies(c->conn)))
            PQfreemem(n);
        if (PQstatus(c->conn) != CONNECTION_OK || c->fatal)
            return conn_lost(c);
        /* Input was there and the socket may be at EOF: one more look. */
        if (weft_wait_fd(c->fd, WEFT_READABLE, 0) > 0 &&
            (!PQconsumeInput(c->conn) || PQstatus(c->conn) != CONNECTION_OK))
            return conn_lost(c);
    }
    return 0;
}

int wpg_backend_pid(const wpg *c)
{
    return c ? PQbackendPID(c->conn) : 0;
}

const char *wpg_error(const wpg *c)
{
    return c ? c->err : "";
}

const char *wpg_sqlstate(const wpg *c)
{
    return c ? c->sqlstate : "";
}

/* PQcancel opens a connection of its own and waits for the server: it
 * runs on an offload worker thread (it is thread-safe by design). */
typedef struct cancel_job {
    PGcancel *cancel;
    char err[128];
} cancel_job;

static void *cancel_run(void *arg)
{
    cancel_job *j = arg;
    return (void *)(long)PQcancel(j->cancel, j->err, sizeof j->err);
}

static void cancel_free(void *arg, void *result)
{
    (void)result;
    cancel_job *j = arg;
    PQfreeCancel(j->cancel);
    free(j);
}

int wpg_cancel(wpg *c, int64_t deadline)
{
    if (!c)
        return -EINVAL;
    cancel_job *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->cancel = PQgetCancel(c->conn);
    if (!j->cancel) {
        free(j);
        return -ECONNRESET;
    }
    void *ok = NULL;
    int rc = weft_offload(cancel_run, j, cancel_free, &ok, deadline);
    if (rc < 0)
        return rc; /* cancel_free runs when the worker is done */
    rc = ok ? 0 : -ECONNABORTED;
    cancel_free(j, NULL);
    return rc;
}

void wpg_close(wpg *c)
{
    if (!c)
        return;
    /* Closing the socket does not stop a statement the server is running
     * (it notices only when it next writes): cancel it first, or a
     * timed-out query would keep its server slot busy. */
    if (PQstatus(c->conn) == CONNECTION_OK &&
        PQtransactionStatus(c->conn) == PQTRANS_ACTIVE && weft_in_fiber())
        (void)wpg_cancel(c, weft_deadline_in(2000000000LL));
    if (c->fd >= 0)
        weft_fd_forget(c->fd);
    PQfinish(c->conn);
    free(c);
}

/* ---- pool callbacks ---------------------------------------------------- */

static int pool_create(void *ctx, void **out, int64_t deadline)
{
    char err[256];
    wpg *c;
    int rc = wpg_connect(&c, ctx, deadline, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "database connection failed: %s\n", err);
        return rc;
    }
    *out = c;
    return 0;
}

static void pool_destroy(void *ctx, void *res)
{
    (void)ctx;
    wpg_close(res);
}

static int pool_validate(void *ctx, void *res)
{
    (void)ctx;
    return wpg_check(res);
}

const weft_pool_ops_t wpg_pool_ops = {pool_create, pool_destroy, pool_validate};
