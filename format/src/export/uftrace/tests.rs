//! Tests of the uftrace writer and reader: the real `uftrace` must read what
//! fntrace writes, and reading must give back what was written.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::format::FNTRACE_FILE;
use super::modules::{sym_text, Module};
use super::{read_uftrace_dir, write_uftrace_dir};
use crate::export::ExportError;
use crate::trace::{EventKind, ThreadTrace, Trace};

// Functions of this test binary, so that uftrace finds their addresses
// in a real mapping of a real file. Distinct bodies keep them apart.
#[inline(never)]
fn sample_main() -> u64 {
    black_box(1)
}
#[inline(never)]
fn sample_mid() -> u64 {
    black_box(2) * 3
}
#[inline(never)]
fn sample_leaf() -> u64 {
    black_box(3) + 4
}
#[inline(never)]
fn sample_fib() -> u64 {
    black_box(5) ^ 6
}
#[inline(never)]
fn sample_worker() -> u64 {
    black_box(7) << 2
}

struct Fns {
    main: usize,
    mid: usize,
    leaf: usize,
    fib: usize,
    worker: usize,
}

fn fns() -> Fns {
    Fns {
        main: sample_main as fn() -> u64 as usize,
        mid: sample_mid as fn() -> u64 as usize,
        leaf: sample_leaf as fn() -> u64 as usize,
        fib: sample_fib as fn() -> u64 as usize,
        worker: sample_worker as fn() -> u64 as usize,
    }
}

pub(super) use crate::trace::test_event as ev;
pub(super) use EventKind::{Entry as In, Exit as Out};

pub(super) const T0: u64 = 5_000_000_000;

pub(super) fn names(pairs: &[(usize, &str)]) -> HashMap<usize, String> {
    pairs.iter().map(|&(a, n)| (a, n.to_string())).collect()
}

/// Two threads. Thread 4001: nested calls and recursion. Thread 4002:
/// two calls running when tracing started (exits only), a call that
/// never returns, and lost events.
pub(super) fn sample_trace() -> Trace {
    let f = fns();
    let main_thread = ThreadTrace {
        tid: 4001,
        name: Some("main".into()),
        events: vec![
            ev(T0, f.main, 0, In),
            ev(T0 + 100, f.mid, 1, In),
            ev(T0 + 200, f.leaf, 2, In),
            ev(T0 + 300, f.leaf, 2, Out),
            ev(T0 + 400, f.leaf, 2, In),
            ev(T0 + 450, f.leaf, 2, Out),
            ev(T0 + 600, f.mid, 1, Out),
            ev(T0 + 700, f.fib, 1, In),
            ev(T0 + 710, f.fib, 2, In),
            ev(T0 + 720, f.fib, 3, In),
            ev(T0 + 730, f.fib, 3, Out),
            ev(T0 + 740, f.fib, 2, Out),
            ev(T0 + 800, f.fib, 1, Out),
            ev(T0 + 1000, f.main, 0, Out),
        ],
        lost: 0,
    };
    let worker = ThreadTrace {
        tid: 4002,
        name: Some("worker \"w1\"".into()),
        events: vec![
            ev(T0 + 20, f.fib, 1, Out),  // running when tracing started
            ev(T0 + 30, f.main, 0, Out), // its caller
            ev(T0 + 50, f.worker, 0, In),
            ev(T0 + 150, f.leaf, 1, In),
            ev(T0 + 200, f.leaf, 1, Out),
            ev(T0 + 300, f.mid, 1, In), // never returns
            ev(T0 + 350, f.leaf, 2, In),
            ev(T0 + 400, f.leaf, 2, Out),
        ],
        lost: 3,
    };
    Trace {
        pid: 4001,
        exe: std::env::current_exe()
            .expect("current_exe")
            .to_string_lossy()
            .into_owned(),
        threads: vec![main_thread, worker],
        names: names(&[
            (f.main, "main"),
            (f.mid, "mid"),
            (f.leaf, "leaf"),
            (f.fib, "fib"),
            (f.worker, "worker"),
        ]),
        maps: fs::read_to_string("/proc/self/maps").expect("reading /proc/self/maps"),
        ..Trace::default()
    }
}

/// A fresh path under the temporary directory, removed on drop.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "fntrace-export-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn written(trace: &Trace, tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    write_uftrace_dir(trace, &dir.0, None).expect("writing the uftrace directory");
    dir
}

/// Runs the real uftrace on `dir`; fails (never skips) if it is missing.
pub(super) fn uftrace(args: &[&str], dir: &Path) -> String {
    // Options go before a FUNCTION argument (`graph main`).
    let output = Command::new("uftrace")
        .args(&args[..1])
        .arg("--no-pager")
        .arg("-d")
        .arg(dir)
        .args(&args[1..])
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("cannot run uftrace ({e}); install it (CI: .ci/run does)"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "uftrace {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The trace lines of `uftrace replay` ("DURATION [TID] | CALL"),
/// trailing spaces removed.
pub(super) fn replay_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.contains("] | "))
        .map(|l| l.trim_end())
        .collect()
}

#[test]
fn uftrace_replay_shows_each_thread_nested() {
    let dir = written(&sample_trace(), "replay");
    let out = uftrace(&["replay", "--tid", "4001"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        [
            "            [  4001] | main() {",
            "            [  4001] |   mid() {",
            "   0.100 us [  4001] |     leaf();",
            "   0.050 us [  4001] |     leaf();",
            "   0.500 us [  4001] |   } /* mid */",
            "            [  4001] |   fib() {",
            "            [  4001] |     fib() {",
            "   0.010 us [  4001] |       fib();",
            "   0.030 us [  4001] |     } /* fib */",
            "   0.100 us [  4001] |   } /* fib */",
            "   1.000 us [  4001] | } /* main */",
        ],
        "uftrace replay printed:\n{out}"
    );

    // Calls running when tracing started begin at the thread's first
    // timestamp (fib's exit, so it took 0 ns); calls without exit are
    // left open, as uftrace shows any unfinished call.
    let out = uftrace(&["replay", "--tid", "4002"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        [
            "            [  4002] | main() {",
            "            [  4002] |   fib();",
            "   0.010 us [  4002] | } /* main */",
            "            [  4002] | worker() {",
            "   0.050 us [  4002] |   leaf();",
            "            [  4002] |   mid() {",
            "   0.050 us [  4002] |     leaf();",
        ],
        "uftrace replay printed:\n{out}"
    );
    assert!(
        out.contains("uftrace stopped tracing with remaining functions"),
        "{out}"
    );
}

#[test]
fn uftrace_report_counts_the_calls() {
    let dir = written(&sample_trace(), "report");
    let out = uftrace(&["report", "--tid", "4001", "-s", "func"], &dir.0);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .filter(|r: &Vec<&str>| !r.is_empty())
        .collect();
    assert_eq!(
        rows,
        [
            ["0.100", "us", "0.100", "us", "3", "fib"],
            ["0.150", "us", "0.150", "us", "2", "leaf"],
            ["1.000", "us", "0.400", "us", "1", "main"],
            ["0.500", "us", "0.350", "us", "1", "mid"],
        ],
        "uftrace report printed:\n{out}"
    );

    // Both threads. uftrace counts the call still running at the end of
    // a thread that lost records (mid on 4002), not the one that did
    // not (worker counts as its caller).
    let out = uftrace(&["report", "-f", "call", "-s", "func"], &dir.0);
    let calls: Vec<(u32, &str)> = out
        .lines()
        .skip(2)
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((parts.next()?.parse().ok()?, parts.next()?))
        })
        .collect();
    assert_eq!(
        calls,
        [
            (4, "fib"),
            (4, "leaf"),
            (2, "main"),
            (2, "mid"),
            (1, "worker")
        ],
        "uftrace report printed:\n{out}"
    );
}

#[test]
fn uftrace_graph_shows_the_call_tree() {
    let dir = written(&sample_trace(), "graph");
    let tree = |out: &str| -> Vec<String> {
        out.lines()
            .skip_while(|l| !l.starts_with("# TOTAL TIME"))
            .skip(1)
            .map(|l| l.trim_end().to_string())
            .filter(|l| l.contains('('))
            .collect()
    };
    let out = uftrace(&["graph", "main"], &dir.0);
    assert_eq!(
        tree(&out),
        [
            "    1.010 us : (2) main",
            "    0.100 us :  +-(2) fib",
            "    0.030 us :  | (1) fib",
            "    0.010 us :  | (1) fib",
            "    0.500 us :  +-(1) mid",
            "    0.150 us :    (2) leaf",
        ],
        "uftrace graph printed:\n{out}"
    );
    let out = uftrace(&["graph"], &dir.0);
    let full = tree(&out);
    assert_eq!(full.len(), 11, "uftrace graph printed:\n{out}");
    for (line, call) in full[1..].iter().zip([
        " +-(2) main",
        " |  +-(2) fib",
        " |  | (1) fib",
        " |  | (1) fib",
        " |  +-(1) mid",
        " |    (2) leaf",
        " +-(1) worker",
        "    +-(1) leaf",
        "    +-(1) mid",
        "      (1) leaf",
    ]) {
        assert!(line.ends_with(call), "{line:?} is not {call:?}:\n{out}");
    }
}

#[test]
fn uftrace_dump_chrome_pairs_every_begin_with_an_end() {
    let dir = written(&sample_trace(), "chrome");
    let out = uftrace(&["dump", "--chrome"], &dir.0);
    // (tid, name) -> (begins, ends); uftrace leaves "tid" out for the
    // main thread, and writes an empty line for the lost record.
    let mut counts: BTreeMap<(u64, String), (u32, u32)> = BTreeMap::new();
    for line in out.lines() {
        let line = line.trim_end_matches(',');
        if !line.starts_with("{\"ts\"") {
            continue;
        }
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{e}: {line}\nuftrace printed:\n{out}"));
        let tid = event["tid"]
            .as_u64()
            .unwrap_or(event["pid"].as_u64().unwrap());
        let name = event["name"].as_str().unwrap().to_string();
        match event["ph"].as_str() {
            Some("B") => counts.entry((tid, name)).or_default().0 += 1,
            Some("E") => counts.entry((tid, name)).or_default().1 += 1,
            _ => {}
        }
    }
    let expected: BTreeMap<(u64, String), (u32, u32)> = [
        (4001, "fib", 3),
        (4001, "leaf", 2),
        (4001, "main", 1),
        (4001, "mid", 1),
        (4002, "fib", 1),
        (4002, "leaf", 2),
        (4002, "main", 1),
        (4002, "mid", 1),
        (4002, "worker", 1),
    ]
    .into_iter()
    .map(|(tid, name, n)| ((tid, name.to_string()), (n, n)))
    .collect();
    assert_eq!(counts, expected, "uftrace dump --chrome printed:\n{out}");
}

#[test]
fn uftrace_info_names_the_executable_and_tasks() {
    let trace = sample_trace();
    let dir = written(&trace, "info");
    let out = uftrace(&["info"], &dir.0);
    assert!(
        out.contains(&format!("# exe image           : {}", trace.exe)),
        "{out}"
    );
    assert!(out.contains("# number of tasks     : 2"), "{out}");
}

#[test]
fn functions_outside_every_mapping_still_resolve() {
    // No maps at all: the functions go into the pseudo-module.
    let trace = Trace {
        pid: 9,
        exe: "/nonexistent/prog".into(),
        threads: vec![ThreadTrace {
            tid: 9,
            name: None,
            events: vec![
                ev(T0, 0x40_1000, 0, In),
                ev(T0 + 10, 0x40_2000, 1, In),
                ev(T0 + 20, 0x40_2000, 1, Out),
                ev(T0 + 30, 0x7_0000_0000, 1, In),
                ev(T0 + 40, 0x7_0000_0000, 1, Out),
                ev(T0 + 50, 0x40_1000, 0, Out),
            ],
            lost: 0,
        }],
        // 0x7_0000_0000 has no name: it keeps its address.
        names: names(&[(0x40_1000, "outer"), (0x40_2000, "inner")]),
        maps: String::new(),
        ..Trace::default()
    };
    let dir = written(&trace, "unmapped");
    let sym = fs::read_to_string(dir.0.join("fntrace-unmapped.sym")).unwrap();
    assert_eq!(
        sym,
        "# symbols: 3\n\
         # path name: fntrace-unmapped\n\
         0000000000000000 T outer\n\
         0000000000001000 T inner\n\
         0000000000011000 ? __func_end\n\
         00000006ffbff000 T 0x700000000\n\
         00000006ffc0f000 ? __func_end\n"
    );
    let out = uftrace(&["replay"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        [
            "            [     9] | outer() {",
            "   0.010 us [     9] |   inner();",
            "   0.010 us [     9] |   0x700000000();",
            "   0.050 us [     9] | } /* outer */",
        ],
        "uftrace replay printed:\n{out}"
    );
    let back = read_uftrace_dir(&dir.0).unwrap();
    assert_eq!(back.threads, trace.threads);
    assert_eq!(back.names, trace.names);
}

#[test]
fn round_trip_keeps_events_names_and_threads() {
    let trace = sample_trace();
    let dir = TempDir::new("roundtrip");
    let mut reports = Vec::new();
    let mut progress = |done: usize, total: usize| reports.push((done, total));
    write_uftrace_dir(&trace, &dir.0, Some(&mut progress)).unwrap();
    assert_eq!(reports.first(), Some(&(1, 22)));
    assert_eq!(reports.last(), Some(&(22, 22)));

    let back = read_uftrace_dir(&dir.0).unwrap();
    assert_eq!(back.pid, trace.pid);
    assert_eq!(back.exe, trace.exe);
    assert_eq!(back.threads, trace.threads);
    assert_eq!(back.names, trace.names);
    let exe_line = back
        .maps
        .lines()
        .find(|l| l.ends_with(&trace.exe))
        .expect("the executable's map line");
    assert!(exe_line.contains(" r-xp 00000000 "), "{exe_line}");
    assert!(back.maps.contains("[stack]"), "{}", back.maps);
}

#[test]
fn unwound_calls_get_exits_for_uftrace_and_lose_them_when_read() {
    let f = fns();
    let trace = Trace {
        pid: 7,
        exe: sample_trace().exe,
        threads: vec![ThreadTrace {
            tid: 7,
            name: None,
            events: vec![
                ev(T0, f.main, 0, In),
                ev(T0 + 10, f.mid, 1, In),
                ev(T0 + 20, f.leaf, 2, In), // unwound by mid's exit
                ev(T0 + 30, f.mid, 1, Out),
                ev(T0 + 40, f.fib, 1, In), // unwound: longjmp to main
                ev(T0 + 50, f.leaf, 1, In),
                ev(T0 + 60, f.leaf, 1, Out),
                ev(T0 + 65, f.leaf, 3, Out), // unexplained: left out
                ev(T0 + 70, f.main, 0, Out),
            ],
            lost: 0,
        }],
        names: sample_trace().names,
        maps: sample_trace().maps,
        ..Trace::default()
    };
    let dir = written(&trace, "unwound");
    let out = uftrace(&["replay"], &dir.0);
    assert_eq!(
        replay_lines(&out),
        [
            "            [     7] | main() {",
            "            [     7] |   mid() {",
            "   0.010 us [     7] |     leaf();",
            "   0.020 us [     7] |   } /* mid */",
            "   0.010 us [     7] |   fib();",
            "   0.010 us [     7] |   leaf();",
            "   0.070 us [     7] | } /* main */",
        ],
        "uftrace replay printed:\n{out}"
    );
    let fntrace = fs::read_to_string(dir.0.join(FNTRACE_FILE)).unwrap();
    assert!(fntrace.contains("\nadded 7 3 6\n"), "{fntrace}");
    let back = read_uftrace_dir(&dir.0).unwrap();
    let mut expected = trace.threads[0].events.clone();
    expected.remove(7);
    assert_eq!(back.threads[0].events, expected);
}

#[test]
fn too_deep_events_are_counted_as_lost() {
    let f = fns();
    let mut trace = sample_trace();
    trace.threads.truncate(1);
    let events = &mut trace.threads[0].events;
    events.insert(2, ev(T0 + 150, f.leaf, 1024, In));
    events.insert(3, ev(T0 + 160, f.leaf, 1024, Out));
    let dir = written(&trace, "deep");
    let back = read_uftrace_dir(&dir.0).unwrap();
    assert_eq!(back.threads[0].lost, 2);
    assert_eq!(back.threads[0].events, sample_trace().threads[0].events);
}

#[test]
fn sym_sizes_are_capped() {
    let module = Module {
        path: "/lib/x.so".into(),
        base: 0x1000,
        end: 0x40_0000,
        functions: vec![0x2000, 0x2100, 0x30_0000],
    };
    let trace = Trace {
        names: names(&[(0x2000, "a"), (0x2100, "b\tc"), (0x30_0000, "")]),
        ..Trace::default()
    };
    assert_eq!(
        sym_text(&trace, &module),
        "# symbols: 3\n\
         # path name: /lib/x.so\n\
         0000000000001000 T a\n\
         0000000000001100 T b c\n\
         0000000000011100 ? __func_end\n\
         00000000002ff000 T 0x300000\n\
         000000000030f000 ? __func_end\n"
    );
}

#[test]
fn writing_refuses_a_non_empty_directory() {
    let dir = TempDir::new("nonempty");
    fs::create_dir_all(&dir.0).unwrap();
    fs::write(dir.0.join("keep"), "x").unwrap();
    let err = write_uftrace_dir(&sample_trace(), &dir.0, None).unwrap_err();
    assert!(matches!(err, ExportError::DirectoryNotEmpty(_)), "{err}");
    assert_eq!(fs::read_dir(&dir.0).unwrap().count(), 1);
}

#[test]
fn writing_refuses_an_empty_path() {
    // "" joined with a file name is a relative path: without the check, the
    // files would land in the current directory.
    let listing = || -> Vec<PathBuf> {
        let mut names: Vec<PathBuf> = fs::read_dir(".")
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let err = write_uftrace_dir(&sample_trace(), Path::new(""), None).unwrap_err();
    assert!(matches!(err, ExportError::EmptyPath), "{err}");
    assert!(err.to_string().contains("path is empty"), "{err}");
    assert_eq!(listing(), before, "something was written");
    for file in ["info", "task.txt", FNTRACE_FILE] {
        assert!(!Path::new(file).exists(), "{file} was written");
    }
}

fn read_error(dir: &Path) -> String {
    match read_uftrace_dir(dir) {
        Ok(_) => panic!("reading {} succeeded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn reading_reports_what_is_wrong_and_where() {
    let missing = TempDir::new("missing");
    let err = read_error(&missing.0);
    assert!(err.starts_with("opening uftrace data directory "), "{err}");

    let dir = written(&sample_trace(), "broken");
    let path = |name: &str| dir.0.join(name);
    let sid = fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|n| n.starts_with("sid-"))
        .unwrap();

    // A truncated .dat record.
    let dat = fs::read(path("4001.dat")).unwrap();
    fs::write(path("4001.dat"), &dat[..dat.len() - 5]).unwrap();
    let err = read_error(&dir.0);
    assert!(
        err.contains("4001.dat: truncated record at byte 208"),
        "{err}"
    );

    // A bad record magic.
    let mut bad = dat.clone();
    bad[8 + 16] ^= 0b1000; // magic bits 3..6 of record 1
    fs::write(path("4001.dat"), &bad).unwrap();
    let err = read_error(&dir.0);
    assert!(
        err.contains("4001.dat: bad record magic 4 (expected 5) in record 1"),
        "{err}"
    );
    fs::write(path("4001.dat"), &dat).unwrap();

    // A bad task.txt line.
    let tasks = fs::read_to_string(path("task.txt")).unwrap();
    fs::write(
        path("task.txt"),
        format!("{tasks}TASK timestamp=1.000000000 tid=x pid=1\n"),
    )
    .unwrap();
    let err = read_error(&dir.0);
    assert!(err.contains("task.txt: line 4: bad tid="), "{err}");
    fs::write(path("task.txt"), format!("{tasks}GARBAGE\n")).unwrap();
    let err = read_error(&dir.0);
    assert!(err.contains("task.txt: line 4: not a SESS, TASK"), "{err}");
    fs::write(path("task.txt"), &tasks).unwrap();

    // A missing map file.
    let map = fs::read(path(&sid)).unwrap();
    fs::remove_file(path(&sid)).unwrap();
    let err = read_error(&dir.0);
    assert!(
        err.starts_with(&format!("opening {}", path(&sid).display())),
        "{err}"
    );
    fs::write(path(&sid), map).unwrap();

    // A bad info magic, then no info at all.
    let info = fs::read(path("info")).unwrap();
    let mut bad = info.clone();
    bad[0] = b'X';
    fs::write(path("info"), bad).unwrap();
    let err = read_error(&dir.0);
    assert!(err.contains("info: bad magic"), "{err}");
    fs::remove_file(path("info")).unwrap();
    let err = read_error(&dir.0);
    assert!(
        err.starts_with(&format!("opening {}", path("info").display())),
        "{err}"
    );

    fs::write(path("info"), info).unwrap();
    assert!(read_uftrace_dir(&dir.0).is_ok());
}

#[test]
fn reads_what_uftrace_record_writes() {
    let work = TempDir::new("record");
    fs::create_dir_all(&work.0).unwrap();
    let source = work.0.join("prog.c");
    fs::write(
        &source,
        "int leaf(int x) { return x + 1; }\n\
         int mid(int x) { return leaf(x) + leaf(x + 1); }\n\
         int main(void) { return mid(1) == 5 ? 0 : 1; }\n",
    )
    .unwrap();
    let prog = work.0.join("prog");
    let status = Command::new("gcc")
        .args(["-pg", "-O0", "-o"])
        .arg(&prog)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("cannot run gcc ({e}); install it (CI: .ci/run does)"));
    assert!(status.success(), "gcc failed");
    let data = work.0.join("uftrace.data");
    let output = Command::new("uftrace")
        .args(["record", "--no-event", "-d"])
        .arg(&data)
        .arg(&prog)
        .output()
        .unwrap_or_else(|e| panic!("cannot run uftrace ({e}); install it (CI: .ci/run does)"));
    assert!(
        output.status.success(),
        "uftrace record failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    let trace = read_uftrace_dir(&data).unwrap();
    assert_eq!(trace.exe, prog.to_string_lossy());
    assert_eq!(trace.threads.len(), 1);
    let thread = &trace.threads[0];
    let calls: Vec<(u16, String)> = thread
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Entry)
        .map(|e| (e.depth, trace.name_of(e.function)))
        .filter(|(_, name)| ["main", "mid", "leaf"].contains(&name.as_str()))
        .collect();
    assert_eq!(
        calls,
        [
            (0, "main".to_string()),
            (1, "mid".to_string()),
            (2, "leaf".to_string()),
            (2, "leaf".to_string()),
        ]
    );
    // Addresses are the functions' starts, as in the .sym file.
    let sym = fs::read_to_string(data.join("prog.sym")).unwrap();
    let base = trace
        .maps
        .lines()
        .find(|l| l.ends_with("/prog"))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap();
    let main = trace.names.iter().find(|(_, n)| *n == "main").unwrap().0;
    let rel = format!("{:016x} T main", *main as u64 - base);
    assert!(sym.contains(&rel), "{rel} not in\n{sym}");
}
