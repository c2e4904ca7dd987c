//! The built-in tracers, registered under their names before `main`:
//! `function` (entries only) and `graph` (entries and exits, with the
//! fast path in `asm/x86_64/graph.S`).

pub mod function;
pub mod graph;
