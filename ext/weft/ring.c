/*
 * ring.c — a transfer hook's bytes as one io_uring op (weft__rb_ring_io),
 * and the buffer lock that keeps the memory where the kernel (or an
 * offload worker) writes it.
 */
#include "rsched.h"

/* ---- ring operations (io_uring) ------------------------------------------
 *
 * On a reactor with completion ops, the transfer hooks hand the IO::Buffer's
 * memory to the kernel: RECV/SEND on sockets, READ on pipes, READ/WRITE at
 * the file position or at an offset on regular files. (Not writes to pipes:
 * a ring write to a pipe whose reader is gone raises SIGPIPE; those stay
 * guarded system calls.)
 *
 * The kernel may write into the buffer until the op's completion (CQE)
 * arrives, so no op outlives the hook call that started it:
 *   - the buffer is locked (IO::Buffer#locked) while the op is in flight,
 *     so #resize/#free/#transfer raise instead of moving the memory;
 *   - if the wait ends before the op (IO#timeout deadline, a timeout_after
 *     or fiber_interrupt kick, the IO closed under it), the op was cancelled
 *     by weft__wait_complete and the fiber waits, uncancellably (nocancel),
 *     for the CQE, letting other fibers run; a CQE that reports success
 *     wins: its bytes are returned and the interrupt is raised on the next
 *     hook call;
 *   - if the fiber unwinds while the op is in flight (Fiber#raise,
 *     Thread#raise, Thread#kill, an exception raised in the wait), the
 *     cleanup reaps the reactor synchronously, on the fiber's own stack and
 *     without switching fibers, until the CQE arrives (reap_sync). Switching
 *     fibers during an unwind would hand control back to whoever raised
 *     before the fiber finished unwinding; the CQE of a cancelled socket or
 *     pipe op arrives at once, a file op's when the disk is done. */


/* Drive the reactor (GVL held, no fiber switch) until @w's op completes.
 * Completions of other fibers' waits only queue those fibers. */
static void reap_sync(rsched *s, weft__wait *w)
{
    while (w->op)
        (void)weft__reactor_run_once(&s->r, true);
}

/* Lock @buffer for an op that the kernel or a worker carries out, unless
 * it already is; true when the caller must unlock it afterwards. */
bool weft__rb_lock_buffer(VALUE buffer)
{
    void *b;
    size_t sz;
    if (rb_io_buffer_get_bytes(buffer, &b, &sz) & RB_IO_BUFFER_LOCKED)
        return false;
    rb_io_buffer_lock(buffer);
    return true;
}

/* Run @d as one ring op for the current fiber, waiting until @deadline.
 * Returns the op's result (bytes or -errno), or why the wait ended (e.g.
 * -ETIMEDOUT, -ECANCELED, -EBADF) if the op was cancelled (see
 * weft__op_start in reactor.h). @buffer is locked for the op's lifetime
 * unless it already was. */
int weft__rb_ring_io(rsched *s, VALUE buffer, const weft__opdesc *d,
                   int64_t deadline)
{
    bool locked = weft__rb_lock_buffer(buffer);
    rwait rw;
    weft__rb_rw_begin(s, &rw, WAIT_RING);
    rw.xfd = d->fd;
    rw.aux = d->op;
    int state = 0;
    if (weft__op_start(&rw.w, d, deadline) == 0) {
        s->ring_ops++;
        rb_protect(weft__rb_wait_body, (VALUE)&rw, &state);
    }
    int why = rw.w.result;
    /* The wait ended before its op: the kernel may still use the buffer.
     * Wait for the op's completion on the same wait, re-armed (nocancel),
     * letting other fibers run — or, unwinding, right here. */
    while (weft__op_pending(&rw.w) && rw.epoch == s->epoch) {
        if (state) {
            if (rw.w.active && !rw.w.nocancel)
                weft__wait_complete(&rw.w, -ECANCELED); /* cancels the op */
            reap_sync(s, &rw.w);
            break;
        }
        weft__op_rearm(&rw.w);
        rb_protect(weft__rb_wait_body, (VALUE)&rw, &state);
    }
    weft__rb_rw_end(&rw);
    if (locked)
        (void)rb_io_buffer_try_unlock(buffer);
    if (state)
        rb_jump_tag(state);
    return weft__op_result(&rw.w, why);
}
