//! The SIGTRAP side of the breakpoint protocol: the table of the batch in
//! flight, published for the handler, and the handler, which runs the
//! instruction being installed on behalf of a thread that hit one of our
//! `int3`s.
//!
//! # The handler
//! A thread that executes an `int3` (`0xcc`) gets SIGTRAP with `si_code`
//! `SI_KERNEL` and RIP just past it, so the site is at RIP - 1.
//! 1. The site is in the published table: emulate what the batch installs
//!    there ([`Instruction`]). A NOP: RIP past the instruction. A call:
//!    push the return address (site + length) on the interrupted stack and
//!    set RIP to the target (read from the pointer slot for `ff 15`).
//!    Writing below the interrupted RSP is safe at a call site: the call
//!    itself would write there, so the compiler keeps no red-zone data live
//!    across it.
//! 2. Not in the table, but RIP - 1 lies within the sites ever patched and
//!    no longer holds `0xcc` but the first byte of a site instruction: the
//!    thread trapped on an `int3` of a batch that finished (and whose table
//!    was withdrawn) before its handler ran, e.g. because it was preempted
//!    in between. The instruction there now is whole: resume at it.
//! 3. Otherwise the trap is not ours (a program's own `int3`, a SIGTRAP
//!    sent with `kill`): pass it to the disposition that was installed
//!    before ours: call its handler, or, if it was the default action,
//!    restore the default and raise the signal again (the default action
//!    then runs as the handler returns).
//!
//! Case 1 is written in assembly ([`HANDLER_ASM`]) because the handler
//! must never execute a site itself: with the whole program built with
//! `-Zinstrument-mcount`, fntrace's own Rust functions have mcount sites
//! too (NOPed at `init`, by a batch like any other), and a trap inside the
//! handler while SIGTRAP is blocked kills the process. Assembly has no
//! site. Cases 2 and 3 are Rust, entered with SIGTRAP unblocked
//! (`SA_NODEFER`), so a trap on a site in them is handled by the assembly
//! again. All of it is async-signal-safe: loads, stores, atomics; no
//! allocation, no lock.
//!
//! # Table lifetime
//! The patcher publishes a table (sorted by address, never changed while
//! published) before writing the first `int3`, and withdraws it after the
//! last serialization. The handler counts itself in [`HANDLERS_RUNNING`]
//! (`lock inc`, a full barrier) before loading the table pointer, and the
//! patcher, after storing null (SeqCst), frees the table only once that
//! count is zero: a handler either is counted when the patcher looks, or
//! loads null or a later table. A table whose handlers linger (a thread
//! preempted inside the handler) is kept and freed by a later batch.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crate::error::Error;
use crate::patch::{Instruction, TextWrite};
use crate::sys::{last_errno, set_errno, signal};

/// The byte written first at every site of a batch.
pub(super) const INT3: u8 = 0xcc;

/// The first bytes of the instructions a site holds between batches
/// (NOP5, NOP6, `e8`, `67 e8`, `ff 15`, `e9`, `2e e9`).
const SITE_FIRST_BYTES: [u8; 7] = [0x0f, 0x66, 0xe8, 0x67, 0xff, 0xe9, 0x2e];

/// What [`TrapSite::kind`] holds.
const KIND_NOP: usize = 0;
const KIND_CALL: usize = 1;
const KIND_CALL_INDIRECT: usize = 2;
const KIND_JUMP: usize = 3;

/// One site of the batch in flight, as the assembly reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(super) struct TrapSite {
    /// First byte of the instruction (where the `int3` is).
    addr: usize,
    /// Its length.
    len: usize,
    /// `KIND_NOP`, `KIND_CALL`, `KIND_CALL_INDIRECT` or `KIND_JUMP`.
    kind: usize,
    /// The call's or jump's target, or the pointer slot an indirect call
    /// reads.
    target: usize,
}

impl TrapSite {
    /// What the handler needs of `write`.
    fn of(write: &TextWrite) -> TrapSite {
        let (kind, target) = match write.installs() {
            Instruction::Nop => (KIND_NOP, 0),
            Instruction::Call { target } => (KIND_CALL, target),
            Instruction::CallIndirect { slot } => (KIND_CALL_INDIRECT, slot),
            Instruction::Jump { target } => (KIND_JUMP, target),
        };
        TrapSite {
            addr: write.addr(),
            len: write.len(),
            kind,
            target,
        }
    }
}

/// The sites of one batch, sorted by address, as the assembly reads them
/// (`sites` and `len`).
#[repr(C)]
pub(super) struct TrapTable {
    sites: *const TrapSite,
    len: usize,
    /// The capacity of the vector `sites` came from.
    capacity: usize,
}

// What the assembly assumes about the layouts it reads.
const _: () = {
    assert!(std::mem::size_of::<TrapSite>() == 32);
    assert!(std::mem::offset_of!(TrapSite, len) == 8);
    assert!(std::mem::offset_of!(TrapSite, kind) == 16);
    assert!(std::mem::offset_of!(TrapSite, target) == 24);
    assert!(std::mem::offset_of!(TrapTable, len) == 8);
    assert!(std::mem::offset_of!(libc::siginfo_t, si_code) == 8);
    assert!(std::mem::offset_of!(libc::ucontext_t, uc_mcontext) == 40);
    assert!(libc::REG_RSP == 15 && libc::REG_RIP == 16);
};

impl TrapTable {
    /// The table of `memory`'s sites.
    fn from_sites(memory: Vec<TrapSite>) -> TrapTable {
        debug_assert!(memory.is_sorted_by_key(|site| site.addr));
        let mut sites = std::mem::ManuallyDrop::new(memory);
        TrapTable {
            sites: sites.as_mut_ptr(),
            len: sites.len(),
            capacity: sites.capacity(),
        }
    }

    /// The table of `writes`, which are in address order with distinct
    /// addresses (as `validate` checked), built in `memory` (a vector
    /// [`Lingering::try_free`] gave back, or a new one), calling `check`
    /// on each write first (one walk of the batch for both). Owns its
    /// sites until [`TrapTable::free`]. On `check`'s first error, no table
    /// (and `memory` is dropped: the next batch allocates anew).
    pub(super) fn of_checked(
        writes: &[TextWrite],
        mut memory: Vec<TrapSite>,
        mut check: impl FnMut(&TextWrite) -> Result<(), Error>,
    ) -> Result<TrapTable, Error> {
        memory.clear();
        for write in writes {
            check(write)?;
            memory.push(TrapSite::of(write));
        }
        Ok(TrapTable::from_sites(memory))
    }

    /// The sites.
    fn sites(&self) -> &[TrapSite] {
        // SAFETY: `sites` and `len` come from a vector taken apart in `of`
        // and put back together only by `free`, which consumes the table.
        unsafe { std::slice::from_raw_parts(self.sites, self.len) }
    }

    /// Gives back the sites' memory.
    pub(super) fn free(self) -> Vec<TrapSite> {
        // SAFETY: the parts of the vector taken apart in `of`, put back
        // once (this consumes the table).
        unsafe { Vec::from_raw_parts(self.sites.cast_mut(), self.len, self.capacity) }
    }

    /// First and one-past-last byte of the table's sites.
    fn bounds(&self) -> Option<(usize, usize)> {
        let first = self.sites().first()?;
        let last = self.sites().last()?;
        Some((first.addr, last.addr + last.len))
    }
}

/// The table of the batch in flight (null between batches).
static TABLE: AtomicPtr<TrapTable> = AtomicPtr::new(std::ptr::null_mut());
/// Handlers between counting themselves and their last use of a table.
static HANDLERS_RUNNING: AtomicU32 = AtomicU32::new(0);
/// Lowest and one-past-highest address of any site ever in a table (for
/// case 2 of the handler).
static PATCHED_LOW: AtomicUsize = AtomicUsize::new(usize::MAX);
static PATCHED_HIGH: AtomicUsize = AtomicUsize::new(0);
/// The disposition ours replaced: handler address and `SA_SIGINFO`.
static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_SIGINFO: AtomicBool = AtomicBool::new(false);

// The handler's case 1; anything else tail-jumps to `on_other_trap` with
// the arguments untouched.
//
// Arguments (SysV, an SA_SIGINFO handler): edi = signo, rsi = siginfo_t*,
// rdx = ucontext_t*. The interrupted RSP and RIP are gregs[15] and
// gregs[16] of the ucontext: offsets 40 + 8 * 15 = 160 and 168. Clobbers
// only caller-saved registers (rax, rcx, r8-r11); no stack use.
std::arch::global_asm!(
    ".pushsection .text.fntrace_bp_on_sigtrap,\"ax\",@progbits",
    ".globl fntrace_bp_on_sigtrap",
    ".hidden fntrace_bp_on_sigtrap",
    ".type fntrace_bp_on_sigtrap,@function",
    ".p2align 4",
    "fntrace_bp_on_sigtrap:",
    ".cfi_startproc",
    "cmpl $0x80, 8(%rsi)",          // si_code == SI_KERNEL (an int3)?
    "jne 9f",
    "movq 168(%rdx), %r8",
    "decq %r8",                     // r8 = site = RIP - 1
    "lock incl {running}(%rip)",    // counted before the table load
    "movq {table}(%rip), %r9",
    "testq %r9, %r9",
    "jz 8f",
    "movq (%r9), %r10",             // r10 = sites
    "movq 8(%r9), %r11",            // r11 = hi = len
    "xorl %ecx, %ecx",              // rcx = lo = 0
    "1:",
    "cmpq %r11, %rcx",
    "jae 8f",                       // lo == hi: not in the table
    "leaq (%rcx,%r11), %rax",
    "shrq $1, %rax",                // rax = mid
    "movq %rax, %r9",
    "shlq $5, %r9",
    "addq %r10, %r9",               // r9 = &sites[mid]
    "cmpq (%r9), %r8",
    "je 2f",
    "jb 3f",
    "leaq 1(%rax), %rcx",           // site above: lo = mid + 1
    "jmp 1b",
    "3:",
    "movq %rax, %r11",              // site below: hi = mid
    "jmp 1b",
    "2:",                           // found: r9 = entry
    "movq 8(%r9), %rax",
    "addq %r8, %rax",               // rax = site + len (return address)
    "movq 16(%r9), %rcx",           // rcx = kind
    "movq 24(%r9), %r11",           // r11 = target or slot
    "lock decl {running}(%rip)",    // done with the table
    "testq %rcx, %rcx",
    "jnz 4f",
    "movq %rax, 168(%rdx)",         // NOP: resume after it
    "ret",
    "4:",
    "cmpq $3, %rcx",
    "jne 6f",
    "movq %r11, 168(%rdx)",         // jmp: RIP at the target, no push
    "ret",
    "6:",
    "cmpq $2, %rcx",
    "jne 5f",
    "movq (%r11), %r11",            // ff 15: the target is in the slot
    "5:",
    "movq 160(%rdx), %rcx",
    "subq $8, %rcx",
    "movq %rax, (%rcx)",            // push the return address
    "movq %rcx, 160(%rdx)",
    "movq %r11, 168(%rdx)",         // and jump to the target
    "ret",
    "8:",
    "lock decl {running}(%rip)",
    "9:",
    "jmp {other}",
    ".cfi_endproc",
    ".size fntrace_bp_on_sigtrap, . - fntrace_bp_on_sigtrap",
    ".popsection",
    running = sym HANDLERS_RUNNING,
    table = sym TABLE,
    other = sym on_other_trap,
    options(att_syntax),
);

extern "C" {
    /// The SIGTRAP handler (assembly above).
    fn fntrace_bp_on_sigtrap(signo: i32, info: *mut libc::siginfo_t, context: *mut c_void);
}

/// The handler as `sigaction` takes it.
fn handler() -> signal::SigInfoHandler {
    let handler: unsafe extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
        fntrace_bp_on_sigtrap;
    // SAFETY: the same function pointer, only without `unsafe`: the kernel
    // calls it with the arguments of an SA_SIGINFO handler, which is all it
    // requires.
    unsafe { std::mem::transmute(handler) }
}

/// Makes our handler SIGTRAP's disposition, remembering the one it
/// replaces (checked on every batch: a program that installed its own
/// handler since gets it chained behind ours).
pub(super) fn install_handler() -> Result<(), Error> {
    let failed = |source| Error::Signal {
        what: "installing the SIGTRAP handler of the breakpoint protocol",
        source,
    };
    let ours = handler();
    let current = signal::disposition(libc::SIGTRAP).map_err(failed)?;
    if current.is(ours) {
        return Ok(());
    }
    // Record the program's disposition before ours can run.
    PREVIOUS_HANDLER.store(current.handler, Ordering::SeqCst);
    PREVIOUS_SIGINFO.store(current.siginfo, Ordering::SeqCst);
    let replaced = signal::replace(libc::SIGTRAP, ours, libc::SA_NODEFER).map_err(failed)?;
    if replaced != current && !replaced.is(ours) {
        // Changed between the query and the replacement: chain that one.
        PREVIOUS_HANDLER.store(replaced.handler, Ordering::SeqCst);
        PREVIOUS_SIGINFO.store(replaced.siginfo, Ordering::SeqCst);
    }
    Ok(())
}

/// A published table; withdraw it with [`Published::withdraw`].
pub(super) struct Published {
    table: *mut TrapTable,
}

/// Publishes `table` for the handler. The caller holds the protocol's
/// lock, so no other table is published.
pub(super) fn publish(table: TrapTable) -> Published {
    if let Some((low, high)) = table.bounds() {
        PATCHED_LOW.fetch_min(low, Ordering::SeqCst);
        PATCHED_HIGH.fetch_max(high, Ordering::SeqCst);
    }
    let table = Box::into_raw(Box::new(table));
    // SeqCst: before any `int3` of the batch is written (the writes are
    // system calls that follow in program order), and after the bounds.
    TABLE.store(table, Ordering::SeqCst);
    Published { table }
}

impl Published {
    /// Withdraws the table: handlers that start from now on do not see it.
    pub(super) fn withdraw(self) -> Lingering {
        TABLE.store(std::ptr::null_mut(), Ordering::SeqCst);
        Lingering { table: self.table }
    }
}

/// A withdrawn table, freed once no handler runs.
pub(super) struct Lingering {
    table: *mut TrapTable,
}

// SAFETY: the pointer is owned (from `Box::into_raw`) and only freed by
// `try_free`, by whichever thread holds the protocol's lock.
unsafe impl Send for Lingering {}

impl Lingering {
    /// Frees the table if no handler is running, giving back its sites'
    /// memory for the next table; else gives the table back (to try again
    /// at the next batch). Never waits: with more busy threads than cores,
    /// one `sched_yield` can cost the patcher a whole round of time slices
    /// (measured: 34 ms instead of 2 ms per enable of 10,000 sites with 16
    /// busy threads when this yielded until the count was 0).
    pub(super) fn try_free(self) -> Result<Vec<TrapSite>, Lingering> {
        // SeqCst: pairs with the handler's `lock inc` before its table load
        // (see the module documentation).
        if HANDLERS_RUNNING.load(Ordering::SeqCst) != 0 {
            return Err(self);
        }
        // SAFETY: withdrawn (no new handler can load it), and no handler is
        // between its count and its last use of it.
        let table = unsafe { Box::from_raw(self.table) };
        Ok(table.free())
    }
}

/// Cases 2 and 3 (the assembly found no site of the batch in flight).
extern "C" fn on_other_trap(signo: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let code = unsafe { info.as_ref() }.map_or(0, |info| info.si_code);
    // SAFETY: and a valid ucontext_t, ours to change for the duration of
    // the handler (it becomes the thread's state when the handler returns).
    let context_ref = unsafe { context.cast::<libc::ucontext_t>().as_mut() };
    if let (libc::SI_KERNEL, Some(context)) = (code, context_ref) {
        if resume_after_finished_batch(context) {
            return;
        }
    }
    pass_on(signo, code, info, context);
}

/// Case 2; `false` when the trap is not ours.
fn resume_after_finished_batch(context: &mut libc::ucontext_t) -> bool {
    let Some(rip) = context.uc_mcontext.gregs.get_mut(libc::REG_RIP as usize) else {
        return false;
    };
    let Some(site) = (*rip as usize).checked_sub(1) else {
        return false;
    };
    let ever_patched =
        PATCHED_LOW.load(Ordering::SeqCst) <= site && site < PATCHED_HIGH.load(Ordering::SeqCst);
    if !ever_patched {
        return false;
    }
    // SAFETY: the thread just executed an instruction at `site` (the int3
    // that trapped), so the byte is mapped and readable (x86 has no
    // execute-only pages without protection keys).
    let now = unsafe { std::ptr::read_volatile(site as *const u8) };
    if now == INT3 || !SITE_FIRST_BYTES.contains(&now) {
        return false;
    }
    *rip = site as i64;
    true
}

/// Case 3: the disposition that was there before ours handles the signal.
fn pass_on(signo: i32, code: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    let handler = PREVIOUS_HANDLER.load(Ordering::SeqCst);
    let siginfo = PREVIOUS_SIGINFO.load(Ordering::SeqCst);
    match handler {
        // An ignored SIGTRAP sent by someone stays ignored; a trap the
        // kernel raised would have had its default action forced.
        libc::SIG_IGN if code != libc::SI_KERNEL => {}
        libc::SIG_DFL | libc::SIG_IGN => {
            // The default action (terminate with a core dump) runs as the
            // raised signal is delivered once this handler returns.
            let errno = last_errno();
            signal::reset_to_default(signo);
            // SAFETY: raise is async-signal-safe and takes a signal number.
            unsafe { libc::raise(signo) };
            set_errno(errno);
        }
        handler if siginfo => {
            // SAFETY: the program installed this address as an SA_SIGINFO
            // handler for SIGTRAP; it gets the arguments the kernel gave us.
            let handler: signal::SigInfoHandler = unsafe { std::mem::transmute(handler) };
            handler(signo, info, context);
        }
        handler => {
            // SAFETY: the program installed this address as a plain
            // handler for SIGTRAP.
            let handler: extern "C" fn(i32) = unsafe { std::mem::transmute(handler) };
            handler(signo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_keeps_what_each_write_installs_and_gives_its_memory_back() {
        use crate::arch::x86_64::NOP5;
        let call = [0xe8, 0x0b, 0, 0, 0];
        let writes = [
            TextWrite::new(0x4000, &NOP5, &call).unwrap(),
            TextWrite::new(0x5000, &call, &NOP5).unwrap(),
        ];
        let memory = TrapTable::of_checked(&writes, Vec::new(), |_| Ok(()))
            .unwrap()
            .free();
        assert_eq!(memory.len(), 2);
        let reused = memory.as_ptr();
        let table = TrapTable::of_checked(&writes, memory, |_| Ok(())).unwrap();
        assert_eq!(table.sites, reused);
        let sites: Vec<_> = table
            .sites()
            .iter()
            .map(|s| (s.addr, s.kind, s.target))
            .collect();
        assert_eq!(
            sites,
            [(0x4000, KIND_CALL, 0x4000 + 16), (0x5000, KIND_NOP, 0)]
        );
        assert_eq!(table.bounds(), Some((0x4000, 0x5005)));
        let memory = table.free();
        assert_eq!(memory.as_ptr(), reused);
    }

    /// Fake text: five "sites" 8 bytes apart (only the fourth is read).
    static FAKE_TEXT: [u8; 40] = {
        let mut text = [0xcc; 40];
        text[24] = 0x0f; // a finished batch left NOP5 at the fourth
        text
    };
    /// The pointer slot of the fake `ff 15` site.
    static SLOT: usize = 0xabc_def0;

    /// Runs the handler as the kernel would for an `int3` at `site`, with
    /// the interrupted stack pointer at `rsp`; returns (RIP, RSP).
    fn trap_at(site: usize, rsp: usize) -> (usize, usize) {
        // SAFETY: all-zero siginfo and ucontext are valid values to fill.
        let (mut info, mut context): (libc::siginfo_t, libc::ucontext_t) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        info.si_signo = libc::SIGTRAP;
        info.si_code = libc::SI_KERNEL;
        context.uc_mcontext.gregs[libc::REG_RIP as usize] = (site + 1) as i64;
        context.uc_mcontext.gregs[libc::REG_RSP as usize] = rsp as i64;
        // SAFETY: the handler's arguments, as an SA_SIGINFO handler gets
        // them; it writes only the context and 8 bytes below `rsp`.
        unsafe {
            fntrace_bp_on_sigtrap(
                libc::SIGTRAP,
                &mut info,
                (&mut context as *mut libc::ucontext_t).cast(),
            )
        };
        let gregs = &context.uc_mcontext.gregs;
        (
            gregs[libc::REG_RIP as usize] as usize,
            gregs[libc::REG_RSP as usize] as usize,
        )
    }

    #[test]
    fn the_handler_emulates_each_instruction_and_resumes_after_a_finished_batch() {
        use crate::patch::breakpoint::BREAKPOINT;
        // No real batch publishes a table meanwhile.
        let _batch = BREAKPOINT.lock.lock();
        let base = FAKE_TEXT.as_ptr() as usize;
        let site = |addr, len, kind, target| TrapSite {
            addr,
            len,
            kind,
            target,
        };
        let sites = vec![
            site(base, 5, KIND_NOP, 0),
            site(base + 8, 5, KIND_CALL, 0x1234_5678),
            site(
                base + 16,
                6,
                KIND_CALL_INDIRECT,
                &SLOT as *const usize as usize,
            ),
            site(base + 32, 6, KIND_JUMP, 0x2345_6789),
        ]
        .into_boxed_slice();
        let len = sites.len();
        let table = TrapTable {
            sites: Box::into_raw(sites) as *const TrapSite,
            len,
            capacity: len,
        };
        // Covers the fourth site too, as an earlier batch would have.
        PATCHED_HIGH.fetch_max(base + 40, Ordering::SeqCst);
        let published = publish(table);

        let mut stack = [0usize; 8];
        let rsp = stack.as_mut_ptr() as usize + 32;
        // NOP: past it, stack untouched.
        assert_eq!(trap_at(base, rsp), (base + 5, rsp));
        // Call: return address pushed, RIP at the target.
        assert_eq!(trap_at(base + 8, rsp), (0x1234_5678, rsp - 8));
        assert_eq!(stack[3], base + 8 + 5);
        // ff 15: the target read from the slot.
        assert_eq!(trap_at(base + 16, rsp), (SLOT, rsp - 8));
        assert_eq!(stack[3], base + 16 + 6);
        // Not in the table, but a finished batch's site: run it again.
        assert_eq!(trap_at(base + 24, rsp), (base + 24, rsp));
        // A jump to a return stub: RIP at the target, nothing pushed.
        stack[3] = 0;
        assert_eq!(trap_at(base + 32, rsp), (0x2345_6789, rsp));
        assert_eq!(stack, [0; 8]);

        let lingering = published.withdraw();
        assert_eq!(lingering.try_free().ok().map(|sites| sites.len()), Some(4));
        assert_eq!(HANDLERS_RUNNING.load(Ordering::SeqCst), 0);
    }
}
