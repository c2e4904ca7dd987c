/*
 * fntrace_return_trampoline: where a hooked function returns to.
 *
 * When a tracer wants a function's exit, the entry hook saves the function's
 * return address on this thread's shadow stack and writes the address of
 * this trampoline into the return-address slot. The function's `ret` then
 * lands here with:
 *
 *      %rsp      = slot + 8   (the slot itself has just been popped)
 *      %rax,%rdx = integer return value(s)
 *      %xmm0,%xmm1 = floating-point / vector return value(s)
 *      %st(0)    = long double return value (C); Rust code below never
 *                  touches the x87 stack, so it is left in place
 *
 * Everything else is dead at a return (caller-saved), except callee-saved
 * registers, which the Rust code below preserves by the ABI. The direction
 * flag is clear by the ABI.
 *
 * Slow path, stack while calling into Rust:
 *
 *       8(%rbp)   the old slot: receives the real return address, then `ret`
 *       0(%rbp)   saved %rbp
 *                 ... 0-15 bytes of alignment padding ...
 *      48(%rsp)   saved guard byte (previous value of the guard byte)
 *      32(%rsp)   xmm1
 *      16(%rsp)   xmm0
 *       8(%rsp)   rdx
 *       0(%rsp)   rax             <- %rsp, 16-byte aligned
 *
 * Fast path (first, no call): when the top shadow frame is this slot's,
 * was pushed for the graph tracer alone while its fast path is on
 * (exit-tracer mask == fntrace_graph_fast_bit, no marks), the frame is
 * popped and the exit event written right here (or, the ring being full,
 * counted as dropped in the ring's header; in lossless mode a ring at its
 * fast limit takes the slow path instead). Besides
 * rax/rdx (pushed around rdtsc, popped before leaving) only registers dead
 * at a return are used. Everything else takes the slow path below,
 * unchanged, with every register as the function left it:
 *
 *       8(%rsp)   rax, saved in the old slot itself (F's `ret` popped it)
 *       0(%rsp)   rdx                      <- %rsp after the two pushes
 *
 *      r11 TLS offset of fntrace_thread   rcx shadow stack   rax ticks
 *      r8  depth    r9 the top frame      rsi ring    r10 ring head
 *      rdi scratch                        rdx event slot
 *
 * Rust side: extern "C" fn fntrace_exit_entry(slot: *mut usize, tsc: u64)
 *       -> usize
 *   %rdi = slot (8(%rbp)); %rsi = the TSC the fast path read before it
 *   gave up (0: none), kept from the prologue on (nothing below writes
 *   rsi); returns the real return address in %rax.
 *
 * The trampoline leaves with `jmp *%r11` (r11 is dead at a return), not
 * `ret`: the function's own `ret` into this trampoline already consumed the
 * return-stack-buffer entry of its call, and a second `ret` would be
 * mispredicted for every frame above (measured: ~10 ns per hooked call).
 *
 * The recursion guard is set while Rust runs (saving its previous value:
 * the guard may already be set, e.g. a hooked frame returning inside
 * fntrace::untraced), so instrumented code called from the exit hook is
 * not traced.
 */

#include "layout.h"

#define SAVE_AREA 64

        .text
        .p2align 4
        .cfi_startproc
        /* Unwinders cannot describe this frame's caller: the real return
         * address is only known to the shadow stack. fntrace restores real
         * return addresses before an unwinder walks the stack (src/rt/
         * unwind.rs); one that finds the trampoline anyway stops here, at
         * an end of stack, instead of reading garbage. An unwinder looks up
         * the description of `return address - 1`: the byte before the
         * entry point belongs to this description, not the function before. */
        .cfi_undefined rip
        nop
        .p2align 4, 0x90                /* the entry stays aligned */
        .globl  fntrace_return_trampoline
        .hidden fntrace_return_trampoline
        .type   fntrace_return_trampoline, @function
fntrace_return_trampoline:
        /* Return values aside; the guard; then the timestamp, early (rdtsc
         * is slow; the checks run while it completes) but under the guard,
         * or a signal handler's events could be written before this older
         * one. Below %rsp is free here: the caller's frame ends at %rsp and
         * nothing of it lives lower. */
        pushq   %rax
        pushq   %rdx
        movq    fntrace_thread@GOTTPOFF(%rip), %r11
        cmpb    $0, %fs:THREAD_IN_TRACER(%r11)
        jne     .Lslow_restore
        movb    $1, %fs:THREAD_IN_TRACER(%r11)
        rdtsc
        shlq    $32, %rdx
        orq     %rdx, %rax
        movq    %fs:THREAD_SHADOW(%r11), %rcx
        testq   %rcx, %rcx
        jz      .Lslow_with_tsc
        movq    SHADOW_LEN(%rcx), %r8
        testq   %r8, %r8
        jz      .Lslow_with_tsc
        imulq   $FRAME_SIZE, %r8, %r9
        leaq    SHADOW_FRAMES-FRAME_SIZE(%rcx,%r9), %r9
        leaq    8(%rsp), %rdi           /* the slot: just above the two pushes */
        cmpq    %rdi, FRAME_SLOT(%r9)
        jne     .Lslow_with_tsc         /* deeper frames died (longjmp) */
        movq    fntrace_graph_fast_bit(%rip), %rdi
        testq   %rdi, %rdi
        jz      .Lslow_with_tsc
        cmpq    %rdi, FRAME_EXIT_TRACERS(%r9)
        jne     .Lslow_with_tsc
        cmpq    $0, FRAME_MARKS(%r9)
        jne     .Lslow_with_tsc
        movq    %fs:THREAD_FAST_TRACER_SLOT(%r11), %rsi
        testq   %rsi, %rsi
        jz      .Lslow_with_tsc

        /* Lossless recording: from its fast limit on (half the capacity
         * then; never reached otherwise) the ring's events go the slow way,
         * which asks the writer for a drain and waits for room if full. */
        movq    RING_HEAD(%rsi), %r10
        subq    RING_TAIL(%rsi), %r10
        cmpq    RING_FAST_LIMIT(%rsi), %r10
        jae     .Lslow_with_tsc

        decq    %r8
        movq    %r8, SHADOW_LEN(%rcx)   /* popped; its memory stays intact */
        cmpq    fntrace_graph_max_depth(%rip), %r8
        ja      1f                      /* beyond the depth limit: no event */
        movq    RING_HEAD(%rsi), %r10
        movq    %r10, %rdi
        subq    RING_TAIL(%rsi), %rdi
        cmpq    RING_CAPACITY(%rsi), %rdi
        jae     3f                      /* ring full: count the drop */
        EVENT_SLOT %rsi, %r10, %rdx
        movq    %rax, EVENT_TICKS(%rdx)
        shlq    $EVENT_DEPTH_SHIFT, %r8
        btsq    $EVENT_EXIT_BIT, %r8
        orq     FRAME_SITE(%r9), %r8
        movq    %r8, EVENT_WORD(%rdx)
        incq    %r10
        movq    %r10, RING_HEAD(%rsi)   /* publishes the event */
        jmp     1f
3:
        incq    RING_DROPPED(%rsi)      /* the owner alone writes it */
1:
        movq    FRAME_REAL_RETURN(%r9), %r9
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        popq    %rdx
        popq    %rax
        jmp     *%r9

        /* Giving up after the timestamp: the slow path gets it (no second
         * read) and the guard stays set until its event is written, so no
         * signal handler's event can come between with a later time. */
.Lslow_with_tsc:
        movq    %rax, %rsi
        jmp     .Lslow_pop
.Lslow_restore:
        xorl    %esi, %esi              /* no timestamp taken */
.Lslow_pop:
        popq    %rdx
        popq    %rax
.Lslow:
        subq    $8, %rsp                /* re-occupy the slot */
        pushq   %rbp
        movq    %rsp, %rbp
        andq    $-16, %rsp
        subq    $SAVE_AREA, %rsp
        movq    %rax,  0(%rsp)
        movq    %rdx,  8(%rsp)
        movaps  %xmm0, 16(%rsp)
        movaps  %xmm1, 32(%rsp)

        movq    fntrace_thread@GOTTPOFF(%rip), %rcx
        movzbl  %fs:(%rcx), %eax
        testq   %rsi, %rsi
        jz      2f
        xorl    %eax, %eax              /* the fast path set it: it was clear */
2:
        movq    %rax, 48(%rsp)
        movb    $1, %fs:(%rcx)

        leaq    8(%rbp), %rdi
        call    fntrace_exit_entry@PLT
        movq    %rax, %r11              /* the real return address */

        movq    fntrace_thread@GOTTPOFF(%rip), %rcx
        movq    48(%rsp), %rax
        movb    %al, %fs:(%rcx)

        movq     0(%rsp), %rax
        movq     8(%rsp), %rdx
        movaps  16(%rsp), %xmm0
        movaps  32(%rsp), %xmm1
        movq    %rbp, %rsp
        popq    %rbp
        addq    $8, %rsp                /* drop the slot, as `ret` would */
        jmp     *%r11
        .cfi_endproc
        .size   fntrace_return_trampoline, . - fntrace_return_trampoline

        .section .note.GNU-stack,"",@progbits
