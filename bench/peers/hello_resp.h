/*
 * hello_resp.h — the hello-world response every C peer of the HTTP
 * benchmark sends (the raw floors through raw_http.h, and uv_http.c), the
 * same bytes as weft's example server apart from the Server name: Server,
 * Date, Content-Type, Content-Length, and a Connection header where
 * HTTP/1.0 keep-alive or a close needs one. Rebuilt when the second
 * changes, as the example does. Header-only, one copy per thread.
 */
#ifndef HELLO_RESP_H
#define HELLO_RESP_H

#include <stdio.h>
#include <time.h>

static const char HELLO[] = "Hello, World!";

/* resp[0]: keep-alive by default (HTTP/1.1), [1]: HTTP/1.0 keep-alive,
 * [2]: close. */
static __thread struct {
    time_t at;
    char resp[3][256];
    size_t len[3];
} hello;

/* Index into hello.resp for a request: keep-alive or not, HTTP/1.<minor>. */
static inline int hello_variant(int keep, int minor)
{
    return !keep ? 2 : minor == 0 ? 1 : 0;
}

static void hello_refresh(const char *server)
{
    time_t t = time(NULL);
    if (t == hello.at)
        return;
    static const char *const conn_hdr[3] = {"", "Connection: keep-alive\r\n",
                                            "Connection: close\r\n"};
    struct tm tm;
    char date[64];
    gmtime_r(&t, &tm);
    strftime(date, sizeof date, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    for (int i = 0; i < 3; i++) {
        int n = snprintf(hello.resp[i], sizeof hello.resp[i],
                         "HTTP/1.1 200 OK\r\nServer: %s\r\n%s"
                         "Content-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n%s",
                         server, date, sizeof HELLO - 1, conn_hdr[i], HELLO);
        hello.len[i] = n > 0 ? (size_t)n : 0;
    }
    hello.at = t;
}

#endif
