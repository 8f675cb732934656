/*
 * x86-64 System V context switch.
 *
 * weft__ctx layout (8-byte slots):
 *   0 rip  8 rsp  16 rbx  24 rbp  32 r12  40 r13  48 r14  56 r15
 *   64 MXCSR (4 bytes)  68 x87 control word (2 bytes)
 *
 * The switch saves the callee-saved state and the resume address of the
 * caller, then jumps to the target's resume address. The resumed side
 * continues at label 1, whose `ret` returns to its own caller: only one
 * indirect jump and one return per switch, no push/pop sequence.
 */
#ifdef __x86_64__
    .text
    .globl  weft__ctx_switch
    .hidden weft__ctx_switch
    .type   weft__ctx_switch, @function
    .p2align 4
weft__ctx_switch:
    leaq    1f(%rip), %rax
    movq    %rax,  0(%rdi)
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
    jmpq    *0(%rsi)
1:
    ret
    .size   weft__ctx_switch, .-weft__ctx_switch

/* First code run on a new stack: r12 = entry, r13 = argument. The stack
 * pointer is 16-byte aligned here, so the call leaves the callee with the
 * ABI's entry alignment (rsp + 8 aligned). The entry never returns. */
    .globl  weft__ctx_trampoline
    .hidden weft__ctx_trampoline
    .type   weft__ctx_trampoline, @function
    .p2align 4
weft__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq    %r13, %rdi
    callq   *%r12
    ud2
    .cfi_endproc
    .size   weft__ctx_trampoline, .-weft__ctx_trampoline
#endif
    .section .note.GNU-stack,"",%progbits
