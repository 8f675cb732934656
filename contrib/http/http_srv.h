/*
 * http_srv.h — the HTTP/1.1 server behind examples/http_server, as a small
 * library so that tests can run it in-process next to client fibers.
 *
 * One http_srv serves one listening socket on the calling thread's weft
 * scheduler: an acceptor fiber, and one fiber per connection that reads,
 * parses (http_parse.h) and answers requests in order (keep-alive and
 * pipelining: every complete request already buffered is answered, then
 * all responses go out in one send). Several threads each run their own
 * http_srv on their own SO_REUSEPORT listener.
 *
 * Routes: GET/HEAD "/" answers "Hello, World!"; with a root directory,
 * GET/HEAD of any other path serves the regular file below that directory
 * (never outside it); everything else is 404. Other standard methods get
 * 405, unknown ones 501.
 */
#ifndef WEFT_EXAMPLES_HTTP_SRV_H
#define WEFT_EXAMPLES_HTTP_SRV_H

#include "http_parse.h"

#include <stdint.h>
#include <sys/types.h>

/*
 * A transport other than plain TCP for the connections (HTTPS: see
 * http_tls.h). With one, each connection's fiber first calls open, which
 * takes over the socket (the handshake, bounded by the header timeout),
 * and the connection's reads, writes, shutdown and close go through it;
 * static files are copied through it instead of sendfile(2). Without one
 * (NULL) the server uses the socket calls directly.
 */
typedef struct http_transport {
    void *ctx;
    /* Take over @fd: returns the connection, or NULL (fd closed). */
    void *(*open)(void *ctx, int fd, int64_t deadline);
    ssize_t (*recv)(void *conn, void *buf, size_t len, int64_t deadline);
    ssize_t (*send)(void *conn, const void *buf, size_t len, int64_t deadline);
    /* End our side of the stream (before a lingering close). */
    void (*shutdown)(void *conn, int64_t deadline);
    /* Close the connection and its socket. */
    void (*close)(void *conn);
} http_transport;

typedef struct http_srv_opts {
    const char *root;          /* static files; NULL: only "/"            */
    int64_t idle_timeout_ns;   /* keep-alive idle before close; 0: 10 s   */
    int64_t header_timeout_ns; /* from a request's first byte to the end of
                                  its head (slowloris); 0: 10 s; 408 after */
    int64_t io_timeout_ns;     /* per response write / body read; 0: 10 s */
    int64_t drain_timeout_ns;  /* graceful stop: in-flight requests get this
                                  long before being cancelled; 0: 5 s      */
    http_limits limits;        /* all zero: http_default_limits           */
    const http_transport *transport; /* NULL: plain TCP                   */
} http_srv_opts;

typedef struct http_srv_stats {
    uint64_t accepted;     /* connections                                  */
    uint64_t requests;     /* responses sent, any status                   */
    uint64_t status_2xx, status_4xx, status_5xx;
    uint64_t idle_closed;  /* keep-alive connections closed when idle      */
    uint64_t timed_out;    /* 408: head not complete in time               */
    uint64_t open;         /* connections open now                         */
} http_srv_stats;

typedef struct http_srv http_srv;

/*
 * http_srv_start — serve @listen_fd (which the server now owns and closes)
 * on the calling thread's scheduler. Call on that thread, from a fiber or
 * before weft_sched_run(). Returns 0 or a negative errno.
 */
int http_srv_start(http_srv **out, int listen_fd, const http_srv_opts *opts);

/*
 * http_srv_stop — graceful stop: close the listener, close idle keep-alive
 * connections, let requests in progress finish (their responses say
 * "Connection: close") and cancel what is still running after the drain
 * timeout. Returns at once; the scheduler's run ends when the last fiber
 * has gone. Call on the server's thread (a fiber or a weft_sched_post()
 * callback). Idempotent.
 */
void http_srv_stop(http_srv *s);

/* Counters; safe to read on the server's thread. */
void http_srv_get_stats(const http_srv *s, http_srv_stats *st);

/* http_srv_free — release a server whose fibers have all finished. */
void http_srv_free(http_srv *s);

#endif
