/*
 * fault.c — the fault-injection seam's counter (fault.h). Compiled into
 * every build; it has content only with -DWEFT_FAULT.
 */
#include "fault.h"

#ifdef WEFT_FAULT
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_long countdown;            /* hits left before the fault   */
static _Atomic(const char *) fired_at;

void weft__fault_arm(long n)
{
    atomic_store(&fired_at, NULL);
    atomic_store(&countdown, n);
}

const char *weft__fault_fired(void)
{
    return atomic_load(&fired_at);
}

bool weft__fault_hit(const char *where)
{
    long c = atomic_load(&countdown);
    while (c > 0) {
        if (atomic_compare_exchange_weak(&countdown, &c, c - 1)) {
            if (c == 1) {
                atomic_store(&fired_at, where);
                return true;
            }
            return false;
        }
    }
    return false;
}
#else
/* ISO C wants a translation unit to declare something. */
typedef int weft__fault_unused;
#endif
