/*
 * overflow.c — a clear message when a fiber runs off its stack.
 *
 * A fiber that overflows faults on its guard page. Without help the process
 * just dies with SIGSEGV and no word of why. When (and only when) the
 * process's SIGSEGV disposition is still the default, weft installs a
 * handler that runs on a per-thread alternate stack, prints which fiber
 * overflowed, restores the default disposition and returns: the faulting
 * instruction runs again and the process dies with SIGSEGV exactly as it
 * would have, core dump included. Faults anywhere else are left alone the
 * same way, and a SIGSEGV sent by kill(2) or raise(3), which no instruction
 * would raise again, is sent again. Opt out with
 * weft_sched_opts_t.no_overflow_handler or the environment variable
 * WEFT_NO_OVERFLOW_HANDLER.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALTSTACK_SIZE (64 * 1024)

static atomic_int handler_state; /* 0 not tried, 1 ours, 2 someone else's */

static char *fmt_u64(char *p, uint64_t v, int base)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % (unsigned)base];
        v /= (unsigned)base;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

static void on_segv(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    weft_sched_t *s = weft__sched_tls();
    char *addr = si->si_addr;
    if (s && s->current && !s->current->is_main) {
        weft__fiber *f = s->current;
        char *lo = f->stack.base;
        if (f->stack.guard && addr >= lo && addr < lo + f->stack.guard) {
            char msg[256], *p = msg;
            p = put(p, "weft: fiber stack overflow: fiber #");
            p = fmt_u64(p, f->slot + 1, 10);
            p = put(p, " used all of its ");
            p = fmt_u64(p, f->stack.map_size - f->stack.guard, 10);
            p = put(p, "-byte stack and hit the guard page at 0x");
            p = fmt_u64(p, (uint64_t)(uintptr_t)addr, 16);
            p = put(p, "; spawn it with a larger weft_spawn_opts_t.stack_size\n");
            ssize_t w = write(STDERR_FILENO, msg, (size_t)(p - msg));
            (void)w;
        }
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    /* A SIGSEGV that was sent (kill(2), raise(3), sigqueue(3): si_code <= 0)
     * has no faulting instruction to run again: send it once more, now to
     * the default action, which it meets as soon as this handler returns
     * (the signal is blocked until then), as it would have without us. */
    if (si->si_code <= 0)
        raise(sig);
}

void weft__overflow_install(weft_sched_t *s)
{
    int st = atomic_load(&handler_state);
    if (st == 0) {
        struct sigaction cur;
        if (sigaction(SIGSEGV, NULL, &cur) == 0 &&
            !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = on_segv;
            sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
            sigemptyset(&sa.sa_mask);
            int expect = 0;
            if (atomic_compare_exchange_strong(&handler_state, &expect, 1))
                sigaction(SIGSEGV, &sa, NULL);
        } else {
            int expect = 0;
            atomic_compare_exchange_strong(&handler_state, &expect, 2);
        }
        st = atomic_load(&handler_state);
    }
    if (st != 1)
        return;
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
        void *p = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return;
        stack_t ss = {.ss_sp = p, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) == 0) {
            s->altstack = p;
            s->altstack_size = ALTSTACK_SIZE;
            s->altstack_installed = true;
        } else {
            munmap(p, ALTSTACK_SIZE);
        }
    }
}

void weft__overflow_remove(weft_sched_t *s)
{
    if (!s->altstack_installed)
        return;
    stack_t ss = {.ss_flags = SS_DISABLE};
    sigaltstack(&ss, NULL);
    munmap(s->altstack, s->altstack_size);
    s->altstack = NULL;
    s->altstack_installed = false;
}
