//! The write primitive under every patch protocol: rewrite many call sites
//! of program text that is mapped read-execute, a few system calls per
//! batch rather than per site.
//!
//! A [`TextWriter`] covers the sites of one batch with *spans*: sites less
//! than a page apart share a span, so a span only covers pages that hold a
//! site (no untouched page is copied on write). A span written through a
//! writable view ([`alias`], the usual case) is read and edited in that
//! view: the protocol's staged bytes ([`TextWriter::stage`]) are stored
//! there at once, so a protocol stages only what it means to store next.
//! Every other span has an *image* in one buffer: [`TextWriter::load`]
//! reads those spans (plain loads, or one `pread` each), the protocol
//! edits the image with plain stores, and [`TextWriter::store`] writes
//! each span back. Bytes the protocol did not edit are written back with the value
//! they had, which no executing thread can tell from no write at all
//! (only fntrace writes text, under the protocol's lock). Each byte goes
//! from its old value to its new one and never through a value nobody
//! wrote, but the kernel's copy may use wide stores that tear between
//! bytes: a protocol that lets threads run changes at most one byte of any
//! instruction they may execute per store (the breakpoint protocol's
//! `int3` steps). At 100,000 sites (≈ 730 pages) a store costs ≈ 1.5 ms
//! instead of ≈ 300 ms of one `pread` and one `pwrite` per site.
//!
//! Three ways to store, tried in order:
//! 0. A span whose pages [`alias`] moved to a memfd is written through the
//!    memfd's read-write view: plain byte stores of the bytes the protocol
//!    stages, as it stages them, with no system call and no copy (the view
//!    is never executable).
//! 1. `pwrite` on `/proc/thread-self/mem`. The kernel writes through its
//!    own mapping of the page (copying a file-backed page first), so the
//!    text stays R-X throughout: no mapping is ever writable and executable
//!    at once, and no thread can ever see a writable window. (`thread-self`,
//!    not `self`: `/proc/self` names the main thread, and once that has
//!    exited its `mem` and `maps` are empty.)
//! 2. When the kernel refuses that (hardened kernels:
//!    `proc_mem.force_override`, some LSMs), `mprotect` the span's pages to
//!    READ|WRITE|EXEC, store the bytes that differ, and put back the
//!    protection each page had. EXEC is never dropped, because threads
//!    (the writing one too) may be running code on those pages. This
//!    breaks W^X for the duration of the store, and a W^X policy
//!    (`MemoryDenyWriteExecute`, `PR_SET_MDWE`) refuses it: the error is
//!    reported and nothing is left writable.
//!
//! [`TextWriter::prepare`] runs while the process runs normally: it opens
//! the `mem` file, records with `region::query_range` the original
//! protection of every page it will touch, and allocates the image. After
//! that, [`TextWriter::load`], [`TextWriter::store`] and the image accessors
//! make only system calls and stores — no allocation, no lock — so a patch
//! protocol may call them while other threads are stopped at arbitrary
//! points (possibly inside `malloc`).

use std::cell::Cell;
use std::io;
use std::os::fd::OwnedFd;

use region::Protection;

use super::proc_mem::{open_proc_mem, pread_all, pwrite_all};
use super::{alias, TextWrite};
use crate::error::Error;
use crate::sys;

/// How far ahead of a site being read or written in a view
/// [`TextWriter::locate`] asks for the text's cache line. Batches go
/// through the text in address order, a few stores per site; a store that
/// misses the cache holds up the stores behind it, and sites lie ≈ 40
/// bytes apart (`-O0` code) on pages whose lines the hardware prefetcher
/// does not fetch across page boundaries.
const TEXT_PREFETCH_AHEAD: usize = 1024;

/// Starts fetching the cache line at `addr` to be written (a hint: it
/// never faults, whatever the address, and changes nothing the program
/// computes).
#[inline(always)]
fn prefetch_for_write(addr: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
    // SAFETY: SSE is part of x86-64; a prefetch never faults.
    unsafe { _mm_prefetch::<_MM_HINT_ET0>(addr as *const i8) };
}

/// Where [`TextWriter::locate`] found a range.
enum Located {
    /// At this address of a writable view of the text.
    View(usize),
    /// At this offset of the image.
    Image(usize),
}

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

/// A run of text covering one or more sites, and where its bytes sit in
/// the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    /// First address.
    start: usize,
    /// Length in bytes.
    len: usize,
    /// Offset of its first byte in the image (spans with a `view` have
    /// none: their bytes are read and written in the view).
    offset: usize,
    /// Where `start` is in a writable view of the text ([`alias`]), if
    /// the span is written there rather than through `/proc/self/mem`.
    view: Option<usize>,
}

/// The vectors of a [`TextWriter`], kept from batch to batch
/// ([`TextWriter::into_memory`]).
#[derive(Default)]
pub(crate) struct WriterMemory {
    pages: Vec<PageProtection>,
    spans: Vec<Span>,
    image: Vec<u8>,
}

impl WriterMemory {
    /// No memory yet.
    pub(crate) const fn new() -> WriterMemory {
        WriterMemory {
            pages: Vec::new(),
            spans: Vec::new(),
            image: Vec::new(),
        }
    }
}

/// Writes batches of bytes into program text; see the module
/// documentation.
///
/// Build it with [`TextWriter::prepare`] before stopping anything; its
/// other methods then only make system calls and stores.
pub(crate) struct TextWriter {
    /// `/proc/thread-self/mem`, opened read-write when possible, read-only
    /// when only that is allowed, or not at all.
    proc_mem: Option<OwnedFd>,
    /// Whether `proc_mem` may still be tried for writing (cleared after the
    /// first refused write, so later writes go straight to `mprotect`).
    proc_mem_writable: bool,
    /// Every page a span touches, sorted by address.
    pages: Vec<PageProtection>,
    /// The system page size.
    page_size: usize,
    /// Sorted, disjoint, each less than a page from the next.
    spans: Vec<Span>,
    /// The bytes of the spans without a view, back to back.
    image: Vec<u8>,
    /// The span the last lookup found: batches are looked up in address
    /// order, so the next lookup is almost always in it or the next one.
    last_span: Cell<usize>,
}

impl TextWriter {
    /// Prepares writes to the byte ranges `(addr, len)`, given in address
    /// order (they may overlap; out of order is refused): opens
    /// `/proc/thread-self/mem`, groups the ranges into spans, records the
    /// protection of each page the spans touch and sizes the image (its
    /// bytes are stale until [`TextWriter::load`]). Allocates (only to grow
    /// `memory`) and takes locks; call it before stopping threads.
    ///
    /// Fails if a range is not mapped, or lies in a shared mapping (writing
    /// there would change the file or other processes' memory).
    ///
    /// `memory` is what [`TextWriter::into_memory`] gave back from an
    /// earlier writer: at 100,000 sites fresh vectors cost ≈ 750 page
    /// faults and a 3 MB memset per batch.
    pub(crate) fn prepare(
        sorted_ranges: impl IntoIterator<Item = (usize, usize)>,
        memory: WriterMemory,
    ) -> Result<TextWriter, Error> {
        // region's page size: also initializes its cache, so `region::protect`
        // in the stopped world finds it ready.
        let page_size = region::page::size();
        let WriterMemory {
            mut pages,
            mut spans,
            mut image,
        } = memory;
        spans.clear();
        pages.clear();

        let mut previous_start = 0;
        for (addr, len) in sorted_ranges {
            let invalid = |why| Error::TextWrite {
                addr,
                source: io::Error::new(io::ErrorKind::InvalidInput, why),
            };
            let end = addr
                .checked_add(len)
                .ok_or_else(|| invalid("range wraps the address space"))?;
            if addr < previous_start {
                return Err(invalid("text ranges must come in address order"));
            }
            previous_start = addr;
            if len > 0 {
                extend_spans(&mut spans, (addr, end), page_size);
            }
        }

        let mut aliases = alias::begin_batch()?;
        let mut image_len = 0;
        for span in &mut spans {
            span.view = aliases.writable_view(span.start, span.start + span.len, page_size);
            if span.view.is_none() {
                span.offset = image_len;
                image_len += span.len;
            }
        }
        drop(aliases);

        let (first_page, end_page) = match (spans.first(), spans.last()) {
            (Some(first), Some(last)) => (
                first.start & !(page_size - 1),
                (last.start + last.len + page_size - 1) & !(page_size - 1),
            ),
            _ => (0, 0),
        };
        let mappings = if first_page < end_page && spans.iter().any(|span| span.view.is_none()) {
            mappings_over(first_page, end_page)?
        } else {
            Vec::new()
        };
        // Spans written through a view need no protection: no mprotect.
        for span in spans.iter().filter(|span| span.view.is_none()) {
            let mut start = span.start & !(page_size - 1);
            // Spans are sorted and less than a page apart: only neighbours
            // can share a page.
            if pages
                .last()
                .is_some_and(|page: &PageProtection| page.start == start)
            {
                start += page_size;
            }
            while start < span.start + span.len {
                let index = mappings.partition_point(|m| m.end <= start);
                let mapping = mappings
                    .get(index)
                    .filter(|m| m.start <= start)
                    .ok_or_else(|| Error::TextWrite {
                        addr: start,
                        source: io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "address is not mapped",
                        ),
                    })?;
                if mapping.shared {
                    return Err(Error::TextWrite {
                        addr: start,
                        source: io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "address lies in a shared mapping; \
                             refusing to write through to its file",
                        ),
                    });
                }
                pages.push(PageProtection {
                    start,
                    prot: mapping.prot,
                });
                start += page_size;
            }
        }

        // No clear first: `load` overwrites every byte, so only growth is
        // zeroed.
        image.resize(image_len, 0);
        Ok(TextWriter {
            proc_mem: open_proc_mem(),
            proc_mem_writable: true,
            pages,
            page_size,
            spans,
            image,
            last_span: Cell::new(0),
        })
    }

    /// The writer's memory, for the next [`TextWriter::prepare`].
    pub(crate) fn into_memory(self) -> WriterMemory {
        WriterMemory {
            pages: self.pages,
            spans: self.spans,
            image: self.image,
        }
    }

    /// Reads every span without a view into the image: plain loads where
    /// `prepare` recorded the pages readable (text is R-X; half the cost of
    /// going through the kernel), else one `pread` of the `mem` file per
    /// span. Spans with a view are read there (nothing to do).
    /// Allocation-free; an error carries the raw OS error and the address.
    pub(crate) fn load(&mut self) -> Result<(), Error> {
        for span in self.spans.iter().filter(|span| span.view.is_none()) {
            let Some(buf) = self.image.get_mut(span.offset..span.offset + span.len) else {
                continue;
            };
            let read = match (
                read_directly(&self.pages, self.page_size, span.start, buf),
                &self.proc_mem,
            ) {
                (Ok(()), _) => Ok(()),
                (Err(_), Some(fd)) => pread_all(fd, span.start, buf),
                (Err(errno), None) => Err(errno),
            };
            read.map_err(|errno| text_error(span.start, errno))?;
        }
        Ok(())
    }

    /// The text's `len` bytes at `addr` as the batch sees them (the view,
    /// or the image), if a span covers them.
    pub(crate) fn bytes(&self, addr: usize, len: usize) -> Option<&[u8]> {
        match self.locate(addr, len)? {
            Located::View(at) => {
                // SAFETY: `at..at + len` lies in a span's view, mapped
                // readable by `alias` for the batch; only the patching
                // thread (this one, under the protocol's lock) writes it,
                // and not while the slice lives (`&self`).
                Some(unsafe { std::slice::from_raw_parts(at as *const u8, len) })
            }
            Located::Image(from) => self.image.get(from..from + len),
        }
    }

    /// Puts `bytes` at `addr`: in a span with a view, straight into the
    /// text (one byte store per byte, so no byte is ever written with a
    /// value nobody meant; a byte that keeps its value is written all the
    /// same, which no thread can tell from no write, and reading it first
    /// would wait for its cache line where a store does not); elsewhere
    /// into the image, for [`TextWriter::store`]. Bytes no span covers are
    /// ignored. Stores only: no allocation, no system call.
    pub(crate) fn stage(&mut self, addr: usize, bytes: &[u8]) {
        match self.locate(addr, bytes.len()) {
            Some(Located::View(at)) => {
                for (index, &byte) in bytes.iter().enumerate() {
                    let target = (at + index) as *mut u8;
                    // SAFETY: `target` lies in a span's view, mapped R-W
                    // by `alias` and alive while its object is: a separate
                    // mapping of the text's memory, never executable.
                    unsafe { std::ptr::write_volatile(target, byte) };
                }
            }
            Some(Located::Image(from)) => {
                if let Some(image) = self.image.get_mut(from..from + bytes.len()) {
                    image.copy_from_slice(bytes);
                }
            }
            None => {}
        }
    }

    /// [`TextWriter::stage`] for part of every write of `writes` (in
    /// address order, as a validated batch is): `pick` gives the offset in
    /// the instruction and the bytes to put there. One walk of the spans
    /// beside the writes; a write out of order is looked up.
    #[inline]
    pub(crate) fn stage_writes<'w>(
        &mut self,
        writes: &'w [TextWrite],
        pick: impl Fn(&'w TextWrite) -> (usize, &'w [u8]),
    ) {
        let mut index = 0;
        for write in writes {
            let (offset, bytes) = pick(write);
            let addr = write.addr + offset;
            let end = addr + bytes.len();
            while self
                .spans
                .get(index)
                .is_some_and(|span| span.start + span.len < end)
            {
                index += 1;
            }
            let view = match self.spans.get(index) {
                Some(span) if span.start <= addr => {
                    span.view.map(|view| view + (addr - span.start))
                }
                _ => None,
            };
            let Some(at) = view else {
                // In the image, or out of order: the general path.
                self.stage(addr, bytes);
                continue;
            };
            prefetch_for_write(at.wrapping_add(TEXT_PREFETCH_AHEAD));
            for (index, &byte) in bytes.iter().enumerate() {
                // SAFETY: as in `stage`: `at..at + bytes.len()` lies in a
                // span's view (the span covers `addr..end`), mapped R-W by
                // `alias`, never executable.
                unsafe { std::ptr::write_volatile((at + index) as *mut u8, byte) };
            }
        }
    }

    /// Where `addr..addr + len` lies: in a span's view or in the image.
    /// Starts from the span of the last lookup (batches are looked up in
    /// address order), else searches.
    #[inline]
    fn locate(&self, addr: usize, len: usize) -> Option<Located> {
        let end = addr.checked_add(len)?;
        let hint = self.last_span.get();
        let span = match self.spans.get(hint) {
            Some(span) if span.start <= addr && end <= span.start + span.len => span,
            _ => self.spans.get(self.find_span(addr, end)?)?,
        };
        Some(match span.view {
            Some(view) => {
                let at = view + (addr - span.start);
                prefetch_for_write(at.wrapping_add(TEXT_PREFETCH_AHEAD));
                Located::View(at)
            }
            None => Located::Image(span.offset + (addr - span.start)),
        })
    }

    /// The index of the span covering `addr..end`, which is not the last
    /// one found: the next one, or a binary search. Remembered.
    #[cold]
    fn find_span(&self, addr: usize, end: usize) -> Option<usize> {
        let covers = |span: &Span| span.start <= addr && end <= span.start + span.len;
        let next = self.last_span.get() + 1;
        let index = if self.spans.get(next).is_some_and(covers) {
            next
        } else {
            let index = self
                .spans
                .partition_point(|span| span.start <= addr)
                .checked_sub(1)?;
            self.spans.get(index).is_some_and(covers).then_some(index)?
        };
        self.last_span.set(index);
        Some(index)
    }

    /// Writes the image to the text: every span without a view whole, with
    /// one `pwrite` (spans with a view were written at staging). Only
    /// system calls and stores: no
    /// allocation, no lock. Pages are R-X before and after; at most the
    /// `mprotect` fallback makes them RWX for the duration of the store.
    /// The caller is responsible for what other threads may execute
    /// meanwhile, and for serializing instruction fetch afterwards.
    pub(crate) fn store(&mut self) -> Result<(), Error> {
        for index in 0..self.spans.len() {
            let Some(&span) = self.spans.get(index) else {
                continue;
            };
            if span.view.is_some() {
                continue;
            }
            let Some(bytes) = self.image.get(span.offset..span.offset + span.len) else {
                continue;
            };
            if self.proc_mem_writable {
                match self
                    .proc_mem
                    .as_ref()
                    .map(|fd| pwrite_all(fd, span.start, bytes))
                {
                    Some(Ok(())) => continue,
                    // Refused (hardened kernel, read-only fd, no fd): from
                    // now on use mprotect for this writer. A part of the
                    // span may have been written; the fallback writes it all.
                    _ => self.proc_mem_writable = false,
                }
            }
            self.store_with_mprotect(span)?;
        }
        Ok(())
    }

    /// Makes the span's pages RWX, stores the bytes that differ (one byte
    /// store each), restores the pages' protection.
    fn store_with_mprotect(&self, span: Span) -> Result<(), Error> {
        let Some(bytes) = self.image.get(span.offset..span.offset + span.len) else {
            return Ok(());
        };
        let Some(last) = span.len.checked_sub(1) else {
            return Ok(());
        };
        let first_page = span.start & !(self.page_size - 1);
        let last_page = (span.start + last) & !(self.page_size - 1);

        // Every page must have been recorded by `prepare`, or we could not
        // restore its protection: check before changing anything.
        let mut page = first_page;
        while page <= last_page {
            if self.original_protection(page).is_none() {
                return Err(text_error(span.start, libc::EINVAL));
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
                let at = (span.start + offset) as *mut u8;
                // SAFETY: every page of the span was made readable and
                // writable just above and is still mapped (recorded by
                // `prepare`, kept alive by the caller). Only bytes that
                // differ are stored, one byte store each.
                unsafe {
                    if std::ptr::read_volatile(at) != byte {
                        std::ptr::write_volatile(at, byte);
                    }
                }
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
            Some(errno) => Err(text_error(span.start, errno)),
        }
    }

    /// The protection `prepare` recorded for the page holding `addr`.
    fn original_protection(&self, addr: usize) -> Option<Protection> {
        original_protection(&self.pages, self.page_size, addr)
    }
}

/// Adds the range `(start, end)`, which starts at or after every range
/// added before, to `spans`: a range that starts less than a page after the
/// last span's end (or overlaps it) joins it, so every page of a span holds
/// part of some range.
fn extend_spans(spans: &mut Vec<Span>, (start, end): (usize, usize), page_size: usize) {
    if let Some(span) = spans.last_mut() {
        let span_end = span.start + span.len;
        if start < span_end.saturating_add(page_size) {
            if end > span_end {
                span.len = end - span.start;
            }
            return;
        }
    }
    let offset = spans.last().map_or(0, |span| span.offset + span.len);
    spans.push(Span {
        start,
        len: end - start,
        offset,
        view: None,
    });
}

/// The protection recorded in `pages` for the page holding `addr`.
fn original_protection(
    pages: &[PageProtection],
    page_size: usize,
    addr: usize,
) -> Option<Protection> {
    let start = addr & !(page_size - 1);
    pages
        .binary_search_by_key(&start, |page| page.start)
        .ok()
        .and_then(|index| pages.get(index))
        .map(|page| page.prot)
}

/// Reads `buf.len()` bytes at `addr` with plain loads, when every page is
/// recorded readable.
fn read_directly(
    pages: &[PageProtection],
    page_size: usize,
    addr: usize,
    buf: &mut [u8],
) -> Result<(), i32> {
    let mut page = addr & !(page_size - 1);
    while page < addr + buf.len() {
        match original_protection(pages, page_size, page) {
            Some(prot) if prot.contains(Protection::READ) => {}
            _ => return Err(libc::EFAULT),
        }
        page += page_size;
    }
    // SAFETY: every page of `addr..addr + buf.len()` is mapped readable
    // (checked just above against the protections recorded by `prepare`;
    // the caller keeps the mapping alive), and `buf` is ours: the ranges
    // cannot overlap. Only fntrace writes text, and not meanwhile.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spans_of(sorted: &[(usize, usize)], page_size: usize) -> Vec<Span> {
        let mut spans = Vec::new();
        for &range in sorted {
            extend_spans(&mut spans, range, page_size);
        }
        spans
    }

    #[test]
    fn ranges_less_than_a_page_apart_share_a_span() {
        let page = 4096;
        let ranges = [
            (0x1000, 0x1005),
            (0x1003, 0x1008), // overlaps
            (0x1ff0, 0x1ff6), // same page
            (0x2ff0, 0x2ff5), // next page, less than a page after
            (0x5000, 0x5006), // far away
        ];
        assert_eq!(
            spans_of(&ranges, page),
            [
                Span {
                    start: 0x1000,
                    len: 0x1ff5,
                    offset: 0,
                    view: None,
                },
                Span {
                    start: 0x5000,
                    len: 6,
                    offset: 0x1ff5,
                    view: None,
                },
            ]
        );
    }

    #[test]
    fn loads_edits_and_stores_a_batch_of_this_programs_text() {
        let here = loads_edits_and_stores_a_batch_of_this_programs_text as *const () as usize;
        let other = extend_spans as *const () as usize;
        let mut ranges = [(here, 4), (other, 2)];
        ranges.sort_unstable();
        assert!(TextWriter::prepare([ranges[1], ranges[0]], WriterMemory::new()).is_err());
        let mut writer = TextWriter::prepare(ranges, WriterMemory::new()).unwrap();
        writer.load().unwrap();
        // SAFETY: both are the first bytes of functions of this program.
        let (code, code2) = unsafe {
            (
                std::slice::from_raw_parts(here as *const u8, 4).to_vec(),
                std::slice::from_raw_parts(other as *const u8, 2).to_vec(),
            )
        };
        assert_eq!(writer.bytes(here, 4), Some(&code[..]));
        assert_eq!(writer.bytes(other, 2), Some(&code2[..]));
        assert_eq!(writer.bytes(here + 0x10_0000_0000, 1), None);
        // Writing back the same bytes changes nothing and keeps text R-X.
        writer.store().unwrap();
        // SAFETY: as above.
        let after = unsafe { std::slice::from_raw_parts(here as *const u8, 4) };
        assert_eq!(after, &code[..]);
    }
}
