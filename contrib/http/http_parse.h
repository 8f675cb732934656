/*
 * http_parse.h — HTTP/1.x request-head parser used by the HTTP examples.
 *
 * Zero-copy: a parsed request points into the caller's buffer. Incremental:
 * the caller appends bytes to one buffer and calls http_parse() again with a
 * scanner that remembers how far it has looked, so a head that arrives one
 * byte at a time costs linear, not quadratic, work. Limits are checked while
 * the head is still incomplete, so an overlong request line or an endless
 * header block is refused as soon as it crosses the limit, not when (if
 * ever) it ends.
 *
 * The parser decides everything about framing (where the head ends, how
 * long the body is, whether the connection persists) and reports protocol
 * errors as the HTTP status the server should answer with; what to do with
 * a well-formed request (which methods are served) is the server's choice.
 */
#ifndef WEFT_EXAMPLES_HTTP_PARSE_H
#define WEFT_EXAMPLES_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Maximum headers stored in http_req (the limit itself is in http_limits). */
#define HTTP_MAX_HEADERS 100

typedef struct http_limits {
    size_t max_request_line; /* bytes, CRLF excluded; longer -> 414        */
    size_t max_header_line;  /* one header field line; longer -> 431       */
    size_t max_head;         /* request line + headers + CRLFs; -> 431     */
    unsigned max_headers;    /* header fields (<= HTTP_MAX_HEADERS); -> 431 */
    uint64_t max_body;       /* Content-Length above this -> 413           */
    int accept_chunked;      /* nonzero: Transfer-Encoding: chunked request
                              * bodies are accepted (http_req.chunked set;
                              * the caller decodes them and enforces its
                              * own body limit); zero: -501, as before      */
} http_limits;

/* Defaults: 8 KiB request line, 8 KiB header line, 16 KiB head, 64
 * headers, 1 MiB body. */
extern const http_limits http_default_limits;

typedef enum {
    HTTP_M_GET = 1,
    HTTP_M_HEAD,
    HTTP_M_OTHER,   /* a standard method (POST, PUT, ...): server says 405 */
    HTTP_M_UNKNOWN  /* a syntactically valid, unknown token: 501          */
} http_method;

typedef struct http_header {
    const char *name;
    size_t name_len;
    const char *value; /* leading and trailing whitespace removed         */
    size_t value_len;
} http_header;

typedef struct http_req {
    http_method method;
    const char *method_str;
    size_t method_len;
    const char *target; /* request-target as sent (not decoded)           */
    size_t target_len;
    int version_minor;  /* HTTP/1.<minor>: 0 or 1 (higher minors read as 1) */
    int keep_alive;     /* persistent connection after this request        */
    uint64_t content_length; /* body bytes that follow the head (0: none)  */
    int chunked;        /* the body is chunked (only with accept_chunked) */
    unsigned nheaders;
    http_header headers[HTTP_MAX_HEADERS];
} http_req;

/* Where an incremental parse stands; zero it (http_scan_reset) before the
 * first call for each request. */
typedef struct http_scan {
    size_t pos;        /* bytes examined                                  */
    size_t line_start; /* start of the line being scanned                 */
    size_t head_start; /* first byte after leading empty lines            */
    unsigned lines;    /* complete non-empty lines seen                   */
} http_scan;

void http_scan_reset(http_scan *sc);

/*
 * http_parse — parse the request head at the start of @buf[0..@len).
 *
 * @sc must be the same scanner across calls for one request while the
 * caller only appends to the buffer (the buffer may move in memory; only
 * offsets are remembered). @lim NULL means http_default_limits.
 *
 * Returns the number of bytes of the head (the body, if any, starts there)
 * with *@req filled in; 0 when the head is incomplete and no limit has been
 * crossed yet; or a negative HTTP status: -400 bad syntax (including NUL
 * and other control bytes, bare CR or LF, obsolete line folding, a bad or
 * conflicting Content-Length, Content-Length together with
 * Transfer-Encoding, a missing or repeated Host in HTTP/1.1), -414 request
 * line too long, -431 header line too long, too many header fields or head
 * too large, -413 Content-Length above the limit, -501 a Transfer-Encoding
 * (request bodies are only accepted with Content-Length), -505 an HTTP
 * major version other than 1.
 *
 * With @lim->accept_chunked, a request whose only transfer coding is
 * "chunked" (one Transfer-Encoding field, HTTP/1.1) is accepted with
 * req->chunked = 1 and content_length 0; chunked not last, an empty value,
 * or Transfer-Encoding in HTTP/1.0 -> -400 (RFC 9112 6.1, 6.3); other
 * codings before chunked, or the field repeated -> -501.
 */
int http_parse(http_scan *sc, const char *buf, size_t len,
               const http_limits *lim, http_req *req);

/* Case-insensitive comparison of a header name with a C string. */
int http_name_is(const http_header *h, const char *name);

/* The reason phrase of a registered status code ("Bad Request"), or
 * "Unknown". */
const char *http_reason(int status);

#endif
