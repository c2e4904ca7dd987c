//! pprof profiles: the call-path trie of a live profile's snapshot, or of
//! a recorded trace ([`profile_of_trace`]), as the `profile.proto` message
//! that `go tool pprof`, Parca, Pyroscope and Grafana read
//! ([`pprof_message`]). Here, not in the CLI, because the runtime's metrics
//! endpoint serves it too (`/debug/pprof/profile`); the CLI gzips it with
//! flate2 (`fntrace_tools::export::write_pprof`), the runtime wraps it in
//! gzip's stored blocks ([`gzip_stored`]), which needs no compressor.
//!
//! One sample per call path, its frames leaf first, with three values:
//! `calls` (count: the path's completed calls), `wall` (nanoseconds: their
//! summed durations, callees included; a path nested in a path of the same
//! function, as in recursion, adds nothing, its time being in the outer
//! one's) and `self` (nanoseconds: durations minus the direct callees').
//! So pprof's *flat* column of each type is `fntrace report`'s `calls`,
//! `total` and `self` of the same calls, and *cum* of `self` is the time
//! spent inside the function (callees included); `self`, the default type,
//! is the one whose flame graph is the time.
//!
//! The protobuf is written here (varints and length-delimited fields, the
//! few messages a profile needs), not generated from the schema.

use std::collections::HashMap;

use crate::analysis::pairing::{duration_ns, CallStep, Calls, Reading};
use crate::analysis::{FunctionProfile, PathProfile, ProfileSnapshot};
use crate::protobuf::{field_bytes, field_packed, field_varint};
use crate::source::EventSource;
use crate::trace::GraphEvent;

/// What a pprof profile says besides the samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PprofInfo {
    /// When the profile's calls were collected (or the snapshot taken), in
    /// nanoseconds since the Unix epoch; 0 when not known.
    pub time_nanos: i64,
    /// How long they were collected over, in nanoseconds; 0 when not known.
    pub duration_nanos: i64,
    /// Free-form lines (`go tool pprof -comments` prints them).
    pub comments: Vec<String>,
    /// The profiled program (its executable's path, as `File:` shows it);
    /// empty when not known.
    pub program: String,
    /// Where each function (by entry address, as
    /// [`FunctionProfile::function`]) begins in its source, where the
    /// caller could read it from debug information: pprof's function
    /// `filename` and `start_line`, and its location's line. Functions
    /// missing here are named alone.
    pub sources: HashMap<usize, SourceLine>,
}

/// A function's first line in its source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLine {
    /// The source file, as the debug information names it.
    pub file: String,
    /// Its line (1-based).
    pub line: u32,
}

/// What [`profile_of_trace`] found in a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceProfile {
    /// The calls, as a live profile would hold them.
    pub snapshot: ProfileSnapshot,
    /// The time the trace spans: first to last event, in nanoseconds.
    pub span_ns: u64,
    /// Events lost while recording (the numbers lack what they held).
    pub lost_events: u64,
}

/// The call-path trie and per-function rows of the calls of `source`,
/// measured as `fntrace report` measures them (the same pairing of entries
/// with exits, and of completed calls only: a call without its exit counts
/// as running). Memory: one row per function, one path per distinct call
/// chain, and per thread the open calls.
pub fn profile_of_trace<S: EventSource>(source: &S) -> Result<TraceProfile, S::Error> {
    let mut trie = Trie::default();
    let threads = source.threads();
    let (mut first, mut last) = (u64::MAX, 0u64);
    let mut lost_events = 0;
    for index in 0..threads.len() {
        let ((), lost) = source.read_thread(index, |events| {
            let events = events.inspect(|event| {
                first = first.min(event.time_ns);
                last = last.max(event.time_ns);
            });
            trie.add_thread(events);
        })?;
        lost_events += lost;
    }
    let mut snapshot = trie.snapshot;
    snapshot.threads = threads.len() as u64;
    snapshot.taken_ns = last;
    for function in &mut snapshot.functions {
        function.name = source.name_of(function.function);
    }
    Ok(TraceProfile {
        snapshot,
        span_ns: last.saturating_sub(first.min(last)),
        lost_events,
    })
}

/// A snapshot under construction from a trace's calls.
#[derive(Default)]
struct Trie {
    snapshot: ProfileSnapshot,
    /// Row index of each function address.
    rows: HashMap<usize, usize>,
    /// Path index of each (parent path, row).
    children: HashMap<(Option<usize>, usize), usize>,
}

impl Trie {
    /// Adds the calls of one thread's `events` (in time order).
    fn add_thread(&mut self, events: impl Iterator<Item = GraphEvent>) {
        // The paths of the open calls, innermost last, and how many calls
        // of each row are open (a call closing while another of its row is
        // open ran nested in it).
        let mut open: Vec<usize> = Vec::new();
        let mut open_of_row: HashMap<usize, u32> = HashMap::new();
        for step in Calls::streaming(events, Vec::new(), Reading::Reports) {
            match step {
                CallStep::Entered { entry, .. } => {
                    let row = self.row(entry.function);
                    let parent = open.last().copied();
                    let next = self.snapshot.paths.len();
                    let path = *self.children.entry((parent, row)).or_insert(next);
                    if path == next {
                        self.snapshot.paths.push(PathProfile {
                            parent,
                            function: row,
                            ..PathProfile::default()
                        });
                    }
                    open.push(path);
                    *open_of_row.entry(row).or_default() += 1;
                }
                CallStep::Returned {
                    entry,
                    exit,
                    children_ns,
                    ..
                } => {
                    let Some(path) = open.pop() else { continue };
                    let row = self.snapshot.paths[path].function;
                    let nested = close(&mut open_of_row, row);
                    let inclusive = duration_ns(&entry, &exit);
                    let self_ns = inclusive.saturating_sub(children_ns);
                    let on_path = &mut self.snapshot.paths[path];
                    on_path.calls += 1;
                    on_path.total_ns = on_path.total_ns.saturating_add(inclusive);
                    on_path.self_ns = on_path.self_ns.saturating_add(self_ns);
                    let function = &mut self.snapshot.functions[row];
                    function.durations.record(inclusive);
                    if !nested {
                        function.total_ns = function.total_ns.saturating_add(inclusive);
                    }
                    function.self_ns = function.self_ns.saturating_add(self_ns);
                }
                CallStep::Unfinished { .. } => {
                    let Some(path) = open.pop() else { continue };
                    let row = self.snapshot.paths[path].function;
                    close(&mut open_of_row, row);
                    self.snapshot.functions[row].running += 1;
                }
                CallStep::UnmatchedExit { .. } => {}
            }
        }
    }

    /// The row of the function at `address`, made if new (named later).
    fn row(&mut self, address: usize) -> usize {
        let functions = &mut self.snapshot.functions;
        *self.rows.entry(address).or_insert_with(|| {
            functions.push(FunctionProfile {
                function: address,
                ..FunctionProfile::default()
            });
            functions.len() - 1
        })
    }
}

/// Ends one open call of `row`; whether another is still open.
fn close(open_of_row: &mut HashMap<usize, u32>, row: usize) -> bool {
    let open = open_of_row.entry(row).or_default();
    *open = open.saturating_sub(1);
    *open > 0
}

/// The `Profile` message of `snapshot`, uncompressed: one sample per call
/// path, frames leaf first, with the values `calls` (count: the path's
/// completed calls), `wall` (nanoseconds: their durations, callees
/// included; nothing for a path nested in a path of the same function,
/// whose time is in the outer one's) and `self` (nanoseconds: durations
/// minus the direct callees', the default type). pprof's flat column of
/// each is then `fntrace report`'s calls, total and self of the same calls.
/// One location and one function per function row, named; one mapping,
/// [`PprofInfo::program`], whose functions are named already.
pub fn pprof_message(snapshot: &ProfileSnapshot, info: &PprofInfo) -> Vec<u8> {
    let mut strings = Strings::default();
    let mut profile = Vec::new();
    // Profile.sample_type (1): the values of each sample, in this order.
    for (kind, unit) in [
        ("calls", "count"),
        ("wall", "nanoseconds"),
        ("self", "nanoseconds"),
    ] {
        let value_type = value_type(&mut strings, kind, unit);
        field_bytes(&mut profile, 1, &value_type);
    }
    // Profile.sample (2), one per path that counted something.
    let paths = &snapshot.paths;
    let mut used = vec![false; snapshot.functions.len()];
    let mut frames = Vec::new();
    for path in paths {
        frames.clear();
        let mut recursive = false;
        let mut at = Some(path);
        while let Some(frame) = at {
            recursive |= !frames.is_empty() && frame.function == path.function;
            frames.push(frame.function);
            at = frame.parent.and_then(|parent| paths.get(parent));
        }
        // Already in an outer path's of the same function.
        let wall = if recursive { 0 } else { path.total_ns };
        if path.calls == 0 && wall == 0 && path.self_ns == 0 {
            continue;
        }
        let mut sample = Vec::new();
        // Location ids are function indexes + 1 (0 is no location).
        let locations = frames.iter().map(|&function| function as u64 + 1);
        field_packed(&mut sample, 1, locations);
        field_packed(&mut sample, 2, [path.calls, wall, path.self_ns]);
        field_bytes(&mut profile, 2, &sample);
        for &function in &frames {
            if let Some(used) = used.get_mut(function) {
                *used = true;
            }
        }
    }
    // Profile.mapping (3): the program, whose functions are named already
    // (has_functions: no reader looks for symbols). Without one, pprof
    // warns that the main binary is not known.
    let mut mapping = Vec::new();
    field_varint(&mut mapping, 1, 1);
    field_varint(&mut mapping, 5, strings.index(&info.program));
    field_varint(&mut mapping, 7, 1);
    field_bytes(&mut profile, 3, &mapping);
    // Profile.location (4) and Profile.function (5): one of each per
    // function, the location's line naming the function.
    let named: Vec<(u64, &FunctionProfile)> = snapshot
        .functions
        .iter()
        .enumerate()
        .filter(|&(index, _)| used[index])
        .map(|(index, function)| (index as u64 + 1, function))
        .collect();
    for &(id, function) in &named {
        // Line.function_id (1), Line.line (2).
        let mut line = Vec::new();
        field_varint(&mut line, 1, id);
        if let Some(source) = info.sources.get(&function.function) {
            field_varint(&mut line, 2, u64::from(source.line));
        }
        let mut location = Vec::new();
        field_varint(&mut location, 1, id);
        field_varint(&mut location, 2, 1);
        field_varint(&mut location, 3, function.function as u64);
        field_bytes(&mut location, 4, &line);
        field_bytes(&mut profile, 4, &location);
    }
    for &(id, function) in &named {
        let name = strings.index(&function.name);
        let mut message = Vec::new();
        field_varint(&mut message, 1, id);
        field_varint(&mut message, 2, name);
        field_varint(&mut message, 3, name);
        // Function.filename (4), start_line (5).
        if let Some(source) = info.sources.get(&function.function) {
            field_varint(&mut message, 4, strings.index(&source.file));
            field_varint(&mut message, 5, u64::from(source.line));
        }
        field_bytes(&mut profile, 5, &message);
    }
    // Profile.time_nanos (9), duration_nanos (10), period_type (11),
    // period (12): every call is counted, a period of one call.
    field_varint(&mut profile, 9, info.time_nanos as u64);
    field_varint(&mut profile, 10, info.duration_nanos as u64);
    let period_type = value_type(&mut strings, "calls", "count");
    field_bytes(&mut profile, 11, &period_type);
    field_varint(&mut profile, 12, 1);
    // Profile.comment (13), default_sample_type (14). The sample types
    // have no description field: a comment says which time they are.
    let wall = format!("wall and self: {}", crate::analysis::WALL_TIME);
    let comments: Vec<u64> = (info.comments.iter().chain([&wall]))
        .map(|c| strings.index(c))
        .collect();
    field_packed(&mut profile, 13, comments);
    let default = strings.index("self");
    field_varint(&mut profile, 14, default);
    // Profile.string_table (6), last: every string is known now. Field
    // order does not matter to a protobuf reader.
    for text in &strings.table {
        field_bytes(&mut profile, 6, text.as_bytes());
    }
    profile
}

/// `bytes` as one gzip member (RFC 1952) of stored deflate blocks (RFC
/// 1951, type 00): nothing compressed, so no compressor to link, at a
/// cost of 5 bytes per 64 KiB and 18 in all. What Go's `net/http/pprof`
/// serves is gzip, which scrapers of `/debug/pprof/profile` may expect.
pub fn gzip_stored(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 0xffff * 5 + 23);
    // ID1 ID2, CM 8 (deflate), no flags, no time, XFL 0, OS 255 (unknown).
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    let mut blocks = bytes.chunks(0xffff).peekable();
    if blocks.peek().is_none() {
        // One empty final block: a stream has at least one.
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        // BFINAL on the last, BTYPE 00; the byte's other bits pad it to a
        // byte boundary, where LEN and its complement NLEN follow.
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&crc32(bytes).to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out
}

/// The CRC-32 gzip ends with (ISO-HDLC: polynomial 0xedb88320 reflected,
/// starting and ending inverted), by a table made per call: a profile is
/// served seconds apart, and the table takes microseconds.
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (n, entry) in table.iter_mut().enumerate() {
        let mut c = n as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *entry = c;
    }
    let mut crc = !0u32;
    for &byte in bytes {
        crc = table[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// A `ValueType` message: the type and unit, as string indexes.
fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Vec<u8> {
    let mut message = Vec::new();
    field_varint(&mut message, 1, strings.index(kind));
    field_varint(&mut message, 2, strings.index(unit));
    message
}

/// The profile's string table: every string once, `""` at index 0 as
/// the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Default for Strings {
    fn default() -> Self {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    fn index(&mut self, text: &str) -> u64 {
        if let Some(&at) = self.index.get(text) {
            return at;
        }
        let at = self.table.len() as u64;
        self.table.push(text.to_string());
        self.index.insert(text.to_string(), at);
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::infallible;
    use crate::trace::test_event as ev;
    use crate::trace::{EventKind, ThreadTrace, Trace};
    use EventKind::{Entry as In, Exit as Out};

    /// main → fib → fib → leaf, main → leaf; a `work` call without its exit.
    fn recursive() -> Trace {
        Trace {
            pid: 1,
            exe: "/bin/fib".into(),
            threads: vec![ThreadTrace {
                tid: 1,
                name: None,
                events: vec![
                    ev(0, 0x10, 0, In),
                    ev(100, 0x20, 1, In),
                    ev(110, 0x20, 2, In),
                    ev(120, 0x30, 3, In),
                    ev(150, 0x30, 3, Out),
                    ev(200, 0x20, 2, Out),
                    ev(400, 0x20, 1, Out),
                    ev(500, 0x30, 1, In),
                    ev(510, 0x30, 1, Out),
                    ev(600, 0x40, 1, In),
                    ev(700, 0x10, 0, Out),
                ],
                lost: 0,
            }],
            names: [
                (0x10, "main"),
                (0x20, "fib"),
                (0x30, "leaf"),
                (0x40, "work"),
            ]
            .into_iter()
            .map(|(a, n)| (a, n.to_string()))
            .collect(),
            ..Trace::default()
        }
    }

    #[test]
    fn a_trace_makes_the_report_rows_and_a_trie() {
        let trace = recursive();
        let found = infallible(profile_of_trace(&trace));
        assert_eq!((found.span_ns, found.lost_events), (700, 0));
        let snapshot = found.snapshot;
        let report = crate::analysis::latency(&trace);
        let rows = snapshot.latency_report(crate::analysis::Rows::ByName);
        for row in &report.functions {
            let ours = rows.functions.iter().find(|r| r.name == row.name).unwrap();
            assert_eq!(
                (ours.calls, ours.total_ns, ours.self_ns, ours.unfinished),
                (row.calls, row.total_ns, row.self_ns, row.unfinished),
                "{}",
                row.name
            );
        }
        let paths: Vec<(Option<usize>, &str, u64, u64, u64)> = snapshot
            .paths
            .iter()
            .map(|p| {
                let name = snapshot.functions[p.function].name.as_str();
                (p.parent, name, p.calls, p.total_ns, p.self_ns)
            })
            .collect();
        assert_eq!(
            paths,
            [
                (None, "main", 1, 700, 390),
                (Some(0), "fib", 1, 300, 210),
                (Some(1), "fib", 1, 90, 60),
                (Some(2), "leaf", 1, 30, 30),
                (Some(0), "leaf", 1, 10, 10),
                (Some(0), "work", 0, 0, 0),
            ]
        );
    }

    /// A sample read back: its location ids and values.
    type Sample = (Vec<u64>, Vec<u64>);

    /// The samples and the string table of a message, read back with a
    /// decoder of the few fields written.
    fn samples(message: &[u8]) -> (Vec<Sample>, Vec<String>) {
        fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
            let mut value = 0;
            let mut shift = 0;
            loop {
                let byte = bytes[*at];
                *at += 1;
                value |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
        fn fields(bytes: &[u8]) -> Vec<(u64, Result<u64, &[u8]>)> {
            let mut at = 0;
            let mut out = Vec::new();
            while at < bytes.len() {
                let key = read_varint(bytes, &mut at);
                match key & 7 {
                    0 => out.push((key >> 3, Ok(read_varint(bytes, &mut at)))),
                    2 => {
                        let len = read_varint(bytes, &mut at) as usize;
                        out.push((key >> 3, Err(&bytes[at..at + len])));
                        at += len;
                    }
                    wire => panic!("wire type {wire}"),
                }
            }
            out
        }
        let unpacked = |bytes: &[u8]| {
            let mut at = 0;
            let mut values = Vec::new();
            while at < bytes.len() {
                values.push(read_varint(bytes, &mut at));
            }
            values
        };
        let mut samples = Vec::new();
        let mut strings = Vec::new();
        for (field, value) in fields(message) {
            match (field, value) {
                (2, Err(sample)) => {
                    let mut locations = Vec::new();
                    let mut values = Vec::new();
                    for (field, value) in fields(sample) {
                        match (field, value) {
                            (1, Err(packed)) => locations = unpacked(packed),
                            (2, Err(packed)) => values = unpacked(packed),
                            other => panic!("sample field {other:?}"),
                        }
                    }
                    samples.push((locations, values));
                }
                (6, Err(text)) => strings.push(String::from_utf8(text.to_vec()).unwrap()),
                _ => {}
            }
        }
        (samples, strings)
    }

    #[test]
    fn samples_are_paths_leaf_first_with_recursion_counted_once() {
        let snapshot = infallible(profile_of_trace(&recursive())).snapshot;
        let message = pprof_message(&snapshot, &PprofInfo::default());
        let (samples, strings) = samples(&message);
        // Function ids: main 1, fib 2, leaf 3, work 4 (no sample: no call
        // completed).
        assert_eq!(
            samples,
            [
                (vec![1], vec![1, 700, 390]),
                (vec![2, 1], vec![1, 300, 210]),
                (vec![2, 2, 1], vec![1, 0, 60]),
                (vec![3, 2, 2, 1], vec![1, 30, 30]),
                (vec![3, 1], vec![1, 10, 10]),
            ]
        );
        assert_eq!(strings[0], "");
        for name in [
            "calls",
            "count",
            "wall",
            "self",
            "nanoseconds",
            "main",
            "fib",
        ] {
            assert_eq!(strings.iter().filter(|s| *s == name).count(), 1, "{name}");
        }
        assert!(!strings.iter().any(|s| s == "work"), "{strings:?}");
    }

    #[test]
    fn gzip_of_stored_blocks_is_framed_as_rfc_1952_says() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        let empty = gzip_stored(b"");
        assert_eq!(empty.len(), 10 + 5 + 8);
        assert_eq!(empty[10..15], [1, 0, 0, 0xff, 0xff]);
        let bytes: Vec<u8> = (0..70_000u32).map(|n| (n * 7) as u8).collect();
        let gzipped = gzip_stored(&bytes);
        assert_eq!(gzipped.len(), 10 + 2 * 5 + bytes.len() + 8);
        assert_eq!(gzipped[..3], [0x1f, 0x8b, 8]);
        // The first block: not final, 65535 bytes.
        assert_eq!(gzipped[10..15], [0, 0xff, 0xff, 0, 0]);
        // The second: final, the 4465 left.
        let second = 15 + 0xffff;
        let left = (bytes.len() - 0xffff) as u16;
        assert_eq!(gzipped[second], 1);
        assert_eq!(gzipped[second + 1..second + 3], left.to_le_bytes());
        assert_eq!(gzipped[second + 3..second + 5], (!left).to_le_bytes());
        let end = gzipped.len();
        assert_eq!(gzipped[end - 4..], (bytes.len() as u32).to_le_bytes());
        assert_eq!(gzipped[end - 8..end - 4], crc32(&bytes).to_le_bytes());
    }
}
