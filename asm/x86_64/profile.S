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
 *   2. find the function's row in this thread's block (the site table:
 *      the same hash and linear probe as Block::row_of) and its call-trie
 *      node under the open call's (Block::child_of, found child moved to
 *      the front), count the row active and open the call (Block::enter),
 *   3. replace F's return address with fntrace_return_trampoline, whose
 *      fast path, seeing this tracer's bit, jumps to fntrace_profile_exit.
 *
 * The exit (Block::exit): the open call must be the shadow frame's (same
 * depth and entry time); then the duration in nanoseconds (the TickScale
 * copied below, the same arithmetic as TickScale::ns), its bucket in the
 * log-linear histogram (Histogram::bucket_of), and the row's, the node's
 * and the parent call's counters updated.
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

/* Written by Rust under the control lock (src/tracers/profile/fast.rs),
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
/* sys::clock::TickScale while the fast bit is set: base ticks, base ns,
 * ns per tick (32.32 fixed point, below 2^63). */
        .globl  fntrace_profile_scale
        .hidden fntrace_profile_scale
        .type   fntrace_profile_scale, @object
        .size   fntrace_profile_scale, 24
fntrace_profile_scale:
        .zero   24
        .zero   16                      /* rest of the line */

#define SCALE_BASE_TICKS  fntrace_profile_scale+0(%rip)
#define SCALE_BASE_NS     fntrace_profile_scale+8(%rip)
#define SCALE_NS_PER_TICK fntrace_profile_scale+16(%rip)

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
 * The entries. Stack after the pushes (addresses grow upwards):
 *
 *      fentry only: 104(%rsp)  F's return address into its parent (the slot)
 *      96(%rsp)   our return address: the end of the call site in F
 *      88(%rsp)   r11
 *      80(%rsp)   rax
 *      72(%rsp)   rcx
 *      64(%rsp)   rdx
 *      56(%rsp)   rsi
 *      48(%rsp)   rdi
 *      40(%rsp)   r8
 *      32(%rsp)   r9
 *      24(%rsp)   r10
 *      16(%rsp)   rbx
 *       8(%rsp)   rbp
 *       0(%rsp)   r12          <- %rsp
 *
 *   mcount sites: F has run its prologue, so the slot is 8(%rbp) (read
 *   before %rbp is used as a scratch register).
 *
 * Registers while working:
 *   r11 TLS offset of fntrace_thread    rax ticks (rdtsc: with rdx)
 *   rsi this thread's profile block     rdi the slot
 *   r8  real return address             r10 shadow depth (the new frame's
 *                                           index, the call's depth)
 *   r9  open calls in the block (scratch while a node moves to the
 *       front of its list; loaded again after)  rbx the function's row
 *   rcx shadow stack; then the link that points at the node being looked at
 *   rbp the list head of the parent's children
 *   rdx scratch: context count, top slot, the site, then the node number
 *   r12 scratch: the table index, then node and frame offsets
 */

#define SAVED 12                        /* registers pushed, r11 included */
#define SITE_RETURN (8 * SAVED)         /* offset of our return address  */

.macro RESTORE_SAVED
        POP     %r12
        POP     %rbp
        POP     %rbx
        POP     %r10
        POP     %r9
        POP     %r8
        POP     %rdi
        POP     %rsi
        POP     %rdx
        POP     %rcx
        POP     %rax
        POP     %r11
.endm

.macro PROFILE_ENTRY name, generic, fentry
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
        PUSH    %r9
        PUSH    %r10
        PUSH    %rbx
        PUSH    %rbp
        PUSH    %r12

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
         * return is the trampoline, which ends the caller next); without
         * the trampoline, the top frame died. */
        leaq    fntrace_return_trampoline(%rip), %rdx
        cmpq    %rdx, %r8
        jne     .Lbail_\@
        jmp     5f
4:
        leaq    fntrace_return_trampoline(%rip), %rdx
        cmpq    %rdx, %r8
        je      .Lbail_\@               /* the trampoline, its frame not on top */
5:
        /* The block: in the current era, and no open call at this depth or
         * deeper (their exits were not seen: Block::enter forgets them). */
        movq    PB_ERA(%rsi), %rdx
        cmpq    fntrace_profile_era(%rip), %rdx
        jne     .Lbail_\@
        movl    PB_OPEN(%rsi), %r9d
        testl   %r9d, %r9d
        jz      6f
        cmpl    $SHADOW_MAX_DEPTH, %r9d
        jae     .Lbail_\@
        movq    %r9, %r12
        shlq    $OPEN_SIZE_SHIFT, %r12
        cmpl    %r10d, BLOCK_OPEN-OPEN_SIZE+OPEN_DEPTH(%rsi,%r12)
        jae     .Lbail_\@
        /* The parent call's node: its children's list. */
        movl    BLOCK_OPEN-OPEN_SIZE+OPEN_NODE(%rsi,%r12), %ebp
        cmpl    $PROFILE_NONE, %ebp
        je      .Lbail_\@               /* no node: the generic path counts it */
        imulq   $NODE_SIZE, %rbp, %rbp
        leaq    BLOCK_NODES+NODE_FIRST_CHILD(%rsi,%rbp), %rbp
        jmp     7f
6:
        leaq    PB_FIRST_ROOT(%rsi), %rbp
7:
        /* The row: the site table, probed from the site's hash on. */
        movq    SITE_RETURN(%rsp), %rdx
        movabsq $PROFILE_HASH_MULTIPLIER, %r12
        imulq   %rdx, %r12
        shrq    $(64 - PROFILE_TABLE_BITS), %r12
        shlq    $TABLE_SLOT_SIZE_SHIFT, %r12
8:
        movq    BLOCK_TABLE+TABLE_SITE(%rsi,%r12), %rbx
        cmpq    %rdx, %rbx
        je      9f
        testq   %rbx, %rbx
        jz      .Lbail_\@               /* a new function: Rust makes its row */
        addq    $(1 << TABLE_SLOT_SIZE_SHIFT), %r12
        andq    $((1 << (PROFILE_TABLE_BITS + TABLE_SLOT_SIZE_SHIFT)) - 1), %r12
        jmp     8b
9:
        movl    BLOCK_TABLE+TABLE_ROW(%rsi,%r12), %ebx
        /* The node: the parent's child with this row. %rcx points at the
         * link to the node looked at (the head first). */
        movq    %rbp, %rcx
10:
        movl    (%rcx), %edx
        testl   %edx, %edx
        jz      .Lbail_\@               /* a new path: Rust makes its node */
        decl    %edx
        imulq   $NODE_SIZE, %rdx, %r12
        cmpl    %ebx, BLOCK_NODES+NODE_ROW(%rsi,%r12)
        je      11f
        leaq    BLOCK_NODES+NODE_NEXT_SIBLING(%rsi,%r12), %rcx
        jmp     10b
11:
        /* Found (node number in %rdx): to the front of the list, unless it
         * is there (readers never follow the links). Nothing bails below. */
        cmpq    %rbp, %rcx
        je      12f
        movl    BLOCK_NODES+NODE_NEXT_SIBLING(%rsi,%r12), %r9d
        movl    %r9d, (%rcx)
        movl    (%rbp), %r9d
        movl    %r9d, BLOCK_NODES+NODE_NEXT_SIBLING(%rsi,%r12)
        leal    1(%edx), %r9d
        movl    %r9d, (%rbp)
12:
        /* The frame: complete before the depth counts it. Its exit mask is
         * the fast bit read again: if a disable cleared it meanwhile, the
         * exit goes the generic way and is not reported, as for any frame
         * hooked before a disable. */
        movq    %fs:THREAD_SHADOW(%r11), %rcx
        imulq   $FRAME_SIZE, %r10, %r12
        leaq    SHADOW_FRAMES(%rcx,%r12), %r12
        movq    %rdi, FRAME_SLOT(%r12)
        movq    %r8, FRAME_REAL_RETURN(%r12)
        movq    fntrace_profile_fast_bit(%rip), %r8
        movq    %r8, FRAME_EXIT_TRACERS(%r12)
        movq    SITE_RETURN(%rsp), %r8
        movq    %r8, FRAME_SITE(%r12)
        movq    %rax, FRAME_ENTRY_TICKS(%r12)
        movq    $0, FRAME_MARKS(%r12)
        leaq    1(%r10), %r8
        movq    %r8, SHADOW_LEN(%rcx)

        /* The call: its row active once more, and opened (Block::enter). */
        imulq   $ROW_SIZE, %rbx, %r12
        incl    BLOCK_ROWS+ROW_ACTIVE(%rsi,%r12)
        movl    PB_OPEN(%rsi), %r9d
        movq    %r9, %r12
        shlq    $OPEN_SIZE_SHIFT, %r12
        leaq    BLOCK_OPEN(%rsi,%r12), %r12
        movl    %ebx, OPEN_ROW(%r12)
        movl    %edx, OPEN_NODE(%r12)
        movl    %r10d, OPEN_DEPTH(%r12)
        movq    %rax, OPEN_ENTRY_TICKS(%r12)
        movq    $0, OPEN_CHILDREN_NS(%r12)
        incl    %r9d
        movl    %r9d, PB_OPEN(%rsi)

        leaq    fntrace_return_trampoline(%rip), %rdx
        movq    %rdx, (%rdi)

        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        RESTORE_SAVED
        ret

.Lbail_\@:
        .cfi_adjust_cfa_offset 8 * SAVED
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        RESTORE_SAVED
        jmp     \generic

.Lguarded_\@:
        .cfi_adjust_cfa_offset 8
        POP     %r11
        ret
        .cfi_endproc
        .size   \name, . - \name
.endm

PROFILE_ENTRY fntrace_profile_mcount, fntrace_generic_mcount, 0
PROFILE_ENTRY fntrace_profile_fentry, fntrace_generic_fentry, 1

/*
 * fntrace_profile_exit: the rest of the return trampoline's fast path for
 * a frame whose exit mask is fntrace_profile_fast_bit (return.S jumps here
 * with the guard set and the exit timestamp taken). On arrival:
 *
 *      %rsp       as in return.S: 72(%rsp) the slot, 64(%rsp)..0(%rsp)
 *                 rax rdx rcx rsi rdi r8 r9 r10 r11 saved
 *      r11 TLS offset of fntrace_thread   rax exit ticks
 *      r8  shadow depth (the top frame's index + 1)
 *      r9  the top frame (its slot is the returning one)
 *
 * Stack while working (four more pushed, so the slot is at 104(%rsp)):
 *
 *      104(%rsp)  the slot        72(%rsp)..32(%rsp) return.S's nine
 *       24(%rsp)  rbx             16(%rsp) rbp
 *        8(%rsp)  r12              0(%rsp) r13       <- %rsp
 *
 * Registers while working:
 *   r11 TLS offset     r9 the top frame    r12 exit ticks
 *   rsi this thread's profile block       rdi the frame's depth
 *   r10 open calls in the block           rbx the open call (the top one)
 *   rbp the function's row                r13 the duration (ns)
 *   rax, rdx: the tick conversion, then the bucket and the self time
 *   rcx: the bucket's power of two (shift count), then its chunk
 *   r8: the row's active count
 *
 * Leaves to fntrace_return_leave with the real return address in the
 * slot and the guard clear, or bails (nothing written) to
 * fntrace_return_slow_with_tsc with the exit ticks in %rax and the stack
 * as on arrival.
 */

#define EXIT_SLOT (72 + 32)

        .p2align 4
        .globl  fntrace_profile_exit
        .hidden fntrace_profile_exit
        .type   fntrace_profile_exit, @function
fntrace_profile_exit:
        .cfi_startproc
        /* As in return.S: no caller an unwinder could describe. */
        .cfi_undefined rip
        pushq   %rbx
        pushq   %rbp
        pushq   %r12
        pushq   %r13
        movq    %rax, %r12
        movq    %fs:THREAD_PROFILE_BLOCK(%r11), %rsi
        testq   %rsi, %rsi
        jz      .Lexit_bail
        movq    PB_ERA(%rsi), %rdx
        cmpq    fntrace_profile_era(%rip), %rdx
        jne     .Lexit_bail
        /* The open call on top must be this frame's: same depth, same
         * entry time (else Block::exit forgets or ignores calls). */
        movl    PB_OPEN(%rsi), %r10d
        testl   %r10d, %r10d
        jz      .Lexit_bail
        leaq    -1(%r8), %rdi
        movq    %r10, %rbx
        shlq    $OPEN_SIZE_SHIFT, %rbx
        leaq    BLOCK_OPEN-OPEN_SIZE(%rsi,%rbx), %rbx
        cmpl    %edi, OPEN_DEPTH(%rbx)
        jne     .Lexit_bail
        movq    FRAME_ENTRY_TICKS(%r9), %rax
        cmpq    %rax, OPEN_ENTRY_TICKS(%rbx)
        jne     .Lexit_bail
        movl    OPEN_ROW(%rbx), %ebp
        cmpl    $PROFILE_NONE, %ebp
        je      .Lexit_bail             /* counted as not kept by Rust */
        imulq   $ROW_SIZE, %rbp, %rbp
        leaq    BLOCK_ROWS(%rsi,%rbp), %rbp

        /* The duration: ns(exit) - ns(entry), each as TickScale::ns
         * computes it (base_ns + ((ticks - base_ticks) as i64 as i128 *
         * ns_per_tick) >> 32, wrapping), saturating at 0. */
        subq    SCALE_BASE_TICKS, %rax
        imulq   SCALE_NS_PER_TICK       /* rdx:rax, signed */
        shrdq   $32, %rdx, %rax
        addq    SCALE_BASE_NS, %rax
        movq    %rax, %r13
        movq    %r12, %rax
        subq    SCALE_BASE_TICKS, %rax
        imulq   SCALE_NS_PER_TICK
        shrdq   $32, %rdx, %rax
        addq    SCALE_BASE_NS, %rax
        subq    %r13, %rax
        jae     1f
        xorl    %eax, %eax
1:
        movq    %rax, %r13

        /* Its bucket (Histogram::bucket_of): the value itself below 256,
         * else (e - 7) * 128 + (value >> (e - 7)), e = its top bit. */
        cmpq    $256, %rax
        jb      2f
        bsrq    %r13, %rcx
        subl    $7, %ecx
        shrq    %cl, %rax
        shll    $7, %ecx
        addq    %rcx, %rax
2:
        /* The chunk of its power of two (a new one is Rust's to take). */
        movq    %rax, %rcx
        shrq    $7, %rcx
        movzwl  ROW_CHUNKS(%rbp,%rcx,2), %ecx
        testl   %ecx, %ecx
        jz      .Lexit_bail

        /* Nothing bails from here on. The frame popped, the call closed,
         * its duration added to its parent call's children. */
        movq    %fs:THREAD_SHADOW(%r11), %rdx
        movq    %rdi, SHADOW_LEN(%rdx)  /* popped; its memory stays intact */
        decl    %r10d
        movl    %r10d, PB_OPEN(%rsi)
        jz      3f
        addq    %r13, OPEN_CHILDREN_NS-OPEN_SIZE(%rbx)
3:
        movq    %r13, %rdx
        subq    OPEN_CHILDREN_NS(%rbx), %rdx
        jae     4f
        xorl    %edx, %edx              /* self time, saturating */
4:
        movl    ROW_ACTIVE(%rbp), %r8d
        subl    $1, %r8d
        jae     5f
        xorl    %r8d, %r8d              /* active, saturating */
5:
        movl    %r8d, ROW_ACTIVE(%rbp)
        andl    $(CHUNK_BUCKETS - 1), %eax
        decl    %ecx
        shlq    $CHUNK_SHIFT, %rcx
        leaq    BLOCK_CHUNKS(%rsi,%rcx), %rcx
        incq    (%rcx,%rax,8)
        addq    %r13, ROW_SUM(%rbp)
        addq    %rdx, ROW_SELF_NS(%rbp)
        testl   %r8d, %r8d
        jnz     6f
        addq    %r13, ROW_TOTAL(%rbp)   /* not nested in another of its calls */
6:
        movq    %r13, %rax
        notq    %rax
        cmpq    ROW_MIN_INVERTED(%rbp), %rax
        jbe     7f
        movq    %rax, ROW_MIN_INVERTED(%rbp)
7:
        cmpq    ROW_MAX(%rbp), %r13
        jbe     8f
        movq    %r13, ROW_MAX(%rbp)
8:
        movl    OPEN_NODE(%rbx), %eax
        cmpl    $PROFILE_NONE, %eax
        jne     9f
        incq    PB_PATHS_NOT_KEPT(%rsi)
        jmp     10f
9:
        imulq   $NODE_SIZE, %rax, %rax
        leaq    BLOCK_NODES(%rsi,%rax), %rax
        incq    NODE_CALLS(%rax)
        addq    %r13, NODE_TOTAL(%rax)
        addq    %rdx, NODE_SELF_NS(%rax)
10:
        movq    FRAME_REAL_RETURN(%r9), %r9
        popq    %r13
        popq    %r12
        popq    %rbp
        popq    %rbx
        movb    $0, %fs:THREAD_IN_TRACER(%r11)
        movq    %r9, 72(%rsp)           /* the slot */
        jmp     fntrace_return_leave

.Lexit_bail:
        movq    %r12, %rax
        popq    %r13
        popq    %r12
        popq    %rbp
        popq    %rbx
        jmp     fntrace_return_slow_with_tsc
        .cfi_endproc
        .size   fntrace_profile_exit, . - fntrace_profile_exit

        .section .note.GNU-stack,"",@progbits
