/*
 * select.c — io_select: IO.select on the reactor.
 */
#include "rsched.h"

#include <poll.h>

/* ---- io_select --------------------------------------------------------
 *
 * IO.select(readables, writables, exceptables, timeout) on the reactor:
 * Ruby 3.3 calls this hook; on Ruby 3.1, which has none, lib/weft/
 * scheduler.rb routes IO.select and Kernel#select from non-blocking fibers
 * here. What is ready now (buffered input counts as readable, as for
 * Ruby) is answered at once; otherwise one wait per descriptor, all
 * waking the fiber, and a deadline; then the sets are looked at again.
 * Returns [readables, writables, exceptables] (the objects given, not
 * their #to_io) or nil when the timeout passes. A closed IO raises
 * IOError ("closed stream"), before or during the wait. */

enum { SEL_R, SEL_W, SEL_E };
static const uint32_t sel_events[3] = {WEFT_READABLE, WEFT_WRITABLE, WEFT_PRIORITY};

/* What makes an entry of each set ready, as select(2) has it (the
 * kernel's POLLIN_SET, POLLOUT_SET, POLLEX_SET): a hang-up makes a
 * descriptor readable, an error readable and writable, and only priority
 * data exceptional. */
static const short sel_ready_on[3] = {POLLIN | POLLRDHUP | POLLHUP | POLLERR,
                                      POLLOUT | POLLERR, POLLPRI};

struct selent {
    VALUE obj, io;
    int fd, set;
    bool mute; /* not ready, and polling it would wake at once (a hang-up
                  or an error that this set does not count): not waited on */
};

struct select_arg {
    rsched *s;
    struct selent *e;
    long n;
    weft__wait *subs;
    rwait *rw;
    int64_t deadline;
};

static void sel_sub_wake(weft__wait *w)
{
    rwait *rw = w->owner;
    if (rw->w.active)
        weft__wait_complete(&rw->w, 0);
}

/* The current IO behind each entry (re-checked after a wait: a closed one
 * raises IOError). */
static void sel_refresh(struct select_arg *a)
{
    for (long i = 0; i < a->n; i++) {
        VALUE io = rb_io_get_io(a->e[i].obj);
        a->e[i].io = io;
        a->e[i].fd = rb_io_descriptor(io); /* IOError: closed stream */
    }
}

/* The ready entries now, as the result triple, or Qnil. */
static VALUE sel_ready(struct select_arg *a)
{
    VALUE out[3] = {Qnil, Qnil, Qnil};
    bool any = false;
    long n = a->n;
    struct pollfd pfd_small[16];
    struct pollfd *pfd = n <= 16 ? pfd_small : ALLOC_N(struct pollfd, n);
    for (long i = 0; i < n; i++) {
        pfd[i] = (struct pollfd){.fd = a->e[i].fd, .events = weft__ev_to_poll(sel_events[a->e[i].set])};
    }
    int rc;
    while ((rc = poll(pfd, (nfds_t)n, 0)) < 0 && errno == EINTR)
        ;
    int err = rc < 0 ? errno : 0;
    for (long i = 0; i < n && !err; i++) {
        short rev = pfd[i].revents;
        bool ready = (rev & sel_ready_on[a->e[i].set]) != 0;
        a->e[i].mute = !ready && (rev & (POLLHUP | POLLERR));
        if (rev & POLLNVAL)
            err = EBADF;
        if (!ready && a->e[i].set == SEL_R) {
            rb_io_t *fptr;
            RB_IO_POINTER(a->e[i].io, fptr);
            ready = rb_io_read_pending(fptr) > 0;
        }
        if (ready) {
            int k = a->e[i].set;
            if (NIL_P(out[k]))
                out[k] = rb_ary_new();
            rb_ary_push(out[k], a->e[i].obj);
            any = true;
        }
    }
    if (pfd != pfd_small)
        xfree(pfd);
    if (err)
        rb_syserr_fail(err, "select");
    if (!any)
        return Qnil;
    for (int k = 0; k < 3; k++)
        if (NIL_P(out[k]))
            out[k] = rb_ary_new();
    return rb_ary_new_from_values(3, out);
}

static VALUE sel_wait_body(VALUE p)
{
    struct select_arg *a = (struct select_arg *)p;
    rsched *s = a->s;
    for (long i = 0; i < a->n; i++) {
        weft__wait *w = &a->subs[i];
        if (a->e[i].mute)
            continue;
        weft__rb_fd_prepare(s, a->e[i].fd, a->e[i].io);
        weft__wait_init(w, &s->r, sel_sub_wake, a->rw);
        int rc = weft__wait_arm_fd(w, a->e[i].fd, sel_events[a->e[i].set]);
        if (rc < 0) {
            weft__wait_complete(w, rc);
            weft__wait_complete(&a->rw->w, rc);
            break;
        }
    }
    weft__rb_wait_for(s, a->rw);
    return Qnil;
}

static VALUE sel_wait_ensure(VALUE p)
{
    struct select_arg *a = (struct select_arg *)p;
    for (long i = 0; i < a->n; i++)
        if (a->subs[i].r && a->subs[i].active)
            weft__wait_complete(&a->subs[i], -ECANCELED);
    weft__rb_rw_end(a->rw);
    return Qnil;
}

static VALUE s_io_select(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 1, 4);
    rsched *s = weft__rb_get_sched(self);
    int64_t deadline = weft__rb_to_interval_deadline(argc > 3 ? argv[3] : Qnil);
    VALUE keep = rb_ary_new(); /* the objects, whatever happens to the sets */
    for (int k = 0; k < 3 && k < argc; k++) {
        if (NIL_P(argv[k]))
            continue;
        /* An Array itself, as Ruby's select checks it (no to_ary). */
        Check_Type(argv[k], T_ARRAY);
        VALUE set = argv[k];
        for (long i = 0; i < RARRAY_LEN(set); i++) {
            rb_ary_push(keep, RARRAY_AREF(set, i));
            rb_ary_push(keep, INT2FIX(k));
        }
    }
    long n = RARRAY_LEN(keep) / 2;
    VALUE ev = 0, sv = 0;
    struct selent *e = ALLOCV_N(struct selent, ev, n ? n : 1);
    weft__wait *subs = ALLOCV_N(weft__wait, sv, n ? n : 1);
    memset(subs, 0, sizeof *subs * (size_t)(n ? n : 1));
    for (long i = 0; i < n; i++) {
        e[i].obj = RARRAY_AREF(keep, 2 * i);
        e[i].set = FIX2INT(RARRAY_AREF(keep, 2 * i + 1));
    }
    struct select_arg a = {s, e, n, subs, NULL, deadline};
    VALUE result = Qnil;
    VALUE cur = rb_fiber_current();
    bool yielded = false;
    for (;;) {
        if (!weft__list_empty(&s->intrs))
            weft__rb_deliver_interrupts(s, cur);
        sel_refresh(&a);
        result = sel_ready(&a);
        if (NIL_P(result) && deadline == 0 && !yielded) {
            /* A zero timeout that found nothing: the others run once
             * before the second look, as for io_wait (IO.select(nil, nil,
             * nil, 0) is sleep(0) on a thread). */
            weft__rb_yield_once(s);
            yielded = true;
            continue;
        }
        if (!NIL_P(result) || deadline == 0 ||
            (deadline != WEFT_FOREVER && weft_now() >= deadline))
            break;
        rwait rw;
        weft__rb_rw_begin(s, &rw, WAIT_SELECT);
        a.rw = &rw;
        memset(subs, 0, sizeof *subs * (size_t)(n ? n : 1));
        int rc = weft__wait_arm_deadline(&rw.w, deadline);
        if (rc < 0)
            weft__wait_complete(&rw.w, rc);
        /* Waiting inside a scheduled fiber's resume (Enumerator#next):
         * that fiber's interrupts end this wait and are raised here. */
        weft__rb_behalf_check(s, &rw);
        rb_ensure(sel_wait_body, (VALUE)&a, sel_wait_ensure, (VALUE)&a);
        if (!NIL_P(rw.behalf) && !weft__list_empty(&s->intrs))
            weft__rb_deliver_interrupts(s, rw.behalf);
        rc = rw.w.result;
        if (rc < 0 && rc != -ETIMEDOUT && rc != -EAGAIN && rc != -ECANCELED && rc != -EBADF)
            rb_syserr_fail(-rc, "select");
    }
    ALLOCV_END(ev);
    ALLOCV_END(sv);
    RB_GC_GUARD(keep);
    return result;
}

void weft__rb_init_select(VALUE klass)
{
    rb_define_method(klass, "io_select", s_io_select, -1);
}
