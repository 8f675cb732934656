/*
 * t_http_parse — the HTTP request-head parser of contrib/http: accepted
 * forms, every refusal with its status, limits crossed while the head is
 * still incomplete, and the same answers when the bytes arrive one at a
 * time (incremental scan) as when they arrive at once.
 */
#include "harness.h"
#include "http/http_parse.h"

static http_req req;

/* Parse @s all at once and one byte at a time; both must agree. */
static int parse2(const char *s, size_t n, const http_limits *lim)
{
    http_scan sc;
    http_scan_reset(&sc);
    int whole = http_parse(&sc, s, n, lim, &req);
    http_scan_reset(&sc);
    int inc = 0;
    for (size_t i = 1; i <= n; i++) {
        inc = http_parse(&sc, s, i, lim, &req);
        if (inc != 0)
            break;
    }
    if (inc != whole) {
        fprintf(stderr, "whole %d, incremental %d for: %.*s\n", whole, inc,
                (int)(n > 80 ? 80 : n), s);
        exit(1);
    }
    return whole;
}

static int P(const char *s)
{
    return parse2(s, strlen(s), NULL);
}

#define HOST "Host: example.com\r\n"

static void accepted(void)
{
    const char *r = "GET /index.html?q=1 HTTP/1.1\r\n" HOST "Accept: */*\r\n\r\n";
    CHECK_EQ(P(r), strlen(r));
    CHECK_EQ(req.method, HTTP_M_GET);
    CHECK_EQ(req.target_len, strlen("/index.html?q=1"));
    CHECK(memcmp(req.target, "/index.html?q=1", req.target_len) == 0);
    CHECK_EQ(req.version_minor, 1);
    CHECK_EQ(req.keep_alive, 1);
    CHECK_EQ(req.nheaders, 2);
    CHECK(http_name_is(&req.headers[1], "accept"));
    CHECK_EQ(req.content_length, 0);

    /* Whitespace around values is trimmed; names are case-insensitive. */
    r = "HEAD / HTTP/1.1\r\nhOsT:   a \t\r\nCONNECTION: Close\r\n\r\n";
    CHECK_EQ(P(r), strlen(r));
    CHECK_EQ(req.method, HTTP_M_HEAD);
    CHECK_EQ(req.headers[0].value_len, 1);
    CHECK_EQ(req.keep_alive, 0);

    /* HTTP/1.0: close unless keep-alive; Host optional. */
    r = "GET / HTTP/1.0\r\n\r\n";
    CHECK_EQ(P(r), strlen(r));
    CHECK_EQ(req.keep_alive, 0);
    r = "GET / HTTP/1.0\r\nConnection: foo, Keep-Alive\r\n\r\n";
    CHECK_EQ(P(r), strlen(r));
    CHECK_EQ(req.keep_alive, 1);

    /* A body length; repeated identical Content-Length is fine. */
    r = "GET / HTTP/1.1\r\n" HOST "Content-Length: 5\r\ncontent-length: 5\r\n\r\nhello";
    CHECK_EQ(P(r), strlen(r) - 5);
    CHECK_EQ(req.content_length, 5);

    /* Leading empty lines are skipped; pipelined bytes are not consumed. */
    r = "\r\n\r\nGET /a HTTP/1.1\r\n" HOST "\r\nGET /b HTTP/1.1\r\n";
    CHECK_EQ(P(r), strlen("\r\n\r\nGET /a HTTP/1.1\r\n" HOST "\r\n"));

    /* Method classes: the server answers 405 / 501 for these. */
    CHECK(P("POST / HTTP/1.1\r\n" HOST "\r\n") > 0);
    CHECK_EQ(req.method, HTTP_M_OTHER);
    CHECK(P("BREW / HTTP/1.1\r\n" HOST "\r\n") > 0);
    CHECK_EQ(req.method, HTTP_M_UNKNOWN);
    CHECK(P("get / HTTP/1.1\r\n" HOST "\r\n") > 0); /* methods are case-sensitive */
    CHECK_EQ(req.method, HTTP_M_UNKNOWN);
    CHECK(P("OPTIONS * HTTP/1.1\r\n" HOST "\r\n") > 0);
    CHECK(P("GET http://example.com/x HTTP/1.1\r\n" HOST "\r\n") > 0);

    /* A path's UTF-8 sent raw (not percent-encoded) is taken as sent. */
    r = "GET /caf\xc3\xa9?q=\xe2\x82\xac HTTP/1.1\r\n" HOST "\r\n";
    CHECK_EQ(P(r), strlen(r));
    CHECK_EQ(req.target_len, strlen("/caf\xc3\xa9?q=\xe2\x82\xac"));
    CHECK(memcmp(req.target, "/caf\xc3\xa9?q=\xe2\x82\xac", req.target_len) == 0);

    /* Incomplete heads ask for more. */
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST), 0);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "\r"), 0);
    CHECK_EQ(P(""), 0);
}

static void refused(void)
{
    /* 400: syntax. */
    CHECK_EQ(P("GET  / HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1 \r\n" HOST "\r\n"), -400);
    CHECK_EQ(P("GET /\x7f HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ(P("GET /\x01 HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ(P("GET /\t HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ(P("GET / HTTX/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\n" HOST "\r\n"), -400);          /* bare LF */
    CHECK_EQ(P("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n"), -400);  /* bare CR */
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "X: a\x01" "b\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "NoColon\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Bad Name: x\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "X : x\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "X: a\r\n folded\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "\r\r\nX: y\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n\r\n"), -400);                /* no Host */
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST HOST "\r\n"), -400);   /* two Hosts */
    CHECK_EQ(P("GET x HTTP/1.1\r\n" HOST "\r\n"), -400);        /* bad target */
    CHECK_EQ(P("GET * HTTP/1.1\r\n" HOST "\r\n"), -400);
    CHECK_EQ(P(" GET / HTTP/1.1\r\n" HOST "\r\n"), -400);
    {
        static const char nul[] = "GET /a\0b HTTP/1.1\r\nHost: x\r\n\r\n";
        CHECK_EQ(parse2(nul, sizeof nul - 1, NULL), -400);
        static const char nul2[] = "GET / HTTP/1.1\r\nHost: x\0";
        CHECK_EQ(parse2(nul2, sizeof nul2 - 1, NULL), -400); /* before the end */
    }
    /* 400: Content-Length that is malformed or conflicting; smuggling. */
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Content-Length: 5\r\nContent-Length: 6\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Content-Length: 5, 5\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Content-Length: -1\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Content-Length: +1\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Content-Length:\r\n\r\n"), -400);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "Content-Length: 99999999999999999999\r\n\r\n"), -400);
    CHECK_EQ(P("POST / HTTP/1.1\r\n" HOST "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), -400);
    /* 501: transfer codings; 505: other major versions; 413: big bodies. */
    CHECK_EQ(P("POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"), -501);
    CHECK_EQ(P("GET / HTTP/2.0\r\n" HOST "\r\n"), -505);
    CHECK_EQ(P("GET / HTTP/0.9\r\n" HOST "\r\n"), -505);
    CHECK_EQ(P("POST / HTTP/1.1\r\n" HOST "Content-Length: 2000000\r\n\r\n"), -413);
}

static void limits(void)
{
    const http_limits *d = &http_default_limits;
    static char buf[200000];
    /* 414: a request line one byte over the limit, refused before its end. */
    size_t n = (size_t)sprintf(buf, "GET /");
    memset(buf + n, 'a', d->max_request_line);
    n += d->max_request_line;
    CHECK_EQ(parse2(buf, n, NULL), -414);
    /* Exactly at the limit is fine. */
    n = (size_t)sprintf(buf, "GET /");
    size_t pad = d->max_request_line - strlen("GET / HTTP/1.1") ;
    memset(buf + n, 'a', pad);
    n += pad;
    n += (size_t)sprintf(buf + n, " HTTP/1.1\r\n" HOST "\r\n");
    CHECK_EQ(parse2(buf, n, NULL), (int)n);

    /* 431: one header line too long. */
    n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\n" HOST "X: ");
    memset(buf + n, 'v', d->max_header_line);
    n += d->max_header_line;
    CHECK_EQ(parse2(buf, n, NULL), -431);
    /* 431: too many header fields. */
    n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\n" HOST);
    for (unsigned i = 0; i < d->max_headers; i++)
        n += (size_t)sprintf(buf + n, "X-%u: v\r\n", i);
    n += (size_t)sprintf(buf + n, "\r\n");
    CHECK_EQ(parse2(buf, n, NULL), -431);
    /* max_headers fields exactly is fine. */
    n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\n" HOST);
    for (unsigned i = 1; i < d->max_headers; i++)
        n += (size_t)sprintf(buf + n, "X-%u: v\r\n", i);
    n += (size_t)sprintf(buf + n, "\r\n");
    CHECK_EQ(parse2(buf, n, NULL), (int)n);
    CHECK_EQ(req.nheaders, d->max_headers);
    /* 431: the head as a whole too large (each line within its limit). */
    n = (size_t)sprintf(buf, "GET / HTTP/1.1\r\n" HOST);
    for (int i = 0; i < 5; i++) {
        n += (size_t)sprintf(buf + n, "X-%d: ", i);
        memset(buf + n, 'v', 4000);
        n += 4000;
        n += (size_t)sprintf(buf + n, "\r\n");
    }
    CHECK_EQ(parse2(buf, n, NULL), -431);
    /* Endless empty lines are not a request. */
    n = 0;
    for (int i = 0; i < 1000; i++)
        n += (size_t)sprintf(buf + n, "\r\n");
    CHECK_EQ(parse2(buf, n, NULL), -400);

    /* Custom limits. */
    http_limits small = {.max_request_line = 20, .max_header_line = 20,
                         .max_head = 100, .max_headers = 2, .max_body = 10};
    CHECK_EQ(parse2("GET /0123456789abcdef HTTP/1.1\r\n", 32, &small), -414);
    CHECK_EQ(P("GET / HTTP/1.1\r\n" HOST "\r\n") > 0, 1);
    const char *r = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
    CHECK_EQ(parse2(r, strlen(r), &small), -431);
    r = "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n";
    CHECK_EQ(parse2(r, strlen(r), &small), -413);
}

static void reasons(void)
{
    CHECK(strcmp(http_reason(414), "URI Too Long") == 0);
    CHECK(strcmp(http_reason(431), "Request Header Fields Too Large") == 0);
    CHECK(strcmp(http_reason(999), "Unknown") == 0);
}

int main(void)
{
    h_begin("t_http_parse");
    accepted();
    refused();
    limits();
    reasons();
    weft_sched_self();
    return h_end();
}
