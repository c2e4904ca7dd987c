//! The in-memory trace: what the graph tracer recorded, in a form every
//! output (latency table, call graph, uftrace data, Perfetto JSON, flame
//! graph) reads, and that can be loaded back from a uftrace data directory.

use std::collections::HashMap;

/// Whether an event is a function's entry or its exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// The function was entered.
    Entry = 0,
    /// The function returned (or was unwound past: see [`Trace`]).
    Exit = 1,
}

/// One entry or exit of a traced function on one thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct GraphEvent {
    /// Nanoseconds on the monotonic clock.
    pub time_ns: u64,
    /// Entry address of the function.
    pub function: usize,
    /// Nesting depth: 0 for the outermost traced call on the thread; an
    /// exit has the depth of its entry.
    pub depth: u16,
    /// Entry or exit.
    pub kind: EventKind,
}

/// Everything one thread recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadTrace {
    /// Kernel thread id.
    pub tid: u32,
    /// The thread's name (`/proc/self/task/TID/comm`) when known.
    pub name: Option<String>,
    /// Events in time order. Every exit matches the nearest unmatched entry
    /// of the same depth before it; an entry may lack its exit (the trace
    /// ended first, or the frame was unwound by a panic or `longjmp`).
    pub events: Vec<GraphEvent>,
    /// Events dropped because the thread's buffer was full.
    pub lost: u64,
}

/// A recorded trace of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Process id of the traced process.
    pub pid: u32,
    /// Path of its executable.
    pub exe: String,
    /// Its command line, arguments separated by spaces (as uftrace shows
    /// it); empty if unknown.
    pub cmdline: String,
    /// Per-thread events.
    pub threads: Vec<ThreadTrace>,
    /// Readable (demangled, see [`demangle`](crate::demangle)) name of each
    /// function address that occurs in `threads`: what fntrace's reports show.
    pub names: HashMap<usize, String>,
    /// ELF symbol name (mangled) of each function address, where known: what
    /// uftrace's `.sym` files hold (see
    /// [`uftrace_symbol_name`](crate::uftrace_symbol_name)). A function
    /// without one is written under its `names` entry.
    pub symbols: HashMap<usize, String>,
    /// The process's memory map when the trace was taken
    /// (`/proc/self/maps` text), for tools that resolve addresses.
    pub maps: String,
    /// Libraries loaded while the process ran whose functions `maps` does
    /// not name rightly: unloaded since, or sharing their addresses with
    /// another library loaded before or after. A uftrace directory names
    /// their functions by time, as uftrace's recorder does (`DLOP` lines).
    pub libraries: Vec<Library>,
    /// The argument specs recorded (`-A`, in [`argspec`](crate::argspec)'s
    /// syntax, several joined by `;` as uftrace's `info` has them); empty
    /// if none.
    pub arg_spec: String,
    /// The return-value specs recorded (`-R`), likewise.
    pub retval_spec: String,
}

/// A library loaded at some time of a process's life (see
/// [`Trace::libraries`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Library {
    /// A time (the events' clock, ns) that the loading came after.
    pub loaded_after_ns: u64,
    /// Difference between its run-time and link-time addresses.
    pub bias: u64,
    /// Its file, as the loader names it.
    pub path: String,
    /// The end of its last mapped segment.
    pub end: u64,
    /// Its functions: run-time start address and ELF name.
    pub functions: Vec<(usize, String)>,
}

impl Trace {
    /// The name of `function`, or its address in hex.
    pub fn name_of(&self, function: usize) -> String {
        self.names
            .get(&function)
            .cloned()
            .unwrap_or_else(|| format!("{function:#x}"))
    }

    /// Total events lost across threads.
    pub fn lost(&self) -> u64 {
        self.threads.iter().map(|t| t.lost).sum()
    }
}

/// An event, for tests that build traces by hand.
#[cfg(test)]
pub(crate) fn test_event(time_ns: u64, function: usize, depth: u16, kind: EventKind) -> GraphEvent {
    GraphEvent {
        time_ns,
        function,
        depth,
        kind,
    }
}
