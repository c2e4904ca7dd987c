//! The command line, declared for `clap`: the commands, each with the
//! arguments and help its own module declares (`report`, `views`,
//! `record`, `ctl`, ...). Parsing only; `super` runs what was asked.

use clap::{Parser, Subcommand};

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
    #[command(after_help = super::report::REPORT_HELP)]
    Report(super::report::ReportArgs),
    /// Aggregated call graph, as `uftrace graph` prints it.
    #[command(after_help = super::views::GRAPH_HELP)]
    Graph(super::views::GraphArgs),
    /// The timeline: one line per entry and exit, per thread.
    #[command(after_help = super::views::REPLAY_HELP)]
    Replay(super::views::ReplayArgs),
    /// Per-function change in calls, total and self time between two traces.
    #[command(after_help = super::report::DIFF_HELP)]
    Diff(super::report::DiffArgs),
    /// Chrome / Perfetto trace JSON (open in ui.perfetto.dev).
    #[command(after_help = super::views::CHROME_HELP)]
    Chrome(super::views::ChromeArgs),
    /// Perfetto's native protobuf trace (open in ui.perfetto.dev).
    #[command(after_help = super::views::PERFETTO_HELP)]
    Perfetto(super::views::ChromeArgs),
    /// Flame graph: SVG, or folded stacks with --folded.
    #[command(after_help = super::views::FLAME_HELP)]
    Flame(super::views::FlameArgs),
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

const COMPLETIONS_HELP: &str = "\
Examples:
  fntrace completions bash > ~/.local/share/bash-completion/completions/fntrace
  fntrace completions zsh > ~/.zfunc/_fntrace
  fntrace completions fish > ~/.config/fish/completions/fntrace.fish";
