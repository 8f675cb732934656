/*
 * http_srv.c — HTTP/1.1 server on weft fibers (see http_srv.h).
 *
 * Per connection, one fiber and two buffers: requests are read into `in`,
 * every complete head in it is parsed and answered into `out`, and `out`
 * goes to the socket in one send before the fiber reads again. A burst of
 * pipelined requests thus costs one recv and one send. The read deadline
 * is the keep-alive idle timeout while no byte of a request has arrived,
 * and the head deadline (fixed at the request's first byte, not extended
 * by later bytes) while one is partial: a client trickling bytes cannot
 * keep a connection past it.
 */
#include "http_srv.h"

#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef __NR_openat2
#include <linux/openat2.h>
#endif

#define SEC 1000000000LL
/* Per-connection buffers start small, as most requests and responses
 * are: a connection costs 12 KiB (its buffers and the request, page
 * aligned; plus its fiber's stack) instead of the 33 KiB of buffers sized
 * for the worst case, and with 1,000 connections the bytes each request
 * touches stay in one page of it. A head that outgrows IN_SMALL moves to
 * a buffer of the full limit. */
#define IN_SMALL 2048
#define OUT_CAP 4096
#define OUT_FLUSH_AT (OUT_CAP - 2048) /* room for one more small response */

typedef struct conn conn;

struct http_srv {
    http_srv_opts o;
    int lfd;
    int rootfd; /* O_PATH directory, -1 without --root */
    int stopping;
    weft_fiber_t acceptor;
    weft_fiber_t drainer;
    conn *conns; /* doubly linked, open connections */
    size_t in_cap; /* the largest input buffer: a head never fills it */
    http_srv_stats st;
    time_t date_at;
    char date[40]; /* "Date: ...\r\n" */
    /* The whole "GET /" response, rebuilt when the date changes, for each
     * Connection header variant (none, keep-alive, close). */
    char hello[3][256];
    size_t hello_len[3];
    /* Copies of hello[] that a lone answer is sent from directly (see
     * conn_main), each with the second it was made in and the sends from
     * it not yet returned: a copy with sends in flight is never rewritten
     * (a send that blocks may leave the kernel reading it). When the date
     * changes, hello[] is rebuilt and copied into a copy without sends;
     * while none is free, answers are copied from hello[] instead. */
    struct {
        char resp[3][256];
        time_t at;
        int sending;
    } direct[2];
    int direct_cur;
};

struct conn {
    conn *prev, *next;
    http_srv *srv;
    weft_fiber_t fiber;
    int fd;
    void *tc; /* the transport's connection (TLS), NULL for plain TCP */
    int idle; /* blocked waiting for the first byte of a request */
    int nodelay; /* TCP_NODELAY set */
    size_t inlen, outlen;
    size_t in_cap; /* IN_SMALL, or srv->in_cap once a head outgrew that */
    char *in;      /* small_in, or a malloc'd buffer of in_cap bytes      */
    char small_in[IN_SMALL];
    /* The request being answered: here rather than in conn_main's frame,
     * whose 3 KiB (room for every header) pushed the frames of each read
     * onto a second stack page; what a request touches of this struct
     * (the fields above, the first bytes of small_in and of req) stays
     * on its first page (conn_new). */
    http_req req;
    char out[OUT_CAP];
};

static const char HELLO[] = "Hello, World!";

/* ---- transport ---------------------------------------------------------- */

/* Plain TCP calls the socket directly; a transport (TLS) is one branch
 * away, never taken on the plain path. */
static inline ssize_t conn_recv(conn *c, void *buf, size_t len, int64_t deadline)
{
    if (__builtin_expect(c->tc != NULL, 0))
        return c->srv->o.transport->recv(c->tc, buf, len, deadline);
    return weft_recv(c->fd, buf, len, 0, deadline);
}

static inline ssize_t conn_send(conn *c, const void *buf, size_t len, int64_t deadline)
{
    if (__builtin_expect(c->tc != NULL, 0))
        return c->srv->o.transport->send(c->tc, buf, len, deadline);
    return weft_send(c->fd, buf, len, 0, deadline);
}

/* ---- output ------------------------------------------------------------- */

/*
 * Nagle's algorithm holds back a small segment only while earlier data is
 * unacknowledged, and closing a socket pushes out whatever it holds, so a
 * connection answered once and closed never needs TCP_NODELAY: it is set
 * before the first response of a connection that stays open and before a
 * file goes out, which spares a connection-per-request client a system
 * call per connection.
 */
static void set_nodelay(conn *c)
{
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->nodelay = 1;
}

static int send_all(conn *c, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t k = conn_send(c, p, n, deadline);
        if (k < 0)
            return (int)k;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int flush(conn *c)
{
    if (c->outlen == 0)
        return 0;
    /* Seconds long and taken per response: the loop's clock reading
     * (weft_loop_now) is close enough and spares a clock read. */
    int rc = send_all(c, c->out, c->outlen,
                      weft_loop_deadline_in(c->srv->o.io_timeout_ns));
    c->outlen = 0;
    return rc;
}

static const char *const CONN_HDR[3] = {"", "Connection: keep-alive\r\n",
                                        "Connection: close\r\n"};

static const char *date_line(http_srv *s)
{
    time_t t = time(NULL);
    if (t != s->date_at) {
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(s->date, sizeof s->date, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n",
                 &tm);
        s->date_at = t;
        for (int i = 0; i < 3; i++) {
            int n = snprintf(s->hello[i], sizeof s->hello[i],
                             "HTTP/1.1 200 OK\r\nServer: weft\r\n%s"
                             "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
                             "%s\r\n%s",
                             s->date, sizeof HELLO - 1, CONN_HDR[i], HELLO);
            s->hello_len[i] = n > 0 ? (size_t)n : 0;
        }
        int d = s->direct[s->direct_cur].sending == 0 ? s->direct_cur : 1 - s->direct_cur;
        if (s->direct[d].sending == 0) {
            memcpy(s->direct[d].resp, s->hello, sizeof s->hello);
            s->direct[d].at = t;
            s->direct_cur = d;
        }
    }
    return s->date;
}

/* Which Connection header a response needs: 0 none, 1 keep-alive, 2 close. */
static int conn_variant(int keep, int minor)
{
    return !keep ? 2 : minor == 0 ? 1 : 0;
}

static void count_status(http_srv *s, int status)
{
    s->st.requests++;
    if (status < 300)
        s->st.status_2xx++;
    else if (status < 500)
        s->st.status_4xx++;
    else
        s->st.status_5xx++;
}

/* Append a response head (and @body unless NULL) to c->out. */
static void put_head(conn *c, int status, const char *type, uint64_t length,
                     int keep, int minor, const char *extra)
{
    http_srv *s = c->srv;
    const char *conn_hdr = CONN_HDR[conn_variant(keep, minor)];
    int n = snprintf(c->out + c->outlen, OUT_CAP - c->outlen,
                     "HTTP/1.1 %d %s\r\nServer: weft\r\n%sContent-Type: %s\r\n"
                     "Content-Length: %llu\r\n%s%s\r\n",
                     status, http_reason(status), date_line(s), type,
                     (unsigned long long)length, conn_hdr, extra ? extra : "");
    if (n > 0 && (size_t)n < OUT_CAP - c->outlen)
        c->outlen += (size_t)n;
    count_status(s, status);
}

static void put_body(conn *c, const char *b, size_t n)
{
    memcpy(c->out + c->outlen, b, n);
    c->outlen += n;
}

static void put_error(conn *c, int status)
{
    char body[80];
    int n = snprintf(body, sizeof body, "%d %s\n", status, http_reason(status));
    put_head(c, status, "text/plain", (uint64_t)n, 0, 1,
             status == 405 ? "Allow: GET, HEAD\r\n" : NULL);
    put_body(c, body, (size_t)n);
}

/*
 * Close after an error answer without losing it: a close() with unread
 * input makes the kernel send RST, which can destroy the response before
 * the client reads it. Half-close, then discard input for a moment.
 */
static void linger_close(conn *c)
{
    int64_t deadline = weft_deadline_in(SEC / 2);
    if (c->tc)
        c->srv->o.transport->shutdown(c->tc, deadline);
    else
        weft_shutdown(c->fd, SHUT_WR);
    size_t total = 0;
    while (total < 256 * 1024) {
        ssize_t n = conn_recv(c, c->in, c->in_cap, deadline);
        if (n <= 0)
            break;
        total += (size_t)n;
    }
}

/* ---- static files ------------------------------------------------------- */

static const char *mime_type(const char *path)
{
    static const char *const map[][2] = {
        {".html", "text/html; charset=utf-8"}, {".htm", "text/html; charset=utf-8"},
        {".txt", "text/plain; charset=utf-8"}, {".css", "text/css"},
        {".js", "text/javascript"},            {".json", "application/json"},
        {".png", "image/png"},                 {".jpg", "image/jpeg"},
        {".svg", "image/svg+xml"},             {".ico", "image/x-icon"},
        {NULL, NULL}};
    const char *dot = strrchr(path, '.');
    if (dot && !strchr(dot, '/'))
        for (int i = 0; map[i][0]; i++)
            if (strcasecmp(dot, map[i][0]) == 0)
                return map[i][1];
    return "application/octet-stream";
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/*
 * Map an origin-form target to a relative path below the root: drop the
 * query, percent-decode, refuse NUL, backslashes and any ".." segment, and
 * collapse "." and empty segments. Returns 0 or an HTTP status.
 */
static int target_to_path(const char *t, size_t n, char *out, size_t cap)
{
    if (n == 0 || t[0] != '/')
        return 400;
    size_t o = 0, seg = 0;
    for (size_t i = 1; i <= n; i++) {
        char ch = i < n ? t[i] : '/';
        if (ch == '?' || ch == '#') {
            ch = '/';
            n = i; /* ends the loop after this segment */
        }
        if (ch == '%') {
            if (i + 2 >= n)
                return 400;
            int hi = hexval(t[i + 1]), lo = hexval(t[i + 2]);
            if (hi < 0 || lo < 0)
                return 400;
            ch = (char)(hi * 16 + lo);
            i += 2;
            if (ch == '\0' || ch == '/' || ch == '\\')
                return 404; /* encoded separators never name a file */
        } else if (ch == '\\') {
            return 404;
        }
        if (ch != '/') {
            if (o + 1 >= cap)
                return 414;
            out[o++] = ch;
            continue;
        }
        /* End of the segment [seg, o). */
        size_t len = o - seg;
        if (len == 2 && out[seg] == '.' && out[seg + 1] == '.')
            return 404;
        if (len == 0 || (len == 1 && out[seg] == '.')) {
            o = seg; /* drop "" and "." */
        } else {
            if (o + 1 >= cap)
                return 414;
            out[o++] = '/';
            seg = o;
        }
    }
    if (o > 0 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
    return o == 0 ? 404 : 0;
}

static int open_below(int dirfd, const char *path)
{
#ifdef __NR_openat2
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(__NR_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
        return fd >= 0 ? (int)fd : -errno;
#endif
    /* No openat2 (an older kernel, a seccomp filter, Valgrind): walk the
     * path a component at a time, none of them followed if it is a
     * symlink (O_NOFOLLOW: ELOOP), every one but the last a directory.
     * ".." never gets here (target_to_path refuses it). */
    char comp[NAME_MAX + 1];
    int dir = dirfd;
    const char *p = path;
    for (;;) {
        const char *sl = strchr(p, '/');
        size_t n = sl ? (size_t)(sl - p) : strlen(p);
        int fd2 = -1, e = ENAMETOOLONG;
        if (n < sizeof comp) {
            memcpy(comp, p, n);
            comp[n] = '\0';
            fd2 = openat(dir, comp, sl ? O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW
                                      : O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
            e = errno;
        }
        if (dir != dirfd)
            close(dir);
        if (fd2 < 0 || !sl)
            return fd2 >= 0 ? fd2 : -e;
        dir = fd2;
        p = sl + 1;
    }
}

/* sendfile(2) cannot take MSG_NOSIGNAL: keep SIGPIPE away from the process
 * (the library's rule, which this example follows too). */
static ssize_t sendfile_nosigpipe(int out, int in, off_t *off, size_t n)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t k = sendfile(out, in, off, n);
    int e = errno;
    if (k < 0 && e == EPIPE && !sigismember(&old, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return k;
}

/* A file through a transport (TLS) that cannot take sendfile(2): read it
 * in chunks and send them. Returns 0 or a negative errno. */
static __attribute__((noinline)) int copy_file(conn *c, int ffd, off_t size, int64_t deadline)
{
    char buf[16384];
    off_t off = 0;
    while (off < size) {
        size_t want = size - off < (off_t)sizeof buf ? (size_t)(size - off) : sizeof buf;
        ssize_t k = pread(ffd, buf, want, off);
        if (k <= 0)
            return k < 0 ? -errno : -EIO; /* shrank: the framing is broken */
        int rc = send_all(c, buf, (size_t)k, deadline);
        if (rc < 0)
            return rc;
        off += k;
    }
    return 0;
}

/* The path of a request target: an absolute-form target
 * ("http://host/x", which servers must accept) is reduced to "/x". */
static void target_path(const http_req *r, const char **p, size_t *n)
{
    *p = r->target;
    *n = r->target_len;
    if (*n > 0 && **p != '/' && **p != '*') {
        const char *sl = memchr(*p, '/', *n);          /* "http:/" */
        if (sl && sl + 1 < *p + *n && sl[1] == '/') {
            const char *q = memchr(sl + 2, '/', (size_t)(*p + *n - (sl + 2)));
            if (q) {
                *n -= (size_t)(q - *p);
                *p = q;
            } else {
                *p = "/";
                *n = 1;
            }
        }
    }
}

/* Answer GET/HEAD of a file. Returns 0, or -1 when the connection broke.
 * Not inlined: its 4 KiB path buffer would otherwise sit in conn_main's
 * frame, between the hot locals every request touches. */
static __attribute__((noinline)) int serve_file(conn *c, const http_req *r, int keep)
{
    http_srv *s = c->srv;
    char path[4096];
    const char *tp;
    size_t tn;
    target_path(r, &tp, &tn);
    int status = s->rootfd < 0 ? 404 : target_to_path(tp, tn, path, sizeof path);
    int ffd = -1;
    struct stat sb;
    if (status == 0) {
        ffd = open_below(s->rootfd, path);
        if (ffd < 0)
            status = ffd == -EACCES ? 403 : 404;
        else if (fstat(ffd, &sb) < 0 || !S_ISREG(sb.st_mode))
            status = 404;
    }
    if (status != 0) {
        if (ffd >= 0)
            close(ffd);
        char body[64];
        int n = snprintf(body, sizeof body, "%d %s\n", status, http_reason(status));
        put_head(c, status, "text/plain", (uint64_t)n, keep, r->version_minor, NULL);
        if (r->method != HTTP_M_HEAD)
            put_body(c, body, (size_t)n);
        return 0;
    }
    put_head(c, 200, mime_type(path), (uint64_t)sb.st_size, keep,
             r->version_minor, NULL);
    if (!c->nodelay)
        set_nodelay(c);
    int rc = flush(c);
    if (rc == 0) /* sendfile(2) must not overtake the head */
        rc = weft_flush(c->fd, weft_deadline_in(s->o.io_timeout_ns));
    off_t off = 0;
    int64_t deadline = weft_deadline_in(s->o.io_timeout_ns);
    if (c->tc && rc == 0 && r->method != HTTP_M_HEAD) {
        rc = copy_file(c, ffd, sb.st_size, deadline);
        off = sb.st_size;
    }
    while (rc == 0 && r->method != HTTP_M_HEAD && off < sb.st_size) {
        ssize_t k = sendfile_nosigpipe(c->fd, ffd, &off, (size_t)(sb.st_size - off));
        if (k > 0)
            continue;
        if (k == 0) {
            rc = -EIO; /* the file shrank under us: the framing is broken */
        } else if (errno == EAGAIN) {
            int w = weft_wait_fd(c->fd, WEFT_WRITABLE, deadline);
            if (w < 0)
                rc = w;
        } else if (errno != EINTR) {
            rc = -errno;
        }
    }
    close(ffd);
    return rc < 0 ? -1 : 0;
}

/* ---- connections -------------------------------------------------------- */

static void conn_unlink(conn *c)
{
    http_srv *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->st.open--;
    if (s->stopping && !s->conns && s->drainer.id)
        weft_unpark(NULL, s->drainer);
}

/* Read and drop @n body bytes that are not in the buffer yet. */
static int discard_body(conn *c, uint64_t n)
{
    int64_t deadline = weft_deadline_in(c->srv->o.io_timeout_ns);
    while (n > 0) {
        size_t want = n < c->in_cap ? (size_t)n : c->in_cap;
        ssize_t k = conn_recv(c, c->in, want, deadline);
        if (k <= 0)
            return -1;
        n -= (uint64_t)k;
    }
    return 0;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    http_srv *s = c->srv;
    const http_limits *lim = &s->o.limits;
    http_scan sc;
    http_req *const req = &c->req;
    size_t off = 0;       /* start of the current request in c->in */
    int64_t head_deadline = 0;
    int lingering = 0;
    http_scan_reset(&sc);
    if (s->o.transport) {
        set_nodelay(c); /* the handshake's flights */
        /* The handshake counts as the first request's head. */
        c->tc = s->o.transport->open(s->o.transport->ctx, c->fd,
                                     weft_deadline_in(s->o.header_timeout_ns));
        if (!c->tc) {
            c->fd = -1; /* closed by open */
            goto out;
        }
    }

    for (;;) {
        /* Answer every complete request in the buffer. */
        while (off < c->inlen) {
            int r = http_parse(&sc, c->in + off, c->inlen - off, lim, req);
            if (r == 0) {
                /* A head begun and not complete: from now on it has
                 * header_timeout to arrive (a clock read only for a head
                 * that needs more reads, not for every request). */
                if (head_deadline == 0)
                    head_deadline = weft_deadline_in(s->o.header_timeout_ns);
                break;
            }
            if (r < 0) {
                put_error(c, -r);
                lingering = 1;
                goto out;
            }
            off += (size_t)r;
            http_scan_reset(&sc);
            head_deadline = 0;
            int keep = req->keep_alive && !s->stopping;
            int ok = 0;
            if (keep && !c->nodelay)
                set_nodelay(c);
            if (req->method == HTTP_M_OTHER || req->method == HTTP_M_UNKNOWN) {
                put_error(c, req->method == HTTP_M_OTHER ? 405 : 501);
                lingering = 1;
                goto out;
            }
            const char *tp;
            size_t tn;
            target_path(req, &tp, &tn);
            if (tn == 1 && tp[0] == '/') {
                /* The hot path: a prebuilt response, one memcpy. */
                date_line(s);
                int v = conn_variant(keep, req->version_minor);
                size_t len = s->hello_len[v];
                if (req->method == HTTP_M_HEAD)
                    len -= sizeof HELLO - 1;
                if (c->outlen == 0 && c->inlen - off == req->content_length &&
                    s->direct[s->direct_cur].at == s->date_at) {
                    /* The one answer to this read (nothing pipelined
                     * behind it): sent from a copy of the prebuilt bytes,
                     * which write-behind copies, rather than copied to
                     * c->out first. */
                    int d = s->direct_cur;
                    s->direct[d].sending++;
                    ok = send_all(c, s->direct[d].resp[v], len,
                                  weft_loop_deadline_in(s->o.io_timeout_ns));
                    s->direct[d].sending--;
                } else {
                    put_body(c, s->hello[v], len);
                }
                count_status(s, 200);
            } else {
                ok = serve_file(c, req, keep);
            }
            if (ok < 0)
                goto out;
            /* A body we do not use (GET with Content-Length): skip it. */
            uint64_t avail = c->inlen - off;
            if (req->content_length <= avail) {
                off += (size_t)req->content_length;
            } else {
                off = c->inlen;
                if (discard_body(c, req->content_length - avail) < 0)
                    goto out;
            }
            if (!keep) {
                /* Unread pipelined input would turn our close into a
                 * reset that can destroy the response: linger. */
                lingering = off < c->inlen;
                goto out;
            }
            if (c->outlen > OUT_FLUSH_AT && flush(c) < 0)
                goto out;
        }
        if (flush(c) < 0)
            goto out;
        if (off > 0) {
            /* The scanner's offsets are relative to the request start. */
            memmove(c->in, c->in + off, c->inlen - off);
            c->inlen -= off;
            off = 0;
        }
        if (c->inlen == c->in_cap && c->in_cap < s->in_cap) {
            /* A head longer than the small buffer: move to a full one. */
            char *big = malloc(s->in_cap);
            if (!big)
                goto out;
            memcpy(big, c->in, c->inlen);
            c->in = big;
            c->in_cap = s->in_cap;
        }
        if (c->inlen == c->in_cap) { /* cannot happen with in_cap > max_head */
            put_error(c, 431);
            lingering = 1;
            goto out;
        }
        if (s->stopping && c->inlen == 0)
            goto out;
        c->idle = c->inlen == 0;
        int64_t deadline = c->idle ? weft_loop_deadline_in(s->o.idle_timeout_ns)
                                   : head_deadline;
        ssize_t n = conn_recv(c, c->in + c->inlen, c->in_cap - c->inlen, deadline);
        if (n == -ETIMEDOUT && !c->idle) {
            s->st.timed_out++;
            put_error(c, 408);
            lingering = 1;
            goto out;
        }
        if (n == -ETIMEDOUT || (n == -ECANCELED && c->idle))
            s->st.idle_closed++;
        c->idle = 0;
        if (n <= 0)
            goto out;
        c->inlen += (size_t)n;
    }
out:
    if (c->outlen > 0 && flush(c) < 0)
        lingering = 0;
    if (lingering && !weft_cancelled())
        linger_close(c);
    if (c->tc)
        s->o.transport->close(c->tc);
    else if (c->fd >= 0)
        weft_close(c->fd);
    conn_unlink(c);
    if (c->in != c->small_in)
        free(c->in);
    free(c);
    return NULL;
}

/* A connection's memory, page-aligned so that its hot fields and the
 * first bytes of its buffers share one page (one TLB entry a request). */
static conn *conn_new(void)
{
    size_t page = 4096, size = (sizeof(conn) + page - 1) & ~(page - 1);
    return aligned_alloc(page, size);
}

static void *accept_main(void *arg)
{
    http_srv *s = arg;
    /* A burst of connects is taken without a loop iteration for each by
     * weft_accept itself (a system call while the queue is not known to be
     * empty), so every accept here may wait. */
    while (!s->stopping) {
        int fd = weft_accept(s->lfd, NULL, NULL, WEFT_FOREVER);
        if (fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM || fd == -ENOBUFS) {
            /* Out of descriptors: the connection stays queued; back off
             * instead of spinning. */
            weft_sleep(10 * 1000000LL);
            continue;
        }
        if (fd < 0)
            break; /* -ECANCELED from http_srv_stop(), or a broken listener */
        /* Responses up to a few KiB leave without the connection's fiber
         * being resumed for the send's completion (io_uring). */
        weft_write_behind(fd, 1);
        conn *c = conn_new();
        if (!c) {
            weft_close(fd);
            continue;
        }
        c->srv = s;
        c->fd = fd;
        c->tc = NULL;
        c->idle = 0;
        c->nodelay = 0;
        c->inlen = c->outlen = 0;
        c->in = c->small_in;
        c->in_cap = IN_SMALL;
        c->prev = NULL;
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->st.accepted++;
        s->st.open++;
        if (weft_spawn(conn_main, c, NULL, &c->fiber) < 0) {
            weft_close(fd);
            conn_unlink(c);
            free(c);
            continue;
        }
        weft_detach(c->fiber);
    }
    weft_close(s->lfd);
    s->lfd = -1;
    s->acceptor.id = 0;
    return NULL;
}

static void *drain_main(void *arg)
{
    http_srv *s = arg;
    int64_t deadline = weft_deadline_in(s->o.drain_timeout_ns);
    while (s->conns && weft_now() < deadline)
        weft_park(deadline);
    /* Past the deadline: cancel whatever still runs. Cancelled fibers
     * unlink themselves when they next run. */
    for (conn *c = s->conns; c; c = c->next)
        weft_cancel(c->fiber);
    s->drainer.id = 0;
    return NULL;
}

/* ---- public ------------------------------------------------------------- */

int http_srv_start(http_srv **out, int listen_fd, const http_srv_opts *opts)
{
    if (!out || listen_fd < 0)
        return -EINVAL;
    http_srv *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    if (opts)
        s->o = *opts;
    if (!s->o.idle_timeout_ns)
        s->o.idle_timeout_ns = 10 * SEC;
    if (!s->o.header_timeout_ns)
        s->o.header_timeout_ns = 10 * SEC;
    if (!s->o.io_timeout_ns)
        s->o.io_timeout_ns = 10 * SEC;
    if (!s->o.drain_timeout_ns)
        s->o.drain_timeout_ns = 5 * SEC;
    if (!s->o.limits.max_head)
        s->o.limits = http_default_limits;
    s->in_cap = s->o.limits.max_head + 1024; /* a head never fills it */
    s->lfd = listen_fd;
    s->rootfd = -1;
    if (s->o.root) {
        s->rootfd = open(s->o.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (s->rootfd < 0) {
            int e = -errno;
            free(s);
            return e;
        }
    }
    int rc = weft_spawn(accept_main, s, NULL, &s->acceptor);
    if (rc < 0) {
        if (s->rootfd >= 0)
            close(s->rootfd);
        free(s);
        return rc;
    }
    weft_detach(s->acceptor);
    *out = s;
    return 0;
}

void http_srv_stop(http_srv *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    if (s->acceptor.id)
        weft_cancel(s->acceptor);
    for (conn *c = s->conns; c; c = c->next)
        if (c->idle)
            weft_cancel(c->fiber);
    if (s->conns && weft_spawn(drain_main, s, NULL, &s->drainer) == 0)
        weft_detach(s->drainer);
}

void http_srv_get_stats(const http_srv *s, http_srv_stats *st)
{
    *st = s->st;
}

void http_srv_free(http_srv *s)
{
    if (!s)
        return;
    if (s->rootfd >= 0)
        close(s->rootfd);
    free(s);
}
