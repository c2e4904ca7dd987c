//! Starting fntrace's own threads (the recorder's writer, the control
//! socket's server, the flight recorder, the exit helpers) so that they
//! never make a patch operation fall back to stopping the world, and are
//! never traced: not even the C library's functions they call, which a
//! program's `-P '*'` patches too.

use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;

use super::own_threads::{self, Spawning};
use super::thread::Untraced;

/// Spawns a thread named `name` running `f`, and returns once it runs:
/// a thread being created has every signal blocked (glibc unblocks them
/// just before `f`), and the breakpoint patch protocol avoids patching
/// while any thread blocks SIGTRAP, so enabling right after a spawn would
/// fall back to stopping the world.
pub(crate) fn spawn_running<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    // The creating thread's own calls (`pthread_create`, `mmap`) are
    // fntrace's too.
    let _untraced = Untraced::begin();
    // Until the thread has noted itself as fntrace's, what the C library
    // ran in it first is not drained (see `own_threads`).
    let _spawning = Spawning::begin();
    let started = Arc::new(Barrier::new(2));
    let handle = {
        let started = Arc::clone(&started);
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _untraced = Untraced::begin();
                own_threads::note_this_thread();
                started.wait();
                f()
            })?
    };
    started.wait();
    Ok(handle)
}
