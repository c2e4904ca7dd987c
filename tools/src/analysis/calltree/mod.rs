//! The aggregated call graph, as `uftrace graph` computes and prints it:
//! every distinct call path once, with how often it was taken and the time
//! spent in it. See [`call_tree`] and [`CallTree::write_text`].

use std::io::{self, Write};

use std::cell::Cell;

use rustc_hash::FxHashMap as HashMap;

use fntrace_format::analysis::pairing::{duration_ns, CallStep, Calls, Reading};
use fntrace_format::analysis::Shortfall;
use fntrace_format::glob;
use fntrace_format::{infallible, EventSource, GraphEvent, Trace};

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
    /// What the trace lacks (lost events, calls without an exit), counted
    /// on the same pass: said above the graph.
    pub shortfall: Shortfall,
    /// The names of every function entered, sorted: what a function glob
    /// is matched against.
    pub functions: Vec<String>,
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

/// [`call_tree`] of any [`EventSource`], each thread read once into a tree
/// of its own, merged in the trace's thread order into the tree one reading
/// after another would build: memory is one node per distinct call path per
/// thread and one entry per open call. (For threads read side by side, see
/// [`parallel::call_tree_of`](super::parallel::call_tree_of).)
pub fn call_tree_of<S: EventSource>(
    source: &S,
    function: Option<&str>,
) -> Result<CallTree, S::Error> {
    let per_thread = fntrace_format::analysis::threads::map_threads_here(source, |_, events| {
        TreeBuilder::of_thread(source, function, events)
    })?;
    Ok(call_tree_from(source, function, per_thread))
}

/// The tree of `source` whose threads' trees, in thread order, are
/// `per_thread` (with each thread's lost events).
pub(super) fn call_tree_from<S: EventSource>(
    source: &S,
    function: Option<&str>,
    per_thread: Vec<(TreeBuilder<'_>, u64)>,
) -> CallTree {
    let exe = source.exe().rsplit('/').next().unwrap_or_default();
    let mut builder = TreeBuilder::new(function);
    for (thread, (other, lost)) in source.threads().into_iter().zip(per_thread) {
        builder.merge(other);
        if lost > 0 {
            builder.shortfall.lost_events += lost;
            builder.shortfall.lost_by_thread.push((thread.tid, lost));
        }
    }
    let mut tree = builder.finish(function.unwrap_or(exe));
    if !tree.for_function {
        tree.root.calls = 1;
        tree.root.total_ns = tree.root.children.iter().map(|child| child.total_ns).sum();
    }
    tree
}

/// Index of a node in [`TreeBuilder::nodes`]; the root is 0.
type NodeIndex = u32;

/// Index of a distinct function name in [`TreeBuilder::names`].
type NameIndex = u32;

/// A node while the tree is built: names and children by index, so an
/// event costs hash lookups, not string copies and path walks.
struct BuildNode {
    name: NameIndex,
    calls: u64,
    total_ns: u64,
    first_entry_ns: u64,
    children: Vec<NodeIndex>,
}

/// A backtrace while the tree is built.
struct BuildBacktrace {
    frames: Vec<NameIndex>,
    hits: u64,
    total_ns: u64,
    first_seen_ns: u64,
}

/// Builds a [`CallTree`] from the threads' events, one thread after
/// another, then orders it as uftrace does (see [`TreeBuilder::finish`]).
pub(super) struct TreeBuilder<'a> {
    /// The glob the tree is rooted at, if any.
    function: Option<&'a str>,
    nodes: Vec<BuildNode>,
    /// (parent, name) → child.
    child_of: HashMap<(NodeIndex, NameIndex), NodeIndex>,
    names: Vec<String>,
    name_of: HashMap<String, NameIndex>,
    /// Function address → its name's index (addresses of one name share it).
    function_name: HashMap<usize, NameIndex>,
    /// Per name: whether it matches `function` (`None`: not yet asked).
    matches: Vec<Option<bool>>,
    backtraces: Vec<BuildBacktrace>,
    backtrace_of: HashMap<Vec<NameIndex>, usize>,
    root_calls: u64,
    root_total_ns: u64,
    /// Lost events and calls without an exit (counted by name index in
    /// `unfinished`).
    shortfall: Shortfall,
    /// Per name index, its calls without an exit.
    unfinished: Vec<u64>,
}

impl<'a> TreeBuilder<'a> {
    fn new(function: Option<&'a str>) -> Self {
        TreeBuilder {
            function,
            nodes: vec![BuildNode {
                name: 0,
                calls: 0,
                total_ns: 0,
                first_entry_ns: 0,
                children: Vec::new(),
            }],
            child_of: HashMap::default(),
            names: Vec::new(),
            name_of: HashMap::default(),
            function_name: HashMap::default(),
            matches: Vec::new(),
            backtraces: Vec::new(),
            backtrace_of: HashMap::default(),
            root_calls: 0,
            root_total_ns: 0,
            shortfall: Shortfall::default(),
            unfinished: Vec::new(),
        }
    }

    /// The tree of one thread's `events`.
    pub(super) fn of_thread<S: EventSource>(
        source: &S,
        function: Option<&'a str>,
        events: &mut dyn Iterator<Item = GraphEvent>,
    ) -> Self {
        let mut builder = TreeBuilder::new(function);
        builder.add_thread(source, events);
        builder
    }

    /// The name index of `function` (an address), asked of `source` once.
    fn name<S: EventSource>(&mut self, source: &S, function: usize) -> NameIndex {
        if let Some(&name) = self.function_name.get(&function) {
            return name;
        }
        let text = source.name_of(function);
        let name = match self.name_of.get(&text) {
            Some(&name) => name,
            None => {
                let name = self.names.len() as NameIndex;
                self.name_of.insert(text.clone(), name);
                self.names.push(text);
                self.matches.push(None);
                self.unfinished.push(0);
                name
            }
        };
        self.function_name.insert(function, name);
        name
    }

    /// Whether `name` is the function the tree is rooted at.
    fn is_the_function(&mut self, name: NameIndex) -> bool {
        let Some(glob_text) = self.function else {
            return false;
        };
        *self.matches[name as usize]
            .get_or_insert_with(|| glob::matches(glob_text, &self.names[name as usize]))
    }

    /// The child of `parent` called `name`, entered at `time_ns`: added if
    /// new, its first entry kept the earliest; its calls counted.
    fn enter_child(&mut self, parent: NodeIndex, name: NameIndex, time_ns: u64) -> NodeIndex {
        let next = self.nodes.len() as NodeIndex;
        let child = *self.child_of.entry((parent, name)).or_insert(next);
        if child == next {
            self.nodes.push(BuildNode {
                name,
                calls: 0,
                total_ns: 0,
                first_entry_ns: time_ns,
                children: Vec::new(),
            });
            self.nodes[parent as usize].children.push(child);
        }
        let node = &mut self.nodes[child as usize];
        node.first_entry_ns = node.first_entry_ns.min(time_ns);
        node.calls += 1;
        child
    }

    /// Counts a hit of the backtrace `frames`, seen at `time_ns`.
    fn hit_backtrace(&mut self, frames: Vec<NameIndex>, time_ns: u64) -> usize {
        let next = self.backtraces.len();
        let index = *self.backtrace_of.entry(frames.clone()).or_insert(next);
        if index == next {
            self.backtraces.push(BuildBacktrace {
                frames,
                hits: 0,
                total_ns: 0,
                first_seen_ns: time_ns,
            });
        }
        self.backtraces[index].hits += 1;
        index
    }

    /// Adds the calls of one thread's `events`.
    fn add_thread<S: EventSource>(
        &mut self,
        source: &S,
        events: &mut dyn Iterator<Item = GraphEvent>,
    ) {
        // The latest timestamp read: calls still open at the end count
        // until there.
        let last = Cell::new(0u64);
        let events = events.inspect(|event| last.set(last.get().max(event.time_ns)));
        // Per open call, outermost first: its node (None: outside the
        // tree, before the function was reached), and its name.
        let mut open: Vec<(Option<NodeIndex>, NameIndex)> = Vec::new();
        // Which backtrace the open call of the function (the root) counts to.
        let mut backtrace: Option<usize> = None;
        for step in Calls::streaming(events, Vec::new(), Reading::Reports) {
            let duration = match step {
                CallStep::Entered { entry, .. } => {
                    let name = self.name(source, entry.function);
                    let parent = match open.last() {
                        Some(&(node, _)) => node,
                        // An outermost call: in the program's tree, or the
                        // function's if it is the one.
                        None if self.function.is_none() => Some(0),
                        None => None,
                    };
                    let node = if let Some(parent) = parent {
                        Some(self.enter_child(parent, name, entry.time_ns))
                    } else if self.is_the_function(name) {
                        self.root_calls += 1;
                        let mut frames: Vec<NameIndex> =
                            open.iter().map(|&(_, name)| name).collect();
                        frames.push(name);
                        backtrace = Some(self.hit_backtrace(frames, entry.time_ns));
                        Some(0)
                    } else {
                        None
                    };
                    open.push((node, name));
                    continue;
                }
                CallStep::Returned { entry, exit, .. } => duration_ns(&entry, &exit),
                CallStep::Unfinished { entry, unwound_by } => {
                    self.shortfall.unfinished_calls += 1;
                    if unwound_by.is_some() {
                        self.shortfall.unwound_calls += 1;
                    } else {
                        self.shortfall.still_running_calls += 1;
                    }
                    let end = unwound_by.map_or(last.get(), |event| event.time_ns);
                    end.saturating_sub(entry.time_ns)
                }
                CallStep::UnmatchedExit { .. } => continue,
            };
            let (node, name) = open.pop().expect("a call ends only after it was entered");
            if matches!(step, CallStep::Unfinished { .. }) {
                self.unfinished[name as usize] += 1;
            }
            match node {
                Some(0) => {
                    self.root_total_ns = self.root_total_ns.saturating_add(duration);
                    if let Some(index) = backtrace.take() {
                        let trace = &mut self.backtraces[index];
                        trace.total_ns = trace.total_ns.saturating_add(duration);
                    }
                }
                Some(node) => {
                    let node = &mut self.nodes[node as usize];
                    node.total_ns = node.total_ns.saturating_add(duration);
                }
                None => {}
            }
        }
    }

    /// Adds `other`'s calls (another thread's, read after this builder's),
    /// as if its events had been read by this builder: nodes and backtraces
    /// new here are appended in the order `other` made them, so ties in
    /// the final sorts fall as they would reading one thread after another.
    fn merge(&mut self, other: TreeBuilder<'_>) {
        let name_map: Vec<NameIndex> = (other.names.iter().enumerate())
            .map(|(index, text)| match self.name_of.get(text) {
                Some(&name) => {
                    self.unfinished[name as usize] += other.unfinished[index];
                    name
                }
                None => {
                    let name = self.names.len() as NameIndex;
                    self.name_of.insert(text.clone(), name);
                    self.names.push(text.clone());
                    self.matches.push(other.matches[index]);
                    self.unfinished.push(other.unfinished[index]);
                    name
                }
            })
            .collect();
        // Every node is made after its parent: in `other`'s order, a
        // node's parent is mapped before the node is.
        let mut parent_of: Vec<NodeIndex> = vec![0; other.nodes.len()];
        for (index, node) in other.nodes.iter().enumerate() {
            for &child in &node.children {
                parent_of[child as usize] = index as NodeIndex;
            }
        }
        let mut node_map: Vec<NodeIndex> = vec![0; other.nodes.len()];
        for (index, node) in other.nodes.iter().enumerate().skip(1) {
            let parent = node_map[parent_of[index] as usize];
            let mine = self.enter_child(parent, name_map[node.name as usize], node.first_entry_ns);
            // enter_child counted one call: the node's calls replace it.
            let merged = &mut self.nodes[mine as usize];
            merged.calls += node.calls - 1;
            merged.total_ns = merged.total_ns.saturating_add(node.total_ns);
            node_map[index] = mine;
        }
        for backtrace in other.backtraces {
            let frames = (backtrace.frames.iter())
                .map(|&name| name_map[name as usize])
                .collect();
            let mine = self.hit_backtrace(frames, backtrace.first_seen_ns);
            let merged = &mut self.backtraces[mine];
            merged.hits += backtrace.hits - 1;
            merged.total_ns = merged.total_ns.saturating_add(backtrace.total_ns);
        }
        self.root_calls += other.root_calls;
        self.root_total_ns = self.root_total_ns.saturating_add(other.root_total_ns);
        let (mine, theirs) = (&mut self.shortfall, other.shortfall);
        mine.unfinished_calls += theirs.unfinished_calls;
        mine.unwound_calls += theirs.unwound_calls;
        mine.still_running_calls += theirs.still_running_calls;
    }

    /// The tree, its root named `root_name`. Children are ordered by first
    /// entry and backtraces newest first: threads are read one after
    /// another, and uftrace reads them merged by time. The sorts are
    /// stable: ties keep the reading order.
    fn finish(self, root_name: &str) -> CallTree {
        let mut root = self.node(0);
        root.name = root_name.to_string();
        root.first_entry_ns = 0;
        if self.function.is_some() {
            root.calls = self.root_calls;
            root.total_ns = self.root_total_ns;
        }
        let mut order: Vec<usize> = (0..self.backtraces.len()).collect();
        // Newest first; among backtraces first seen at the same time, the
        // one added later first.
        order.sort_by_key(|&index| {
            (
                std::cmp::Reverse(self.backtraces[index].first_seen_ns),
                std::cmp::Reverse(index),
            )
        });
        let backtraces = order
            .into_iter()
            .map(|index| {
                let b = &self.backtraces[index];
                Backtrace {
                    frames: b
                        .frames
                        .iter()
                        .map(|&name| self.names[name as usize].clone())
                        .collect(),
                    hits: b.hits,
                    total_ns: b.total_ns,
                    first_seen_ns: b.first_seen_ns,
                }
            })
            .collect();
        let mut shortfall = self.shortfall;
        shortfall.unfinished_by_function = (self.names.iter().zip(&self.unfinished))
            .filter(|(_, &calls)| calls > 0)
            .map(|(name, &calls)| (name.clone(), calls))
            .collect();
        shortfall.sort();
        let mut functions = self.names;
        functions.sort();
        CallTree {
            root,
            for_function: self.function.is_some(),
            backtraces,
            shortfall,
            functions,
        }
    }

    /// The subtree at `index`, children ordered by first entry.
    fn node(&self, index: NodeIndex) -> CallNode {
        let node = &self.nodes[index as usize];
        let mut children: Vec<CallNode> = node
            .children
            .iter()
            .map(|&child| self.node(child))
            .collect();
        children.sort_by_key(|child| child.first_entry_ns);
        CallNode {
            name: self
                .names
                .get(node.name as usize)
                .cloned()
                .unwrap_or_default(),
            calls: node.calls,
            total_ns: node.total_ns,
            children,
            first_entry_ns: node.first_entry_ns,
        }
    }
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

    /// Writes a tree rooted at an async function's polls (recorded with
    /// `fntrace record --async`) once more, under one node for its
    /// futures: `(N) future NAME`, N the futures that reached Ready and
    /// the time their summed latency (first poll to Ready); below it the
    /// polls and what they called, as [`write_text`](Self::write_text)
    /// prints them:
    ///
    /// ```text
    /// ========== AS FUTURES (fntrace record --async) ==========
    /// # TOTAL TIME   FUNCTION
    ///    74.125 ms : (3) future serve::{closure#0}
    ///   104.000 us : (9) serve::{closure#0}
    ///    98.000 us : (6) work
    /// ```
    pub fn write_futures_text(
        &self,
        futures: u64,
        latency_ns: u64,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        writeln!(
            out,
            "========== AS FUTURES (fntrace record --async) =========="
        )?;
        writeln!(out, "# TOTAL TIME   FUNCTION")?;
        let future = CallNode {
            name: format!("future {}", self.root.name),
            calls: futures,
            total_ns: latency_ns,
            children: vec![self.root.clone()],
            first_entry_ns: self.root.first_entry_ns,
        };
        let mut mask = Vec::new();
        let mut printer = TreePrinter {
            out,
            mask: &mut mask,
        };
        printer.node(&future, None, 0, false)?;
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
mod tests;
