//! A writable view of program text that is never executable, chosen with
//! `FNTRACE_TEXT_WRITES=alias`: site writes become plain stores instead of
//! `/proc/self/mem` copies (≈ 2 µs of kernel work per page per store), as
//! the Linux kernel's `text_poke` writes its own text through a temporary
//! alias.
//!
//! The first time a batch writes to pages of a file mapping (an object's
//! text, mapped private R-X), those pages are copied into a `memfd` (one
//! per mapping, sized like it; pages without sites stay holes and cost
//! nothing), and the memfd is mapped twice: `MAP_SHARED|MAP_FIXED` R-X
//! over the original pages (same bytes; the kernel replaces the mapping
//! under the mmap lock, so a thread executing there faults and finds the
//! same instructions), and R-W somewhere else. Writes go to the R-W view;
//! no mapping is ever writable and executable.
//!
//! What this changes, and how it is kept right:
//! - **fork:** parent and child would share the memfd, so a write by one
//!   would change the other's text. Fork handlers count forks; the first
//!   batch after a fork, in the parent and in the child, first moves every
//!   alias of its own to a fresh memfd (copying the current bytes), so no
//!   process ever writes a memfd another one maps. (A child made by a raw
//!   `clone` without `CLONE_VM` runs no fork handler and is not covered.)
//! - **`/proc/self/maps`** names `/memfd:fntrace-text (deleted)` for the
//!   moved pages: [`maps_with_original_names`] gives the file back its
//!   name, device, inode and offsets (the trace's `maps` is written from
//!   it, and uftrace finds the symbols through it); symbols are found with
//!   `dl_iterate_phdr`, which is not affected.
//! - **`dlclose`** unmaps the text and our R-X pages with it: every batch
//!   checks in the maps file that each alias's pages still map its memfd
//!   and forgets (unmaps, closes) those that do not, so a library loaded
//!   later at the same address gets a new alias.
//! - **memory:** aliased pages are shared memory (`RssShmem`) instead of
//!   the file's page cache: one private copy of each text page that holds
//!   a site, as `/proc/self/mem` writes already made (copy-on-write).
//! - **fallback:** when `memfd_create` or the mappings are refused
//!   (seccomp, `vm.memfd_noexec`, an LSM), one stderr line and the
//!   `/proc/self/mem` path from then on.
//! - **other tools:** pages that map a memfd are no longer the file's:
//!   perf shows their functions as addresses in `memfd:fntrace-text`, and
//!   a uprobe set on the file never fires there. So the alias is used only
//!   when `FNTRACE_TEXT_WRITES=alias` asks; by default text is written
//!   through `/proc/self/mem`.
//!
//! Everything here runs in the patching thread under the registry's lock,
//! before any thread is stopped or any `int3` written; the stores through
//! the view ([`super::text::TextWriter::store`]) take no lock.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Once;

use parking_lot::{Mutex, MutexGuard};

use crate::error::Error;
use crate::sys::maps::{self, Line};

/// The memfd name, as `/proc/self/maps` shows it (`/memfd:NAME (deleted)`).
const MEMFD_NAME: &std::ffi::CStr = c"fntrace-text";

/// The environment variable that chooses how text is written.
pub(crate) const WRITES_VARIABLE: &str = "FNTRACE_TEXT_WRITES";

/// Whether batches may alias text: only when `FNTRACE_TEXT_WRITES=alias`
/// asks (cleared again by a failure). Not by default: text that maps a
/// memfd is no longer the file's, so perf cannot name its functions and
/// uprobes set on the file never fire there.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// Forks seen by the fork handlers (parent and child both count).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// The aliases of this process.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    objects: Vec::new(),
    forks_seen: 0,
});

/// Every aliased mapping, and the fork count they were made under.
struct Registry {
    objects: Vec<Object>,
    forks_seen: u64,
}

/// One file mapping some of whose pages map a memfd.
struct Object {
    /// The mapping as it was before any page moved.
    start: usize,
    end: usize,
    /// Its maps line's file offset, device, inode and path.
    offset: u64,
    device: String,
    inode: u64,
    path: String,
    /// The memfd (as long as the mapping) and its inode.
    memfd: OwnedFd,
    memfd_inode: u64,
    /// The R-W view of the whole memfd.
    writable: usize,
    /// Page runs `(start, end)` that map the memfd, sorted, disjoint.
    runs: Vec<(usize, usize)>,
}

impl Drop for Object {
    fn drop(&mut self) {
        // SAFETY: `writable` is the R-W view this object mapped with
        // `end - start` bytes; nothing else refers to it once the object
        // is dropped (the registry's lock is held).
        unsafe { libc::munmap(self.writable as *mut libc::c_void, self.end - self.start) };
    }
}

/// Chooses how text is written: through `/proc/self/mem` (`proc-mem`, the
/// default) or the alias (`alias`), from `FNTRACE_TEXT_WRITES`; another
/// value prints one stderr line and keeps the default.
pub(crate) fn writes_from_env() {
    match std::env::var(WRITES_VARIABLE).as_deref() {
        Err(_) | Ok("proc-mem") => {}
        Ok("alias") => ENABLED.store(true, Ordering::Relaxed),
        Ok(_) if crate::sys::bad_setting_reported(WRITES_VARIABLE) => {}
        Ok(other) => eprintln!(
            "fntrace: {WRITES_VARIABLE}={other} is not a way of writing text \
             (use \"proc-mem\" or \"alias\"); keeping proc-mem"
        ),
    }
}

/// Writes text through `/proc/self/mem` from now on, as
/// `FNTRACE_TEXT_WRITES=proc-mem` does: chosen by attach, before its first
/// write, so that an attached process's text stays mapped from its files
/// (debuggers, perf and uprobes keep finding it; detach leaves no memfd).
pub(crate) fn write_through_proc_mem() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// The aliases, checked and made safe for this batch; see
/// [`Batch::writable_view`]. Held for the whole batch.
pub(crate) struct Batch {
    registry: MutexGuard<'static, Registry>,
    /// The maps file as of the start of the batch, once read.
    lines: Option<Vec<Line>>,
}

/// Starts a batch: after a fork, moves every alias to a fresh memfd; drops
/// the aliases whose pages were unmapped (`dlclose`). A failure to move
/// after a fork is an error: writing the old memfd would change the other
/// process's text.
pub(crate) fn begin_batch() -> Result<Batch, Error> {
    let mut batch = Batch {
        registry: REGISTRY.lock(),
        lines: None,
    };
    if batch.registry.objects.is_empty() {
        return Ok(batch);
    }
    let lines = maps::thread_self_lines().map_err(|source| Error::Io {
        what: "reading /proc/thread-self/maps".to_string(),
        source,
    })?;
    batch
        .registry
        .objects
        .retain(|object| object.still_mapped(&lines));
    let forks = FORKS.load(Ordering::SeqCst);
    if batch.registry.forks_seen != forks {
        for object in &mut batch.registry.objects {
            object.move_to_new_memfd()?;
        }
        batch.registry.forks_seen = forks;
    }
    batch.lines = Some(lines);
    Ok(batch)
}

impl Batch {
    /// The address in a writable view of `start` such that
    /// `start..end` (page-aligned outward) can be written there, aliasing
    /// the pages first if needed; `None` when this range is written through
    /// `/proc/self/mem` (aliasing switched off or refused, memory that is
    /// not a private file mapping, a range across two mappings).
    pub(crate) fn writable_view(
        &mut self,
        start: usize,
        end: usize,
        page_size: usize,
    ) -> Option<usize> {
        if end <= start {
            return None;
        }
        let first_page = start & !(page_size - 1);
        let end_page = (end + page_size - 1) & !(page_size - 1);
        // Switched off (or refused once): pages moved before stay moved
        // and are still written through their view; nothing new moves.
        let enabled = ENABLED.load(Ordering::Relaxed);
        let index = match self.object_index(first_page, end_page) {
            Some(index) => index,
            None if enabled => self.new_object(first_page, end_page)?,
            None => return None,
        };
        let object = self.registry.objects.get_mut(index)?;
        if !object.covers(first_page, end_page) {
            if !enabled {
                return None;
            }
            if let Err(error) = object.cover(first_page, end_page) {
                disable(&error);
                return None;
            }
        }
        Some(object.writable + (start - object.start))
    }

    /// The object whose mapping holds all of `start..end`.
    fn object_index(&self, start: usize, end: usize) -> Option<usize> {
        self.registry
            .objects
            .iter()
            .position(|object| object.start <= start && end <= object.end)
    }

    /// Makes an object for the private file mapping holding `start..end`.
    fn new_object(&mut self, start: usize, end: usize) -> Option<usize> {
        if self.lines.is_none() {
            self.lines = maps::thread_self_lines().ok();
        }
        let line = self.lines.as_ref()?.iter().find(|line| {
            let m = &line.mapping;
            m.start <= start
                && end <= m.end
                && m.execute
                && !m.write
                && !m.shared
                && line.inode != 0
        })?;
        match Object::new(line) {
            Ok(object) => {
                self.registry.objects.push(object);
                Some(self.registry.objects.len() - 1)
            }
            Err(error) => {
                disable(&error);
                None
            }
        }
    }
}

/// Switches aliasing off for the rest of the process, with one line.
fn disable(error: &io::Error) {
    if ENABLED.swap(false, Ordering::Relaxed) {
        eprintln!(
            "fntrace: cannot alias program text ({error}); \
             writing it through /proc/self/mem instead"
        );
    }
}

impl Object {
    /// A memfd as long as `line`'s mapping, with its R-W view; no page
    /// moves yet.
    fn new(line: &Line) -> io::Result<Object> {
        install_fork_handlers();
        let (start, end) = (line.mapping.start, line.mapping.end);
        let (memfd, memfd_inode, writable) = new_memfd(end - start)?;
        Ok(Object {
            start,
            end,
            offset: line.offset,
            device: line.device.clone(),
            inode: line.inode,
            path: line.path.clone(),
            memfd,
            memfd_inode,
            writable,
            runs: Vec::new(),
        })
    }

    /// Whether every page of `start..end` maps the memfd already.
    fn covers(&self, start: usize, end: usize) -> bool {
        let mut page = start;
        while page < end {
            match self.runs.iter().find(|run| run.0 <= page && page < run.1) {
                Some(&(_, run_end)) => page = run_end,
                None => return false,
            }
        }
        true
    }

    /// Moves the pages of `start..end` not moved yet to the memfd.
    fn cover(&mut self, start: usize, end: usize) -> io::Result<()> {
        let mut page = start;
        while page < end {
            if let Some(&(_, run_end)) = self.runs.iter().find(|run| run.0 <= page && page < run.1)
            {
                page = run_end;
                continue;
            }
            let next_run = self
                .runs
                .iter()
                .map(|run| run.0)
                .filter(|&run_start| run_start > page)
                .min()
                .unwrap_or(end)
                .min(end);
            self.move_pages(page, next_run, &self.memfd)?;
            self.runs.push((page, next_run));
            self.runs.sort_unstable();
            page = next_run;
        }
        Ok(())
    }

    /// Copies the text of `start..end` into `memfd` and maps it there R-X
    /// over the text.
    fn move_pages(&self, start: usize, end: usize, memfd: &OwnedFd) -> io::Result<()> {
        let offset = (start - self.start) as libc::off_t;
        let mut done = 0;
        while done < end - start {
            // SAFETY: `start..end` is mapped readable (an R-X text mapping
            // this process maps, found in the maps file, or pages already
            // moved); the kernel reads it from our memory.
            let written = unsafe {
                libc::pwrite(
                    memfd.as_raw_fd(),
                    (start + done) as *const libc::c_void,
                    end - start - done,
                    offset + done as libc::off_t,
                )
            };
            match written {
                n if n > 0 => done += n as usize,
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return Err(io::Error::last_os_error()),
            }
        }
        // SAFETY: replaces the pages of `start..end` by the same bytes,
        // read-execute; the kernel swaps the mapping under its mmap lock, so
        // a thread executing there meanwhile faults and runs the same
        // instructions from the new pages.
        let mapped = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_SHARED | libc::MAP_FIXED,
                memfd.as_raw_fd(),
                offset,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// After a fork: every run to a fresh memfd with the current bytes,
    /// then the R-W view to it; the old memfd is never written again.
    fn move_to_new_memfd(&mut self) -> Result<(), Error> {
        let failed = |source| Error::Io {
            what: "moving aliased program text to a new memfd after fork".to_string(),
            source,
        };
        let (memfd, memfd_inode, writable) = new_memfd(self.end - self.start).map_err(failed)?;
        for &(start, end) in &self.runs {
            if let Err(source) = self.move_pages(start, end, &memfd) {
                // SAFETY: the view just mapped, not handed out.
                unsafe { libc::munmap(writable as *mut libc::c_void, self.end - self.start) };
                return Err(failed(source));
            }
        }
        // SAFETY: the old view, mapped by this object; replaced below.
        unsafe { libc::munmap(self.writable as *mut libc::c_void, self.end - self.start) };
        self.memfd = memfd;
        self.memfd_inode = memfd_inode;
        self.writable = writable;
        Ok(())
    }

    /// Whether every run still maps this object's memfd.
    fn still_mapped(&self, lines: &[Line]) -> bool {
        self.runs.iter().all(|&(start, end)| {
            let mut page = start;
            while page < end {
                let Some(line) = lines
                    .iter()
                    .find(|line| line.mapping.start <= page && page < line.mapping.end)
                else {
                    return false;
                };
                if line.inode != self.memfd_inode || !line.mapping.shared {
                    return false;
                }
                page = line.mapping.end;
            }
            true
        })
    }
}

/// A memfd of `len` bytes that can be mapped executable, its inode, and
/// its R-W view. Mapping it R-X once first checks that the kernel allows
/// it (`vm.memfd_noexec`, LSMs) before any text is replaced.
fn new_memfd(len: usize) -> io::Result<(OwnedFd, u64, usize)> {
    // MFD_EXEC (Linux 6.3+) keeps the memfd executable where
    // `vm.memfd_noexec=1` would seal it; older kernels refuse the flag.
    const MFD_EXEC: libc::c_uint = 0x10;
    // SAFETY: a NUL-terminated name and flags; no other precondition.
    let mut fd = unsafe { libc::memfd_create(MEMFD_NAME.as_ptr(), libc::MFD_CLOEXEC | MFD_EXEC) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(MEMFD_NAME.as_ptr(), libc::MFD_CLOEXEC) };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by no one
    // else.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain system calls on our own fd; `stat` is a valid
    // out-pointer.
    let inode = unsafe {
        if libc::ftruncate(fd, len as libc::off_t) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut stat: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut stat) != 0 {
            return Err(io::Error::last_os_error());
        }
        stat.st_ino
    };
    // SAFETY: new mappings of our memfd at addresses the kernel picks;
    // nothing of the program is replaced.
    unsafe {
        let probe = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if probe == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        libc::munmap(probe, len);
        let writable = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if writable == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok((memfd, inode, writable as usize))
    }
}

/// Counts forks in the parent (async-signal-safe: one atomic add).
extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// Counts forks in the child, and frees the registry if a thread the child
/// does not have held it: only [`maps_with_original_names`] can have (it
/// only reads); batches, the one writer, run under the operation lock,
/// which `fork` waits for.
extern "C" fn count_fork_in_child() {
    count_fork();
    if REGISTRY.is_locked() {
        // SAFETY: the child has one thread, this one, which is not inside
        // a registry function (it is returning from fork): the holder is a
        // thread the child does not have, and it was only reading.
        unsafe { REGISTRY.force_unlock() };
    }
}

/// Registers [`count_fork`] for parent and child, once. `rt::prepare`
/// calls it before registering the operation lock's fork handlers, so
/// that in the parent the fork is counted before that lock is released
/// (parent handlers run in registration order): a batch waiting for the
/// lock must not write the memfd the child still shares (a `SCHED_FIFO`
/// patcher runs the moment the lock is free).
pub(crate) fn install_fork_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering fork handlers has no preconditions; the
        // handlers are an atomic add and, in the child, an unlock.
        unsafe { libc::pthread_atfork(None, Some(count_fork), Some(count_fork_in_child)) };
    });
}

/// `/proc/self/maps` with the aliased pages under their file's name,
/// device, inode and offset again, and the writable views left out: what
/// a trace's `maps` must say for tools (uftrace) to find the symbols.
pub(crate) fn maps_with_original_names() -> String {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let registry = REGISTRY.lock();
    if registry.objects.is_empty() {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    for raw in text.lines() {
        let Some(line) = maps::parse_line(raw) else {
            out.push_str(raw);
            out.push('\n');
            continue;
        };
        let ours = registry
            .objects
            .iter()
            .find(|object| object.memfd_inode == line.inode && line.mapping.shared);
        match ours {
            None => {
                out.push_str(raw);
                out.push('\n');
            }
            Some(object) if line.mapping.execute => {
                let offset = object.offset + (line.mapping.start - object.start) as u64;
                out.push_str(&format!(
                    "{:08x}-{:08x} r-xp {offset:08x} {} {} {}\n",
                    line.mapping.start, line.mapping.end, object.device, object.inode, object.path
                ));
            }
            Some(_) => {} // the writable view
        }
    }
    out
}
