/*
 * http.h — Weft::HTTP's parts, one file each: the request-head parser
 * (http.c, which also defines the module), the chunked-body decoder
 * (http_chunked.c) and the poller of parked connections (http_poller.c).
 */
#ifndef WEFT_EXT_HTTP_H
#define WEFT_EXT_HTTP_H

#include <ruby.h>

#include <stdint.h>

/* Option @name (a Symbol key) of the Hash @opts as a positive integer, or
 * @dflt when absent; ArgumentError for zero or a negative number
 * (http.c). */
uint64_t weft__http_opt_u64(VALUE opts, const char *name, uint64_t dflt);

/* One method of a class that weft__rb_define_class() defines. */
typedef struct weft__rb_method {
    const char *name;
    VALUE (*fn)(ANYARGS);
    int argc; /* as for rb_define_method: -1 is (argc, argv, self) */
} weft__rb_method;

/* Define class @name (a subclass of Object) under @outer, with allocator
 * @alloc (NULL: Ruby's default) and the methods @m (up to one with a NULL
 * name); the class is kept from the GC. Returns the class. */
static inline VALUE weft__rb_define_class(VALUE outer, const char *name,
                                          rb_alloc_func_t alloc,
                                          const weft__rb_method *m)
{
    VALUE c = rb_define_class_under(outer, name, rb_cObject);
    if (alloc)
        rb_define_alloc_func(c, alloc);
    for (; m->name; m++)
        rb_define_method(c, m->name, m->fn, m->argc);
    rb_gc_register_mark_object(c);
    return c;
}

/* Define Weft::HTTP::Chunked under @mhttp (http_chunked.c). */
void weft__http_chunked_init(VALUE mhttp);

/* Define Weft::HTTP::Poller under @mhttp, where the system has epoll
 * (http_poller.c). */
void weft__http_poller_init(VALUE mhttp);

#endif
