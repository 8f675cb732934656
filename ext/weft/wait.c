/*
 * wait.c — descriptors and the hooks that only wait. What the extension
 * knows of a descriptor (weft__rb_fd_prepare), waiting for one to be
 * ready (weft__rb_wait_fd, io_wait), IO#timeout, io_close; and the waits
 * that are no I/O: kernel_sleep, block and unblock (Mutex, Queue, join).
 */
#include "rsched.h"

#include <fcntl.h>
#include <unistd.h>
#include <math.h>

static VALUE eIOTimeout;
/* BasicSocket, once the socket library has defined it (Qnil until then). */
static VALUE basic_socket = Qnil;

/* ---- descriptors --------------------------------------------------------- */

/* Absolute deadline from a Ruby timeout (nil = forever). */
int64_t weft__rb_to_deadline(VALUE t)
{
    if (NIL_P(t))
        return WEFT_FOREVER;
    /* What is not a plain number, and a number that is no interval,
     * raise what Ruby's own sleep, select and waits raise for them
     * (rb_time_interval: TypeError, ArgumentError, RangeError). */
    if (!RB_INTEGER_TYPE_P(t) && !RB_FLOAT_TYPE_P(t))
        (void)rb_time_interval(t);
    double d = NUM2DBL(t);
    if (isnan(d) || d < 0) {
        (void)rb_time_interval(t);
        rb_raise(rb_eArgError, "time interval must not be negative");
    }
    if (d == 0)
        return 0;
    if (d > 9.0e9)
        return INT64_MAX;
    return weft_deadline_in((int64_t)(d * 1e9));
}

int64_t weft__rb_to_interval_deadline(VALUE t)
{
    if (RB_TYPE_P(t, T_BIGNUM) || (RB_FLOAT_TYPE_P(t) && !(RFLOAT_VALUE(t) <= 9.0e9)))
        (void)rb_time_interval(t);
    return weft__rb_to_deadline(t);
}

int64_t weft__rb_to_deadline_or_now(VALUE t)
{
    if ((RB_INTEGER_TYPE_P(t) || RB_FLOAT_TYPE_P(t)) && NUM2DBL(t) < 0)
        return 0;
    return weft__rb_to_deadline(t);
}

/* The descriptor of @io (an IO or something with #to_io). */
int weft__rb_io_fd(VALUE io)
{
    VALUE x = rb_io_get_io(io); /* TypeError for non-IO objects */
    return rb_io_descriptor(x);  /* IOError for a closed stream */
}

/* The descriptor of @io after a wait: another fiber may have closed it
 * meanwhile. A thread whose IO another thread closes under its wait gets
 * IOError "stream closed in another thread" (rb_notify_fd_close), where
 * "closed stream" means it was closed before the call; so here too. */
static int io_fd_after_wait(VALUE io)
{
    VALUE x = rb_io_get_io(io);
    if (weft__rb_io_closed(x))
        rb_raise(rb_eIOError, "stream closed in another thread");
    return rb_io_descriptor(x);
}

/* Whether @io is a BasicSocket (so its descriptor is a socket). */
static bool is_socket_object(VALUE io)
{
    if (NIL_P(basic_socket)) {
        ID id = rb_intern("BasicSocket");
        if (!rb_const_defined_at(rb_cObject, id))
            return false;
        VALUE c = rb_const_get_at(rb_cObject, id);
        if (!RB_TYPE_P(c, T_CLASS))
            return false;
        basic_socket = c;
    }
    return RTEST(rb_obj_is_kind_of(io, basic_socket));
}

/* The extension's state for @fd, on which @io was seen (grown as needed).
 * The reactor's per-fd state outlives a Ruby IO: when another IO object
 * shows up on a descriptor number with no waiter, treat it as a new
 * descriptor (drops a stale epoll registration, bumps the generation). */
fdinfo *weft__rb_fd_prepare(rsched *s, int fd, VALUE io)
{
    if (fd < 0)
        rb_syserr_fail(EBADF, "weft: bad descriptor");
    io = rb_io_get_io(io);
    if (fd >= s->nfdi) {
        int n = s->nfdi ? s->nfdi : 64;
        while (n <= fd)
            n *= 2;
        REALLOC_N(s->fdi, fdinfo, n);
        for (int i = s->nfdi; i < n; i++) {
            s->fdi[i].io = Qnil;
            s->fdi[i].w_owner = Qnil;
            s->fdi[i].w_waiters = (weft__list){NULL, NULL};
            s->fdi[i].waited = 0;
            s->fdi[i].tty = 0;
        }
        s->nfdi = n;
    }
    fdinfo *fi = &s->fdi[fd];
    s->hot_fd = fd;
    if (fi->io != io) {
        weft__fdstate *st = weft__fd(&s->r, fd);
        if (!st)
            rb_memerror();
        /* Waiters left by an IO that was closed under them (the number was
         * reused since): they get EBADF; the new IO starts afresh. */
        if (!weft__list_empty(&st->waits) && (NIL_P(fi->io) || weft__rb_io_closed(fi->io)))
            weft__reactor_fd_close(&s->r, fd, -EBADF);
        if (weft__list_empty(&st->waits))
            weft__reactor_fd_new(&s->r, fd);
        if (!NIL_P(fi->w_owner))
            weft__rb_owner_release(s, fd); /* its writer's IO is gone */
        fi->io = io;
        fi->waited = 0;
        /* What the descriptor is: the reactor's one classification. A
         * BasicSocket is a socket (Ruby checked when it made the object,
         * and IO#reopen changes the class with the descriptor), and a
         * socket's O_NONBLOCK is never consulted (its transfers use
         * MSG_DONTWAIT): the fstat and the fcntl are two system calls per
         * accepted connection that a server under churn would pay. */
        fi->tty = 0;
        if (is_socket_object(io)) {
            s->r.fds[fd].kind = WEFT__FD_SOCKET;
        } else {
            int fl = fcntl(fd, F_GETFL);
            s->r.fds[fd].nonblock = fl >= 0 && (fl & O_NONBLOCK);
            fi->tty = weft__fd_kind(&s->r, fd) == WEFT__FD_OTHER && isatty(fd);
        }
    }
    return fi;
}

/* Readiness right now (zero-timeout poll), as weft__rb_wait_fd answers;
 * 0 if nothing is, -EBADF if the descriptor is invalid. */
int weft__rb_poll_now(int fd, int events)
{
    return weft__ready_now(fd, (uint32_t)events);
}

/* Wait until @fd is ready for @events or @deadline: what it is ready for
 * (weft__ev_answer: after an error or a hang-up, also WEFT_ERROR /
 * WEFT_HANGUP, and readable and writable if asked for, but priority data
 * only when it is there), or -errno. */
int weft__rb_wait_fd(rsched *s, int fd, int events, int64_t deadline)
{
    rwait rw;
    weft__rb_rw_begin(s, &rw, WAIT_FD);
    int rc = weft__wait_arm_deadline(&rw.w, deadline);
    if (rc == 0)
        rc = weft__wait_arm_fd(&rw.w, fd, (uint32_t)events);
    if (rc < 0)
        weft__wait_complete(&rw.w, rc);
    return weft__rb_rw_wait(s, &rw, false);
}

/* ---- io_wait, IO#timeout, io_close ---------------------------------------- */

/* The IO's own timeout (IO#timeout, Ruby >= 3.2) as a deadline, or
 * WEFT_FOREVER. *@set tells whether there was one. */
int64_t weft__rb_io_timeout_deadline(VALUE io, bool *set)
{
    *set = false;
#ifdef HAVE_RB_IO_TIMEOUT
    VALUE t = rb_io_timeout(rb_io_get_io(io));
    if (!NIL_P(t)) {
        *set = true;
        return weft__rb_to_deadline(t);
    }
#else
    (void)io;
#endif
    return WEFT_FOREVER;
}

/* What Ruby raises when an IO's own timeout passes (IO::TimeoutError, Ruby
 * >= 3.2). */
void weft__rb_raise_io_timeout(int events)
{
    if (NIL_P(eIOTimeout))
        rb_syserr_fail(ETIMEDOUT, "IO timeout");
    rb_raise(eIOTimeout, "Timed out waiting for IO to become %s!",
             events & WEFT_WRITABLE ? "writable" : "readable");
}

struct iowait_arg {
    rsched *s;
    int fd, ev;
    int64_t deadline;
    int rc;
};

static VALUE iowait_body(VALUE p)
{
    struct iowait_arg *a = (struct iowait_arg *)p;
    a->rc = weft__rb_wait_fd(a->s, a->fd, a->ev, a->deadline);
    return Qnil;
}

/* io_wait(io, events, timeout) -> ready events (Integer) or false. A nil
 * timeout means the IO's own (IO#timeout, Ruby 3.2+): IO::TimeoutError
 * when it passes. */
static VALUE s_io_wait(VALUE self, VALUE io, VALUE events, VALUE timeout)
{
    /* From another thread: Ruby 3.4 runs IO.copy_stream's copy on the
     * thread a blocking_operation_wait hook gives it (weft defines none;
     * a subclass may), and the copy asks the fiber's scheduler to wait
     * for its descriptors from there. Wait on that thread as Ruby does
     * without a scheduler (it has none). */
    rsched *raw = weft__rb_get_raw(self);
    if (raw->bound && raw->thread != rb_thread_current())
        return rb_io_wait(io, events, timeout);
    rsched *s = weft__rb_get_sched(self);
    int fd = weft__rb_io_fd(io);
    int ev = NUM2INT(events) & (WEFT_READABLE | WEFT_PRIORITY | WEFT_WRITABLE);
    if (!ev)
        rb_raise(rb_eArgError, "io_wait: no events requested");
    bool io_tmo = false;
    int64_t deadline = NIL_P(timeout) ? weft__rb_io_timeout_deadline(io, &io_tmo)
                                      : weft__rb_to_interval_deadline(timeout);
    VALUE cur = rb_fiber_current();
    if (!weft__list_empty(&s->intrs))
        weft__rb_deliver_interrupts(s, cur);
    /* epoll is edge-triggered: look first. A ring's POLL_ADD checks the
     * current state when it is submitted, so there the look is a wasted
     * system call for reads unless the caller will not wait at all; a
     * write rarely has to wait, and one that follows a split write must
     * not switch fibers needlessly. No look either right after this
     * fiber's transfer hook found the descriptor not ready (Ruby calls
     * io_wait at once after -EAGAIN, no other hook and no poll between):
     * whatever changes after that attempt reaches the wait — a ring POLL
     * checks at submission, epoll reports current readiness when the
     * descriptor is added or modified and an edge for every change after,
     * poll() is level-triggered. That saves a poll(2) per request of a
     * keep-alive server on epoll. */
    bool after_eagain = s->ea_seq + 1 == s->hook_seq && s->ea_fd == fd &&
                        s->ea_ev == ev && s->ea_fiber == cur;
    int rc = deadline == 0 || (!after_eagain &&
                               (!weft__reactor_has_ops(&s->r) || (ev & WEFT_WRITABLE)))
                 ? weft__rb_poll_now(fd, ev) : 0;
    /* A zero timeout ("is it ready?") that found nothing: the others run
     * once before the second look. A loop that polls so until another
     * fiber acts (`until done; IO.select(nil, nil, nil, 0); end`,
     * `io.wait_readable(0)`) would otherwise spin forever, where on
     * threads the other one runs meanwhile. */
    if (rc == 0 && deadline == 0) {
        weft__rb_yield_once(s);
        fd = io_fd_after_wait(io); /* IOError if another fiber closed it */
        rc = weft__rb_poll_now(fd, ev);
    }
    if (rc == 0 && deadline != 0) {
        fdinfo *fi = weft__rb_fd_prepare(s, fd, io);
        fi->waited = 1;
        bool split = ev == WEFT_WRITABLE && s->lw_fiber == cur && s->lw_fd == fd &&
                     s->hook_seq == s->lw_seq + 1 &&
                     (NIL_P(fi->w_owner) || fi->w_owner == cur);
        if (!split) {
            rc = weft__rb_wait_fd(s, fd, ev, deadline);
            /* Another fiber closed the IO while this one waited: poll(2)
             * reports the dead descriptor (POLLNVAL) as ready, where the
             * other backends end the wait with EBADF. IOError either way,
             * as on a thread (`io.wait_readable` returned the closed IO). */
            if (rc > 0)
                (void)io_fd_after_wait(io);
        } else {
            fi->w_owner = cur; /* while this wait lasts */
            struct iowait_arg a = {s, fd, ev, deadline, 0};
            int state = 0;
            rb_protect(iowait_body, (VALUE)&a, &state);
            rc = a.rc;
            weft__rb_owner_release(s, fd);
            s->sw_fiber = cur;
            s->sw_fd = fd;
            s->sw_seq = s->hook_seq;
            if (state)
                rb_jump_tag(state);
        }
    }
    /* The events asked for that are ready; 0 for a descriptor that hung
     * up or failed when only priority data was asked for, which a
     * thread's poll(2) answers the same way (POLLHUP, no POLLPRI): Ruby
     * then returns false at once. */
    if (rc > 0)
        return INT2NUM(rc & ev);
    /* The IO's own timeout passed (no explicit one was given): raise, as
     * Ruby does for its own blocking calls without a scheduler (and as
     * Async does); an explicit timeout is the caller's to handle. */
    if (rc == -ETIMEDOUT && io_tmo)
        weft__rb_raise_io_timeout(ev);
    if (rc == 0 || rc == -ETIMEDOUT)
        return Qfalse;
    if (rc == -EBADF) {
        /* Closed, or the number closed or replaced (IO#reopen) under the
         * IO: a thread's wait ends with this error for both. */
        (void)io_fd_after_wait(io);
        rb_raise(rb_eIOError, "stream closed in another thread");
    }
    rb_syserr_fail(-rc, "io_wait");
    return Qnil;
}

/* ---- a descriptor closed or replaced under its waiters -------------------
 *
 * IO#reopen puts another file under the IO's descriptor number (dup2),
 * and IO#close of a second IO on the same number (IO.for_fd) closes it
 * under the first. A fiber waiting on the first IO stayed registered
 * with the file that went away (epoll, io_uring) and waited for ever
 * (the loop's sweep finds closed IOs, and this one is not); with poll it
 * read the new file. On a thread the wait ends with IOError ("stream
 * closed in another thread"). Ruby calls no hook for either, so these
 * two are prepended to IO (lib/weft/scheduler.rb): after them, when this
 * thread's scheduler is a live weft one, the waits on that number end
 * as io_close ends them. In C: every close in the process goes through
 * it, ~20 ns where no weft scheduler is set. */
/* @fd was closed or replaced: its waiters get EBADF, its IO is forgotten
 * (io_close, and IO#reopen and IO#close through `replaced`). */
static void fd_gone(rsched *s, int fd)
{
    weft__reactor_fd_close(&s->r, fd, -EBADF);
    if (fd < s->nfdi)
        s->fdi[fd].io = Qnil;
}

static VALUE replaced(int argc, VALUE *argv, VALUE self)
{
    rsched *s = weft__rb_ours(rb_fiber_scheduler_get());
    if (!s || !s->r_live || s->thread != rb_thread_current())
        return rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
    rb_io_t *fptr = RFILE(self)->fptr;
    int fd = fptr ? fptr->fd : -1;
    VALUE r = rb_call_super_kw(argc, argv, RB_PASS_CALLED_KEYWORDS);
    if (fd >= 0 && s->r_live && fd < s->r.nfds && !weft__list_empty(&s->r.fds[fd].waits))
        fd_gone(s, fd);
    return r;
}

/* io_close(fd) (4.0) or io_close(io): wake its waiters with EBADF and drop
 * the reactor's state before the descriptor is released. */
static VALUE s_io_close(VALUE self, VALUE io)
{
    rsched *s = weft__rb_get_sched(self);
    int fd = RB_INTEGER_TYPE_P(io) ? NUM2INT(io) : rb_io_descriptor(rb_io_get_io(io));
    if (fd < 0)
        return Qfalse;
    fd_gone(s, fd);
    return Qtrue;
}


/* ---- sleep, block, unblock ------------------------------------------------ */

static ID id_sleep_timed_out;

void weft__rb_yield_once(rsched *s)
{
    rwait rw;
    weft__rb_rw_begin_yield(s, &rw, WAIT_SLEEP);
    (void)weft__rb_rw_wait(s, &rw, true);
}

/* kernel_sleep(duration = nil) -> false when the duration ended it */
static VALUE s_kernel_sleep(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 0, 1);
    rsched *s = weft__rb_get_sched(self);
    int64_t deadline = weft__rb_to_interval_deadline(argc ? argv[0] : Qnil);
    rwait rw;
    if (deadline == 0) {
        weft__rb_rw_begin_yield(s, &rw, WAIT_SLEEP); /* sleep(0): just yield */
    } else {
        weft__rb_rw_begin(s, &rw, WAIT_SLEEP);
        rw.wakeable = deadline == WEFT_FOREVER;
        (void)weft__wait_arm_deadline(&rw.w, deadline);
    }
    int rc = weft__rb_rw_wait(s, &rw, true);
    /* Ruby's Mutex#sleep (so ConditionVariable#wait and Monitor's wait)
     * ignores what this hook returns and reports every sleep as woken.
     * Weft's Mutex#sleep asks by setting this fiber-local to false before
     * it sleeps: it is made true when the timeout ended the sleep, and the
     * sleep returns nil, as on a thread. */
    if (rc == -ETIMEDOUT && deadline > 0) {
        VALUE th = rb_thread_current();
        if (rb_thread_local_aref(th, id_sleep_timed_out) == Qfalse)
            rb_thread_local_aset(th, id_sleep_timed_out, Qtrue);
    }
    return rc == -ETIMEDOUT ? Qfalse : Qtrue;
}

/* block(blocker, timeout = nil) -> true if unblocked, false on timeout */
static VALUE s_block(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 1, 2);
    rsched *s = weft__rb_get_sched(self);
    /* Thread#join(-1) and Queue#pop(timeout: -1) do not wait. */
    int64_t deadline = weft__rb_to_deadline_or_now(argc > 1 ? argv[1] : Qnil);
    rwait rw;
    weft__rb_rw_begin(s, &rw, WAIT_BLOCK);
    rw.obj = argv[0];
    (void)weft__wait_arm_deadline(&rw.w, deadline);
    int rc = weft__rb_rw_wait(s, &rw, true);
    return rc == -ETIMEDOUT || rc == -EAGAIN ? Qfalse : Qtrue; /* -EAGAIN: timeout 0 */
}

static void unblock_local(rsched *s, VALUE fiber)
{
    rwait *rw = weft__rb_waiting_of(s, fiber);
    if (rw && (rw->kind == RW_BLOCK || rw->kind == RW_SLEEP) && rw->w.active)
        weft__wait_complete(&rw->w, 0);
}

typedef struct unblock_msg {
    rsched *s;
    VALUE fiber; /* used as a key only, never dereferenced */
} unblock_msg;

/* Runs on the loop thread (maybe without the GVL). */
static void unblock_post(void *p)
{
    unblock_msg *m = p;
    unblock_local(m->s, m->fiber);
    free(m);
}

/* Thread#wakeup and #run: a thread asleep returns from its sleep. Which
 * of the thread's fibers the caller means is not known, so every fiber
 * of the thread's scheduler that sleeps without a duration (`sleep`,
 * `Thread.stop`, `Mutex#sleep` and so ConditionVariable#wait without a
 * timeout: only a wakeup, an unblock or an exception ends those) wakes
 * up. A sleep with a duration runs to its end: ending it early would end
 * the timed sleeps of every other fiber of the thread, which a thread's
 * wakeup never touches. */
static int wake_sleeper(st_data_t key, st_data_t val, st_data_t arg)
{
    (void)key;
    (void)arg;
    rwait *rw = (rwait *)val;
    if (rw->wakeable && rw->kind == RW_SLEEP && rw->w.active)
        weft__wait_complete(&rw->w, 0);
    return ST_CONTINUE;
}

/* Runs on the loop thread (maybe without the GVL). */
static void wakeup_post(void *p)
{
    rsched *s = p;
    st_foreach(s->waiting, wake_sleeper, 0);
}

static void wakeup_one(rsched *s, void *arg)
{
    VALUE thread = (VALUE)arg;
    if (s->thread != thread || !s->bound)
        return;
    if (thread == rb_thread_current()) {
        if (s->r_live && !s->closed && s->pid == getpid())
            st_foreach(s->waiting, wake_sleeper, 0);
        return;
    }
    pthread_mutex_lock(&s->lock);
    if (s->r_live && !s->closed)
        (void)weft__reactor_post(&s->r, wakeup_post, s);
    pthread_mutex_unlock(&s->lock);
}

/* Weft::Scheduler._wakeup(thread): what Thread#wakeup adds (lib/). */
static VALUE s_wakeup(VALUE klass, VALUE thread)
{
    (void)klass;
    weft__rb_sched_each(wakeup_one, (void *)thread);
    return Qnil;
}

/* unblock(blocker, fiber): thread-safe. */
static VALUE s_unblock(VALUE self, VALUE blocker, VALUE fiber)
{
    (void)blocker;
    rsched *s = weft__rb_get_raw(self);
    if (s->thread == rb_thread_current()) {
        weft__rb_check_fork(s);
        if (s->r_live)
            unblock_local(s, fiber);
        return Qnil;
    }
    unblock_msg *m = malloc(sizeof *m);
    if (!m)
        rb_memerror();
    m->s = s;
    m->fiber = fiber;
    int rc = -ESHUTDOWN;
    pthread_mutex_lock(&s->lock);
    if (s->r_live && !s->closed)
        rc = weft__reactor_post(&s->r, unblock_post, m);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0)
        free(m);
    return Qnil;
}

void weft__rb_init_wait(VALUE klass)
{
    rb_gc_register_address(&basic_socket);
    id_sleep_timed_out = rb_intern("__weft_sleep_timed_out");
    /* IO::TimeoutError (Ruby >= 3.2): what IO#timeout raises */
    eIOTimeout = Qnil;
    if (rb_const_defined(rb_cIO, rb_intern("TimeoutError"))) {
        eIOTimeout = rb_const_get(rb_cIO, rb_intern("TimeoutError"));
        rb_gc_register_mark_object(eIOTimeout);
    }
    rb_define_method(klass, "io_wait", s_io_wait, 3);
    rb_define_method(klass, "io_close", s_io_close, 1);
    /* Prepended to IO by lib/weft/scheduler.rb. */
    VALUE rep = rb_define_module_under(klass, "Replaced");
    rb_define_method(rep, "reopen", replaced, -1);
    rb_define_method(rep, "close", replaced, -1);
    rb_define_method(klass, "kernel_sleep", s_kernel_sleep, -1);
    rb_define_method(klass, "block", s_block, -1);
    rb_define_method(klass, "unblock", s_unblock, 2);
    rb_define_singleton_method(klass, "_wakeup", s_wakeup, 1);
}
