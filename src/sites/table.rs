//! The call-site table: a lock-free hash table keyed by each site's return
//! address (the address right after the call instruction, which the
//! trampoline receives for free).
//!
//! Readers (every traced call) probe without locks. Writers (the first call
//! through an unknown site, and the ELF scan) take a small spin lock, fill an
//! empty slot, then publish its key with a Release store that pairs with the
//! Acquire load in [`SiteTable::find`]. Inserting is rare (once per site), and
//! one writer at a time keeps a key from landing in two segments. A writer is
//! never interrupted by another writer of its own thread: the trampoline's
//! recursion guard is set while it runs. Entries are never removed (a site
//! whose object was unloaded is marked so, and its entry reused if another
//! object's site gets its address). The table is a chain of segments allocated with `mmap` (which is
//! async-signal-safe, unlike `malloc`), each twice the size of the one
//! before, so insertion never moves an entry that a reader may hold.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::arch::x86_64::SiteForm;

const EMPTY: usize = 0;
const FIRST_SEGMENT_SLOTS: usize = 1 << 14;
/// The size of a transparent huge page on x86-64.
const HUGE_PAGE: usize = 2 << 20;

/// Whether a site calls `mcount` (after the prologue) or `__fentry__`
/// (the function's first instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteKind {
    /// `gcc -pg`, `rustc -Zinstrument-mcount`.
    Mcount,
    /// `gcc -pg -mfentry`.
    Fentry,
}

/// Bits of [`Site::flags`]:
///
/// | bits | meaning                                                      |
/// |------|--------------------------------------------------------------|
/// | 0-1  | form: 0 unknown, 1 `e8`, 2 `67 e8`, 3 `ff 15`                |
/// | 2    | kind: 0 mcount, 1 fentry                                     |
/// | 3    | the text holds the call now (else the NOP, or unknown bytes) |
/// | 4    | excluded: fntrace's own code, never enabled                  |
/// | 5    | found by the lazy hook (first call) rather than the ELF scan |
/// | 6    | the call in the text is to the graph tracer's fast entry     |
/// | 7    | fentry call wrapped in `push/pop %r10` (GNU C nested function):|
/// |      | the parent's return address is 8 bytes further up             |
/// | 8    | unloaded: its object is gone (`dlclose`); no form, no tracers; |
/// |      | the entry is described anew if a site appears at its address   |
/// | 9    | listed in the address-ordered list ([`super::order`])          |
/// | 10   | a patchable function entry ([`super::patchable`]): fentry-like,|
/// |      | its call made by fntrace, not the compiler                     |
/// | 11   | the text still holds the compiler's five one-byte NOPs (`90`)  |
/// | 12   | the text still holds the compiler's `0f 1f 44 00 XX`           |
/// | 13   | the NOP of a run-time entry patch's stub (`patch::entry_patch`)|
/// | 14   | with bit 6: the fast entry is fast path 1's (the profile       |
/// |      | tracer's, `tracer::PROFILE_FAST_PATH`), not path 0's (graph's) |
/// | 15   | with bit 8: a thread is describing the entry anew ([`Site::revive`]) |
/// | 16-23| that `XX`                                                      |
/// | 24   | returns twice (`setjmp`): its return is never hooked, its call  |
/// |      | reported whole at its entry (see `rt::entry`)                   |
/// | 25   | adopted: the compiler's call goes to another object's `mcount` |
/// |      | (glibc's, in a process fntrace attached to); `original` is the |
/// |      | call fntrace writes (to its own trampoline), made by control    |
/// | 26   | with bit 25: the text still holds that foreign call (its bytes  |
/// |      | in [`super::foreign_text`]), as before fntrace's first write   |
/// | 27   | not adopted, but its call (of fntrace's `mcount`, in a process |
/// |      | that preloaded the library) was there when attach made it a NOP:|
/// |      | detach writes the call back                                      |
/// | 28   | its function records arguments or a return value (`-A`, `-R`):   |
/// |      | kept off the plain fast paths, which record neither              |
/// | 29   | with bit 6: the fast entry is the graph tracer's argument entry  |
/// |      | (`tracer::GRAPH_ARGS_FAST_PATH`)                                 |
/// | 30   | with bit 28: its values are all integer registers, which the     |
/// |      | argument entries record (`builtin::graph::arg_recipes`)          |
pub(crate) mod flag {
    pub const FORM_MASK: u32 = 0b11;
    pub const FENTRY: u32 = 1 << 2;
    pub const TEXT_IS_CALL: u32 = 1 << 3;
    pub const EXCLUDED: u32 = 1 << 4;
    pub const LAZY: u32 = 1 << 5;
    pub const TEXT_IS_FAST: u32 = 1 << 6;
    pub const R10_SAVED: u32 = 1 << 7;
    pub const UNLOADED: u32 = 1 << 8;
    pub const LISTED: u32 = 1 << 9;
    pub const PATCHABLE: u32 = 1 << 10;
    pub const RAW_ONE_BYTE_NOPS: u32 = 1 << 11;
    pub const RAW_NOPL: u32 = 1 << 12;
    pub const ENTRY_STUB: u32 = 1 << 13;
    pub const TEXT_FAST_SECOND: u32 = 1 << 14;
    pub const REVIVING: u32 = 1 << 15;
    /// Either raw state: no fntrace write reached the site yet.
    pub const RAW: u32 = RAW_ONE_BYTE_NOPS | RAW_NOPL;
    pub const RAW_NOPL_BYTE_SHIFT: u32 = 16;
    pub const RETURNS_TWICE: u32 = 1 << 24;
    pub const ADOPTED: u32 = 1 << 25;
    pub const FOREIGN_TEXT: u32 = 1 << 26;
    pub const CALL_BEFORE_ATTACH: u32 = 1 << 27;
    pub const WITH_ARGS: u32 = 1 << 28;
    pub const TEXT_FAST_ARGS: u32 = 1 << 29;
    pub const ARGS_FAST: u32 = 1 << 30;
}

/// The flags of a site as `new` describes it.
fn new_flags(new: &NewSite) -> u32 {
    let kind = match new.kind {
        SiteKind::Mcount => 0,
        SiteKind::Fentry => flag::FENTRY,
    };
    form_bits(new.form) | kind | new.extra_flags
}

fn form_bits(form: Option<SiteForm>) -> u32 {
    match form {
        None => 0,
        Some(SiteForm::CallRel32) => 1,
        Some(SiteForm::Addr32CallRel32) => 2,
        Some(SiteForm::CallGotRip) => 3,
    }
}

/// [`Site::nop_text`] of a site with `flags`.
pub(crate) fn nop_text(flags: u32, form: SiteForm) -> [u8; 8] {
    let mut bytes = [0u8; 8];
    if flags & flag::RAW_ONE_BYTE_NOPS != 0 {
        bytes[..5].fill(0x90);
    } else if flags & flag::RAW_NOPL != 0 {
        bytes[..4].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00]);
        bytes[4] = (flags >> flag::RAW_NOPL_BYTE_SHIFT) as u8;
    } else {
        bytes[..form.instruction_len()].copy_from_slice(form.nop());
    }
    bytes
}

/// One call site. `repr(C)`: the fields control operations use are
/// contiguous, after the key and address (see [`Site::CONTROL_FIELDS`]).
#[repr(C)]
pub(crate) struct Site {
    key: AtomicUsize,
    /// First byte of the call instruction.
    pub addr: AtomicUsize,
    /// Entry of the function the site belongs to; 0 while unknown.
    pub function: AtomicUsize,
    /// The original call instruction, little-endian, `len` bytes used.
    pub original: AtomicU64,
    /// See [`flag`].
    pub flags: AtomicU32,
    /// Bit `i` set: enabled tracer `i` selected this site. Set when the
    /// site is inserted or revived, before it can be listed, then written
    /// only under the control lock; read on every traced call. Its population count is
    /// the site's reference count: the site holds the call exactly when it
    /// is non-zero, so the count cannot drift from the text.
    pub tracers: AtomicU64,
}

/// The fields of a new site.
pub(crate) struct NewSite {
    pub addr: usize,
    pub function: usize,
    pub form: Option<SiteForm>,
    pub kind: SiteKind,
    pub original: [u8; 8],
    pub extra_flags: u32,
    /// The tracers that select it from the start (see
    /// [`super::SELECT_NEW`]).
    pub tracers: u64,
}

impl Site {
    /// The bytes `first..last` of a site holding the fields control
    /// operations read and write (`function`, `original`, `flags`,
    /// `tracers`; not the key or address): what they prefetch.
    pub const CONTROL_FIELDS: (usize, usize) = (
        std::mem::offset_of!(Site, function),
        std::mem::offset_of!(Site, tracers) + std::mem::size_of::<AtomicU64>(),
    );

    /// The return address of the call: the table key.
    pub fn return_address(&self) -> usize {
        self.key.load(Ordering::Relaxed)
    }

    pub fn form(&self) -> Option<SiteForm> {
        match self.flags.load(Ordering::Relaxed) & flag::FORM_MASK {
            1 => Some(SiteForm::CallRel32),
            2 => Some(SiteForm::Addr32CallRel32),
            3 => Some(SiteForm::CallGotRip),
            _ => None,
        }
    }

    pub fn kind(&self) -> SiteKind {
        if self.flags.load(Ordering::Relaxed) & flag::FENTRY != 0 {
            SiteKind::Fentry
        } else {
            SiteKind::Mcount
        }
    }

    pub fn has_flag(&self, bit: u32) -> bool {
        self.flags.load(Ordering::Relaxed) & bit != 0
    }

    pub fn set_flag(&self, bit: u32, on: bool) {
        if on {
            self.flags.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    pub fn original_bytes(&self) -> [u8; 8] {
        self.original.load(Ordering::Relaxed).to_le_bytes()
    }

    /// What the text holds while no tracer selects the site (`form`'s):
    /// the NOP of the form's length, or, at a patchable entry fntrace has
    /// not written yet, the compiler's own NOPs.
    pub fn nop_text(&self, form: SiteForm) -> [u8; 8] {
        nop_text(self.flags.load(Ordering::Relaxed), form)
    }

    /// Forgets a site whose object was unloaded: no form (so no text is
    /// ever written there), no tracers. Its key stays (entries are never
    /// removed: readers may hold them); [`Self::revive`] reuses it. Caller
    /// holds the control lock.
    pub fn unload(&self) {
        self.tracers.store(0, Ordering::Relaxed);
        let kind = self.flags.load(Ordering::Relaxed) & flag::FENTRY;
        self.flags.store(kind | flag::UNLOADED, Ordering::Relaxed);
    }

    /// Describes an unloaded entry's key anew: another object's site has
    /// the same return address. Returns whether it did: `false`, changing
    /// nothing, if the entry is not unloaded (any more) or another thread
    /// is describing it. Two threads may try at once: the lazy hook, on a
    /// traced thread that ran the site's call, and a control operation's
    /// scan. Without the claim, a lazy hook that read the entry unloaded,
    /// then ran after the operation had revived the site and written its
    /// NOP, stored "the text holds the call" over the NOP's flags: the next
    /// operation found a NOP where it expected the call, and refused
    /// (found by the chaos benchmark, a plugin loaded again at the same
    /// address).
    pub fn revive(&self, new: &NewSite) -> bool {
        let flags = self.flags.load(Ordering::Acquire);
        let claimed = flags & flag::UNLOADED != 0
            && flags & flag::REVIVING == 0
            && self
                .flags
                .compare_exchange(
                    flags,
                    flags | flag::REVIVING,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok();
        if !claimed {
            return false;
        }
        self.addr.store(new.addr, Ordering::Relaxed);
        self.function.store(new.function, Ordering::Relaxed);
        self.original
            .store(u64::from_le_bytes(new.original), Ordering::Relaxed);
        self.tracers.store(new.tracers, Ordering::Relaxed);
        // Release: a control operation that sees it no longer unloaded
        // (and lists it) sees the fields above.
        self.flags.store(new_flags(new), Ordering::Release);
        true
    }

    /// Re-describes a site whose text still holds the original call (used
    /// when the ELF scan learns that a lazily found `e8` has a `67` prefix).
    /// Caller holds the control lock.
    pub fn redescribe(&self, new: &NewSite) {
        self.addr.store(new.addr, Ordering::Relaxed);
        self.original
            .store(u64::from_le_bytes(new.original), Ordering::Relaxed);
        let keep = self.flags.load(Ordering::Relaxed) & !flag::FORM_MASK;
        self.flags
            .store(keep | form_bits(new.form), Ordering::Relaxed);
        if new.function != 0 {
            self.function.store(new.function, Ordering::Relaxed);
        }
    }
}

struct Segment {
    slots: *mut Site,
    mask: usize,
    used: AtomicUsize,
    next: AtomicPtr<Segment>,
}

impl Segment {
    fn allocate(slots: usize) -> *mut Segment {
        let bytes = std::mem::size_of::<Segment>() + slots * std::mem::size_of::<Site>();
        // SAFETY: an anonymous private mapping has no preconditions; the
        // result is checked for MAP_FAILED.
        let mem = unsafe {
            libc::mmap(
                ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return ptr::null_mut();
        }
        if bytes >= HUGE_PAGE {
            // Control operations visit every site, scattered over the
            // table: with 4 KiB pages nearly every visit missed the TLB
            // (a nested page walk under virtualisation). A hint only; a
            // refusal changes nothing else. Small segments are left alone
            // (a huge page would only add memory). The pages are faulted in
            // once, as the table grows (a first touch of a huge page may
            // compact memory), not at whichever later touch lists a site
            // there: for a site found by its first call, a traced thread.
            // SAFETY: `mem` is the mapping of `bytes` bytes just made.
            unsafe {
                libc::madvise(mem, bytes, libc::MADV_HUGEPAGE);
                libc::madvise(mem, bytes, libc::MADV_POPULATE_WRITE);
            }
        }
        let segment = mem as *mut Segment;
        // SAFETY: mem is a fresh zeroed mapping large enough for the header
        // followed by `slots` sites; all-zero bytes are a valid empty Site
        // (atomics at 0, key EMPTY). Segment is 8-aligned and page-aligned mem
        // satisfies it, and Site's alignment (8) divides the header size.
        unsafe {
            segment.write(Segment {
                slots: (mem as *mut u8).add(std::mem::size_of::<Segment>()) as *mut Site,
                mask: slots - 1,
                used: AtomicUsize::new(0),
                next: AtomicPtr::new(ptr::null_mut()),
            });
        }
        segment
    }

    fn slot(&self, index: usize) -> &Site {
        // SAFETY: index is masked into 0..=mask, inside the mapping made by
        // allocate, which is never unmapped.
        unsafe { &*self.slots.add(index & self.mask) }
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }
}

fn hash(key: usize) -> usize {
    (key as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(29) as usize
}

/// The process-wide table of call sites.
pub(crate) struct SiteTable {
    head: AtomicPtr<Segment>,
    writer: AtomicBool,
    /// Counts insertions and changes of a site's address, form or
    /// presence ([`SiteTable::note_change`]): the address-ordered list
    /// ([`super::order`]) is brought up to date when it moved.
    changes: AtomicU64,
}

// SAFETY: segments are only reached through atomics and never freed; every
// field a reader uses is atomic.
unsafe impl Sync for SiteTable {}

/// The result of [`SiteTable::insert`].
pub(crate) enum Inserted<'a> {
    New(&'a Site),
    Existing(&'a Site),
}

impl SiteTable {
    pub const fn new() -> Self {
        SiteTable {
            head: AtomicPtr::new(ptr::null_mut()),
            writer: AtomicBool::new(false),
            changes: AtomicU64::new(0),
        }
    }

    fn segments(&self) -> impl Iterator<Item = &Segment> {
        // Acquire pairs with the Release publishing a segment in next_segment.
        let mut current = self.head.load(Ordering::Acquire);
        std::iter::from_fn(move || {
            // SAFETY: non-null segment pointers come from Segment::allocate and
            // are never freed.
            let segment = unsafe { current.as_ref()? };
            current = segment.next.load(Ordering::Acquire);
            Some(segment)
        })
    }

    /// Finds the site whose call returns to `return_address`. Lock-free.
    #[inline]
    pub fn find(&self, return_address: usize) -> Option<&Site> {
        for segment in self.segments() {
            let mut index = hash(return_address);
            loop {
                let site = segment.slot(index);
                // Acquire pairs with the Release publishing the key in insert,
                // so the site's fields are visible once the key matches.
                let key = site.key.load(Ordering::Acquire);
                if key == return_address {
                    return Some(site);
                }
                if key == EMPTY {
                    break;
                }
                index += 1;
            }
        }
        None
    }

    /// Inserts a site unless one with the same return address exists.
    /// Returns `None` only when no memory could be mapped.
    pub fn insert(&self, return_address: usize, new: &NewSite) -> Option<Inserted<'_>> {
        debug_assert!(return_address != EMPTY);
        let _writer = WriterLock::acquire(&self.writer);
        let mut segment_ptr = self.first_segment()?;
        loop {
            // SAFETY: pointers from first_segment/next_segment are live forever.
            let segment = unsafe { &*segment_ptr };
            if let Some(found) = segment_find_or_insert(segment, return_address, new) {
                if let Inserted::New(_) = found {
                    self.note_change();
                }
                return Some(found);
            }
            segment_ptr = self.next_segment(segment)?;
        }
    }

    fn first_segment(&self) -> Option<*mut Segment> {
        let head = self.head.load(Ordering::Acquire);
        if !head.is_null() {
            return Some(head);
        }
        let fresh = Segment::allocate(FIRST_SEGMENT_SLOTS);
        if fresh.is_null() {
            return None;
        }
        // Release publishes the initialised header; on a lost race the fresh
        // mapping is simply leaked (once, at start-up).
        match self.head.compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Some(fresh),
            Err(winner) => Some(winner),
        }
    }

    fn next_segment(&self, segment: &Segment) -> Option<*mut Segment> {
        let next = segment.next.load(Ordering::Acquire);
        if !next.is_null() {
            return Some(next);
        }
        let fresh = Segment::allocate(segment.capacity() * 2);
        if fresh.is_null() {
            return None;
        }
        match segment.next.compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Some(fresh),
            Err(winner) => Some(winner),
        }
    }

    /// Takes the writer lock and keeps it until [`Self::release_after_fork`]:
    /// a child of `fork` must not inherit it held by a thread it lacks.
    pub fn hold_for_fork(&self) {
        std::mem::forget(WriterLock::acquire(&self.writer));
    }

    /// Releases the lock [`Self::hold_for_fork`] took (parent and child).
    pub fn release_after_fork(&self) {
        self.writer.store(false, Ordering::Release);
    }

    /// Records that a site was added, or that one's address, form or
    /// presence changed (after the change: see [`SiteTable::changes`]).
    /// Lock-free and async-signal-safe.
    pub fn note_change(&self) {
        // Release: whoever reads the new count sees the change.
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// How many changes [`SiteTable::note_change`] recorded. Read before
    /// walking the table: a change made meanwhile moves it again.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Every published site.
    pub fn iter(&self) -> impl Iterator<Item = &Site> {
        self.segments().flat_map(|segment| {
            (0..segment.capacity())
                .map(move |i| segment.slot(i))
                .filter(|site| site.key.load(Ordering::Acquire) != EMPTY)
        })
    }
}

/// Serialises writers. Spins with `sched_yield`, then short sleeps: no
/// allocation and no futex, so it is usable from any context the
/// trampoline runs in. The sleeps matter to a `SCHED_FIFO` writer (a
/// control operation's scan, see `sys::sched`): its `sched_yield` never
/// lets a normal thread run on its CPU, and the holder may be one it
/// preempted there.
struct WriterLock<'a>(&'a AtomicBool);

/// `sched_yield`s before [`WriterLock::acquire`] sleeps between attempts.
const YIELDS_BEFORE_SLEEPING: u32 = 16;

impl<'a> WriterLock<'a> {
    fn acquire(flag: &'a AtomicBool) -> Self {
        let mut attempts = 0u32;
        // Acquire pairs with the Release in drop: the previous writer's slots
        // and `used` count are visible to the next writer.
        while flag
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if attempts < YIELDS_BEFORE_SLEEPING {
                attempts += 1;
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            } else {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000,
                };
                // SAFETY: `pause` is a valid timespec; no remainder wanted.
                unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
        }
        WriterLock(flag)
    }
}

impl Drop for WriterLock<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Looks for `return_address` in one segment and fills an empty slot for it
/// when the segment is less than three quarters full. `None`: go on to the
/// next segment. Caller holds the writer lock.
fn segment_find_or_insert<'a>(
    segment: &'a Segment,
    return_address: usize,
    new: &NewSite,
) -> Option<Inserted<'a>> {
    let mut index = hash(return_address);
    loop {
        let site = segment.slot(index);
        let key = site.key.load(Ordering::Relaxed);
        if key == return_address {
            return Some(Inserted::Existing(site));
        }
        if key != EMPTY {
            index += 1;
            continue;
        }
        // An empty slot ends the probe chain: the key is not in this segment.
        if segment.used.load(Ordering::Relaxed) * 4 >= segment.capacity() * 3 {
            return None;
        }
        segment.used.fetch_add(1, Ordering::Relaxed);
        site.addr.store(new.addr, Ordering::Relaxed);
        site.function.store(new.function, Ordering::Relaxed);
        site.original
            .store(u64::from_le_bytes(new.original), Ordering::Relaxed);
        site.flags.store(new_flags(new), Ordering::Relaxed);
        site.tracers.store(new.tracers, Ordering::Relaxed);
        // Release: the fields above are visible to whoever sees the key.
        site.key.store(return_address, Ordering::Release);
        return Some(Inserted::New(site));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_reviver_leaves_a_site_revived_and_written_since_alone() {
        let table = SiteTable::new();
        let ret = 0x30_0000;
        let Some(Inserted::New(site)) = table.insert(ret, &new_site(ret - 5)) else {
            panic!("a new entry");
        };
        site.unload();
        // The lazy hook finds the entry unloaded; before it revives it, a
        // control operation's scan does, and writes the site's NOP.
        let scanned = NewSite {
            extra_flags: flag::TEXT_IS_CALL,
            ..new_site(ret - 5)
        };
        assert!(site.revive(&scanned));
        site.set_flag(flag::TEXT_IS_CALL, false);
        // Then the lazy hook's revive: too late, it changes nothing.
        let lazy = NewSite {
            extra_flags: flag::LAZY | flag::TEXT_IS_CALL,
            tracers: 1,
            ..new_site(ret - 5)
        };
        assert!(!site.revive(&lazy));
        assert!(
            !site.has_flag(flag::TEXT_IS_CALL),
            "the NOP is what the text holds"
        );
        assert!(!site.has_flag(flag::LAZY));
        assert_eq!(site.tracers.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_entry_being_revived_is_not_revived_by_another_thread() {
        let table = SiteTable::new();
        let ret = 0x31_0000;
        let Some(Inserted::New(site)) = table.insert(ret, &new_site(ret - 5)) else {
            panic!("a new entry");
        };
        site.unload();
        site.set_flag(flag::REVIVING, true);
        let flags = site.flags.load(Ordering::Relaxed);
        assert!(!site.revive(&new_site(ret - 5)));
        assert_eq!(site.flags.load(Ordering::Relaxed), flags);
    }

    fn new_site(addr: usize) -> NewSite {
        NewSite {
            addr,
            function: addr - 4,
            form: Some(SiteForm::CallRel32),
            kind: SiteKind::Mcount,
            original: [0xe8, 1, 2, 3, 4, 0, 0, 0],
            extra_flags: 0,
            tracers: 0,
        }
    }

    #[test]
    fn inserts_finds_and_grows_past_the_first_segment() {
        let table = SiteTable::new();
        let count = FIRST_SEGMENT_SLOTS * 2;
        for i in 0..count {
            let ret = 0x10_0000 + i * 16;
            assert!(matches!(
                table.insert(ret, &new_site(ret - 5)),
                Some(Inserted::New(_))
            ));
        }
        for i in 0..count {
            let ret = 0x10_0000 + i * 16;
            let site = table.find(ret).expect("inserted site is found");
            assert_eq!(site.addr.load(Ordering::Relaxed), ret - 5);
            assert_eq!(site.form(), Some(SiteForm::CallRel32));
        }
        assert!(matches!(
            table.insert(0x10_0000, &new_site(0x10_0000 - 5)),
            Some(Inserted::Existing(_))
        ));
        assert_eq!(table.iter().count(), count);
        assert!(table.find(0x10_0008).is_none());
    }

    #[test]
    fn concurrent_inserts_of_the_same_keys_make_one_entry_each() {
        let table = SiteTable::new();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for i in 0..5_000usize {
                        let ret = 0x40_0000 + i * 8;
                        table.insert(ret, &new_site(ret - 5)).unwrap();
                    }
                });
            }
        });
        assert_eq!(table.iter().count(), 5_000);
    }
}
