//! A recording's end when the process leaves with `_exit` (perhaps from a
//! signal handler), or is ended by a signal whose default action the
//! preloaded library's handler stands for: no `atexit` handler runs, so
//! the writer's last drain and the session's end are waited for here, as
//! long as the writer makes progress.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::{uninstall, writing_in_this_process, WRITER};
use crate::builtin::graph::GRAPH_TRACER;
use crate::rt::thread::Untraced;
use crate::sys::futex::{futex_wait, futex_wake};

/// Before this process ends without running `atexit` handlers (`_exit`,
/// perhaps from a signal handler): drains what the buffers hold and
/// finishes the directory. Waits while the writer makes progress (uses
/// CPU, or is runnable or in I/O: on 2 vCPUs shared by hundreds of
/// processes ending at once, a writer may wait seconds for a CPU or the
/// disk): it gives up after
/// [`EXIT_WAIT`] without any (the interrupted code
/// might hold a lock the writer needs; then what was drained last stays,
/// and the recording shows this process unfinished), or after
/// [`EXIT_WAIT_MOST`] in all. A fixed 2 s was too short for 200 children
/// ending at once on 2 vCPUs.
pub(crate) fn finish_before_exit() {
    let _untraced = Untraced::begin();
    if !writing_in_this_process() {
        return;
    }
    let Ok(mut slot) = WRITER.try_lock() else {
        return;
    };
    let Some(writer) = uninstall(&mut slot) else {
        return;
    };
    drop(slot);
    writer.shared.stop.store(true, Ordering::Release);
    GRAPH_TRACER.wake_reader();
    if let Err(waited) = wait_for_writer(EXIT_WAIT) {
        eprintln!(
            "fntrace: _exit: the recording's last drain made no progress for {EXIT_WAIT:?} \
             (waited {waited:.1?}): this process's last events are not in the recording, which \
             shows it unfinished"
        );
        return;
    }
    if let Ok(Err(err)) = writer.handle.join() {
        eprintln!("fntrace: finishing the recording at _exit: {err}");
    }
}

/// How long `_exit` waits for a writer that makes no progress.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long `_exit` waits for the writer's last drain at most.
const EXIT_WAIT_MOST: Duration = Duration::from_secs(60);
/// How long a signal handler waits for a writer that makes no progress:
/// longer than `_exit`'s, since a process ended by a signal has no other
/// chance to finish its recording (2 s gave up for 50 of 201 children
/// ended by SIGTERM together beside a CPU hog, when each waiter still
/// polled every millisecond and so starved the writers).
const SIGNAL_WAIT: Duration = Duration::from_secs(10);

/// Set by a signal handler: the writer of this process finishes the
/// recording (a last drain, the session's note) as if stopped.
pub(super) static FINISH_ASKED: AtomicBool = AtomicBool::new(false);
/// The process whose writer finished last (0: none): a forked child's copy
/// names its parent, not itself.
static FINISHED_IN: AtomicU32 = AtomicU32::new(0);
/// The CPU clock of this process's writer thread (see
/// `pthread_getcpuclockid`), readable in a signal handler.
static WRITER_CLOCK: AtomicI32 = AtomicI32::new(0);
/// The writer thread (its `pthread_t`): a handler running on the writer
/// itself must not wait for it.
static WRITER_THREAD: AtomicU64 = AtomicU64::new(0);

/// Called by the thread that started `writer`, before it returns: a
/// forked child's handler may wait for its writer before that thread has
/// run any code.
pub(super) fn writer_spawned(writer: libc::pthread_t) {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `writer` is a live thread of this process, just started;
    // `clock` is a valid place to write.
    if unsafe { libc::pthread_getcpuclockid(writer, &mut clock) } == 0 {
        WRITER_CLOCK.store(clock, Ordering::Release);
    }
    WRITER_THREAD.store(writer, Ordering::Release);
}

/// This process's writer thread: its process id (high half) and thread
/// id, readable in a signal handler.
static WRITER_TASK: AtomicU64 = AtomicU64::new(0);

/// Called by the writer thread when it starts. It blocks the signals that
/// ask a process to end, so that the kernel delivers them to another
/// thread, whose handler can wait for this one.
pub(super) fn writer_started() {
    // SAFETY: getpid and gettid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
    WRITER_TASK.store((u64::from(pid) << 32) | u64::from(tid), Ordering::Release);
    // SAFETY: `set` is a valid sigset_t, emptied before use; changing this
    // thread's own mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signo in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, signo);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Called by the writer thread when it has finished the session.
pub(super) fn writer_finished() {
    super::ledger::ended();
    FINISHED_IN.store(std::process::id(), Ordering::Release);
    futex_wake(&FINISHED_IN, i32::MAX);
}

/// From a signal handler about to let the signal end the process: asks
/// this process's writer to drain once more and finish the session (what
/// `_exit` does, but on the writer thread: the handler itself only reads
/// and writes atomics, wakes the writer with a futex, reads a CPU clock
/// and sleeps, all async-signal-safe), and waits for it while it makes
/// progress, as [`finish_before_exit`] does: the interrupted thread may
/// hold a lock the writer needs, and then what was drained last stays.
pub(crate) fn finish_from_signal_handler() {
    // SAFETY: pthread_self only reads this thread's pointer.
    let this_thread = unsafe { libc::pthread_self() };
    if !writing_in_this_process() || this_thread == WRITER_THREAD.load(Ordering::Acquire) {
        return;
    }
    FINISH_ASKED.store(true, Ordering::Release);
    GRAPH_TRACER.wake_reader();
    let _ = wait_for_writer(SIGNAL_WAIT);
}

/// Waits until this process's writer has finished its session, while it
/// makes progress: gives up after `still` without any (its CPU clock did
/// not move and it was not runnable) or after [`EXIT_WAIT_MOST`] in all,
/// with how long it waited. Sleeps on a futex the writer wakes, checking
/// progress every [`PROGRESS_CHECK`]: hundreds of children ending at once
/// each polling every millisecond took the CPU their writers needed (200
/// children: 10-20 s of system time, against 0.2 s for uftrace).
/// Async-signal-safe: futex, clock_gettime, open/read/close.
fn wait_for_writer(still: Duration) -> Result<(), Duration> {
    // SAFETY: getpid is async-signal-safe.
    let pid = unsafe { libc::getpid() } as u32;
    let began = monotonic();
    let mut progress = (writer_cpu(), began);
    loop {
        let finished = FINISHED_IN.load(Ordering::Acquire);
        if finished == pid {
            return Ok(());
        }
        futex_wait(&FINISHED_IN, finished, Some(PROGRESS_CHECK));
        let now = monotonic();
        let cpu = writer_cpu();
        if cpu != progress.0 || writer_runnable() {
            progress = (cpu, now);
        }
        if FINISHED_IN.load(Ordering::Acquire) != pid
            && (now.saturating_sub(progress.1) > still
                || now.saturating_sub(began) > EXIT_WAIT_MOST)
        {
            return Err(now.saturating_sub(began));
        }
    }
}

/// How often a wait for the writer checks that it makes progress.
const PROGRESS_CHECK: Duration = Duration::from_millis(50);

/// `CLOCK_MONOTONIC` as a duration. Async-signal-safe.
fn monotonic() -> Duration {
    clock(libc::CLOCK_MONOTONIC).unwrap_or_default()
}

/// The writer thread's CPU clock (None before it started or once it
/// ended). Async-signal-safe.
fn writer_cpu() -> Option<Duration> {
    match WRITER_CLOCK.load(Ordering::Acquire) {
        0 => None,
        writer => clock(writer),
    }
}

/// Reads `clock` (async-signal-safe: clock_gettime).
fn clock(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe; `ts` is writable.
    (unsafe { libc::clock_gettime(clock, &mut ts) } == 0)
        .then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Whether this process's writer thread is runnable or in I/O (state `R`
/// or `D` in `/proc/self/task/TID/stat`: running, waiting for a CPU, or
/// for the disk, which a loaded machine makes seconds long), or not
/// started yet (it will run); not when it sleeps (`S`: on a lock, perhaps
/// one the interrupted thread holds). Async-signal-safe: `open`, `read`
/// and `close` on a stack buffer.
fn writer_runnable() -> bool {
    let task = WRITER_TASK.load(Ordering::Acquire);
    // SAFETY: getpid is async-signal-safe.
    if (task >> 32) as u32 != unsafe { libc::getpid() } as u32 {
        return true;
    }
    let mut path = [0u8; 48];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        path[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(b"/proc/self/task/");
    let mut digits = [0u8; 10];
    let (mut tid, mut n) = (task as u32, 0);
    loop {
        digits[n] = b'0' + (tid % 10) as u8;
        (tid, n) = (tid / 10, n + 1);
        if tid == 0 {
            break;
        }
    }
    digits[..n].reverse();
    put(&digits[..n]);
    put(b"/stat\0");
    // SAFETY: `path` is NUL-terminated; open is async-signal-safe.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut stat = [0u8; 512];
    // SAFETY: `stat` is writable for its length; `fd` is ours, closed once.
    let read = unsafe {
        let read = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        read
    };
    let stat = &stat[..read.max(0) as usize];
    // `TID (NAME) S …`: the state follows the name's last `)`.
    stat.iter()
        .rposition(|&b| b == b')')
        .and_then(|end| stat.get(end + 2))
        .is_some_and(|&state| state == b'R' || state == b'D')
}
