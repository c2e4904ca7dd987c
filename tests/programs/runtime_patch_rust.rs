//! Run-time entry patching (`fntrace record -P`) of a normally built Rust
//! program: `tests/rust/runtime_patch.rs` built with plain `rustc` at
//! `opt-level` 0 and 2 and by `cargo build --release` of a one-file crate
//! (no `-Zinstrument-mcount`, no patchable entries), its own crate's
//! functions selected as a user types them, `-P 'rp::*'` (the crate is
//! `rp`).
//!
//! Each build is traced by `fntrace record -P 'rp::*'` and by `uftrace
//! record -P REGEX` with the regex that selects what the glob does
//! ([`UFTRACE_RP`]); both directories read by `uftrace report` give the
//! same calls per function, exactly, and fntrace's reader agrees. At
//! `opt-level` 2 and 3 the counts are also the program's own (its
//! functions stay out of line); at 0 LLVM leaves more functions (the
//! iterator closures, `drop_in_place` instances) and the comparison with
//! uftrace is the check.
//!
//! Refusals: at `opt-level` 2 and 3 `rp::area_of` is a virtual tail call
//! (`jmp *%rax`), refused as an indirect jump (uftrace patches it: its 10
//! calls are left out of the comparison). `rp::release` ends in a tail
//! call through the GOT and `rp::classify` jumps through a switch table:
//! both were refused the same way before `patch::indirect` read where
//! such jumps go; they are patched now and counted exactly.
//!
//! Names: legacy Rust symbols (rustc 1.95's default for a crate built on
//! stable) demangled without their hash, `rp::calls::top`; both instances
//! of the generic `sum_all` are `rp::sum_all` (legacy names carry no
//! generic arguments) and both closures `rp::main::{{closure}}`. uftrace
//! 0.13 demangles them a little differently ([`names_as_fntrace`]).

use crate::common;

use common::native::{self, repo};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `tests/rust/runtime_patch.rs` built by plain `rustc` (crate `rp`) with
/// `flags` into `dir/rp-LABEL`.
fn build_rustc(dir: &Path, label: &str, flags: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let program = dir.join(format!("rp-{label}"));
    let output = Command::new("rustc")
        .args(["--edition", "2021", "--crate-name", "rp"])
        .args(flags)
        .arg(repo().join("tests/rust/runtime_patch.rs"))
        .arg("-o")
        .arg(&program)
        .output()
        .expect("cannot run rustc");
    assert!(
        output.status.success(),
        "rustc {flags:?}: {}",
        native::stderr_of(&output)
    );
    program
}

/// `tests/rust/runtime_patch.rs` as the binary of a crate `rp` of its own
/// in `dir`, built by `cargo build --release` (the release profile as
/// cargo has it: `opt-level` 3, 16 codegen units, no debug information).
fn build_cargo_release(dir: &Path) -> PathBuf {
    let krate = dir.join("rp-crate");
    std::fs::create_dir_all(&krate).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"rp\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [[bin]]\nname = \"rp\"\npath = {:?}\n\n[workspace]\n",
            repo().join("tests/rust/runtime_patch.rs")
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO"))
        .args(["build", "--release", "--offline", "--quiet"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", krate.join("target"))
        // This test's own build settings are not the user's.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        .output()
        .expect("cannot run cargo");
    assert!(
        output.status.success(),
        "cargo build --release: {}",
        native::stderr_of(&output)
    );
    krate.join("target/release/rp")
}

/// `uftrace record -P REGEX PROGRAM` into `dir` (library calls, events
/// and scheduler rows left out, as fntrace records none of them here).
fn uftrace_record(base: &Path, dir: &Path, program: &Path, regex: &str) -> String {
    let output = Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-event", "--no-sched"])
        .args(["-P", regex, "-d"])
        .arg(dir)
        .arg(program)
        .current_dir(base)
        .output()
        .expect("cannot run uftrace; CI installs it (.ci/run)");
    assert!(
        output.status.success(),
        "uftrace record -P {regex}: {}",
        native::stderr_of(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// uftrace 0.13's demangled names as fntrace writes them (rustc-demangle's
/// form): a closure `rp::main::_{{closure}}` is `rp::main::{{closure}}`, a
/// trait impl's method `_<rp::Square as rp::Shape>::area` is
/// `<rp::Square as rp::Shape>::area` (uftrace keeps the `_` that rustc puts
/// before a segment starting with an escape),
/// and a path inside generic arguments, `drop_in_place<rp..main..{{closure}}>`,
/// is `drop_in_place<rp::main::{{closure}}>` (uftrace leaves the `..`
/// escape of `::` there).
fn names_as_fntrace(counts: HashMap<String, u64>) -> HashMap<String, u64> {
    counts
        .into_iter()
        .map(|(name, calls)| {
            let name = name.replace("..", "::").replace("::_{{", "::{{");
            let name = match name.strip_prefix("_<") {
                Some(rest) => format!("<{rest}"),
                None => name,
            };
            (name, calls)
        })
        .collect()
}

/// fntrace's glob `rp::*` as a uftrace regex. fntrace's glob selects a
/// path wherever one starts in a name (`rp::main`, and the generic
/// instances `core::ptr::drop_in_place<rp::...>` that rustc emits at
/// `opt-level` 0); uftrace's regex is unanchored and its demangler writes
/// `rp..main` inside `<...>`.
const UFTRACE_RP: &str = "(^|[<,( &])rp(::|\\.\\.)";

/// What the program prints (its result and its count of parse errors).
const PRINTED: &str = "11088043125077888680 10\n";

/// The program's own calls, when LLVM keeps each function out of line and
/// adds none (`opt-level` 2 and 3), but for `rp::area_of`, refused there.
fn own_counts() -> HashMap<String, u64> {
    common::call_table(&[
        ("rp::main", 1),
        ("rp::calls::top", 1000),
        ("rp::calls::mid", 1000),
        ("rp::calls::leaf", 2000),
        ("rp::depth", 130),
        ("rp::parse", 40),
        ("rp::sum_all", 40),
        ("rp::Meter::bump", 30),
        ("rp::apply", 25),
        ("rp::main::{{closure}}", 25),
        ("rp::release", 20),
        ("rp::classify", 20),
        ("rp::Shape::scaled", 10),
        ("<rp::Square as rp::Shape>::area", 5),
        ("<rp::Rect as rp::Shape>::area", 5),
    ])
}

/// Traces `program` both ways and compares; returns fntrace's stderr
/// (the patching report) and fntrace's calls per function. `refused`:
/// the functions fntrace refuses and uftrace traces, with their calls in
/// uftrace's trace (left out of the comparison).
fn equals_uftrace(
    base: &Path,
    program: &Path,
    refused: &[(&str, u64)],
) -> (String, HashMap<String, u64>) {
    let ours = base.join("fntrace.data");
    let output = common::record_patched(base, &ours, program, "rp::*");
    assert_eq!(String::from_utf8_lossy(&output.stdout), PRINTED);
    let theirs = base.join("uftrace.data");
    assert_eq!(uftrace_record(base, &theirs, program, UFTRACE_RP), PRINTED);

    let mut uftrace_theirs = names_as_fntrace(common::uftrace_calls(&theirs));
    for (name, calls) in refused {
        assert_eq!(
            uftrace_theirs.remove(*name),
            Some(*calls),
            "{name} in uftrace's trace"
        );
    }
    let uftrace_ours = common::uftrace_calls(&ours);
    assert_eq!(
        uftrace_ours, uftrace_theirs,
        "uftrace report: fntrace's directory and uftrace's"
    );
    let read = common::completed_calls(&ours);
    assert_eq!(read, uftrace_ours, "fntrace reading its own");
    (native::stderr_of(&output), read)
}

/// What fntrace says of a build at `opt-level` 2 or 3: every function of
/// the crate patched (`release`'s tail call through the GOT and
/// `classify`'s jump table read) but `area_of`, whose virtual tail call
/// (`jmp *%rax`) could go anywhere.
fn assert_optimised_report(stderr: &str) {
    for line in [
        "-P rp::*: 18 functions patched, 1 refused",
        "-P: rp::area_of not patched: an indirect jump",
    ] {
        assert!(stderr.contains(line), "{line:?} in {stderr}");
    }
}

#[test]
fn rustc_opt_level_2_equals_uftrace_and_the_program() {
    let base = common::temp_dir("runtime-patch-rust-o2");
    let program = build_rustc(&base, "o2", &["-C", "opt-level=2"]);
    let (stderr, calls) = equals_uftrace(&base, &program, &[("rp::area_of", 10)]);
    assert_eq!(calls, own_counts());
    assert_optimised_report(&stderr);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn cargo_release_equals_uftrace_and_the_program() {
    let base = common::temp_dir("runtime-patch-rust-release");
    let program = build_cargo_release(&base);
    let (stderr, calls) = equals_uftrace(&base, &program, &[("rp::area_of", 10)]);
    assert_eq!(calls, own_counts());
    assert_optimised_report(&stderr);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn rustc_opt_level_0_equals_uftrace() {
    let base = common::temp_dir("runtime-patch-rust-o0");
    let program = build_rustc(&base, "o0", &["-C", "opt-level=0"]);
    let (stderr, calls) = equals_uftrace(&base, &program, &[]);
    // Not a tail call at `opt-level` 0: patched.
    assert_eq!(calls.get("rp::area_of"), Some(&10));
    for (name, count) in own_counts() {
        if name != "rp::main::{{closure}}" {
            assert_eq!(calls.get(&name), Some(&count), "{name}: {calls:?}");
        }
    }
    // The closures of `main` include `(0..16).map(|v| v * 1000)`'s at
    // `opt-level` 0 (16 calls), and `sum_all`'s `map` closure is a function.
    assert_eq!(calls.get("rp::main::{{closure}}"), Some(&(25 + 16)));
    assert_eq!(calls.get("rp::sum_all::{{closure}}"), Some(&(2 * 20 * 16)));
    // Three `drop_in_place<...rp::main::{{closure}}...>` instances, once each.
    let drops: Vec<u64> = calls
        .iter()
        .filter(|(name, _)| name.starts_with("core::ptr::drop_in_place<"))
        .map(|(_, calls)| *calls)
        .collect();
    assert_eq!(drops, [1, 1, 1], "{calls:?}");
    assert!(
        stderr.contains("-P rp::*: 26 functions patched, 0 refused"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&base).unwrap();
}

/// `fntrace ctl SOCKET ARGS`: its reply, which must be a success.
fn ctl(socket: &Path, args: &[&str]) -> String {
    let output = Command::new(native::cli())
        .arg("ctl")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fntrace ctl {args:?}: {}",
        native::stderr_of(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The fixture run in `phases` mode with `libfntrace.so` preloaded, a
/// control socket and `env`: each [`Phases::step`] runs the top loop once.
struct Phases {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl Phases {
    fn start(program: &Path, socket: &Path, env: &[(&str, &str)]) -> Phases {
        native::build_libraries();
        let mut child = Command::new(program)
            .args(["100", "phases"])
            .env("LD_PRELOAD", native::profile_dir().join("libfntrace.so"))
            .env("FNTRACE_CONTROL", socket)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = std::io::BufReader::new(child.stdout.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "no control socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        Phases {
            child,
            input,
            output,
        }
    }

    fn step(&mut self) {
        use std::io::{BufRead, Write};
        writeln!(self.input, "go").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert!(line.starts_with("phase "), "{line:?}");
    }

    /// Ends the program; its stderr, once it exited successfully.
    fn finish(mut self) -> String {
        drop(self.input);
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "{stderr}");
        stderr
    }
}

#[test]
fn patched_functions_toggle_under_ctl() {
    // The `opt-level` 2 build with libfntrace.so preloaded: `rp::*`
    // patched at start-up (`FNTRACE_PATCH_FUNCTIONS`, what `-P` sets) and
    // the graph tracer enabled on `rp::calls::*` from the start, phase 1
    // traced; disabled for phase 2 (the stubs' calls back to NOPs),
    // enabled again for phase 3: the dump holds phases 1 and 3.
    let base = common::temp_dir("runtime-patch-rust-ctl");
    let program = build_rustc(&base, "o2", &["-C", "opt-level=2"]);
    let socket = base.join("ctl.sock");
    let mut phases = Phases::start(
        &program,
        &socket,
        &[
            ("FNTRACE_PATCH_FUNCTIONS", "rp::*"),
            ("FNTRACE", "graph"),
            ("FNTRACE_FILTER", "rp::calls::*"),
        ],
    );
    phases.step();
    ctl(&socket, &["disable", "graph"]);
    phases.step();
    ctl(&socket, &["enable", "graph"]);
    phases.step();
    let dump = base.join("dump.data");
    ctl(&socket, &["dump", dump.to_str().unwrap()]);
    let stderr = phases.finish();
    assert!(
        stderr.contains("-P rp::*: 18 functions patched, 1 refused"),
        "{stderr}"
    );
    let expected = common::call_table(&[
        ("rp::calls::top", 200),
        ("rp::calls::mid", 200),
        ("rp::calls::leaf", 400),
    ]);
    assert_eq!(common::completed_calls(&dump), expected, "fntrace's reader");
    assert_eq!(common::uftrace_calls(&dump), expected, "uftrace report");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn functions_patched_by_a_ctl_request_are_traced_from_then_on() {
    let base = common::temp_dir("runtime-patch-rust-ctl-patch");
    let program = build_rustc(&base, "o2", &["-C", "opt-level=2"]);
    let socket = base.join("ctl.sock");
    let mut phases = Phases::start(
        &program,
        &socket,
        &[("FNTRACE", "graph"), ("FNTRACE_FILTER", "rp::calls::*")],
    );
    phases.step();
    let reply = ctl(&socket, &["patch", "rp::calls::*"]);
    assert!(
        reply.contains("patch rp::calls::*: 3 functions patched, 0 refused"),
        "{reply}"
    );
    phases.step();
    let again = ctl(&socket, &["patch", "rp::calls::*"]);
    assert!(
        again.contains("patch rp::calls::*: 0 functions patched, 0 refused"),
        "{again}"
    );
    let dump = base.join("dump.data");
    ctl(&socket, &["dump", dump.to_str().unwrap()]);
    phases.finish();
    let expected = common::call_table(&[
        ("rp::calls::top", 100),
        ("rp::calls::mid", 100),
        ("rp::calls::leaf", 200),
    ]);
    assert_eq!(common::completed_calls(&dump), expected, "fntrace's reader");
    assert_eq!(common::uftrace_calls(&dump), expected, "uftrace report");
    std::fs::remove_dir_all(&base).unwrap();
}
