//! Tracers: what runs when an enabled call site is hit.
//!
//! A tracer is registered by name before `main` with [`register_tracer!`]
//! (or at run time with [`register`]) and switched on and off by name with
//! [`crate::enable`] and [`crate::disable`]. Several tracers may be enabled
//! at once; each gets its own bit in every call site's tracer mask.
//!
//! # What a tracer's `entry` may do
//! It runs inside the traced function's prologue, on the traced thread,
//! possibly inside a signal handler. It must not block on anything that
//! traced code might hold, and should not allocate (the thread may be inside
//! `malloc`); fntrace's own tracers keep per-thread buffers. Calls it makes
//! to instrumented functions are not traced (the recursion guard is set). A
//! panic is caught, counted, and the tracer is switched off for all threads.

mod registry;

pub(crate) use registry::{
    enabled_mask, exit_mask, find, offer_fast_path, refresh_fast_path, set_enabled,
    switch_off_after_panic, take_panicked, tracer_at, GRAPH_ARGS_FAST_PATH, GRAPH_FAST_PATH,
    MAX_FAST_PATHS, PROFILE_FAST_PATH, TRACER_PANICS,
};
pub use registry::{register, tracer_names, MAX_TRACERS};

use crate::arch::x86_64::SavedRegs;
use crate::filter::Filter;
use crate::sites::SiteKind;
use crate::sys::clock;

/// Where sites selected by one tracer alone may call it directly: entry
/// points of the tracer's own assembly, which do its work without the
/// generic trampoline's register save area, site-table probe and Rust
/// dispatch (and fall back to the generic trampoline for anything unusual).
/// Each such tracer keeps what its entries need in every thread's block
/// (`rt::thread::ThreadBlock`): the graph tracer its ring in
/// `fast_tracer_slot`, the profile tracer its block in `profile_block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FastEntries {
    /// For `mcount` sites.
    pub mcount: usize,
    /// For `__fentry__` sites.
    pub fentry: usize,
    /// For `mcount` sites, called from their return stubs
    /// (`patch::return_stubs`).
    pub mcount_stubbed: usize,
    /// For `__fentry__` sites, called from their return stubs.
    pub fentry_stubbed: usize,
}

impl FastEntries {
    /// The entry for sites of `kind`.
    pub fn for_kind(&self, kind: SiteKind) -> usize {
        match kind {
            SiteKind::Mcount => self.mcount,
            SiteKind::Fentry => self.fentry,
        }
    }

    /// The entry for sites of `kind` that jump to their return stubs.
    pub fn stubbed_for_kind(&self, kind: SiteKind) -> usize {
        match kind {
            SiteKind::Mcount => self.mcount_stubbed,
            SiteKind::Fentry => self.fentry_stubbed,
        }
    }
}

/// A tracer's fast entries, offered with [`offer_fast_path`].
pub(crate) trait FastPath: Sync {
    /// The entries (fixed for the life of the process).
    fn entries(&self) -> FastEntries;

    /// Called by every control operation before sites are rewritten, under
    /// the operation lock: brings the fast paths' shared state up to date
    /// with the tracer's (enabled, limits) and says whether sites may call
    /// the entries now (else they must take the generic path).
    fn refresh(&self) -> bool;
}

/// The fast paths as a control operation finds them (see
/// [`refresh_fast_path`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastPathState {
    /// Per fast path ([`GRAPH_FAST_PATH`], [`PROFILE_FAST_PATH`]; `None`:
    /// not offered yet):
    /// the tracer mask of the sites that may call its entries now (the
    /// offering tracer's bit, or 0 while they may not), and the entries.
    pub paths: [Option<(u64, FastEntries)>; MAX_FAST_PATHS],
}

impl FastPathState {
    /// The fast path that sites with tracer mask `mask` may call now.
    pub fn for_mask(&self, mask: u64) -> Option<usize> {
        if mask == 0 {
            return None;
        }
        self.paths
            .iter()
            .position(|path| path.is_some_and(|(m, _)| m == mask))
    }

    /// Fast path `path`'s entry for sites of `kind` (whether or not sites
    /// may call it now: the text of a site that still does).
    pub fn entry(&self, path: usize, kind: SiteKind) -> Option<usize> {
        let (_, entries) = (*self.paths.get(path)?)?;
        Some(entries.for_kind(kind))
    }

    /// The same for a site that jumps to its return stub.
    pub fn stubbed_entry(&self, path: usize, kind: SiteKind) -> Option<usize> {
        let (_, entries) = (*self.paths.get(path)?)?;
        Some(entries.stubbed_for_kind(kind))
    }
}

/// A traced function call, as seen at the function's entry.
pub struct Call<'a> {
    pub(crate) function: usize,
    pub(crate) parent: usize,
    pub(crate) site_return: usize,
    pub(crate) depth: usize,
    pub(crate) time_ticks: u64,
    pub(crate) exit_hooked: bool,
    /// What a tracer keeps for the exit ([`Call::keep_for_exit`]), which
    /// the entry puts in the call's frame once the tracers have seen it.
    pub(crate) kept: &'a std::cell::Cell<u64>,
    pub(crate) with_args: bool,
    pub(crate) regs: &'a SavedRegs,
}

impl Call<'_> {
    /// Nesting depth among this thread's calls whose exits are hooked (0:
    /// outermost). Always 0 when no enabled tracer wants exits.
    #[inline]
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Entry time, nanoseconds on the monotonic clock's time base.
    #[inline]
    pub fn time_ns(&self) -> u64 {
        clock::ticks_to_ns(self.time_ticks)
    }

    /// Whether this call's exit will be reported (false when the thread's
    /// shadow stack was full, or no memory could be had for it).
    #[inline]
    pub fn exit_hooked(&self) -> bool {
        self.exit_hooked
    }

    /// Address of the traced function's first instruction: for a Rust
    /// function `f`, `f as usize == call.function()`.
    #[inline]
    pub fn function(&self) -> usize {
        self.function
    }

    /// The return address into the caller (the parent).
    #[inline]
    pub fn parent(&self) -> usize {
        self.parent
    }

    /// The address right after the call site inside the traced function.
    #[inline]
    pub fn site_return(&self) -> usize {
        self.site_return
    }

    /// Whether the function's arguments or return value are recorded
    /// (`-A`, `-R`): its site calls the generic entry, never a fast one.
    #[inline]
    pub fn records_args(&self) -> bool {
        self.with_args
    }

    /// Keeps `kept` in this call's frame for its exit ([`Return::kept`]);
    /// nothing without a frame. The graph tracer's, for an argument a
    /// value at the exit is read through.
    #[inline]
    pub(crate) fn keep_for_exit(&self, kept: u64) {
        self.kept.set(kept);
    }

    /// The traced function's argument registers as they were at the site.
    /// For `gcc -pg -mfentry` sites they hold the arguments; for mcount
    /// sites the prologue may already have moved them elsewhere.
    #[inline]
    pub fn registers(&self) -> &SavedRegs {
        self.regs
    }
}

/// A traced function returning, as seen by a tracer that wants exits.
pub struct Return {
    /// The return address of the function's call site (its site-table key).
    pub(crate) site: usize,
    pub(crate) depth: usize,
    pub(crate) entry_ticks: u64,
    pub(crate) exit_ticks: u64,
    pub(crate) vanished: bool,
    pub(crate) marks: u64,
    /// What the entry kept in the frame for the exit (0: nothing).
    pub(crate) kept: u64,
    /// rax, the low half of xmm0 and rdx as the function returned them,
    /// for a function whose return value is recorded (else `None`, and
    /// for a frame left without returning).
    pub(crate) returned: Option<[u64; 3]>,
}

impl Return {
    /// Entry address of the function (0 if its symbol is unknown).
    #[inline]
    pub fn function(&self) -> usize {
        crate::sites::function_of_site(self.site)
    }
    /// Depth of the call (as [`Call::depth`] at its entry).
    #[inline]
    pub fn depth(&self) -> usize {
        self.depth
    }
    /// Entry time (ns).
    #[inline]
    pub fn entry_ns(&self) -> u64 {
        clock::ticks_to_ns(self.entry_ticks)
    }
    /// Exit time (ns).
    #[inline]
    pub fn exit_ns(&self) -> u64 {
        clock::ticks_to_ns(self.exit_ticks)
    }
    /// The frame left without returning (`longjmp`, or a tail call whose
    /// callee took its place); the exit time is when that was noticed.
    #[inline]
    pub fn vanished(&self) -> bool {
        self.vanished
    }
}

/// Something that wants to know about traced calls.
pub trait Tracer: Send + Sync + 'static {
    /// Called at the entry of every traced function this tracer selected,
    /// on the calling thread. See the module docs for what it may do.
    fn entry(&self, call: &Call<'_>);

    /// Whether [`Tracer::exit`] should be called: the function's return
    /// address is then hooked (see `rt::shadow`). Read at enable time.
    fn wants_exit(&self) -> bool {
        false
    }

    /// Called when a call whose entry this tracer saw returns (only if
    /// [`Tracer::wants_exit`]), on the same thread.
    fn exit(&self, _ret: &Return) {}

    /// Called by `fntrace::enable_with` before any site is patched for this
    /// tracer, on the enabling thread: the place to allocate and to take
    /// the run-time limits of the filter.
    fn on_enable(&self, _filter: &Filter) {}
}

impl<T: Tracer> Tracer for &'static T {
    fn entry(&self, call: &Call<'_>) {
        (**self).entry(call)
    }
    fn wants_exit(&self) -> bool {
        (**self).wants_exit()
    }
    fn exit(&self, ret: &Return) {
        (**self).exit(ret)
    }
    fn on_enable(&self, filter: &Filter) {
        (**self).on_enable(filter)
    }
}

/// Registers a tracer under a name before `main` runs.
///
/// ```ignore
/// struct Counter(std::sync::atomic::AtomicU64);
/// impl fntrace::Tracer for Counter {
///     fn entry(&self, _: &fntrace::Call<'_>) {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///     }
/// }
/// fntrace::register_tracer!("counter", Counter(std::sync::atomic::AtomicU64::new(0)));
/// ```
///
/// The expression is evaluated once, at load time, and leaked (tracers live
/// as long as the process). A duplicate name is reported on stderr and the
/// second registration ignored; [`crate::enable`] names it in its error.
#[macro_export]
macro_rules! register_tracer {
    ($name:expr, $tracer:expr $(,)?) => {
        const _: () = {
            // A constructor priority: registrations run before the plain
            // constructors, fntrace's environment start-up among them.
            #[used]
            #[link_section = ".init_array.65000"]
            static REGISTER: extern "C" fn() = {
                extern "C" fn register() {
                    let tracer: &'static dyn $crate::Tracer =
                        ::std::boxed::Box::leak(::std::boxed::Box::new($tracer));
                    if let Err(err) = $crate::register($name, tracer) {
                        ::std::eprintln!("fntrace: register_tracer!: {err}");
                    }
                }
                register
            };
        };
    };
}
