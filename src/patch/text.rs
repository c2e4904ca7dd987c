//! The write primitive under every patch protocol: put a few bytes into
//! program text that is mapped read-execute.
//!
//! Two ways, tried in order:
//! 1. `pwrite` on `/proc/thread-self/mem`. The kernel writes through its
//!    own mapping of the page (copying a file-backed page first), so the
//!    text stays R-X throughout and no thread can ever see a writable
//!    window. (`thread-self`, not `self`: `/proc/self` names the main
//!    thread, and once that has exited its `mem` and `maps` are empty.)
//! 2. When the kernel refuses that (hardened kernels:
//!    `proc_mem.force_override`, some LSMs), `mprotect` the page(s) to
//!    READ|WRITE|EXEC, store the bytes, and put back the protection the page
//!    had. EXEC is never dropped, because the writing thread itself may be
//!    running code on that page. A W^X policy (`MemoryDenyWriteExecute`,
//!    `PR_SET_MDWE`) refuses this; the error is reported and nothing is left
//!    writable.
//!
//! A [`TextWriter`] is prepared while the process runs normally: it opens
//! the `mem` file and records, with `region::query_range`, the original
//! protection of every page it will touch. After that, [`TextWriter::read`]
//! and [`TextWriter::write`] make only system calls — no allocation, no
//! lock — so a patch protocol may call them while other threads are stopped
//! at arbitrary points (possibly inside `malloc`).

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use region::Protection;

use crate::error::Error;
use crate::sys::{self, last_errno};

/// Protection of one page before any write.
#[derive(Clone, Copy, Debug)]
struct PageProtection {
    /// First address of the page.
    start: usize,
    /// The protection the page had.
    prot: Protection,
}

/// One mapping as the writer needs it, from `region` or the fallback.
struct Mapping {
    start: usize,
    end: usize,
    prot: Protection,
    shared: bool,
}

/// Writes bytes into program text; see the module documentation.
///
/// Build it with [`TextWriter::prepare`] before stopping anything; its
/// [`read`](TextWriter::read) and [`write`](TextWriter::write) then only make
/// system calls.
pub(crate) struct TextWriter {
    /// `/proc/thread-self/mem`, opened read-write when possible, read-only
    /// when only that is allowed, or not at all.
    proc_mem: Option<OwnedFd>,
    /// Whether `proc_mem` may still be tried for writing (cleared after the
    /// first refused write, so later writes go straight to `mprotect`).
    proc_mem_writable: bool,
    /// Every page that [`TextWriter::write`] may touch, sorted by address.
    pages: Vec<PageProtection>,
    /// The system page size.
    page_size: usize,
}

impl TextWriter {
    /// Prepares writes to the byte ranges `(addr, len)`: opens
    /// `/proc/thread-self/mem` and records the protection of each page the
    /// ranges touch. Allocates and takes locks; call it before stopping
    /// threads.
    ///
    /// Fails if a range is not mapped, or lies in a shared mapping (writing
    /// there would change the file or other processes' memory).
    pub(crate) fn prepare(ranges: &[(usize, usize)]) -> Result<TextWriter, Error> {
        // region's page size: also initializes its cache, so `region::protect`
        // in the stopped world finds it ready.
        let page_size = region::page::size();

        let mut page_starts = Vec::new();
        for &(addr, len) in ranges {
            let end = addr.checked_add(len).ok_or_else(|| Error::TextWrite {
                addr,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "range wraps the address space",
                ),
            })?;
            let mut page = addr & !(page_size - 1);
            while page < end {
                page_starts.push(page);
                page += page_size;
            }
        }
        page_starts.sort_unstable();
        page_starts.dedup();

        let mappings = match (page_starts.first(), page_starts.last()) {
            (Some(&first), Some(&last)) => mappings_over(first, last + page_size)?,
            _ => Vec::new(),
        };
        let mut pages = Vec::with_capacity(page_starts.len());
        for start in page_starts {
            let mapping = mappings
                .iter()
                .find(|m| m.start <= start && start < m.end)
                .ok_or_else(|| Error::TextWrite {
                    addr: start,
                    source: io::Error::new(io::ErrorKind::InvalidInput, "address is not mapped"),
                })?;
            if mapping.shared {
                return Err(Error::TextWrite {
                    addr: start,
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "address lies in a shared mapping; refusing to write through to its file",
                    ),
                });
            }
            pages.push(PageProtection {
                start,
                prot: mapping.prot,
            });
        }

        Ok(TextWriter {
            proc_mem: open_proc_mem(),
            proc_mem_writable: true,
            pages,
            page_size,
        })
    }

    /// Reads `buf.len()` bytes of text at `addr` into `buf`. Only system
    /// calls (or plain loads when the `mem` file cannot be opened); an
    /// error carries the raw OS error and does not allocate.
    ///
    /// `addr..addr + buf.len()` must lie in the ranges given to
    /// [`TextWriter::prepare`].
    pub(crate) fn read(&self, addr: usize, buf: &mut [u8]) -> io::Result<()> {
        if let Some(fd) = &self.proc_mem {
            let mut done = 0;
            while let Some(rest) = buf.get_mut(done..).filter(|rest| !rest.is_empty()) {
                // SAFETY: `rest` is a valid, writable buffer of `rest.len()`
                // bytes; the kernel reads the target through its own
                // mapping, so an unmapped address yields EIO, not a fault.
                let got = unsafe {
                    libc::pread(
                        fd.as_raw_fd(),
                        rest.as_mut_ptr().cast::<c_void>(),
                        rest.len(),
                        (addr + done) as libc::off_t,
                    )
                };
                match got {
                    n if n > 0 => done += n as usize,
                    0 => return Err(io::Error::from_raw_os_error(libc::EIO)),
                    _ => match last_errno() {
                        libc::EINTR => continue,
                        errno => return Err(io::Error::from_raw_os_error(errno)),
                    },
                }
            }
            return Ok(());
        }
        // No `mem` file: read directly, which needs readable pages.
        for offset in 0..buf.len() {
            match self.original_protection(addr + offset) {
                Some(prot) if prot.contains(Protection::READ) => {}
                _ => return Err(io::Error::from_raw_os_error(libc::EFAULT)),
            }
        }
        for (offset, byte) in buf.iter_mut().enumerate() {
            // SAFETY: the page holding `addr + offset` is mapped readable
            // (checked just above against the protections recorded by
            // `prepare`; the caller keeps the mapping alive).
            *byte = unsafe { std::ptr::read_volatile((addr + offset) as *const u8) };
        }
        Ok(())
    }

    /// Writes `bytes` at `addr`. Only system calls and stores: no
    /// allocation, no lock. Pages are R-X before and after; at most the
    /// `mprotect` fallback makes them RWX for the duration of the store.
    ///
    /// `addr..addr + bytes.len()` must lie in the ranges given to
    /// [`TextWriter::prepare`]. The caller is responsible for no other
    /// thread executing these bytes meanwhile, and for serializing
    /// instruction fetch afterwards.
    pub(crate) fn write(&mut self, addr: usize, bytes: &[u8]) -> Result<(), Error> {
        if self.proc_mem_writable {
            match self.write_through_proc_mem(addr, bytes) {
                Ok(()) => return Ok(()),
                // Refused (hardened kernel, read-only fd, no fd): from now
                // on use mprotect for this writer.
                Err(_) => self.proc_mem_writable = false,
            }
        }
        self.write_with_mprotect(addr, bytes)
    }

    /// `pwrite` on the `mem` file; text protection never changes.
    fn write_through_proc_mem(&self, addr: usize, bytes: &[u8]) -> Result<(), i32> {
        let fd = self.proc_mem.as_ref().ok_or(libc::EBADF)?;
        let mut done = 0;
        while let Some(rest) = bytes.get(done..).filter(|rest| !rest.is_empty()) {
            // SAFETY: `rest` is a valid buffer of `rest.len()` bytes; the
            // kernel writes the target through its own mapping (forcing
            // write access to the private text page), so no fault can occur
            // in this process.
            let put = unsafe {
                libc::pwrite(
                    fd.as_raw_fd(),
                    rest.as_ptr().cast::<c_void>(),
                    rest.len(),
                    (addr + done) as libc::off_t,
                )
            };
            match put {
                n if n > 0 => done += n as usize,
                0 => return Err(libc::EIO),
                _ => match last_errno() {
                    libc::EINTR => continue,
                    errno => return Err(errno),
                },
            }
        }
        Ok(())
    }

    /// Makes the touched pages RWX, stores, restores their protection.
    fn write_with_mprotect(&self, addr: usize, bytes: &[u8]) -> Result<(), Error> {
        let Some(last) = bytes.len().checked_sub(1) else {
            return Ok(());
        };
        let first_page = addr & !(self.page_size - 1);
        let last_page = (addr + last) & !(self.page_size - 1);

        // Every page must have been recorded by `prepare`, or we could not
        // restore its protection: check before changing anything.
        let mut page = first_page;
        while page <= last_page {
            if self.original_protection(page).is_none() {
                return Err(text_error(addr, libc::EINVAL));
            }
            page += self.page_size;
        }

        let mut opened_up_to = first_page;
        let mut failure = None;
        while opened_up_to <= last_page {
            // SAFETY: `opened_up_to` is page-aligned and lies in a private
            // mapping recorded by `prepare`. Adding WRITE while keeping
            // READ|EXEC cannot break any thread executing or reading it.
            // `region::protect` is one `mprotect`: no allocation.
            let opened = unsafe {
                region::protect(
                    opened_up_to as *const u8,
                    self.page_size,
                    Protection::READ_WRITE_EXECUTE,
                )
            };
            if let Err(error) = opened {
                failure = Some(region_errno(&error));
                break;
            }
            opened_up_to += self.page_size;
        }

        if failure.is_none() {
            for (offset, &byte) in bytes.iter().enumerate() {
                // SAFETY: every page of `addr..=addr + last` was made
                // writable just above and is still mapped (recorded by
                // `prepare`, kept alive by the caller).
                unsafe { std::ptr::write_volatile((addr + offset) as *mut u8, byte) };
            }
        }

        // Restore every page opened above, whatever happened. EXEC is kept
        // even if the recorded protection somehow lacked it: the writing
        // thread may itself run code on the page.
        let mut page = first_page;
        while page < opened_up_to {
            let prot = self
                .original_protection(page)
                .unwrap_or(Protection::READ_EXECUTE)
                | Protection::EXECUTE;
            // SAFETY: as above; this only gives the page back the protection
            // it had before this write.
            let restored = unsafe { region::protect(page as *const u8, self.page_size, prot) };
            if let (Err(error), None) = (restored, failure) {
                failure = Some(region_errno(&error));
            }
            page += self.page_size;
        }

        match failure {
            None => Ok(()),
            Some(errno) => Err(text_error(addr, errno)),
        }
    }

    /// The protection `prepare` recorded for the page holding `addr`.
    fn original_protection(&self, addr: usize) -> Option<Protection> {
        let start = addr & !(self.page_size - 1);
        self.pages
            .binary_search_by_key(&start, |page| page.start)
            .ok()
            .and_then(|index| self.pages.get(index))
            .map(|page| page.prot)
    }
}

/// Opens `/proc/thread-self/mem` (or `/proc/self/mem` on kernels before
/// 3.17) read-write, else read-only, else not at all.
fn open_proc_mem() -> Option<OwnedFd> {
    let paths = [c"/proc/thread-self/mem", c"/proc/self/mem"];
    for (path, flags) in paths
        .into_iter()
        .flat_map(|path| [(path, libc::O_RDWR), (path, libc::O_RDONLY)])
    {
        // SAFETY: the path is a NUL-terminated literal; `open` has no other
        // preconditions.
        let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: `fd` was just returned by `open` and is owned by no one
            // else.
            return Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    None
}

/// The mappings overlapping `start..end`, as `region` reports them. When
/// `region` sees none (its `/proc/self/maps` is empty once the main thread
/// has exited), from `/proc/thread-self/maps` instead.
fn mappings_over(start: usize, end: usize) -> Result<Vec<Mapping>, Error> {
    let query_failed = |source| Error::Io {
        what: "querying the protection of program text".to_string(),
        source,
    };
    let regions = region::query_range(start as *const u8, end.saturating_sub(start).max(1))
        .and_then(|regions| regions.collect::<region::Result<Vec<_>>>())
        .map_err(|error| query_failed(io::Error::other(error)))?;
    if !regions.is_empty() {
        return Ok(regions
            .iter()
            .map(|region| Mapping {
                start: region.as_range().start,
                end: region.as_range().end,
                prot: region.protection(),
                shared: region.is_shared(),
            })
            .collect());
    }
    let mappings = sys::maps::thread_self().map_err(query_failed)?;
    Ok(mappings
        .iter()
        .filter(|m| m.start < end && start < m.end)
        .map(|m| {
            let mut prot = Protection::NONE;
            for (set, bit) in [
                (m.read, Protection::READ),
                (m.write, Protection::WRITE),
                (m.execute, Protection::EXECUTE),
            ] {
                if set {
                    prot |= bit;
                }
            }
            Mapping {
                start: m.start,
                end: m.end,
                prot,
                shared: m.shared,
            }
        })
        .collect())
}

/// The errno in a `region` error (EINVAL if it holds none). No allocation:
/// `region::protect` reports an OS error as `io::Error::last_os_error()`.
fn region_errno(error: &region::Error) -> i32 {
    match error {
        region::Error::SystemCall(source) => source.raw_os_error().unwrap_or(libc::EINVAL),
        _ => libc::EINVAL,
    }
}

/// A text-write error for `addr` carrying `errno`. Does not allocate.
fn text_error(addr: usize, errno: i32) -> Error {
    Error::TextWrite {
        addr,
        source: io::Error::from_raw_os_error(errno),
    }
}
