//! A recording across the process's life: the fork handlers that give a
//! child its own writer, the directory lock a fork must not inherit held,
//! and the writer finished before an `exec` and restarted if it fails.

use super::*;

/// Installs (once) the fork handlers that give a forked child its own
/// writer.
pub(super) fn follow_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering fork handlers has no preconditions; the
        // handlers take and release `WRITER` only.
        unsafe {
            libc::pthread_atfork(
                Some(writer_before_fork),
                Some(writer_after_fork_in_parent),
                Some(writer_after_fork_in_child),
            );
        }
    });
}

/// Held by a writer while it writes the directory, and by a forking thread
/// across the fork: the shared session files are rebuilt under a `flock`,
/// which a child inherits with the open file, so a child forked while its
/// parent's writer held it would wait for it forever.
pub(super) static DIRECTORY_WRITE: Mutex<()> = Mutex::new(());

pub(super) fn directory_write() -> std::sync::MutexGuard<'static, ()> {
    DIRECTORY_WRITE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// `WRITER` and `DIRECTORY_WRITE`, held by the forking thread across
    /// the fork.
    static WRITER_HELD_ACROSS_FORK: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Option<Writer>>>> =
        const { std::cell::RefCell::new(None) };
    static DIRECTORY_HELD_ACROSS_FORK: std::cell::RefCell<Option<std::sync::MutexGuard<'static, ()>>> =
        const { std::cell::RefCell::new(None) };
}

extern "C" fn writer_before_fork() {
    let guard = writer_slot();
    WRITER_HELD_ACROSS_FORK.with(|held| *held.borrow_mut() = Some(guard));
    let guard = directory_write();
    DIRECTORY_HELD_ACROSS_FORK.with(|held| *held.borrow_mut() = Some(guard));
}

extern "C" fn writer_after_fork_in_parent() {
    DIRECTORY_HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
    WRITER_HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
}

/// In the child: the parent's writer thread is not here. Its handle is
/// forgotten (joining or detaching a thread of another process is
/// undefined), and a writer of the child's own takes over the recording.
extern "C" fn writer_after_fork_in_child() {
    DIRECTORY_HELD_ACROSS_FORK.with(|held| drop(held.borrow_mut().take()));
    WRITER_HELD_ACROSS_FORK.with(|held| {
        let Some(mut slot) = held.borrow_mut().take() else {
            return;
        };
        let Some(parent) = uninstall(&mut slot) else {
            return;
        };
        let (tracer, dir, interval, mode) = (
            parent.tracer.clone(),
            parent.dir.clone(),
            parent.interval,
            parent.mode,
        );
        std::mem::forget(parent.handle);
        // SAFETY: getppid has no preconditions.
        let parent_pid = unsafe { libc::getppid() } as u32;
        let session = Err((now_ns(), Some(parent_pid)));
        match start_writer(&tracer, &dir, interval, mode, session) {
            Ok(writer) => install(&mut slot, writer),
            Err(err) => eprintln!(
                "fntrace: the forked child {} is not recorded: {err}",
                std::process::id()
            ),
        }
    });
}

/// Before this process execs: drains what the buffers hold and finishes its
/// session of the recording, so that the new program (which joins the
/// directory, `FNTRACE_APPEND=1`) continues it. The tracer stays enabled
/// (if the exec fails, [`resume_after_failed_exec`] starts a writer again).
/// Returns whether a recording was running.
pub(crate) fn finish_before_exec() -> bool {
    let _untraced = Untraced::begin();
    if !writing_in_this_process() {
        return false;
    }
    let Some(writer) = uninstall(&mut writer_slot()) else {
        return false;
    };
    let resume = ExecResume {
        tracer: writer.tracer.clone(),
        dir: writer.dir.clone(),
        interval: writer.interval,
        mode: writer.mode,
    };
    if let Err(err) = stop_writer(writer) {
        eprintln!("fntrace: finishing the recording before exec: {err}");
    }
    *EXEC_RESUME.lock().unwrap_or_else(PoisonError::into_inner) = Some(resume);
    true
}

/// What `finish_before_exec` stopped, for a failed exec.
pub(super) static EXEC_RESUME: Mutex<Option<ExecResume>> = Mutex::new(None);

/// A writer's settings, kept across a failed exec.
pub(super) struct ExecResume {
    tracer: String,
    dir: PathBuf,
    interval: Duration,
    mode: RecordMode,
}

/// After an exec that failed (this program goes on): a writer again, as a
/// new session of the same directory.
pub(crate) fn resume_after_failed_exec() {
    let _untraced = Untraced::begin();
    let Some(resume) = EXEC_RESUME
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        return;
    };
    let session = Err((now_ns(), None));
    match start_writer(
        &resume.tracer,
        &resume.dir,
        resume.interval,
        resume.mode,
        session,
    ) {
        Ok(writer) => install(&mut writer_slot(), writer),
        Err(err) => eprintln!("fntrace: the recording stopped after a failed exec: {err}"),
    }
}
