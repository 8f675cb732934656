/*
 * ctx.c — building a new context for the assembly switch, or the ucontext
 * fallback on architectures without one (and when WEFT_CTX_UCONTEXT is
 * defined, so the fallback is tested on x86-64 too).
 */
#include "../internal.h"

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

#else

extern void weft__ctx_trampoline(void);

void weft__ctx_make(weft__ctx *c, void *lo, size_t size,
                    void (*entry)(void *), void *arg)
{
    uintptr_t top = ((uintptr_t)lo + size) & ~(uintptr_t)15;
    memset(c, 0, sizeof *c);
#if defined(__x86_64__)
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    /* The switch resumes a context with `ret`: the first one pops the
     * trampoline's address and leaves rsp 16-byte aligned. */
    top -= 8;
    *(uint64_t *)top = (uint64_t)(uintptr_t)weft__ctx_trampoline;
    c->r[1] = top;
    c->r[4] = (uint64_t)(uintptr_t)entry; /* r12 */
    c->r[5] = (uint64_t)(uintptr_t)arg;   /* r13 */
    memcpy((char *)c->r + 64, &mxcsr, 4);
    memcpy((char *)c->r + 68, &fpucw, 2);
#else /* aarch64 */
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    c->r[0] = (uint64_t)(uintptr_t)entry; /* x19 */
    c->r[1] = (uint64_t)(uintptr_t)arg;   /* x20 */
    c->r[11] = (uint64_t)(uintptr_t)weft__ctx_trampoline; /* x30 */
    c->r[12] = top;                                        /* sp  */
    c->r[21] = fpcr;
#endif
}

#endif
