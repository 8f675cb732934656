/*
 * http.h — Weft::HTTP's parts, one file each: the request-head parser
 * (http.c, which also defines the module), the chunked-body decoder
 * (http_chunked.c) and the poller of parked connections (http_poller.c).
 */
#ifndef WEFT_EXT_HTTP_H
#define WEFT_EXT_HTTP_H

#include <ruby.h>

#include <stdint.h>

#include "rbdef.h"

/* Option @name (a Symbol key) of the Hash @opts as a positive integer, or
 * @dflt when absent; ArgumentError for zero or a negative number
 * (http.c). */
uint64_t weft__http_opt_u64(VALUE opts, const char *name, uint64_t dflt);

/* Define Weft::HTTP::Chunked under @mhttp (http_chunked.c). */
void weft__http_chunked_init(VALUE mhttp);

/* Define Weft::HTTP::Poller under @mhttp, where the system has epoll
 * (http_poller.c). */
void weft__http_poller_init(VALUE mhttp);

#endif
