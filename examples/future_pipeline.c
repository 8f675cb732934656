/*
 * future_pipeline — a three-stage chain where every stage returns a future:
 *
 *   get a key  ->  load the value for that key  ->  send it on
 *
 *   build/examples/future_pipeline
 *
 * - get_key: a fiber of this loop produces the key after a short wait.
 * - load_value: a callback-style "storage" API running on its own thread,
 *   adapted to a future with weft_future_from_callback(); its completion
 *   comes from that thread and is delivered on this loop.
 * - send_on: a fiber writes the value into a pipe; the future settles with
 *   the number of bytes written. main reads the pipe and prints the line.
 * Any error (unknown key, a failed write) skips the later stages.
 */
#include "weft.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pipefd[2];

/* ---- stage 1: get a key ---- */
static void *key_fiber(void *arg)
{
    weft_promise_t *p = arg;
    weft_sleep(500000);
    weft_promise_set_value(p, (void *)"user:42");
    weft_promise_release(p);
    return NULL;
}

static weft_future_t *get_key(void)
{
    weft_promise_t *p;
    if (weft_promise_create(&p) < 0)
        return NULL;
    weft_future_t *f = weft_promise_future(p);
    if (weft_spawn(key_fiber, p, NULL, NULL) < 0) {
        weft_promise_set_error(p, -ENOMEM);
        weft_promise_release(p);
    }
    return f;
}

/* ---- stage 2: load the value (a callback API on another thread) ---- */
struct storage_req {
    char key[32];
    weft_done_fn done;
    void *done_arg;
};

static void *storage_thread(void *arg)
{
    struct storage_req *r = arg;
    usleep(1000); /* a slow lookup */
    if (!strcmp(r->key, "user:42"))
        r->done(r->done_arg, 0, (void *)"Ada Lovelace");
    else
        r->done(r->done_arg, -ENOENT, NULL);
    free(r);
    return NULL;
}

/* The callback-style API being adapted: storage_get(key, done, done_arg). */
static int storage_start(void *key, weft_done_fn done, void *done_arg)
{
    struct storage_req *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    snprintf(r->key, sizeof r->key, "%s", (const char *)key);
    r->done = done;
    r->done_arg = done_arg;
    pthread_t t;
    if (pthread_create(&t, NULL, storage_thread, r) != 0) {
        free(r);
        return -EAGAIN;
    }
    pthread_detach(t);
    return 0;
}

static weft_future_t *load_value(void *arg, void *key)
{
    (void)arg;
    printf("stage 1: key   = %s\n", (const char *)key);
    return weft_future_from_callback(storage_start, key);
}

/* ---- stage 3: send it on ---- */
struct send_job {
    weft_promise_t *p;
    const char *value;
};

static void *send_fiber(void *arg)
{
    struct send_job *j = arg;
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", j->value);
    size_t done = 0;
    int rc = weft_write_all(pipefd[1], line, (size_t)n, &done, WEFT_FOREVER);
    if (rc < 0)
        weft_promise_set_error(j->p, rc);
    else
        weft_promise_set_value(j->p, (void *)(intptr_t)done);
    weft_promise_release(j->p);
    free(j);
    return NULL;
}

static weft_future_t *send_on(void *arg, void *value)
{
    (void)arg;
    printf("stage 2: value = %s\n", (const char *)value);
    struct send_job *j = malloc(sizeof *j);
    if (!j || weft_promise_create(&j->p) < 0) {
        free(j);
        return NULL; /* the chain fails with -ENOMEM */
    }
    j->value = value;
    weft_future_t *f = weft_promise_future(j->p);
    if (weft_spawn(send_fiber, j, NULL, NULL) < 0) {
        weft_promise_set_error(j->p, -ENOMEM);
        weft_promise_release(j->p);
        free(j);
    }
    return f;
}

static void *main_fiber(void *arg)
{
    (void)arg;
    if (weft_pipe(pipefd) < 0)
        return (void *)1;
    weft_future_t *f = get_key();
    f = weft_then_future(f, load_value, NULL);
    f = weft_then_future(f, send_on, NULL);
    void *sent;
    int rc = weft_future_get(f, &sent, weft_deadline_in(5000000000LL));
    weft_future_release(f);
    if (rc == 0) {
        char buf[128];
        ssize_t n = weft_read(pipefd[0], buf, sizeof buf - 1, WEFT_FOREVER);
        buf[n > 0 ? n : 0] = 0;
        printf("stage 3: sent %ld bytes; the reader got: %s",
               (long)(intptr_t)sent, buf);
    } else {
        fprintf(stderr, "pipeline failed: %s\n", strerror(-rc));
    }
    weft_close(pipefd[0]);
    weft_close(pipefd[1]);
    return rc == 0 ? NULL : (void *)1;
}

int main(void)
{
    void *res;
    if (weft_run(main_fiber, NULL, &res) < 0 || res)
        return 1;
    return weft_sched_destroy(weft_sched_self()) == 0 ? 0 : 1;
}
