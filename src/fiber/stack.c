/*
 * stack.c — fiber stacks: one anonymous mapping each, committed lazily by
 * the kernel as pages are touched, with a guard page at the low end.
 *
 * Guard: MADV_GUARD_INSTALL (Linux >= 6.13) installs the guard as a page
 * table marker, so neighbouring stacks still merge into one VMA and a
 * million stacks do not hit vm.max_map_count. On older kernels mprotect()
 * is used; once that fails (the map count is exhausted) stacks are made
 * without a guard and counted in weft_stats_t.stacks_unguarded.
 *
 * Free stacks of the scheduler's default size are cached (internal.h:
 * weft__stack_get/keep, inline for the spawn path): a list threaded
 * through the stacks themselves, each descriptor in its finished fiber's
 * record.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef WEFT_VALGRIND
#include <valgrind/valgrind.h>
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MAP_STACK
#define MAP_STACK 0
#endif

static atomic_int guard_mode; /* 0 unknown, 1 madvise guard, 2 mprotect */
static atomic_int thp_always = -1;

size_t weft__page_size(void)
{
    static size_t page;
    if (!page) {
        long p = sysconf(_SC_PAGESIZE);
        page = p > 0 ? (size_t)p : 4096;
    }
    return page;
}

size_t weft__guard_size(void)
{
    size_t page = weft__page_size();
    return page > 65536 ? page : 65536;
}

/* With transparent huge pages set to "always", an anonymous mapping may be
 * backed by a 2 MiB page on first touch; stacks ask for small pages. */
static bool need_nohugepage(void)
{
    int v = atomic_load(&thp_always);
    if (v < 0) {
        char buf[128] = {0};
        int fd = open("/sys/kernel/mm/transparent_hugepage/enabled",
                      O_RDONLY | O_CLOEXEC);
        v = 0;
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof buf - 1);
            if (n > 0 && strstr(buf, "[always]"))
                v = 1;
            close(fd);
        }
        atomic_store(&thp_always, v);
    }
    return v == 1;
}

/* Does the page at @p fault? Asks the kernel to read one byte of it into
 * a pipe: EFAULT means guarded. Emulators (qemu-user) may accept advice
 * they do not implement, so the first madvise guard is checked once. */
static bool page_faults(const void *p)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return true; /* cannot tell: trust the kernel's answer */
    ssize_t n = write(fds[1], p, 1);
    bool faults = n < 0 && errno == EFAULT;
    close(fds[0]);
    close(fds[1]);
    return faults;
}

static void install_guard(weft__stack_cache *c, weft__stack *st, uint32_t guard)
{
    int mode = atomic_load(&guard_mode);
    if (mode != 2) {
        if (madvise(st->base, guard, MADV_GUARD_INSTALL) == 0 &&
            (mode == 1 || page_faults(st->base))) {
            if (!mode)
                atomic_store(&guard_mode, 1);
            st->guard = guard;
            return;
        }
        if (mode == 1 && errno == ENOMEM) {
            c->unguarded++;
            return;
        }
        atomic_store(&guard_mode, 2);
    }
    if (mprotect(st->base, guard, PROT_NONE) == 0)
        st->guard = guard;
    else
        c->unguarded++;
}

int weft__stack_map(weft__stack_cache *c, size_t map_size, weft__stack *out)
{
    void *p = mmap(NULL, map_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                   -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    out->base = p;
    out->map_size = map_size;
    out->guard = 0;
    out->vg_id = 0;
    out->next = NULL;
    if (need_nohugepage())
        (void)madvise(p, map_size, MADV_NOHUGEPAGE);
    install_guard(c, out, (uint32_t)weft__guard_size());
#ifdef WEFT_VALGRIND
    out->vg_id = VALGRIND_STACK_REGISTER(out->base + out->guard,
                                         out->base + map_size);
#endif
    return 0;
}

static void stack_unmap(weft__stack *st)
{
    /* @st may lie inside the mapping: read it before unmapping. */
    char *base = st->base;
    size_t size = st->map_size;
#ifdef WEFT_VALGRIND
    VALGRIND_STACK_DEREGISTER(st->vg_id);
#endif
    munmap(base, size);
}

void weft__stack_put(weft__stack_cache *c, weft__stack *st)
{
    if (weft__stack_cacheable(c, st))
        weft__stack_keep(c, st);
    else
        stack_unmap(st);
}

void weft__stack_cache_fini(weft__stack_cache *c)
{
    while (c->head) {
        weft__stack *st = c->head;
        c->head = st->next;
        stack_unmap(st);
    }
    c->n = 0;
}
