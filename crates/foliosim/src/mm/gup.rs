//! get_user_pages (mm/gup.c) for one page, as KVM takes a guest frame's
//! host page (hva_to_pfn): the lockless walk first (gup_fast), which
//! succeeds when the PTE is present and allows the access; otherwise the
//! slow path (get_user_pages_unlocked): mmap_lock for read, the fault the
//! access would take (handle_mm_fault, on behalf of the task: no
//! user-mode fast paths, no trap), the lock released, and the walk again.
//! FOLL_TOUCH: the slow path marks the page accessed, and dirty for a
//! write (a writer that bypasses the PTE's dirty bit, such as a guest
//! writing through the EPT, must say so to the folio).

use super::mem_map::pg;
use super::memory::Fault;
use super::mm_types_task::{FaultUnlock, PageFault};
use super::pgtable::Pte;
use super::vmstat::{Entry, Stat};
use crate::hw::mmu::pte_allows;
use crate::kernel::Kernel;
use crate::sim::Ns;
use crate::types::Access;

/// What get_user_page found, or why it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gup {
    /// The PTE the walk found, after the slow path's fault if one ran.
    Page(Pte),
    /// The fault failed (outside any VMA, no memory).
    Failed(Fault),
}

/// Faults the slow path takes on one page before it gives up
/// (__get_user_pages retries while the fault says to).
const GUP_RETRIES: u32 = 3;

impl Kernel {
    /// get_user_page of `addr` in task `tid`'s mm, for a write or a read,
    /// from `t` on the task's CPU. The task is charged the slow path's time
    /// as a fault (its clock ends at the returned time). Returns the page
    /// and the time.
    pub fn get_user_page(&mut self, tid: u32, addr: u64, write: bool, t: Ns) -> (Gup, Ns) {
        let kind = if write { Access::Store } else { Access::Load };
        let (mm, cpu) = (self.tasks[tid as usize].mm, self.tasks[tid as usize].cpu);
        let pte = self.mms[mm as usize].pt.pte(addr);
        if pte_allows(pte, kind) {
            return (Gup::Page(pte), t);
        }
        let mut t = t;
        for _ in 0..GUP_RETRIES {
            // handle_mm_fault counts the fault.
            self.stat.inc(Stat::Pgfault);
            let pf = PageFault { tid, mm, cpu, addr, kind, flags: 0, t0: t };
            let (res, t1) = self.fault_under_mmap_lock(&pf, t);
            t = self.fault_release(FaultUnlock::MmapRead, t1, cpu, mm);
            self.tasks[tid as usize].charge_sys(Entry::Fault, pf.t0, t);
            if res != Fault::Done {
                return (Gup::Failed(res), t);
            }
            let pte = self.mms[mm as usize].pt.pte(addr);
            if pte_allows(pte, kind) {
                self.gup_touch(pte, write);
                return (Gup::Page(pte), t);
            }
        }
        (Gup::Failed(Fault::Segv), t)
    }

    /// unpin_user_pages_dirty_lock for one page: a writer that wrote the
    /// page `pte` maps without its PTE's dirty bit (KVM through the EPT)
    /// marks the folio dirty, so that reclaim neither drops a lazily freed
    /// one nor skips its writeback.
    pub fn unpin_user_page_dirty(&mut self, pte: Pte) {
        self.gup_touch(pte, true);
    }

    /// FOLL_TOUCH on the page `pte` maps: accessed, and dirty for a write.
    fn gup_touch(&mut self, pte: Pte, write: bool) {
        if pte.special() {
            return;
        }
        let head = self.mem_map.folio_head(pte.pfn());
        let p = self.mem_map.get_mut(head);
        p.flags |= pg::REFERENCED;
        if write && p.flags & pg::DIRTY == 0 {
            self.folio_mark_dirty(head);
        }
    }
}
