//! The invariant checker's own state and the checks that run on every
//! event they concern (a TLB hit, an allocation, a guest handing out or
//! using frames). It sees only what the event passes it, never the whole
//! Kernel, so that struct Kernel can hold it; the audits that walk the
//! whole kernel are in check/mod.rs and check/luf.rs.

use crate::hw::tlb::TlbEntry;
use crate::mm::mem_map::MemMap;
use crate::mm::page_alloc::PageAlloc;
use crate::mm::vma::Mm;
use crate::mm::Pfn;
use crate::sim::Ns;
use crate::virt::host::Host;
use crate::workload::Access;
use rustc_hash::FxHashMap;

/// Keep the first violations only: one broken rule tends to repeat.
const MAX_VIOLATIONS: usize = 32;

/// What a page holds, independent of the frame: (anon, mapping, index).
pub type Ident = (bool, u32, u64);

#[derive(Clone, Debug)]
pub struct StaleRec {
    pub cpu: u32,
    pub mm: u32,
    pub va: u64,
    pub since: Ns,
    pub ident: Ident,
    pub ver: u64,
    pub writable: bool,
}

#[derive(Default)]
pub struct Checker {
    pub enabled: bool,
    pub violations: Vec<String>,
    pub audits: u64,
    pub tlb_checks: u64,
    /// Deferred-flush ground truth (check/luf.rs): frame -> CPUs that may
    /// still cache a translation to it cleared without a flush.
    pub stale: FxHashMap<Pfn, Vec<StaleRec>>,
    /// Data versions of the pages some stale entry still shows.
    pub data_ver: FxHashMap<Ident, u64>,
    /// The TLB hits of a user loop's fast run (arch/x86/mm/fault.rs:
    /// access_range), checked one by one after it as the slow path checks
    /// each of its hits.
    pub fast_hits: Vec<(u64, TlbEntry)>,
}

impl Checker {
    pub fn new(enabled: bool) -> Self {
        Checker { enabled, ..Default::default() }
    }

    pub fn report(&mut self, v: String) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(v);
        }
    }

    /// A user access hit a TLB entry: it must still agree with the page
    /// table, or at least not reach a frame reallocated since it was filled
    /// and not write through a translation that lost its write permission.
    pub fn on_tlb_hit(&mut self, mm: &Mm, mem_map: &MemMap, cpu: u32, va: u64, e: &TlbEntry, kind: Access) {
        self.tlb_checks += 1;
        let pte = mm.pt.pte(va);
        let pfn = e.pfn_of(va);
        let current = pte.present() && pte.pfn() == pfn;
        if current && pte.0 & crate::mm::pgtable::Pte::PROTNONE != 0 && !mm.mm_tlb_flush_pending() {
            // change_prot_numa flushes before it returns: no CPU may still
            // reach a page through a translation of a hinting PTE.
            self.report(format!("cpu {cpu} mm {} va {va:#x}: {kind:?} through a TLB entry for a PROT_NONE hinting PTE (missing flush after change_prot_numa)", mm.id));
            return;
        }
        if current && (kind != Access::Store || pte.write()) {
            return;
        }
        // A large entry (HPA, contpte, PMD) carries the epoch of its first
        // frame: the frames of one folio were not allocated with equal epochs.
        let epoch_pfn = if e.size > 0 { e.pfn } else { pfn };
        if mem_map.get(epoch_pfn).alloc_epoch != e.epoch {
            self.report(format!(
                "cpu {cpu} mm {} va {va:#x}: {kind:?} through a stale TLB entry reached frame {pfn}, reallocated since the entry was filled (missing TLB flush)",
                mm.id
            ));
        } else if kind == Access::Store && e.writable() {
            self.report(format!("cpu {cpu} mm {} va {va:#x}: store through a stale writable TLB entry (PTE now {:#x})", mm.id, pte.0));
        }
    }

    #[inline]
    pub fn on_alloc(&mut self, mem_map: &MemMap, pa: &PageAlloc, pfn: Pfn, order: u32) {
        if self.enabled {
            self.on_alloc_checked(mem_map, pa, pfn, order);
        }
    }

    #[inline(never)]
    fn on_alloc_checked(&mut self, mem_map: &MemMap, pa: &PageAlloc, pfn: Pfn, order: u32) {
        for i in 0..(1u32 << order) {
            if pa.is_free(pfn + i) {
                self.report(format!("frame {} handed out while still on a free list", pfn + i));
                return;
            }
        }
        let _ = mem_map;
    }

    pub fn on_free(&mut self, _pfn: Pfn, _order: u32) {}

    /// Free page reporting: a block handed out by the allocator must not
    /// carry PG_reported any more.
    pub fn on_guest_handout(&mut self, pa: &PageAlloc, pfn: Pfn, order: u32) {
        if pa.allocated_page_reported(pfn) {
            self.report(format!("frame {pfn} (order {order}) handed out with PG_reported still set"));
        }
    }

    /// A guest touches frames [pfn, pfn + n) (`what`: accessed, cleared,
    /// copied into, filled), after the model's host fault path for it ran:
    /// the host must have a live page behind every frame, or the guest
    /// used memory the host had given away (reported and discarded, or
    /// MADV_FREE'd) without the host fault that brings it back.
    pub fn on_guest_use(&mut self, host: &Host, pfn: Pfn, n: u64, what: &str) {
        if !host.range_ready(pfn, n) {
            self.report(format!("frames {pfn}+{n} {what} while the host has no page behind them (host fault path skipped)"));
        }
    }
}
