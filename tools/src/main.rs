//! `fntrace`: reads a trace directory written by `fntrace::dump` (the
//! uftrace data format) and prints or converts it.
//!
//! ```text
//! fntrace report DIR [--limit N]        per-function latency table
//! fntrace graph DIR [--lines N]         call graph, one line per entry/exit
//! fntrace chrome DIR -o FILE.json       Perfetto / chrome://tracing JSON
//! fntrace flame DIR -o FILE.svg         flame graph (SVG; --folded for text)
//! ```

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: fntrace report DIR [--limit N]
       fntrace graph DIR [--lines N]
       fntrace chrome DIR -o FILE.json
       fntrace flame DIR -o FILE.svg [--folded]

DIR is a trace directory written by fntrace::dump (uftrace's data format;
`uftrace replay -d DIR` reads it too).";

struct Args {
    command: String,
    dir: PathBuf,
    output: Option<PathBuf>,
    limit: Option<usize>,
    folded: bool,
}

fn parse_args(mut raw: impl Iterator<Item = String>) -> Result<Args, String> {
    let command = raw.next().ok_or("no command given")?;
    if !matches!(command.as_str(), "report" | "graph" | "chrome" | "flame") {
        return Err(format!("unknown command {command:?}"));
    }
    let mut dir = None;
    let mut output = None;
    let mut limit = None;
    let mut folded = false;
    while let Some(arg) = raw.next() {
        match arg.as_str() {
            "-o" | "--output" => {
                output = Some(PathBuf::from(raw.next().ok_or("-o needs a file name")?));
            }
            "--limit" | "--lines" => {
                let value = raw.next().ok_or(format!("{arg} needs a number"))?;
                let n = value
                    .parse()
                    .map_err(|_| format!("{arg} needs a number, not {value:?}"))?;
                limit = Some(n);
            }
            "--folded" => folded = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag:?}")),
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => return Err(format!("unexpected argument {extra:?}")),
        }
    }
    let dir = dir.ok_or("no trace directory given")?;
    if matches!(command.as_str(), "chrome" | "flame") && output.is_none() {
        return Err(format!("{command} needs -o FILE"));
    }
    Ok(Args {
        command,
        dir,
        output,
        limit,
        folded,
    })
}

/// Why a command stopped early.
enum Failure {
    /// Whoever read stdout closed it (`fntrace graph DIR | head`): not an
    /// error, there is just no one left to write for.
    StdoutClosed,
    /// Anything else, said on stderr.
    Message(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Failure::Message(why)
    }
}

/// Classifies an error of writing to stdout.
fn stdout_failure(err: io::Error) -> Failure {
    if err.kind() == io::ErrorKind::BrokenPipe {
        Failure::StdoutClosed
    } else {
        Failure::Message(format!("writing to stdout: {err}"))
    }
}

fn run(args: Args) -> Result<(), Failure> {
    let trace = fntrace_tools::export::read_uftrace_dir(&args.dir).map_err(|e| e.to_string())?;
    // Everything for stdout goes through this lock, so that a closed pipe
    // comes back as an error to handle, not as a panic of `println!`.
    let mut stdout = io::stdout().lock();
    match args.command.as_str() {
        "report" => {
            let report = fntrace_tools::analysis::latency(&trace);
            writeln!(stdout, "{}", report.table(args.limit.unwrap_or(usize::MAX)))
                .and_then(|()| stdout.flush())
                .map_err(stdout_failure)?;
            if trace.lost() > 0 {
                eprintln!("fntrace: {} events were lost while recording", trace.lost());
            }
            Ok(())
        }
        "graph" => fntrace_tools::analysis::write_call_graph(&trace, args.limit, &mut stdout)
            .and_then(|()| stdout.flush())
            .map_err(stdout_failure),
        "chrome" | "flame" => {
            let path = args.output.expect("checked in parse_args");
            let file = File::create(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let mut out = BufWriter::new(file);
            let written = if args.command == "chrome" {
                fntrace_tools::export::write_chrome_json(&trace, &mut out)
                    .map_err(|e| e.to_string())
            } else if args.folded {
                out.write_all(fntrace_tools::export::folded_stacks(&trace).as_bytes())
                    .map_err(|e| e.to_string())
            } else {
                let title = format!("fntrace: {}", trace.exe);
                fntrace_tools::export::write_flame_svg(&trace, &mut out, &title)
                    .map_err(|e| e.to_string())
            };
            written?;
            out.flush()
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            eprintln!("fntrace: wrote {}", path.display());
            Ok(())
        }
        _ => unreachable!("checked in parse_args"),
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("fntrace: {why}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) | Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(Failure::Message(why)) => {
            eprintln!("fntrace: {why}");
            ExitCode::FAILURE
        }
    }
}
