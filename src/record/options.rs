//! What a recording is asked to do ([`RecordOptions`], [`RecordMode`],
//! the defaults) and what it reports when it ends ([`RecordReport`]).

use super::*;

/// What a finished recording wrote; see [`Recording::stop`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordReport {
    /// The uftrace data directory.
    pub dir: PathBuf,
    /// Events written (entries and exits).
    pub events: u64,
    /// Events lost: dropped because a thread's buffer was full (each loss
    /// is a lost record in the thread's `.dat`), plus exits left out
    /// because their entry was lost.
    pub lost: u64,
    /// Calls open where a thread lost events: each ended at the gap by an
    /// exit record at the time of the last record before it (written, not
    /// among `events`), so that uftrace and fntrace count the call up to
    /// the gap alike.
    pub closed_at_gaps: u64,
    /// Threads with events.
    pub threads: usize,
    /// Bytes of records written.
    pub bytes: u64,
    /// How long the recording ran.
    pub duration: Duration,
    /// What a thread whose buffer was full did: waited (lossless) or
    /// dropped its event.
    pub mode: RecordMode,
    /// Lossless mode: times a thread found its buffer full and waited for
    /// the writer.
    pub waits: u64,
    /// Lossless mode: how long those waits took in all.
    pub wait_time: Duration,
    /// Lossless mode: the most bytes the threads' buffers held at once
    /// (out of [`RecordOptions::memory_bytes`]; 0 in drop mode).
    pub memory_peak: u64,
    /// The CPU time of the writer thread (draining, encoding, writing).
    pub writer_cpu: Duration,
    /// Events of functions with `-A`/`-R` specs written without their
    /// values, for lack of room beside them in the thread's buffer (drop
    /// mode, or the memory budget's limit): the call is there, its values
    /// are not. Counted over the recording's span, every thread.
    pub values_lost: u64,
}

/// How a recording runs; see [`record_with`].
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// How often the writer drains the buffers ([`DEFAULT_DRAIN_INTERVAL`]).
    /// Shorter keeps the buffers emptier (fewer losses at high call rates)
    /// for more writer wake-ups.
    pub drain_interval: Duration,
    /// Events per thread buffer, for buffers made from now on
    /// ([`DEFAULT_RECORD_BUFFER_EVENTS`]; buffers of exited threads are
    /// reused whatever their size). The writer empties them every
    /// `drain_interval`, so they need to hold only that long's events:
    /// smaller buffers stay in the caches and take less memory.
    pub buffer_events: usize,
    /// Lossless mode: bytes the threads' buffers may hold together, or 0
    /// for no budget beyond each thread's buffer (the default,
    /// [`DEFAULT_RECORD_MEMORY_BYTES`]: see there why). With a budget, a
    /// thread whose buffer is full
    /// takes more of this budget, half a buffer at a time, and waits for
    /// the writer only when none is left. Each thread holds one buffer
    /// whatever is left; what a thread holds beyond that goes back to the
    /// budget as the writer drains it. At least one buffer
    /// (`buffer_events` × [`RECORD_EVENT_BYTES`]): equal to it, each thread
    /// has its buffer only, and waits when it is full. The address space of
    /// the whole budget is reserved per thread (pages are used only as
    /// events need them, and given back once written). Not used in drop
    /// mode.
    pub memory_bytes: usize,
    /// Add this process as a new session of the recording already at `dir`
    /// (made by this process before an `exec`, or by a parent) instead of
    /// requiring an empty directory. The environment variable
    /// `FNTRACE_APPEND=1` sets it for `FNTRACE_OUTPUT`.
    pub append: bool,
    /// What a thread whose buffer is full does ([`RecordMode::Lossless`],
    /// waits for the writer, by default).
    pub mode: RecordMode,
    /// Unused buffers kept with every page present while recording (2 by
    /// default), for threads that start tracing: their first pass over the
    /// buffer then takes no page fault. The writer replaces those taken
    /// after each drain, and makes the pages ahead of every thread's next
    /// events present. 0 turns both off: a thread then faults in each page
    /// of its buffer on its first pass (≈ 1,000 faults per 4 MiB buffer).
    pub ready_buffers: usize,
}

/// What a recording does when a thread's buffer is full (the writer fell
/// behind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecordMode {
    /// The thread waits for the writer to drain its buffer: nothing is
    /// lost, and a program that makes events faster than the writer can
    /// write them runs at the writer's pace. The waits are counted and
    /// timed ([`RecordReport::waits`]). The default of [`record`] and of
    /// `fntrace record`: a trace with holes answers few questions.
    #[default]
    Lossless,
    /// The event is dropped and counted; a lost record marks the gap in the
    /// thread's trace. For services whose latency must never wait on the
    /// recorder's disk (the default of a recording started through live
    /// control, `fntrace ctl TARGET record`).
    Drop,
}

impl RecordMode {
    /// The mode's name: `lossless` or `drop` (as the CLI, the environment
    /// variable `FNTRACE_MODE` and live control spell it).
    pub fn name(self) -> &'static str {
        match self {
            RecordMode::Lossless => "lossless",
            RecordMode::Drop => "drop",
        }
    }
}

impl std::fmt::Display for RecordMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RecordMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "lossless" => Ok(RecordMode::Lossless),
            "drop" => Ok(RecordMode::Drop),
            other => Err(format!(
                "{other:?} is not a recording mode: use lossless (wait for the writer) \
                 or drop (count and mark lost events)"
            )),
        }
    }
}

/// See [`RecordOptions::ready_buffers`].
const READY_BUFFERS: usize = 2;

/// Bytes an event takes in a thread's buffer (and on disk: uftrace's
/// record size).
pub const RECORD_EVENT_BYTES: usize = 16;

/// Events per thread buffer while recording, by default: 262,144 (4 MiB),
/// 320 ms of a thread making 400k traced calls a second.
pub const DEFAULT_RECORD_BUFFER_EVENTS: usize = 1 << 18;

/// The memory budget of a lossless recording's buffers, by default: none
/// (0), each thread its buffer. A budget (256 MiB: 64 buffers of the
/// default size, 16.7M events, what a CPU-bound thread making an event
/// every 5-10 ns writes in 85-170 ms) spares bursts every wait, but a
/// thread that writes without pause, faster than the writer, moves through
/// fresh pages the kernel zeroes: ripgrep took 10-20 % more wall time
/// (`docs/performance.md`), and such runs are what lossless
/// recording is judged on.
pub const DEFAULT_RECORD_MEMORY_BYTES: usize = 0;

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            buffer_events: DEFAULT_RECORD_BUFFER_EVENTS,
            memory_bytes: DEFAULT_RECORD_MEMORY_BYTES,
            append: false,
            mode: RecordMode::Lossless,
            ready_buffers: READY_BUFFERS,
        }
    }
}
