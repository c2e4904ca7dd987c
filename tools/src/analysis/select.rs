//! Selections of a trace's calls, as uftrace's `-F`, `-N`, `--tid` and
//! `--time-range` make them: [`select`] returns the trace with only the
//! selected events, and [`Selected`] selects them as they are read, so that
//! every report and export applies a selection the same way by reading the
//! smaller trace.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use fntrace_format::glob::{closest, matches, matches_any};
use fntrace_format::{
    infallible, EventKind, EventSource, GraphEvent, ThreadInfo, ThreadTrace, Trace,
};

/// Which calls to keep; the default keeps everything.
///
/// Function globs follow the [glob rules](crate::glob#rules) and, as in
/// uftrace, select subtrees:
///
/// - with `include` globs, a call is kept only if it or one of its callers
///   matches one (`-F main` keeps `main` and everything it calls);
/// - a call that matches an `exclude` glob is dropped with everything it
///   calls (`-N '*::fmt'`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Keep only the subtrees of functions matching one of these globs
    /// (none: every call).
    pub include: Vec<String>,
    /// Drop the subtrees of functions matching one of these globs.
    pub exclude: Vec<String>,
    /// Keep only these threads (none: every thread).
    pub tids: Vec<u32>,
    /// Keep only calls entered at or after this time (ns, the trace's
    /// clock).
    pub from_ns: Option<u64>,
    /// Keep only calls entered at or before this time (ns).
    pub to_ns: Option<u64>,
    /// Keep only this many levels of calls, counted from the outermost kept
    /// call of each subtree, as uftrace's `-D` (1: only those outermost
    /// calls; 0 keeps nothing).
    pub depth: Option<u16>,
}

impl Selection {
    /// Whether the selection keeps every call.
    pub fn is_everything(&self) -> bool {
        *self == Selection::default()
    }
}

/// `trace` with only the events of the calls `selection` keeps.
///
/// An entry and its exit are kept or dropped together (exits are paired with
/// entries by depth, as the [pairing rules](super#pairing-entries-with-exits)
/// do); a thread's lost-event count is kept with the thread. Kept calls
/// keep their recorded depth, except with `depth`, where depths count
/// from the outermost call of each kept subtree (0) so that `-D` means what
/// it says inside a `-F` subtree. Names and symbols are kept as they are.
/// [`Selected`] does the same as events are read.
pub fn select(trace: &Trace, selection: &Selection) -> Trace {
    if selection.is_everything() {
        return trace.clone();
    }
    let selected = Selected::new(trace, selection);
    let threads = selected
        .threads
        .iter()
        .map(|&index| {
            let thread = &trace.threads[index];
            let (events, _) = infallible(selected.read_thread_at(index, |events| events.collect()));
            ThreadTrace {
                events,
                ..thread.clone()
            }
        })
        .collect();
    Trace {
        threads,
        ..trace.clone()
    }
}

/// The calls of `source` that a [`Selection`] keeps, as an [`EventSource`]
/// itself: threads are left out as `tids` says, and each thread's events
/// are selected as they are read, as [`select`] does; memory is one entry
/// per open call, and one per function seen (whether it matches the globs).
///
/// After reading, [`Selected::unmatched`] tells which globs selected no
/// function of the calls read, so that a typo is not taken for an empty
/// result.
#[derive(Debug)]
pub struct Selected<'a, S> {
    source: &'a S,
    selection: &'a Selection,
    /// Indices in `source` of the threads kept.
    threads: Vec<usize>,
    /// The functions entered in the events read so far, when the selection
    /// has globs (their names are needed then anyway).
    seen: Mutex<HashSet<usize>>,
}

/// A glob of a [`Selection`] that matched no function entered in the
/// events read ([`Selected::unmatched`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmatched {
    /// Whether it is an `exclude` glob (`-N`), not an `include` one (`-F`).
    pub exclude: bool,
    /// The glob.
    pub glob: String,
    /// Up to three names of functions that were entered, closest to the
    /// glob first ([`closest`](crate::glob::closest)).
    pub closest: Vec<String>,
}

impl<'a, S: EventSource> Selected<'a, S> {
    /// The calls of `source` that `selection` keeps.
    pub fn new(source: &'a S, selection: &'a Selection) -> Self {
        let threads = source
            .threads()
            .iter()
            .enumerate()
            .filter(|(_, thread)| selection.tids.is_empty() || selection.tids.contains(&thread.tid))
            .map(|(index, _)| index)
            .collect();
        Selected {
            source,
            selection,
            threads,
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// The include and exclude globs that matched no function entered in
    /// the events read so far (read every thread first), each with the
    /// names closest to it.
    pub fn unmatched(&self) -> Vec<Unmatched> {
        let names: Vec<String> = {
            let mut names: Vec<String> = self
                .seen
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .iter()
                .map(|&function| self.source.name_of(function))
                .collect();
            names.sort();
            names.dedup();
            names
        };
        let globs = (self.selection.include.iter().map(|glob| (false, glob)))
            .chain(self.selection.exclude.iter().map(|glob| (true, glob)));
        globs
            .filter(|(_, glob)| !names.iter().any(|name| matches(glob, name)))
            .map(|(exclude, glob)| Unmatched {
                exclude,
                glob: glob.clone(),
                closest: closest(glob, names.iter().map(String::as_str), 3)
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            })
            .collect()
    }

    /// Reads the thread of `source` at `index` (an index in `source`),
    /// selected.
    fn read_thread_at<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), S::Error> {
        let name_of = |function| self.source.name_of(function);
        self.source.read_thread(index, |events| {
            if self.selection.is_everything() {
                return read(events);
            }
            let mut selected = SelectedEvents {
                events,
                selection: self.selection,
                name_of: &name_of,
                matches: HashMap::new(),
                open: Vec::new(),
            };
            let value = read(&mut selected);
            // The functions whose names were matched: every one entered.
            self.seen
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .extend(selected.matches.keys());
            value
        })
    }
}

impl<S: EventSource> EventSource for Selected<'_, S> {
    type Error = S::Error;

    fn pid(&self) -> u32 {
        self.source.pid()
    }

    fn exe(&self) -> &str {
        self.source.exe()
    }

    fn threads(&self) -> Vec<ThreadInfo> {
        let all = self.source.threads();
        self.threads
            .iter()
            .map(|&index| all[index].clone())
            .collect()
    }

    fn name_of(&self, function: usize) -> String {
        self.source.name_of(function)
    }

    fn read_thread<R>(
        &self,
        index: usize,
        read: impl FnOnce(&mut dyn Iterator<Item = GraphEvent>) -> R,
    ) -> Result<(R, u64), S::Error> {
        self.read_thread_at(self.threads[index], read)
    }

    fn size_hint(&self, index: usize) -> u64 {
        self.source.size_hint(self.threads[index])
    }

    fn values_of(&self, index: usize) -> Result<fntrace_format::Values, S::Error> {
        self.source.values_of(self.threads[index])
    }
}

/// An entry seen and not yet exited, with what was decided for it.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// Recorded depth.
    depth: u16,
    /// Whether it or a caller matched an include glob.
    included: bool,
    /// Whether it or a caller matched an exclude glob.
    excluded: bool,
    /// Whether its events are kept.
    kept: bool,
    /// Whether it is in a kept subtree (kept, or left out only by `-D`).
    rooted: bool,
    /// Its depth in the output (with `depth`: counted from the outermost
    /// kept call).
    new_depth: u16,
}

/// The events of one thread that a selection keeps, as they are read.
struct SelectedEvents<'a, I: ?Sized> {
    selection: &'a Selection,
    name_of: &'a dyn Fn(usize) -> String,
    /// Per function: whether it matches an include glob, an exclude glob.
    matches: HashMap<usize, (bool, bool)>,
    /// Open calls, outermost first.
    open: Vec<Open>,
    events: &'a mut I,
}

impl<I: Iterator<Item = GraphEvent> + ?Sized> Iterator for SelectedEvents<'_, I> {
    type Item = GraphEvent;

    fn next(&mut self) -> Option<GraphEvent> {
        loop {
            let event = self.events.next()?;
            if let Some(kept) = self.read(event) {
                return Some(kept);
            }
        }
    }
}

impl<I: ?Sized> SelectedEvents<'_, I> {
    /// Whether `function` matches an include glob, an exclude glob.
    fn matches(&mut self, function: usize) -> (bool, bool) {
        let selection = self.selection;
        let name_of = self.name_of;
        *self.matches.entry(function).or_insert_with(|| {
            let name = name_of(function);
            let matches = |globs: &[String]| !globs.is_empty() && matches_any(globs, &name);
            (matches(&selection.include), matches(&selection.exclude))
        })
    }

    /// Reads one event; returns it (renumbered) if it is kept.
    fn read(&mut self, event: GraphEvent) -> Option<GraphEvent> {
        let selection = self.selection;
        let open = &mut self.open;
        // Calls at this depth or deeper have ended (an exit of this depth
        // ends the one at its depth, below).
        while open.last().is_some_and(|call| call.depth > event.depth) {
            open.pop();
        }
        match event.kind {
            EventKind::Entry => {
                if open.last().is_some_and(|call| call.depth == event.depth) {
                    open.pop();
                }
                let parent = open.last().copied();
                let needs_names = !selection.include.is_empty() || !selection.exclude.is_empty();
                let (include_match, exclude_match) = if needs_names {
                    self.matches(event.function)
                } else {
                    (false, false)
                };
                let included = parent.is_some_and(|p| p.included) || include_match;
                let excluded = parent.is_some_and(|p| p.excluded) || exclude_match;
                let in_time = selection.from_ns.is_none_or(|from| event.time_ns >= from)
                    && selection.to_ns.is_none_or(|to| event.time_ns <= to);
                let mut keep = (selection.include.is_empty() || included) && !excluded && in_time;
                // Depth below the outermost call of the kept subtree this
                // call is in (which a -D cut may have left out).
                let rooted_parent = parent.filter(|p| p.rooted);
                let rooted = keep || rooted_parent.is_some();
                let new_depth = rooted_parent.map_or(0, |p| p.new_depth.saturating_add(1));
                if let Some(levels) = selection.depth {
                    keep &= new_depth < levels;
                }
                self.open.push(Open {
                    depth: event.depth,
                    included,
                    excluded,
                    kept: keep,
                    rooted,
                    new_depth,
                });
                keep.then(|| renumbered(&event, new_depth, selection))
            }
            EventKind::Exit => {
                if open.last().is_some_and(|call| call.depth == event.depth) {
                    let call = open.pop().expect("checked");
                    call.kept
                        .then(|| renumbered(&event, call.new_depth, selection))
                } else if selection.include.is_empty()
                    && selection.exclude.is_empty()
                    && selection.depth.is_none()
                    && selection.from_ns.is_none()
                {
                    // An exit whose entry was not recorded: kept only when
                    // nothing depends on what its call was or when it began.
                    Some(event)
                } else {
                    None
                }
            }
        }
    }
}

/// `event` at its output depth: renumbered only under `depth`.
fn renumbered(event: &GraphEvent, new_depth: u16, selection: &Selection) -> GraphEvent {
    if selection.depth.is_some() {
        GraphEvent {
            depth: new_depth,
            ..*event
        }
    } else {
        *event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{entry, exit};

    const MAIN: usize = 0x10;
    const FMT: usize = 0x20;
    const WRITE: usize = 0x30;
    const WORK: usize = 0x40;

    /// main { fmt { write } work { write } }, plus main's unfinished call
    /// to work at the end.
    fn trace() -> Trace {
        Trace {
            threads: vec![
                ThreadTrace {
                    tid: 1,
                    events: vec![
                        entry(0, MAIN, 0),
                        entry(10, FMT, 1),
                        entry(20, WRITE, 2),
                        exit(30, WRITE, 2),
                        exit(40, FMT, 1),
                        entry(50, WORK, 1),
                        entry(60, WRITE, 2),
                        exit(70, WRITE, 2),
                        exit(80, WORK, 1),
                        exit(90, MAIN, 0),
                        entry(100, WORK, 0),
                    ],
                    ..ThreadTrace::default()
                },
                ThreadTrace {
                    tid: 2,
                    events: vec![entry(5, WORK, 0), exit(6, WORK, 0)],
                    ..ThreadTrace::default()
                },
            ],
            names: [
                (MAIN, "demo::main".to_string()),
                (FMT, "<demo::Token as core::fmt::Display>::fmt".to_string()),
                (WRITE, "std::io::write".to_string()),
                (WORK, "demo::work".to_string()),
            ]
            .into(),
            ..Trace::default()
        }
    }

    fn times(trace: &Trace, tid: u32) -> Vec<u64> {
        let thread = trace.threads.iter().find(|t| t.tid == tid).unwrap();
        thread.events.iter().map(|e| e.time_ns).collect()
    }

    #[test]
    fn everything_is_the_trace() {
        assert_eq!(select(&trace(), &Selection::default()), trace());
    }

    #[test]
    fn include_keeps_subtrees_and_exclude_drops_them() {
        let only_work = Selection {
            include: vec!["*::work".into()],
            ..Selection::default()
        };
        assert_eq!(
            times(&select(&trace(), &only_work), 1),
            [50, 60, 70, 80, 100]
        );
        // The glob rules: a trait impl of a demo type is under demo::*.
        let no_fmt = Selection {
            exclude: vec!["core::fmt::*".into()],
            ..Selection::default()
        };
        assert_eq!(
            times(&select(&trace(), &no_fmt), 1),
            [0, 50, 60, 70, 80, 90, 100]
        );
    }

    #[test]
    fn globs_that_match_nothing_are_told_with_the_closest_names() {
        let trace = trace();
        let selection = Selection {
            include: vec!["work".into(), "no_such_function".into()],
            exclude: vec!["wirte".into(), "fmt".into()],
            ..Selection::default()
        };
        let selected = Selected::new(&trace, &selection);
        // Nothing read yet: nothing matched.
        assert_eq!(selected.unmatched().len(), 4);
        for index in 0..selected.threads().len() {
            infallible(selected.read_thread(index, |events| events.count()));
        }
        let unmatched = selected.unmatched();
        assert_eq!(
            unmatched
                .iter()
                .map(|u| (u.exclude, u.glob.as_str()))
                .collect::<Vec<_>>(),
            [(false, "no_such_function"), (true, "wirte")]
        );
        assert_eq!(unmatched[1].closest[0], "std::io::write");
        assert_eq!(unmatched[1].closest.len(), 3);
        // The bare name `work` selected demo::work's subtree.
        assert_eq!(times(&select(&trace, &selection), 2), [5, 6]);
    }

    #[test]
    fn tids_time_and_depth() {
        let selected = select(
            &trace(),
            &Selection {
                tids: vec![2],
                ..Selection::default()
            },
        );
        assert_eq!(selected.threads.len(), 1);
        assert_eq!(times(&selected, 2), [5, 6]);
        let late = Selection {
            from_ns: Some(45),
            to_ns: Some(95),
            ..Selection::default()
        };
        assert_eq!(times(&select(&trace(), &late), 1), [50, 60, 70, 80]);
        // -D 1: the outermost level only, as uftrace's.
        let shallow = Selection {
            include: vec!["demo::work".into()],
            depth: Some(1),
            ..Selection::default()
        };
        let selected = select(&trace(), &shallow);
        assert_eq!(times(&selected, 1), [50, 80, 100]);
        assert!(selected.threads[0].events.iter().all(|e| e.depth == 0));
        let two = Selection {
            depth: Some(2),
            ..Selection::default()
        };
        assert_eq!(
            times(&select(&trace(), &two), 1),
            [0, 10, 40, 50, 80, 90, 100]
        );
    }
}
