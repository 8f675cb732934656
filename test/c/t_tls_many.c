/* 1,000 concurrent TLS connections between weft fibers of one thread:
 * every client completes its handshake and a round trip, and all of them
 * are open at the same time before any closes. */
#include "tls_util.h"

#define N 1000

static tls_pki pki;
static weft_tls_ctx_t *sctx, *cctx;
static int port;
static weft_waitgroup_t all_up = WEFT_WAITGROUP_INIT;
static int open_now, open_max, served, clients_ok;

static void *server_conn(void *arg)
{
    int fd = (int)(long)arg;
    weft_tls_t *t;
    int rc = weft_tls_accept(&t, sctx, fd, weft_deadline_in(60 * TLS_SEC));
    if (rc < 0)
        fprintf(stderr, "accept: %s\n", weft_tls_error_string(NULL));
    CHECK_EQ(rc, 0);
    if (++open_now > open_max)
        open_max = open_now;
    char buf[64];
    ssize_t n = weft_tls_read(t, buf, sizeof buf, weft_deadline_in(60 * TLS_SEC));
    CHECK(n > 0);
    CHECK_EQ(weft_tls_write_all(t, buf, (size_t)n, NULL, weft_deadline_in(60 * TLS_SEC)), 0);
    /* Until the client ends its stream. */
    CHECK_EQ(weft_tls_read(t, buf, sizeof buf, weft_deadline_in(60 * TLS_SEC)), 0);
    open_now--;
    served++;
    CHECK_EQ(weft_tls_close(t), 0);
    return NULL;
}

static void *acceptor(void *arg)
{
    int l = *(int *)arg;
    for (int i = 0; i < N; i++) {
        int fd = weft_accept(l, NULL, NULL, weft_deadline_in(60 * TLS_SEC));
        CHECK(fd >= 0);
        CHECK_EQ(weft_spawn(server_conn, (void *)(long)fd, NULL, NULL), 0);
    }
    return NULL;
}

static void *client(void *arg)
{
    long id = (long)arg;
    weft_tls_t *t = tls_dial_local(cctx, port, "localhost", weft_deadline_in(60 * TLS_SEC));
    char msg[32];
    int len = snprintf(msg, sizeof msg, "client %ld", id);
    CHECK_EQ(weft_tls_write_all(t, msg, (size_t)len, NULL, weft_deadline_in(60 * TLS_SEC)), 0);
    tls_expect(t, msg, weft_deadline_in(60 * TLS_SEC));
    /* Hold the connection until every client has one. */
    CHECK_EQ(weft_waitgroup_done(&all_up), 0);
    CHECK_EQ(weft_waitgroup_wait(&all_up, weft_deadline_in(60 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_shutdown(t, weft_deadline_in(60 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(t), 0);
    clients_ok++;
    return NULL;
}

static void *body(void *arg)
{
    sctx = tls_server_ctx(pki.srv, pki.srv_key);
    cctx = tls_client_ctx(pki.ca);
    int l = weft_tcp_listen("127.0.0.1", 0, 4096, 0);
    CHECK(l >= 0);
    port = weft_local_port(l);
    weft_fiber_t acc;
    CHECK_EQ(weft_spawn(acceptor, &l, NULL, &acc), 0);
    CHECK_EQ(weft_waitgroup_add(&all_up, N), 0);
    int64_t t0 = weft_now();
    weft_fiber_t f[N];
    for (long i = 0; i < N; i++)
        CHECK_EQ(weft_spawn(client, (void *)i, NULL, &f[i]), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(acc, NULL, WEFT_FOREVER), 0);
    while (served < N)
        CHECK_EQ(weft_sleep(1000000), 0);
    printf("%d TLS connections, %d open at once, %.2f s\n", N, open_max,
           (double)(weft_now() - t0) / 1e9);
    CHECK_EQ(clients_ok, N);
    CHECK_EQ(open_max, N);
    CHECK_EQ(weft_close(l), 0);
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return arg;
}

int main(void)
{
    h_begin("tls_many");
    CHECK(h_raise_nofile(2 * N + 64) >= 2 * N + 64);
    tls_pki_make(&pki);
    h_run(body, NULL);
    tls_pki_remove(&pki);
    return h_end();
}
