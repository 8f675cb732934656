/* TLS bulk and tiny transfers between weft fibers: 64 MiB echoed back
 * full duplex (one fiber writes while another reads the same connection)
 * and byte-verified, with writes of varying sizes; 1-byte writes read
 * with 1-byte reads, both ways. */
#include "tls_util.h"

#define BULK (64u << 20)

static tls_pki pki;
static weft_tls_ctx_t *sctx, *cctx;

typedef struct side {
    weft_tls_t *t;
    int fd;
} side;

static void *echo_server(void *arg)
{
    side *s = arg;
    CHECK_EQ(weft_tls_accept(&s->t, sctx, s->fd, weft_deadline_in(5 * TLS_SEC)), 0);
    static char buf[65536];
    for (;;) {
        ssize_t n = weft_tls_read(s->t, buf, sizeof buf, weft_deadline_in(30 * TLS_SEC));
        CHECK(n >= 0);
        if (n == 0)
            break;
        CHECK_EQ(weft_tls_write_all(s->t, buf, (size_t)n, NULL, weft_deadline_in(30 * TLS_SEC)), 0);
    }
    CHECK_EQ(weft_tls_shutdown(s->t, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(s->t), 0);
    return NULL;
}

static void *bulk_writer(void *arg)
{
    weft_tls_t *t = arg;
    static uint8_t chunk[200000];
    uint64_t off = 0, rnd = 12345;
    while (off < BULK) {
        rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t n = 1 + (size_t)(rnd >> 33) % sizeof chunk;
        if (n > BULK - off)
            n = BULK - off;
        for (size_t i = 0; i < n; i++)
            chunk[i] = tls_pattern(off + i);
        size_t w = 0;
        CHECK_EQ(weft_tls_write_all(t, chunk, n, &w, weft_deadline_in(30 * TLS_SEC)), 0);
        CHECK_EQ(w, n);
        off += n;
    }
    CHECK_EQ(weft_tls_shutdown(t, weft_deadline_in(5 * TLS_SEC)), 0);
    return NULL;
}

static void test_bulk(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    side s = {.fd = a};
    weft_fiber_t fs, fw;
    CHECK_EQ(weft_spawn(echo_server, &s, NULL, &fs), 0);
    weft_tls_t *c;
    CHECK_EQ(weft_tls_connect(&c, cctx, b, "localhost", weft_deadline_in(5 * TLS_SEC)), 0);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_spawn(bulk_writer, c, NULL, &fw), 0);
    /* This fiber reads the echo while the writer writes. */
    static uint8_t buf[100000];
    uint64_t got = 0, rnd = 99;
    for (;;) {
        rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t want = 1 + (size_t)(rnd >> 33) % sizeof buf;
        ssize_t n = weft_tls_read(c, buf, want, weft_deadline_in(30 * TLS_SEC));
        if (n < 0)
            fprintf(stderr, "read: %zd %s\n", n, weft_tls_error_string(c));
        CHECK(n >= 0);
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != tls_pattern(got + (uint64_t)i)) {
                fprintf(stderr, "byte %llu differs\n", (unsigned long long)(got + (uint64_t)i));
                CHECK(0);
            }
        got += (uint64_t)n;
    }
    CHECK_EQ(got, BULK);
    double secs = (double)(weft_now() - t0) / 1e9;
    printf("64 MiB echoed in %.2f s (%.0f MiB/s each way)\n", secs, 64 / secs);
    CHECK_EQ(weft_join(fw, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_join(fs, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_tls_close(c), 0);
}

/* ---- 1-byte writes and reads ---------------------------------------- */

#define TINY 2000

static void *tiny_server(void *arg)
{
    side *s = arg;
    CHECK_EQ(weft_tls_accept(&s->t, sctx, s->fd, weft_deadline_in(5 * TLS_SEC)), 0);
    for (int i = 0; i < TINY; i++) {
        uint8_t ch;
        CHECK_EQ(weft_tls_read(s->t, &ch, 1, weft_deadline_in(5 * TLS_SEC)), 1);
        CHECK_EQ(ch, tls_pattern((uint64_t)i));
    }
    for (int i = 0; i < TINY; i++) {
        uint8_t ch = tls_pattern((uint64_t)i + 7);
        CHECK_EQ(weft_tls_write(s->t, &ch, 1, weft_deadline_in(5 * TLS_SEC)), 1);
    }
    CHECK_EQ(weft_tls_shutdown(s->t, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_tls_close(s->t), 0);
    return NULL;
}

static void test_tiny(void)
{
    int a, b;
    h_tcp_pair(&a, &b);
    side s = {.fd = a};
    weft_fiber_t fs;
    CHECK_EQ(weft_spawn(tiny_server, &s, NULL, &fs), 0);
    weft_tls_t *c;
    CHECK_EQ(weft_tls_connect(&c, cctx, b, "localhost", weft_deadline_in(5 * TLS_SEC)), 0);
    for (int i = 0; i < TINY; i++) {
        uint8_t ch = tls_pattern((uint64_t)i);
        CHECK_EQ(weft_tls_write(c, &ch, 1, weft_deadline_in(5 * TLS_SEC)), 1);
    }
    /* The server's 1-byte records, each read with a 1-byte read, and then
     * a read with room to spare gets the end of the stream. */
    for (int i = 0; i < TINY; i++) {
        uint8_t ch;
        CHECK_EQ(weft_tls_read(c, &ch, 1, weft_deadline_in(5 * TLS_SEC)), 1);
        CHECK_EQ(ch, tls_pattern((uint64_t)i + 7));
    }
    char rest[16];
    CHECK_EQ(weft_tls_read(c, rest, sizeof rest, weft_deadline_in(5 * TLS_SEC)), 0);
    CHECK_EQ(weft_join(fs, NULL, WEFT_FOREVER), 0);
    CHECK_EQ(weft_tls_close(c), 0);
}

static void *body(void *arg)
{
    sctx = tls_server_ctx(pki.srv, pki.srv_key);
    cctx = tls_client_ctx(pki.ca);
    test_tiny();
    test_bulk();
    weft_tls_ctx_free(sctx);
    weft_tls_ctx_free(cctx);
    return arg;
}

int main(void)
{
    h_begin("tls_bulk");
    tls_pki_make(&pki);
    h_run(body, NULL);
    tls_pki_remove(&pki);
    return h_end();
}
