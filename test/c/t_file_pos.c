/* Regular files at the file position: fibers of two loops (two threads)
 * write lines through one open file and none is lost or overwritten, as
 * with write(2) from plain threads — the position is shared by everyone
 * holding the open file, and each write must take and advance it at once.
 * The same for reads: every byte is read exactly once between them. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define LOOPS 2
#define FIBERS 4
#define LINES 1500
#define LINE 16

static int fd;
static atomic_long bytes_read;
static unsigned char *seen; /* per line: how many times it was read */

static void *line_writer(void *arg)
{
    long id = (long)arg;
    char line[LINE + 1];
    for (int i = 0; i < LINES; i++) {
        snprintf(line, sizeof line, "%04ld %09d\n", id, i);
        CHECK_EQ(weft_write(fd, line, LINE, WEFT_FOREVER), LINE);
    }
    return NULL;
}

/* Reads whole lines (the file is LINE-aligned and every read asks for one
 * line) until end of file, marking each line it got. */
static void *line_reader(void *arg)
{
    (void)arg;
    char line[LINE + 1] = {0};
    for (;;) {
        ssize_t n = weft_read(fd, line, LINE, WEFT_FOREVER);
        CHECK(n == 0 || n == LINE);
        if (n == 0)
            return NULL;
        long id;
        int i;
        CHECK_EQ(sscanf(line, "%ld %d", &id, &i), 2);
        CHECK(id >= 0 && id < LOOPS * FIBERS && i >= 0 && i < LINES);
        seen[id * LINES + i]++;
        atomic_fetch_add(&bytes_read, n);
    }
}

static weft_fn_t fiber_fn;

static void *loop_body(void *arg)
{
    long base = (long)arg;
    weft_fiber_t f[FIBERS];
    for (int i = 0; i < FIBERS; i++)
        CHECK_EQ(weft_spawn(fiber_fn, (void *)(base * FIBERS + i), NULL, &f[i]), 0);
    for (int i = 0; i < FIBERS; i++)
        CHECK_EQ(weft_join(f[i], NULL, WEFT_FOREVER), 0);
    return NULL;
}

static void *thread_main(void *arg)
{
    weft_sched_t *s;
    CHECK_EQ(weft_sched_create(&s, NULL), 0);
    h_run(loop_body, arg);
    CHECK_EQ(weft_sched_destroy(s), 0);
    return NULL;
}

static void run_loops(weft_fn_t fn)
{
    fiber_fn = fn;
    pthread_t t[LOOPS];
    for (long i = 0; i < LOOPS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, thread_main, (void *)i), 0);
    for (int i = 0; i < LOOPS; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);
}

int main(void)
{
    h_begin("file_pos");
    const long total = (long)LOOPS * FIBERS * LINES;
    seen = calloc((size_t)total, 1);
    CHECK(seen != NULL);
    char path[] = "/tmp/weft-test-XXXXXX";
    fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);

    /* writes: every line once, nothing overwritten */
    run_loops(line_writer);
    CHECK_EQ(lseek(fd, 0, SEEK_CUR), total * LINE);
    CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);

    /* reads at the shared position: every line read exactly once */
    run_loops(line_reader);
    CHECK_EQ(atomic_load(&bytes_read), total * LINE);
    for (long k = 0; k < total; k++)
        CHECK_EQ(seen[k], 1);

    CHECK_EQ(close(fd), 0);
    free(seen);
    return h_end();
}
