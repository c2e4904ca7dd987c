//! The session files of a directory that several processes record into
//! (a program that forks or execs while recording, `fntrace record`): each
//! program is one uftrace session, with its own map file, `.sym` files and
//! threads' `.dat` files (a forked child, as in uftrace's recordings, runs
//! in its parent's session until it execs: its part is a `FORK` line and
//! its threads), and these three files are shared:
//!
//! - `info` names the first session's executable and command line and
//!   lists every thread of every session (`taskinfo:tids`);
//! - `task.txt` has each session's `SESS` line (a forked child's `FORK`
//!   line) and its `TASK` lines, in the order the sessions began;
//! - `fntrace.txt` has every session's thread names and added records.
//!
//! Each session keeps its part in a fragment file of its own,
//! `fntrace-session-SID.txt` (which uftrace ignores), and the shared files
//! are rebuilt from all fragments, under an exclusive lock on
//! `.fntrace.lock` so that two processes never drop each other's part.
//! A session that finds the lock taken does not wait for it: it leaves a
//! request (`.fntrace.rebuild`, made after its fragment) that the holder
//! finds when it is done, and rebuilds for it. Two hundred forked children
//! ending at once made one rebuild each, one after the other, each reading
//! every fragment: the last waited seconds, and a child leaving with
//! `_exit` gave up on its last drain. Every file is written whole and
//! renamed into place ([`TraceDir::replace`]): a reader never sees half of
//! one.
//!
//! A fragment:
//!
//! ```text
//! start 1234567890            session start, ns
//! exename /usr/bin/prog
//! cmdline prog --flag
//! tids 101,102
//! [task.txt]
//! SESS ...
//! TASK ...
//! [fntrace.txt]
//! thread 102 worker
//! ```

use std::path::Path;

use super::super::dirfd::TraceDir;
use super::super::ExportError;
use super::format::{info_bytes, one_line, FNTRACE_FILE};
use super::write::fntrace_text;
use crate::trace::{ThreadTrace, Trace};

/// Prefix and suffix of the fragment files' names.
const FRAGMENT_PREFIX: &str = "fntrace-session-";
const FRAGMENT_SUFFIX: &str = ".txt";
/// The lock file the sessions of a directory take to rebuild the shared
/// files.
const LOCK_FILE: &str = ".fntrace.lock";
/// Present while a fragment written since the last rebuild began is not in
/// the shared files.
const REBUILD_ASKED: &str = ".fntrace.rebuild";

/// One session's part of the shared files.
pub(super) struct Fragment {
    /// Session start, ns.
    pub start: u64,
    pub exe: String,
    pub cmdline: String,
    pub tids: Vec<u32>,
    /// Its `task.txt` lines.
    pub task: String,
    /// Its `fntrace.txt` lines (comments left out).
    pub notes: String,
    /// Its argument and return-value specs (see [`Trace::arg_spec`]).
    pub arg_spec: String,
    pub retval_spec: String,
}

impl Fragment {
    fn text(&self) -> String {
        let tids: Vec<String> = self.tids.iter().map(u32::to_string).collect();
        let notes: String = self
            .notes
            .lines()
            .filter(|line| !line.starts_with('#'))
            .map(|line| format!("{line}\n"))
            .collect();
        let mut specs = String::new();
        if !self.arg_spec.is_empty() {
            specs += &format!("argspec {}\n", one_line(&self.arg_spec));
        }
        if !self.retval_spec.is_empty() {
            specs += &format!("retspec {}\n", one_line(&self.retval_spec));
        }
        format!(
            "start {}\nexename {}\ncmdline {}\ntids {}\n{specs}[task.txt]\n{}[fntrace.txt]\n{notes}",
            self.start,
            one_line(&self.exe),
            one_line(&self.cmdline),
            tids.join(","),
            self.task,
        )
    }

    fn parse(path: &Path, text: &str) -> Result<Fragment, ExportError> {
        let bad = |what: &str| ExportError::malformed(path, what);
        let mut fragment = Fragment {
            start: 0,
            exe: String::new(),
            cmdline: String::new(),
            tids: Vec::new(),
            task: String::new(),
            notes: String::new(),
            arg_spec: String::new(),
            retval_spec: String::new(),
        };
        let mut section = "";
        let mut started = false;
        for line in text.lines() {
            if line == "[task.txt]" || line == "[fntrace.txt]" {
                section = line;
                continue;
            }
            match section {
                "[task.txt]" => {
                    fragment.task.push_str(line);
                    fragment.task.push('\n');
                }
                "[fntrace.txt]" => {
                    fragment.notes.push_str(line);
                    fragment.notes.push('\n');
                }
                _ => {
                    let (key, value) = line.split_once(' ').unwrap_or((line, ""));
                    match key {
                        "start" => {
                            fragment.start = value.parse().map_err(|_| bad("bad start"))?;
                            started = true;
                        }
                        "exename" => fragment.exe = value.to_string(),
                        "cmdline" => fragment.cmdline = value.to_string(),
                        "argspec" => fragment.arg_spec = value.to_string(),
                        "retspec" => fragment.retval_spec = value.to_string(),
                        "tids" => {
                            fragment.tids = value
                                .split(',')
                                .filter(|t| !t.is_empty())
                                .map(|t| t.parse().map_err(|_| bad("bad tid")))
                                .collect::<Result<_, _>>()?;
                        }
                        _ => return Err(bad("unknown line in a session fragment")),
                    }
                }
            }
        }
        if !started || section.is_empty() {
            return Err(bad("incomplete session fragment"));
        }
        Ok(fragment)
    }
}

/// Whether `dir` holds a recording that other sessions can join: one made
/// by [`UftraceStream`](super::UftraceStream).
pub(super) fn is_shared_recording(dir: &TraceDir) -> Result<bool, ExportError> {
    Ok(dir.names()?.iter().any(|name| {
        let name = name.to_string_lossy();
        name.starts_with(FRAGMENT_PREFIX) && name.ends_with(FRAGMENT_SUFFIX)
    }))
}

/// Writes `fragment` as session `sid`'s part of `dir`, then rebuilds the
/// shared files from every session's part.
pub(super) fn write_session(
    dir: &TraceDir,
    sid: &str,
    fragment: &Fragment,
) -> Result<(), ExportError> {
    dir.replace(
        &format!("{FRAGMENT_PREFIX}{sid}{FRAGMENT_SUFFIX}"),
        fragment.text().as_bytes(),
    )?;
    // After the fragment: a rebuild that begins after the request is seen
    // reads the fragment.
    dir.open_lock(REBUILD_ASKED)?;
    let lock_path = dir.path().join(LOCK_FILE);
    let lock = dir.open_lock(LOCK_FILE)?;
    loop {
        match lock.try_lock() {
            Ok(()) => {}
            // The holder checks for requests after it unlocks.
            Err(std::fs::TryLockError::WouldBlock) => return Ok(()),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(ExportError::io(&lock_path, "locking", e))
            }
        }
        dir.remove(REBUILD_ASKED)?;
        let rebuilt = rebuild_shared_files(dir);
        // Released explicitly, not by closing: a child forked meanwhile
        // would hold the open file (and so the lock) for as long as it
        // runs.
        lock.unlock()
            .map_err(|e| ExportError::io(&lock_path, "unlocking", e))?;
        rebuilt?;
        if !dir.exists(REBUILD_ASKED) {
            return Ok(());
        }
    }
}

/// Rebuilds the shared files of the recording at `dir` if a session asked
/// for it and none did it (the session holding the lock was killed before
/// it saw the request): `fntrace record` calls it once the program and its
/// children have ended. Waits for the lock.
pub(super) fn settle_shared_files(dir: &TraceDir) -> Result<(), ExportError> {
    if !dir.exists(REBUILD_ASKED) {
        return Ok(());
    }
    let lock_path = dir.path().join(LOCK_FILE);
    let lock = dir.open_lock(LOCK_FILE)?;
    lock.lock()
        .map_err(|e| ExportError::io(&lock_path, "locking", e))?;
    dir.remove(REBUILD_ASKED)?;
    rebuild_shared_files(dir)
}

/// `info`, `task.txt` and `fntrace.txt` from every fragment in `dir`.
fn rebuild_shared_files(dir: &TraceDir) -> Result<(), ExportError> {
    let mut fragments = Vec::new();
    for name in dir.names()? {
        let name = name.to_string_lossy();
        if !(name.starts_with(FRAGMENT_PREFIX) && name.ends_with(FRAGMENT_SUFFIX)) {
            continue;
        }
        let path = dir.path().join(&*name);
        // A fragment removed meanwhile is no fragment.
        let Some(bytes) = dir.read(&name)? else {
            continue;
        };
        let text = String::from_utf8(bytes)
            .map_err(|_| ExportError::malformed(&path, "a session fragment that is not UTF-8"))?;
        fragments.push(Fragment::parse(&path, &text)?);
    }
    fragments.sort_by_key(|f| f.start);
    let Some(first) = fragments.first() else {
        return Ok(());
    };
    let process = Trace {
        exe: first.exe.clone(),
        cmdline: first.cmdline.clone(),
        arg_spec: first.arg_spec.clone(),
        retval_spec: first.retval_spec.clone(),
        ..Trace::default()
    };
    // A thread that execs is in two sessions (one `.dat` file): `info`
    // lists it once.
    let mut listed = std::collections::HashSet::new();
    let threads: Vec<ThreadTrace> = fragments
        .iter()
        .flat_map(|f| f.tids.iter())
        .filter(|&&tid| listed.insert(tid))
        .map(|&tid| ThreadTrace {
            tid,
            ..ThreadTrace::default()
        })
        .collect();
    // A second `TASK` line for a thread (after an exec) is how uftrace
    // learns that the thread's later records belong to the new session.
    let task: String = fragments.iter().map(|f| f.task.as_str()).collect();
    let mut notes = fntrace_text(&[], &[]);
    for fragment in &fragments {
        notes.push_str(&fragment.notes);
    }
    dir.replace("info", &info_bytes(&process, &threads))?;
    dir.replace("task.txt", task.as_bytes())?;
    dir.replace(FNTRACE_FILE, notes.as_bytes())
}
