/* Futures and promises on one loop: get/try-get/is-set, then-chains with
 * errors, then returning futures, any/all with mixed results, subscribe,
 * the callback adapter, broken promises, await deadlines and cancel. */
#include "harness.h"

#include <stdint.h>

#define MS 1000000LL
#define V(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

static int calls;

static int times2(void *arg, void *v, void **out) { (void)arg; calls++; *out = V(I(v) * 2); return 0; }
static int plus1(void *arg, void *v, void **out) { (void)arg; calls++; *out = V(I(v) + 1); return 0; }
static int square(void *arg, void *v, void **out) { (void)arg; calls++; *out = V(I(v) * I(v)); return 0; }
static int fail_io(void *arg, void *v, void **out) { (void)arg; (void)v; (void)out; calls++; return -EIO; }

static void test_basic(void)
{
    weft_promise_t *p;
    CHECK_EQ(weft_promise_create(&p), 0);
    weft_future_t *f = weft_promise_future(p);
    void *v = NULL;
    CHECK_EQ(weft_future_is_set(f), 0);
    CHECK_EQ(weft_promise_is_set(p), 0);
    CHECK_EQ(weft_future_try_get(f, &v), -EAGAIN);
    CHECK_EQ(weft_future_get(f, &v, weft_deadline_in(MS)), -ETIMEDOUT);
    CHECK_EQ(weft_future_get(f, &v, 0), -EAGAIN);
    CHECK_EQ(weft_promise_set_value(p, V(7)), 0);
    CHECK_EQ(weft_promise_set_value(p, V(8)), -EALREADY);
    CHECK_EQ(weft_promise_set_error(p, -EIO), -EALREADY);
    CHECK_EQ(weft_promise_try_set(p, 0, V(9)), 0);
    CHECK_EQ(weft_promise_is_set(p), 1);
    CHECK_EQ(weft_future_is_set(f), 1);
    CHECK_EQ(weft_future_try_get(f, &v), 0);
    CHECK_EQ(I(v), 7);
    CHECK_EQ(weft_future_get(f, &v, 0), 0);
    weft_promise_release(p);
    weft_future_release(f);

    /* error, try_set */
    CHECK_EQ(weft_promise_create(&p), 0);
    f = weft_promise_future(p);
    CHECK_EQ(weft_promise_set_error(p, 5), -EINVAL);
    CHECK_EQ(weft_promise_try_set(p, -ENOENT, NULL), 1);
    CHECK_EQ(weft_future_try_get(f, &v), -ENOENT);
    CHECK_EQ(weft_future_get(f, &v, WEFT_FOREVER), -ENOENT);
    weft_promise_release(p);
    weft_future_release(f);

    /* broken promise */
    CHECK_EQ(weft_promise_create(&p), 0);
    f = weft_promise_future(p);
    weft_promise_release(p);
    CHECK_EQ(weft_future_try_get(f, &v), -EPIPE);
    weft_future_release(f);
}

static weft_promise_t *gp;

static void *setter(void *arg)
{
    CHECK_EQ(weft_sleep(MS), 0);
    CHECK_EQ(weft_promise_set_value(gp, arg), 0);
    return NULL;
}

static void *awaiter(void *arg)
{
    weft_future_t *f = arg;
    void *v;
    int rc = weft_future_get(f, &v, WEFT_FOREVER);
    return rc == 0 ? v : V(rc);
}

static void test_await(void)
{
    CHECK_EQ(weft_promise_create(&gp), 0);
    weft_future_t *f = weft_promise_future(gp);
    weft_fiber_t s, w[3];
    CHECK_EQ(weft_spawn(setter, V(11), NULL, &s), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(awaiter, f, NULL, &w[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(w[1]), 0); /* cancelled while awaiting */
    void *r;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_join(w[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ(I(r), i == 1 ? -ECANCELED : 11);
    }
    CHECK_EQ(weft_join(s, NULL, WEFT_FOREVER), 0);
    weft_promise_release(gp);
    weft_future_release(f);
}

static void test_then(void)
{
    /* (2v+1)^2 with three then steps */
    weft_promise_t *p;
    CHECK_EQ(weft_promise_create(&p), 0);
    weft_future_t *f = weft_promise_future(p);
    f = weft_then(f, times2, NULL);
    f = weft_then(f, plus1, NULL);
    f = weft_then(f, square, NULL);
    CHECK(f != NULL);
    calls = 0;
    CHECK_EQ(weft_promise_set_value(p, V(3)), 0);
    void *v;
    CHECK_EQ(weft_future_get(f, &v, WEFT_FOREVER), 0);
    CHECK_EQ(I(v), 49);
    CHECK_EQ(calls, 3);
    weft_future_release(f);
    weft_promise_release(p);

    /* then on an already-settled future runs at once */
    f = weft_then(weft_future_ready(V(1)), plus1, NULL);
    CHECK_EQ(weft_future_try_get(f, &v), 0);
    CHECK_EQ(I(v), 2);
    weft_future_release(f);

    /* an error in the middle skips the later steps */
    calls = 0;
    f = weft_future_ready(V(5));
    f = weft_then(f, times2, NULL);
    f = weft_then(f, fail_io, NULL);
    f = weft_then(f, plus1, NULL);
    f = weft_then(f, square, NULL);
    CHECK_EQ(weft_future_try_get(f, &v), -EIO);
    CHECK_EQ(calls, 2);
    weft_future_release(f);

    /* an error at the source skips them all */
    calls = 0;
    f = weft_then(weft_then(weft_future_failed(-EACCES), plus1, NULL),
                  square, NULL);
    CHECK_EQ(weft_future_try_get(f, &v), -EACCES);
    CHECK_EQ(calls, 0);
    weft_future_release(f);
    CHECK(weft_future_failed(3) == NULL);
    CHECK(weft_then(weft_future_ready(NULL), NULL, NULL) == NULL);

    /* a long chain: delivery nests, then is deferred to the loop */
    CHECK_EQ(weft_promise_create(&p), 0);
    f = weft_promise_future(p);
    for (int i = 0; i < 10000; i++)
        f = weft_then(f, plus1, NULL);
    CHECK_EQ(weft_promise_set_value(p, V(0)), 0);
    CHECK_EQ(weft_future_get(f, &v, WEFT_FOREVER), 0);
    CHECK_EQ(I(v), 10000);
    weft_future_release(f);
    weft_promise_release(p);
}

/* then returning futures: get a key -> load value -> send it on */
static weft_promise_t *pending_load;

static weft_future_t *load_later(void *arg, void *key)
{
    (void)arg;
    CHECK_EQ(weft_promise_create(&pending_load), 0);
    (void)key;
    return weft_promise_future(pending_load);
}

static weft_future_t *double_now(void *arg, void *v)
{
    (void)arg;
    return weft_future_ready(V(I(v) * 2));
}

static weft_future_t *failing(void *arg, void *v)
{
    (void)arg;
    (void)v;
    return weft_future_failed(-ENOENT);
}

static void test_then_future(void)
{
    weft_future_t *f = weft_then_future(weft_future_ready(V(4)), double_now, NULL);
    f = weft_then_future(f, load_later, NULL);
    f = weft_then(f, plus1, NULL);
    void *v;
    CHECK_EQ(weft_future_try_get(f, &v), -EAGAIN);
    CHECK(pending_load != NULL);
    CHECK_EQ(weft_promise_set_value(pending_load, V(100)), 0);
    weft_promise_release(pending_load);
    CHECK_EQ(weft_future_get(f, &v, WEFT_FOREVER), 0);
    CHECK_EQ(I(v), 101);
    weft_future_release(f);

    f = weft_then_future(weft_future_ready(V(4)), failing, NULL);
    f = weft_then_future(f, double_now, NULL);
    CHECK_EQ(weft_future_try_get(f, &v), -ENOENT);
    weft_future_release(f);
}

static void test_any_all(void)
{
    weft_promise_t *p[3];
    weft_future_t *f[3];
    void *v;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_promise_create(&p[i]), 0);
        f[i] = weft_promise_future(p[i]);
    }
    weft_future_t *any = weft_future_any(f, 3);
    weft_future_t *all = weft_future_all(f, 3);
    CHECK_EQ(weft_future_try_get(any, &v), -EAGAIN);
    CHECK_EQ(weft_promise_set_error(p[1], -EIO), 0); /* first: a failure */
    CHECK_EQ(weft_future_try_get(any, &v), -EIO);
    CHECK_EQ(weft_future_try_get(all, &v), -EAGAIN);
    CHECK_EQ(weft_promise_set_value(p[0], V(1)), 0);
    CHECK_EQ(weft_future_try_get(any, &v), -EIO); /* the winner stays */
    CHECK_EQ(weft_promise_set_error(p[2], -ENOENT), 0);
    CHECK_EQ(weft_future_get(all, &v, WEFT_FOREVER), -EIO); /* first error */
    CHECK_EQ(weft_future_try_get(f[0], &v), 0); /* inputs still readable */
    CHECK_EQ(I(v), 1);
    weft_future_release(any);
    weft_future_release(all);
    for (int i = 0; i < 3; i++) {
        weft_promise_release(p[i]);
        weft_future_release(f[i]);
    }

    /* any: a success first; all: every one succeeds */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_promise_create(&p[i]), 0);
        f[i] = weft_promise_future(p[i]);
    }
    any = weft_future_any(f, 3);
    all = weft_future_all(f, 3);
    CHECK_EQ(weft_promise_set_value(p[2], V(22)), 0);
    CHECK_EQ(weft_future_get(any, &v, WEFT_FOREVER), 0);
    CHECK_EQ(I(v), 22);
    CHECK_EQ(weft_promise_set_value(p[0], V(20)), 0);
    CHECK_EQ(weft_future_try_get(all, &v), -EAGAIN);
    CHECK_EQ(weft_promise_set_value(p[1], V(21)), 0);
    CHECK_EQ(weft_future_get(all, &v, 0), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_future_try_get(f[i], &v), 0);
        CHECK_EQ(I(v), 20 + i);
        weft_promise_release(p[i]);
        weft_future_release(f[i]);
    }
    weft_future_release(any);
    weft_future_release(all);

    /* empty inputs */
    all = weft_future_all(NULL, 0);
    CHECK_EQ(weft_future_try_get(all, &v), 0);
    weft_future_release(all);
    any = weft_future_any(NULL, 0);
    CHECK_EQ(weft_future_try_get(any, &v), -EINVAL);
    weft_future_release(any);
}

static int order[8], norder;

static void on_done(void *arg, int err, void *value)
{
    order[norder++] = (int)I(arg) * 1000 + (err ? -err : (int)I(value));
}

/* A fake callback API that completes later, from a fiber. */
typedef struct fake_req {
    weft_done_fn done;
    void *done_arg;
    int err;
} fake_req;

static void *fake_worker(void *p)
{
    fake_req *r = p;
    CHECK_EQ(weft_sleep(MS), 0);
    r->done(r->done_arg, r->err, r->err ? NULL : V(77));
    return NULL;
}

static int fake_start(void *arg, weft_done_fn done, void *done_arg)
{
    fake_req *r = arg;
    if (r->err == -EBADF)
        return -EBADF; /* synchronous failure */
    r->done = done;
    r->done_arg = done_arg;
    return weft_spawn(fake_worker, r, NULL, NULL);
}

static void test_subscribe_adapter(void)
{
    weft_promise_t *p;
    CHECK_EQ(weft_promise_create(&p), 0);
    weft_future_t *f = weft_promise_future(p);
    CHECK_EQ(weft_future_subscribe(f, on_done, V(1)), 0);
    CHECK_EQ(weft_future_subscribe(f, on_done, V(2)), 0);
    CHECK_EQ(norder, 0);
    CHECK_EQ(weft_promise_set_value(p, V(5)), 0);
    CHECK_EQ(weft_future_subscribe(f, on_done, V(3)), 0); /* runs inline */
    CHECK_EQ(norder, 3);
    CHECK_EQ(order[0], 1005);
    CHECK_EQ(order[1], 2005);
    CHECK_EQ(order[2], 3005);
    weft_promise_release(p);
    weft_future_release(f);

    fake_req ok = {0}, bad = {0}, sync_bad = {0};
    bad.err = -ETIMEDOUT;
    sync_bad.err = -EBADF;
    weft_future_t *a = weft_future_from_callback(fake_start, &ok);
    weft_future_t *b = weft_future_from_callback(fake_start, &bad);
    weft_future_t *c = weft_future_from_callback(fake_start, &sync_bad);
    void *v;
    CHECK_EQ(weft_future_try_get(c, &v), -EBADF);
    CHECK_EQ(weft_future_get(a, &v, WEFT_FOREVER), 0);
    CHECK_EQ(I(v), 77);
    CHECK_EQ(weft_future_get(b, &v, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_future_is_set(b), 1);
    weft_future_release(a);
    weft_future_release(b);
    weft_future_release(c);
}

static void *body(void *arg)
{
    (void)arg;
    test_basic();
    test_await();
    test_then();
    test_then_future();
    test_any_all();
    test_subscribe_adapter();
    return NULL;
}

int main(void)
{
    h_begin("future");
    h_run(body, NULL);
    return h_end();
}
