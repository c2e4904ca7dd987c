//! Slow-call triggers on async functions, for the whole future: a trigger
//! whose glob matches an async function recorded with `--async` (its
//! resume function's name, `kv::serve::{closure#0}`, or the async fn's,
//! `kv::serve`) fires when one of its futures took at least the threshold
//! from its first poll to its Ready poll, however short each poll. The
//! runtime future linker (`builtin::futures`) measures each future on
//! the traced path and queues those over their function's threshold; the
//! writer sets the thresholds and takes the queue after each drain.

use std::collections::HashMap;
use std::time::Duration;

use super::write::timestamp;
use super::{PendingSlow, SlowTrigger, SnapshotReport, Trigger};
use crate::builtin::futures::{self, SlowFuture};
use crate::builtin::graph::args;
use crate::control;
use fntrace_format::analysis::human_duration;
use fntrace_format::coroutine::async_fn_name;

/// The writer's part: which async functions the triggers match.
#[derive(Default)]
pub(super) struct FutureTriggers {
    /// The triggers' generation and the argument table the thresholds
    /// were set for.
    known: Option<(u64, usize)>,
    /// Per async function: its name and the triggers matching it (bit i
    /// for trigger i).
    functions: HashMap<usize, (String, u64)>,
    taken: Vec<SlowFuture>,
}

impl FutureTriggers {
    /// Whether `function` is an async function whose polls are linked:
    /// a trigger matching it applies to its futures, not to each poll.
    pub(super) fn is_async(&self, function: usize) -> bool {
        args::table().is_some_and(|t| t.futures.contains(function))
    }

    /// Sets each async function's threshold (the least of the triggers
    /// matching it) when the triggers or the argument table changed.
    pub(super) fn update(&mut self, slow: &[SlowTrigger], generation: u64) {
        let Some(table) = args::table() else {
            return;
        };
        let now = (generation, std::ptr::from_ref(table) as usize);
        if self.known == Some(now) {
            return;
        }
        self.known = Some(now);
        self.functions.clear();
        for function in table.futures.addresses() {
            let name = control::function_name(function).unwrap_or_default();
            let matches = |t: &SlowTrigger| {
                t.pattern.selects(&name) || t.pattern.selects(async_fn_name(&name))
            };
            let mask = slow
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, t)| matches(t))
                .fold(0u64, |mask, (i, _)| mask | 1 << i);
            let threshold = slow
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & 1 << i != 0)
                .map(|(_, t)| t.threshold_ns)
                .min()
                .unwrap_or(u64::MAX);
            table.futures.set_threshold(function, threshold);
            if mask != 0 {
                self.functions.insert(function, (name, mask));
            }
        }
    }

    /// Takes the slow futures the linker queued: a snapshot due after
    /// drain `due` for each directory of the triggers each fires.
    pub(super) fn find_slow(
        &mut self,
        slow: &[SlowTrigger],
        pending: &mut Vec<PendingSlow>,
        due: u64,
    ) {
        futures::take_slow(&mut self.taken);
        for future in self.taken.drain(..) {
            let Some((name, mask)) = self.functions.get(&future.function) else {
                continue;
            };
            let mut dirs = Vec::new();
            for (i, trigger) in slow.iter().enumerate().take(64) {
                let to = (&trigger.dir, trigger.threads);
                if mask & 1 << i == 0
                    || future.latency_ns < trigger.threshold_ns
                    || dirs.contains(&to)
                {
                    continue;
                }
                dirs.push(to);
                let tids: Vec<u32> = future.tids.iter().copied().filter(|&t| t != 0).collect();
                pending.push(PendingSlow {
                    dir: trigger.dir.clone(),
                    trigger: Trigger::SlowFuture {
                        function: name.clone(),
                        address: future.address,
                        start_ns: future.first_ns,
                        latency: Duration::from_nanos(future.latency_ns),
                        busy: Duration::from_nanos(future.busy_ns),
                        polls: future.polls,
                        tids: tids.clone(),
                        more_threads: future.more_tids,
                    },
                    // Threads beyond those named: every thread's kept.
                    tids: if future.more_tids { Vec::new() } else { tids },
                    due,
                    threads: trigger.threads,
                });
            }
        }
    }
}

impl Drop for FutureTriggers {
    /// The recorder ends: no future is queued any more.
    fn drop(&mut self) {
        if let Some(table) = args::table() {
            for function in table.futures.addresses() {
                table.futures.set_threshold(function, u64::MAX);
            }
        }
    }
}

/// A [`Trigger::SlowFuture`]'s line in the trigger file: the future, its
/// latency, busy time, polls and threads, and whether the snapshot's
/// window (`report`) holds its first poll.
pub(super) fn trigger_line(trigger: &Trigger, report: &SnapshotReport) -> String {
    let Trigger::SlowFuture {
        function,
        address,
        start_ns,
        latency,
        busy,
        polls,
        tids,
        more_threads,
    } = trigger
    else {
        return String::new();
    };
    let ns = |d: &Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let mut threads: Vec<String> = tids.iter().map(u32::to_string).collect();
    if *more_threads {
        threads.push("more".to_string());
    }
    let covered = match report.first_ns {
        Some(first) if first > *start_ns => format!(
            "; NOT all its polls are in the window, which begins {} after its first poll \
             (a larger flight budget keeps more)",
            human_duration(first - start_ns)
        ),
        Some(_) => "; all its polls are in the window".to_string(),
        None => String::new(),
    };
    format!(
        "  slow future {function} at {address:#x}: latency {}, busy {}, {polls} polls, \
         threads {}, first poll {}{covered}",
        human_duration(ns(latency)),
        human_duration(ns(busy)),
        threads.join(", "),
        timestamp(*start_ns),
    )
}

/// What the runtime future linker could not follow so far, a line each
/// (empty if nothing): futures first polled while its table was full,
/// slow futures its queue had no room for.
pub(super) fn untracked_text() -> String {
    let mut text = String::new();
    let untracked = futures::untracked();
    if untracked > 0 {
        text.push_str(&format!(
            "futures: {untracked} untracked so far (first polled while the runtime linker's \
             table of {} was full: no trigger sees them)\n",
            futures::capacity()
        ));
    }
    let missed = futures::slow_missed();
    if missed > 0 {
        text.push_str(&format!(
            "futures: {missed} slow futures missed so far (the linker's queue was full)\n"
        ));
    }
    text
}
