//! Flame graphs: folded stacks weighted by time ([`folded_stacks`]; of a
//! live profile's call tree: [`folded_stacks_of_profile`]), and SVG drawn by
//! `inferno` ([`write_flame_svg`]).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use super::calls::{stream_calls, CallEvent, Incomplete};
use super::ExportError;
use crate::analysis::ProfileSnapshot;
use fntrace_format::analysis::pairing::entries_of_calls_running_at_start;
use fntrace_format::{infallible, EventSource, Trace};

/// The folded stacks of `trace`, one line per call chain with its total self
/// time in nanoseconds.
///
/// A folded line is `outer;…;inner NANOSECONDS`: the chain of calls from the
/// outermost traced call of a thread down to a call, and that call's *self
/// time* (its duration minus its children's), summed over every call with the
/// same chain on every thread. Widths in the graph are therefore time, not
/// sample counts. Calls are reconstructed as described in
/// [`crate::export`] (calls without an exit end at the thread's last
/// timestamp). Chains with no self time are left out; a `;` in a function
/// name becomes `,` and line breaks become spaces, since `;` and line breaks
/// delimit the format. Lines are sorted.
pub fn folded_stacks(trace: &Trace) -> String {
    infallible(folded_stacks_of(trace, true)).0
}

/// The folded stacks of `trace` with each thread as the first frame
/// (`thread 1234 (name);outer;…;inner NANOSECONDS`), so that threads are
/// side by side in the graph instead of merged: a thread waiting in `join`
/// then takes its own part of the width, not a share of every chain.
pub fn folded_stacks_by_thread(trace: &Trace) -> String {
    infallible(folded_stacks_of(trace, false)).0
}

/// [`folded_stacks`] (`merge_threads`) or [`folded_stacks_by_thread`] of
/// any [`EventSource`], read thread by thread (twice each: a first pass
/// finds the calls running when tracing started), with what the graph had
/// to make up: events lost while recording, calls without an entry or an
/// exit ([`Incomplete`]). Memory is one node per distinct call chain, and
/// one entry per open call.
pub fn folded_stacks_of<S: EventSource>(
    source: &S,
    merge_threads: bool,
) -> Result<(String, Incomplete), S::Error> {
    let mut chains = Chains::default();
    let mut folded = String::new();
    let mut incomplete = Incomplete::default();
    for (index, thread) in source.threads().iter().enumerate() {
        chains.add_thread(source, index, &mut incomplete)?;
        if merge_threads {
            continue;
        }
        let frame = match &thread.name {
            Some(name) => format!("thread {} ({})", thread.tid, name.replace(';', ",")),
            None => format!("thread {}", thread.tid),
        };
        for line in chains.lines(source).lines() {
            folded.push_str(&frame);
            folded.push(';');
            folded.push_str(line);
            folded.push('\n');
        }
        chains = Chains::default();
    }
    if merge_threads {
        folded = chains.lines(source);
    }
    Ok((folded, incomplete))
}

/// The folded stacks of a live profile's call tree
/// ([`ProfileSnapshot::folded_stacks`]): one line per call path with its
/// self time in nanoseconds, all threads merged (the profile keeps no
/// per-thread tree), in the format of [`folded_stacks`]. Paths whose
/// chains of names are the same (functions of one name at several
/// addresses) are one line.
///
/// `keep` sees each chain (outermost first) and returns the part to draw,
/// or `None` to leave the path out: how a caller selects (see
/// `fntrace flame -F`).
pub fn folded_stacks_of_profile<'a>(
    snapshot: &'a ProfileSnapshot,
    keep: impl Fn(&[&'a str]) -> Option<usize>,
) -> String {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for (chain, self_ns) in snapshot.folded_stacks() {
        let Some(start) = keep(&chain) else {
            continue;
        };
        let names: Vec<String> = chain[start.min(chain.len())..]
            .iter()
            .map(|name| frame_name(name))
            .collect();
        if names.is_empty() {
            continue;
        }
        *lines.entry(names.join(";")).or_default() += self_ns;
    }
    let mut folded = String::new();
    for (chain, self_ns) in lines {
        folded.push_str(&format!("{chain} {self_ns}\n"));
    }
    folded
}

/// A tree of call chains: node 0 is the root (no call); each node is one
/// function under its parent, with the self time of its calls.
struct Chains {
    nodes: Vec<Node>,
    children: HashMap<(usize, usize), usize>,
}

struct Node {
    parent: usize,
    function: usize,
    self_ns: u64,
}

impl Default for Chains {
    fn default() -> Self {
        Chains {
            nodes: vec![Node {
                parent: 0,
                function: 0,
                self_ns: 0,
            }],
            children: HashMap::new(),
        }
    }
}

impl Chains {
    /// Adds the calls of thread `index` of `source`, counting in
    /// `incomplete` the events it lost and its calls without an entry or an
    /// exit.
    fn add_thread<S: EventSource>(
        &mut self,
        source: &S,
        index: usize,
        incomplete: &mut Incomplete,
    ) -> Result<(), S::Error> {
        let (made_up, _) =
            source.read_thread(index, |events| entries_of_calls_running_at_start(events))?;
        // Per open call: its node, and the summed durations of its children.
        let mut open: Vec<(usize, u64)> = Vec::new();
        let ((), lost) = source.read_thread(index, |events| {
            stream_calls(events, made_up, |event| match event {
                CallEvent::Opened(_, call) => {
                    let parent = open.last().map_or(0, |&(node, _)| node);
                    let next = self.nodes.len();
                    let node = *self.children.entry((parent, call.function)).or_insert(next);
                    if node == next {
                        self.nodes.push(Node {
                            parent,
                            function: call.function,
                            self_ns: 0,
                        });
                    }
                    open.push((node, 0));
                }
                CallEvent::Closed(_, call) => {
                    incomplete.count(call);
                    let (node, children_ns) = open.pop().expect("a call closes after it opened");
                    self.nodes[node].self_ns += call.duration().saturating_sub(children_ns);
                    if let Some(parent) = open.last_mut() {
                        parent.1 += call.duration();
                    }
                }
            })
        })?;
        incomplete.lost_events += lost;
        Ok(())
    }

    /// The folded lines, sorted, each ending with a line break.
    fn lines<S: EventSource>(&self, source: &S) -> String {
        let nodes = &self.nodes;
        let mut names: HashMap<usize, String> = HashMap::new();
        let mut lines = Vec::new();
        for k in 1..nodes.len() {
            if nodes[k].self_ns == 0 {
                continue;
            }
            let mut chain = Vec::new();
            let mut at = k;
            while at != 0 {
                let function = nodes[at].function;
                chain.push(
                    names
                        .entry(function)
                        .or_insert_with(|| frame_name(&source.name_of(function)))
                        .clone(),
                );
                at = nodes[at].parent;
            }
            chain.reverse();
            lines.push(format!("{} {}", chain.join(";"), nodes[k].self_ns));
        }
        lines.sort();
        let mut out = lines.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        out
    }
}

fn frame_name(name: &str) -> String {
    name.replace(';', ",").replace(['\n', '\r'], " ")
}

/// Draws `trace` as a flame graph in SVG (via `inferno`), from
/// [`folded_stacks`]; frame widths are self plus children time in
/// nanoseconds. Fails with [`ExportError::Empty`], writing nothing, if the
/// trace has no call that took time.
pub fn write_flame_svg(trace: &Trace, out: &mut dyn Write, title: &str) -> Result<(), ExportError> {
    write_folded_svg(&folded_stacks(trace), out, title)
}

/// Draws folded stacks (as [`folded_stacks`] or [`folded_stacks_by_thread`]
/// write them, weights in nanoseconds) as a flame graph in SVG, its
/// subtitle saying they are wall-clock time, blocked time included. Fails with
/// [`ExportError::Empty`], writing nothing, if `folded` has no line.
pub fn write_folded_svg(folded: &str, out: &mut dyn Write, title: &str) -> Result<(), ExportError> {
    if folded.is_empty() {
        return Err(ExportError::Empty(
            "the trace has no call that took time, so the flame graph would be empty",
        ));
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    // The widths are durations: says which time.
    options.subtitle = Some(format!(
        "widths: ns of {}",
        fntrace_format::analysis::WALL_TIME
    ));
    options.count_name = "ns".to_string();
    options.name_type = "Function:".to_string();
    // Colours by function name, the same from one graph to the next.
    options.hash = true;
    inferno::flamegraph::from_lines(&mut options, folded.lines(), out).map_err(|source| {
        ExportError::Output {
            what: "flame graph SVG",
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_format::{EventKind, ThreadTrace};

    use crate::analysis::tests::test_event as ev;
    use EventKind::{Entry as In, Exit as Out};

    fn sample() -> Trace {
        Trace {
            pid: 1,
            exe: "/bin/demo".into(),
            threads: vec![
                ThreadTrace {
                    tid: 1,
                    name: None,
                    events: vec![
                        ev(0, 0x10, 0, In),
                        ev(100, 0x20, 1, In),
                        ev(130, 0x30, 2, In),
                        ev(150, 0x30, 2, Out),
                        ev(200, 0x20, 1, Out),
                        ev(300, 0x40, 1, In),
                        ev(310, 0x40, 2, In),
                        ev(320, 0x40, 2, Out),
                        ev(400, 0x40, 1, Out),
                        ev(1000, 0x10, 0, Out),
                    ],
                    lost: 0,
                },
                ThreadTrace {
                    tid: 2,
                    name: None,
                    events: vec![
                        ev(0, 0x10, 0, In),
                        ev(10, 0x20, 1, In),
                        ev(60, 0x20, 1, Out),
                        ev(65, 0x50, 1, In), // no name, no exit: ends at 70
                        ev(70, 0x30, 2, In),
                        ev(70, 0x30, 2, Out),
                    ],
                    lost: 0,
                },
            ],
            names: [
                (0x10, "main"),
                (0x20, "mid"),
                (0x30, "leaf"),
                (0x40, "<[u8; 4] as Fib>::fib"),
            ]
            .into_iter()
            .map(|(a, n)| (a, n.to_string()))
            .collect(),
            maps: String::new(),
            ..Trace::default()
        }
    }

    #[test]
    fn folded_stacks_are_self_times_summed_per_chain() {
        // main (thread 1): 1000 - 100 (mid) - 100 (fib) = 800; thread 2: 70 -
        // 50 - 5 = 15 (ends at its last timestamp, 70).
        assert_eq!(
            folded_stacks(&sample()),
            "main 815\n\
             main;0x50 5\n\
             main;<[u8, 4] as Fib>::fib 90\n\
             main;<[u8, 4] as Fib>::fib;<[u8, 4] as Fib>::fib 10\n\
             main;mid 130\n\
             main;mid;leaf 20\n"
        );
    }

    #[test]
    fn flame_svg_names_the_functions() {
        let mut svg = Vec::new();
        write_flame_svg(&sample(), &mut svg, "demo <flame>").unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..100.min(svg.len())]);
        for name in [
            "main",
            "mid",
            "leaf",
            "&lt;[u8, 4] as Fib&gt;::fib",
            "demo &lt;flame&gt;",
        ] {
            assert!(svg.contains(name), "SVG lacks {name}");
        }
    }

    #[test]
    fn a_profile_folds_its_call_tree() {
        use crate::analysis::{FunctionProfile, PathProfile};
        let function = |name: &str| FunctionProfile {
            name: name.into(),
            ..FunctionProfile::default()
        };
        let path = |parent, function, self_ns| PathProfile {
            parent,
            function,
            calls: 1,
            total_ns: self_ns,
            self_ns,
        };
        let snapshot = ProfileSnapshot {
            // Two `helper`s (static functions of two files), one name.
            functions: vec![
                function("main"),
                function("helper"),
                function("helper"),
                function("a;b"),
            ],
            paths: vec![
                path(None, 0, 100),
                path(Some(0), 1, 7),
                path(Some(0), 2, 5),
                path(Some(2), 3, 1),
                path(Some(0), 3, 0),
            ],
            ..ProfileSnapshot::default()
        };
        assert_eq!(
            folded_stacks_of_profile(&snapshot, |_| Some(0)),
            "main 100\nmain;helper 12\nmain;helper;a,b 1\n"
        );
        // From the first `helper` down; the others left out.
        let from_helper = |chain: &[&str]| chain.iter().position(|&name| name == "helper");
        assert_eq!(
            folded_stacks_of_profile(&snapshot, from_helper),
            "helper 12\nhelper;a,b 1\n"
        );
    }

    #[test]
    fn empty_trace_has_no_flame_graph() {
        assert_eq!(folded_stacks(&Trace::default()), "");
        let mut svg = Vec::new();
        let err = write_flame_svg(&Trace::default(), &mut svg, "t").unwrap_err();
        assert!(matches!(err, ExportError::Empty(_)), "{err}");
        assert!(svg.is_empty());
    }
}
