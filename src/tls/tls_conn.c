/*
 * tls_conn.c — TLS connections over weft's fiber-blocking socket calls.
 *
 * OpenSSL never sees the socket. Its one BIO (a BIO_METHOD of ours, used
 * as both rbio and wbio) reads ciphertext from the connection's input
 * buffer and appends ciphertext to its output buffer, and answers "retry"
 * when the input is empty or the output full; SSL_* calls therefore never
 * block. This file moves the bytes: weft_recv() into the input buffer
 * when OpenSSL wants to read, weft_send() out of the output buffer after
 * it wrote. Every wait is a weft call with the caller's deadline, so
 * timeouts, scopes, cancellation and close-while-waiting are the socket
 * calls' own (docs/design/tls.md says why this design).
 *
 * Concurrency. Fibers interleave only where a weft call blocks, and no
 * OpenSSL call blocks, so OpenSSL sees one call at a time, as in any
 * non-blocking program. Two fiber mutexes serialise the directions: rmu
 * (readers, and the input buffer) and wmu (writers, and sending out of
 * the output buffer); the handshake takes both. While a writer's send is
 * in flight from the output buffer (on io_uring the kernel reads that
 * memory), a reader's SSL_read may still append to it (an alert), so the
 * buffer is never moved or grown while `sending`.
 *
 * Lifetime. Every public call counts itself in `users`. weft_tls_close()
 * closes the socket, which wakes blocked callers with -EBADF, and the
 * last caller to leave frees the connection.
 */
#include "tls_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define TLS_MAX_PLAIN 16384
/* Room for the largest record OpenSSL writes for TLS_MAX_PLAIN bytes of
 * data (5-byte header, content type, tag, CBC padding and MAC), plus a
 * small record before it (a KeyUpdate): an SSL_write of one record into
 * this much room never has to wait. */
#define REC_ROOM (TLS_MAX_PLAIN + 512)
/* Buffers start at one record and grow to four for bulk transfers. */
#define BUF_MAX (4 * REC_ROOM)
/* Plaintext encrypted by one weft_tls_write() before it sends. */
#define WRITE_MAX (4 * TLS_MAX_PLAIN)

typedef struct wbuf {
    char *p;
    size_t head, tail, cap; /* bytes [head, tail) are pending */
} wbuf;

struct weft_tls {
    SSL *ssl;
    weft_tls_ctx_t *ctx;
    int fd;
    int err;              /* sticky error; 0 while healthy       */
    int users;            /* public calls in progress            */
    unsigned closing : 1; /* weft_tls_close() was called         */
    unsigned eof : 1;     /* the socket reported end of stream   */
    unsigned sending : 1; /* a send from `out` is in flight      */
    unsigned shut : 1;    /* close_notify queued                 */
    unsigned done_hs : 1; /* handshake complete                  */
    weft_mutex_t rmu, wmu;
    wbuf in, out;
    char *key;            /* client: session cache key           */
    char *alpn;           /* agreed protocol, NUL-terminated     */
    char errstr[WTLS_ERRLEN];
};

/* ---- buffers and the BIO -------------------------------------------- */

static size_t pending(const wbuf *b)
{
    return b->tail - b->head;
}

/* Move pending bytes to the front and make room for @want more, growing
 * up to BUF_MAX. Only when no I/O uses the buffer. Returns 0 or -ENOMEM. */
static int make_room(wbuf *b, size_t want)
{
    if (b->head == b->tail) {
        b->head = b->tail = 0;
    } else if (b->head > 0 && b->cap - b->tail < want) {
        memmove(b->p, b->p + b->head, b->tail - b->head);
        b->tail -= b->head;
        b->head = 0;
    }
    if (b->p && b->cap - b->tail >= want)
        return 0;
    size_t cap = b->cap ? b->cap : REC_ROOM;
    while (cap - b->tail < want && cap < BUF_MAX)
        cap *= 2;
    if (cap > BUF_MAX)
        cap = BUF_MAX;
    if (cap == b->cap)
        return 0; /* as big as it gets: the caller makes do */
    char *p = realloc(b->p, cap);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int bio_read(BIO *bio, char *buf, size_t len, size_t *got)
{
    weft_tls_t *t = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    size_t n = pending(&t->in);
    if (n == 0) {
        *got = 0;
        if (!t->eof)
            BIO_set_retry_read(bio);
        return 0; /* with eof: end of stream (BIO_CTRL_EOF says so) */
    }
    if (n > len)
        n = len;
    memcpy(buf, t->in.p + t->in.head, n);
    t->in.head += n;
    *got = n;
    return 1;
}

static int bio_write(BIO *bio, const char *buf, size_t len, size_t *put)
{
    weft_tls_t *t = BIO_get_data(bio);
    wbuf *o = &t->out;
    BIO_clear_retry_flags(bio);
    /* Bytes in flight stay where they are; otherwise compact or grow. */
    if (!t->sending && make_room(o, len) < 0)
        return 0;
    size_t room = o->p ? o->cap - o->tail : 0;
    if (room == 0) {
        *put = 0;
        BIO_set_retry_write(bio);
        return 0;
    }
    if (len > room)
        len = room;
    memcpy(o->p + o->tail, buf, len);
    o->tail += len;
    *put = len;
    return 1;
}

static long bio_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
    (void)num;
    (void)ptr;
    weft_tls_t *t = BIO_get_data(bio);
    switch (cmd) {
    case BIO_CTRL_FLUSH: /* the connection sends after each SSL call */
        return 1;
    case BIO_CTRL_EOF:
        return t->eof && pending(&t->in) == 0;
    case BIO_CTRL_PENDING:
        return (long)pending(&t->in);
    case BIO_CTRL_WPENDING:
        return (long)pending(&t->out);
    default:
        return 0;
    }
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                 "weft_tls buffers");
    if (m && (!BIO_meth_set_read_ex(m, bio_read) ||
              !BIO_meth_set_write_ex(m, bio_write) ||
              !BIO_meth_set_ctrl(m, bio_ctrl))) {
        BIO_meth_free(m);
        m = NULL;
    }
    bio_method = m;
}

/* ---- errors --------------------------------------------------------- */

/* OpenSSL's error queue is per thread, so fibers share it: it must be
 * empty before each SSL call (SSL_get_error() reads it), and failures
 * read and clear it before the fiber can switch. Peeking first is much
 * cheaper than ERR_clear_error() on the usual empty queue (which was the
 * hottest OpenSSL function of a small-message echo). */
static inline void clear_errors(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/* Errors after which the connection stays usable. */
static int soft(int rc)
{
    return rc == -ETIMEDOUT || rc == -EAGAIN || rc == -ECANCELED || rc == -EPERM || rc == -EINVAL;
}

/* Record a failure's text (and, unless soft, make it sticky). */
static int fail(weft_tls_t *t, int rc, const char *what)
{
    snprintf(t->errstr, sizeof t->errstr, "%s: %s", what, strerror(-rc));
    if (!soft(rc) && !t->err)
        t->err = rc;
    return rc;
}

/* ---- moving ciphertext ---------------------------------------------- */

/* Send everything in `out`. The caller holds wmu. */
static int flush_out(weft_tls_t *t, int64_t deadline)
{
    wbuf *o = &t->out;
    while (o->head < o->tail) {
        if (t->err)
            return t->err;
        t->sending = 1;
        ssize_t n = weft_send(t->fd, o->p + o->head, o->tail - o->head, 0, deadline);
        t->sending = 0;
        if (n < 0)
            return fail(t, (int)n, "send");
        o->head += (size_t)n;
    }
    o->head = o->tail = 0;
    return 0;
}

/* Send what is queued unless a writer is already at it (it sends all,
 * including what we appended). The caller holds rmu, not wmu. */
static int push(weft_tls_t *t, int64_t deadline)
{
    if (pending(&t->out) == 0 || weft_mutex_trylock(&t->wmu) != 0)
        return 0;
    int rc = flush_out(t, deadline);
    weft_mutex_unlock(&t->wmu);
    return rc;
}

/* Receive more ciphertext into `in`. The caller holds rmu. */
static int fill_in(weft_tls_t *t, int64_t deadline)
{
    wbuf *b = &t->in;
    if (make_room(b, REC_ROOM) < 0)
        return fail(t, -ENOMEM, "recv");
    size_t room = b->cap - b->tail;
    ssize_t n = weft_recv(t->fd, b->p + b->tail, room, 0, deadline);
    if (n < 0)
        return fail(t, (int)n, "recv");
    if (n == 0)
        t->eof = 1;
    b->tail += (size_t)n;
    /* A full buffer means more is waiting: take more per call next time. */
    if ((size_t)n == room && b->cap < BUF_MAX && make_room(b, b->cap) < 0)
        return fail(t, -ENOMEM, "recv");
    return 0;
}

/* A failed SSL call (ret <= 0): its error, sticky unless it is the
 * peer's close_notify (0). The caller may hold wmu (@have_wmu). */
static int ssl_fail(weft_tls_t *t, int ret, int have_wmu)
{
    int e = SSL_get_error(t->ssl, ret);
    if (e == SSL_ERROR_ZERO_RETURN) {
        ERR_clear_error();
        return 0;
    }
    int rc = weft_tls__map_error(t->ssl, e, t->errstr, sizeof t->errstr);
    if (!t->err)
        t->err = rc;
    /* OpenSSL may have queued an alert for the peer: let it go if the
     * socket takes it at once. */
    if (pending(&t->out) && !t->sending) {
        int locked = !have_wmu && weft_mutex_trylock(&t->wmu) == 0;
        if (have_wmu || locked) {
            int keep = t->err;
            t->err = 0;
            flush_out(t, 0);
            t->err = keep;
        }
        if (locked)
            weft_mutex_unlock(&t->wmu);
    }
    return rc;
}

/* ---- entering and leaving ------------------------------------------- */

static void destroy(weft_tls_t *t)
{
    SSL_free(t->ssl); /* and the BIO */
    free(t->in.p);
    free(t->out.p);
    free(t->key);
    free(t->alpn);
    weft_tls_ctx_free(t->ctx);
    free(t);
}

static int enter(weft_tls_t *t, int64_t deadline)
{
    if (!t || deadline < -1)
        return -EINVAL;
    if (!weft_in_fiber())
        return -EPERM;
    if (t->closing)
        return -EBADF;
    t->users++;
    return 0;
}

/* A call that was in progress when the connection was closed returns
 * -EBADF whatever it got: its caller must not come back. */
static ssize_t leave(weft_tls_t *t, ssize_t rc)
{
    if (t->closing) {
        rc = -EBADF;
        if (--t->users == 0)
            destroy(t);
        return rc;
    }
    t->users--;
    return rc;
}

static int lock(weft_tls_t *t, weft_mutex_t *m, int64_t deadline)
{
    int rc = weft_mutex_lock(m, deadline);
    if (rc == 0 && t->closing) {
        weft_mutex_unlock(m);
        rc = -EBADF;
    }
    return rc;
}

static int handshake(weft_tls_t *t, int64_t deadline);

enum { RD, WR }; /* a call's direction: which mutex it takes */

/* The start of a read or write: enter, finish the handshake if @hs, and
 * take the direction's mutex. On failure the call has left again. */
static int begin(weft_tls_t *t, int dir, int hs, int64_t deadline)
{
    int rc = enter(t, deadline);
    if (rc < 0)
        return rc;
    if ((hs && !t->done_hs && (rc = handshake(t, deadline)) < 0) ||
        (rc = lock(t, dir == WR ? &t->wmu : &t->rmu, deadline)) < 0)
        return (int)leave(t, rc);
    return 0;
}

/* The end of such a call: release the mutex, leave with @rc. */
static ssize_t end(weft_tls_t *t, int dir, ssize_t rc)
{
    weft_mutex_unlock(dir == WR ? &t->wmu : &t->rmu);
    return leave(t, rc);
}

/* ---- handshake ------------------------------------------------------ */

static void handshake_done(weft_tls_t *t)
{
    const unsigned char *p;
    unsigned n;
    t->done_hs = 1;
    SSL_get0_alpn_selected(t->ssl, &p, &n);
    if (n > 0 && (t->alpn = malloc(n + 1))) {
        memcpy(t->alpn, p, n);
        t->alpn[n] = '\0';
    }
}

/* The caller holds rmu and wmu. */
static int handshake_locked(weft_tls_t *t, int64_t deadline)
{
    while (!t->done_hs) {
        if (t->err)
            return t->err;
        clear_errors();
        int r = SSL_do_handshake(t->ssl);
        if (r == 1) {
            handshake_done(t);
            break;
        }
        int e = SSL_get_error(t->ssl, r);
        int rc;
        if (e == SSL_ERROR_WANT_READ) {
            rc = flush_out(t, deadline);
            if (rc == 0)
                rc = fill_in(t, deadline);
        } else if (e == SSL_ERROR_WANT_WRITE) {
            rc = flush_out(t, deadline);
        } else {
            return ssl_fail(t, r, 1);
        }
        if (rc < 0)
            return rc;
    }
    return flush_out(t, deadline); /* our last flight, tickets */
}

static int handshake(weft_tls_t *t, int64_t deadline)
{
    int rc = lock(t, &t->rmu, deadline);
    if (rc < 0)
        return rc;
    rc = lock(t, &t->wmu, deadline);
    if (rc == 0) {
        rc = handshake_locked(t, deadline);
        weft_mutex_unlock(&t->wmu);
    }
    weft_mutex_unlock(&t->rmu);
    return rc;
}

int weft_tls_handshake(weft_tls_t *t, int64_t deadline)
{
    int rc = enter(t, deadline);
    if (rc < 0)
        return rc;
    return (int)leave(t, handshake(t, deadline));
}

/* ---- reading -------------------------------------------------------- */

/* The caller holds rmu. */
static ssize_t read_locked(weft_tls_t *t, char *buf, size_t len, int64_t deadline)
{
    size_t got = 0;
    for (;;) {
        if (t->err)
            return got ? (ssize_t)got : t->err;
        clear_errors();
        size_t n = 0;
        int r = SSL_read_ex(t->ssl, buf + got, len - got, &n);
        if (r == 1) {
            got += n;
            /* More whole records already here: take them too. */
            if (got == len || (SSL_pending(t->ssl) == 0 && pending(&t->in) == 0))
                return (ssize_t)got;
            continue;
        }
        int e = SSL_get_error(t->ssl, r);
        if (got > 0) {
            /* Return what we have; a failure is kept for the next call. */
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                ssl_fail(t, r, 0);
            ERR_clear_error();
            return (ssize_t)got;
        }
        int rc;
        if (e == SSL_ERROR_WANT_READ) {
            rc = push(t, deadline); /* whatever we owe the peer first */
            if (rc == 0)
                rc = fill_in(t, deadline);
        } else if (e == SSL_ERROR_WANT_WRITE) {
            rc = lock(t, &t->wmu, deadline);
            if (rc == 0) {
                rc = flush_out(t, deadline);
                weft_mutex_unlock(&t->wmu);
            }
        } else {
            return ssl_fail(t, r, 0);
        }
        if (rc < 0)
            return rc;
    }
}

ssize_t weft_tls_read(weft_tls_t *t, void *buf, size_t len, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    int rc = begin(t, RD, 1, deadline);
    if (rc < 0)
        return rc;
    return end(t, RD, len ? read_locked(t, buf, len, deadline) : t->err);
}

/* ---- writing -------------------------------------------------------- */

/* Encrypt up to WRITE_MAX bytes of @buf into `out` and send them. The
 * caller holds wmu. Returns the count committed or a negative errno. */
static ssize_t write_locked(weft_tls_t *t, const char *buf, size_t len,
                            int64_t deadline)
{
    if (t->err)
        return t->err;
    if (t->shut) { /* not sticky: reading goes on */
        snprintf(t->errstr, sizeof t->errstr, "write after shutdown");
        return -ESHUTDOWN;
    }
    int rc = flush_out(t, deadline); /* leftovers of an interrupted send */
    if (rc < 0 || len == 0)
        return rc;
    size_t limit = len < WRITE_MAX ? len : WRITE_MAX, done = 0;
    while (done < limit) {
        if (make_room(&t->out, REC_ROOM) < 0) {
            if (done == 0)
                return fail(t, -ENOMEM, "write");
            break;
        }
        if (t->out.cap - t->out.tail < REC_ROOM)
            break; /* full: send, the caller comes back for the rest */
        size_t chunk = limit - done < TLS_MAX_PLAIN ? limit - done : TLS_MAX_PLAIN;
        size_t n = 0;
        clear_errors();
        int r = SSL_write_ex(t->ssl, buf + done, chunk, &n);
        if (r == 1) {
            done += n;
            continue;
        }
        int e = SSL_get_error(t->ssl, r);
        if (e == SSL_ERROR_WANT_WRITE) {
            /* A record did not fit after all; OpenSSL keeps it and sends
             * it when called again with these bytes (the next call of a
             * writer that goes on with its data). */
            rc = flush_out(t, deadline);
            if (rc < 0)
                return done ? (ssize_t)done : rc;
            continue;
        }
        if (e == SSL_ERROR_WANT_READ)
            break; /* cannot happen without renegotiation; be safe */
        rc = ssl_fail(t, r, 1);
        return done ? (ssize_t)done : rc;
    }
    rc = flush_out(t, deadline);
    /* Committed bytes count even if their send was cut short: the rest
     * goes out first in the next call, and a hard error sticks. */
    return done ? (ssize_t)done : rc;
}

ssize_t weft_tls_write(weft_tls_t *t, const void *buf, size_t len, int64_t deadline)
{
    if (!buf && len)
        return -EINVAL;
    int rc = begin(t, WR, 1, deadline);
    if (rc < 0)
        return rc;
    return end(t, WR, write_locked(t, buf, len, deadline));
}

int weft_tls_write_all(weft_tls_t *t, const void *buf, size_t len,
                       size_t *written, int64_t deadline)
{
    size_t done = 0;
    if (written)
        *written = 0;
    if (!buf && len)
        return -EINVAL;
    int rc = begin(t, WR, 1, deadline);
    if (rc < 0)
        return rc;
    /* One hold of the lock: other writers' data never lands in between. */
    while (rc == 0 && done < len) {
        ssize_t n = write_locked(t, (const char *)buf + done, len - done, deadline);
        if (n < 0)
            rc = (int)n;
        else
            done += (size_t)n;
        if (written)
            *written = done;
    }
    if (rc == 0)
        rc = flush_out(t, deadline);
    return (int)end(t, WR, rc);
}

int weft_tls_flush(weft_tls_t *t, int64_t deadline)
{
    int rc = begin(t, WR, 0, deadline);
    if (rc < 0)
        return rc;
    return (int)end(t, WR, t->err ? t->err : flush_out(t, deadline));
}

/* ---- ending --------------------------------------------------------- */

/* Queue close_notify. The caller holds wmu and has flushed `out`. */
static int queue_close_notify(weft_tls_t *t)
{
    ERR_clear_error();
    t->shut = 1;
    if (SSL_shutdown(t->ssl) >= 0) /* 0: sent, the peer's not seen yet */
        return 0;
    return ssl_fail(t, -1, 1);
}

int weft_tls_shutdown(weft_tls_t *t, int64_t deadline)
{
    int rc = begin(t, WR, 0, deadline);
    if (rc < 0)
        return rc;
    if (t->err)
        rc = t->err;
    else if (!t->done_hs)
        t->shut = 1; /* no stream to end */
    else if (!t->shut && (rc = flush_out(t, deadline)) == 0)
        rc = queue_close_notify(t);
    if (rc == 0)
        rc = flush_out(t, deadline);
    return (int)end(t, WR, rc);
}

int weft_tls_close(weft_tls_t *t)
{
    if (!t || t->closing)
        return -EINVAL;
    t->users++;
    /* A courtesy close_notify, if the socket takes it now. */
    if (!t->err && t->done_hs && !t->shut && !t->sending && weft_in_fiber() &&
        weft_mutex_trylock(&t->wmu) == 0) {
        if (flush_out(t, 0) == 0 && queue_close_notify(t) == 0)
            flush_out(t, 0);
        weft_mutex_unlock(&t->wmu);
    }
    t->closing = 1;
    int fd = t->fd;
    t->fd = -1;
    int rc = weft_close(fd); /* wakes fibers blocked on it: -EBADF */
    leave(t, 0);
    return rc;
}

/* ---- creating ------------------------------------------------------- */

/* "name address:port" of the peer, the client's session cache key. */
static char *cache_key(int fd, const char *name)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char addr[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, addr, sizeof addr);
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof addr);
            port = ntohs(a->sin6_port);
        }
    }
    size_t n = strlen(name) + strlen(addr) + 16;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%s %s:%d", name, addr, port);
    return k;
}

static int is_ip_literal(const char *s)
{
    unsigned char a[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

/* Client: SNI, the name to verify, and a session to resume. */
static int set_peer_name(weft_tls_t *t, int fd, const char *server_name)
{
    char name[256];
    size_t n = strlen(server_name);
    if (n >= sizeof name)
        return -EINVAL;
    memcpy(name, server_name, n + 1);
    if (n > 1 && name[n - 1] == '.')
        name[n - 1] = '\0'; /* "example.com." is example.com */
    int verify = !t->ctx->insecure;
    if (is_ip_literal(name)) {
        if (verify && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl), name) != 1)
            return -EINVAL;
    } else {
        if (SSL_set_tlsext_host_name(t->ssl, name) != 1)
            return -EINVAL;
        if (verify) {
            SSL_set_hostflags(t->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            if (SSL_set1_host(t->ssl, name) != 1)
                return -EINVAL;
        }
    }
    if (t->ctx->cache_cap) {
        if (!(t->key = cache_key(fd, name)))
            return -ENOMEM;
        SSL_set_app_data(t->ssl, t->key);
        SSL_SESSION *s = weft_tls__cache_get(t->ctx, t->key);
        if (s) {
            SSL_set_session(t->ssl, s);
            SSL_SESSION_free(s);
        }
    }
    return 0;
}

static int new_fail(int fd, int rc, const char *what)
{
    if (fd >= 0)
        weft_close(fd);
    weft_tls__err_text(NULL, what, weft_tls__thread_err(), WTLS_ERRLEN);
    return rc;
}

int weft_tls_new(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd,
                 const char *server_name)
{
    if (!out || !ctx || fd < 0)
        return new_fail(fd, -EINVAL, "NULL argument or bad descriptor");
    *out = NULL;
    if (!ctx->server && !ctx->insecure && (!server_name || !*server_name))
        return new_fail(fd, -EINVAL, "a verifying client needs the server's name");
    pthread_once(&bio_once, bio_init);
    weft_tls_t *t = calloc(1, sizeof *t);
    if (!t || !bio_method)
        goto nomem;
    t->fd = fd;
    t->ctx = ctx;
    weft_mutex_init(&t->rmu);
    weft_mutex_init(&t->wmu);
    ERR_clear_error();
    if (!(t->ssl = SSL_new(ctx->ssl_ctx)))
        goto nomem;
    BIO *bio = BIO_new(bio_method);
    if (!bio)
        goto nomem;
    BIO_set_data(bio, t);
    BIO_set_init(bio, 1);
    SSL_set_bio(t->ssl, bio, bio); /* one reference, for both ends */
    if (ctx->server) {
        SSL_set_accept_state(t->ssl);
    } else {
        SSL_set_connect_state(t->ssl);
        if (server_name && *server_name) {
            int rc = set_peer_name(t, fd, server_name);
            if (rc < 0) {
                SSL_free(t->ssl);
                free(t->key);
                free(t);
                return new_fail(fd, rc, "bad server name");
            }
        }
    }
    weft_tls__ctx_ref(ctx);
    *out = t;
    return 0;
nomem:
    if (t) {
        SSL_free(t->ssl);
        free(t);
    }
    return new_fail(fd, -ENOMEM, "out of memory");
}

/* new + handshake; on failure the connection is closed, its text kept. */
static int open_conn(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd,
                     const char *server_name, int64_t deadline, int server)
{
    if (out)
        *out = NULL;
    if (ctx && ctx->server != server)
        return new_fail(fd, -EINVAL, server ? "weft_tls_accept needs a server context"
                                            : "weft_tls_connect needs a client context");
    weft_tls_t *t;
    int rc = weft_tls_new(&t, ctx, fd, server_name);
    if (rc < 0)
        return rc;
    rc = weft_tls_handshake(t, deadline);
    if (rc < 0) {
        snprintf(weft_tls__thread_err(), WTLS_ERRLEN, "%s", t->errstr[0] ? t->errstr : strerror(-rc));
        weft_tls_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

int weft_tls_connect(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd,
                     const char *server_name, int64_t deadline)
{
    return open_conn(out, ctx, fd, server_name, deadline, 0);
}

int weft_tls_accept(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd, int64_t deadline)
{
    return open_conn(out, ctx, fd, NULL, deadline, 1);
}

int weft_tls_dial(weft_tls_t **out, weft_tls_ctx_t *ctx, const char *host,
                  int port, int64_t deadline)
{
    char *err = weft_tls__thread_err();
    if (out)
        *out = NULL;
    if (!out || !ctx || !host || port < 1 || port > 65535) {
        snprintf(err, WTLS_ERRLEN, "bad argument");
        return -EINVAL;
    }
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = weft_getaddrinfo(host, service, &hints, &res, deadline);
    if (rc < 0) {
        snprintf(err, WTLS_ERRLEN, "cannot resolve %s: %s", host, strerror(-rc));
        return rc;
    }
    int fd = -1;
    rc = -ENOENT;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        int s = weft_socket(ai->ai_family, SOCK_STREAM, 0);
        if (s < 0) {
            rc = s;
            continue;
        }
        rc = weft_connect(s, ai->ai_addr, ai->ai_addrlen, deadline);
        if (rc == 0) {
            int one = 1;
            setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            fd = s;
        } else {
            weft_close(s);
            if (rc == -ETIMEDOUT || rc == -EAGAIN || rc == -ECANCELED)
                break;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, WTLS_ERRLEN, "cannot connect to %s port %d: %s", host, port,
                 strerror(-rc));
        return rc;
    }
    return weft_tls_connect(out, ctx, fd, host, deadline);
}

/* ---- information ---------------------------------------------------- */

int weft_tls_fd(const weft_tls_t *t)
{
    return t ? t->fd : -1;
}

const char *weft_tls_alpn(const weft_tls_t *t)
{
    return t ? t->alpn : NULL;
}

int weft_tls_resumed(const weft_tls_t *t)
{
    return t && t->done_hs && SSL_session_reused(t->ssl) == 1;
}

const char *weft_tls_version(const weft_tls_t *t)
{
    return t && t->done_hs ? SSL_get_version(t->ssl) : "unknown";
}

void *weft_tls_openssl(weft_tls_t *t)
{
    return t ? t->ssl : NULL;
}

const char *weft_tls_error_string(const weft_tls_t *t)
{
    return t ? t->errstr : weft_tls__thread_err();
}
