/* Timers: ordering, equal deadlines fire FIFO, past / far-future / forever
 * deadlines, bad deadlines. */
#include "harness.h"

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
    CHECK_EQ(weft_park(0), -ETIMEDOUT);
    CHECK_EQ(weft_park(weft_now() - 5), -ETIMEDOUT);

    /* A far-future deadline behaves as a real timer until cancelled, and
     * an overflowing relative timeout saturates. */
    CHECK_EQ(weft_deadline_in(INT64_MAX), INT64_MAX);
    CHECK_EQ(weft_deadline_in(-5), WEFT_FOREVER);
    CHECK_EQ(weft_park(weft_deadline_in(2000000)), -ETIMEDOUT);

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

int main(void)
{
    h_begin("timer");
    h_run(body, NULL);
    return h_end();
}
