/* Buffered reader: lines and delimited pieces in place, CRLF, the last
 * line without a newline, the limit (-EMSGSIZE with every byte kept),
 * deadlines that keep a partial line, cancellation, close while waiting,
 * weft_reader_read, bad input, and 1 MiB of random lines byte-verified. */
#include "harness.h"

#define MS 1000000LL

typedef struct feed {
    int fd;
    const char *text;
    size_t len;
    size_t piece;      /* bytes per write                              */
    int64_t gap;       /* ns between writes                            */
    int close_after;
} feed;

static void *feeder(void *arg)
{
    feed *f = arg;
    for (size_t i = 0; i < f->len; i += f->piece) {
        size_t n = f->len - i < f->piece ? f->len - i : f->piece;
        CHECK_EQ(weft_write_all(f->fd, f->text + i, n, NULL, WEFT_FOREVER), 0);
        if (f->gap)
            CHECK_EQ(weft_sleep(f->gap), 0);
    }
    if (f->close_after)
        CHECK_EQ(weft_close(f->fd), 0);
    return NULL;
}

static void lines_in_pieces(void)
{
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    static const char text[] = "alpha\nbe\r\n\n\r\nlast without newline";
    feed f = {p[1], text, sizeof text - 1, 1, 0, 1};
    weft_fiber_t w;
    CHECK_EQ(weft_spawn(feeder, &f, NULL, &w), 0);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 0), 0);
    char *line;
    size_t len;
    const char *want[] = {"alpha", "be", "", "", "last without newline"};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(weft_read_line(&r, &line, &len, 0, weft_deadline_in(5000 * MS)), 1);
        CHECK_EQ(len, strlen(want[i]));
        CHECK(strcmp(line, want[i]) == 0);
    }
    CHECK_EQ(weft_read_line(&r, &line, &len, 0, WEFT_FOREVER), 0);
    CHECK_EQ(weft_read_line(&r, &line, &len, 0, WEFT_FOREVER), 0); /* stays at EOF */
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    weft_reader_destroy(&r);
    weft_reader_destroy(&r); /* twice is fine */
    CHECK_EQ(weft_close(p[0]), 0);
}

static void until_delimiter(void)
{
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    static const char text[] = "a;bb;;ccc";
    CHECK_EQ(weft_write_all(p[1], text, sizeof text - 1, NULL, 0), 0);
    CHECK_EQ(weft_close(p[1]), 0);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 64), 0);
    char *s;
    CHECK_EQ(weft_read_until(&r, ';', &s, 0, WEFT_FOREVER), 2);
    CHECK(memcmp(s, "a;", 2) == 0);
    CHECK_EQ(weft_read_until(&r, ';', &s, 0, WEFT_FOREVER), 3);
    CHECK(memcmp(s, "bb;", 3) == 0);
    CHECK_EQ(weft_read_until(&r, ';', &s, 0, WEFT_FOREVER), 1);
    CHECK_EQ(weft_read_until(&r, ';', &s, 0, WEFT_FOREVER), 3);
    CHECK(memcmp(s, "ccc", 3) == 0);
    CHECK_EQ(weft_read_until(&r, ';', &s, 0, WEFT_FOREVER), 0);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[0]), 0);

    /* A NUL delimiter and NUL bytes inside a line. */
    CHECK_EQ(weft_pipe(p), 0);
    CHECK_EQ(weft_write_all(p[1], "x\0y\n\0", 5, NULL, 0), 0);
    CHECK_EQ(weft_close(p[1]), 0);
    CHECK_EQ(weft_reader_init(&r, p[0], 16), 0);
    size_t len;
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, WEFT_FOREVER), 1);
    CHECK_EQ(len, 3);
    CHECK(memcmp(s, "x\0y", 4) == 0);
    CHECK_EQ(weft_read_until(&r, 0, &s, 0, WEFT_FOREVER), 1);
    CHECK_EQ(s[0], 0);
    CHECK_EQ(weft_read_until(&r, 0, &s, 0, WEFT_FOREVER), 0);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[0]), 0);
}

static void limits(void)
{
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    /* 10-byte limit: "0123456789ABC\n" is too long, "short\n" is not. */
    static const char text[] = "0123456789ABC\nshort\n";
    CHECK_EQ(weft_write_all(p[1], text, sizeof text - 1, NULL, 0), 0);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 32), 0);
    char *s = NULL;
    size_t len = 0;
    CHECK_EQ(weft_read_line(&r, &s, &len, 10, WEFT_FOREVER), -EMSGSIZE);
    CHECK(s != NULL && memcmp(s, "0123456789", 10) == 0); /* what was read */
    CHECK(weft_reader_buffered(&r) >= 10);
    /* Nothing consumed: the same again; a larger limit takes it. */
    CHECK_EQ(weft_read_line(&r, &s, &len, 10, WEFT_FOREVER), -EMSGSIZE);
    CHECK_EQ(weft_read_line(&r, &s, &len, 14, WEFT_FOREVER), 1);
    CHECK(strcmp(s, "0123456789ABC") == 0);
    CHECK_EQ(weft_read_line(&r, &s, &len, 10, WEFT_FOREVER), 1);
    CHECK(strcmp(s, "short") == 0);

    /* A line longer than the whole buffer: -EMSGSIZE with the buffer full;
     * the caller takes the bytes with weft_reader_read and goes on. */
    char big[100];
    memset(big, 'z', sizeof big);
    CHECK_EQ(weft_write_all(p[1], big, sizeof big, NULL, 0), 0);
    CHECK_EQ(weft_write_all(p[1], "\nok\n", 4, NULL, 0), 0);
    size_t skipped = 0;
    for (;;) {
        int rc = weft_read_line(&r, &s, &len, 0, weft_deadline_in(5000 * MS));
        if (rc == 1)
            break;
        CHECK_EQ(rc, -EMSGSIZE);
        CHECK_EQ(weft_reader_buffered(&r), 32);
        char sink[32];
        ssize_t n = weft_reader_read(&r, sink, sizeof sink, 0);
        CHECK_EQ(n, 32);
        CHECK(memcmp(sink, big, 32) == 0);
        skipped += (size_t)n;
    }
    CHECK_EQ(skipped + len, sizeof big);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, WEFT_FOREVER), 1);
    CHECK(strcmp(s, "ok") == 0);

    /* weft_reader_read: buffered bytes first, then the descriptor. */
    CHECK_EQ(weft_write_all(p[1], "head\nbody", 9, NULL, 0), 0);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, WEFT_FOREVER), 1);
    CHECK(strcmp(s, "head") == 0);
    char body[8];
    CHECK_EQ(weft_reader_read(&r, body, 2, 0), 2);
    CHECK(memcmp(body, "bo", 2) == 0);
    CHECK_EQ(weft_reader_read(&r, body, sizeof body, 0), 2);
    CHECK(memcmp(body, "dy", 2) == 0);
    CHECK_EQ(weft_reader_read(&r, body, sizeof body, 0), -EAGAIN);
    CHECK_EQ(weft_write_all(p[1], "raw", 3, NULL, 0), 0);
    CHECK_EQ(weft_reader_read(&r, body, sizeof body, WEFT_FOREVER), 3);
    CHECK_EQ(weft_reader_buffered(&r), 0);
    CHECK_EQ(weft_close(p[1]), 0);
    CHECK_EQ(weft_reader_read(&r, body, sizeof body, WEFT_FOREVER), 0);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[0]), 0);
}

static void deadlines(void)
{
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 128), 0);
    char *s;
    size_t len;
    /* Nothing there: past, future, then forever satisfied by a writer. */
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, 0), -EAGAIN);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, weft_now() - 1), -ETIMEDOUT);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, weft_deadline_in(20 * MS)), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 20 * MS);
    /* Half a line, then a timeout: the half is kept. */
    CHECK_EQ(weft_write_all(p[1], "half", 4, NULL, 0), 0);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, weft_deadline_in(5 * MS)), -ETIMEDOUT);
    CHECK_EQ(weft_reader_buffered(&r), 4);
    feed f = {p[1], " and the rest\n", 14, 3, MS, 0};
    weft_fiber_t w;
    CHECK_EQ(weft_spawn(feeder, &f, NULL, &w), 0);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, WEFT_FOREVER), 1);
    CHECK(strcmp(s, "half and the rest") == 0);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    /* Bad deadline. */
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, -2), -EINVAL);
    /* A timeout scope bounds it too. */
    int64_t saved;
    CHECK_EQ(weft_scope_enter(weft_deadline_in(5 * MS), &saved), 0);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, WEFT_FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_scope_leave(saved), 0);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[0]), 0);
    CHECK_EQ(weft_close(p[1]), 0);
}

typedef struct waiter {
    weft_reader_t *r;
    int rc;
} waiter;

static void *line_waiter(void *arg)
{
    waiter *w = arg;
    char *s;
    w->rc = weft_read_line(w->r, &s, NULL, 0, WEFT_FOREVER);
    return NULL;
}

static void cancel_and_close(void)
{
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 64), 0);
    CHECK_EQ(weft_write_all(p[1], "partial", 7, NULL, 0), 0);
    waiter wt = {&r, 99};
    h_interrupt(line_waiter, &wt, -1);
    CHECK_EQ(wt.rc, -ECANCELED);
    CHECK_EQ(weft_reader_buffered(&r), 7); /* kept */

    /* Close the descriptor while a fiber waits in the reader. */
    wt.rc = 99;
    h_interrupt(line_waiter, &wt, p[0]);
    CHECK_EQ(wt.rc, -EBADF);
    CHECK_EQ(weft_reader_buffered(&r), 7);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[1]), 0);
}

static void bad_input(void)
{
    weft_reader_t r;
    char *s;
    size_t len;
    CHECK_EQ(weft_reader_init(NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_reader_init(&r, -1, 0), -EBADF);
    CHECK_EQ(weft_reader_init(&r, 0, ((size_t)1 << 30) + 1), -EINVAL);
    weft_reader_t zero = {0};
    CHECK_EQ(weft_read_line(&zero, &s, &len, 0, 0), -EINVAL); /* never initialised */
    CHECK_EQ(weft_reader_buffered(&zero), 0);
    CHECK_EQ(weft_reader_buffered(NULL), 0);
    weft_reader_destroy(&zero);
    weft_reader_destroy(NULL);
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    CHECK_EQ(weft_reader_init(&r, p[0], 8), 0);
    CHECK_EQ(weft_read_line(&r, NULL, &len, 0, 0), -EINVAL);
    CHECK_EQ(weft_read_line(NULL, &s, &len, 0, 0), -EINVAL);
    CHECK_EQ(weft_read_until(&r, '\n', NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_read_until(&r, '\n', &s, 9, 0), -EINVAL); /* > buffer */
    CHECK_EQ(weft_read_until(&r, 256, &s, 0, 0), -EINVAL);
    CHECK_EQ(weft_read_until(&r, -1, &s, 0, 0), -EINVAL);
    CHECK_EQ(weft_reader_read(&r, NULL, 1, 0), -EINVAL);
    CHECK_EQ(weft_reader_read(NULL, &len, 1, 0), -EINVAL);
    weft_reader_destroy(&r);
    /* A bad descriptor shows when it is read. */
    CHECK_EQ(weft_reader_init(&r, 999999, 8), 0);
    CHECK_EQ(weft_read_line(&r, &s, &len, 0, 0), -EBADF);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[0]), 0);
    CHECK_EQ(weft_close(p[1]), 0);
}

/* 1 MiB of lines of random lengths (0..200) in random-sized writes. */
static uint32_t rng = 12345;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static void bulk(void)
{
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap + 256);
    CHECK(text != NULL);
    size_t lines = 0;
    while (n < cap) {
        size_t l = next_rand() % 201;
        for (size_t i = 0; i < l; i++)
            text[n++] = (char)('a' + (lines + i) % 26);
        text[n++] = '\n';
        lines++;
    }
    int p[2];
    CHECK_EQ(weft_pipe(p), 0);
    feed f = {p[1], text, n, 3001, 0, 1};
    weft_fiber_t w;
    CHECK_EQ(weft_spawn(feeder, &f, NULL, &w), 0);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 256), 0);
    char *s;
    size_t len, got = 0, off = 0;
    int rc;
    while ((rc = weft_read_line(&r, &s, &len, 0, weft_deadline_in(10000 * MS))) == 1) {
        CHECK(memcmp(s, text + off, len) == 0);
        CHECK_EQ(text[off + len], '\n');
        off += len + 1;
        got++;
    }
    CHECK_EQ(rc, 0);
    CHECK_EQ(got, lines);
    CHECK_EQ(off, n);
    CHECK_EQ(weft_join(w, NULL, WEFT_FOREVER), 0);
    weft_reader_destroy(&r);
    CHECK_EQ(weft_close(p[0]), 0);
    free(text);
}

static void *body(void *arg)
{
    (void)arg;
    lines_in_pieces();
    until_delimiter();
    limits();
    deadlines();
    cancel_and_close();
    bad_input();
    bulk();
    return NULL;
}

int main(void)
{
    h_begin("bufread");
    /* Outside a fiber: reading the descriptor needs a fiber. */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "x\ny", 3) == 3);
    weft_reader_t r;
    CHECK_EQ(weft_reader_init(&r, p[0], 0), 0);
    char *s;
    CHECK_EQ(weft_read_line(&r, &s, NULL, 0, 0), -EPERM);
    weft_reader_destroy(&r);
    close(p[0]);
    close(p[1]);
    h_run(body, NULL);
    return h_end();
}
