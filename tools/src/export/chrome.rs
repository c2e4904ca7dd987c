//! Chrome trace event JSON, which `chrome://tracing` and Perfetto open:
//! [`write_chrome_json`] and [`SpooledCalls::write_chrome_json`] (the
//! format's details are documented there).

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use super::calls::{Began, Ended, NestedCall};
use super::spool::{AsyncSlice, CallExportOptions, SpooledCalls};
use super::ExportError;
use fntrace_format::{ThreadInfo, Trace};

/// Writes `trace` as Chrome trace event JSON, which `chrome://tracing` and
/// Perfetto (<https://ui.perfetto.dev>) open: [`SpooledCalls::new`] with the
/// default options, then [`SpooledCalls::write_chrome_json`] (which see for
/// the format).
pub fn write_chrome_json(trace: &Trace, out: &mut dyn Write) -> Result<(), ExportError> {
    SpooledCalls::new(trace, &CallExportOptions::default())?.write_chrome_json(out)
}

impl SpooledCalls {
    /// Writes the calls as Chrome trace event JSON, which `chrome://tracing`
    /// and Perfetto (<https://ui.perfetto.dev>) open; exactly
    /// [`chrome_json_bytes`](Self::chrome_json_bytes) bytes.
    ///
    /// Each call is a complete event (`"ph":"X"`) on the track of its
    /// thread: `ts` and `dur` are in microseconds, written with three
    /// decimals so they keep the nanoseconds exactly; `args.depth` is the
    /// recorded depth. The calls are reconstructed as described in
    /// [`crate::export`], so each lies within its caller: a call whose exit
    /// is missing ends at the thread's last timestamp (`args.unfinished:
    /// true`), or when its caller returned (`args.unwound: true`); a call
    /// running when tracing started begins at the thread's first timestamp
    /// (`args.started_before_trace: true`). Events are written thread by
    /// thread, each thread's calls in the order they began.
    ///
    /// Futures added with [`add_futures`](Self::add_futures) follow the
    /// calls, each a nestable async slice across its polls: a begin
    /// (`"ph":"b"`) at its first poll's entry and an end (`"ph":"e"`) at
    /// its `Ready` poll's exit, `"cat":"future"`, the async function's
    /// name, an `id` of its own (addresses are reused), `tid` the thread of
    /// its first poll; the begin's `args` are `polls`, `busy_ns`, `tids`
    /// (the threads its polls ran on) and `address`. A future still pending
    /// at the end ends at the trace's last event, `args.unfinished: true`.
    ///
    /// Metadata events (`"ph":"M"`) name the process (its executable) and
    /// each thread (its name, or `thread TID`). `otherData` carries the
    /// executable and the number of lost events.
    pub fn write_chrome_json(&self, out: &mut dyn Write) -> Result<(), ExportError> {
        self.write_chrome_json_with_progress(out, &mut |_| {})
    }

    /// [`write_chrome_json`](Self::write_chrome_json), calling
    /// `progress(calls_written)` every 65,536 calls, for a progress bar.
    pub fn write_chrome_json_with_progress(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), ExportError> {
        let mut written = 0u64;
        let mut out = BufWriter::with_capacity(1 << 20, out);
        let output = |source| ExportError::Output {
            what: "Chrome trace JSON",
            source,
        };
        let pid = self.pid;
        let infos: Vec<&ThreadInfo> = self.threads.iter().map(|t| &t.info).collect();
        write_header(&mut out, pid, &self.exe, &infos).map_err(output)?;
        // Each function's name, escaped once.
        let mut names: HashMap<usize, String> = HashMap::new();
        let mut line = Vec::new();
        for (index, thread) in self.threads.iter().enumerate() {
            let tid = thread.info.tid;
            for call in self.thread_calls(index)? {
                let (_, call) = call?;
                let name = names.entry(call.function).or_insert_with(|| {
                    json_string(self.names.get(&call.function).map_or("", String::as_str))
                });
                write_call(&mut out, &mut line, &call, name, pid, tid).map_err(output)?;
                written += 1;
                if written.is_multiple_of(PROGRESS_CALLS) {
                    progress(written);
                }
            }
        }
        for slice in &self.futures {
            write_async(&mut out, slice, pid).map_err(output)?;
        }
        write_trailer(&mut out, &self.exe, self.lost()).map_err(output)?;
        out.flush().map_err(output)
    }
}

fn process_name(pid: u32, exe: &str) -> String {
    if exe.is_empty() {
        format!("pid {pid}")
    } else {
        exe.to_string()
    }
}

fn thread_name(thread: &ThreadInfo) -> String {
    thread
        .name
        .clone()
        .unwrap_or_else(|| format!("thread {}", thread.tid))
}

fn write_header(
    out: &mut impl Write,
    pid: u32,
    exe: &str,
    threads: &[&ThreadInfo],
) -> std::io::Result<()> {
    writeln!(out, "{{\"traceEvents\":[")?;
    write!(
        out,
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{pid},\"args\":{{\"name\":{}}}}}",
        json_string(&process_name(pid, exe))
    )?;
    for thread in threads {
        write!(
            out,
            ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":{}}}}}",
            thread.tid,
            json_string(&thread_name(thread))
        )?;
    }
    Ok(())
}

/// Writes one call's event. Built byte by byte into `line`: a trace has
/// hundreds of millions of calls, and `write!`'s formatting machinery was
/// most of the export's time.
fn write_call(
    out: &mut impl Write,
    line: &mut Vec<u8>,
    call: &NestedCall,
    name: &str,
    pid: u32,
    tid: u32,
) -> std::io::Result<()> {
    line.clear();
    line.extend_from_slice(b",\n{\"name\":");
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b",\"cat\":\"function\",\"ph\":\"X\",\"ts\":");
    push_micros(line, call.start);
    line.extend_from_slice(b",\"dur\":");
    push_micros(line, call.duration());
    line.extend_from_slice(b",\"pid\":");
    push_decimal(line, u64::from(pid));
    line.extend_from_slice(b",\"tid\":");
    push_decimal(line, u64::from(tid));
    line.extend_from_slice(b",\"args\":{\"depth\":");
    push_decimal(line, u64::from(call.depth));
    if call.began == Began::BeforeTrace {
        line.extend_from_slice(STARTED_BEFORE.as_bytes());
    }
    match call.ended {
        Ended::Returned => {}
        Ended::Unwound => line.extend_from_slice(UNWOUND.as_bytes()),
        Ended::StillRunning => line.extend_from_slice(UNFINISHED.as_bytes()),
    }
    line.extend_from_slice(b"}}");
    out.write_all(line)
}

/// Writes one future's async begin and end events.
fn write_async(out: &mut impl Write, slice: &AsyncSlice, pid: u32) -> std::io::Result<()> {
    let future = &slice.future;
    let tid = future.tids.first().copied().unwrap_or(pid);
    let name = json_string(&slice.name);
    let tids: Vec<String> = future.tids.iter().map(u32::to_string).collect();
    let micros = |ns: u64| {
        let mut text = Vec::new();
        push_micros(&mut text, ns);
        String::from_utf8(text).unwrap_or_default()
    };
    let (start, end) = (micros(future.start_ns), micros(slice.end_ns));
    let id = slice.id;
    write!(
        out,
        ",\n{{\"name\":{name},\"cat\":\"future\",\"ph\":\"b\",\"ts\":{start},\"pid\":{pid},\
         \"tid\":{tid},\"id\":{id},\"args\":{{\"polls\":{},\"busy_ns\":{},\"tids\":[{}],\
         \"address\":\"{:#x}\"{}}}}}",
        future.polls,
        future.busy_ns,
        tids.join(","),
        future.address,
        if slice.unfinished { UNFINISHED } else { "" }
    )?;
    write!(
        out,
        ",\n{{\"name\":{name},\"cat\":\"future\",\"ph\":\"e\",\"ts\":{end},\"pid\":{pid},\
         \"tid\":{tid},\"id\":{id}}}"
    )
}

/// Bytes [`write_async`] writes for `slice`.
pub(crate) fn chrome_async_bytes(slice: &AsyncSlice, pid: u32) -> u64 {
    let mut counter = ByteCounter(0);
    // Writing to a counter does not fail.
    let _ = write_async(&mut counter, slice, pid);
    counter.0
}

/// Appends `n` in decimal.
fn push_decimal(line: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    line.extend_from_slice(&digits[at..]);
}

/// Appends `ns` as microseconds with exactly three decimals.
fn push_micros(line: &mut Vec<u8>, ns: u64) {
    push_decimal(line, ns / 1000);
    let thousandths = ns % 1000;
    line.extend_from_slice(&[
        b'.',
        b'0' + (thousandths / 100) as u8,
        b'0' + (thousandths / 10 % 10) as u8,
        b'0' + (thousandths % 10) as u8,
    ]);
}

fn write_trailer(out: &mut impl Write, exe: &str, lost: u64) -> std::io::Result<()> {
    write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"exe\":{},\"lost_events\":{}}}}}\n",
        json_string(exe),
        lost
    )
}

/// Calls written between two calls of a progress callback.
pub(crate) const PROGRESS_CALLS: u64 = 1 << 16;

const STARTED_BEFORE: &str = ",\"started_before_trace\":true";
const UNWOUND: &str = ",\"unwound\":true";
const UNFINISHED: &str = ",\"unfinished\":true";

/// Decimal digits of `n`.
fn digits(n: u64) -> u64 {
    u64::from(n.checked_ilog10().unwrap_or(0)) + 1
}

/// Bytes of `ns` written by [`push_micros`].
fn micros_bytes(ns: u64) -> u64 {
    digits(ns / 1000) + 4
}

/// Bytes [`write_call`] writes for `call`, whose name's JSON string has
/// `name_bytes` bytes.
pub(crate) fn chrome_call_bytes(call: &NestedCall, name_bytes: u64, pid: u32, tid: u32) -> u64 {
    // The text of write_call without its six values.
    const FIXED: u64 = (",\n{\"name\":,\"cat\":\"function\",\"ph\":\"X\",\"ts\":,\"dur\":,\"pid\":,\"tid\":,\"args\":{\"depth\":}}")
        .len() as u64;
    let mut bytes = FIXED
        + name_bytes
        + micros_bytes(call.start)
        + micros_bytes(call.duration())
        + digits(pid.into())
        + digits(tid.into())
        + digits(call.depth.into());
    if call.began == Began::BeforeTrace {
        bytes += STARTED_BEFORE.len() as u64;
    }
    bytes += match call.ended {
        Ended::Returned => 0,
        Ended::Unwound => UNWOUND.len() as u64,
        Ended::StillRunning => UNFINISHED.len() as u64,
    };
    bytes
}

/// Bytes the Chrome JSON has besides its calls: the header, the metadata
/// events and the trailer.
pub(crate) fn chrome_frame_bytes(pid: u32, exe: &str, threads: &[&ThreadInfo], lost: u64) -> u64 {
    let mut counter = ByteCounter(0);
    // Writing to a counter does not fail.
    let _ = write_header(&mut counter, pid, exe, threads);
    let _ = write_trailer(&mut counter, exe, lost);
    counter.0
}

/// A writer that only counts bytes.
struct ByteCounter(u64);

impl Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `s` as a JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fntrace_format::{EventKind, ThreadTrace};
    use serde_json::Value;

    use crate::analysis::tests::test_event as ev;
    use EventKind::{Entry as In, Exit as Out};

    fn sample() -> Trace {
        let names: HashMap<usize, String> = [
            (0x1000, "main"),
            (0x2000, "mid"),
            (0x3000, "leaf"),
            (0x4000, "fib"),
            (0x5000, "odd \"name\"\n\\"),
        ]
        .into_iter()
        .map(|(a, n)| (a, n.to_string()))
        .collect();
        Trace {
            pid: 77,
            exe: "/bin/demo".into(),
            threads: vec![
                ThreadTrace {
                    tid: 77,
                    name: Some("main".into()),
                    events: vec![
                        ev(1_000_000, 0x1000, 0, In),
                        ev(1_000_100, 0x2000, 1, In),
                        ev(1_000_200, 0x3000, 2, In),
                        ev(1_000_300, 0x3000, 2, Out),
                        ev(1_000_600, 0x2000, 1, Out),
                        ev(1_000_700, 0x4000, 1, In),
                        ev(1_000_710, 0x4000, 2, In),
                        ev(1_000_720, 0x4000, 3, In),
                        ev(1_000_730, 0x4000, 3, Out),
                        ev(1_000_740, 0x4000, 2, Out),
                        ev(1_000_800, 0x4000, 1, Out),
                        ev(1_001_001, 0x1000, 0, Out),
                    ],
                    lost: 0,
                },
                ThreadTrace {
                    tid: 78,
                    name: None,
                    events: vec![
                        ev(1_000_040, 0x3000, 1, Out), // began before tracing
                        ev(1_000_050, 0x5000, 0, In),
                        ev(1_000_060, 0x6000, 1, In), // no name, no exit
                        ev(1_000_090, 0x6000, 2, In),
                        ev(1_000_095, 0x6000, 2, Out),
                    ],
                    lost: 2,
                },
            ],
            names,
            maps: String::new(),
            ..Trace::default()
        }
    }

    fn parse(trace: &Trace) -> Value {
        let mut out = Vec::new();
        write_chrome_json(trace, &mut out).unwrap();
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{}", String::from_utf8_lossy(&out)))
    }

    /// Complete events of a thread as (name, ts ns, dur ns, args).
    fn complete(json: &Value, tid: u64) -> Vec<(String, u64, u64, Value)> {
        json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"] == tid)
            .map(|e| {
                let ns = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
                (
                    e["name"].as_str().unwrap().to_string(),
                    ns(&e["ts"]),
                    ns(&e["dur"]),
                    e["args"].clone(),
                )
            })
            .collect()
    }

    /// Every event lies within the innermost enclosing event before it.
    fn assert_nested(events: &[(String, u64, u64, Value)]) {
        let mut stack: Vec<(u64, u64)> = Vec::new();
        for (name, ts, dur, _) in events {
            while stack.last().is_some_and(|&(_, end)| end <= *ts) {
                stack.pop();
            }
            if let Some(&(start, end)) = stack.last() {
                assert!(
                    start <= *ts && ts + dur <= end,
                    "{name} [{ts}, {}] not inside [{start}, {end}]",
                    ts + dur
                );
            }
            stack.push((*ts, ts + dur));
        }
    }

    #[test]
    fn complete_events_nest_per_thread() {
        let json = parse(&sample());
        let main = complete(&json, 77);
        let summary: Vec<(&str, u64, u64, u64)> = main
            .iter()
            .map(|(n, ts, dur, args)| (n.as_str(), *ts, *dur, args["depth"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            summary,
            [
                ("main", 1_000_000, 1001, 0),
                ("mid", 1_000_100, 500, 1),
                ("leaf", 1_000_200, 100, 2),
                ("fib", 1_000_700, 100, 1),
                ("fib", 1_000_710, 30, 2),
                ("fib", 1_000_720, 10, 3),
            ]
        );
        assert_nested(&main);

        let worker = complete(&json, 78);
        assert_nested(&worker);
        let names: Vec<&str> = worker.iter().map(|(n, ..)| n.as_str()).collect();
        assert_eq!(names, ["leaf", "odd \"name\"\n\\", "0x6000", "0x6000"]);
        // Began before tracing: starts at the thread's first timestamp.
        assert_eq!((worker[0].1, worker[0].2), (1_000_040, 0));
        assert_eq!(worker[0].3["started_before_trace"], true);
        // No exits: end at the thread's last timestamp.
        assert_eq!((worker[1].1, worker[1].2), (1_000_050, 45));
        assert_eq!(worker[1].3["unfinished"], true);
        assert_eq!((worker[2].1, worker[2].2), (1_000_060, 35));
        assert_eq!(worker[3].3.get("unfinished"), None);
    }

    #[test]
    fn metadata_names_process_and_threads() {
        let json = parse(&sample());
        let meta: Vec<(String, u64, String)> = json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_string(),
                    e["tid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            meta,
            [
                ("process_name".to_string(), 77, "/bin/demo".to_string()),
                ("thread_name".to_string(), 77, "main".to_string()),
                ("thread_name".to_string(), 78, "thread 78".to_string()),
            ]
        );
        assert_eq!(json["otherData"]["lost_events"], 2);
        assert_eq!(json["displayTimeUnit"], "ns");
    }

    #[test]
    fn the_size_and_the_calls_are_known_before_writing() {
        for (min_duration_ns, calls) in [(0, 10), (10, 8), (100, 4), (1001, 1), (1002, 0)] {
            let options = CallExportOptions {
                min_duration_ns,
                scratch_dir: None,
            };
            let spooled = SpooledCalls::new(&sample(), &options).unwrap();
            assert_eq!(spooled.calls(), calls, "{min_duration_ns}");
            let mut out = Vec::new();
            spooled.write_chrome_json(&mut out).unwrap();
            assert_eq!(spooled.chrome_json_bytes(), out.len() as u64);
            let json: Value = serde_json::from_slice(&out).unwrap();
            let written = json["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["ph"] == "X")
                .count();
            assert_eq!(written as u64, calls);
        }
    }

    /// A Ready future and a pending one are async slices, the pending one
    /// to the trace's end; a dropped one is not; the size stays exact.
    #[test]
    fn futures_are_async_slices_and_counted_in_the_size() {
        use crate::analysis::{Future, FutureEnd, Futures};
        let future = |address, start_ns, end_ns, tids: &[u32], end| Future {
            function: 0x2000,
            address,
            start_ns,
            end_ns,
            polls: 2,
            busy_ns: 30,
            tids: tids.to_vec(),
            end,
        };
        let linked = Futures {
            futures: vec![
                future(0xa0, 1_000_100, 1_000_600, &[78, 77], FutureEnd::Ready),
                future(0xa0, 1_000_700, 1_000_710, &[77], FutureEnd::Dropped),
                future(0xb0, 1_000_800, 1_000_900, &[77], FutureEnd::Pending),
            ],
            without_values: 0,
            last_ns: 1_001_001,
        };
        let trace = sample();
        let mut spooled = SpooledCalls::new(&trace, &CallExportOptions::default()).unwrap();
        spooled.add_futures(&trace, &linked);
        assert_eq!(spooled.futures(), 2);
        let mut out = Vec::new();
        spooled.write_chrome_json(&mut out).unwrap();
        assert_eq!(spooled.chrome_json_bytes(), out.len() as u64);
        let json: Value = serde_json::from_slice(&out).unwrap();
        let ns = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
        let events: Vec<&Value> = json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "future")
            .collect();
        let summary: Vec<_> = events
            .iter()
            .map(|e| {
                assert_eq!(e["name"], "mid");
                let ph = e["ph"].as_str().unwrap();
                (
                    ph,
                    e["id"].as_u64().unwrap(),
                    ns(&e["ts"]),
                    e["tid"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("b", 1, 1_000_100, 78),
                ("e", 1, 1_000_600, 78),
                ("b", 2, 1_000_800, 77),
                ("e", 2, 1_001_001, 77),
            ]
        );
        let slices: Vec<&Value> = events.iter().map(|e| &e["args"]).collect();
        assert_eq!(slices[0]["tids"], serde_json::json!([78, 77]));
        assert_eq!(
            (&slices[0]["polls"], &slices[0]["busy_ns"]),
            (&2.into(), &30.into())
        );
        assert_eq!(slices[0]["address"], "0xa0");
        assert_eq!(slices[0].get("unfinished"), None);
        assert_eq!(slices[2]["unfinished"], true);
    }

    #[test]
    fn empty_trace_is_valid_json() {
        let json = parse(&Trace::default());
        assert_eq!(json["traceEvents"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn micros_keep_nanoseconds() {
        let micros = |ns| {
            let mut line = Vec::new();
            push_micros(&mut line, ns);
            String::from_utf8(line).unwrap()
        };
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(7), "0.007");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(10_000_000_001), "10000000.001");
        assert_eq!(micros(u64::MAX), "18446744073709551.615");
        let mut line = Vec::new();
        push_decimal(&mut line, u64::MAX);
        assert_eq!(line, u64::MAX.to_string().as_bytes());
        assert_eq!(json_string("a\u{1}b"), "\"a\\u0001b\"");
    }
}
