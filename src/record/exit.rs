//! A recording's end when the process leaves with `_exit` (perhaps from a
//! signal handler): no `atexit` handler runs, so the writer's last drain
//! is waited for here, as long as it makes progress.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{uninstall, writing_in_this_process, WRITER};
use crate::rt::thread::Untraced;
use crate::sys;
use crate::tracers::graph::GRAPH_TRACER;

/// Before this process ends without running `atexit` handlers (`_exit`,
/// perhaps from a signal handler): drains what the buffers hold and
/// finishes the directory. Waits while the writer makes progress (uses
/// CPU): it gives up after [`EXIT_WAIT`] without any (the interrupted code
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
    use std::os::unix::thread::JoinHandleExt as _;
    let thread = writer.handle.as_pthread_t();
    let began = Instant::now();
    let mut progress = (sys::cpu_ns_of(thread), began);
    while !writer.handle.is_finished() {
        let now = Instant::now();
        let cpu = sys::cpu_ns_of(thread);
        if cpu != progress.0 {
            progress = (cpu, now);
        }
        if now.duration_since(progress.1) > EXIT_WAIT || now.duration_since(began) > EXIT_WAIT_MOST
        {
            eprintln!(
                "fntrace: _exit: the recording's last drain made no progress for {:?} (waited \
                 {:.1?}): this process's last events are not in the recording, which shows it \
                 unfinished",
                EXIT_WAIT,
                now.duration_since(began)
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Ok(Err(err)) = writer.handle.join() {
        eprintln!("fntrace: finishing the recording at _exit: {err}");
    }
}

/// How long `_exit` waits for a writer that makes no progress.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long `_exit` waits for the writer's last drain at most.
const EXIT_WAIT_MOST: Duration = Duration::from_secs(60);
