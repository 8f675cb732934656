/*
 * http_tls.h — HTTPS for http_srv: a transport (http_srv.h) over weft_tls
 * connections. Its own file so that http_srv.c, the tests and benchmarks
 * that use plain HTTP, and the fuzzer never need OpenSSL.
 */
#ifndef WEFT_CONTRIB_HTTP_TLS_H
#define WEFT_CONTRIB_HTTP_TLS_H

#include "http_srv.h"

/*
 * http_tls_transport — fill @t with a TLS server transport for the
 * certificate chain @cert_file and its key @key_file (PEM), offering ALPN
 * "http/1.1". Any number of servers and threads may share it. Returns 0,
 * or a negative errno with the reason in @err (@errlen bytes).
 */
int http_tls_transport(http_transport *t, const char *cert_file, const char *key_file,
                       char *err, size_t errlen);

/* http_tls_transport_free — release what http_tls_transport() made; the
 * connections made through it may still be open (they hold the context). */
void http_tls_transport_free(http_transport *t);

#endif
