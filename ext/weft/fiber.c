/*
 * fiber.c — the scheduler's fibers: Fiber.schedule (start_fiber), the C
 * body every scheduled fiber runs (the user's block, and what happens to
 * the exception that ends it), and #run, which drives the loop until the
 * fibers are done and raises what they left.
 */
#include "rsched.h"

static ID id_new, id_full_message, id_blocking_p, id_abort_on_exception;

/* ---- fibers: start, end, errors ------------------------------------- */

/* Raise (and forget) what ended fibers left: a fatal exception first,
 * else the first error. */
void weft__rb_raise_pending(rsched *s)
{
    VALUE e = !NIL_P(s->fatal) ? s->fatal : s->first_error;
    s->fatal = s->first_error = Qnil;
    if (!NIL_P(e))
        rb_exc_raise(e);
}

/* The body of every scheduled fiber: the user's block. An exception that
 * ends it does not escape into whatever fiber runs next (the loop, a
 * fiber that handed off): Weft::Stop ends it quietly; SystemExit and
 * signals stop every fiber and are raised by #run / #close; any other is
 * reported on $stderr (report_on_exception) and the first one is raised
 * by #run / #close once every fiber has ended. In C rather than a Ruby
 * wrapper block: a fiber start costs ~25% less. */
struct entry_arg {
    VALUE proc;
    int argc;
    const VALUE *argv;
    bool quiet;                 /* the block of Weft.run: raised, not reported */
};

static VALUE entry_call(VALUE p)
{
    struct entry_arg *a = (struct entry_arg *)p;
    return rb_proc_call_with_block(a->proc, a->argc, a->argv, Qnil);
}

static void report_error(VALUE exc)
{
    VALUE msg = rb_sprintf("%"PRIsVALUE" terminated with exception "
                           "(report_on_exception is true):\n",
                           rb_inspect(rb_fiber_current()));
    VALUE opts = rb_hash_new();
    rb_hash_aset(opts, ID2SYM(rb_intern("highlight")), Qfalse);
    VALUE full = rb_funcallv_kw(exc, id_full_message, 1, &opts, RB_PASS_KEYWORDS);
    rb_str_append(msg, rb_obj_as_string(full));
    rb_io_write(rb_stderr, msg);
}

static VALUE report_body(VALUE exc)
{
    report_error(exc);
    return Qnil;
}

static VALUE entry_failed(VALUE p, VALUE exc)
{
    struct entry_arg *a = (struct entry_arg *)p;
    if (rb_obj_is_kind_of(exc, weft__rb_eStop))
        return Qnil;
    rsched *s = weft__rb_ours(rb_fiber_scheduler_get());
    if (!s)
        rb_exc_raise(exc); /* not ours any more: as Ruby would */
    if (rb_obj_is_kind_of(exc, rb_eSystemExit) ||
        rb_obj_is_kind_of(exc, rb_eSignal)) {
        if (NIL_P(s->fatal))
            s->fatal = exc;
        if (s->r_live)
            weft__rb_stop_all(s, weft__rb_stop_exception("stopped: another fiber raised SystemExit or a signal"));
        return Qnil;
    }
    if (NIL_P(s->first_error))
        s->first_error = exc;
    if (s->report && !a->quiet) {
        int state = 0;
        rb_protect(report_body, exc, &state); /* a closed $stderr loses nothing else */
        if (state)
            rb_set_errinfo(Qnil);
    }
    /* Thread.abort_on_exception (or the thread's own): a thread that dies
     * so raises its exception in the main thread at once, which ends the
     * program; here the other fibers are stopped and #run raises it. */
    if (!a->quiet && (RTEST(rb_funcall(rb_cThread, id_abort_on_exception, 0)) ||
                      RTEST(rb_funcall(rb_thread_current(), id_abort_on_exception, 0)))) {
        if (NIL_P(s->fatal))
            s->fatal = exc;
        if (s->r_live)
            weft__rb_stop_all(s, weft__rb_stop_exception("stopped: another fiber raised with abort_on_exception"));
    }
    return Qnil;
}

static VALUE entry_body(VALUE p)
{
    return rb_rescue2(entry_call, p, entry_failed, p, rb_eException, (VALUE)0);
}

/* The fiber has ended: it is no longer one of the scheduler's own. */
static VALUE entry_done(VALUE p)
{
    (void)p;
    rsched *s = weft__rb_ours(rb_fiber_scheduler_get());
    if (s) {
        st_data_t key = (st_data_t)rb_fiber_current();
        if (st_delete(s->own, &key, NULL))
            s->st.finished++;
        if (s->chain == (VALUE)key)
            s->chain = Qnil;
    }
    return Qnil;
}

static VALUE entry_run(VALUE proc, int argc, const VALUE *argv, bool quiet)
{
    struct entry_arg a = {proc, argc, argv, quiet};
    return rb_ensure(entry_body, (VALUE)&a, entry_done, (VALUE)&a);
}

/* The block of every scheduled fiber, one Proc for all of them (a Proc
 * per fiber, wrapping the user's, was two more objects for the collector
 * per Fiber.schedule): the first resume passes the user's block as the
 * first argument, before the block's own arguments. */
static VALUE fiber_entry(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, quiet))
{
    (void)yielded;
    (void)blockarg;
    return entry_run(argv[0], argc - 1, argv + 1, RTEST(quiet));
}

static VALUE entry_procs[2]; /* [quiet]: made once, at load */

/* Fiber.schedule resumes the new fiber (see "switching" in loop.c): it
 * runs in the caller's resume chain until its first wait or its end. */
struct start_arg {
    rsched *s;
    VALUE fiber;
    int argc;
    const VALUE *argv;
    VALUE saved;
    bool saved_chained;
    VALUE saved_chain;
};

/* A fiber suspended in Fiber.schedule's resume is not waiting in a hook,
 * so weft__rb_stop_all cannot reach it: if the fibers were stopped while it was
 * suspended (the new fiber raised Interrupt or SystemExit before its first
 * wait), it is stopped here as they were — a scheduled starter with
 * Weft::Stop, a blocking one (the thread's own fiber) with the signal or
 * exit itself, as if it had arrived there. */
static VALUE start_body(VALUE p)
{
    struct start_arg *a = (struct start_arg *)p;
    rsched *s = a->s;
    unsigned stops = s->stops;
    s->entered = a->fiber;
    s->entered_chained = true;
    s->chain = a->fiber;
    weft__rb_on_cpu(s, a->fiber);
    rb_fiber_resume(a->fiber, a->argc, a->argv); /* the block, then its arguments */
    weft__rb_on_cpu(s, rb_fiber_current());
    if (s->stops != stops) {
        if (!RTEST(rb_funcall(rb_fiber_current(), id_blocking_p, 0)))
            rb_exc_raise(weft__rb_stop_exception("stopped: a fiber it started raised SystemExit or a signal"));
        if (!NIL_P(s->fatal)) {
            VALUE e = s->fatal;
            s->fatal = Qnil;
            rb_exc_raise(e);
        }
    }
    return Qnil;
}

static VALUE start_restore(VALUE p)
{
    struct start_arg *a = (struct start_arg *)p;
    a->s->entered = a->saved;
    a->s->entered_chained = a->saved_chained;
    a->s->chain = a->saved_chain;
    return Qnil;
}

static VALUE start_fiber(VALUE self, int argc, VALUE *argv, bool quiet)
{
    rsched *s = weft__rb_get_sched(self);
    if (!rb_block_given_p())
        rb_raise(rb_eArgError, "Weft::Scheduler#fiber needs a block");
    VALUE proc = rb_block_proc();
    VALUE fiber = rb_funcall_with_block(weft__rb_cFiber, id_new, 0, NULL,
                                        entry_procs[quiet]);
    /* The block is kept with it: where the fiber was spawned (#dump), and
     * a root until the fiber has taken it from its first resume. */
    st_insert(s->own, (st_data_t)fiber, (st_data_t)proc);
    s->st.spawned++;
    if (s->st.spawned - s->st.finished > s->st.peak)
        s->st.peak = s->st.spawned - s->st.finished;
    RB_GC_GUARD(proc);
    s->now = weft_now(); /* its first wait's "since" (a spawn is no hot op) */
    VALUE tmp, *av = ALLOCV_N(VALUE, tmp, (size_t)argc + 1);
    av[0] = proc;
    if (argc)
        MEMCPY(av + 1, argv, VALUE, argc);
    struct start_arg a = {s, fiber, argc + 1, av, s->entered, s->entered_chained, s->chain};
    rb_ensure(start_body, (VALUE)&a, start_restore, (VALUE)&a);
    ALLOCV_END(tmp);
    return fiber;
}

/* fiber(*args) { |*args| ... }: Fiber.schedule — start a non-blocking
 * fiber now, passing it @args; returns when it first waits or ends. */
static VALUE s_fiber(int argc, VALUE *argv, VALUE self)
{
    return start_fiber(self, argc, argv, false);
}

/* _fiber_quiet { }: the same for a fiber whose exception the caller raises
 * itself (Weft.run's block): recorded for #run, not reported. */
static VALUE s_fiber_quiet(VALUE self)
{
    return start_fiber(self, 0, NULL, true);
}

/* run: drive the loop until no fiber waits, then raise what the fibers
 * left (see entry_failed). */
static VALUE s_run(VALUE self)
{
    rsched *s = weft__rb_get_sched(self);
    weft__rb_run_loop(s, NULL, Qnil);
    weft__rb_raise_pending(s);
    return Qnil;
}

/* _run_until(fiber): drive the loop until @fiber has ended (other fibers
 * may still wait). */
static VALUE s_run_until(VALUE self, VALUE fiber)
{
    rsched *s = weft__rb_get_sched(self);
    if (!rb_obj_is_kind_of(fiber, weft__rb_cFiber))
        rb_raise(rb_eTypeError, "not a Fiber");
    if (RTEST(rb_fiber_alive_p(fiber)))
        weft__rb_run_loop(s, NULL, fiber);
    return Qnil;
}

void weft__rb_init_fiber(VALUE klass)
{
    id_new = rb_intern("new");
    id_full_message = rb_intern("full_message");
    id_blocking_p = rb_intern("blocking?");
    id_abort_on_exception = rb_intern("abort_on_exception");
    for (int q = 0; q < 2; q++) {
        entry_procs[q] = rb_proc_new(fiber_entry, q ? Qtrue : Qfalse);
        rb_gc_register_mark_object(entry_procs[q]);
    }
    rb_define_method(klass, "fiber", s_fiber, -1);
    rb_define_method(klass, "_fiber", s_fiber, -1);
    rb_define_method(klass, "_fiber_quiet", s_fiber_quiet, 0);
    rb_define_method(klass, "_run_until", s_run_until, 1);
    rb_define_method(klass, "run", s_run, 0);
}
