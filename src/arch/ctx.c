/*
 * ctx.c — the ucontext fallback, on architectures without an assembly
 * switch (and when WEFT_CTX_UCONTEXT is defined, so the fallback is tested
 * on x86-64 too). With the assembly switch (ctx_x86_64.S, ctx_aarch64.S)
 * a new context is made inline (internal.h: weft__ctx_make).
 */
#include "internal.h"

#include <stdint.h>
#include <string.h>

#ifdef WEFT_CTX_UCONTEXT

/* makecontext passes only int arguments: split the pointers. */
static void uc_entry(unsigned e_hi, unsigned e_lo, unsigned a_hi, unsigned a_lo)
{
    void (*entry)(void *) =
        (void (*)(void *))(((uintptr_t)e_hi << 16 << 16) | (uintptr_t)e_lo);
    void *arg = (void *)(((uintptr_t)a_hi << 16 << 16) | (uintptr_t)a_lo);
    entry(arg);
    __builtin_trap();
}

void weft__ctx_make(weft__ctx *c, void *lo, size_t size,
                    void (*entry)(void *), void *arg)
{
    uintptr_t e = (uintptr_t)entry, a = (uintptr_t)arg;
    memset(c, 0, sizeof *c);
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, (void (*)(void))uc_entry, 4,
                (unsigned)(e >> 16 >> 16), (unsigned)(e & 0xffffffffu),
                (unsigned)(a >> 16 >> 16), (unsigned)(a & 0xffffffffu));
}

void weft__ctx_switch(weft__ctx *from, weft__ctx *to)
{
    swapcontext(&from->uc, &to->uc);
}

#ifdef __x86_64__
bool weft__ctx_is_new(const weft__ctx *c)
{
    return c->uc.uc_mcontext.gregs[REG_RIP] == (greg_t)(uintptr_t)uc_entry;
}
#endif

void weft__ctx_jump(weft__ctx *to)
{
    setcontext(&to->uc);
    __builtin_trap();
}

#endif
