/*
 * raw_uring — the io_uring floor for the HTTP benchmark: the same
 * hello-world HTTP/1.1 server as raw_epoll.c, in plain C on liburing, no
 * fibers. One thread per --threads, each with its own ring and
 * SO_REUSEPORT listener.
 *
 * One multishot ACCEPT per listener. Each connection always has one RECV
 * in flight into its input buffer; when it completes, every complete
 * request head is parsed (the example server's parser) and gets a response
 * appended to the output buffer, one SEND covers what is not yet in
 * flight, and the next RECV is queued at once — without waiting for the
 * send, as an event loop would. A short send is continued from where it
 * stopped; appends go after the bytes in flight, so the kernel never
 * reads a byte that changes. Submissions of one loop turn go in with the
 * wait for the next completion (one io_uring_enter).
 *
 *   raw_uring --port P [--threads N]
 *   raw_uring --probe      exit 0 if this kernel lets us set up the ring
 */
#define _GNU_SOURCE
#include "raw_http.h"
#include "raw_ring.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <unistd.h>


enum { ACCEPT = 1, RECV = 2, SEND = 3 };

typedef struct conn {
    int fd;
    int busy;             /* operations in flight (recv + send) */
    int closing;
    int close_after;      /* close once the output has gone */
    size_t inlen;
    size_t outoff, outlen; /* [outoff, sent_to) in flight, up to outlen queued */
    size_t sent_to;
    char in[BUF];
    char out[BUF];
} conn;

static inline uint64_t tag(conn *c, int kind)
{
    return (uint64_t)(uintptr_t)c | (uint64_t)kind;
}

static struct io_uring_sqe *sqe(struct io_uring *ring)
{
    struct io_uring_sqe *s;
    while (!(s = io_uring_get_sqe(ring)))
        io_uring_submit(ring);
    return s;
}

static void arm_accept(struct io_uring *ring, int lfd)
{
    struct io_uring_sqe *s = sqe(ring);
    io_uring_prep_multishot_accept(s, lfd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(s, ACCEPT);
}

static void arm_recv(struct io_uring *ring, conn *c)
{
    struct io_uring_sqe *s = sqe(ring);
    io_uring_prep_recv(s, c->fd, c->in + c->inlen, BUF - c->inlen, 0);
    io_uring_sqe_set_data64(s, tag(c, RECV));
    c->busy++;
}

static void arm_send(struct io_uring *ring, conn *c)
{
    struct io_uring_sqe *s = sqe(ring);
    io_uring_prep_send(s, c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
    io_uring_sqe_set_data64(s, tag(c, SEND));
    c->sent_to = c->outlen;
    c->busy++;
}

/* Give up on the connection: shutdown ends whatever of it is in flight,
 * and it is freed once nothing is. */
static void finish(conn *c)
{
    c->closing = 1;
    shutdown(c->fd, SHUT_RDWR);
    if (c->busy == 0) {
        close(c->fd);
        free(c);
    }
}

static void on_recv(struct io_uring *ring, conn *c, int res)
{
    if (res <= 0 || c->closing) {
        finish(c);
        return;
    }
    c->inlen += (size_t)res;
    c->close_after = raw_answer(c->in, &c->inlen, c->out, &c->outlen);
    if (c->inlen == BUF) {
        finish(c);
        return;
    }
    if (c->sent_to == c->outoff && c->outlen > c->outoff)
        arm_send(ring, c); /* nothing in flight: send what was queued */
    if (!c->close_after)
        arm_recv(ring, c);
}

static void on_send(struct io_uring *ring, conn *c, int res)
{
    if (res <= 0 || c->closing) {
        finish(c);
        return;
    }
    c->outoff += (size_t)res;
    if (c->outoff == c->outlen) {
        c->outoff = c->outlen = c->sent_to = 0;
        if (c->close_after)
            finish(c);
        return;
    }
    c->sent_to = c->outoff;
    arm_send(ring, c); /* the rest of a short send, then what came after */
}

static void *loop(void *arg)
{
    (void)arg;
    int lfd = raw_listener("raw_uring", 0);
    struct io_uring ring;
    raw_ring_open(&ring, "raw_uring");
    arm_accept(&ring, lfd);
    for (;;) {
        struct io_uring_cqe *cqe;
        int rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            fprintf(stderr, "raw_uring: submit: %s\n", strerror(-rc));
            exit(1);
        }
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            seen++;
            uint64_t d = cqe->user_data;
            int res = cqe->res;
            if (d == ACCEPT) {
                if (res >= 0) {
                    int one = 1;
                    setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn *c = malloc(sizeof *c);
                    c->fd = res;
                    c->busy = c->closing = c->close_after = 0;
                    c->inlen = c->outoff = c->outlen = c->sent_to = 0;
                    arm_recv(&ring, c);
                }
                if (!(cqe->flags & IORING_CQE_F_MORE))
                    arm_accept(&ring, lfd);
                continue;
            }
            conn *c = (conn *)(uintptr_t)(d & ~(uint64_t)7);
            c->busy--;
            if ((d & 7) == RECV)
                on_recv(&ring, c, res);
            else
                on_send(&ring, c, res);
        }
        io_uring_cq_advance(&ring, seen);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--probe"))
        return raw_ring_probe();
    return raw_main(argc, argv, "raw_uring", loop);
}
