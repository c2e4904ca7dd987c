//! One operation at a time, and `fork` in the middle of none.
//!
//! Everything that reads or changes fntrace's shared state off the traced
//! path — patching (control), draining tracers' buffers, dumping — runs
//! under [`operation`]. The lock lives here, below the tracers and the
//! control layer, so that both can take it without knowing each other.
//!
//! `fork` copies only the forking thread. If another thread held one of
//! fntrace's locks at that moment, the child would inherit it held by a
//! thread it does not have. So `fork` waits for the running operation (and
//! for a site insertion) to end, and holds both until the child and the
//! parent are past the fork; every inner lock is free whenever the
//! operation lock is. A std (futex) mutex rather than parking_lot's: in the
//! child it must be releasable by the thread that took it before the fork,
//! and parking_lot would hand it to a waiter that exists only in the parent.

use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use crate::sites::SITES;

use super::ring::reset_pools_in_fork_child;
use super::thread::{current_tid, forget_after_fork, note_forked_thread, Untraced};
use crate::sys;

static OPERATIONS: Mutex<()> = Mutex::new(());

/// Taken by every operation off the traced path that reads or changes
/// fntrace's state (toggles, drains, dumps). Never taken on the traced path.
/// A panic while holding it (a bug) leaves it usable: every operation keeps
/// the state consistent step by step.
pub(crate) fn operation() -> MutexGuard<'static, ()> {
    OPERATIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// The operation lock held by the forking thread from `before_fork`
    /// until after the fork (the same thread in parent and child).
    static HELD_ACROSS_FORK: RefCell<Option<MutexGuard<'static, ()>>> =
        const { RefCell::new(None) };
}

/// Installs the fork handlers (once).
pub(crate) fn prepare_for_fork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // First: its handler must run after this one before a fork.
        crate::symbols::listing_follows_forks();
        // SAFETY: registering fork handlers has no preconditions; the
        // handlers only take and release fntrace's own locks and reset a
        // thread-local.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            );
        }
    });
}

extern "C" fn before_fork() {
    let _untraced = Untraced::begin();
    let guard = operation();
    HELD_ACROSS_FORK.with(|held| *held.borrow_mut() = Some(guard));
    SITES.hold_for_fork();
}

extern "C" fn after_fork_in_parent() {
    SITES.release_after_fork();
    HELD_ACROSS_FORK.with(|held| held.borrow_mut().take());
}

extern "C" fn after_fork_in_child() {
    // The cached id is still the parent's: the rings know the thread by it.
    let parent_tid = current_tid();
    let child_tid = sys::gettid() as u32;
    reset_pools_in_fork_child(parent_tid, child_tid);
    super::own_threads::forget_after_fork();
    forget_after_fork();
    note_forked_thread(child_tid);
    after_fork_in_parent();
}
