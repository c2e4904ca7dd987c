//! What a poll costs under `fntrace record --async`, against the same
//! program's traced call without values: `cargo bench --bench async_poll`.
//!
//! `benches/rust/poll_loop.rs` (`rustc -O -g -Zinstrument-mcount`, std
//! only) calls `call(i)` N times, then polls `stepper`'s state machine N
//! times (futures of 100 polls, boxed, a no-op waker), each loop timed
//! with the thread's CPU clock (`FNTRACE_BENCH_POLLS`, default 200,000).
//! Run as, with `-F` on the resume function and `call` in every case but
//! the base:
//!
//! 1. `fntrace record -F poll_loop::main`: their sites NOPs (the base);
//! 2. `fntrace record`: both traced by the graph tracer, no values (the
//!    fast path);
//! 3. `fntrace record --async`: the polls with their future's address
//!    and state at the entry and the exit, read through `pin1[OFF]`
//!    with a plain load;
//! 4. `fntrace record -A 'F@arg1/x,arg1[OFF]/u8' -R 'F@arg1[OFF]/u8'`:
//!    the same values written by hand, read with `process_vm_readv` (what
//!    `--async` did before `pinN`), OFF taken from 3's `info`;
//! 5. `fntrace record -A 'call@arg1/x,arg1/u8' -R 'call@retval/u8'`:
//!    `call` recording as many bytes as a poll, from its registers (the
//!    argument entries' fast path, no load, no link).
//!
//! Each run then polls a hand-written future (`Ticks`, 100 polls a
//! future) as many times, traced with the others (`-F` on its `poll`):
//! plain in 2, by the `Poll` it returns in 3 (`--async`'s
//! `F@arg1/x` and `F@poll1(1)/u64`).
//!
//! Costs: a case's CPU per poll (per call) less the base's, per round;
//! every fntrace run must say `0 lost`; `FNTRACE_BENCH_RUNS` rounds
//! (default 5), the cases in turn in each; medians printed, with the
//! rounds' range.

mod common;

use std::path::Path;
use std::process::Command;

use common::{median, TempDir};

const RESUME: &str = "poll_loop::stepper::{closure#0}";

/// The hand-written future's poll.
const HAND: &str = "<poll_loop::Ticks as core::future::future::Future>::poll";

/// One run's CPU per (call, poll, hand-written poll), in ns.
fn run(command: &mut Command) -> (f64, f64, f64) {
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") || name == "LD_PRELOAD" {
            command.env_remove(name);
        }
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?}: {stderr}");
    assert!(
        stderr.contains(", 0 lost,"),
        "{command:?}: events lost:\n{stderr}"
    );
    let line = stdout.lines().last().unwrap_or_default();
    let mut fields = line.split_whitespace().map(|f| f.parse::<f64>());
    match (fields.next(), fields.next(), fields.next()) {
        (Some(Ok(call)), Some(Ok(poll)), Some(Ok(hand))) => (call, poll, hand),
        _ => panic!("{command:?}: the program printed {stdout:?}"),
    }
}

/// The state's offset `--async` found, from the `info` of its recording.
fn state_offset(data: &Path) -> String {
    let info = String::from_utf8_lossy(&std::fs::read(data.join("info")).unwrap()).into_owned();
    info.split_once(&format!("{RESUME}@arg1/x,arg1["))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(offset, _)| offset.to_string())
        .unwrap_or_else(|| panic!("no state of {RESUME} in info:\n{info}"))
}

fn main() {
    let polls: u64 = std::env::var("FNTRACE_BENCH_POLLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let rounds: usize = std::env::var("FNTRACE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let cli = common::fntrace_cli();
    let dir = TempDir::new("fntrace-bench-async-poll");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = dir.path().join("poll_loop");
    common::run_ok(
        Command::new("rustc")
            .args(["--edition", "2021", "-O", "-g", "-Zinstrument-mcount"])
            .args(["-C", "force-frame-pointers=yes", "-o"])
            .arg(&program)
            .arg(manifest.join("benches/rust/poll_loop.rs"))
            .env("RUSTC_BOOTSTRAP", "1"),
    );
    println!(
        "async_poll bench: {polls} calls of call(i), then {polls} polls of {RESUME}, \
         {rounds} rounds; {}; load {}",
        common::machine_description(),
        common::load_average(),
    );
    let n = polls.to_string();
    let traced = ["-F", RESUME, "-F", "poll_loop::call", "-F", HAND];
    // (call, poll) per case and round, and the hand-written polls apart.
    let mut cpu: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 5];
    let mut hand: Vec<Vec<f64>> = vec![Vec::new(); 5];
    let mut push = |case: usize, (call, poll, hand_poll): (f64, f64, f64)| {
        cpu[case].push((call, poll));
        hand[case].push(hand_poll);
    };
    let mut offset = None;
    for round in 0..rounds {
        let out = |case: &str| dir.path().join(format!("out-{round}-{case}"));
        let fntrace = |case: &str, extra: &[&str]| {
            let mut command = Command::new(&cli);
            command.args(["record", "--no-pager", "-o"]).arg(out(case));
            command.args(extra).arg("--").arg(&program).arg(&n);
            command
        };
        push(0, run(&mut fntrace("base", &["-F", "poll_loop::main"])));
        push(1, run(&mut fntrace("graph", &traced)));
        let mut with_async = vec!["--async"];
        with_async.extend(traced);
        push(2, run(&mut fntrace("async", &with_async)));
        let offset = offset.get_or_insert_with(|| state_offset(&out("async")));
        let state = format!("arg1[{offset}]/u8");
        let by_hand = [
            "-A",
            &format!("{RESUME}@arg1/x,{state}"),
            "-R",
            &format!("{RESUME}@{state}"),
        ];
        let mut by_hand: Vec<&str> = by_hand.to_vec();
        by_hand.extend(traced);
        push(3, run(&mut fntrace("by-hand", &by_hand)));
        // `call` recording what a poll records, laid out alike: 12 bytes
        // at the entry (two data slots), one at the exit (one slot).
        let mut values = vec![
            "-A",
            "poll_loop::call@arg1/x,arg1/u8",
            "-R",
            "poll_loop::call@retval/u8",
        ];
        values.extend(traced);
        push(4, run(&mut fntrace("values", &values)));
        for case in ["base", "graph", "async", "by-hand", "values"] {
            let _ = std::fs::remove_dir_all(out(case));
        }
    }
    let cost = |case: usize, poll: bool| common::less_base(&cpu, case, poll);
    let hand_cost = |case: usize| -> Vec<f64> {
        hand[case]
            .iter()
            .zip(&hand[0])
            .map(|(c, base)| c - base)
            .collect()
    };
    let show = common::median_and_range;
    let mut base: Vec<f64> = cpu[0].iter().map(|c| c.1).collect();
    println!("  base (sites NOPed): {:.1} ns a poll", median(&mut base));
    println!(
        "  graph, no values: poll {}; call {}",
        show(cost(1, true)),
        show(cost(1, false))
    );
    println!("  --async (pin1[OFF], loads): poll {}", show(cost(2, true)));
    println!(
        "  a call recording a poll's values (arg1/x,arg1/u8 and retval/u8): call {}",
        show(cost(4, false))
    );
    println!(
        "  the same values by hand (arg1[OFF], process_vm_readv): poll {}",
        show(cost(3, true))
    );
    let ratio = |a: Vec<f64>, b: Vec<f64>| {
        let mut r: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
        median(&mut r)
    };
    println!(
        "  --async poll / traced call without values: {:.1} x; / a call with a poll's values: \
         {:.1} x; by hand / --async: {:.1} x",
        ratio(cost(2, true), cost(1, false)),
        ratio(cost(2, true), cost(4, false)),
        ratio(cost(3, true), cost(2, true))
    );
    println!(
        "  hand-written poll ({HAND}): graph, no values {}; --async (poll1(1)/u64: the argument \
         entry and the fast exit) {}; / traced call without values: {:.1} x",
        show(hand_cost(1)),
        show(hand_cost(2)),
        ratio(hand_cost(2), cost(1, false))
    );
}
