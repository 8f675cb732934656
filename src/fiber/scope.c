/*
 * scope.c — timeout scopes.
 *
 * A fiber's scope deadline (weft__fiber.scope_deadline, 0 = none) is
 * applied in two places of the scheduler (sched.c): weft__precheck() fails
 * every blocking call once it has passed, and weft__block() clamps the
 * wait's deadline to it, so a wait whose own deadline is later (or absent)
 * wakes at the scope's deadline with -ETIMEDOUT. Every blocking call goes
 * through both, so nothing here needs to know which call is blocking; this
 * file only keeps the fiber's scope deadline.
 */
#include "internal.h"

#include <errno.h>

/* The scope value stored for a new scope with @deadline inside @outer. */
static int64_t scope_combine(int64_t outer, int64_t deadline)
{
    if (deadline == WEFT_FOREVER)
        return outer;
    if (deadline < 1)
        deadline = 1; /* already passed, and distinct from "none" */
    if (outer != 0 && outer < deadline)
        return outer;
    return deadline;
}

int weft_scope_enter(int64_t deadline, int64_t *saved)
{
    weft__fiber *f = weft__current();
    if (!f)
        return -EPERM;
    if (!saved || !weft__deadline_ok(deadline))
        return -EINVAL;
    *saved = f->scope_deadline;
    f->scope_deadline = scope_combine(f->scope_deadline, deadline);
    return 0;
}

int weft_scope_leave(int64_t saved)
{
    weft__fiber *f = weft__current();
    if (!f)
        return -EPERM;
    if (saved < 0)
        return -EINVAL;
    /* Leaving may only widen back to an enclosing scope. */
    if (saved != 0 && f->scope_deadline != 0 && saved < f->scope_deadline)
        return -EINVAL;
    f->scope_deadline = saved;
    return 0;
}

int weft_scope_run(int64_t deadline, int (*fn)(void *arg), void *arg)
{
    int64_t saved;
    if (!fn)
        return weft__current() ? -EINVAL : -EPERM;
    int rc = weft_scope_enter(deadline, &saved);
    if (rc < 0)
        return rc;
    rc = fn(arg);
    weft__current()->scope_deadline = saved;
    return rc;
}

int64_t weft_scope_deadline(void)
{
    weft__fiber *f = weft__current();
    if (!f || f->scope_deadline == 0)
        return WEFT_FOREVER;
    return f->scope_deadline;
}
