//! The MMU: the page-table entry as the hardware reads it, the last step
//! of a page walk (the permission check and the accessed/dirty update on
//! the leaf PTE) and the TLB fill from what the walk found. Where the PTE
//! table lives and which TLB entry size a mapping gets are the mm's
//! (mm/pgtable.rs, mm/huge_memory.rs: tlb_fill_size); this file gets the
//! slot and the size from its caller (arch/x86/mm/fault.rs: user_access).

use super::tlb::{flags, Tlb, TlbEntry, TlbLookup};
use crate::types::{Access, Pfn};

/// A page-table entry, packed into a u64 like the hardware's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pte(pub u64);

impl Pte {
    pub const NONE: Pte = Pte(0);
    pub const PRESENT: u64 = 1 << 0;
    pub const WRITE: u64 = 1 << 1;
    pub const DIRTY: u64 = 1 << 2;
    pub const YOUNG: u64 = 1 << 3;
    /// pte_special: the shared zero page (no struct page refcounting).
    pub const SPECIAL: u64 = 1 << 4;
    /// PROT_NONE mapping kept present for NUMA hinting.
    pub const PROTNONE: u64 = 1 << 5;
    /// arm64 contiguous hint.
    pub const CONT: u64 = 1 << 6;
    pub const EXEC: u64 = 1 << 7;
    /// One of the 512 PTEs standing for a PMD mapping of an order-9 folio
    /// (foliosim models a PMD entry as its 512 PTEs; the TLB caches 2 MiB).
    pub const HUGE: u64 = 1 << 8;
    /// A migration entry (not present): the PFN is the folio under
    /// migration; WRITE/DIRTY/EXEC say what the restored PTE gets back.
    pub const MIGRATION: u64 = 1 << 9;
    /// A swap entry (not present): the PFN field holds the swap slot
    /// (mm/swapfile.rs). Only a PTE without PRESENT is one.
    pub const SWAP: u64 = 1 << 10;
    const PFN_SHIFT: u32 = 12;

    #[inline]
    pub fn new(pfn: Pfn, bits: u64) -> Pte {
        Pte(((pfn as u64) << Self::PFN_SHIFT) | bits | Self::PRESENT)
    }
    /// The swap entry of `slot` (swp_entry_to_pte).
    #[inline]
    pub fn swp_entry(slot: u32) -> Pte {
        Pte(((slot as u64) << Self::PFN_SHIFT) | Self::SWAP)
    }
    /// is_swap_pte: not present, and a swap entry.
    #[inline]
    pub fn is_swap(self) -> bool {
        self.0 & (Self::SWAP | Self::PRESENT) == Self::SWAP
    }
    /// The slot of a swap entry (swp_offset).
    #[inline]
    pub fn swp_offset(self) -> u32 {
        (self.0 >> Self::PFN_SHIFT) as u32
    }
    #[inline]
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
    #[inline]
    pub fn present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }
    #[inline]
    pub fn write(self) -> bool {
        self.0 & Self::WRITE != 0
    }
    #[inline]
    pub fn dirty(self) -> bool {
        self.0 & Self::DIRTY != 0
    }
    #[inline]
    pub fn special(self) -> bool {
        self.0 & Self::SPECIAL != 0
    }
    #[inline]
    pub fn exec(self) -> bool {
        self.0 & Self::EXEC != 0
    }
    #[inline]
    pub fn pfn(self) -> Pfn {
        (self.0 >> Self::PFN_SHIFT) as Pfn
    }
    #[inline]
    pub fn with(self, bits: u64) -> Pte {
        Pte(self.0 | bits)
    }
    #[inline]
    pub fn without(self, bits: u64) -> Pte {
        Pte(self.0 & !bits)
    }
}

/// Would the hardware walk succeed for this access with this PTE? A
/// PROT_NONE hinting PTE is present but grants nothing: the walk faults
/// and the TLB is never filled from it.
#[inline]
pub fn pte_allows(pte: Pte, kind: Access) -> bool {
    pte.present()
        && pte.0 & Pte::PROTNONE == 0
        && match kind {
            Access::Store => pte.write(),
            Access::Ifetch => pte.exec(),
            Access::Load => true,
        }
}

/// The walk's last step: if the leaf PTE in `slot` allows `kind`, the
/// hardware sets its accessed bit (and dirty bit, for a store) and the
/// walk succeeds with the updated PTE; otherwise it faults (None). One
/// walk serves both the permission check and the update.
#[inline(always)]
pub fn walk_pte(slot: Option<&mut Pte>, kind: Access) -> Option<Pte> {
    match slot {
        Some(slot) if pte_allows(*slot, kind) => {
            let bits = Pte::YOUNG | if kind == Access::Store { Pte::DIRTY } else { 0 };
            *slot = slot.with(bits);
            Some(*slot)
        }
        _ => None,
    }
}

/// Fills `tlb` from a successful walk of `pte` at `va` of address space
/// `mm`: an entry of `size` (chosen by the mm) whose flags come from the
/// PTE. `missed`: the lookup before the walk missed every level (else a
/// store re-walked a read-only or clean entry). Inlined so that a constant
/// `size` drops the size-dependent alignment and structure choice.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn tlb_fill(tlb: &mut Tlb, kind: Access, mm: u32, va: u64, pte: Pte, size: u8, epoch: u32, missed: bool) {
    let f = flags::USER
        | if pte.write() { flags::WRITE } else { 0 }
        | if pte.dirty() { flags::DIRTY } else { 0 }
        | if pte.exec() { flags::EXEC } else { 0 };
    let e = TlbEntry::new(mm, va, pte.pfn(), size, f, epoch);
    tlb.fill_walked(kind, e, missed);
}

/// Accesses from `*a` on that hit the
/// TLB with the permission they need, at most `max` in all
/// (`*done` counts them). Returns the hits, how many of them hit the STLB,
/// and the lookup that stopped the run (a miss or a store needing a
/// re-walk), if one did. `observe` sees each hit's page address and entry
/// (the invariant checker; a no-op closure in production, which folds
/// away). One copy of the loop per access kind, `kind` made a constant in
/// each, so the kind tests inside the lookup and the store check fold away.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn tlb_hit_run(
    tlb: &mut Tlb,
    mm: u32,
    kind: Access,
    a: &mut u64,
    stride: u64,
    n: &mut u64,
    done: &mut u64,
    max: u64,
    observe: &mut impl FnMut(u64, &TlbEntry),
) -> (u64, u64, Option<TlbLookup>) {
    match kind {
        Access::Load => tlb_hit_run_of(tlb, mm, Access::Load, a, stride, n, done, max, observe),
        Access::Store => tlb_hit_run_of(tlb, mm, Access::Store, a, stride, n, done, max, observe),
        Access::Ifetch => tlb_hit_run_of(tlb, mm, Access::Ifetch, a, stride, n, done, max, observe),
    }
}

/// `tlb_hit_run`'s loop, for the constant `kind` it is inlined with.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tlb_hit_run_of(
    tlb: &mut Tlb,
    mm: u32,
    kind: Access,
    a: &mut u64,
    stride: u64,
    n: &mut u64,
    done: &mut u64,
    max: u64,
    observe: &mut impl FnMut(u64, &TlbEntry),
) -> (u64, u64, Option<TlbLookup>) {
    let (mut hits, mut stlb) = (0u64, 0u64);
    while *n > 0 && *done < max {
        let lk = tlb.lookup(mm, *a & !4095, kind);
        let e = match lk {
            TlbLookup::L1Hit(e) => e,
            TlbLookup::StlbHit(e) => {
                stlb += 1;
                e
            }
            TlbLookup::Miss => return (hits, stlb, Some(lk)),
        };
        if kind == Access::Store && !(e.writable() && e.dirty()) {
            // A store needing a re-walk: the slow path, with this lookup.
            if matches!(lk, TlbLookup::StlbHit(_)) {
                stlb -= 1;
            }
            return (hits, stlb, Some(lk));
        }
        observe(*a & !4095, &e);
        hits += 1;
        *a += stride;
        *n -= 1;
        *done += 1;
    }
    (hits, stlb, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_sets_accessed_and_dirty_where_it_may() {
        // A writable clean PTE (after MADV_FREE or writeback): a load sets
        // the accessed bit only, a store the dirty bit too.
        let clean = Pte::new(7, Pte::WRITE);
        let mut slot = clean;
        assert_eq!(walk_pte(Some(&mut slot), Access::Load), Some(clean.with(Pte::YOUNG)));
        assert!(!slot.dirty());
        assert_eq!(walk_pte(Some(&mut slot), Access::Store), Some(clean.with(Pte::YOUNG | Pte::DIRTY)));
        assert!(slot.dirty());
        // No permission: the walk faults and leaves the PTE alone.
        for (pte, kind) in [
            (Pte::new(7, 0), Access::Store),
            (Pte::new(7, Pte::WRITE), Access::Ifetch),
            (Pte::new(7, Pte::WRITE | Pte::PROTNONE), Access::Load),
            (Pte::NONE, Access::Load),
        ] {
            let mut slot = pte;
            assert_eq!(walk_pte(Some(&mut slot), kind), None, "{pte:?} {kind:?}");
            assert_eq!(slot, pte);
        }
        assert_eq!(walk_pte(None, Access::Load), None);
    }
}
