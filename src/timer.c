/*
 * timer.c — binary min-heap of timers ordered by (deadline, sequence), so
 * timers with equal deadlines fire in the order they were armed. Each timer
 * knows its slot, which makes removal O(log n).
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

static inline bool before(const weft__timer *a, const weft__timer *b)
{
    return a->deadline < b->deadline ||
           (a->deadline == b->deadline && a->seq < b->seq);
}

static void place(weft__heap *hp, uint32_t i, weft__timer *t)
{
    hp->h[i] = t;
    t->idx = i;
}

static void sift_up(weft__heap *hp, uint32_t i, weft__timer *t)
{
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!before(t, hp->h[parent]))
            break;
        place(hp, i, hp->h[parent]);
        i = parent;
    }
    place(hp, i, t);
}

static void sift_down(weft__heap *hp, uint32_t i, weft__timer *t)
{
    for (;;) {
        uint32_t l = 2 * i + 1;
        if (l >= hp->n)
            break;
        uint32_t m = l;
        if (l + 1 < hp->n && before(hp->h[l + 1], hp->h[l]))
            m = l + 1;
        if (!before(hp->h[m], t))
            break;
        place(hp, i, hp->h[m]);
        i = m;
    }
    place(hp, i, t);
}

int weft__heap_push(weft__heap *hp, weft__timer *t)
{
    if (hp->n == hp->cap) {
        uint32_t ncap = hp->cap ? hp->cap * 2 : 64;
        weft__timer **nh = realloc(hp->h, (size_t)ncap * sizeof *nh);
        if (!nh)
            return -ENOMEM;
        hp->h = nh;
        hp->cap = ncap;
    }
    t->seq = hp->seq++;
    sift_up(hp, hp->n++, t);
    return 0;
}

void weft__heap_remove(weft__heap *hp, weft__timer *t)
{
    uint32_t i = t->idx;
    if (i == WEFT__TIMER_IDLE)
        return;
    t->idx = WEFT__TIMER_IDLE;
    weft__timer *last = hp->h[--hp->n];
    if (i == hp->n)
        return;
    if (i > 0 && before(last, hp->h[(i - 1) / 2]))
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
