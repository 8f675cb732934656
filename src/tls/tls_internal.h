/*
 * tls_internal.h — what the two halves of libweft_tls share: the context
 * (tls_ctx.c: options, certificates, the client session cache, error
 * texts) and the connection (tls_conn.c: the memory BIO and the I/O).
 * Only weft.h's public API is used below this layer.
 */
#ifndef WEFT_TLS_INTERNAL_H
#define WEFT_TLS_INTERNAL_H

#include "weft.h"
#include "weft_tls.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>

#define WTLS_ERRLEN 256

/* Everything declared here is shared between the two files only: hidden,
 * so libweft_tls.so exports nothing but the weft_tls_* API. */
#pragma GCC visibility push(hidden)

typedef struct wtls_sess {
    char *key;          /* server name + ' ' + peer address        */
    SSL_SESSION *sess;
    uint64_t used;      /* last use, for eviction                  */
} wtls_sess;

struct weft_tls_ctx {
    SSL_CTX *ssl_ctx;
    atomic_int refs;
    int server;
    int insecure;
    unsigned char *alpn;  /* wire format: length-prefixed names */
    size_t alpn_len;
    /* Client session cache (one entry per key), cap 0 = off. */
    pthread_mutex_t cache_mu;
    wtls_sess *cache;
    size_t cache_n, cache_cap;
    uint64_t cache_tick;
};

void weft_tls__ctx_ref(weft_tls_ctx_t *ctx);

/* Session cache (client contexts). get: a referenced session for @key or
 * NULL (TLS 1.3 sessions are taken out: tickets are single-use). */
SSL_SESSION *weft_tls__cache_get(weft_tls_ctx_t *ctx, const char *key);
void weft_tls__cache_put(weft_tls_ctx_t *ctx, const char *key, SSL_SESSION *s);

/* Text of the OpenSSL error queue's first entry (and the verification
 * result of @ssl when it failed) into @buf; clears the queue. */
void weft_tls__err_text(SSL *ssl, const char *what, char *buf, size_t cap);

/* Map a failed SSL_* call's SSL_get_error() code (SSL_ERROR_SSL or
 * SSL_ERROR_SYSCALL) to the documented errno set, filling @buf. */
int weft_tls__map_error(SSL *ssl, int ssl_err, char *buf, size_t cap);

/* The calling thread's error text for calls without a connection. */
char *weft_tls__thread_err(void);

#pragma GCC visibility pop

#endif
