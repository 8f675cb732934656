/*
 * list.h — intrusive doubly linked lists (not installed).
 *
 * A weft__node lives inside the thing listed (often in a fiber's stack
 * frame); a weft__list is a head and a tail. Nothing allocates. Used for
 * the waits on a descriptor, wait queues, channel queues, the connection
 * pool's idle list and the Ruby extension's wait and ready lists.
 */
#ifndef WEFT_LIST_H
#define WEFT_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct weft__node {
    struct weft__node *next, *prev;
} weft__node;

typedef struct weft__list {
    weft__node *head, *tail;
} weft__list;

/* The structure of type @type whose member @member is at @ptr. */
#define weft__container(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline bool weft__list_empty(const weft__list *l)
{
    return l->head == NULL;
}

/* Append @n (not in any list) at the tail. */
static inline void weft__list_push(weft__list *l, weft__node *n)
{
    n->next = NULL;
    n->prev = l->tail;
    if (l->tail)
        l->tail->next = n;
    else
        l->head = n;
    l->tail = n;
}

/* Insert @n (not in any list) at the head. */
static inline void weft__list_push_front(weft__list *l, weft__node *n)
{
    n->prev = NULL;
    n->next = l->head;
    if (l->head)
        l->head->prev = n;
    else
        l->tail = n;
    l->head = n;
}

/* Take @n (in @l) out; its links are cleared. */
static inline void weft__list_remove(weft__list *l, weft__node *n)
{
    if (n->prev)
        n->prev->next = n->next;
    else
        l->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        l->tail = n->prev;
    n->next = n->prev = NULL;
}

/* Take the head out and return it, or NULL. */
static inline weft__node *weft__list_pop(weft__list *l)
{
    weft__node *n = l->head;
    if (n)
        weft__list_remove(l, n);
    return n;
}

#endif
