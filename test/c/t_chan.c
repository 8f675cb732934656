/* Channels: unbuffered rendezvous, buffered FIFO, close, select with a
 * deadline, FIFO among waiters, cancellation while waiting, destroy with
 * waiters. */
#include "harness.h"

#define MS 1000000LL

static weft_chan_t *ping, *pong;

static void *ponger(void *arg)
{
    (void)arg;
    int v;
    while (weft_chan_recv(ping, &v, WEFT_FOREVER) == 0)
        CHECK_EQ(weft_chan_send(pong, &(int){v + 1}, WEFT_FOREVER), 0);
    return NULL;
}

static void test_unbuffered(void)
{
    CHECK_EQ(weft_chan_create(&ping, sizeof(int), 0), 0);
    CHECK_EQ(weft_chan_create(&pong, sizeof(int), 0), 0);
    int v = 0;
    /* nobody receives: deadline 0 does not wait */
    CHECK_EQ(weft_chan_send(ping, &v, 0), -EAGAIN);
    CHECK_EQ(weft_chan_recv(ping, &v, weft_deadline_in(MS)), -ETIMEDOUT);
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(ponger, NULL, NULL, &f), 0);
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ(weft_chan_send(ping, &v, WEFT_FOREVER), 0);
        CHECK_EQ(weft_chan_recv(pong, &v, WEFT_FOREVER), 0);
    }
    CHECK_EQ(v, 1000);
    CHECK_EQ(weft_chan_close(ping), 0);
    CHECK_EQ(weft_chan_close(ping), -EALREADY);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_chan_send(ping, &v, WEFT_FOREVER), -EPIPE);
    CHECK_EQ(weft_chan_destroy(ping), 0);
    CHECK_EQ(weft_chan_destroy(pong), 0);
}

static weft_chan_t *bc;
static int got[16], ngot;

static void *receiver(void *arg)
{
    int v;
    int rc = weft_chan_recv(bc, &v, WEFT_FOREVER);
    if (rc == 0)
        got[ngot++] = v * 100 + (int)(long)arg;
    return (void *)(long)rc;
}

static void *sender(void *arg)
{
    int v = (int)(long)arg;
    return (void *)(long)weft_chan_send(bc, &v, WEFT_FOREVER);
}

static void test_buffered(void)
{
    CHECK_EQ(weft_chan_create(&bc, sizeof(int), 3), 0);
    for (int i = 1; i <= 3; i++)
        CHECK_EQ(weft_chan_send(bc, &i, 0), 0);
    CHECK_EQ(weft_chan_len(bc), 3);
    int x = 9;
    CHECK_EQ(weft_chan_send(bc, &x, 0), -EAGAIN); /* full */
    /* blocked senders queue FIFO behind the buffer */
    weft_fiber_t s[3];
    void *r;
    for (long i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(sender, (void *)(4 + i), NULL, &s[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(s[1]), 0); /* sender of 5 gives up */
    CHECK_EQ(weft_join(s[1], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    int expect[] = {1, 2, 3, 4, 6};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(weft_chan_recv(bc, &x, WEFT_FOREVER), 0);
        CHECK_EQ(x, expect[i]);
    }
    CHECK_EQ(weft_join(s[0], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    CHECK_EQ(weft_join(s[2], &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 0);
    /* receivers queue FIFO */
    weft_fiber_t rf[3];
    for (long i = 0; i < 3; i++)
        CHECK_EQ(weft_spawn(receiver, (void *)i, NULL, &rf[i]), 0);
    CHECK_EQ(weft_yield(), 0);
    for (int i = 7; i <= 8; i++)
        CHECK_EQ(weft_chan_send(bc, &i, WEFT_FOREVER), 0);
    /* close: buffered elements still drain, then -EPIPE */
    int nine = 9;
    CHECK_EQ(weft_chan_close(bc), 0);
    CHECK_EQ(weft_chan_send(bc, &nine, WEFT_FOREVER), -EPIPE);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_join(rf[i], &r, WEFT_FOREVER), 0);
        CHECK_EQ((long)r, i < 2 ? 0 : -EPIPE);
    }
    CHECK_EQ(ngot, 2);
    CHECK_EQ(got[0], 700);
    CHECK_EQ(got[1], 801);
    CHECK_EQ(weft_chan_recv(bc, &x, WEFT_FOREVER), -EPIPE);
    CHECK_EQ(weft_chan_destroy(bc), 0);
}

static void test_close_buffered_drain(void)
{
    CHECK_EQ(weft_chan_create(&bc, sizeof(int), 4), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(weft_chan_send(bc, &i, WEFT_FOREVER), 0);
    CHECK_EQ(weft_chan_close(bc), 0);
    int x;
    CHECK_EQ(weft_chan_recv(bc, &x, 0), 0);
    CHECK_EQ(x, 0);
    CHECK_EQ(weft_chan_recv(bc, NULL, 0), 0);
    CHECK_EQ(weft_chan_recv(bc, &x, 0), -EPIPE);
    CHECK_EQ(weft_chan_destroy(bc), 0);
}

static weft_chan_t *a, *b, *c;

static void *late_sender(void *arg)
{
    (void)arg;
    CHECK_EQ(weft_sleep(MS), 0);
    int v = 42;
    CHECK_EQ(weft_chan_send(b, &v, WEFT_FOREVER), 0);
    return NULL;
}

static void *selector(void *arg)
{
    (void)arg;
    int x, y;
    weft_chan_op_t ops[2] = {{a, WEFT_CHAN_RECV, &x, 0},
                             {b, WEFT_CHAN_RECV, &y, 0}};
    return (void *)(long)weft_chan_select(ops, 2, WEFT_FOREVER);
}

static void test_select(void)
{
    CHECK_EQ(weft_chan_create(&a, sizeof(int), 0), 0);
    CHECK_EQ(weft_chan_create(&b, sizeof(int), 0), 0);
    CHECK_EQ(weft_chan_create(&c, sizeof(int), 1), 0);
    int x = -1, y = -1, z = 5;
    weft_chan_op_t ops[3] = {{a, WEFT_CHAN_RECV, &x, 0},
                             {b, WEFT_CHAN_RECV, &y, 0},
                             {c, WEFT_CHAN_SEND, &z, 0}};
    /* only the buffered send is possible */
    CHECK_EQ(weft_chan_select(ops, 3, 0), 2);
    CHECK_EQ(ops[2].result, 0);
    /* nothing possible: deadline */
    CHECK_EQ(weft_chan_select(ops, 3, weft_deadline_in(MS)), -ETIMEDOUT);
    CHECK(a != NULL);
    /* blocks until a late sender on b */
    weft_fiber_t f;
    CHECK_EQ(weft_spawn(late_sender, NULL, NULL, &f), 0);
    CHECK_EQ(weft_chan_select(ops, 2, WEFT_FOREVER), 1);
    CHECK_EQ(y, 42);
    CHECK_EQ(x, -1);
    CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
    /* the select's other node must be gone: a send on a finds nobody */
    CHECK_EQ(weft_chan_send(a, &z, 0), -EAGAIN);
    /* several possible: the first in order wins */
    CHECK_EQ(weft_chan_recv(c, NULL, 0), 0);
    weft_chan_op_t two[2] = {{c, WEFT_CHAN_SEND, &z, 0},
                             {c, WEFT_CHAN_SEND, &z, 0}};
    CHECK_EQ(weft_chan_select(two, 2, 0), 0);
    /* closing a channel completes a select on it */
    CHECK_EQ(weft_spawn(selector, NULL, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_chan_close(b), 0);
    void *r;
    CHECK_EQ(weft_join(f, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, 1);
    /* cancellation while selecting */
    weft_chan_t *b2;
    CHECK_EQ(weft_chan_create(&b2, sizeof(int), 0), 0);
    weft_chan_t *old_b = b;
    b = b2;
    CHECK_EQ(weft_spawn(selector, NULL, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f), 0);
    CHECK_EQ(weft_join(f, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -ECANCELED);
    CHECK_EQ(weft_chan_send(a, &z, 0), -EAGAIN); /* node unlinked */
    /* destroy with a waiting select */
    CHECK_EQ(weft_spawn(selector, NULL, NULL, &f), 0);
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_chan_destroy(b2), 0);
    CHECK_EQ(weft_join(f, &r, WEFT_FOREVER), 0);
    CHECK_EQ((long)r, -EIDRM);
    CHECK_EQ(weft_chan_send(a, &z, 0), -EAGAIN); /* node on a unlinked */
    /* many ops (heap-allocated nodes) */
    weft_chan_op_t many[8];
    for (int i = 0; i < 8; i++)
        many[i] = (weft_chan_op_t){a, WEFT_CHAN_RECV, NULL, 0};
    CHECK_EQ(weft_chan_select(many, 8, weft_deadline_in(MS)), -ETIMEDOUT);
    CHECK_EQ(weft_chan_select(many, 0, 0), -EINVAL);
    CHECK_EQ(weft_chan_destroy(a), 0);
    CHECK_EQ(weft_chan_destroy(old_b), 0);
    CHECK_EQ(weft_chan_destroy(c), 0);
}

static void test_signal_chan(void)
{
    weft_chan_t *sig;
    CHECK_EQ(weft_chan_create(&sig, 0, 2), 0);
    CHECK_EQ(weft_chan_send(sig, NULL, 0), 0);
    CHECK_EQ(weft_chan_recv(sig, NULL, 0), 0);
    CHECK_EQ(weft_chan_recv(sig, NULL, 0), -EAGAIN);
    CHECK_EQ(weft_chan_destroy(sig), 0);
}

static void *body(void *arg)
{
    (void)arg;
    test_unbuffered();
    test_buffered();
    test_close_buffered_drain();
    test_select();
    test_signal_chan();
    return NULL;
}

int main(void)
{
    h_begin("chan");
    h_run(body, NULL);
    return h_end();
}
