//! Making the text obey the tracer masks: what each recognised site's text
//! should hold ([`SiteText`]), and the batch that writes the difference
//! ([`sync_text`]), flipped back if it fails.

use super::*;

/// Whether `text`, read at `site`, is what the table says the site holds.
pub(super) fn holds_its_text(site: &Site, text: &[u8]) -> bool {
    let Some(form) = site.form() else {
        return false;
    };
    if site.has_flag(flag::FOREIGN_TEXT) {
        let addr = site.addr.load(Ordering::Relaxed);
        return sites::foreign_text(addr).is_some_and(|held| text == &held[..text.len()]);
    }
    match SiteText::of(site) {
        SiteText::Nop => text == &site.nop_text(form)[..text.len()],
        SiteText::Call => text == &site.original_bytes()[..text.len()],
        // Which entry or stub it leads to depends on the fast path's
        // state: a call or a jump of the site's length is all that can be
        // checked here.
        SiteText::Fast(_) => matches!(
            decode_site_instruction(text, site.addr.load(Ordering::Relaxed)),
            Some(Instruction::Call { .. } | Instruction::Jump { .. })
        ),
    }
}

pub(super) fn traceable(site: &Site) -> bool {
    site.form().is_some()
        && !site.has_flag(flag::EXCLUDED)
        && site.function.load(Ordering::Relaxed) != 0
}

/// What a recognised site's text holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SiteText {
    /// The NOP: no enabled tracer selected the site.
    Nop,
    /// The original call, to the generic trampoline.
    Call,
    /// A jump to the site's return stub for fast path `n`
    /// (`tracer::GRAPH_FAST_PATH` or `tracer::PROFILE_FAST_PATH`), or a
    /// call of its fast entry where no stub could be placed.
    Fast(usize),
}

impl SiteText {
    pub(super) fn of(site: &Site) -> SiteText {
        SiteText::from_flags(site.flags.load(Ordering::Relaxed))
    }

    /// The [`flag`]s that record this text.
    pub(super) fn flags(self) -> u32 {
        match self {
            SiteText::Nop => 0,
            SiteText::Call => flag::TEXT_IS_CALL,
            SiteText::Fast(tracer::GRAPH_ARGS_FAST_PATH) => {
                flag::TEXT_IS_CALL | flag::TEXT_IS_FAST | flag::TEXT_FAST_ARGS
            }
            SiteText::Fast(0) => flag::TEXT_IS_CALL | flag::TEXT_IS_FAST,
            SiteText::Fast(_) => flag::TEXT_IS_CALL | flag::TEXT_IS_FAST | flag::TEXT_FAST_SECOND,
        }
    }

    /// The text a site's [`flag`]s record.
    pub(super) fn from_flags(flags: u32) -> SiteText {
        if flags & flag::TEXT_IS_CALL == 0 {
            SiteText::Nop
        } else if flags & flag::TEXT_FAST_ARGS != 0 && flags & flag::TEXT_IS_FAST != 0 {
            SiteText::Fast(tracer::GRAPH_ARGS_FAST_PATH)
        } else if flags & flag::TEXT_IS_FAST != 0 {
            SiteText::Fast(usize::from(flags & flag::TEXT_FAST_SECOND != 0))
        } else {
            SiteText::Call
        }
    }

    /// The bytes of this text at `site`; `None` for a fast call out of reach
    /// (or with no fast path). A fast path is reached through the site's
    /// return stub (the same one every time), else, where no stub can be
    /// placed, called directly.
    pub(super) fn bytes(
        self,
        site: &Site,
        form: SiteForm,
        fast: &FastPathState,
    ) -> Option<[u8; 8]> {
        match self {
            SiteText::Nop => Some(site.nop_text(form)),
            SiteText::Call => Some(site.original_bytes()),
            SiteText::Fast(path) => {
                let addr = site.addr.load(Ordering::Relaxed);
                let stubbed = fast.stubbed_entry(path, site.kind())?;
                return_stubs::jump_bytes(addr, form, stubbed)
                    .or_else(|| reach::call_bytes(addr, form, fast.entry(path, site.kind())?))
            }
        }
    }
}

/// The vectors [`sync_text`] fills, kept between operations.
pub(super) struct SyncBatch {
    writes: Vec<TextWrite>,
    /// The sites whose text flags the batch changed, and the flag bits
    /// changed (to flip back if the batch fails).
    changed: Vec<(&'static Site, u32)>,
}

pub(super) static SYNC_BATCH: Mutex<SyncBatch> = Mutex::new(SyncBatch {
    writes: Vec::new(),
    changed: Vec::new(),
});

/// Makes every recognised site hold its call exactly when some enabled
/// tracer selected it: the graph tracer's fast entry when it is the only
/// one and may use it, else the original call. Walks `sites` in address
/// order, so the batch needs no sorting, calling `select` on each site
/// first (an operation's change of tracer masks, made in the same walk).
/// Caller holds the control lock.
///
/// Each site's text flags are set as its write is listed (its cache line
/// is at hand then; the sites lie scattered in the table, and a second
/// walk would wait for each again) and flipped back if the batch fails:
/// only control operations, which hold the control lock, read them.
///
/// A listed site's flags and tracers are written only under the control
/// lock (the lazy hook sets those of a site it adds or revives before the
/// site can be listed), so `select` and this walk change them with a
/// plain load and store: a locked read-modify-write would wait for each
/// scattered site's cache line in turn.
pub(super) fn sync_text(
    sites: &mut SitesInOrder,
    select: impl FnMut(&'static Site),
) -> Result<(), Error> {
    // No object is mapped or unmapped while the text is read and written;
    // sites of objects unloaded since the last check are dropped first.
    sites::loader::hold(|loaded| {
        sites::loader::drop_gone(loaded, holds_its_text);
        sync_listed_text(sites, select)
    })
}

/// [`sync_text`]'s work, inside [`sites::loader::hold`].
pub(super) fn sync_listed_text(
    sites: &mut SitesInOrder,
    mut select: impl FnMut(&'static Site),
) -> Result<(), Error> {
    NOP_PENDING.store(false, Ordering::Release);
    // Before any site calls a fast entry, frames it pushes must carry the
    // right exit mask; after a disable, none may.
    let fast = tracer::refresh_fast_path();
    // Kept from operation to operation (the caller holds the control
    // lock): at 100,000 sites, growing fresh vectors cost ≈ 5 MB of copies
    // and page faults per operation.
    let mut batch = SYNC_BATCH.lock().unwrap_or_else(PoisonError::into_inner);
    let SyncBatch { writes, changed } = &mut *batch;
    writes.clear();
    changed.clear();
    for sites::Listed { addr, site } in sites::in_order(sites.current()) {
        select(site);
        let flags = site.flags.load(Ordering::Relaxed);
        let Some(form) = site.form() else {
            continue;
        };
        if patchable::needs_call(flags, site.original.load(Ordering::Relaxed)) {
            // A patchable entry out of a direct call's reach: its call
            // goes through a jump stub, made once.
            let trampoline = sites::trampoline(SiteKind::Fentry);
            match reach::call_bytes(addr, form, trampoline) {
                Some(call) => patchable::set_call(site, call),
                None => continue,
            }
        }
        if flags & flag::ADOPTED != 0 && site.original.load(Ordering::Relaxed) == 0 {
            // A site adopted at attach: its call goes to fntrace's own
            // trampoline, through a jump stub when out of reach.
            let trampoline = sites::own_entry(site.kind());
            match reach::call_bytes(addr, form, trampoline) {
                Some(call) => patchable::set_call(site, call),
                None => continue,
            }
        }
        // An adopted site still holding the compiler's foreign call: the
        // first write replaces it (the NOP when nothing selects it).
        let foreign = flags & flag::FOREIGN_TEXT;
        // The compiler's NOPs at a patchable entry no write reached yet:
        // the first write replaces them (whatever it writes), and the site
        // is toggled like any other from then on.
        let raw = flags & flag::RAW;
        let current = SiteText::from_flags(flags);
        let mask = site.tracers.load(Ordering::Relaxed);
        // The fast entries take the return address from the usual slot,
        // which holds the saved r10 at a nested function's fentry site;
        // and hook it, which a call that returns twice must not have.
        // A site whose arguments are recorded takes the generic path,
        // which reads any of them; one whose values are all integer
        // registers takes the graph tracer's argument entries instead,
        // when the graph tracer's fast path is the one for its mask. A
        // site already on its fast path keeps its text: its bytes (a stub
        // looked up) are wanted only for a change.
        let fast_call = match flags & (flag::R10_SAVED | flag::RETURNS_TWICE | flag::WITH_ARGS) {
            0 => fast.for_mask(mask),
            flag::WITH_ARGS if flags & flag::ARGS_FAST != 0 => fast
                .for_mask(mask)
                .filter(|&path| path == tracer::GRAPH_FAST_PATH)
                .map(|_| tracer::GRAPH_ARGS_FAST_PATH)
                .filter(|&path| fast.paths[path].is_some_and(|(m, _)| m == mask)),
            _ => None,
        };
        let fast_call = fast_call.and_then(|path| {
            if current == SiteText::Fast(path) {
                return Some((path, None));
            }
            Some((path, Some(SiteText::Fast(path).bytes(site, form, &fast)?)))
        });
        let wanted = match (mask, fast_call) {
            (0, _) => SiteText::Nop,
            (_, Some((path, _))) => SiteText::Fast(path),
            _ => SiteText::Call,
        };
        if wanted == current && foreign == 0 {
            continue;
        }
        let listed = match (current, wanted) {
            // Between the NOP and the original call: both bytes are the
            // site's own, recognised when the site was recorded.
            (SiteText::Nop, SiteText::Call) | (SiteText::Call, SiteText::Nop)
                if raw == 0 && foreign == 0 =>
            {
                let to_call = wanted == SiteText::Call;
                TextWrite::push_site_toggle(writes, addr, form, site.original_bytes(), to_call)
            }
            _ => {
                let new = match wanted {
                    SiteText::Fast(_) => fast_call.and_then(|(_, bytes)| bytes),
                    _ => wanted.bytes(site, form, &fast),
                };
                // The current text's bytes: a fast call finds the same stub
                // again.
                let old = match foreign {
                    0 => current.bytes(site, form, &fast),
                    _ => sites::foreign_text(addr),
                };
                let (Some(old), Some(new)) = (old, new) else {
                    continue;
                };
                let len = form.instruction_len();
                TextWrite::new(addr, &old[..len], &new[..len]).map(|write| writes.push(write))
            }
        };
        if let Err(err) = listed {
            flip_back(changed);
            NOP_PENDING.store(true, Ordering::Release);
            return Err(err);
        }
        let flipped = current.flags() ^ wanted.flags() | raw | foreign;
        site.flags.store(flags ^ flipped, Ordering::Relaxed);
        changed.push((site, flipped));
    }
    if writes.is_empty() {
        return Ok(());
    }
    // The return stubs the batch's jumps go to, executable first.
    if let Err(err) = return_stubs::seal().and_then(|()| patch::apply(writes)) {
        flip_back(changed);
        NOP_PENDING.store(true, Ordering::Release);
        return Err(err);
    }
    Ok(())
}

/// Puts back the text flags [`sync_text`] set for a batch that failed.
pub(super) fn flip_back(changed: &[(&'static Site, u32)]) {
    for &(site, flipped) in changed {
        let flags = site.flags.load(Ordering::Relaxed);
        site.flags.store(flags ^ flipped, Ordering::Relaxed);
    }
}
