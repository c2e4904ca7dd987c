//! Architecture-specific facts: instruction encodings and the register
//! save area shared with the assembly trampolines.

pub(crate) mod x86_64;
