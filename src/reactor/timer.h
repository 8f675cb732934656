/*
 * timer.h — the reactor's armed timers (timer.c): a list of timers not
 * yet ordered, and a 4-ary min-heap beside a few sorted runs, ordered by
 * (deadline, arming order). Knows nothing of waits or descriptors: the
 * reactor (reactor.h) keeps one of these and fires what comes due.
 */
#ifndef WEFT_TIMER_H
#define WEFT_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct weft__timer weft__timer;
struct weft__timer {
    int64_t deadline;
    uint64_t seq;
    uint32_t idx;                    /* its entry in the heap's slot table;
                                        WEFT__TIMER_IDLE: not armed;
                                        WEFT__TIMER_PENDING: on the list of
                                        timers not yet ordered             */
    void (*fire)(weft__timer *t);
    weft__timer *pnext, *pprev;      /* links on that list                 */
};
#define WEFT__TIMER_IDLE UINT32_MAX
#define WEFT__TIMER_PENDING (UINT32_MAX - 1)
/* Not in this structure at all: a wait's deadline that another timer, its
 * waiter's keeper, stands for (weft__wait_keep, reactor.h). Never passed
 * to weft__heap_remove. */
#define WEFT__TIMER_KEPT (UINT32_MAX - 2)

/* A heap or run entry: the timer's key, copied, so that sifting compares
 * within the array instead of reading timers that live in other fibers'
 * stacks, and the timer's slot. */
typedef struct weft__hent {
    int64_t deadline;
    uint64_t seq;
    uint32_t slot;
} weft__hent;

/* A slot: an armed timer and where its entry is — a heap position, or
 * WEFT__IN_RUN | run number << WEFT__RUN_SHIFT | index in that run. Moves
 * update this dense table, not the timers themselves. */
typedef struct weft__hslot {
    weft__timer *t;
    uint32_t pos;
} weft__hslot;
#define WEFT__IN_RUN 0x80000000u
#define WEFT__RUN_SHIFT 29
#define WEFT__RUN_IDX 0x1fffffffu
#define WEFT__RUNS 4
#define WEFT__RUN_DEAD UINT32_MAX     /* a removed run entry's slot       */

/* A run: entries in (deadline, arming order), appended at the tail only;
 * e[head] is live unless the run is empty. */
typedef struct weft__run {
    weft__hent *e;
    uint32_t head, tail, cap, live;
} weft__run;

/*
 * Armed timers. Arming appends to a list of timers not yet ordered, and
 * disarming one still there unlinks it: both a few stores. Most of a
 * server's timers are disarmed there — a read's deadline, seconds away,
 * outlived by the data that ends the read — and never cost more. The list
 * keeps a lower bound of its deadlines (pending_min, the least deadline
 * armed since the list was last empty); only when the time comes to look
 * at a timer it might hold (weft__heap_top, or weft__heap_due once the
 * bound has passed) does the whole list move, in arming order, into the
 * ordered structure below. So each timer is ordered at most once, later
 * timers keep their arming order, and a stale bound (its timer already
 * disarmed) costs one early look.
 *
 * The ordered structure: a 4-ary min-heap plus a few "runs", arrays kept in
 * (deadline, arming order) by appending only timers that sort after their
 * last entry. A program arms the same few timeouts again and again, so
 * the deadlines of each come in increasing order and almost all land in a
 * run (one per timeout in use, up to WEFT__RUNS): arming is an append,
 * disarming marks the entry dead (advancing the head past dead entries),
 * both O(1), where the heap paid a sift of every level for each
 * (disarming the oldest timer, at the root, moved the newest down the
 * whole tree). Dead entries are squeezed out when a run fills with fewer
 * than half of it live, so its size follows the armed timers, not how many
 * came and went. The earliest timer is the least of the heap's root and
 * the runs' heads.
 */
typedef struct weft__heap {
    weft__hent *h;
    uint32_t n, cap;                 /* heap entries; capacity of h, slots
                                        and free_slots                      */
    uint64_t seq;
    weft__hslot *slots;
    uint32_t *free_slots;            /* stack of unused slot numbers       */
    uint32_t nfree, nslots;          /* slots in use or free               */
    uint32_t run_live;               /* armed timers in the runs           */
    weft__run runs[WEFT__RUNS];
    weft__timer *phead, *ptail;      /* timers not yet ordered, in arming
                                        order                              */
    uint32_t npending;
    int64_t pending_min;             /* <= every pending deadline (when
                                        npending > 0); an empty set is all
                                        zeros                              */
} weft__heap;

/* Arm @t (not armed) at t->deadline. 0, or -ENOMEM (@t not armed). */
int weft__heap_push(weft__heap *hp, weft__timer *t);
/* Disarm @t, armed or not. */
void weft__heap_remove(weft__heap *hp, weft__timer *t);
/* Order the pending timers now (they join the heap and runs). */
void weft__heap_order(weft__heap *hp);
/* Before firing what is due at @now: order the pending timers if one of
 * them may be due. */
static inline void weft__heap_due(weft__heap *hp, int64_t now)
{
    if (hp->npending && hp->pending_min <= now)
        weft__heap_order(hp);
}
/* Bytes the timer structure holds (heap, slot table, free stack, runs). */
static inline size_t weft__heap_bytes(const weft__heap *hp) {
    size_t n = (size_t)hp->cap * (sizeof(weft__hent) + sizeof(weft__hslot) + sizeof(uint32_t));
    for (int i = 0; i < WEFT__RUNS; i++)
        n += (size_t)hp->runs[i].cap * sizeof(weft__hent);
    return n;
}
/* Armed timers (pending, heap and runs). */
static inline uint32_t weft__heap_count(const weft__heap *hp) {
    return hp->n + hp->run_live + hp->npending;
}
static inline bool weft__hent_before(const weft__hent *a, const weft__hent *b) {
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->seq < b->seq);
}
/* The ordered timer that fires first: least (deadline, arming order) of
 * the heap and runs, the pending timers left out. */
static inline weft__timer *weft__heap_first_ordered(const weft__heap *hp) {
    const weft__hent *best = hp->n ? &hp->h[0] : NULL;
    if (hp->run_live)
        for (int i = 0; i < WEFT__RUNS; i++) {
            const weft__run *ru = &hp->runs[i];
            if (ru->live && (!best || weft__hent_before(&ru->e[ru->head], best)))
                best = &ru->e[ru->head];
        }
    return best ? hp->slots[best->slot].t : NULL;
}
/* The armed timer that fires first: least (deadline, arming order),
 * ordering the pending timers first if one of them may be it. */
static inline weft__timer *weft__heap_top(weft__heap *hp) {
    weft__timer *t = weft__heap_first_ordered(hp);
    if (hp->npending && (!t || hp->pending_min <= t->deadline)) {
        weft__heap_order(hp);
        t = weft__heap_first_ordered(hp);
    }
    return t;
}
/* No armed timer fires before this (INT64_MAX: none is armed); a timer
 * may fire later than it (when the bound is stale). */
static inline int64_t weft__heap_next(const weft__heap *hp) {
    const weft__timer *t = weft__heap_first_ordered(hp);
    int64_t d = t ? t->deadline : INT64_MAX;
    return hp->npending && hp->pending_min < d ? hp->pending_min : d;
}
void weft__heap_fini(weft__heap *hp);

#endif /* WEFT_TIMER_H */
