/*
 * https_get — fetch one URL over HTTPS with weft_tls: resolve the name
 * (weft_getaddrinfo), connect, handshake verifying the server's
 * certificate and host name, send a GET and write the body to stdout.
 *
 *   https_get [--ca FILE] [--insecure] [--include] [--verbose]
 *             [--timeout-ms MS] https://HOST[:PORT][/PATH]
 *
 * --ca trusts the CA certificates in FILE instead of the system store;
 * --insecure skips verification (tests only); --include writes the
 * response head too; --verbose tells on stderr what the handshake agreed.
 * The request is HTTP/1.0, so the body needs no chunked decoding and ends
 * with the connection. A connection that ends without close_notify is
 * accepted only when the response's Content-Length shows nothing is
 * missing. Exit status: 0 for a response, 1 for any failure (with the
 * reason on stderr).
 */
#include "weft.h"
#include "weft_tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static struct {
    const char *ca;
    int insecure, include, verbose;
    int64_t timeout_ns;
    char host[256], path[2048];
    int port;
} G = {.timeout_ns = 30 * 1000000000LL, .port = 443};

static void usage(void)
{
    fprintf(stderr, "usage: https_get [--ca FILE] [--insecure] [--include] [--verbose]\n"
                    "                 [--timeout-ms MS] https://HOST[:PORT][/PATH]\n");
    exit(2);
}

/* https://host[:port][/path], host possibly [v6]. Returns 0 or -1. */
static int parse_url(const char *url)
{
    if (strncasecmp(url, "https://", 8) != 0)
        return -1;
    const char *h = url + 8, *end;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end)
            return -1;
        h++;
    } else {
        end = h + strcspn(h, ":/?#");
    }
    size_t n = (size_t)(end - h);
    if (n == 0 || n >= sizeof G.host)
        return -1;
    memcpy(G.host, h, n);
    G.host[n] = '\0';
    const char *p = *end == ']' ? end + 1 : end;
    if (*p == ':') {
        char *e;
        long port = strtol(p + 1, &e, 10);
        if (port < 1 || port > 65535)
            return -1;
        G.port = (int)port;
        p = e;
    }
    if (*p && *p != '/' && *p != '?')
        return -1;
    snprintf(G.path, sizeof G.path, "%s%s", *p == '/' ? "" : "/", p);
    char *frag = strchr(G.path, '#');
    if (frag)
        *frag = '\0';
    return 0;
}

/* Content-Length of a complete response head, or -1. */
static long long content_length(const char *head, size_t n)
{
    for (const char *p = head; p && p < head + n; p = memchr(p, '\n', (size_t)(head + n - p))) {
        if (*p == '\n')
            p++;
        if (strncasecmp(p, "Content-Length:", 15) == 0)
            return atoll(p + 15);
    }
    return -1;
}

static void *fetch(void *arg)
{
    int *status = arg;
    int64_t deadline = weft_deadline_in(G.timeout_ns);
    weft_tls_ctx_opts_t o = {.ca_file = G.ca, .insecure = G.insecure, .alpn = "http/1.1"};
    weft_tls_ctx_t *ctx;
    int rc = weft_tls_ctx_new(&ctx, &o);
    if (rc < 0) {
        fprintf(stderr, "https_get: %s\n", weft_tls_error_string(NULL));
        return NULL;
    }
    weft_tls_t *t;
    rc = weft_tls_dial(&t, ctx, G.host, G.port, deadline);
    if (rc < 0) {
        fprintf(stderr, "https_get: %s: %s\n", G.host, weft_tls_error_string(NULL));
        weft_tls_ctx_free(ctx);
        return NULL;
    }
    if (G.verbose)
        fprintf(stderr, "https_get: %s, ALPN %s\n", weft_tls_version(t),
                weft_tls_alpn(t) ? weft_tls_alpn(t) : "none");
    char req[2560];
    int len = snprintf(req, sizeof req,
                       "GET %s HTTP/1.0\r\nHost: %s%s%s:%d\r\nUser-Agent: weft-https_get\r\n"
                       "Accept: */*\r\nConnection: close\r\n\r\n",
                       G.path, strchr(G.host, ':') ? "[" : "", G.host,
                       strchr(G.host, ':') ? "]" : "", G.port);
    rc = weft_tls_write_all(t, req, (size_t)len, NULL, deadline);
    /* The head is kept to find its end and Content-Length; the body is
     * written out as it comes. */
    char head[16384];
    size_t hlen = 0, body = 0;
    long long want = -1;
    int in_body = 0;
    char buf[16384];
    ssize_t n = 0;
    while (rc == 0 && (n = weft_tls_read(t, buf, sizeof buf, deadline)) > 0) {
        size_t off = 0;
        if (!in_body) {
            size_t take = (size_t)n < sizeof head - 1 - hlen ? (size_t)n : sizeof head - 1 - hlen;
            memcpy(head + hlen, buf, take);
            head[hlen + take] = '\0';
            char *e = strstr(head, "\r\n\r\n");
            if (!e) {
                hlen += take;
                if (hlen == sizeof head - 1) {
                    fprintf(stderr, "https_get: response head too long\n");
                    rc = -EPROTO;
                }
                continue;
            }
            size_t head_end = (size_t)(e + 4 - head);
            off = head_end - hlen; /* where the body starts in buf */
            in_body = 1;
            want = content_length(head, head_end);
            char *eol = strstr(head, "\r\n");
            fprintf(stderr, "https_get: %.*s\n", (int)(eol - head), head);
            if (G.include)
                fwrite(head, 1, head_end, stdout);
        }
        fwrite(buf + off, 1, (size_t)n - off, stdout);
        body += (size_t)n - off;
    }
    /* An end without close_notify (-ECONNABORTED) is fine only if the
     * response's own framing says nothing is missing. */
    if (rc == 0 && n < 0 && !(n == -ECONNABORTED && want >= 0 && (long long)body == want))
        rc = (int)n;
    if (rc == 0 && !in_body)
        rc = -EPROTO;
    if (rc == 0 && want >= 0 && (long long)body != want) {
        fprintf(stderr, "https_get: body of %zu bytes, Content-Length %lld\n", body, want);
        rc = -EPROTO;
    }
    if (rc < 0)
        fprintf(stderr, "https_get: %s (%s)\n", strerror(-rc), weft_tls_error_string(t));
    else
        *status = 0;
    fflush(stdout);
    weft_tls_close(t);
    weft_tls_ctx_free(ctx);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *url = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--insecure"))
            G.insecure = 1;
        else if (!strcmp(a, "--include"))
            G.include = 1;
        else if (!strcmp(a, "--verbose"))
            G.verbose = 1;
        else if (!strcmp(a, "--ca") && i + 1 < argc)
            G.ca = argv[++i];
        else if (!strcmp(a, "--timeout-ms") && i + 1 < argc)
            G.timeout_ns = atoll(argv[++i]) * 1000000LL;
        else if (a[0] != '-' && !url)
            url = a;
        else
            usage();
    }
    if (!url || parse_url(url) < 0)
        usage();
    int status = 1;
    int rc = weft_run(fetch, &status, NULL);
    if (rc < 0) {
        fprintf(stderr, "https_get: %s\n", strerror(-rc));
        return 1;
    }
    return status;
}
