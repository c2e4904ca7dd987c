//! uftrace data directories: [`write_uftrace_dir`] writes one so that uftrace
//! 0.13's `replay`, `report`, `graph`, `dump` and `info` commands read it
//! (the tests run each); [`UftraceReader`] reads one thread by thread,
//! record by record, and [`read_uftrace_dir`] loads one whole into a
//! [`Trace`](crate::Trace). The layout, and the choices behind it, are
//! documented on [`write_uftrace_dir`]; [`UftraceStream`] writes the same
//! files as events arrive (the streaming recorder).

mod debug;
mod format;
mod ledger;
mod meta;
mod modules;
mod read;
mod records;
mod sessions;
mod stream;
mod stream_thread;
mod values;
mod write;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dlopen;
#[cfg(test)]
mod tests_gaps;
#[cfg(test)]
mod tests_golden;
#[cfg(test)]
mod tests_names;
#[cfg(test)]
mod tests_reader;

pub use debug::{add_debug_info, DataSymbol};
pub use format::MAX_SYMBOL_SIZE;
pub use ledger::{process_ledger, ProcessLedger, PROCESS_LEDGER};
pub use read::{read_uftrace_dir, read_uftrace_dir_with_progress, UftraceReader};
pub use stream::{recorder_notes, settle_recording, StreamTotals, UftraceStream};
pub use write::{write_uftrace_dir, write_uftrace_dir_into, write_uftrace_dir_of};
