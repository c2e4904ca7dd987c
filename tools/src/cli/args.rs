//! The command line, declared for `clap`: every command, option, help text
//! and example. Parsing only; `super` runs what was asked.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// What `fntrace --help` says after the command list.
const AFTER_HELP: &str = "\
Examples:
  fntrace report trace-dir -s self --top 20     where the time goes
  fntrace graph trace-dir 'demo::parse'         what parse calls, how often
  fntrace replay trace-dir -F 'demo::*' -D 3    the timeline, 3 levels deep
  fntrace perfetto trace-dir -o t.perfetto-trace  open in ui.perfetto.dev
  fntrace flame trace-dir -o flame.svg          flame graph, one tower per thread
  fntrace pprof trace-dir -o trace.pb.gz        for go tool pprof, Parca, Pyroscope
  fntrace diff before-dir after-dir             what changed between two runs
  fntrace ctl PID record trace-dir              record a running program
  fntrace top PID                               live latency (the profile tracer)

A trace directory is written by fntrace::dump (uftrace's data format); the
directories of `uftrace record` are read too. Function globs (-F, -N, graph's
FUNCTION): `*` any run of characters, `?` one character; a glob also matches
from any point where a path starts inside a name, so `serde_json::*` selects
`<serde_json::Value as serde::Serialize>::serialize` too; a bare name (no
`::`) also matches the last segment of a path, as GDB's `break NAME`:
`sleeper` selects `app::sleeper`. A glob that matches no function called in
the trace is an error naming the closest names.";

/// fntrace: reports, call graphs and exports of function traces.
#[derive(Debug, Parser)]
#[command(name = "fntrace", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Print to stdout even on a terminal (default: page with `less -FRX`,
    /// or $PAGER).
    #[arg(long, global = true)]
    pub no_pager: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-function table: calls, total and self time, latency spread.
    #[command(after_help = REPORT_HELP)]
    Report(ReportArgs),
    /// Aggregated call graph, as `uftrace graph` prints it.
    #[command(after_help = GRAPH_HELP)]
    Graph(GraphArgs),
    /// The timeline: one line per entry and exit, per thread.
    #[command(after_help = REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Per-function change in calls, total and self time between two traces.
    #[command(after_help = DIFF_HELP)]
    Diff(DiffArgs),
    /// Chrome / Perfetto trace JSON (open in ui.perfetto.dev).
    #[command(after_help = CHROME_HELP)]
    Chrome(ChromeArgs),
    /// Perfetto's native protobuf trace (open in ui.perfetto.dev).
    #[command(after_help = PERFETTO_HELP)]
    Perfetto(ChromeArgs),
    /// Flame graph: SVG, or folded stacks with --folded.
    #[command(after_help = FLAME_HELP)]
    Flame(FlameArgs),
    /// pprof profile (gzipped protobuf) of a trace's or a snapshot's call
    /// paths: calls, wall and self time, for go tool pprof, Parca, Pyroscope.
    #[command(after_help = super::pprof::PPROF_HELP)]
    Pprof(super::pprof::PprofArgs),
    /// Run a program (built with -pg, -pg -mfentry or -Zinstrument-mcount)
    /// and record its trace, forks and execs included.
    #[command(after_help = super::record::RECORD_HELP)]
    Record(super::record::RecordArgs),
    /// Control a running program: status, enable, record, stop, report...
    #[command(after_help = super::ctl::CTL_HELP)]
    Ctl(super::ctl::CtlArgs),
    /// Live per-function latency of a running program, refreshed every
    /// second (its profile tracer), as top shows processes.
    #[command(after_help = super::top::TOP_HELP)]
    Top(super::top::TopArgs),
    /// Make a running program (built with -pg, started without fntrace)
    /// serve live control: loads libfntrace.so into it.
    #[command(after_help = super::attach::ATTACH_HELP)]
    Attach(super::attach::AttachArgs),
    /// End what fntrace attach started: tracers off, text as before.
    #[command(after_help = super::attach::DETACH_HELP)]
    Detach(super::attach::DetachArgs),
    /// Cargo with the workspace's own crates instrumented for fntrace
    /// (-Zinstrument-mcount on stable): build, run, test or bench.
    Cargo(super::cargo::CargoArgs),
    /// Shell completion script, to source or install.
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

const REPORT_HELP: &str = "\
Columns: calls (completed), unfinished (entered, exit not recorded: still
running when the trace ended, or unwound), total (summed durations, callees
included; a call nested in a call of the same function, as in recursion,
adds nothing: its time is in the outer call's, as uftrace counts it), self
(each call's duration minus its completed direct callees'), avg, min, p50,
p90, p99 (nearest rank, within 0.4%: the live profile's histogram, so a trace
and a profile of the same calls agree), max (of every call, nested ones
included). One row per function
name, as uftrace's (two static functions called `helper` are one row);
--by-address splits them. Times in ns, µs, ms, s. Lost events and unfinished
calls are stated above the table: the numbers below them are missing what was
lost.

A live profile's snapshot (a file, from `fntrace ctl PID profile --save`)
gives the same table; its `running` column counts calls entered and not
returned, and -F/-N select rows by name (it keeps no calls).

Examples:
  fntrace report trace-dir                        sorted by total time
  fntrace report trace-dir -s self --top 10       the 10 largest self times
  fntrace report trace-dir -s calls -F 'demo::*'  inside demo's functions
  fntrace report trace-dir --threads --tid 4242   one thread's table
  fntrace report trace-dir --hist 'demo::parse*'  its latency distribution
  fntrace report trace-dir --hist parse --hist-buckets 8   8 rows per power of 2";

const GRAPH_HELP: &str = "\
Each line: total time, (calls) function, its callees below it; a function
called from several places appears under each. With FUNCTION, its callers
are shown first (BACKTRACE), then what it called, all its calls merged.
Calls without an exit count until the thread's last event, as uftrace does.

Examples:
  fntrace graph trace-dir
  fntrace graph trace-dir main
  fntrace graph trace-dir 'demo::parse*' --tid 4242";

const REPLAY_HELP: &str = "\
Examples:
  fntrace replay trace-dir | head -50
  fntrace replay trace-dir -F 'demo::handle*' -D 2
  fntrace replay trace-dir --time-range 10ms~12ms";

const DIFF_HELP: &str = "\
Rows match functions by name. Changes are DIR2 minus DIR1; percentages are of
DIR1's value. Sorted by the largest change of the first --sort key.

Examples:
  fntrace diff before after
  fntrace diff before after -s self --top 20";

const CHROME_HELP: &str = "\
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

const PERFETTO_HELP: &str = "\
One track per thread, one slice per call, names interned and timestamps
delta-encoded: several times smaller than the JSON of `fntrace chrome`.

Examples:
  fntrace perfetto trace-dir -o trace.perfetto-trace
  fntrace perfetto trace-dir -o main.perfetto-trace -F main
  fntrace perfetto trace-dir -o slow.perfetto-trace --min-duration 1ms";

const FLAME_HELP: &str = "\
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

const COMPLETIONS_HELP: &str = "\
Examples:
  fntrace completions bash > ~/.local/share/bash-completion/completions/fntrace
  fntrace completions zsh > ~/.zfunc/_fntrace
  fntrace completions fish > ~/.config/fish/completions/fntrace.fish";

/// Which calls a command looks at (the same for every command).
#[derive(Clone, Debug, Default, Args)]
pub struct SelectArgs {
    /// Only the calls inside functions matching GLOB (the functions and
    /// everything they call); repeatable.
    #[arg(short = 'F', long = "filter", value_name = "GLOB")]
    pub filter: Vec<String>,
    /// Leave out functions matching GLOB, and everything they call;
    /// repeatable.
    #[arg(short = 'N', long = "notrace", value_name = "GLOB")]
    pub notrace: Vec<String>,
    /// Only this thread; repeatable.
    #[arg(long, value_name = "TID")]
    pub tid: Vec<u32>,
    /// Only calls entered in A~B: times since the trace's start with a unit
    /// (`10ms~20ms`, `1.5s~`), or timestamps in seconds as uftrace shows them
    /// (`51234.000100~51234.000200`); either end may be left out.
    #[arg(long, value_name = "A~B")]
    pub time_range: Option<String>,
    /// How C++ functions are named (shown, and matched by -F/-N): `simple`,
    /// as uftrace shows them (`ns::Class::method`), or `full` (template
    /// arguments, parameters and return type: overloads apart).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Demangle::Simple)]
    pub demangle: Demangle,
}

/// `--demangle`: how C++ functions are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Demangle {
    /// `ns::Class::method`: no template arguments, parameters or return
    /// type (uftrace's default; overloads and instances share a name).
    #[default]
    Simple,
    /// Everything the symbol says: `void ns::sort<int*>(int*, int*)`.
    Full,
}

/// `fntrace report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The trace directory, or a live profile's snapshot (`fntrace ctl
    /// PID profile --save FILE`).
    #[arg(value_name = "DIR|SNAPSHOT")]
    pub dir: PathBuf,
    /// Sort by these keys, largest first (the next key breaks ties);
    /// repeatable or comma-separated.
    #[arg(
        short,
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "total"
    )]
    pub sort: Vec<SortKey>,
    /// One table per thread instead of one for the process.
    #[arg(long, conflicts_with = "hist")]
    pub threads: bool,
    /// At most N rows (per table).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// One row per function address: functions of the same name (static
    /// functions of several files, folded code) apart.
    #[arg(long)]
    pub by_address: bool,
    /// The latency distribution of functions instead of the table.
    #[command(flatten)]
    pub hist: super::hist::HistArgs,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// A column of the report to sort by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Time in the function, callees included (a call nested in a call of
    /// the same function counted once, in the outer one).
    Total,
    /// Summed self time.
    #[value(name = "self")]
    SelfTime,
    /// Completed calls.
    Calls,
    /// Mean duration.
    Avg,
    /// Shortest call.
    Min,
    /// Longest call.
    Max,
    /// Median duration.
    P50,
    /// 90th percentile duration.
    P90,
    /// 99th percentile duration.
    P99,
}

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

/// `fntrace diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The trace before.
    pub dir1: PathBuf,
    /// The trace after.
    pub dir2: PathBuf,
    /// Sort by the change of these keys (total, self or calls).
    #[arg(
        short,
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "total"
    )]
    pub sort: Vec<SortKey>,
    /// At most N rows.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Which calls (in both traces).
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
