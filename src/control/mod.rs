//! Control: `init`, `enable`, `disable`, and the state they share.
//!
//! Every change of program text happens here, under the operation lock
//! (`rt::ops`), and goes through `patch::apply`. The rule that keeps text
//! and state in step: a recognised site holds its call exactly when its
//! tracer mask is non-zero; [`sync_text`] makes the text obey the masks.
//! Sites found by their first call (the traced path only records them) get
//! their NOP from the next operation here. Callable from any thread; calls
//! are serialised.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::arch::x86_64::{decode_site_instruction, Instruction, SiteForm};
use crate::builtin::graph::GRAPH_TRACER;
use crate::error::Error;
use crate::filter::Filter;
use crate::patch::priority;
use crate::patch::{self, reach, return_stubs, TextWrite};
use crate::rt::{self, ops, shadow, thread::Untraced};
use crate::sites::{
    self, flag, patchable, ScanReport, Site, SiteInfo, SiteKind, SitesInOrder, NOP_PENDING, SITES,
    UNRECOGNIZED,
};
use crate::symbols;
use crate::sys::clock;
use crate::tracer::{self, FastPathState};

mod args;
mod attach;
mod inspect;
pub(crate) mod names;
mod text;
mod uninstrumented;
pub use args::set_arg_specs;
pub(crate) use args::set_filter_specs;
pub(crate) use attach::{attach_sites, detach_text, prepare_attach};
pub use inspect::{
    dump, dump_with_progress, function_name, site_of, sites, stats, DumpReport, Stats,
};
use text::{holds_its_text, sync_text, traceable, SiteText};
use uninstrumented::patch_locked;
pub use uninstrumented::{patch_functions, patch_report};
pub(crate) use uninstrumented::{trace_library_calls, LibcallScope};

struct ControlState {
    initialized: bool,
    /// Symbol generation (objects loaded/unloaded) the last scan saw.
    scanned_generation: u64,
    scan: ScanReport,
    unreadable_objects: Vec<String>,
    /// Tracers that panicked (a mask) and whose `disable` has not yet said
    /// so.
    panicked_unreported: u64,
    /// The filter of each enabled tracer (by index): sites found later (a
    /// library opened with `dlopen`) are selected by it too.
    filters: Vec<(usize, Filter)>,
    /// The recognised sites in address order: what operations walk.
    sites: SitesInOrder,
    /// The sites whose selection an `enable_with` of an enabled tracer
    /// changed, and whether the tracer had selected them before (to undo a
    /// failed enable). Kept from operation to operation.
    previous: Vec<(&'static Site, bool)>,
}

/// Only ever locked while holding the operation lock, so it is free
/// whenever that one is (across `fork` in particular).
static CONTROL: Mutex<ControlState> = Mutex::new(ControlState {
    initialized: false,
    scanned_generation: 0,
    scan: ScanReport {
        functions_scanned: 0,
        sites_found: 0,
        foreign_sites: 0,
        patchable_found: 0,
        patchable_refused: 0,
    },
    unreadable_objects: Vec::new(),
    panicked_unreported: 0,
    filters: Vec::new(),
    sites: SitesInOrder::new(),
    previous: Vec::new(),
});

/// The operation lock and, inside it, the control state. Fields drop in
/// order: the state first.
struct Control {
    state: MutexGuard<'static, ControlState>,
    _operation: MutexGuard<'static, ()>,
}

impl Deref for Control {
    type Target = ControlState;
    fn deref(&self) -> &ControlState {
        &self.state
    }
}

impl DerefMut for Control {
    fn deref_mut(&mut self) -> &mut ControlState {
        &mut self.state
    }
}

/// Starts a control operation. A panic while holding the locks (a bug)
/// leaves the state as it was: every operation keeps it consistent step by
/// step.
fn control() -> Control {
    let operation = ops::operation();
    Control {
        state: CONTROL.lock().unwrap_or_else(PoisonError::into_inner),
        _operation: operation,
    }
}

/// Finds every call site of the process and turns each into a NOP.
///
/// Reads the ELF symbol tables of the executable and of every loaded shared
/// object, records the call site of each instrumented function (also those
/// that never ran), adds the sites found by their first call, and writes
/// their NOPs in one patch. Idempotent: later calls return
/// `Ok(())` at once. [`enable`] calls it when needed. While no tracer is
/// enabled, an instrumented call that still reaches fntrace's
/// `mcount`/`__fentry__` returns at once (nothing recorded). A program
/// started with `FNTRACE_CONTROL` or `FNTRACE_METRICS` runs it before
/// `main`.
pub fn init() -> Result<(), Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    init_locked(&mut state)
}

fn init_locked(state: &mut Control) -> Result<(), Error> {
    if state.initialized {
        return Ok(());
    }
    rt::prepare();
    patch::protocol_from_env();
    rescan(state, &symbols::current());
    sync_text(&mut state.sites, |_| {})?;
    state.initialized = true;
    Ok(())
}

/// Switches the tracer registered as `name` on for every traceable site:
/// its `entry` runs on every call of every instrumented function (except
/// fntrace's own) until [`disable`]. Same as [`enable_with`] with
/// [`Filter::new`]. Enabling an enabled tracer changes nothing.
pub fn enable(name: &str) -> Result<(), Error> {
    let _untraced = Untraced::begin();
    let index = tracer::find(name).ok_or_else(|| Error::UnknownTracer(name.to_string()))?;
    if tracer::enabled_mask() & (1u64 << index) != 0 {
        return Ok(());
    }
    enable_with(name, &Filter::new())
}

/// Switches the tracer registered as `name` on for the functions `filter`
/// selects by name (the others keep their NOP); the filter's run-time limits
/// (depth, duration) go to the tracer. On an enabled tracer, replaces its
/// selection.
///
/// Patches the sites no other enabled tracer had switched on, with every
/// other thread stopped (see [`crate::set_stop_signal`]). On error nothing
/// was patched and the tracer's selection is as before.
pub fn enable_with(name: &str, filter: &Filter) -> Result<(), Error> {
    let _untraced = Untraced::begin();
    args::set_filter_specs(filter)?;
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    init_locked(&mut state)?;
    let index = tracer::find(name).ok_or_else(|| Error::UnknownTracer(name.to_string()))?;
    filter.min_duration_ns()?;
    // Functions built without instrumentation get their sites first, so
    // that the selection below sees them.
    patch_locked(&mut state, filter.get_patch())?;
    let bit = 1u64 << index;
    absorb_panics(&mut state);
    state.panicked_unreported &= !bit;
    let was_enabled = tracer::enabled_mask() & bit != 0;
    let objects = symbols::current();
    rescan_and_select(&mut state, &objects);
    if let Some(tracer) = tracer::tracer_at(index) {
        tracer.on_enable(filter);
    }
    tracer::set_enabled(index, true);
    let ControlState {
        sites, previous, ..
    } = &mut *state;
    previous.clear();
    // The selection is made in the walk that writes the text: one visit of
    // each (scattered) site.
    let synced = sync_text(sites, |site| {
        let selected = selects(filter, site, &objects);
        let tracers = site.tracers.load(Ordering::Relaxed);
        let before = tracers & bit != 0;
        if selected != before {
            // A tracer that was off selected no site: undoing its enable
            // clears its bit everywhere, with no list to keep.
            if was_enabled {
                previous.push((site, before));
            }
            // A plain store: see `sync_text`.
            site.tracers.store(tracers ^ bit, Ordering::Relaxed);
        }
    });
    if let Err(err) = synced {
        tracer::set_enabled(index, was_enabled);
        if was_enabled {
            for &(site, before) in previous.iter() {
                if before {
                    site.tracers.fetch_or(bit, Ordering::Relaxed);
                } else {
                    site.tracers.fetch_and(!bit, Ordering::Relaxed);
                }
            }
        } else {
            for sites::Listed { site, .. } in sites::in_order(sites.current()) {
                site.tracers.fetch_and(!bit, Ordering::Relaxed);
            }
        }
        tracer::refresh_fast_path();
        return Err(err);
    }
    state.filters.retain(|(i, _)| *i != index);
    state.filters.push((index, filter.clone()));
    publish_select_new(&state);
    Ok(())
}

/// Whether `filter` selects `site` (by its function's name, if it has name
/// rules).
fn selects(filter: &Filter, site: &Site, objects: &symbols::SymbolIndex) -> bool {
    traceable(site)
        && (!filter.has_name_rules() || {
            let function = site.function.load(Ordering::Relaxed);
            objects
                .function_at(function)
                .is_some_and(|f| filter.selects(&symbols::demangle(&f.name)))
        })
}

/// Tells the lazy hook which tracers select every site: those enabled with
/// no name rules.
fn publish_select_new(state: &Control) {
    let enabled = tracer::enabled_mask();
    let mask = state
        .filters
        .iter()
        .filter(|(_, filter)| !filter.has_name_rules())
        .fold(0u64, |mask, (index, _)| mask | 1 << index)
        & enabled;
    sites::SELECT_NEW.store(mask, Ordering::Relaxed);
}

/// Switches the tracer registered as `name` off. Its `entry` is not called
/// again once this returns (calls already inside it finish). Sites no other
/// enabled tracer wants go back to their NOP.
///
/// If the text cannot be written (a thread did not acknowledge the stop
/// signal), the tracer is off all the same, the error says why, and the
/// sites keep their calls until the next successful `enable`, `disable` or
/// [`flush`].
///
/// A tracer whose `entry` or `exit` panicked was switched off then, on
/// every thread; its sites go back to their NOP (or to the tracers that
/// still select them) at the next control operation, and its `disable`
/// reverts them if none came since and returns
/// [`Error::TracerPanicked`].
pub fn disable(name: &str) -> Result<(), Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    let index = tracer::find(name).ok_or_else(|| Error::UnknownTracer(name.to_string()))?;
    let bit = 1u64 << index;
    absorb_panics(&mut state);
    if state.panicked_unreported & bit != 0 {
        state.panicked_unreported &= !bit;
        sync_text(&mut state.sites, |_| {})?;
        return Err(Error::TracerPanicked(name.to_string()));
    }
    if tracer::enabled_mask() & bit == 0 {
        return Ok(());
    }
    tracer::set_enabled(index, false);
    state.filters.retain(|(i, _)| *i != index);
    publish_select_new(&state);
    rescan_and_select(&mut state, &symbols::current());
    sync_text(&mut state.sites, |site| {
        let tracers = site.tracers.load(Ordering::Relaxed);
        if tracers & bit != 0 {
            // A plain store: see `sync_text`.
            site.tracers.store(tracers & !bit, Ordering::Relaxed);
        }
    })
}

/// Writes every pending change: NOPs for sites found by their first call
/// since the last patch, and any revert an earlier failed `disable` left.
pub fn flush() -> Result<(), Error> {
    let _untraced = Untraced::begin();
    let _priority = priority::boost_for_text_change();
    let mut state = control();
    absorb_panics(&mut state);
    if state.initialized {
        rescan_and_select(&mut state, &symbols::current());
    }
    sync_text(&mut state.sites, |_| {})
}

/// Takes the tracers that panicked on the traced path (already switched
/// off there) off every site; the caller's `sync_text` reverts the text.
fn absorb_panics(state: &mut Control) {
    let panicked = tracer::take_panicked();
    if panicked == 0 {
        return;
    }
    state.panicked_unreported |= panicked;
    state.filters.retain(|(i, _)| panicked & 1 << i == 0);
    publish_select_new(state);
    for sites::Listed { site, .. } in sites::in_order(state.sites.current()) {
        if site.tracers.load(Ordering::Relaxed) & panicked != 0 {
            site.tracers.fetch_and(!panicked, Ordering::Relaxed);
        }
    }
}

/// [`rescan`], and when it found new objects, selects their sites for the
/// enabled tracers whose filters want them.
fn rescan_and_select(state: &mut Control, objects: &symbols::SymbolIndex) {
    if !rescan(state, objects) {
        return;
    }
    select_by_filters(state, objects);
}

/// Selects each listed site for every enabled tracer whose filter takes
/// it (sites found or made since the tracer was enabled).
fn select_by_filters(state: &mut Control, objects: &symbols::SymbolIndex) {
    let enabled = tracer::enabled_mask();
    let ControlState { filters, sites, .. } = &mut **state;
    let sites = sites.current();
    for (index, filter) in filters.iter() {
        let bit = 1u64 << index;
        if enabled & bit == 0 {
            continue;
        }
        for sites::Listed { site, .. } in sites::in_order(sites) {
            if selects(filter, site, objects) {
                site.tracers.fetch_or(bit, Ordering::Relaxed);
            } else {
                site.tracers.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }
}

/// Scans the loaded objects for sites (again, when objects were loaded or
/// unloaded since the last scan: a library opened with `dlopen`). Inside
/// [`sites::loader::hold`]: objects of `index` that were unloaded since it
/// was built are skipped, and the sites of unloaded objects are dropped
/// first.
fn rescan(state: &mut Control, index: &symbols::SymbolIndex) -> bool {
    if state.initialized && state.scanned_generation == index.generation {
        return false;
    }
    let found = sites::loader::hold(|loaded| {
        // Objects were unloaded: their sites must not be written (their
        // text is gone, or is another object's now).
        sites::loader::drop_gone(loaded, holds_its_text);
        sites::scan(index, loaded)
    });
    state.scan.functions_scanned = found.functions_scanned;
    state.scan.sites_found += found.sites_found;
    state.scan.foreign_sites = found.foreign_sites;
    state.scan.patchable_found += found.patchable_found;
    state.scan.patchable_refused = found.patchable_refused;
    sites::resolve_functions(index);
    state.unreadable_objects = index.unreadable.iter().map(|e| e.to_string()).collect();
    state.scanned_generation = index.generation;
    true
}
