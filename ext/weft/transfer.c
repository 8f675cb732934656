/*
 * transfer.c — the transfer hooks io_read, io_pread and io_pwrite (io_write
 * is in writer.c) and the loop behind all four, weft__rb_do_io: ring ops,
 * offloaded file pieces or system calls, waiting through the reactor.
 */
#include "rsched.h"

#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* ---- the transfer loop -----------------------------------------------------
 *
 * One loop for the four transfer hooks (weft__rb_do_io): transfer at least
 * @length bytes (0: a single attempt, -EAGAIN if it would block), waiting
 * through the reactor on EAGAIN. Each round is one attempt — a ring op
 * (xfer_ring), a piece of a regular file on the offload pool
 * (xfer_offload) or a system call (xfer_syscall) — and then what its
 * outcome calls for: count the bytes and go on or stop (xfer_account),
 * wait for the descriptor or give up (xfer_blocked), or end with an error
 * (xfer_fail). */

/* One transfer in progress: what its steps share. */
struct xfer {
    rsched *s;          /* the scheduler                                    */
    VALUE io;           /* the IO                                           */
    VALUE buffer;       /* the IO::Buffer the bytes come from or go to      */
    VALUE cur;          /* the fiber transferring                           */
    int fd;             /* the IO's descriptor                              */
    int op;             /* OP_READ, OP_WRITE, OP_PREAD or OP_PWRITE         */
    int kind;           /* the descriptor's WEFT__FD_* kind                 */
    int ev;             /* WEFT_READABLE or WEFT_WRITABLE: what to wait for */
    int ring_op;        /* the WEFT__OP_* a ring attempt submits            */
    bool writing;       /* OP_WRITE or OP_PWRITE: the buffer is read        */
    bool positioned;    /* OP_PREAD or OP_PWRITE: at @from, not the position */
    bool is_file;       /* a regular file: never EAGAIN                     */
    bool is_sock;       /* a socket: MSG_DONTWAIT, ring RECV/SEND           */
    bool once;          /* a single attempt made as a ring op (see below)   */
    bool ring;          /* every attempt is a ring op                       */
    bool io_tmo;        /* the deadline is the IO's own timeout (IO#timeout) */
    bool small_rest;    /* a file read with under FILE_OFFLOAD_MIN left     */
    int64_t deadline;   /* when waiting stops (WEFT_FOREVER, 0: never wait) */
    off_t from;         /* the file offset of a positioned transfer         */
    void *base;         /* the buffer's memory, fetched again after a wait  */
    size_t size;        /* the buffer's size, likewise                      */
    size_t offset;      /* where in the buffer the next byte goes           */
    size_t length;      /* bytes still to move before the hook may return   */
    size_t total;       /* bytes moved so far                               */
    ssize_t n;          /* the last attempt's byte count (XS_MOVED)         */
    int err;            /* the last attempt's errno (XS_ERRNO, XS_FAILED)   */
    int rc;             /* the -errno the hook returns if nothing moved     */
};

/* What one attempt came to. */
enum xstep {
    XS_MOVED,   /* x->n bytes moved (0: end of file, or a zero-length write) */
    XS_ERRNO,   /* a transfer's errno in x->err: EINTR, EAGAIN or an error  */
    XS_FAILED,  /* the wait or the ring op failed with -x->err              */
    XS_RETRY,   /* nothing that counts happened: go round again             */
    XS_STOP,    /* stop with what has moved                                 */
};

/* The buffer's memory again (it may have been resized while the fiber
 * waited); false when it shrank below what has moved. */
static bool xfer_refetch(struct xfer *x)
{
    get_buffer(x->buffer, !x->writing, &x->base, &x->size);
    return x->offset <= x->size;
}

/* Set up @x for a transfer; false if it cannot start (a negative offset:
 * -EINVAL, as pread(2); a ring op would take -1 as "here"). */
static bool xfer_prepare(struct xfer *x, rsched *s, VALUE io, VALUE buffer,
                         size_t length, size_t offset, off_t from, int op)
{
    bool upto = op & OP_UPTO;
    op &= ~OP_UPTO;
    *x = (struct xfer){.s = s, .io = io, .buffer = buffer, .op = op,
                       .offset = offset, .from = from};
    x->fd = weft__rb_io_fd(io);
    x->writing = op == OP_WRITE || op == OP_PWRITE;
    get_buffer(buffer, !x->writing, &x->base, &x->size);
    if (offset > x->size)
        rb_raise(rb_eArgError, "offset %zu beyond buffer size %zu", offset, x->size);
    /* Ruby 3.1: IO::Buffer#write(io, 3) and #pwrite write 3 bytes of the
     * buffer (its reads fill what the buffer holds, as here); 3.2 made
     * the length "at least" for both. */
    if (upto && length > 0 && length < x->size - offset)
        x->size = offset + length;
    x->length = length > x->size - offset ? x->size - offset : length;
    fdinfo *fi = weft__rb_fd_prepare(s, x->fd, io);
    x->kind = s->r.fds[x->fd].kind;
    x->is_file = x->kind == WEFT__FD_FILE;
    x->is_sock = x->kind == WEFT__FD_SOCKET;
    x->positioned = op == OP_PREAD || op == OP_PWRITE;
    if (x->positioned && from < 0)
        return false;
    /* A read of a regular file into a large buffer with less than
     * FILE_OFFLOAD_MIN bytes of the file left to read is done in place,
     * as any small read: Ruby reads through a 128 KiB buffer when it
     * transcodes (Encoding.default_internal set, as Rails sets it, and a
     * "r:bom|utf-8" open, as YAML.load_file's), and the offload made the
     * fiber wait, and others run, in the middle of reading a 20 KB file
     * (a Rails app's first requests each loaded its locale files again). */
    if (x->is_file && !x->writing && x->size - offset >= FILE_OFFLOAD_MIN) {
        struct stat st;
        off_t pos = x->positioned ? from : lseek(x->fd, 0, SEEK_CUR);
        x->small_rest = pos >= 0 && fstat(x->fd, &st) == 0 && S_ISREG(st.st_mode) &&
                        st.st_size - pos < FILE_OFFLOAD_MIN;
    }
    x->ring_op = x->is_sock ? (x->writing ? WEFT__OP_SEND : WEFT__OP_RECV)
                            : (x->writing ? WEFT__OP_WRITE : WEFT__OP_READ);
    x->ev = x->writing ? WEFT_WRITABLE : WEFT_READABLE;
    /* IO#timeout (Ruby >= 3.2) bounds the whole transfer; when it passes
     * before anything moved, IO::TimeoutError, as without a scheduler. */
    x->deadline = weft__rb_io_timeout_deadline(io, &x->io_tmo);
    /* Ring ops (see ring.c) where the backend takes them: where they
     * wait (@length > 0), for positioned transfers of regular files
     * (which never say EAGAIN: see fileop.c), and for the single attempt
     * of a zero @length (Ruby's own IO methods: readpartial, write,
     * read_nonblock...) on a socket, made one attempt by MSG_DONTWAIT: the
     * kernel answers -EAGAIN at once instead of waiting (a ring READ of a
     * pipe waits even when the pipe is O_NONBLOCK, so pipes keep the
     * system call). Only while other fibers are ready to run: the op then
     * goes out in the same io_uring_enter as theirs, where alone it would
     * cost a loop round trip, more than the system call; and so a write
     * with nobody else to run does not switch fibers (Ruby's own
     * test_read_characters relies on that). Only in a fiber this
     * scheduler runs: one it did not switch into (an Enumerator's, a fiber
     * the user resumed) must not wait where the system call would not
     * have (Enumerator#next over a socket: its fiber would yield to
     * #next's caller). Only on an IO found not ready before
     * (fdinfo.waited): a fresh connection's request is usually there
     * already and its answer goes out at once, so under connection churn
     * the ring op only added two fiber switches and a loop round per
     * connection.
     * That costs a switch to the loop and back instead of a system call,
     * and wins: the loop submits every fiber's op in one io_uring_enter,
     * and a keep-alive Ruby server spends less CPU per request than with
     * send/recv (docs/PERFORMANCE.md, "Ruby's single attempts on the
     * ring"). A zero deadline stays a non-blocking system call.
     * A regular file's read or write at the file position is never a ring
     * op: the ring reads the position when the op starts and stores it
     * when it ends, without the lock read(2) and write(2) take, so two
     * processes writing through one open file (a log both inherited as
     * stderr) overwrite each other's lines. Those are system calls, on an
     * offload thread from FILE_OFFLOAD_MIN bytes. */
    x->cur = rb_fiber_current();
    x->once = x->length == 0 && x->is_sock && !x->positioned && s->entered == x->cur &&
              fi->waited && !weft__list_empty(&s->ready);
    x->ring = x->deadline != 0 &&
              (x->is_file ? x->positioned : (x->length > 0 || x->once) && !x->positioned) &&
              weft__reactor_use_op(&s->r, x->kind, x->ring_op);
    return true;
}

/* One ring op (weft__rb_ring_io) for the rest of the buffer, a regular
 * file's in FILE_CHUNK pieces. An interrupt due is raised first, unless
 * bytes have moved: they are returned and it is raised on the next call. */
static enum xstep xfer_ring(struct xfer *x)
{
    rsched *s = x->s;
    if (!weft__list_empty(&s->intrs) && weft__rb_intr_pending(s, x->cur)) {
        if (x->total)
            return XS_STOP;
        weft__rb_deliver_interrupts(s, x->cur);
    }
    size_t max = x->size - x->offset;
    weft__opdesc d = {.fd = x->fd, .buf = (char *)x->base + x->offset,
                      .len = x->is_file && max > FILE_CHUNK ? FILE_CHUNK : max,
                      .off = -1,
                      .async = x->is_file && max >= FILE_ASYNC_MIN,
                      .flags = x->once ? MSG_DONTWAIT : 0,
                      .op = x->ring_op};
    if (x->positioned)
        d.off = (int64_t)x->from + (int64_t)x->total;
    int res = weft__rb_ring_io(s, x->buffer, &d, x->deadline);
    if (!xfer_refetch(x))
        return XS_STOP;
    if (res == -EINTR || res == -EAGAIN) {
        /* -EAGAIN: the single attempt found nothing to do, or a kernel
         * that will not wait on an O_NONBLOCK file (xfer_blocked). */
        x->err = -res;
        return XS_ERRNO;
    }
    if (res == -ECANCELED && !weft__list_empty(&s->intrs) && weft__rb_intr_pending(s, x->cur))
        return XS_RETRY; /* raised at the top (or the bytes returned) */
    if (res < 0) {
        x->err = -res;
        return XS_FAILED;
    }
    x->n = res;
    return XS_MOVED;
}

/* Whether the next piece of a regular file goes to the offload pool. */
static bool xfer_offloads(const struct xfer *x)
{
    return x->is_file && x->deadline != 0 && !x->small_rest && x->size - x->offset >= FILE_OFFLOAD_MIN;
}

/* One FILE_CHUNK piece of a regular file on the offload pool. */
static enum xstep xfer_offload(struct xfer *x)
{
    size_t max = x->size - x->offset;
    struct fileop f = {.fd = x->fd, .op = x->op, .buf = (char *)x->base + x->offset,
                       .len = max > FILE_CHUNK ? FILE_CHUNK : max,
                       .off = x->from + (off_t)x->total};
    ssize_t n = weft__rb_file_offload(x->s, x->buffer, &f);
    if (!xfer_refetch(x)) /* locked meanwhile: never */
        return XS_STOP;
    if (n < 0) {
        x->err = (int)-n;
        return XS_ERRNO;
    }
    x->n = n;
    return XS_MOVED;
}

/* One system call for the rest of the buffer. */
static enum xstep xfer_syscall(struct xfer *x)
{
    int fd = x->fd;
    char *p = (char *)x->base + x->offset;
    size_t max = x->size - x->offset;
    off_t at = x->from + (off_t)x->total;
    if (!x->s->r.fds[fd].nonblock && !x->is_file && !x->is_sock &&
        (x->op == OP_READ || x->op == OP_WRITE)) {
        /* A blocking descriptor we must not switch to O_NONBLOCK
         * (it may be shared with other processes): wait first. */
        int rc = weft__rb_poll_now(fd, x->ev);
        if (rc < 0) {
            x->err = -rc;
            return XS_FAILED;
        }
        if (rc == 0) {
            x->err = EAGAIN;
            return XS_ERRNO;
        }
        /* Writable means room for one byte on a terminal: a larger write
         * to a blocking one waits in write(2) until the rest fits, with
         * the GVL held, and the one to drain it may be another fiber or
         * thread of this process (the master of a PTY.spawn'd child fed
         * by one fiber and read by another hung the process, where
         * threads wrote and read it all). The fiber waits for the write
         * on the offload pool instead. */
        if (x->op == OP_WRITE && max > 1 && x->deadline != 0 && x->s->fdi[fd].tty)
            return xfer_offload(x);
        /* Writable means room for PIPE_BUF bytes: a larger write to a
         * blocking pipe or FIFO (stdout to a slow reader, a FIFO opened
         * with File.open) would wait in write(2) for its reader, with
         * the GVL held, and the reader may be one of our fibers. */
        if (x->op == OP_WRITE && max > PIPE_BUF && x->s->r.fds[fd].kind == WEFT__FD_FIFO)
            max = PIPE_BUF;
    }
    ssize_t n;
    switch (x->op) {
    case OP_READ:
        n = x->is_sock ? recv(fd, p, max, MSG_DONTWAIT) : read(fd, p, max);
        break;
    case OP_WRITE:
        n = x->is_sock ? send(fd, p, max, MSG_DONTWAIT | MSG_NOSIGNAL)
                       : write(fd, p, max);
        break;
    case OP_PREAD:
        n = pread(fd, p, max, at);
        break;
    default:
        n = pwrite(fd, p, max, at);
        break;
    }
    if (n < 0) {
        x->err = errno;
        return XS_ERRNO;
    }
    x->n = n;
    return XS_MOVED;
}

/* Count what the attempt moved; whether to go on. */
static bool xfer_account(struct xfer *x)
{
    if (x->n == 0)
        return false; /* EOF (or a zero-length write) */
    size_t n = (size_t)x->n;
    x->total += n;
    x->offset += n;
    if (n < x->length) {
        x->length -= n;
        return true;
    }
    /* Enough has moved. Without a scheduler one call moves all of a
     * regular file's transfer (IO#pread of 3 MiB returns 3 MiB); here it
     * goes in FILE_CHUNK pieces, so a full piece with room left in the
     * buffer goes on. */
    if (x->is_file && n == FILE_CHUNK && x->offset < x->size) {
        x->length = 0;
        return true;
    }
    return false;
}

/* The end of a transfer with -@rc: IO::TimeoutError when the IO's own
 * timeout passed before anything moved; IOError "stream closed in another
 * thread" when another fiber closed the IO under the transfer before
 * anything moved, as a thread gets (IO::Buffer#read, Ruby >= 3.2; the
 * hook returned -EBADF); else the hook returns what moved or @rc. */
static bool xfer_fail(struct xfer *x, int rc)
{
    if (!x->total && rc == -ETIMEDOUT && x->io_tmo)
        weft__rb_raise_io_timeout(x->ev);
    if (!x->total && rc == -EBADF && weft__rb_io_closed(x->io))
        rb_raise(rb_eIOError, "stream closed in another thread");
    x->rc = rc;
    return false;
}

/* The attempt failed with x->err; whether to go on. EINTR: again. EAGAIN:
 * a transfer that must still move bytes waits until the descriptor is
 * ready (and so does a ring op that the kernel would not wait in); a
 * single attempt ends with -EAGAIN, noted for io_wait (rsched.ea_*). */
static bool xfer_blocked(struct xfer *x)
{
    rsched *s = x->s;
    int err = x->err;
    if (err == EINTR)
        return true;
    bool would_block = err == EAGAIN || err == EWOULDBLOCK;
    if (would_block && (x->length > 0 || (x->ring && !x->once))) {
        int rc = x->deadline == 0 ? -ETIMEDOUT
                                  : weft__rb_wait_fd(s, x->fd, x->ev, x->deadline);
        if (rc < 0)
            return xfer_fail(x, rc);
        return xfer_refetch(x);
    }
    if (err == EBADF)
        return xfer_fail(x, -err);
    if (would_block && !x->total) {
        s->fdi[x->fd].waited = 1;
        s->ea_seq = s->hook_seq;
        s->ea_fiber = x->cur;
        s->ea_fd = x->fd;
        s->ea_ev = x->ev;
    }
    x->rc = -err;
    return false;
}

/* One round: an attempt, then what it calls for; whether to go on. */
static bool xfer_round(struct xfer *x)
{
    enum xstep st = x->ring ? xfer_ring(x)
                    : xfer_offloads(x) ? xfer_offload(x)
                    : xfer_syscall(x);
    switch (st) {
    case XS_MOVED:
        return xfer_account(x);
    case XS_ERRNO:
        return xfer_blocked(x);
    case XS_FAILED:
        return xfer_fail(x, -x->err);
    case XS_RETRY:
        return true;
    default:
        return false;
    }
}

/* Transfers one fiber may complete in a row without any switch before the
 * others get a turn (weft__rb_fair_turn). */
#define FAIR_EVERY 64

/* The transfer hooks' loop (see above). Returns the byte count, or -errno
 * if nothing moved. A fiber whose last FAIR_EVERY transfers completed in
 * a row with no switch lets the others run first (see loop.c): a streamed
 * answer to a client that keeps up starved every other connection, and
 * its Timeout, for as long as it lasted. The count is of switches seen,
 * not of this IO's: any switch in between starts it again. */
VALUE weft__rb_do_io(rsched *s, VALUE io, VALUE buffer, size_t length,
                     size_t offset, off_t from, int op)
{
    VALUE cur = rb_fiber_current();
    bool streak = s->nw_fiber == cur && s->nw_switches == s->switches;
    if (streak && s->nw_count >= FAIR_EVERY)
        weft__rb_fair_turn(s, cur);
    struct xfer x;
    if (!xfer_prepare(&x, s, io, buffer, length, offset, from, op))
        return INT2NUM(-EINVAL);
    uint64_t before = s->switches;
    while (x.offset < x.size && xfer_round(&x))
        ;
    if (s->switches != before) {
        s->nw_count = 0;
    } else if (s->nw_fiber == cur && s->nw_switches == before) {
        s->nw_count++;
    } else {
        s->nw_fiber = cur;
        s->nw_switches = before;
        s->nw_count = 1;
    }
    return x.total || !x.rc ? SIZET2NUM(x.total) : INT2NUM(x.rc);
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
                     file_offset(argv[3], encoded), op == OP_PWRITE ? op | OP_UPTO : op);
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
