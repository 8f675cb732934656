/* TLS between weft fibers with a throw-away CA: handshake, echo, ALPN,
 * shutdown and close_notify, session resumption (TLS 1.3 and 1.2), bad,
 * expired, untrusted certificates and wrong host names refused, client
 * certificates, stalled handshakes hitting their deadline (also through
 * a timeout scope), timeouts and cancellation leaving the connection
 * usable, a cancelled writer's committed bytes, close while fibers wait,
 * a peer that closes without close_notify, weft_tls_dial, bad arguments. */
#include "tls_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

static tls_pki pki;
static int g_listen, g_listen_port;

/* ---- a pair of connected TLS endpoints ------------------------------ */

/* What a helper fiber works on, and what it found. */
typedef struct job {
    weft_tls_t *t;
    weft_tls_ctx_t *ctx; /* accept: the server context, the socket, */
    int fd;              /* and the deadline                        */
    int64_t deadline;
    ssize_t rc;          /* the (last) call's result                */
    size_t n;            /* writer: bytes committed; drain: wanted  */
    char err[256];       /* accept: the failure's text              */
} job;

static void *accept_fiber(void *arg)
{
    job *j = arg;
    j->rc = weft_tls_accept(&j->t, j->ctx, j->fd, j->deadline);
    if (j->rc < 0)
        snprintf(j->err, sizeof j->err, "%s", weft_tls_error_string(NULL));
    return NULL;
}

/* Handshake over a fresh TCP pair; returns the client's result, the
 * server's in *@srv_rc (its text in @srv_err if non-NULL). */
static int tls_pair(weft_tls_ctx_t *sctx, weft_tls_ctx_t *cctx, const char *name,
                    weft_tls_t **st, weft_tls_t **ct, int *srv_rc, char *srv_err)
{
    /* One listener for all: the session cache is per server address. */
    int b = weft_tcp_connect("127.0.0.1", g_listen_port, weft_deadline_in(5 * TLS_SEC));
    CHECK(b >= 0);
    int a = weft_accept(g_listen, NULL, NULL, weft_deadline_in(5 * TLS_SEC));
    CHECK(a >= 0);
    job j = {.ctx = sctx, .fd = a, .deadline = weft_deadline_in(5 * TLS_SEC)};
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(accept_fiber, &j, NULL, &f), 0);
    int rc = weft_tls_connect(ct, cctx, b, name, weft_deadline_in(5 * TLS_SEC));
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    *st = j.t;
    *srv_rc = (int)j.rc;
    if (srv_err)
        strcpy(srv_err, j.err);
    return rc;
}

static void pair_ok(weft_tls_ctx_t *sctx, weft_tls_ctx_t *cctx, const char *name,
                    weft_tls_t **st, weft_tls_t **ct)
{
    int src;
    int rc = tls_pair(sctx, cctx, name, st, ct, &src, NULL);
    if (rc != 0)
        fprintf(stderr, "client: %s\n", weft_tls_error_string(NULL));
    CHECK_EQ(rc, 0);
    CHECK_EQ(src, 0);
}

static void expect_read(weft_tls_t *t, const char *want)
{
    tls_expect(t, want, weft_deadline_in(5 * TLS_SEC));
}

static void close_both(weft_tls_t *a, weft_tls_t *b)
{
    CHECK_EQ(weft_tls_close(a), 0);
    CHECK_EQ(weft_tls_close(b), 0);
}

/* ---- handshake, echo, ALPN, shutdown ---------------------------------- */

static void test_echo_alpn_shutdown(void)
{
    weft_tls_ctx_opts_t so = {.server = 1, .cert_file = pki.srv, .key_file = pki.srv_key,
                              .alpn = "http/1.1,h2"};
    weft_tls_ctx_opts_t co = {.ca_file = pki.ca, .alpn = "h2,http/1.1"};
    weft_tls_ctx_t *sctx, *cctx;
    CHECK_EQ(weft_tls_ctx_new(&sctx, &so), 0);
    CHECK_EQ(weft_tls_ctx_new(&cctx, &co), 0);
    weft_tls_t *s, *c;
    pair_ok(sctx, cctx, "localhost", &s, &c);
    CHECK(strcmp(weft_tls_version(c), "TLSv1.3") == 0);
    CHECK(weft_tls_alpn(c) && strcmp(weft_tls_alpn(c), "http/1.1") == 0); /* server's order */
    CHECK(weft_tls_alpn(s) && strcmp(weft_tls_alpn(s), "http/1.1") == 0);
    CHECK_EQ(weft_tls_resumed(c), 0);
    CHECK(weft_tls_fd(c) >= 0);
    CHECK(weft_tls_openssl(c) != NULL);
    CHECK_EQ(weft_tls_handshake(c, 0), 0); /* again: nothing to do */

    CHECK_EQ(weft_tls_write_all(c, "hello", 5, NULL, WEFT_FOREVER), 0);
    expect_read(s, "hello");
    CHECK_EQ(weft_tls_write(s, "world", 5, WEFT_FOREVER), 5);
    expect_read(c, "world");
    CHECK_EQ(weft_tls_write(c, "", 0, WEFT_FOREVER), 0);
    CHECK_EQ(weft_tls_flush(c, WEFT_FOREVER), 0);

    /* The client ends its stream; the server still answers. */
    CHECK_EQ(weft_tls_shutdown(c, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_shutdown(c, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_write(c, "x", 1, WEFT_FOREVER), -ESHUTDOWN);
    char buf[16];
    CHECK_EQ(weft_tls_read(s, buf, sizeof buf, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_read(s, buf, sizeof buf, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_write(s, "bye", 3, WEFT_FOREVER), 3);
    CHECK_EQ(weft_tls_shutdown(s, weft_deadline_in(TLS_SEC)), 0);
    expect_read(c, "bye");
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC)), 0);
    close_both(s, c);

    /* No protocol in common: the server refuses (no_application_protocol). */
    weft_tls_ctx_opts_t xo = {.ca_file = pki.ca, .alpn = "spdy/3"};
    weft_tls_ctx_t *xctx;
    CHECK_EQ(weft_tls_ctx_new(&xctx, &xo), 0);
    int src;
    CHECK_EQ(tls_pair(sctx, xctx, "localhost", &s, &c, &src, NULL), -EPROTO);
    CHECK_EQ(src, -EPROTO);
    weft_tls_ctx_free(xctx);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
}

/* ---- session resumption ----------------------------------------------- */

static void resume_round(weft_tls_ctx_t *sctx, weft_tls_ctx_t *cctx, int want_resumed,
                         const char *version)
{
    weft_tls_t *s, *c;
    pair_ok(sctx, cctx, "localhost", &s, &c);
    CHECK(strcmp(weft_tls_version(c), version) == 0);
    CHECK_EQ(weft_tls_resumed(c), want_resumed);
    CHECK_EQ(weft_tls_resumed(s), want_resumed);
    /* A round trip: the client reads the TLS 1.3 tickets on the way. */
    CHECK_EQ(weft_tls_write_all(s, "ping", 4, NULL, WEFT_FOREVER), 0);
    expect_read(c, "ping");
    close_both(s, c);
}

static void test_resumption(void)
{
    weft_tls_ctx_t *sctx = tls_server_ctx(pki.srv, pki.srv_key);
    weft_tls_ctx_t *cctx = tls_client_ctx(pki.ca);
    resume_round(sctx, cctx, 0, "TLSv1.3");
    resume_round(sctx, cctx, 1, "TLSv1.3");
    resume_round(sctx, cctx, 1, "TLSv1.3");
    weft_tls_ctx_free(cctx);

    weft_tls_ctx_opts_t o12 = {.ca_file = pki.ca, .max_version = WEFT_TLS_1_2};
    CHECK_EQ(weft_tls_ctx_new(&cctx, &o12), 0);
    resume_round(sctx, cctx, 0, "TLSv1.2");
    resume_round(sctx, cctx, 1, "TLSv1.2");
    weft_tls_ctx_free(cctx);

    /* session_cache -1: never resumed. */
    weft_tls_ctx_opts_t off = {.ca_file = pki.ca, .session_cache = -1};
    CHECK_EQ(weft_tls_ctx_new(&cctx, &off), 0);
    resume_round(sctx, cctx, 0, "TLSv1.3");
    resume_round(sctx, cctx, 0, "TLSv1.3");
    weft_tls_ctx_free(cctx);
    weft_tls_ctx_free(sctx);
}

/* ---- certificates refused ---------------------------------------------- */

static void refused(weft_tls_ctx_t *sctx, weft_tls_ctx_t *cctx, const char *name,
                    const char *text)
{
    weft_tls_t *s = NULL, *c = NULL;
    int src;
    char serr[256];
    int rc = tls_pair(sctx, cctx, name, &s, &c, &src, serr);
    if (rc != -EKEYREJECTED || !strstr(weft_tls_error_string(NULL), text))
        fprintf(stderr, "client: rc %d, '%s' (want '%s')\n", rc,
                weft_tls_error_string(NULL), text);
    CHECK_EQ(rc, -EKEYREJECTED);
    CHECK(strstr(weft_tls_error_string(NULL), text) != NULL);
    CHECK(c == NULL && s == NULL);
    /* The server hears the client's alert and says why. */
    if (src != -EKEYREJECTED)
        fprintf(stderr, "server: rc %d, '%s'\n", src, serr);
    CHECK_EQ(src, -EKEYREJECTED);
    CHECK(serr[0] != '\0');
}

static void test_refused(void)
{
    weft_tls_ctx_t *good = tls_server_ctx(pki.srv, pki.srv_key);
    weft_tls_ctx_t *self = tls_server_ctx(pki.self, pki.self_key);
    weft_tls_ctx_t *expired = tls_server_ctx(pki.expired, pki.expired_key);
    weft_tls_ctx_t *cctx = tls_client_ctx(pki.ca);
    weft_tls_ctx_t *other = tls_client_ctx(pki.other_ca);

    refused(self, cctx, "localhost", "self-signed");
    refused(expired, cctx, "localhost", "expired");
    refused(good, other, "localhost", "unable to get local issuer");
    refused(good, cctx, "www.example.com", "hostname mismatch");
    refused(good, cctx, "127.0.0.2", "IP address mismatch");

    /* The certificate's IP entries, and a trailing dot, are accepted. */
    weft_tls_t *s, *c;
    pair_ok(good, cctx, "127.0.0.1", &s, &c);
    close_both(s, c);
    pair_ok(good, cctx, "localhost.", &s, &c);
    close_both(s, c);

    /* insecure: anything goes (tests only). */
    weft_tls_ctx_opts_t io = {.insecure = 1};
    weft_tls_ctx_t *ictx;
    CHECK_EQ(weft_tls_ctx_new(&ictx, &io), 0);
    pair_ok(self, ictx, NULL, &s, &c);
    close_both(s, c);
    weft_tls_ctx_free(ictx);

    /* Client certificates: required by the server. */
    weft_tls_ctx_opts_t vo = {.server = 1, .cert_file = pki.srv, .key_file = pki.srv_key,
                              .ca_file = pki.ca, .verify_client = 1};
    weft_tls_ctx_t *vctx;
    CHECK_EQ(weft_tls_ctx_new(&vctx, &vo), 0);
    int src;
    int rc = tls_pair(vctx, cctx, "localhost", &s, &c, &src, NULL);
    CHECK_EQ(src, -EKEYREJECTED);
    if (rc == 0) { /* TLS 1.3: the client learns it at its first read */
        char buf[8];
        CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC)), -EKEYREJECTED);
        CHECK_EQ(weft_tls_write(c, "x", 1, 0), -EKEYREJECTED); /* sticky */
        CHECK_EQ(weft_tls_close(c), 0);
    } else {
        CHECK_EQ(rc, -EKEYREJECTED);
    }
    weft_tls_ctx_opts_t cc = {.ca_file = pki.ca, .cert_file = pki.cli, .key_file = pki.cli_key};
    weft_tls_ctx_t *certctx;
    CHECK_EQ(weft_tls_ctx_new(&certctx, &cc), 0);
    pair_ok(vctx, certctx, "localhost", &s, &c);
    CHECK_EQ(weft_tls_write_all(c, "id", 2, NULL, WEFT_FOREVER), 0);
    expect_read(s, "id");
    close_both(s, c);

    weft_tls_ctx_free(certctx);
    weft_tls_ctx_free(vctx);
    weft_tls_ctx_free(good);
    weft_tls_ctx_free(self);
    weft_tls_ctx_free(expired);
    weft_tls_ctx_free(cctx);
    weft_tls_ctx_free(other);
}

/* ---- stalled handshakes ------------------------------------------------ */

static weft_tls_ctx_t *g_sctx, *g_cctx;
static int g_port;

static int connect_forever(void *arg)
{
    weft_tls_t *c = NULL;
    int rc = weft_tls_connect(&c, g_cctx, *(int *)arg, "localhost", WEFT_FOREVER);
    CHECK(c == NULL);
    return rc;
}

static void test_stalls(void)
{
    /* A server that never answers: the kernel completes the TCP handshake
     * into the backlog, nobody reads. */
    int l = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    CHECK(l >= 0);
    int port = weft_local_port(l);
    int fd = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(TLS_SEC));
    CHECK(fd >= 0);
    weft_tls_t *c = NULL;
    int64_t t0 = weft_now();
    CHECK_EQ(weft_tls_connect(&c, g_cctx, fd, "localhost", weft_deadline_in(100000000)),
             -ETIMEDOUT);
    int64_t took = weft_now() - t0;
    CHECK(took >= 100000000); /* and no later bound: a loaded machine may take any time */
    CHECK(c == NULL);

    /* The same under a timeout scope, with no deadline of its own. */
    fd = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(TLS_SEC));
    CHECK(fd >= 0);
    t0 = weft_now();
    CHECK_EQ(weft_scope_run(weft_deadline_in(50000000), connect_forever, &fd), -ETIMEDOUT);
    CHECK(weft_now() - t0 < 2 * TLS_SEC);

    /* A client that never says hello: the server's accept times out. */
    int a, b;
    h_tcp_pair(&a, &b);
    weft_tls_t *s = NULL;
    CHECK_EQ(weft_tls_accept(&s, g_sctx, a, weft_deadline_in(50000000)), -ETIMEDOUT);
    CHECK(s == NULL);
    CHECK_EQ(weft_close(b), 0);

    /* Stalled in the middle: the client sends its hello (a deadline of 0
     * sends and does not wait), then goes quiet; the server, waiting for
     * the client's Finished, gives up at its deadline. */
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_tls_new(&c, g_cctx, b, "localhost"), 0);
    CHECK_EQ(weft_tls_handshake(c, 0), -EAGAIN);
    CHECK_EQ(weft_tls_accept(&s, g_sctx, a, weft_deadline_in(50000000)), -ETIMEDOUT);
    CHECK(strstr(weft_tls_error_string(NULL), "timed out") != NULL);
    /* The client goes on; with TLS 1.3 its part of the handshake can
     * complete (the server's flight is in its socket), but the server has
     * gone: the first read says so. */
    int rc = weft_tls_handshake(c, weft_deadline_in(TLS_SEC));
    if (rc == 0) {
        char buf[8];
        rc = (int)weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC));
    }
    CHECK(rc == -ECONNABORTED || rc == -ECONNRESET);
    CHECK_EQ(weft_tls_close(c), 0);

    /* A server that closes at once. */
    h_tcp_pair(&a, &b);
    CHECK_EQ(weft_close(a), 0);
    rc = weft_tls_connect(&c, g_cctx, b, "localhost", weft_deadline_in(TLS_SEC));
    CHECK(rc == -ECONNABORTED || rc == -ECONNRESET);
    CHECK_EQ(weft_close(l), 0);
}

/* ---- timeouts, cancellation, close while waiting ------------------------- */

static void *reader_fiber(void *arg)
{
    job *j = arg;
    char buf[64];
    j->rc = weft_tls_read(j->t, buf, sizeof buf, WEFT_FOREVER);
    return NULL;
}

/* Writes the pattern until something fails; counts what was committed. */
static void *writer_fiber(void *arg)
{
    job *j = arg;
    static uint8_t chunk[100000];
    for (;;) {
        for (size_t i = 0; i < sizeof chunk; i++)
            chunk[i] = tls_pattern(j->n + i);
        ssize_t n = weft_tls_write(j->t, chunk, sizeof chunk, WEFT_FOREVER);
        if (n < 0) {
            j->rc = n;
            return NULL;
        }
        j->n += (size_t)n;
    }
}

/* Reads exactly n bytes of the pattern. */
static void *drain_fiber(void *arg)
{
    job *j = arg;
    static uint8_t rbuf[65536];
    size_t total = 0;
    while (total < j->n) {
        size_t ask = j->n - total < sizeof rbuf ? j->n - total : sizeof rbuf;
        ssize_t n = weft_tls_read(j->t, rbuf, ask, weft_deadline_in(5 * TLS_SEC));
        CHECK(n > 0);
        for (ssize_t i = 0; i < n; i++)
            CHECK_EQ(rbuf[i], tls_pattern(total + (size_t)i));
        total += (size_t)n;
    }
    return NULL;
}

/* Let a writer fill the socket, then cancel it, or close its connection;
 * returns once it has returned (its result in @w). */
static void stop_writer(job *w, int by_close)
{
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(writer_fiber, w, NULL, &f), 0);
    CHECK_EQ(weft_sleep(30000000), 0);
    CHECK_EQ(by_close ? weft_tls_close(w->t) : weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
}

static void test_interrupts(void)
{
    weft_tls_t *s, *c;
    pair_ok(g_sctx, g_cctx, "localhost", &s, &c);
    char buf[64];

    /* A read that times out leaves the connection usable. */
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(20000000)), -ETIMEDOUT);
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, 0), -EAGAIN);
    CHECK_EQ(weft_tls_write_all(s, "late", 4, NULL, WEFT_FOREVER), 0);
    expect_read(c, "late");

    /* Cancel during read: -ECANCELED, and no byte is lost for the next
     * reader. */
    job rj = {.t = c};
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(reader_fiber, &rj, NULL, &f), 0);
    CHECK_EQ(weft_sleep(10000000), 0);
    CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(rj.rc, -ECANCELED);
    CHECK_EQ(weft_tls_write_all(s, "after cancel", 12, NULL, WEFT_FOREVER), 0);
    expect_read(c, "after cancel");

    /* Cancel a writer blocked on a full socket: what it reported as
     * committed, and only that, reaches the peer, followed by what the
     * next writer sends. */
    job wj = {.t = c};
    stop_writer(&wj, 0);
    CHECK_EQ(wj.rc, -ECANCELED);
    CHECK(wj.n > 0);
    /* The server drains in a fiber while the next writer goes on. */
    job dj = {.t = s, .n = wj.n};
    weft_fiber_t d;
    CHECK_EQ(weft_spawn(drain_fiber, &dj, NULL, &d), 0);
    CHECK_EQ(weft_tls_write_all(c, "END", 3, NULL, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_join(d, NULL, WEFT_FOREVER), 0);
    expect_read(s, "END");

    /* Close while two readers wait (one in the socket, one queued behind
     * it): both wake with -EBADF; the memory goes with the last one. */
    job r1 = {.t = c}, r2 = {.t = c};
    weft_fiber_t f1, f2;
    CHECK_EQ(weft_spawn(reader_fiber, &r1, NULL, &f1), 0);
    CHECK_EQ(weft_spawn(reader_fiber, &r2, NULL, &f2), 0);
    CHECK_EQ(weft_sleep(5000000), 0);
    CHECK_EQ(weft_tls_close(c), 0);
    CHECK_EQ(weft_join(f1, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(f2, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(r1.rc, -EBADF);
    CHECK_EQ(r2.rc, -EBADF);
    /* The server saw close_notify (a courtesy of weft_tls_close). */
    CHECK_EQ(weft_tls_read(s, buf, sizeof buf, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(s), 0);

    /* Close while a writer waits on a full socket. */
    pair_ok(g_sctx, g_cctx, "localhost", &s, &c);
    job w2 = {.t = c};
    stop_writer(&w2, 1);
    CHECK_EQ(w2.rc, -EBADF);
    CHECK_EQ(weft_tls_close(s), 0);
}

/* ---- end of stream without close_notify ---------------------------------- */

static void test_unclean_eof(void)
{
    weft_tls_t *s, *c;
    pair_ok(g_sctx, g_cctx, "localhost", &s, &c);
    CHECK_EQ(weft_tls_write_all(s, "data", 4, NULL, WEFT_FOREVER), 0);
    /* TCP FIN, no close_notify: a truncation the client must not take
     * for a clean end. */
    CHECK_EQ(weft_shutdown(weft_tls_fd(s), SHUT_WR), 0);
    expect_read(c, "data");
    char buf[16];
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC)), -ECONNABORTED);
    CHECK(strstr(weft_tls_error_string(c), "unexpected eof") != NULL ||
          strstr(weft_tls_error_string(c), "close_notify") != NULL);
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC)), -ECONNABORTED);
    close_both(s, c);

    /* Unless the protocol frames itself and says so. */
    weft_tls_ctx_opts_t lo = {.ca_file = pki.ca, .allow_unclean_eof = 1};
    weft_tls_ctx_t *lax;
    CHECK_EQ(weft_tls_ctx_new(&lax, &lo), 0);
    pair_ok(g_sctx, lax, "localhost", &s, &c);
    CHECK_EQ(weft_tls_write_all(s, "data", 4, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_shutdown(weft_tls_fd(s), SHUT_WR), 0);
    expect_read(c, "data");
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC)), 0);
    close_both(s, c);
    weft_tls_ctx_free(lax);
}

/* ---- weft_tls_dial -------------------------------------------------------- */

static void *dial_server(void *arg)
{
    int l = *(int *)arg;
    int fd = weft_accept(l, NULL, NULL, weft_deadline_in(5 * TLS_SEC));
    CHECK(fd >= 0);
    weft_tls_t *s;
    CHECK_EQ(weft_tls_accept(&s, g_sctx, fd, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_write_all(s, "dialled", 7, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_tls_shutdown(s, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(s), 0);
    return NULL;
}

static void test_dial(void)
{
    int l = weft_tcp_listen("127.0.0.1", 0, 16, 0);
    CHECK(l >= 0);
    g_port = weft_local_port(l);
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(dial_server, &l, NULL, &f), 0);
    weft_tls_t *c;
    int rc = weft_tls_dial(&c, g_cctx, "localhost", g_port, weft_deadline_in(5 * TLS_SEC));
    if (rc != 0)
        fprintf(stderr, "dial: %s\n", weft_tls_error_string(NULL));
    CHECK_EQ(rc, 0);
    expect_read(c, "dialled");
    char buf[8];
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, weft_deadline_in(TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(c), 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_close(l), 0);

    CHECK_EQ(weft_tls_dial(&c, g_cctx, "no-such-host.invalid", 443, weft_deadline_in(TLS_SEC)),
             -ENOENT);
    CHECK(c == NULL);
    CHECK(strstr(weft_tls_error_string(NULL), "no-such-host.invalid") != NULL);
    CHECK_EQ(weft_tls_dial(&c, g_cctx, "127.0.0.1", g_port, weft_deadline_in(TLS_SEC)),
             -ECONNREFUSED);
    CHECK_EQ(weft_tls_dial(&c, g_cctx, "localhost", 0, 0), -EINVAL);
    CHECK_EQ(weft_tls_dial(&c, g_cctx, "localhost", 70000, 0), -EINVAL);
}

/* ---- arguments --------------------------------------------------------- */

static void test_arguments(void)
{
    weft_tls_ctx_t *x = NULL;
    weft_tls_ctx_opts_t o = {.server = 1, .cert_file = "/nonexistent/cert.pem"};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -ENOENT);
    CHECK(x == NULL);
    CHECK(strstr(weft_tls_error_string(NULL), "/nonexistent/cert.pem") != NULL);
    o = (weft_tls_ctx_opts_t){.server = 1, .cert_file = pki.srv, .key_file = pki.cli_key};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    CHECK(strstr(weft_tls_error_string(NULL), "private key") != NULL);
    o = (weft_tls_ctx_opts_t){.server = 1};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    o = (weft_tls_ctx_opts_t){.server = 1, .cert_file = pki.srv, .key_file = pki.srv_key,
                              .verify_client = 1};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    o = (weft_tls_ctx_opts_t){.ca_file = pki.ca, .alpn = "h2,,x"};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    o = (weft_tls_ctx_opts_t){.ca_file = pki.ca, .min_version = 0x0301};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    o = (weft_tls_ctx_opts_t){.ca_file = pki.ca, .min_version = WEFT_TLS_1_3,
                              .max_version = WEFT_TLS_1_2};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    o = (weft_tls_ctx_opts_t){.ca_file = pki.ca, .ciphers = "NO-SUCH-CIPHER"};
    CHECK_EQ(weft_tls_ctx_new(&x, &o), -EINVAL);
    CHECK_EQ(weft_tls_ctx_new(NULL, &o), -EINVAL);
    /* The system store loads (nothing here trusts our CA, though). */
    CHECK_EQ(weft_tls_ctx_new(&x, NULL), 0);
    CHECK(weft_tls_ctx_openssl(x) != NULL);
    weft_tls_ctx_free(x);
    weft_tls_ctx_free(NULL);

    weft_tls_t *t = NULL;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    /* A verifying client needs a name; the descriptor is closed anyway. */
    CHECK_EQ(weft_tls_new(&t, g_cctx, sv[0], NULL), -EINVAL);
    CHECK_EQ(weft_tls_new(&t, NULL, sv[1], "x"), -EINVAL);
    CHECK_EQ(weft_tls_new(&t, g_cctx, -1, "x"), -EINVAL);
    CHECK_EQ(weft_tls_connect(&t, g_sctx, -1, "x", 0), -EINVAL); /* server ctx */
    CHECK(fcntl(sv[0], F_GETFD) == -1 && errno == EBADF);
    CHECK(fcntl(sv[1], F_GETFD) == -1 && errno == EBADF);

    CHECK_EQ(weft_tls_read(NULL, NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_tls_write(NULL, "x", 1, 0), -EINVAL);
    CHECK_EQ(weft_tls_handshake(NULL, 0), -EINVAL);
    CHECK_EQ(weft_tls_close(NULL), -EINVAL);
    CHECK_EQ(weft_tls_fd(NULL), -1);
    CHECK(weft_tls_alpn(NULL) == NULL);

    weft_tls_t *s, *c;
    pair_ok(g_sctx, g_cctx, "localhost", &s, &c);
    char buf[4];
    CHECK_EQ(weft_tls_read(c, buf, sizeof buf, -2), -EINVAL);
    CHECK_EQ(weft_tls_read(c, NULL, 1, 0), -EINVAL);
    CHECK_EQ(weft_tls_read(c, buf, 0, 0), 0);
    CHECK_EQ(weft_tls_write(c, NULL, 1, 0), -EINVAL);
    close_both(s, c);
}

static void *body(void *arg)
{
    g_sctx = tls_server_ctx(pki.srv, pki.srv_key);
    g_cctx = tls_client_ctx(pki.ca);
    g_listen = weft_tcp_listen("127.0.0.1", 0, 64, 0);
    CHECK(g_listen >= 0);
    g_listen_port = weft_local_port(g_listen);
    test_echo_alpn_shutdown();
    test_resumption();
    test_refused();
    test_stalls();
    test_interrupts();
    test_unclean_eof();
    test_dial();
    test_arguments();
    CHECK_EQ(weft_close(g_listen), 0);
    return arg;
}

int main(void)
{
    h_begin("tls");
    tls_pki_make(&pki);
    h_run(body, NULL);

    /* Outside fibers: no blocking call, but new and close work. */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    weft_tls_t *t;
    CHECK_EQ(weft_tls_new(&t, g_cctx, sv[0], "localhost"), 0);
    CHECK_EQ(weft_tls_handshake(t, 0), -EPERM);
    char b;
    CHECK_EQ(weft_tls_read(t, &b, 1, 0), -EPERM);
    CHECK_EQ(weft_tls_close(t), 0);
    close(sv[1]);
    weft_tls_ctx_free(g_sctx);
    weft_tls_ctx_free(g_cctx);
    tls_pki_remove(&pki);
    return h_end();
}
