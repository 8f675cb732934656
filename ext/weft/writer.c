/*
 * writer.c — io_write, one writer at a time per descriptor: a write that
 * has to wait keeps its descriptor until it is done, and Ruby 3.1's split
 * writes (see below) are kept whole.
 */
#include "rsched.h"

#include <ruby/encoding.h>

/* ---- one writer at a time (Ruby 3.1 split writes) ----------------------
 *
 * Ruby 3.1 writes `puts "x"` to a synchronous IO as two hook calls, the
 * text and then the newline, with an io_wait(writable) between them (its
 * writev with a scheduler passes one buffer per call, and reports the rest
 * as EAGAIN). If that wait switched fibers, another fiber's write would
 * land between the two halves. So io_wait first looks whether the
 * descriptor is writable (it nearly always is: no switch), and if it must
 * really wait right after this fiber's own write to the descriptor, the
 * fiber becomes the descriptor's writer for as long as that wait lasts
 * (so does a wait right after this fiber's write found it full):
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
                 0, a->argc > 3 ? OP_WRITE : OP_WRITE | OP_UPTO);
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
    bool full = !state && FIXNUM_P(r) && FIX2LONG(r) == -EAGAIN;
    bool keep = held && full;
    if (!keep)
        write_release((VALUE)&a);
    if (state)
        rb_jump_tag(state);
    /* A write that found the descriptor full is waited for by Ruby's next
     * hook call, io_wait: that wait keeps the descriptor too, as Ruby
     * 3.2+ keeps the IO's write lock through the wait inside one write,
     * so `print "a", "b", "c\n"` is not split by a full socket after "b"
     * on 3.1 either. */
    if (moved || full) {
        s->lw_fiber = cur;
        s->lw_fd = fd;
        s->lw_seq = s->hook_seq;
    }
    return r;
}

/* ---- one write call, one hook call -------------------------------------
 *
 * IO#write with several objects, and so IO#puts (the text and its "\n"),
 * is one writev(2) on a thread: one TCP segment, one datagram. Under any
 * scheduler Ruby (3.1 to 3.4) passes the io_write hook the first piece
 * only and calls again for the rest, so each piece went out on its own:
 * a datagram socket got "text" and "\n" as two datagrams, and on TCP the
 * lone "\n" waited for the peer's delayed ACK (Nagle), about 40 ms per
 * `puts` a line-based peer answers. On sockets (lib/weft/scheduler.rb
 * prepends this to BasicSocket), from a non-blocking fiber under weft,
 * the pieces (each converted with to_s, as IO#write does) are joined and
 * written by one IO#write call. Up to WHOLE_MAX bytes: past that a copy
 * costs more than the extra segment, and the pieces go as before. A
 * socket that converts nothing on write (Ruby's sockets are binary) gets
 * the pieces' bytes as they are, whatever their encodings, as writev(2)
 * gets them on a thread (a binary header and a UTF-8 text make one
 * datagram); one with a write conversion (set_encoding) gets them joined
 * as strings, or as before if their encodings cannot be joined. */
enum { WHOLE_MAX = 1 << 20 };

static VALUE whole_write(int argc, VALUE *argv, VALUE self)
{
    if (argc < 2 || !weft__rb_ours(rb_fiber_scheduler_current()))
        return rb_call_super(argc, argv);
    VALUE parts = rb_ary_new_capa(argc);
    long total = 0;
    for (int i = 0; i < argc; i++) {
        VALUE str = rb_obj_as_string(argv[i]);
        rb_ary_push(parts, str);
        total += RSTRING_LEN(str);
    }
    VALUE joined = Qnil;
    rb_io_t *fptr;
    RB_IO_POINTER(self, fptr);
    bool raw = (fptr->encs.enc == NULL || fptr->encs.enc == rb_ascii8bit_encoding()) &&
               !(fptr->encs.ecflags & (ECONV_DECORATOR_MASK | ECONV_STATEFUL_DECORATOR_MASK));
    if (total <= WHOLE_MAX && raw) {
        joined = rb_str_buf_new(total);
        rb_enc_associate(joined, rb_ascii8bit_encoding());
        for (int i = 0; i < argc; i++) {
            VALUE str = RARRAY_AREF(parts, i);
            rb_str_buf_cat(joined, RSTRING_PTR(str), RSTRING_LEN(str));
        }
    } else if (total <= WHOLE_MAX) {
        joined = rb_str_buf_new(total);
        rb_enc_copy(joined, RARRAY_AREF(parts, 0));
        for (int i = 0; i < argc; i++) {
            VALUE str = RARRAY_AREF(parts, i);
            if (i > 0 && !rb_enc_compatible(joined, str)) {
                joined = Qnil;
                break;
            }
            rb_str_buf_append(joined, str);
        }
    }
    if (NIL_P(joined))
        return rb_call_super(argc, RARRAY_CONST_PTR(parts));
    RB_GC_GUARD(parts);
    return rb_call_super(1, &joined);
}

void weft__rb_init_writer(VALUE klass)
{
    rb_define_method(klass, "io_write", s_io_write, -1);
    /* Prepended to BasicSocket by lib/weft/scheduler.rb. */
    VALUE whole = rb_define_module_under(klass, "WholeWrites");
    rb_define_method(whole, "write", whole_write, -1);
}
