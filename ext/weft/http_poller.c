/*
 * http_poller.c — Weft::HTTP::Poller, an epoll set of parked keep-alive
 * connections for Weft::Server (Linux only).
 */
#include <ruby.h>

#include <errno.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/epoll.h>
#endif

#include "http.h"

#ifdef __linux__
/*
 * Weft::HTTP::Poller — an epoll set of sockets, each armed for one
 * readiness (EPOLLONESHOT). Weft::Server parks idle keep-alive
 * connections in it instead of keeping a fiber waiting on each (a Ruby
 * fiber keeps ~25 KB resident); one fiber waits on the set's descriptor
 * through the scheduler and takes the ready ones. The kernel forgets a
 * socket when it is closed.
 */
typedef struct poller {
    int epfd;
} poller;

static void poller_free(void *p)
{
    poller *pl = p;
    if (pl->epfd >= 0)
        close(pl->epfd);
    xfree(pl);
}

static const rb_data_type_t poller_type = {
    .wrap_struct_name = "Weft::HTTP::Poller",
    .function = {.dfree = poller_free},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

/* Poller.new: an empty set (its own epoll descriptor, close-on-exec). */
static VALUE poller_alloc(VALUE klass)
{
    poller *pl;
    VALUE obj = TypedData_Make_Struct(klass, poller, &poller_type, pl);
    pl->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (pl->epfd < 0)
        rb_sys_fail("epoll_create1");
    return obj;
}

static poller *get_poller(VALUE self)
{
    poller *pl = rb_check_typeddata(self, &poller_type);
    if (pl->epfd < 0)
        rb_raise(rb_eIOError, "closed Weft::HTTP::Poller");
    return pl;
}

/* poller.fileno -> the descriptor that is readable when a socket is. */
static VALUE poller_fileno(VALUE self)
{
    return INT2NUM(get_poller(self)->epfd);
}

/* poller.add(fd) -> self: report +fd+ once when it is readable (or hung
 * up). Adding it again re-arms it. */
static VALUE poller_add(VALUE self, VALUE fdv)
{
    poller *pl = get_poller(self);
    int fd = NUM2INT(fdv);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.fd = fd;
    if (epoll_ctl(pl->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
        if (errno != ENOENT || epoll_ctl(pl->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
            rb_sys_fail("epoll_ctl");
    }
    return self;
}

/* poller.ready(max) -> [fd, ...]: the sockets that became ready, without
 * waiting (wait for #fileno to be readable first). */
static VALUE poller_ready(VALUE self, VALUE maxv)
{
    poller *pl = get_poller(self);
    int max = NUM2INT(maxv);
    if (max <= 0 || max > 1024)
        max = 1024;
    struct epoll_event evs[1024];
    int n;
    do
        n = epoll_wait(pl->epfd, evs, max, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        rb_sys_fail("epoll_wait");
    VALUE out = rb_ary_new_capa(n);
    for (int i = 0; i < n; i++)
        rb_ary_push(out, INT2NUM(evs[i].data.fd));
    return out;
}

/* poller.close -> nil */
static VALUE poller_close(VALUE self)
{
    poller *pl = rb_check_typeddata(self, &poller_type);
    if (pl->epfd >= 0) {
        close(pl->epfd);
        pl->epfd = -1;
    }
    return Qnil;
}

void weft__http_poller_init(VALUE mhttp)
{
    static const weft__rb_method methods[] = {
        {"fileno", RUBY_METHOD_FUNC(poller_fileno), 0},
        {"add", RUBY_METHOD_FUNC(poller_add), 1},
        {"ready", RUBY_METHOD_FUNC(poller_ready), 1},
        {"close", RUBY_METHOD_FUNC(poller_close), 0},
        {NULL, NULL, 0},
    };
    weft__rb_define_class(mhttp, "Poller", poller_alloc, methods);
}
#else
void weft__http_poller_init(VALUE mhttp) { (void)mhttp; }
#endif
