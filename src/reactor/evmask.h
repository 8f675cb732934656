/*
 * evmask.h — the one place where weft's event bits meet poll(2)'s and
 * where nanoseconds become a struct timespec (not installed).
 *
 * weft's bits (WEFT_READABLE, WEFT_PRIORITY, WEFT_WRITABLE, WEFT_ERROR,
 * WEFT_HANGUP) are its own; poll(2), epoll (whose EPOLL* values are the
 * POLL* ones on Linux) and io_uring's POLL_ADD speak POLL*. Used by the
 * backends, the fiber I/O layer and the Ruby extension.
 */
#ifndef WEFT_EVMASK_H
#define WEFT_EVMASK_H

#include "weft.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <time.h>

/* The poll events to ask for, for weft events @ev. Readable includes the
 * peer's shutdown (POLLRDHUP), which a read would report as EOF. */
static inline short weft__ev_to_poll(uint32_t ev)
{
    short p = 0;
    if (ev & WEFT_READABLE)
        p |= POLLIN | POLLRDHUP;
    if (ev & WEFT_PRIORITY)
        p |= POLLPRI;
    if (ev & WEFT_WRITABLE)
        p |= POLLOUT;
    return p;
}

/* weft events for the poll (or epoll) events @rev that occurred. An
 * invalid descriptor (POLLNVAL) reads as an error. */
static inline uint32_t weft__poll_to_ev(unsigned rev)
{
    uint32_t m = 0;
    if (rev & (POLLIN | POLLRDHUP))
        m |= WEFT_READABLE;
    if (rev & POLLPRI)
        m |= WEFT_PRIORITY;
    if (rev & POLLOUT)
        m |= WEFT_WRITABLE;
    if (rev & (POLLERR | POLLNVAL))
        m |= WEFT_ERROR;
    if (rev & POLLHUP)
        m |= WEFT_HANGUP;
    return m;
}

/* What a waiter for @want learns from the events @avail that occurred:
 * the ones it asked for, and after an error or a hang-up every one it asked
 * for but priority data (no read or write would block any more; priority
 * data is there only when POLLPRI says so, as select(2)'s exceptional set
 * has it) plus those two bits; 0 if it asked for nothing. */
static inline uint32_t weft__ev_answer(uint32_t want, uint32_t avail)
{
    uint32_t problems = avail & (WEFT_ERROR | WEFT_HANGUP);
    if (problems && want)
        return (want & ~(uint32_t)WEFT_PRIORITY) | (want & avail) | problems;
    return want & avail;
}

/* Readiness of @fd for @want right now (a zero-timeout poll): the answer as
 * weft__ev_answer gives it, 0 if nothing is ready, -EBADF for a descriptor
 * that is not open, or -errno. */
static inline int weft__ready_now(int fd, uint32_t want)
{
    struct pollfd p = {.fd = fd, .events = weft__ev_to_poll(want)};
    int n;
    while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return -errno;
    if (n == 0)
        return 0;
    if (p.revents & POLLNVAL)
        return -EBADF;
    return (int)weft__ev_answer(want, weft__poll_to_ev((unsigned)p.revents));
}

/* @ns (>= 0) as a struct timespec. */
static inline struct timespec weft__ns_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return ts;
}

#endif
