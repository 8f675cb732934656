/*
 * weft_tls.h — TLS over weft's fiber-blocking I/O (libweft_tls, OpenSSL 3).
 *
 * A layer above libweft: it uses only weft.h, and libweft itself never
 * needs OpenSSL. Link with `pkg-config --cflags --libs weft-tls`
 * (-lweft_tls -lweft; with --static it also lists OpenSSL and what
 * libweft needs, for linking the .a files).
 *
 * OpenSSL never touches the socket. Each connection has two buffers of
 * ciphertext that OpenSSL reads and writes through a memory BIO, and the
 * connection moves them with weft_recv() and weft_send(). So every call
 * below blocks only the calling fiber, and behaves as the plain socket
 * calls do: deadlines, timeout scopes (weft_scope_run()), cancellation
 * (weft_cancel()), and weft_tls_close() from another fiber while one waits
 * (-EBADF), on io_uring, epoll and poll alike.
 *
 * The conventions of weft.h hold here too:
 *
 *   Errors     Negative errno values, never errno. Besides the errors of
 *              the socket calls (-ETIMEDOUT, -ECANCELED, -EBADF,
 *              -ECONNRESET, -EPIPE, ...), TLS failures map to a small set:
 *
 *              -EKEYREJECTED  certificate verification failed: this side
 *                             rejected the peer's certificate (untrusted
 *                             chain, expired, wrong host name, missing
 *                             when required), or the peer rejected this
 *                             side's (it sent a bad_certificate,
 *                             unsupported_certificate, certificate_revoked,
 *                             certificate_expired, certificate_unknown,
 *                             unknown_ca, access_denied or
 *                             certificate_required alert).
 *              -EPROTO        any other TLS failure: a protocol error, a
 *                             fatal alert from the peer, no common
 *                             version, cipher or ALPN protocol, a record
 *                             that fails to decrypt.
 *              -ECONNABORTED  the peer closed the TCP connection without
 *                             sending close_notify (the data may have been
 *                             cut short), unless allow_unclean_eof is set.
 *              -ESHUTDOWN     a write after weft_tls_shutdown().
 *
 *              weft_tls_error_string() gives OpenSSL's text for the last
 *              failure. -EKEYREJECTED, -EPROTO, -ECONNABORTED and transport
 *              errors other than -ETIMEDOUT, -EAGAIN (a deadline of 0) and
 *              -ECANCELED are sticky: the connection is broken and every
 *              later call returns the same error. After those the connection stays
 *              usable (a read may be retried; see weft_tls_write() for
 *              writes).
 *
 *   Deadlines  Absolute, in nanoseconds of the monotonic clock (weft_now(),
 *              weft_deadline_in()); WEFT_FOREVER (-1) for none; a deadline
 *              <= now makes one attempt that does not wait.
 *
 *   Fibers     Calls that may block must be made from a fiber (-EPERM
 *              otherwise). Stack: weft's default 64 KiB is ample (a
 *              handshake with P-256 certificates, client or server, runs
 *              in the 16 KiB minimum).
 *
 *   Threads    A context (weft_tls_ctx_t) may be shared by any number of
 *              threads. A connection (weft_tls_t) belongs to the scheduler
 *              thread whose fibers use it. On one connection, one fiber
 *              may read while another writes (full duplex); concurrent
 *              readers, or concurrent writers, queue in arrival order.
 */
#ifndef WEFT_TLS_H
#define WEFT_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Protocol versions for weft_tls_ctx_opts_t.min_version / max_version. */
#define WEFT_TLS_1_2 0x0303
#define WEFT_TLS_1_3 0x0304

/** A context: role, certificates, trust, ALPN, session cache. */
typedef struct weft_tls_ctx weft_tls_ctx_t;

/** One TLS connection over a stream socket. */
typedef struct weft_tls weft_tls_t;

/** Options for weft_tls_ctx_new(); zero-initialise, then set fields. */
typedef struct weft_tls_ctx_opts {
    int server;               /* 0: client context; 1: server context      */
    const char *cert_file;    /* PEM certificate chain, leaf first: a
                                 server's (required), or a client's own
                                 certificate for client authentication    */
    const char *key_file;     /* PEM private key of cert_file; NULL: read
                                 it from cert_file                         */
    const char *ca_file;      /* PEM file of trusted CA certificates       */
    const char *ca_path;      /* directory of them (c_rehash layout). With
                                 neither set, a client trusts the system
                                 store (/etc/ssl/certs)                    */
    int insecure;             /* client: 1 = do not verify the server's
                                 certificate at all. For tests only.       */
    int verify_client;        /* server: 1 = require a client certificate
                                 valid under ca_file / ca_path             */
    const char *alpn;         /* ALPN protocols in order of preference,
                                 comma-separated ("h2,http/1.1"); NULL:
                                 no ALPN. A server picks the first of its
                                 own list that the client offers and
                                 refuses a client that offers none of them
                                 (no_application_protocol alert)           */
    int min_version;          /* 0: WEFT_TLS_1_2                           */
    int max_version;          /* 0: the newest OpenSSL supports (1.3)      */
    const char *ciphers;      /* OpenSSL cipher list for TLS 1.2; NULL:
                                 OpenSSL's default                         */
    const char *ciphersuites; /* the same for TLS 1.3                      */
    int session_cache;        /* client: sessions kept for resumption, one
                                 per server name and address; 0: 256;
                                 -1: no resumption (either role). A TLS 1.3
                                 server sends its tickets after the
                                 handshake: a client gets them by reading  */
    int allow_unclean_eof;    /* 1: a TCP end of stream without
                                 close_notify reads as end of file (0)
                                 instead of -ECONNABORTED. Only for
                                 protocols that frame their own messages
                                 (HTTP with Content-Length).               */
} weft_tls_ctx_opts_t;

/**
 * weft_tls_ctx_new — create a client or server context.
 *
 * @out:  receives the context.
 * @opts: options; NULL is a client context with default settings
 *        (verification against the system store, TLS 1.2 and 1.3).
 *
 * A client verifies the server's certificate unless @opts->insecure: the
 * chain against ca_file / ca_path or the system store, and the host name
 * given to weft_tls_new() (a DNS name, checked against the certificate's
 * subjectAltName, and sent as SNI; or an IP address literal, checked
 * against its IP entries). Certificates and keys are read here, once.
 * Callable from any thread, outside fibers too; never blocks on the loop
 * (it reads files).
 *
 * Returns 0; -EINVAL (bad option, an unreadable or malformed PEM file, a
 * key that does not match the certificate, a server without certificate,
 * verify_client without CA); -ENOENT (a file that does not exist); -ENOMEM.
 * On failure weft_tls_error_string(NULL) tells why.
 */
int weft_tls_ctx_new(weft_tls_ctx_t **out, const weft_tls_ctx_opts_t *opts);

/**
 * weft_tls_ctx_free — drop the caller's reference to @ctx. Connections
 * made from it hold their own, so it may be freed while they live; it is
 * destroyed with the last one. NULL is ignored. Thread-safe.
 */
void weft_tls_ctx_free(weft_tls_ctx_t *ctx);

/**
 * weft_tls_ctx_openssl — the context's OpenSSL SSL_CTX (as void *), to set
 * what these options do not cover, before the first connection is made.
 */
void *weft_tls_ctx_openssl(weft_tls_ctx_t *ctx);

/**
 * weft_tls_new — wrap the connected stream socket @fd in a TLS connection
 * of @ctx's role, without any I/O yet (see weft_tls_handshake()).
 *
 * @fd:          a connected socket; the connection owns it from now on,
 *               also when this call fails (it is then closed), and closes
 *               it in weft_tls_close().
 * @server_name: client: the server's host name (for SNI, certificate
 *               verification and the resumption cache) or IP address
 *               literal; required unless the context is insecure. Server:
 *               ignored (NULL).
 *
 * Never blocks; callable outside fibers. Returns 0 and the connection in
 * *@out; -EINVAL (NULL argument, negative @fd, a client without
 * @server_name that would verify); -ENOMEM.
 */
int weft_tls_new(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd,
                 const char *server_name);

/**
 * weft_tls_handshake — perform the TLS handshake, as client or server by
 * the context's role. Calling it again after success returns 0 at once;
 * reads and writes run it themselves when it has not been done.
 *
 * Returns 0; -EKEYREJECTED, -EPROTO, -ECONNABORTED (see the top of this
 * file), -ETIMEDOUT (a handshake that stalls: the connection is then
 * usually worth closing, though calling again resumes it), -ECANCELED,
 * -EBADF, -ECONNRESET and other socket errors, -EPERM outside a fiber,
 * -EINVAL.
 */
int weft_tls_handshake(weft_tls_t *t, int64_t deadline);

/**
 * weft_tls_connect — weft_tls_new() and weft_tls_handshake() in one call,
 * as a client, on the connected socket @fd (owned from now on: closed on
 * failure). Returns 0 and the connection in *@out, or the error of either
 * call, with its text in weft_tls_error_string(NULL).
 */
int weft_tls_connect(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd,
                     const char *server_name, int64_t deadline);

/**
 * weft_tls_accept — weft_tls_new() and weft_tls_handshake() in one call,
 * as a server, on the accepted socket @fd (owned from now on: closed on
 * failure). Returns as weft_tls_connect().
 */
int weft_tls_accept(weft_tls_t **out, weft_tls_ctx_t *ctx, int fd,
                    int64_t deadline);

/**
 * weft_tls_dial — resolve @host (a name, or an address without brackets
 * such as "::1") with weft_getaddrinfo(), connect a TCP socket to @port on
 * the first address that accepts (TCP_NODELAY set), and handshake as a
 * client with @host as the server name. @deadline bounds all of it.
 *
 * Returns 0 and the connection in *@out; the errors of weft_getaddrinfo()
 * (-ENOENT for an unknown name, ...), of weft_connect() (-ECONNREFUSED,
 * ...), and of weft_tls_connect(); -EINVAL for a NULL argument or a port
 * outside 1..65535. The text is in weft_tls_error_string(NULL).
 */
int weft_tls_dial(weft_tls_t **out, weft_tls_ctx_t *ctx, const char *host,
                  int port, int64_t deadline);

/**
 * weft_tls_read — read up to @len bytes of plaintext into @buf.
 *
 * Returns as soon as some bytes are available (at most the ones already
 * received, as with read(2)). Returns the count; 0 at the end of the stream
 * (the peer's close_notify, then every later call); -ECONNABORTED when the
 * TCP connection ended without close_notify; -ETIMEDOUT, -ECANCELED (the
 * connection stays usable: no byte is lost); -EBADF when the connection
 * is closed (weft_tls_close()) while waiting; -EPROTO, -EKEYREJECTED,
 * socket errors; -EPERM outside a fiber; -EINVAL. @len 0 returns 0 once
 * the handshake is done.
 */
ssize_t weft_tls_read(weft_tls_t *t, void *buf, size_t len, int64_t deadline);

/**
 * weft_tls_write — encrypt and send up to @len bytes of @buf; returns the
 * count, which may be short (at most 64 KiB go per call).
 *
 * The bytes counted are committed to the TLS stream: they have been
 * encrypted and, unless the deadline passed or the fiber was cancelled
 * while they were being sent, handed to the kernel. Ciphertext left over
 * by such an interrupted send stays queued in the connection and goes out
 * first in the next write, weft_tls_flush(), read or weft_tls_shutdown();
 * it is never lost or sent twice. Returns the count; -ETIMEDOUT or
 * -ECANCELED when not a byte could be committed; -ESHUTDOWN after
 * weft_tls_shutdown(); -EPIPE, -ECONNRESET and other socket errors
 * (sticky); -EBADF; -EPROTO; -EPERM outside a fiber; -EINVAL. @len 0
 * returns 0.
 */
ssize_t weft_tls_write(weft_tls_t *t, const void *buf, size_t len,
                       int64_t deadline);

/**
 * weft_tls_write_all — write all @len bytes and wait until their
 * ciphertext has been handed to the kernel.
 *
 * @written: if non-NULL, receives the number of bytes committed to the
 *           stream (see weft_tls_write()), also on failure, so a caller
 *           can resume with the rest without losing or resending data.
 * Returns 0 or a negative errno as weft_tls_write().
 */
int weft_tls_write_all(weft_tls_t *t, const void *buf, size_t len,
                       size_t *written, int64_t deadline);

/**
 * weft_tls_flush — wait until no ciphertext is left queued in the
 * connection (see weft_tls_write()). Returns 0 or a negative errno as
 * weft_tls_write().
 */
int weft_tls_flush(weft_tls_t *t, int64_t deadline);

/**
 * weft_tls_shutdown — end this side's stream: send close_notify (after
 * whatever is queued) and wait until it is handed to the kernel. Reading
 * stays possible (the peer may still send until its own close_notify,
 * which weft_tls_read() reports as 0); writing afterwards returns
 * -ESHUTDOWN. It does not wait for the peer's close_notify: read until 0
 * for that. Calling it again returns 0. Returns 0 or a negative errno as
 * weft_tls_write().
 */
int weft_tls_shutdown(weft_tls_t *t, int64_t deadline);

/**
 * weft_tls_close — close the connection and its socket (weft_close()),
 * and free it.
 *
 * A healthy connection whose stream was not ended yet first tries to send
 * close_notify, and anything still queued, without waiting (what the
 * socket takes at once); call weft_tls_shutdown() first to be sure it
 * goes out. Fibers blocked in a call on @t wake with -EBADF, and the
 * memory is freed when the last of them has returned; @t must not be used
 * after this call by anyone else. Never blocks beyond weft_close();
 * callable outside fibers. Returns 0, or weft_close()'s error; -EINVAL
 * for NULL.
 */
int weft_tls_close(weft_tls_t *t);

/** weft_tls_fd — the connection's socket, or -1 once closed. */
int weft_tls_fd(const weft_tls_t *t);

/**
 * weft_tls_alpn — the ALPN protocol agreed in the handshake, or NULL when
 * none was (or before the handshake). Valid until weft_tls_close().
 */
const char *weft_tls_alpn(const weft_tls_t *t);

/** weft_tls_resumed — 1 if the handshake resumed an earlier session. */
int weft_tls_resumed(const weft_tls_t *t);

/** weft_tls_version — "TLSv1.3", "TLSv1.2", ... ("unknown" before the
 *  handshake). A static string. */
const char *weft_tls_version(const weft_tls_t *t);

/**
 * weft_tls_openssl — the connection's OpenSSL SSL object (as void *), for
 * what this API does not cover (peer certificate, cipher). Do not do I/O
 * through it.
 */
void *weft_tls_openssl(weft_tls_t *t);

/**
 * weft_tls_error_string — OpenSSL's text for the last failure on @t
 * (with the certificate verification error when that was the cause, such
 * as "certificate verify failed (hostname mismatch)"), or "" when there
 * was none. With @t NULL: the text of the last failed weft_tls_ctx_new(),
 * weft_tls_new(), weft_tls_connect(), weft_tls_accept() or weft_tls_dial()
 * of the calling fiber (outside fibers: of the calling thread), so fibers
 * that fail at the same time do not overwrite each other's text. The
 * string stays valid until the next failure it reports, until @t is
 * closed, or until the calling fiber ends.
 */
const char *weft_tls_error_string(const weft_tls_t *t);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TLS_H */
