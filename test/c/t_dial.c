/* Names and Unix-domain sockets: weft_dial/weft_listen by name and by
 * number (TCP and UDP), weft_tcp_connect/weft_tcp_listen by name, the
 * address race (a silent address overtaken
 * after 250 ms, a refused one at once, all refused, a deadline, a
 * cancellation, the families alternating), weft_resolve and
 * weft_addr_format, Unix sockets by path and abstract name (stream,
 * seqpacket, datagram), stale socket files, a full backlog, bad input. */
#include "harness.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/un.h>

#define MS 1000000LL

int weft__dial_list(const struct addrinfo *list, int type, int64_t deadline);
/* What the last race started (src/net/dial.c): the attempts' families in
 * order, and a bit for each that waited for the stagger time. */
extern _Thread_local unsigned weft__dial_started, weft__dial_staggered;
extern _Thread_local int weft__dial_family[8];

/* A TCP listener on 127.0.0.1 (or ::1) whose accept queue is full: further
 * SYNs are dropped, so a connect to it neither succeeds nor fails. The
 * connections that filled it are in @held (closed by full_close). */
typedef struct full {
    int lfd;
    int held[8];
    int nheld;
    struct sockaddr_storage ss;
    socklen_t len;
} full;

static void full_open(full *f, int family)
{
    f->lfd = weft_socket(family, SOCK_STREAM, 0);
    CHECK(f->lfd >= 0);
    memset(&f->ss, 0, sizeof f->ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&f->ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        f->len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&f->ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        f->len = sizeof *a;
    }
    CHECK_EQ(bind(f->lfd, (struct sockaddr *)&f->ss, f->len), 0);
    CHECK_EQ(listen(f->lfd, 0), 0);
    socklen_t l = f->len;
    CHECK_EQ(getsockname(f->lfd, (struct sockaddr *)&f->ss, &l), 0);
    f->nheld = 0;
    for (;;) {
        CHECK(f->nheld < 8);
        int c = weft_socket(family, SOCK_STREAM, 0);
        CHECK(c >= 0);
        int rc = weft_connect(c, (struct sockaddr *)&f->ss, f->len, weft_deadline_in(30 * MS));
        f->held[f->nheld++] = c;
        if (rc == -ETIMEDOUT)
            break;
        CHECK_EQ(rc, 0);
    }
}

static void full_close(full *f)
{
    for (int i = 0; i < f->nheld; i++)
        CHECK_EQ(weft_close(f->held[i]), 0);
    CHECK_EQ(weft_close(f->lfd), 0);
}

/* @fd is connected to @c: @msg goes through, then both are closed. */
static void exchange(int fd, int c, const char *msg)
{
    size_t n = strlen(msg);
    char buf[32];
    CHECK(fd >= 0 && c >= 0 && n <= sizeof buf);
    CHECK_EQ(weft_write_all(fd, msg, n, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_read_full(c, buf, n, NULL, weft_deadline_in(1000 * MS)), 0);
    CHECK(memcmp(buf, msg, n) == 0);
    CHECK_EQ(weft_close(fd), 0);
    CHECK_EQ(weft_close(c), 0);
}

static struct addrinfo ai_of(const struct sockaddr_storage *ss, socklen_t len)
{
    return (struct addrinfo){.ai_family = ss->ss_family, .ai_socktype = SOCK_STREAM,
                             .ai_addrlen = len, .ai_addr = (struct sockaddr *)ss};
}

static int peer_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    CHECK_EQ(getpeername(fd, (struct sockaddr *)&ss, &len), 0);
    return ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                   : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* A listener on the loopback address of @family, its address in @ss. */
static int listener(int family, struct sockaddr_storage *ss, socklen_t *len)
{
    int l = weft_listen(family == AF_INET ? "127.0.0.1" : "::1", 0, SOCK_STREAM, 16, 0, 0);
    CHECK(l >= 0);
    *len = sizeof *ss;
    CHECK_EQ(getsockname(l, (struct sockaddr *)ss, len), 0);
    return l;
}

/* A loopback address nothing listens on: connect(2) is refused. */
static void refused_addr(struct sockaddr_storage *ss, socklen_t *len)
{
    int l = listener(AF_INET, ss, len);
    CHECK_EQ(weft_close(l), 0);
}

/* A connect that waits forever: to an address list, or a Unix path. */
typedef struct dial_job {
    struct addrinfo *list;
    const char *path;
    int rc;
} dial_job;

static void *dial_fiber(void *arg)
{
    dial_job *j = arg;
    j->rc = j->list ? weft__dial_list(j->list, SOCK_STREAM, WEFT_FOREVER)
                    : weft_unix_connect(j->path, SOCK_STREAM, WEFT_FOREVER);
    return NULL;
}

static int have_ipv6(void)
{
    int s = socket(AF_INET6, SOCK_STREAM, 0);
    if (s < 0)
        return 0;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

static void race(void)
{
    full f;
    full_open(&f, AF_INET);
    struct sockaddr_storage good, bad;
    socklen_t glen, blen;
    int gl = listener(AF_INET, &good, &glen);
    refused_addr(&bad, &blen);
    struct addrinfo a[3];

    /* Silent first: the good one starts 250 ms later and wins; the silent
     * attempt is cancelled and closed (h_end counts descriptors). */
    a[0] = ai_of(&f.ss, f.len);
    a[1] = ai_of(&good, glen);
    a[0].ai_next = &a[1];
    int64_t t0 = weft_now();
    int fd = weft__dial_list(&a[0], SOCK_STREAM, weft_deadline_in(5000 * MS));
    int64_t took = weft_now() - t0;
    CHECK(fd >= 0);
    CHECK_EQ(peer_port(fd), ntohs(((struct sockaddr_in *)&good)->sin_port));
    /* the second started when the stagger time came; timers never fire
     * early (no upper bound: a loaded machine may take any time) */
    CHECK_EQ(weft__dial_started, 2);
    CHECK_EQ(weft__dial_staggered, 2u);
    CHECK(took >= 240 * MS);
    CHECK_EQ(weft_close(fd), 0);
    int c = weft_accept(gl, NULL, NULL, weft_deadline_in(1000 * MS));
    CHECK(c >= 0);
    CHECK_EQ(weft_close(c), 0);

    /* Refused first: the next starts at once. */
    a[0] = ai_of(&bad, blen);
    a[1] = ai_of(&good, glen);
    a[0].ai_next = &a[1];
    fd = weft__dial_list(&a[0], SOCK_STREAM, weft_deadline_in(5000 * MS));
    CHECK(fd >= 0);
    CHECK_EQ(weft__dial_started, 2);
    CHECK_EQ(weft__dial_staggered, 0u); /* not after the stagger time */
    CHECK_EQ(weft_close(fd), 0);
    CHECK((c = weft_accept(gl, NULL, NULL, weft_deadline_in(1000 * MS))) >= 0);
    CHECK_EQ(weft_close(c), 0);

    /* All refused: the first address's error. */
    a[1] = ai_of(&bad, blen);
    CHECK_EQ(weft__dial_list(&a[0], SOCK_STREAM, weft_deadline_in(5000 * MS)), -ECONNREFUSED);

    /* All silent: the deadline, shared by every attempt. */
    a[0] = ai_of(&f.ss, f.len);
    a[1] = ai_of(&f.ss, f.len);
    a[2] = ai_of(&f.ss, f.len);
    a[1].ai_next = &a[2];
    t0 = weft_now();
    CHECK_EQ(weft__dial_list(&a[0], SOCK_STREAM, weft_deadline_in(300 * MS)), -ETIMEDOUT);
    took = weft_now() - t0;
    CHECK(took >= 300 * MS);
    CHECK_EQ(weft__dial_started, 2); /* the third was due after the deadline */
    CHECK_EQ(weft__dial_list(&a[0], SOCK_STREAM, 0), -EAGAIN);
    /* ... and a timeout scope. */
    int64_t saved;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(50 * MS), &saved), 0);
    CHECK_EQ(weft__dial_list(&a[0], SOCK_STREAM, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_scope_leave(saved), 0);

    /* Cancelled while racing (three attempts started by then). */
    dial_job j = {&a[0], NULL, 99};
    weft_fiber_t fb;
    CHECK_EQ(weft_spawn(dial_fiber, &j, NULL, &fb), 0);
    CHECK_EQ(weft_sleep(600 * MS), 0);
    CHECK_EQ(weft_cancel(fb), 0);
    CHECK_EQ(weft_join(fb, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j.rc, -ECANCELED);

    /* Families alternate: v4 silent, v4 silent, v6 good is tried second. */
    if (have_ipv6()) {
        struct sockaddr_storage g6;
        socklen_t g6len;
        int l6 = listener(AF_INET6, &g6, &g6len);
        a[0] = ai_of(&f.ss, f.len);
        a[1] = ai_of(&f.ss, f.len);
        a[2] = ai_of(&g6, g6len);
        a[0].ai_next = &a[1];
        a[1].ai_next = &a[2];
        t0 = weft_now();
        fd = weft__dial_list(&a[0], SOCK_STREAM, weft_deadline_in(5000 * MS));
        took = weft_now() - t0;
        CHECK(fd >= 0);
        CHECK(took >= 240 * MS);
        /* the families alternate: the IPv6 address is tried second */
        CHECK(weft__dial_started >= 2);
        CHECK_EQ(weft__dial_family[0], AF_INET);
        CHECK_EQ(weft__dial_family[1], AF_INET6);
        CHECK_EQ(weft_close(fd), 0);
        CHECK((c = weft_accept(l6, NULL, NULL, weft_deadline_in(1000 * MS))) >= 0);
        CHECK_EQ(weft_close(c), 0);
        CHECK_EQ(weft_close(l6), 0);
    } else {
        printf("no IPv6 loopback: family alternation not tested\n");
    }
    CHECK_EQ(weft_close(gl), 0);
    full_close(&f);
}

static void by_name(void)
{
    /* Listen on a name, connect to it by name and by number. */
    int l = weft_listen("localhost", 0, SOCK_STREAM, 0, 0, weft_deadline_in(5000 * MS));
    CHECK(l >= 0);
    int port = weft_local_port(l);
    CHECK(port > 0);
    int fd = weft_dial("localhost", port, SOCK_STREAM, weft_deadline_in(5000 * MS));
    int c = weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS));
    exchange(fd, c, "hi");
    char buf[4];
    fd = weft_dial("127.0.0.1", port, SOCK_STREAM, weft_deadline_in(5000 * MS));
    CHECK(fd >= 0);
    CHECK_EQ(weft_close(fd), 0);
    CHECK((c = weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS))) >= 0);
    CHECK_EQ(weft_close(c), 0);
    /* Taken: -EADDRINUSE; shared with WEFT_REUSEPORT on both. */
    CHECK_EQ(weft_listen("127.0.0.1", port, SOCK_STREAM, 0, 0, 0), -EADDRINUSE);
    CHECK_EQ(weft_close(l), 0);
    int r1 = weft_listen("127.0.0.1", 0, SOCK_STREAM, 0, WEFT_REUSEPORT, 0);
    CHECK(r1 >= 0);
    int r2 = weft_listen("127.0.0.1", weft_local_port(r1), SOCK_STREAM, 0, WEFT_REUSEPORT, 0);
    CHECK(r2 >= 0);
    CHECK_EQ(weft_close(r1), 0);
    CHECK_EQ(weft_close(r2), 0);
    /* NULL host: every IPv4 address. */
    l = weft_listen(NULL, 0, SOCK_STREAM, 0, 0, 0);
    CHECK(l >= 0);
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    CHECK_EQ(getsockname(l, (struct sockaddr *)&sa, &len), 0);
    CHECK_EQ(sa.sin_family, AF_INET);
    CHECK_EQ(sa.sin_addr.s_addr, htonl(INADDR_ANY));
    CHECK_EQ(weft_close(l), 0);

    /* weft_tcp_listen and weft_tcp_connect take names too. */
    l = weft_tcp_listen("localhost", 0, 0, 0);
    CHECK(l >= 0);
    fd = weft_tcp_connect("localhost", weft_local_port(l), weft_deadline_in(5000 * MS));
    exchange(fd, weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS)), "tcp");
    CHECK_EQ(weft_close(l), 0);
    CHECK_EQ(weft_tcp_connect("no-such-host.invalid", 80, WEFT_FOREVER), -ENOENT);
    CHECK_EQ(weft_tcp_listen("no-such-host.invalid", 0, 0, 0), -ENOENT);
    CHECK_EQ(weft_tcp_connect("localhost", 0, 0), -EINVAL);

    /* UDP by name. */
    int u = weft_listen("localhost", 0, SOCK_DGRAM, 0, 0, weft_deadline_in(5000 * MS));
    CHECK(u >= 0);
    int uc = weft_dial("localhost", weft_local_port(u), SOCK_DGRAM, weft_deadline_in(5000 * MS));
    CHECK(uc >= 0);
    CHECK_EQ(weft_send(uc, "dg", 2, 0, WEFT_FOREVER), 2);
    CHECK_EQ(weft_recv(u, buf, sizeof buf, 0, weft_deadline_in(1000 * MS)), 2);
    CHECK_EQ(weft_close(uc), 0);
    CHECK_EQ(weft_close(u), 0);

    /* Errors. */
    CHECK_EQ(weft_dial("no-such-host.invalid", 80, SOCK_STREAM, WEFT_FOREVER), -ENOENT);
    CHECK_EQ(weft_listen("no-such-host.invalid", 0, SOCK_STREAM, 0, 0, WEFT_FOREVER), -ENOENT);
    CHECK_EQ(weft_dial(NULL, 80, SOCK_STREAM, 0), -EINVAL);
    CHECK_EQ(weft_dial("", 80, SOCK_STREAM, 0), -EINVAL);
    CHECK_EQ(weft_dial("localhost", 0, SOCK_STREAM, 0), -EINVAL);
    CHECK_EQ(weft_dial("localhost", 65536, SOCK_STREAM, 0), -EINVAL);
    CHECK_EQ(weft_dial("localhost", 80, SOCK_RAW, 0), -EINVAL);
    CHECK_EQ(weft_dial("localhost", 80, SOCK_STREAM, -2), -EINVAL);
    CHECK_EQ(weft_listen("localhost", -1, SOCK_STREAM, 0, 0, 0), -EINVAL);
    CHECK_EQ(weft_listen("localhost", 0, SOCK_SEQPACKET, 0, 0, 0), -EINVAL);
    CHECK_EQ(weft_listen("localhost", 0, SOCK_STREAM, 0, 8, 0), -EINVAL);
    CHECK_EQ(weft_listen("localhost", 0, SOCK_STREAM, 0, 0, -2), -EINVAL);
    CHECK_EQ(weft_listen("192.0.2.1", 0, SOCK_STREAM, 0, 0, 0), -EADDRNOTAVAIL);
    /* A name with no time left to look it up. */
    CHECK_EQ(weft_dial("localhost", 80, SOCK_STREAM, 0), -EAGAIN);

    /* weft_resolve */
    struct sockaddr_storage ss;
    socklen_t sl;
    char text[64];
    CHECK_EQ(weft_resolve("127.0.0.1", 80, 0, &ss, &sl, 0), 0);
    CHECK_EQ(weft_addr_format((struct sockaddr *)&ss, sl, text, sizeof text), 12);
    CHECK(strcmp(text, "127.0.0.1:80") == 0);
    CHECK_EQ(weft_resolve("localhost", 8080, SOCK_DGRAM, &ss, &sl, weft_deadline_in(5000 * MS)), 0);
    CHECK(weft_addr_format((struct sockaddr *)&ss, sl, text, sizeof text) > 0);
    CHECK(strcmp(text, "127.0.0.1:8080") == 0 || strcmp(text, "[::1]:8080") == 0);
    CHECK_EQ(weft_resolve("::1", 443, SOCK_STREAM, &ss, &sl, 0), 0);
    CHECK_EQ(ss.ss_family, AF_INET6);
    CHECK_EQ(weft_addr_format((struct sockaddr *)&ss, sl, text, sizeof text), 9);
    CHECK(strcmp(text, "[::1]:443") == 0);
    CHECK_EQ(weft_addr_format((struct sockaddr *)&ss, sl, text, 9), -ENOSPC);
    CHECK_EQ(text[8], '\0');
    CHECK_EQ(weft_addr_format((struct sockaddr *)&ss, 8, text, sizeof text), -EINVAL);
    CHECK_EQ(weft_addr_format(NULL, sl, text, sizeof text), -EINVAL);
    CHECK_EQ(weft_addr_format((struct sockaddr *)&ss, sl, NULL, 0), -EINVAL);
    struct sockaddr other = {.sa_family = AF_APPLETALK};
    CHECK_EQ(weft_addr_format(&other, sizeof other, text, sizeof text), -EAFNOSUPPORT);
    CHECK_EQ(weft_resolve("no-such-host.invalid", 1, 0, &ss, &sl, WEFT_FOREVER), -ENOENT);
    CHECK_EQ(weft_resolve(NULL, 1, 0, &ss, &sl, 0), -EINVAL);
    CHECK_EQ(weft_resolve("::1", 1, SOCK_RAW, &ss, &sl, 0), -EINVAL);
    CHECK_EQ(weft_resolve("::1", 1, 0, NULL, &sl, 0), -EINVAL);
    CHECK_EQ(weft_resolve("::1", 70000, 0, &ss, &sl, 0), -EINVAL);
}

static void unix_sockets(void)
{
    char path[64], abs[64], text[128];
    snprintf(path, sizeof path, "/tmp/weft-t-dial-%d.sock", (int)getpid());
    snprintf(abs, sizeof abs, "@weft-t-dial-%d", (int)getpid());
    unlink(path);
    const char *names[] = {path, abs};
    for (int i = 0; i < 2; i++) {
        int l = weft_unix_listen(names[i], SOCK_STREAM, 0, 0);
        CHECK(l >= 0);
        CHECK_EQ(weft_unix_listen(names[i], SOCK_STREAM, 0, 0), -EADDRINUSE);
        int fd = weft_unix_connect(names[i], SOCK_STREAM, weft_deadline_in(1000 * MS));
        CHECK(fd >= 0);
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int c = weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS));
        CHECK(c >= 0);
        CHECK_EQ(getsockname(c, (struct sockaddr *)&ss, &len), 0);
        CHECK(weft_addr_format((struct sockaddr *)&ss, len, text, sizeof text) > 0);
        CHECK(strcmp(text, names[i]) == 0);
        len = sizeof ss;
        CHECK_EQ(getpeername(c, (struct sockaddr *)&ss, &len), 0);
        CHECK_EQ(weft_addr_format((struct sockaddr *)&ss, len, text, sizeof text), 0);
        exchange(fd, c, "unix");
        /* A live socket is never replaced. */
        CHECK_EQ(weft_unix_listen(names[i], SOCK_STREAM, 0, WEFT_UNIX_UNLINK), -EADDRINUSE);
        CHECK_EQ(weft_close(l), 0);
    }
    /* The path stays after close: refused, then replaced on request. */
    CHECK_EQ(weft_unix_connect(path, SOCK_STREAM, 0), -ECONNREFUSED);
    CHECK_EQ(weft_unix_listen(path, SOCK_STREAM, 0, 0), -EADDRINUSE);
    int l = weft_unix_listen(path, SOCK_STREAM, 1, WEFT_UNIX_UNLINK);
    CHECK(l >= 0);
    /* A full backlog makes a connect wait: deadline, then cancellation. */
    int held[8], nheld = 0, rc;
    while ((rc = weft_unix_connect(path, SOCK_STREAM, weft_deadline_in(20 * MS))) >= 0) {
        CHECK(nheld < 8);
        held[nheld++] = rc;
    }
    CHECK_EQ(rc, -ETIMEDOUT);
    CHECK_EQ(weft_unix_connect(path, SOCK_STREAM, 0), -EAGAIN);
    CHECK_EQ(weft_unix_connect(path, SOCK_SEQPACKET, 0), -EPROTOTYPE);
    for (int i = 0; i < nheld; i++)
        CHECK_EQ(weft_close(held[i]), 0);
    CHECK_EQ(weft_close(l), 0);
    CHECK_EQ(unlink(path), 0);
    /* A file that is not a socket is never removed. */
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    fclose(fp);
    CHECK_EQ(weft_unix_listen(path, SOCK_STREAM, 0, WEFT_UNIX_UNLINK), -EADDRINUSE);
    struct stat sb;
    CHECK_EQ(stat(path, &sb), 0);
    CHECK(S_ISREG(sb.st_mode));
    CHECK_EQ(unlink(path), 0);

    /* Seqpacket keeps message boundaries. */
    l = weft_unix_listen(abs, SOCK_SEQPACKET, 0, 0);
    CHECK(l >= 0);
    int fd = weft_unix_connect(abs, SOCK_SEQPACKET, weft_deadline_in(1000 * MS));
    CHECK(fd >= 0);
    int c = weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS));
    CHECK(c >= 0);
    CHECK_EQ(weft_send(fd, "one", 3, 0, WEFT_FOREVER), 3);
    CHECK_EQ(weft_send(fd, "two", 3, 0, WEFT_FOREVER), 3);
    char buf[16];
    CHECK_EQ(weft_recv(c, buf, sizeof buf, 0, weft_deadline_in(1000 * MS)), 3);
    CHECK_EQ(weft_recv(c, buf, sizeof buf, 0, weft_deadline_in(1000 * MS)), 3);
    CHECK_EQ(weft_close(fd), 0);
    CHECK_EQ(weft_close(c), 0);
    CHECK_EQ(weft_close(l), 0);

    /* Datagrams between two bound abstract names. */
    char cname[64];
    snprintf(cname, sizeof cname, "@weft-t-dial-%d-client", (int)getpid());
    int srv = weft_unix_listen(abs, SOCK_DGRAM, 0, 0);
    CHECK(srv >= 0);
    int cli = weft_unix_listen(cname, SOCK_DGRAM, 0, 0);
    CHECK(cli >= 0);
    struct sockaddr_storage to;
    socklen_t tolen = sizeof to;
    CHECK_EQ(getsockname(srv, (struct sockaddr *)&to, &tolen), 0);
    CHECK_EQ(weft_sendto(cli, "ping", 4, 0, (struct sockaddr *)&to, tolen, WEFT_FOREVER), 4);
    struct sockaddr_storage from;
    socklen_t fromlen = sizeof from;
    CHECK_EQ(weft_recvfrom(srv, buf, sizeof buf, 0, (struct sockaddr *)&from, &fromlen,
                           weft_deadline_in(1000 * MS)), 4);
    CHECK(weft_addr_format((struct sockaddr *)&from, fromlen, text, sizeof text) > 0);
    CHECK(strcmp(text, cname) == 0);
    CHECK_EQ(weft_sendto(srv, "pong", 4, 0, (struct sockaddr *)&from, fromlen, WEFT_FOREVER), 4);
    CHECK_EQ(weft_recv(cli, buf, sizeof buf, 0, weft_deadline_in(1000 * MS)), 4);
    int dc = weft_unix_connect(abs, SOCK_DGRAM, 0);
    CHECK(dc >= 0);
    CHECK_EQ(weft_send(dc, "x", 1, 0, WEFT_FOREVER), 1);
    CHECK_EQ(weft_recv(srv, buf, sizeof buf, 0, weft_deadline_in(1000 * MS)), 1);
    CHECK_EQ(weft_close(dc), 0);
    CHECK_EQ(weft_close(cli), 0);
    CHECK_EQ(weft_close(srv), 0);

    /* Bad input. */
    char longp[200];
    memset(longp, 'p', sizeof longp);
    longp[0] = '/';
    longp[108] = '\0'; /* 108 bytes: no room for the NUL */
    CHECK_EQ(weft_unix_listen(longp, SOCK_STREAM, 0, 0), -ENAMETOOLONG);
    CHECK_EQ(weft_unix_connect(longp, SOCK_STREAM, 0), -ENAMETOOLONG);
    longp[0] = '@';
    longp[108] = 'p';
    longp[109] = '\0'; /* '@' and 108 name bytes: one too many */
    CHECK_EQ(weft_unix_listen(longp, SOCK_STREAM, 0, 0), -ENAMETOOLONG);
    longp[108] = '\0'; /* '@' and 107: the most there is room for */
    l = weft_unix_listen(longp, SOCK_STREAM, 0, 0);
    CHECK(l >= 0);
    CHECK_EQ(weft_close(l), 0);
    CHECK_EQ(weft_unix_listen(NULL, SOCK_STREAM, 0, 0), -EINVAL);
    CHECK_EQ(weft_unix_listen("", SOCK_STREAM, 0, 0), -EINVAL);
    CHECK_EQ(weft_unix_listen("@", SOCK_STREAM, 0, 0), -EINVAL);
    CHECK_EQ(weft_unix_listen(abs, SOCK_RAW, 0, 0), -EINVAL);
    CHECK_EQ(weft_unix_listen(abs, SOCK_STREAM, 0, 1), -EINVAL);
    CHECK_EQ(weft_unix_listen("/nonexistent-dir/x.sock", SOCK_STREAM, 0, 0), -ENOENT);
    CHECK_EQ(weft_unix_connect("/nonexistent-dir/x.sock", SOCK_STREAM, 0), -ENOENT);
    CHECK_EQ(weft_unix_connect(abs, SOCK_STREAM, 0), -ECONNREFUSED);
    CHECK_EQ(weft_unix_connect(abs, SOCK_RAW, 0), -EINVAL);
    CHECK_EQ(weft_unix_connect("", SOCK_STREAM, 0), -EINVAL);
    CHECK_EQ(weft_unix_connect(abs, SOCK_STREAM, -2), -EINVAL);
}

static void unix_cancel(void)
{
    char abs[64];
    snprintf(abs, sizeof abs, "@weft-t-dial-%d-full", (int)getpid());
    int l = weft_unix_listen(abs, SOCK_STREAM, 1, 0);
    CHECK(l >= 0);
    int held[8], nheld = 0, rc;
    while ((rc = weft_unix_connect(abs, SOCK_STREAM, weft_deadline_in(20 * MS))) >= 0)
        held[nheld++] = rc;
    dial_job j = {NULL, abs, 99};
    h_interrupt(dial_fiber, &j, -1);
    CHECK_EQ(j.rc, -ECANCELED);
    /* Room again: a waiting connect gets through. */
    j.rc = 99;
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(dial_fiber, &j, NULL, &f), 0);
    CHECK_EQ(weft_sleep(5 * MS), 0);
    int c = weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS));
    CHECK(c >= 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK(j.rc >= 0);
    CHECK_EQ(weft_close(j.rc), 0);
    CHECK_EQ(weft_close(c), 0);
    for (int i = 0; i < nheld; i++)
        CHECK_EQ(weft_close(held[i]), 0);
    CHECK_EQ(weft_close(l), 0);
}

/* weft_connect() itself on a full Unix backlog (a program that makes its
 * own socket): it used to wait for "writable", which an unconnected Unix
 * socket always is (a busy loop on io_uring and poll) or which never comes
 * again (epoll, edge-triggered: the connect never retried). It retries
 * with a growing pause instead: few switches while it waits, and a connect
 * that gets through once the listener accepts. */
typedef struct conn_job {
    const char *name;
    int rc;
} conn_job;

static void *connect_fiber(void *arg)
{
    conn_job *j = arg;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(j->name));
    memcpy(sa.sun_path + 1, j->name + 1, strlen(j->name) - 1); /* abstract */
    int fd = weft_socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    j->rc = weft_connect(fd, (struct sockaddr *)&sa, len, weft_deadline_in(5000 * MS));
    CHECK_EQ(weft_close(fd), 0);
    return NULL;
}

static void connect_full_backlog(void)
{
    H_CASE("connect_full_backlog");
    char abs[64];
    snprintf(abs, sizeof abs, "@weft-t-dial-%d-connect", (int)getpid());
    int l = weft_unix_listen(abs, SOCK_STREAM, 1, 0);
    CHECK(l >= 0);
    int held[8], nheld = 0, rc;
    while ((rc = weft_unix_connect(abs, SOCK_STREAM, weft_deadline_in(20 * MS))) >= 0) {
        CHECK(nheld < 8);
        held[nheld++] = rc;
    }
    CHECK_EQ(rc, -ETIMEDOUT);
    conn_job j = {abs, 99};
    weft_stats_t st0, st1;
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st0), 0);
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(connect_fiber, &j, NULL, &f), 0);
    CHECK_EQ(weft_sleep(100 * MS), 0);
    CHECK_EQ(j.rc, 99); /* still waiting for room */
    CHECK_EQ(weft_sched_stats(weft_sched_self(), &st1), 0);
    /* Pauses of 1, 2, 4 ... 50 ms: about 8 retries in 100 ms, two
     * switches each; a readiness wait would switch thousands of times. */
    CHECK(st1.switches - st0.switches < 60);
    int c = weft_accept(l, NULL, NULL, weft_deadline_in(1000 * MS));
    CHECK(c >= 0);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(j.rc, 0);
    CHECK_EQ(weft_close(c), 0);
    for (int i = 0; i < nheld; i++)
        CHECK_EQ(weft_close(held[i]), 0);
    CHECK_EQ(weft_close(l), 0);
}

static void *body(void *arg)
{
    (void)arg;
    by_name();
    unix_sockets();
    unix_cancel();
    connect_full_backlog();
    race();
    return NULL;
}

int main(void)
{
    h_begin("dial");
    /* Outside fibers: listening on a name works (resolved on this thread);
     * connecting needs a fiber. */
    int l = weft_listen("localhost", 0, SOCK_STREAM, 0, 0, WEFT_FOREVER);
    CHECK(l >= 0);
    CHECK_EQ(weft_dial("localhost", weft_local_port(l), SOCK_STREAM, 0), -EPERM);
    CHECK_EQ(weft_unix_connect("@x", SOCK_STREAM, 0), -EPERM);
    struct sockaddr_storage ss;
    socklen_t sl;
    CHECK_EQ(weft_resolve("localhost", 1, 0, &ss, &sl, 0), -EPERM);
    CHECK_EQ(weft_resolve("127.0.0.1", 1, 0, &ss, &sl, 0), 0); /* a number: no wait */
    CHECK_EQ(weft_close(l), 0);
    h_run(body, NULL);
    return h_end();
}
