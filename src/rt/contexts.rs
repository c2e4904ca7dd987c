//! Which stack a return-address slot lies on: the stacks programs give to
//! `makecontext`, remembered.
//!
//! The shadow stack tells frames of different stacks apart (see
//! `shadow/switch.rs`). Without more knowledge it goes by distance: slots
//! within [`OTHER_STACK_DISTANCE`] of each other are taken to share a
//! stack. Coroutine stacks often lie closer than that to the stack that
//! switches to them (`mmap`ed next to a thread's stack, or an array in a
//! frame of the thread's stack). So fntrace defines `makecontext` (the
//! definition in the executable takes precedence, as for the unwinder
//! wrappers): a stub notes the context's stack range, then jumps to
//! glibc's `makecontext` with every register and the stack as the caller
//! left them (it is variadic). Two slots are on the same stack when the
//! same noted range holds both, or none does and they are near.
//!
//! At most [`MAX_CONTEXT_STACKS`] ranges are kept (a range noted again is
//! not added twice); beyond, new coroutine stacks go by distance. Ranges
//! are never forgotten: memory that held a coroutine stack and later holds
//! another stack is still one stack.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Slots this far apart, neither on a noted context stack, are taken to be
/// on different stacks (a signal handler on `sigaltstack`, a coroutine).
pub(crate) const OTHER_STACK_DISTANCE: usize = 64 << 20;

/// Context stacks remembered at most.
pub(crate) const MAX_CONTEXT_STACKS: usize = 256;

/// Noted ranges: `[start, end)` pairs, as many as [`published`] says.
static STARTS: [AtomicUsize; MAX_CONTEXT_STACKS] =
    [const { AtomicUsize::new(0) }; MAX_CONTEXT_STACKS];
static ENDS: [AtomicUsize; MAX_CONTEXT_STACKS] =
    [const { AtomicUsize::new(0) }; MAX_CONTEXT_STACKS];

extern "C" {
    /// How many ranges are published (asm/x86_64/entry.S: the graph
    /// tracer's fast entry reads it too).
    static fntrace_context_stacks: AtomicUsize;
}

/// The published count of noted ranges.
#[inline]
fn published() -> &'static AtomicUsize {
    // SAFETY: a plain atomic defined in entry.S, valid for the process.
    unsafe { &fntrace_context_stacks }
}
/// Serialises writers (`makecontext` callers); readers need no lock.
static WRITER: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
/// glibc's `makecontext`, where the stub jumps.
static REAL_MAKECONTEXT: AtomicUsize = AtomicUsize::new(0);

// The stub. At entry: rdi = ucp, rsi = func, edx = argc, then the
// variadic arguments in rcx, r8, r9 and on the stack; al = number of
// vector registers used. All are saved around the call and restored; the
// stack is as the caller left it when the real function starts. Seven
// pushes align the call: %rsp is 8 mod 16 at entry, 56 bytes lower is 0.
std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl makecontext",
    ".type makecontext, @function",
    "makecontext:",
    ".cfi_startproc",
    "push rdi",
    ".cfi_adjust_cfa_offset 8",
    "push rsi",
    ".cfi_adjust_cfa_offset 8",
    "push rdx",
    ".cfi_adjust_cfa_offset 8",
    "push rcx",
    ".cfi_adjust_cfa_offset 8",
    "push r8",
    ".cfi_adjust_cfa_offset 8",
    "push r9",
    ".cfi_adjust_cfa_offset 8",
    "push rax",
    ".cfi_adjust_cfa_offset 8",
    "call {note}",
    "pop rax",
    ".cfi_adjust_cfa_offset -8",
    "pop r9",
    ".cfi_adjust_cfa_offset -8",
    "pop r8",
    ".cfi_adjust_cfa_offset -8",
    "pop rcx",
    ".cfi_adjust_cfa_offset -8",
    "pop rdx",
    ".cfi_adjust_cfa_offset -8",
    "pop rsi",
    ".cfi_adjust_cfa_offset -8",
    "pop rdi",
    ".cfi_adjust_cfa_offset -8",
    "jmp qword ptr [rip + {real}]",
    ".cfi_endproc",
    ".size makecontext, . - makecontext",
    note = sym note_context,
    real = sym REAL_MAKECONTEXT,
);

/// Called by the stub: notes `ucp`'s stack and makes sure the real
/// `makecontext` is known. Not on the traced path (the program calls
/// `makecontext` from ordinary code).
extern "C" fn note_context(ucp: *const libc::ucontext_t) {
    let _errno = super::thread::PreservedErrno::save();
    if REAL_MAKECONTEXT.load(Ordering::Relaxed) == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"makecontext".as_ptr()) } as usize;
        if real == 0 {
            let msg = b"fntrace: the real makecontext is missing\n";
            // SAFETY: write(2) of a static buffer; abort has no preconditions.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::abort();
            }
        }
        REAL_MAKECONTEXT.store(real, Ordering::Relaxed);
    }
    if ucp.is_null() {
        return;
    }
    // SAFETY: the caller passes the context makecontext is about to set up,
    // whose uc_stack it must have filled in.
    let stack = unsafe { (*ucp).uc_stack };
    let start = stack.ss_sp as usize;
    let Some(end) = start.checked_add(stack.ss_size) else {
        return;
    };
    if start == 0 || end == start {
        return;
    }
    let _writer = WRITER.lock();
    let count = published().load(Ordering::Relaxed);
    let known = (0..count).any(|i| {
        STARTS[i].load(Ordering::Relaxed) == start && ENDS[i].load(Ordering::Relaxed) == end
    });
    if known || count == MAX_CONTEXT_STACKS {
        return;
    }
    STARTS[count].store(start, Ordering::Relaxed);
    ENDS[count].store(end, Ordering::Relaxed);
    // Release: the range is complete before readers count it.
    published().store(count + 1, Ordering::Release);
}

/// The noted context stack holding `slot`, if any (its index).
#[inline]
fn context_stack_of(slot: usize) -> Option<usize> {
    // Acquire pairs with the Release in note_context.
    let count = published().load(Ordering::Acquire);
    (0..count).find(|&i| {
        slot >= STARTS[i].load(Ordering::Relaxed) && slot < ENDS[i].load(Ordering::Relaxed)
    })
}

/// Slots around `slot` that all lie on its stack by [`same_stack`]'s
/// rules (its noted context stack; else no noted stack and within half
/// [`OTHER_STACK_DISTANCE`] of `slot`), as `[low, high)`, with the number
/// of noted stacks it was found with: the answer holds until that number
/// changes.
pub(crate) fn one_stack_around(slot: usize) -> (usize, usize, usize) {
    // Acquire pairs with the Release in note_context.
    let count = published().load(Ordering::Acquire);
    let ranges = (0..count).map(|i| {
        (
            STARTS[i].load(Ordering::Relaxed),
            ENDS[i].load(Ordering::Relaxed),
        )
    });
    // Its own noted stack (the first that holds it, as `context_stack_of`
    // finds), less any other noted stack (which may overlap it).
    let half = OTHER_STACK_DISTANCE / 2;
    let (mut low, mut high) = ranges
        .clone()
        .find(|(start, end)| (start..end).contains(&&slot))
        .unwrap_or((slot.saturating_sub(half), slot.saturating_add(half)));
    for (start, end) in ranges {
        if end <= slot {
            low = low.max(end);
        } else if start > slot {
            high = high.min(start);
        }
    }
    (low, high, count)
}

/// Whether slots `a` and `b` lie on the same stack.
#[inline]
pub(crate) fn same_stack(a: usize, b: usize) -> bool {
    if published().load(Ordering::Relaxed) == 0 {
        return a.abs_diff(b) <= OTHER_STACK_DISTANCE;
    }
    match (context_stack_of(a), context_stack_of(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a.abs_diff(b) <= OTHER_STACK_DISTANCE,
        _ => false,
    }
}

/// Makes sure the linker keeps the stub (a reference from `init` pulls this
/// object in) and resolves the real function ahead of need.
pub(crate) fn prepare() -> usize {
    note_context(std::ptr::null());
    REAL_MAKECONTEXT.load(Ordering::Relaxed)
}
