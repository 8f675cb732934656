/*
 * raw_ring.h — what the two io_uring floors (raw_uring.c, raw_stacks.c)
 * share beside raw_http.h: the ring as weft's io_uring backend sets it up,
 * and the --probe answer. Header-only, like raw_http.h.
 */
#ifndef RAW_RING_H
#define RAW_RING_H

#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ring weft's io_uring backend sets up too (flags; a deeper CQ). */
static int raw_ring_init(struct io_uring *ring)
{
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN |
                                         IORING_SETUP_CQSIZE,
                                .cq_entries = 8192};
    return io_uring_queue_init_params(1024, ring, &p);
}

/* raw_ring_init for this thread's loop, or the reason to stderr and exit. */
static void raw_ring_open(struct io_uring *ring, const char *who)
{
    int rc = raw_ring_init(ring);
    if (rc < 0) {
        fprintf(stderr, "%s: io_uring_queue_init: %s\n", who, strerror(-rc));
        exit(1);
    }
}

/* --probe: exit status 0 if this kernel lets us set up the ring. */
static int raw_ring_probe(void)
{
    struct io_uring ring;
    if (raw_ring_init(&ring) < 0)
        return 1;
    io_uring_queue_exit(&ring);
    return 0;
}

#endif
