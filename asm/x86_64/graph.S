/*
 * The graph tracer's fast entry: fntrace_graph_mcount / fntrace_graph_fentry.
 *
 * A site selected by the graph tracer alone (and no duration limit: see
 * GraphTracer::fast_path_bit) is patched to call one of these directly
 * instead of mcount / __fentry__. They do the graph tracer's whole entry
 * work without calling into Rust, so nothing beyond the registers they use
 * needs saving:
 *
 *   1. push a frame on this thread's shadow stack (layout.h: Frame),
 *   2. write an entry event into this thread's ring (RawEvent),
 *   3. replace F's return address with fntrace_return_trampoline, whose own
 *      fast path (return.S) writes the exit event.
 *
 * The *_stubbed entries are the same, called from a site's return stub
 * (src/patch/return_stubs.rs) instead of the site: their return address is
 * in the stub, which holds the site's end (the frame's site, and what a
 * bail hands the generic path as its return address), and F's return
 * address becomes the stub's hook (layout.h: HOOK_ADDRESS, SITE_END),
 * which ends in fntrace_return_balanced. Each frame records the hook it
 * wrote (FRAME_HOOK): a tail call is recognised by its slot holding the
 * top frame's hook, and a slot holding any hook (the trampoline or one in
 * a stub arena) whose frame is not on top makes the entry bail.
 *
 * A full ring does not bail in drop mode: the frame is still hooked (its
 * exit keeps the depths right) and the entry is counted as dropped in the
 * ring's header, at the fast path's cost, for the reader to report as lost.
 * In lossless mode a ring holding its fast limit of events (half its
 * capacity) bails before anything changes: the generic path asks the writer
 * for a drain, and waits for room if the ring is full.
 *
 * Anything unusual - no shadow stack or ring yet (first call of a thread),
 * shadow stack full, a top frame that died (longjmp), the return address
 * already hooked by a frame not on top, a top frame that may lie on another
 * stack (coroutines: the thread's range of slots known to share one stack,
 * which the generic path keeps, does not hold both) - "bails": the
 * registers are restored and the code jumps to the generic trampoline with
 * the stack exactly as the site left it, so the generic path (Rust) sees an
 * ordinary call and handles it, counting drops and depth as usual.
 *
 * The recursion guard (first byte of fntrace_thread) is held from the check
 * to the end: a signal handler running traced code meanwhile takes the
 * guard-set exit (returns at once) instead of using the shadow stack or ring
 * half-updated.
 *
 * Stack after the pushes (addresses grow upwards):
 *
 *      fentry only: 72(%rsp)  F's return address into its parent (the slot)
 *      64(%rsp)   our return address: the end of the call site in F
 *      56(%rsp)   r11
 *      48(%rsp)   rax
 *      40(%rsp)   rcx
 *      32(%rsp)   rdx
 *      24(%rsp)   rsi
 *      16(%rsp)   rdi
 *       8(%rsp)   r8
 *       0(%rsp)   r10          <- %rsp
 *
 *   mcount sites: F has run its prologue, so the slot is 8(%rbp).
 *
 * Registers while working:
 *   r11 TLS offset of fntrace_thread    rax ticks (rdtsc: with rdx)
 *   rcx shadow stack, then the event    rsi ring
 *   rdi the slot    r10 shadow depth (the new frame's index)
 *   r8  real return address, then the fast bit, then the site
 *   rdx scratch: the context-stack count, the top frame's slot, the new
 *       frame, then the ring head
 *
 * Flags are not preserved (no compiler keeps flags live across a call).
 *
 * The argument entries (fntrace_graph_args_*: GRAPH_ENTRY with args = 1)
 * are the same for sites whose function records integer arguments and an
 * integer return value (src/builtin/graph/arg_recipes.rs): they also
 * write the argument data slots right after the entry event, and mark the
 * frame so that the fast exit writes the return value. They save r9 too,
 * and the six argument registers in their order, so that argument i
 * (0-based) is at 8*i(%rsp):
 *
 *      fentry only: 80(%rsp)  F's return address into its parent (the slot)
 *      72(%rsp)   our return address: the end of the call site in F
 *      64(%rsp)   r11
 *      56(%rsp)   rax
 *      48(%rsp)   r10
 *      40(%rsp)   r9
 *      32(%rsp)   r8
 *      24(%rsp)   rcx
 *      16(%rsp)   rdx
 *       8(%rsp)   rsi
 *       0(%rsp)   rdi          <- %rsp
 *     -48(%rsp)..-1(%rsp)  (the red zone, which a signal leaves alone) the
 *                argument data as uftrace writes it, before its copy
 *                into the ring
 *     -64(%rsp)  (KEPT_AT) the word the frame keeps for the exit
 *     -72(%rsp)  (PINNED_STATE_AT) a poll's future's state, zero-extended
 *
 * Registers as above, plus r9: the site's recipe (a hash-table probe by
 * the site's end, RECIPES_* in layout.h; no recipe: bail). The recipe
 * table is replaced whole (never changed, never freed) and its address
 * published with one store; the entry loads that address once, so a
 * call sees one table, old or new, and either is valid. Room for the
 * event and its data slots is checked with the fast limit, before
 * anything changes: no room, bail (the generic path writes the event
 * alone and counts it, or waits in lossless mode).
 */

#include "layout.h"

/* The graph tracer's bit while its exits may take the fast path, else 0.
 * Frames pushed here carry it as their exit-tracer mask. Written by Rust
 * under the control lock (GraphTracer::refresh_fast_path). */
        .bss
        .p2align 6                      /* a cache line of its own: read on */
        .globl  fntrace_graph_fast_bit  /* every traced call by every thread */
        .hidden fntrace_graph_fast_bit
        .type   fntrace_graph_fast_bit, @object
        .size   fntrace_graph_fast_bit, 8
fntrace_graph_fast_bit:
        .zero   8
/* The graph tracer's depth limit (deeper calls are hooked, to keep depths
 * right, but not recorded); all ones without one. Same line, same writer. */
        .globl  fntrace_graph_max_depth
        .hidden fntrace_graph_max_depth
        .type   fntrace_graph_max_depth, @object
        .size   fntrace_graph_max_depth, 8
fntrace_graph_max_depth:
        .zero   56
/* The current recipe table's header (struct Recipes), null without one:
 * replaced, never changed in place, by Rust under the control lock
 * (arg_recipes::publish); read by the argument entries. */
        .p2align 6
        .globl  fntrace_graph_arg_recipes
        .hidden fntrace_graph_arg_recipes
        .type   fntrace_graph_arg_recipes, @object
        .size   fntrace_graph_arg_recipes, 8
fntrace_graph_arg_recipes:
        .zero   64

        .text

.macro PUSH reg
        pushq   \reg
        .cfi_adjust_cfa_offset 8
.endm
.macro POP reg
        popq    \reg
        .cfi_adjust_cfa_offset -8
.endm

.macro RESTORE_SAVED args
.if \args
        POP     %rdi
        POP     %rsi
        POP     %rdx
        POP     %rcx
        POP     %r8
        POP     %r9
        POP     %r10
        POP     %rax
        POP     %r11
.else
        POP     %r10
        POP     %r8
        POP     %rdi
        POP     %rsi
        POP     %rdx
        POP     %rcx
        POP     %rax
        POP     %r11
.endif
.endm

.macro GRAPH_ENTRY name, generic, fentry, stubbed, args
/* registers pushed, r11 included; the offset of our return address */
.if \args
        SAVED = 9
.else
        SAVED = 8
.endif
        SITE_RETURN = 8 * SAVED
        .p2align 4
        .globl  \name
        .hidden \name
        .type   \name, @function
\name:
        .cfi_startproc
        PUSH    %r11
        movq    fntrace_thread@GOTTPOFF(%rip), %r11
        cmpb    $0, %fs:THREAD_IN_TRACER(%r11)
        jne     .Lguarded_\@
        movb    $1, %fs:THREAD_IN_TRACER(%r11)
.if \args
        PUSH    %rax
        PUSH    %r10
        PUSH    %r9
        PUSH    %r8
        PUSH    %rcx
        PUSH    %rdx
        PUSH    %rsi
        PUSH    %rdi
.else
        PUSH    %rax
        PUSH    %rcx
        PUSH    %rdx
        PUSH    %rsi
        PUSH    %rdi
        PUSH    %r8
        PUSH    %r10
.endif

        /* The timestamp first: rdtsc is slow (microcoded), and the checks
         * below can run while its result is on the way. */
        rdtsc
        shlq    $32, %rdx
        orq     %rdx, %rax

        cmpq    $0, fntrace_graph_fast_bit(%rip)
        je      .Lbail_\@               /* off (graph disabled, or limits set) */
.if \args
        /* The site's recipe: a probe by the site's end (its key) from the
         * key's hash on, until the key or an empty entry (the entries run
         * on past the last bucket: no wrap). */
        SITE_END \stubbed, %r9, SITE_RETURN
        movq    fntrace_graph_arg_recipes(%rip), %rcx
        testq   %rcx, %rcx
        jz      .Lbail_\@               /* no table */
        movabsq $RECIPE_HASH_MULTIPLIER, %rdx
        imulq   %r9, %rdx
        shrq    $RECIPE_HASH_SHIFT, %rdx
        andq    RECIPES_MASK(%rcx), %rdx
        shlq    $RECIPE_SIZE_SHIFT, %rdx
        addq    RECIPES_ENTRIES(%rcx), %rdx
6:
        movq    RECIPE_KEY(%rdx), %rcx
        cmpq    %r9, %rcx
        je      7f
        testq   %rcx, %rcx
        jz      .Lbail_\@               /* not in the table */
        addq    $(1 << RECIPE_SIZE_SHIFT), %rdx
        jmp     6b
7:
        movq    %rdx, %r9
        /* A poll's future (RECIPE_PIN, an async function's resume function
         * under fntrace record --async): its state byte, loaded through
         * the argument (its Pin<&mut Self>, as the recipe's spec pinN[OFF]
         * claims), for the data (PINNED_STATE_AT) and, with the pointer,
         * for the frame (KEPT_AT; args::Kept); a hand-written poll's
         * (offset PIN_KEEP_ONLY): the pointer alone, for the frame. A
         * pointer that is no user address goes to the generic path. Free:
         * rcx, rdx, rsi, rdi, r8. */
        movq    $0, KEPT_AT(%rsp)
        movl    RECIPE_PIN(%r9), %ecx
        testl   %ecx, %ecx
        jz      13f
        movzbl  %cl, %edx               /* N, 1-6 */
        movq    -8(%rsp,%rdx,8), %rsi   /* argument N, as saved */
        leaq    -4096(%rsi), %rdi
        movabsq $(KEPT_USER_END - 4096), %r8
        cmpq    %r8, %rdi
        jae     .Lbail_\@
        decl    %edx
        shlq    $KEPT_ARG_SHIFT, %rdx
        shrl    $8, %ecx                /* the state's offset */
        cmpl    $PIN_KEEP_ONLY, %ecx
        je      15f                     /* a hand-written poll: no state */
        movzbl  (%rsi,%rcx), %ecx       /* the state */
        movq    %rcx, PINNED_STATE_AT(%rsp)
        orq     %rdx, %rsi
        btsq    $KEPT_SET_BIT, %rsi
        testl   %ecx, %ecx
        jnz     14f
        btsq    $KEPT_FUTURE_BIT, %rsi  /* Unresumed: a first poll */
14:
        movq    %rsi, KEPT_AT(%rsp)
        jmp     13f
15:
        orq     %rdx, %rsi
        btsq    $KEPT_SET_BIT, %rsi
        movq    %rsi, KEPT_AT(%rsp)
13:
.endif
        movq    %fs:THREAD_SHADOW(%r11), %rcx
        testq   %rcx, %rcx
        jz      .Lbail_\@
        movq    %fs:THREAD_FAST_TRACER_SLOT(%r11), %rsi
        testq   %rsi, %rsi
        jz      .Lbail_\@
.if \fentry
        leaq    SITE_RETURN+8(%rsp), %rdi
.else
        leaq    8(%rbp), %rdi
.endif
        movq    (%rdi), %r8
        movq    SHADOW_LEN(%rcx), %r10
        cmpq    $SHADOW_MAX_DEPTH, %r10
        jae     .Lbail_\@               /* full: counted as too deep */
        testq   %r10, %r10
        jz      4f
        /* The top frame and ours must lie on one stack (else the thread
         * switched stacks: the generic path parks or brings back frames):
         * both within the range the generic path found on one stack, no
         * context stack noted since. The top frame is at or above ours. */
        movq    fntrace_context_stacks(%rip), %rdx
        cmpq    %fs:THREAD_STACK_CONTEXTS(%r11), %rdx
        jne     .Lbail_\@
        cmpq    %fs:THREAD_STACK_LOW(%r11), %rdi
        jb      .Lbail_\@
        imulq   $FRAME_SIZE, %r10, %rdx
        movq    SHADOW_FRAMES-FRAME_SIZE+FRAME_SLOT(%rcx,%rdx), %rdx
        cmpq    %fs:THREAD_STACK_HIGH(%r11), %rdx
        jae     .Lbail_\@
        cmpq    %rdi, %rdx
        ja      4f                      /* top frame above ours: the caller's */
        jb      .Lbail_\@               /* top frame below ours: it died */
        /* The top frame has our slot: a tail call (the caller jumped here,
         * its frame reused, the slot still holding the caller's hook) nests
         * in it - this frame's real return is that hook, which ends the
         * caller next; without the hook, the top frame died. */
        imulq   $FRAME_SIZE, %r10, %rdx
        cmpq    SHADOW_FRAMES-FRAME_SIZE+FRAME_HOOK(%rcx,%rdx), %r8
        jne     .Lbail_\@
        jmp     5f
4:
        /* A hook in a slot whose frame is not on top. */
        leaq    fntrace_return_trampoline(%rip), %rdx
        cmpq    %rdx, %r8
        je      .Lbail_\@
        JUMP_IF_STUB_HOOK %r8, %rdx, .Lbail_\@
5:
        /* Lossless recording: a ring holding its fast limit of events (half
         * its capacity then; never reached otherwise) sends the call to the
         * generic path, which asks the writer for a drain and, the ring
         * being full, waits for room. Checked before anything changes. */
        movq    RING_HEAD(%rsi), %rdx
        subq    RING_TAIL(%rsi), %rdx
.if \args
        /* The event and its data slots, all or none: within the fast
         * limit and the capacity (drop mode: the generic path writes the
         * event alone, counted). */
        addq    RECIPE_EVENTS(%r9), %rdx
        cmpq    RING_FAST_LIMIT(%rsi), %rdx
        ja      .Lbail_\@
        cmpq    RING_CAPACITY(%rsi), %rdx
        ja      .Lbail_\@
.else
        cmpq    RING_FAST_LIMIT(%rsi), %rdx
        jae     .Lbail_\@
.endif

        /* The frame: complete before the depth counts it. Its exit mask is
         * the fast bit read again: if a disable cleared it meanwhile, the
         * exit goes the generic way and is not reported, as for any frame
         * hooked before a disable. */
        imulq   $FRAME_SIZE, %r10, %rdx
        leaq    SHADOW_FRAMES(%rcx,%rdx), %rdx
        movq    %rdi, FRAME_SLOT(%rdx)
        movq    %r8, FRAME_REAL_RETURN(%rdx)
        HOOK_ADDRESS \stubbed, %r8, SITE_RETURN
        movq    %r8, FRAME_HOOK(%rdx)
        movq    fntrace_graph_fast_bit(%rip), %r8
        movq    %r8, FRAME_EXIT_TRACERS(%rdx)
.if \args
        /* The marks that send its exit to the fast exit's return value
         * (0 when none is recorded). */
        movq    RECIPE_MARKS(%r9), %r8
        movq    %r8, FRAME_MARKS(%rdx)
        movq    KEPT_AT(%rsp), %r8
        movq    %r8, FRAME_KEPT(%rdx)
.endif
        SITE_END \stubbed, %r8, SITE_RETURN
        movq    %r8, FRAME_SITE(%rdx)
        movq    %rax, FRAME_ENTRY_TICKS(%rdx)
.if \args == 0
        movq    $0, FRAME_MARKS(%rdx)
        movq    $0, FRAME_KEPT(%rdx)
.endif
        leaq    1(%r10), %rdx
        movq    %rdx, SHADOW_LEN(%rcx)

        /* The event, then the head that publishes it (x86 keeps the order
         * of stores: the reader's acquire load of head sees the event);
         * none beyond the depth limit. */
        cmpq    fntrace_graph_max_depth(%rip), %r10
        ja      2f
        movq    RING_HEAD(%rsi), %rdx
.if \args == 0
        movq    %rdx, %rcx
        subq    RING_TAIL(%rsi), %rcx
        cmpq    RING_CAPACITY(%rsi), %rcx
        jae     3f                      /* ring full: count the drop */
.endif
        EVENT_SLOT %rsi, %rdx, %rcx
        movq    %rax, EVENT_TICKS(%rcx)
        shlq    $EVENT_DEPTH_SHIFT, %r10
        orq     %r8, %r10               /* entry: exit bit clear */
.if \args
        cmpq    $1, RECIPE_EVENTS(%r9)
        je      8f
        btsq    $EVENT_MORE_BIT, %r10   /* data slots follow */
8:
.endif
        movq    %r10, EVENT_WORD(%rcx)
.if \args
        /* The data, as argspec::encode writes it: each value's bytes (its
         * register masked to its size) at its offset, in order, as whole
         * words: a value's upper bytes are zeros until the next value's
         * store, which covers its padding; the last word is cleared
         * first for the padding of a last value of 8 bytes. Then one
         * data slot per word. Free: rax, rcx, r8, r10. */
        movq    RECIPE_EVENTS(%r9), %rcx
        movq    $0, -64(%rsp,%rcx,8)    /* the last word: -48 + 8*(n-2) */
        movl    RECIPE_OPS(%r9), %ecx
        leaq    RECIPE_OP(%r9), %r8
        testq   %rcx, %rcx
        jz      10f
9:
        movslq  OP_FROM(%r8), %rax
        movq    (%rsp,%rax,8), %rax     /* argument FROM as saved, or the state */
        andq    OP_MASK(%r8), %rax
        movl    OP_TO(%r8), %r10d
        movq    %rax, -48(%rsp,%r10)
        addq    $(1 << OP_SIZE_SHIFT), %r8
        decq    %rcx
        jnz     9b
10:
        movq    RECIPE_EVENTS(%r9), %rcx
        decq    %rcx                    /* data slots */
        jz      12f
        xorl    %r10d, %r10d
11:
        incq    %rdx
        EVENT_SLOT %rsi, %rdx, %rax
        movq    -48(%rsp,%r10,8), %r8
        movq    %r8, EVENT_TICKS(%rax)
        movabsq $(EVENT_DATA_DEPTH << EVENT_DEPTH_SHIFT), %r8
        movq    %r8, EVENT_WORD(%rax)
        incq    %r10
        cmpq    %rcx, %r10
        jb      11b
12:
.endif
        incq    %rdx
        movq    %rdx, RING_HEAD(%rsi)
        jmp     2f
3:
        incq    RING_DROPPED(%rsi)      /* the owner alone writes it */
2:

        HOOK_ADDRESS \stubbed, %rdx, SITE_RETURN
        movq    %rdx, (%rdi)

        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        RESTORE_SAVED \args
        ret

.Lbail_\@:
        .cfi_adjust_cfa_offset 8 * SAVED
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
.if \stubbed
        /* The generic path is to see the site's own call. */
        SITE_END 1, %rdx, SITE_RETURN
        movq    %rdx, SITE_RETURN(%rsp)
.endif
        RESTORE_SAVED \args
        jmp     \generic

.Lguarded_\@:
        .cfi_adjust_cfa_offset 8
.if \stubbed
        /* Back to the function, past the stub's hooking. */
        movq    8(%rsp), %r11
        movq    STUB_SITE_END_FROM_RETURN(%r11), %r11
        movq    %r11, 8(%rsp)
.endif
        POP     %r11
        ret
        .cfi_endproc
        .size   \name, . - \name
.endm

GRAPH_ENTRY fntrace_graph_mcount, fntrace_generic_mcount, 0, 0, 0
GRAPH_ENTRY fntrace_graph_fentry, fntrace_generic_fentry, 1, 0, 0
/* The same, called from a site's return stub (src/patch/return_stubs.rs). */
GRAPH_ENTRY fntrace_graph_mcount_stubbed, fntrace_generic_mcount, 0, 1, 0
GRAPH_ENTRY fntrace_graph_fentry_stubbed, fntrace_generic_fentry, 1, 1, 0
/* The argument entries, both kinds, both ways. */
GRAPH_ENTRY fntrace_graph_args_mcount, fntrace_generic_mcount, 0, 0, 1
GRAPH_ENTRY fntrace_graph_args_fentry, fntrace_generic_fentry, 1, 0, 1
GRAPH_ENTRY fntrace_graph_args_mcount_stubbed, fntrace_generic_mcount, 0, 1, 1
GRAPH_ENTRY fntrace_graph_args_fentry_stubbed, fntrace_generic_fentry, 1, 1, 1

        .section .note.GNU-stack,"",@progbits
