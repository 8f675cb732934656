/*
 * dial.c — connecting to and listening on names; Unix-domain sockets;
 * addresses as text; the TCP helpers (weft_tcp_listen, weft_tcp_connect,
 * weft_local_port).
 *
 * Every host goes through getaddrinfo(3): with AI_NUMERICHOST first, which
 * parses a numeric address (scoped IPv6 included) on the spot and never
 * consults the resolver, then, for a name, weft_getaddrinfo() on the
 * offload pool. AI_ADDRCONFIG is not used: glibc does not count loopback
 * addresses, so on a host with no other network "localhost" would not
 * resolve; an address whose family cannot be used simply fails its attempt
 * (socket(2) EAFNOSUPPORT, connect(2) ENETUNREACH) and the next is tried.
 *
 * TCP to a name with several addresses races them, RFC 8305 style: the
 * list is reordered so that the two families alternate (the resolver's
 * first choice first), an attempt starts at once, and each further one
 * starts when all running attempts have failed or 250 ms after the
 * previous one started. Attempts are detached fibers sharing a
 * reference-counted record with the dialing fiber, which waits on a
 * condition variable (not weft_park(): its permits could be consumed by,
 * or left to, the caller's own use of park). The first connection wins;
 * once the dialer has left (success, deadline, cancellation) it cancels
 * the attempts still running and each closes what it holds, so the
 * dialer never has to wait for them, which a cancelled fiber could not.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define STAGGER_NS (250 * WEFT_MS)
#define MAX_ADDRS 32

/* ---- resolving ---------------------------------------------------------- */

/* getaddrinfo's error outside fibers (in a fiber weft_getaddrinfo maps). */
static int eai_errno(int rc, int err)
{
    if (rc == EAI_NONAME || rc == EAI_SERVICE || rc == EAI_FAMILY)
        return -ENOENT;
    if (rc == EAI_SYSTEM)
        return err ? -err : -EIO;
    return rc == EAI_AGAIN ? -EAGAIN : rc == EAI_MEMORY ? -ENOMEM : -EIO;
}

/* The addresses of @host and @port for @type (0: any). A numeric host is
 * parsed at once; a name needs a fiber, unless @may_block (then it is
 * looked up on this thread). */
static int lookup(const char *host, int port, int type, bool passive,
                  bool may_block, struct addrinfo **res, int64_t deadline)
{
    char svc[8];
    snprintf(svc, sizeof svc, "%d", port);
    struct addrinfo hints = {.ai_socktype = type,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV |
                                         (passive ? AI_PASSIVE : 0)};
    int rc = getaddrinfo(host, svc, &hints, res);
    if (rc == 0)
        return 0;
    if (rc != EAI_NONAME)
        return eai_errno(rc, errno);
    hints.ai_flags &= ~AI_NUMERICHOST;
    if (weft_in_fiber() || !may_block)
        return weft_getaddrinfo(host, svc, &hints, res, deadline);
    rc = getaddrinfo(host, svc, &hints, res);
    return rc == 0 ? 0 : eai_errno(rc, errno);
}

static bool port_ok(int port, int lowest)
{
    return port >= lowest && port <= 65535;
}

int weft_resolve(const char *host, int port, int type,
                 struct sockaddr_storage *addr, socklen_t *addrlen,
                 int64_t deadline)
{
    if (!host || !*host || !port_ok(port, 0) || !addr || !addrlen ||
        (type != 0 && type != SOCK_STREAM && type != SOCK_DGRAM) ||
        deadline < -1)
        return -EINVAL;
    struct addrinfo *res;
    int rc = lookup(host, port, type, false, false, &res, deadline);
    if (rc < 0)
        return rc;
    if (res->ai_addrlen > sizeof *addr) {
        rc = -EAFNOSUPPORT;
    } else {
        memset(addr, 0, sizeof *addr);
        memcpy(addr, res->ai_addr, res->ai_addrlen);
        *addrlen = res->ai_addrlen;
    }
    freeaddrinfo(res);
    return rc;
}

/* ---- one socket ----------------------------------------------------------- */

static int connect_one(int family, const struct sockaddr *sa, socklen_t len,
                       int type, int64_t deadline)
{
    int fd = weft_socket(family, type, 0);
    if (fd < 0)
        return fd;
    if (type == SOCK_STREAM && family != AF_UNIX) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    int rc = weft_connect(fd, sa, len, deadline);
    if (rc < 0) {
        weft_close(fd);
        return rc;
    }
    return fd;
}

static int bind_one(int family, const struct sockaddr *sa, socklen_t len,
                    int type, int backlog, int flags)
{
    int fd = weft_socket(family, type, 0);
    if (fd < 0)
        return fd;
    int one = 1;
    if (type == SOCK_STREAM && family != AF_UNIX)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (((flags & WEFT_REUSEPORT) &&
         setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) ||
        bind(fd, sa, len) < 0 ||
        (type != SOCK_DGRAM && listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0)) {
        int rc = -errno;
        weft_close(fd);
        return rc;
    }
    return fd;
}

/* ---- racing the addresses of a name (TCP) ------------------------------ */

typedef struct race {
    weft_mutex_t mu;          /* only for the condition variable           */
    weft_cond_t cv;           /* signalled when an attempt ends            */
    int refs;                 /* the dialer and every attempt not ended    */
    int running;              /* attempts not ended                        */
    int winner;               /* the first connection made, or -1          */
    int err;                  /* error of the earliest address that failed */
    size_t err_at;            /* ... and its place in the order            */
    bool over;                /* the dialer has left                       */
    weft_fiber_t fibers[MAX_ADDRS];
} race;

typedef struct attempt {
    race *r;
    size_t at;
    struct sockaddr_storage ss;
    socklen_t len;
    int family;
    int64_t deadline;
} attempt;

static void race_unref(race *r)
{
    if (--r->refs == 0)
        free(r);
}

static void *attempt_main(void *arg)
{
    attempt *a = arg;
    race *r = a->r;
    int fd = connect_one(a->family, (struct sockaddr *)&a->ss, a->len,
                         SOCK_STREAM, a->deadline);
    if (fd >= 0 && (r->over || r->winner >= 0)) {
        weft_close(fd); /* lost the race, or nobody is waiting any more */
    } else if (fd >= 0) {
        r->winner = fd;
    } else if (a->at < r->err_at) {
        r->err = fd;
        r->err_at = a->at;
    }
    r->running--;
    if (!r->over)
        weft_cond_signal(&r->cv);
    race_unref(r);
    free(a);
    return NULL;
}

static int race_start(race *r, const struct addrinfo *ai, size_t at,
                      int64_t deadline)
{
    attempt *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->r = r;
    a->at = at;
    memcpy(&a->ss, ai->ai_addr, ai->ai_addrlen);
    a->len = ai->ai_addrlen;
    a->family = ai->ai_family;
    a->deadline = deadline;
    int rc = weft_spawn(attempt_main, a, NULL, &r->fibers[at]);
    if (rc < 0) {
        free(a);
        return rc;
    }
    weft_detach(r->fibers[at]);
    r->running++;
    r->refs++;
    return 0;
}

/* The earlier of @d and the caller's timeout scope. */
static int64_t bounded(int64_t d)
{
    int64_t s = weft_scope_deadline();
    if (s == WEFT_FOREVER)
        return d;
    return d == WEFT_FOREVER || s < d ? s : d;
}

/* What the last race on this thread started, for the tests to check the
 * order and the reason without timing it: the family of each attempt in
 * the order started, and a bit per attempt that started because the
 * stagger time came (not first, nor because every running one failed). */
#define DIAL_TRACE 8
extern _Thread_local unsigned weft__dial_started, weft__dial_staggered;
extern _Thread_local int weft__dial_family[DIAL_TRACE];
_Thread_local unsigned weft__dial_started, weft__dial_staggered;
_Thread_local int weft__dial_family[DIAL_TRACE];

static int race_dial(const struct addrinfo *const *order, size_t n,
                     int64_t deadline)
{
    race *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    weft_mutex_init(&r->mu);
    weft_cond_init(&r->cv);
    r->refs = 1;
    r->winner = -1;
    r->err_at = n;
    deadline = bounded(deadline);
    int rc = weft_mutex_lock(&r->mu, WEFT_FOREVER);
    if (rc < 0) {
        free(r);
        return rc;
    }
    size_t next = 0;
    int64_t next_at = 0;
    weft__dial_started = weft__dial_staggered = 0;
    while (rc == 0 && r->winner < 0) {
        int64_t now = weft_now();
        if (next < n && (r->running == 0 || now >= next_at)) {
            bool staggered = r->running > 0;
            if ((rc = race_start(r, order[next], next, deadline)) < 0)
                break;
            if (next < DIAL_TRACE) {
                weft__dial_family[next] = order[next]->ai_family;
                weft__dial_staggered |= (unsigned)staggered << next;
                weft__dial_started = (unsigned)next + 1;
            }
            next++;
            next_at = now + STAGGER_NS;
            continue;
        }
        if (r->running == 0)
            break; /* every address failed */
        int64_t until = deadline;
        if (next < n && (until == WEFT_FOREVER || next_at < until))
            until = next_at;
        rc = weft_cond_wait(&r->cv, &r->mu, until);
        if (rc == -ETIMEDOUT && until != deadline)
            rc = 0; /* time for the next attempt */
    }
    weft_mutex_unlock(&r->mu); /* held again on every return of the wait */
    int fd = r->winner;
    if (fd < 0 && rc == 0)
        rc = r->err;
    r->over = true;
    for (size_t i = 0; i < next; i++)
        weft_cancel(r->fibers[i]); /* -ESRCH for those that have ended */
    race_unref(r);
    return fd >= 0 ? fd : rc;
}

/* Alternate the address families, the resolver's first choice first. */
static size_t interleave(const struct addrinfo *list,
                         const struct addrinfo **out)
{
    const struct addrinfo *same[MAX_ADDRS], *other[MAX_ADDRS];
    size_t ns = 0, no = 0, n = 0;
    for (const struct addrinfo *ai = list; ai; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(struct sockaddr_storage))
            continue;
        if (ai->ai_family == list->ai_family && ns < MAX_ADDRS)
            same[ns++] = ai;
        else if (ai->ai_family != list->ai_family && no < MAX_ADDRS)
            other[no++] = ai;
    }
    for (size_t i = 0; n < MAX_ADDRS && (i < ns || i < no); i++) {
        if (i < ns)
            out[n++] = same[i];
        if (i < no && n < MAX_ADDRS)
            out[n++] = other[i];
    }
    return n;
}

/* Connect to one of @list's addresses (exposed to tests as weft__dial_list). */
int weft__dial_list(const struct addrinfo *list, int type, int64_t deadline);
int weft__dial_list(const struct addrinfo *list, int type, int64_t deadline)
{
    const struct addrinfo *order[MAX_ADDRS];
    size_t n = interleave(list, order);
    if (n == 0)
        return -ENOENT;
    if (type == SOCK_STREAM && n > 1)
        return race_dial(order, n, deadline);
    /* One address, or datagrams (connect(2) only picks a route): in turn. */
    int first = 0;
    for (size_t i = 0; i < n; i++) {
        int fd = connect_one(order[i]->ai_family, order[i]->ai_addr,
                             order[i]->ai_addrlen, type, deadline);
        if (fd >= 0 || fd == -ETIMEDOUT || fd == -EAGAIN || fd == -ECANCELED)
            return fd;
        if (!first)
            first = fd;
    }
    return first;
}

int weft_dial(const char *host, int port, int type, int64_t deadline)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    if (!host || !*host || !port_ok(port, 1) ||
        (type != SOCK_STREAM && type != SOCK_DGRAM))
        return -EINVAL;
    struct addrinfo *res;
    if ((rc = lookup(host, port, type, false, false, &res, deadline)) < 0)
        return rc;
    rc = weft__dial_list(res, type, deadline);
    freeaddrinfo(res);
    return rc;
}

int weft_listen(const char *host, int port, int type, int backlog, int flags,
                int64_t deadline)
{
    if (!port_ok(port, 0) || (type != SOCK_STREAM && type != SOCK_DGRAM) ||
        (flags & ~WEFT_REUSEPORT) || deadline < -1)
        return -EINVAL;
    if (!host || !*host)
        host = "0.0.0.0";
    struct addrinfo *res;
    int rc = lookup(host, port, type, true, true, &res, deadline);
    if (rc < 0)
        return rc;
    int fd = -ENOENT, first = 0;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = bind_one(ai->ai_family, ai->ai_addr, ai->ai_addrlen, type,
                      backlog, flags);
        if (fd >= 0)
            break;
        if (!first)
            first = fd;
    }
    freeaddrinfo(res);
    return fd >= 0 || !first ? fd : first;
}

/* ---- Unix-domain sockets -------------------------------------------------- */

static int unix_addr(const char *path, struct sockaddr_un *sa, socklen_t *len)
{
    if (!path || !*path || (path[0] == '@' && !path[1]))
        return -EINVAL;
    size_t n = strlen(path);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (path[0] == '@') {
        /* Abstract: a NUL, then the name's bytes; the length says where
         * it ends (no terminating NUL belongs to the name). */
        if (n > sizeof sa->sun_path)
            return -ENAMETOOLONG;
        memcpy(sa->sun_path + 1, path + 1, n - 1);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        if (n >= sizeof sa->sun_path)
            return -ENAMETOOLONG;
        memcpy(sa->sun_path, path, n + 1);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

static bool unix_type_ok(int type)
{
    return type == SOCK_STREAM || type == SOCK_SEQPACKET || type == SOCK_DGRAM;
}

/* A socket file at @sa that nothing accepts on any more: connect(2) is
 * refused. A live server (accepting, or with a full backlog) is not. */
static bool stale_socket_file(const struct sockaddr_un *sa, socklen_t len,
                              int type)
{
    struct stat sb;
    if (lstat(sa->sun_path, &sb) < 0 || !S_ISSOCK(sb.st_mode))
        return false;
    int s = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return false;
    bool refused = connect(s, (const struct sockaddr *)sa, len) < 0 &&
                   errno == ECONNREFUSED;
    close(s);
    return refused;
}

int weft_unix_listen(const char *path, int type, int backlog, int flags)
{
    struct sockaddr_un sa;
    socklen_t len;
    if (!unix_type_ok(type) || (flags & ~WEFT_UNIX_UNLINK))
        return -EINVAL;
    int rc = unix_addr(path, &sa, &len);
    if (rc < 0)
        return rc;
    int fd = bind_one(AF_UNIX, (struct sockaddr *)&sa, len, type, backlog, 0);
    if (fd == -EADDRINUSE && (flags & WEFT_UNIX_UNLINK) && path[0] != '@' &&
        stale_socket_file(&sa, len, type) && unlink(path) == 0)
        fd = bind_one(AF_UNIX, (struct sockaddr *)&sa, len, type, backlog, 0);
    return fd;
}

int weft_unix_connect(const char *path, int type, int64_t deadline)
{
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    struct sockaddr_un sa;
    socklen_t len;
    if (!unix_type_ok(type))
        return -EINVAL;
    if ((rc = unix_addr(path, &sa, &len)) < 0)
        return rc;
    int fd = weft_socket(AF_UNIX, type, 0);
    if (fd < 0)
        return fd;
    /* A full backlog is retried until the deadline (weft_connect). */
    if ((rc = weft_connect(fd, (const struct sockaddr *)&sa, len, deadline)) < 0) {
        weft_close(fd);
        return rc;
    }
    return fd;
}

/* ---- addresses as text ---------------------------------------------------- */

static int put(size_t size, int n)
{
    if (n < 0)
        return -EINVAL;
    return (size_t)n >= size ? -ENOSPC : n;
}

int weft_addr_format(const struct sockaddr *addr, socklen_t len, char *buf,
                     size_t size)
{
    if (!addr || !buf || len < (socklen_t)sizeof(sa_family_t))
        return -EINVAL;
    if (addr->sa_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)addr;
        size_t n = len - offsetof(struct sockaddr_un, sun_path);
        if (len > sizeof *un)
            return -EINVAL;
        if (n > 0 && un->sun_path[0] == '\0') /* abstract */
            return put(size, snprintf(buf, size, "@%.*s", (int)(n - 1),
                                           un->sun_path + 1));
        return put(size, snprintf(buf, size, "%.*s",
                                       (int)strnlen(un->sun_path, n), un->sun_path));
    }
    if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
        return -EAFNOSUPPORT;
    if (len < (addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                          : sizeof(struct sockaddr_in6)))
        return -EINVAL;
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo(addr, len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return -EINVAL;
    const char *fmt = addr->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s";
    return put(size, snprintf(buf, size, fmt, host, port));
}

/* ---- the TCP helpers: a literal address at once, a name through weft_dial
 * and weft_listen -------------------------------------------------------- */

static int parse_addr(const char *host, int port, struct sockaddr_storage *ss,
                      socklen_t *len)
{
    if (port < 0 || port > 65535)
        return -EINVAL;
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (!host || !*host) {
        v4->sin_family = AF_INET;
        v4->sin_addr.s_addr = htonl(INADDR_ANY);
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        *len = sizeof *v6;
        return 0;
    }
    return -EINVAL;
}

/* A TCP socket of @family with option @opt of @level set to 1 (best
 * effort: the socket is usable without it). */
static int tcp_socket(int family, int level, int opt)
{
    int fd = weft_socket(family, SOCK_STREAM, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, level, opt, &one, sizeof one);
    return fd;
}

int weft_tcp_listen(const char *host, int port, int backlog, int reuseport)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_addr(host, port, &ss, &len);
    if (rc == -EINVAL && host && port >= 0 && port <= 65535) /* a name */
        return weft_listen(host, port, SOCK_STREAM, backlog,
                           reuseport ? WEFT_REUSEPORT : 0, WEFT_FOREVER);
    if (rc < 0)
        return rc;
    int fd = tcp_socket(ss.ss_family, SOL_SOCKET, SO_REUSEADDR);
    if (fd < 0)
        return fd;
    int one = 1;
    if (reuseport &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
        goto fail;
    if (bind(fd, (struct sockaddr *)&ss, len) < 0)
        goto fail;
    if (listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0)
        goto fail;
    return fd;
fail:
    rc = -errno;
    weft_close(fd);
    return rc;
}

int weft_tcp_connect(const char *host, int port, int64_t deadline)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = parse_addr(host, port, &ss, &len);
    if (rc == -EINVAL && host && port > 0 && port <= 65535) /* a name */
        return weft_dial(host, port, SOCK_STREAM, deadline);
    if (rc < 0)
        return rc;
    if (!host || !*host || port == 0)
        return -EINVAL;
    if ((rc = weft__precheck(deadline)) < 0)
        return rc;
    int fd = tcp_socket(ss.ss_family, IPPROTO_TCP, TCP_NODELAY);
    if (fd < 0)
        return fd;
    rc = weft_connect(fd, (struct sockaddr *)&ss, len, deadline);
    if (rc < 0) {
        weft_close(fd);
        return rc;
    }
    return fd;
}

int weft_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -EAFNOSUPPORT;
}

