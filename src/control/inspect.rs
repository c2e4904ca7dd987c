//! What fntrace sees of the process, for readers: counts ([`stats`]), the
//! call sites and their functions ([`sites`], [`site_of`],
//! [`function_name`]), and the graph tracer's dump ([`dump`]).

use super::*;

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
