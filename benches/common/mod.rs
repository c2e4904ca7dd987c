//! Helpers shared by the benchmarks: CPU clocks, the standalone `-pg`
//! build of the workload for `uftrace record`, a temporary directory, and
//! what the machine is.

#![allow(dead_code)] // each bench uses its own subset

pub mod programs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;

/// CPU time of the calling thread, nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the per-thread CPU clock
    // always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// User + system CPU time of this process's waited-for descendants.
pub fn children_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_CHILDREN) failed");
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// Builds `benches/c/uftrace_workload.c` with `gcc -O2 FLAGS` as `dir/name`.
pub fn build_standalone(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    build_bench_c(dir, "uftrace_workload.c", name, flags)
}

/// Builds `benches/c/SOURCE` with `gcc -O2 FLAGS` into `dir/NAME`.
pub fn build_bench_c(dir: &Path, source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = dir.join(name);
    let status = Command::new("gcc")
        .args(["-O2", "-pthread"])
        .args(flags)
        .arg("-I")
        .arg(manifest.join("tests/fixtures/c"))
        .arg(manifest.join("benches/c").join(source))
        .arg("-o")
        .arg(&output)
        .status()
        .expect("running gcc for a bench program");
    assert!(status.success(), "gcc failed to build {name}");
    output
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {path:?}: {e}"));
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// CPU count and model, and the kernel.
pub fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cpus = thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("nproc {cpus}, {model}, Linux {}", kernel.trim())
}

/// The 1-minute load average: how busy the machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

/// `target/<profile>` of the running benchmark (it runs from `deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the benchmark's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<bench>")
        .to_path_buf()
}

/// Runs `command` and panics with its output if it fails.
pub fn run_ok(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `fntrace` command and `libfntrace.so` next to it, built with this
/// benchmark's profile and target directory; the command's path.
pub fn fntrace_cli() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let target = profile_dir().parent().expect("target/").to_path_buf();
    for args in [
        &["--lib", "-p", "fntrace"][..],
        &["-p", "fntrace-tools", "--bin", "fntrace"][..],
    ] {
        run_ok(
            Command::new(env!("CARGO"))
                .args(["build", "--release"])
                .args(args)
                .arg("--manifest-path")
                .arg(&manifest)
                .env("CARGO_TARGET_DIR", &target),
        );
    }
    target.join("release/fntrace")
}

/// `benches/realprog` (serde_json and regex-automata on 2 threads), built
/// plain and with every crate instrumented (`-Zinstrument-mcount`, frame
/// pointers kept as the flag needs): (plain, instrumented).
pub fn build_realprog() -> (PathBuf, PathBuf) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/realprog/Cargo.toml");
    let target = profile_dir().parent().expect("target/").to_path_buf();
    let build = |name: &str, rustflags: &str| {
        let dir = target.join(name);
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .args(["build", "--release", "--locked"])
            // With --target, RUSTFLAGS reach the program's crates only, not
            // build scripts or proc-macros.
            .args(["--target", "x86_64-unknown-linux-gnu"])
            .arg("--manifest-path")
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &dir)
            .env("RUSTFLAGS", rustflags);
        if !rustflags.is_empty() {
            cargo.env("RUSTC_BOOTSTRAP", "1");
        }
        run_ok(&mut cargo);
        dir.join("x86_64-unknown-linux-gnu/release/realprog")
    };
    (
        build("realprog-plain", ""),
        build(
            "realprog-mcount",
            "-Zinstrument-mcount -Cforce-frame-pointers=yes",
        ),
    )
}

/// The middle of `values` (the upper one of an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `values` as `MEDIAN ns (MIN–MAX)`: one case's cost over the rounds.
pub fn median_and_range(mut values: Vec<f64>) -> String {
    let (min, max) = (
        values.iter().cloned().fold(f64::INFINITY, f64::min),
        values.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    format!("{:.1} ns ({min:.1}–{max:.1})", median(&mut values))
}

/// Per round, case `case`'s cost less the base case's (case 0): of the
/// second figure of each pair with `second`, else of the first.
pub fn less_base(rounds: &[Vec<(f64, f64)>], case: usize, second: bool) -> Vec<f64> {
    rounds[case]
        .iter()
        .zip(&rounds[0])
        .map(|(c, base)| match second {
            true => c.1 - base.1,
            false => c.0 - base.0,
        })
        .collect()
}
