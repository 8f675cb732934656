/* A program started in a terminal has one open file description on
 * stdin, stdout and stderr (the shell opened the terminal once and
 * duplicated it). A fiber that reads stdin with weft_read(0, ...) while
 * others print with printf is the ordinary interactive program; with
 * threads and blocking calls every line printed arrives. O_NONBLOCK
 * belongs to the description, so weft must not set it where stdout and
 * stderr see it: there a full terminal makes printf fail with EAGAIN and
 * output is lost. Checked on a pseudo-terminal standing in for the
 * terminal on stdin and stdout (stderr stays the log): after weft_read(0)
 * and weft_write(1), the other one, and the terminal's own description,
 * are still blocking. */
#include "harness.h"

#include <fcntl.h>
#include <pty.h>

static int nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0);
    return (fl & O_NONBLOCK) != 0;
}

static int pty_s = -1;

static void *body(void *arg)
{
    char c;
    H_CASE("read stdin");
    CHECK_EQ(weft_read(0, &c, 1, 0), -EAGAIN);
    CHECK(!nonblocking(1)); /* printf on a full terminal would lose output */
    CHECK(!nonblocking(pty_s)); /* the shell's description */

    H_CASE("write stdout");
    CHECK_EQ(weft_write(1, "x", 1, weft_deadline_in(5000000000LL)), 1);
    CHECK(!nonblocking(pty_s));
    return arg;
}

int main(void)
{
    h_begin("std_shared");
    fflush(stdout);
    fflush(stderr);
    int saved[2];
    for (int i = 0; i < 2; i++) {
        saved[i] = fcntl(i, F_DUPFD_CLOEXEC, 3);
        CHECK(saved[i] >= 0);
    }
    int m;
    CHECK_EQ(openpty(&m, &pty_s, NULL, NULL, NULL), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(dup2(pty_s, i), i);
    h_run(body, NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(weft_fd_forget(i), 0);
        CHECK_EQ(dup2(saved[i], i), i);
        CHECK_EQ(close(saved[i]), 0);
    }
    CHECK_EQ(close(pty_s), 0);
    CHECK_EQ(close(m), 0);
    return h_end();
}
