/* tool_backend — print the backend a default scheduler gets here. */
#include "weft.h"

#include <stdio.h>

int main(void)
{
    weft_sched_t *s = weft_sched_self();
    if (!s)
        return 1;
    puts(weft_sched_backend(s));
    return weft_sched_destroy(s) != 0;
}
