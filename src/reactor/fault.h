/*
 * fault.h — a fault-injection seam for tests (not installed).
 *
 * In a build with -DWEFT_FAULT (scripts/test.d/fault.sh makes one), every
 * allocation of the library and the system calls that make descriptors,
 * mappings and threads go through weft__fault_hit(): armed with
 * weft__fault_arm(n), the n-th such call (counted from the arming) fails —
 * an allocation returns NULL, a call that makes a descriptor fails with
 * EMFILE, a mapping or a thread with ENOMEM/EAGAIN — once. Tests run a
 * workload with n = 1, 2, ... until it completes without the fault firing,
 * and check after each run that the failing call returned its error and
 * that nothing was left half-linked (test/fault/). In other builds the
 * seam is not there: the macros below do not exist and the calls are the
 * plain ones.
 *
 * The headers that declare the wrapped functions are included first, so
 * that the macros never touch a declaration; a file that includes this one
 * (through reactor.h) may include them again in any order.
 */
#ifndef WEFT_FAULT_H
#define WEFT_FAULT_H

#ifdef WEFT_FAULT
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#if defined(__has_include) && !defined(WEFT_NO_URING)
#if __has_include(<liburing.h>)
#include <liburing.h>
#endif
#endif

/* Arm: the @n-th fault point hit from now fails (0: disarm). */
void weft__fault_arm(long n);
/* Whether the armed fault fired, and where (file:line) — NULL if not. */
const char *weft__fault_fired(void);
/* A fault point: true when this call must fail. */
bool weft__fault_hit(const char *where);

#define WEFT__FAULT_STR2(x) #x
#define WEFT__FAULT_STR(x) WEFT__FAULT_STR2(x)
#define WEFT__FAULT_HERE (__FILE__ ":" WEFT__FAULT_STR(__LINE__))

#define malloc(n) (weft__fault_hit(WEFT__FAULT_HERE) ? NULL : malloc(n))
#define calloc(n, m) (weft__fault_hit(WEFT__FAULT_HERE) ? NULL : calloc(n, m))
#define realloc(p, n) (weft__fault_hit(WEFT__FAULT_HERE) ? NULL : realloc(p, n))
#define posix_memalign(p, a, n) \
    (weft__fault_hit(WEFT__FAULT_HERE) ? ENOMEM : posix_memalign(p, a, n))
#define mmap(a, l, p, f, d, o) \
    (weft__fault_hit(WEFT__FAULT_HERE) ? (errno = ENOMEM, MAP_FAILED) : mmap(a, l, p, f, d, o))
#define eventfd(v, f) (weft__fault_hit(WEFT__FAULT_HERE) ? (errno = EMFILE, -1) : eventfd(v, f))
#define epoll_create1(f) (weft__fault_hit(WEFT__FAULT_HERE) ? (errno = EMFILE, -1) : epoll_create1(f))
#define socket(d, t, p) (weft__fault_hit(WEFT__FAULT_HERE) ? (errno = EMFILE, -1) : socket(d, t, p))
#define accept4(s, a, l, f) (weft__fault_hit(WEFT__FAULT_HERE) ? (errno = EMFILE, -1) : accept4(s, a, l, f))
#define pipe2(p, f) (weft__fault_hit(WEFT__FAULT_HERE) ? (errno = EMFILE, -1) : pipe2(p, f))
#define pthread_create(t, a, f, x) \
    (weft__fault_hit(WEFT__FAULT_HERE) ? EAGAIN : pthread_create(t, a, f, x))
#define io_uring_queue_init_params(e, r, p) \
    (weft__fault_hit(WEFT__FAULT_HERE) ? -ENOMEM : io_uring_queue_init_params(e, r, p))
#endif /* WEFT_FAULT */

#endif
