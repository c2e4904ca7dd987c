//! The `fntrace` command: parses the command line ([`args`]), opens the
//! trace, applies the selection every command shares (`-F`, `-N`, `--tid`,
//! `--time-range`) as events are read, and runs the command: every command
//! reads the trace directory thread by thread, record by record, in memory
//! bounded by what it shows (see `fntrace_tools::export::UftraceReader`). Text goes through [`output`]
//! (pager, colour, closed pipes); files are written where `-o` says.

mod args;
mod async_drops;
mod async_fns;
mod attach;
mod auto_args;
mod by_arg;
mod cargo;
mod ctl;
mod futures;
mod hist;
mod instrumented;
mod output;
mod pprof;
mod profile;
mod record;
mod report;
mod select;
mod selection;
mod snapshot;
mod source_lines;
mod supervise;
mod top;
mod views;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use fntrace_tools::analysis::{self, ReadOrWrite, Rows, Selected, Selection, Unmatched};
use fntrace_tools::export::{self, UftraceReader};
use fntrace_tools::{glob, EventSource};

use args::{Cli, Command};
pub use cargo::run_as_rustc_wrapper;
use output::{open_trace, output_failure, Destination, Failure, Output, ProgressBar};
use report::TraceReport;
use select::{Demangle, SelectArgs};
pub use supervise::run_as_launcher;
use views::ChromeArgs;

/// Size above which `fntrace chrome` warns that viewers will struggle.
const BIG_JSON_BYTES: u64 = 100 << 20;

/// Runs the command line of this process.
pub fn main() -> ExitCode {
    // clap prints help, --version and argument errors (naming the argument)
    // itself, and exits 2 on errors.
    let cli = Cli::parse();
    match &cli.command {
        // Exit statuses of its own: 1 for an error reply, 2 for none.
        Command::Ctl(args) => return ctl::main(args, cli.no_pager),
        // The recorded program's exit status.
        Command::Record(args) => return record::main(args),
        // 2 when the program cannot be asked, as ctl.
        Command::Top(args) => return top::main(args),
        Command::Attach(args) => return attach::main(args),
        Command::Detach(args) => return attach::detach(args),
        _ => {}
    }
    match run(cli) {
        Ok(()) | Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(Failure::Message(why)) => {
            eprintln!("fntrace: {why}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Report(args) if output::is_snapshot_file(&args.dir) => {
            profile::report(&args, cli.no_pager)
        }
        Command::Report(args) => {
            let (trace, bar) = open_trace(&args.dir, 1)?;
            let selection = selection(&trace, &args.dir, &args.select, None)?;
            let rows = if args.by_address {
                Rows::ByAddress
            } else {
                Rows::ByName
            };
            let selected = Selected::new(&trace, &selection);
            if let Some(value) = &args.by_arg {
                let specs = trace.arg_specs();
                let table = by_arg::ByArg::of(&selected, specs, value, &args.select.filter)?;
                drop(bar);
                check_matched(&[(&args.dir, selected.unmatched())])?;
                let mut out = Output::new(cli.no_pager);
                let top = args.top.unwrap_or(by_arg::DEFAULT_ROWS);
                table.write(top, &mut out).map_err(output_failure)?;
                return out.finish();
            }
            let report = TraceReport::of(&selected, rows)?;
            let futures = futures::Futures::of(&selected, trace.arg_specs())?;
            drop(bar);
            check_matched(&[(&args.dir, selected.unmatched())])?;
            if let Some(pattern) = &args.hist.hist {
                let place = args.dir.display().to_string();
                hist::check(&report.latency, pattern, &place)?;
            }
            let mut out = Output::new(cli.no_pager);
            report::write_report(report, &args, &mut out).map_err(output_failure)?;
            if let Some(futures) = futures {
                futures.write(&mut out).map_err(output_failure)?;
            }
            out.finish()
        }
        Command::Diff(args) => {
            let mut reports = Vec::new();
            let mut unmatched = Vec::new();
            for dir in [&args.dir1, &args.dir2] {
                let (trace, bar) = open_trace(dir, 1)?;
                let selection = selection(&trace, dir, &args.select, None)?;
                let selected = Selected::new(&trace, &selection);
                // Rows match by name across the two traces.
                reports.push(TraceReport::of(&selected, Rows::ByName)?);
                drop(bar);
                unmatched.push((dir, selected.unmatched()));
            }
            // A function may be gone from one trace: a glob is wrong only
            // if it matched in neither.
            let in_both: Vec<Unmatched> = unmatched[0]
                .1
                .iter()
                .filter(|glob| unmatched[1].1.iter().any(|other| other.glob == glob.glob))
                .cloned()
                .collect();
            let both = PathBuf::from(format!(
                "{} or {}",
                args.dir1.display(),
                args.dir2.display()
            ));
            check_matched(&[(&both, in_both)])?;
            let after = reports.pop().expect("two reports");
            let before = reports.pop().expect("two reports");
            let mut out = Output::new(cli.no_pager);
            report::write_diff(before, after, &args, &mut out).map_err(output_failure)?;
            out.finish()
        }
        Command::Graph(args) => {
            let (trace, bar) = open_trace(&args.dir, 1)?;
            let selection = selection(&trace, &args.dir, &args.select, None)?;
            let selected = Selected::new(&trace, &selection);
            // One pass: the tree counts what the trace lacks as it goes.
            let tree = analysis::parallel::call_tree_of(&selected, args.function.as_deref())
                .map_err(|e| e.to_string())?;
            check_matched(&[(&args.dir, selected.unmatched())])?;
            if let Some(function) = &args.function {
                // The functions called in the selection: the graph's nodes.
                let names = tree.functions.iter().map(String::as_str);
                if !names.clone().any(|name| glob::matches(function, name)) {
                    return Err(no_match("FUNCTION", function, args.dir.display(), names).into());
                }
            }
            drop(bar);
            let mut out = Output::new(cli.no_pager);
            report::write_lost_and_unfinished(&tree.shortfall, &mut out).map_err(output_failure)?;
            tree.write_text(&mut out).map_err(output_failure)?;
            if let Some(function) = &args.function {
                write_as_futures(&selected, &trace, function, &tree, &mut out)?;
            }
            out.finish()
        }
        Command::Replay(args) => {
            // Lines are written as the records are read: a bar on the
            // terminal would cross the pager's screen.
            let passes = if std::io::stdout().is_terminal() {
                0
            } else {
                2
            };
            let (trace, _bar) = open_trace(&args.dir, passes)?;
            let selection = selection(&trace, &args.dir, &args.select, args.depth)?;
            let mut out = Output::new(cli.no_pager);
            let selected = Selected::new(&trace, &selection);
            // Recorded with --async: each future one line where it ended.
            let ends = match analysis::futures_of(&selected, trace.arg_specs()) {
                Ok(Some(linked)) => analysis::FutureEnds::of(&linked),
                Ok(None) => analysis::FutureEnds::default(),
                Err(e) => return Err(e.to_string().into()),
            };
            let graph = (None, &ends);
            match analysis::parallel::write_call_graph_with_futures(&selected, graph, &mut out) {
                Ok(()) => {}
                Err(ReadOrWrite::Read(e)) => return Err(e.to_string().into()),
                Err(ReadOrWrite::Write(e)) => return Err(output_failure(e)),
            }
            out.finish()?;
            // Lines go out as they are read: a glob that matched nothing is
            // known at the end only.
            check_matched(&[(&args.dir, selected.unmatched())])
        }
        Command::Chrome(args) => {
            let destination = Destination::of(args.output.as_deref(), "Chrome trace JSON")?;
            let spooled = spool_calls(&args, &destination)?;
            warn_incomplete(&spooled.incomplete(), &destination);
            let size = spooled.chrome_json_bytes();
            if size > BIG_JSON_BYTES {
                eprintln!(
                    "fntrace: warning: {} will be {} MB ({} calls); the Chrome and Perfetto UIs \
                     do not open files over ~100 MB: narrow it with --from/--to, --tid, \
                     --min-duration, -F or -N (or write `fntrace perfetto`, far smaller)",
                    destination.name(),
                    size >> 20,
                    spooled.calls()
                );
            }
            let bar = ProgressBar::writing(&destination, spooled.calls());
            destination.write(|out| {
                let written = spooled
                    .write_chrome_json_with_progress(out, &mut |done| bar.set_position(done))
                    .map_err(|e| e.to_string());
                bar.clear();
                written
            })
        }
        Command::Perfetto(args) => {
            let destination = Destination::of(args.output.as_deref(), "a Perfetto trace")?;
            let spooled = spool_calls(&args, &destination)?;
            warn_incomplete(&spooled.incomplete(), &destination);
            let bar = ProgressBar::writing(&destination, spooled.calls());
            destination.write(|out| {
                let written = spooled
                    .write_perfetto_with_progress(out, &mut |done| bar.set_position(done))
                    .map_err(|e| e.to_string());
                bar.clear();
                written
            })
        }
        Command::Flame(args) if output::is_snapshot_file(&args.dir) => profile::flame(&args),
        Command::Flame(args) => {
            let destination = flame_destination(&args)?;
            let (trace, bar) = open_trace(&args.dir, 2)?;
            let selection = selection(&trace, &args.dir, &args.select, None)?;
            let selected = Selected::new(&trace, &selection);
            let (folded, incomplete) = export::folded_stacks_of(&selected, args.merge_threads)
                .map_err(|e| e.to_string())?;
            drop(bar);
            check_matched(&[(&args.dir, selected.unmatched())])?;
            warn_incomplete(&incomplete, &destination);
            destination.write(|out| {
                if args.folded {
                    out.write_all(folded.as_bytes()).map_err(|e| e.to_string())
                } else {
                    let title = format!("fntrace: {}", trace.exe());
                    export::write_folded_svg(&folded, out, &title).map_err(|e| e.to_string())
                }
            })
        }
        Command::Pprof(args) => pprof::run(&args),
        Command::Ctl(_)
        | Command::Record(_)
        | Command::Top(_)
        | Command::Attach(_)
        | Command::Detach(_) => {
            unreachable!("main runs fntrace ctl, record, top, attach and detach")
        }
        Command::Cargo(args) => cargo::run(&args),
        Command::Completions { shell } => {
            let mut stdout = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "fntrace", &mut stdout);
            stdout.flush().map_err(output_failure)
        }
    }
}

/// Where `fntrace flame` writes.
fn flame_destination(args: &views::FlameArgs) -> Result<Destination, Failure> {
    let what = if args.folded {
        "folded stacks"
    } else {
        "a flame graph (SVG)"
    };
    Destination::of(args.output.as_deref(), what)
}

/// The calls `fntrace chrome` or `fntrace perfetto` writes, spooled (a
/// scratch file next to the output).
fn spool_calls(
    args: &ChromeArgs,
    destination: &Destination,
) -> Result<export::SpooledCalls, Failure> {
    let (trace, _bar) = open_trace(&args.dir, 2)?;
    let mut select = args.select.clone();
    if args.from.is_some() || args.to.is_some() {
        select.time_range = Some(format!(
            "{}~{}",
            args.from.as_deref().unwrap_or(""),
            args.to.as_deref().unwrap_or("")
        ));
    }
    let selection = selection(&trace, &args.dir, &select, None)?;
    let min_duration_ns = match &args.min_duration {
        Some(text) => fntrace_tools::units::parse_duration_ns(text).map_err(|_| {
            format!(
                "--min-duration {text:?}: not a duration (a number with a unit: ns, us, ms, s, m)"
            )
        })?,
        None => 0,
    };
    let options = export::CallExportOptions {
        min_duration_ns,
        scratch_dir: Some(destination.scratch_dir()),
    };
    let selected = Selected::new(&trace, &selection);
    let mut spooled = export::SpooledCalls::new(&selected, &options).map_err(|e| e.to_string())?;
    // Recorded with --async: each future one slice across its polls.
    if let Some(linked) =
        analysis::futures_of(&selected, trace.arg_specs()).map_err(|e| e.to_string())?
    {
        spooled.add_futures(&selected, &linked);
    }
    check_matched(&[(&args.dir, selected.unmatched())])?;
    Ok(spooled)
}

/// `fntrace graph FUNCTION` of an async function recorded with `--async`:
/// its polls' graph again, nested under its futures (docs/async.md).
/// Nothing for a function that is not async or a trace without `--async`.
fn write_as_futures<S: EventSource>(
    selected: &S,
    trace: &UftraceReader,
    function: &str,
    tree: &analysis::CallTree,
    out: &mut Output,
) -> Result<(), Failure>
where
    S::Error: std::fmt::Display,
{
    let Some(linked) =
        analysis::futures_of(selected, trace.arg_specs()).map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let mut ready = 0;
    let mut latency_ns = 0;
    let mut not_ready = 0;
    for future in &linked.futures {
        if !glob::matches(function, &selected.name_of(future.function)) {
            continue;
        }
        if future.end == analysis::FutureEnd::Ready {
            ready += 1;
            latency_ns += future.end_ns - future.start_ns;
        } else {
            not_ready += 1;
        }
    }
    if ready + not_ready == 0 {
        return Ok(());
    }
    tree.write_futures_text(ready, latency_ns, out)
        .map_err(output_failure)?;
    if not_ready > 0 {
        writeln!(
            out,
            "# and {not_ready} futures not Ready in the trace (pending at its end, dropped, \
             panicked or started before it): their polls are counted above, not their latency"
        )
        .map_err(output_failure)?;
    }
    Ok(())
}

/// Fails, naming each glob and the closest names, when a glob of `-F` or
/// `-N` matched no function called in the directory it was applied to: a
/// typo must not pass for an empty result.
fn check_matched(unmatched: &[(&PathBuf, Vec<Unmatched>)]) -> Result<(), Failure> {
    let messages: Vec<String> = unmatched
        .iter()
        .flat_map(|(dir, globs)| {
            globs.iter().map(|glob| {
                let option = if glob.exclude { "-N" } else { "-F" };
                no_match(
                    option,
                    &glob.glob,
                    dir.display(),
                    glob.closest.iter().map(String::as_str),
                )
            })
        })
        .collect();
    if messages.is_empty() {
        Ok(())
    } else {
        Err(messages.join("\nfntrace: ").into())
    }
}

/// `WHAT GLOB: no function called in DIR matches it (closest: a, b, c)`,
/// the closest three of `names` ([`glob::no_match`]).
fn no_match<'a>(
    what: &str,
    glob: &str,
    dir: impl std::fmt::Display,
    names: impl IntoIterator<Item = &'a str>,
) -> String {
    let among = format!("called in {dir}");
    format!("{what} {}", glob::no_match(glob, &among, names))
}

/// Says on stderr, in one line before `destination` is written, what the
/// trace lacks and the output makes up (nothing when it lacks nothing).
fn warn_incomplete(incomplete: &export::Incomplete, destination: &Destination) {
    if let Some(missing) = incomplete.describe() {
        eprintln!("fntrace: warning: {}: {missing}", destination.name());
    }
}

/// The calls `select` (and `-D`, uftrace's: levels shown) keep of the
/// trace in `dir`.
fn selection(
    trace: &UftraceReader,
    dir: &Path,
    select: &SelectArgs,
    depth: Option<u16>,
) -> Result<Selection, Failure> {
    trace.set_full_cpp_names(select.demangle == Demangle::Full);
    let threads = trace.threads();
    for tid in &select.tid {
        if !threads.iter().any(|thread| thread.tid == *tid) {
            // The three nearest ids: a list of 10,000 threads helps no one.
            let mut known: Vec<u32> = threads.iter().map(|t| t.tid).collect();
            known.sort_by_key(|known| (known.abs_diff(*tid), *known));
            let closest: Vec<String> = known.iter().take(3).map(u32::to_string).collect();
            return Err(format!(
                "--tid {tid}: no such thread in {} (closest: {}; {} threads)",
                dir.display(),
                closest.join(", "),
                threads.len()
            )
            .into());
        }
    }
    let (from_ns, to_ns) = match &select.time_range {
        Some(range) => {
            // The trace starts with the earliest first event of a thread.
            let mut start_ns = None::<u64>;
            for index in 0..threads.len() {
                let (first, _) = trace
                    .read_thread(index, |events| events.next())
                    .map_err(|e| e.to_string())?;
                if let Some(first) = first {
                    start_ns = Some(start_ns.map_or(first.time_ns, |s| s.min(first.time_ns)));
                }
            }
            parse_time_range(range, start_ns.unwrap_or(0))?
        }
        None => (None, None),
    };
    Ok(Selection {
        include: select.filter.clone(),
        exclude: select.notrace.clone(),
        tids: select.tid.clone(),
        from_ns,
        to_ns,
        depth,
    })
}

/// `A~B` as absolute times in ns; see `--time-range`'s help.
fn parse_time_range(range: &str, start_ns: u64) -> Result<(Option<u64>, Option<u64>), String> {
    let (from, to) = range
        .split_once('~')
        .ok_or_else(|| format!("--time-range {range:?}: expected A~B (e.g. 10ms~20ms)"))?;
    let end = |text: &str| -> Result<Option<u64>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        parse_time(text, start_ns).map(Some).ok_or_else(|| {
            format!(
                "--time-range {range:?}: {text:?} is not a time (a number with a unit: \
                     ns, us, ms, s, m; or a timestamp in seconds such as 51234.000100)"
            )
        })
    };
    Ok((end(from)?, end(to)?))
}

/// One end of a time range: elapsed with a unit, or a timestamp in seconds.
fn parse_time(text: &str, start_ns: u64) -> Option<u64> {
    if let Ok(ns) = fntrace_tools::units::parse_duration_ns(text) {
        return Some(start_ns.saturating_add(ns));
    }
    let (seconds, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = seconds.parse().ok()?;
    let nanos: u64 = format!("{fraction:0<9}").parse().ok()?;
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ranges() {
        assert_eq!(
            parse_time_range("10ms~1.5s", 1_000),
            Ok((Some(10_001_000), Some(1_500_001_000)))
        );
        assert_eq!(parse_time_range("~250us", 0), Ok((None, Some(250_000))));
        assert_eq!(
            parse_time_range("51234.0001~", 0),
            Ok((Some(51_234_000_100_000), None))
        );
        assert!(parse_time_range("10ms", 0).is_err());
        assert!(parse_time_range("ten~", 0)
            .unwrap_err()
            .contains("\"ten\" is not a time"));
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
