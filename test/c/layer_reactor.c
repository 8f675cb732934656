/*
 * layer_reactor — the reactor layer on its own: this program is linked
 * with libweft_reactor.a only (the reactor, its timers and backends, the
 * worker pool), so it does not link if that layer calls up into the fiber
 * layer (scheduler, stacks, context switch, fiber I/O). It drives the
 * reactor the way a client that is not a C fiber does (the Ruby
 * extension): waits with a readiness part, a deadline part, a completion
 * op where the backend has them, a post from another thread, a job on the
 * worker pool — each completed through its wake function, with no fiber
 * anywhere. WEFT_BACKEND picks the backend. scripts/test.d/layers.sh
 * builds and runs it on every backend.
 */
#include "reactor.h"
#include "workers.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #c);                                                      \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static int woken;
static void wake(weft__wait *w)
{
    (void)w;
    woken++;
}

/* Run the loop until @w has completed. */
static void run_until(weft__reactor *r, weft__wait *w)
{
    while (w->active)
        CHECK(weft__reactor_run_once(r, true) == 0);
}

static int post_seen;
static void posted(void *arg) { *(int *)arg = 1; }

static void *poster(void *arg)
{
    usleep(1000);
    CHECK(weft__reactor_post(arg, posted, &post_seen) == 0);
    return NULL;
}

static void job_fn(void *arg) { *(int *)arg = 42; }

int main(void)
{
    weft__reactor r;
    CHECK(weft__reactor_init(&r, WEFT_BACKEND_DEFAULT) == 0);
    printf("layer_reactor: backend %s\n", r.ops->name);

    /* A deadline. */
    weft__wait w;
    weft__wait_init(&w, &r, wake, NULL);
    CHECK(weft__wait_arm_deadline(&w, weft_deadline_in(2000000)) == 0);
    run_until(&r, &w);
    CHECK(w.result == -ETIMEDOUT && woken == 1);

    /* Readiness of a pipe, then its completion op where there are any. */
    int p[2];
    CHECK(pipe(p) == 0);
    weft__wait_init(&w, &r, wake, NULL);
    CHECK(weft__wait_arm_fd(&w, p[0], WEFT_READABLE) == 0);
    CHECK(write(p[1], "x", 1) == 1);
    run_until(&r, &w);
    CHECK(w.result > 0 && (w.result & WEFT_READABLE));
    char c = 0;
    if (weft__reactor_has_ops(&r)) {
        weft__opdesc d = {.op = WEFT__OP_READ, .fd = p[0], .buf = &c, .len = 1, .off = -1};
        weft__wait_init(&w, &r, wake, NULL);
        CHECK(weft__op_start(&w, &d, WEFT_FOREVER) == 0);
        run_until(&r, &w);
        CHECK(!weft__op_pending(&w));
        CHECK(weft__op_result(&w, w.result) == 1 && c == 'x');
        /* An op cut short by its deadline: re-armed, then its completion. */
        weft__wait_init(&w, &r, wake, NULL);
        CHECK(weft__op_start(&w, &d, weft_deadline_in(1000000)) == 0);
        run_until(&r, &w);
        int why = w.result;
        CHECK(why == -ETIMEDOUT);
        while (weft__op_pending(&w)) {
            weft__op_rearm(&w);
            run_until(&r, &w);
        }
        CHECK(weft__op_result(&w, why) == -ETIMEDOUT);
    } else {
        CHECK(read(p[0], &c, 1) == 1 && c == 'x');
    }
    close(p[0]);
    close(p[1]);
    weft__reactor_fd_close(&r, p[0], -EBADF);

    /* A post from another thread wakes a sleeping poll. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, poster, &r) == 0);
    while (!post_seen)
        CHECK(weft__reactor_run_once(&r, true) == 0);
    CHECK(pthread_join(t, NULL) == 0);

    /* The worker pool completes a wait. */
    int out = 0;
    weft__rjob job;
    weft__wait_init(&w, &r, wake, NULL);
    CHECK(weft__rjob_submit(&job, &r, &w, job_fn, &out) == 0);
    run_until(&r, &w);
    CHECK(job.done && out == 42);

    CHECK(r.nwaits == 0 && weft__reactor_timers(&r) == 0 && r.ops_inflight == 0);
    weft__reactor_fini(&r);
    printf("PASS layer_reactor [%s]\n", getenv("WEFT_BACKEND") ? getenv("WEFT_BACKEND") : "default");
    return 0;
}
