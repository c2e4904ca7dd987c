//! Values of `-A` functions that had no room beside their event
//! (`tests/c/args_flood.c`: 500,000 calls of `step` through a 4 KiB
//! buffer). In drop mode such an event is written alone, and the count
//! `fntrace record` gives of them is the number of `step` entries in the
//! files without their `more` bit, exactly; in lossless mode with a
//! `--memory` budget none is (before, 164,414 of 500,000 entries lost
//! their values there, unsaid). gcc is required (CI installs it).

mod common;

use common::native;
use std::collections::HashMap;
use std::path::Path;

const CALLS: usize = 500_000;

/// Entries of the most called function in `dir`'s `.dat` files: with their
/// values (the `more` bit), and without. With `step@arg1` (8 bytes) the
/// data after a record is one 8-byte word.
fn step_entries(dir: &Path) -> (usize, usize) {
    let mut by_address: HashMap<u64, (usize, usize)> = HashMap::new();
    for file in common::thread_files(dir) {
        let bytes = std::fs::read(&file).unwrap();
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let word = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap());
            at += 16;
            let more = word & 4 != 0;
            if word & 3 == 0 {
                let counts = by_address.entry(word >> 16).or_default();
                match more {
                    true => counts.0 += 1,
                    false => counts.1 += 1,
                }
            }
            if more {
                at += 8;
            }
        }
        assert_eq!(at, bytes.len(), "{}: records and data", file.display());
    }
    by_address
        .into_values()
        .max_by_key(|&(with, without)| with + without)
        .unwrap_or_default()
}

/// `fntrace record`'s count of events written without their values.
fn values_lost_said(stderr: &str) -> usize {
    match stderr.split_once(" without their values)") {
        None => 0,
        Some((before, _)) => before.rsplit('(').next().unwrap().parse().unwrap(),
    }
}

#[test]
fn values_without_room_are_counted_exactly_or_kept() {
    let base = common::temp_dir("args-values-lost");
    let program = native::build_c(&base, "args_flood", "O2", &["-pg", "-O2"], &[]);
    let calls = CALLS.to_string();
    let record = |name: &str, options: &[&str]| {
        let dir = base.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut args = vec![
            "-o",
            dir.to_str().unwrap(),
            "--buffer",
            "4K",
            "-A",
            "step@arg1",
        ];
        args.extend(options);
        args.extend(["--", program.to_str().unwrap(), &calls]);
        let output = native::fntrace_record(&base, &args);
        let stderr = native::stderr_of(&output);
        assert!(output.status.code().is_some(), "{stderr}");
        (dir, stderr)
    };

    // Drop mode: the buffer overflows thousands of times; an entry that
    // finds one free slot goes alone. Not every run meets one: up to 10.
    let mut met = false;
    for run in 0..10 {
        let (dir, stderr) = record("drop", &["--mode", "drop"]);
        let said = values_lost_said(&stderr);
        let (_, without) = step_entries(&dir);
        assert_eq!(said, without, "run {run}: said vs in the files:\n{stderr}");
        if said > 0 {
            assert!(stderr.contains("WITHOUT their values"), "{stderr}");
            met = true;
            break;
        }
    }
    assert!(met, "10 runs in drop mode and no entry without its values");

    // Lossless with a budget: every entry keeps its value.
    let (dir, stderr) = record("budget", &["--memory", "64K"]);
    assert_eq!(values_lost_said(&stderr), 0, "{stderr}");
    assert_eq!(step_entries(&dir), (CALLS, 0), "{stderr}");
    assert!(
        stderr.contains(&format!("{} events of 1 thread(s)", 2 * CALLS + 8)),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
