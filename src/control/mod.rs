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

mod attach;
pub(crate) mod names;
mod uninstrumented;
pub(crate) use attach::{attach_sites, detach_text, prepare_attach};
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

/// Whether `text`, read at `site`, is what the table says the site holds.
fn holds_its_text(site: &Site, text: &[u8]) -> bool {
    let Some(form) = site.form() else {
        return false;
    };
    if site.has_flag(flag::FOREIGN_TEXT) {
        let addr = site.addr.load(Ordering::Relaxed);
        return sites::foreign_text(addr).is_some_and(|held| text == &held[..text.len()]);
    }
    match SiteText::of(site) {
        SiteText::Nop => text == &site.nop_text(form)[..text.len()],
        SiteText::Call => text == &site.original_bytes()[..text.len()],
        // Which entry or stub it leads to depends on the fast path's
        // state: a call or a jump of the site's length is all that can be
        // checked here.
        SiteText::Fast(_) => matches!(
            decode_site_instruction(text, site.addr.load(Ordering::Relaxed)),
            Some(Instruction::Call { .. } | Instruction::Jump { .. })
        ),
    }
}

fn traceable(site: &Site) -> bool {
    site.form().is_some()
        && !site.has_flag(flag::EXCLUDED)
        && site.function.load(Ordering::Relaxed) != 0
}

/// What a recognised site's text holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SiteText {
    /// The NOP: no enabled tracer selected the site.
    Nop,
    /// The original call, to the generic trampoline.
    Call,
    /// A jump to the site's return stub for fast path `n`
    /// (`tracer::GRAPH_FAST_PATH` or `tracer::PROFILE_FAST_PATH`), or a
    /// call of its fast entry where no stub could be placed.
    Fast(usize),
}

impl SiteText {
    fn of(site: &Site) -> SiteText {
        SiteText::from_flags(site.flags.load(Ordering::Relaxed))
    }

    /// The [`flag`]s that record this text.
    fn flags(self) -> u32 {
        match self {
            SiteText::Nop => 0,
            SiteText::Call => flag::TEXT_IS_CALL,
            SiteText::Fast(0) => flag::TEXT_IS_CALL | flag::TEXT_IS_FAST,
            SiteText::Fast(_) => flag::TEXT_IS_CALL | flag::TEXT_IS_FAST | flag::TEXT_FAST_SECOND,
        }
    }

    /// The text a site's [`flag`]s record.
    fn from_flags(flags: u32) -> SiteText {
        if flags & flag::TEXT_IS_CALL == 0 {
            SiteText::Nop
        } else if flags & flag::TEXT_IS_FAST != 0 {
            SiteText::Fast(usize::from(flags & flag::TEXT_FAST_SECOND != 0))
        } else {
            SiteText::Call
        }
    }

    /// The bytes of this text at `site`; `None` for a fast call out of reach
    /// (or with no fast path). A fast path is reached through the site's
    /// return stub (the same one every time), else, where no stub can be
    /// placed, called directly.
    fn bytes(self, site: &Site, form: SiteForm, fast: &FastPathState) -> Option<[u8; 8]> {
        match self {
            SiteText::Nop => Some(site.nop_text(form)),
            SiteText::Call => Some(site.original_bytes()),
            SiteText::Fast(path) => {
                let addr = site.addr.load(Ordering::Relaxed);
                let stubbed = fast.stubbed_entry(path, site.kind())?;
                return_stubs::jump_bytes(addr, form, stubbed)
                    .or_else(|| reach::call_bytes(addr, form, fast.entry(path, site.kind())?))
            }
        }
    }
}

/// The vectors [`sync_text`] fills, kept between operations.
struct SyncBatch {
    writes: Vec<TextWrite>,
    /// The sites whose text flags the batch changed, and the flag bits
    /// changed (to flip back if the batch fails).
    changed: Vec<(&'static Site, u32)>,
}

static SYNC_BATCH: Mutex<SyncBatch> = Mutex::new(SyncBatch {
    writes: Vec::new(),
    changed: Vec::new(),
});

/// Makes every recognised site hold its call exactly when some enabled
/// tracer selected it: the graph tracer's fast entry when it is the only
/// one and may use it, else the original call. Walks `sites` in address
/// order, so the batch needs no sorting, calling `select` on each site
/// first (an operation's change of tracer masks, made in the same walk).
/// Caller holds the control lock.
///
/// Each site's text flags are set as its write is listed (its cache line
/// is at hand then; the sites lie scattered in the table, and a second
/// walk would wait for each again) and flipped back if the batch fails:
/// only control operations, which hold the control lock, read them.
///
/// A listed site's flags and tracers are written only under the control
/// lock (the lazy hook sets those of a site it adds or revives before the
/// site can be listed), so `select` and this walk change them with a
/// plain load and store: a locked read-modify-write would wait for each
/// scattered site's cache line in turn.
fn sync_text(sites: &mut SitesInOrder, select: impl FnMut(&'static Site)) -> Result<(), Error> {
    // No object is mapped or unmapped while the text is read and written;
    // sites of objects unloaded since the last check are dropped first.
    sites::loader::hold(|loaded| {
        sites::loader::drop_gone(loaded, holds_its_text);
        sync_listed_text(sites, select)
    })
}

/// [`sync_text`]'s work, inside [`sites::loader::hold`].
fn sync_listed_text(
    sites: &mut SitesInOrder,
    mut select: impl FnMut(&'static Site),
) -> Result<(), Error> {
    NOP_PENDING.store(false, Ordering::Release);
    // Before any site calls a fast entry, frames it pushes must carry the
    // right exit mask; after a disable, none may.
    let fast = tracer::refresh_fast_path();
    // Kept from operation to operation (the caller holds the control
    // lock): at 100,000 sites, growing fresh vectors cost ≈ 5 MB of copies
    // and page faults per operation.
    let mut batch = SYNC_BATCH.lock().unwrap_or_else(PoisonError::into_inner);
    let SyncBatch { writes, changed } = &mut *batch;
    writes.clear();
    changed.clear();
    for sites::Listed { addr, site } in sites::in_order(sites.current()) {
        select(site);
        let flags = site.flags.load(Ordering::Relaxed);
        let Some(form) = site.form() else {
            continue;
        };
        if patchable::needs_call(flags, site.original.load(Ordering::Relaxed)) {
            // A patchable entry out of a direct call's reach: its call
            // goes through a jump stub, made once.
            let trampoline = sites::trampoline(SiteKind::Fentry);
            match reach::call_bytes(addr, form, trampoline) {
                Some(call) => patchable::set_call(site, call),
                None => continue,
            }
        }
        if flags & flag::ADOPTED != 0 && site.original.load(Ordering::Relaxed) == 0 {
            // A site adopted at attach: its call goes to fntrace's own
            // trampoline, through a jump stub when out of reach.
            let trampoline = sites::own_entry(site.kind());
            match reach::call_bytes(addr, form, trampoline) {
                Some(call) => patchable::set_call(site, call),
                None => continue,
            }
        }
        // An adopted site still holding the compiler's foreign call: the
        // first write replaces it (the NOP when nothing selects it).
        let foreign = flags & flag::FOREIGN_TEXT;
        // The compiler's NOPs at a patchable entry no write reached yet:
        // the first write replaces them (whatever it writes), and the site
        // is toggled like any other from then on.
        let raw = flags & flag::RAW;
        let current = SiteText::from_flags(flags);
        let mask = site.tracers.load(Ordering::Relaxed);
        // The fast entries take the return address from the usual slot,
        // which holds the saved r10 at a nested function's fentry site;
        // and hook it, which a call that returns twice must not have.
        // A site already on its fast path keeps its text: its bytes (a
        // stub looked up) are wanted only for a change.
        let fast_call = (flags & (flag::R10_SAVED | flag::RETURNS_TWICE) == 0)
            .then(|| fast.for_mask(mask))
            .flatten()
            .and_then(|path| {
                if current == SiteText::Fast(path) {
                    return Some((path, None));
                }
                Some((path, Some(SiteText::Fast(path).bytes(site, form, &fast)?)))
            });
        let wanted = match (mask, fast_call) {
            (0, _) => SiteText::Nop,
            (_, Some((path, _))) => SiteText::Fast(path),
            _ => SiteText::Call,
        };
        if wanted == current && foreign == 0 {
            continue;
        }
        let listed = match (current, wanted) {
            // Between the NOP and the original call: both bytes are the
            // site's own, recognised when the site was recorded.
            (SiteText::Nop, SiteText::Call) | (SiteText::Call, SiteText::Nop)
                if raw == 0 && foreign == 0 =>
            {
                let to_call = wanted == SiteText::Call;
                TextWrite::push_site_toggle(writes, addr, form, site.original_bytes(), to_call)
            }
            _ => {
                let new = match wanted {
                    SiteText::Fast(_) => fast_call.and_then(|(_, bytes)| bytes),
                    _ => wanted.bytes(site, form, &fast),
                };
                // The current text's bytes: a fast call finds the same stub
                // again.
                let old = match foreign {
                    0 => current.bytes(site, form, &fast),
                    _ => sites::foreign_text(addr),
                };
                let (Some(old), Some(new)) = (old, new) else {
                    continue;
                };
                let len = form.instruction_len();
                TextWrite::new(addr, &old[..len], &new[..len]).map(|write| writes.push(write))
            }
        };
        if let Err(err) = listed {
            flip_back(changed);
            NOP_PENDING.store(true, Ordering::Release);
            return Err(err);
        }
        let flipped = current.flags() ^ wanted.flags() | raw | foreign;
        site.flags.store(flags ^ flipped, Ordering::Relaxed);
        changed.push((site, flipped));
    }
    if writes.is_empty() {
        return Ok(());
    }
    // The return stubs the batch's jumps go to, executable first.
    if let Err(err) = return_stubs::seal().and_then(|()| patch::apply(writes)) {
        flip_back(changed);
        NOP_PENDING.store(true, Ordering::Release);
        return Err(err);
    }
    Ok(())
}

/// Puts back the text flags [`sync_text`] set for a batch that failed.
fn flip_back(changed: &[(&'static Site, u32)]) {
    for &(site, flipped) in changed {
        let flags = site.flags.load(Ordering::Relaxed);
        site.flags.store(flags ^ flipped, Ordering::Relaxed);
    }
}

/// Counts describing fntrace's view of the process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Whether [`init`] has completed.
    pub initialized: bool,
    /// Call sites known (recognised or not).
    pub sites: usize,
    /// Sites whose text holds the call now.
    pub patched_sites: usize,
    /// Sites found by their first call rather than by the ELF scan.
    pub lazily_found: usize,
    /// fntrace's own sites (never enabled).
    pub excluded_sites: usize,
    /// Calls into a trampoline whose call bytes fntrace did not recognise;
    /// such sites are never written.
    pub unrecognized_sites: u64,
    /// What the ELF scan found.
    pub scan: ScanReport,
    /// Loaded objects whose symbols could not be read, with the reason.
    pub unreadable_objects: Vec<String>,
    /// Panics caught in tracer code.
    pub tracer_panics: u64,
    /// Frames whose exit could not be hooked: the thread's shadow stack was
    /// full (see `MAX_HOOKED_DEPTH`).
    pub frames_too_deep: u64,
    /// Hooked frames that left without returning (longjmp, unwinding,
    /// tail calls).
    pub frames_vanished: u64,
    /// Times a thread's hooked frames were set aside or brought back
    /// because the thread switched stacks (`swapcontext`, stackful
    /// coroutines): the frames of the stack left wait, with their depths,
    /// until one of them returns.
    pub stack_switches: u64,
    /// Hooked returns the shadow stack did not expect: the frame was not
    /// its top (another stack's frames were above it, or it had been set
    /// aside) or had been given up for dead (its exit was then reported as
    /// vanished, and is not reported again). Each was resynchronised and
    /// returned to its real caller; a non-zero count means the trace around
    /// those calls may nest differently from the program.
    pub shadow_resyncs: u64,
    /// Whether timestamps come from the TSC (else `clock_gettime`).
    pub tsc_clock: bool,
    /// How the last `init`, `enable`, `enable_with`, `disable` or `flush`
    /// was scheduled (`Some(PatchBoost::Realtime)`: it ran `SCHED_FIFO`;
    /// see [`crate::PatchPriority`]); `None` before the first.
    pub last_patch_boost: Option<priority::PatchBoost>,
}

/// A snapshot of fntrace's counters.
pub fn stats() -> Stats {
    let _untraced = Untraced::begin();
    let state = control();
    let mut stats = Stats {
        initialized: state.initialized,
        scan: state.scan,
        unreadable_objects: state.unreadable_objects.clone(),
        unrecognized_sites: UNRECOGNIZED.load(Ordering::Relaxed),
        tracer_panics: tracer::TRACER_PANICS.load(Ordering::Relaxed),
        frames_too_deep: shadow::TOO_DEEP.load(Ordering::Relaxed),
        frames_vanished: shadow::VANISHED.load(Ordering::Relaxed),
        stack_switches: shadow::SWITCHES.load(Ordering::Relaxed),
        shadow_resyncs: shadow::RESYNCS.load(Ordering::Relaxed),
        tsc_clock: clock::uses_tsc(),
        last_patch_boost: priority::last_boost(),
        ..Stats::default()
    };
    for site in SITES.iter().filter(|site| !site.has_flag(flag::UNLOADED)) {
        stats.sites += 1;
        stats.patched_sites += site.has_flag(flag::TEXT_IS_CALL) as usize;
        stats.lazily_found += site.has_flag(flag::LAZY) as usize;
        stats.excluded_sites += site.has_flag(flag::EXCLUDED) as usize;
    }
    stats
}

/// Every call site known, in no particular order.
pub fn sites() -> Vec<SiteInfo> {
    let _untraced = Untraced::begin();
    let _state = control();
    SITES
        .iter()
        .filter(|site| !site.has_flag(flag::UNLOADED))
        .map(SiteInfo::of)
        .collect()
}

/// The call site of the function whose entry address is `function`.
pub fn site_of(function: usize) -> Option<SiteInfo> {
    let _untraced = Untraced::begin();
    let _state = control();
    SITES
        .iter()
        .find(|site| site.function.load(Ordering::Relaxed) == function && site.form().is_some())
        .map(SiteInfo::of)
}

/// The demangled name of the function containing `address`, from the ELF
/// symbol tables of the loaded objects.
pub fn function_name(address: usize) -> Option<String> {
    let _untraced = Untraced::begin();
    let _control = control();
    let index = symbols::current();
    let function = index.function_at(address)?;
    Some(symbols::demangle(&function.name))
}

/// What [`dump`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpReport {
    /// Threads with events.
    pub threads: usize,
    /// Events written.
    pub events: usize,
    /// Events lost while recording (buffers full).
    pub lost: u64,
}

/// Writes everything the `graph` tracer recorded so far to `dir` as a
/// uftrace data directory (`uftrace replay -d DIR`, `fntrace report DIR`).
/// `dir` must not exist or be empty. On success the written events are
/// dropped from memory; on error nothing is lost: the events stay and can be
/// dumped elsewhere. Prints nothing: to show progress on long dumps, use
/// [`dump_with_progress`].
///
/// Memory: the events are written from where they are (the threads'
/// buffers), read a few times over, never collected: a dump needs little
/// more than the files' write buffers, however many events it writes.
/// While it writes, fntrace's operation lock is held: control operations
/// (`enable`, `disable`, ...), the recorders' drains and `fork` on other
/// threads wait for it to finish.
pub fn dump(dir: impl AsRef<std::path::Path>) -> Result<DumpReport, Error> {
    dump_with_progress(dir, &mut |_, _| {})
}

/// [`dump`], reporting progress as `(events written, events in all)` to
/// `progress` (every 65,536 events and at the end). `progress` runs while
/// the dump holds fntrace's operation lock: it must not call fntrace's
/// control functions (they would wait for the dump forever).
pub fn dump_with_progress(
    dir: impl AsRef<std::path::Path>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<DumpReport, Error> {
    let _untraced = Untraced::begin();
    let recorded = GRAPH_TRACER.recorded();
    fntrace_format::export::write_uftrace_dir_of(
        recorded.header(),
        &recorded,
        dir.as_ref(),
        Some(progress),
    )?;
    let report = DumpReport {
        threads: recorded.thread_count(),
        events: recorded.events(),
        lost: recorded.lost(),
    };
    recorded.forget();
    Ok(report)
}
