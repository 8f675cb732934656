/*
 * raw_stacks — the io_uring floor (raw_uring.c) with one change: each
 * connection's loop runs on a stack of its own, as with any stackful
 * fiber, and is resumed there for every request. What this costs beyond
 * raw_uring is what keeping a parked stack per connection costs at the
 * least: the stack's lines and page brought back for each request, two
 * register saves and stack switches. It is the floor for servers of
 * stackful fibers (weft's), beside raw_uring, the floor for any server.
 *
 * Everything else is raw_uring's: one multishot ACCEPT per listener, the
 * same parser and answers (raw_http.h), submissions of a loop turn in one
 * io_uring_enter, sends completed by the loop without resuming the
 * connection (as weft's write-behind), the next RECV queued at once.
 * Stacks are 64 KiB (weft's default) with a guard page below, committed
 * as touched. A connection is resumed as soon as its RECV completes, in
 * the middle of the loop's pass over the CQ: no run queue.
 *
 *   raw_stacks --port P [--threads N]
 *   raw_stacks --probe     exit 0 if this kernel lets us set up the ring
 *                          (and this is x86-64: the switch is written here)
 */
#define _GNU_SOURCE
#include "raw_http.h"
#include "raw_ring.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define STACK (64 * 1024)
#define GUARD 4096

enum { ACCEPT = 1, RECV = 2, SEND = 3 };

typedef struct conn {
    int fd;
    int busy;              /* operations in flight (recv + send) */
    int closing;           /* its loop has ended */
    int res;               /* the RECV's result, for the resumed loop */
    void *sp;              /* its stack pointer while parked */
    char *stack;           /* the mapping, guard page first */
    size_t inlen;
    size_t outoff, outlen; /* [outoff, sent_to) in flight, up to outlen queued */
    size_t sent_to;
    char in[BUF];
    char out[BUF];
} conn;

static __thread struct io_uring *ring;
static __thread void *loop_sp;   /* the loop's stack pointer while a conn runs */
static __thread conn *starting;  /* the conn conn_start begins */

#if defined(__x86_64__)
/* switch_to(&save, to): save the callee-saved registers on this stack,
 * store the stack pointer in *save, and resume the stack parked at @to. */
void switch_to(void **save, void *to);
__asm__(".text\n"
        ".globl switch_to\n"
        ".type switch_to, @function\n"
        "switch_to:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size switch_to, .-switch_to\n");
#define HAVE_SWITCH 1
#else
#define HAVE_SWITCH 0
static void switch_to(void **save, void *to) { (void)save; (void)to; abort(); }
#endif

static inline uint64_t tag(conn *c, int kind)
{
    return (uint64_t)(uintptr_t)c | (uint64_t)kind;
}

static struct io_uring_sqe *sqe(void)
{
    struct io_uring_sqe *s;
    while (!(s = io_uring_get_sqe(ring)))
        io_uring_submit(ring);
    return s;
}

static void arm_accept(int lfd)
{
    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, lfd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(s, ACCEPT);
}

static void arm_send(conn *c)
{
    struct io_uring_sqe *s = sqe();
    io_uring_prep_send(s, c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(s, tag(c, SEND));
    c->sent_to = c->outlen;
    c->busy++;
}

/* In the connection's loop: a RECV queued, the stack parked until the
 * loop resumes it with the result. */
static int conn_recv(conn *c)
{
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv(s, c->fd, c->in + c->inlen, BUF - c->inlen, 0);
    io_uring_sqe_set_data64(s, tag(c, RECV));
    c->busy++;
    switch_to(&c->sp, loop_sp);
    return c->res;
}

/* Freed once its loop has ended and nothing of it is in flight. */
static void conn_free(conn *c)
{
    close(c->fd);
    munmap(c->stack, STACK + GUARD);
    free(c);
}

/* A connection's loop, on its own stack; never returns (the loop frees
 * the stack once it has switched away for the last time). */
static __attribute__((noreturn)) void conn_start(void)
{
    conn *c = starting;
    for (;;) {
        int n = conn_recv(c);
        if (n <= 0)
            break;
        c->inlen += (size_t)n;
        int close_after = raw_answer(c->in, &c->inlen, c->out, &c->outlen);
        if (c->inlen == BUF)
            break;
        if (c->sent_to == c->outoff && c->outlen > c->outoff)
            arm_send(c); /* nothing in flight: send what was queued */
        if (close_after)
            break;
    }
    c->closing = 1;
    shutdown(c->fd, SHUT_RDWR); /* ends a send in flight */
    switch_to(&c->sp, loop_sp);
    abort(); /* never resumed */
}

static void conn_new(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = malloc(sizeof *c);
    char *m = mmap(NULL, STACK + GUARD, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (!c || m == MAP_FAILED || mprotect(m, GUARD, PROT_NONE) < 0) {
        close(fd);
        free(c);
        if (m != MAP_FAILED)
            munmap(m, STACK + GUARD);
        return;
    }
    c->fd = fd;
    c->busy = c->closing = c->res = 0;
    c->inlen = c->outoff = c->outlen = c->sent_to = 0;
    c->stack = m;
    /* The first switch "returns" into conn_start with the stack aligned
     * as after a call: its return address slot, then six registers. */
    void **top = (void **)(uintptr_t)(((uintptr_t)m + STACK + GUARD) & ~(uintptr_t)15);
    *--top = NULL;                 /* conn_start's return address */
    *--top = (void *)conn_start;   /* where switch_to's ret goes */
    for (int i = 0; i < 6; i++)
        *--top = NULL;             /* rbp rbx r12..r15 */
    c->sp = top;
    starting = c;
    switch_to(&loop_sp, c->sp);
}

static void on_recv(conn *c, int res)
{
    c->res = res;
    switch_to(&loop_sp, c->sp);
    if (c->closing && c->busy == 0)
        conn_free(c);
}

static void on_send(conn *c, int res)
{
    if (c->closing) {
        if (c->busy == 0)
            conn_free(c);
        return;
    }
    if (res <= 0) {
        shutdown(c->fd, SHUT_RDWR); /* its RECV ends with 0: its loop ends */
        return;
    }
    c->outoff += (size_t)res;
    if (c->outoff == c->outlen) {
        c->outoff = c->outlen = c->sent_to = 0;
        return;
    }
    c->sent_to = c->outoff;
    arm_send(c); /* the rest of a short send, then what came after */
}

static void *loop(void *arg)
{
    (void)arg;
    int lfd = raw_listener("raw_stacks", 0);
    struct io_uring r;
    raw_ring_open(&r, "raw_stacks");
    ring = &r;
    arm_accept(lfd);
    for (;;) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_submit_and_wait(ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            fprintf(stderr, "raw_stacks: submit: %s\n", strerror(-rc));
            exit(1);
        }
        /* Taken one at a time and released at once: a resumed connection
         * queues SQEs, and may enter the kernel for room. */
        while (io_uring_peek_cqe(ring, &cqe) == 0) {
            uint64_t d = cqe->user_data;
            int res = cqe->res;
            unsigned flags = cqe->flags;
            io_uring_cqe_seen(ring, cqe);
            if (d == ACCEPT) {
                if (res >= 0)
                    conn_new(res);
                if (!(flags & IORING_CQE_F_MORE))
                    arm_accept(lfd);
                continue;
            }
            conn *c = (conn *)(uintptr_t)(d & ~(uint64_t)7);
            c->busy--;
            if ((d & 7) == RECV)
                on_recv(c, res);
            else
                on_send(c, res);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--probe"))
        return HAVE_SWITCH ? raw_ring_probe() : 1;
    if (!HAVE_SWITCH) {
        fprintf(stderr, "raw_stacks: x86-64 only\n");
        return 1;
    }
    return raw_main(argc, argv, "raw_stacks", loop);
}
