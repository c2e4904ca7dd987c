//! Function symbols of every loaded object, for eager call-site discovery
//! and for naming traced addresses.
//!
//! Objects are listed with `dl_iterate_phdr` (the executable, shared objects
//! loaded at start-up and later with `dlopen`); each object's ELF file is read
//! with the `object` crate, `.symtab` and `.dynsym` merged. The index is
//! cached with glibc's `dlpi_adds`/`dlpi_subs` counters as its generation, so
//! it is rebuilt only when objects were loaded or unloaded.

use std::ffi::CStr;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use object::{Object as _, ObjectSection as _, ObjectSymbol, SymbolKind};
use parking_lot::Mutex;

use crate::error::Error;

pub(crate) mod opened;
pub(crate) mod plt;

/// A function symbol, at its run-time address.
#[derive(Clone, Debug)]
pub(crate) struct Function {
    pub start: usize,
    pub size: usize,
    /// The symbol as stored (mangled).
    pub name: Box<str>,
}

impl Function {
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.start && addr < self.start + self.size.max(1)
    }
}

/// One loaded ELF object.
#[derive(Debug)]
pub(crate) struct LoadedObject {
    pub path: String,
    /// Difference between run-time and link-time addresses.
    pub bias: usize,
    /// Mapped `PT_LOAD` segments, at run-time addresses.
    pub segments: Vec<Range<usize>>,
    /// Executable `PT_LOAD` segments.
    pub text: Vec<Range<usize>>,
    /// Function symbols sorted by start address, no duplicates.
    pub functions: Vec<Function>,
    /// Where the object's `__patchable_function_entries` sections lie, at
    /// run-time addresses (gcc/clang `-fpatchable-function-entry`, rustc
    /// `-Zpatchable-function-entry`): read in memory by `sites::patchable`.
    pub patchable_entries: Vec<Range<usize>>,
}

impl LoadedObject {
    /// Whether `[addr, addr + len)` lies inside one mapped segment.
    pub fn maps(&self, addr: usize, len: usize) -> bool {
        self.segments
            .iter()
            .any(|seg| addr >= seg.start && addr.saturating_add(len) <= seg.end)
    }

    fn function_at(&self, addr: usize) -> Option<&Function> {
        let idx = self.functions.partition_point(|f| f.start <= addr);
        let candidate = self.functions.get(idx.checked_sub(1)?)?;
        candidate.contains(addr).then_some(candidate)
    }
}

/// All loaded objects at one moment.
#[derive(Debug)]
pub(crate) struct SymbolIndex {
    pub generation: u64,
    pub objects: Vec<LoadedObject>,
    /// Objects whose symbols could not be read, with the reason.
    pub unreadable: Vec<Error>,
}

impl SymbolIndex {
    /// The object whose segments contain `addr`.
    pub fn object_at(&self, addr: usize) -> Option<&LoadedObject> {
        self.objects.iter().find(|o| o.maps(addr, 1))
    }

    /// The function containing `addr`.
    pub fn function_at(&self, addr: usize) -> Option<&Function> {
        let object = self.object_at(addr)?;
        // A PLT entry whose library calls are traced has no symbol of its
        // own: named after its import (see [`plt`]).
        object.function_at(addr).or_else(|| plt::function_at(addr))
    }
}

/// The ELF name of the function containing `addr`: from `index`, or else,
/// if no object of `index` maps `addr`, from an object seen loaded there
/// before and unloaded since (see [`opened`]).
pub(crate) fn function_name_at(index: &SymbolIndex, addr: usize) -> Option<Box<str>> {
    if index.object_at(addr).is_some() {
        // Through the index: PLT entries of traced library calls too.
        return index.function_at(addr).map(|f| f.name.clone());
    }
    opened::object_at(addr)?
        .function_at(addr)
        .map(|f| f.name.clone())
}

/// Returns the symbol index, rebuilding it only when objects were loaded or
/// unloaded since the last call.
pub(crate) fn current() -> Arc<SymbolIndex> {
    let mut cache = CACHE.lock();
    let generation = load_generation();
    if let Some(index) = cache.as_ref() {
        if index.generation == generation {
            return Arc::clone(index);
        }
    }
    let index = Arc::new(build(generation));
    *cache = Some(Arc::clone(&index));
    drop(cache);
    // A rebuild allocates and frees megabytes (names, symbol tables) on
    // whichever thread runs the operation; glibc keeps freed memory in that
    // thread's arena. With plugins loaded and unloaded all the time, each
    // operation rebuilds, and the process's resident memory grew by tens
    // of MiB spread over arenas (chaos benchmark: 44-113 MiB peak growth,
    // 31-33 MiB with MALLOC_ARENA_MAX=2). Hand it back now.
    // SAFETY: malloc_trim has no preconditions; it only returns free
    // memory to the kernel.
    unsafe { libc::malloc_trim(0) };
    index
}

/// The last index [`current`] built.
static CACHE: Mutex<Option<Arc<SymbolIndex>>> = Mutex::new(None);

/// The last index built, without asking the loader whether objects changed:
/// for a forked child, whose objects are its parent's at the fork, and which
/// may not call `dl_iterate_phdr` (the loader's lock may have been held by a
/// parent thread the child does not have: it would wait for ever). An empty
/// index if none was built, or if a parent thread held the cache at the
/// fork.
pub(crate) fn inherited() -> Arc<SymbolIndex> {
    match CACHE.try_lock().as_deref() {
        Some(Some(index)) => Arc::clone(index),
        _ => Arc::new(SymbolIndex {
            generation: 0,
            objects: Vec::new(),
            unreadable: Vec::new(),
        }),
    }
}

/// Readable names for filters, reports and errors: the same demangling as
/// the offline tools, so that names agree wherever they are shown.
pub(crate) use fntrace_format::demangle;

struct PhdrInfo {
    name: String,
    bias: usize,
    segments: Vec<Range<usize>>,
    text: Vec<Range<usize>>,
}

/// Held by fntrace's threads while they call `dl_iterate_phdr` (which holds
/// the loader's `dl_load_write_lock` while its callback runs), and by a
/// forking thread across `fork`. glibc 2.36 does not reset that lock in the
/// child of a `fork`: a child forked while a writer thread listed the
/// objects found it taken by a thread it does not have, and its own next
/// listing (at `exit`, disabling the tracer) waited for ever, with its
/// recording. Taken after the operation lock, never before it: an
/// operation holds it while it runs inside the loader's callback
/// ([`crate::sites::loader::hold`]), where it may list the objects again
/// (it is reentrant). A lock of its
/// own (a futex word holding the owner's tid) rather than a library's: the
/// child resets it, which a lock with a queue of waiters (parking_lot's)
/// does not allow; unlocking one in the child hands it to a waiter of the
/// parent's that the child does not have.
static LISTING: ListingLock = ListingLock {
    owner: AtomicU32::new(0),
    depth: AtomicU32::new(0),
};

struct ListingLock {
    /// The holder's tid, 0 when free.
    owner: AtomicU32,
    /// How many times the holder took it (only the holder changes it).
    depth: AtomicU32,
}

/// [`LISTING`], held: released when dropped.
pub(crate) struct Listing(());

impl Drop for Listing {
    fn drop(&mut self) {
        LISTING.unlock();
    }
}

impl ListingLock {
    fn lock(&self) {
        let me = crate::sys::gettid() as u32;
        if self.owner.load(Ordering::Acquire) == me {
            self.depth.fetch_add(1, Ordering::Relaxed);
            return;
        }
        loop {
            match (self.owner).compare_exchange(0, me, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => break,
                Err(holder) => {
                    crate::sys::futex::futex_wait(&self.owner, holder, None);
                }
            }
        }
        self.depth.store(1, Ordering::Relaxed);
    }

    fn unlock(&self) {
        if self.depth.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.owner.store(0, Ordering::Release);
            crate::sys::futex::futex_wake(&self.owner, 1);
        }
    }
}

/// Takes [`LISTING`]: call `dl_iterate_phdr` only while holding it.
pub(crate) fn loader_listing() -> Listing {
    listing_follows_forks();
    LISTING.lock();
    Listing(())
}

/// Registers the fork handlers that hold [`LISTING`] across `fork` (once).
/// Before every other fork handler of fntrace's (`rt::ops` calls this
/// first): handlers registered earlier run later before a fork, so the
/// forking thread takes `LISTING` last, after the operation lock, in the
/// order every other thread takes them.
pub(crate) fn listing_follows_forks() {
    static FORK_HANDLERS: std::sync::Once = std::sync::Once::new();
    FORK_HANDLERS.call_once(|| {
        // SAFETY: registering fork handlers has no preconditions; they take
        // and release `LISTING` only.
        unsafe {
            libc::pthread_atfork(
                Some(listing_before_fork),
                Some(listing_after_fork_in_parent),
                Some(listing_after_fork_in_child),
            );
        }
    });
}

extern "C" fn listing_before_fork() {
    LISTING.lock();
}

extern "C" fn listing_after_fork_in_parent() {
    LISTING.unlock();
}

extern "C" fn listing_after_fork_in_child() {
    // The child has only the thread that forked (with a new tid): nobody
    // else holds or waits for the lock.
    LISTING.depth.store(0, Ordering::Relaxed);
    LISTING.owner.store(0, Ordering::Release);
}

fn load_generation() -> u64 {
    let _listing = loader_listing();
    let mut generation = 0u64;
    // SAFETY: the callback only reads the `dl_phdr_info` glibc passes, for the
    // duration of the call, and writes through the `&mut u64` we pass in.
    unsafe {
        libc::dl_iterate_phdr(
            Some(generation_callback),
            &mut generation as *mut u64 as *mut _,
        );
    }
    generation
}

unsafe extern "C" fn generation_callback(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: glibc passes a valid info of at least `size` bytes; the adds and
    // subs fields exist when size covers them (checked).
    unsafe {
        let generation = &mut *(data as *mut u64);
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
            *generation = (*info).dlpi_adds.wrapping_mul(1 << 32) ^ (*info).dlpi_subs;
        }
    }
    1 // the counters are the same in every entry: stop after the first
}

unsafe extern "C" fn collect_callback(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: glibc passes a valid info whose dlpi_phdr points at dlpi_phnum
    // program headers, valid during the call; data is the Vec we passed.
    unsafe {
        let out = &mut *(data as *mut Vec<PhdrInfo>);
        let info = &*info;
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(info.dlpi_name)
                .to_string_lossy()
                .into_owned()
        };
        let bias = info.dlpi_addr as usize;
        let mut segments = Vec::new();
        let mut text = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            let ph = &*info.dlpi_phdr.add(i);
            if ph.p_type != libc::PT_LOAD {
                continue;
            }
            let start = bias + ph.p_vaddr as usize;
            let range = start..start + ph.p_memsz as usize;
            if ph.p_flags & libc::PF_X != 0 {
                text.push(range.clone());
            }
            segments.push(range);
        }
        out.push(PhdrInfo {
            name,
            bias,
            segments,
            text,
        });
    }
    0
}

/// The loader's objects now, in its order (the executable first).
fn list_objects() -> Vec<PhdrInfo> {
    let _listing = loader_listing();
    let mut infos: Vec<PhdrInfo> = Vec::new();
    // SAFETY: collect_callback matches dl_iterate_phdr's callback contract and
    // only pushes into the Vec passed as data.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect_callback),
            &mut infos as *mut Vec<PhdrInfo> as *mut _,
        );
    }
    infos
}

fn build(generation: u64) -> SymbolIndex {
    let began = opened::now_ns();
    let infos = list_objects();
    // Kept past their unloading (see `opened`).
    opened::confirm(&infos, began);
    let mut objects = Vec::new();
    let mut unreadable = Vec::new();
    for (i, info) in infos.into_iter().enumerate() {
        if info.text.is_empty() {
            continue;
        }
        let path = if i == 0 && info.name.is_empty() {
            match std::fs::read_link("/proc/self/exe") {
                Ok(p) => p.to_string_lossy().into_owned(),
                Err(_) => continue,
            }
        } else {
            info.name.clone()
        };
        // The vDSO has no file; it holds no instrumented code.
        if path.is_empty() || path.starts_with("linux-vdso") {
            continue;
        }
        match read_functions(&path, info.bias) {
            Ok((functions, patchable_entries)) => objects.push(LoadedObject {
                path,
                bias: info.bias,
                segments: info.segments,
                text: info.text,
                functions,
                patchable_entries,
            }),
            Err(reason) => unreadable.push(Error::Symbols { path, reason }),
        }
    }
    SymbolIndex {
        generation,
        objects,
        unreadable,
    }
}

/// The function symbols of the ELF file at `path` and the run-time ranges
/// of its `__patchable_function_entries` sections.
type FileSymbols = (Vec<Function>, Vec<Range<usize>>);

/// Whether this process's executable has instrumented call sites
/// (`fntrace_format::elf`): a symbol or section name, or `None`, also when
/// it cannot be read.
pub(crate) fn executable_instrumentation() -> Option<&'static str> {
    let mapped = MappedFile::open("/proc/self/exe").ok()?;
    let file = object::File::parse(mapped.bytes()).ok()?;
    fntrace_format::elf::instrumentation_in(&file)
}

/// Whether any object loaded now has instrumented call sites: the
/// executable ([`executable_instrumentation`]), or a shared object that
/// imports `mcount`/`__fentry__` or lists its sites (fntrace's own
/// library, which defines them, does not count). Reads only the ELF
/// headers, dynamic symbols and section names of each object.
pub(crate) fn process_has_call_sites() -> bool {
    if executable_instrumentation().is_some() {
        return true;
    }
    list_objects().iter().skip(1).any(|info| {
        if info.text.is_empty() || info.name.is_empty() || info.name.starts_with("linux-vdso") {
            return false;
        }
        let Ok(mapped) = MappedFile::open(&info.name) else {
            return false;
        };
        object::File::parse(mapped.bytes())
            .ok()
            .and_then(|file| fntrace_format::elf::library_instrumentation_in(&file))
            .is_some()
    })
}

/// An ELF file mapped read-only while it is parsed: the parser touches
/// its headers and symbol and string tables, and only those pages are
/// read. Reading the file whole (as this did) made the process's RSS grow
/// by the size of the largest object, debug information included, at each
/// rebuild of the index: after every `dlopen` or `dlclose` followed by an
/// operation (a 52 MB `-g` executable: peaks of +52 MiB, in
/// `tests/programs/chaos.rs`).
pub(crate) struct MappedFile {
    start: *mut libc::c_void,
    len: usize,
}

impl MappedFile {
    pub(crate) fn open(path: &str) -> Result<MappedFile, String> {
        use std::os::fd::AsRawFd as _;
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let metadata = file.metadata().map_err(|e| e.to_string())?;
        if !metadata.is_file() || metadata.len() == 0 {
            return Err("not a regular file, or empty".to_string());
        }
        let len = usize::try_from(metadata.len()).map_err(|e| e.to_string())?;
        // SAFETY: a new private read-only mapping of an open regular file,
        // at an address the kernel picks: it overlaps nothing. The mapping
        // outlives the descriptor (closed at the end of this function).
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(MappedFile { start, len })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes at `start`, mapped until `self` is
        // dropped. (A file truncated meanwhile would fault on access; these
        // are the files of loaded objects, whose own text is mapped from
        // them in the same way.)
        unsafe { std::slice::from_raw_parts(self.start as *const u8, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`; nothing borrows it any more
        // (`bytes` borrows `self`).
        unsafe { libc::munmap(self.start, self.len) };
    }
}

fn read_functions(path: &str, bias: usize) -> Result<FileSymbols, String> {
    let mapped = MappedFile::open(path)?;
    let file = object::File::parse(mapped.bytes()).map_err(|e| e.to_string())?;
    // Allocated sections: their run-time contents (relocated) are read in
    // memory, not here (lld leaves the file's copy zero).
    let patchable_entries = file
        .sections()
        .filter(|s| s.name() == Ok("__patchable_function_entries") && s.address() != 0)
        .map(|s| {
            let start = bias.wrapping_add(s.address() as usize);
            start..start.wrapping_add(s.size() as usize)
        })
        .collect();
    let mut functions: Vec<Function> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| {
            Some(Function {
                start: bias.wrapping_add(s.address() as usize),
                size: s.size() as usize,
                name: s.name().ok()?.into(),
            })
        })
        .collect();
    // Aliases share an address: keep the one with a size, then the longest name.
    functions.sort_by(|a, b| {
        a.start
            .cmp(&b.start)
            .then(b.size.cmp(&a.size))
            .then(b.name.len().cmp(&a.name.len()))
    });
    functions.dedup_by_key(|f| f.start);
    Ok((functions, patchable_entries))
}
