//! The arguments and help of the commands that show a trace in another
//! form: `graph`, `replay`, `chrome`, `perfetto` and `flame` (run by the
//! CLI's root module).

use std::path::PathBuf;

use clap::Args;

use super::select::SelectArgs;

pub(super) const GRAPH_HELP: &str = "\
Each line: total time, (calls) function, its callees below it; a function
called from several places appears under each. With FUNCTION, its callers
are shown first (BACKTRACE), then what it called, all its calls merged.
Calls without an exit count until the thread's last event, as uftrace does.
A FUNCTION that is an async fn's resume function, recorded with `fntrace
record --async`, gets its graph once more under its futures (AS FUTURES):
the futures that reached Ready and their summed latency, first poll to
Ready, their polls on any thread below them, and below those what the
polls called.

Examples:
  fntrace graph trace-dir
  fntrace graph trace-dir main
  fntrace graph trace-dir 'myservice::serve::{closure#0}'  a future's callees
  fntrace graph trace-dir 'demo::parse*' --tid 4242";

pub(super) const REPLAY_HELP: &str = "\
Examples:
  fntrace replay trace-dir | head -50
  fntrace replay trace-dir -F 'demo::handle*' -D 2
  fntrace replay trace-dir --time-range 10ms~12ms";

pub(super) const CHROME_HELP: &str = "\
The trace is read as it is written, in memory bounded by the call depth (a
scratch file of 40 bytes per call goes next to FILE, or into the temporary
directory when writing to standard output, and is removed). The
size of the JSON is known before it is written: above 100 MB, which the
Chrome and Perfetto UIs do not open, a warning says so.

Examples:
  fntrace chrome trace-dir -o trace.json
  fntrace chrome trace-dir -o trace.json --from 1s --to 1.2s --tid 4242
  fntrace chrome trace-dir -o trace.json --min-duration 100us
  fntrace chrome trace-dir | gzip > trace.json.gz   no -o: standard output";

pub(super) const PERFETTO_HELP: &str = "\
One track per thread, one slice per call, names interned and timestamps
delta-encoded: several times smaller than the JSON of `fntrace chrome`.

Examples:
  fntrace perfetto trace-dir -o trace.perfetto-trace
  fntrace perfetto trace-dir -o main.perfetto-trace -F main
  fntrace perfetto trace-dir -o slow.perfetto-trace --min-duration 1ms";

pub(super) const FLAME_HELP: &str = "\
Widths are time (self plus callees, in ns), not samples. By default each
thread is the bottom frame of its own tower, so a thread waiting in `join`
does not widen the others' chains; --merge-threads merges them.

From a live profile's snapshot (a file, not a directory): its call tree,
widths self time, all threads merged; -F draws each path from its first
function matching a glob down, -N leaves out the paths through a matching
function.

Examples:
  fntrace flame trace-dir -o flame.svg
  fntrace flame now.profile -o live.svg         a snapshot (ctl PID profile --save)
  fntrace flame trace-dir --tid 4242 -o worker.svg
  fntrace flame trace-dir --folded -o stacks.txt
  fntrace flame trace-dir > flame.svg           no -o: standard output";

/// `fntrace graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Root the graph at this function (a glob): its callers, then what it
    /// called.
    pub function: Option<String>,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// `fntrace replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// Only DEPTH levels of calls (1: the outermost calls only), counted
    /// from the outermost call shown (inside -F's functions: from them), as
    /// uftrace's -D and `fntrace record -D`.
    #[arg(short = 'D', long = "depth", value_name = "DEPTH",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub depth: Option<u16>,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// `fntrace chrome` and `fntrace perfetto`.
#[derive(Debug, Args)]
pub struct ChromeArgs {
    /// The trace directory.
    pub dir: PathBuf,
    /// The file to write; `-`, or no -o: standard output (not a terminal).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Only calls entered at or after TIME since the trace's start
    /// (`1.5s`, `200ms`); --time-range FROM~ says the same.
    #[arg(long, value_name = "TIME", conflicts_with = "time_range")]
    pub from: Option<String>,
    /// Only calls entered at or before TIME since the trace's start.
    #[arg(long, value_name = "TIME", conflicts_with = "time_range")]
    pub to: Option<String>,
    /// Leave out calls shorter than DURATION (`100us`, `2ms`); a call never
    /// lasts longer than its caller, so callers of the calls kept stay.
    #[arg(long, value_name = "DURATION")]
    pub min_duration: Option<String>,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// `fntrace flame`.
#[derive(Debug, Args)]
pub struct FlameArgs {
    /// The trace directory, or a live profile's snapshot (`fntrace ctl
    /// PID profile --save FILE`, or written by the C API).
    #[arg(value_name = "DIR|SNAPSHOT")]
    pub dir: PathBuf,
    /// The SVG (or, with --folded, text) file to write; `-`, or no -o:
    /// standard output (not a terminal).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write folded stacks (`a;b;c NANOSECONDS` lines) instead of SVG.
    #[arg(long)]
    pub folded: bool,
    /// Merge all threads' chains instead of one tower per thread.
    #[arg(long)]
    pub merge_threads: bool,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}
