//! The large-folio interface of the anonymous fault (include/linux/huge_mm.h):
//! what an anonymous-folio order policy sees and answers (the trait the
//! policies in policy/ implement), the deferred-split queues and the
//! per-size counters (mthp_stat). Apart from mm/huge_memory.rs, whose
//! fault paths work on the whole kernel, so that struct Kernel and the
//! policies can name these types without depending on those paths.

use super::page_alloc::PageAlloc;
use super::pgtable::{pte_index, Pte, PteTable};
use super::vma::{vm, Placement, Vma};
use super::{Pfn, PMD_ORDER};
use crate::kernel::knobs::{Knobs, ThpAnonAlign, ThpEnabled};
use crate::sim::lock::SpinLock;
use std::collections::BTreeSet;
/// Orders a PTE-mapped anonymous folio may have: 2..=PMD_ORDER.
pub const PTE_ORDERS: u32 = ((1 << (PMD_ORDER + 1)) - 1) & !0b11;

/// What a fresh anonymous fault shows its order policy: read-only, built
/// only when a large folio is possible at all.
pub struct AnonFaultCtx<'a> {
    pub vma: &'a Vma,
    /// The faulting address.
    pub addr: u64,
    /// What the faulting PTE holds: none (path A) or the zero page (path B,
    /// and the CoW copy of path C).
    pub expect: Pte,
    /// The PTE table covering `addr` (None: not allocated yet, every PTE none).
    pub ptes: Option<&'a PteTable>,
    /// The node the folio would come from, and its allocator.
    pub nid: u32,
    pub pa: &'a PageAlloc,
    pub knobs: &'a Knobs,
}

impl AnonFaultCtx<'_> {
    /// The naturally aligned block of 2^order pages around `addr` lies in
    /// the VMA and all its PTEs are none but the faulting one (which holds
    /// `expect`): pte_range_none as alloc_anon_folio asks it.
    pub fn pte_range_none(&self, order: u32) -> bool {
        let size = 4096u64 << order;
        let base = self.addr & !(size - 1);
        if base < self.vma.start || base + size > self.vma.end {
            return false;
        }
        let Some(tbl) = self.ptes else { return true };
        (0..1u64 << order).all(|i| {
            let va = base + i * 4096;
            let slot = tbl.ptes[pte_index(va)];
            if va == self.addr & !4095 {
                slot == self.expect
            } else {
                slot.is_none()
            }
        })
    }

    /// Free pages of the node's zone (zone_page_state(NR_FREE_PAGES)).
    pub fn zone_free_pages(&self) -> u64 {
        self.pa.zone_free_pages(self.nid)
    }

    /// Whether a sysfs `enabled` value (with the top level, for inherit)
    /// allows THP in this VMA (hugepage_vma_check's VM_HUGEPAGE /
    /// VM_NOHUGEPAGE part).
    pub fn thp_allowed(&self, v: ThpEnabled) -> bool {
        thp_allowed(v, self.knobs.anon_folio.thp_enabled, self.vma)
    }
}

/// The orders an order policy lets a fault try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnonOrders {
    /// Bit k: a PTE-mapped folio of order k (2 <= k <= PMD_ORDER) may be
    /// tried; the fault keeps the highest one whose block is free
    /// (`Kernel::anon_fault_order`), falling back order by order.
    pub pte: u32,
    /// A PMD-mapped THP may be tried first (do_huge_pmd_anonymous_page).
    pub pmd: bool,
}

/// How the large-folio fault paths behave beyond the order choice; read
/// once at boot. `Default` is Linux's (6.8+) behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnonPaths {
    /// After losing a PTE race, retry one order lower (RFC) instead of
    /// dropping the folio and refaulting (upstream).
    pub retry_lower_on_race: bool,
    /// A write to a zero-page PTE allocates a large folio (RFC patch 15).
    pub zero_page_large: bool,
    /// A write fault reuses the contiguous read-only run of a folio that
    /// only this mapping references (RFC patches 9-10).
    pub reuse_range: bool,
    /// A write to a non-exclusive page of a large folio may reuse it when
    /// the folio's only reference is this PTE (6.3, RFC); 6.12 never does.
    pub reuse_large_by_refcount: bool,
    /// CoW of a non-exclusive large folio copies into a large folio (RFC
    /// patches 11-14) instead of one page.
    pub cow_copy_large: bool,
    /// Zap removes a folio's PTEs in one rmap call (RFC patch 17, upstream
    /// folio_pte_batch): a whole unmap does not queue it for deferred split.
    pub batch_zap: bool,
    /// Freeing a large anon folio takes split_queue_lock even when the
    /// folio was never queued (6.3 free_transhuge_page).
    pub free_always_locks_split_queue: bool,
}

impl Default for AnonPaths {
    fn default() -> Self {
        AnonPaths {
            retry_lower_on_race: false,
            zero_page_large: false,
            reuse_range: false,
            reuse_large_by_refcount: true,
            cow_copy_large: false,
            batch_zap: true,
            free_always_locks_split_queue: false,
        }
    }
}

/// An anonymous-folio order policy (`anon_folio.mode`): given the fault,
/// which orders to try (thp_vma_allowable_orders and the policy's own
/// filter; the VMA-bound and pte_none checks of alloc_anon_folio follow in
/// the fault path). Implementations live in policy/, one file each.
pub trait AnonOrderPolicy: Send {
    fn orders(&self, f: &AnonFaultCtx) -> AnonOrders;
    /// `orders` is empty for every fault: the fault path need not ask
    /// (`Kernel::anon_order0_only`).
    fn order0_only(&self) -> bool {
        false
    }
    /// The paths' behaviour (`Kernel::anon_paths`).
    fn paths(&self) -> AnonPaths {
        AnonPaths::default()
    }
    /// Placement of an mmap with no address hint (`anon`: a private
    /// anonymous one): page-aligned, except private anonymous maps by the
    /// era's PMD rule (`anon_folio.thp_get_unmapped_area`).
    fn mmap_align(&self, len: u64, anon: bool, k: &Knobs) -> Placement {
        if anon {
            anon_placement(k.anon_folio.thp_anon_align, len)
        } else {
            Placement::Page
        }
    }
}

/// An unhinted private anonymous mapping under the era's THP rule.
pub fn anon_placement(rule: ThpAnonAlign, len: u64) -> Placement {
    if rule.thp_aligned(len) {
        Placement::ThpPadded { bottom: rule == ThpAnonAlign::LenGePmdBottom }
    } else {
        Placement::Page
    }
}

/// PMD THP for the VMA from a sysfs `enabled` value (and the top level, for inherit).
pub fn thp_allowed(v: ThpEnabled, top: ThpEnabled, vma: &Vma) -> bool {
    if vma.flags & vm::NOHUGEPAGE != 0 {
        return false;
    }
    let madv = vma.flags & vm::HUGEPAGE != 0;
    match v {
        ThpEnabled::Always => true,
        ThpEnabled::Madvise => madv,
        ThpEnabled::Inherit => top == ThpEnabled::Always || (top == ThpEnabled::Madvise && madv),
        ThpEnabled::Never => false,
    }
}

/// One deferred-split queue (per node here: one memcg) and its lock.
#[derive(Default)]
pub struct SplitQueue {
    pub lock: SpinLock,
    pub list: BTreeSet<Pfn>,
}

/// Per-size stats (`hugepages-<size>kB/stats/*`), indexed by order, plus
/// foliosim's per-path histograms (as Ryan's of 2023-04-26, R11): pages per
/// fault by order.
#[derive(Clone, Debug, Default)]
pub struct MthpStats {
    pub anon_fault_alloc: [u64; 10],
    pub anon_fault_fallback: [u64; 10],
    pub split_deferred: [u64; 10],
    /// Folios split by the shrinker, by their order before the split.
    pub split: [u64; 10],
    /// do_anonymous_page (path A) installs by order.
    pub path_a: [u64; 10],
    /// Zero-page write (path B) installs by order.
    pub path_b: [u64; 10],
    /// CoW copy (path C) by order of the copy.
    pub path_c: [u64; 10],
    /// Reuse (path D) by pages reused (capped at 512 -> index log2).
    pub path_d_pages: [u64; 10],
}

impl MthpStats {
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for order in 2..=PMD_ORDER as usize {
            let key = format!("hugepages-{}kB", 4usize << order);
            m.insert(
                key,
                serde_json::json!({
                    "anon_fault_alloc": self.anon_fault_alloc[order],
                    "anon_fault_fallback": self.anon_fault_fallback[order],
                    "split_deferred": self.split_deferred[order],
                    "split": self.split[order],
                }),
            );
        }
        serde_json::json!({
            "per_size": m,
            "path_a_by_order": self.path_a,
            "path_b_by_order": self.path_b,
            "path_c_by_order": self.path_c,
            "reuse_by_log2_pages": self.path_d_pages,
        })
    }
}
