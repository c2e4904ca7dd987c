//! The symbols instrumented code calls, `mcount`, `_mcount` and
//! `__fentry__`: each a single jump to its trampoline
//! (`asm/x86_64/entry.S`). They are defined in Rust, not in the assembly,
//! because rustc exports from a cdylib (`libfntrace.so`, preloaded into
//! programs built with `-pg`) only the symbols Rust defines. A jump leaves
//! the stack exactly as the instrumented call made it, which is all the
//! trampolines read.

/// `mcount`: what `gcc -pg` and `rustc -Zinstrument-mcount` call after a
/// function's prologue.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn mcount() {
    core::arch::naked_asm!("jmp fntrace_generic_mcount")
}

/// `_mcount`: another compilers' spelling of `mcount`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn _mcount() {
    core::arch::naked_asm!("jmp fntrace_generic_mcount")
}

/// `__fentry__`: what `gcc -pg -mfentry` calls at a function's first
/// instruction.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn __fentry__() {
    core::arch::naked_asm!("jmp fntrace_generic_fentry")
}
