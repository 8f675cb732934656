/* Fiber-local storage: values are per fiber, destructors run at exit. */
#include "harness.h"

static weft_fls_key_t k1, k2;
static int destroyed[8];

static void dtor(void *v) { destroyed[(long)v]++; }

static void *worker(void *arg)
{
    long id = (long)arg;
    CHECK(weft_fls_get(k1) == NULL);
    CHECK_EQ(weft_fls_set(k1, (void *)id), 0);
    CHECK_EQ(weft_fls_set(k2, (void *)(id + 100)), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK(weft_fls_get(k1) == (void *)id);
    CHECK(weft_fls_get(k2) == (void *)(id + 100));
    return NULL;
}

static void *cleared(void *arg)
{
    CHECK_EQ(weft_fls_set(k1, (void *)5), 0);
    CHECK_EQ(weft_fls_set(k1, NULL), 0); /* cleared: no destructor call */
    return arg;
}

static void *body(void *arg)
{
    weft_fiber_t f[4];
    for (long i = 1; i <= 4; i++)
        CHECK_EQ(weft_spawn(worker, (void *)i, NULL, &f[i - 1]), 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    for (int i = 1; i <= 4; i++)
        CHECK_EQ(destroyed[i], 1); /* k1's destructor, once each */
    CHECK_EQ(weft_spawn(cleared, NULL, NULL, &f[0]), 0);
    CHECK_EQ(weft_join(f[0], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(destroyed[5], 0);
    CHECK_EQ(weft_fls_set(9999, NULL), -EINVAL);
    CHECK(weft_fls_get(9999) == NULL);
    return arg;
}

int main(void)
{
    h_begin("fls");
    CHECK_EQ(weft_fls_key_create(&k1, dtor), 0);
    CHECK_EQ(weft_fls_key_create(&k2, NULL), 0);
    CHECK(k1 != k2);
    CHECK_EQ(weft_fls_key_create(NULL, NULL), -EINVAL);
    CHECK_EQ(weft_fls_set(k1, (void *)1), -EPERM); /* not in a fiber */
    CHECK(weft_fls_get(k1) == NULL);
    h_run(body, NULL);
    /* keys run out cleanly */
    weft_fls_key_t k;
    int rc = 0, made = 2;
    while ((rc = weft_fls_key_create(&k, NULL)) == 0)
        made++;
    CHECK_EQ(rc, -EAGAIN);
    CHECK_EQ(made, WEFT_FLS_MAX);
    return h_end();
}
