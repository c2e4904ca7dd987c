//! What reading a long recording costs the `fntrace` commands:
//! `cargo bench -p fntrace-tools --bench big_trace`.
//!
//! Synthesizes a uftrace data directory of `FNTRACE_BIG_RECORDS` records
//! (default 50,000,000: 800 MB of `.dat`) with the streaming writer
//! ([`UftraceStream`], what `fntrace::record` writes with): 4 threads, each a
//! random walk of a program's call graph: 64 functions on 8 levels, each
//! calling 2 of the next level's (1,024 distinct call chains, as a program
//! has a bounded number), calls up to 8 deep. Then runs
//! `fntrace report`, `fntrace chrome`, `fntrace perfetto` and
//! `fntrace flame --folded` on it under `/usr/bin/time`, and prints each
//! one's peak RSS, wall time and output size. With `FNTRACE_BASELINE` set to
//! another build of the CLI (say, the in-memory one before the streaming
//! reader), its figures are printed beside. `FNTRACE_BIG_DIR` keeps the
//! directory (and reuses it if it is there); otherwise it goes in the
//! system's temporary directory and is removed at the end.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fntrace_tools::export::UftraceStream;
use fntrace_tools::{EventKind, GraphEvent, Trace};

const CLI: &str = env!("CARGO_BIN_EXE_fntrace");
const THREADS: u32 = 4;
/// Functions per level of the call graph, and levels.
const PER_LEVEL: usize = 8;
const LEVELS: usize = 8;
/// Events appended at a time.
const CHUNK: usize = 1 << 16;

fn main() {
    let records: u64 = std::env::var("FNTRACE_BIG_RECORDS").map_or(50_000_000, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("FNTRACE_BIG_RECORDS must be a number, not {v:?}"))
    });
    let keep = std::env::var_os("FNTRACE_BIG_DIR").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fntrace-big-{}", std::process::id()))
    });
    let work = std::env::temp_dir().join(format!("fntrace-big-out-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("creating the output directory");

    if dir.join("info").exists() {
        println!("reusing {}", dir.display());
    } else {
        let started = Instant::now();
        synthesize(&dir, records);
        println!(
            "wrote {} records to {} in {:.1} s",
            records,
            dir.display(),
            started.elapsed().as_secs_f64()
        );
    }
    let dat_bytes: u64 = std::fs::read_dir(&dir)
        .expect("listing the directory")
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "dat"))
        .map(|entry| entry.metadata().map_or(0, |m| m.len()))
        .sum();
    println!(
        "{} MB of records ({} records)\n",
        dat_bytes >> 20,
        dat_bytes / 16
    );

    let mut clis = vec![("streaming", PathBuf::from(CLI))];
    if let Some(baseline) = std::env::var_os("FNTRACE_BASELINE") {
        clis.push(("baseline", PathBuf::from(baseline)));
    }
    println!(
        "{:<10} {:<28} {:>12} {:>9} {:>12}",
        "cli", "command", "peak RSS", "wall", "output"
    );
    let out = work.join("out");
    let commands: [(&str, Vec<String>); 4] = [
        ("report", vec!["report".into()]),
        (
            "chrome -o out.json",
            vec!["chrome".into(), "-o".into(), path(&out)],
        ),
        (
            "perfetto -o out.pftrace",
            vec!["perfetto".into(), "-o".into(), path(&out)],
        ),
        (
            "flame --folded -o out.txt",
            vec!["flame".into(), "--folded".into(), "-o".into(), path(&out)],
        ),
    ];
    for (label, args) in &commands {
        for (name, cli) in &clis {
            let _ = std::fs::remove_file(&out);
            let (rss_kib, wall, stdout_bytes) = measure(cli, &dir, args, &work);
            let output = std::fs::metadata(&out).map_or(stdout_bytes, |m| m.len());
            println!(
                "{name:<10} {label:<28} {:>9} MB {:>7.1} s {:>9} MB",
                rss_kib >> 10,
                wall,
                output >> 20
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn path(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_string()
}

/// Runs `cli args[0] dir args[1..]` under `/usr/bin/time`: its peak RSS in
/// KiB, wall time in seconds, and the size of its stdout.
fn measure(cli: &Path, dir: &Path, args: &[String], work: &Path) -> (u64, f64, u64) {
    let times = work.join("time");
    let stdout = work.join("stdout");
    let status = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M %e")
        .arg("-o")
        .arg(&times)
        .arg(cli)
        .arg(&args[0])
        .arg(dir)
        .args(&args[1..])
        .arg("--no-pager")
        .stdout(std::fs::File::create(&stdout).expect("creating the stdout file"))
        .status()
        .expect("cannot run /usr/bin/time (apt-get install time)");
    assert!(status.success(), "{} {args:?}: {status}", cli.display());
    let text = std::fs::read_to_string(&times).expect("reading /usr/bin/time's output");
    let mut fields = text.split_whitespace();
    let rss = fields
        .next()
        .and_then(|v| v.parse().ok())
        .expect("peak RSS");
    let wall = fields
        .next()
        .and_then(|v| v.parse().ok())
        .expect("wall time");
    let stdout_bytes = std::fs::metadata(&stdout).map_or(0, |m| m.len());
    (rss, wall, stdout_bytes)
}

/// Writes `records` records (about; whole calls) over `THREADS` threads.
fn synthesize(dir: &Path, records: u64) {
    let base = 0x40_0000usize;
    let functions: Vec<usize> = (0..PER_LEVEL * LEVELS)
        .map(|k| base + 0x1000 + k * 0x100)
        .collect();
    // Function k (level k / PER_LEVEL) calls two of the next level's.
    let callee = |k: usize, which: u64| {
        let next_level = (k / PER_LEVEL + 1) * PER_LEVEL;
        next_level + (k * 3 + 1 + which as usize * 5) % PER_LEVEL
    };
    let names: HashMap<usize, String> = functions
        .iter()
        .enumerate()
        .map(|(k, &address)| {
            let level = k / PER_LEVEL;
            (address, format!("service::layer{level}::handler_{k}"))
        })
        .collect();
    let header = Trace {
        pid: 7000,
        exe: "/opt/service/bin/service".into(),
        cmdline: "service --serve".into(),
        names,
        maps: format!(
            "{:08x}-{:08x} r-xp 00000000 08:01 42 /opt/service/bin/service\n",
            base,
            base + 0x10_0000
        ),
        ..Trace::default()
    };
    let start_ns = 1_000_000_000;
    let mut stream = UftraceStream::create(dir, header, start_ns).expect("creating the directory");
    let per_thread = records / u64::from(THREADS);
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // Per thread: time, open calls (function indices), records written.
    let mut states: Vec<(u64, Vec<usize>, u64)> = (0..THREADS)
        .map(|t| (start_ns + u64::from(t) * 1_000, Vec::new(), 0))
        .collect();
    // Threads take turns, a chunk at a time, as the recorder's drains do.
    let mut chunk = Vec::with_capacity(CHUNK);
    loop {
        let mut any = false;
        for (t, (time, stack, written)) in states.iter_mut().enumerate() {
            if *written >= per_thread && stack.is_empty() {
                continue;
            }
            any = true;
            chunk.clear();
            while chunk.len() < CHUNK && (*written < per_thread || !stack.is_empty()) {
                *time += 20 + random(400);
                let open = *written + (stack.len() as u64) < per_thread
                    && (stack.is_empty() || (stack.len() < LEVELS && random(100) < 50));
                let depth = stack.len() as u16;
                if open {
                    let k = match stack.last() {
                        Some(&caller) => callee(caller, random(2)),
                        None => random(PER_LEVEL as u64) as usize,
                    };
                    chunk.push(GraphEvent {
                        time_ns: *time,
                        function: functions[k],
                        depth,
                        kind: EventKind::Entry,
                    });
                    stack.push(k);
                } else {
                    let k = stack.pop().expect("an open call");
                    chunk.push(GraphEvent {
                        time_ns: *time,
                        function: functions[k],
                        depth: depth - 1,
                        kind: EventKind::Exit,
                    });
                }
                *written += 1;
            }
            let tid = 7000 + t as u32;
            stream
                .append(tid, Some(&format!("worker-{t}")), &chunk, 0)
                .expect("appending events");
        }
        stream.flush().expect("flushing");
        if !any {
            break;
        }
    }
    stream.finish().expect("finishing the directory");
}
