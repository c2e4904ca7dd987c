//! What recording arguments and a return value costs per call: `cargo
//! bench --bench args`.
//!
//! `benches/c/args_cost.c` (`gcc -O2 -pg`) calls `plain(a, b)` N times,
//! then `spec(a, b)` N times (`FNTRACE_BENCH_CALLS`, default 2M), each
//! loop timed with the thread's CPU clock. Run as:
//!
//! 1. `fntrace record -F main`: both functions' sites NOPs (the base);
//! 2. `fntrace record`: both traced by the graph tracer (fast path);
//! 3. `fntrace record -A 'spec@arg1,arg2' -R 'spec@retval'`: `spec` with
//!    its two integer arguments and return value, `plain` as in 2;
//! 4. `uftrace record` with the same `-A`/`-R`, for reference.
//!
//! Costs: a case's CPU per call less the base's, per round; the target
//! (issue 41): `spec` in 3 at most 2 x `spec` in 2 (its sites take the
//! graph tracer's argument entries, `src/builtin/graph/arg_recipes.rs`),
//! and `plain` in 3 as in 2 (its sites keep the plain fast path). Every
//! fntrace run
//! must say `0 lost` (a cost measured while events were dropped is not a
//! cost); `FNTRACE_BENCH_RUNS` rounds (default 5), the cases in turn in
//! each; medians printed, with the rounds' range.

mod common;

use std::path::Path;
use std::process::Command;

use common::{median, TempDir};

const SPECS: [&str; 4] = ["-A", "spec@arg1,arg2", "-R", "spec@retval"];

/// One run's CPU per call of (plain, spec), in ns.
fn run(command: &mut Command, fntrace: bool) -> (f64, f64) {
    for (name, _) in std::env::vars() {
        if name.starts_with("FNTRACE") || name == "LD_PRELOAD" {
            command.env_remove(name);
        }
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?}: {stderr}");
    if fntrace {
        assert!(
            stderr.contains(", 0 lost,"),
            "{command:?}: events lost:\n{stderr}"
        );
    }
    let line = stdout.lines().last().unwrap_or_default();
    let mut fields = line.split_whitespace().map(|f| f.parse::<f64>());
    match (fields.next(), fields.next()) {
        (Some(Ok(plain)), Some(Ok(spec))) => (plain, spec),
        _ => panic!("{command:?}: the program printed {stdout:?}"),
    }
}

fn main() {
    let calls: u64 = std::env::var("FNTRACE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let rounds: usize = std::env::var("FNTRACE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let cli = common::fntrace_cli();
    let dir = TempDir::new("fntrace-bench-args");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let program = dir.path().join("args_cost");
    common::run_ok(
        Command::new("gcc")
            .args(["-O2", "-pg", "-o"])
            .arg(&program)
            .arg(manifest.join("benches/c/args_cost.c")),
    );
    println!(
        "args bench: {calls} calls of plain(a, b) then of spec(a, b), {rounds} rounds; {}; load {}",
        common::machine_description(),
        common::load_average(),
    );
    let calls = calls.to_string();
    // (plain, spec) per case and round.
    let mut cpu: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 4];
    for round in 0..rounds {
        let out = |case: &str| dir.path().join(format!("out-{round}-{case}"));
        let fntrace = |case: &str, extra: &[&str]| {
            let mut command = Command::new(&cli);
            command.args(["record", "--no-pager", "-o"]).arg(out(case));
            command.args(extra).arg("--").arg(&program).arg(&calls);
            command
        };
        cpu[0].push(run(&mut fntrace("base", &["-F", "main"]), true));
        cpu[1].push(run(&mut fntrace("graph", &[]), true));
        cpu[2].push(run(&mut fntrace("args", &SPECS), true));
        let mut uftrace = Command::new("uftrace");
        uftrace
            .args(["record", "--no-pager", "--no-sched", "-d"])
            .arg(out("uftrace"))
            .args(SPECS)
            .arg(&program)
            .arg(&calls);
        cpu[3].push(run(&mut uftrace, false));
        let _ = std::fs::remove_dir_all(dir.path().join(format!("out-{round}-args")));
    }
    let cost = |case: usize, spec: bool| common::less_base(&cpu, case, spec);
    let show = common::median_and_range;
    let mut base: Vec<f64> = cpu[0].iter().map(|c| c.1).collect();
    println!(
        "  base (sites NOPed): spec {:.1} ns a call",
        median(&mut base)
    );
    println!(
        "  graph, no spec: spec {}; plain {}",
        show(cost(1, true)),
        show(cost(1, false))
    );
    println!(
        "  graph, spec with -A arg1,arg2 -R retval: spec {}; plain beside it {}",
        show(cost(2, true)),
        show(cost(2, false))
    );
    println!("  uftrace, same specs: spec {}", show(cost(3, true)));
    let mut ratios: Vec<f64> = cost(2, true)
        .iter()
        .zip(cost(1, true))
        .map(|(with, without)| with / without)
        .collect();
    let ratio = median(&mut ratios);
    let verdict = if ratio <= 2.0 { "met" } else { "MISS" };
    println!("  spec with values / without: {ratio:.1} x (target <= 2 x: {verdict})");
}
