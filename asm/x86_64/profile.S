/*
 * The profile tracer's fast paths: the entries fntrace_profile_mcount /
 * fntrace_profile_fentry, and the exit fntrace_profile_exit that the
 * return trampoline (return.S) jumps to.
 *
 * A site selected by the profile tracer alone (while timestamps come from
 * the TSC: see ProfileTracer::fast_path_bit) is patched to call one of the
 * entries directly instead of mcount / __fentry__, as graph.S's are for the
 * graph tracer. They do the profile tracer's whole entry without calling
 * into Rust, with loads and stores only:
 *
 *   1. push a frame on this thread's shadow stack (layout.h: Frame) whose
 *      exit mask is fntrace_profile_fast_bit,
 *   2. find the function's row in this thread's block and its call-trie
 *      node under the open call's: one probe of the path table, keyed by
 *      site and parent node (the same hash and linear probe as
 *      Block::path_of; its cost does not grow with the parent's number of
 *      children), count the row active and open the call (Block::enter),
 *   3. replace F's return address with fntrace_return_trampoline, whose
 *      fast path, seeing this tracer's bit, jumps to fntrace_profile_exit.
 *
 * The *_stubbed entries are called from a site's return stub and hook F's
 * return with the stub's, as graph.S's are and do.
 *
 * The exit (Block::exit): the open call must be the shadow frame's (same
 * depth and entry time); then the duration in nanoseconds (the factor
 * copied below, the same arithmetic as TickScale::duration_ns), and the
 * row's, the node's and the parent call's counters updated. Its bucket in the
 * log-linear histogram (Histogram::bucket_of) is counted one exit later:
 * the call is left in the block's pending word, and the previous pending
 * call counted now (block.rs, "The pending sample").
 *
 * Anything the Rust code would do beyond that bails before anything is
 * written, to the generic path, which stays the reference behaviour: no
 * shadow stack, block or TSC scale yet, a block in an older era (an
 * enable or reset since: Block::catch_up), open calls to forget (an
 * exit not seen), a site with no row yet, a call path with no node yet,
 * a histogram power of two with no chunk yet, a full trie or table, and
 * every hazard graph.S bails for (a full shadow stack, a dead top frame,
 * a thread on another stack, the trampoline in a slot whose frame is not
 * on top). A bailing entry restores the registers and jumps to the
 * generic trampoline with the stack as the site left it; a bailing exit
 * goes on to the return trampoline's slow path with its timestamp.
 *
 * The recursion guard (first byte of fntrace_thread) is held throughout:
 * a signal handler running traced code meanwhile returns at once instead
 * of finding the shadow stack or the block half-updated.
 *
 * Flags are not preserved (no compiler keeps flags live across a call).
 */

#include "layout.h"

/* Written by Rust under the control lock (src/builtin/profile/fast.rs),
 * read on every traced call: a cache line of their own. */
        .data
        .p2align 6
/* The profile tracer's bit while its fast paths may run, else 0. Frames
 * pushed by the fast entry carry it as their exit-tracer mask; the fast
 * exit requires it. */
        .globl  fntrace_profile_fast_bit
        .hidden fntrace_profile_fast_bit
        .type   fntrace_profile_fast_bit, @object
        .size   fntrace_profile_fast_bit, 8
fntrace_profile_fast_bit:
        .quad   0
/* The profile tracer's era (ProfileTracer: changes at every enable and
 * reset; 1 at start). A block whose era differs takes the generic path. */
        .globl  fntrace_profile_era
        .hidden fntrace_profile_era
        .type   fntrace_profile_era, @object
        .size   fntrace_profile_era, 8
fntrace_profile_era:
        .quad   1
/* sys::clock::TickScale's factor while the fast bit is set: ns per tick,
 * a 0.64 fixed-point fraction. */
        .globl  fntrace_profile_ns_per_tick
        .hidden fntrace_profile_ns_per_tick
        .type   fntrace_profile_ns_per_tick, @object
        .size   fntrace_profile_ns_per_tick, 8
fntrace_profile_ns_per_tick:
        .quad   0
        .zero   40                      /* rest of the line */

        .text

.macro PUSH reg
        pushq   \reg
        .cfi_adjust_cfa_offset 8
.endm
.macro POP reg
        popq    \reg
        .cfi_adjust_cfa_offset -8
.endm

/*
 * The entries. They save the same eight registers as graph.S's and no
 * more: every extra push and pop is a store and a load on each traced
 * call, and the profile tracer's cost per call is to be no more than
 * graph's. Values the checks found and the lookups do not need (the
 * slot, the real return address, the depth) are loaded again once the
 * lookups are done instead of being kept in registers of their own.
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
 *   rsi this thread's profile block
 *   checks (as graph.S): rcx shadow stack, rdi the slot, r8 the real
 *       return address, r10 shadow depth (the new frame's index, the
 *       call's depth), rdx scratch
 *   lookup: rdx the parent's node plus one, shifted into the path key's
 *       top 16 bits, then the key; rdi the site, then a slot's key, then
 *       the slot's value (row | node << 32); rcx the slot's offset; r8 the
 *       function's row
 *   stores: rcx the open call, then the frame; rdx the shadow stack;
 *       r10 the depth; rdi the slot; r8 scratch
 */

#define SAVED 8                         /* registers pushed, r11 included */
#define SITE_RETURN (8 * SAVED)         /* offset of our return address  */
        .if SITE_RETURN - 64            /* layout.h's macros assume it */
        .error "SITE_RETURN is not 64"
        .endif

.macro RESTORE_SAVED
        POP     %r10
        POP     %r8
        POP     %rdi
        POP     %rsi
        POP     %rdx
        POP     %rcx
        POP     %rax
        POP     %r11
.endm

.macro SLOT_ADDRESS fentry, out
.if \fentry
        leaq    SITE_RETURN+8(%rsp), \out
.else
        leaq    8(%rbp), \out
.endif
.endm

.macro PROFILE_ENTRY name, generic, fentry, stubbed
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
        PUSH    %rax
        PUSH    %rcx
        PUSH    %rdx
        PUSH    %rsi
        PUSH    %rdi
        PUSH    %r8
        PUSH    %r10

        /* The timestamp first: rdtsc is slow (microcoded), and the checks
         * below can run while its result is on the way. */
        rdtsc
        shlq    $32, %rdx
        orq     %rdx, %rax

        cmpq    $0, fntrace_profile_fast_bit(%rip)
        je      .Lbail_\@               /* off (disabled, or no TSC) */
        movq    %fs:THREAD_SHADOW(%r11), %rcx
        testq   %rcx, %rcx
        jz      .Lbail_\@
        movq    %fs:THREAD_PROFILE_BLOCK(%r11), %rsi
        testq   %rsi, %rsi
        jz      .Lbail_\@
        SLOT_ADDRESS \fentry, %rdi
        movq    (%rdi), %r8
        movq    SHADOW_LEN(%rcx), %r10
        cmpq    $SHADOW_MAX_DEPTH, %r10
        jae     .Lbail_\@               /* full: counted as too deep */
        testq   %r10, %r10
        jz      4f
        /* The top frame and ours on one stack, as in graph.S: both within
         * the range the generic path found on one stack, no context stack
         * noted since; the top frame at or above ours. */
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
        /* The top frame has our slot: a tail call nests in it (its real
         * return is the caller's hook, which ends the caller next);
         * without that hook, the top frame died. */
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
        /* The block: in the current era, and no open call at this depth or
         * deeper (their exits were not seen: Block::enter forgets them). */
        movq    PB_ERA(%rsi), %rdx
        cmpq    fntrace_profile_era(%rip), %rdx
        jne     .Lbail_\@
        movl    PB_OPEN(%rsi), %edx
        testl   %edx, %edx
        jz      6f
        cmpl    $SHADOW_MAX_DEPTH, %edx
        jae     .Lbail_\@
        shlq    $OPEN_SIZE_SHIFT, %rdx
        cmpl    %r10d, BLOCK_OPEN-OPEN_SIZE+OPEN_DEPTH(%rsi,%rdx)
        jae     .Lbail_\@
        /* The parent call's node, plus one, in the path key's top 16 bits
         * (Block::path_key); an outermost call's is 0, as %rdx is at 6
         * (no open call). */
        movl    BLOCK_OPEN-OPEN_SIZE+OPEN_NODE(%rsi,%rdx), %edx
        cmpl    $PROFILE_NONE, %edx
        je      .Lbail_\@               /* no node: the generic path counts it */
        incl    %edx
        shlq    $48, %rdx
6:
        /* The row and node: the path table, probed from the key's hash on
         * (Block::path_of). The table is never full: a probe ends. From
         * here the slot, the real return and the depth are not in
         * registers (loaded again below). */
        SITE_END \stubbed, %rdi
        movq    %rdi, %rcx
        shrq    $48, %rcx
        jnz     .Lbail_\@               /* a site with no key: Rust's */
        orq     %rdi, %rdx              /* the key: site | (parent + 1) << 48 */
        movabsq $PROFILE_HASH_MULTIPLIER, %rcx
        imulq   %rdx, %rcx
        shrq    $(64 - PROFILE_PATH_TABLE_BITS), %rcx
        shlq    $PATH_SLOT_SIZE_SHIFT, %rcx
        andq    PB_PATH_MASK(%rsi), %rcx        /* the slots in use */
8:
        movq    BLOCK_PATHS+PATH_KEY(%rsi,%rcx), %rdi
        cmpq    %rdx, %rdi
        je      9f
        testq   %rdi, %rdi
        jz      .Lbail_\@               /* a new path: Rust makes it */
        addq    $(1 << PATH_SLOT_SIZE_SHIFT), %rcx
        andq    PB_PATH_MASK(%rsi), %rcx
        jmp     8b
9:
        /* Found: nothing bails below. The node's line is fetched now, for
         * the exit, which writes it. */
        movq    BLOCK_PATHS+PATH_VALUE(%rsi,%rcx), %rdi   /* row | node << 32 */
        movl    %edi, %r8d
        movq    %rdi, %rdx
        shrq    $32, %rdx
        shlq    $NODE_SIZE_SHIFT, %rdx
        prefetcht0 BLOCK_NODES(%rsi,%rdx)
        /* The call: opened (Block::enter; row and node in one store), its
         * row active once more. */
        movl    PB_OPEN(%rsi), %ecx
        shlq    $OPEN_SIZE_SHIFT, %rcx
        leaq    BLOCK_OPEN(%rsi,%rcx), %rcx
        movq    %rdi, OPEN_ROW(%rcx)    /* OPEN_NODE is OPEN_ROW + 4 */
        movq    %fs:THREAD_SHADOW(%r11), %rdx
        movq    SHADOW_LEN(%rdx), %r10
        movl    %r10d, OPEN_DEPTH(%rcx)
        movq    %rax, OPEN_ENTRY_TICKS(%rcx)
        movq    $0, OPEN_CHILDREN_NS(%rcx)
        incl    PB_OPEN(%rsi)
        imulq   $ROW_SIZE, %r8, %r8
        incl    BLOCK_ROWS+ROW_ACTIVE(%rsi,%r8)

        /* The frame: complete before the depth counts it. Its exit mask is
         * the fast bit read again: if a disable cleared it meanwhile, the
         * exit goes the generic way and is not reported, as for any frame
         * hooked before a disable. */
        SLOT_ADDRESS \fentry, %rdi
        imulq   $FRAME_SIZE, %r10, %rcx
        leaq    SHADOW_FRAMES(%rdx,%rcx), %rcx
        movq    %rdi, FRAME_SLOT(%rcx)
        movq    (%rdi), %r8
        movq    %r8, FRAME_REAL_RETURN(%rcx)
        HOOK_ADDRESS \stubbed, %r8
        movq    %r8, FRAME_HOOK(%rcx)
        movq    fntrace_profile_fast_bit(%rip), %r8
        movq    %r8, FRAME_EXIT_TRACERS(%rcx)
        SITE_END \stubbed, %r8
        movq    %r8, FRAME_SITE(%rcx)
        movq    %rax, FRAME_ENTRY_TICKS(%rcx)
        movq    $0, FRAME_MARKS(%rcx)
        movq    $0, FRAME_KEPT(%rcx)
        incq    %r10
        movq    %r10, SHADOW_LEN(%rdx)

        HOOK_ADDRESS \stubbed, %r8
        movq    %r8, (%rdi)

        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        RESTORE_SAVED
        ret

.Lbail_\@:
        .cfi_adjust_cfa_offset 8 * SAVED
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
.if \stubbed
        /* The generic path is to see the site's own call. */
        SITE_END 1, %rdx
        movq    %rdx, SITE_RETURN(%rsp)
.endif
        RESTORE_SAVED
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

PROFILE_ENTRY fntrace_profile_mcount, fntrace_generic_mcount, 0, 0
PROFILE_ENTRY fntrace_profile_fentry, fntrace_generic_fentry, 1, 0
/* The same, called from a site's return stub (src/patch/return_stubs.rs). */
PROFILE_ENTRY fntrace_profile_mcount_stubbed, fntrace_generic_mcount, 0, 1
PROFILE_ENTRY fntrace_profile_fentry_stubbed, fntrace_generic_fentry, 1, 1

/*
 * fntrace_profile_exit (fntrace_profile_exit_balanced: the same for
 * fntrace_return_balanced, with the slot at 80(%rsp) and its own leave and
 * slow path): the rest of the return trampoline's fast path for
 * a frame whose exit mask is fntrace_profile_fast_bit (return.S jumps here
 * with the guard set and the exit timestamp taken). On arrival:
 *
 *      %rsp       as in return.S: 72(%rsp) the slot, 64(%rsp)..0(%rsp)
 *                 rax rdx rcx rsi rdi r8 r9 r10 r11 saved
 *      r11 TLS offset of fntrace_thread   rax exit ticks
 *      r8  shadow depth (the top frame's index + 1)
 *      r9  the top frame (its slot is the returning one)
 *
 * Nothing more is pushed: the nine registers return.S saved are enough
 * (the shadow stack is loaded again to pop the frame; the depth is the
 * open call's, checked equal).
 *
 * Registers while working:
 *   r11 TLS offset     r9 the top frame    rsi this thread's profile block
 *   rdi the open call (the top one)        r10 the function's row
 *   r8  the exit ticks (for a bail) until nothing bails, then scratch
 *   rax the duration's bucket, then the self time
 *   rdx the duration (ns)   rcx the bucket's power of two (shift count),
 *       then its chunk, then scratch
 *
 * Leaves to fntrace_return_leave with the real return address in the
 * slot and the guard clear, or bails (nothing written) to
 * fntrace_return_slow_with_tsc with the exit ticks in %rax and the stack
 * as on arrival.
 */

.macro PROFILE_EXIT name, slot, leave, slow
        .p2align 4
        .globl  \name
        .hidden \name
        .type   \name, @function
\name:
        .cfi_startproc
        /* As in return.S: no caller an unwinder could describe. */
        .cfi_undefined rip
        movq    %fs:THREAD_PROFILE_BLOCK(%r11), %rsi
        testq   %rsi, %rsi
        jz      .Lexit_bail_\@
        movq    PB_ERA(%rsi), %rdx
        cmpq    fntrace_profile_era(%rip), %rdx
        jne     .Lexit_bail_\@
        /* The open call on top must be this frame's: same depth, same
         * entry time (else Block::exit forgets or ignores calls). */
        movl    PB_OPEN(%rsi), %edi
        testl   %edi, %edi
        jz      .Lexit_bail_\@
        shlq    $OPEN_SIZE_SHIFT, %rdi
        leaq    BLOCK_OPEN-OPEN_SIZE(%rsi,%rdi), %rdi
        leaq    -1(%r8), %rdx
        cmpl    %edx, OPEN_DEPTH(%rdi)
        jne     .Lexit_bail_\@
        movq    FRAME_ENTRY_TICKS(%r9), %rdx
        cmpq    %rdx, OPEN_ENTRY_TICKS(%rdi)
        jne     .Lexit_bail_\@
        movl    OPEN_ROW(%rdi), %r10d
        cmpl    $PROFILE_NONE, %r10d
        je      .Lexit_bail_\@          /* counted as not kept by Rust */
        imulq   $ROW_SIZE, %r10, %r10
        leaq    BLOCK_ROWS(%rsi,%r10), %r10

        movq    %rax, %r8

        /* The pending call (the last fast exit's: block.rs, "The pending
         * sample"): the counter of its bucket (Histogram::bucket_of: the
         * value itself below 256, else (e - 7) * 128 + (value >> (e - 7)),
         * e = its top bit) in the chunk of its power of two (a new chunk
         * is Rust's to take). This chain starts from a load, not from the
         * timestamp just read: it runs while rdtsc completes. %rcx: the
         * counter's address, or 0 for none. */
        movq    PB_PENDING(%rsi), %rax
        xorl    %ecx, %ecx
        testq   %rax, %rax
        jz      2f
        movq    %rax, %rdx
        shrq    $PENDING_ROW_SHIFT, %rdx
        imulq   $ROW_SIZE, %rdx, %rdx
        addq    %rsi, %rdx              /* its row, plus ROW_SIZE */
        shlq    $(64 - PENDING_ROW_SHIFT), %rax
        shrq    $(64 - PENDING_ROW_SHIFT), %rax
        cmpq    $256, %rax
        jb      1f
        bsrq    %rax, %rcx
        subl    $7, %ecx
        shrq    %cl, %rax
        shll    $7, %ecx
        addq    %rcx, %rax
1:
        movq    %rax, %rcx
        shrq    $7, %rcx
        movzwl  BLOCK_ROWS-ROW_SIZE+ROW_CHUNKS(%rdx,%rcx,2), %ecx
        testl   %ecx, %ecx
        jz      .Lexit_bail_ticks_\@
        andl    $(CHUNK_BUCKETS - 1), %eax
        shll    $CHUNK_SHIFT, %ecx      /* (chunk number + 1) << 10 */
        addq    %rsi, %rcx
        leaq    BLOCK_CHUNKS-(1 << CHUNK_SHIFT)(%rcx,%rax,8), %rcx
2:
        /* The duration as TickScale::duration_ns computes it: the high
         * halves of ticks * factor at exit and at entry (the clock's offset
         * cancels out), subtracted, saturating at 0: the difference of the
         * two timestamps' nanoseconds, as `fntrace report` computes it.
         * The entry's half waits in the red zone (no register is free; nothing
         * below %rsp is live here). 2^48 ns or more is not left pending
         * (Rust counts it). */
        movq    FRAME_ENTRY_TICKS(%r9), %rax
        mulq    fntrace_profile_ns_per_tick(%rip)   /* rdx:rax */
        movq    %rdx, -8(%rsp)
        movq    %r8, %rax
        mulq    fntrace_profile_ns_per_tick(%rip)
        movq    %rdx, %rax
        subq    -8(%rsp), %rax
        jae     3f
        xorl    %eax, %eax
3:
        movq    %rax, %rdx
        shrq    $PENDING_ROW_SHIFT, %rax
        jnz     .Lexit_bail_ticks_\@

        /* Nothing bails from here on. This call pending in its place, then
         * the pending call counted in its bucket (in that order: a reader
         * loads the buckets, then the pending word), the frame popped,
         * the call closed, its duration added to its parent call's
         * children. */
        movl    OPEN_ROW(%rdi), %eax
        incl    %eax
        shlq    $PENDING_ROW_SHIFT, %rax
        orq     %rdx, %rax
        movq    %rax, PB_PENDING(%rsi)
        testq   %rcx, %rcx
        jz      2f
        incq    (%rcx)
2:
        movl    OPEN_DEPTH(%rdi), %r8d
        movq    %fs:THREAD_SHADOW(%r11), %rcx
        movq    %r8, SHADOW_LEN(%rcx)   /* popped; its memory stays intact */
        decl    PB_OPEN(%rsi)
        jz      3f
        addq    %rdx, OPEN_CHILDREN_NS-OPEN_SIZE(%rdi)
3:
        movq    %rdx, %rax
        subq    OPEN_CHILDREN_NS(%rdi), %rax
        jae     4f
        xorl    %eax, %eax              /* self time, saturating */
4:
        movl    ROW_ACTIVE(%r10), %ecx
        subl    $1, %ecx
        jae     5f
        xorl    %ecx, %ecx              /* active, saturating */
5:
        movl    %ecx, ROW_ACTIVE(%r10)
        addq    %rdx, ROW_SUM(%r10)
        addq    %rax, ROW_SELF_NS(%r10)
        testl   %ecx, %ecx
        jnz     6f
        addq    %rdx, ROW_TOTAL(%r10)   /* not nested in another of its calls */
6:
        movq    %rdx, %rcx
        notq    %rcx
        cmpq    ROW_MIN_INVERTED(%r10), %rcx
        jbe     7f
        movq    %rcx, ROW_MIN_INVERTED(%r10)
7:
        cmpq    ROW_MAX(%r10), %rdx
        jbe     8f
        movq    %rdx, ROW_MAX(%r10)
8:
        movl    OPEN_NODE(%rdi), %ecx
        cmpl    $PROFILE_NONE, %ecx
        jne     9f
        incq    PB_PATHS_NOT_KEPT(%rsi)
        jmp     10f
9:
        shlq    $NODE_SIZE_SHIFT, %rcx
        incq    BLOCK_NODES+NODE_CALLS(%rsi,%rcx)
        addq    %rdx, BLOCK_NODES+NODE_TOTAL(%rsi,%rcx)
        addq    %rax, BLOCK_NODES+NODE_SELF_NS(%rsi,%rcx)
10:
        movq    FRAME_REAL_RETURN(%r9), %r9
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        movq    %r9, \slot(%rsp)
        jmp     \leave

.Lexit_bail_ticks_\@:
        movq    %r8, %rax
.Lexit_bail_\@:
        jmp     \slow
        .cfi_endproc
        .size   \name, . - \name
.endm

PROFILE_EXIT fntrace_profile_exit, 72, fntrace_return_leave, fntrace_return_slow_with_tsc
/* For the return stubs' trampoline (return.S): the slot 8 bytes higher,
 * above the stub's own return address. */
PROFILE_EXIT fntrace_profile_exit_balanced, 80, fntrace_return_balanced_leave, fntrace_return_balanced_slow_with_tsc

        .section .note.GNU-stack,"",@progbits
