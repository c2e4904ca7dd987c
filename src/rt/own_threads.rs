//! Which threads are fntrace's own, so that no recording holds their
//! calls. A thread fntrace starts runs untraced from its first line of
//! Rust, but the C library runs code in it before that (`__ctype_init`,
//! `_setjmp`, Rust's own thread start: `mmap`, `prctl`), which a program's
//! `-P '*'` patches too. Those calls land in the thread's ring before the
//! thread can say whose it is, so the drain decides: a ring claimed while
//! fntrace was starting a thread is left unread until that thread has
//! noted itself here (the spawner waits for it) or the start is over; the
//! events of a ring whose owner is noted here are dropped unread, not
//! counted as lost.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys;

/// Thread starts by fntrace under way.
static SPAWNING: AtomicU32 = AtomicU32::new(0);
/// The kernel thread ids of fntrace's threads (0: free slot). fntrace
/// runs a handful (writer, control, metrics, flight, attach helper).
static OWN: [AtomicU32; 32] = [const { AtomicU32::new(0) }; 32];

/// Held while fntrace starts a thread, until that thread has called
/// [`note_this_thread`].
pub(crate) struct Spawning(());

impl Spawning {
    /// Says that a thread start is under way.
    pub(crate) fn begin() -> Spawning {
        SPAWNING.fetch_add(1, Ordering::AcqRel);
        Spawning(())
    }
}

impl Drop for Spawning {
    fn drop(&mut self) {
        let _ = SPAWNING.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// Whether fntrace is starting a thread now. Async-signal-safe.
pub(crate) fn spawning() -> bool {
    SPAWNING.load(Ordering::Acquire) != 0
}

/// Notes the calling thread as fntrace's, in a free slot or one whose
/// thread is gone. With every slot taken by a live thread (not seen: it
/// would take 32 of fntrace's threads at once), it is not noted, and its
/// first calls may be recorded.
pub(crate) fn note_this_thread() {
    let tid = sys::gettid() as u32;
    let pid = sys::getpid();
    for slot in &OWN {
        let held = slot.load(Ordering::Acquire);
        let free = held == 0 || sys::tgkill(pid, held as i32, 0) == Err(libc::ESRCH);
        if free
            && slot
                .compare_exchange(held, tid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return;
        }
    }
}

/// Whether `tid` is one of fntrace's threads. Async-signal-safe.
pub(crate) fn is_own(tid: u32) -> bool {
    tid != 0 && OWN.iter().any(|slot| slot.load(Ordering::Acquire) == tid)
}

/// Forgets `tid`, a thread of fntrace's that has exited: its id may be
/// given to a thread of the program next.
pub(crate) fn forget(tid: u32) {
    for slot in &OWN {
        let _ = slot.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// In a forked child: only the forking thread lives on, which is not one
/// of fntrace's starts in progress.
pub(crate) fn forget_after_fork() {
    SPAWNING.store(0, Ordering::Release);
    for slot in &OWN {
        slot.store(0, Ordering::Release);
    }
}
