/*
 * http_chunked.c — Weft::HTTP::Chunked: decodes a chunked request body
 * (RFC 9112 7.1) fed in pieces, for Weft::Server.
 *
 *   dec = Weft::HTTP::Chunked.new(max_body: 1 << 20)
 *   used = dec.feed(src, dst)   # bytes of src consumed, decoded data
 *                               # appended to dst; -status on bad input
 *   dec.done?                   # the last chunk and trailers are in
 */
#include <ruby.h>

#include <stdint.h>
#include <string.h>

#include "http.h"

enum {
    CK_SIZE,      /* hex digits of chunk-size                         */
    CK_EXT,       /* chunk-ext up to CR                               */
    CK_SIZE_LF,   /* LF after the size line                           */
    CK_DATA,      /* chunk-data: left bytes to copy                   */
    CK_DATA_CR,   /* CR after the data                                */
    CK_DATA_LF,   /* LF after the data                                */
    CK_TRAILER,   /* at the start of a trailer line (or the last CRLF) */
    CK_TRAILER_LINE,
    CK_TRAILER_LF,
    CK_END_LF,    /* LF of the final CRLF                             */
    CK_DONE,
};

typedef struct chunked {
    int state;
    int digits;       /* hex digits of the current size                */
    uint64_t left;    /* bytes of chunk-data still to come             */
    uint64_t total;   /* decoded bytes so far                          */
    uint64_t max;     /* decoded bytes allowed                         */
    size_t line;      /* bytes of the current size/ext or trailer line */
    size_t trailers;  /* bytes of trailer section                      */
    size_t max_line;  /* limit of a size line and of the trailers      */
} chunked;

static const rb_data_type_t chunked_type = {
    .wrap_struct_name = "Weft::HTTP::Chunked",
    .function = {.dfree = RUBY_TYPED_DEFAULT_FREE},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static chunked *get_chunked(VALUE self)
{
    return rb_check_typeddata(self, &chunked_type);
}

static VALUE chunked_alloc(VALUE klass)
{
    chunked *ck;
    VALUE obj = TypedData_Make_Struct(klass, chunked, &chunked_type, ck);
    ck->max = UINT64_MAX;
    ck->max_line = 16384;
    return obj;
}

/*
 * Chunked.new(max_body: nil, max_line: 16384)
 *
 * A decoder for one chunked body. max_body bounds the decoded size (-413
 * beyond it); max_line bounds a chunk-size line with its extensions and,
 * separately, the whole trailer section (-400 beyond either).
 */
static VALUE chunked_initialize(int argc, VALUE *argv, VALUE self)
{
    chunked *ck = get_chunked(self);
    VALUE opts = Qnil;
    rb_scan_args(argc, argv, "0:", &opts);
    if (!NIL_P(opts)) {
        VALUE v = rb_hash_aref(opts, ID2SYM(rb_intern("max_body")));
        if (!NIL_P(v))
            ck->max = NUM2ULL(v);
        ck->max_line = (size_t)weft__http_opt_u64(opts, "max_line", ck->max_line);
    }
    return self;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decode @src[0..@n) into @dst; returns the bytes of @src consumed (less
 * than @n only once the body has ended) or -status. Strict where laxness
 * lets two parsers disagree on where the body ends: CRLF only, no
 * whitespace before the size, at most 15 hex digits, no control bytes in
 * extensions or trailers. */
/* The states that take one fixed byte (CR or LF): the byte, and the state
 * after it (CK_SIZE_LF's depends on the size: see chunked_run). */
static const unsigned char fixed_byte[CK_DONE] = {
    [CK_SIZE_LF] = '\n', [CK_DATA_CR] = '\r', [CK_DATA_LF] = '\n',
    [CK_TRAILER_LF] = '\n', [CK_END_LF] = '\n',
};
static const unsigned char fixed_next[CK_DONE] = {
    [CK_DATA_CR] = CK_DATA_LF, [CK_DATA_LF] = CK_SIZE,
    [CK_TRAILER_LF] = CK_TRAILER, [CK_END_LF] = CK_DONE,
};

static long chunked_run(chunked *ck, const unsigned char *src, size_t n, VALUE dst)
{
    size_t i = 0;
    while (i < n && ck->state != CK_DONE) {
        unsigned char c = src[i];
        if (fixed_byte[ck->state]) {
            if (c != fixed_byte[ck->state])
                return -400;
            i++;
            if (ck->state != CK_SIZE_LF) {
                ck->state = fixed_next[ck->state];
                ck->digits = 0; /* for CK_SIZE, after CK_DATA_LF */
                ck->left = 0;
            } else if (ck->left == 0) {
                ck->state = CK_TRAILER;
            } else if (ck->left > ck->max - ck->total) {
                return -413;
            } else {
                ck->state = CK_DATA;
            }
            continue;
        }
        switch (ck->state) {
        case CK_SIZE: {
            int h = hexval(c);
            if (h >= 0) {
                if (++ck->digits > 15)
                    return -400;
                ck->left = ck->left * 16 + (uint64_t)h;
                i++;
                break;
            }
            if (ck->digits == 0)
                return -400;
            if (c == ';' || c == ' ' || c == '\t') {
                ck->state = CK_EXT;
                ck->line = ck->digits;
                break; /* the byte is looked at again as part of the ext */
            }
            if (c != '\r')
                return -400;
            ck->state = CK_SIZE_LF;
            i++;
            break;
        }
        case CK_EXT:
            if (c == '\r') {
                ck->state = CK_SIZE_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
                return -400;
            } else if (++ck->line > ck->max_line) {
                return -400;
            }
            i++;
            break;
        case CK_DATA: {
            size_t take = n - i;
            if ((uint64_t)take > ck->left)
                take = (size_t)ck->left;
            rb_str_cat(dst, (const char *)src + i, (long)take);
            i += take;
            ck->left -= take;
            ck->total += take;
            if (ck->left == 0)
                ck->state = CK_DATA_CR;
            break;
        }
        case CK_TRAILER:
            if (c == '\r') {
                ck->state = CK_END_LF;
                i++;
                break;
            }
            ck->state = CK_TRAILER_LINE;
            /* fallthrough */
        case CK_TRAILER_LINE:
            if (c == '\r') {
                ck->state = CK_TRAILER_LF;
            } else if (c == '\n' || c == 0 || c == 0x7f || (c < 0x20 && c != '\t')) {
                return -400;
            } else if (++ck->trailers > ck->max_line) {
                return -400;
            }
            i++;
            break;
        default:
            break;
        }
    }
    return (long)i;
}

/*
 * chunked.feed(src, dst) -> Integer
 *
 * Decode the bytes of +src+ (a String; the body as it arrives), appending
 * the data to +dst+ (a binary String). Returns how many bytes of +src+
 * belong to the body: all of them until the body ends; fewer once it has
 * (what follows is the next request). A negative answer is -status (-400
 * malformed, -413 over max_body): the connection must then be closed.
 * Trailer fields are checked and dropped.
 */
static VALUE chunked_feed(VALUE self, VALUE src, VALUE dst)
{
    chunked *ck = get_chunked(self);
    StringValue(src);
    StringValue(dst);
    rb_str_modify(dst);
    long rc = chunked_run(ck, (const unsigned char *)RSTRING_PTR(src),
                          (size_t)RSTRING_LEN(src), dst);
    RB_GC_GUARD(src);
    return LONG2NUM(rc);
}

/* chunked.done? -> true once the last chunk and the trailers are in. */
static VALUE chunked_done_p(VALUE self)
{
    return get_chunked(self)->state == CK_DONE ? Qtrue : Qfalse;
}

/* chunked.size -> the decoded bytes so far. */
static VALUE chunked_size(VALUE self)
{
    return ULL2NUM(get_chunked(self)->total);
}

void weft__http_chunked_init(VALUE mhttp)
{
    static const weft__rb_method methods[] = {
        {"initialize", RUBY_METHOD_FUNC(chunked_initialize), -1},
        {"feed", RUBY_METHOD_FUNC(chunked_feed), 2},
        {"done?", RUBY_METHOD_FUNC(chunked_done_p), 0},
        {"size", RUBY_METHOD_FUNC(chunked_size), 0},
        {NULL, NULL, 0},
    };
    weft__rb_define_class(mhttp, "Chunked", chunked_alloc, methods);
}
