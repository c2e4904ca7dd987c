//! `fntrace record`'s closing lines: what the directory holds, read from
//! its files and the sessions' notes, losses first.

use std::path::Path;

/// What the directory holds, on stderr: events, losses first, and the
/// recorder's waits and CPU as its sessions noted them. Returns whether
/// the recording is complete: every session finished, nothing failed to be
/// written, and nothing lost unless `mode` is `drop` (which the user chose
/// to lose rather than wait).
pub(super) fn summarize(dir: &Path, mode: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        eprintln!(
            "fntrace record: nothing was recorded in {} (was the program built with -pg, \
             -pg -mfentry or -Zinstrument-mcount?)",
            dir.display()
        );
        return true;
    };
    let (mut sessions, mut processes, mut threads, mut bytes) = (0usize, 0usize, 0usize, 0u64);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("sid-") && name.ends_with(".map") {
            sessions += 1;
        } else if name.starts_with("fntrace-session-") && name.ends_with(".txt") {
            // Every process that recorded has one (a forked child runs in
            // its parent's session, with no map of its own).
            processes += 1;
        } else if name.ends_with(".dat") {
            threads += 1;
            bytes += entry.metadata().map_or(0, |m| m.len());
        }
    }
    let notes = fntrace_tools::export::recorder_notes(dir).unwrap_or_default();
    let sum = |key: &str| -> u64 {
        notes
            .iter()
            .flat_map(|note| note.iter())
            .filter(|(k, _)| k == key)
            .filter_map(|(_, value)| value.parse::<u64>().ok())
            .sum()
    };
    let (events, lost, waits) = (sum("events"), sum("lost"), sum("waits"));
    let values_lost = sum("values_lost");
    let (wait_ns, writer_ns) = (sum("wait_ns"), sum("writer_cpu_ns"));
    // The most any one session's buffers held (sessions are processes,
    // each with its own budget).
    let most = |key: &str| -> Option<u64> {
        notes
            .iter()
            .flat_map(|note| note.iter())
            .filter(|(k, _)| k == key)
            .filter_map(|(_, value)| value.parse::<u64>().ok())
            .max()
    };
    let (memory, memory_peak) = (most("memory"), most("memory_peak"));
    let failed = notes
        .iter()
        .filter(|note| note.iter().any(|(key, _)| key == "incomplete"))
        .count();
    if failed > 0 {
        eprintln!(
            "fntrace record: INCOMPLETE: {failed} session(s) could not write the directory (a \
             full disk?): what they could not write is counted as lost below, and each \
             thread's file ends with a lost record"
        );
    }
    // A flight recorder's window: its own gaps, and what it lost before.
    let flight = notes.iter().flatten().any(|(key, _)| key == "flight");
    let (flight_lost, window_lost) = (sum("flight_lost"), sum("window_lost"));
    if flight_lost > 0 {
        let made = sum("flight_events") + flight_lost;
        eprintln!(
            "fntrace record: the flight recorder LOST {flight_lost} of {made} events over the run \
             ({:.1} %: its threads' buffers were full, the writer fell behind): {window_lost} in \
             the window written here (a lost record marks each gap), the others before it",
            100.0 * flight_lost as f64 / made as f64
        );
    }
    let counted = match flight {
        true => format!("{flight_lost} lost over the run ({window_lost} in the window)"),
        false => format!("{lost} lost"),
    };
    if lost > 0 && failed == 0 {
        eprintln!(
            "fntrace record: {lost} events LOST ({:.1} % of {}): the buffers were full; \
             a lost record marks each gap (--mode lossless loses none)",
            100.0 * lost as f64 / (events + lost) as f64,
            events + lost
        );
    }
    if processes == 0 && threads == 0 {
        if let Some(complete) = trigger_snapshots(dir) {
            return complete;
        }
        eprintln!(
            "fntrace record: NOTHING was recorded in {} (see the lines above: the program ran \
             untraced)",
            dir.display()
        );
        return false;
    }
    // Processes that started their part and never ended it (the runtime's
    // ledger, `src/record/ledger.rs`): killed by SIGKILL, even before
    // their first drain, which leaves no other trace; or, in a directory
    // without a ledger, processes that joined it and left no note.
    let ledger = fntrace_tools::export::process_ledger(dir);
    let unfinished = processes
        .saturating_sub(notes.len())
        .max(ledger.unfinished());
    let processes = processes.max(ledger.started);
    if unfinished > 0 {
        // A process that did not finish its part leaves no note: killed
        // by SIGKILL (no handler runs), or its last drain gave up.
        eprintln!(
            "fntrace record: INCOMPLETE: {unfinished} of {processes} process(es) did not finish \
             their part (killed by SIGKILL?): their records up to their last drain are kept; \
             what they held after it is lost, and cannot be counted"
        );
    }
    let untracked = sum("futures_untracked");
    if untracked > 0 {
        eprintln!(
            "fntrace record: {untracked} futures UNTRACKED by the runtime future linker (first \
             polled while its table was full): not in /metrics nor seen by flight triggers; \
             the recording has their polls"
        );
    }
    if values_lost > 0 {
        eprintln!(
            "fntrace record: {values_lost} events of -A/-R functions were written WITHOUT their \
             values: their buffers had no room for them (drop mode or the --memory budget's \
             limit); uftrace replay shows those calls with no values"
        );
    }
    // Never "0 lost" beside a loss no one could count.
    let lost_said = match unfinished {
        0 => counted,
        _ => format!("{counted} and an unknown number in {unfinished} unfinished process(es)"),
    };
    let lost_said = match values_lost {
        0 => lost_said,
        _ => format!("{lost_said} ({values_lost} without their values)"),
    };
    // The sessions' own count when every process left its note: the
    // files' size over 16 would also count argument values (which follow
    // their records) and lost-record markers as records.
    let written = match !flight && !notes.is_empty() && notes.len() >= processes {
        true => format!("{events} events"),
        false => format!("{} records", bytes / 16),
    };
    eprintln!(
        "fntrace record: {written} of {threads} thread(s) in {sessions} session(s), \
         {lost_said}, in {} ({:.1} MB)",
        dir.display(),
        bytes as f64 / 1e6
    );
    if waits > 0 {
        let full = match memory {
            Some(1..) => "the buffers held all of --memory",
            _ => "a thread's buffer (--buffer) was full",
        };
        eprintln!(
            "fntrace record: threads waited for the writer {waits} times, {:.3} s in all \
             (lossless: {full}; the program ran at the writer's pace then)",
            wait_ns as f64 / 1e9
        );
    } else if !notes.is_empty() {
        eprintln!("fntrace record: threads waited for the writer 0 times");
    }
    // A budget of one buffer is none (each thread its buffer, as before
    // the budget existed): the notes say memory=0.
    if let (Some(memory @ 1..), Some(peak)) = (memory, memory_peak) {
        eprintln!(
            "fntrace record: the buffers held at most {:.1} MB of the {:.1} MB budget (--memory)",
            peak as f64 / 1e6,
            memory as f64 / 1e6
        );
    }
    if writer_ns > 0 && events > 0 {
        eprintln!(
            "fntrace record: the writer used {:.3} s of CPU ({:.1} ns per event)",
            writer_ns as f64 / 1e9,
            writer_ns as f64 / events as f64
        );
    }
    eprintln!(
        "fntrace record: read it with `fntrace report {}` or `uftrace replay -d {}`",
        dir.display(),
        dir.display()
    );
    failed == 0 && unfinished == 0 && ((lost == 0 && values_lost == 0) || mode == "drop")
}

/// A flight recorder with triggers (`--flight` and
/// `FNTRACE_FLIGHT_TRIGGER`) writes its snapshots as directories inside
/// `dir`, each with its `trigger.txt`: says how many, where, and what the
/// runtime future linker could not follow (their notes' most recent
/// `futures_untracked`); `None` if there is none.
fn trigger_snapshots(dir: &Path) -> Option<bool> {
    let mut snapshots: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("trigger.txt").is_file())
        .collect();
    if snapshots.is_empty() {
        return None;
    }
    snapshots.sort();
    let untracked = snapshots
        .iter()
        .filter_map(|s| fntrace_tools::export::recorder_notes(s).ok())
        .flatten()
        .flatten()
        .filter(|(key, _)| key == "futures_untracked")
        .filter_map(|(_, value)| value.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    if untracked > 0 {
        eprintln!(
            "fntrace record: {untracked} futures UNTRACKED by the last snapshot (first polled \
             while the runtime future linker's table was full): no trigger saw them"
        );
    }
    eprintln!(
        "fntrace record: {} flight snapshot(s) in {}, each with its trigger.txt; read one with \
         `fntrace report {}`",
        snapshots.len(),
        dir.display(),
        snapshots[0].display()
    );
    Some(true)
}
