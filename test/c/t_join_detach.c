/*
 * weft_detach() or a second weft_join() of a fiber that has just finished
 * while another fiber is joining it (woken by the finish, not yet
 * resumed). weft.h: both return -EINVAL when another fiber is (already)
 * joining it, and the joiner gets the result. Found by fuzz/ops_fuzz.c
 * (issue 18): the detach (or the second join) took the finished slot and
 * freed it, and the first joiner, once resumed, read the freed slot's
 * result through a NULL pointer (src/sched.c, weft_join:
 * `*result = sl->result` after `sl = slot_lookup(...)` returned NULL).
 */
#include "harness.h"

static weft_fiber_t target;
static int detach_rc = 1;

static void *finish_at_once(void *arg) { return arg; }

static void *detacher(void *arg)
{
    (void)arg;
    detach_rc = weft_detach(target);
    return NULL;
}

static int join2_rc = 1;
static void *second_joiner(void *arg)
{
    (void)arg;
    join2_rc = weft_join(target, NULL, 0);
    return NULL;
}

static void *body(void *arg)
{
    (void)arg;
    weft_fiber_t d;
    void *res = NULL;
    CHECK_EQ(weft_spawn(finish_at_once, (void *)0x5a, NULL, &target), 0);
    CHECK_EQ(weft_spawn(detacher, NULL, NULL, &d), 0);
    /* Blocks; target finishes and wakes us; the detacher runs before we
     * resume. */
    CHECK_EQ(weft_join(target, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)0x5a);
    CHECK_EQ(weft_join(d, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(detach_rc, -EINVAL);
    CHECK_EQ(weft_join(target, NULL, 0), -ESRCH); /* consumed by our join */

    /* The same with a second joiner in place of the detacher. */
    CHECK_EQ(weft_spawn(finish_at_once, (void *)0x5b, NULL, &target), 0);
    CHECK_EQ(weft_spawn(second_joiner, NULL, NULL, &d), 0);
    CHECK_EQ(weft_join(target, &res, WEFT_FOREVER), 0);
    CHECK(res == (void *)0x5b);
    CHECK_EQ(weft_join(d, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(join2_rc, -EINVAL);
    return NULL;
}

int main(void)
{
    h_begin("t_join_detach");
    h_run(body, NULL);
    return h_end();
}
