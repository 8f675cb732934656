/*
 * timer.c — 4-ary min-heap of timers ordered by (deadline, sequence), so
 * timers with equal deadlines fire in the order they were armed. Each timer
 * knows its slot, which makes removal O(log n).
 *
 * The keys live in the heap array itself, next to the timer pointer: a
 * timer is usually a field of a wait in some fiber's stack frame, and with
 * the keys there a sift compared against other fibers' stacks, one cold
 * cache line (and often a TLB miss) per level. Now comparisons stay in the
 * array; only the timers that move are written (their slot index). Four
 * children per node halve the depth, and the four keys a sift-down
 * compares share one or two cache lines.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#define ARITY 4

static inline bool before(const weft__hent *a, const weft__hent *b)
{
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->seq < b->seq);
}

static inline void place(weft__heap *hp, uint32_t i, weft__hent e)
{
    hp->h[i] = e;
    e.t->idx = i;
}

static void sift_up(weft__heap *hp, uint32_t i, weft__hent e)
{
    while (i > 0) {
        uint32_t parent = (i - 1) / ARITY;
        if (!before(&e, &hp->h[parent]))
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
            if (before(&hp->h[c], &hp->h[m]))
                m = c;
        if (!before(&hp->h[m], &e))
            break;
        place(hp, i, hp->h[m]);
        i = m;
    }
    place(hp, i, e);
}

int weft__heap_push(weft__heap *hp, weft__timer *t)
{
    if (hp->n == hp->cap) {
        uint32_t ncap = hp->cap ? hp->cap * 2 : 64;
        weft__hent *nh = realloc(hp->h, (size_t)ncap * sizeof *nh);
        if (!nh)
            return -ENOMEM;
        hp->h = nh;
        hp->cap = ncap;
    }
    t->seq = hp->seq++;
    sift_up(hp, hp->n++, (weft__hent){t->deadline, t->seq, t});
    return 0;
}

void weft__heap_remove(weft__heap *hp, weft__timer *t)
{
    uint32_t i = t->idx;
    if (i == WEFT__TIMER_IDLE)
        return;
    t->idx = WEFT__TIMER_IDLE;
    weft__hent last = hp->h[--hp->n];
    if (i == hp->n)
        return;
    if (i > 0 && before(&last, &hp->h[(i - 1) / ARITY]))
        sift_up(hp, i, last);
    else
        sift_down(hp, i, last);
}

void weft__heap_fini(weft__heap *hp)
{
    free(hp->h);
    hp->h = NULL;
    hp->n = hp->cap = 0;
}
