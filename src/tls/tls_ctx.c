/*
 * tls_ctx.c — TLS contexts: options, certificates and trust, ALPN, the
 * client's session cache, and the mapping of OpenSSL's errors to the
 * documented errno set (see weft_tls.h).
 */
#include "tls_internal.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CACHE_DEFAULT 256

/* ---- errors ------------------------------------------------------------- */

/* The text of the last failure without a connection: per fiber (fibers
 * of one thread fail independently: a server's accept and a client's
 * connect in the same thread must not overwrite each other's text), and
 * per thread outside fibers. */
static __thread char thread_err_buf[WTLS_ERRLEN];
static weft_fls_key_t err_key;
static int err_key_ok;
static pthread_once_t err_once = PTHREAD_ONCE_INIT;

static void err_key_init(void)
{
    err_key_ok = weft_fls_key_create(&err_key, free) == 0;
}

char *weft_tls__thread_err(void)
{
    if (!weft_in_fiber())
        return thread_err_buf;
    pthread_once(&err_once, err_key_init);
    if (!err_key_ok)
        return thread_err_buf;
    char *b = weft_fls_get(err_key);
    if (!b && (b = calloc(1, WTLS_ERRLEN)) && weft_fls_set(err_key, b) != 0) {
        free(b);
        b = NULL;
    }
    return b ? b : thread_err_buf;
}

void weft_tls__err_text(SSL *ssl, const char *what, char *buf, size_t cap)
{
    unsigned long code = ERR_peek_error();
    char ossl[160] = "";
    if (code)
        ERR_error_string_n(code, ossl, sizeof ossl);
    long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (vr != X509_V_OK)
        snprintf(buf, cap, "%s%s%s (%s)", what ? what : "", what && *ossl ? ": " : "",
                 *ossl ? ossl : "certificate verify failed",
                 X509_verify_cert_error_string(vr));
    else
        snprintf(buf, cap, "%s%s%s", what ? what : "", what && *ossl ? ": " : "", ossl);
    ERR_clear_error();
}

/* Alerts (RFC 8446 §6.2) by which a peer says it rejected our
 * certificate; OpenSSL reports a received alert as reason 1000 + number. */
static int cert_alert(int reason)
{
    switch (reason - SSL_AD_REASON_OFFSET) {
    case SSL_AD_BAD_CERTIFICATE:
    case SSL_AD_UNSUPPORTED_CERTIFICATE:
    case SSL_AD_CERTIFICATE_REVOKED:
    case SSL_AD_CERTIFICATE_EXPIRED:
    case SSL_AD_CERTIFICATE_UNKNOWN:
    case SSL_AD_UNKNOWN_CA:
    case SSL_AD_ACCESS_DENIED:
    case SSL_AD_CERTIFICATE_REQUIRED:
        return 1;
    }
    return 0;
}

int weft_tls__map_error(SSL *ssl, int ssl_err, char *buf, size_t cap)
{
    unsigned long code = ERR_peek_error();
    int reason = code ? ERR_GET_REASON(code) : 0;
    int rc;
    if (ssl_err == SSL_ERROR_SYSCALL) {
        /* Our BIO never fails with errno; with an empty queue this is
         * OpenSSL's report of an end of stream without close_notify. */
        rc = code ? -EPROTO : -ECONNABORTED;
    } else if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        rc = -ECONNABORTED;
    } else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED ||
               (ssl && SSL_get_verify_result(ssl) != X509_V_OK) ||
               reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE ||
               cert_alert(reason)) {
        rc = -EKEYREJECTED;
    } else {
        rc = -EPROTO;
    }
    if (rc == -ECONNABORTED && !code)
        snprintf(buf, cap, "peer closed the connection without close_notify");
    else
        weft_tls__err_text(ssl, NULL, buf, cap);
    return rc;
}

/* A failure of context setup: text into the thread's buffer. */
static int setup_fail(int rc, const char *what, const char *file)
{
    char ctx[200];
    snprintf(ctx, sizeof ctx, "%s%s%s", what, file ? " " : "", file ? file : "");
    weft_tls__err_text(NULL, ctx, weft_tls__thread_err(), WTLS_ERRLEN);
    return rc;
}

/* -ENOENT for a file that is not there, else -EINVAL (unreadable PEM). */
static int file_error(const char *path)
{
    return access(path, R_OK) != 0 && errno == ENOENT ? -ENOENT : -EINVAL;
}

/* ---- ALPN ----------------------------------------------------------------- */

/* "h2,http/1.1" -> "\x02h2\x08http/1.1". Returns 0 or -EINVAL. */
static int alpn_wire(const char *list, unsigned char **out, size_t *outlen)
{
    size_t n = strlen(list);
    unsigned char *w = malloc(n + 1);
    if (!w)
        return -ENOMEM;
    size_t o = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len > 255) {
            free(w);
            return -EINVAL;
        }
        w[o++] = (unsigned char)len;
        memcpy(w + o, p, len);
        o += len;
        if (!comma)
            break;
        p = comma + 1;
    }
    *out = w;
    *outlen = o;
    return 0;
}

/* Server: the first of our protocols that the client offers. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    weft_tls_ctx_t *ctx = arg;
    unsigned char *sel;
    if (SSL_select_next_proto(&sel, outlen, ctx->alpn, (unsigned)ctx->alpn_len,
                              in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* ---- session cache (client) --------------------------------------------- */

/* A client connection's app data is its cache key (set by tls_conn.c). */
static int new_session(SSL *ssl, SSL_SESSION *sess)
{
    weft_tls_ctx_t *ctx = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const char *key = SSL_get_app_data(ssl);
    if (!ctx || !key || !SSL_SESSION_is_resumable(sess))
        return 0;
    weft_tls__cache_put(ctx, key, sess);
    return 1; /* the cache keeps the reference */
}

void weft_tls__cache_put(weft_tls_ctx_t *ctx, const char *key, SSL_SESSION *s)
{
    pthread_mutex_lock(&ctx->cache_mu);
    wtls_sess *slot = NULL;
    for (size_t i = 0; i < ctx->cache_n; i++)
        if (strcmp(ctx->cache[i].key, key) == 0) {
            slot = &ctx->cache[i];
            SSL_SESSION_free(slot->sess);
            break;
        }
    if (!slot && ctx->cache_n < ctx->cache_cap) {
        char *k = strdup(key);
        if (k) {
            slot = &ctx->cache[ctx->cache_n++];
            slot->key = k;
        }
    }
    if (!slot && ctx->cache_n > 0) { /* full: replace the least recent */
        slot = &ctx->cache[0];
        for (size_t i = 1; i < ctx->cache_n; i++)
            if (ctx->cache[i].used < slot->used)
                slot = &ctx->cache[i];
        char *k = strdup(key);
        if (k) {
            free(slot->key);
            slot->key = k;
        }
        SSL_SESSION_free(slot->sess);
        if (!k) { /* keep the table consistent: drop the entry */
            *slot = ctx->cache[--ctx->cache_n];
            slot = NULL;
        }
    }
    if (slot) {
        slot->sess = s;
        slot->used = ++ctx->cache_tick;
    } else {
        SSL_SESSION_free(s);
    }
    pthread_mutex_unlock(&ctx->cache_mu);
}

SSL_SESSION *weft_tls__cache_get(weft_tls_ctx_t *ctx, const char *key)
{
    SSL_SESSION *s = NULL;
    pthread_mutex_lock(&ctx->cache_mu);
    for (size_t i = 0; i < ctx->cache_n; i++) {
        wtls_sess *e = &ctx->cache[i];
        if (strcmp(e->key, key) != 0)
            continue;
        if (SSL_SESSION_get_protocol_version(e->sess) >= TLS1_3_VERSION) {
            s = e->sess; /* single use: the reference moves to the caller */
            free(e->key);
            *e = ctx->cache[--ctx->cache_n];
        } else {
            s = e->sess;
            SSL_SESSION_up_ref(s);
            e->used = ++ctx->cache_tick;
        }
        break;
    }
    pthread_mutex_unlock(&ctx->cache_mu);
    return s;
}

/* ---- contexts ----------------------------------------------------------- */

static int version_ok(int v)
{
    return v == 0 || v == WEFT_TLS_1_2 || v == WEFT_TLS_1_3;
}

static void ctx_destroy(weft_tls_ctx_t *ctx)
{
    for (size_t i = 0; i < ctx->cache_n; i++) {
        free(ctx->cache[i].key);
        SSL_SESSION_free(ctx->cache[i].sess);
    }
    free(ctx->cache);
    free(ctx->alpn);
    SSL_CTX_free(ctx->ssl_ctx);
    pthread_mutex_destroy(&ctx->cache_mu);
    free(ctx);
}

void weft_tls__ctx_ref(weft_tls_ctx_t *ctx)
{
    atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
}

void weft_tls_ctx_free(weft_tls_ctx_t *ctx)
{
    if (ctx && atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) == 1)
        ctx_destroy(ctx);
}

void *weft_tls_ctx_openssl(weft_tls_ctx_t *ctx)
{
    return ctx ? ctx->ssl_ctx : NULL;
}

static int load_identity(SSL_CTX *sc, const weft_tls_ctx_opts_t *o)
{
    if (SSL_CTX_use_certificate_chain_file(sc, o->cert_file) != 1)
        return setup_fail(file_error(o->cert_file), "cannot load certificate", o->cert_file);
    const char *key = o->key_file ? o->key_file : o->cert_file;
    if (SSL_CTX_use_PrivateKey_file(sc, key, SSL_FILETYPE_PEM) != 1)
        return setup_fail(file_error(key), "cannot load private key", key);
    if (SSL_CTX_check_private_key(sc) != 1)
        return setup_fail(-EINVAL, "private key does not match certificate", key);
    return 0;
}

static int load_trust(SSL_CTX *sc, const weft_tls_ctx_opts_t *o)
{
    if (o->ca_file || o->ca_path) {
        if (SSL_CTX_load_verify_locations(sc, o->ca_file, o->ca_path) != 1) {
            const char *f = o->ca_file ? o->ca_file : o->ca_path;
            return setup_fail(file_error(f), "cannot load CA certificates", f);
        }
    } else if (SSL_CTX_set_default_verify_paths(sc) != 1) {
        return setup_fail(-EINVAL, "cannot load the system trust store", NULL);
    }
    return 0;
}

static int configure(weft_tls_ctx_t *ctx, const weft_tls_ctx_opts_t *o)
{
    SSL_CTX *sc = ctx->ssl_ctx;
    SSL_CTX_set_app_data(sc, ctx);
    /* No renegotiation: a TLS 1.2 peer cannot restart the handshake in
     * the middle of the stream (it would make reads write). */
    SSL_CTX_set_options(sc, SSL_OP_NO_RENEGOTIATION |
                                (o->allow_unclean_eof ? SSL_OP_IGNORE_UNEXPECTED_EOF : 0));
    /* Writes go out one record per SSL_write call (see tls_conn.c). */
    SSL_CTX_set_mode(sc, SSL_MODE_ENABLE_PARTIAL_WRITE |
                             SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_set_min_proto_version(sc, o->min_version ? o->min_version : WEFT_TLS_1_2) != 1 ||
        SSL_CTX_set_max_proto_version(sc, o->max_version) != 1)
        return setup_fail(-EINVAL, "bad protocol version", NULL);
    if (o->ciphers && SSL_CTX_set_cipher_list(sc, o->ciphers) != 1)
        return setup_fail(-EINVAL, "bad cipher list", o->ciphers);
    if (o->ciphersuites && SSL_CTX_set_ciphersuites(sc, o->ciphersuites) != 1)
        return setup_fail(-EINVAL, "bad TLS 1.3 cipher suites", o->ciphersuites);
    if (o->alpn) {
        int rc = alpn_wire(o->alpn, &ctx->alpn, &ctx->alpn_len);
        if (rc < 0)
            return setup_fail(rc, "bad ALPN list", o->alpn);
        if (!o->server &&
            SSL_CTX_set_alpn_protos(sc, ctx->alpn, (unsigned)ctx->alpn_len) != 0)
            return setup_fail(-ENOMEM, "ALPN", NULL);
        if (o->server)
            SSL_CTX_set_alpn_select_cb(sc, alpn_select, ctx);
    }
    if (o->server) {
        if (!o->cert_file)
            return setup_fail(-EINVAL, "a server context needs cert_file", NULL);
        int rc = load_identity(sc, o);
        if (rc < 0)
            return rc;
        static const unsigned char sid_ctx[] = "weft_tls";
        SSL_CTX_set_session_id_context(sc, sid_ctx, sizeof sid_ctx - 1);
        if (o->verify_client) {
            if (!o->ca_file && !o->ca_path)
                return setup_fail(-EINVAL, "verify_client needs ca_file or ca_path", NULL);
            if ((rc = load_trust(sc, o)) < 0)
                return rc;
            SSL_CTX_set_verify(sc, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        }
        if (o->session_cache < 0) {
            SSL_CTX_set_options(sc, SSL_OP_NO_TICKET);
            SSL_CTX_set_session_cache_mode(sc, SSL_SESS_CACHE_OFF);
            SSL_CTX_set_num_tickets(sc, 0);
        }
        return 0;
    }
    if (o->cert_file) {
        int rc = load_identity(sc, o);
        if (rc < 0)
            return rc;
    }
    if (!o->insecure) {
        int rc = load_trust(sc, o);
        if (rc < 0)
            return rc;
        SSL_CTX_set_verify(sc, SSL_VERIFY_PEER, NULL);
    }
    if (o->session_cache >= 0) {
        ctx->cache_cap = o->session_cache ? (size_t)o->session_cache : CACHE_DEFAULT;
        ctx->cache = calloc(ctx->cache_cap, sizeof *ctx->cache);
        if (!ctx->cache)
            return setup_fail(-ENOMEM, "session cache", NULL);
        SSL_CTX_set_session_cache_mode(sc, SSL_SESS_CACHE_CLIENT |
                                               SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(sc, new_session);
    } else {
        SSL_CTX_set_session_cache_mode(sc, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(sc, SSL_OP_NO_TICKET);
    }
    return 0;
}

int weft_tls_ctx_new(weft_tls_ctx_t **out, const weft_tls_ctx_opts_t *opts)
{
    static const weft_tls_ctx_opts_t defaults;
    const weft_tls_ctx_opts_t *o = opts ? opts : &defaults;
    if (!out)
        return setup_fail(-EINVAL, "NULL argument", NULL);
    *out = NULL;
    if ((o->server != 0 && o->server != 1) || !version_ok(o->min_version) ||
        !version_ok(o->max_version) ||
        (o->max_version && o->min_version > o->max_version))
        return setup_fail(-EINVAL, "bad option", NULL);
    weft_tls_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return setup_fail(-ENOMEM, "out of memory", NULL);
    ERR_clear_error();
    ctx->ssl_ctx = SSL_CTX_new(o->server ? TLS_server_method() : TLS_client_method());
    if (!ctx->ssl_ctx) {
        free(ctx);
        return setup_fail(-ENOMEM, "SSL_CTX_new", NULL);
    }
    atomic_init(&ctx->refs, 1);
    pthread_mutex_init(&ctx->cache_mu, NULL);
    ctx->server = o->server;
    ctx->insecure = !o->server && o->insecure;
    int rc = configure(ctx, o);
    if (rc < 0) {
        ctx_destroy(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}
