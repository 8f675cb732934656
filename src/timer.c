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
 * and a sift updates that table (with 1,000 connections the removals of a
 * server's receive deadlines wrote a cold line in another fiber's stack
 * per level). Four children per node halve the depth, and the four keys a
 * sift-down compares share one or two cache lines.
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
    hp->slots[e.slot].pos = i;
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

/* Room for one more armed timer: heap, slot table and free-slot stack
 * all hold up to cap entries. */
static int grow(weft__heap *hp)
{
    uint32_t ncap = hp->cap ? hp->cap * 2 : 64;
    weft__hent *nh = realloc(hp->h, (size_t)ncap * sizeof *nh);
    if (!nh)
        return -ENOMEM;
    hp->h = nh;
    weft__hslot *ns = realloc(hp->slots, (size_t)ncap * sizeof *ns);
    if (!ns)
        return -ENOMEM;
    hp->slots = ns;
    uint32_t *nf = realloc(hp->free_slots, (size_t)ncap * sizeof *nf);
    if (!nf)
        return -ENOMEM;
    hp->free_slots = nf;
    hp->cap = ncap;
    return 0;
}

int weft__heap_push(weft__heap *hp, weft__timer *t)
{
    if (hp->n == hp->cap && grow(hp) < 0)
        return -ENOMEM;
    /* Every slot not in use is on the free stack, so n == cap means all
     * nslots are in use and nslots < cap after growing. */
    uint32_t slot = hp->nfree ? hp->free_slots[--hp->nfree] : hp->nslots++;
    hp->slots[slot].t = t;
    t->idx = slot;
    t->seq = hp->seq++;
    sift_up(hp, hp->n++, (weft__hent){t->deadline, t->seq, slot});
    return 0;
}

void weft__heap_remove(weft__heap *hp, weft__timer *t)
{
    uint32_t slot = t->idx;
    if (slot == WEFT__TIMER_IDLE)
        return;
    t->idx = WEFT__TIMER_IDLE;
    uint32_t i = hp->slots[slot].pos;
    hp->free_slots[hp->nfree++] = slot;
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
    free(hp->slots);
    free(hp->free_slots);
    hp->h = NULL;
    hp->slots = NULL;
    hp->free_slots = NULL;
    hp->n = hp->cap = hp->nfree = hp->nslots = 0;
}
