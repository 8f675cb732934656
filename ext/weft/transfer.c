/*
 * transfer.c — the transfer hooks io_read, io_pread and io_pwrite (io_write
 * is in writer.c) and the loop behind all four, weft__rb_do_io: ring ops,
 * offloaded file pieces or system calls, waiting through the reactor.
 */
#include "rsched.h"

#include <sys/socket.h>
#include <unistd.h>

static int pread_offset_encoded, pwrite_offset_encoded;

/* The IO::Buffer's memory: writable for a read into it. */
static void get_buffer(VALUE buffer, bool writing, void **base, size_t *size)
{
    if (writing) {
        rb_io_buffer_get_bytes_for_writing(buffer, base, size);
    } else {
        const void *b;
        rb_io_buffer_get_bytes_for_reading(buffer, &b, size);
        *base = (void *)b;
    }
}

/* One loop for the four transfer hooks: transfer at least @length bytes
 * (0: a single attempt, -EAGAIN if it would block), waiting through the
 * reactor on EAGAIN. Returns the byte count, or -errno if nothing moved. */
VALUE weft__rb_do_io(rsched *s, VALUE io, VALUE buffer, size_t length,
                   size_t offset, off_t from, int op)
{
    int fd = weft__rb_io_fd(io);
    bool writing_op = op == OP_WRITE || op == OP_PWRITE;
    void *base;
    size_t size;
    get_buffer(buffer, !writing_op, &base, &size);
    if (offset > size)
        rb_raise(rb_eArgError, "offset %zu beyond buffer size %zu", offset, size);
    if (length > size - offset)
        length = size - offset;
    fdinfo *fi = weft__rb_fd_prepare(s, fd, io);
    const int kind = s->r.fds[fd].kind;
    const bool is_file = kind == WEFT__FD_FILE, is_sock = kind == WEFT__FD_SOCKET;
    const bool positioned = op == OP_PREAD || op == OP_PWRITE;
    if (positioned && from < 0)
        return INT2NUM(-EINVAL); /* as pread(2); a ring op would take -1 as "here" */
    const int ring_op = is_sock ? (writing_op ? WEFT__OP_SEND : WEFT__OP_RECV)
                                : (writing_op ? WEFT__OP_WRITE : WEFT__OP_READ);
    int ev = writing_op ? WEFT_WRITABLE : WEFT_READABLE;
    /* IO#timeout (Ruby >= 3.2) bounds the whole transfer; when it passes
     * before anything moved, IO::TimeoutError, as without a scheduler. */
    bool io_tmo;
    int64_t deadline = weft__rb_io_timeout_deadline(io, &io_tmo);
#define FAIL(rc_)                                                          \
    do {                                                                   \
        int f_ = (rc_);                                                    \
        if (!total && f_ == -ETIMEDOUT && io_tmo)                          \
            weft__rb_raise_io_timeout(ev);                                          \
        return total ? SIZET2NUM(total) : INT2NUM(f_);                     \
    } while (0)
    /* Ring ops (see weft__rb_ring_io) where the backend takes them: where they
     * wait (@length > 0), for positioned transfers of regular files
     * (which never say EAGAIN: see weft__rb_file_offload), and for the single attempt of a zero @length (Ruby's
     * own IO methods: readpartial, write, read_nonblock...) on a socket,
     * made one attempt by MSG_DONTWAIT: the kernel answers -EAGAIN at once
     * instead of waiting (a ring READ of a pipe waits even when the pipe
     * is O_NONBLOCK, so pipes keep the system call). Only while other
     * fibers are ready to run: the op then goes out in the same
     * io_uring_enter as theirs, where alone it would cost a loop round
     * trip, more than the system call; and so a write with nobody else
     * to run does not switch fibers (Ruby's own test_read_characters
     * relies on that). Only in a fiber this scheduler runs: one it did not
     * switch into (an Enumerator's, a fiber the user resumed) must not
     * wait where the system call would not have (Enumerator#next over a
     * socket: its fiber would yield to #next's caller). Only on an IO
     * found not ready before (fdinfo.waited): a fresh connection's
     * request is usually there already and its answer goes out at once,
     * so under connection churn the ring op only added two fiber switches
     * and a loop round per connection.
     * That costs a switch to the loop and back instead of a system call,
     * and wins: the loop submits every fiber's op in one io_uring_enter,
     * and a keep-alive Ruby server spends ~25% less CPU per request than
     * with send/recv (docs/ARCHITECTURE.md, "Ruby's single attempts on
     * the ring"). A zero deadline stays a non-blocking system call.
     * A regular file's read or write at the file position is never a ring
     * op: the ring reads the position when the op starts and stores it
     * when it ends, without the lock read(2) and write(2) take, so two
     * processes writing through one open file (a log both inherited as
     * stderr) overwrite each other's lines. Those are system calls, on an
     * offload thread from FILE_OFFLOAD_MIN bytes. */
    VALUE cur = rb_fiber_current();
    bool once = length == 0 && is_sock && !positioned && s->entered == cur &&
                fi->waited && !weft__list_empty(&s->ready);
    bool ring = deadline != 0 &&
                (is_file ? positioned : (length > 0 || once) && !positioned) &&
                weft__reactor_use_op(&s->r, kind, ring_op);
    size_t total = 0;
    for (;;) {
        size_t max = size - offset;
        if (max == 0)
            break;
        ssize_t n;
        int err = 0;
        if (ring) {
            if (!weft__list_empty(&s->intrs) && weft__rb_intr_pending(s, cur)) {
                if (total)
                    break; /* raised on the next call */
                weft__rb_deliver_interrupts(s, cur);
            }
            weft__opdesc d = {.fd = fd, .buf = (char *)base + offset,
                              .len = is_file && max > FILE_CHUNK ? FILE_CHUNK : max,
                              .off = -1,
                              .async = is_file && max >= FILE_ASYNC_MIN,
                              .flags = once ? MSG_DONTWAIT : 0,
                              .op = ring_op};
            if (positioned)
                d.off = (int64_t)from + (int64_t)total;
            int res = weft__rb_ring_io(s, buffer, &d, deadline);
            get_buffer(buffer, !writing_op, &base, &size);
            if (offset > size)
                break;
            if (res == -EINTR)
                continue;
            if (res == -EAGAIN && once) {
                n = -1; /* the single attempt found nothing to do */
                err = EAGAIN;
                goto would_block;
            }
            if (res == -EAGAIN) {
                /* A kernel that will not wait on an O_NONBLOCK file. */
                int rc = weft__rb_wait_fd(s, fd, ev, deadline);
                if (rc < 0)
                    FAIL(rc);
                get_buffer(buffer, !writing_op, &base, &size);
                if (offset > size)
                    break;
                continue;
            }
            if (res == -ECANCELED && !weft__list_empty(&s->intrs) && weft__rb_intr_pending(s, cur))
                continue; /* raised at the top (or the bytes returned) */
            if (res < 0)
                FAIL(res);
            n = res;
            goto moved;
        }
        if (is_file && deadline != 0 && max >= FILE_OFFLOAD_MIN) {
            struct fileop f = {.fd = fd, .op = op, .buf = (char *)base + offset,
                               .len = max > FILE_CHUNK ? FILE_CHUNK : max,
                               .off = from + (off_t)total};
            n = weft__rb_file_offload(s, buffer, &f);
            get_buffer(buffer, !writing_op, &base, &size);
            if (n < 0) {
                err = (int)-n;
                n = -1;
            }
            goto moved;
        }
        if (!s->r.fds[fd].nonblock && !is_file && !is_sock &&
            (op == OP_READ || op == OP_WRITE)) {
            /* A blocking descriptor we must not switch to O_NONBLOCK
             * (it may be shared with other processes): wait first. */
            int rc = weft__rb_poll_now(fd, ev);
            if (rc < 0)
                return INT2NUM(total ? (long)total : rc);
            if (rc == 0) {
                n = -1;
                err = EAGAIN;
                goto would_block;
            }
        }
        switch (op) {
        case OP_READ:
            n = is_sock ? recv(fd, (char *)base + offset, max, MSG_DONTWAIT)
                            : read(fd, (char *)base + offset, max);
            break;
        case OP_WRITE:
            n = is_sock ? send(fd, (char *)base + offset, max,
                                   MSG_DONTWAIT | MSG_NOSIGNAL)
                            : write(fd, (char *)base + offset, max);
            break;
        case OP_PREAD:
            n = pread(fd, (char *)base + offset, max, from + (off_t)total);
            break;
        default:
            n = pwrite(fd, (char *)base + offset, max, from + (off_t)total);
            break;
        }
        err = n < 0 ? errno : 0;
    moved:
        if (n > 0) {
            total += (size_t)n;
            offset += (size_t)n;
            if ((size_t)n < length) {
                length -= (size_t)n;
                continue;
            }
            /* Enough has moved. Without a scheduler one call moves all of
             * a regular file's transfer (IO#pread of 3 MiB returns 3 MiB);
             * here it goes in FILE_CHUNK pieces, so a full piece with room
             * left in the buffer goes on. */
            if (is_file && (size_t)n == FILE_CHUNK && offset < size) {
                length = 0;
                continue;
            }
            break;
        }
        if (n == 0)
            break; /* EOF (or a zero-length write) */
        if (err == EINTR)
            continue;
    would_block:
        if ((err == EAGAIN || err == EWOULDBLOCK) && length > 0) {
            int rc = deadline == 0 ? -ETIMEDOUT : weft__rb_wait_fd(s, fd, ev, deadline);
            if (rc < 0)
                FAIL(rc);
            /* The buffer may have been resized while we waited. */
            get_buffer(buffer, !writing_op, &base, &size);
            if (offset > size)
                break;
            continue;
        }
        if (!total && (err == EAGAIN || err == EWOULDBLOCK)) {
            s->fdi[fd].waited = 1;
            s->ea_seq = s->hook_seq;
            s->ea_fiber = cur;
            s->ea_fd = fd;
            s->ea_ev = ev;
        }
        return total ? SIZET2NUM(total) : INT2NUM(-err);
    }
    return SIZET2NUM(total);
#undef FAIL
}

/* io_read(io, buffer, length)          (3.1)
 * io_read(io, buffer, length, offset)  (3.2+) */
static VALUE s_io_read(int argc, VALUE *argv, VALUE self)
{
    rb_check_arity(argc, 3, 4);
    rsched *s = weft__rb_get_sched(self);
    size_t offset = argc > 3 ? NUM2SIZET(argv[3]) : 0;
    return weft__rb_do_io(s, argv[0], argv[1], NUM2SIZET(argv[2]), offset, 0, OP_READ);
}

static off_t file_offset(VALUE v, int encoded)
{
    off_t from = NUM2OFFT(v);
    /* Ruby 3.1's IO::Buffer passes OFFT2NUM(offset) where an off_t is
     * expected, so the hook sees 2 * offset + 1 (detected at load time by
     * lib/weft.rb, see Weft::Scheduler.offset_encoding=). */
    if (encoded && from > 0 && (from & 1))
        from = (from - 1) / 2;
    return from; /* a negative one: -EINVAL from weft__rb_do_io, as pread(2) */
}

/* io_pread/io_pwrite(io, buffer, length, from)          (3.1, IO::Buffer)
 * io_pread/io_pwrite(io, buffer, from, length, offset)  (3.3+)
 * @encoded: whether this Ruby mis-encodes the 3.1-form offset. */
static VALUE positioned_hook(int argc, VALUE *argv, VALUE self, int encoded,
                             int op)
{
    rb_check_arity(argc, 4, 5);
    rsched *s = weft__rb_get_sched(self);
    if (argc == 4)
        return weft__rb_do_io(s, argv[0], argv[1], NUM2SIZET(argv[2]), 0,
                     file_offset(argv[3], encoded), op);
    return weft__rb_do_io(s, argv[0], argv[1], NUM2SIZET(argv[3]), NUM2SIZET(argv[4]),
                 file_offset(argv[2], 0), op);
}

static VALUE s_io_pread(int argc, VALUE *argv, VALUE self)
{
    return positioned_hook(argc, argv, self, pread_offset_encoded, OP_PREAD);
}

static VALUE s_io_pwrite(int argc, VALUE *argv, VALUE self)
{
    return positioned_hook(argc, argv, self, pwrite_offset_encoded, OP_PWRITE);
}

/* IO#pwrite on Ruby 3.3 and 3.4 calls the io_pwrite hook from inside its
 * blocking region, without the GVL. A hook that waits then switches fibers
 * and runs Ruby code with the GVL released, which breaks the VM's thread
 * bookkeeping: the process later spins in the timer thread and hangs at
 * the next GVL hand-over. lib/weft/scheduler.rb routes IO#pwrite from
 * non-blocking fibers here instead: the same single positioned write, with
 * the GVL held throughout. Returns the byte count; raises as IO#pwrite. */
struct pwrite_string {
    rsched *s;
    VALUE io, buffer;
    off_t off;
};

static VALUE pwrite_string_body(VALUE p)
{
    struct pwrite_string *a = (struct pwrite_string *)p;
    return weft__rb_do_io(a->s, a->io, a->buffer, 0, 0, a->off, OP_PWRITE);
}

static VALUE s_io_pwrite_string(VALUE self, VALUE io, VALUE object, VALUE offset)
{
    rsched *s = weft__rb_get_sched(self);
    VALUE str = RB_TYPE_P(object, T_STRING) ? object : rb_obj_as_string(object);
    off_t off = NUM2OFFT(offset);
    VALUE wio = rb_io_get_write_io(rb_io_get_io(io));
    rb_io_t *fptr;
    GetOpenFile(wio, fptr);
    rb_io_check_writable(fptr);
    /* A frozen view: the bytes cannot change under the write. */
    VALUE frozen = rb_str_new_frozen(str);
    struct pwrite_string a = {
        s, wio,
        rb_io_buffer_new(RSTRING_PTR(frozen), (size_t)RSTRING_LEN(frozen),
                         RB_IO_BUFFER_EXTERNAL | RB_IO_BUFFER_READONLY),
        off,
    };
    VALUE r = rb_ensure(pwrite_string_body, (VALUE)&a, rb_io_buffer_free, a.buffer);
    RB_GC_GUARD(frozen);
    ssize_t n = NUM2SSIZET(r);
    if (n < 0)
#ifdef HAVE_RB_IO_PATH
        rb_syserr_fail_str((int)-n, rb_io_path(wio));
#else
        rb_syserr_fail_str((int)-n, fptr->pathv);
#endif
    return SSIZET2NUM(n);
}

/* _set_offset_encoding(pread, pwrite): whether this Ruby mis-encodes the
 * offset of io_pread / io_pwrite's 3.1 form (see file_offset). */
static VALUE s_set_offset_encoding(VALUE klass, VALUE pread_enc, VALUE pwrite_enc)
{
    (void)klass;
    pread_offset_encoded = RTEST(pread_enc);
    pwrite_offset_encoded = RTEST(pwrite_enc);
    return Qnil;
}

void weft__rb_init_transfer(VALUE klass)
{
    rb_define_method(klass, "io_read", s_io_read, -1);
    rb_define_method(klass, "io_pread", s_io_pread, -1);
    rb_define_method(klass, "io_pwrite", s_io_pwrite, -1);
    rb_define_method(klass, "_io_pwrite_string", s_io_pwrite_string, 3);
    rb_define_singleton_method(klass, "_set_offset_encoding", s_set_offset_encoding, 2);
}
