/* Timers: ordering, equal deadlines fire FIFO, past / far-future / forever
 * deadlines, bad deadlines; the heap and run themselves against a model
 * under random pushes, removals from any slot and pops, and under a
 * server's pattern (rising deadlines, oldest-first removal). */
#include "harness.h"
#include "internal.h"

#include <stdint.h>

static int order[64], norder;

static void *at(void *arg)
{
    int64_t d = ((int64_t *)arg)[0];
    int id = (int)((int64_t *)arg)[1];
    CHECK_EQ(weft_sleep_until(d), 0);
    CHECK(weft_now() >= d);
    order[norder++] = id;
    return NULL;
}

static void *forever(void *arg)
{
    CHECK_EQ(weft_sleep_until(WEFT_FOREVER), -ECANCELED);
    return arg;
}

static void *body(void *arg)
{
    /* Distinct deadlines fire in deadline order, whatever the spawn order. */
    int64_t base = weft_deadline_in(20000000);
    static int64_t a[8][2];
    int offs[8] = {7, 3, 5, 0, 6, 1, 4, 2};
    weft_fiber_t f[8];
    for (int i = 0; i < 8; i++) {
        a[i][0] = base + offs[i] * 1000000;
        a[i][1] = offs[i];
        CHECK_EQ(weft_spawn(at, a[i], NULL, &f[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(order[i], i);

    /* Equal deadlines fire in the order they were set. */
    norder = 0;
    static int64_t b[32][2];
    weft_fiber_t g[32];
    int64_t same = weft_deadline_in(10000000);
    for (int i = 0; i < 32; i++) {
        b[i][0] = same;
        b[i][1] = i;
        CHECK_EQ(weft_spawn(at, b[i], NULL, &g[i]), 0);
    }
    for (int i = 0; i < 32; i++)
        CHECK_EQ(weft_join(g[i], NULL, WEFT_FOREVER), 0);
    for (int i = 0; i < 32; i++)
        CHECK_EQ(order[i], i);

    /* Past deadlines return at once; 0 means "do not wait". */
    CHECK_EQ(weft_sleep_until(0), 0);
    CHECK_EQ(weft_sleep_until(1), 0);
    CHECK_EQ(weft_sleep_until(weft_now() - 1000), 0);
    CHECK_EQ(weft_sleep(0), 0);
    CHECK_EQ(weft_park(0), -EAGAIN);
    CHECK_EQ(weft_park(weft_now() - 5), -ETIMEDOUT);

    /* A far-future deadline behaves as a real timer until cancelled, and
     * an overflowing relative timeout saturates. */
    CHECK_EQ(weft_deadline_in(INT64_MAX), INT64_MAX);
    CHECK_EQ(weft_deadline_in(-5), WEFT_FOREVER);
    CHECK_EQ(weft_park(weft_deadline_in(2000000)), -ETIMEDOUT);

    /* The loop's clock: never ahead of the clock, read again by the loop
     * once a fiber has waited, and deadlines made from it by the same
     * rules. */
    int64_t before = weft_now();
    CHECK(weft_loop_now() <= before);
    CHECK(weft_loop_deadline_in(5000) <= weft_deadline_in(5000));
    CHECK_EQ(weft_loop_deadline_in(INT64_MAX), INT64_MAX);
    CHECK_EQ(weft_loop_deadline_in(-5), WEFT_FOREVER);
    CHECK_EQ(weft_sleep(1000000), 0);
    CHECK(weft_loop_now() >= before);
    CHECK(weft_loop_now() <= weft_now());
    CHECK_EQ(weft_park(weft_loop_deadline_in(1000000)), -ETIMEDOUT);

    /* Forever: only cancellation ends it. */
    weft_fiber_t fv;
    CHECK_EQ(weft_spawn(forever, NULL, NULL, &fv), 0);
    CHECK_EQ(weft_sleep(2000000), 0);
    CHECK_EQ(weft_cancel(fv), 0);
    CHECK_EQ(weft_join(fv, NULL, WEFT_FOREVER), 0);

    /* Bad deadlines. */
    CHECK_EQ(weft_sleep_until(-2), -EINVAL);
    CHECK_EQ(weft_sleep_until(INT64_MIN), -EINVAL);
    CHECK_EQ(weft_sleep(-1), -EINVAL);
    CHECK_EQ(weft_park(-7), -EINVAL);
    CHECK_EQ(weft_join(weft_self(), NULL, -3), -EINVAL);

    /* Sleep really waits at least as long as asked. */
    int64_t t0 = weft_now();
    CHECK_EQ(weft_sleep(3000000), 0);
    CHECK(weft_now() - t0 >= 3000000);
    return arg;
}

/* Every armed timer is pending (on the list, its deadline not before the
 * list's bound) or knows its slot, and its slot its entry (in the heap or
 * the run) with its key; the counts add up; no timer is before
 * weft__heap_next; the top is the armed timer with the least (deadline,
 * arming order) — asking for it may order the pending ones. */
#define NT 512
static weft__timer t[NT];
static uint64_t armed_at[NT];

static void check_model(weft__heap *hp, bool ask_top)
{
    int best = -1;
    uint32_t n = 0, in_run = 0, pending = 0;
    for (const weft__timer *p = hp->phead; p; p = p->pnext) {
        CHECK_EQ(p->idx, WEFT__TIMER_PENDING);
        CHECK(p->deadline >= hp->pending_min);
        CHECK(p->pnext ? p->pnext->pprev == p : hp->ptail == p);
        pending++;
    }
    CHECK_EQ(pending, hp->npending);
    for (int k = 0; k < NT; k++) {
        if (t[k].idx == WEFT__TIMER_IDLE)
            continue;
        n++;
        if (best < 0 || t[k].deadline < t[best].deadline ||
            (t[k].deadline == t[best].deadline && armed_at[k] < armed_at[best]))
            best = k;
        if (t[k].idx == WEFT__TIMER_PENDING) {
            pending--;
            continue;
        }
        CHECK(t[k].idx < hp->nslots);
        CHECK(hp->slots[t[k].idx].t == &t[k]);
        uint32_t pos = hp->slots[t[k].idx].pos;
        const weft__hent *e;
        if (pos & WEFT__IN_RUN) {
            uint32_t ri = (pos & ~WEFT__IN_RUN) >> WEFT__RUN_SHIFT;
            CHECK(ri < WEFT__RUNS);
            const weft__run *ru = &hp->runs[ri];
            pos &= WEFT__RUN_IDX;
            CHECK(pos >= ru->head && pos < ru->tail);
            e = &ru->e[pos];
            in_run++;
        } else {
            CHECK(pos < hp->n);
            e = &hp->h[pos];
        }
        CHECK_EQ(e->slot, t[k].idx);
        CHECK_EQ(e->deadline, t[k].deadline);
    }
    CHECK_EQ(pending, 0); /* every timer marked pending is on the list */
    CHECK_EQ(n, weft__heap_count(hp));
    if (best >= 0)
        CHECK(weft__heap_next(hp) <= t[best].deadline);
    else
        CHECK_EQ(weft__heap_next(hp), INT64_MAX);
    CHECK_EQ(in_run, hp->run_live);
    /* each run is in key order, its head is live, its count right */
    uint32_t live_sum = 0;
    for (int r = 0; r < WEFT__RUNS; r++) {
        const weft__run *ru = &hp->runs[r];
        uint32_t live = 0;
        for (uint32_t i = ru->head; i < ru->tail; i++) {
            live += ru->e[i].slot != WEFT__RUN_DEAD;
            if (i + 1 < ru->tail)
                CHECK(weft__hent_before(&ru->e[i], &ru->e[i + 1]));
        }
        CHECK_EQ(live, ru->live);
        if (ru->live)
            CHECK(ru->e[ru->head].slot != WEFT__RUN_DEAD);
        live_sum += live;
    }
    CHECK_EQ(live_sum, hp->run_live);
    if (ask_top)
        CHECK(best < 0 ? weft__heap_top(hp) == NULL : weft__heap_top(hp) == &t[best]);
}

/* The timers against a brute-force model: 200,000 random operations
 * (push with few distinct deadlines so ties are common, remove a random
 * armed timer, pop the top), checked after each. */
static void heap_model(void)
{
    weft__heap hp = {0};
    uint64_t clock = 0;
    uint32_t rng = 12345;
    for (int i = 0; i < NT; i++)
        t[i].idx = WEFT__TIMER_IDLE;
    for (int step = 0; step < 200000; step++) {
        rng = rng * 1103515245u + 12345u;
        int i = (int)((rng >> 8) % NT);
        int what = (int)((rng >> 20) % 3);
        if (what == 0 && t[i].idx == WEFT__TIMER_IDLE) {
            t[i].deadline = (int64_t)((rng >> 4) % 37);
            CHECK_EQ(weft__heap_push(&hp, &t[i]), 0);
            armed_at[i] = clock++;
        } else if (what == 1) {
            weft__heap_remove(&hp, &t[i]); /* armed or not */
            CHECK_EQ(t[i].idx, WEFT__TIMER_IDLE);
        } else if (weft__heap_count(&hp)) {
            weft__heap_remove(&hp, weft__heap_top(&hp));
        }
        check_model(&hp, (rng >> 2) % 4 == 0); /* pending ones pile up between */
    }
    check_model(&hp, true);
    weft__heap_fini(&hp);
}

/* Shaped like a server: one timeout armed over and over (deadlines rise
 * with the clock), disarmed mostly oldest-first, now and then a shorter
 * timeout, and a few long-lived timers. Three timeouts, three runs: the
 * heap stays empty. Runs must stay as small as the armed set (dead
 * entries squeezed out), not grow with the traffic. */
static void server_model(void)
{
    weft__heap hp = {0};
    uint64_t clock = 0;
    uint32_t rng = 777;
    int64_t now = 0;
    for (int i = 0; i < NT; i++)
        t[i].idx = WEFT__TIMER_IDLE;
    int fifo[NT], head = 0, tail = 0; /* arming order of the FIFO timers */
    for (int step = 0; step < 300000; step++) {
        rng = rng * 1103515245u + 12345u;
        now += (rng >> 28) % 3;
        int what = (int)((rng >> 12) % 16);
        if (what < 7 && tail - head < NT - 8) {
            int i = -1;
            for (int k = 8; k < NT && i < 0; k++) /* 0..7: long-lived ones */
                if (t[k].idx == WEFT__TIMER_IDLE)
                    i = k;
            if (i < 0)
                continue;
            t[i].deadline = now + ((rng >> 20) % 64 ? 10000 : 500);
            CHECK_EQ(weft__heap_push(&hp, &t[i]), 0);
            armed_at[i] = clock++;
            fifo[tail++ % NT] = i;
        } else if (what < 14 && head < tail) {
            /* oldest first, now and then one a little further in */
            int skip = (rng >> 24) % 8 == 0 && tail - head > 3 ? 2 : 0;
            int j = head + skip;
            int i = fifo[j % NT];
            weft__heap_remove(&hp, &t[i]);
            for (; j > head; j--)
                fifo[j % NT] = fifo[(j - 1) % NT];
            head++;
        } else if (what == 14) {
            int i = (int)((rng >> 8) % 8);
            if (t[i].idx == WEFT__TIMER_IDLE) {
                t[i].deadline = now + 1000000;
                CHECK_EQ(weft__heap_push(&hp, &t[i]), 0);
                armed_at[i] = clock++;
            } else if ((rng >> 4) % 64 == 0) {
                weft__heap_remove(&hp, &t[i]);
            }
        }
        if (step % 97 == 0)
            check_model(&hp, true);
        CHECK_EQ(hp.n, 0);
        for (int r = 0; r < WEFT__RUNS; r++) /* bounded by the armed set */
            CHECK(hp.runs[r].cap <= 4 * NT + 64);
    }
    check_model(&hp, true);
    weft__heap_fini(&hp);
}

int main(void)
{
    h_begin("timer");
    /* Without a running loop, the loop's clock is the clock. */
    int64_t t0 = weft_now(), lt = weft_loop_now();
    CHECK(t0 <= lt && lt <= weft_now());
    heap_model();
    server_model();
    h_run(body, NULL);
    return h_end();
}
