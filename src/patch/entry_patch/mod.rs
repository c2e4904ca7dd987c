//! Run-time entry patching of uninstrumented functions (uftrace's `-P`):
//! a function built with no instrumentation at all gets a site fntrace
//! makes itself. Its first whole instructions (at least five bytes, after
//! an `endbr64`) are decoded with iced-x86, moved, re-encoded for their
//! new address, into an out-of-line stub near the function:
//!
//! ```text
//! stub:  [undo of the kept first instruction]
//!        nopl 0(%rax,%rax,1)     ; the site (an fentry site)
//!        [the kept first instruction again]
//!        <the moved instructions, relocated>
//!        jmp  entry + kept + moved   ; back into the function
//! ```
//!
//! and a `jmp stub` (`e9 rel32`) is written once over the moved bytes.
//! Where the first instruction is a `push`, a `sub $N,%rsp` or a register
//! copy ([`Kept`]), it stays in place and the jump follows it: a uprobe
//! set on the function afterwards (perf, bpftrace) then works, as the
//! kernel runs the file's first instruction out of line and resumes right
//! after it, at the jump; the stub undoes the instruction's effect before
//! the site and redoes it after. The stub's NOP is an ordinary fentry site
//! whose function is the symbol's start: enabling a tracer writes a call
//! to the `__fentry__` trampoline (or the graph tracer's fast entry)
//! there, under either protocol; exits are hooked through the parent
//! return address at `8(%rsp)`, as for every fentry site (the stack and
//! the argument registers are the entry's there).
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
use kept::{kept_in_place, Kept};

/// Bytes of the jump written at the entry.
const JUMP_LEN: usize = 5;
/// `jmp rel32`.
const JMP_REL32: u8 = 0xe9;
/// `int3`: a breakpoint.
const INT3: u8 = 0xcc;
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
    /// `ret`, an indirect `jmp` before the last, `int3`, `ud2`,
    /// `syscall`... among the moved instructions: the function leaves or
    /// traps within them.
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
    /// The program's entry point (`_start`): jumped to by the loader, not
    /// called, so the slot where a return address would be holds `argc`,
    /// which hooking its exit would overwrite.
    ProgramEntry,
    /// An `int3` at its entry: another tool's breakpoint (a debugger's, or
    /// a uprobe set by `perf probe` or bpftrace). The kernel runs the
    /// file's first instruction for a uprobe and resumes after it, and
    /// writes that byte back when the probe goes: a jump written there
    /// would be cut in two either way.
    Breakpoint,
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
            Refusal::ProgramEntry => "the program's entry point (jumped to, never called)",
            Refusal::Breakpoint => {
                "a breakpoint at its entry (a debugger's, or a uprobe: perf probe, bpftrace)"
            }
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

/// Everything patched or refused so far, the functions already done
/// (by start address: they are not looked at again), and every entry
/// jump made, for [`restore_entries`].
struct EntryPatchState {
    report: EntryPatchReport,
    done: BTreeSet<usize>,
    entries: Vec<Entry>,
}

static STATE: Mutex<EntryPatchState> = Mutex::new(EntryPatchState {
    report: EntryPatchReport {
        patched: Vec::new(),
        refused: Vec::new(),
    },
    done: BTreeSet::new(),
    entries: Vec::new(),
});

/// A function given a stub: where its jump goes and what it replaced.
/// The stub and its site outlive a [`restore_entries`]: patched again,
/// the same jump to the same stub is written back.
struct Entry {
    name: String,
    start: usize,
    stub: usize,
    /// The stub's site (after the kept instruction's undo, if any).
    site: usize,
    at: usize,
    old: [u8; JUMP_LEN],
    /// Whether the jump is in the text now.
    in_place: bool,
}

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
    /// The patch point, where the jump goes: the start, or right after
    /// its `endbr64`, or right after the first instruction kept in place.
    pub at: usize,
    /// Bytes moved (whole instructions, at least [`JUMP_LEN`]).
    pub len: usize,
    /// The moved instructions, decoded at their original addresses.
    moved: Vec<Instruction>,
    /// The first instruction, if it stays in place (see [`Kept`]).
    kept: Option<Kept>,
}

impl Plan {
    /// Where the site's NOP is in the stub (after the undo, if any).
    pub(crate) fn site_offset(&self) -> usize {
        self.kept.as_ref().map_or(0, |k| k.undo.len())
    }
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
    // Where a debugger or a uprobe puts its `int3`: the symbol's address
    // (after an `endbr64`, some tools).
    if code.first() == Some(&INT3) || code.get(skip) == Some(&INT3) {
        return Err(Refusal::Breakpoint);
    }
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
    // The first instruction kept in place where it can be; else moved.
    let first = all.iter().find(|i| i.ip() as usize == at);
    let kept = first.and_then(|i| kept_in_place(i, &code[skip..skip + i.len()]));
    if let Some(kept) = kept {
        let after = at + kept.len;
        if let Ok(plan) = plan_from(&all, start, after, Some(kept), memory) {
            return Ok(plan);
        }
    }
    plan_from(&all, start, at, None, memory)
}

/// [`plan`]'s work once the function is decoded (`all`): what to move
/// from `at` on, the instructions before it being `kept` (or an
/// `endbr64`).
fn plan_from(
    all: &[Instruction],
    start: usize,
    at: usize,
    kept: Option<Kept>,
    memory: &FixedMemory,
) -> Result<Plan, Refusal> {
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
            // A direct jump within them: gcc -O2's `while` loop that starts
            // with its test (`jmp TEST; nopw ...; BODY: ...`, SQLite's
            // `sqlite3ExprCanBeNull`). What follows it is reached only by
            // a branch, and a branch into the moved bytes refuses below:
            // the stub runs the jump, re-aimed, and nothing after it.
            FlowControl::UnconditionalBranch => {}
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
            FlowControl::IndirectBranch => match indirect::targets(all, index, memory) {
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
        kept,
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

/// The stub of `plan` placed at `stub`: the kept instruction's undo, the
/// site's NOP, its redo, the moved instructions re-encoded, the jump back;
/// padded with `int3` to [`SLOT`].
pub(crate) fn stub_bytes(plan: &Plan, stub: usize) -> Result<Vec<u8>, Refusal> {
    let (undo, redo) = plan
        .kept
        .as_ref()
        .map_or((&[][..], &[][..]), |k| (&k.undo[..], &k.redo[..]));
    let mut bytes = undo.to_vec();
    bytes.extend_from_slice(&NOP5);
    bytes.extend_from_slice(redo);
    let block = InstructionBlock::new(&plan.moved, (stub + bytes.len()) as u64);
    let encoded = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)
        .map_err(|_| Refusal::NotRelocatable)?;
    bytes.extend_from_slice(&encoded.code_buffer);
    let back =
        rel32(stub + bytes.len() + JUMP_LEN, plan.at + plan.len).ok_or(Refusal::NotRelocatable)?;
    bytes.push(JMP_REL32);
    bytes.extend_from_slice(&back.to_le_bytes());
    if bytes.len() > SLOT {
        return Err(Refusal::NotRelocatable);
    }
    bytes.resize(SLOT, INT3);
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
    site: usize,
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
    let mut again = Vec::new();
    let memory = FixedMemory::of_process();
    // libfntrace.so itself: all of it is fntrace's code (the patcher runs
    // it while it writes). Not an executable linked with libfntrace.a:
    // there only fntrace's own functions are (by name, below).
    let this = report as *const () as usize;
    let executable = std::fs::read_link("/proc/self/exe").ok();
    // SAFETY: getauxval reads the auxiliary vector; no preconditions.
    let program_entry = unsafe { libc::getauxval(libc::AT_ENTRY) } as usize;
    let own_object = |o: &symbols::LoadedObject| {
        o.text.iter().any(|t| t.contains(&this))
            && executable.as_deref() != Some(std::path::Path::new(&o.path))
    };
    for object in index.objects.iter().filter(|o| listed(o)) {
        let whole_object_is_own = own_object(object);
        for (i, function) in object.functions.iter().enumerate() {
            let name = symbols::demangle(&function.name);
            if !filter.selects(&name) {
                continue;
            }
            if state.done.contains(&function.start) {
                // Given back by a detach: its stub and site are there.
                if let Some(write) = jump_again(&mut state, object, function.start)? {
                    again.push(write);
                }
                continue;
            }
            state.done.insert(function.start);
            let refuse =
                |state: &mut EntryPatchState, why| state.report.refused.push((name.clone(), why));
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
            if function.start == program_entry {
                refuse(&mut state, Refusal::ProgramEntry);
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
                site: stub + plan.site_offset(),
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
            return Ok(again);
        }
    }
    let mut writes = again;
    for p in pending {
        let new = NewSite {
            addr: p.site,
            function: p.start,
            form: Some(SiteForm::CallRel32),
            kind: SiteKind::Fentry,
            original: patchable::direct_call(p.site),
            extra_flags: flag::PATCHABLE | flag::ENTRY_STUB,
            tracers: 0,
        };
        match SITES.insert(p.site + NOP5.len(), &new) {
            Some(Inserted::New(_)) => {}
            _ => {
                state.report.refused.push((p.name, Refusal::NoStubMemory));
                continue;
            }
        }
        let jump = jump(p.at, p.stub).expect("checked above");
        writes.push(TextWrite::entry_jump(p.at, &p.old, &jump)?);
        state.report.patched.push(p.name.clone());
        state.entries.push(Entry {
            name: p.name,
            start: p.start,
            stub: p.stub,
            site: p.site,
            at: p.at,
            old: p.old,
            in_place: true,
        });
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

/// The entry jump of a function [`restore_entries`] gave back, to write
/// again (its stub and site are still there), if its text still holds
/// what the jump replaced; the function is reported patched again.
fn jump_again(
    state: &mut EntryPatchState,
    object: &symbols::LoadedObject,
    start: usize,
) -> Result<Option<TextWrite>, Error> {
    let Some(entry) = state
        .entries
        .iter_mut()
        .find(|e| e.start == start && !e.in_place)
    else {
        return Ok(None);
    };
    let held = patchable::text_of(object, entry.at, JUMP_LEN);
    if held != Some(&entry.old[..]) {
        return Ok(None);
    }
    let jump = jump(entry.at, entry.stub).expect("made once already");
    let write = TextWrite::entry_jump(entry.at, &entry.old, &jump)?;
    entry.in_place = true;
    let name = entry.name.clone();
    state.report.patched.push(name);
    Ok(Some(write))
}

/// Applies the entry jumps `writes` (several instructions each: the
/// stop-the-world protocol writes them). If that fails, none is in place.
pub(crate) fn write_entries(writes: &[TextWrite]) -> Result<(), Error> {
    if writes.is_empty() {
        return Ok(());
    }
    let written = patch::apply(writes);
    if written.is_err() {
        let mut state = STATE.lock();
        let EntryPatchState {
            entries, report, ..
        } = &mut *state;
        for entry in entries.iter_mut().filter(|e| e.in_place) {
            if writes.iter().any(|w| w.addr() == entry.at) {
                entry.in_place = false;
                if let Some(at) = report.patched.iter().rposition(|n| *n == entry.name) {
                    report.patched.remove(at);
                }
            }
        }
    }
    written
}

/// Whether `site` is the site of a run-time entry patch's stub (which
/// [`restore_entries`] makes unreachable, and gives nothing else back).
pub(crate) fn is_entry_patch_site(site: usize) -> bool {
    STATE.lock().entries.iter().any(|e| e.site == site)
}

/// Detach: writes back, over every entry jump in place, the bytes it
/// replaced (one batch, by the stop-the-world protocol, as the jumps
/// were written), for the functions whose object `loaded` still holds.
/// The stubs stay mapped (a thread may still run in one: it jumps back
/// into its function, whose bytes after the moved ones never changed)
/// and their sites stay NOPs. The functions are no longer reported
/// patched; `patch` writes their jumps again. Returns how many were given
/// back. Inside `loader::hold`, under the control lock, with no tracer
/// enabled.
pub(crate) fn restore_entries(loaded: impl Fn(usize) -> bool) -> Result<usize, Error> {
    let mut state = STATE.lock();
    let mut writes = Vec::new();
    for entry in state.entries.iter().filter(|e| e.in_place) {
        if !loaded(entry.start) {
            continue;
        }
        let jump = jump(entry.at, entry.stub).expect("made once already");
        writes.push(TextWrite::entry_restore(entry.at, &jump, &entry.old)?);
    }
    if writes.is_empty() {
        return Ok(0);
    }
    writes.sort_by_key(TextWrite::addr);
    patch::apply(&writes)?;
    let EntryPatchState {
        entries, report, ..
    } = &mut *state;
    for entry in entries.iter_mut().filter(|e| e.in_place) {
        if writes.iter().any(|w| w.addr() == entry.at) {
            entry.in_place = false;
            if let Some(at) = report.patched.iter().rposition(|n| *n == entry.name) {
                report.patched.remove(at);
            }
        }
    }
    Ok(writes.len())
}

mod kept;
#[cfg(test)]
mod tests;
