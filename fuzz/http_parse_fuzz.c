/*
 * http_parse_fuzz — libFuzzer target for the request-head parser of
 * contrib/http (http_parse.c).
 *
 * Each input is parsed twice: whole, and fed in growing prefixes whose
 * sizes come from the input's first byte (the incremental scanner). Both
 * must give the same answer; a parsed head must lie inside the input and
 * every pointer of the request must point into it; error answers must be
 * one of the documented statuses. Small limits are used one time in two so
 * the limit paths are reached with short inputs; chunked request bodies are
 * accepted one time in four (the first byte's top bit).
 *
 *   build: see scripts/test.d/http.sh (clang -fsanitize=fuzzer,address,undefined)
 *   run:   build/fuzz/http_parse_fuzz -max_total_time=60 fuzz/corpus/http_parse
 */
#include "http/http_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_inside(const char *p, size_t n, const char *buf, size_t len)
{
    if (n && (p < buf || p + n > buf + len))
        abort();
}

static void check_req(const http_req *r, const char *buf, size_t head)
{
    check_inside(r->method_str, r->method_len, buf, head);
    check_inside(r->target, r->target_len, buf, head);
    if (r->nheaders > HTTP_MAX_HEADERS)
        abort();
    for (unsigned i = 0; i < r->nheaders; i++) {
        check_inside(r->headers[i].name, r->headers[i].name_len, buf, head);
        check_inside(r->headers[i].value, r->headers[i].value_len, buf, head);
    }
}

static int valid_error(int rc)
{
    switch (-rc) {
    case 400: case 413: case 414: case 431: case 501: case 505:
        return 1;
    default:
        return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const http_limits small = {.max_request_line = 64,
                                      .max_header_line = 64,
                                      .max_head = 256,
                                      .max_headers = 4,
                                      .max_body = 100};
    unsigned step = (data[0] & 0x3f) + 1;
    static const http_limits chunked = {.max_request_line = 8192,
                                        .max_header_line = 8192,
                                        .max_head = 16384,
                                        .max_headers = 64,
                                        .max_body = 1 << 20,
                                        .accept_chunked = 1};
    const http_limits *lim = (data[0] & 0x40) ? &small : (data[0] & 0x80) ? &chunked : NULL;
    data++;
    size--;
    /* A private copy, so that reads past the end are caught by ASan. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);

    static http_req r1, r2;
    http_scan sc;
    http_scan_reset(&sc);
    int whole = http_parse(&sc, buf, size, lim, &r1);
    if (whole > 0) {
        if ((size_t)whole > size)
            abort();
        check_req(&r1, buf, (size_t)whole);
    } else if (whole < 0 && !valid_error(whole)) {
        abort();
    }

    http_scan_reset(&sc);
    int inc = 0;
    for (size_t n = step < size ? step : size; ; n += step) {
        if (n > size)
            n = size;
        inc = http_parse(&sc, buf, n, lim, &r2);
        if (inc != 0 || n == size)
            break;
    }
    if (inc != whole)
        abort();
    if (whole > 0 && (r1.content_length != r2.content_length ||
                      r1.keep_alive != r2.keep_alive || r1.method != r2.method ||
                      r1.nheaders != r2.nheaders || r1.chunked != r2.chunked))
        abort();
    free(buf);
    return 0;
}
