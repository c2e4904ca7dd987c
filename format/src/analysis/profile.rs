//! A live profile: what the runtime's `profile` tracer aggregated in a
//! running process, per function and per call path, handed over as a
//! [`ProfileSnapshot`]. The runtime fills it; the CLI (`fntrace ctl …
//! profile`, `fntrace top`, `fntrace flame`) and the metrics exporter read
//! it. Between the two it travels as text ([`ProfileSnapshot::to_text`],
//! [`ProfileSnapshot::from_text`]): over the control socket, or in a file a
//! C program wrote.
//!
//! # The text form
//!
//! One record a line, fields separated by single spaces, names last (they
//! may hold spaces, never a newline):
//!
//! ```text
//! fntrace-profile 1
//! taken_ns 123456789
//! threads 3
//! not_kept paths=0 functions=0
//! function 0 401136 2000 0 1500000 900000 1500000 500 9000 300:12,301:40,... pie_leaf
//! path 0 - 0 1000 800000 200000
//! path 1 0 1 2000 700000 700000
//! end
//! ```
//!
//! `function INDEX ADDRESS(hex) CALLS RUNNING TOTAL_NS SELF_NS SUM_NS MIN_NS
//! MAX_NS BUCKETS NAME`, where `BUCKETS` is `-` or comma-separated
//! `bucket:count` pairs of the [`Histogram`] layout (`CALLS` is their
//! total). `path INDEX PARENT FUNCTION CALLS TOTAL_NS SELF_NS`, `PARENT` a
//! path index or `-` for an outermost call, `FUNCTION` a function index;
//! parents come before their children. `end` closes a complete snapshot:
//! text cut short is refused.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};

use super::histogram::Histogram;
use super::latency::{sort_rows, FunctionStats, LatencyReport, Rows};

/// First line of the text form.
const MAGIC: &str = "fntrace-profile 1";

/// One function's calls since the profile was enabled or reset, all
/// threads merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionProfile {
    /// Entry address of the function.
    pub function: usize,
    /// Its name, demangled (Rust names without their hash).
    pub name: String,
    /// Durations of its completed calls (callees included): count, exact
    /// sum, minimum and maximum, and the distribution.
    pub durations: Histogram,
    /// Summed durations of the completed calls not nested in another call
    /// of the same function on their thread (recursion counted once, as
    /// [`FunctionStats::total_ns`]).
    pub total_ns: u64,
    /// Summed durations minus those of each call's completed direct
    /// children.
    pub self_ns: u64,
    /// Calls entered and not yet returned when the snapshot was taken.
    pub running: u64,
}

/// One call path: a function called from its parent path (XRay's call
/// trie). The calls made along a path, all threads merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathProfile {
    /// Index in [`ProfileSnapshot::paths`] of the calling path; `None` for
    /// a thread's outermost traced calls.
    pub parent: Option<usize>,
    /// Index in [`ProfileSnapshot::functions`] of the function called.
    pub function: usize,
    /// Completed calls along this path.
    pub calls: u64,
    /// Their summed durations, callees included.
    pub total_ns: u64,
    /// Their summed durations minus their direct children's.
    pub self_ns: u64,
}

/// What did not fit the profile's memory budget: counted, never dropped
/// silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotKept {
    /// Completed calls whose call path had no room in the trie (their
    /// function's row still counts them).
    pub paths: u64,
    /// Completed calls of functions that had no row (not counted at all).
    pub functions: u64,
}

/// Everything the `profile` tracer aggregated, as read at one moment while
/// the traced threads ran on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileSnapshot {
    /// When it was read, on the trace's clock (nanoseconds).
    pub taken_ns: u64,
    /// Threads whose calls it holds.
    pub threads: u64,
    /// Per function, in no particular order.
    pub functions: Vec<FunctionProfile>,
    /// The call trie, parents before children.
    pub paths: Vec<PathProfile>,
    /// What did not fit.
    pub not_kept: NotKept,
}

/// Why a profile's text form was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileTextError {
    /// 1-based line number (0: the text as a whole).
    pub line: usize,
    /// What was wrong there.
    pub problem: String,
}

impl fmt::Display for ProfileTextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "not a whole fntrace profile: {}", self.problem)
        } else {
            write!(f, "fntrace profile, line {}: {}", self.line, self.problem)
        }
    }
}

impl std::error::Error for ProfileTextError {}

impl ProfileSnapshot {
    /// The snapshot of the functions `keep` selects by name (`fntrace ctl
    /// PID profile -F GLOB --save FILE`): their rows, and the call tree
    /// seen through them, each kept path hung from its nearest kept
    /// ancestor (paths that end up alike are merged). What the left-out
    /// functions did is gone: their rows, and their frames in the tree.
    pub fn selected(&self, keep: impl Fn(&str) -> bool) -> ProfileSnapshot {
        let mut index = vec![None; self.functions.len()];
        let mut functions = Vec::new();
        for (old, function) in self.functions.iter().enumerate() {
            if keep(&function.name) {
                index[old] = Some(functions.len());
                functions.push(function.clone());
            }
        }
        // For each old path, the new path standing for it: its own if its
        // function is kept, else its nearest kept ancestor's (parents come
        // first, so theirs is known).
        let mut standing: Vec<Option<usize>> = Vec::with_capacity(self.paths.len());
        let mut paths: Vec<PathProfile> = Vec::new();
        let mut merged: HashMap<(Option<usize>, usize), usize> = HashMap::new();
        for path in &self.paths {
            let parent = path.parent.and_then(|p| standing.get(p).copied().flatten());
            let Some(function) = index.get(path.function).copied().flatten() else {
                standing.push(parent);
                continue;
            };
            let at = *merged.entry((parent, function)).or_insert_with(|| {
                paths.push(PathProfile {
                    parent,
                    function,
                    ..PathProfile::default()
                });
                paths.len() - 1
            });
            let kept = &mut paths[at];
            kept.calls += path.calls;
            kept.total_ns = kept.total_ns.saturating_add(path.total_ns);
            kept.self_ns = kept.self_ns.saturating_add(path.self_ns);
            standing.push(Some(at));
        }
        ProfileSnapshot {
            taken_ns: self.taken_ns,
            threads: self.threads,
            functions,
            paths,
            not_kept: self.not_kept,
        }
    }

    /// The per-function latency rows, as `fntrace report` shows a recorded
    /// trace's (same columns, sorts and filters apply): one row per name
    /// ([`Rows::ByName`]) or per address. Calls still running count as
    /// unfinished.
    pub fn latency_report(&self, rows: Rows) -> LatencyReport {
        let (mut merged, durations): (Vec<FunctionStats>, BTreeMap<usize, Histogram>) = match rows {
            Rows::ByAddress => self
                .functions
                .iter()
                .map(|f| (row_of(f), (f.function, f.durations.clone())))
                .unzip(),
            Rows::ByName => {
                let mut by_name: HashMap<&str, FunctionProfile> = HashMap::new();
                for function in &self.functions {
                    let row = by_name
                        .entry(&function.name)
                        .or_insert_with(|| FunctionProfile {
                            function: function.function,
                            name: function.name.clone(),
                            ..FunctionProfile::default()
                        });
                    row.function = row.function.min(function.function);
                    row.durations.merge(&function.durations);
                    row.total_ns = row.total_ns.saturating_add(function.total_ns);
                    row.self_ns = row.self_ns.saturating_add(function.self_ns);
                    row.running += function.running;
                }
                by_name
                    .into_values()
                    .map(|f| (row_of(&f), (f.function, f.durations)))
                    .unzip()
            }
        };
        sort_rows(&mut merged);
        let running = self.functions.iter().map(|f| f.running).sum();
        LatencyReport {
            functions: merged,
            durations,
            unfinished_calls: running,
            still_running_calls: running,
            ..LatencyReport::default()
        }
    }

    /// Each call path as the function names from the outermost call down,
    /// with its self time: the folded stacks a flame graph is drawn from.
    /// Paths with no self time are left out.
    pub fn folded_stacks(&self) -> Vec<(Vec<&str>, u64)> {
        let name = |path: &PathProfile| {
            self.functions
                .get(path.function)
                .map_or("?", |f| f.name.as_str())
        };
        let mut stacks = Vec::new();
        for path in &self.paths {
            if path.self_ns == 0 {
                continue;
            }
            let mut frames = vec![name(path)];
            let mut parent = path.parent;
            // Parents come first, so a well-formed trie ends; a malformed
            // one (a cycle) is cut at the trie's size.
            while let Some(index) = parent.filter(|_| frames.len() <= self.paths.len()) {
                let Some(up) = self.paths.get(index) else {
                    break;
                };
                frames.push(name(up));
                parent = up.parent;
            }
            frames.reverse();
            stacks.push((frames, path.self_ns));
        }
        stacks
    }

    /// The text form (see the module docs).
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(text, "{MAGIC}");
        let _ = writeln!(text, "taken_ns {}", self.taken_ns);
        let _ = writeln!(text, "threads {}", self.threads);
        let _ = writeln!(
            text,
            "not_kept paths={} functions={}",
            self.not_kept.paths, self.not_kept.functions
        );
        for (index, f) in self.functions.iter().enumerate() {
            let buckets: Vec<String> = f
                .durations
                .buckets()
                .map(|(bucket, count)| format!("{bucket}:{count}"))
                .collect();
            let buckets = if buckets.is_empty() {
                "-".to_string()
            } else {
                buckets.join(",")
            };
            let _ = writeln!(
                text,
                "function {index} {:x} {} {} {} {} {} {} {} {buckets} {}",
                f.function,
                f.durations.count(),
                f.running,
                f.total_ns,
                f.self_ns,
                f.durations.sum(),
                f.durations.min(),
                f.durations.max(),
                f.name.replace('\n', " "),
            );
        }
        for (index, p) in self.paths.iter().enumerate() {
            let parent = p.parent.map_or("-".to_string(), |p| p.to_string());
            let _ = writeln!(
                text,
                "path {index} {parent} {} {} {} {}",
                p.function, p.calls, p.total_ns, p.self_ns
            );
        }
        text.push_str("end\n");
        text
    }

    /// Reads the text form back; refuses anything else, text cut short
    /// included.
    pub fn from_text(text: &str) -> Result<ProfileSnapshot, ProfileTextError> {
        let mut snapshot = ProfileSnapshot::default();
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, MAGIC)) => {}
            _ => return Err(error(1, format!("the first line is not {MAGIC:?}"))),
        }
        let mut ended = false;
        for (index, line) in lines {
            let number = index + 1;
            if ended {
                return Err(error(number, "text after `end`".into()));
            }
            let (record, rest) = line.split_once(' ').unwrap_or((line, ""));
            match record {
                "taken_ns" => snapshot.taken_ns = number_in(rest, number)?,
                "threads" => snapshot.threads = number_in(rest, number)?,
                "not_kept" => {
                    for field in rest.split(' ') {
                        match field.split_once('=') {
                            Some(("paths", n)) => snapshot.not_kept.paths = number_in(n, number)?,
                            Some(("functions", n)) => {
                                snapshot.not_kept.functions = number_in(n, number)?
                            }
                            _ => return Err(error(number, format!("unknown field {field:?}"))),
                        }
                    }
                }
                "function" => {
                    let function = function_line(rest, number, snapshot.functions.len())?;
                    snapshot.functions.push(function);
                }
                "path" => {
                    let path = path_line(rest, number, &snapshot)?;
                    snapshot.paths.push(path);
                }
                "end" => ended = true,
                _ => return Err(error(number, format!("unknown record {record:?}"))),
            }
        }
        if !ended {
            return Err(error(0, "no `end` line (cut short?)".into()));
        }
        Ok(snapshot)
    }
}

/// A latency row of one function's profile.
fn row_of(f: &FunctionProfile) -> FunctionStats {
    FunctionStats::from_durations(
        f.function,
        f.name.clone(),
        &f.durations,
        f.total_ns,
        f.self_ns,
        f.running,
    )
}

fn error(line: usize, problem: String) -> ProfileTextError {
    ProfileTextError { line, problem }
}

fn number_in(field: &str, line: usize) -> Result<u64, ProfileTextError> {
    field
        .parse()
        .map_err(|_| error(line, format!("{field:?} is not a number")))
}

/// Parses the fields of a `function` line, the `expected`-th.
fn function_line(
    rest: &str,
    line: usize,
    expected: usize,
) -> Result<FunctionProfile, ProfileTextError> {
    let fields: Vec<&str> = rest.splitn(11, ' ').collect();
    let [index, address, calls, running, total, self_ns, sum, min, max, buckets, name] = fields[..]
    else {
        return Err(error(line, "a function line has 11 fields".into()));
    };
    if number_in(index, line)? != expected as u64 {
        return Err(error(line, format!("function {index} out of order")));
    }
    let function = usize::from_str_radix(address, 16)
        .map_err(|_| error(line, format!("{address:?} is not a hex address")))?;
    let mut counts = Vec::new();
    if buckets != "-" {
        for pair in buckets.split(',') {
            let (bucket, count) = pair
                .split_once(':')
                .ok_or_else(|| error(line, format!("bucket {pair:?} is not INDEX:COUNT")))?;
            counts.push((number_in(bucket, line)? as usize, number_in(count, line)?));
        }
    }
    let durations = Histogram::from_buckets(
        counts,
        number_in(sum, line)?,
        number_in(min, line)?,
        number_in(max, line)?,
    );
    if durations.count() != number_in(calls, line)? {
        return Err(error(
            line,
            format!("{calls} calls but the buckets hold {}", durations.count()),
        ));
    }
    Ok(FunctionProfile {
        function,
        name: name.to_string(),
        durations,
        total_ns: number_in(total, line)?,
        self_ns: number_in(self_ns, line)?,
        running: number_in(running, line)?,
    })
}

/// Parses the fields of a `path` line; its parent and function must have
/// come before.
fn path_line(
    rest: &str,
    line: usize,
    snapshot: &ProfileSnapshot,
) -> Result<PathProfile, ProfileTextError> {
    let fields: Vec<&str> = rest.split(' ').collect();
    let [index, parent, function, calls, total, self_ns] = fields[..] else {
        return Err(error(line, "a path line has 6 fields".into()));
    };
    if number_in(index, line)? != snapshot.paths.len() as u64 {
        return Err(error(line, format!("path {index} out of order")));
    }
    let parent = match parent {
        "-" => None,
        parent => {
            let parent = number_in(parent, line)? as usize;
            if parent >= snapshot.paths.len() {
                return Err(error(line, format!("parent path {parent} not yet defined")));
            }
            Some(parent)
        }
    };
    let function = number_in(function, line)? as usize;
    if function >= snapshot.functions.len() {
        return Err(error(line, format!("function {function} not defined")));
    }
    Ok(PathProfile {
        parent,
        function,
        calls: number_in(calls, line)?,
        total_ns: number_in(total, line)?,
        self_ns: number_in(self_ns, line)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn durations(values: &[u64]) -> Histogram {
        let mut histogram = Histogram::new();
        for &value in values {
            histogram.record(value);
        }
        histogram
    }

    /// main → work (twice) → leaf; a second `work` at another address
    /// (a `static` function of the same name in another file).
    fn snapshot() -> ProfileSnapshot {
        ProfileSnapshot {
            taken_ns: 42,
            threads: 2,
            functions: vec![
                FunctionProfile {
                    function: 0x1000,
                    name: "main".into(),
                    durations: durations(&[10_000]),
                    total_ns: 10_000,
                    self_ns: 4_000,
                    running: 1,
                },
                FunctionProfile {
                    function: 0x2000,
                    name: "work".into(),
                    durations: durations(&[2_000, 3_000]),
                    total_ns: 5_000,
                    self_ns: 4_000,
                    running: 0,
                },
                FunctionProfile {
                    function: 0x3000,
                    name: "ns::leaf with space".into(),
                    durations: durations(&[500, 500]),
                    total_ns: 1_000,
                    self_ns: 1_000,
                    running: 0,
                },
                FunctionProfile {
                    function: 0x1800,
                    name: "work".into(),
                    durations: durations(&[1_000]),
                    total_ns: 1_000,
                    self_ns: 1_000,
                    running: 0,
                },
            ],
            paths: vec![
                PathProfile {
                    parent: None,
                    function: 0,
                    calls: 1,
                    total_ns: 10_000,
                    self_ns: 4_000,
                },
                PathProfile {
                    parent: Some(0),
                    function: 1,
                    calls: 2,
                    total_ns: 5_000,
                    self_ns: 4_000,
                },
                PathProfile {
                    parent: Some(1),
                    function: 2,
                    calls: 2,
                    total_ns: 1_000,
                    self_ns: 1_000,
                },
            ],
            not_kept: NotKept {
                paths: 3,
                functions: 0,
            },
        }
    }

    #[test]
    fn the_text_form_reads_back_the_same() {
        let snapshot = snapshot();
        let text = snapshot.to_text();
        assert!(
            text.starts_with("fntrace-profile 1\ntaken_ns 42\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\nfunction 2 3000 2 0 1000 1000 1000 500 500 378:2 ns::leaf with space\n"
            ),
            "{text}"
        );
        assert_eq!(ProfileSnapshot::from_text(&text), Ok(snapshot));
    }

    #[test]
    fn a_selection_keeps_its_rows_and_the_tree_seen_through_them() {
        let whole = snapshot();
        let kept = whole.selected(|name| name != "work");
        let names: Vec<&str> = kept.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["main", "ns::leaf with space"]);
        // leaf hangs from main now, `work` left out between them.
        assert_eq!(
            kept.paths,
            [
                whole.paths[0].clone(),
                PathProfile {
                    parent: Some(0),
                    function: 1,
                    ..whole.paths[2].clone()
                },
            ]
        );
        let text = kept.to_text();
        assert_eq!(ProfileSnapshot::from_text(&text), Ok(kept));
        let leaf = whole.selected(|name| name.ends_with("space"));
        assert_eq!(leaf.paths.len(), 1);
        assert_eq!(leaf.paths[0].parent, None);
        assert_eq!(whole.selected(|_| true), whole);
    }

    #[test]
    fn text_cut_short_or_inconsistent_is_refused() {
        let text = snapshot().to_text();
        let cut = &text[..text.len() - "end\n".len()];
        assert_eq!(ProfileSnapshot::from_text(cut).unwrap_err().line, 0);
        let wrong_count = text.replace("function 1 2000 2 ", "function 1 2000 3 ");
        let err = ProfileSnapshot::from_text(&wrong_count).unwrap_err();
        assert!(err.problem.contains("3 calls"), "{err}");
        let orphan = text.replace("path 2 1 2", "path 2 7 2");
        assert!(ProfileSnapshot::from_text(&orphan).is_err());
        assert!(ProfileSnapshot::from_text("hello\n").is_err());
    }

    #[test]
    fn rows_by_name_merge_functions_of_one_name() {
        let report = snapshot().latency_report(Rows::ByName);
        let names: Vec<&str> = report.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["main", "work", "ns::leaf with space"]);
        let work = &report.functions[1];
        assert_eq!((work.calls, work.total_ns, work.self_ns), (3, 6_000, 5_000));
        assert_eq!(
            (work.min_ns, work.max_ns, work.function),
            (1_000, 3_000, 0x1800)
        );
        assert_eq!(report.still_running_calls, 1);
        let by_address = snapshot().latency_report(Rows::ByAddress);
        assert_eq!(by_address.functions.len(), 4);
    }

    #[test]
    fn folded_stacks_walk_the_trie() {
        let snapshot = snapshot();
        let stacks = snapshot.folded_stacks();
        assert_eq!(
            stacks,
            vec![
                (vec!["main"], 4_000),
                (vec!["main", "work"], 4_000),
                (vec!["main", "work", "ns::leaf with space"], 1_000),
            ]
        );
    }
}
