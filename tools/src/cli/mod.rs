//! The `fntrace` command: parses the command line ([`args`]), reads the
//! trace, applies the selection every command shares (`-F`, `-N`, `--tid`,
//! `--time-range`), and runs the command. Text goes through [`output`]
//! (pager, colour, closed pipes); files are written where `-o` says.

mod args;
mod ctl;
mod output;
mod record;
mod report;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use fntrace_tools::analysis::{self, Selection};
use fntrace_tools::{export, Trace};

use args::{Cli, Command, SelectArgs};
use output::{load_trace, output_failure, Failure, Output};

/// Size above which `fntrace chrome` warns that viewers will struggle.
const BIG_JSON_BYTES: u64 = 100 << 20;

/// Runs the command line of this process.
pub fn main() -> ExitCode {
    // clap prints help, --version and argument errors (naming the argument)
    // itself, and exits 2 on errors.
    let cli = Cli::parse();
    match &cli.command {
        // Exit statuses of its own: 1 for an error reply, 2 for none.
        Command::Ctl(args) => return ctl::main(args),
        // The recorded program's exit status.
        Command::Record(args) => return record::main(args),
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
        Command::Report(args) => {
            let trace = selected(&args.dir, &args.select, None)?;
            let mut out = Output::new(cli.no_pager);
            report::write_report(&trace, &args, &mut out).map_err(output_failure)?;
            out.finish()
        }
        Command::Diff(args) => {
            let before = selected(&args.dir1, &args.select, None)?;
            let after = selected(&args.dir2, &args.select, None)?;
            let mut out = Output::new(cli.no_pager);
            report::write_diff(&before, &after, &args, &mut out).map_err(output_failure)?;
            out.finish()
        }
        Command::Graph(args) => {
            let trace = selected(&args.dir, &args.select, None)?;
            let mut out = Output::new(cli.no_pager);
            report::write_lost_and_unfinished(&trace, &mut out).map_err(output_failure)?;
            analysis::call_tree(&trace, args.function.as_deref())
                .write_text(&mut out)
                .map_err(output_failure)?;
            out.finish()
        }
        Command::Replay(args) => {
            let trace = selected(&args.dir, &args.select, args.depth)?;
            let mut out = Output::new(cli.no_pager);
            analysis::write_call_graph(&trace, None, &mut out).map_err(output_failure)?;
            out.finish()
        }
        Command::Chrome(args) => {
            let trace = selected(&args.dir, &args.select, None)?;
            write_file(&args.output, |out| {
                export::write_chrome_json(&trace, out).map_err(|e| e.to_string())
            })?;
            let size = std::fs::metadata(&args.output).map_or(0, |m| m.len());
            if size > BIG_JSON_BYTES {
                eprintln!(
                    "fntrace: warning: {} is {} MB; viewers load JSON this big slowly or not \
                     at all: narrow it with -F, -N, --tid or --time-range",
                    args.output.display(),
                    size >> 20
                );
            }
            Ok(())
        }
        Command::Perfetto(args) => {
            let trace = selected(&args.dir, &args.select, None)?;
            write_file(&args.output, |out| {
                export::write_perfetto(&trace, out).map_err(|e| e.to_string())
            })
        }
        Command::Flame(args) => {
            let trace = selected(&args.dir, &args.select, None)?;
            let folded = if args.merge_threads {
                export::folded_stacks(&trace)
            } else {
                export::folded_stacks_by_thread(&trace)
            };
            write_file(&args.output, |out| {
                if args.folded {
                    out.write_all(folded.as_bytes()).map_err(|e| e.to_string())
                } else {
                    let title = format!("fntrace: {}", trace.exe);
                    export::write_folded_svg(&folded, out, &title).map_err(|e| e.to_string())
                }
            })?;
            if trace.lost() > 0 {
                eprintln!(
                    "fntrace: warning: {} events were lost while recording; the graph lacks them",
                    trace.lost()
                );
            }
            Ok(())
        }
        Command::Ctl(_) | Command::Record(_) => unreachable!("main runs fntrace ctl and record"),
        Command::Completions { shell } => {
            let mut stdout = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "fntrace", &mut stdout);
            stdout.flush().map_err(output_failure)
        }
    }
}

/// Writes a file with `write`, and says so on stderr.
fn write_file(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<(), String>,
) -> Result<(), Failure> {
    let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut out = BufWriter::new(file);
    write(&mut out)?;
    out.flush()
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("fntrace: wrote {}", path.display());
    Ok(())
}

/// The trace in `dir`, with only the calls `select` (and `-D`) keep.
fn selected(dir: &Path, select: &SelectArgs, max_depth: Option<u16>) -> Result<Trace, Failure> {
    let trace = load_trace(dir)?;
    let start_ns = trace
        .threads
        .iter()
        .filter_map(|thread| thread.events.first())
        .map(|event| event.time_ns)
        .min()
        .unwrap_or(0);
    let (from_ns, to_ns) = match &select.time_range {
        Some(range) => parse_time_range(range, start_ns)?,
        None => (None, None),
    };
    let selection = Selection {
        include: select.filter.clone(),
        exclude: select.notrace.clone(),
        tids: select.tid.clone(),
        from_ns,
        to_ns,
        max_depth,
    };
    for tid in &selection.tids {
        if !trace.threads.iter().any(|thread| thread.tid == *tid) {
            let known: Vec<String> = trace.threads.iter().map(|t| t.tid.to_string()).collect();
            return Err(format!(
                "--tid {tid}: no such thread in {} (threads: {})",
                dir.display(),
                known.join(", ")
            )
            .into());
        }
    }
    Ok(analysis::select(&trace, &selection))
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
    let units: [(&str, f64); 5] = [
        ("ns", 1.0),
        ("us", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
        ("m", 60e9),
    ];
    for (unit, scale) in units {
        if let Some(number) = text.strip_suffix(unit) {
            // "ms" also ends in "s": only a number before the unit counts.
            if let Ok(value) = number.parse::<f64>() {
                if value >= 0.0 {
                    return Some(start_ns.saturating_add((value * scale).round() as u64));
                }
            }
        }
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
