/*
 * bufread.c — a buffered reader with delimited reads (lines).
 *
 * Why not stdio: a FILE over a non-blocking descriptor treats EAGAIN as
 * an error and may drop what it had read; it has no deadline and
 * allocates as much as a line needs (getline), so a peer that never sends
 * a newline makes it grow without bound. This one reads through
 * weft_read() (every backend, deadlines, cancellation, timeout scopes),
 * hands lines out in place, bounds them by its buffer, and keeps every
 * byte when a call fails, so the caller can retry or take them.
 *
 * The buffer is [buf_, buf_ + size_) plus one byte, so that the last line
 * of a stream, which may fill the buffer, can still be NUL-terminated.
 * Buffered bytes are [start_, end_); they move to the front only when the
 * free room behind them is needed.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_SIZE ((size_t)16384)
#define MAX_SIZE ((size_t)1 << 30)

int weft_reader_init(weft_reader_t *r, int fd, size_t size)
{
    if (!r || size > MAX_SIZE)
        return -EINVAL;
    if (fd < 0)
        return -EBADF;
    if (size == 0)
        size = DEFAULT_SIZE;
    char *buf = malloc(size + 1);
    if (!buf)
        return -ENOMEM;
    *r = (weft_reader_t){.fd = fd, .buf_ = buf, .size_ = size};
    return 0;
}

void weft_reader_destroy(weft_reader_t *r)
{
    if (!r)
        return;
    free(r->buf_);
    r->buf_ = NULL;
    r->size_ = r->start_ = r->end_ = 0;
}

size_t weft_reader_buffered(const weft_reader_t *r)
{
    return r && r->buf_ ? r->end_ - r->start_ : 0;
}

/* One weft_read() into the free room (made at the back if need be).
 * > 0 bytes added, 0 end of file, or -errno. */
static ssize_t fill(weft_reader_t *r, int64_t deadline)
{
    /* Move the buffered bytes to the front when less than a quarter of
     * the buffer is free behind them (and there is room in front). */
    if (r->start_ == r->end_) {
        r->start_ = r->end_ = 0;
    } else if (r->start_ > 0 && r->size_ - r->end_ < r->size_ / 4 + 1) {
        memmove(r->buf_, r->buf_ + r->start_, r->end_ - r->start_);
        r->end_ -= r->start_;
        r->start_ = 0;
    }
    ssize_t n = weft_read(r->fd, r->buf_ + r->end_, r->size_ - r->end_, deadline);
    if (n > 0)
        r->end_ += (size_t)n;
    else if (n == 0)
        r->eof_ = 1;
    return n;
}

ssize_t weft_read_until(weft_reader_t *r, int delim, char **line,
                        size_t limit, int64_t deadline)
{
    if (!r || !r->buf_ || !line || delim < 0 || delim > 255 || limit > r->size_)
        return -EINVAL;
    if (limit == 0)
        limit = r->size_;
    size_t scanned = 0; /* bytes already searched, from start_ */
    for (;;) {
        size_t have = r->end_ - r->start_;
        size_t look = (have < limit ? have : limit) - scanned;
        char *from = r->buf_ + r->start_;
        char *hit = memchr(from + scanned, delim, look);
        if (hit) {
            size_t n = (size_t)(hit - from) + 1;
            r->start_ += n;
            *line = from;
            return (ssize_t)n;
        }
        scanned += look;
        if (have >= limit) {
            *line = from;
            return -EMSGSIZE;
        }
        if (r->eof_) {
            /* The last piece, without a delimiter; then end of file. */
            r->start_ = r->end_ = 0;
            *line = from;
            return (ssize_t)have;
        }
        ssize_t n = fill(r, deadline);
        if (n < 0)
            return n;
    }
}

int weft_read_line(weft_reader_t *r, char **line, size_t *len, size_t limit,
                   int64_t deadline)
{
    char *s = NULL;
    if (!line)
        return -EINVAL;
    ssize_t n = weft_read_until(r, '\n', &s, limit, deadline);
    if (n < 0) {
        if (n == -EMSGSIZE)
            *line = s;
        return (int)n;
    }
    if (n == 0)
        return 0;
    size_t l = (size_t)n;
    if (s[l - 1] == '\n' && --l > 0 && s[l - 1] == '\r')
        l--;
    /* The ending's bytes are consumed, so they may be overwritten; a last
     * line without one ends where the spare byte behind the buffer is. */
    s[l] = '\0';
    *line = s;
    if (len)
        *len = l;
    return 1;
}

ssize_t weft_reader_read(weft_reader_t *r, void *buf, size_t len,
                         int64_t deadline)
{
    if (!r || !r->buf_ || (!buf && len))
        return -EINVAL;
    size_t have = r->end_ - r->start_;
    if (have == 0) {
        if (r->eof_)
            return 0;
        return weft_read(r->fd, buf, len, deadline);
    }
    size_t n = have < len ? have : len;
    memcpy(buf, r->buf_ + r->start_, n);
    r->start_ += n;
    if (r->start_ == r->end_)
        r->start_ = r->end_ = 0;
    return (ssize_t)n;
}
