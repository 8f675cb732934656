/*
 * dump.c — observability: what every fiber of a scheduler is doing (the
 * data behind Scheduler#dump, formatted in lib/weft/dump.rb), the loop's
 * health in #stats and the dump signal (Weft._request_dump, answered by
 * the loop itself). The stall watchdog's sampler is in stall.c.
 *
 * Costs on the hot path, all paid elsewhere (loop.c, rsched.h): a wait
 * records what it waits on and the loop's clock when it parks (stores in
 * the rwait on the fiber's stack); the loop reads the clock once per pass
 * (and once more after a blocking poll); every switch stores the fiber
 * and bumps a counter. Everything here runs only when asked.
 */
#include "rsched.h"

#include <poll.h>
#include <time.h>
#include <unistd.h>

volatile unsigned weft__rb_dump_gen;

static ID id_signal_dump;
static VALUE sym_running, sym_ready, sym_waiting, sym_suspended;
static VALUE sym_fd, sym_ring, sym_file, sym_select, sym_sleep, sym_block, sym_writer;

/* ---- live schedulers, for the dump signal ------------------------------ */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static weft__list reg;

static bool reg_linked(rsched *s)
{
    return s->snode.prev || reg.head == &s->snode;
}

void weft__rb_sched_register(rsched *s)
{
    pthread_mutex_lock(&reg_lock);
    if (!reg_linked(s))
        weft__list_push(&reg, &s->snode);
    pthread_mutex_unlock(&reg_lock);
}

void weft__rb_sched_unregister(rsched *s)
{
    pthread_mutex_lock(&reg_lock);
    if (reg_linked(s))
        weft__list_remove(&reg, &s->snode);
    pthread_mutex_unlock(&reg_lock);
}

/* Call @fn for every registered scheduler, under the registry's lock
 * (@fn must not call Ruby nor register or unregister one). */
void weft__rb_sched_each(void (*fn)(rsched *s, void *arg), void *arg)
{
    pthread_mutex_lock(&reg_lock);
    for (weft__node *n = reg.head; n; n = n->next)
        fn(weft__container(n, rsched, snode), arg);
    pthread_mutex_unlock(&reg_lock);
}

/* Weft._request_dump: every scheduler of the process prints its dump to
 * stderr from its loop, at the loop's next pass (a loop blocked in the
 * backend is woken). Async-signal-safe in what it touches; meant for a
 * trap handler (Weft.dump_on_signal). */
static VALUE m_request_dump(VALUE mod)
{
    (void)mod;
    weft__rb_dump_gen++;
    pthread_mutex_lock(&reg_lock);
    for (weft__node *n = reg.head; n; n = n->next) {
        rsched *s = weft__container(n, rsched, snode);
        pthread_mutex_lock(&s->lock);
        if (s->r_live && !s->closed && s->pid == getpid())
            weft__reactor_wake(&s->r);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&reg_lock);
    return Qnil;
}

static VALUE dump_call(VALUE self)
{
    return rb_funcall(self, id_signal_dump, 0);
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            (void)poll(&pfd, 1, 1000);
            continue;
        }
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

/* On the loop, a dump was asked for: format it (Ruby) and write it to
 * descriptor 2 with plain system calls, never through a hook. */
void weft__rb_dump_now(rsched *s)
{
    int state = 0;
    VALUE str = rb_protect(dump_call, s->self, &state);
    if (state) {
        VALUE err = rb_errinfo();
        rb_set_errinfo(Qnil);
        str = rb_sprintf("weft: the dump failed: %" PRIsVALUE "\n", rb_obj_as_string(err));
    }
    if (RB_TYPE_P(str, T_STRING))
        write_all(2, RSTRING_PTR(str), (size_t)RSTRING_LEN(str));
    RB_GC_GUARD(str);
}

/* ---- the fibers -------------------------------------------------------- */

static const char *const op_names[] = {
    [WEFT__OP_READ] = "read", [WEFT__OP_WRITE] = "write", [WEFT__OP_READV] = "readv",
    [WEFT__OP_WRITEV] = "writev", [WEFT__OP_RECV] = "recv", [WEFT__OP_SEND] = "send",
    [WEFT__OP_RECVMSG] = "recvmsg", [WEFT__OP_SENDMSG] = "sendmsg",
    [WEFT__OP_ACCEPT] = "accept", [WEFT__OP_CONNECT] = "connect",
    [WEFT__OP_POLL] = "poll", [WEFT__OP_CLOSE] = "close",
};

static const char *const file_op_names[] = {
    [OP_READ] = "read", [OP_WRITE] = "write", [OP_PREAD] = "pread", [OP_PWRITE] = "pwrite",
};

static VALUE fd_io(rsched *s, int fd)
{
    return fd >= 0 && fd < s->nfdi ? s->fdi[fd].io : Qnil;
}

/* [fd, name] of an operation on rw->xfd: @names[rw->aux], @n of them. */
static VALUE op_detail(const rwait *rw, const char *const *names, int n)
{
    const char *name = rw->aux >= 0 && rw->aux < n && names[rw->aux] ? names[rw->aux] : "op";
    return rb_ary_new_from_args(2, INT2NUM(rw->xfd), rb_str_new_cstr(name));
}

/* [fiber, state, wait, object, detail, waited_ns, deadline_ns, block] */
static VALUE entry(rsched *s, VALUE fiber, rwait *rw, VALUE block, int64_t now, VALUE cur)
{
    VALUE e = rb_ary_new_capa(8);
    rb_ary_push(e, fiber);
    if (!rw) {
        rb_ary_push(e, fiber == cur ? sym_running : sym_suspended);
        for (int i = 0; i < 5; i++)
            rb_ary_push(e, Qnil);
        rb_ary_push(e, block);
        return e;
    }
    rb_ary_push(e, rw->queued || !rw->w.active ? sym_ready : sym_waiting);
    VALUE wait = Qnil, obj = Qnil, detail = Qnil;
    switch (rw->what) {
    case WAIT_FD:
        wait = sym_fd;
        obj = fd_io(s, rw->w.fd);
        detail = rb_ary_new_from_args(2, INT2NUM(rw->w.fd), INT2NUM((int)rw->w.events));
        break;
    case WAIT_RING:
    case WAIT_FILE:
        wait = rw->what == WAIT_RING ? sym_ring : sym_file;
        obj = fd_io(s, rw->xfd);
        detail = rw->what == WAIT_RING
                     ? op_detail(rw, op_names, (int)(sizeof op_names / sizeof *op_names))
                     : op_detail(rw, file_op_names, (int)(sizeof file_op_names / sizeof *file_op_names));
        break;
    case WAIT_SELECT: wait = sym_select; break;
    case WAIT_SLEEP: wait = sym_sleep; break;
    case WAIT_BLOCK: wait = sym_block; obj = rw->obj; break;
    case WAIT_WRITER:
        wait = sym_writer;
        obj = fd_io(s, rw->ofd);
        detail = rb_ary_new_from_args(1, INT2NUM(rw->ofd));
        break;
    }
    rb_ary_push(e, wait);
    rb_ary_push(e, obj);
    rb_ary_push(e, detail);
    rb_ary_push(e, rw->since ? LL2NUM(now - rw->since) : Qnil);
    bool timed = rw->w.active && rw->w.timer.idx != WEFT__TIMER_IDLE;
    rb_ary_push(e, timed ? LL2NUM(rw->w.timer.deadline - now) : Qnil);
    rb_ary_push(e, block);
    return e;
}

struct collect {
    rsched *s;
    VALUE out, cur;
    st_table *seen;
    st_table *yields;           /* fiber -> its sleep(0) (not in waiting) */
    int64_t now;
};

/* The wait @fiber is in: one of the waiting table, or a sleep(0)
 * (weft__rb_rw_begin_yield: not in that table). */
static rwait *wait_of(const struct collect *c, VALUE fiber)
{
    rwait *rw = weft__rb_waiting_of(c->s, fiber);
    st_data_t v;
    if (!rw && st_lookup(c->yields, (st_data_t)fiber, &v))
        rw = (rwait *)v;
    return rw;
}

static int collect_own(st_data_t k, st_data_t v, st_data_t p)
{
    struct collect *c = (struct collect *)p;
    VALUE fiber = (VALUE)k;
    if (!RTEST(rb_fiber_alive_p(fiber)))
        return ST_CONTINUE;
    st_insert(c->seen, k, 1);
    rb_ary_push(c->out, entry(c->s, fiber, wait_of(c, fiber), (VALUE)v, c->now, c->cur));
    return ST_CONTINUE;
}

/* _fibers -> [[fiber, state, wait, object, detail, waited_ns, deadline_ns,
 * block], ...]: every fiber this scheduler started and has not ended (in
 * the order they were started), then every other fiber waiting in one of
 * its hooks. state: :running, :ready, :waiting or :suspended (alive, in no
 * hook: in a resume chain, or after Fiber.yield). */
static VALUE s_fibers(VALUE self)
{
    rsched *s = weft__rb_get_raw(self);
    weft__rb_check_fork(s);
    struct collect c = {s, rb_ary_new(), rb_fiber_current(), st_init_numtable(),
                        st_init_numtable(), weft_now()};
    for (weft__node *n = s->all.head; n; n = n->next) {
        rwait *rw = RW_OF(n, anode);
        if (rw->quick)
            st_insert(c.yields, (st_data_t)rw->fiber, (st_data_t)rw);
    }
    st_foreach(s->own, collect_own, (st_data_t)&c);
    for (weft__node *n = s->all.head; n; n = n->next) {
        rwait *rw = RW_OF(n, anode);
        if (st_is_member(c.seen, (st_data_t)rw->fiber))
            continue;
        st_insert(c.seen, (st_data_t)rw->fiber, 1);
        rb_ary_push(c.out, entry(s, rw->fiber, rw, Qnil, c.now, c.cur));
    }
    st_free_table(c.seen);
    st_free_table(c.yields);
    return c.out;
}

/* _thread: the thread the scheduler belongs to. */
static VALUE s_thread(VALUE self)
{
    return weft__rb_get_raw(self)->thread;
}

/* ---- loop health (#stats) ----------------------------------------------- */

static const char *const wait_names[WAIT_NKINDS] = {
    [WAIT_FD] = "io_wait", [WAIT_RING] = "ring_op", [WAIT_FILE] = "file_op",
    [WAIT_SELECT] = "select", [WAIT_SLEEP] = "sleep", [WAIT_BLOCK] = "block",
    [WAIT_WRITER] = "writer",
};

/* The upper bound of the bucket where the @q-th fraction of the delays
 * falls, in seconds (a delay in bucket i is < 2^(i+1) ns). */
static VALUE percentile(const struct rstats *st, double q)
{
    if (!st->delays)
        return DBL2NUM(0.0);
    uint64_t want = (uint64_t)(q * (double)st->delays + 0.999999), seen = 0;
    for (int i = 0; i < 64; i++) {
        seen += st->hist[i];
        if (seen >= want) {
            double ub = i == 0 ? 1.0 : (double)(1ULL << i) * 2.0;
            double max = (double)st->delay_max;
            return DBL2NUM((ub < max ? ub : max) / 1e9);
        }
    }
    return DBL2NUM((double)st->delay_max / 1e9);
}

static void aset(VALUE h, const char *k, VALUE v)
{
    rb_hash_aset(h, ID2SYM(rb_intern(k)), v);
}

void weft__rb_stats_health(rsched *s, VALUE h)
{
    const struct rstats *st = &s->st;
    aset(h, "iterations", ULL2NUM(st->iterations));
    int64_t up = st->started ? weft_now() - st->started : 0;
    int64_t busy = up - st->wait_ns;
    aset(h, "busy_seconds", DBL2NUM((double)(busy > 0 ? busy : 0) / 1e9));
    aset(h, "wait_seconds", DBL2NUM((double)st->wait_ns / 1e9));
    aset(h, "utilisation", DBL2NUM(up > 0 ? (double)(busy > 0 ? busy : 0) / (double)up : 0.0));
    VALUE d = rb_hash_new();
    aset(d, "count", ULL2NUM(st->delays));
    aset(d, "p50", percentile(st, 0.50));
    aset(d, "p99", percentile(st, 0.99));
    aset(d, "max", DBL2NUM((double)st->delay_max / 1e9));
    aset(h, "ready_delay", d);
    VALUE begun = rb_hash_new(), ended = rb_hash_new();
    for (int i = 0; i < WAIT_NKINDS; i++) {
        aset(begun, wait_names[i], ULL2NUM(st->begun[i]));
        aset(ended, wait_names[i], ULL2NUM(st->ended[i]));
    }
    aset(h, "waits_begun", begun);
    aset(h, "waits_ended", ended);
    aset(h, "timers_fired", ULL2NUM(st->timers_fired));
    aset(h, "fibers_spawned", ULL2NUM(st->spawned));
    aset(h, "fibers_ended", ULL2NUM(st->finished));
    aset(h, "fibers_alive", ULL2NUM(st->spawned - st->finished));
    aset(h, "fibers_peak", ULL2NUM(st->peak));
    aset(h, "stalls", ULL2NUM(weft__rb_stall_count(s)));
}

/* _spawn_block(fiber) -> the block the fiber was started with, or nil. */
static VALUE s_spawn_block(VALUE self, VALUE fiber)
{
    rsched *s = weft__rb_get_raw(self);
    st_data_t v;
    return s->own && st_lookup(s->own, (st_data_t)fiber, &v) ? (VALUE)v : Qnil;
}

void weft__rb_init_dump(VALUE klass)
{
    id_signal_dump = rb_intern("_signal_dump");
#define SYM(v, name) (v = ID2SYM(rb_intern(name)))
    SYM(sym_running, "running");
    SYM(sym_ready, "ready");
    SYM(sym_waiting, "waiting");
    SYM(sym_suspended, "suspended");
    SYM(sym_fd, "io");
    SYM(sym_ring, "io_op");
    SYM(sym_file, "file_op");
    SYM(sym_select, "select");
    SYM(sym_sleep, "sleep");
    SYM(sym_block, "block");
    SYM(sym_writer, "writer");
#undef SYM
    VALUE mWeft = rb_define_module("Weft");
    rb_define_singleton_method(mWeft, "_request_dump", m_request_dump, 0);
    static const weft__rb_method methods[] = {
        {"_fibers", RUBY_METHOD_FUNC(s_fibers), 0},
        {"_thread", RUBY_METHOD_FUNC(s_thread), 0},
        {"_spawn_block", RUBY_METHOD_FUNC(s_spawn_block), 1},
        {NULL, NULL, 0},
    };
    weft__rb_define_methods(klass, methods);
    weft__rb_init_stall(klass);
}
