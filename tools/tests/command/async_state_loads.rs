//! How the runtime reads a poll's state under `fntrace record --async`:
//! through `pinN[OFFSET]`, a plain load, never a system call, and exact;
//! while a read through memory the user writes (`-A 'f@arg1[0]/u32'`)
//! still goes through `process_vm_readv`, so a bad pointer records as all
//! ones instead of faulting.
//!
//! The anchor (`examples/async-anchor`, built as `async_futures.rs` builds
//! it) runs under `strace -e trace=process_vm_readv`, which tells the reads
//! apart by their size: serve's state is one byte, the `-A` value given
//! for `work` four, fntrace's own reads of code other sizes. The states
//! read are checked against rustc's layout of `serve`'s state machine
//! (its DWARF: 0 unresumed, 1 returned, 3 suspended at its one await):
//! every future's polls begin 0, 3, 3, … and end 3, …, 3, 1.
//!
//! What `pinN[OFFSET]` claims is shown by giving it for a pointer that is
//! not one (`work`'s first argument is a number): the CLI refuses it, and
//! handed to the runtime directly it faults the program, where
//! `argN[OFFSET]` for the same value records all ones.

use crate::common;
use crate::profile_program;

use std::collections::{BTreeMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use common::TempDir;
use fntrace_tools::export::UftraceReader;
use fntrace_tools::{EventKind, EventSource};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const SERVE: &str = "async_anchor::serve::{closure#0}";
const WORK: &str = "async_anchor::work";
/// rustc's states of `serve`'s coroutine (see `fntrace_format::coroutine`):
/// its one await is the first suspend point.
const UNRESUMED: u64 = 0;
const RETURNED: u64 = 1;
const SUSPENDED: u64 = 3;

/// Requests, sleeps (and so polls - 1) each.
const REQUESTS: u64 = 24;
const STEPS: u64 = 3;

/// The signal of a fault (x86-64 Linux).
const SIGSEGV: i32 = 11;

/// The reads in strace's log: (length, address read) of each
/// `process_vm_readv` (its local buffer's length, its first remote
/// piece's address).
fn reads(log: &str) -> Vec<(u64, u64)> {
    let number = |text: &str, after: &str, radix: u32| -> Option<u64> {
        let (_, rest) = text.split_once(after)?;
        let digits = rest.split(|c: char| !c.is_ascii_hexdigit()).next()?;
        u64::from_str_radix(digits, radix).ok()
    };
    log.lines()
        .filter_map(|line| line.split_once("process_vm_readv(").map(|(_, call)| call))
        .map(|call| {
            let len = number(call, "iov_len=", 10);
            let remote = call.split_once("}], 1, [").map(|(_, remote)| remote);
            let addr = remote.and_then(|r| match r.starts_with("{iov_base=NULL") {
                true => Some(0),
                false => number(r, "iov_base=0x", 16),
            });
            len.zip(addr)
                .unwrap_or_else(|| panic!("not understood: {call}"))
        })
        .collect()
}

#[test]
fn poll_states_are_loaded_exactly_and_user_reads_stay_system_calls() {
    let dir = TempDir::new("loads");
    let data = dir.0.join("data");
    // One log per thread (`-ff`): no call split across lines.
    let log = dir.0.join("strace");
    let (requests, steps) = (REQUESTS.to_string(), STEPS.to_string());
    let output = Command::new("strace")
        .args(["-ff", "-qq", "-e", "trace=process_vm_readv", "-o"])
        .arg(&log)
        .arg(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .arg("-o")
        .arg(&data)
        .args(["--async", "-A", &format!("{WORK}@arg1[0]/u32"), "--"])
        .arg(common::async_anchor())
        .args(["2", &requests, "8", &steps, "1"])
        .output()
        .expect("running strace (installed with the tests' other tools)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "fntrace record failed: {stderr}");
    assert!(stderr.contains(", 0 lost,"), "{stderr}");

    let reader = UftraceReader::open(&data).expect("reading the recording");
    // serve's polls, by future (its address), in order: (state at the
    // entry, state at the exit); and work's values.
    let mut polls: Vec<(u64, String, u64, u64)> = Vec::new();
    let mut work = Vec::new();
    for index in 0..reader.threads().len() {
        let values = reader.values_of(index).unwrap();
        let events: Vec<(u64, usize, EventKind)> = reader
            .read_thread(index, |events| {
                events.map(|e| (e.time_ns, e.function, e.kind)).collect()
            })
            .unwrap()
            .0;
        let mut entered = None;
        for (time, function, kind) in events {
            match (reader.name_of(function).as_str(), kind) {
                (SERVE, EventKind::Entry) => {
                    let text = &values[&(time, false)];
                    let (address, state) = text
                        .strip_prefix('(')
                        .and_then(|t| t.strip_suffix(')'))
                        .and_then(|t| t.split_once(", "))
                        .unwrap_or_else(|| panic!("serve's values: {text}"));
                    entered = Some((time, address.to_string(), state.parse::<u64>().unwrap()));
                }
                (SERVE, EventKind::Exit) => {
                    let (entry, address, state_in) = entered.take().expect("serve's entry");
                    let state_out = values[&(time, true)]
                        .strip_prefix(" = ")
                        .and_then(|v| v.parse().ok())
                        .expect("serve's state at the exit");
                    polls.push((entry, address, state_in, state_out));
                }
                (WORK, EventKind::Entry) => work.push(values[&(time, false)].clone()),
                _ => {}
            }
        }
    }
    polls.sort();
    let mut futures: BTreeMap<String, Vec<Vec<(u64, u64)>>> = BTreeMap::new();
    for (_, address, state_in, state_out) in &polls {
        let of_address = futures.entry(address.clone()).or_default();
        if *state_in == UNRESUMED {
            of_address.push(Vec::new());
        }
        let future = of_address.last_mut().expect("a future's first poll first");
        future.push((*state_in, *state_out));
    }
    let mut expected = vec![(UNRESUMED, SUSPENDED)];
    expected.extend((1..STEPS).map(|_| (SUSPENDED, SUSPENDED)));
    expected.push((SUSPENDED, RETURNED));
    let all: Vec<&Vec<(u64, u64)>> = futures.values().flatten().collect();
    assert_eq!(all.len() as u64, REQUESTS, "serve's futures");
    for future in all {
        assert_eq!(future, &expected, "one future's (state in, state out)");
    }
    assert_eq!(polls.len() as u64, REQUESTS * (STEPS + 1));

    // work(acc) with a number for a pointer: all ones where unmapped,
    // surely at its first call of each request (acc is the request's id).
    assert_eq!(work.len() as u64, REQUESTS * STEPS, "work's calls");
    let unreadable = work.iter().filter(|v| *v == "(0xffffffff)").count() as u64;
    assert!(unreadable >= REQUESTS, "{unreadable} of {work:?}");

    // No state read was a system call (none at a future's state, which
    // `info` spells `arg1[OFF]`); each of work's values was one.
    // (`info` opens with a binary header.)
    let info = String::from_utf8_lossy(&std::fs::read(data.join("info")).unwrap()).into_owned();
    let offset = info
        .split_once(&format!("{SERVE}@arg1/x,arg1[0x"))
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(hex, _)| u64::from_str_radix(hex, 16).ok())
        .expect("serve's state offset in info");
    let states: HashSet<u64> = polls
        .iter()
        .map(|(_, address, _, _)| {
            u64::from_str_radix(address.trim_start_matches("0x"), 16).unwrap() + offset
        })
        .collect();
    let mut logs = String::new();
    for entry in std::fs::read_dir(&dir.0).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with("strace.") {
            logs.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let reads = reads(&logs);
    let of_states: Vec<_> = reads.iter().filter(|(_, a)| states.contains(a)).collect();
    assert!(
        of_states.is_empty(),
        "states read by system calls: {of_states:?}"
    );
    let fours = reads.iter().filter(|(len, _)| *len == 4).count() as u64;
    assert_eq!(fours, REQUESTS * STEPS, "work's reads: {reads:?}");
}

#[test]
fn a_pinned_read_is_a_claim_the_cli_refuses_and_the_runtime_trusts() {
    let dir = TempDir::new("claim");
    let spec = format!("{WORK}@pin1[0]/u32");
    let refused = Command::new(CLI)
        .arg("record")
        .arg("--lib")
        .arg(profile_program::library())
        .arg("-o")
        .arg(dir.0.join("refused"))
        .args(["-A", &spec, "--"])
        .arg(common::async_anchor())
        .args(["0", "2", "1", "1", "1"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("`pinN[OFFSET]`"));
    assert!(!dir.0.join("refused").exists());

    // Handed to the runtime as `--async` hands it (FNTRACE_ARGS): a load.
    let run = |spec: &str, out: &str| {
        Command::new(common::async_anchor())
            .args(["0", "2", "1", "1", "1"])
            .env("LD_PRELOAD", profile_program::library())
            .env("FNTRACE_OUTPUT", dir.0.join(out))
            .env("FNTRACE_ARGS", spec)
            .output()
            .unwrap()
    };
    let loaded = run(&spec, "loaded");
    assert_eq!(loaded.status.signal(), Some(SIGSEGV), "{loaded:?}");
    let read = run(&format!("{WORK}@arg1[0]/u32"), "read");
    assert!(read.status.success(), "{read:?}");
    let replay = Command::new(CLI)
        .args(["replay", "--no-pager"])
        .arg(dir.0.join("read"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stdout);
    let calls = text.lines().filter(|l| l.contains(WORK)).count();
    let ones = text
        .lines()
        .filter(|l| l.contains(&format!("{WORK}(0xffffffff)")))
        .count();
    assert_eq!(calls, 2, "{text}");
    assert_eq!(ones, 2, "{text}");
}
