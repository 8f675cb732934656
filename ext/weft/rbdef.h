/*
 * rbdef.h — defining Ruby methods from tables (not installed), for every
 * file of the extension: a file lists its methods as data, and one loop
 * defines them.
 */
#ifndef WEFT_EXT_RBDEF_H
#define WEFT_EXT_RBDEF_H

#include <ruby.h>

/* One method of a class: what rb_define_method takes. */
typedef struct weft__rb_method {
    const char *name;
    VALUE (*fn)(ANYARGS);
    int argc; /* as for rb_define_method: -1 is (argc, argv, self) */
} weft__rb_method;

/* Define the methods @m (up to one with a NULL name) on @klass. */
static inline void weft__rb_define_methods(VALUE klass, const weft__rb_method *m)
{
    for (; m->name; m++)
        rb_define_method(klass, m->name, m->fn, m->argc);
}

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
    weft__rb_define_methods(c, m);
    rb_gc_register_mark_object(c);
    return c;
}

#endif
