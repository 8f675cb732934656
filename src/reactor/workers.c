/*
 * workers.c — a process-wide pool of worker threads for blocking work.
 *
 * The pool knows nothing of fibers: it runs weft__pjob's, and a job hands
 * its result back itself, typically by posting to a reactor. Two kinds are
 * built on it: weft__rjob (below), which completes a reactor wait that its
 * owner keeps until the job is done (the Ruby extension's file reads), and
 * weft_offload()'s job (offload.c, the fiber layer), which a C fiber may
 * give up on. Workers start on first use (or weft_offload_start) and block
 * every signal.
 */
#include "workers.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>

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
    /* Workers block every signal (they inherit the mask they are created
     * with): a signal sent to the process must reach a thread of the
     * program's, never run its default action on a worker because the
     * program blocked it only in its own threads (weft_signal_open()). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    unsigned i;
    for (i = 0; i < n; i++)
        if (pthread_create(&pool.threads[i], NULL, worker, NULL) != 0)
            break;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
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
    j->post = (weft__post){.fn = rjob_done, .arg = j, .embedded = true};
    weft__reactor_post_node(j->r, &j->post);
}

int weft__rjob_submit(weft__rjob *j, weft__reactor *r, weft__wait *w,
                      void (*fn)(void *), void *arg)
{
    *j = (weft__rjob){.pj.run = rjob_run, .r = r, .w = w, .fn = fn, .arg = arg};
    return weft__pool_submit(&j->pj);
}

