//! Call sites: the table, and the two ways sites are found.
//!
//! - **Lazy** ([`on_unknown_site`]): the first call through a site reaches the
//!   trampoline; the call instruction is decoded backwards from its return
//!   address and recorded. Its NOP is written by the next patch operation
//!   (at [`crate::init`], or at once by the discovering thread when no other
//!   patch is running), always through the patcher, never by a bare store.
//! - **Eager** ([`scan`]): at `init`, each function symbol's first bytes are
//!   searched for a call whose target is one of fntrace's trampolines, so that
//!   functions that have not run yet can be traced later; and each object's
//!   `__patchable_function_entries` section lists the NOPs of functions
//!   built with `-fpatchable-function-entry` ([`patchable`]).
//!
//! In a process fntrace was attached to (`fntrace attach`, which loads
//! `libfntrace.so` with `dlopen` and calls `fntrace_attach_start`), the
//! compiler's calls go to glibc's `mcount`/`__fentry__`, bound before
//! fntrace was there: with [`ADOPT_FOREIGN`] set, the scan *adopts* them
//! (flag `ADOPTED`): the text they held is kept ([`foreign_text`]) for
//! `detach` to put back, and the call fntrace writes there goes to its own
//! trampoline.

pub(crate) mod loader;
mod order;
pub(crate) mod patchable;
mod table;

use std::collections::{BTreeMap, HashSet};
use std::sync::OnceLock;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub(crate) use order::{in_order, Listed, SitesInOrder};
pub use table::SiteKind;
pub(crate) use table::{flag, Inserted, NewSite, Site, SiteTable};

use crate::arch::x86_64::{
    addr32_prefix_is_part_of_call, decode_call, fentry_placement, plt_slot, SiteForm, CALL_REL32,
    CALL_RIP_INDIRECT, ENDBR64, POP_R10, PUSH_R10,
};
use crate::symbols::{self, LoadedObject, SymbolIndex};

/// Every call site fntrace knows of.
pub(crate) static SITES: SiteTable = SiteTable::new();

/// Set when a lazily found site still holds its call and awaits its NOP.
pub(crate) static NOP_PENDING: AtomicBool = AtomicBool::new(false);

/// The tracers that select every site (enabled without name rules): a site
/// found by its first call while one is on is selected by them at once,
/// so a library opened during a trace is traced from its first call. (The
/// text already holds the call, as a selected site's must.) Written by
/// control under its lock.
pub(crate) static SELECT_NEW: AtomicU64 = AtomicU64::new(0);

/// Calls into a trampoline whose bytes decode as no known site form; they
/// are recorded (so they are not decoded again) and never written.
pub(crate) static UNRECOGNIZED: AtomicU64 = AtomicU64::new(0);

/// Set by attach: the scan adopts sites calling another object's
/// `mcount`/`_mcount`/`__fentry__` (see the module's comment) instead of
/// counting them as foreign and leaving them alone.
pub(crate) static ADOPT_FOREIGN: AtomicBool = AtomicBool::new(false);

/// The text each adopted site held when the scan found it (the compiler's
/// call of the foreign `mcount`), by the site's address: what `detach`
/// writes back. Written by the scan, under the control lock.
static FOREIGN_TEXT: parking_lot::Mutex<BTreeMap<usize, [u8; 8]>> =
    parking_lot::Mutex::new(BTreeMap::new());

/// The text the adopted site at `addr` held before fntrace wrote it.
pub(crate) fn foreign_text(addr: usize) -> Option<[u8; 8]> {
    FOREIGN_TEXT.lock().get(&addr).copied()
}

/// How many bytes from a function's start are searched for its site.
const SCAN_WINDOW: usize = 128;

extern "C" {
    fn mcount();
    fn _mcount();
    fn __fentry__();
    // The trampolines under their hidden names (asm/x86_64/entry.S): always
    // this object's, whatever the dynamic linker binds the public names to.
    fn fntrace_generic_mcount();
    fn fntrace_generic_fentry();
}

/// The entry of fntrace's own trampoline for `kind` (the hidden one the
/// public `mcount`/`__fentry__` jump to): what adopted sites call.
pub(crate) fn own_entry(kind: SiteKind) -> usize {
    match kind {
        SiteKind::Mcount => fntrace_generic_mcount as *const () as usize,
        SiteKind::Fentry => fntrace_generic_fentry as *const () as usize,
    }
}

/// Address of the trampoline that sites of `kind` call.
pub(crate) fn trampoline(kind: SiteKind) -> usize {
    match kind {
        SiteKind::Mcount => mcount as *const () as usize,
        SiteKind::Fentry => __fentry__ as *const () as usize,
    }
}

fn kind_of_target(target: usize) -> Option<SiteKind> {
    own_targets()
        .iter()
        .find(|(addr, _)| *addr == target && target != 0)
        .map(|&(_, kind)| kind)
}

/// The addresses that are fntrace's trampolines: the hidden entries, and
/// the public `mcount`, `_mcount` and `__fentry__` as this object's
/// references resolve them, if they are fntrace's one-jump stubs (0
/// otherwise). In a `libfntrace.so` loaded with `dlopen` (attach), the
/// public names resolve to glibc's, which loaded first: those are not
/// fntrace's.
fn own_targets() -> &'static [(usize, SiteKind); 5] {
    static OWN: OnceLock<[(usize, SiteKind); 5]> = OnceLock::new();
    OWN.get_or_init(|| {
        let mcount_entry = own_entry(SiteKind::Mcount);
        let fentry_entry = own_entry(SiteKind::Fentry);
        let ours = |public: usize, entry: usize| match jumps_to(public, entry) {
            true => public,
            false => 0,
        };
        [
            (mcount_entry, SiteKind::Mcount),
            (fentry_entry, SiteKind::Fentry),
            (
                ours(trampoline(SiteKind::Mcount), mcount_entry),
                SiteKind::Mcount,
            ),
            (
                ours(_mcount as *const () as usize, mcount_entry),
                SiteKind::Mcount,
            ),
            (
                ours(trampoline(SiteKind::Fentry), fentry_entry),
                SiteKind::Fentry,
            ),
        ]
    })
}

/// Whether the function at `public` is a jump to `entry` (`jmp rel32` or
/// `jmp rel8`, after an `endbr64` if any).
fn jumps_to(public: usize, entry: usize) -> bool {
    if public == entry {
        return true;
    }
    let mut code = [0u8; 9];
    if !read_own_memory(public, &mut code) {
        return false;
    }
    let (at, code) = match code.starts_with(&ENDBR64) {
        true => (public + 4, &code[4..]),
        false => (public, &code[..]),
    };
    match code[0] {
        0xe9 => {
            let rel = i32::from_le_bytes([code[1], code[2], code[3], code[4]]);
            (at as i64 + 5 + i64::from(rel)) as usize == entry
        }
        0xeb => (at as i64 + 2 + i64::from(code[1] as i8)) as usize == entry,
        _ => false,
    }
}

fn pack(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

/// Records the site whose call to the `kind` trampoline returns to
/// `return_address`. Called from the trampoline (recursion guard set) when
/// [`SITES`] has no entry yet. Allocates nothing.
pub(crate) fn on_unknown_site(return_address: usize, kind: SiteKind) -> Option<&'static Site> {
    // SAFETY: a call instruction ending at return_address was just executed,
    // so the 6 bytes before it are mapped code. (A 5-byte call at the very
    // start of a mapping would make byte -6 unmapped; text never starts with
    // an instrumented call: ELF headers or padding precede it.)
    let code: [u8; 6] = unsafe { std::ptr::read_unaligned((return_address - 6) as *const [u8; 6]) };
    let tramp = trampoline(kind);
    let mut decoded = None;
    if code[1] == CALL_REL32 {
        decoded = decode_call(&code[1..], return_address - 5, |_| None)
            .filter(|c| c.target == tramp || plt_entry_leads_to(c.target, tramp))
            .map(|c| (return_address - 5, c.form));
    }
    if decoded.is_none() && code[..2] == CALL_RIP_INDIRECT {
        // SAFETY: the call just executed loaded its target from this slot.
        let load = |slot: usize| Some(unsafe { std::ptr::read_unaligned(slot as *const usize) });
        decoded = decode_call(&code, return_address - 6, load)
            .filter(|c| c.target == tramp)
            .map(|c| (return_address - 6, c.form));
    }
    let (addr, form, original) = match decoded {
        Some((addr, form)) => {
            let start = 6 - form.instruction_len();
            (addr, Some(form), pack(&code[start..]))
        }
        None => {
            UNRECOGNIZED.fetch_add(1, Ordering::Relaxed);
            (return_address, None, [0; 8])
        }
    };
    let (function, r10_saved) = match form {
        Some(_) => {
            // The byte at the return address starts the next instruction,
            // so it is mapped; the one after only if on the same page.
            let after = if return_address & 4095 == 4095 {
                [0; 2]
            } else {
                // SAFETY: both bytes lie in the page of the mapped byte at
                // return_address.
                unsafe { std::ptr::read_unaligned(return_address as *const [u8; 2]) }
            };
            lazy_function_start(addr, kind, after)
        }
        None => (0, false),
    };
    let selected = if form.is_some() {
        SELECT_NEW.load(Ordering::Relaxed)
    } else {
        0
    };
    let new = NewSite {
        addr,
        function,
        form,
        kind,
        original,
        extra_flags: flag::LAZY
            | if form.is_some() {
                flag::TEXT_IS_CALL
            } else {
                0
            }
            | if r10_saved { flag::R10_SAVED } else { 0 },
        // In place before the site is published (or revived): once it is
        // listed, only control operations write its tracers.
        tracers: selected,
    };
    let site = match SITES.insert(return_address, &new)? {
        Inserted::Existing(site) if site.has_flag(flag::UNLOADED) => {
            if site.revive(&new) {
                SITES.note_change();
            } else if site.has_flag(flag::UNLOADED) {
                // A control operation is describing it right now: this
                // call goes untraced.
                return None;
            }
            site
        }
        Inserted::New(site) | Inserted::Existing(site) => site,
    };
    if form.is_some() && site.tracers.load(Ordering::Relaxed) == 0 {
        NOP_PENDING.store(true, Ordering::Release);
    }
    Some(site)
}

/// Whether `target` is a PLT entry (`jmp *slot(%rip)`) whose GOT slot now
/// holds `tramp`: a `-pg` executable built without PIE calls `mcount@plt`,
/// and with lazy binding the loader binds the slot at the first call, after
/// the ELF scan (which resolves only bound slots, see `through_plt`) and
/// before this lazy hook runs. `target` is only a guess here (the bytes
/// before a return address that merely look like `e8 rel32`): both reads
/// go through `process_vm_readv`, which fails on unmapped memory instead
/// of faulting, and allocates nothing.
fn plt_entry_leads_to(target: usize, tramp: usize) -> bool {
    const PLT_ENTRY_HEAD: usize = 16;
    let mut head = [0u8; PLT_ENTRY_HEAD];
    if !read_own_memory(target, &mut head) {
        return false;
    }
    let Some(slot) = plt_slot(&head, target) else {
        return false;
    };
    let mut value = [0u8; 8];
    read_own_memory(slot, &mut value) && usize::from_le_bytes(value) == tramp
}

/// Reads `out.len()` bytes of this process at `addr`; false if any is
/// unmapped or unreadable.
fn read_own_memory(addr: usize, out: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` describes `out`, writable for its length; the kernel
    // checks `remote` and returns an error (EFAULT) for unmapped memory.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    read == out.len() as isize
}

/// The entry of the function whose site (a `kind` call at `addr`) was found
/// by its first call, from the instructions gcc puts before it: none or
/// `endbr64` for fentry (with `push %r10` for a nested function, which the
/// second value tells); for mcount, `push %rbp; mov %rsp,%rbp` and then only
/// pushes and register moves (callee-saved registers, a nested function's
/// r10) up to the call. 0 when the bytes before are something else (a Rust
/// prologue): the next ELF scan fills it in. `after` holds the bytes after
/// the call.
fn lazy_function_start(addr: usize, kind: SiteKind, after: [u8; 2]) -> (usize, bool) {
    const FRAME_SETUP: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    const LOOK_BACK: usize = 32;
    // Only bytes of the call's own page are read: the one before may be
    // unmapped.
    let available = (addr & 4095).min(LOOK_BACK);
    // SAFETY: [addr - available, addr) lies in the page holding the call
    // instruction, which is mapped (it just ran).
    let before = unsafe { std::slice::from_raw_parts((addr - available) as *const u8, available) };
    // `endbr64` right before offset `at` of `before` belongs to the function.
    let entry = |at: usize| {
        let at = if before[..at].ends_with(&ENDBR64) {
            at - ENDBR64.len()
        } else {
            at
        };
        addr - (before.len() - at)
    };
    let at = before.len();
    match kind {
        SiteKind::Fentry if before.ends_with(&PUSH_R10) && after == POP_R10 => {
            (entry(at - PUSH_R10.len()), true)
        }
        SiteKind::Fentry => (entry(at), false),
        SiteKind::Mcount => {
            // The nearest frame setup from which the prologue decodes
            // instruction by instruction exactly up to the call.
            let start = (0..at.saturating_sub(FRAME_SETUP.len() - 1))
                .rev()
                .find(|&from| {
                    before[from..].starts_with(&FRAME_SETUP)
                        && addr32_prefix_is_part_of_call(addr, addr - (at - from), &before[from..])
                });
            (start.map_or(0, entry), false)
        }
    }
}

/// The entry address of the function whose site returns to `site_return`
/// (0 when unknown). Lock-free: a table probe.
pub(crate) fn function_of_site(site_return: usize) -> usize {
    SITES
        .find(site_return)
        .map_or(0, |site| site.function.load(Ordering::Relaxed))
}

/// What the ELF scan of the loaded objects found (see [`crate::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Function symbols whose first bytes were searched.
    pub functions_scanned: usize,
    /// New sites recorded.
    pub sites_found: usize,
    /// Sites calling an `mcount`/`__fentry__` that is not fntrace's (for
    /// example glibc's, from a shared object that did not bind to ours);
    /// left alone.
    pub foreign_sites: usize,
    /// New sites found at patchable function entries (counted in
    /// `sites_found` too).
    pub patchable_found: usize,
    /// Entries of `__patchable_function_entries` sections that fntrace
    /// refuses to patch (fewer than five NOPs at the function's entry, NOPs
    /// of another form, no function there, or a function that also calls
    /// `mcount`/`__fentry__`); see `docs/patching.md`.
    pub patchable_refused: usize,
}

/// Searches every function symbol of the objects of `index` that `loaded`
/// lists for its call site and records new ones (the others may be
/// unmapped: not read). Called with the control lock held. `loaded` can
/// only be had inside [`loader::hold`], while the loader maps and unmaps
/// nothing: what it lists stays mapped for the whole scan.
pub(crate) fn scan(index: &SymbolIndex, loaded: &loader::Loaded) -> ScanReport {
    let mut report = ScanReport::default();
    let adopt = ADOPT_FOREIGN.load(Ordering::Relaxed);
    let foreign: Vec<(usize, SiteKind)> = index
        .objects
        .iter()
        .flat_map(|o| o.functions.iter())
        .filter_map(|f| match &*f.name {
            "mcount" | "_mcount" => Some((f.start, SiteKind::Mcount)),
            "__fentry__" => Some((f.start, SiteKind::Fentry)),
            _ => None,
        })
        .filter(|&(addr, _)| kind_of_target(addr).is_none())
        .collect();

    for object in index.objects.iter().filter(|object| loaded.lists(object)) {
        // Functions with a call site: a patchable entry of theirs is not
        // patched as well.
        let mut with_call_site = HashSet::new();
        for function in &object.functions {
            let in_text = object
                .text
                .iter()
                .any(|t| function.start >= t.start && function.start < t.end);
            if function.size == 0 || !in_text {
                continue;
            }
            let window = function.size.min(SCAN_WINDOW);
            let window = object
                .text
                .iter()
                .find(|t| function.start >= t.start && function.start < t.end)
                .map_or(0, |t| window.min(t.end - function.start));
            // SAFETY: [start, start + window) lies inside an executable
            // PT_LOAD segment (checked above) of an object `loaded` lists
            // with these very segments; a `Loaded` exists only inside
            // `loader::hold`'s operation, during which the loader unmaps
            // nothing, and `code` does not outlive this scan.
            let code = unsafe { std::slice::from_raw_parts(function.start as *const u8, window) };
            report.functions_scanned += 1;
            let load_slot = |slot: usize| {
                // SAFETY: `maps` checked that the slot lies inside a segment
                // of the object, mapped for the scan (as for `code`).
                object
                    .maps(slot, 8)
                    .then(|| unsafe { std::ptr::read_unaligned(slot as *const usize) })
            };
            for offset in 0..code.len() {
                let addr = function.start + offset;
                let Some(mut call) = decode_call(&code[offset..], addr, load_slot) else {
                    continue;
                };
                if call.form != SiteForm::CallGotRip {
                    call.target = through_plt(object, call.target, load_slot);
                }
                let adopted = foreign.iter().find(|(addr, _)| *addr == call.target);
                if adopted.is_some() && !adopt {
                    report.foreign_sites += 1;
                    break;
                }
                let adopted = adopted.map(|&(_, kind)| kind);
                let Some(kind) = adopted.or_else(|| kind_of_target(call.target)) else {
                    continue;
                };
                if call.form == SiteForm::Addr32CallRel32
                    && !addr32_prefix_is_part_of_call(addr, function.start, code)
                {
                    continue; // the next offset decodes the `e8` alone
                }
                let len = call.form.instruction_len();
                let after = &code[(offset + len).min(code.len())..];
                let r10_saved = match kind {
                    SiteKind::Fentry => match fentry_placement(code, offset, after) {
                        Some(wrapped) => wrapped,
                        // gcc `-pg -mfentry -fpatchable-function-entry`:
                        // the call right after the entry's NOPs.
                        None if patchable::only_nops_before(code, offset) => false,
                        None => {
                            // Not where gcc puts it: left to the lazy
                            // hook, but the function is instrumented, so
                            // a patchable entry of it is not patched as
                            // well.
                            with_call_site.insert(function.start);
                            continue;
                        }
                    },
                    SiteKind::Mcount => false,
                };
                let text = pack(&code[offset..offset + len]);
                let new = NewSite {
                    addr,
                    function: function.start,
                    form: Some(call.form),
                    kind,
                    // An adopted site's call to fntrace is made by control
                    // (through a jump stub when out of reach).
                    original: match adopted {
                        Some(_) => [0; 8],
                        None => text,
                    },
                    extra_flags: match adopted {
                        Some(_) => flag::ADOPTED | flag::FOREIGN_TEXT,
                        None => flag::TEXT_IS_CALL,
                    } | exclusion_flag(&function.name)
                        | if r10_saved { flag::R10_SAVED } else { 0 },
                    tracers: 0,
                };
                with_call_site.insert(function.start);
                let inserted = SITES.insert(addr + len, &new);
                let is_new = match inserted {
                    Some(Inserted::New(_)) => true,
                    Some(Inserted::Existing(site)) => site.revive(&new),
                    None => false,
                };
                if is_new && adopted.is_some() {
                    FOREIGN_TEXT.lock().insert(addr, text);
                }
                match inserted {
                    Some(Inserted::New(_)) => report.sites_found += 1,
                    Some(Inserted::Existing(_)) if is_new => {
                        SITES.note_change();
                        report.sites_found += 1;
                    }
                    // Being revived by the lazy hook (it makes the next
                    // operation NOP it): left to it.
                    Some(Inserted::Existing(site)) if site.has_flag(flag::UNLOADED) => {}
                    Some(Inserted::Existing(site)) => complete_lazy_site(site, &new),
                    None => {}
                }
                break;
            }
        }
        patchable::scan(object, &with_call_site, &mut report);
    }
    report
}

/// Where a call to `target` ends up when `target` is an entry of
/// `object`'s PLT (its GOT slot already bound, as with `BIND_NOW`; a slot
/// bound lazily still points into the PLT and matches nothing); else
/// `target`.
fn through_plt(
    object: &LoadedObject,
    target: usize,
    load_slot: impl Fn(usize) -> Option<usize>,
) -> usize {
    const PLT_ENTRY_HEAD: usize = 16;
    if !object
        .text
        .iter()
        .any(|t| target >= t.start && target + PLT_ENTRY_HEAD <= t.end)
    {
        return target;
    }
    // SAFETY: [target, target + 16) lies inside an executable segment of
    // `object` (checked above), which `scan`, the only caller, reads while
    // the loader lists it (see the SAFETY line there).
    let head = unsafe { std::slice::from_raw_parts(target as *const u8, PLT_ENTRY_HEAD) };
    plt_slot(head, target).and_then(load_slot).unwrap_or(target)
}

/// The ELF scan knows more than the lazy hook did: the function, whether
/// the site is fntrace's own, and whether a `67` prefix belongs to the call.
fn complete_lazy_site(site: &Site, scanned: &NewSite) {
    // The symbol is right where the lazy hook's reading of the prologue
    // guessed wrong or not at all.
    site.function.store(scanned.function, Ordering::Relaxed);
    site.set_flag(flag::EXCLUDED, scanned.extra_flags & flag::EXCLUDED != 0);
    let holds_original = site.has_flag(flag::TEXT_IS_CALL) && !site.has_flag(flag::TEXT_IS_FAST);
    if holds_original && site.addr.load(Ordering::Relaxed) != scanned.addr {
        site.redescribe(scanned);
        SITES.note_change();
    }
}

/// Fills in the function of lazily found sites the scan did not reach
/// (functions whose symbol has no size, say).
pub(crate) fn resolve_functions(index: &SymbolIndex) {
    for site in SITES.iter() {
        if site.function.load(Ordering::Relaxed) != 0 || site.form().is_none() {
            continue;
        }
        let addr = site.addr.load(Ordering::Relaxed);
        if let Some(function) = index.function_at(addr) {
            site.function.store(function.start, Ordering::Relaxed);
            site.set_flag(flag::EXCLUDED, exclusion_flag(&function.name) != 0);
        }
    }
}

/// fntrace's own functions are never traced: it would only measure itself.
pub(crate) fn exclusion_flag(mangled: &str) -> u32 {
    // Every mangling (Rust legacy and v0, C++) spells a path's identifiers
    // out at least once, so a name without `fntrace` or `_Unwind_` is not
    // fntrace's: most functions are settled without demangling (which cost
    // a large program's start-up tens of milliseconds).
    if !mangled.contains("fntrace") && !mangled.contains("_Unwind_") {
        return 0;
    }
    let name = symbols::demangle(mangled);
    // Also generic code instantiated for fntrace's types (drop glue, ...),
    // and fntrace's wrappers of libgcc's unwinder entry points (libgcc's
    // own are never instrumented): they rearrange the shadow stack under
    // their own frames.
    let own = name.starts_with("fntrace_")
        || name.starts_with("_Unwind_")
        || name.match_indices("fntrace::").any(|(at, _)| {
            let before = name[..at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        });
    if own {
        flag::EXCLUDED
    } else {
        0
    }
}

/// A call site as the public API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteInfo {
    /// Address of the call instruction's first byte.
    pub address: usize,
    /// Entry address of the function holding the site (0 while unknown).
    pub function: usize,
    /// The encoding, or `None` when the bytes were not recognised (such a
    /// site is never written).
    pub form: Option<SiteForm>,
    /// Which trampoline the site calls.
    pub kind: SiteKind,
    /// The original call instruction.
    pub original: Vec<u8>,
    /// Number of enabled tracers that selected this site (its reference
    /// count: the site holds the call exactly when this is non-zero).
    pub enabled_tracers: u32,
    /// Whether the text holds a call right now (else the NOP: at a
    /// patchable entry never written, the compiler's own).
    pub patched: bool,
    /// Whether that call goes straight to the graph tracer's fast entry
    /// (the site is selected by `graph` alone, which has no duration
    /// limit) rather than to the original trampoline. Its bytes are then a
    /// direct call of the same length as the original (`e8 rel32`, or
    /// `67 e8 rel32` for 6-byte sites).
    pub graph_fast_path: bool,
    /// Found by the first call through it rather than by the ELF scan.
    pub lazily_found: bool,
    /// fntrace's own code: never enabled.
    pub excluded: bool,
    /// A patchable function entry (`-fpatchable-function-entry`): the
    /// compiler left NOPs, and `original` is the call fntrace writes there
    /// (to the `__fentry__` trampoline, directly or through a jump stub;
    /// empty-valued until made, when out of a direct call's reach).
    pub patchable_entry: bool,
}

impl SiteInfo {
    pub(crate) fn of(site: &Site) -> SiteInfo {
        let form = site.form();
        let len = form.map_or(0, SiteForm::instruction_len);
        SiteInfo {
            address: site.addr.load(Ordering::Relaxed),
            function: site.function.load(Ordering::Relaxed),
            form,
            kind: site.kind(),
            original: site.original_bytes()[..len].to_vec(),
            enabled_tracers: site.tracers.load(Ordering::Relaxed).count_ones(),
            patched: site.has_flag(flag::TEXT_IS_CALL),
            graph_fast_path: site.has_flag(flag::TEXT_IS_FAST)
                && !site.has_flag(flag::TEXT_FAST_SECOND),
            lazily_found: site.has_flag(flag::LAZY),
            excluded: site.has_flag(flag::EXCLUDED),
            patchable_entry: site.has_flag(flag::PATCHABLE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{exclusion_flag, flag};

    #[test]
    fn fntrace_s_own_functions_are_excluded_whatever_their_mangling() {
        for own in [
            "_ZN7fntrace6record11exclusively17h12fa65fb4b612cf3E",
            // Generic code instantiated for fntrace's types.
            "_ZN4core3ptr104drop_in_place$LT$alloc..vec..Vec$LT$alloc..sync..Arc$LT$fntrace..\
             symbols..opened..SeenObject$GT$$GT$$GT$17h3ec53485162561f5E",
            "_RNvNtCs1234_7fntrace6record5start",
            "fntrace_graph_mcount",
            "_Unwind_RaiseException",
        ] {
            assert_eq!(exclusion_flag(own), flag::EXCLUDED, "{own}");
        }
        for other in [
            "_ZN4core3fmt5write17h0123456789abcdefE",
            "_RNvNtCs1234_5serde2de5visit",
            "my_fntrace_helper",
            "main",
        ] {
            assert_eq!(exclusion_flag(other), 0, "{other}");
        }
    }
}
