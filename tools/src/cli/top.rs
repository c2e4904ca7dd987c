//! `fntrace top SOCK|PID`: a live view of a running program's profile, in
//! the spirit of `top` and `perf top`. Every interval it fetches the
//! `profile` tracer's snapshot over the control socket and shows, per
//! function, what happened between the last two snapshots: calls per
//! second, the share of the interval's wall time spent in it (callees
//! included, or not: self), the mean, median, 90th and 99th percentiles
//! of those calls, and the calls running now.
//!
//! The interval's figures are differences of two cumulative snapshots
//! ([`interval`]): counts and sums subtract exactly, and the percentile
//! comes from the difference of the two duration histograms, bucket by
//! bucket (within the histogram's 0.4 %). A profile reset between the two
//! (a count went down) makes the later snapshot the interval's.
//!
//! Time is counted where it was spent: with each snapshot the program
//! lists the calls open on each thread (entry time, completed children),
//! and a function's time at a snapshot is its completed calls' plus the
//! part its open calls have run so far ([`Sample`]). The difference of two
//! is the part of every call inside the interval: a call of ten seconds
//! counts a second in each of ten one-second intervals, not ten seconds in
//! the one it returns in, and one thread never makes more than 100 %.
//! These are wall times, blocked time included (a call waiting in `send`
//! counts as much as one computing); CPU time is not measured per
//! function. With a pid as the target, the header gives the process's CPU
//! time over the interval (`/proc/PID/stat`) beside them.
//!
//! The screen is drawn with `ratatui` (alternate screen, restored on exit
//! and on panic); `--once` prints one frame as plain text instead, for
//! scripts and tests.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use fntrace_tools::analysis::{human_duration, Histogram, ProfileSnapshot};
use fntrace_tools::glob;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Row, Table};

use super::report::aligned_lines;

/// `fntrace top --help` after the arguments.
pub const TOP_HELP: &str = "\
The program must serve its control socket (FNTRACE_CONTROL=1) and run the
profile tracer: `fntrace ctl PID enable profile` (or FNTRACE=profile).

Columns, over the last interval: calls/s (calls returned per second), wall%
and self-wall% (wall time in the function, blocked time included, callees
included or not, per second of the interval: 100% is one thread's whole
interval, so several threads can make more; each call counts for the part of
it inside the interval, a call still running for the time it has run so
far), avg, p50, p90 and p99 of the calls returned, running (calls entered,
not returned, now). CPU time is not measured per function; with a PID as
the target, the header shows the process's CPU time over the interval
(/proc/PID/stat, 100% is one CPU, 10 ms resolution) beside them.

A glob of -F or -N that matches no function with a call site is refused,
naming the closest functions; so is a program with no call site at all.

Keys: t, s, p, c sort by total, self, p99, calls; / filters by a function
glob (Enter applies it, or says on the status line why not: it matches no
function; Esc clears); q quits.

Examples:
  fntrace top $(pidof kv-service)
  fntrace top /run/my.sock -s self --interval 2s
  fntrace top $PID --once --top 10        one frame as text, after one interval
  fntrace top $PID --frames 60 > log      a frame a second for a minute, as text";

/// `fntrace top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The control socket: its path, or the pid of a program serving the
    /// default path (FNTRACE_CONTROL=1).
    #[arg(value_name = "SOCK|PID")]
    pub target: String,
    /// Time between two snapshots (`1s`, `500ms`).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print one frame (the first interval) as plain text and exit.
    #[arg(long)]
    pub once: bool,
    /// Print N frames as plain text, one per interval, each interval
    /// starting where the last ended, and exit (`--once` is `--frames 1`).
    #[arg(long, value_name = "N", conflicts_with = "once", value_parser = clap::value_parser!(u64).range(1..))]
    pub frames: Option<u64>,
    /// Sort by (keys t, s, p, c on the screen).
    #[arg(short, long, value_enum, default_value = "total")]
    pub sort: TopSort,
    /// Only functions matching GLOB (`/` on the screen). A GLOB that
    /// matches no function with a call site is refused, naming the
    /// closest.
    #[arg(short = 'F', long = "filter", value_name = "GLOB")]
    pub filter: Option<String>,
    /// Leave out functions matching GLOB; repeatable. Checked as -F.
    #[arg(short = 'N', long = "notrace", value_name = "GLOB")]
    pub notrace: Vec<String>,
    /// At most N rows (the screen shows what fits).
    #[arg(long, visible_alias = "limit", value_name = "N")]
    pub top: Option<usize>,
}

/// What `fntrace top` sorts by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TopSort {
    /// Time in the function, callees included.
    Total,
    /// Self time.
    #[value(name = "self")]
    SelfTime,
    /// 99th percentile duration.
    P99,
    /// Calls.
    Calls,
}

impl TopSort {
    fn label(self) -> &'static str {
        match self {
            TopSort::Total => "total",
            TopSort::SelfTime => "self",
            TopSort::P99 => "p99",
            TopSort::Calls => "calls",
        }
    }
}

/// `--interval`: a duration with a unit, at least 10 ms.
pub(super) fn parse_interval(text: &str) -> Result<Duration, String> {
    let ns = fntrace_tools::units::parse_duration_ns(text)?;
    if ns < 10_000_000 {
        return Err(format!("{text}: the interval is at least 10ms"));
    }
    Ok(Duration::from_nanos(ns))
}

/// One function over an interval.
#[derive(Clone, Debug, PartialEq)]
pub struct IntervalRow {
    /// The function's name (functions of one name merged).
    pub name: String,
    /// Calls returned in the interval.
    pub calls: u64,
    /// Wall time in the function within the interval, callees included
    /// (recursion counted once per thread): the calls' parts inside it.
    pub total_ns: u64,
    /// The same without the direct callees' time.
    pub self_ns: u64,
    /// Their mean duration.
    pub avg_ns: u64,
    /// Their median duration.
    pub p50_ns: u64,
    /// Their 90th percentile duration.
    pub p90_ns: u64,
    /// Their 99th percentile duration.
    pub p99_ns: u64,
    /// Calls running at the end of the interval.
    pub running: u64,
}

/// What happened between two snapshots.
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    /// Its length in nanoseconds (of the trace's clock).
    pub ns: u64,
    /// Whether the profile was reset within it (the rows are then the
    /// later snapshot's, since the reset).
    pub reset: bool,
    /// Functions with calls returned in it or running at its end.
    pub rows: Vec<IntervalRow>,
    /// Threads profiled at its end.
    pub threads: u64,
    /// Calls the profile could not count, in the interval.
    pub lost: u64,
    /// Whether the profile tracer was off at its end (set by the caller,
    /// which knows from the reply).
    pub tracer_off: bool,
    /// The process's CPU time over the interval, in % of one CPU, when
    /// known (set by the caller: a pid target on this host): beside the
    /// wall times, how much of them was spent running.
    pub cpu_percent: Option<f64>,
}

/// Per name: durations, total, self, running.
type Merged = BTreeMap<String, (Histogram, u64, u64, u64)>;

/// A call open in the program when a snapshot was taken: an `open` line
/// of the reply to `profile` (`open TID DEPTH FUNCTION ENTRY_NS
/// CHILDREN_NS`, the function's address in hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenCall {
    /// The thread.
    pub tid: u32,
    /// The call's depth among the thread's traced calls.
    pub depth: u32,
    /// The function's address (a [`ProfileSnapshot`] row's).
    pub function: usize,
    /// When it was entered, on the snapshot's clock (ns).
    pub entry_ns: u64,
    /// The summed durations of its completed direct callees (ns).
    pub children_ns: u64,
}

/// A snapshot and the calls open when it was taken.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// The profile.
    pub snapshot: ProfileSnapshot,
    /// The calls open on each thread, each thread's outermost first.
    pub open: Vec<OpenCall>,
}

impl Sample {
    /// The sample in the reply to a `profile` request (a runtime that
    /// lists no open calls gives none: its calls then count whole in the
    /// interval they return in).
    pub fn of_reply(reply: &str) -> Result<Sample, String> {
        let snapshot = super::profile::snapshot_of_reply(reply)?;
        let mut open = Vec::new();
        for line in reply
            .lines()
            .take_while(|l| !l.starts_with("fntrace-profile "))
        {
            let Some(fields) = line.strip_prefix("open ") else {
                continue;
            };
            let bad = || format!("a bad open call: {line:?}");
            let fields: Vec<&str> = fields.split(' ').collect();
            let [tid, depth, function, entry_ns, children_ns] = fields[..] else {
                return Err(bad());
            };
            open.push(OpenCall {
                tid: tid.parse().map_err(|_| bad())?,
                depth: depth.parse().map_err(|_| bad())?,
                function: usize::from_str_radix(function, 16).map_err(|_| bad())?,
                entry_ns: entry_ns.parse().map_err(|_| bad())?,
                children_ns: children_ns.parse().map_err(|_| bad())?,
            });
        }
        Ok(Sample { snapshot, open })
    }

    /// Per name, the time the open calls have run so far when the
    /// snapshot was taken: callees included (a call nested in an open
    /// call of the same function on its thread not counted again, as the
    /// profile's total does), and self (less its completed direct callees
    /// and its open one).
    fn open_time(&self) -> BTreeMap<String, (u64, u64)> {
        let names: std::collections::HashMap<usize, &str> = self
            .snapshot
            .functions
            .iter()
            .map(|f| (f.function, f.name.as_str()))
            .collect();
        let mut calls = self.open.clone();
        calls.sort_by_key(|c| (c.tid, c.depth));
        let taken = self.snapshot.taken_ns;
        let mut time: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (i, call) in calls.iter().enumerate() {
            let Some(name) = names.get(&call.function) else {
                continue; // its row came after the snapshot: just entered
            };
            let elapsed = taken.saturating_sub(call.entry_ns);
            let same_thread = |c: &&OpenCall| c.tid == call.tid;
            let callee = calls[i + 1..].iter().find(same_thread);
            let in_callee = callee.map_or(0, |c| taken.saturating_sub(c.entry_ns));
            let self_ns = elapsed
                .saturating_sub(call.children_ns)
                .saturating_sub(in_callee);
            let nested = calls[..i]
                .iter()
                .any(|c| c.tid == call.tid && c.function == call.function);
            let entry = time.entry(name.to_string()).or_default();
            if !nested {
                entry.0 += elapsed;
            }
            entry.1 += self_ns;
        }
        time
    }
}

fn by_name(snapshot: &ProfileSnapshot) -> Merged {
    let mut merged = Merged::new();
    for f in &snapshot.functions {
        let row = merged.entry(f.name.clone()).or_default();
        row.0.merge(&f.durations);
        row.1 = row.1.saturating_add(f.total_ns);
        row.2 = row.2.saturating_add(f.self_ns);
        row.3 += f.running;
    }
    merged
}

/// The calls of `after` that are not in `before`, of one function:
/// counts subtracted bucket by bucket.
fn difference(after: &Histogram, before: &Histogram) -> Histogram {
    let mut counts: BTreeMap<usize, u64> = after.buckets().collect();
    for (bucket, count) in before.buckets() {
        if let Some(c) = counts.get_mut(&bucket) {
            *c = c.saturating_sub(count);
        }
    }
    counts.retain(|_, count| *count != 0);
    // The interval's extremes are not kept: its outermost buckets' ends,
    // within the whole run's.
    let low = counts
        .keys()
        .next()
        .map_or(0, |&b| Histogram::bucket_range(b).0);
    let high = counts.keys().next_back().map_or(0, |&b| {
        let (lowest, width) = Histogram::bucket_range(b);
        lowest + (width - 1)
    });
    Histogram::from_buckets(
        counts,
        after.sum().saturating_sub(before.sum()),
        low.max(after.min()),
        high.min(after.max()),
    )
}

/// The interval from `before` to `after`, two samples of one profile.
pub fn interval(before: &Sample, after: &Sample) -> Interval {
    let (open_before, open_after) = (before.open_time(), after.open_time());
    let (before, after) = (&before.snapshot, &after.snapshot);
    let (old, new) = (by_name(before), by_name(after));
    let empty = Default::default();
    // A reset zeroes every count: one that went down betrays it.
    let reset = new.iter().any(|(name, row)| {
        let prior: &(Histogram, u64, u64, u64) = old.get(name).unwrap_or(&empty);
        row.0.count() < prior.0.count() || row.1 < prior.1 || row.2 < prior.2
    }) || old.keys().any(|name| !new.contains_key(name))
        || after.not_kept.functions < before.not_kept.functions;
    let mut rows = Vec::new();
    for (name, (durations, total_ns, self_ns, running)) in &new {
        let prior = if reset {
            &empty
        } else {
            old.get(name).unwrap_or(&empty)
        };
        let calls = durations.count().saturating_sub(prior.0.count());
        if calls == 0 && *running == 0 {
            continue;
        }
        let delta = difference(durations, &prior.0);
        // Completed calls' time, plus what the open ones ran since the
        // last snapshot: what every call ran inside the interval.
        let none = (0, 0);
        let open_now = open_after.get(name).unwrap_or(&none);
        let open_then = match reset {
            true => &none,
            false => open_before.get(name).unwrap_or(&none),
        };
        let within = |now: u64, then: u64, open_now: u64, open_then: u64| {
            let ns =
                i128::from(now) - i128::from(then) + i128::from(open_now) - i128::from(open_then);
            u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
        };
        rows.push(IntervalRow {
            name: name.clone(),
            calls,
            total_ns: within(*total_ns, prior.1, open_now.0, open_then.0),
            self_ns: within(*self_ns, prior.2, open_now.1, open_then.1),
            avg_ns: delta.mean(),
            p50_ns: delta.quantile(0.50),
            p90_ns: delta.quantile(0.90),
            p99_ns: delta.quantile(0.99),
            running: *running,
        });
    }
    let lost = if reset {
        after.not_kept.functions
    } else {
        after
            .not_kept
            .functions
            .saturating_sub(before.not_kept.functions)
    };
    Interval {
        ns: after.taken_ns.saturating_sub(before.taken_ns),
        reset,
        rows,
        threads: after.threads,
        lost,
        tracer_off: false,
        cpu_percent: None,
    }
}

/// What the frame shows: sorted, filtered, cut.
pub struct View<'a> {
    /// Sort key.
    pub sort: TopSort,
    /// Function glob.
    pub filter: Option<&'a str>,
    /// Globs of functions left out.
    pub notrace: &'a [String],
    /// At most this many rows.
    pub limit: usize,
}

/// The header line of a frame.
pub fn header(target: &str, interval: &Interval, view: &View) -> String {
    let seconds = interval.ns as f64 / 1e9;
    let calls: u64 = interval.rows.iter().map(|r| r.calls).sum();
    let rate = if interval.ns == 0 {
        0.0
    } else {
        calls as f64 / seconds
    };
    let cpu = match interval.cpu_percent {
        Some(percent) => format!(", process CPU {percent:.0}%"),
        None => String::new(),
    };
    let mut line = format!(
        "fntrace top {target}: {seconds:.3} s, {} threads{cpu}, {rate:.0} calls/s, sorted by {}",
        interval.threads,
        view.sort.label()
    );
    if let Some(filter) = view.filter {
        line += &format!(", functions {filter}");
    }
    if !view.notrace.is_empty() {
        line += &format!(", not {}", view.notrace.join(","));
    }
    if interval.reset {
        line += " (profile reset in this interval)";
    }
    if interval.tracer_off {
        line += &format!("; the profile tracer is off: fntrace ctl {target} enable profile");
    }
    if interval.lost > 0 {
        line += &format!(
            "; {} calls not counted (no row left in the profile's budget)",
            interval.lost
        );
    }
    line
}

/// Column headers of a frame: `wall%` and `self-wall%` are shares of
/// the interval's wall time (blocked time included), not CPU time.
pub const COLUMNS: [&str; 9] = [
    "calls/s",
    "wall%",
    "self-wall%",
    "avg",
    "p50",
    "p90",
    "p99",
    "running",
    "function",
];

/// The frame's rows as cells, sorted by `view.sort` (largest first, then
/// by name), filtered and cut to `view.limit`.
pub fn cells(interval: &Interval, view: &View) -> Vec<Vec<String>> {
    let mut rows: Vec<&IntervalRow> = interval
        .rows
        .iter()
        .filter(|row| {
            view.filter
                .is_none_or(|glob| glob::matches(glob, &row.name))
                && !glob::matches_any(view.notrace, &row.name)
        })
        .collect();
    let key = |row: &IntervalRow| match view.sort {
        TopSort::Total => row.total_ns,
        TopSort::SelfTime => row.self_ns,
        TopSort::P99 => row.p99_ns,
        TopSort::Calls => row.calls,
    };
    rows.sort_by(|a, b| key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    let per_second = |n: u64| {
        if interval.ns == 0 {
            0.0
        } else {
            n as f64 * 1e9 / interval.ns as f64
        }
    };
    rows.iter()
        .take(view.limit)
        .map(|row| {
            let time = |ns| {
                if row.calls == 0 {
                    "-".to_string()
                } else {
                    human_duration(ns)
                }
            };
            vec![
                format!("{:.0}", per_second(row.calls)),
                format!("{:.1}%", per_second(row.total_ns) / 1e9 * 100.0),
                format!("{:.1}%", per_second(row.self_ns) / 1e9 * 100.0),
                time(row.avg_ns),
                time(row.p50_ns),
                time(row.p90_ns),
                time(row.p99_ns),
                row.running.to_string(),
                row.name.clone(),
            ]
        })
        .collect()
}

/// A frame as plain text (`--once`).
pub fn frame_text(target: &str, interval: &Interval, view: &View) -> String {
    let headers: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    let mut text = header(target, interval, view);
    text.push('\n');
    for line in aligned_lines(&headers, &cells(interval, view)) {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Runs `fntrace top`; its exit status (2 when the program cannot be
/// asked, as `fntrace ctl`).
pub fn main(args: &TopArgs) -> ExitCode {
    // A pid that serves no control socket: attached first (and its
    // profile tracer enabled), detached at the end.
    let attached = match args.target.parse::<u32>() {
        Ok(pid) => match super::attach::attach_for(pid, "top", None) {
            Ok(true) => Some(pid),
            Ok(false) => None,
            Err(why) => {
                eprintln!("fntrace: top: {why}");
                return ExitCode::from(2);
            }
        },
        Err(_) => None,
    };
    let result = check_selection(args).and_then(|()| {
        if attached.is_some() {
            let enabled =
                super::ctl::exchange_line(&args.target, timeout(args), "enable profile\n");
            if let Err(why) | Ok((false, why)) = enabled {
                eprintln!("fntrace: top: enable profile: {why}");
            }
        }
        if args.once || args.frames.is_some() {
            once(args)
        } else {
            live(args)
        }
    });
    if let Some(pid) = attached {
        if let Err(why) = super::attach::detach_quietly(pid) {
            eprintln!("fntrace: top: detaching from process {pid}: {why}");
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("fntrace: top: {why}");
            ExitCode::from(2)
        }
    }
}

/// Before the first snapshot: the program has call sites, and each glob
/// of -F and -N selects some of their functions (a typo would show an
/// empty screen). A runtime older than the `functions` request is not
/// asked.
fn check_selection(args: &TopArgs) -> Result<(), String> {
    let ask = |line: String| super::ctl::exchange_line(&args.target, timeout(args), &line);
    match ask("functions\n".to_string())? {
        (true, _) => {}
        (false, why) if why.starts_with("unknown command \"functions\"") => return Ok(()),
        (false, why) => return Err(why),
    }
    let globs = (args.filter.iter().map(|glob| ("-F", glob)))
        .chain(args.notrace.iter().map(|glob| ("-N", glob)));
    for (option, glob) in globs {
        check_glob(args, glob).map_err(|why| format!("{option} {why}"))?;
    }
    Ok(())
}

/// Whether `glob` selects a function with a call site of the program
/// (the `functions GLOB` request); why not, naming the closest. A runtime
/// older than that request lets every glob through.
fn check_glob(args: &TopArgs, glob: &str) -> Result<(), String> {
    let line = format!("functions {glob}\n");
    match super::ctl::exchange_line(&args.target, timeout(args), &line)? {
        (false, why) if !why.starts_with("unknown command \"functions\"") => Err(why),
        _ => Ok(()),
    }
}

/// How long to wait for a reply: long enough for a busy program, short
/// enough for the screen to say it is not answering.
fn timeout(args: &TopArgs) -> Duration {
    args.interval.max(Duration::from_secs(5))
}

/// What one fetch brought.
struct Fetched {
    sample: Sample,
    /// Whether the profile tracer is off.
    off: bool,
    /// The process's CPU time (ns) when the sample came, and when that was:
    /// when the target is a pid (of this host's pid namespace) whose
    /// `/proc/PID/stat` is readable.
    cpu: Option<(u64, Instant)>,
}

/// A sample, whether the tracer is off, and the process's CPU time.
fn fetch(args: &TopArgs) -> Result<Fetched, String> {
    match super::ctl::exchange_line(&args.target, timeout(args), "profile\n")? {
        (true, reply) => Ok(Fetched {
            sample: Sample::of_reply(&reply)?,
            off: super::profile::tracer_off(&reply),
            cpu: args
                .target
                .parse::<u32>()
                .ok()
                .and_then(process_cpu_ns)
                .map(|ns| (ns, Instant::now())),
        }),
        (false, why) => Err(why),
    }
}

/// The CPU time (user and system, all threads) of process `pid` so far,
/// from `/proc/PID/stat` (in the kernel's USER_HZ ticks, 100 a second on
/// x86-64: 10 ms resolution). Only for a pid given as the target: a socket
/// path's program may be in another pid namespace, where its pid names
/// another process here.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    const USER_HZ: u64 = 100;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces and parentheses: the
    // state (field 3), ..., utime (14), stime (15).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |at: usize| fields.get(at)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) * (1_000_000_000 / USER_HZ))
}

/// The interval between two fetched samples.
fn between(before: &Fetched, after: &Fetched) -> Interval {
    let cpu_percent = match (before.cpu, after.cpu) {
        (Some((cpu0, t0)), Some((cpu1, t1))) if t1 > t0 => {
            Some(cpu1.saturating_sub(cpu0) as f64 / (t1 - t0).as_nanos() as f64 * 100.0)
        }
        _ => None,
    };
    Interval {
        tracer_off: after.off,
        cpu_percent,
        ..interval(&before.sample, &after.sample)
    }
}

/// `--once` and `--frames N`: N + 1 samples an interval apart, a frame
/// for each interval between two, printed as it ends.
fn once(args: &TopArgs) -> Result<(), String> {
    let mut before = fetch(args)?;
    let view = View {
        sort: args.sort,
        filter: args.filter.as_deref(),
        notrace: &args.notrace,
        limit: args.top.unwrap_or(usize::MAX),
    };
    let mut next = Instant::now();
    for _ in 0..args.frames.unwrap_or(1) {
        // From the last deadline, not the last fetch: frames do not drift.
        next += args.interval;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let after = fetch(args)?;
        let text = frame_text(&args.target, &between(&before, &after), &view);
        let mut out = std::io::stdout().lock();
        // A closed stdout loses nothing the caller still wants.
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(());
        }
        before = after;
    }
    Ok(())
}

/// The screen: redrawn every interval and on every key.
fn live(args: &TopArgs) -> Result<(), String> {
    let mut before = fetch(args)?;
    let mut terminal = ratatui::try_init().map_err(|e| format!("terminal: {e}"))?;
    let drawn = screen(args, &mut terminal, &mut before);
    ratatui::restore();
    drawn
}

fn screen(
    args: &TopArgs,
    terminal: &mut ratatui::DefaultTerminal,
    before: &mut Fetched,
) -> Result<(), String> {
    let mut sort = args.sort;
    let mut filter = args.filter.clone();
    // The glob being typed after `/`.
    let mut typing: Option<String> = None;
    let mut shown: Option<Interval> = None;
    let mut problem: Option<String> = None;
    // Why the glob typed last was not applied (it matched nothing).
    let mut refused: Option<String> = None;
    let mut next = Instant::now() + args.interval;
    loop {
        if Instant::now() >= next {
            next = Instant::now() + args.interval;
            match fetch(args) {
                Ok(after) => {
                    shown = Some(between(before, &after));
                    *before = after;
                    problem = None;
                }
                Err(why) => problem = Some(why),
            }
        }
        let view = View {
            sort,
            filter: filter.as_deref(),
            notrace: &args.notrace,
            limit: args.top.unwrap_or(usize::MAX),
        };
        terminal
            .draw(|frame| {
                let [top, status, table] = Layout::vertical([
                    Constraint::Length(1),
                    Constraint::Length(1),
                    Constraint::Min(0),
                ])
                .areas(frame.area());
                let title = match &shown {
                    Some(interval) => header(&args.target, interval, &view),
                    None => format!("fntrace top {}: first interval…", args.target),
                };
                frame.render_widget(Paragraph::new(title), top);
                let status_line = match (&typing, &problem, &refused) {
                    (Some(glob), _, _) => format!("filter: {glob}▏ (Enter applies, Esc clears)"),
                    (None, Some(why), _) => format!("no snapshot: {why}"),
                    (None, None, Some(why)) => format!("/ not applied: {why}"),
                    (None, None, None) => {
                        "keys: t total  s self  p p99  c calls  / filter  q quit".to_string()
                    }
                };
                frame.render_widget(
                    Paragraph::new(Line::from(status_line))
                        .style(Style::default().add_modifier(Modifier::DIM)),
                    status,
                );
                let rows = shown
                    .as_ref()
                    .map(|interval| cells(interval, &view))
                    .unwrap_or_default();
                let widths = [
                    Constraint::Length(9),
                    Constraint::Length(7),
                    Constraint::Length(10),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(7),
                    Constraint::Min(10),
                ];
                let table_widget = Table::new(rows.into_iter().map(Row::new), widths)
                    .header(Row::new(COLUMNS).style(Style::default().add_modifier(Modifier::BOLD)));
                frame.render_widget(table_widget, table);
            })
            .map_err(|e| format!("terminal: {e}"))?;
        let wait = next.saturating_duration_since(Instant::now());
        if !event::poll(wait).map_err(|e| format!("terminal: {e}"))? {
            continue;
        }
        let Event::Key(key) = event::read().map_err(|e| format!("terminal: {e}"))? else {
            continue;
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if let Some(glob) = typing.as_mut() {
            match key.code {
                KeyCode::Enter => {
                    // Checked as -F is: a typo is said, not shown as an
                    // empty table.
                    refused = match glob.is_empty() {
                        true => None,
                        false => check_glob(args, glob).err(),
                    };
                    if refused.is_none() {
                        filter = Some(glob.clone()).filter(|g| !g.is_empty());
                    }
                    typing = None;
                }
                KeyCode::Esc => {
                    filter = None;
                    typing = None;
                    refused = None;
                }
                KeyCode::Backspace => {
                    glob.pop();
                }
                KeyCode::Char(c) => glob.push(c),
                _ => {}
            }
            continue;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
            KeyCode::Char('t') => sort = TopSort::Total,
            KeyCode::Char('s') => sort = TopSort::SelfTime,
            KeyCode::Char('p') => sort = TopSort::P99,
            KeyCode::Char('c') => sort = TopSort::Calls,
            KeyCode::Char('/') => typing = Some(filter.clone().unwrap_or_default()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_tools::analysis::{FunctionProfile, NotKept};

    fn function(name: &str, values: &[u64], self_ns: u64, running: u64) -> FunctionProfile {
        let mut durations = Histogram::new();
        for &v in values {
            durations.record(v);
        }
        FunctionProfile {
            function: name.len(),
            name: name.into(),
            total_ns: durations.sum(),
            self_ns,
            durations,
            running,
        }
    }

    fn snapshot(taken_ns: u64, functions: Vec<FunctionProfile>, lost: u64) -> ProfileSnapshot {
        ProfileSnapshot {
            taken_ns,
            threads: 2,
            functions,
            paths: Vec::new(),
            not_kept: NotKept {
                paths: 0,
                functions: lost,
            },
        }
    }

    /// 1 s apart: `get` went from 2 calls to 2 + 100 (99 of 1 µs, one of
    /// 1 ms); `put` did nothing; `idle` has a call running.
    fn two() -> (Sample, Sample) {
        let before = snapshot(
            1_000_000_000,
            vec![
                function("get", &[50_000, 50_000], 60_000, 0),
                function("put", &[7_000], 7_000, 0),
            ],
            3,
        );
        let mut later = vec![50_000, 50_000, 1_000_000];
        later.extend([1_000; 99]);
        let after = snapshot(
            2_000_000_000,
            vec![
                function("get", &later, 60_000 + 500_000, 0),
                function("put", &[7_000], 7_000, 0),
                function("idle", &[], 0, 1),
            ],
            5,
        );
        (sample(before), sample(after))
    }

    fn sample(snapshot: ProfileSnapshot) -> Sample {
        Sample {
            snapshot,
            open: Vec::new(),
        }
    }

    #[test]
    fn the_interval_is_the_difference_of_two_snapshots() {
        let (before, after) = two();
        let interval = interval(&before, &after);
        assert!(!interval.reset);
        assert_eq!(
            (interval.ns, interval.lost, interval.threads),
            (1_000_000_000, 2, 2)
        );
        let get = &interval.rows.iter().find(|r| r.name == "get").unwrap();
        assert_eq!(
            (get.calls, get.total_ns, get.self_ns, get.avg_ns),
            (100, 1_099_000, 500_000, 10_990)
        );
        // The 99th of 100 calls is a 1 µs one; the 1 ms one is the 100th.
        // 1 µs lies in the bucket 1000..=1003: its middle.
        assert_eq!((get.p50_ns, get.p90_ns, get.p99_ns), (1_001, 1_001, 1_001));
        // `put` had no call; `idle` has one running.
        let names: Vec<&str> = interval.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["get", "idle"]);
    }

    #[test]
    fn a_reset_makes_the_later_snapshot_the_interval() {
        let (before, _) = two();
        let after = snapshot(1_500_000_000, vec![function("get", &[1_000], 1_000, 0)], 0);
        let interval = interval(&before, &sample(after));
        assert!(interval.reset);
        assert_eq!(interval.rows.len(), 1);
        assert_eq!(
            (interval.rows[0].calls, interval.rows[0].total_ns),
            (1, 1_000)
        );
        assert_eq!(interval.lost, 0);
    }

    #[test]
    fn a_frame_as_text() {
        let (before, after) = two();
        let interval = interval(&before, &after);
        let view = View {
            sort: TopSort::Calls,
            filter: None,
            notrace: &[],
            limit: usize::MAX,
        };
        assert_eq!(
            frame_text("4242", &interval, &view),
            "fntrace top 4242: 1.000 s, 2 threads, 100 calls/s, sorted by calls; 2 calls \
             not counted (no row left in the profile's budget)\n\
             calls/s  wall%  self-wall%      avg      p50      p90      p99  running  function\n\
             \x20   100   0.1%        0.1%  11.0 µs  1.00 µs  1.00 µs  1.00 µs        0  get\n\
             \x20     0   0.0%        0.0%        -        -        -        -        1  idle\n"
        );
        let view = View {
            sort: TopSort::Total,
            filter: Some("id*"),
            notrace: &[],
            limit: 5,
        };
        let off = Interval {
            tracer_off: true,
            ..interval.clone()
        };
        assert!(header("4242", &off, &view)
            .contains("; the profile tracer is off: fntrace ctl 4242 enable profile"));
        let cpu = Interval {
            cpu_percent: Some(3.4),
            ..interval.clone()
        };
        assert!(header("4242", &cpu, &view)
            .contains(": 1.000 s, 2 threads, process CPU 3%, 100 calls/s"));
        // This test's own process: some CPU time so far, read.
        assert!(process_cpu_ns(std::process::id()).is_some_and(|ns| ns % 10_000_000 == 0));
        let text = frame_text("4242", &interval, &view);
        assert!(
            text.ends_with("  idle\n") && !text.contains("  get\n"),
            "{text}"
        );
    }

    /// A call of `outer` from 0.5 s to 3.5 s on thread 7, calling `inner`
    /// (1.0 s to 1.2 s, then 2.0 s to 2.6 s, open at 2.5 s), sampled every
    /// second: each interval holds the part of each call inside it, and
    /// the parts add up to the calls' durations (outer: 3 s, 2.2 s self).
    #[test]
    fn a_long_call_counts_in_each_interval_for_its_part() {
        let at = |s: f64| (s * 1e9).round() as u64;
        let profile = |taken: f64, outer: &[u64], inner: &[u64], running: (u64, u64)| {
            let mut outer = function("outer", outer, 0, running.0);
            outer.function = 1;
            outer.self_ns = outer.total_ns.saturating_sub(at(0.8));
            let self_ns = inner.iter().sum();
            let mut inner = function("inner", inner, self_ns, running.1);
            inner.function = 2;
            snapshot(at(taken), vec![outer, inner], 0)
        };
        let open = |function, depth, entry: f64, children: f64| OpenCall {
            tid: 7,
            depth,
            function,
            entry_ns: at(entry),
            children_ns: at(children),
        };
        let samples = [
            Sample {
                snapshot: profile(0.5, &[], &[], (0, 0)),
                open: vec![],
            },
            Sample {
                snapshot: profile(1.5, &[], &[at(0.2)], (1, 0)),
                open: vec![open(1, 0, 0.5, 0.2)],
            },
            Sample {
                snapshot: profile(2.5, &[], &[at(0.2)], (1, 1)),
                open: vec![open(1, 0, 0.5, 0.2), open(2, 1, 2.0, 0.0)],
            },
            Sample {
                snapshot: profile(3.5, &[at(3.0)], &[at(0.2), at(0.6)], (0, 0)),
                open: vec![],
            },
        ];
        let rows: Vec<Vec<(String, u64, u64)>> = samples
            .windows(2)
            .map(|pair| {
                interval(&pair[0], &pair[1])
                    .rows
                    .iter()
                    .map(|r| (r.name.clone(), r.total_ns, r.self_ns))
                    .collect()
            })
            .collect();
        let row = |name: &str, total: f64, self_s: f64| (name.to_string(), at(total), at(self_s));
        assert_eq!(
            rows,
            [
                vec![row("inner", 0.2, 0.2), row("outer", 1.0, 0.8)],
                vec![row("inner", 0.5, 0.5), row("outer", 1.0, 0.5)],
                vec![row("inner", 0.1, 0.1), row("outer", 1.0, 0.9)],
            ]
        );
    }

    /// Open calls come in the reply before the snapshot's text.
    #[test]
    fn a_sample_from_a_reply() {
        let (_, after) = two();
        let reply = format!(
            "profile: 3 functions, 0 paths, 2 threads\nopen 7 0 3 1500 200\nopen 7 1 4 1700 0\n{}",
            after.snapshot.to_text()
        );
        let sample = Sample::of_reply(&reply).unwrap();
        assert_eq!(sample.snapshot, after.snapshot);
        assert_eq!(
            sample.open,
            [
                OpenCall {
                    tid: 7,
                    depth: 0,
                    function: 3,
                    entry_ns: 1500,
                    children_ns: 200
                },
                OpenCall {
                    tid: 7,
                    depth: 1,
                    function: 4,
                    entry_ns: 1700,
                    children_ns: 0
                }
            ]
        );
        assert!(Sample::of_reply(&reply.replace("open 7 1 4", "open 7 1 zz")).is_err());
    }
}
