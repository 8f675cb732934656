/*
 * http_tls.c — the HTTPS transport of http_srv over weft_tls (see
 * http_tls.h). Each call maps straight onto a weft_tls call; a connection
 * whose handshake fails is closed by weft_tls_accept().
 */
#include "http_tls.h"

#include "weft.h"
#include "weft_tls.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static void *tls_open(void *ctx, int fd, int64_t deadline)
{
    weft_tls_t *t;
    return weft_tls_accept(&t, ctx, fd, deadline) == 0 ? t : NULL;
}

static ssize_t tls_recv(void *conn, void *buf, size_t len, int64_t deadline)
{
    return weft_tls_read(conn, buf, len, deadline);
}

static ssize_t tls_send(void *conn, const void *buf, size_t len, int64_t deadline)
{
    return weft_tls_write(conn, buf, len, deadline);
}

/* close_notify, then the TCP half-close a plain connection would get. */
static void tls_shutdown(void *conn, int64_t deadline)
{
    weft_tls_shutdown(conn, deadline);
    weft_shutdown(weft_tls_fd(conn), SHUT_WR);
}

static void tls_close(void *conn)
{
    weft_tls_close(conn);
}

int http_tls_transport(http_transport *t, const char *cert_file, const char *key_file,
                       char *err, size_t errlen)
{
    weft_tls_ctx_opts_t o = {.server = 1, .cert_file = cert_file, .key_file = key_file,
                             .alpn = "http/1.1"};
    weft_tls_ctx_t *ctx;
    int rc = weft_tls_ctx_new(&ctx, &o);
    if (rc < 0) {
        snprintf(err, errlen, "%s", weft_tls_error_string(NULL));
        return rc;
    }
    *t = (http_transport){.ctx = ctx, .open = tls_open, .recv = tls_recv, .send = tls_send,
                          .shutdown = tls_shutdown, .close = tls_close};
    return 0;
}

void http_tls_transport_free(http_transport *t)
{
    weft_tls_ctx_free(t->ctx);
    t->ctx = NULL;
}
