//! Run-time entry patching of uninstrumented functions (uftrace's `-P`):
//! a function built with no instrumentation at all gets a site fntrace
//! makes itself. Its first whole instructions (at least five bytes, after
//! an `endbr64`) are decoded with iced-x86, moved, re-encoded for their
//! new address, into an out-of-line stub near the function:
//!
//! ```text
//! stub:  nopl 0(%rax,%rax,1)     ; the site (an fentry site, key stub + 5)
//!        <the moved instructions, relocated>
//!        jmp  entry + moved      ; back into the function
//! ```
//!
//! and a `jmp stub` (`e9 rel32`) is written once over the entry. The
//! stub's NOP is then an ordinary fentry site whose function is the
//! symbol's start: enabling a tracer writes a call to the `__fentry__`
//! trampoline (or the graph tracer's fast entry) there, under either
//! protocol; exits are hooked through the parent return address at
//! `8(%rsp)`, as for every fentry site (nothing of the function ran yet).
//!
//! What is refused, and why, is [`Refusal`]; see `docs/runtime-patching.md`.
//! Stubs live on pages mapped near the function (`patch::reach`), written
//! while the page is read-write and not executable, made read-execute
//! before the entry jump that reaches them is written, and never unmapped.
//! The entry jump is written through the patch seam as a write over
//! several instructions: only the stop-the-world protocol makes it, and it
//! retries (until its acknowledgement timeout) while a stopped thread's
//! program counter lies strictly inside the five bytes.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock,
};
use parking_lot::Mutex;

use super::indirect::{self, FixedMemory};
use super::{self as patch, reach, TextWrite};
use crate::arch::x86_64::{SiteForm, ENDBR64, NOP5};
use crate::error::Error;
use crate::filter::Filter;
use crate::sites::{exclusion_flag, flag, patchable, Inserted, NewSite, SiteKind, SITES};
use crate::symbols::{self, SymbolIndex};

/// Bytes of the jump written at the entry.
const JUMP_LEN: usize = 5;
/// `jmp rel32`.
const JMP_REL32: u8 = 0xe9;
/// Bytes a stub may take (padded with `int3`).
const SLOT: usize = 64;
/// Size of a stub page.
const PAGE: usize = 4096;

/// Why a selected function was not patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// Fewer than five bytes (after `endbr64`) by its ELF symbol size, or
    /// no size: the jump would run past the function.
    TooShort,
    /// An instruction of the function does not decode (data in the text,
    /// or an instruction iced-x86 does not know).
    Undecodable,
    /// A branch somewhere in the function targets the bytes to be moved
    /// (or the entry itself: a loop back to it would count as a call).
    BranchIntoEntry,
    /// An indirect jump in the function (a switch table could target the
    /// moved bytes; not proven otherwise).
    IndirectJump,
    /// A `call` among the moved instructions other than the last (its
    /// return address, inside them, could be on a stack when the jump is
    /// written).
    CallInEntry,
    /// `ret`, `jmp`, `int3`, `ud2`, `syscall`... among the moved
    /// instructions: the function leaves or traps within them.
    EndsInEntry,
    /// Another symbol starts inside the moved bytes (an alias entry
    /// point: a call to it would land in the middle of the jump).
    SymbolInEntry,
    /// iced-x86 cannot re-encode the moved instructions at the stub (a
    /// RIP-relative operand out of ±2 GiB reach), or they do not fit a
    /// stub slot.
    NotRelocatable,
    /// No page for a stub could be mapped within reach.
    NoStubMemory,
    /// The function already has a site (mcount, fentry, patchable entry).
    AlreadyTraced,
}

impl Refusal {
    /// A short phrase for reports.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::TooShort => "shorter than 5 bytes",
            Refusal::Undecodable => "an instruction does not decode",
            Refusal::BranchIntoEntry => "a branch targets its first bytes",
            Refusal::IndirectJump => "an indirect jump",
            Refusal::CallInEntry => "a call in its first bytes",
            Refusal::EndsInEntry => "returns, jumps or traps in its first bytes",
            Refusal::SymbolInEntry => "another symbol starts in its first bytes",
            Refusal::NotRelocatable => "first instructions cannot be relocated",
            Refusal::NoStubMemory => "no stub memory within reach",
            Refusal::AlreadyTraced => "already has a call site",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// What [`crate::patch_functions`] did, cumulated over every call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EntryPatchReport {
    /// Functions given a stub and an entry jump (demangled names).
    pub patched: Vec<String>,
    /// Selected functions left alone, with the reason.
    pub refused: Vec<(String, Refusal)>,
}

impl EntryPatchReport {
    /// How many refusals of each reason, in [`Refusal`] order of first
    /// appearance.
    pub fn refusal_counts(&self) -> Vec<(Refusal, usize)> {
        let mut counts: Vec<(Refusal, usize)> = Vec::new();
        for (_, why) in &self.refused {
            match counts.iter_mut().find(|(r, _)| r == why) {
                Some((_, n)) => *n += 1,
                None => counts.push((*why, 1)),
            }
        }
        counts
    }
}

/// Everything patched or refused so far, and the functions already done
/// (by start address: they are not looked at again).
struct State {
    report: EntryPatchReport,
    done: BTreeSet<usize>,
}

static STATE: Mutex<State> = Mutex::new(State {
    report: EntryPatchReport {
        patched: Vec::new(),
        refused: Vec::new(),
    },
    done: BTreeSet::new(),
});

/// The lowest stub page mapped, and how far above it the highest stub
/// page ends (0: none): a quick test for [`function_of_address`].
static STUBS_LOW: AtomicUsize = AtomicUsize::new(usize::MAX);
static STUBS_SPAN: AtomicUsize = AtomicUsize::new(0);

/// The address uftrace should resolve for an event at `site` (a site's
/// return address): `site` itself, which lies in its function, except for
/// a stub's site, whose return address is in the stub: then the
/// function's start. Cheap (two loads and a compare) when `site` is
/// outside every stub page.
#[inline]
pub(crate) fn function_of_address(site: usize) -> usize {
    let low = STUBS_LOW.load(Ordering::Relaxed);
    if site.wrapping_sub(low) >= STUBS_SPAN.load(Ordering::Relaxed) {
        return site;
    }
    match crate::sites::function_of_site(site) {
        0 => site,
        function => function,
    }
}

/// Widens the stub range to `page` (also for `patch::libcall`'s stub
/// pages). Under the control lock.
pub(crate) fn note_stub_page(page: usize) {
    let low = STUBS_LOW.load(Ordering::Relaxed).min(page);
    let old_low = STUBS_LOW.load(Ordering::Relaxed);
    let high = if old_low == usize::MAX {
        page + PAGE
    } else {
        (old_low + STUBS_SPAN.load(Ordering::Relaxed)).max(page + PAGE)
    };
    // The span first, widened: a reader seeing the new low with the old
    // span tests a range that still holds every older page... or not;
    // either way a miss only names the stub's address, and the pages are
    // sealed before any site in them is reached.
    STUBS_SPAN.store(high - low, Ordering::Relaxed);
    STUBS_LOW.store(low, Ordering::Relaxed);
}

/// The cumulated report.
pub(crate) fn report() -> EntryPatchReport {
    STATE.lock().report.clone()
}

/// Where and what to move out of one function.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The patch point: the start, or right after its `endbr64`.
    pub at: usize,
    /// Bytes moved (whole instructions, at least [`JUMP_LEN`]).
    pub len: usize,
    /// The moved instructions, decoded at their original addresses.
    moved: Vec<Instruction>,
}

/// Decides whether the function whose bytes (its ELF symbol size) are
/// `code`, at `start`, can be patched, and what to move. `memory` is what
/// the targets of its indirect jumps are read from (`patch::indirect`).
pub(crate) fn plan(code: &[u8], start: usize, memory: &FixedMemory) -> Result<Plan, Refusal> {
    let skip = if code.starts_with(&ENDBR64) {
        ENDBR64.len()
    } else {
        0
    };
    if code.len() < skip + JUMP_LEN {
        return Err(Refusal::TooShort);
    }
    let at = start + skip;
    let mut all = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, start as u64, DecoderOptions::NONE);
    while decoder.can_decode() {
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            return Err(Refusal::Undecodable);
        }
        all.push(instruction);
    }
    let mut moved = Vec::new();
    let mut end = at;
    for instruction in all.iter().filter(|i| i.ip() as usize >= at) {
        if end >= at + JUMP_LEN {
            break;
        }
        match instruction.flow_control() {
            // Conditional branches out of the moved bytes are re-aimed by
            // the encoder; one into them is refused below.
            FlowControl::Next | FlowControl::ConditionalBranch => {}
            // A call whose return address is the end of the moved bytes
            // (it is their last instruction): a thread inside the callee
            // when the jump is written returns to original code. One
            // earlier would return into the middle of the jump.
            FlowControl::Call | FlowControl::IndirectCall
                if instruction.next_ip() as usize >= at + JUMP_LEN => {}
            FlowControl::Call | FlowControl::IndirectCall => return Err(Refusal::CallInEntry),
            // A jump that ends the moved bytes: a function made of a tail
            // call (`movslq %edx,%rdx; jmp f`, `jmp *slot(%rip)`). The
            // stub runs it from its new place; nothing comes back.
            FlowControl::UnconditionalBranch | FlowControl::IndirectBranch
                if instruction.next_ip() as usize >= at + JUMP_LEN => {}
            _ => return Err(Refusal::EndsInEntry),
        }
        moved.push(*instruction);
        end = instruction.next_ip() as usize;
    }
    if end < at + JUMP_LEN {
        return Err(Refusal::TooShort);
    }
    // Every known branch target, and the instructions after a jump table's
    // `lea` (no branch may land there: see `indirect`).
    let mut targets = Vec::new();
    let mut table_tails = Vec::new();
    for (index, instruction) in all.iter().enumerate() {
        let target = instruction.near_branch_target() as usize;
        match instruction.flow_control() {
            FlowControl::IndirectBranch => match indirect::targets(&all, index, memory) {
                Some(reached) => {
                    table_tails.extend(reached.tail);
                    targets.extend(reached.targets);
                }
                // A tail call through a pointer in writable memory (a
                // configuration's hook, as SQLite's `sqlite3_free`): it
                // leaves for some function's start, wherever the pointer
                // is written from.
                None if is_tail_call_through_a_slot(instruction) => {}
                None => return Err(Refusal::IndirectJump),
            },
            // A call of the function's start is recursion: a real call.
            FlowControl::Call if target > start && target < end => {
                return Err(Refusal::BranchIntoEntry)
            }
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {
                targets.push(target)
            }
            _ => {}
        }
    }
    for target in targets {
        if target >= start && target < end {
            return Err(Refusal::BranchIntoEntry);
        }
        if table_tails.iter().any(|tail| tail.contains(&target)) {
            return Err(Refusal::IndirectJump);
        }
    }
    Ok(Plan {
        at,
        len: end - at,
        moved,
    })
}

/// Whether `jump` is `jmp *slot(%rip)`: a tail call through a function
/// pointer. A switch table's jump indexes a table; this one cannot reach
/// the middle of a function unless a pointer to it was stored there, which
/// no compiler does (a pointer to the function's own start would make a
/// tail call of itself count as a call, as uftrace counts it).
fn is_tail_call_through_a_slot(jump: &Instruction) -> bool {
    jump.code() == iced_x86::Code::Jmp_rm64
        && jump.op0_kind() == iced_x86::OpKind::Memory
        && jump.is_ip_rel_memory_operand()
}

/// The stub of `plan` placed at `stub`: the site's NOP, the moved
/// instructions re-encoded, the jump back; padded with `int3` to [`SLOT`].
pub(crate) fn stub_bytes(plan: &Plan, stub: usize) -> Result<Vec<u8>, Refusal> {
    let block = InstructionBlock::new(&plan.moved, (stub + NOP5.len()) as u64);
    let encoded = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)
        .map_err(|_| Refusal::NotRelocatable)?;
    let mut bytes = NOP5.to_vec();
    bytes.extend_from_slice(&encoded.code_buffer);
    let back =
        rel32(stub + bytes.len() + JUMP_LEN, plan.at + plan.len).ok_or(Refusal::NotRelocatable)?;
    bytes.push(JMP_REL32);
    bytes.extend_from_slice(&back.to_le_bytes());
    if bytes.len() > SLOT {
        return Err(Refusal::NotRelocatable);
    }
    bytes.resize(SLOT, 0xcc);
    Ok(bytes)
}

fn rel32(next_instruction: usize, target: usize) -> Option<i32> {
    (target as i128 - next_instruction as i128).try_into().ok()
}

/// `jmp rel32` at `from` to `to`.
fn jump(from: usize, to: usize) -> Option<[u8; JUMP_LEN]> {
    let rel = rel32(from + JUMP_LEN, to)?;
    let mut bytes = [JMP_REL32, 0, 0, 0, 0];
    bytes[1..].copy_from_slice(&rel.to_le_bytes());
    Some(bytes)
}

/// A page being filled with stubs in this operation (read-write, not yet
/// executable, not reachable from any text yet).
struct OpenPage {
    page: usize,
    used: usize,
}

/// A stub written, its site and entry jump still to be made.
struct Pending {
    name: String,
    start: usize,
    stub: usize,
    at: usize,
    old: [u8; JUMP_LEN],
}

/// Patches the entries of the functions of `index` (objects the loader
/// lists) whose demangled names `filter` selects. Inside
/// `loader::hold`, under the control lock. Returns the entry jumps to
/// write (after the sites exist); refusals go to the report.
pub(crate) fn prepare(
    index: &SymbolIndex,
    listed: impl Fn(&symbols::LoadedObject) -> bool,
    filter: &Filter,
) -> Result<Vec<TextWrite>, Error> {
    let mut state = STATE.lock();
    let traced: HashSet<usize> = SITES
        .iter()
        .filter(|site| !site.has_flag(flag::UNLOADED))
        .map(|site| site.function.load(Ordering::Relaxed))
        .collect();
    let mut pages: Vec<OpenPage> = Vec::new();
    let mut pending = Vec::new();
    let memory = FixedMemory::of_process();
    // libfntrace.so itself: all of it is fntrace's code (the patcher runs
    // it while it writes). Not an executable linked with libfntrace.a:
    // there only fntrace's own functions are (by name, below).
    let this = report as *const () as usize;
    let executable = std::fs::read_link("/proc/self/exe").ok();
    let own_object = |o: &symbols::LoadedObject| {
        o.text.iter().any(|t| t.contains(&this))
            && executable.as_deref() != Some(std::path::Path::new(&o.path))
    };
    for object in index.objects.iter().filter(|o| listed(o)) {
        let whole_object_is_own = own_object(object);
        for (i, function) in object.functions.iter().enumerate() {
            let name = symbols::demangle(&function.name);
            if !filter.selects(&name) || state.done.contains(&function.start) {
                continue;
            }
            state.done.insert(function.start);
            let refuse = |state: &mut State, why| state.report.refused.push((name.clone(), why));
            // fntrace's own code would trace itself, and the patcher runs
            // it while it writes: never patched, and not reported either
            // (not the program's: `-P '*'` would list thousands).
            if exclusion_flag(&function.name) != 0 || whole_object_is_own {
                continue;
            }
            if traced.contains(&function.start) {
                refuse(&mut state, Refusal::AlreadyTraced);
                continue;
            }
            let Some(code) = patchable::text_of(object, function.start, function.size) else {
                refuse(&mut state, Refusal::TooShort);
                continue;
            };
            let plan = match plan(code, function.start, &memory) {
                Ok(plan) => plan,
                Err(why) => {
                    refuse(&mut state, why);
                    continue;
                }
            };
            if object
                .functions
                .get(i + 1)
                .is_some_and(|next| next.start < plan.at + plan.len)
            {
                refuse(&mut state, Refusal::SymbolInEntry);
                continue;
            }
            let Some(stub) = slot_near(&mut pages, plan.at) else {
                refuse(&mut state, Refusal::NoStubMemory);
                continue;
            };
            let bytes = match stub_bytes(&plan, stub) {
                Ok(bytes) => bytes,
                Err(why) => {
                    refuse(&mut state, why);
                    continue;
                }
            };
            if jump(plan.at, stub).is_none() {
                refuse(&mut state, Refusal::NoStubMemory);
                continue;
            }
            // SAFETY: `stub` is a free slot of a page this operation mapped
            // read-write (not executable, not reachable from any text yet).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), stub as *mut u8, SLOT) };
            pages
                .iter_mut()
                .find(|p| p.page <= stub && stub < p.page + PAGE)
                .expect("the slot's page")
                .used += SLOT;
            let mut old = [0u8; JUMP_LEN];
            old.copy_from_slice(&code[plan.at - function.start..][..JUMP_LEN]);
            pending.push(Pending {
                name,
                start: function.start,
                stub,
                at: plan.at,
                old,
            });
        }
    }
    for page in &pages {
        note_stub_page(page.page);
        // SAFETY: a page this operation mapped, complete now; nothing
        // jumps to it yet. No mapping is ever writable and executable.
        let sealed = unsafe {
            libc::mprotect(
                page.page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
        if sealed != 0 {
            for p in pending.drain(..) {
                state.report.refused.push((p.name, Refusal::NoStubMemory));
            }
            return Ok(Vec::new());
        }
    }
    let mut writes = Vec::new();
    for p in pending {
        let new = NewSite {
            addr: p.stub,
            function: p.start,
            form: Some(SiteForm::CallRel32),
            kind: SiteKind::Fentry,
            original: patchable::direct_call(p.stub),
            extra_flags: flag::PATCHABLE | flag::ENTRY_STUB,
            tracers: 0,
        };
        match SITES.insert(p.stub + NOP5.len(), &new) {
            Some(Inserted::New(_)) => {}
            _ => {
                state.report.refused.push((p.name, Refusal::NoStubMemory));
                continue;
            }
        }
        let jump = jump(p.at, p.stub).expect("checked above");
        writes.push(TextWrite::entry_jump(p.at, &p.old, &jump)?);
        state.report.patched.push(p.name);
    }
    SITES.note_change();
    writes.sort_by_key(TextWrite::addr);
    Ok(writes)
}

/// A free stub slot within reach of `at` (both jumps and the moved
/// instructions' RIP-relative operands; the encoder checks the latter):
/// in a page opened by this operation, else in a new one.
fn slot_near(pages: &mut Vec<OpenPage>, at: usize) -> Option<usize> {
    const REACH: usize = 1 << 30;
    let near = |page: usize| page.abs_diff(at) < REACH;
    if let Some(open) = pages.iter().find(|p| near(p.page) && p.used + SLOT <= PAGE) {
        return Some(open.page + open.used);
    }
    let page = reach::map_writable_page_near(at)?;
    pages.push(OpenPage { page, used: 0 });
    Some(page)
}

/// Applies the entry jumps `writes` (several instructions each: the
/// stop-the-world protocol writes them).
pub(crate) fn write_entries(writes: &[TextWrite]) -> Result<(), Error> {
    if writes.is_empty() {
        return Ok(());
    }
    patch::apply(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: usize = 0x40_1000;

    /// [`plan`] of code whose indirect jumps read nothing.
    fn plan_of(code: &[u8], start: usize) -> Result<Plan, Refusal> {
        plan(code, start, &FixedMemory::default())
    }

    #[test]
    fn moves_whole_instructions_of_at_least_five_bytes() {
        // push %rbp; mov %rsp,%rbp; mov %edi,-4(%rbp); ... ; pop %rbp; ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x89, 0x7d, 0xfc, 0x8b, 0x45, 0xfc, 0x5d, 0xc3,
        ];
        let plan = plan_of(&code, AT).unwrap();
        assert_eq!((plan.at, plan.len), (AT, 7));
        // After endbr64.
        let mut cet = ENDBR64.to_vec();
        cet.extend_from_slice(&code);
        let plan2 = plan_of(&cet, AT).unwrap();
        assert_eq!((plan2.at, plan2.len), (AT + 4, 7));
        let stub = 0x40_8000;
        let bytes = stub_bytes(&plan, stub).unwrap();
        assert_eq!(&bytes[..5], &NOP5);
        assert_eq!(&bytes[5..12], &code[..7]);
        assert_eq!(bytes[12], JMP_REL32);
        let back = i32::from_le_bytes(bytes[13..17].try_into().unwrap());
        assert_eq!((stub + 17).wrapping_add_signed(back as isize), AT + 7);
        assert!(bytes[17..].iter().all(|&b| b == 0xcc));
    }

    #[test]
    fn relocates_rip_relative_operands() {
        // mov 0x100(%rip),%eax (6 bytes); ret
        let code = [0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3];
        let plan = plan_of(&code, AT).unwrap();
        assert_eq!(plan.len, 6);
        let stub = AT + 0x10_0000;
        let bytes = stub_bytes(&plan, stub).unwrap();
        let disp = i32::from_le_bytes(bytes[7..11].try_into().unwrap());
        assert_eq!(
            (stub + 11).wrapping_add_signed(disp as isize),
            AT + 6 + 0x100,
            "same operand address from the stub"
        );
        // Out of reach from a stub 3 GiB away.
        assert_eq!(
            stub_bytes(&plan, AT + (3 << 30)).unwrap_err(),
            Refusal::NotRelocatable
        );
    }

    #[test]
    fn refuses_what_is_not_safe() {
        // xor %eax,%eax; ret: 3 bytes.
        assert_eq!(
            plan_of(&[0x31, 0xc0, 0xc3], AT).unwrap_err(),
            Refusal::TooShort
        );
        // ret in the first five bytes.
        assert_eq!(
            plan_of(&[0x31, 0xc0, 0xc3, 0x90, 0x90, 0x90], AT).unwrap_err(),
            Refusal::EndsInEntry
        );
        // A call that is not the last moved instruction: call *%rax.
        assert_eq!(
            plan_of(&[0xff, 0xd0, 0x90, 0x90, 0x90, 0xc3], AT).unwrap_err(),
            Refusal::CallInEntry
        );
        // A loop back to the second instruction: 1: nop; 2: dec %edi;
        // jne 2b; ret.
        let looped = [0x90, 0xff, 0xcf, 0x75, 0xfc, 0xc3];
        assert_eq!(plan_of(&looped, AT).unwrap_err(), Refusal::BranchIntoEntry);
        // A loop back to the entry itself.
        let to_entry = [0xff, 0xcf, 0x0f, 0x1f, 0x00, 0x75, 0xf9, 0xc3];
        assert_eq!(
            plan_of(&to_entry, AT).unwrap_err(),
            Refusal::BranchIntoEntry
        );
        // jmp *%rax anywhere.
        let indirect = [0x48, 0x89, 0xf8, 0x90, 0x90, 0xff, 0xe0];
        assert_eq!(plan_of(&indirect, AT).unwrap_err(), Refusal::IndirectJump);
        // Bytes that decode as nothing.
        assert_eq!(
            plan_of(&[0x48, 0x89, 0xf8, 0x90, 0x90, 0x06], AT).unwrap_err(),
            Refusal::Undecodable
        );
        // A call ending the moved bytes moves (gcc -O2: `call w_leaf`
        // first), re-aimed at its target from the stub.
        let first = [0xe8, 0x10, 0, 0, 0, 0xc3];
        let p = plan_of(&first, AT).unwrap();
        assert_eq!(p.len, 5);
        let bytes = stub_bytes(&p, AT + 0x1000).unwrap();
        let call =
            Decoder::with_ip(64, &bytes[5..], AT as u64 + 0x1005, DecoderOptions::NONE).decode();
        assert_eq!(call.near_branch_target() as usize, AT + 0x15);
        // A recursive call of the start is fine.
        let recursive = [
            0x55, 0x48, 0x89, 0xe5, 0x90, 0xe8, 0xf6, 0xff, 0xff, 0xff, 0x5d, 0xc3,
        ];
        assert!(plan_of(&recursive, AT).is_ok());
        // A conditional branch out of the moved bytes is re-aimed.
        let early = [0x85, 0xff, 0x74, 0x03, 0x90, 0x90, 0x90, 0xc3];
        let p = plan_of(&early, AT).unwrap();
        assert_eq!(p.len, 5);
        let stub = AT + 0x1000;
        let bytes = stub_bytes(&p, stub).unwrap();
        let mut decoder = Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE);
        let test = decoder.decode();
        let branch = decoder.decode();
        assert_eq!(test.len(), 2);
        assert_eq!(branch.flow_control(), FlowControl::ConditionalBranch);
        assert_eq!(branch.near_branch_target() as usize, AT + 7);
    }

    /// `[addr, addr + len)` as a range.
    fn span(addr: usize, len: usize) -> std::ops::Range<usize> {
        addr..addr + len
    }

    #[test]
    fn tail_calls_through_a_read_only_slot_are_followed() {
        // push %rbx; mov %rdi,%rbx; pop %rbx; jmp *slot(%rip): rustc's
        // `jmp *__rust_dealloc@GOTPCREL(%rip)` at the end of a function.
        let slot = std::cell::Cell::new(0u64);
        let slot_at = slot.as_ptr() as usize;
        let start = slot_at - 0x1000;
        let disp = (slot_at as i64 - (start + 11) as i64) as i32;
        let mut code = vec![0x53, 0x48, 0x89, 0xfb, 0x5b, 0xff, 0x25];
        code.extend_from_slice(&disp.to_le_bytes());
        let fixed = FixedMemory::with(vec![span(slot_at, 8)], vec![]);
        let with_target = |target: usize| {
            slot.set(target as u64);
            plan(&code, start, &fixed)
        };
        assert_eq!(with_target(0x7000_0000).unwrap().len, 5);
        // A slot holding an address in the moved bytes, or the start (a
        // tail call of itself would count as a call).
        assert_eq!(
            with_target(start + 1).unwrap_err(),
            Refusal::BranchIntoEntry
        );
        assert_eq!(with_target(start).unwrap_err(), Refusal::BranchIntoEntry);
        // A slot in writable memory (a hook set at run time): a tail call
        // to whatever function it holds then.
        assert_eq!(plan_of(&code, start).unwrap().len, 5);
    }

    #[test]
    fn functions_made_of_a_tail_call_move_whole() {
        // sqlite3_bind_int at -O2: movslq %edx,%rdx; jmp sqlite3_bind_int64.
        let bind = [0x48, 0x63, 0xd2, 0xe9, 0x10, 0x00, 0x00, 0x00];
        let p = plan_of(&bind, AT).unwrap();
        assert_eq!(p.len, 8);
        let stub = AT + 0x1000;
        let bytes = stub_bytes(&p, stub).unwrap();
        let mut decoder = Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE);
        assert_eq!(decoder.decode().len(), 3);
        let jump = decoder.decode();
        assert_eq!(jump.flow_control(), FlowControl::UnconditionalBranch);
        assert_eq!(jump.near_branch_target() as usize, AT + 8 + 0x10);
        // sqlite3_free at -O2: jmp *hook(%rip), the hook in writable data.
        let free = [0xff, 0x25, 0x00, 0x01, 0x00, 0x00];
        let p = plan_of(&free, AT).unwrap();
        assert_eq!(p.len, 6);
        let bytes = stub_bytes(&p, stub).unwrap();
        let jump =
            Decoder::with_ip(64, &bytes[5..], stub as u64 + 5, DecoderOptions::NONE).decode();
        assert_eq!(jump.flow_control(), FlowControl::IndirectBranch);
        assert_eq!(jump.ip_rel_memory_address() as usize, AT + 6 + 0x100);
        // A jump that ends before five bytes: what follows is not moved.
        let short = [0xeb, 0x10, 0x90, 0x90, 0x90, 0xc3];
        assert_eq!(plan_of(&short, AT).unwrap_err(), Refusal::EndsInEntry);
    }

    /// nop5; lea T(%rip),%rcx; movslq (%rcx,%rax,4),%rax; add %rcx,%rax;
    /// jmp *%rax; then three `ret`s (the cases, at 21, 22, 23), at
    /// `start`, with a table at `table`.
    fn switch(start: usize, table: usize) -> Vec<u8> {
        let mut code = NOP5.to_vec();
        code.extend_from_slice(&[0x48, 0x8d, 0x0d]);
        let disp = (table as i64 - (start + 12) as i64) as i32;
        code.extend_from_slice(&disp.to_le_bytes());
        code.extend_from_slice(&[0x48, 0x63, 0x04, 0x81, 0x48, 0x01, 0xc8, 0xff, 0xe0]);
        code.extend_from_slice(&[0xc3, 0xc3, 0xc3]);
        code
    }

    #[test]
    fn jump_tables_are_read_to_their_end() {
        let table: [std::cell::Cell<i32>; 4] = Default::default();
        let table_at = table.as_ptr() as usize;
        let start = table_at - 0x10000;
        let code = switch(start, table_at);
        let fixed = FixedMemory::with(
            vec![span(table_at, 16), span(start, code.len())],
            vec![span(start, code.len())],
        );
        let entry = |to: usize| (to as i64 - table_at as i64) as i32;
        let with_entries = |entries: [usize; 3]| {
            for (slot, to) in table.iter().zip(entries) {
                slot.set(entry(to));
            }
            // The fourth stays 0: it targets the table, not code (the end).
            plan(&code, start, &fixed)
        };
        assert_eq!(
            with_entries([start + 21, start + 22, start + 23])
                .unwrap()
                .len,
            5
        );
        // A case at the moved bytes.
        assert_eq!(
            with_entries([start + 21, start + 3, start + 23]).unwrap_err(),
            Refusal::BranchIntoEntry
        );
        // A case on the `add`: another path into the four instructions.
        assert_eq!(
            with_entries([start + 21, start + 16, start + 23]).unwrap_err(),
            Refusal::IndirectJump
        );
        // No read-only table: refused as any indirect jump.
        assert_eq!(plan_of(&code, start).unwrap_err(), Refusal::IndirectJump);
    }

    #[test]
    fn absolute_jump_tables_are_read_too() {
        // gcc -fno-pie: `jmp *T(,%rax,8)`, T a 32-bit absolute address: a
        // table in a page mapped low, at a free address.
        const LOW: usize = 0x3f00_0000;
        // SAFETY: a new private anonymous page; MAP_FIXED_NOREPLACE fails
        // rather than replace a mapping. Unmapped below.
        let page = unsafe {
            libc::mmap(
                LOW as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(page as usize, LOW, "a free page at {LOW:#x}");
        let start = LOW + 0x100;
        // nop5; jmp *LOW(,%rax,8); ret; ret
        let mut code = NOP5.to_vec();
        code.extend_from_slice(&[0xff, 0x24, 0xc5]);
        code.extend_from_slice(&(LOW as u32).to_le_bytes());
        code.extend_from_slice(&[0xc3, 0xc3]);
        let fixed = FixedMemory::with(vec![span(LOW, PAGE)], vec![span(start, code.len())]);
        let with_entries = |entries: &[usize]| {
            for (k, to) in entries.iter().enumerate() {
                // SAFETY: inside the page mapped read-write above.
                unsafe { ((LOW + 8 * k) as *mut u64).write(*to as u64) };
            }
            plan(&code, start, &fixed)
        };
        // Two cases, then a zero entry (not code): the end of the table.
        assert!(with_entries(&[start + 12, start + 13, 0]).is_ok());
        assert_eq!(
            with_entries(&[start + 12, start + 1, 0]).unwrap_err(),
            Refusal::BranchIntoEntry
        );
        // SAFETY: the page mapped above; nothing refers to it any more.
        unsafe { libc::munmap(page, PAGE) };
    }

    #[test]
    fn a_table_lea_may_stand_a_little_before_its_load() {
        // gcc: lea T(%rip),%rcx; mov %edx,%eax; movslq ...; add; jmp *%rax.
        let table: [std::cell::Cell<i32>; 2] = Default::default();
        let table_at = table.as_ptr() as usize;
        let start = table_at - 0x10000;
        let between = |extra: &[u8]| {
            let mut code = switch(start, table_at);
            // The lea's displacement counts from its own end: unchanged.
            code.splice(12..12, extra.iter().copied());
            code
        };
        let fixed =
            |code: &[u8]| FixedMemory::with(vec![span(table_at, 8)], vec![span(start, code.len())]);
        let gcc = between(&[0x89, 0xd0]);
        table[0].set((start + 23) as i32 - table_at as i32);
        assert!(plan(&gcc, start, &fixed(&gcc)).is_ok());
        // `mov %edx,%ecx` overwrites the table's address: not a table.
        let clobbered = between(&[0x89, 0xd1]);
        assert_eq!(
            plan(&clobbered, start, &fixed(&clobbered)).unwrap_err(),
            Refusal::IndirectJump
        );
    }
}
