/*
 * AArch64 (AAPCS64) context switch.
 *
 * weft__ctx layout (8-byte slots):
 *   0..72 x19-x28   80 x29 (fp)   88 x30 (lr, the resume address)
 *   96 sp   104..160 d8-d15   168 fpcr
 */
#ifdef __aarch64__
    .text
    .globl  weft__ctx_switch
    .hidden weft__ctx_switch
    .type   weft__ctx_switch, %function
    .p2align 4
weft__ctx_switch:
    stp     x19, x20, [x0, #0]
    stp     x21, x22, [x0, #16]
    stp     x23, x24, [x0, #32]
    stp     x25, x26, [x0, #48]
    stp     x27, x28, [x0, #64]
    stp     x29, x30, [x0, #80]
    mov     x9, sp
    str     x9,       [x0, #96]
    stp     d8,  d9,  [x0, #104]
    stp     d10, d11, [x0, #120]
    stp     d12, d13, [x0, #136]
    stp     d14, d15, [x0, #152]
    mrs     x9, fpcr
    str     x9,       [x0, #168]

    ldp     x19, x20, [x1, #0]
    ldp     x21, x22, [x1, #16]
    ldp     x23, x24, [x1, #32]
    ldp     x25, x26, [x1, #48]
    ldp     x27, x28, [x1, #64]
    ldp     x29, x30, [x1, #80]
    ldr     x9,       [x1, #96]
    mov     sp, x9
    ldp     d8,  d9,  [x1, #104]
    ldp     d10, d11, [x1, #120]
    ldp     d12, d13, [x1, #136]
    ldp     d14, d15, [x1, #152]
    ldr     x10,      [x1, #168]
    mrs     x11, fpcr
    cmp     x10, x11
    b.eq    1f
    msr     fpcr, x10
1:
    ret
    .size   weft__ctx_switch, .-weft__ctx_switch

/* weft__ctx_jump(to): the loading half of the switch alone, for a
 * context that is never resumed (a finished fiber): nothing is saved. */
    .globl  weft__ctx_jump
    .hidden weft__ctx_jump
    .type   weft__ctx_jump, %function
    .p2align 4
weft__ctx_jump:
    ldp     x19, x20, [x0, #0]
    ldp     x21, x22, [x0, #16]
    ldp     x23, x24, [x0, #32]
    ldp     x25, x26, [x0, #48]
    ldp     x27, x28, [x0, #64]
    ldp     x29, x30, [x0, #80]
    ldr     x9,       [x0, #96]
    mov     sp, x9
    ldp     d8,  d9,  [x0, #104]
    ldp     d10, d11, [x0, #120]
    ldp     d12, d13, [x0, #136]
    ldp     d14, d15, [x0, #152]
    ldr     x10,      [x0, #168]
    mrs     x11, fpcr
    cmp     x10, x11
    b.eq    1f
    msr     fpcr, x10
1:
    ret
    .size   weft__ctx_jump, .-weft__ctx_jump

/* First code on a new stack: x19 = entry, x20 = argument. */
    .globl  weft__ctx_trampoline
    .hidden weft__ctx_trampoline
    .type   weft__ctx_trampoline, %function
    .p2align 4
weft__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    mov     x0, x20
    blr     x19
    brk     #0
    .cfi_endproc
    .size   weft__ctx_trampoline, .-weft__ctx_trampoline
#endif
    .section .note.GNU-stack,"",%progbits
