/*
 * intr.c — interrupts: exceptions raised in a fiber from outside it, when
 * it next waits in (or wakes from) a hook. timeout_after arms a timer that
 * fires one; fiber_interrupt queues one for a fiber; #stop (and the
 * scheduler itself, when a fiber dies of SystemExit or a signal, or a
 * close is forced) queues one for every waiting fiber.
 */
#include "rsched.h"

static ID id_new, id_message, id_backtrace, id_set_backtrace, id_serial;
static ID id_Timeout, id_Error, id_ExitException;
static VALUE cTimeoutExit;
static unsigned long timeout_serial;

/* ---- interrupts (timeout_after, fiber_interrupt) ------------------------ */

static void intr_link(rsched *s, rintr *ri)
{
    ri->epoch = s->epoch;
    weft__list_push_front(&s->intrs, &ri->node);
    ri->linked = 1;
}

static void intr_unlink(rsched *s, rintr *ri)
{
    if (!ri->linked)
        return;
    ri->linked = 0;
    if (ri->epoch != s->epoch)
        return;
    weft__timer_disarm(&s->r, &ri->timer);
    weft__list_remove(&s->intrs, &ri->node);
}

/* Queue @exc, already due, for @fiber (on the heap: freed once raised). */
static void intr_queue(rsched *s, VALUE fiber, VALUE exc)
{
    rintr *ri = ZALLOC(rintr);
    ri->s = s;
    ri->fiber = fiber;
    ri->klass = ri->message = Qnil;
    ri->exc = exc;
    ri->heap = 1;
    ri->fired = 1;
    ri->timer.idx = WEFT__TIMER_IDLE;
    intr_link(s, ri);
}

/* Wake @fiber if it waits in one of our hooks (it then delivers). A
 * nocancel wait (for the completion of a ring op being cancelled) is left
 * alone: the interrupt is delivered once the op is over. */
static void intr_kick(rsched *s, VALUE fiber)
{
    rwait *rw = weft__rb_waiting_of(s, fiber);
    if (rw) {
        if (rw->w.active && !rw->w.nocancel)
            weft__wait_complete(&rw->w, -ECANCELED);
        return;
    }
    /* Not waiting: it may be inside its resume of a fiber the scheduler
     * did not start (Enumerator#next), which waits on its behalf. On a
     * thread the interrupt is raised in the fiber the thread runs. */
    for (weft__node *a = s->all.head; a; a = a->next) {
        rwait *w = RW_OF(a, anode);
        if (w->behalf == fiber && w->w.active && !w->w.nocancel)
            weft__wait_complete(&w->w, -ECANCELED);
    }
}

/* Timer callback: may run without the GVL. */
static void intr_timer_fired(weft__timer *t)
{
    rintr *ri = (rintr *)((char *)t - offsetof(rintr, timer));
    ri->fired = 1;
    ri->s->st.timers_fired++;
    if (!ri->masked)
        intr_kick(ri->s, ri->fiber);
}

/* Raise the first pending interrupt of the current fiber, if any. */
void weft__rb_deliver_interrupts(rsched *s, VALUE fiber)
{
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
        if (!ri->fired || ri->delivered || ri->masked || ri->fiber != fiber)
            continue;
        ri->delivered = 1;
        VALUE exc;
        if (ri->heap) {
            exc = ri->exc;
            intr_unlink(s, ri);
            xfree(ri);
        } else if (ri->exit) {
            exc = NIL_P(ri->message) ? rb_funcall(ri->exit_class, id_new, 0)
                                     : rb_funcall(ri->exit_class, id_new, 1, ri->message);
            rb_ivar_set(exc, id_serial, ULONG2NUM(ri->serial));
        } else if (NIL_P(ri->message)) {
            exc = rb_funcall(ri->klass, id_new, 0);
        } else {
            exc = rb_funcall(ri->klass, id_new, 1, ri->message);
        }
        rb_exc_raise(exc);
    }
}

/* Has @fiber a fired interrupt not yet raised? */
bool weft__rb_intr_pending(rsched *s, VALUE fiber)
{
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
        if (ri->fired && !ri->delivered && !ri->masked && ri->fiber == fiber)
            return true;
    }
    return false;
}

VALUE weft__rb_stop_exception(const char *why)
{
    return rb_exc_new_cstr(weft__rb_eStop, why);
}

/* Queue @exc for every fiber waiting in a hook and wake them all (a
 * nocancel wait is woken when its op is over). Returns how many. */
long weft__rb_stop_all(rsched *s, VALUE exc)
{
    long n = 0;
    s->stops++;
    for (weft__node *a = s->all.head; a; a = a->next) {
        rwait *rw = RW_OF(a, anode);
        intr_queue(s, rw->fiber, exc);
        n++;
    }
    for (weft__node *a = s->all.head; a; a = a->next) {
        rwait *rw = RW_OF(a, anode);
        if (rw->w.active && !rw->w.nocancel)
            weft__wait_complete(&rw->w, -ECANCELED);
    }
    return n;
}

/* ---- Thread.handle_interrupt ------------------------------------------- */

/* On a thread, Timeout raises with Thread#raise, which
 * Thread.handle_interrupt(SomeClass => :never) defers until the block
 * ends: the code inside (a pool's checkin, a commit) is not cut short.
 * The prepended Thread.handle_interrupt (lib/weft/scheduler.rb) keeps
 * the masks of a non-blocking fiber in a fiber-local stack; a timeout of
 * that fiber whose class a :never mask covers neither wakes its waits
 * nor is raised (masked), until the masks change (_remask). Interrupts
 * reach a fiber only in hooks, which block: :on_blocking is :immediate. */
static ID id_masks, id_never;

/* The class a thread would have been raised for this timeout. */
static VALUE intr_mask_class(rintr *ri)
{
    if (ri->exit)
        return ri->exit_class == cTimeoutExit ? ri->klass : ri->exit_class;
    return ri->klass;
}

/* Whether the current fiber's masks defer @klass, as Ruby decides it:
 * the innermost mask that names @klass or one of its ancestors. */
static bool masks_defer(VALUE masks, VALUE klass)
{
    if (!RB_TYPE_P(masks, T_ARRAY) || RARRAY_LEN(masks) == 0 || !RB_TYPE_P(klass, T_CLASS))
        return false;
    VALUE ancestors = rb_mod_ancestors(klass);
    for (long i = RARRAY_LEN(masks) - 1; i >= 0; i--) {
        VALUE mask = RARRAY_AREF(masks, i);
        if (!RB_TYPE_P(mask, T_HASH))
            continue;
        for (long j = 0; j < RARRAY_LEN(ancestors); j++) {
            VALUE v = rb_hash_lookup2(mask, RARRAY_AREF(ancestors, j), Qundef);
            if (v != Qundef)
                return SYMBOL_P(v) && SYM2ID(v) == id_never;
        }
    }
    return false;
}

static VALUE current_masks(void)
{
    return rb_thread_local_aref(rb_thread_current(), id_masks);
}

/* _remask: the current fiber's masks changed; mask or unmask its
 * timeouts, and raise one that is due and no longer masked. */
static VALUE s_remask(VALUE self)
{
    rsched *s = weft__rb_get_sched(self);
    VALUE cur = rb_fiber_current();
    VALUE masks = current_masks();
    bool due = false;
    for (weft__node *n = s->intrs.head; n; n = n->next) {
        rintr *ri = INTR_OF(n);
        if (ri->heap || ri->delivered || ri->fiber != cur)
            continue;
        ri->masked = masks_defer(masks, intr_mask_class(ri));
        due |= ri->fired && !ri->masked;
    }
    if (due)
        weft__rb_deliver_interrupts(s, cur);
    return Qnil;
}

/* ---- hooks -------------------------------------------------------------- */

/* timeout_after(duration, klass, message) { |duration| ... }
 *
 * Timeout.timeout(s) { } (no class given) passes Timeout::Error. On a
 * thread, what ends that block is no Timeout::Error until it leaves the
 * block (Ruby >= 3.3 raises Timeout::ExitException inside and converts it
 * there; 3.1 throws), so a `rescue Timeout::Error` inside (a library's
 * own retry, an inner Timeout) does not swallow an outer timeout. The
 * same here: for Timeout::Error the exception raised inside is an "exit"
 * (Timeout::ExitException where Ruby has it, else
 * Weft::Scheduler::TimeoutExit, neither a StandardError), marked with its
 * timeout's serial number, and becomes a Timeout::Error with its message
 * and backtrace when it reaches that timeout_after. Another class (as
 * Timeout.timeout(s, MyError) or Weft.with_timeout give) is raised as
 * itself, as on a thread. */
static VALUE timeout_ensure(VALUE p)
{
    rintr *ri = (rintr *)p;
    intr_unlink(ri->s, ri);
    return Qnil;
}

static VALUE timeout_yield(VALUE p)
{
    return rb_yield(((rintr *)p)->arg);
}

static VALUE timeout_rescue(VALUE p, VALUE exc)
{
    rintr *ri = (rintr *)p;
    VALUE serial = rb_attr_get(exc, id_serial);
    if (!RB_INTEGER_TYPE_P(serial) || NUM2ULONG(serial) != ri->serial)
        rb_exc_raise(exc); /* another timeout's exit: goes on to it */
    VALUE err = rb_funcall(ri->klass, id_new, 1, rb_funcall(exc, id_message, 0));
    rb_funcall(err, id_set_backtrace, 1, rb_funcall(exc, id_backtrace, 0));
    rb_exc_raise(err);
    return Qnil; /* not reached */
}

static VALUE timeout_body(VALUE p)
{
    rintr *ri = (rintr *)p;
    if (!ri->exit)
        return rb_yield(ri->arg);
    return rb_rescue2(timeout_yield, p, timeout_rescue, p, ri->exit_class, (VALUE)0);
}

/* Timeout::Error itself (not a subclass), when Timeout is loaded. */
static bool is_timeout_error(VALUE klass)
{
    if (!rb_const_defined_at(rb_cObject, id_Timeout))
        return false;
    VALUE mod = rb_const_get_at(rb_cObject, id_Timeout);
    if (!RB_TYPE_P(mod, T_MODULE) || !rb_const_defined_at(mod, id_Error))
        return false;
    return rb_const_get_at(mod, id_Error) == klass;
}

static VALUE exit_class(void)
{
    VALUE mod = rb_const_get_at(rb_cObject, id_Timeout);
    if (rb_const_defined_at(mod, id_ExitException)) {
        VALUE c = rb_const_get_at(mod, id_ExitException);
        if (RB_TYPE_P(c, T_CLASS) && RTEST(rb_class_inherited_p(c, rb_eException)))
            return c;
    }
    return cTimeoutExit;
}

static VALUE s_timeout_after(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 1, 3);
    rsched *s = weft__rb_get_sched(self);
    rb_need_block();
    int64_t deadline = weft__rb_to_deadline(argv[0]);
    rintr ri;
    memset(&ri, 0, sizeof ri);
    ri.s = s;
    ri.fiber = rb_fiber_current();
    ri.klass = argc > 1 && !NIL_P(argv[1]) ? argv[1] : rb_eRuntimeError;
    ri.message = argc > 2 ? argv[2] : Qnil;
    ri.exc = Qnil;
    ri.arg = argv[0];
    ri.exit_class = Qnil;
    if (is_timeout_error(ri.klass)) {
        ri.exit = 1;
        ri.exit_class = exit_class();
        ri.serial = ++timeout_serial;
    }
    ri.timer.idx = WEFT__TIMER_IDLE;
    ri.timer.fire = intr_timer_fired;
    VALUE masks = current_masks();
    if (!NIL_P(masks))
        ri.masked = masks_defer(masks, intr_mask_class(&ri));
    intr_link(s, &ri);
    if (deadline != WEFT_FOREVER) {
        if (weft__timer_arm(&s->r, &ri.timer, deadline) < 0) {
            intr_unlink(s, &ri);
            rb_memerror();
        }
    }
    return rb_ensure(timeout_body, (VALUE)&ri, timeout_ensure, (VALUE)&ri);
}

/* fiber_interrupt(fiber, exception): raise @exception in @fiber when it
 * next waits in (or wakes from) a hook; wakes it now if it waits. */
static VALUE s_fiber_interrupt(VALUE self, VALUE fiber, VALUE exc)
{
    rsched *s = weft__rb_get_sched(self);
    if (!rb_obj_is_kind_of(fiber, weft__rb_cFiber))
        rb_raise(rb_eTypeError, "not a Fiber");
    if (!rb_obj_is_kind_of(exc, rb_eException))
        rb_raise(rb_eTypeError, "not an exception");
    intr_queue(s, fiber, exc);
    intr_kick(s, fiber);
    return Qnil;
}

/* stop(exception): queue @exception for every fiber waiting in a hook and
 * wake them all (Weft.run uses it with Weft::Stop on Interrupt). Returns
 * the number of fibers interrupted. */
static VALUE s_stop(VALUE self, VALUE exc)
{
    rsched *s = weft__rb_get_sched(self);
    if (!rb_obj_is_kind_of(exc, rb_eException))
        rb_raise(rb_eTypeError, "not an exception");
    return LONG2NUM(weft__rb_stop_all(s, exc));
}


void weft__rb_init_intr(VALUE klass)
{
    id_new = rb_intern("new");
    id_message = rb_intern("message");
    id_backtrace = rb_intern("backtrace");
    id_set_backtrace = rb_intern("set_backtrace");
    id_serial = rb_intern("__weft_timeout"); /* no @: hidden from Ruby */
    id_Timeout = rb_intern("Timeout");
    id_Error = rb_intern("Error");
    id_ExitException = rb_intern("ExitException");
    /* What ends a Timeout.timeout block inside it where Ruby has no
     * Timeout::ExitException (3.1, 3.2): not a StandardError. */
    cTimeoutExit = rb_define_class_under(klass, "TimeoutExit", rb_eException);
    id_masks = rb_intern("__weft_interrupt_masks");
    id_never = rb_intern("never");
    rb_define_method(klass, "_remask", s_remask, 0);
    rb_define_method(klass, "timeout_after", s_timeout_after, -1);
    rb_define_method(klass, "fiber_interrupt", s_fiber_interrupt, 2);
    rb_define_method(klass, "stop", s_stop, 1);
}
