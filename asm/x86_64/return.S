/*
 * fntrace_return_trampoline: where a hooked function returns to; and its
 * variant fntrace_return_balanced, for frames hooked through a site's
 * return stub (src/patch/return_stubs.rs).
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
 * Registers: nothing but %rsp and the flags changes on the way through.
 * The other caller-saved registers are dead at a return by the ABI, but
 * not in code built with gcc -O2's -fipa-ra, which the run-time entry
 * patches (`fntrace record -P`) trace: a caller may keep a value in %rcx
 * across a call whose callees it knows leave %rcx alone (measured: gcc 12
 * -O2 keeps main's loop counter in %rcx across `call w_top`; clobbering it
 * looped forever). So rcx, rsi, rdi, r8-r11 are saved on every path, and
 * xmm0-xmm15 on the slow one (the fast path touches no vector register);
 * callee-saved registers are preserved by the Rust code by the ABI. The
 * direction flag is clear by the ABI.
 *
 * Stack, from the entry on (%rsp = slot + 8 on arrival):
 *
 *      72(%rsp)   the old slot: receives the real return address
 *      64(%rsp)   rax          56(%rsp) rdx     48(%rsp) rcx
 *      40(%rsp)   rsi          32(%rsp) rdi     24(%rsp) r8
 *      16(%rsp)   r9            8(%rsp) r10      0(%rsp) r11
 *
 * Slow path, while calling into Rust: %rbp holds the saved %rbp just below
 * those (the slot at 80(%rbp)); then 0-15 bytes of alignment padding;
 * then, from the 16-byte aligned %rsp, xmm0-xmm15 (0..255) and the saved
 * guard byte (256).
 *
 * Fast path (first, no call): when the top shadow frame is this slot's,
 * was pushed for the graph tracer alone while its fast path is on
 * (exit-tracer mask == fntrace_graph_fast_bit, no marks), the frame is
 * popped and the exit event written right here (or, the ring being full,
 * counted as dropped in the ring's header; in lossless mode a ring at its
 * fast limit takes the slow path instead). A frame pushed for the profile
 * tracer alone while its fast path is on (mask == fntrace_profile_fast_bit,
 * no marks) goes on to fntrace_profile_exit (profile.S), with the registers
 * below as they are at `.Lprofile` (r11, rcx, rax, r8, r9); it comes back
 * to fntrace_return_leave, or gives up to fntrace_return_slow_with_tsc.
 * A frame pushed by the graph tracer's argument entry (graph.S, args =
 * 1) for a function whose integer return value is recorded carries the
 * marks MARK_ARGS_BIT | MARK_FAST_RETVAL_BIT | shift (layout.h):
 * `.Lmarked` ends it as the graph tracer's, its exit event followed by a
 * data slot holding rax (64(%rsp)) masked to the value's size, or sends
 * it to the slow path (no room for both, or any other mark), which reads
 * the return value for a frame with MARK_ARGS_BIT as the generic path's.
 * A poll's frame (the argument entry's, marks MARK_POLL_* in layout.h)
 * is ended at `.Lpoll` the same way, its data slot the future's state,
 * and linked into its future by a call into Rust (fntrace_poll_exited)
 * with xmm0-xmm15 saved around it.
 * Everything else takes the slow path below. In the fast path:
 *
 *      r11 TLS offset of fntrace_thread   rcx shadow stack   rax ticks
 *      r8  depth    r9 the top frame      rsi ring    r10 ring head
 *      rdi scratch                        rdx event slot
 *
 * Rust side: extern "C" fn fntrace_exit_entry(slot: *mut usize, tsc: u64,
 *       vectors: *const u64, rax: *const u64) -> usize
 *   %rdi = slot (80(%rbp), 88(%rbp) balanced); %rsi = the TSC the fast
 *   path read before it gave up (0: none), kept from the prologue on
 *   (nothing below writes rsi); %rdx = the save area of xmm0-xmm15;
 *   %rcx = the saved rax (72(%rbp) in both: the balanced variant's slot
 *   is one word further up, above the stub's return address); returns
 *   the real return address in %rax, stored in the slot.
 *
 * Both paths leave through the slot, with `jmp *-8(%rsp)` once every
 * register is back, not `ret`: the function's own `ret` into this
 * trampoline already consumed the return-stack-buffer entry of its call,
 * and a second `ret` would be mispredicted for every frame above
 * (measured: ~10 ns per hooked call).
 *
 * The recursion guard is set while Rust runs (saving its previous value:
 * the guard may already be set, e.g. a hooked frame returning inside
 * fntrace::untraced), so instrumented code called from the exit hook is
 * not traced.
 */

/*
 * fntrace_return_balanced is the same code (RETURN_TRAMPOLINE below, with
 * balanced = 1) for a function that returned into its stub's hook, which
 * made room and called here: on arrival %rsp = slot - 8, holding the
 * stub's return address (S+22, a `ret`), and the slot above it is free.
 * So no `subq $8`: the slot is 80(%rsp) after the nine pushes (72(%rsp)
 * the stub's return address); and every path leaves with `ret`, into the
 * stub, which returns through the slot to the real caller: both returns
 * match the return-stack buffer's entries (the stub's two calls). The
 * profile tracer's exit has a variant for it (fntrace_profile_exit_balanced).
 */

#include "layout.h"

/* Offsets: the slot above the nine integer registers pushed; in the slow
 * path, xmm0-xmm15 and the saved guard byte below %rbp. */
#define SLOT (72 + 8 * \balanced)   /* inside RETURN_TRAMPOLINE */
#define SAVE_AREA 272
#define GUARD_SAVE 256

/* The return stubs' arenas (src/patch/return_stubs.rs): STUB_ARENAS
 * pairs (first byte, length), (0, 0) while unused. Written under the
 * control lock before any site jumps into an arena, read by the fast
 * entries' JUMP_IF_STUB_HOOK (layout.h). */
        .data
        .p2align 6
        .globl  fntrace_return_stub_arenas
        .hidden fntrace_return_stub_arenas
        .type   fntrace_return_stub_arenas, @object
        .size   fntrace_return_stub_arenas, 16 * STUB_ARENAS
fntrace_return_stub_arenas:
        .zero   16 * STUB_ARENAS

/* `out` = the function's rax (64(%rsp) once POP_FOR_EXIT_AND_DATA has
 * run) masked to the value's size by the shift at MARK_RETVAL_SHIFT_AT
 * of the marks in %rdi (read first: `out` may be %rdi); clobbers %rcx. */
.macro MASKED_RAX out
        movq    %rdi, %rcx              /* the shift, in cl */
        shrq    $MARK_RETVAL_SHIFT_AT, %rcx
        andl    $63, %ecx
        movq    64(%rsp), \out
        shlq    %cl, \out
        shrq    %cl, \out
.endm

/* A marked frame of the graph tracer's, at its fast exit (registers as
 * in "Fast path" above): to `slow` unless the frame is the graph tracer's
 * while its fast path is on and the ring (its address into rsi) has room
 * for the exit event and one data slot; then the frame is popped (r8 its
 * depth), and a depth beyond the limit goes to `popped` (no event). */
.macro POP_FOR_EXIT_AND_DATA slow, popped
        movq    FRAME_EXIT_TRACERS(%r9), %r10
        cmpq    fntrace_graph_fast_bit(%rip), %r10
        jne     \slow
        testq   %r10, %r10
        jz      \slow
        movq    %fs:THREAD_FAST_TRACER_SLOT(%r11), %rsi
        testq   %rsi, %rsi
        jz      \slow
        movq    RING_HEAD(%rsi), %r10
        subq    RING_TAIL(%rsi), %r10
        addq    $2, %r10
        cmpq    RING_FAST_LIMIT(%rsi), %r10
        ja      \slow
        cmpq    RING_CAPACITY(%rsi), %r10
        ja      \slow
        decq    %r8
        movq    %r8, SHADOW_LEN(%rcx)   /* popped; its memory stays intact */
        cmpq    fntrace_graph_max_depth(%rip), %r8
        ja      \popped
.endm

/* The popped frame's exit event (ticks in rax, depth in r8, the frame at
 * r9) with MORE set, and one data slot holding `value`, both published
 * by one store of the ring's head (rsi); `slot` is scratch, r8 and r10
 * are clobbered. */
.macro WRITE_EXIT_AND_DATA value, slot
        movq    RING_HEAD(%rsi), %r10
        EVENT_SLOT %rsi, %r10, \slot
        movq    %rax, EVENT_TICKS(\slot)
        shlq    $EVENT_DEPTH_SHIFT, %r8
        btsq    $EVENT_EXIT_BIT, %r8
        btsq    $EVENT_MORE_BIT, %r8
        orq     FRAME_SITE(%r9), %r8
        movq    %r8, EVENT_WORD(\slot)
        incq    %r10
        EVENT_SLOT %rsi, %r10, \slot
        movq    \value, EVENT_TICKS(\slot)
        movabsq $(EVENT_DATA_DEPTH << EVENT_DEPTH_SHIFT), %r8
        movq    %r8, EVENT_WORD(\slot)
        incq    %r10
        movq    %r10, RING_HEAD(%rsi)   /* publishes both */
.endm

/* xmm0-xmm15 at 0(%rsp)..255(%rsp) (16-byte aligned), and back. */
.macro SAVE_VECTORS
        movaps  %xmm0,    0(%rsp)
        movaps  %xmm1,   16(%rsp)
        movaps  %xmm2,   32(%rsp)
        movaps  %xmm3,   48(%rsp)
        movaps  %xmm4,   64(%rsp)
        movaps  %xmm5,   80(%rsp)
        movaps  %xmm6,   96(%rsp)
        movaps  %xmm7,  112(%rsp)
        movaps  %xmm8,  128(%rsp)
        movaps  %xmm9,  144(%rsp)
        movaps  %xmm10, 160(%rsp)
        movaps  %xmm11, 176(%rsp)
        movaps  %xmm12, 192(%rsp)
        movaps  %xmm13, 208(%rsp)
        movaps  %xmm14, 224(%rsp)
        movaps  %xmm15, 240(%rsp)
.endm
.macro RESTORE_VECTORS
        movaps    0(%rsp), %xmm0
        movaps   16(%rsp), %xmm1
        movaps   32(%rsp), %xmm2
        movaps   48(%rsp), %xmm3
        movaps   64(%rsp), %xmm4
        movaps   80(%rsp), %xmm5
        movaps   96(%rsp), %xmm6
        movaps  112(%rsp), %xmm7
        movaps  128(%rsp), %xmm8
        movaps  144(%rsp), %xmm9
        movaps  160(%rsp), %xmm10
        movaps  176(%rsp), %xmm11
        movaps  192(%rsp), %xmm12
        movaps  208(%rsp), %xmm13
        movaps  224(%rsp), %xmm14
        movaps  240(%rsp), %xmm15
.endm

.macro RETURN_TRAMPOLINE name, balanced, slow, leave, profile_exit
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
        .globl  \name
        .hidden \name
        .type   \name, @function
\name:
        /* The slot re-occupied, every caller-saved integer register aside
         * (see "Registers" above); the guard; then the timestamp, early
         * (rdtsc is slow; the checks run while it completes) but under the
         * guard, or a signal handler's events could be written before this
         * older one. Below %rsp is free here: the caller's frame ends at
         * %rsp and nothing of it lives lower. */
.if \balanced == 0
        subq    $8, %rsp                /* the slot */
.endif
        pushq   %rax
        pushq   %rdx
        pushq   %rcx
        pushq   %rsi
        pushq   %rdi
        pushq   %r8
        pushq   %r9
        pushq   %r10
        pushq   %r11
        movq    fntrace_thread@GOTTPOFF(%rip), %r11
        cmpb    $0, %fs:THREAD_IN_TRACER(%r11)
        jne     .Lslow_restore\@
        movb    $1, %fs:THREAD_IN_TRACER(%r11)
        rdtsc
        shlq    $32, %rdx
        orq     %rdx, %rax
        movq    %fs:THREAD_SHADOW(%r11), %rcx
        testq   %rcx, %rcx
        jz      .Lslow_with_tsc\@
        movq    SHADOW_LEN(%rcx), %r8
        testq   %r8, %r8
        jz      .Lslow_with_tsc\@
        imulq   $FRAME_SIZE, %r8, %r9
        leaq    SHADOW_FRAMES-FRAME_SIZE(%rcx,%r9), %r9
        leaq    SLOT(%rsp), %rdi        /* the slot */
        cmpq    %rdi, FRAME_SLOT(%r9)
        jne     .Lslow_with_tsc\@         /* deeper frames died (longjmp) */
        cmpq    $0, FRAME_MARKS(%r9)
        jne     .Lmarked\@
        movq    FRAME_EXIT_TRACERS(%r9), %rdi
        cmpq    fntrace_profile_fast_bit(%rip), %rdi
        je      .Lprofile\@               /* the profile tracer's frame */
        cmpq    fntrace_graph_fast_bit(%rip), %rdi
        jne     .Lslow_with_tsc\@
        testq   %rdi, %rdi              /* a bit 0 is "off" (exit mask 0) */
        jz      .Lslow_with_tsc\@
        movq    %fs:THREAD_FAST_TRACER_SLOT(%r11), %rsi
        testq   %rsi, %rsi
        jz      .Lslow_with_tsc\@

        /* Lossless recording: from its fast limit on (half the capacity
         * then; never reached otherwise) the ring's events go the slow way,
         * which asks the writer for a drain and waits for room if full. */
        movq    RING_HEAD(%rsi), %r10
        subq    RING_TAIL(%rsi), %r10
        cmpq    RING_FAST_LIMIT(%rsi), %r10
        jae     .Lslow_with_tsc\@

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
.Lpopped\@:
        movq    FRAME_REAL_RETURN(%r9), %r9
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        movq    %r9, SLOT(%rsp)
        jmp     .Lleave\@

        /* A marked frame. The graph tracer's argument entry's, whose
         * return value is recorded (marks: MARK_ARGS_BIT, MARK_FAST_RETVAL_BIT
         * and the value's shift, nothing else), is ended here as above,
         * its exit event followed by one data slot: rax masked to the
         * value's size (uftrace's 4 or 8 bytes, padded to 8), both or
         * neither (no room for both: the slow path, which writes the event
         * alone and counts it). Any other mark: the slow path. */
.Lmarked\@:
        movq    FRAME_MARKS(%r9), %rdi
        movq    %rdi, %r10
        shlq    $(64 - MARK_RETVAL_SHIFT_AT), %r10
        jnz     .Lpoll\@                /* other marks: a poll's, or slow */
        movq    %rdi, %r10
        shrq    $MARK_FAST_RETVAL_BIT, %r10
        cmpq    $((1 << (MARK_ARGS_BIT - MARK_FAST_RETVAL_BIT)) + 1), %r10
        jne     .Lslow_with_tsc\@
        POP_FOR_EXIT_AND_DATA .Lslow_with_tsc\@, .Lpopped\@
        MASKED_RAX %rdi
        WRITE_EXIT_AND_DATA %rdi, %rdx
        jmp     .Lpopped\@

        /* A poll's frame (marks: layout.h's MARK_POLL_*, set from its
         * site's recipe by the argument entry, which kept the future's
         * address in the frame): ended here as a marked frame, its one
         * data slot the future's state byte, loaded through the kept
         * address (the poll's Pin<&mut Self>: the future lives until its
         * caller drops it, after this return), or for a hand-written poll
         * (POLL_FROM_RAX) its Poll's discriminant in rax; then the poll is linked
         * into its future by fntrace_poll_exited (Rust), called with
         * the real return address already in the slot:
         *   rdi marks   rsi the kept word   rdx entry ticks
         *   rcx exit ticks   r8 the state (or discriminant)
         * Below the nine saved registers while it runs: the saved %rbp,
         * 0-15 bytes of alignment padding, xmm0-xmm15 (SAVE_AREA, as the
         * slow path lays them out). The guard stays set meanwhile.
         * Anything else (no room for both events, no kept future, other
         * marks): the slow path, which does the same in Rust. */
.Lpoll\@:
        movabsq $MARK_POLL_CLEAR, %r10
        testq   %r10, %rdi
        jnz     .Lslow_with_tsc\@
        btq     $MARK_ARGS_BIT, %rdi
        jnc     .Lslow_with_tsc\@
        movq    %rdi, %r10
        shrq    $MARK_POLL_KEY_AT, %r10
        testw   %r10w, %r10w
        jz      .Lslow_with_tsc\@       /* no future's key */
        btq     $KEPT_SET_BIT, FRAME_KEPT(%r9)
        jnc     .Lslow_with_tsc\@       /* no future kept */
        /* (Beyond the depth limit, as the slow path: no event, no link.) */
        POP_FOR_EXIT_AND_DATA .Lslow_with_tsc\@, .Lpopped\@
        movq    %rdi, %rdx
        shrq    $MARK_POLL_OFFSET_AT, %rdx
        andl    $0xffffff, %edx
        cmpl    $POLL_FROM_RAX, %edx
        je      .Lpoll_rax\@
        /* The state: the kept address (bits 0-46) plus the offset. */
        movq    FRAME_KEPT(%r9), %rcx
        shlq    $(64 - KEPT_FUTURE_BIT), %rcx
        shrq    $(64 - KEPT_FUTURE_BIT), %rcx
        movzbl  (%rcx,%rdx), %edx
        jmp     .Lpoll_write\@
        /* A hand-written poll: its Poll's discriminant, rax masked as the
         * marked exit masks a return value. */
.Lpoll_rax\@:
        MASKED_RAX %rdx
.Lpoll_write\@:
        /* The exit event and its data slot, published together. */
        WRITE_EXIT_AND_DATA %rdx, %rcx

        movq    FRAME_REAL_RETURN(%r9), %r10
        movq    %r10, SLOT(%rsp)
        movq    %rdx, %r8               /* the state */
        movq    %rax, %rcx              /* exit ticks */
        movq    FRAME_ENTRY_TICKS(%r9), %rdx
        movq    FRAME_KEPT(%r9), %rsi
        pushq   %rbp
        movq    %rsp, %rbp
        andq    $-16, %rsp
        subq    $SAVE_AREA, %rsp
        SAVE_VECTORS
        call    fntrace_poll_exited@PLT
        RESTORE_VECTORS
        movq    %rbp, %rsp
        popq    %rbp
        movq    fntrace_thread@GOTTPOFF(%rip), %r11
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        jmp     .Lleave\@

        /* The profile tracer's exit (profile.S), unless its bit is 0. */
.Lprofile\@:
        testq   %rdi, %rdi
        jz      .Lslow_with_tsc\@
        jmp     \profile_exit

        /* Giving up after the timestamp: the slow path gets it (no second
         * read) and the guard stays set until its event is written, so no
         * signal handler's event can come between with a later time.
         * fntrace_profile_exit comes back here when it gives up, with the
         * ticks in %rax and the stack as it found it. */
        .globl  \slow
        .hidden \slow
\slow:
.Lslow_with_tsc\@:
        movq    %rax, %rsi
        jmp     .Lslow\@
.Lslow_restore\@:
        xorl    %esi, %esi              /* no timestamp taken */
.Lslow\@:
        pushq   %rbp
        movq    %rsp, %rbp
        andq    $-16, %rsp
        subq    $SAVE_AREA, %rsp
        SAVE_VECTORS

        movq    fntrace_thread@GOTTPOFF(%rip), %rcx
        movzbl  %fs:(%rcx), %eax
        testq   %rsi, %rsi
        jz      2f
        xorl    %eax, %eax              /* the fast path set it: it was clear */
2:
        movq    %rax, GUARD_SAVE(%rsp)
        movb    $1, %fs:(%rcx)

        leaq    SLOT+8(%rbp), %rdi      /* the slot, above the saved %rbp */
        movq    %rsp, %rdx              /* the saved xmm0 (a return value) */
        leaq    64+8(%rbp), %rcx        /* the saved rax (a return value) */
        call    fntrace_exit_entry@PLT
        movq    %rax, SLOT+8(%rbp)      /* the real return address */

        movq    fntrace_thread@GOTTPOFF(%rip), %rcx
        movq    GUARD_SAVE(%rsp), %rax
        movb    %al, %fs:(%rcx)

        RESTORE_VECTORS
        movq    %rbp, %rsp
        popq    %rbp

        /* The slot holds the real return address: every register back as
         * the function left it, the slot dropped as `ret` would, and a jump
         * through it (below %rsp now, but inside the 128-byte red zone the
         * kernel leaves alone when it delivers a signal). An indirect jump,
         * not `ret`: the function's own `ret` into this trampoline already
         * consumed the return-stack-buffer entry of its call. */
        .globl  \leave
        .hidden \leave
\leave:                                 /* the profile exit ends here too */
.Lleave\@:
        popq    %r11
        popq    %r10
        popq    %r9
        popq    %r8
        popq    %rdi
        popq    %rsi
        popq    %rcx
        popq    %rdx
        popq    %rax
.if \balanced
        ret                             /* into the stub, which returns */
.else
        leaq    8(%rsp), %rsp
        jmp     *-8(%rsp)
.endif
        .cfi_endproc
        .size   \name, . - \name
.endm

RETURN_TRAMPOLINE fntrace_return_trampoline, 0, fntrace_return_slow_with_tsc, fntrace_return_leave, fntrace_profile_exit
RETURN_TRAMPOLINE fntrace_return_balanced, 1, fntrace_return_balanced_slow_with_tsc, fntrace_return_balanced_leave, fntrace_profile_exit_balanced

        .section .note.GNU-stack,"",@progbits
