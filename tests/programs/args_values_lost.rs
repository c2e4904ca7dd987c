//! Values of `-A` functions that had no room beside their event
//! (`tests/c/args_flood.c`: 500,000 calls of `step` through a 4 KiB
//! buffer). In drop mode such an event is written alone, and the count
//! `fntrace record` gives of them is the number of `step` entries in the
//! files without their `more` bit, exactly; in lossless mode with a
//! `--memory` budget none is (before, 164,414 of 500,000 entries lost
//! their values there, unsaid). And with `-R step@retval` through that
//! buffer, lossless: every call's argument and return value are the
//! function's, through the fast exit and the slow one alike. gcc is
//! required (CI installs it).

use crate::common;

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

/// Each call's (argument, return value) of the function at `step` in
/// `dir`'s `.dat` files, in order, `None` for a value without its data.
fn step_calls(dir: &Path, step: u64) -> Vec<(Option<u64>, Option<u64>)> {
    let mut calls = Vec::new();
    for file in common::thread_files(dir) {
        let bytes = std::fs::read(&file).unwrap();
        let word_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let word = word_at(at + 8);
            at += 16;
            let data = (word & 4 != 0).then(|| word_at(at));
            if data.is_some() {
                at += 8;
            }
            if word >> 16 != step {
                continue;
            }
            match word & 3 {
                0 => calls.push((data, None)),
                1 => calls.last_mut().expect("an exit after its entry").1 = data,
                _ => {}
            }
        }
    }
    calls
}

/// A return value recorded for a frame hooked through its site's return
/// stub (the argument entries') is rax as the function left it, whether
/// the fast exit writes it or, at the buffer's fast limit, the slow exit
/// does (which once read the stub's return address in its place): a 4 KiB
/// buffer, lossless, every call's value checked.
#[test]
fn return_values_through_both_exits_are_the_functions() {
    let base = common::temp_dir("args-retval-exits");
    let program = native::build_c(&base, "args_flood", "O2", &["-pg", "-O2"], &[]);
    let dir = base.join("out");
    let calls = CALLS.to_string();
    let args = [
        "-o",
        dir.to_str().unwrap(),
        "--buffer",
        "4K",
        "-A",
        "step@arg1",
        "-R",
        "step@retval",
        "--",
        program.to_str().unwrap(),
        &calls,
    ];
    let output = native::fntrace_record(&base, &args);
    let stderr = native::stderr_of(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(", 0 lost,"), "{stderr}");
    assert!(stderr.contains("waited for the writer"), "{stderr}");
    // step: the address with the most entries.
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for file in common::thread_files(&dir) {
        let bytes = std::fs::read(&file).unwrap();
        let mut at = 0;
        while at + 16 <= bytes.len() {
            let word = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap());
            at += if word & 4 != 0 { 24 } else { 16 };
            if word & 3 == 0 {
                *counts.entry(word >> 16).or_default() += 1;
            }
        }
    }
    let step = counts.into_iter().max_by_key(|&(_, n)| n).unwrap().0;
    let calls = step_calls(&dir, step);
    assert_eq!(calls.len(), CALLS);
    for (i, &(arg, ret)) in calls.iter().enumerate() {
        assert_eq!(arg, Some(i as u64), "call {i}");
        assert_eq!(ret, Some(3 * i as u64 + 1), "call {i}");
    }
    let _ = std::fs::remove_dir_all(&base);
}
