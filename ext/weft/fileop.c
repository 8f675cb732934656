/*
 * fileop.c — regular-file transfers on weft's offload pool
 * (weft__rb_file_offload), while the fiber waits.
 */
#include "rsched.h"

#include <unistd.h>

/* ---- regular files off the loop --------------------------------------
 *
 * A read or write of a regular file never returns EAGAIN, so a large one
 * would hold the whole loop (and every other fiber) while the kernel
 * copies it. On io_uring a positioned one (pread, pwrite) is a ring
 * READ/WRITE at its offset (IOSQE_ASYNC from FILE_ASYNC_MIN bytes: inline
 * completion from the page cache would copy inside the loop's own
 * io_uring_enter). Otherwise (epoll, poll, and transfers at the file
 * position on every backend: see weft__rb_do_io), those of
 * FILE_OFFLOAD_MIN bytes or more run on a thread of weft's offload pool
 * while the fiber waits (smaller ones cost less than the hand-over). The
 * wait cannot be cut short — the worker owns the buffer until it is done —
 * so interrupts are delivered once it is. (The sizes are in rsched.h.) */

/* Worker side: the system call, retried on EINTR. */
static void fileop_run(void *p)
{
    struct fileop *f = p;
    ssize_t n;
    do {
        switch (f->op) {
        case OP_READ:
            n = read(f->fd, f->buf, f->len);
            break;
        case OP_WRITE:
            n = write(f->fd, f->buf, f->len);
            break;
        case OP_PREAD:
            n = pread(f->fd, f->buf, f->len, f->off);
            break;
        default:
            n = pwrite(f->fd, f->buf, f->len, f->off);
            break;
        }
    } while (n < 0 && errno == EINTR);
    f->res = n;
    f->err = n < 0 ? errno : 0;
}

/* Run @fn(@arg), whose job is @job, on the offload pool while the fiber
 * waits (a file op @op on @fd, for the stats and dumps); where no worker
 * takes it, here. Not cancellable: the worker owns @arg until it is done.
 * Returns rb_protect's state for an unwinding (Thread#raise, kill),
 * which the caller resumes once it has cleaned up; 0 otherwise. */
static int offload_wait(rsched *s, weft__rjob *job, void (*fn)(void *), void *arg,
                        int fd, int op)
{
    rwait rw;
    weft__rb_rw_begin(s, &rw, WAIT_FILE);
    rw.xfd = fd;
    rw.aux = op;
    rw.w.nocancel = true;
    int state = 0;
    if (weft__rjob_submit(job, &s->r, &rw.w, fn, arg) < 0) {
        weft__wait_complete(&rw.w, 0);
        fn(arg); /* no worker: do it here */
        job->done = true;
    } else {
        rb_protect(weft__rb_wait_body, (VALUE)&rw, &state);
    }
    weft__rb_rw_end(&rw);
    /* Unwinding: the worker still uses @arg; wait for it here, without
     * switching fibers. */
    while (!job->done && rw.epoch == s->epoch)
        (void)weft__reactor_run_once(&s->r, true);
    return state;
}

/* Run @f on the offload pool while the fiber waits; the byte count or
 * -errno. @buffer is locked meanwhile. */
ssize_t weft__rb_file_offload(rsched *s, VALUE buffer, struct fileop *f)
{
    bool locked = weft__rb_lock_buffer(buffer);
    int state = offload_wait(s, &f->job, fileop_run, f, f->fd, f->op);
    if (locked)
        (void)rb_io_buffer_try_unlock(buffer);
    if (state)
        rb_jump_tag(state);
    return f->res < 0 ? -f->err : f->res;
}

/* ---- fsync and fdatasync off the loop --------------------------------
 *
 * IO#fsync and #fdatasync call no hook: the kernel's write-back of a
 * large file (tens of milliseconds, seconds on a slow disk) held the
 * loop and every other fiber, where a thread lets the others run.
 * lib/weft/scheduler.rb flushes the File's buffer in the fiber (through
 * the hooks) and calls _fsync, which runs the call on the offload pool
 * while the fiber waits. Not cancellable either: interrupts are
 * delivered once the call is done. */

struct syncop {
    weft__rjob job;
    int fd;
    bool data;          /* fdatasync, falling back to fsync as Ruby does    */
    int res, err;
};

static void syncop_run(void *p)
{
    struct syncop *o = p;
    int r;
    do {
        r = o->data ? fdatasync(o->fd) : fsync(o->fd);
        if (r < 0 && o->data && errno != EINTR)
            r = fsync(o->fd);
    } while (r < 0 && errno == EINTR);
    o->res = r;
    o->err = r < 0 ? errno : 0;
}

/* _fsync(io, data_only) -> 0; the Errno of fsync(2) (fdatasync(2)), as
 * IO#fsync raises it. */
static VALUE s_fsync(VALUE self, VALUE io, VALUE data_only)
{
    rsched *s = weft__rb_get_sched(self);
    VALUE wio = rb_io_get_write_io(rb_io_get_io(io));
    struct syncop o = {.fd = weft__rb_io_fd(wio), .data = RTEST(data_only)};
    int state = offload_wait(s, &o.job, syncop_run, &o, o.fd, OP_WRITE);
    if (state)
        rb_jump_tag(state);
    if (o.res < 0) {
#ifdef HAVE_RB_IO_PATH
        rb_syserr_fail_str(o.err, rb_io_path(wio));
#else
        rb_io_t *fptr;
        GetOpenFile(wio, fptr);
        rb_syserr_fail_str(o.err, fptr->pathv);
#endif
    }
    return INT2FIX(0);
}

void weft__rb_init_fileop(VALUE klass)
{
    rb_define_method(klass, "_fsync", s_fsync, 2);
}
