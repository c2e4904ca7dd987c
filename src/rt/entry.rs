//! The Rust side of the entry trampolines (`asm/x86_64/entry.S`).
//!
//! The trampoline has already saved the caller's registers and set the
//! thread's recursion guard, so nothing called from here is traced. The fast
//! path is one lock-free table probe and one mask test; dispatch to tracers
//! is out of line.

use std::sync::atomic::Ordering;

use crate::arch::x86_64::SavedRegs;
use crate::sites::{self, SiteKind, SITES};
use crate::sys::clock;
use crate::tracer::{self, Call, Return};

use super::shadow::{self, return_trampoline, Frame, Gone, ShadowStack, Toward};
use super::thread::{thread_block, PreservedErrno};

/// Entry from `mcount` (site after the prologue).
///
/// # Safety
/// Called only by the `mcount` trampoline, with the arguments it documents.
#[no_mangle]
pub unsafe extern "C" fn fntrace_mcount_entry(
    site_return: usize,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
) {
    // SAFETY: forwarded from the trampoline's contract.
    unsafe { on_entry(site_return, parent_slot, regs, SiteKind::Mcount) }
}

/// Entry from `__fentry__` (site at the function's first byte).
///
/// # Safety
/// Called only by the `__fentry__` trampoline, with the arguments it documents.
#[no_mangle]
pub unsafe extern "C" fn fntrace_fentry_entry(
    site_return: usize,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
) {
    // SAFETY: forwarded from the trampoline's contract.
    unsafe { on_entry(site_return, parent_slot, regs, SiteKind::Fentry) }
}

/// # Safety
/// `parent_slot` points at the traced function's return address and `regs`
/// at the trampoline's save area, both valid for this call.
#[inline(always)]
unsafe fn on_entry(
    site_return: usize,
    parent_slot: *mut usize,
    regs: *mut SavedRegs,
    kind: SiteKind,
) {
    let block = thread_block();
    block
        .generic_entries
        .set(block.generic_entries.get().wrapping_add(1));
    let mut site = SITES.find(site_return);
    let mut wanted = site.map_or(0, |site| {
        site.tracers.load(Ordering::Relaxed) & tracer::enabled_mask()
    });
    if wanted == 0 {
        // Unknown, or the key of a site whose object was unloaded (this is
        // another object's site at the same address): recorded (described
        // anew), and selected by the tracers enabled for every function (a
        // library opened while tracing); else the next control operation
        // writes its NOP (the traced path never patches text).
        if site.is_none_or(|site| site.has_flag(sites::flag::UNLOADED)) {
            let _errno = PreservedErrno::save();
            site = sites::on_unknown_site(site_return, kind);
            wanted = site.map_or(0, |site| {
                site.tracers.load(Ordering::Relaxed) & tracer::enabled_mask()
            });
        }
        if wanted == 0 {
            return;
        }
    }
    if let Some(site) = site {
        // SAFETY: forwarded from this function's contract.
        unsafe { dispatch(site, wanted, parent_slot, regs) };
    }
}

/// Calls the tracers in `wanted` for an entry, hooking the exit when one of
/// them wants it.
///
/// errno: the traced code must not see tracers' errno: tracers run under
/// [`for_each_tracer`], which saves it.
#[inline]
unsafe fn dispatch(site: &sites::Site, wanted: u64, parent_slot: *mut usize, regs: *mut SavedRegs) {
    let now = clock::now_ticks();
    let function = site.function.load(Ordering::Relaxed);
    // A nested function's fentry call has `push %r10` before it: the
    // trampoline's slot holds the saved r10, the return address is above.
    let parent_slot = if site.has_flag(sites::flag::R10_SAVED) {
        parent_slot.wrapping_add(1)
    } else {
        parent_slot
    };
    let site_return = site.return_address();
    let slot = parent_slot as usize;
    let exit_tracers = wanted & tracer::exit_mask();
    // A call that returns twice (`setjmp`: again when `longjmp` comes
    // back to it) is reported whole here, and its return left alone:
    // hooked, the return address `setjmp` saves would be the trampoline's,
    // with no frame for the second return.
    let returns_twice = site.has_flag(sites::flag::RETURNS_TWICE);
    let with_args = site.has_flag(sites::flag::WITH_ARGS);
    // SAFETY: the trampoline passes the slot holding the traced function's
    // return address, on this thread's stack.
    let real_return = unsafe { *parent_slot };
    // A tail call (`jmp` to this function from a hooked caller, whose frame
    // it reuses) finds the trampoline in its slot, and the caller's frame,
    // with that slot, on top of the stack: the caller stays, and this call
    // nests in it, as the source reads (and as uftrace shows it). Its frame
    // shares the slot and returns to the trampoline again, which then ends
    // the caller. Other frames at or below this slot are gone (longjmp).
    // They are popped one per borrow of the stack, and reported with the
    // stack released (reporting runs tracer code, which must not find it in
    // use); once none is left, the same borrow pushes this call's frame.
    // A thread back on a stack it left parks the other stack's frames first.
    //
    // What the push found goes out through these locals, each stored and
    // loaded at its own width: returning it as a tuple inside the nested
    // `Option<Result<..>>` had it copied as words over a byte store (the
    // `bool`), a failed store-to-load forwarding that cost ≈ 5 % of a
    // profiled call.
    let frame = Frame {
        slot,
        real_return,
        site: site_return,
        entry_ticks: now,
        exit_tracers,
        // Its exit takes the slow path, which reads the return value.
        marks: if with_args { shadow::ARGS_MARK } else { 0 },
        hook: return_trampoline(),
        kept: 0,
    };
    let mut depth = 0usize;
    let mut hooked = false;
    let mut tail_called_by: Option<usize> = None;
    let mut step = |stack: &mut ShadowStack| -> Option<Gone> {
        stack.leave_other_stacks(slot);
        let caller = stack
            .frames()
            .last()
            .filter(|top| top.slot == slot && top.hook == real_return)
            .map(|caller| caller.real_return);
        if caller.is_none() {
            if let Some(gone) = stack.pop_dead_below(slot) {
                return Some(gone);
            }
        }
        depth = stack.depth();
        tail_called_by = caller;
        hooked = exit_tracers != 0 && !returns_twice && stack.push(frame);
        None
    };
    let mut outcome = if exit_tracers != 0 {
        shadow::with_stack_or_create(&mut step)
    } else {
        shadow::with_stack(&mut step)
    };
    while let Some(Some(gone)) = outcome {
        report_gone(&gone, now);
        outcome = shadow::with_stack(&mut step);
    }
    // SAFETY: as above; the slot is written on this thread only.
    unsafe {
        if hooked {
            *parent_slot = return_trampoline();
        }
    }
    if hooked {
        // Where the fast entry may trust that the top frame (this one) and
        // a new call lie on one stack.
        let (low, high, contexts) = super::contexts::one_stack_around(slot);
        let block = thread_block();
        block.stack_low.set(low);
        block.stack_high.set(high);
        block.stack_contexts.set(contexts);
    }
    // The caller's caller, for a tail call (the slot holds the trampoline).
    let real_return = tail_called_by.unwrap_or(real_return);
    let kept = std::cell::Cell::new(0);
    let call = Call {
        function,
        parent: real_return,
        site_return,
        depth,
        time_ticks: now,
        // A call that returns twice has its exit reported below.
        exit_hooked: hooked || (returns_twice && exit_tracers != 0),
        kept: &kept,
        with_args,
        // SAFETY: the save area lives on the trampoline's frame for this call.
        regs: unsafe { &*regs },
    };
    for_each_tracer(wanted, |tracer| tracer.entry(&call));
    if hooked && kept.get() != 0 {
        // Still the top frame: tracers' own calls are not traced.
        shadow::with_stack(|stack| {
            if let Some(top) = stack.frames().last_mut().filter(|top| top.slot == slot) {
                top.kept = kept.get();
            }
        });
    }
    if returns_twice {
        // Its exit when the entry's recording is done: a duration of
        // fntrace's own work (tens of nanoseconds, as long as `setjmp`
        // itself takes), not none, which uftrace's report shows blank.
        report_exit(&frame, depth, clock::now_ticks(), false, None);
    }
}

/// Runs `f` for each tracer in `mask`; a panicking tracer is switched off.
#[inline(never)]
fn for_each_tracer(mut mask: u64, f: impl Fn(&dyn tracer::Tracer)) {
    let _errno = PreservedErrno::save();
    while mask != 0 {
        let index = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let Some(tracer) = tracer::tracer_at(index) else {
            continue;
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(tracer)));
        if outcome.is_err() {
            tracer::switch_off_after_panic(index);
        }
    }
}

/// Reports the exit of a frame found gone at `now` (unless it was unhooked
/// for an unwind: when it left is unknown).
pub(super) fn report_gone(gone: &Gone, now: u64) {
    if gone.report {
        report_exit(&gone.frame, gone.depth, now, true, None);
    }
}

#[inline]
fn report_exit(frame: &Frame, depth: usize, now: u64, vanished: bool, returned: Option<[u64; 3]>) {
    let wanted = frame.exit_tracers & tracer::enabled_mask();
    if wanted == 0 {
        return;
    }
    let ret = Return {
        site: frame.site,
        depth,
        entry_ticks: frame.entry_ticks,
        exit_ticks: now,
        vanished,
        marks: frame.marks,
        kept: frame.kept,
        returned,
    };
    for_each_tracer(wanted, |tracer| tracer.exit(&ret));
}

/// Called by `fntrace_return_trampoline` when a hooked function returns.
/// Returns the address to return to. `vectors` is the trampoline's save
/// area of xmm0-xmm15 (xmm0 first), `rax` where it saved the function's
/// rax (below the slot, or below the stub's return address for a frame
/// hooked through a return stub).
///
/// # Safety
/// Called only by the return trampoline, with the slot and save areas it
/// documents.
#[no_mangle]
pub unsafe extern "C" fn fntrace_exit_entry(
    slot: *mut usize,
    tsc: u64,
    vectors: *const u64,
    rax: *const u64,
) -> usize {
    // A frame whose function records its return value (its mark): rax,
    // xmm0's low half and rdx as the function left them.
    let returned = |marks: u64| {
        (marks & shadow::ARGS_MARK != 0).then(|| {
            // SAFETY: the trampoline saved %rax at `rax`, %rdx in the word
            // below it (its next push, in both variants), and xmm0 first in
            // `vectors`; all live until it returns.
            unsafe { [*rax, *vectors, *rax.sub(1)] }
        })
    };
    // The fast path's reading, when it took one and the clock is the TSC.
    let now = if tsc != 0 && clock::uses_tsc() {
        tsc
    } else {
        clock::now_ticks()
    };
    let slot = slot as usize;
    // The usual case first: the top frame is this slot's. The frame is
    // copied whole into `top` and read back field by field; returning it
    // inside `Toward` had it rebuilt field by field and copied back in
    // 16-byte moves, a failed store-to-load forwarding that cost ≈ 4 % of
    // a profiled call.
    let mut top = Frame::EMPTY;
    if let Some(Some(depth)) = shadow::with_stack(|stack| stack.pop_top_if(slot, &mut top)) {
        report_exit(&top, depth, now, false, returned(top.marks));
        return top.real_return;
    }
    let (frame, depth) = loop {
        match shadow::with_stack(|stack| stack.pop_toward(slot)) {
            Some(Toward::Found(frame, depth)) => break (frame, depth),
            Some(Toward::Gone(gone)) => report_gone(&gone, now),
            // Its exit was reported when it was given up.
            Some(Toward::Remembered(real_return)) => return real_return,
            Some(Toward::Missing) | None => fatal(
                b"fntrace: a hooked function returned, but its frame is not on the shadow stack \
                  nor among the frames of other stacks or given up for dead\n",
            ),
        }
    };
    report_exit(&frame, depth, now, false, returned(frame.marks));
    frame.real_return
}

/// Reports on stderr and aborts: the real return address is unknown, so no
/// way forward exists (the slot holds the trampoline; what it held is
/// nowhere). Not reached by any sequence of calls, returns, jumps and
/// stack switches: a frame given up for dead is remembered, and gets its
/// real return address back in its slot when it is forgotten
/// (`shadow/switch.rs`); only memory corruption would leave one.
/// Allocates nothing.
fn fatal(message: &[u8]) -> ! {
    // SAFETY: write(2) of a static buffer; abort has no preconditions.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::abort()
    }
}
