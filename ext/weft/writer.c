/*
 * writer.c — io_write, one writer at a time per descriptor: a write that
 * has to wait keeps its descriptor until it is done, and Ruby 3.1's split
 * writes (see below) are kept whole.
 */
#include "rsched.h"

/* ---- one writer at a time (Ruby 3.1 split writes) ----------------------
 *
 * Ruby 3.1 writes `puts "x"` to a synchronous IO as two hook calls, the
 * text and then the newline, with an io_wait(writable) between them (its
 * writev with a scheduler passes one buffer per call, and reports the rest
 * as EAGAIN). If that wait switched fibers, another fiber's write would
 * land between the two halves. So io_wait first looks whether the
 * descriptor is writable (it nearly always is: no switch), and if it must
 * really wait right after this fiber's own write to the descriptor, the
 * fiber becomes the descriptor's writer for as long as that wait lasts:
 * other fibers' io_write calls on it wait. Once the wait is over the
 * writer runs, and nothing else does until its next hook call, which is
 * the rest of the write; so the role ends with the wait, and that next
 * io_write takes it again (if the rest finds the descriptor full once
 * more, it keeps the role through the next wait). Keeping it any
 * longer would hang the others when no rest follows: a buffered IO
 * (sync = false) waits for writability inside a flush and then only
 * copies into its buffer. (Ruby 3.2+ holds the IO's write lock across the
 * whole call instead.) */

static void owner_unlink(rsched *s, rwait *rw)
{
    if (!rw->olinked)
        return;
    rw->olinked = 0;
    if (rw->epoch != s->epoch || rw->ofd >= s->nfdi)
        return;
    weft__list_remove(&s->fdi[rw->ofd].w_waiters, &rw->onode);
}

/* The writer of @fd is done (or gone): every waiting writer may go. */
void weft__rb_owner_release(rsched *s, int fd)
{
    if (fd < 0 || fd >= s->nfdi)
        return;
    fdinfo *fi = &s->fdi[fd];
    fi->w_owner = Qnil;
    weft__node *n;
    while ((n = weft__list_pop(&fi->w_waiters))) {
        rwait *rw = RW_OF(n, onode);
        rw->olinked = 0;
        if (rw->w.active)
            weft__wait_complete(&rw->w, 0);
    }
}

static VALUE owner_wait_ensure(VALUE p)
{
    rwait *rw = (rwait *)p;
    owner_unlink(rw->s, rw);
    weft__rb_rw_end(rw);
    return Qnil;
}

/* Wait while another fiber is @fd's writer. */
static void owner_wait(rsched *s, int fd, VALUE cur)
{
    while (fd < s->nfdi && !NIL_P(s->fdi[fd].w_owner) && s->fdi[fd].w_owner != cur) {
        rwait rw;
        weft__rb_rw_begin(s, &rw, WAIT_WRITER);
        fdinfo *fi = &s->fdi[fd];
        rw.ofd = fd;
        rw.olinked = 1;
        weft__list_push(&fi->w_waiters, &rw.onode);
        rb_ensure(weft__rb_wait_body, (VALUE)&rw, owner_wait_ensure, (VALUE)&rw);
        if (!weft__list_empty(&s->intrs))
            weft__rb_deliver_interrupts(s, cur);
    }
}

struct write_arg {
    rsched *s;
    int argc;
    VALUE *argv;
    int fd;
};

static VALUE write_body(VALUE p)
{
    struct write_arg *a = (struct write_arg *)p;
    size_t offset = a->argc > 3 ? NUM2SIZET(a->argv[3]) : 0;
    return weft__rb_do_io(a->s, a->argv[0], a->argv[1], NUM2SIZET(a->argv[2]), offset,
                 0, OP_WRITE);
}

static VALUE write_release(VALUE p)
{
    struct write_arg *a = (struct write_arg *)p;
    weft__rb_owner_release(a->s, a->fd);
    return Qnil;
}

/* io_write: one write call at a time per descriptor. A write that has to
 * wait (a full pipe, a ring WRITE to a file) keeps the descriptor's writer
 * role until it is done, so no other fiber's bytes land in the middle of
 * it; see "one writer at a time" for Ruby 3.1's split writes. */
static VALUE s_io_write(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 3, 4);
    rsched *s = weft__rb_get_sched(self);
    VALUE io = argv[0];
    int fd = weft__rb_io_fd(io);
    VALUE cur = rb_fiber_current();
    weft__rb_fd_prepare(s, fd, io);
    /* In the middle of a split write: this fiber holds the role, or its
     * previous hook call was the wait that held it (the role ended with
     * that wait; nothing ran since). */
    bool held = s->fdi[fd].w_owner == cur ||
                (s->sw_fiber == cur && s->sw_fd == fd && s->hook_seq == s->sw_seq + 1);
    owner_wait(s, fd, cur);
    s->fdi[fd].w_owner = cur;
    struct write_arg a = {s, argc, argv, fd};
    int state = 0;
    VALUE r = rb_protect(write_body, (VALUE)&a, &state);
    bool moved = !state && FIXNUM_P(r) && FIX2LONG(r) > 0;
    /* The rest of a split write found the descriptor full again (a tty's
     * writability flaps): it stays this fiber's until the rest is out. */
    bool keep = !state && held && FIXNUM_P(r) && FIX2LONG(r) == -EAGAIN;
    if (!keep)
        write_release((VALUE)&a);
    if (state)
        rb_jump_tag(state);
    if (moved || keep) {
        s->lw_fiber = cur;
        s->lw_fd = fd;
        s->lw_seq = s->hook_seq;
    }
    return r;
}

void weft__rb_init_writer(VALUE klass)
{
    rb_define_method(klass, "io_write", s_io_write, -1);
}
