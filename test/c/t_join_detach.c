/*
 * weft_detach() or a second weft_join() of a fiber that has just finished
 * while another fiber is joining it (woken by the finish, not yet
 * resumed). weft.h: both return -EINVAL when another fiber is (already)
 * joining it, and the joiner gets the result. Found by fuzz/ops_fuzz.c
 * (issue 18): the detach (or the second join) took the finished slot and
 * freed it, and the first joiner, once resumed, read the freed slot's
 * result through a NULL pointer (src/fiber/sched.c, weft_join:
 * `*result = sl->result` after `sl = slot_lookup(...)` returned NULL).
 */
#include "harness.h"

static weft_fiber_t target;
static int third_rc;

static void *finish_at_once(void *arg) { return arg; }

static void *detacher(void *arg)
{
    (void)arg;
    third_rc = weft_detach(target);
    return NULL;
}

static void *second_joiner(void *arg)
{
    (void)arg;
    third_rc = weft_join(target, NULL, 0);
    return NULL;
}

/* We join a fiber that finishes at once; @third, started after it, runs
 * after it has woken us and before we resume, and must get -EINVAL. */
static void race(weft_fn_t third, void *value)
{
    weft_fiber_t d;
    void *res = NULL;
    third_rc = 1;
    CHECK_EQ(weft_spawn(finish_at_once, value, NULL, &target), 0);
    CHECK_EQ(weft_spawn(third, NULL, NULL, &d), 0);
    CHECK_EQ(weft_join(target, &res, WEFT_FOREVER), 0);
    CHECK(res == value);
    CHECK_EQ(weft_join(d, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(third_rc, -EINVAL);
    CHECK_EQ(weft_join(target, NULL, 0), -ESRCH); /* consumed by our join */
}

static void *body(void *arg)
{
    (void)arg;
    race(detacher, (void *)0x5a);
    race(second_joiner, (void *)0x5b);
    return NULL;
}

int main(void)
{
    h_begin("t_join_detach");
    h_run(body, NULL);
    return h_end();
}
