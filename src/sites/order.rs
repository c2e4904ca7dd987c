//! The recognised sites in address order, in one dense array: what every
//! control operation walks (to set tracer masks, to decide each site's
//! text), so that it reads contiguous memory instead of the whole hash
//! table (which has more slots than sites) and hands the patcher its
//! writes already in address order (no sort or gather per batch).
//!
//! The hash table stays the one place sites live (the traced path finds
//! them there, and may add some: the lazy hook); this list only points
//! into it. It is brought up to date at the start of an operation when
//! the table counted a change since ([`super::SiteTable::note_change`]):
//! sites added since (the ELF scan of a `dlopen`ed object, the lazy hook)
//! are merged in, unloaded ones (`dlclose`) dropped. Used under the
//! control lock only.

use std::sync::atomic::Ordering;

use super::{flag, Site, SITES};

/// One listed site: its address (the sort key, copied so that merging
/// does not touch the site) and the site.
#[derive(Clone, Copy)]
pub(crate) struct Listed {
    /// First byte of the call instruction.
    pub addr: usize,
    /// The site in the table.
    pub site: &'static Site,
}

/// Every recognised site (with a form, not unloaded), by address.
pub(crate) struct SitesInOrder {
    listed: Vec<Listed>,
    /// The table's change count the list reflects.
    changes_seen: u64,
    /// Sites found since the last update (scratch, kept).
    found: Vec<Listed>,
    /// The merged list being built (scratch, kept).
    merged: Vec<Listed>,
}

impl SitesInOrder {
    /// An empty list.
    pub(crate) const fn new() -> SitesInOrder {
        SitesInOrder {
            listed: Vec::new(),
            changes_seen: 0,
            found: Vec::new(),
            merged: Vec::new(),
        }
    }

    /// The list, brought up to date with the table first if it changed.
    /// Caller holds the control lock.
    pub(crate) fn current(&mut self) -> &[Listed] {
        let changes = SITES.changes();
        if changes != self.changes_seen {
            self.update();
            self.changes_seen = changes;
        }
        &self.listed
    }

    /// Drops unloaded sites (first: an entry unloaded and revived since is
    /// then found unmarked by the walk and listed once, at its new
    /// address), re-reads the others' addresses, and merges in the sites
    /// of the table not listed yet. One walk of the table; a site
    /// added during the walk moves the change count again, so the next
    /// operation finds it if this one did not.
    fn update(&mut self) {
        self.listed.retain_mut(|listed| {
            let site = listed.site;
            let flags = site.flags.load(Ordering::Relaxed);
            if flags & flag::LISTED == 0 {
                // Unloaded (and maybe revived: the walk lists it again).
                return false;
            }
            if flags & flag::UNLOADED != 0 || site.form().is_none() {
                site.set_flag(flag::LISTED, false);
                return false;
            }
            // Re-read: the ELF scan may have moved a lazily found site to
            // its `67` prefix.
            listed.addr = site.addr.load(Ordering::Relaxed);
            true
        });
        self.found.clear();
        for site in SITES.iter() {
            // Acquire: pairs with the Release of `Site::revive`.
            let flags = site.flags.load(Ordering::Acquire);
            if flags & (flag::LISTED | flag::UNLOADED) == 0 && site.form().is_some() {
                site.set_flag(flag::LISTED, true);
                self.found.push(Listed {
                    addr: site.addr.load(Ordering::Relaxed),
                    site,
                });
            }
        }
        self.found.sort_unstable_by_key(|listed| listed.addr);
        if !self.found.is_empty() {
            self.merged.clear();
            self.merged.reserve(self.listed.len() + self.found.len());
            let (mut old, mut new) = (self.listed.iter().peekable(), self.found.iter().peekable());
            loop {
                let next = match (old.peek(), new.peek()) {
                    (Some(a), Some(b)) if a.addr <= b.addr => old.next(),
                    (Some(_), Some(_)) | (None, Some(_)) => new.next(),
                    (Some(_), None) => old.next(),
                    (None, None) => break,
                };
                self.merged.extend(next.copied());
            }
            std::mem::swap(&mut self.listed, &mut self.merged);
        }
        // Re-read addresses only move a site within its own bytes; should
        // the order not hold all the same, sort.
        if !self.listed.is_sorted_by_key(|listed| listed.addr) {
            self.listed.sort_by_key(|listed| listed.addr);
        }
    }
}

/// How many sites ahead [`in_order`] prefetches: enough misses in flight
/// to hide the latency of each (the sites lie scattered in the table).
const PREFETCH_AHEAD: usize = 32;

/// The sites of `listed`, each after asking the CPU to fetch the one
/// [`PREFETCH_AHEAD`] further: listed in address order, sites lie in hash
/// order in a table of several MB, and a walk that waited for each would
/// spend most of its time on cache and TLB misses (measured at 100,000
/// sites: ≈ 4 ms per walk without, see the README).
pub(crate) fn in_order(listed: &[Listed]) -> impl Iterator<Item = Listed> + '_ {
    listed.iter().enumerate().map(|(index, &current)| {
        if let Some(next) = listed.get(index + PREFETCH_AHEAD) {
            prefetch(next.site);
        }
        current
    })
}

/// Starts loading the cache lines of `site` (a hint; it has no effect on
/// what the program computes).
#[inline(always)]
fn prefetch(site: &Site) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let start = (site as *const Site).cast::<i8>();
    let (first, last) = Site::CONTROL_FIELDS;
    // SAFETY: SSE is part of x86-64; a prefetch never faults and
    // changes nothing the program can observe, whatever the address.
    // The lines of the fields control operations read (one, or two
    // when they straddle a line).
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(first));
        _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(last - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::SiteForm;
    use crate::sites::{Inserted, NewSite, SiteKind};

    /// A site with the `e8` form at `addr` (a made-up address: nothing
    /// here reads or writes text).
    fn add(addr: usize) -> &'static Site {
        let new = NewSite {
            addr,
            function: addr - 4,
            form: Some(SiteForm::CallRel32),
            kind: SiteKind::Mcount,
            original: [0xe8, 1, 2, 3, 4, 0, 0, 0],
            extra_flags: flag::TEXT_IS_CALL,
            tracers: 0,
        };
        match SITES.insert(addr + 5, &new).unwrap() {
            Inserted::New(site) => site,
            Inserted::Existing(site) => {
                site.revive(&new);
                SITES.note_change();
                site
            }
        }
    }

    /// The listed addresses in the made-up range.
    fn listed(order: &mut SitesInOrder, base: usize) -> Vec<usize> {
        order
            .current()
            .iter()
            .map(|listed| listed.addr)
            .filter(|addr| (base..base + 0x1000).contains(addr))
            .collect()
    }

    #[test]
    fn merges_new_sites_in_address_order_and_drops_unloaded_ones() {
        let base = 0x7777_0000_0000;
        let mut order = SitesInOrder::new();
        for offset in [0x300, 0x100, 0x200] {
            add(base + offset);
        }
        assert_eq!(
            listed(&mut order, base),
            [base + 0x100, base + 0x200, base + 0x300]
        );
        // Found later: merged in place.
        let later = [add(base + 0x250), add(base + 0x50)];
        assert_eq!(
            listed(&mut order, base),
            [
                base + 0x50,
                base + 0x100,
                base + 0x200,
                base + 0x250,
                base + 0x300
            ]
        );
        assert!(later.iter().all(|site| site.has_flag(flag::LISTED)));
        // Unloaded: dropped. Revived (another object's site with the same
        // return address): listed once, at its new address.
        let gone = SITES.find(base + 0x200 + 5).unwrap();
        gone.unload();
        SITES.note_change();
        assert_eq!(
            listed(&mut order, base),
            [base + 0x50, base + 0x100, base + 0x250, base + 0x300]
        );
        let new = NewSite {
            addr: base + 0x200 + 5 - 6,
            function: 0,
            form: Some(SiteForm::Addr32CallRel32),
            kind: SiteKind::Mcount,
            original: [0x67, 0xe8, 1, 2, 3, 4, 0, 0],
            extra_flags: 0,
            tracers: 0,
        };
        assert!(gone.revive(&new));
        SITES.note_change();
        assert_eq!(
            listed(&mut order, base),
            [
                base + 0x50,
                base + 0x100,
                base + 0x1ff,
                base + 0x250,
                base + 0x300
            ]
        );
        assert!(gone.has_flag(flag::LISTED));
    }
}
