/*
 * timer.c — 4-ary min-heap of timers ordered by (deadline, sequence), so
 * timers with equal deadlines fire in the order they were armed. Each timer
 * knows its slot, which makes removal O(log n).
 *
 * The keys live in the heap array itself: a timer is usually a field of a
 * wait in some fiber's stack frame, and with the keys there a sift
 * compared against other fibers' stacks, one cold cache line (and often a
 * TLB miss) per level. Nor are the timers written when they move: each
 * armed timer holds a slot in a dense table that records its position,
 * and a sift updates that table (not a cold line in another fiber's stack
 * per level). Four children per node halve the depth, and the four keys a
 * sift-down compares share one or two cache lines.
 *
 * Beside the heap, the runs (timer.h): timers armed in deadline order —
 * the common case, the same timeout armed over and over — are appended to
 * a sorted array and disarmed by marking their entry, O(1) both; only a
 * timer that would sort before the last entry of every run (and finds no
 * empty one) goes into the heap. In the heap alone, disarming a server's
 * receive deadline was the dearest case: the oldest timer sits at the
 * root, and the newest, moved there, sinks through every level
 * (docs/PERFORMANCE.md).
 */
#include "timer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define ARITY 4

static inline void place(weft__heap *hp, uint32_t i, weft__hent e)
{
    hp->h[i] = e;
    hp->slots[e.slot].pos = i;
}

static void sift_up(weft__heap *hp, uint32_t i, weft__hent e)
{
    while (i > 0) {
        uint32_t parent = (i - 1) / ARITY;
        if (!weft__hent_before(&e, &hp->h[parent]))
            break;
        place(hp, i, hp->h[parent]);
        i = parent;
    }
    place(hp, i, e);
}

static void sift_down(weft__heap *hp, uint32_t i, weft__hent e)
{
    for (;;) {
        uint32_t first = ARITY * i + 1;
        if (first >= hp->n)
            break;
        uint32_t end = first + ARITY < hp->n ? first + ARITY : hp->n;
        uint32_t m = first;
        for (uint32_t c = first + 1; c < end; c++)
            if (weft__hent_before(&hp->h[c], &hp->h[m]))
                m = c;
        if (!weft__hent_before(&hp->h[m], &e))
            break;
        place(hp, i, hp->h[m]);
        i = m;
    }
    place(hp, i, e);
}

/* Room for one more armed timer: heap, slot table and free-slot stack
 * all hold up to cap entries (the heap holds only some of the armed
 * timers, the slots all of them). */
/* Resize array @a to @n entries, or return -ENOMEM with @a as it was. */
#define RESIZE_OR_RETURN(a, n)                                              \
    do {                                                                    \
        void *na_ = realloc((a), (size_t)(n) * sizeof *(a));                \
        if (!na_)                                                           \
            return -ENOMEM;                                                 \
        (a) = na_;                                                          \
    } while (0)

static int grow(weft__heap *hp)
{
    uint32_t ncap = hp->cap ? hp->cap * 2 : 64;
    RESIZE_OR_RETURN(hp->h, ncap);
    RESIZE_OR_RETURN(hp->slots, ncap);
    RESIZE_OR_RETURN(hp->free_slots, ncap);
    hp->cap = ncap;
    return 0;
}

/* Room at run @ri's tail: squeeze out the dead entries when fewer than
 * half are live (each squeeze is paid for by the removals that made the
 * dead entries), else double the array. */
static int run_room(weft__heap *hp, uint32_t ri)
{
    weft__run *ru = &hp->runs[ri];
    if (ru->tail < ru->cap)
        return 0;
    if (ru->live < ru->cap / 2) {
        uint32_t j = 0;
        for (uint32_t i = ru->head; i < ru->tail; i++) {
            weft__hent e = ru->e[i];
            if (e.slot == WEFT__RUN_DEAD)
                continue;
            ru->e[j] = e;
            hp->slots[e.slot].pos = WEFT__IN_RUN | ri << WEFT__RUN_SHIFT | j;
            j++;
        }
        ru->head = 0;
        ru->tail = j;
        return 0;
    }
    uint32_t ncap = ru->cap ? ru->cap * 2 : 64;
    if (ncap > WEFT__RUN_IDX)
        return -ENOMEM;
    RESIZE_OR_RETURN(ru->e, ncap);
    ru->cap = ncap;
    return 0;
}

/* The run a timer due at @deadline can be appended to: the one whose last
 * entry is latest but not after it, else an empty one; -1 if none. */
static int run_pick(const weft__heap *hp, int64_t deadline)
{
    int fit = -1, empty = -1;
    int64_t fit_last = 0;
    for (int i = 0; i < WEFT__RUNS; i++) {
        const weft__run *ru = &hp->runs[i];
        if (ru->live == 0) {
            if (empty < 0)
                empty = i;
            continue;
        }
        int64_t last = ru->e[ru->tail - 1].deadline;
        if (last <= deadline && (fit < 0 || last > fit_last)) {
            fit = i;
            fit_last = last;
        }
    }
    return fit >= 0 ? fit : empty;
}

/* Order @t (pending or not armed): into a run or the heap. Room is
 * reserved: weft__heap_push grew the arrays for every pending timer. */
static void order_one(weft__heap *hp, weft__timer *t)
{
    /* Every slot not in use is on the free stack, so when none is free
     * nslots < cap after growing. */
    int ri = run_pick(hp, t->deadline);
    if (ri >= 0) {
        weft__run *ru = &hp->runs[ri];
        if (ru->live == 0)
            ru->head = ru->tail = 0; /* nothing live: start over */
        if (run_room(hp, (uint32_t)ri) < 0)
            ri = -1; /* the heap still has room */
    }
    uint32_t slot = hp->nfree ? hp->free_slots[--hp->nfree] : hp->nslots++;
    weft__hent e = {t->deadline, hp->seq, slot};
    t->pnext = t->pprev = NULL;
    hp->slots[slot].t = t;
    t->idx = slot;
    t->seq = hp->seq++;
    if (ri >= 0) {
        weft__run *ru = &hp->runs[ri];
        hp->slots[slot].pos = WEFT__IN_RUN | (uint32_t)ri << WEFT__RUN_SHIFT | ru->tail;
        ru->e[ru->tail++] = e;
        ru->live++;
        hp->run_live++;
    } else {
        sift_up(hp, hp->n++, e);
    }
}

int weft__heap_push(weft__heap *hp, weft__timer *t)
{
    /* Room for every armed timer, pending ones included, so that ordering
     * them later cannot fail. */
    if (hp->nslots - hp->nfree + hp->npending >= hp->cap && grow(hp) < 0)
        return -ENOMEM;
    t->idx = WEFT__TIMER_PENDING;
    t->pnext = NULL;
    t->pprev = hp->ptail;
    *(hp->ptail ? &hp->ptail->pnext : &hp->phead) = t;
    hp->ptail = t;
    if (hp->npending++ == 0 || t->deadline < hp->pending_min)
        hp->pending_min = t->deadline;
    return 0;
}

void weft__heap_order(weft__heap *hp)
{
    weft__timer *t = hp->phead;
    hp->phead = hp->ptail = NULL;
    hp->npending = 0;
    while (t) {
        weft__timer *next = t->pnext;
        order_one(hp, t);
        t = next;
    }
}

void weft__heap_remove(weft__heap *hp, weft__timer *t)
{
    uint32_t slot = t->idx;
    if (slot == WEFT__TIMER_IDLE)
        return;
    t->idx = WEFT__TIMER_IDLE;
    if (slot == WEFT__TIMER_PENDING) {
        *(t->pprev ? &t->pprev->pnext : &hp->phead) = t->pnext;
        *(t->pnext ? &t->pnext->pprev : &hp->ptail) = t->pprev;
        t->pnext = t->pprev = NULL;
        hp->npending--;
        return;
    }
    uint32_t i = hp->slots[slot].pos;
    hp->free_slots[hp->nfree++] = slot;
    if (i & WEFT__IN_RUN) {
        weft__run *ru = &hp->runs[(i & ~WEFT__IN_RUN) >> WEFT__RUN_SHIFT];
        i &= WEFT__RUN_IDX;
        ru->e[i].slot = WEFT__RUN_DEAD;
        hp->run_live--;
        if (--ru->live == 0)
            ru->head = ru->tail = 0;
        else if (i == ru->head)
            while (ru->e[ru->head].slot == WEFT__RUN_DEAD)
                ru->head++; /* a live entry follows: live > 0 */
        return;
    }
    weft__hent last = hp->h[--hp->n];
    if (i == hp->n)
        return;
    if (i > 0 && weft__hent_before(&last, &hp->h[(i - 1) / ARITY]))
        sift_up(hp, i, last);
    else
        sift_down(hp, i, last);
}

void weft__heap_fini(weft__heap *hp)
{
    free(hp->h);
    free(hp->slots);
    free(hp->free_slots);
    for (int i = 0; i < WEFT__RUNS; i++)
        free(hp->runs[i].e);
    hp->h = NULL;
    hp->slots = NULL;
    hp->free_slots = NULL;
    hp->n = hp->cap = hp->nfree = hp->nslots = hp->run_live = 0;
    hp->phead = hp->ptail = NULL;
    hp->npending = 0;
    memset(hp->runs, 0, sizeof hp->runs);
}
