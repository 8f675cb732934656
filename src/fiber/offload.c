/*
 * offload.c — weft_offload(): blocking work on the worker pool
 * (workers.c) while the calling fiber waits, with a deadline.
 *
 * A job is shared by the waiting fiber (on its loop's thread) and one
 * worker. Who frees it is decided by an atomic exchange on job->state:
 *
 *   worker finishes: exchange(DONE). Was ABANDONED -> the fiber is gone:
 *     the worker runs cleanup and frees. Was WAITING -> post done_cb to the
 *     fiber's loop (node embedded in the job).
 *   fiber gives up (timeout, cancel): exchange(ABANDONED). Was WAITING ->
 *     the worker will clean up. Was DONE -> done_cb is posted or has run:
 *     on the loop thread, whichever of the fiber and done_cb comes second
 *     (flags `delivered` / `fiber_gone`, loop thread only) cleans up.
 */
#include "offload.h"
#include "workers.h"

#include <errno.h>
#include <stdlib.h>

enum { J_WAITING = 0, J_DONE = 1, J_ABANDONED = 2 };

typedef struct job {
    weft__pjob pj;           /* first: the pool's view of the job          */
    void *(*fn)(void *);
    void *arg;
    void (*cleanup)(void *, void *);
    void *result;
    int state;               /* atomic                                      */
    weft_sched_t *sched;
    weft__wait w;
    weft__post post;
    bool delivered;          /* loop thread: done_cb ran                    */
    bool fiber_gone;         /* loop thread: the fiber stopped waiting      */
} job;

static void job_discard(job *j)
{
    if (j->cleanup)
        j->cleanup(j->arg, j->result);
    free(j);
}

static void done_cb(void *p)
{
    job *j = p;
    j->delivered = true;
    if (j->fiber_gone)
        job_discard(j);
    else
        weft__wait_complete(&j->w, 0); /* no-op if it already timed out */
}

/* weft_offload's job, on the worker: run it, then hand it back (or clean
 * up if the fiber gave up on it). */
static void job_run(weft__pjob *pj)
{
    job *j = (job *)pj;
    j->result = j->fn(j->arg);
    int old = __atomic_exchange_n(&j->state, J_DONE, __ATOMIC_ACQ_REL);
    if (old == J_ABANDONED) {
        job_discard(j);
    } else {
        j->post.fn = done_cb;
        j->post.arg = j;
        j->post.embedded = true;
        weft__reactor_post_node(&j->sched->r, &j->post);
    }
}

int weft_offload(void *(*fn)(void *arg), void *arg,
                 void (*cleanup)(void *arg, void *result), void **result,
                 int64_t deadline)
{
    bool submitted;
    return weft__offload(fn, arg, cleanup, result, deadline, &submitted);
}

int weft__offload(void *(*fn)(void *), void *arg,
                  void (*cleanup)(void *, void *), void **result,
                  int64_t deadline, bool *submitted)
{
    *submitted = false;
    int rc = weft__precheck_args(deadline, fn != NULL);
    if (rc < 0)
        return rc;
    if (deadline != WEFT_FOREVER && deadline <= weft_now())
        return weft__expired(deadline);
    job *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->fn = fn;
    j->arg = arg;
    j->cleanup = cleanup;
    j->sched = weft__sched_tls();

    j->pj.run = job_run;
    weft__wait_init(&j->w, &j->sched->r, weft__fiber_wake, j->sched->current);
    rc = weft__wait_arm_deadline(&j->w, deadline);
    if (rc == 0) {
        rc = weft__pool_submit(&j->pj);
    }
    if (rc < 0) {
        weft__wait_complete(&j->w, rc);
        free(j);
        return rc;
    }
    *submitted = true;

    rc = weft__block(&j->w, WEFT_WAIT_OFFLOAD, (const void *)(uintptr_t)fn);
    if (rc == 0) {
        if (result)
            *result = j->result;
        free(j);
        return 0;
    }
    int old = __atomic_exchange_n(&j->state, J_ABANDONED, __ATOMIC_ACQ_REL);
    if (old == J_DONE) {
        if (j->delivered)
            job_discard(j);
        else
            j->fiber_gone = true;
    }
    return rc;
}
