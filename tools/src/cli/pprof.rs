//! `fntrace pprof INPUT -o FILE` and `fntrace ctl TARGET profile --pprof
//! FILE`: a gzipped pprof profile of a trace directory's calls, of a saved
//! profile snapshot, or of a running program's live profile, for `go tool
//! pprof`, Parca, Pyroscope or Grafana (the format:
//! `fntrace_tools::export::write_pprof`).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use fntrace_tools::analysis::{ProfileSnapshot, Selected};
use fntrace_tools::export::{self, PprofInfo};
use fntrace_tools::glob;

use super::output::{open_trace, Destination, Failure};
use super::select::SelectArgs;
use super::source_lines;

/// What `fntrace pprof --help` says after the options.
pub const PPROF_HELP: &str = "\
One sample per call path (frames leaf first) with three values: calls
(count), wall (nanoseconds: the calls' durations, callees included; a call
nested in a call of the same function, as in recursion, adds nothing) and
self (nanoseconds, callees' time left out; the default). The flat column of
`go tool pprof -top` is then report's calls, total and self, and cum of self
is the time spent inside a function; the flame graph of self is the time.
Functions are named as `fntrace report` names them, with the file and line
where each begins when its executable or library has line tables (-g);
`go tool pprof -lines` shows them. A snapshot file has no addresses' files:
its functions are named alone.

INPUT is a trace directory (its completed calls, as report counts them;
-F/-N/--tid/--time-range select them) or a live profile's snapshot (`fntrace
ctl PID profile --save FILE`; -F/-N keep the functions they match, each path
hung from its nearest kept caller). A running program's profile: `fntrace ctl
PID profile --pprof FILE`.

Examples:
  fntrace pprof trace-dir -o trace.pb.gz
  go tool pprof -top -sample_index=calls trace.pb.gz
  go tool pprof -http=:8080 trace.pb.gz          flame graph of self time
  fntrace pprof now.profile -o now.pb.gz -N 'log_*'
  fntrace ctl PID profile --pprof live.pb.gz     a running program's profile";

/// `fntrace pprof`.
#[derive(Debug, Args)]
pub struct PprofArgs {
    /// The trace directory, or a live profile's snapshot (`fntrace ctl PID
    /// profile --save FILE`).
    #[arg(value_name = "DIR|SNAPSHOT")]
    pub input: PathBuf,
    /// The file to write (gzipped profile.proto); `-`, or no -o: standard
    /// output (not a terminal).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Which calls.
    #[command(flatten)]
    pub select: SelectArgs,
}

/// Runs `fntrace pprof`.
pub fn run(args: &PprofArgs) -> Result<(), Failure> {
    let destination = Destination::of(args.output.as_deref(), "a pprof profile")?;
    let shown = args.input.display().to_string();
    let (snapshot, info) = if super::output::is_snapshot_file(&args.input) {
        snapshot_file(args, &shown)?
    } else {
        trace_dir(args)?
    };
    for line in super::snapshot::not_kept_lines(&snapshot) {
        eprintln!("fntrace: warning: {}", line.trim_start_matches("# "));
    }
    destination.write(|out| export::write_pprof(&snapshot, &info, out).map_err(|e| e.to_string()))
}

/// The calls of a trace directory, selected.
fn trace_dir(args: &PprofArgs) -> Result<(ProfileSnapshot, PprofInfo), Failure> {
    let (trace, bar) = open_trace(&args.input, 1)?;
    let selection = super::selection(&trace, &args.input, &args.select, None)?;
    let selected = Selected::new(&trace, &selection);
    let found = export::profile_of_trace(&selected).map_err(|e| e.to_string())?;
    drop(bar);
    super::check_matched(&[(&args.input, selected.unmatched())])?;
    // What the numbers lack, said as report says it.
    let unfinished: u64 = found.snapshot.functions.iter().map(|f| f.running).sum();
    if found.lost_events > 0 {
        eprintln!(
            "fntrace: warning: {}: {} events were lost while recording: the calls they held \
             are missing",
            args.input.display(),
            found.lost_events
        );
    }
    if unfinished > 0 {
        eprintln!(
            "fntrace: warning: {}: {unfinished} calls have no exit (still running, or \
             unwound): not counted, as in report",
            args.input.display()
        );
    }
    let (snapshot, span) = (found.snapshot, found.span_ns);
    let sources = source_lines::entry_lines(trace.maps(), &functions_of(&snapshot));
    let info = PprofInfo {
        time_nanos: 0,
        duration_nanos: i64::try_from(span).unwrap_or(i64::MAX),
        comments: vec![format!(
            "fntrace pprof {}: the calls of {}",
            args.input.display(),
            fntrace_tools::EventSource::exe(&trace)
        )],
        program: fntrace_tools::EventSource::exe(&trace).to_string(),
        sources,
    };
    Ok((snapshot, info))
}

/// A saved snapshot, its functions selected by -F/-N.
fn snapshot_file(args: &PprofArgs, shown: &str) -> Result<(ProfileSnapshot, PprofInfo), Failure> {
    super::snapshot::refuse_full_names(&args.select, shown)?;
    if !args.select.tid.is_empty() || args.select.time_range.is_some() {
        return Err(format!(
            "{shown} is a live profile: it keeps no threads apart and no times (--tid, \
             --time-range apply to trace directories)"
        )
        .into());
    }
    let snapshot = super::snapshot::read_snapshot(&args.input)?;
    let snapshot = selected(snapshot, &args.select.filter, &args.select.notrace, shown)?;
    // Taken when the file was written.
    let time = std::fs::metadata(&args.input)
        .and_then(|m| m.modified())
        .ok();
    let info = PprofInfo {
        time_nanos: time.map_or(0, nanos_since_epoch),
        duration_nanos: 0,
        comments: vec![format!("fntrace pprof {shown}: a live profile's snapshot")],
        program: String::new(),
        // A snapshot keeps no memory map: its addresses name no file.
        sources: Default::default(),
    };
    Ok((snapshot, info))
}

/// The functions of `snapshot` that `-F` and `-N` select, the call tree
/// seen through them; a glob matching no function is an error.
fn selected(
    snapshot: ProfileSnapshot,
    filter: &[String],
    notrace: &[String],
    shown: &str,
) -> Result<ProfileSnapshot, String> {
    if filter.is_empty() && notrace.is_empty() {
        return Ok(snapshot);
    }
    let names = || snapshot.functions.iter().map(|f| f.name.as_str());
    for (option, globs) in [("-F", filter), ("-N", notrace)] {
        for pattern in globs {
            if !names().any(|name| glob::matches(pattern, name)) {
                let message = glob::no_match(pattern, &format!("of {shown}"), names());
                return Err(format!("{option} {message}"));
            }
        }
    }
    Ok(snapshot.selected(|name| {
        (filter.is_empty() || glob::matches_any(filter, name)) && !glob::matches_any(notrace, name)
    }))
}

/// `fntrace ctl TARGET profile --pprof FILE`: the live snapshot, its
/// functions selected by -F/-N, written to `path`; `pid`, the target's
/// process when known, gives its functions' files (for file:line) and the
/// program's name.
pub fn save_live(
    snapshot: ProfileSnapshot,
    (filter, notrace): (&[String], &[String]),
    target: &str,
    pid: Option<u32>,
    path: &Path,
) -> Result<(), String> {
    let snapshot = selected(
        snapshot,
        filter,
        notrace,
        &format!("the profile of {target}"),
    )?;
    for line in super::snapshot::not_kept_lines(&snapshot) {
        eprintln!("fntrace: warning: {}", line.trim_start_matches("# "));
    }
    // The target's map now: its functions' files, for their lines.
    let sources = pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/maps")).ok())
        .map(|maps| source_lines::entry_lines(&maps, &functions_of(&snapshot)))
        .unwrap_or_default();
    let info = PprofInfo {
        time_nanos: nanos_since_epoch(SystemTime::now()),
        duration_nanos: 0,
        comments: vec![format!("fntrace ctl {target} profile: a live profile")],
        // A PID's executable, when it can be read.
        program: pid
            .and_then(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).ok())
            .map(|exe| exe.display().to_string())
            .unwrap_or_default(),
        sources,
    };
    super::output::save(path, |out| {
        export::write_pprof(&snapshot, &info, out).map_err(|e| e.to_string())
    })?;
    eprintln!("fntrace: wrote {}", path.display());
    Ok(())
}

/// The entry addresses of `snapshot`'s functions.
fn functions_of(snapshot: &ProfileSnapshot) -> Vec<usize> {
    snapshot.functions.iter().map(|f| f.function).collect()
}

fn nanos_since_epoch(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
