/*
 * offload.c — a process-wide pool of worker threads for blocking work.
 *
 * The pool itself knows nothing of fibers: it runs weft__pjob's. Two kinds
 * are built on it: weft_offload()'s job (below), which a C fiber may give
 * up on, and weft__rjob, which completes a reactor wait that its owner
 * keeps until the job is done (the Ruby extension's file reads).
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

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    weft__pjob *head, *tail;
    pthread_t *threads;
    unsigned nthreads;
    bool running, stopping;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL,
          NULL, 0, false, false};

#define DEFAULT_THREADS 4

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

static void *worker(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        weft__pjob *pj = pool.head;
        if (!pj) {
            if (pool.stopping)
                break;
            pthread_cond_wait(&pool.cond, &pool.lock);
            continue;
        }
        pool.head = pj->next;
        if (!pool.head)
            pool.tail = NULL;
        pthread_mutex_unlock(&pool.lock);
        pj->run(pj); /* the job is not touched after this */
        pthread_mutex_lock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
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

/* In a child of fork() the workers do not exist: forget them (and a lock
 * one of them may have held), so the child starts a pool of its own. Jobs
 * queued by the parent's fibers are the parent's business. */
static void atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    pool.lock = fresh;
    pool.cond = fresh_cond;
    pool.head = pool.tail = NULL;
    pool.threads = NULL; /* the array is the parent's: leaked in the child */
    pool.nthreads = 0;
    pool.running = pool.stopping = false;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void)
{
    (void)pthread_atfork(NULL, NULL, atfork_child);
}

/* Called with pool.lock held. */
static int start_locked(unsigned n)
{
    if (pool.running)
        return -EALREADY;
    pthread_once(&atfork_once, atfork_register);
    pool.threads = calloc(n, sizeof *pool.threads);
    if (!pool.threads)
        return -ENOMEM;
    pool.stopping = false;
    unsigned i;
    for (i = 0; i < n; i++)
        if (pthread_create(&pool.threads[i], NULL, worker, NULL) != 0)
            break;
    if (i == 0) {
        free(pool.threads);
        pool.threads = NULL;
        return -EAGAIN;
    }
    pool.nthreads = i;
    pool.running = true;
    return 0;
}

int weft_offload_start(unsigned nthreads)
{
    if (nthreads < 1 || nthreads > 256)
        return -EINVAL;
    pthread_mutex_lock(&pool.lock);
    int rc = start_locked(nthreads);
    pthread_mutex_unlock(&pool.lock);
    return rc;
}

void weft_offload_shutdown(void)
{
    pthread_mutex_lock(&pool.lock);
    if (!pool.running || pool.stopping) {
        pthread_mutex_unlock(&pool.lock);
        return;
    }
    pool.stopping = true;
    pthread_cond_broadcast(&pool.cond);
    pthread_t *threads = pool.threads;
    unsigned n = pool.nthreads;
    pthread_mutex_unlock(&pool.lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_lock(&pool.lock);
    free(threads);
    pool.threads = NULL;
    pool.nthreads = 0;
    pool.running = false;
    pool.stopping = false;
    pthread_mutex_unlock(&pool.lock);
}

/* Queue @pj, starting the pool if needed. Called with pool.lock held. */
static int submit_locked(weft__pjob *pj)
{
    int rc;
    if (pool.stopping)
        return -EAGAIN;
    if (!pool.running && (rc = start_locked(DEFAULT_THREADS)) < 0)
        return rc;
    pj->next = NULL;
    if (pool.tail)
        pool.tail->next = pj;
    else
        pool.head = pj;
    pool.tail = pj;
    pthread_cond_signal(&pool.cond);
    return 0;
}

int weft__pool_submit(weft__pjob *pj)
{
    pthread_mutex_lock(&pool.lock);
    int rc = submit_locked(pj);
    pthread_mutex_unlock(&pool.lock);
    return rc;
}

/* ---- a job that completes a reactor wait ------------------------------ */

static void rjob_done(void *p)
{
    weft__rjob *j = p;
    j->done = true;
    weft__wait_complete(j->w, 0);
}

static void rjob_run(weft__pjob *pj)
{
    weft__rjob *j = (weft__rjob *)pj;
    j->fn(j->arg);
    j->post.fn = rjob_done;
    j->post.arg = j;
    j->post.embedded = true;
    weft__reactor_post_node(j->r, &j->post);
}

int weft__rjob_submit(weft__rjob *j, weft__reactor *r, weft__wait *w,
                      void (*fn)(void *), void *arg)
{
    j->pj.run = rjob_run;
    j->r = r;
    j->w = w;
    j->fn = fn;
    j->arg = arg;
    j->done = false;
    return weft__pool_submit(&j->pj);
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
    int rc = weft__precheck(deadline);
    if (rc < 0)
        return rc;
    if (!fn)
        return -EINVAL;
    if (deadline != WEFT_FOREVER && deadline <= weft_now())
        return -ETIMEDOUT;
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
        pthread_mutex_lock(&pool.lock);
        rc = submit_locked(&j->pj);
        pthread_mutex_unlock(&pool.lock);
    }
    if (rc < 0) {
        weft__wait_complete(&j->w, rc);
        free(j);
        return rc;
    }
    *submitted = true;

    rc = weft__block(&j->w);
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
