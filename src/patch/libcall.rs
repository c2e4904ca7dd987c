//! Library calls through the executable's PLT (uftrace's default libcall
//! tracing): calls from the executable into shared
//! libraries (`malloc`, `getppid`, `printf`...) become sites of their own,
//! named after the imported function, without touching any text.
//!
//! For every `R_X86_64_JUMP_SLOT` relocation of the executable's
//! `.rela.plt` (the GOT slot its PLT entry jumps through), a stub is made
//! on a page near the executable:
//!
//! ```text
//! stub:  endbr64                  ; reached by `jmp *GOT` (indirect: IBT)
//!        nopl 0(%rax,%rax,1)      ; the site: an fentry site, key stub + 9
//!        jmp  *0(%rip)
//!        .quad <the real function>
//! ```
//!
//! and the GOT slot (data, an aligned 8-byte store) is pointed at the stub.
//! A call `call foo@plt` → `jmp *GOT` → stub reaches the site with the
//! caller's return address at `8(%rsp)` when the site's call runs: exactly
//! an fentry site's frame, so the `__fentry__` trampoline, the graph fast
//! entry and the return hooking work unchanged. The site's function is the
//! PLT entry's address (`.plt.sec` entry with IBT, else `.plt`), named by
//! `symbols::plt` (`SymbolIndex::function_at` falls back to it), as
//! uftrace names it; PLT entries are kept apart from the objects' function
//! lists, so that nothing scans or patches them as functions.
//!
//! The real function is the slot's value when it is bound already (outside
//! the executable's PLT: `-z now`, or called once), else what the loader
//! would bind it to (`dlsym(RTLD_DEFAULT, name)`, or `dlvsym` with the
//! reference's symbol version when that finds one in the same object: see
//! `resolve`). Slots in the RELRO region (`-z now` builds) are made
//! writable around the store and read-only again.
//!
//! Only when the runtime is its own shared object (`fntrace record`,
//! `LD_PRELOAD=libfntrace.so`): a program linked with `libfntrace.a` shares
//! the executable's GOT with the runtime, whose own calls would then be
//! traced; that is refused. See `docs/runtime-patching.md`.

use std::collections::HashMap;
use std::ffi::CString;
use std::ops::Range;

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader as _, Rela as _, SectionHeader as _};
use object::{Endianness, SymbolIndex as ElfSymbolIndex};
use parking_lot::Mutex;

use super::{entry_patch, reach};
use crate::arch::x86_64::{SiteForm, ENDBR64, NOP5};
use crate::sites::{flag, patchable, Inserted, NewSite, SiteKind, SITES};
use crate::symbols::{Function, MappedFile, SymbolIndex};

/// Bytes a stub takes (padded with `int3`).
const SLOT: usize = 32;
/// Size of a stub page.
const PAGE: usize = 4096;
/// Bytes of a PLT entry (`.plt` and `.plt.sec` alike).
const PLT_ENTRY: usize = 16;
/// `jmp *disp32(%rip)`.
const JMP_RIP: [u8; 2] = [0xff, 0x25];

/// Imports left alone, and why: the profiling entry points (their calls
/// are how sites are found), what returns twice on one stack or never (a
/// hooked return would be wrong or never taken), what unwinds through its
/// caller, and what uftrace itself skips. The `setjmp` family
/// ([`RETURNS_TWICE`]) is traced, its return left alone.
const SKIPPED: &[(&str, &str)] = &[
    ("mcount", "a profiling entry point"),
    ("_mcount", "a profiling entry point"),
    ("__fentry__", "a profiling entry point"),
    ("__gnu_mcount_nc", "a profiling entry point"),
    ("__cyg_profile_func_enter", "a profiling entry point"),
    ("__cyg_profile_func_exit", "a profiling entry point"),
    ("_mcleanup", "a profiling entry point"),
    ("__libc_start_main", "never returns"),
    ("__cxa_finalize", "skipped by uftrace (runs at unload)"),
    ("__cxa_throw", "unwinds through its caller"),
    ("__cxa_rethrow", "unwinds through its caller"),
    ("__cxa_begin_catch", "unwinds through its caller"),
    ("__cxa_end_catch", "unwinds through its caller"),
    ("_Unwind_Resume", "unwinds through its caller"),
    ("vfork", "returns twice on one stack"),
    ("longjmp", "never returns"),
    ("_longjmp", "never returns"),
    ("siglongjmp", "never returns"),
    ("__longjmp_chk", "never returns"),
    ("exit", "never returns"),
    ("_exit", "never returns"),
    ("_Exit", "never returns"),
    ("abort", "never returns"),
    ("pthread_exit", "never returns"),
    ("__stack_chk_fail", "never returns"),
    ("__assert_fail", "never returns"),
];

/// Imports that return twice (a second time when `longjmp` comes back to
/// them): their sites never hook the return (the saved return address,
/// the trampoline's then, would have no frame the second time); each call
/// is reported whole at its entry, as a call of no duration (uftrace
/// records them, and times the first return).
const RETURNS_TWICE: &[&str] = &["setjmp", "_setjmp", "sigsetjmp", "__sigsetjmp"];

/// Whose library calls [`hook`] traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LibcallScope {
    /// The executable's (uftrace's default).
    Executable,
    /// The executable's and every loaded library's, but the base system
    /// libraries' ([`BASE_LIBRARIES`]; uftrace's `--nest-libcall`).
    Nested,
}

/// Libraries whose own library calls `--nest-libcall` leaves alone, as
/// uftrace does: the C runtime's (their calls into each other are the
/// implementation of the calls traced, and the loader's would run before
/// and under fntrace's own work).
const BASE_LIBRARIES: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
];

/// Why an import was not hooked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub why: &'static str,
    /// Left alone by rule (`exit`, `setjmp`...), not for want of a way.
    pub on_purpose: bool,
}

impl Skipped {
    /// Whether it was left alone by rule.
    pub fn on_purpose(&self) -> bool {
        self.on_purpose
    }

    fn failed(why: &'static str) -> Skipped {
        Skipped {
            why,
            on_purpose: false,
        }
    }
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.why)
    }
}

/// What [`hook`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LibcallReport {
    /// The objects whose calls were hooked (the executable first).
    pub objects: usize,
    /// Imported functions whose calls are now sites (one entry per object
    /// importing it).
    pub hooked: Vec<String>,
    /// Imported functions left alone, with the reason.
    pub skipped: Vec<(String, Skipped)>,
    /// Profiling entry points (`mcount@plt`: `-pg` without PIE) whose
    /// lazily bound slots were bound now: the ELF scan, which follows only
    /// bound slots, finds their call sites if run again.
    pub bound_profiling: usize,
}

/// Imports through which instrumented code calls the tracer: bound (never
/// hooked) so that the scan finds the sites calling them.
const PROFILING: &[&str] = &["mcount", "_mcount", "__fentry__"];

/// The report of the one [`hook`] that ran (it runs once).
static DONE: Mutex<Option<LibcallReport>> = Mutex::new(None);

/// One `R_X86_64_JUMP_SLOT` of the executable, at run-time addresses.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The imported function.
    pub name: String,
    /// The version its reference asks for (`GLIBC_2.2.5`), if any.
    pub version: Option<String>,
    /// The GOT slot.
    pub got: usize,
    /// The PLT entry that jumps through it.
    pub plt: usize,
}

/// What the executable's file says about its imports.
#[derive(Debug)]
pub(crate) struct Imports {
    pub slots: Vec<Slot>,
    /// `.plt` and `.plt.sec`: a slot whose value lies here is not bound.
    pub plt: Vec<Range<usize>>,
    /// The pages the loader makes read-only after relocation
    /// (`PT_GNU_RELRO`, both ends rounded down, as glibc does).
    pub relro: Option<Range<usize>>,
}

/// Reads the imports of the ELF file `data` loaded at `bias`.
pub(crate) fn read_imports(data: &[u8], bias: usize) -> Result<Imports, String> {
    let file = ElfFile64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let err = |e: object::Error| e.to_string();
    // The GOT slot each PLT entry jumps through (`jmp *disp(%rip)`, after
    // `endbr64` and `bnd` when built for IBT/MPX), from the file's bytes.
    let mut plt_of_got: HashMap<usize, usize> = HashMap::new();
    let mut plt = Vec::new();
    for name in [&b".plt"[..], b".plt.sec"] {
        let Some((_, header)) = sections.section_by_name(endian, name) else {
            continue;
        };
        let address = header.sh_addr(endian) as usize;
        let bytes = header.data(endian, data).map_err(|_| "bad .plt")?;
        plt.push(bias + address..bias + address + bytes.len());
        for (k, entry) in bytes.chunks_exact(PLT_ENTRY).enumerate() {
            let at = address + k * PLT_ENTRY;
            if let Some(got) = got_of_plt_entry(entry, at) {
                plt_of_got.insert(got, at);
            }
        }
    }
    let mut slots = Vec::new();
    if let Some((_, rela_plt)) = sections.section_by_name(endian, b".rela.plt") {
        let symbols = sections
            .symbols(endian, data, elf::SHT_DYNSYM)
            .map_err(err)?;
        let versions = sections.versions(endian, data).map_err(err)?;
        let relas = match rela_plt.rela(endian, data).map_err(err)? {
            Some((relas, _)) => relas,
            None => &[],
        };
        for rela in relas {
            if rela.r_type(endian, false) != elf::R_X86_64_JUMP_SLOT {
                continue;
            }
            let index = ElfSymbolIndex(rela.r_sym(endian, false) as usize);
            let symbol = symbols.symbol(index).map_err(err)?;
            let name = symbols.symbol_name(endian, symbol).map_err(err)?;
            let version = match &versions {
                Some(v) => v
                    .version(v.version_index(endian, index))
                    .map_err(err)?
                    .map(|v| String::from_utf8_lossy(v.name()).into_owned()),
                None => None,
            };
            let got = rela.r_offset(endian) as usize;
            let Some(&entry) = plt_of_got.get(&got) else {
                continue; // no PLT entry jumps through it: not a call
            };
            slots.push(Slot {
                name: String::from_utf8_lossy(name).into_owned(),
                version,
                got: bias + got,
                plt: bias + entry,
            });
        }
    }
    let relro = file
        .elf_program_headers()
        .iter()
        .find(|ph| ph.p_type(endian) == elf::PT_GNU_RELRO)
        .map(|ph| {
            let start = bias + ph.p_vaddr(endian) as usize;
            let end = start + ph.p_memsz(endian) as usize;
            start & !(PAGE - 1)..end & !(PAGE - 1)
        });
    Ok(Imports { slots, plt, relro })
}

/// The link-time GOT slot a 16-byte PLT entry at `at` jumps through: `ff
/// 25 disp32` at its start, or after `endbr64` and/or a `bnd` prefix
/// (`f2`). The lazy `.plt` entries of IBT builds and the PLT's first entry
/// (`push GOT+8; jmp *GOT+16`) match none.
fn got_of_plt_entry(entry: &[u8], at: usize) -> Option<usize> {
    let body = entry.strip_prefix(&ENDBR64[..]).unwrap_or(entry);
    let body = body.strip_prefix(&[0xf2][..]).unwrap_or(body);
    let jump = body.strip_prefix(&JMP_RIP[..])?;
    let disp = i32::from_le_bytes(jump.get(..4)?.try_into().ok()?);
    let next = at + (entry.len() - body.len()) + JMP_RIP.len() + 4;
    Some(next.wrapping_add_signed(disp as isize))
}

/// The stub of a slot at `stub`, jumping to `target`; its site is at
/// `stub + ENDBR64.len()`.
pub(crate) fn stub_bytes(target: usize) -> [u8; SLOT] {
    let mut bytes = [0xcc; SLOT];
    let mut at = 0;
    for part in [
        &ENDBR64[..],
        &NOP5,
        &JMP_RIP,
        &[0; 4],
        &target.to_le_bytes(),
    ] {
        bytes[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    bytes
}

/// Where a stub's site is.
const SITE_OFFSET: usize = ENDBR64.len();

/// Hooks the library calls of the executable, and with
/// [`LibcallScope::Nested`] of every loaded library but the base system
/// ones (once: later calls return the first report). Under the control
/// lock, before the program's threads call into the slots it writes (at
/// start-up), or with them running: each slot is changed by one aligned
/// store, and its stub and site exist before it.
pub(crate) fn hook(index: &SymbolIndex, scope: LibcallScope) -> Result<LibcallReport, String> {
    let mut done = DONE.lock();
    if let Some(report) = done.as_ref() {
        return Ok(report.clone());
    }
    let executable = std::fs::read_link("/proc/self/exe").map_err(|e| e.to_string())?;
    let executable = executable.to_string_lossy().into_owned();
    let Some(main) = index.objects.iter().find(|o| o.path == executable) else {
        return Err(format!("{executable}: not among the loaded objects"));
    };
    let this = hook as *const () as usize;
    if main.text.iter().any(|t| t.contains(&this)) {
        return Err(format!(
            "{executable} is linked with libfntrace.a: its library calls and fntrace's own \
             go through the same GOT; library calls are traced only with libfntrace.so \
             (fntrace record, LD_PRELOAD)"
        ));
    }
    let mut objects = vec![main];
    if scope == LibcallScope::Nested {
        objects.extend(index.objects.iter().filter(|object| {
            let name = object.path.rsplit('/').next().unwrap_or_default();
            object.path != executable
                // fntrace's own calls: never traced.
                && !object.text.iter().any(|t| t.contains(&this))
                && !BASE_LIBRARIES.contains(&name)
        }));
    }
    let mut report = LibcallReport::default();
    let mut names = Vec::new();
    for object in objects {
        let mapped = MappedFile::open(&object.path)?;
        let imports = read_imports(mapped.bytes(), object.bias)?;
        drop(mapped);
        hook_object(imports, &mut report, &mut names)?;
        report.objects += 1;
    }
    *done = Some(report.clone());
    Ok(report)
}

/// Hooks one object's `imports`, adding to `report` and to the PLT
/// entries' `names`, which are set once every object's are in.
fn hook_object(
    imports: Imports,
    report: &mut LibcallReport,
    names: &mut Vec<Function>,
) -> Result<(), String> {
    let mut planned = Vec::new();
    let mut binds = Vec::new();
    for slot in imports.slots {
        // SAFETY: the GOT slot of a JUMP_SLOT relocation of a loaded
        // object: 8 aligned, readable bytes of its data segment.
        let bound = unsafe { std::ptr::read_volatile(slot.got as *const usize) };
        let unbound = imports.plt.iter().any(|r| r.contains(&bound));
        if let Some(&(_, why)) = SKIPPED.iter().find(|(name, _)| *name == slot.name) {
            if unbound && PROFILING.contains(&slot.name.as_str()) {
                if let Some(target) = resolve(&slot) {
                    binds.push((slot.got, target));
                }
            }
            let skipped = Skipped {
                why,
                on_purpose: true,
            };
            report.skipped.push((slot.name, skipped));
            continue;
        }
        let target = if unbound {
            match resolve(&slot) {
                Some(target) => target,
                None => {
                    let skipped = Skipped::failed("not defined by any loaded object");
                    report.skipped.push((slot.name, skipped));
                    continue;
                }
            }
        } else {
            bound
        };
        planned.push((slot, target));
    }
    // Stubs first, on pages sealed read-execute before any slot points
    // at them.
    let mut pages: Vec<usize> = Vec::new();
    let mut stubs = Vec::with_capacity(planned.len());
    for (slot, target) in planned {
        let fits = pages.last().filter(|_| stubs.len() % (PAGE / SLOT) != 0);
        let page = match fits {
            Some(&page) => page,
            None => match reach::map_writable_page_near(slot.plt) {
                Some(page) => {
                    pages.push(page);
                    page
                }
                None => {
                    let skipped = Skipped::failed("no stub memory within reach");
                    report.skipped.push((slot.name, skipped));
                    continue;
                }
            },
        };
        let stub = page + (stubs.len() % (PAGE / SLOT)) * SLOT;
        let bytes = stub_bytes(target);
        // SAFETY: a free slot of a page mapped read-write (not executable)
        // above, not reachable from any code yet.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), stub as *mut u8, SLOT) };
        stubs.push((slot, stub));
    }
    for &page in &pages {
        entry_patch::note_stub_page(page);
        // SAFETY: a page mapped above, complete now; no GOT slot points at
        // it yet. No mapping is ever writable and executable.
        let sealed = unsafe {
            libc::mprotect(
                page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
        if sealed != 0 {
            return Err(format!(
                "sealing a stub page: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    let mut stores = Vec::new();
    for (slot, stub) in stubs {
        let site = stub + SITE_OFFSET;
        let new = NewSite {
            addr: site,
            function: slot.plt,
            form: Some(SiteForm::CallRel32),
            kind: SiteKind::Fentry,
            original: patchable::direct_call(site),
            extra_flags: flag::PATCHABLE
                | flag::ENTRY_STUB
                | if RETURNS_TWICE.contains(&slot.name.as_str()) {
                    flag::RETURNS_TWICE
                } else {
                    0
                },
            tracers: 0,
        };
        match SITES.insert(site + NOP5.len(), &new) {
            Some(Inserted::New(_)) => {}
            _ => {
                let skipped = Skipped::failed("the site table is full");
                report.skipped.push((slot.name, skipped));
                continue;
            }
        }
        names.push(Function {
            start: slot.plt,
            size: PLT_ENTRY,
            name: slot.name.as_str().into(),
        });
        stores.push((slot.got, stub));
        report.hooked.push(slot.name);
    }
    SITES.note_change();
    names.sort_by_key(|f| f.start);
    // Named before any call can reach a site: every object's names so
    // far (only the first setting counts, see `plt::set_names`, so they
    // are replaced as a whole).
    crate::symbols::plt::set_names(names.clone());
    // What lazy binding would store at the first call, stored now.
    store_slots(&binds, imports.relro.as_ref())?;
    report.bound_profiling += binds.len();
    store_slots(&stores, imports.relro.as_ref())?;
    Ok(())
}

/// What the loader would bind `slot` to now. `dlvsym` alone is not it:
/// it treats the version as hidden and so skips an unversioned definition
/// that comes first (a preloaded library's: fntrace's own `mcount`, a
/// malloc replacement), which the loader binds the reference to. `dlsym`
/// alone is not it either: it gives the default version (`memcpy@@2.14`)
/// where an older binary asks for another (`memcpy@2.2.5`). So: `dlsym`'s
/// definition, unless `dlvsym` finds the asked version in the same object.
fn resolve(slot: &Slot) -> Option<usize> {
    let name = CString::new(slot.name.as_str()).ok()?;
    // SAFETY: a C string; RTLD_DEFAULT searches the global scope, in the
    // order the loader binds the executable's references.
    let first = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if first.is_null() {
        return None;
    }
    let Some(Ok(version)) = slot.version.as_deref().map(CString::new) else {
        return Some(first as usize);
    };
    // SAFETY: as above, with the version as a C string.
    let asked = unsafe { libc::dlvsym(libc::RTLD_DEFAULT, name.as_ptr(), version.as_ptr()) };
    if !asked.is_null() && object_of(asked) == object_of(first) {
        Some(asked as usize)
    } else {
        Some(first as usize)
    }
}

/// The base address of the object defining `symbol` (0 if unknown).
fn object_of(symbol: *mut libc::c_void) -> usize {
    // SAFETY: a zeroed Dl_info is valid (null pointers); dladdr only reads
    // `symbol` as an address and fills `info`.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(symbol, &mut info) } == 0 {
        return 0;
    }
    info.dli_fbase as usize
}

/// Stores each `(slot, value)`: a GOT slot pointed at its stub, or bound. Pages of the RELRO
/// region are made writable around the stores and read-only again.
fn store_slots(stores: &[(usize, usize)], relro: Option<&Range<usize>>) -> Result<(), String> {
    let mut pages: Vec<usize> = stores.iter().map(|(got, _)| got & !(PAGE - 1)).collect();
    pages.sort_unstable();
    pages.dedup();
    let protect = |page: usize, prot| {
        // SAFETY: a page of the executable's RELRO region (its GOT), which
        // holds data only: its protection, not its contents, changes.
        let done = unsafe { libc::mprotect(page as *mut libc::c_void, PAGE, prot) };
        if done == 0 {
            Ok(())
        } else {
            Err(format!(
                "mprotect of the GOT page {page:#x}: {}",
                std::io::Error::last_os_error()
            ))
        }
    };
    for page in pages {
        let read_only = relro.is_some_and(|r| r.contains(&page));
        if read_only {
            protect(page, libc::PROT_READ | libc::PROT_WRITE)?;
        }
        for &(got, value) in stores.iter().filter(|(got, _)| got & !(PAGE - 1) == page) {
            // SAFETY: an aligned GOT slot (8 bytes, writable now); the
            // store is atomic, so a thread calling through it concurrently
            // reaches either the old target or the new one.
            unsafe { std::ptr::write_volatile(got as *mut usize, value) };
        }
        if read_only {
            protect(page, libc::PROT_READ)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plt_entries_name_their_got_slot() {
        // .plt entry: jmp *0x2fe2(%rip); push $0; jmp .plt
        let plain = [
            0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(got_of_plt_entry(&plain, 0x1030), Some(0x1036 + 0x2fe2));
        // .plt.sec entry (IBT): endbr64; bnd jmp *0x2fe2(%rip); nop
        let sec = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x0f, 0x1f, 0x44, 0, 0,
        ];
        assert_eq!(got_of_plt_entry(&sec, 0x1060), Some(0x106b + 0x2fe2));
        // The first entry: push 0x2fe2(%rip); jmp *0x2fe4(%rip): no slot.
        let first = [
            0xff, 0x35, 0xe2, 0x2f, 0, 0, 0xff, 0x25, 0xe4, 0x2f, 0, 0, 0x0f, 0x1f, 0x40, 0,
        ];
        assert_eq!(got_of_plt_entry(&first, 0x1020), None);
        // A lazy .plt entry of an IBT build: endbr64; push $0; bnd jmp .plt
        let lazy = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0, 0xf2, 0xe9, 0xe1, 0xff, 0xff, 0xff, 0x90,
        ];
        assert_eq!(got_of_plt_entry(&lazy, 0x1030), None);
    }

    #[test]
    fn a_stub_is_a_site_then_an_absolute_jump() {
        let target = 0x7f12_3456_789a_usize;
        let bytes = stub_bytes(target);
        assert_eq!(bytes[..4], ENDBR64);
        assert_eq!(bytes[SITE_OFFSET..SITE_OFFSET + 5], NOP5);
        assert_eq!(bytes[9..15], [0xff, 0x25, 0, 0, 0, 0], "jmp *0(%rip)");
        assert_eq!(bytes[15..23], target.to_le_bytes());
        assert!(bytes[23..].iter().all(|&b| b == 0xcc));
    }
}
