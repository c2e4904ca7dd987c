//! The figures of one interval of `fntrace top`: the difference of two
//! samples (a profile snapshot and the calls open when it was taken),
//! each call counted for its part inside the interval.

use std::collections::BTreeMap;

use fntrace_tools::analysis::{FutureRow, Histogram, ProfileSnapshot};

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
    /// Of the calls open through the whole interval (one a thread), the
    /// time their threads were off the CPU, measured over the window
    /// between the reads of the threads' scheduler counters
    /// ([`sched::attribute`](super::sched::attribute)).
    pub off_cpu_ns: u64,
    /// The windows those calls were measured over, summed: `off_cpu_ns`
    /// is a share of it (0: no call of the function spanned the
    /// interval, no figure).
    pub spanning_ns: u64,
}

/// A thread on which a traced call was open through the whole interval.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRow {
    /// The thread.
    pub tid: u32,
    /// Its time on and off the CPU over the window.
    pub time: super::sched::ThreadTime,
    /// Its innermost call open through the interval.
    pub call: String,
}

/// How much of the interval the threads spent off the CPU.
#[derive(Clone, Debug, PartialEq)]
pub enum OffCpu {
    /// Not known, and why (a socket target without `--pid`, a kernel
    /// without per-thread scheduler statistics).
    NotAvailable(String),
    /// The threads a call stayed open on through the interval.
    Threads(Vec<ThreadRow>),
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
    /// Off-CPU time per thread (set by the caller, which reads the
    /// threads' scheduler counters).
    pub off_cpu: OffCpu,
    /// Per async function with futures completed (or dropped) in it, what the runtime
    /// future linker counted (futures completed, polls, latency, busy,
    /// latencies' buckets): the difference of the two samples' rows.
    pub futures: Vec<FutureRow>,
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
    /// The runtime future linker's rows so far (`future` lines: a process
    /// recording async functions' polls), by async function.
    pub futures: Vec<FutureRow>,
}

impl Sample {
    /// The sample in the reply to a `profile` request (a runtime that
    /// lists no open calls gives none: its calls then count whole in the
    /// interval they return in).
    pub fn of_reply(reply: &str) -> Result<Sample, String> {
        let snapshot = crate::cli::profile::snapshot_of_reply(reply)?;
        let mut open = Vec::new();
        let mut futures = Vec::new();
        for line in reply
            .lines()
            .take_while(|l| !l.starts_with("fntrace-profile "))
        {
            if line.starts_with("future ") {
                let row = FutureRow::from_line(line);
                futures.push(row.ok_or_else(|| format!("a bad future row: {line:?}"))?);
                continue;
            }
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
        Ok(Sample {
            snapshot,
            open,
            futures,
        })
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

/// The futures each async function completed from `before` to `after`
/// (a function's row whole where its counts went down), those with some.
fn futures_between(before: &Sample, after: &Sample) -> Vec<FutureRow> {
    after
        .futures
        .iter()
        .filter_map(|row| {
            let prior = before.futures.iter().find(|b| b.function == row.function);
            let within = prior.and_then(|prior| row.since(prior));
            Some(within.unwrap_or_else(|| row.clone()))
                .filter(|r| r.completed != 0 || r.dropped != 0)
        })
        .collect()
}

/// The interval from `before` to `after`, two samples of one profile.
pub fn interval(before: &Sample, after: &Sample) -> Interval {
    let futures = futures_between(before, after);
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
            off_cpu_ns: 0,
            spanning_ns: 0,
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
        off_cpu: OffCpu::NotAvailable("not measured".to_string()),
        futures,
    }
}
