/*
 * future_then — a future of v turned into (2v+1)^2 by three then() steps.
 *
 *   build/examples/future_then [v]      prints "v=3 -> (2v+1)^2 = 49"
 *
 * The promise is set by another fiber after a short sleep; the steps run on
 * the loop as soon as it is set, and main() awaits the end of the chain.
 */
#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int times_two(void *arg, void *v, void **out)
{
    (void)arg;
    *out = (void *)((intptr_t)v * 2);
    return 0;
}

static int plus_one(void *arg, void *v, void **out)
{
    (void)arg;
    *out = (void *)((intptr_t)v + 1);
    return 0;
}

static int square(void *arg, void *v, void **out)
{
    (void)arg;
    *out = (void *)((intptr_t)v * (intptr_t)v);
    return 0;
}

static intptr_t input = 3;

static void *producer(void *arg)
{
    weft_promise_t *p = arg;
    weft_sleep(1000000); /* 1 ms of "work" */
    weft_promise_set_value(p, (void *)input);
    weft_promise_release(p);
    return NULL;
}

static void *main_fiber(void *arg)
{
    (void)arg;
    weft_promise_t *p;
    if (weft_promise_create(&p) < 0)
        return (void *)1;
    weft_future_t *f = weft_promise_future(p);
    f = weft_then(f, times_two, NULL); /* each then consumes its input */
    f = weft_then(f, plus_one, NULL);
    f = weft_then(f, square, NULL);
    if (!f || weft_spawn(producer, p, NULL, NULL) < 0)
        return (void *)1;
    void *v;
    int rc = weft_future_get(f, &v, weft_deadline_in(1000000000));
    weft_future_release(f);
    if (rc < 0) {
        fprintf(stderr, "future failed: %d\n", rc);
        return (void *)1;
    }
    printf("v=%ld -> (2v+1)^2 = %ld\n", (long)input, (long)(intptr_t)v);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        input = atol(argv[1]);
    void *res;
    if (weft_run(main_fiber, NULL, &res) < 0 || res)
        return 1;
    return 0;
}
