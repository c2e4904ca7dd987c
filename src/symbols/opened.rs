//! Every shared object this process has been seen to load, kept after it
//! is unloaded: the names of a library's functions are needed after
//! `dlclose` (a recording names them at its next drain, a dump at its
//! end), when the loader no longer lists it and the symbol index is
//! rebuilt without it.
//!
//! What is kept of an object is what naming needs and only the loader
//! knows: its path, load bias and segments. Its function symbols are read
//! from its file when first asked for (the file normally outlives the
//! mapping: uftrace's reader relies on the same), and kept.
//!
//! Objects are seen (in order of time):
//! - by every full listing of the loader's objects ([`confirm`]): the
//!   symbol index's rebuilds and the recorder's check at each drain
//!   ([`refresh`]);
//! - by `dlclose`, before the object goes ([`note_closing`], called by the
//!   `dlclose` that fntrace defines in glibc's place): a library opened,
//!   called and closed between two listings is seen there.
//!
//! An object's time is a bound that the loading came after: the time of
//! the last listing that did not hold it (0 for the first). uftrace uses
//! such a time (its `DLOP` lines) to pick, among objects loaded at one
//! address over time, the one an event belongs to: the newest loaded by
//! the event's time. Objects are told apart by path, bias and segments: a
//! library loaded again where it was is one object. At most
//! [`MAX_OBJECTS`] are kept (a program loading plugins in a loop at new
//! addresses): the oldest are dropped first (those still loaded are named
//! from the symbol index anyway).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{read_functions, Function, PhdrInfo};
use crate::sys::clock;

/// Objects kept at most.
pub(crate) const MAX_OBJECTS: usize = 4096;

/// A shared object seen loaded.
#[derive(Debug)]
pub(crate) struct SeenObject {
    /// Order of being seen (increasing from 1).
    pub seq: u64,
    /// A time (ns, the events' clock) that the loading came after.
    pub loaded_after_ns: u64,
    pub path: String,
    /// Difference between run-time and link-time addresses (uftrace's
    /// `base=`).
    pub bias: usize,
    /// Mapped `PT_LOAD` segments, at run-time addresses.
    pub segments: Vec<Range<usize>>,
    functions: OnceLock<Vec<Function>>,
}

impl SeenObject {
    /// Its function symbols at run-time addresses, sorted, read from its
    /// file at the first call (none if the file cannot be read).
    pub fn functions(&self) -> &[Function] {
        self.functions.get_or_init(|| {
            read_functions(&self.path, self.bias)
                .map(|(functions, _)| functions)
                .unwrap_or_default()
        })
    }

    /// The function containing `addr`.
    pub fn function_at(&self, addr: usize) -> Option<&Function> {
        let functions = self.functions();
        let idx = functions.partition_point(|f| f.start <= addr);
        let candidate = functions.get(idx.checked_sub(1)?)?;
        candidate.contains(addr).then_some(candidate)
    }

    /// Whether one of its segments holds `addr`.
    pub fn maps(&self, addr: usize) -> bool {
        self.segments.iter().any(|seg| seg.contains(&addr))
    }

    /// The end of its last segment.
    pub fn end(&self) -> usize {
        self.segments
            .iter()
            .map(|seg| seg.end)
            .max()
            .unwrap_or(self.bias)
    }
}

struct Log {
    objects: Vec<Arc<SeenObject>>,
    /// When the last full listing began (0: none yet).
    listed_ns: u64,
    next_seq: u64,
}

static LOG: Mutex<Log> = Mutex::new(Log {
    objects: Vec::new(),
    listed_ns: 0,
    next_seq: 1,
});

impl Log {
    /// Adds the object unless kept already; `time` as for
    /// [`SeenObject::loaded_after_ns`].
    fn add(&mut self, info: &PhdrInfo, time: u64) {
        if !worth_keeping(info)
            || self
                .objects
                .iter()
                .any(|o| o.bias == info.bias && o.path == info.name && o.segments == info.segments)
        {
            return;
        }
        if self.objects.len() >= MAX_OBJECTS {
            self.objects.remove(0);
        }
        self.objects.push(Arc::new(SeenObject {
            seq: self.next_seq,
            loaded_after_ns: time,
            path: info.name.clone(),
            bias: info.bias,
            segments: info.segments.clone(),
            functions: OnceLock::new(),
        }));
        self.next_seq += 1;
    }
}

/// Shared objects with a file: not the executable (listed without a name,
/// always in a session's map) nor the vDSO.
fn worth_keeping(info: &PhdrInfo) -> bool {
    !info.name.is_empty() && !info.name.starts_with("linux-vdso") && !info.text.is_empty()
}

/// Records a full listing of the loader's objects, begun at `began_ns`.
pub(super) fn confirm(listed: &[PhdrInfo], began_ns: u64) {
    let mut log = LOG.lock();
    let since = log.listed_ns;
    for info in listed {
        log.add(info, since);
    }
    log.listed_ns = log.listed_ns.max(began_ns);
}

/// The events' clock now, in nanoseconds.
pub(super) fn now_ns() -> u64 {
    clock::ticks_to_ns(clock::now_ticks())
}

/// Lists the loader's objects if it loaded or unloaded any since the
/// last call (one `dl_iterate_phdr` step when not), keeping the new ones.
/// Not for a forked child (see [`super::inherited`]).
pub(crate) fn refresh() {
    static LAST_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let generation = super::load_generation();
    let last = LAST_GENERATION.swap(generation, std::sync::atomic::Ordering::AcqRel);
    if last != generation || last == 0 {
        let began = now_ns();
        confirm(&super::list_objects(), began);
    }
}

/// The log, if it can be had within a moment: in a forked child, a
/// parent thread (which the child does not have) may have held it at the
/// fork, for ever then.
fn log() -> Option<parking_lot::MutexGuard<'static, Log>> {
    LOG.try_lock_for(std::time::Duration::from_millis(100))
}

/// Objects seen after the one numbered `seq` (0: all), oldest first (none
/// if the log cannot be had, see [`log`]).
pub(crate) fn seen_since(seq: u64) -> Vec<Arc<SeenObject>> {
    log().map_or_else(Vec::new, |log| {
        log.objects
            .iter()
            .filter(|o| o.seq > seq)
            .cloned()
            .collect()
    })
}

/// The number of the newest object seen (0: none, or the log cannot be
/// had).
pub(crate) fn newest_seq() -> u64 {
    log().map_or(0, |log| log.next_seq - 1)
}

/// The newest object seen whose segments held `addr`.
pub(crate) fn object_at(addr: usize) -> Option<Arc<SeenObject>> {
    log()?.objects.iter().rev().find(|o| o.maps(addr)).cloned()
}

/// The part of `<link.h>`'s `struct link_map` that is public ABI.
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const libc::c_char,
    l_ld: *mut libc::c_void,
    l_next: *mut LinkMap,
    l_prev: *mut LinkMap,
}

/// Keeps the object of `handle` (a `dlopen` handle about to be closed)
/// if it was not seen yet: lists the loader's objects, as [`confirm`]
/// keeps a listing.
/// Takes no lock of the loader but `dl_iterate_phdr`'s (the object's
/// segments are known only there).
pub(crate) fn note_closing(handle: *mut libc::c_void) {
    if handle.is_null() {
        return;
    }
    let mut map: *mut LinkMap = std::ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP stores a `struct link_map *` through the
    // pointer; `handle` is what the caller passes to dlclose (an invalid
    // handle makes dlinfo fail, checked).
    let failed = unsafe {
        libc::dlinfo(
            handle,
            libc::RTLD_DI_LINKMAP,
            (&mut map as *mut *mut LinkMap).cast(),
        )
    } != 0;
    if failed || map.is_null() {
        return;
    }
    // SAFETY: the loader's link map of an object still loaded (dlclose
    // has not run yet): its name is a C string or null.
    let named = unsafe {
        let map = &*map;
        !map.l_name.is_null() && *map.l_name != 0
    };
    if !named {
        return;
    }
    // A full listing, kept as one: an object loaded after this `dlclose`
    // (perhaps where this one was) is then known to be loaded after the
    // calls into this one, which a dump or recording names by that time.
    let began = now_ns();
    let listed = super::list_objects();
    let Some(mut log) = log() else {
        return;
    };
    let since = log.listed_ns;
    for info in &listed {
        log.add(info, since);
    }
    log.listed_ns = log.listed_ns.max(began);
}

/// The objects seen whose functions a process map taken now does not name
/// rightly (`index` lists what is loaded now): those unloaded since, those
/// whose addresses another object seen had before or after them, and the
/// other places of their files. Written as a recording's libraries are
/// (`DLOP` lines, named by time: see `fntrace_format::Library`) by dumps
/// and snapshots, which name their functions when they end.
pub(crate) fn libraries_named_by_time(index: &super::SymbolIndex) -> Vec<fntrace_format::Library> {
    let seen = seen_since(0);
    let overlaps = |a: &SeenObject, b: &SeenObject| {
        a.segments.iter().any(|s| {
            b.segments
                .iter()
                .any(|t| s.start < t.end && t.start < s.end)
        })
    };
    let mut chosen: Vec<&Arc<SeenObject>> = seen
        .iter()
        .filter(|object| {
            let loaded = index
                .objects
                .iter()
                .any(|o| o.path == object.path && o.bias == object.bias);
            !loaded
                || seen
                    .iter()
                    .any(|other| other.seq != object.seq && overlaps(object, other))
        })
        .collect();
    // One `.sym` file serves every place of a file: all or none of them.
    let paths: Vec<String> = chosen.iter().map(|o| o.path.clone()).collect();
    chosen = seen
        .iter()
        .filter(|object| paths.contains(&object.path))
        .collect();
    chosen
        .into_iter()
        .map(|object| fntrace_format::Library {
            loaded_after_ns: object.loaded_after_ns,
            bias: object.bias as u64,
            path: object.path.clone(),
            end: object.end() as u64,
            functions: object
                .functions()
                .iter()
                .map(|f| (f.start, f.name.to_string()))
                .collect(),
        })
        .collect()
}
