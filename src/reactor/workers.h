/* workers.h — the process-wide worker pool (workers.c). Not installed.
 * Below the fiber layer: the Ruby extension uses it too. */
#ifndef WEFT_WORKERS_H
#define WEFT_WORKERS_H

#include "reactor.h"

/* A unit of work for the process-wide pool. @run is called on a worker
 * thread; from then on the worker owns the job until @run returns, and
 * the pool never touches it again. */
typedef struct weft__pjob weft__pjob;
struct weft__pjob {
    weft__pjob *next;
    void (*run)(weft__pjob *pj);
};

/* Queue @pj (the pool starts on first use). Thread-safe. Returns 0,
 * -ENOMEM or -EAGAIN (no worker thread could be started, or the pool is
 * shutting down). */
int weft__pool_submit(weft__pjob *pj);

/* A job that completes a reactor wait: @fn(@arg) runs on a worker, then
 * @w is completed with 0 on @r's loop thread (through a post) and @done
 * is set there. The caller owns the memory and must keep it, and @w, until
 * @done: a wait that ended early (its deadline) must be waited for again,
 * and @fn's data (a buffer) stays in use until then. */
typedef struct weft__rjob {
    weft__pjob pj;
    weft__post post;
    weft__reactor *r;
    weft__wait *w;
    void (*fn)(void *arg);
    void *arg;
    bool done;
} weft__rjob;

/* Submit @j (the fields above are set here). Returns weft__pool_submit's
 * result; on error nothing runs. */
int weft__rjob_submit(weft__rjob *j, weft__reactor *r, weft__wait *w,
                      void (*fn)(void *), void *arg);

#endif
