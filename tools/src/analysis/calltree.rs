//! The aggregated call graph, as `uftrace graph` computes and prints it:
//! every distinct call path once, with how often it was taken and the time
//! spent in it. See [`call_tree`] and [`CallTree::write_text`].

use std::io::{self, Write};

use std::cell::Cell;

use super::pairing::{duration_ns, CallStep, Calls, Reading};
use crate::glob;
use crate::source::{infallible, EventSource};
use crate::trace::{GraphEvent, Trace};

/// One call path: a function called from the path of its parent node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallNode {
    /// The function's name.
    pub name: String,
    /// Calls along this path (an unfinished call counts).
    pub calls: u64,
    /// Their summed durations, callees included. A call without its exit
    /// counts until the event that showed it had ended, or, if the trace
    /// ended first, until the thread's last event (as uftrace does).
    pub total_ns: u64,
    /// The functions called on this path, in the order first called
    /// (by time, all threads merged, as uftrace orders them).
    pub children: Vec<CallNode>,
    /// When the path was first taken: the earliest entry's timestamp.
    pub first_entry_ns: u64,
}

impl CallNode {
    fn new(name: &str) -> Self {
        CallNode {
            name: name.to_string(),
            ..CallNode::default()
        }
    }

    /// Index of the child called `name`, entered at `time_ns`: added if
    /// new, its first entry kept the earliest.
    fn child(&mut self, name: &str, time_ns: u64) -> usize {
        match self.children.iter().position(|child| child.name == name) {
            Some(index) => {
                let child = &mut self.children[index];
                child.first_entry_ns = child.first_entry_ns.min(time_ns);
                index
            }
            None => {
                self.children.push(CallNode {
                    first_entry_ns: time_ns,
                    ..CallNode::new(name)
                });
                self.children.len() - 1
            }
        }
    }

    /// Orders every node's children by first entry. Threads are read one
    /// after another, so a later thread's earlier path would otherwise come
    /// after an earlier thread's later one; uftrace reads all threads
    /// merged by time. The sort is stable: ties keep the reading order.
    fn order_by_first_entry(&mut self) {
        self.children.sort_by_key(|child| child.first_entry_ns);
        for child in &mut self.children {
            child.order_by_first_entry();
        }
    }

    /// The node at `path` (child indexes from this node).
    fn at(&mut self, path: &[usize]) -> &mut CallNode {
        path.iter()
            .fold(self, |node, &index| &mut node.children[index])
    }
}

/// The chain of callers of the function a [`CallTree`] is rooted at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backtrace {
    /// The names of the callers, outermost first, ending with the function.
    pub frames: Vec<String>,
    /// Calls of the function from this chain.
    pub hits: u64,
    /// Their summed durations.
    pub total_ns: u64,
    /// When the chain was first seen: its first call's entry timestamp.
    pub first_seen_ns: u64,
}

/// An aggregated call graph; see [`call_tree`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallTree {
    /// The root: the program (named after the executable, one call, the
    /// summed time of the outermost calls), or the function asked for.
    pub root: CallNode,
    /// Whether the tree is rooted at a function (then `backtraces` says
    /// where it was called from).
    pub for_function: bool,
    /// With a function: the distinct chains of callers it was reached by,
    /// most recently first seen first (uftrace's order).
    pub backtraces: Vec<Backtrace>,
}

/// The aggregated call graph of `trace`, all threads merged, as
/// `uftrace graph` computes it.
///
/// Without `function`, the root stands for the program and its children are
/// the threads' outermost calls. With `function` (a [glob](crate::glob)),
/// the root stands for the calls of the matching functions that are not
/// inside another such call: its `calls` counts them, its `total_ns` sums
/// their durations, and its children are what they called.
///
/// Calls are paired by the [rules](super#pairing-entries-with-exits) of the
/// reports; exits without an entry are left out.
pub fn call_tree(trace: &Trace, function: Option<&str>) -> CallTree {
    infallible(call_tree_of(trace, function))
}

/// [`call_tree`] of any [`EventSource`], read thread by thread, each once:
/// memory is one node per distinct call path and one entry per open call.
pub fn call_tree_of<S: EventSource>(
    source: &S,
    function: Option<&str>,
) -> Result<CallTree, S::Error> {
    let exe = source.exe().rsplit('/').next().unwrap_or_default();
    let mut tree = CallTree {
        root: CallNode::new(function.unwrap_or(exe)),
        for_function: function.is_some(),
        backtraces: Vec::new(),
    };
    for index in 0..source.threads().len() {
        source.read_thread(index, |events| {
            add_thread(&mut tree, source, function, events);
        })?;
    }
    tree.root.order_by_first_entry();
    // Newest first, all threads merged by time (stable: within a thread
    // the reading order already is newest first).
    tree.backtraces
        .sort_by_key(|backtrace| std::cmp::Reverse(backtrace.first_seen_ns));
    if !tree.for_function {
        tree.root.calls = 1;
        tree.root.total_ns = tree.root.children.iter().map(|child| child.total_ns).sum();
    }
    Ok(tree)
}

/// Adds the calls of one thread's `events` to `tree`.
fn add_thread<S: EventSource>(
    tree: &mut CallTree,
    source: &S,
    function: Option<&str>,
    events: &mut dyn Iterator<Item = GraphEvent>,
) {
    // The latest timestamp read: calls still open at the end count
    // until there.
    let last = Cell::new(0u64);
    let events = events.inspect(|event| last.set(last.get().max(event.time_ns)));
    // Per open call, outermost first: its node's path from the root
    // (None: outside the tree, before the function was reached), and
    // its name.
    let mut open: Vec<(Option<Vec<usize>>, String)> = Vec::new();
    // Which backtrace the open call of the function (the root) counts to.
    let mut backtrace: Option<usize> = None;
    for step in Calls::streaming(events, Vec::new(), Reading::Reports) {
        let duration = match step {
            CallStep::Entered { entry, .. } => {
                let name = source.name_of(entry.function);
                let parent = match open.last() {
                    Some((path, _)) => path.clone(),
                    // An outermost call: in the program's tree, or the
                    // function's if it is the one.
                    None if function.is_none() => Some(Vec::new()),
                    None => None,
                };
                let path = if let Some(mut path) = parent {
                    let node = tree.root.at(&path);
                    let index = node.child(&name, entry.time_ns);
                    node.children[index].calls += 1;
                    path.push(index);
                    Some(path)
                } else if function.is_some_and(|glob_text| glob::matches(glob_text, &name)) {
                    tree.root.calls += 1;
                    let mut frames: Vec<String> =
                        open.iter().map(|(_, name)| name.clone()).collect();
                    frames.push(name.clone());
                    backtrace = Some(backtrace_index(&mut tree.backtraces, frames, entry.time_ns));
                    Some(Vec::new())
                } else {
                    None
                };
                open.push((path, name));
                continue;
            }
            CallStep::Returned { entry, exit, .. } => duration_ns(&entry, &exit),
            CallStep::Unfinished { entry, unwound_by } => {
                let end = unwound_by.map_or(last.get(), |event| event.time_ns);
                end.saturating_sub(entry.time_ns)
            }
            CallStep::UnmatchedExit { .. } => continue,
        };
        let (path, _) = open.pop().expect("a call ends only after it was entered");
        if let Some(path) = path {
            let node = tree.root.at(&path);
            node.total_ns = node.total_ns.saturating_add(duration);
            if path.is_empty() {
                if let Some(index) = backtrace.take() {
                    let trace = &mut tree.backtraces[index];
                    trace.total_ns = trace.total_ns.saturating_add(duration);
                }
            }
        }
    }
}

/// Index in `backtraces` of the one with `frames` (added first if new, as
/// uftrace lists the newest first, seen at `time_ns`), its hits counted.
fn backtrace_index(backtraces: &mut Vec<Backtrace>, frames: Vec<String>, time_ns: u64) -> usize {
    let index = match backtraces.iter().position(|b| b.frames == frames) {
        Some(index) => index,
        None => {
            backtraces.insert(
                0,
                Backtrace {
                    frames,
                    first_seen_ns: time_ns,
                    ..Backtrace::default()
                },
            );
            0
        }
    };
    backtraces[index].hits += 1;
    index
}

impl CallTree {
    /// Writes the tree as `uftrace graph` prints it (0.13, default fields):
    ///
    /// ```text
    /// # Function Call Graph for 'outer'
    /// =============== BACKTRACE ===============
    ///  backtrace #0: hit 2, time   3.696 us
    ///    [0] main
    ///    [1] outer
    ///
    /// ========== FUNCTION CALL GRAPH ==========
    /// # TOTAL TIME   FUNCTION
    ///     3.696 us : (2) outer
    ///     3.157 us :  +-(6) inner
    ///     0.930 us :  | (24) leaf
    ///              :  |
    ///     0.040 us :  +-(1) leaf
    /// ```
    ///
    /// Each line is a node: its total time, `(calls) name`. A node with
    /// several children opens branches (`+-`), separated by `|` lines; an
    /// only child goes straight below its parent. Times are truncated to
    /// three decimals of us, ms or s; a zero time is left blank. Unlike
    /// uftrace, no session id and no addresses are shown (fntrace keeps
    /// neither).
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "# Function Call Graph for '{}'", self.root.name)?;
        if self.for_function && !self.backtraces.is_empty() {
            writeln!(out, "=============== BACKTRACE ===============")?;
            for (number, backtrace) in self.backtraces.iter().enumerate() {
                writeln!(
                    out,
                    " backtrace #{number}: hit {}, time {}",
                    backtrace.hits,
                    uftrace_time(backtrace.total_ns)
                )?;
                for (depth, frame) in backtrace.frames.iter().enumerate() {
                    writeln!(out, "   [{depth}] {frame}")?;
                }
                writeln!(out)?;
            }
        }
        if self.root.calls == 0 && self.root.children.is_empty() {
            return Ok(());
        }
        writeln!(out, "========== FUNCTION CALL GRAPH ==========")?;
        writeln!(out, "# TOTAL TIME   FUNCTION")?;
        let mut mask = Vec::new();
        let mut printer = TreePrinter {
            out,
            mask: &mut mask,
        };
        printer.node(&self.root, None, 0, self.root.children.len() > 1)?;
        writeln!(printer.out)
    }

    /// [`write_text`](Self::write_text) as a string.
    pub fn text(&self) -> String {
        let mut text = Vec::new();
        self.write_text(&mut text)
            .expect("writing to a Vec<u8> does not fail");
        String::from_utf8(text).expect("names are Rust strings")
    }
}

/// The state of printing a tree: where branch lines (`|`) continue.
struct TreePrinter<'a> {
    out: &'a mut dyn Write,
    /// Per indentation level, whether a branch line runs through it.
    mask: &'a mut Vec<bool>,
}

impl TreePrinter<'_> {
    /// The indentation of a line at `indent` levels; `branch`: the line of
    /// a node that opens a branch (`+-`) at the last level with a line.
    fn indent(&mut self, indent: usize, branch: bool) -> io::Result<()> {
        if self.mask.len() < indent + 1 {
            self.mask.resize(indent + 1, false);
        }
        let last = if branch {
            (0..indent).rev().find(|&level| self.mask[level])
        } else {
            None
        };
        for level in 0..indent {
            let piece = match last {
                Some(last) if level == last => " +-",
                Some(last) if level > last => "---",
                _ if self.mask[level] => " | ",
                _ => "   ",
            };
            self.out.write_all(piece.as_bytes())?;
        }
        Ok(())
    }

    /// Prints `node` (whose parent is `parent`, if any) and its subtree at
    /// `indent` levels.
    fn node(
        &mut self,
        node: &CallNode,
        parent: Option<&CallNode>,
        indent: usize,
        branch: bool,
    ) -> io::Result<()> {
        write!(self.out, "  {} : ", uftrace_time(node.total_ns))?;
        self.indent(indent, branch)?;
        writeln!(self.out, "({}) {}", node.calls, node.name)?;
        let mut child_indent = indent;
        if node.children.len() > 1 {
            self.mask[indent] = true;
            child_indent += 1;
        }
        if self.mask.len() < child_indent + 1 {
            self.mask.resize(child_indent + 1, false);
        }
        // The last of several siblings ends its parent's branch line.
        if let Some(parent) = parent {
            let is_last = std::ptr::eq(parent.children.last().expect("a child"), node);
            if parent.children.len() > 1 && indent > 0 && is_last {
                self.mask[indent - 1] = false;
            }
        }
        let branches = node.children.len() > 1;
        for (index, child) in node.children.iter().enumerate() {
            self.node(child, Some(node), child_indent, branches)?;
            if index + 1 < node.children.len() {
                write!(self.out, "  {:10} : ", "")?;
                self.indent(child_indent, false)?;
                writeln!(self.out)?;
            }
        }
        self.mask[indent] = false;
        Ok(())
    }
}

/// `ns` as uftrace prints a time: ten characters, three decimals of the
/// largest of us, ms and s that keeps the integer part below 1000
/// (truncated); blank for zero.
fn uftrace_time(ns: u64) -> String {
    if ns == 0 {
        return " ".repeat(10);
    }
    let (mut whole, mut fraction) = (ns / 1_000, ns % 1_000);
    let mut unit = "us";
    for next in ["ms", " s"] {
        if whole < 1_000 {
            break;
        }
        (whole, fraction) = (whole / 1_000, whole % 1_000);
        unit = next;
    }
    format!("{whole:>3}.{fraction:03} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::tests::{entry, exit};
    use crate::trace::ThreadTrace;

    const MAIN: usize = 0x10;
    const OUTER: usize = 0x20;
    const INNER: usize = 0x30;
    const LEAF: usize = 0x40;

    /// main { outer { inner { leaf } inner { leaf } } leaf }, then main
    /// again, still running when the trace ends.
    fn trace() -> Trace {
        Trace {
            exe: "/bin/t".into(),
            threads: vec![ThreadTrace {
                tid: 1,
                events: vec![
                    entry(0, MAIN, 0),
                    entry(1_000, OUTER, 1),
                    entry(2_000, INNER, 2),
                    entry(2_500, LEAF, 3),
                    exit(2_600, LEAF, 3),
                    exit(3_000, INNER, 2),
                    entry(4_000, INNER, 2),
                    entry(4_500, LEAF, 3),
                    exit(4_600, LEAF, 3),
                    exit(5_000, INNER, 2),
                    exit(6_000, OUTER, 1),
                    entry(7_000, LEAF, 1),
                    exit(7_040, LEAF, 1),
                    exit(8_000, MAIN, 0),
                    entry(9_000, MAIN, 0),
                    entry(9_500, OUTER, 1),
                    exit(9_700, OUTER, 1),
                ],
                ..ThreadTrace::default()
            }],
            names: [
                (MAIN, "main".to_string()),
                (OUTER, "outer".to_string()),
                (INNER, "inner".to_string()),
                (LEAF, "leaf".to_string()),
            ]
            .into(),
            ..Trace::default()
        }
    }

    #[test]
    fn the_whole_program_in_uftrace_format() {
        let tree = call_tree(&trace(), None);
        // The unfinished main counts until the thread's last event.
        assert_eq!(tree.root.children[0].calls, 2);
        assert_eq!(tree.root.children[0].total_ns, 8_000 + 700);
        assert_eq!(
            tree.text(),
            "\
# Function Call Graph for 't'
========== FUNCTION CALL GRAPH ==========
# TOTAL TIME   FUNCTION
    8.700 us : (1) t
    8.700 us : (2) main
    5.200 us :  +-(2) outer
    2.000 us :  | (2) inner
    0.200 us :  | (2) leaf
             :  | 
    0.040 us :  +-(1) leaf

"
        );
    }

    #[test]
    fn one_function_with_its_backtraces() {
        let tree = call_tree(&trace(), Some("inner"));
        assert_eq!(
            tree.text(),
            "\
# Function Call Graph for 'inner'
=============== BACKTRACE ===============
 backtrace #0: hit 2, time   2.000 us
   [0] main
   [1] outer
   [2] inner

========== FUNCTION CALL GRAPH ==========
# TOTAL TIME   FUNCTION
    2.000 us : (2) inner
    0.200 us : (2) leaf

"
        );
    }

    /// Two threads, the one read second started first: its paths come
    /// first, as uftrace (which reads all threads merged by time) lists
    /// them, and its backtrace, seen first, is listed last.
    #[test]
    fn threads_are_merged_by_time() {
        let thread = |tid, start, function| ThreadTrace {
            tid,
            events: vec![
                entry(start, function, 0),
                entry(start + 10, LEAF, 1),
                exit(start + 20, LEAF, 1),
                exit(start + 30, function, 0),
            ],
            ..ThreadTrace::default()
        };
        let trace = Trace {
            exe: "/bin/t".into(),
            threads: vec![thread(1, 5_000, OUTER), thread(2, 1_000, INNER)],
            names: [
                (OUTER, "outer".to_string()),
                (INNER, "inner".to_string()),
                (LEAF, "leaf".to_string()),
            ]
            .into(),
            ..Trace::default()
        };
        let tree = call_tree(&trace, None);
        let names: Vec<&str> = tree.root.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["inner", "outer"]);
        assert_eq!(tree.root.children[0].first_entry_ns, 1_000);
        let tree = call_tree(&trace, Some("leaf"));
        let callers: Vec<&str> = tree
            .backtraces
            .iter()
            .map(|b| b.frames[0].as_str())
            .collect();
        assert_eq!(callers, ["outer", "inner"]);
    }

    #[test]
    fn times_as_uftrace_prints_them() {
        assert_eq!(uftrace_time(0), "          ");
        assert_eq!(uftrace_time(3_696), "  3.696 us");
        assert_eq!(uftrace_time(12_345_678), " 12.345 ms");
        assert_eq!(uftrace_time(1_500_000_000), "  1.500  s");
    }
}
