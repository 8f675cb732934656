/*
 * wpg.h — a PostgreSQL client for weft fibers: libpq in non-blocking mode,
 * every wait a weft_wait_fd() on the connection's socket, so a query
 * blocks only the calling fiber, never the loop.
 *
 * Why it lives in examples/ and not in libweft: the library's sources are
 * also compiled into the Ruby extension and cross-compiled for aarch64,
 * and neither should need libpq; this is glue between weft's fd waits and
 * one client library (what any other non-blocking client would follow),
 * shared by examples/pool_demo, test/c/t_pg*.c and the pool benchmark.
 * Link with -lpq (pkg-config libpq).
 *
 * Errors are negative errno values, as in weft:
 *   -EREMOTEIO   the server rejected the statement (SQL error); the
 *                connection is fine. wpg_sqlstate() / wpg_error() say why.
 *   -ECONNRESET  the connection is gone (backend killed, server down):
 *                release it as broken.
 *   -ETIMEDOUT   the deadline passed mid-statement: the connection is in an
 *                unknown state; release it as broken.
 *   -ECONNREFUSED, -EACCES, -ENOENT ... from wpg_connect() (see there).
 *   -ECANCELED   the fiber was cancelled (connection state unknown).
 * Name resolution in libpq is synchronous: give numeric addresses (host=
 * 127.0.0.1 or hostaddr=) or a unix socket directory.
 */
#ifndef WEFT_EXAMPLES_WPG_H
#define WEFT_EXAMPLES_WPG_H

#include "weft.h"

#include <libpq-fe.h>
#include <stdint.h>

typedef struct wpg {
    PGconn *conn;
    int fd;              /* PQsocket once connected                      */
    char sqlstate[6];    /* of the last failed statement, else ""        */
    char err[256];       /* last error message, else ""                  */
    int fatal;           /* the server sent a FATAL error: it is closing */
} wpg;

/* Connect (PQconnectStart / PQconnectPoll). Returns 0 and *@out, or
 * -ECONNREFUSED (refused or unreachable), -EACCES (authentication),
 * -ENOENT (no such database / role), -ETIMEDOUT, -ECANCELED, -ENOMEM,
 * -ECONNABORTED (any other failure; the message goes to @errbuf if not
 * NULL). */
int wpg_connect(wpg **out, const char *conninfo, int64_t deadline,
                char *errbuf, size_t errlen);

/* Run one statement with @nparams text parameters ($1, $2, ...). On
 * success returns 0 and, if @res is not NULL, the last result (PQclear it).
 * Errors as listed above. */
int wpg_exec(wpg *c, const char *sql, int nparams, const char *const *params,
             PGresult **res, int64_t deadline);

/* wpg_exec() for statements whose single-value result is an integer:
 * stores it in *@out. */
int wpg_exec_int(wpg *c, const char *sql, int nparams,
                 const char *const *params, long long *out, int64_t deadline);

/* Non-blocking health check of an idle connection: consumes whatever the
 * server sent meanwhile (a FATAL from a terminated backend, then EOF).
 * Returns 0 if usable, -ECONNRESET if not. */
int wpg_check(wpg *c);

/* The server process of this connection (PQbackendPID). */
int wpg_backend_pid(const wpg *c);

const char *wpg_error(const wpg *c);
const char *wpg_sqlstate(const wpg *c);

/* Ask the server to cancel the statement running on @c (PQcancel, run on
 * a weft_offload() worker so only the calling fiber waits). Returns 0 if
 * the request was delivered, -ECONNABORTED if not, -ETIMEDOUT, ... */
int wpg_cancel(wpg *c, int64_t deadline);

/* Close and free. A statement still running on the server (the caller
 * gave up on it) is cancelled first, from a fiber: that waits for the
 * cancel request (at most 2 s). NULL is ignored. */
void wpg_close(wpg *c);

/* Callbacks for a weft_pool of connections: weft_pool_create(&p,
 * &wpg_pool_ops, (void *)conninfo, &opts). create connects with the
 * acquirer's deadline (a failure is printed to stderr with the server's
 * message and its error returned), destroy is wpg_close(), validate is
 * wpg_check(). */
extern const weft_pool_ops_t wpg_pool_ops;

#endif
