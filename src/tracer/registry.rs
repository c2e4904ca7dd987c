//! The tracer registry: a fixed array of slots filled once each.
//!
//! Registration is rare and takes a lock; the traced-call path reads a slot
//! with one Acquire load (`OnceCell::get`) and the enabled mask with one
//! Relaxed load.

use std::sync::atomic::{AtomicU64, Ordering};

use once_cell::sync::OnceCell;
use parking_lot::Mutex;

use super::{FastPath, FastPathState, Tracer};
use crate::error::Error;

/// How many tracers can be registered (one bit each in a site's mask).
pub const MAX_TRACERS: usize = 64;

struct Registered {
    name: &'static str,
    tracer: &'static dyn Tracer,
}

static SLOTS: [OnceCell<Registered>; MAX_TRACERS] = [const { OnceCell::new() }; MAX_TRACERS];
static REGISTERING: Mutex<usize> = Mutex::new(0);
extern "C" {
    /// Bit `i` set: tracer `i` is enabled. Defined in `asm/x86_64/entry.S`,
    /// whose generic entries return at once while it is 0.
    static fntrace_enabled_tracers: AtomicU64;
}

/// The mask of enabled tracers.
#[inline]
fn enabled() -> &'static AtomicU64 {
    // SAFETY: a plain atomic defined in entry.S, valid for the whole process.
    unsafe { &fntrace_enabled_tracers }
}
/// Bit `i` set: tracer `i` is enabled and wants exits.
static EXITS: AtomicU64 = AtomicU64::new(0);
/// Panics caught in tracer code (each switches its tracer off).
pub(crate) static TRACER_PANICS: AtomicU64 = AtomicU64::new(0);
/// Bit `i` set: tracer `i` panicked and was switched off on the traced
/// path, which cannot patch; the next control operation takes the bit and
/// reverts the tracer's sites.
static PANICKED: AtomicU64 = AtomicU64::new(0);

/// Registers `tracer` under `name`. Names are unique.
pub fn register(name: &'static str, tracer: &'static dyn Tracer) -> Result<(), Error> {
    let mut count = REGISTERING.lock();
    if find(name).is_some() {
        return Err(Error::DuplicateTracer(name.to_string()));
    }
    let slot = SLOTS.get(*count).ok_or(Error::TooManyTracers)?;
    if slot.set(Registered { name, tracer }).is_err() {
        return Err(Error::TooManyTracers);
    }
    *count += 1;
    Ok(())
}

/// Index of the tracer registered as `name`.
pub(crate) fn find(name: &str) -> Option<usize> {
    SLOTS
        .iter()
        .map_while(|slot| slot.get())
        .position(|r| r.name == name)
}

/// The tracer in slot `index`.
#[inline]
pub(crate) fn tracer_at(index: usize) -> Option<&'static dyn Tracer> {
    SLOTS.get(index)?.get().map(|r| r.tracer)
}

/// Mask of enabled tracers.
#[inline]
pub(crate) fn enabled_mask() -> u64 {
    enabled().load(Ordering::Relaxed)
}

/// Mask of enabled tracers that want exits.
#[inline]
pub(crate) fn exit_mask() -> u64 {
    EXITS.load(Ordering::Relaxed)
}

/// On the traced path, after tracer `index` panicked: switches it off for
/// every thread at once and leaves its sites to the next control
/// operation ([`take_panicked`]). Atomics only.
pub(crate) fn switch_off_after_panic(index: usize) {
    TRACER_PANICS.fetch_add(1, Ordering::Relaxed);
    set_enabled(index, false);
    PANICKED.fetch_or(1 << index, Ordering::Release);
}

/// The tracers that panicked since the last call (a mask).
pub(crate) fn take_panicked() -> u64 {
    PANICKED.swap(0, Ordering::Acquire)
}

/// Switches tracer `index` on or off for the traced-call path.
pub(crate) fn set_enabled(index: usize, on: bool) {
    let wants_exit = tracer_at(index).is_some_and(|t| t.wants_exit());
    if on {
        if wants_exit {
            EXITS.fetch_or(1 << index, Ordering::Relaxed);
        }
        enabled().fetch_or(1 << index, Ordering::Relaxed);
    } else {
        enabled().fetch_and(!(1 << index), Ordering::Relaxed);
        EXITS.fetch_and(!(1 << index), Ordering::Relaxed);
    }
}

/// How many fast paths tracers may offer (the graph tracer's two, the
/// profile tracer's).
pub(crate) const MAX_FAST_PATHS: usize = 3;

/// The graph tracer's fast path (see [`offer_fast_path`]).
pub(crate) const GRAPH_FAST_PATH: usize = 0;
/// The profile tracer's fast path.
pub(crate) const PROFILE_FAST_PATH: usize = 1;
/// The graph tracer's argument entries, for sites whose function records
/// integer arguments (`builtin::graph::arg_recipes`): never what
/// [`FastPathState::for_mask`] returns (the graph tracer's own comes
/// first), chosen by the control path for those sites alone.
///
/// [`FastPathState::for_mask`]: super::FastPathState::for_mask
pub(crate) const GRAPH_ARGS_FAST_PATH: usize = 2;

/// The tracers whose fast entries sites may call, and their indexes, by
/// fast path (a site's text flags name the path by its number).
static FAST_PATHS: [OnceCell<(usize, &'static dyn FastPath)>; MAX_FAST_PATHS] =
    [const { OnceCell::new() }; MAX_FAST_PATHS];

/// Offers the fast entries of the tracer at `index` (see [`FastEntries`])
/// as fast path `path` ([`GRAPH_FAST_PATH`] or [`PROFILE_FAST_PATH`]).
/// The first offer for a path stands.
pub(crate) fn offer_fast_path(path: usize, index: usize, fast: &'static dyn FastPath) {
    if let Some(cell) = FAST_PATHS.get(path) {
        let _ = cell.set((index, fast));
    }
}

/// Brings every fast path's state up to date (see [`FastPath::refresh`]).
pub(crate) fn refresh_fast_path() -> FastPathState {
    let mut state = FastPathState {
        paths: [None; MAX_FAST_PATHS],
    };
    for (cell, path) in FAST_PATHS.iter().zip(&mut state.paths) {
        if let Some(&(index, fast)) = cell.get() {
            let mask = if fast.refresh() { 1 << index } else { 0 };
            *path = Some((mask, fast.entries()));
        }
    }
    state
}

/// Names of all registered tracers, in registration order.
pub fn tracer_names() -> Vec<&'static str> {
    SLOTS
        .iter()
        .map_while(|slot| slot.get())
        .map(|r| r.name)
        .collect()
}
