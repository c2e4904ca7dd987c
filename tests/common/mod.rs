//! Shared by the integration tests: a counting tracer and helpers to read
//! the bytes at a call site.

#![allow(dead_code)]

pub mod attach;
pub mod bpftrace;
pub mod ctl_prog;
pub mod native;
pub mod service;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counts calls per watched function.
pub struct Counter {
    watched: [AtomicUsize; 32],
    counts: [AtomicU64; 32],
    pub all: AtomicU64,
}

impl Counter {
    pub const fn new() -> Self {
        Counter {
            watched: [const { AtomicUsize::new(0) }; 32],
            counts: [const { AtomicU64::new(0) }; 32],
            all: AtomicU64::new(0),
        }
    }

    /// Starts counting calls of the function at `address`; returns its slot.
    pub fn watch(&self, address: usize) -> usize {
        for (slot, watched) in self.watched.iter().enumerate() {
            if watched.load(Ordering::Relaxed) == address {
                return slot;
            }
            if watched
                .compare_exchange(0, address, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return slot;
            }
        }
        panic!("too many watched functions");
    }

    /// Calls of the function at `address` counted so far.
    pub fn count(&self, address: usize) -> u64 {
        let slot = self.watch(address);
        self.counts[slot].load(Ordering::Relaxed)
    }

    pub fn reset(&self) {
        for count in &self.counts {
            count.store(0, Ordering::Relaxed);
        }
        self.all.store(0, Ordering::Relaxed);
    }
}

impl fntrace::Tracer for Counter {
    fn entry(&self, call: &fntrace::Call<'_>) {
        self.all.fetch_add(1, Ordering::Relaxed);
        let function = call.function();
        for (slot, watched) in self.watched.iter().enumerate() {
            match watched.load(Ordering::Relaxed) {
                0 => return,
                address if address == function => {
                    self.counts[slot].fetch_add(1, Ordering::Relaxed);
                    return;
                }
                _ => {}
            }
        }
    }
}

/// The `len` bytes at `address` (program text is readable).
pub fn text(address: usize, len: usize) -> Vec<u8> {
    // SAFETY: callers pass call-site addresses inside mapped program text.
    unsafe { std::slice::from_raw_parts(address as *const u8, len) }.to_vec()
}

/// The entry a fast site leads to: it jumps (`e9 rel32`, `2e e9 rel32`
/// over six bytes) to its return stub, checked byte by byte, which calls
/// the entry, hooks the return with `fntrace_return_balanced` and jumps
/// back to the end of the site.
pub fn stubbed_entry_of(site: &fntrace::SiteInfo, name: &str) -> usize {
    let len = site.original.len();
    let bytes = text(site.address, len);
    if len == 6 {
        assert_eq!(bytes[0], 0x2e, "{name}: {site:?} {bytes:x?}");
    }
    assert_eq!(bytes[len - 5], 0xe9, "{name}: {site:?}");
    let rel = i32::from_le_bytes(bytes[len - 4..].try_into().unwrap());
    let site_end = site.address + len;
    let stub = (site_end as i64 + rel as i64) as usize;
    assert_eq!(stub % 64, 0, "{name}: {site:?}");
    let code = text(stub, 64);
    let word = |at: usize| u64::from_le_bytes(code[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(
        code[..11],
        [0xff, 0x15, 34, 0, 0, 0, 0xe8, 12, 0, 0, 0],
        "{name}"
    );
    assert_eq!(
        code[11..23],
        [0x48, 0x8d, 0x64, 0x24, 0xf8, 0xff, 0x15, 26, 0, 0, 0, 0xc3]
    );
    assert_eq!(code[23..29], [0x48, 0x8d, 0x64, 0x24, 0x08, 0xe9], "{name}");
    let back = i32::from_le_bytes(code[29..33].try_into().unwrap());
    assert_eq!(
        (stub as i64 + 33 + back as i64) as usize,
        site_end,
        "{name}"
    );
    assert_eq!(word(56), site_end, "{name}");
    assert_eq!(
        fntrace::function_name(word(48)).as_deref(),
        Some("fntrace_return_balanced")
    );
    word(40)
}

pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
pub const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Address of a Rust function item.
#[macro_export]
macro_rules! addr {
    ($f:expr) => {
        $f as *const () as usize
    };
}

/// A call reconstructed from a thread's events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedCall {
    pub function: usize,
    pub depth: u16,
    pub duration_ns: u64,
}

/// Checks one thread's events: entries nest by depth, every exit matches
/// the open entry of its depth (same function), time never goes back.
/// Entries left open by unwinding are closed by a later event of lower or
/// equal depth. Returns the completed calls and how many entries were left
/// open.
pub fn check_nesting(events: &[fntrace::GraphEvent]) -> (Vec<CompletedCall>, usize) {
    let mut nesting = Nesting::default();
    let mut done = Vec::new();
    nesting.feed(events, &mut done);
    (done, nesting.unfinished())
}

/// [`check_nesting`] fed piece by piece (a thread's events as successive
/// drains return them), so long runs need not keep every event.
#[derive(Default)]
pub struct Nesting {
    open: Vec<fntrace::GraphEvent>,
    last_time: u64,
    abandoned: usize,
}

impl Nesting {
    /// Checks the next `events` of the thread, appending completed calls.
    pub fn feed(&mut self, events: &[fntrace::GraphEvent], done: &mut Vec<CompletedCall>) {
        use fntrace::EventKind;
        let open = &mut self.open;
        for event in events {
            assert!(
                event.time_ns >= self.last_time,
                "time went back at {event:?}"
            );
            self.last_time = event.time_ns;
            let depth = event.depth as usize;
            match event.kind {
                EventKind::Entry => {
                    assert!(
                        depth <= open.len(),
                        "entry deeper than the open calls: {event:?}"
                    );
                    self.abandoned += open.len() - depth;
                    open.truncate(depth);
                    open.push(*event);
                }
                EventKind::Exit => {
                    assert!(depth < open.len(), "exit without an open entry: {event:?}");
                    self.abandoned += open.len() - 1 - depth;
                    open.truncate(depth + 1);
                    let entry = open.pop().unwrap();
                    assert_eq!(entry.function, event.function, "exit of another function");
                    done.push(CompletedCall {
                        function: event.function,
                        depth: event.depth,
                        duration_ns: event.time_ns - entry.time_ns,
                    });
                }
            }
        }
    }

    /// Entries abandoned (closed by a shallower event) or still open.
    pub fn unfinished(&self) -> usize {
        self.abandoned + self.open.len()
    }
}

/// The events of the thread `tid` in `trace`.
pub fn thread_events(trace: &fntrace::Trace, tid: u32) -> Vec<fntrace::GraphEvent> {
    trace
        .threads
        .iter()
        .filter(|t| t.tid == tid)
        .flat_map(|t| t.events.iter().copied())
        .collect()
}

/// [`shape`] of the events of the fixtures' `run(n)` (`workload.c` and
/// `workload.rs`): run, then n × (mid, 4 × leaf), given their addresses.
#[allow(dead_code)]
pub fn expected_run(n: usize, run: usize, mid: usize, leaf: usize) -> Vec<(char, usize, u16)> {
    let mut out = vec![('E', run, 0)];
    for _ in 0..n {
        out.push(('E', mid, 1));
        for _ in 0..4 {
            out.extend([('E', leaf, 2), ('X', leaf, 2)]);
        }
        out.push(('X', mid, 1));
    }
    out.push(('X', run, 0));
    out
}

/// (kind, function, depth) of each event: for exact comparisons.
pub fn shape(events: &[fntrace::GraphEvent]) -> Vec<(char, usize, u16)> {
    events
        .iter()
        .map(|e| {
            let kind = match e.kind {
                fntrace::EventKind::Entry => 'E',
                fntrace::EventKind::Exit => 'X',
            };
            (kind, e.function, e.depth)
        })
        .collect()
}

/// What the fixtures' `run(n)` returns (Rust workload), computed here.
pub fn expected_rust_run(n: u64) -> u64 {
    (0..n)
        .map(|i| {
            (0..4)
                .map(|j| (i + j).wrapping_mul(3).wrapping_add(1))
                .sum::<u64>()
        })
        .sum()
}

/// What the C fixtures' `mid(x)` returns, computed here.
pub fn expected_c_mid(x: i64) -> i64 {
    (0..4).map(|i| (x + i) * 3 + 1).sum()
}

/// The shape of one `c_hazards::jump(x)`: `hz_jump` calls `hz_deep1` →
/// `hz_deep2`, which `longjmp`s back; the skipped frames are found dead at
/// the next entry (`hz_after`) and their exits reported there.
pub fn jump_shape() -> Vec<(char, usize, u16)> {
    let [jump, deep1, deep2, after] = fntrace_fixtures::c_hazards::jump_addresses();
    vec![
        ('E', jump, 0),
        ('E', deep1, 1),
        ('E', deep2, 2),
        ('X', deep2, 2),
        ('X', deep1, 1),
        ('E', after, 1),
        ('X', after, 1),
        ('X', jump, 0),
    ]
}

/// Runs `uftrace` with `args` and `-d dir`; its standard output. A missing
/// `uftrace` fails the test (CI installs it).
pub fn uftrace(args: &[&str], dir: &std::path::Path) -> String {
    let output = std::process::Command::new("uftrace")
        .args(args)
        .arg("-d")
        .arg(dir)
        .env("LC_ALL", "C")
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "uftrace {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `uftrace record --no-libcall` of `program args` into `dir` (library
/// calls such as `malloc`, which fntrace does not see, are left out, and so
/// are the scheduler events fntrace does not record); the program's exit
/// status.
pub fn uftrace_record(dir: &std::path::Path, program: &std::path::Path, args: &[&str]) -> bool {
    let _ = std::fs::remove_dir_all(dir);
    std::process::Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-event", "--no-sched", "-d"])
        .arg(dir)
        .arg(program)
        .args(args)
        .status()
        .expect("cannot run uftrace; CI installs it (.ci/run)")
        .success()
}

/// [`uftrace_record`], returning what the program wrote to its standard
/// output too.
pub fn uftrace_record_output(
    dir: &std::path::Path,
    program: &std::path::Path,
    args: &[&str],
) -> (bool, String) {
    let _ = std::fs::remove_dir_all(dir);
    let output = std::process::Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-event", "--no-sched", "-d"])
        .arg(dir)
        .arg(program)
        .args(args)
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// `uftrace replay -f none` (no durations) of `dir`, only thread `tid` if
/// given.
pub fn uftrace_replay(dir: &std::path::Path, tid: Option<u32>) -> String {
    let tid = tid.map(|t| t.to_string());
    let mut args = vec!["replay", "--no-pager", "-f", "none"];
    if let Some(tid) = &tid {
        args.extend(["--tid", tid]);
    }
    uftrace(&args, dir)
}

/// A replay of a whole program without its `main() {` … `} /* main */`
/// lines, one level shallower: what fntrace shows of the code `main` runs.
pub fn without_main(replay: &str) -> String {
    let lines: Vec<&str> = replay.lines().collect();
    assert!(
        lines.first() == Some(&"main() {") && lines.last() == Some(&"} /* main */"),
        "not a replay of a whole program:\n{replay}"
    );
    lines[1..lines.len() - 1]
        .iter()
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect()
}

/// A fresh directory name under the temporary directory, the same for the
/// same `name` in the same source file: tests of several files share one
/// process (tests/programs), so the calling file is part of the name.
#[track_caller]
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fntrace-test-{}-{}-{name}",
        std::process::id(),
        caller_file_stem()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The file name, without `.rs`, of the source line that called the
/// `#[track_caller]` function this is called from.
#[track_caller]
pub fn caller_file_stem() -> String {
    let file = std::panic::Location::caller().file();
    std::path::Path::new(file)
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The events in the compact form `E0 name X0 name …` (kind, depth, name
/// without `prefix`), for exact comparisons that read like the program.
pub fn render(events: &[fntrace::GraphEvent], prefix: &str) -> String {
    events
        .iter()
        .map(|e| {
            let kind = match e.kind {
                fntrace::EventKind::Entry => 'E',
                fntrace::EventKind::Exit => 'X',
            };
            let name = fntrace::function_name(e.function).unwrap_or_default();
            format!("{kind}{} {}", e.depth, name.replace(prefix, ""))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Entries and exits per function name of `trace`.
pub fn call_counts(trace: &fntrace::Trace) -> std::collections::HashMap<String, (u64, u64)> {
    let mut counts: std::collections::HashMap<String, (u64, u64)> = Default::default();
    for thread in &trace.threads {
        for event in &thread.events {
            let entry = counts.entry(trace.name_of(event.function)).or_default();
            match event.kind {
                fntrace::EventKind::Entry => entry.0 += 1,
                fntrace::EventKind::Exit => entry.1 += 1,
            }
        }
    }
    counts
}

/// `dir` read back by fntrace's reader (it must be readable).
pub fn read_trace_dir(dir: &std::path::Path) -> fntrace::Trace {
    fntrace::export::read_uftrace_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
}

/// Calls per function in `uftrace report` of `dir` (rows: total, self,
/// each a value and a unit, then calls and the function).
pub fn uftrace_calls(dir: &std::path::Path) -> std::collections::HashMap<String, u64> {
    uftrace(&["report", "--no-pager"], dir)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 6 {
                return None;
            }
            Some((fields[5..].join(" "), fields[4].parse().ok()?))
        })
        .collect()
}

/// Runs `threads` threads, each calling the C fixture's `run(n)` (PIE
/// `-pg`) `rounds` times with a sleep after each, and waits for them: a
/// paced load that a recorder's writer drains many times. The sleep is
/// 1 ms per 2,000 of `n` (10,000 calls, about 0.3 ms traced), at least
/// 1 ms: threads whose calls are traced faster than the writer writes
/// them on 2 vCPUs do not run it out of a budget.
pub fn paced_c_runs(threads: usize, rounds: i64, n: i64) {
    let pause = std::time::Duration::from_millis(n.max(2_000) as u64 / 2_000);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    std::hint::black_box(fntrace_fixtures::c_pie::run(n));
                    std::thread::sleep(pause);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
}

/// The threads of a uftrace directory, in the order of their first event
/// in `uftrace replay`.
pub fn uftrace_tids(dir: &std::path::Path) -> Vec<u32> {
    let mut tids = Vec::new();
    for line in uftrace(&["replay", "--no-pager", "-f", "tid"], dir).lines() {
        // ` [ 1234] | main() {` (not `[1] main` of a "remaining" report).
        let Some(tid) = line
            .trim_start()
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("] |"))
            .and_then(|(tid, _)| tid.trim().parse().ok())
        else {
            continue;
        };
        if !tids.contains(&tid) {
            tids.push(tid);
        }
    }
    tids
}

/// `uftrace replay -f none` of each thread of `dir` (in the order of
/// [`uftrace_tids`]), with `prefix` removed from names and the thread ids
/// of "remaining functions" reports replaced by `TID`.
pub fn uftrace_replays_by_thread(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    uftrace_tids(dir)
        .into_iter()
        .map(|tid| {
            uftrace_replay(dir, Some(tid))
                .replace(prefix, "")
                .replace(&format!("task: {tid}\n"), "task: TID\n")
        })
        .collect()
}

/// One in-process trace at a time: the graph tracer's buffers and
/// `fntrace::dump` are process-wide, and the gathered `programs` binary runs
/// tests of several files on threads of one process.
static IN_PROCESS_TRACE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Traces `run` on this thread (and the threads it starts) with the graph
/// tracer on the functions named `prefix*` (and, with `generic`, the
/// function tracer too, which sends every call through the generic entry
/// and exit paths), dumps the trace into a fresh directory named after
/// `name` and returns it with `run`'s result. The caller removes it.
/// Callers in this process wait for one another.
pub fn trace_and_dump<R>(
    name: &str,
    prefix: &str,
    generic: bool,
    run: impl FnOnce() -> R,
) -> (std::path::PathBuf, R) {
    let _one_at_a_time = IN_PROCESS_TRACE.lock().unwrap_or_else(|e| e.into_inner());
    fntrace::init().unwrap();
    fntrace::GRAPH_TRACER.take_trace();
    let filter = fntrace::Filter::new().include(&format!("{prefix}*"));
    fntrace::enable_with("graph", &filter).unwrap();
    if generic {
        fntrace::enable_with("function", &filter).unwrap();
    }
    let result = run();
    if generic {
        fntrace::disable("function").unwrap();
    }
    fntrace::disable("graph").unwrap();
    let dir = temp_dir(name);
    fntrace::dump(&dir).expect("dump");
    (dir, result)
}

/// Makes the system call `number` fail with `errno` on the calling thread
/// and the threads it creates later, as a sandbox's seccomp filter would.
pub fn refuse_syscall(number: libc::c_long, errno: i32) {
    let mut program = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0, // offsetof(struct seccomp_data, nr)
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: number as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | errno as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let filter = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: no_new_privs, then a valid BPF program for this thread.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &filter as *const libc::sock_fprog,
            ),
            0
        );
    }
}

/// Runs this test binary's `child` test alone in a new process, with
/// `child_var=case` and `env` (a value is set, `None` removed); asserts it
/// succeeded and printed `done`. Its stdout and the lines of its stderr
/// that start with "fntrace:".
pub fn run_child_test(
    child_var: &str,
    case: &str,
    env: &[(&str, Option<&str>)],
    done: &str,
) -> (String, Vec<String>) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(child_var, case);
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{case}: {stdout}\n{stderr}");
    assert!(stdout.contains(done), "{case}: {stdout}\n{stderr}");
    let lines = stderr
        .lines()
        .filter(|line| line.starts_with("fntrace:"))
        .map(str::to_string)
        .collect();
    (stdout, lines)
}

/// Forks: the child runs `child` and leaves with `_exit` of what it
/// returned; the parent waits for it (20 s at most, then kills it and
/// panics naming `what`) and returns its exit code (panics if a signal
/// ended it).
pub fn exit_code_of_forked(what: &str, child: impl FnOnce() -> i32) -> i32 {
    use std::time::{Duration, Instant};
    // SAFETY: the child runs `child` (which only calls what is safe after
    // fork in the callers' tests) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: _exit ends the child without running atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let started = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            // SAFETY: killing our own hung child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what}: child {pid} hung");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        libc::WIFEXITED(status),
        "{what}: child {pid} died: status {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

/// A `uftrace report` time (`730.509 ms`) in nanoseconds, and its last
/// printed digit (uftrace cuts off the digits after it).
fn uftrace_report_ns(value: &str, unit: &str) -> (f64, f64) {
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => panic!("not a time unit: {unit}"),
    };
    let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
    let value: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("not a time: {value}"));
    (value * scale, scale / 10f64.powi(decimals as i32))
}

/// `uftrace report` of `dir` gives, function by function, the calls, total
/// and self times of `ours` (fntrace's report of the same directory), to
/// the digits uftrace prints, and no time above `limit_ns`.
pub fn assert_uftrace_report_is(
    dir: &std::path::Path,
    ours: &fntrace::analysis::LatencyReport,
    limit_ns: f64,
) {
    let out = uftrace(&["report", "--no-pager", "-f", "total,self,call"], dir);
    let mut rows = 0;
    for line in out.lines().skip(2) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [total, total_unit, own, own_unit, calls, name] = words[..] else {
            panic!("row {line:?} of\n{out}");
        };
        let row = ours
            .functions
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name} is not in fntrace's report: {ours:?}"));
        assert_eq!(calls.parse::<u64>().unwrap(), row.calls, "{name}:\n{out}");
        for (value, unit, ns) in [
            (total, total_unit, row.total_ns),
            (own, own_unit, row.self_ns),
        ] {
            let (theirs, digit) = uftrace_report_ns(value, unit);
            assert!(
                (-0.5..digit).contains(&(ns as f64 - theirs)),
                "{name}: uftrace {value} {unit}, fntrace {ns} ns:\n{out}"
            );
            assert!(
                theirs <= limit_ns,
                "{name}: {value} {unit} in {limit_ns} ns"
            );
        }
        rows += 1;
    }
    assert_eq!(rows, ours.functions.len(), "{out}");
}

/// The records of a `.dat` file: (time, second word).
pub fn dat_records(path: &std::path::Path) -> Vec<(u64, u64)> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes.len() % 16, 0, "{}", path.display());
    bytes
        .chunks_exact(16)
        .map(|r| {
            let word = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap());
            (word(0), word(8))
        })
        .collect()
}

/// The threads' record files of a uftrace data directory (`TID.dat`).
pub fn thread_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_str().unwrap();
            name.strip_suffix(".dat")
                .is_some_and(|tid| tid.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    files.sort();
    files
}

/// Bytes of the files directly in `dir` (0 if it cannot be read).
pub fn bytes_under(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.metadata().ok())
                .map(|meta| meta.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Completed calls per function in fntrace's reading of `dir` (entries
/// and exits must pair up).
pub fn completed_calls(dir: &std::path::Path) -> std::collections::HashMap<String, u64> {
    call_counts(&read_trace_dir(dir))
        .into_iter()
        .map(|(name, (entries, exits))| {
            assert_eq!(entries, exits, "{name}: entries and exits");
            (name, entries)
        })
        .collect()
}

/// `(function, calls)` rows as a map, to compare with [`completed_calls`].
pub fn call_table(rows: &[(&str, u64)]) -> std::collections::HashMap<String, u64> {
    rows.iter()
        .map(|(name, calls)| (name.to_string(), *calls))
        .collect()
}

/// Waits for `child` (the leader of its own process group), killing the
/// group after 60 s or once `dir` holds 64 MiB (a program whose registers
/// a trampoline clobbers can loop for ever, recording all the while; a
/// healthy run writes well under 1 MiB in under a second); its output.
pub fn bounded(
    mut child: std::process::Child,
    dir: &std::path::Path,
    what: &str,
) -> std::process::Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline || bytes_under(dir) > 64 << 20 {
            // SAFETY: a plain kill(2) of the process group the child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let output = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after a minute or 64 MiB: {}",
                native::stderr_of(&output)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `fntrace record -o DIR ARGS PROGRAM` in `base`, [`bounded`]; its
/// output, once it succeeded.
pub fn record_bounded(
    base: &std::path::Path,
    dir: &std::path::Path,
    program: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new(native::cli_with_library())
        .arg("record")
        .args(["-o", dir.to_str().unwrap()])
        .args(args)
        .arg(program)
        .current_dir(base)
        .env_remove("FNTRACE_LIB")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Its own process group: the traced program is killed with it.
        .process_group(0)
        .spawn()
        .unwrap();
    let what = format!("fntrace record {args:?} {}", program.display());
    let output = bounded(child, dir, &what);
    assert!(
        output.status.success(),
        "{what}: {}",
        native::stderr_of(&output)
    );
    output
}

/// `fntrace record -o DIR --no-libcall -P GLOB PROGRAM` in `base`
/// ([`record_bounded`]; compared with `uftrace record --no-libcall -P`).
pub fn record_patched(
    base: &std::path::Path,
    dir: &std::path::Path,
    program: &std::path::Path,
    glob: &str,
) -> std::process::Output {
    record_bounded(base, dir, program, &["--no-libcall", "-P", glob])
}

/// Entries and exits per function of the recording `dir`, and the events
/// its lost records say were lost, read thread by thread with
/// [`fntrace_format::export::UftraceReader`] (streaming: recordings of 100M
/// events and more).
#[allow(dead_code)]
pub fn streamed_counts(
    dir: &std::path::Path,
) -> (std::collections::BTreeMap<String, (u64, u64)>, u64) {
    use fntrace_format::{EventKind, EventSource};
    let reader = fntrace_format::export::UftraceReader::open(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut by_address: std::collections::BTreeMap<usize, (u64, u64)> = Default::default();
    let mut lost = 0;
    for index in 0..reader.threads().len() {
        let ((), thread_lost) = reader
            .read_thread(index, |events| {
                for event in events {
                    let count = by_address.entry(event.function).or_default();
                    match event.kind {
                        EventKind::Entry => count.0 += 1,
                        EventKind::Exit => count.1 += 1,
                    }
                }
            })
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        lost += thread_lost;
    }
    let mut by_name: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for (function, (entries, exits)) in by_address {
        let count = by_name.entry(reader.name_of(function)).or_default();
        count.0 += entries;
        count.1 += exits;
    }
    (by_name, lost)
}

/// `dl_run(n)` of the fixtures' `-pg` library (`dl_run` → `dl_mid` → 4 ×
/// `dl_leaf`, as the C workload's `run`), opened with `dlopen`.
pub fn dlopen_dl_run() -> extern "C" fn(i64) -> i64 {
    let path = std::ffi::CString::new(fntrace_fixtures::DLOPEN_LIBRARY).unwrap();
    // SAFETY: dlopen/dlsym of a plain C library built by the fixtures;
    // dl_run has the C signature long(long).
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!handle.is_null(), "dlopen {path:?}");
        let address = libc::dlsym(handle, c"dl_run".as_ptr());
        assert!(!address.is_null());
        std::mem::transmute::<*mut libc::c_void, extern "C" fn(i64) -> i64>(address)
    }
}

/// Runs `call_run(3)` (16 calls of `functions` = [run, mid, leaf]) twice
/// and returns how many calls of the second run took the generic path,
/// after checking its graph events exactly (`name` in messages).
pub fn generic_entries_of_run(name: &str, functions: [usize; 3], call_run: fn(i64) -> i64) -> u64 {
    call_run(3); // the thread's buffers exist from here on
    fntrace::GRAPH_TRACER.take_trace();
    let before = fntrace::generic_entries_on_this_thread();
    call_run(3);
    let generic = fntrace::generic_entries_on_this_thread() - before;
    let events = thread_events(&fntrace::GRAPH_TRACER.take_trace(), fntrace::current_tid());
    let [run, mid, leaf] = functions;
    assert_eq!(shape(&events), expected_run(3, run, mid, leaf), "{name}");
    let (calls, unfinished) = check_nesting(&events);
    assert_eq!((calls.len(), unfinished), (16, 0), "{name}");
    generic
}
