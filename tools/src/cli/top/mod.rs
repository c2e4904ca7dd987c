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
//! These are wall-clock times, blocked time included (a call waiting in
//! `send` counts as much as one computing); CPU time is not measured per
//! call. With a pid as the target (or `--pid`), the header gives the
//! process's CPU time over the interval (`/proc/PID/stat`) beside them,
//! and [`sched`] reads each thread's time on and off the CPU from the
//! kernel's per-thread scheduler statistics at each end of the interval:
//! a thread on which one call stayed open through the whole interval gives
//! that call (and its open ancestors) its off-CPU share, exactly; the
//! calls that began or ended inside the interval get none (`-`).
//!
//! The screen is drawn with `ratatui` (alternate screen, restored on exit
//! and on panic); `--once` prints one frame as plain text instead, for
//! scripts and tests.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use fntrace_tools::analysis::{human_duration, WALL_TIME};
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
not returned, now). All times are wall-clock time, blocked time included.

Off-CPU time, with a PID as the target (or --pid for a socket's program):
at each end of the interval fntrace reads each thread's on-CPU and run-queue
time (/proc/PID/task/TID/schedstat, once a thread, never per call).
off-cpu% is exact where it is shown: of the function's calls that stayed
open through the whole interval, the share of their threads' time off the
CPU (blocked, or runnable waiting for a CPU); `-` when no call of it spanned
the interval (calls that began or ended inside it are not measured). Below
the functions, a row per thread on which a call spanned the interval: its
on-cpu%, runq% (waiting for a CPU), blocked% (off the CPU, not waiting:
asleep, in I/O, on a lock) and its innermost such call (which -F and -N
select, as the functions). The header says why when the kernel gives no
such statistics. It also shows the process's CPU time over the interval
(/proc/PID/stat, 100% is one CPU, 10 ms resolution).

Futures, below the functions, for a program recording its async functions'
polls (`fntrace record --async`, with FNTRACE_CONTROL; or any Rust program
built with debug info, with `--async`, which sets that up): a row per async
function with futures completed in the interval, from the program's runtime
future linker (no profile tracer needed): futures/s, futures, polls (theirs),
latency (summed, first poll to Ready), p50 and p99 (within 6.25 %), busy
(time in their polls) and waiting (the rest). -F, -N and the sort keys select
them as the functions (total: latency, self: busy, p99, calls: futures).

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
    /// Patch the entries of functions matching GLOB that were built
    /// without instrumentation first (repeatable; as `fntrace ctl PID
    /// patch`, uftrace's -P): a release build's functions, in a process
    /// top attaches to, whose detach at the end writes them back.
    #[arg(short = 'P', long = "patch", value_name = "GLOB")]
    pub patch: Vec<String>,
    /// At most N rows (the screen shows what fits).
    #[arg(long, visible_alias = "limit", value_name = "N")]
    pub top: Option<usize>,
    /// The pid of the program serving a socket path given as the target,
    /// for its CPU and off-CPU time (a pid target is its own).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// The futures of the program's async functions too, in a program not
    /// started under `fntrace record --async`: while top runs, their polls'
    /// values are set (as `ctl args`/`retval`), the filter names them and
    /// the flight recorder runs on them (16 MiB), so that the runtime
    /// links their futures; at the end all three are undone (the specs
    /// cleared). Refused while the program records.
    #[arg(long = "async")]
    pub futures: bool,
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

mod async_setup;
mod futures;
mod interval;
pub use futures::*;
pub use interval::*;
pub mod sched;

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
    line += &format!("; {WALL_TIME}");
    if let OffCpu::NotAvailable(why) = &interval.off_cpu {
        line += &format!("; off-CPU: not available: {why}");
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
/// the interval's wall-clock time (blocked time included), not CPU time;
/// `off-cpu%` the share off the CPU of the calls open through it.
pub const COLUMNS: [&str; 10] = [
    "calls/s",
    "wall%",
    "self-wall%",
    "off-cpu%",
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
                percent(row.off_cpu_ns, row.spanning_ns),
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

/// `part` in % of `whole`, `-` when `whole` is 0.
fn percent(part: u64, whole: u64) -> String {
    match whole {
        0 => "-".to_string(),
        _ => format!("{:.1}%", part as f64 / whole as f64 * 100.0),
    }
}

/// Column headers of the threads below the functions.
pub const THREAD_COLUMNS: [&str; 5] = ["thread", "on-cpu%", "runq%", "blocked%", "open through"];

/// The threads on which a call stayed open through the interval (their
/// innermost such call selected as the functions are), most off the CPU
/// first (then by id), cut to `view.limit`, as cells.
pub fn thread_cells(interval: &Interval, view: &View) -> Vec<Vec<String>> {
    let OffCpu::Threads(threads) = &interval.off_cpu else {
        return Vec::new();
    };
    let mut threads: Vec<&ThreadRow> = (threads.iter())
        .filter(|t| {
            view.filter.is_none_or(|glob| glob::matches(glob, &t.call))
                && !glob::matches_any(view.notrace, &t.call)
        })
        .collect();
    threads.sort_by_key(|t| (t.time.on_cpu_ns, t.tid));
    threads
        .iter()
        .take(view.limit)
        .map(|t| {
            let window = t.time.window_ns;
            let blocked = window - t.time.on_cpu_ns - t.time.runq_ns;
            vec![
                t.tid.to_string(),
                percent(t.time.on_cpu_ns, window),
                percent(t.time.runq_ns, window),
                percent(blocked, window),
                t.call.clone(),
            ]
        })
        .collect()
}

/// A frame as plain text (`--once`): the functions, the futures, then
/// the threads.
pub fn frame_text(target: &str, interval: &Interval, view: &View) -> String {
    let headers: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    let mut text = header(target, interval, view);
    text.push('\n');
    for line in aligned_lines(&headers, &cells(interval, view)) {
        text.push_str(&line);
        text.push('\n');
    }
    let futures = future_cells(interval, view);
    if !futures.is_empty() {
        let headers: Vec<String> = FUTURE_COLUMNS.iter().map(|c| c.to_string()).collect();
        for line in aligned_lines(&headers, &futures) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    let threads = thread_cells(interval, view);
    if !threads.is_empty() {
        let headers: Vec<String> = THREAD_COLUMNS.iter().map(|c| c.to_string()).collect();
        for line in aligned_lines(&headers, &threads) {
            text.push_str(&line);
            text.push('\n');
        }
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
    let patched = match args.patch.is_empty() {
        true => Ok(()),
        false => patch(args),
    };
    let result = patched.and_then(|()| check_selection(args)).and_then(|()| {
        if attached.is_some() {
            let enabled =
                super::ctl::exchange_line(&args.target, timeout(args), "enable profile\n");
            if let Err(why) | Ok((false, why)) = enabled {
                eprintln!("fntrace: top: enable profile: {why}");
            }
        }
        let futures = match args.futures {
            true => Some(async_setup::set_up(
                &args.target,
                timeout(args),
                pid_of(args)?,
            )?),
            false => None,
        };
        let shown = if args.once || args.frames.is_some() {
            once(args)
        } else {
            live(args)
        };
        if let Some(futures) = futures {
            futures.tear_down();
        }
        shown
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

/// `-P`: the entries patched (before -F is checked: a glob may select only
/// functions -P gives a site); the reply's lines (count, refusals) on
/// stderr.
fn patch(args: &TopArgs) -> Result<(), String> {
    let request = format!("patch {}\n", args.patch.join(","));
    match super::ctl::exchange_line(&args.target, timeout(args), &request) {
        Ok((true, reply)) => {
            for line in reply.lines() {
                eprintln!("fntrace top: {line}");
            }
            Ok(())
        }
        Ok((false, why)) | Err(why) => Err(why),
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
    /// The threads' scheduler counters read just before the request and
    /// just after the reply (bracketing the snapshot), or why not.
    sched: Result<(sched::SchedRead, sched::SchedRead), String>,
}

/// The pid whose CPU time and threads `top` reads: the target's, or
/// `--pid`'s; why none.
fn pid_of(args: &TopArgs) -> Result<u32, String> {
    match (args.pid, args.target.parse::<u32>()) {
        (Some(pid), _) | (None, Ok(pid)) => Ok(pid),
        (None, Err(_)) => Err("the target is a socket path (--pid PID names its program)".into()),
    }
}

/// A sample, whether the tracer is off, and the process's CPU time.
fn fetch(args: &TopArgs) -> Result<Fetched, String> {
    let pid = pid_of(args);
    let sched_before = pid.clone().and_then(sched::read);
    match super::ctl::exchange_line(&args.target, timeout(args), "profile\n")? {
        (true, reply) => Ok(Fetched {
            sched: sched_before.and_then(|first| Ok((first, sched::read(pid.clone()?)?))),
            sample: Sample::of_reply(&reply)?,
            off: super::profile::tracer_off(&reply),
            cpu: pid
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
    let mut interval = Interval {
        tracer_off: after.off,
        cpu_percent,
        ..interval(&before.sample, &after.sample)
    };
    match (&before.sched, &after.sched) {
        // From after the first snapshot to before the second: inside the
        // span of every call open at both.
        (Ok((_, start)), Ok((end, _))) => {
            let threads = sched::between(start, end);
            sched::attribute(&mut interval, &before.sample, &after.sample, &threads);
        }
        (Err(why), _) | (_, Err(why)) => interval.off_cpu = OffCpu::NotAvailable(why.clone()),
    }
    interval
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
                let threads = shown
                    .as_ref()
                    .map(|interval| thread_cells(interval, &view))
                    .unwrap_or_default();
                let futures = shown
                    .as_ref()
                    .map(|interval| future_cells(interval, &view))
                    .unwrap_or_default();
                // The futures and the threads below the functions, at
                // most 8 of each.
                let below = |rows: usize| match rows {
                    0 => 0,
                    n => n.min(8) as u16 + 2,
                };
                let [top, status, table, future_table, thread_table] = Layout::vertical([
                    Constraint::Length(1),
                    Constraint::Length(1),
                    Constraint::Min(0),
                    Constraint::Length(below(futures.len())),
                    Constraint::Length(below(threads.len())),
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
                    Constraint::Length(8),
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
                let widths = [
                    Constraint::Length(9),
                    Constraint::Length(8),
                    Constraint::Length(8),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Min(10),
                ];
                let future_widget = Table::new(futures.into_iter().map(Row::new), widths).header(
                    Row::new(FUTURE_COLUMNS)
                        .style(Style::default().add_modifier(Modifier::BOLD))
                        .top_margin(1),
                );
                frame.render_widget(future_widget, future_table);
                let widths = [
                    Constraint::Length(8),
                    Constraint::Length(8),
                    Constraint::Length(8),
                    Constraint::Length(8),
                    Constraint::Min(10),
                ];
                let thread_widget = Table::new(threads.into_iter().map(Row::new), widths).header(
                    Row::new(THREAD_COLUMNS)
                        .style(Style::default().add_modifier(Modifier::BOLD))
                        .top_margin(1),
                );
                frame.render_widget(thread_widget, thread_table);
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
mod tests;
