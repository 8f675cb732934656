/*
 * t_cancel_race — weft_cancel() landing while the operation a fiber waits
 * on completes (weft.h, "Cancel"): the call returns either -ECANCELED, and
 * then the kernel did not carry the operation out (the bytes are still in
 * the socket, the connection still in the accept queue), or the result,
 * and then the fiber's next blocking call returns -ECANCELED. Nothing is
 * lost either way, on every backend; both outcomes happen over the rounds
 * (the data and the cancel are made to land in one loop turn).
 */
#include "harness.h"

#include <sys/socket.h>

#define ROUNDS 600

typedef struct {
    int fd;
    ssize_t got;       /* first call's result                              */
    int next;          /* second blocking call's result                    */
    char buf[64];
} reader;

static void *read_once(void *arg)
{
    reader *r = arg;
    r->got = weft_read(r->fd, r->buf, sizeof r->buf, WEFT_FOREVER);
    r->next = weft_park(WEFT_FOREVER); /* the cancel lands, now or before */
    return NULL;
}

static void *accept_once(void *arg)
{
    reader *r = arg;
    r->got = weft_accept(r->fd, NULL, NULL, WEFT_FOREVER);
    r->next = weft_park(WEFT_FOREVER);
    return NULL;
}

static void reads(void)
{
    H_CASE("a read cancelled as its bytes arrive");
    int a, b;
    h_tcp_pair(&a, &b);
    long results = 0, cancels = 0;
    for (int i = 0; i < ROUNDS; i++) {
        reader r = {.fd = a};
        weft_fiber_t f;
        CHECK_EQ(weft_spawn(read_once, &r, NULL, &f), 0);
        CHECK_EQ(weft_yield(), 0); /* it waits now */
        char msg[8];
        snprintf(msg, sizeof msg, "m%05d", i);
        /* Vary where the cancel lands: right after the bytes (in one loop
         * turn), after the loop has seen them, or just before them. */
        if (i % 3 == 2)
            CHECK_EQ(weft_cancel(f), 0);
        CHECK_EQ(weft_write(b, msg, 6, WEFT_FOREVER), 6);
        if (i % 3 == 1)
            CHECK_EQ(weft_sleep(200000), 0); /* the loop polls, the reader reads */
        if (i % 3 != 2)
            CHECK_EQ(weft_cancel(f), 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
        if (r.got > 0) {
            /* Carried out: the bytes are the caller's, the next call says
             * it was cancelled. */
            CHECK_EQ(r.got, 6);
            CHECK(memcmp(r.buf, msg, 6) == 0);
            CHECK_EQ(r.next, -ECANCELED);
            results++;
        } else {
            /* Not carried out: the bytes are still there. */
            CHECK_EQ(r.got, -ECANCELED);
            char again[8];
            CHECK_EQ(weft_read(a, again, sizeof again, weft_deadline_in(WEFT_SEC)), 6);
            CHECK(memcmp(again, msg, 6) == 0);
            cancels++;
        }
    }
    printf("reads: %ld returned their bytes, %ld were cancelled before\n", results, cancels);
    CHECK(results > 0 && cancels > 0); /* both outcomes were exercised */
    CHECK_EQ(weft_close(a), 0);
    CHECK_EQ(weft_close(b), 0);
}

static void accepts(void)
{
    H_CASE("an accept cancelled as its connection arrives");
    int l = weft_tcp_listen("127.0.0.1", 0, 64, 0);
    CHECK(l >= 0);
    int port = weft_local_port(l);
    for (int i = 0; i < ROUNDS / 6; i++) {
        reader r = {.fd = l};
        weft_fiber_t f;
        CHECK_EQ(weft_spawn(accept_once, &r, NULL, &f), 0);
        CHECK_EQ(weft_yield(), 0);
        if (i % 3 == 2)
            CHECK_EQ(weft_cancel(f), 0);
        int c = weft_tcp_connect("127.0.0.1", port, weft_deadline_in(WEFT_SEC));
        CHECK(c >= 0);
        if (i % 3 == 1)
            CHECK_EQ(weft_sleep(200000), 0);
        if (i % 3 != 2)
            CHECK_EQ(weft_cancel(f), 0);
        CHECK_EQ(weft_join(f, NULL, WEFT_FOREVER), 0);
        int a = (int)r.got;
        if (a >= 0) {
            CHECK_EQ(r.next, -ECANCELED);
        } else {
            CHECK_EQ(a, -ECANCELED);
            a = weft_accept(l, NULL, NULL, weft_deadline_in(WEFT_SEC)); /* still queued */
            CHECK(a >= 0);
        }
        /* It is this connection: one byte goes through. */
        CHECK_EQ(weft_write(c, "z", 1, WEFT_FOREVER), 1);
        char z;
        CHECK_EQ(weft_read(a, &z, 1, weft_deadline_in(WEFT_SEC)), 1);
        CHECK_EQ(z, 'z');
        CHECK_EQ(weft_close(a), 0);
        CHECK_EQ(weft_close(c), 0);
    }
    CHECK_EQ(weft_close(l), 0);
}

static void *body(void *arg)
{
    reads();
    accepts();
    return arg;
}

int main(void)
{
    h_begin("t_cancel_race");
    h_run(body, NULL);
    return h_end();
}
