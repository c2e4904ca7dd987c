/*
 * fntrace entry trampolines: `mcount` / `_mcount` and `__fentry__`.
 *
 * Who calls us
 *   gcc -pg, rustc -Zinstrument-mcount : `call mcount` after the caller's
 *       prologue (push %rbp; mov %rsp,%rbp; ...). The traced function F owns
 *       %rbp, so F's own return address (into F's parent) is at 8(%rbp).
 *   gcc -pg -mfentry                   : `call __fentry__` at offset 0 of F,
 *       before any prologue. F's return address is just above ours, 8(%rsp).
 *
 * The convention (stricter than the SysV ABI): the callee preserves every
 * argument register (rdi rsi rdx rcx r8 r9), rax (vararg SSE count) and, as
 * uftrace does because of gcc's -fipa-ra, r10 and r11. Because Rust code runs
 * below us, xmm0-xmm15 are saved too (xmm0-xmm7: float arguments;
 * xmm8-xmm15: a caller built with -fipa-ra may keep values there across a
 * call of a function patched at run time, docs/runtime-patching.md), and %rsp is realigned
 * to 16 bytes before calling into Rust. Flags are not preserved (no compiler
 * keeps flags live across a call).
 *
 * Recursion guard: the first byte of fntrace_thread (this thread's block,
 * see layout.h) is set while this thread runs tracer code. Any mcount/fentry call made meanwhile (fntrace
 * itself built with -Zinstrument-mcount, a tracer calling traced code, a
 * signal handler running traced code) returns at once, touching only r11,
 * which it restores.
 *
 * Stack after the prologue below (addresses grow upwards):
 *
 *      fentry only: 24(%rbp)  F's return address into its parent
 *                   16(%rbp)  our return address: the end of the call site in F
 *                    8(%rbp)  saved %r11
 *                    0(%rbp)  saved %rbp (F's frame pointer for mcount sites)
 *                             ... 0-15 bytes of alignment padding ...
 *      %rsp + 192..319        xmm8 - xmm15 (not part of SavedRegs)
 *      %rsp + 64 ..191        xmm0 - xmm7 (16 bytes each, aligned)
 *      %rsp + 56              r10
 *      %rsp + 48              rax
 *      %rsp + 40              r9
 *      %rsp + 32              r8
 *      %rsp + 24              rcx
 *      %rsp + 16              rdx
 *      %rsp +  8              rsi
 *      %rsp +  0              rdi          <- %rsp, 16-byte aligned
 *
 * The save area is `SavedRegs` in src/arch/x86_64/mod.rs; its offsets are
 * layout.h's SAVED_*, which tests/programs/layers.rs checks against the Rust struct.
 *
 * Rust side:  extern "C" fn fntrace_{mcount,fentry}_entry(
 *                 site_return: usize,        // %rdi: 16(%rbp)
 *                 parent_slot: *mut usize,   // %rsi: where F's return address lives
 *                 regs: *mut SavedRegs)      // %rdx: %rsp
 */

#include "layout.h"

/* SavedRegs, then xmm8-xmm15 (16 bytes each) above it. */
#define SAVE_AREA (SAVED_REGS_SIZE + 8 * 16)

/* This thread's block: the recursion guard and the pointers the fast paths
 * (graph.S, return.S) need without calling into Rust. Initial-exec TLS:
 * one %fs-relative access, no __tls_get_addr. */
        .section .tbss,"awT",@nobits
        .p2align 3
        .globl  fntrace_thread
        .hidden fntrace_thread
        .type   fntrace_thread, @object
        .size   fntrace_thread, THREAD_BLOCK_SIZE
fntrace_thread:
        .zero   THREAD_BLOCK_SIZE

/* How many context stacks `makecontext` has noted (src/rt/contexts.rs; it
 * only grows): the fast entry trusts a thread's one-stack range only while
 * this has not changed since the range was found. */
        .bss
        .p2align 3
        .globl  fntrace_context_stacks
        .hidden fntrace_context_stacks
        .type   fntrace_context_stacks, @object
        .size   fntrace_context_stacks, 8
fntrace_context_stacks:
        .zero   8

/* Bit i set: tracer i is enabled (src/tracer/registry.rs keeps it; the
 * Rust side reads this one mask too). With none, the trampolines below
 * return at once: a site still calling mcount while nothing is traced
 * (before the first control operation writes the NOPs, or in a library
 * opened since) costs a call and a return, not a save area, a call into
 * Rust and a site-table probe. Such a site is found by the next
 * operation's scan, or by its first call while a tracer is enabled. */
        .globl  fntrace_enabled_tracers
        .hidden fntrace_enabled_tracers
        .type   fntrace_enabled_tracers, @object
        .size   fntrace_enabled_tracers, 8
fntrace_enabled_tracers:
        .zero   8

        .text

/* ENTRY_TRAMPOLINE name, rust_entry, parent_slot_code
 * parent_slot_code leaves the address of F's return-address slot in %rsi. */
.macro ENTRY_TRAMPOLINE name, rust_entry, fentry
        .p2align 4
        .type   \name, @function
\name:
        .cfi_startproc
        cmpq    $0, fntrace_enabled_tracers(%rip)
        jne     1f
        ret                             /* nothing enabled: flags only change */
1:
        pushq   %r11
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r11, 0
        movq    fntrace_thread@GOTTPOFF(%rip), %r11
        cmpb    $0, %fs:(%r11)
        jne     .Lskip_\@
        movb    $1, %fs:(%r11)

        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbp, 0
        movq    %rsp, %rbp
        .cfi_def_cfa_register rbp
        andq    $-16, %rsp
        subq    $SAVE_AREA, %rsp

        movq    %rdi, SAVED_RDI(%rsp)
        movq    %rsi, SAVED_RSI(%rsp)
        movq    %rdx, SAVED_RDX(%rsp)
        movq    %rcx, SAVED_RCX(%rsp)
        movq    %r8, SAVED_R8(%rsp)
        movq    %r9, SAVED_R9(%rsp)
        movq    %rax, SAVED_RAX(%rsp)
        movq    %r10, SAVED_R10(%rsp)
        movaps  %xmm0, SAVED_XMM+16*0(%rsp)
        movaps  %xmm1, SAVED_XMM+16*1(%rsp)
        movaps  %xmm2, SAVED_XMM+16*2(%rsp)
        movaps  %xmm3, SAVED_XMM+16*3(%rsp)
        movaps  %xmm4, SAVED_XMM+16*4(%rsp)
        movaps  %xmm5, SAVED_XMM+16*5(%rsp)
        movaps  %xmm6, SAVED_XMM+16*6(%rsp)
        movaps  %xmm7, SAVED_XMM+16*7(%rsp)
        movaps  %xmm8, SAVED_REGS_SIZE+16*0(%rsp)
        movaps  %xmm9, SAVED_REGS_SIZE+16*1(%rsp)
        movaps  %xmm10, SAVED_REGS_SIZE+16*2(%rsp)
        movaps  %xmm11, SAVED_REGS_SIZE+16*3(%rsp)
        movaps  %xmm12, SAVED_REGS_SIZE+16*4(%rsp)
        movaps  %xmm13, SAVED_REGS_SIZE+16*5(%rsp)
        movaps  %xmm14, SAVED_REGS_SIZE+16*6(%rsp)
        movaps  %xmm15, SAVED_REGS_SIZE+16*7(%rsp)

        movq    16(%rbp), %rdi
.if \fentry
        leaq    24(%rbp), %rsi          /* F has no frame yet: slot is above ours */
.else
        movq    0(%rbp), %rsi           /* F's frame pointer ...               */
        addq    $8, %rsi                /* ... and its return address above it */
.endif
        movq    %rsp, %rdx
        call    \rust_entry@PLT

        movq    SAVED_RDI(%rsp), %rdi
        movq    SAVED_RSI(%rsp), %rsi
        movq    SAVED_RDX(%rsp), %rdx
        movq    SAVED_RCX(%rsp), %rcx
        movq    SAVED_R8(%rsp), %r8
        movq    SAVED_R9(%rsp), %r9
        movq    SAVED_RAX(%rsp), %rax
        movq    SAVED_R10(%rsp), %r10
        movaps  SAVED_XMM+16*0(%rsp), %xmm0
        movaps  SAVED_XMM+16*1(%rsp), %xmm1
        movaps  SAVED_XMM+16*2(%rsp), %xmm2
        movaps  SAVED_XMM+16*3(%rsp), %xmm3
        movaps  SAVED_XMM+16*4(%rsp), %xmm4
        movaps  SAVED_XMM+16*5(%rsp), %xmm5
        movaps  SAVED_XMM+16*6(%rsp), %xmm6
        movaps  SAVED_XMM+16*7(%rsp), %xmm7
        movaps  SAVED_REGS_SIZE+16*0(%rsp), %xmm8
        movaps  SAVED_REGS_SIZE+16*1(%rsp), %xmm9
        movaps  SAVED_REGS_SIZE+16*2(%rsp), %xmm10
        movaps  SAVED_REGS_SIZE+16*3(%rsp), %xmm11
        movaps  SAVED_REGS_SIZE+16*4(%rsp), %xmm12
        movaps  SAVED_REGS_SIZE+16*5(%rsp), %xmm13
        movaps  SAVED_REGS_SIZE+16*6(%rsp), %xmm14
        movaps  SAVED_REGS_SIZE+16*7(%rsp), %xmm15

        movq    %rbp, %rsp
        .cfi_def_cfa_register rsp
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbp
        movq    fntrace_thread@GOTTPOFF(%rip), %r11
        movb    $0, %fs:(%r11)
.Lskip_\@:
        popq    %r11
        .cfi_adjust_cfa_offset -8
        .cfi_restore r11
        ret
        .cfi_endproc
        .size   \name, . - \name
.endm

/* The trampolines under hidden names: the public `mcount`, `_mcount` and
 * `__fentry__` are one-jump stubs in Rust (src/rt/exported.rs), so that a
 * cdylib (libfntrace.so) exports them: rustc's version script exports only
 * symbols Rust defines. The fast entries (graph.S) jump here directly:
 * never preempted by another object's mcount (glibc has one), and no PLT. */
        .globl  fntrace_generic_mcount
        .hidden fntrace_generic_mcount
ENTRY_TRAMPOLINE fntrace_generic_mcount, fntrace_mcount_entry, 0

        .globl  fntrace_generic_fentry
        .hidden fntrace_generic_fentry
ENTRY_TRAMPOLINE fntrace_generic_fentry, fntrace_fentry_entry, 1

/* u8 fntrace_guard_swap(u8 value)
 *   %dil: the new value of this thread's recursion guard
 *   %al:  its previous value
 * Lets Rust code (control operations, user code via fntrace::untraced) run
 * with tracing suspended on its thread. */
        .p2align 4
        .globl  fntrace_guard_swap
        .hidden fntrace_guard_swap
        .type   fntrace_guard_swap, @function
fntrace_guard_swap:
        .cfi_startproc
        movq    fntrace_thread@GOTTPOFF(%rip), %rcx
        movzbl  %fs:(%rcx), %eax
        movb    %dil, %fs:(%rcx)
        ret
        .cfi_endproc
        .size   fntrace_guard_swap, . - fntrace_guard_swap

/* ThreadBlock *fntrace_thread_block(void)
 *   %rax: the address of this thread's block (%fs:0 holds the thread
 *   pointer itself, so TLS offset + %fs:0 is a plain address). */
        .p2align 4
        .globl  fntrace_thread_block
        .hidden fntrace_thread_block
        .type   fntrace_thread_block, @function
fntrace_thread_block:
        .cfi_startproc
        movq    fntrace_thread@GOTTPOFF(%rip), %rax
        addq    %fs:0, %rax
        ret
        .cfi_endproc
        .size   fntrace_thread_block, . - fntrace_thread_block

        .section .note.GNU-stack,"",@progbits
