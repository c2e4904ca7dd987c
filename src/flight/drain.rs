//! The flight recorder's writer thread: drains the threads' buffers into
//! the window each interval, answers snapshot requests, and fires the
//! triggers (slow calls, panics, signals) into snapshot directories named
//! by time and function, each with its `trigger.txt`, within the rate
//! limit.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::futures::FutureTriggers;
use super::write::timestamp;
use super::*;
use crate::rt::own_threads;
use fntrace_format::argspec;
use fntrace_format::export::OutputDir;

/// Tells those waiting for an answer that the writer is gone, however it
/// ends (a panic included).
pub(super) struct DrainGone<'a>(pub(super) &'a FlightShared);

impl Drop for DrainGone<'_> {
    fn drop(&mut self) {
        self.0.writer_running.store(false, Ordering::Release);
        // Under the lock: a waiter checks the flag, then waits, holding it.
        let _state = self.0.state();
        self.0.answered.notify_all();
    }
}

/// A call of a function a slow trigger matches, running: (depth, entry
/// time, function, the bytes of its recorded arguments).
type OpenCall = (u16, u64, usize, Vec<u8>);

/// The writer thread's own state.
pub(super) struct Drain {
    window: Window,
    /// What is drained while a snapshot is written from `window` (by a
    /// thread of its own, reading it in place): appended to `window` once
    /// the snapshot is written.
    staging: Window,
    interval: Duration,
    drains: u64,
    /// Per function: its name and which slow triggers match it (bit i for
    /// trigger i), for the triggers of generation `triggers_known`.
    functions: HashMap<usize, (String, u64)>,
    triggers_known: u64,
    /// Per thread: the calls of matching functions it has running (depth,
    /// entry time, function, the bytes of its recorded arguments).
    open: HashMap<u32, Vec<OpenCall>>,
    pending: Vec<PendingSlow>,
    /// Triggers on async functions, for whole futures.
    futures: FutureTriggers,
    trigger_snapshots: usize,
    /// When the trigger snapshots of the last minute were written.
    recent: VecDeque<Instant>,
    /// After a trigger's snapshot could not be written, triggers are not
    /// tried again before this (1 s after the first failure in a row,
    /// doubling up to a minute; a snapshot written resets it).
    retry_at: Option<Instant>,
    failures_in_row: u32,
}

impl Drain {
    /// A writer keeping `window`, with `staging` for what comes in while a
    /// snapshot is written, draining every `interval`.
    pub(super) fn new(window: Window, staging: Window, interval: Duration) -> Drain {
        Drain {
            window,
            staging,
            interval,
            drains: 0,
            functions: HashMap::new(),
            triggers_known: 0,
            open: HashMap::new(),
            pending: Vec::new(),
            futures: FutureTriggers::default(),
            trigger_snapshots: 0,
            recent: VecDeque::new(),
            retry_at: None,
            failures_in_row: 0,
        }
    }

    pub(super) fn run(&mut self, shared: &FlightShared) {
        let interval = self.interval;
        // Nothing this thread calls is traced.
        let _untraced = Untraced::begin();
        loop {
            // The requests made before this drain starts are answered after
            // it, so that a snapshot holds every event made before it was
            // asked for; those made during it wait for the next one.
            let (stop, slow, generation, requests) = {
                let state = shared.state();
                let (mut state, _) = shared
                    .wake
                    .wait_timeout_while(state, interval, |s| !s.stop && s.requests.is_empty())
                    .unwrap_or_else(PoisonError::into_inner);
                let requests = std::mem::take(&mut state.requests);
                (
                    state.stop,
                    state.slow.clone(),
                    state.slow_generation,
                    requests,
                )
            };
            self.drain(shared, &slow, generation);
            // A directory with a call due gets one snapshot holding every
            // slow call pending for it (of triggers keeping the same
            // threads): they all ended before this drain, so the window
            // holds each (their windows overlap).
            loop {
                let drains = self.drains;
                let Some(first) = self.pending.iter().find(|p| stop || p.due <= drains) else {
                    break;
                };
                let (dir, threads) = (first.dir.clone(), first.threads);
                let (group, later) = std::mem::take(&mut self.pending)
                    .into_iter()
                    .partition::<Vec<_>, _>(|p| p.dir == dir && p.threads == threads);
                self.pending = later;
                let all_known = group.iter().all(|slow| !slow.tids.is_empty());
                let tids = (threads == SnapshotThreads::Trigger && all_known).then(|| {
                    let mut tids: Vec<u32> =
                        group.iter().flat_map(|slow| slow.tids.clone()).collect();
                    tids.sort_unstable();
                    tids.dedup();
                    tids
                });
                let triggers = group.into_iter().map(|slow| slow.trigger).collect();
                self.write_triggered(shared, triggers, &dir, tids);
            }
            let signals: Vec<(i32, PathBuf)> = shared
                .state()
                .signals
                .iter()
                .map(|(handler, dir)| (handler.signo, dir.clone()))
                .collect();
            for (signo, dir) in signals {
                if hooks::take_raised(signo) {
                    self.write_triggered(shared, vec![Trigger::Signal(signo)], &dir, None);
                }
            }
            for (id, request) in requests {
                let answer = match request {
                    Request::Snapshot(dir) => {
                        Answer::Snapshot(self.write_while_draining(shared, |window| {
                            write_snapshot(window, SnapshotAt::Path(&dir), None)
                        }))
                    }
                    Request::Panic(message) => {
                        let dir = shared.state().panic_dir.clone();
                        if let Some(dir) = dir {
                            self.write_triggered(shared, vec![Trigger::Panic(message)], &dir, None);
                        }
                        Answer::Done
                    }
                };
                shared.state().answers.push((id, answer));
                shared.answered.notify_all();
            }
            // Requests made during the last drain get one more.
            if stop && shared.state().requests.is_empty() {
                break;
            }
        }
    }

    /// Drains the threads' buffers into the window, looks for slow calls
    /// among the new events, and evicts what is over budget.
    fn drain(&mut self, shared: &FlightShared, slow: &[SlowTrigger], generation: u64) {
        let window = &mut self.window;
        window.begin_drain();
        drain_into(window);
        self.after_drain(shared, slow, generation);
    }

    /// Looks for slow calls among the events the last drain (or the
    /// staging window) appended, and evicts what is over budget.
    fn after_drain(&mut self, shared: &FlightShared, slow: &[SlowTrigger], generation: u64) {
        self.drains += 1;
        // Also when the last trigger went: no future is queued then.
        self.futures.update(slow, generation);
        if !slow.is_empty() {
            self.find_slow_calls(slow, generation);
            let due = self.drains + 1;
            self.futures.find_slow(slow, &mut self.pending, due);
        }
        self.window.evict();
        shared
            .evicted
            .store(self.window.evicted(), Ordering::Release);
        shared
            .appended
            .store(self.window.appended(), Ordering::Release);
        shared.lost.store(self.window.lost(), Ordering::Release);
    }

    /// Runs `write` on the window from a thread of its own while this one
    /// goes on draining every interval, into the staging window (until it
    /// is full: the threads' buffers then hold what comes, and drop what
    /// they cannot, counted); then appends what was staged to the window
    /// (slow calls found in it, the oldest evicted). Writing a large
    /// window takes long: without this, the threads' buffers would fill
    /// and drop most of what they made meanwhile.
    fn write_while_draining<T: Send>(
        &mut self,
        shared: &FlightShared,
        write: impl FnOnce(&Window) -> T + Send,
    ) -> T {
        let (window, staging, interval) = (&self.window, &mut self.staging, self.interval);
        // Taken by the thread, or here if there is none.
        let write = Mutex::new(Some(write));
        let take = || write.lock().unwrap_or_else(PoisonError::into_inner).take();
        // Until the thread has noted itself as fntrace's, its ring is not
        // drained (see `own_threads`).
        let spawning = own_threads::Spawning::begin();
        let written = std::thread::scope(|scope| {
            let writing = std::thread::Builder::new()
                .name("fntrace-snapshot".to_string())
                .spawn_scoped(scope, move || {
                    let _untraced = Untraced::begin();
                    own_threads::note_this_thread();
                    drop(spawning);
                    take().map(|write| write(window))
                });
            let writing = match writing {
                Ok(writing) => writing,
                // No thread to be had: written here, nothing drained.
                Err(_) => return None,
            };
            while !writing.is_finished() {
                std::thread::park_timeout(interval);
                if !staging.is_full() {
                    drain_into(staging);
                }
            }
            Some(writing.join())
        });
        let result = match written {
            Some(Ok(Some(result))) => result,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            Some(Ok(None)) | None => match take() {
                Some(write) => write(&self.window),
                None => unreachable!("the snapshot thread took the write and returned"),
            },
        };
        if !self.staging.is_empty() {
            self.window.begin_drain();
            self.window.take_all(&mut self.staging);
            let (slow, generation) = {
                let state = shared.state();
                (state.slow.clone(), state.slow_generation)
            };
            self.after_drain(shared, &slow, generation);
        }
        result
    }

    fn find_slow_calls(&mut self, slow: &[SlowTrigger], generation: u64) {
        if self.triggers_known != generation {
            self.functions.clear();
            self.triggers_known = generation;
        }
        // Name the new functions first (outside the drain: naming takes
        // fntrace's operation lock).
        let mut unknown = Vec::new();
        self.window.for_each_new(&mut |_, event| {
            let Ok((event, _)) = event else {
                return;
            };
            if !self.functions.contains_key(&event.function) && !unknown.contains(&event.function) {
                unknown.push(event.function);
            }
        });
        for function in unknown {
            let name = control::function_name(function).unwrap_or_default();
            // An async function's triggers apply to its futures.
            if self.futures.is_async(function) {
                self.functions.insert(function, (name, 0));
                continue;
            }
            let mask = slow
                .iter()
                .enumerate()
                .take(64)
                .filter(|(_, trigger)| trigger.pattern.selects(&name))
                .fold(0u64, |mask, (i, _)| mask | 1 << i);
            self.functions.insert(function, (name, mask));
        }
        let (functions, open, pending) = (&self.functions, &mut self.open, &mut self.pending);
        let due = self.drains + 1;
        self.window.for_each_new(&mut |tid, event| {
            let event = match event {
                Ok(event) => event,
                // Events lost: a call open before may have ended in the gap
                // (and the next exit at its depth be another call's). It
                // lasted at least up to the gap: slow if that is enough.
                Err(gap_ns) => {
                    for (_, entry_ns, function, data) in open.remove(&tid).unwrap_or_default() {
                        if let Some((name, mask)) = functions.get(&function) {
                            let at_least_ns = gap_ns.saturating_sub(entry_ns);
                            let values = || values_text(function, &data, &[]);
                            let slow_call = (name, *mask, tid, entry_ns, at_least_ns, true);
                            add_pending(slow, pending, slow_call, &values, due);
                        }
                    }
                    return;
                }
            };
            let (event, data) = event;
            let Some((name, mask)) = functions.get(&event.function) else {
                return;
            };
            if *mask == 0 {
                return;
            }
            let running = open.entry(tid).or_default();
            match event.kind {
                fntrace_format::EventKind::Entry => {
                    running.retain(|&(depth, ..)| depth < event.depth);
                    let call = (event.depth, event.time_ns, event.function, data.to_vec());
                    running.push(call);
                }
                fntrace_format::EventKind::Exit => {
                    running.retain(|&(depth, ..)| depth <= event.depth);
                    if running.last().map(|&(d, _, f, _)| (d, f))
                        != Some((event.depth, event.function))
                    {
                        return;
                    }
                    let Some((_, entry_ns, _, arguments)) = running.pop() else {
                        return;
                    };
                    let duration_ns = event.time_ns.saturating_sub(entry_ns);
                    let values = || values_text(event.function, &arguments, data);
                    let slow_call = (name, *mask, tid, entry_ns, duration_ns, false);
                    add_pending(slow, pending, slow_call, &values, due);
                }
            }
        });
        self.open.retain(|_, running| !running.is_empty());
    }

    /// Writes the snapshot of `triggers` (at least one) in a new
    /// directory under `parent`, named by time and the first trigger, with
    /// the [`TRIGGER_FILE`] listing them (or counts them skipped, over the
    /// limits), and records the outcome. It holds the threads `tids`
    /// names, or every one (`None`).
    fn write_triggered(
        &mut self,
        shared: &FlightShared,
        mut triggers: Vec<Trigger>,
        parent: &Path,
        tids: Option<Vec<u32>>,
    ) {
        if triggers.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.retry_at.is_some_and(|at| now < at) {
            shared.state().skipped_after_failure += triggers.len() as u64;
            return;
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            self.recent.pop_front();
        }
        if self.trigger_snapshots >= shared.max_trigger_snapshots
            || self.recent.len() >= shared.snapshots_per_minute as usize
        {
            shared.state().skipped_triggers += triggers.len() as u64;
            return;
        }
        let trigger = triggers.remove(0);
        let skipped = shared.state().skipped_triggers;
        let result = snapshot_dir(parent, &trigger).and_then(|(parent, name, dir)| {
            let written = self.write_while_draining(shared, |window| {
                let report = write_snapshot(window, SnapshotAt::Made(&dir), tids.as_deref())
                    .map_err(|e| e.to_string())?;
                let text = trigger_text(&trigger, &triggers, &report, tids.as_deref(), skipped);
                dir.write_new(TRIGGER_FILE, text.as_bytes())
                    .map_err(|e| e.to_string())?;
                Ok(report)
            });
            if let Err(why) = &written {
                // Half a snapshot must not read as a whole one.
                let path = dir.path().to_path_buf();
                let removed = match parent.discard(&name, dir) {
                    Ok(()) => "removed".to_string(),
                    Err(e) => format!("NOT removed ({e}): do not read it"),
                };
                eprintln!(
                    "fntrace: flight recorder: a trigger's snapshot could not be written ({why}); \
                     {} {removed}; triggers wait {} before the next try",
                    path.display(),
                    human_duration(self.retry_delay().as_nanos() as u64)
                );
            }
            written
        });
        // A snapshot that was not written takes nothing from the limits:
        // once the disk has room again, triggers write as before.
        if result.is_ok() {
            self.trigger_snapshots += 1;
            self.recent.push_back(now);
            self.failures_in_row = 0;
            self.retry_at = None;
        } else {
            self.retry_at = Some(Instant::now() + self.retry_delay());
            self.failures_in_row = self.failures_in_row.saturating_add(1);
        }
        shared.state().triggered.push(TriggeredSnapshot {
            trigger,
            more: triggers,
            result,
        });
    }
}

impl Drain {
    /// How long triggers wait after this failure (the next in a row).
    fn retry_delay(&self) -> Duration {
        Duration::from_secs(1 << self.failures_in_row.min(6)).min(Duration::from_secs(60))
    }
}

/// Adds a snapshot due after drain `due` for each directory of the
/// triggers in `slow` that `call` fires: (function's name, the triggers
/// matching it as a mask, thread, start, duration, whether it lasted at
/// least that, its end lost), its recorded values shown by `values` (made
/// only for a call that fires). One listing per call and directory,
/// however many of its triggers it fired (and threads kept).
fn add_pending(
    slow: &[SlowTrigger],
    pending: &mut Vec<PendingSlow>,
    call: (&String, u64, u32, u64, u64, bool),
    values: &dyn Fn() -> String,
    due: u64,
) {
    let (name, mask, tid, start_ns, duration_ns, at_least) = call;
    let mut dirs: Vec<(&PathBuf, SnapshotThreads)> = Vec::new();
    let mut shown = None;
    for (i, trigger) in slow.iter().enumerate().take(64) {
        let to = (&trigger.dir, trigger.threads);
        if mask & 1 << i != 0 && duration_ns >= trigger.threshold_ns && !dirs.contains(&to) {
            dirs.push(to);
            pending.push(PendingSlow {
                dir: trigger.dir.clone(),
                trigger: Trigger::SlowCall {
                    function: name.clone(),
                    duration: Duration::from_nanos(duration_ns),
                    tid,
                    start_ns,
                    at_least,
                    values: shown.get_or_insert_with(values).clone(),
                },
                tids: vec![tid],
                due,
                threads: trigger.threads,
            });
        }
    }
}

/// The recorded values of a call of `function` as replay shows them after
/// its name: its arguments from `arguments`, its return value from
/// `returned` (`("user:42") = 0`); what was not recorded is left out.
fn values_text(function: usize, arguments: &[u8], returned: &[u8]) -> String {
    let Some(values) = crate::builtin::graph::args::table().and_then(|t| t.values_of(function))
    else {
        return String::new();
    };
    let show = |data: &[u8], retval| {
        let shown = (!data.is_empty()).then(|| argspec::show(values, retval, data));
        shown.flatten().unwrap_or_default()
    };
    show(arguments, false) + &show(returned, true)
}

/// Drains every thread's buffer into `window`.
fn drain_into(window: &mut Window) {
    GRAPH_TRACER.stream_events(&mut |batch| {
        window.append(batch.tid, batch.name, batch.events, batch.dropped_after);
    });
}

/// A new directory under `parent` for the snapshot `trigger` fired:
/// `TIME-WHAT` (`20261125T231501.123-handle_get`), made here (`-2`, `-3`
/// ... added if that name is taken) and held open: the snapshot and its
/// [`TRIGGER_FILE`] are written through its descriptor. `parent` is
/// opened (made if missing) as every output directory is
/// ([`OutputDir`](fntrace_format::export::OutputDir): no link followed on
/// the way, refused if someone else could plant or swap names in it).
fn snapshot_dir(
    parent: &Path,
    trigger: &Trigger,
) -> Result<(OutputDir, String, TraceOutput), String> {
    let what = match trigger {
        Trigger::SlowCall { function, .. } | Trigger::SlowFuture { function, .. } => {
            file_name(function)
        }
        Trigger::Panic(_) => "panic".to_string(),
        Trigger::Signal(signo) => crate::sys::signal::name(*signo).to_string(),
    };
    let parent = OutputDir::open_or_make(parent).map_err(|e| e.to_string())?;
    let stem = format!("{}-{what}", utc_stamp(std::time::SystemTime::now()));
    for n in 1..1000 {
        let name = match n {
            1 => stem.clone(),
            n => format!("{stem}-{n}"),
        };
        if let Some(dir) = parent.make_new_dir(&name).map_err(|e| e.to_string())? {
            return Ok((parent, name, dir));
        }
    }
    Err(format!(
        "{}: 999 snapshots of that name",
        parent.path().join(stem).display()
    ))
}

/// `time` in UTC as `YYYYMMDDTHHMMSS.mmm`: sorts as time does.
fn utc_stamp(time: std::time::SystemTime) -> String {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:03}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// A threshold as the trigger syntax writes it: `5ms`, `250us`, `2s`.
pub(super) fn duration_spec(ns: u64) -> String {
    for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= scale && ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// The [`TRIGGER_FILE`] of a snapshot: what fired it, one line a trigger,
/// then the window (and, if it holds only the threads `tids`, which).
fn trigger_text(
    first: &Trigger,
    more: &[Trigger],
    report: &SnapshotReport,
    tids: Option<&[u32]>,
    skipped: u64,
) -> String {
    let mut text = String::from("fired by:\n");
    for trigger in std::iter::once(first).chain(more) {
        let line = match trigger {
            Trigger::SlowCall {
                function,
                duration,
                tid,
                start_ns,
                at_least,
                values,
            } => format!(
                "  slow call {function}{values}: thread {tid}, start {}, duration {}{}",
                timestamp(*start_ns),
                match at_least {
                    true => "at least ",
                    false => "",
                },
                human_duration(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
            ),
            Trigger::SlowFuture { .. } => super::futures::trigger_line(trigger, report),
            Trigger::Panic(message) => format!("  panic: {message}"),
            Trigger::Signal(signo) => format!("  signal {}", crate::sys::signal::name(*signo)),
        };
        text.push_str(&line);
        text.push('\n');
    }
    let window = match (report.first_ns, report.last_ns) {
        (Some(first), Some(last)) => format!(
            "{} ~ {} ({})",
            timestamp(first),
            timestamp(last),
            human_duration(last.saturating_sub(first))
        ),
        _ => "empty".to_string(),
    };
    text.push_str(&format!(
        "window: {window}, {} threads, {} events, {} lost\n",
        report.threads, report.events, report.lost
    ));
    if let Some(tids) = tids {
        let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
        text.push_str(&format!(
            "threads: only {}, the slow calls' (@trigger-thread); the others are left out\n",
            tids.join(", ")
        ));
    }
    if skipped > 0 {
        text.push_str(&format!(
            "skipped: {skipped} triggers so far (over the snapshots-per-minute limit)\n"
        ));
    }
    text.push_str(&super::futures::untracked_text());
    text
}

/// `name` with what does not belong in a file name made `_`, at most 100
/// characters.
fn file_name(name: &str) -> String {
    name.chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
