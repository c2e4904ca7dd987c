//! `fntrace ctl TARGET profile` and `fntrace ctl TARGET metrics`: the live
//! profile a running program's `profile` tracer keeps, fetched over its
//! control socket (the `profile` request, whose reply carries the
//! snapshot's text form) and shown as `fntrace report`'s latency table, or
//! as the OpenMetrics text its `/metrics` serves; and, of a saved
//! snapshot, `fntrace report SNAPSHOT` (the same table) and `fntrace flame
//! SNAPSHOT` (the flame graph of its call tree).

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use fntrace_tools::analysis::{
    exposition, Exposition, FunctionStats, ProfileSnapshot, Rows, TextFormat,
};
use fntrace_tools::glob;

use super::hist::HistArgs;
use super::output::{Failure, Output};
use super::report::write_rows;
use super::report::{ReportArgs, SortKey};
use super::snapshot::{not_kept_lines, read_snapshot, refuse_full_names};
use super::views::FlameArgs;

/// `fntrace ctl TARGET profile`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProfileArgs {
    /// `reset`: start the profile's counts again from zero.
    #[command(subcommand)]
    pub command: Option<ProfileCommand>,
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
    /// At most N rows.
    #[arg(long, visible_alias = "limit", value_name = "N")]
    pub top: Option<usize>,
    /// One row per function address: functions of the same name (static
    /// functions of several files) apart.
    #[arg(long)]
    pub by_address: bool,
    /// Only the rows of functions matching GLOB; repeatable. (A live
    /// profile keeps no calls, only per-function rows and call paths:
    /// unlike `report -F`, the functions called inside GLOB's are not
    /// selected with it.)
    #[arg(short = 'F', long = "filter", value_name = "GLOB")]
    pub filter: Vec<String>,
    /// Leave out the rows of functions matching GLOB; repeatable.
    #[arg(short = 'N', long = "notrace", value_name = "GLOB")]
    pub notrace: Vec<String>,
    /// Write the snapshot's text form to FILE instead of printing the
    /// table (`fntrace report FILE` prints it, `fntrace flame FILE` draws
    /// it); with -F/-N, only the functions they select (the call tree
    /// seen through them).
    #[arg(long, value_name = "FILE", conflicts_with = "hist")]
    pub save: Option<PathBuf>,
    /// Write the snapshot as a gzipped pprof profile to FILE (see `fntrace
    /// pprof --help`); with -F/-N, only the functions they select.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["hist", "save"])]
    pub pprof: Option<PathBuf>,
    /// The latency distribution of functions instead of the table.
    #[command(flatten)]
    pub hist: HistArgs,
}

/// `fntrace ctl TARGET profile reset`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Start the counts again from zero (calls running now are not
    /// counted when they return).
    Reset,
}

/// The snapshot in the reply to a `profile` request: its text form, from
/// the line `fntrace-profile …` on (a summary line may come first).
pub fn snapshot_of_reply(reply: &str) -> Result<ProfileSnapshot, String> {
    let start = reply
        .match_indices("fntrace-profile ")
        .map(|(at, _)| at)
        .find(|&at| at == 0 || reply.as_bytes()[at - 1] == b'\n')
        .ok_or("the reply holds no profile (no `fntrace-profile` line)")?;
    ProfileSnapshot::from_text(&reply[start..]).map_err(|e| e.to_string())
}

/// Whether the reply's summary line says the profile tracer is off.
pub fn tracer_off(reply: &str) -> bool {
    reply
        .lines()
        .next()
        .is_some_and(|summary| summary.contains("profile tracer is off"))
}

/// The reply's snapshot text alone (what `--save` writes).
fn snapshot_text(reply: &str) -> &str {
    match reply.find("fntrace-profile ") {
        Some(at) => &reply[at..],
        None => reply,
    }
}

/// Does what `ctl TARGET profile` asked with the reply to `profile`:
/// prints the table or saves the text. Errors are the arguments' (a glob
/// that matches no function) or the reply's.
/// `pid`: the target's process, when known (a pprof's file:line).
pub fn show(
    reply: &str,
    args: &ProfileArgs,
    target: &str,
    pid: Option<u32>,
    no_pager: bool,
) -> Result<(), String> {
    let snapshot = snapshot_of_reply(reply)?;
    if let Some(path) = &args.pprof {
        let selection = (&args.filter[..], &args.notrace[..]);
        return super::pprof::save_live(snapshot, selection, target, pid, path);
    }
    if let Some(path) = &args.save {
        // `-F`/`-N` select what is saved, as what is shown: checked first
        // (a glob matching nothing is refused, as for the table).
        selected_rows(&snapshot, Rows::ByName, &args.filter, &args.notrace)?;
        let selecting = !args.filter.is_empty() || !args.notrace.is_empty();
        let text = match selecting {
            true => snapshot
                .selected(|name| {
                    (args.filter.is_empty() || glob::matches_any(&args.filter, name))
                        && !glob::matches_any(&args.notrace, name)
                })
                .to_text(),
            false => snapshot_text(reply).to_string(),
        };
        super::output::save(path, |out| {
            out.write_all(text.as_bytes())
                .map_err(|e| format!("writing {}: {e}", path.display()))
        })?;
        eprintln!("fntrace: wrote {}", path.display());
        return Ok(());
    }
    let mut out = Output::new(no_pager);
    if tracer_off(reply) {
        let line = format!(
            "# the profile tracer is off: its counts stay as they were (fntrace ctl {target} enable profile)"
        );
        writeln!(out, "{}", out.warn(&line)).map_err(|e| format!("writing to stdout: {e}"))?;
    }
    let what = format!("live profile of {target}");
    write_profile(&snapshot, &args.table(), &what, &mut out)?;
    let keep = |name: &str| {
        (args.filter.is_empty() || glob::matches_any(&args.filter, name))
            && !glob::matches_any(&args.notrace, name)
    };
    let futures = super::futures::live_rows(reply, keep);
    super::futures::write_live(&futures, &mut out)
        .map_err(|e| format!("writing to stdout: {e}"))?;
    out.finish().or_else(|failure| match failure {
        Failure::StdoutClosed => Ok(()),
        Failure::Message(why) => Err(why),
    })
}

/// Prints the metrics text of the reply's snapshot: every function, with
/// its histogram and full name, in the Prometheus text format 0.0.4 (what
/// promtool reads) or OpenMetrics.
pub fn metrics(reply: &str, openmetrics: bool) -> Result<(), String> {
    let snapshot = snapshot_of_reply(reply)?;
    let format = match openmetrics {
        true => TextFormat::OpenMetrics,
        false => TextFormat::Prometheus,
    };
    let text = exposition(&snapshot, &Exposition::everything(format));
    // A closed stdout loses nothing the caller still wants.
    let _ = io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

/// The rows of `snapshot` that `-F` and `-N` keep, or why a glob is wrong
/// (it matches no function of the profile: a typo must not pass for an
/// empty table).
pub fn selected_rows(
    snapshot: &ProfileSnapshot,
    rows: Rows,
    filter: &[String],
    notrace: &[String],
) -> Result<Vec<FunctionStats>, String> {
    let report = snapshot.latency_report(rows);
    let names = || report.functions.iter().map(|f| f.name.as_str());
    for (option, globs) in [("-F", filter), ("-N", notrace)] {
        for pattern in globs {
            if !names().any(|name| glob::matches(pattern, name)) {
                let message = glob::no_match(pattern, "of the profile", names());
                return Err(format!("{option} {message}"));
            }
        }
    }
    Ok(report
        .functions
        .into_iter()
        .filter(|f| filter.is_empty() || glob::matches_any(filter, &f.name))
        .filter(|f| !glob::matches_any(notrace, &f.name))
        .collect())
}

/// How a profile's table is cut: `report`'s options.
pub struct TableOptions<'a> {
    /// Sort keys.
    pub sort: &'a [SortKey],
    /// At most this many rows.
    pub top: Option<usize>,
    /// One row per address.
    pub by_address: bool,
    /// `-F` globs (rows).
    pub filter: &'a [String],
    /// `-N` globs (rows).
    pub notrace: &'a [String],
    /// `--hist`: distributions instead of the table.
    pub hist: &'a HistArgs,
}

impl ProfileArgs {
    fn table(&self) -> TableOptions<'_> {
        TableOptions {
            sort: &self.sort,
            top: self.top,
            by_address: self.by_address,
            filter: &self.filter,
            notrace: &self.notrace,
            hist: &self.hist,
        }
    }
}

/// `fntrace report SNAPSHOT`: the table of a saved snapshot.
pub fn report(args: &ReportArgs, no_pager: bool) -> Result<(), Failure> {
    let shown = args.dir.display();
    refuse_full_names(&args.select, &shown.to_string())?;
    let by_time = !args.select.tid.is_empty() || args.select.time_range.is_some();
    if args.threads || by_time || args.by_arg.is_some() {
        return Err(format!(
            "{shown} is a live profile's snapshot: it keeps no threads apart, no times and no \
             values (--threads, --tid, --time-range, --by-arg apply to trace directories)"
        )
        .into());
    }
    let snapshot = read_snapshot(&args.dir)?;
    let options = TableOptions {
        sort: &args.sort,
        top: args.top,
        by_address: args.by_address,
        filter: &args.select.filter,
        notrace: &args.select.notrace,
        hist: &args.hist,
    };
    let mut out = Output::new(no_pager);
    write_profile(&snapshot, &options, &format!("profile {shown}"), &mut out)?;
    out.finish()
}

/// The profile's header lines (`what` names it) and latency table.
pub fn write_profile(
    snapshot: &ProfileSnapshot,
    args: &TableOptions,
    what: &str,
    out: &mut Output,
) -> Result<(), String> {
    let rows = if args.by_address {
        Rows::ByAddress
    } else {
        Rows::ByName
    };
    let functions = selected_rows(snapshot, rows, args.filter, args.notrace)?;
    // --hist picks among the rows -F and -N kept.
    let hist = match &args.hist.hist {
        Some(pattern) => {
            let mut report = snapshot.latency_report(rows);
            report.functions.clone_from(&functions);
            super::hist::check(&report, pattern, what)?;
            Some((report, pattern))
        }
        None => None,
    };
    let io = |e: io::Error| format!("writing to stdout: {e}");
    let calls: u64 = snapshot.functions.iter().map(|f| f.durations.count()).sum();
    let running: u64 = snapshot.functions.iter().map(|f| f.running).sum();
    let mut selected = Vec::new();
    selected.extend(args.filter.iter().map(|glob| format!("-F {glob}")));
    selected.extend(args.notrace.iter().map(|glob| format!("-N {glob}")));
    let of_selection = if selected.is_empty() {
        String::new()
    } else {
        format!("; rows selected by {}", selected.join(" "))
    };
    writeln!(
        out,
        "# {what}: {} threads, {calls} calls returned, {running} running{of_selection}; \
         durations: {}",
        snapshot.threads,
        fntrace_tools::analysis::WALL_TIME
    )
    .map_err(io)?;
    for line in not_kept_lines(snapshot) {
        writeln!(out, "{}", out.warn(&line)).map_err(io)?;
    }
    writeln!(out).map_err(io)?;
    if let Some((report, pattern)) = hist {
        let buckets = args.hist.hist_buckets;
        return super::hist::write(&report, pattern, buckets, "running", out).map_err(io);
    }
    let top = args.top.unwrap_or(usize::MAX);
    write_rows(functions, args.sort, top, "running", out).map_err(io)
}

/// `fntrace flame SNAPSHOT`: the flame graph of the snapshot's call tree,
/// widths self time. `-F`: each path from its first function matching a
/// glob down (paths through none are left out); `-N`: paths through a
/// matching function left out.
pub fn flame(args: &FlameArgs) -> Result<(), Failure> {
    let destination = super::flame_destination(args)?;
    let shown = args.dir.display();
    refuse_full_names(&args.select, &shown.to_string())?;
    if !args.select.tid.is_empty() || args.select.time_range.is_some() {
        return Err(format!(
            "{shown} is a live profile: it keeps no threads apart and no times (--tid, \
             --time-range apply to trace directories)"
        )
        .into());
    }
    let snapshot = read_snapshot(&args.dir)?;
    let (filter, notrace) = (&args.select.filter, &args.select.notrace);
    let names = || snapshot.functions.iter().map(|f| f.name.as_str());
    for (option, globs) in [("-F", filter), ("-N", notrace)] {
        for pattern in globs {
            if !names().any(|name| glob::matches(pattern, name)) {
                let message = glob::no_match(pattern, &format!("of {shown}"), names());
                return Err(format!("{option} {message}").into());
            }
        }
    }
    let folded = fntrace_tools::export::folded_stacks_of_profile(&snapshot, |chain| {
        if chain.iter().any(|name| glob::matches_any(notrace, name)) {
            return None;
        }
        if filter.is_empty() {
            return Some(0);
        }
        chain
            .iter()
            .position(|name| glob::matches_any(filter, name))
    });
    for line in not_kept_lines(&snapshot) {
        eprintln!("fntrace: warning: {}", line.trim_start_matches("# "));
    }
    destination.write(|out| {
        if args.folded {
            out.write_all(folded.as_bytes()).map_err(|e| e.to_string())
        } else {
            let title = format!("fntrace: live profile {shown} (self time)");
            fntrace_tools::export::write_folded_svg(&folded, out, &title).map_err(|e| e.to_string())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_tools::analysis::{FunctionProfile, Histogram, NotKept};

    fn function(address: usize, name: &str, values: &[u64], running: u64) -> FunctionProfile {
        let mut durations = Histogram::new();
        for &value in values {
            durations.record(value);
        }
        FunctionProfile {
            function: address,
            name: name.into(),
            total_ns: durations.sum(),
            self_ns: durations.sum(),
            durations,
            running,
        }
    }

    fn snapshot() -> ProfileSnapshot {
        ProfileSnapshot {
            taken_ns: 5,
            threads: 2,
            functions: vec![
                function(0x10, "main", &[9_000], 1),
                function(0x20, "leaf", &[100, 200, 300], 0),
                function(0x30, "log_line", &[50], 0),
            ],
            paths: Vec::new(),
            not_kept: NotKept {
                paths: 0,
                functions: 3,
            },
        }
    }

    #[test]
    fn the_reply_may_carry_a_summary_line_first() {
        let text = snapshot().to_text();
        assert_eq!(snapshot_of_reply(&text), Ok(snapshot()));
        let reply = format!("profile of 3 functions\n{text}");
        assert_eq!(snapshot_of_reply(&reply), Ok(snapshot()));
        assert_eq!(snapshot_text(&reply), text);
        assert!(!tracer_off(&reply));
        let off =
            format!("profile: 3 functions, 0 paths, 2 threads (the profile tracer is off)\n{text}");
        assert!(tracer_off(&off));
        assert_eq!(snapshot_of_reply(&off), Ok(snapshot()));
        assert!(snapshot_of_reply("enabled graph\n").is_err());
        let cut = &text[..text.len() - 4];
        assert!(snapshot_of_reply(cut).unwrap_err().contains("cut short"));
    }

    #[test]
    fn globs_select_rows_and_a_glob_matching_nothing_is_an_error() {
        let snapshot = snapshot();
        let names = |rows: Vec<FunctionStats>| -> Vec<String> {
            let mut names: Vec<String> = rows.into_iter().map(|f| f.name).collect();
            names.sort();
            names
        };
        let all = selected_rows(&snapshot, Rows::ByName, &[], &[]).unwrap();
        assert_eq!(names(all), ["leaf", "log_line", "main"]);
        let no_log = selected_rows(&snapshot, Rows::ByName, &[], &["log_*".into()]).unwrap();
        assert_eq!(names(no_log), ["leaf", "main"]);
        let only = selected_rows(&snapshot, Rows::ByName, &["l*".into()], &["log_*".into()]);
        assert_eq!(names(only.unwrap()), ["leaf"]);
        let typo = selected_rows(&snapshot, Rows::ByName, &["lef".into()], &[]).unwrap_err();
        assert!(
            typo.starts_with("-F lef: no function of the profile matches it (closest: leaf"),
            "{typo}"
        );
    }
}
