//! How much of `fntrace top`'s interval each traced thread spent off the
//! CPU, from the kernel's per-thread scheduler statistics
//! (`/proc/PID/task/TID/schedstat`: ns on a CPU, ns waiting on a run
//! queue, both cumulative), read once per thread at each end of the
//! interval, never per call. What the thread did off the CPU during an
//! interval is its call's only when one call stayed open on it through
//! the whole interval ([`attribute`]); the partial calls of an interval
//! get no figure, since the counters say nothing about part of it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Instant;

use super::{Interval, OffCpu, OpenCall, Sample, ThreadRow};

/// A thread's cumulative scheduler counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on a CPU (ns).
    pub on_cpu_ns: u64,
    /// Time runnable, waiting on a run queue for a CPU (ns).
    pub runq_ns: u64,
}

/// The counters of a process's threads, read at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedRead {
    /// When they were read.
    pub at: Instant,
    /// Per thread id.
    pub threads: BTreeMap<u32, SchedStat>,
}

/// Reads every thread's `schedstat` of process `pid` (one read a thread);
/// why not, when the kernel does not give them: no such file
/// (`CONFIG_SCHED_INFO` off), or every counter zero.
pub fn read(pid: u32) -> Result<SchedRead, String> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
    let mut threads = BTreeMap::new();
    let mut missing = None;
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = format!("{dir}/{tid}/schedstat");
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut fields = text.split_whitespace().map(str::parse::<u64>);
                if let (Some(Ok(on_cpu_ns)), Some(Ok(runq_ns))) = (fields.next(), fields.next()) {
                    threads.insert(tid, SchedStat { on_cpu_ns, runq_ns });
                }
            }
            // A thread that exited since the listing is no loss; a
            // kernel without the file is.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.get_or_insert(path);
            }
            Err(_) => {}
        }
    }
    if threads.is_empty() {
        return Err(match missing {
            Some(path) => format!("no {path} (a kernel without CONFIG_SCHED_INFO)"),
            None => format!("no thread's schedstat readable in {dir}"),
        });
    }
    if threads.values().all(|s| s.on_cpu_ns == 0 && s.runq_ns == 0) {
        return Err(format!(
            "{dir}/*/schedstat read 0 (the kernel keeps no scheduler statistics)"
        ));
    }
    Ok(SchedRead {
        at: Instant::now(),
        threads,
    })
}

/// A thread's figures between two reads: the window's length, and its
/// on-CPU and run-queue time in it (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadTime {
    /// The window between the reads.
    pub window_ns: u64,
    /// Time on a CPU in it.
    pub on_cpu_ns: u64,
    /// Time waiting for a CPU in it.
    pub runq_ns: u64,
}

/// Each thread's time between two reads (threads in both).
pub fn between(start: &SchedRead, end: &SchedRead) -> BTreeMap<u32, ThreadTime> {
    let window_ns =
        u64::try_from(end.at.saturating_duration_since(start.at).as_nanos()).unwrap_or(u64::MAX);
    end.threads
        .iter()
        .filter_map(|(tid, now)| {
            let then = start.threads.get(tid)?;
            // The counters are the kernel's clock, the window ours: a
            // thread never runs longer than the window.
            let on_cpu_ns = now.on_cpu_ns.saturating_sub(then.on_cpu_ns).min(window_ns);
            let runq_ns = (now.runq_ns.saturating_sub(then.runq_ns)).min(window_ns - on_cpu_ns);
            Some((
                *tid,
                ThreadTime {
                    window_ns,
                    on_cpu_ns,
                    runq_ns,
                },
            ))
        })
        .collect()
}

/// Gives `interval` its off-CPU figures: each thread of `threads` on
/// which a call was open through the whole interval (in both samples,
/// same entry) gets a row naming its innermost such call, and its
/// off-CPU time counts for that call's function and each open
/// ancestor's, once per thread (recursion counted once, as the total).
/// The reads bracketing `threads`' window come after `before`'s snapshot
/// and before `after`'s, so the window lies inside the span the call was
/// open: all of the thread's off-CPU time in it was spent in that call.
pub fn attribute(
    interval: &mut Interval,
    before: &Sample,
    after: &Sample,
    threads: &BTreeMap<u32, ThreadTime>,
) {
    let names: BTreeMap<usize, &str> = after
        .snapshot
        .functions
        .iter()
        .map(|f| (f.function, f.name.as_str()))
        .collect();
    // One call in both samples: same thread, depth, function and entry
    // (its completed children may have grown).
    let key = |c: &OpenCall| (c.tid, c.depth, c.function, c.entry_ns);
    let open_before: HashSet<_> = before.open.iter().map(key).collect();
    let mut spanning = after.open.clone();
    spanning.retain(|call| open_before.contains(&key(call)));
    spanning.sort_by_key(|c| (c.tid, c.depth));
    let mut rows = Vec::new();
    for (&tid, time) in threads {
        let calls: Vec<&str> = spanning
            .iter()
            .filter(|c| c.tid == tid)
            .filter_map(|c| names.get(&c.function).copied())
            .collect();
        let Some(&innermost) = calls.last() else {
            continue;
        };
        let off_ns = time.window_ns - time.on_cpu_ns;
        let functions: BTreeSet<&str> = calls.into_iter().collect();
        for row in interval.rows.iter_mut() {
            if functions.contains(row.name.as_str()) {
                row.off_cpu_ns += off_ns;
                row.spanning_ns += time.window_ns;
            }
        }
        rows.push(ThreadRow {
            tid,
            time: *time,
            call: innermost.to_string(),
        });
    }
    interval.off_cpu = OffCpu::Threads(rows);
}
