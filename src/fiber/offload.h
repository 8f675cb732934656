/* offload.h — weft_offload()'s internal entry (offload.c, fiber layer). */
#ifndef WEFT_OFFLOAD_H
#define WEFT_OFFLOAD_H

#include "internal.h"

/* weft_offload() that also reports whether the job reached the pool: if
 * *@submitted is false on return, @fn never ran and @cleanup never will. */
int weft__offload(void *(*fn)(void *), void *arg,
                  void (*cleanup)(void *, void *), void **result,
                  int64_t deadline, bool *submitted);

#endif
