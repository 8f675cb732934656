/*
 * http_parse.c — HTTP/1.x request-head parser (see http_parse.h).
 *
 * Two passes over the head. The scan (incremental, restartable) only looks
 * for line ends with memchr, rejects NUL and bare LF early and enforces the
 * size limits; the parse runs once over the complete head with byte tables,
 * so the common case — a whole request in one read — touches each byte
 * about twice and never backtracks. Strict where laxness enables request
 * smuggling (RFC 9112 section 11.2): no obsolete line folding, no
 * whitespace before a colon, CRLF line ends only, one agreed
 * Content-Length, no Content-Length with Transfer-Encoding.
 */
#include "http_parse.h"

#include <string.h>

const http_limits http_default_limits = {
    .max_request_line = 8192,
    .max_header_line = 8192,
    .max_head = 16384,
    .max_headers = 64,
    .max_body = 1 << 20,
};

/* token characters (RFC 9110 tchar) */
static const uint8_t tchar[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* field-value characters: VCHAR, obs-text, SP, HTAB */
static const uint8_t vchar[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* request-target characters: VCHAR, and obs-text (0x80-0xFF). A URI is
 * ASCII (RFC 3986), but clients that do not percent-encode send a path's
 * UTF-8 raw, and servers in wide use take it as sent; the target is
 * still ended only by SP, so these bytes cannot change how the line is
 * split. Controls, SP and DEL stay refused. */
static const uint8_t gchar[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

/* Leading empty lines tolerated before a request line (RFC 9112 2.2). */
#define MAX_LEADING_EMPTY 64

void http_scan_reset(http_scan *sc)
{
    sc->pos = sc->line_start = sc->head_start = 0;
    sc->lines = 0;
}

static inline unsigned char lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static int ieq(const char *a, size_t n, const char *b)
{
    size_t i = 0;
    for (; i < n && b[i]; i++)
        if (lower((unsigned char)a[i]) != (unsigned char)b[i])
            return 0;
    return i == n && b[i] == '\0';
}

int http_name_is(const http_header *h, const char *name)
{
    return ieq(h->name, h->name_len, name);
}

static http_method classify(const char *m, size_t n)
{
    /* Methods are case-sensitive (RFC 9110 9.1). */
    static const char *const others[] = {"POST", "PUT", "DELETE", "OPTIONS",
                                         "TRACE", "CONNECT", "PATCH", NULL};
    if (n == 3 && memcmp(m, "GET", 3) == 0)
        return HTTP_M_GET;
    if (n == 4 && memcmp(m, "HEAD", 4) == 0)
        return HTTP_M_HEAD;
    for (int i = 0; others[i]; i++)
        if (strlen(others[i]) == n && memcmp(m, others[i], n) == 0)
            return HTTP_M_OTHER;
    return HTTP_M_UNKNOWN;
}

/* Connection: a comma-separated token list. */
static void connection_tokens(const char *v, size_t n, int *close, int *ka)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
            i++;
        if (ieq(v + s, i - s, "close"))
            *close = 1;
        else if (ieq(v + s, i - s, "keep-alive"))
            *ka = 1;
    }
}

/*
 * Transfer-Encoding of a request (@count fields, @h the last): 0 when the
 * only coding is chunked, else the status to answer. Chunked must be the
 * final coding or the length is unknowable (400, RFC 9112 6.3); other
 * codings (gzip, chunked) and repeated fields are not implemented (501);
 * HTTP/1.0 has no transfer codings (400, RFC 9112 6.1).
 */
static int transfer_coding(const http_header *h, int count, int version_minor)
{
    if (version_minor == 0)
        return -400;
    const char *v = h->value;
    size_t n = h->value_len;
    /* The last list member, without whitespace around it. */
    size_t e = n;
    while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
        e--;
    size_t b = e;
    while (b > 0 && v[b - 1] != ',')
        b--;
    size_t last = b;
    while (last < e && (v[last] == ' ' || v[last] == '\t'))
        last++;
    if (!ieq(v + last, e - last, "chunked"))
        return -400;
    if (count > 1)
        return -501;
    for (size_t i = 0; i < b; i++)
        if (v[i] != ' ' && v[i] != '\t' && v[i] != ',')
            return -501; /* another coding before chunked */
    return b > 0 ? -400 : 0; /* "chunked" alone; ", chunked" is malformed */
}

/* Parse the complete head @p[0..@n), which ends with CRLF CRLF. */
static int parse_head(const char *p, size_t n, const http_limits *lim,
                      http_req *r)
{
    const unsigned char *s = (const unsigned char *)p;
    const unsigned char *end = s + n;

    /* request-line = method SP request-target SP HTTP-version CRLF */
    const unsigned char *m = s;
    while (tchar[*s])
        s++;
    if (s == m || *s != ' ')
        return -400;
    r->method_str = (const char *)m;
    r->method_len = (size_t)(s - m);
    r->method = classify(r->method_str, r->method_len);
    const unsigned char *t = ++s;
    while (gchar[*s])
        s++;
    if (s == t || *s != ' ')
        return -400;
    r->target = (const char *)t;
    r->target_len = (size_t)(s - t);
    s++;
    if (end - s < 10 || memcmp(s, "HTTP/", 5) != 0 || s[5] < '0' ||
        s[5] > '9' || s[6] != '.' || s[7] < '0' || s[7] > '9' ||
        s[8] != '\r' || s[9] != '\n')
        return -400;
    if (s[5] != '1')
        return -505;
    r->version_minor = s[7] == '0' ? 0 : 1;
    s += 10;

    /* The target's form must suit the method (RFC 9112 3.2). */
    if (t[0] == '*') {
        if (r->target_len != 1 || r->method_len != 7 ||
            memcmp(r->method_str, "OPTIONS", 7) != 0)
            return -400;
    } else if (t[0] != '/') {
        int connect = r->method_len == 7 && memcmp(r->method_str, "CONNECT", 7) == 0;
        if (!connect && !(r->target_len > 7 && ieq((const char *)t, 7, "http://")) &&
            !(r->target_len > 8 && ieq((const char *)t, 8, "https://")))
            return -400;
    }

    uint64_t cl = 0;
    const http_header *te_h = NULL;
    int cl_seen = 0, te = 0, hosts = 0, close = 0, ka = 0;
    unsigned max_h = lim->max_headers < HTTP_MAX_HEADERS ? lim->max_headers
                                                         : HTTP_MAX_HEADERS;
    r->nheaders = 0;
    while (!(s[0] == '\r' && s[1] == '\n')) {
        /* field-line = field-name ":" OWS field-value OWS; a line starting
         * with whitespace (obs-fold) fails here as an empty name. */
        const unsigned char *ns = s;
        while (tchar[*s])
            s++;
        if (s == ns || *s != ':')
            return -400;
        size_t nlen = (size_t)(s - ns);
        s++;
        while (*s == ' ' || *s == '\t')
            s++;
        const unsigned char *vs = s;
        while (vchar[*s])
            s++;
        if (s[0] != '\r' || s[1] != '\n')
            return -400; /* a control byte, NUL or bare CR */
        const unsigned char *ve = s;
        while (ve > vs && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        s += 2;
        if (r->nheaders >= max_h)
            return -431;
        http_header *h = &r->headers[r->nheaders++];
        h->name = (const char *)ns;
        h->name_len = nlen;
        h->value = (const char *)vs;
        h->value_len = (size_t)(ve - vs);

        switch (nlen) {
        case 4:
            if (http_name_is(h, "host"))
                hosts++;
            break;
        case 10:
            if (http_name_is(h, "connection"))
                connection_tokens(h->value, h->value_len, &close, &ka);
            break;
        case 14:
            if (http_name_is(h, "content-length")) {
                /* 1*DIGIT; lists ("5, 5") and signs are refused. */
                uint64_t v = 0;
                if (h->value_len == 0 || h->value_len > 15)
                    return -400;
                for (size_t i = 0; i < h->value_len; i++) {
                    unsigned char c = (unsigned char)h->value[i];
                    if (c < '0' || c > '9')
                        return -400;
                    v = v * 10 + (uint64_t)(c - '0');
                }
                if (cl_seen && v != cl)
                    return -400;
                cl = v;
                cl_seen = 1;
            }
            break;
        case 17:
            if (http_name_is(h, "transfer-encoding")) {
                te++;
                te_h = h;
            }
            break;
        default:
            break;
        }
    }
    if (s + 2 != end)
        return -400; /* cannot happen: the scan ends at the first empty line */
    if (te && cl_seen)
        return -400;
    if (hosts > 1 || (r->version_minor >= 1 && hosts == 0))
        return -400;
    r->chunked = 0;
    if (te) {
        int rc = lim->accept_chunked ? transfer_coding(te_h, te, r->version_minor) : -501;
        if (rc < 0)
            return rc;
        r->chunked = 1;
    }
    if (cl > lim->max_body)
        return -413;
    r->content_length = cl;
    r->keep_alive = r->version_minor >= 1 ? !close : (ka && !close);
    return 0;
}

int http_parse(http_scan *sc, const char *buf, size_t len,
               const http_limits *lim, http_req *req)
{
    if (!lim)
        lim = &http_default_limits;
    size_t pos = sc->pos;
    while (pos < len) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        /*
         * Errors are reported for the first offending byte, in byte order,
         * so the answer does not depend on how the input was split into
         * reads: a NUL, then a byte past the line limit, then a byte past
         * the head limit (line bytes first; the LF counts for the head).
         */
        size_t err_at = (size_t)-1;
        int err = 0;
        const char *z = memchr(buf + pos, '\0', end - pos);
        if (z) {
            err_at = (size_t)(z - buf);
            err = -400;
        }
        size_t line_lim = sc->line_start + 1 +
            (sc->lines == 0 ? lim->max_request_line : lim->max_header_line);
        if (line_lim >= pos && line_lim < end && line_lim < err_at) {
            err_at = line_lim;
            err = sc->lines == 0 ? -414 : -431;
        }
        size_t head_lim = sc->head_start + lim->max_head;
        if (head_lim >= pos && head_lim < (nl ? end + 1 : len) && head_lim < err_at)
            err = sc->lines == 0 ? -414 : -431;
        if (err)
            return err;
        if (!nl) {
            pos = len;
            break;
        }
        /* A complete line [line_start, end - 1) followed by CRLF. */
        if (end == sc->line_start || buf[end - 1] != '\r')
            return -400;
        size_t llen = end - 1 - sc->line_start;
        pos = end + 1;
        if (llen == 0) {
            if (sc->lines == 0) {
                /* Empty lines before the request line are skipped. */
                if (pos > 2 * MAX_LEADING_EMPTY)
                    return -400;
                sc->head_start = sc->line_start = pos;
                continue;
            }
            sc->pos = pos;
            int rc = parse_head(buf + sc->head_start, pos - sc->head_start,
                                lim, req);
            return rc < 0 ? rc : (int)pos;
        }
        if (sc->lines > lim->max_headers)
            return -431; /* lines counts the request line */
        sc->lines++;
        sc->line_start = pos;
    }
    sc->pos = pos;
    return 0;
}

/* The reason phrases of the status codes RFC 9110 and its companions
 * register; "Unknown" for any other. */
const char *http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 102: return "Processing";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 207: return "Multi-Status";
    case 208: return "Already Reported";
    case 226: return "IM Used";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 305: return "Use Proxy";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 423: return "Locked";
    case 424: return "Failed Dependency";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 506: return "Variant Also Negotiates";
    case 507: return "Insufficient Storage";
    case 508: return "Loop Detected";
    case 510: return "Not Extended";
    case 511: return "Network Authentication Required";
    default: return "Unknown";
    }
}
