//! A streamed recording's libraries loaded after its session began (`DLOP`
//! lines and the libraries' `.sym` files, [`UftraceStream::add_library`])
//! and a forked child's depths at the end of its session: what the
//! directory holds and what fntrace's reader gives back. (The runtime's
//! side, with real programs read by uftrace 0.13, is in
//! `tests/programs/unloaded_library_names.rs` and `tests/programs/forked_child_frames.rs`.)

use std::collections::HashMap;
use std::fs;

use super::format::{decode, RECORD_SIZE, TYPE_ENTRY, TYPE_EXIT};
use super::tests::{ev, In, Out, TempDir, T0};
use super::{read_uftrace_dir, UftraceStream};
use crate::trace::Trace;

const EXE: &str = "/opt/fntrace-test/prog";
const LIBRARY: &str = "/opt/fntrace-test/libplug.so";
const MAIN: usize = 0x40_1100;
const BIAS: usize = 0x7f00_0000_0000;
const PLUG_RUN: usize = BIAS + 0x1100;
const PLUG_LEAF: usize = BIAS + 0x1180;

/// A process whose map has its executable (and `main`) only.
fn header(pid: u32) -> Trace {
    Trace {
        pid,
        exe: EXE.to_string(),
        names: HashMap::from([(MAIN, "main".to_string())]),
        symbols: HashMap::from([(MAIN, "main".to_string())]),
        maps: format!(
            "00400000-00402000 r-xp 00000000 08:01 42 {EXE}\n\
             7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]\n"
        ),
        ..Trace::default()
    }
}

fn library_functions() -> Vec<(usize, String)> {
    vec![
        (PLUG_RUN, "plug_run".to_string()),
        (PLUG_LEAF, "plug_leaf".to_string()),
    ]
}

#[test]
fn a_library_added_to_a_stream_is_named_through_its_dlop_line() {
    let dir = TempDir::new("dlop");
    let mut stream = UftraceStream::create(&dir.0, header(4242), T0 - 1_000).unwrap();
    stream
        .add_library(
            T0 - 500,
            BIAS as u64,
            LIBRARY,
            (BIAS + 0x3000) as u64,
            library_functions,
        )
        .unwrap();
    // Its file name is in the map: nothing to add.
    stream
        .add_library(T0 - 400, 0x7e00_0000_0000, EXE, 0x7e00_0000_3000, || {
            panic!("symbols asked for a module of the map")
        })
        .unwrap();
    let events = [
        ev(T0, MAIN, 0, In),
        ev(T0 + 10, PLUG_RUN, 1, In),
        ev(T0 + 20, PLUG_LEAF + 4, 2, In),
        ev(T0 + 30, PLUG_LEAF + 4, 2, Out),
        ev(T0 + 40, PLUG_RUN, 1, Out),
        ev(T0 + 50, MAIN, 0, Out),
    ];
    stream.append(4242, None, &events, 0).unwrap();
    stream.finish().unwrap();

    let task = fs::read_to_string(dir.0.join("task.txt")).unwrap();
    let sid = task
        .split("sid=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let dlop: Vec<&str> = task.lines().filter(|l| l.starts_with("DLOP ")).collect();
    let expected = format!(
        "DLOP timestamp=4.999999500 tid=4242 sid={sid} base=7f0000000000 libname=\"{LIBRARY}\""
    );
    assert_eq!(dlop, [expected.as_str()], "{task}");
    let sym = fs::read_to_string(dir.0.join("libplug.so.sym")).unwrap();
    assert!(sym.contains("0000000000001100 T plug_run\n"), "{sym}");
    assert!(sym.contains("0000000000001180 T plug_leaf\n"), "{sym}");

    let trace = read_uftrace_dir(&dir.0).unwrap();
    let names: Vec<String> = trace.threads[0]
        .events
        .iter()
        .map(|e| trace.name_of(e.function))
        .collect();
    assert_eq!(
        names,
        [
            "main",
            "plug_run",
            "plug_leaf",
            "plug_leaf",
            "plug_run",
            "main"
        ]
    );
}

/// The depth of each entry and exit record of `tid`'s file in `dir`.
fn depths(dir: &std::path::Path, tid: u32) -> Vec<u16> {
    let bytes = fs::read(dir.join(format!("{tid}.dat"))).unwrap();
    bytes
        .chunks_exact(RECORD_SIZE)
        .map(|chunk| decode(chunk.try_into().unwrap()))
        .filter(|r| r.kind == TYPE_ENTRY || r.kind == TYPE_EXIT)
        .map(|r| r.depth)
        .collect()
}

#[test]
fn a_forked_child_that_never_returns_into_its_parents_calls_ends_at_depth_0() {
    let dir = TempDir::new("forked-depths");
    let parent = UftraceStream::create(&dir.0, header(100), T0 - 1_000).unwrap();
    // Children of `main` (depth 0 in the parent): one leaves with _exit,
    // one returns from main (an exit at depth 0 with no entry of its own).
    let mut exited = UftraceStream::join_forked(&dir.0, header(101), T0, 100).unwrap();
    exited
        .append(
            101,
            None,
            &[ev(T0 + 10, PLUG_RUN, 1, In), ev(T0 + 20, PLUG_RUN, 1, Out)],
            0,
        )
        .unwrap();
    exited.flush().unwrap();
    assert_eq!(depths(&dir.0, 101), [1, 1], "as written until the end");
    exited.finish().unwrap();
    assert_eq!(depths(&dir.0, 101), [0, 0]);

    let mut returned = UftraceStream::join_forked(&dir.0, header(102), T0, 100).unwrap();
    returned
        .append(
            102,
            None,
            &[
                ev(T0 + 10, PLUG_RUN, 1, In),
                ev(T0 + 20, PLUG_RUN, 1, Out),
                ev(T0 + 30, MAIN, 0, Out),
            ],
            0,
        )
        .unwrap();
    returned.finish().unwrap();
    assert_eq!(depths(&dir.0, 102), [1, 1, 0]);
    parent.finish().unwrap();
}
