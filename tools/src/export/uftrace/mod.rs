//! uftrace data directories: [`write_uftrace_dir`] writes one so that uftrace
//! 0.13's `replay`, `report`, `graph`, `dump` and `info` commands read it
//! (the tests run each), and [`read_uftrace_dir`] loads one back into a
//! [`Trace`](crate::Trace). The layout, and the choices behind it, are
//! documented on [`write_uftrace_dir`]; [`UftraceStream`] writes the same
//! files as events arrive (the streaming recorder).

mod format;
mod read;
mod sessions;
mod stream;
mod write;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_names;

pub use format::MAX_SYMBOL_SIZE;
pub use read::{read_uftrace_dir, read_uftrace_dir_with_progress};
pub use stream::{StreamTotals, UftraceStream};
pub use write::write_uftrace_dir;
