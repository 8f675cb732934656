/*
 * x86-64 System V context switch.
 *
 * weft__ctx layout (8-byte slots):
 *   0 (unused)  8 rsp  16 rbx  24 rbp  32 r12  40 r13  48 r14  56 r15
 *   64 MXCSR (4 bytes)  68 x87 control word (2 bytes)
 *
 * The caller's return address stays on its own stack: the switch saves
 * rsp and the callee-saved state, loads the target's, and `ret`s to the
 * address on top of the target's stack. A new context (weft__ctx_make)
 * has the trampoline's address there.
 *
 * Why `ret` and not `jmp` to a saved address (which is faster when the two
 * sides switch from different call sites): the CPU predicts a
 * `ret` from its return stack buffer. Fibers switch from the same few call
 * sites in the scheduler (all yielding fibers from weft_yield), so this
 * `ret` is predicted, and the return stack stays balanced. A `jmp` leaves
 * one entry unconsumed per switch, so the resumed fiber's next `ret`
 * mispredicts, which costs a yield ping-pong about as much again as the
 * switch itself (docs/PERFORMANCE.md).
 *
 * MXCSR and the x87 control word are callee-saved in the ABI and are
 * restored unconditionally: comparing first (to skip ldmxcsr/fldcw) has to
 * reload the value stmxcsr just stored, which costs more than the loads.
 * stmxcsr itself is the most expensive instruction here, and the floor of
 * any switch that keeps the ABI.
 */
#ifdef __x86_64__
    .text
    .globl  weft__ctx_switch
    .hidden weft__ctx_switch
    .type   weft__ctx_switch, @function
    /* On a cache line's start: the switch then takes the same two lines
     * wherever the linker puts the object. At 16-byte alignment its
     * placement moved with unrelated files, and the same instructions ran
     * measurably slower (docs/PERFORMANCE.md). */
    .p2align 6
weft__ctx_switch:
    movq    %rsp,  8(%rdi)
    movq    %rbx, 16(%rdi)
    movq    %rbp, 24(%rdi)
    movq    %r12, 32(%rdi)
    movq    %r13, 40(%rdi)
    movq    %r14, 48(%rdi)
    movq    %r15, 56(%rdi)
    stmxcsr 64(%rdi)
    fnstcw  68(%rdi)

    movq     8(%rsi), %rsp
    movq    16(%rsi), %rbx
    movq    24(%rsi), %rbp
    movq    32(%rsi), %r12
    movq    40(%rsi), %r13
    movq    48(%rsi), %r14
    movq    56(%rsi), %r15
    ldmxcsr 64(%rsi)
    fldcw   68(%rsi)
    ret
    .size   weft__ctx_switch, .-weft__ctx_switch

/* weft__ctx_jump(to): the second half of the switch alone, for a context
 * that is never resumed (a finished fiber): nothing is saved, so neither
 * the stores nor stmxcsr are paid on every fiber exit. Reached by a jmp,
 * not a call (internal.h: weft__ctx_exit), and it leaves by pop + jmp, not
 * ret, so that the return stack buffer is left as the resumed context
 * last saw it: a fiber that joined another and resumes here returns
 * through the entries its own calls pushed before it switched away, all
 * predicted. The jmp itself is predicted by its own history (the next new
 * fiber's trampoline, or the same joiner's switch site). */
    .globl  weft__ctx_jump
    .hidden weft__ctx_jump
    .type   weft__ctx_jump, @function
    .p2align 4
weft__ctx_jump:
    movq     8(%rdi), %rsp
    movq    16(%rdi), %rbx
    movq    24(%rdi), %rbp
    movq    32(%rdi), %r12
    movq    40(%rdi), %r13
    movq    48(%rdi), %r14
    movq    56(%rdi), %r15
    ldmxcsr 64(%rdi)
    fldcw   68(%rdi)
    popq    %rcx
    jmpq    *%rcx
    .size   weft__ctx_jump, .-weft__ctx_jump

/* First code run on a new stack, reached by the switch's `ret`: r12 =
 * entry, r13 = argument. The stack pointer is 16-byte aligned here. The
 * entry is entered with a jmp after pushing a return address of its own
 * (the ud2 below), not with a call: a call would push a return stack
 * entry that no ret ever takes (the entry never returns), and every
 * return after the fiber's exit would be predicted one entry off. The
 * pushed address keeps the ABI's entry alignment (rsp + 8 aligned) and
 * points into this function, whose CFI ends a backtrace. */
    .globl  weft__ctx_trampoline
    .hidden weft__ctx_trampoline
    .type   weft__ctx_trampoline, @function
    .p2align 4
weft__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq    %r13, %rdi
    leaq    1f(%rip), %rax
    pushq   %rax
    jmpq    *%r12
1:  ud2
    .cfi_endproc
    .size   weft__ctx_trampoline, .-weft__ctx_trampoline
#endif
    .section .note.GNU-stack,"",%progbits
