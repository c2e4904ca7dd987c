//! The built-in tracers, registered under their names before `main`:
//! `function` (entries only), `graph` (entries and exits, with the fast
//! path in `asm/x86_64/graph.S`) and `profile` (per-function and per-path
//! latency aggregated in the process); and the runtime future linker
//! (`futures`), which the graph tracer feeds with async functions' polls.

pub mod function;
pub(crate) mod futures;
pub mod graph;
pub mod profile;
