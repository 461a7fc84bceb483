//! mmu_gather (mm/mmu_gather.c): unmapped pages are freed only after every
//! TLB that may cache them was flushed (the flushes, IPIs to the CPUs in
//! mm_cpumask, are x86's: arch/x86/mm/tlb.rs).

use super::mem_map::pg;
use super::vmstat::{Entry, Stat};
use super::Pfn;
use crate::kernel::trace::TlbFlushReason;
use crate::kernel::Kernel;
use crate::sim::Ns;

pub struct MmuGather {
    pub mm: u32,
    /// Range of user addresses whose translations must be flushed.
    pub start: u64,
    pub end: u64,
    /// Folio references to drop after the flush.
    pub pages: Vec<Pfn>,
    /// Page-table frames to free after the flush.
    pub tables: Vec<Pfn>,
    /// The whole mm is going away (exit_mmap): no remote shootdown needed.
    pub fullmm: bool,
    /// Reused buffer of PTEs cleared in one table.
    pub scratch: Vec<(u64, super::pgtable::Pte)>,
    /// Empty page-table entries the zap's walk stepped over
    /// (`PageTable::none_entries` of each range zapped): free_pgtables
    /// walks the same VMAs' ranges again and steps over the same ones.
    pub none_entries: u64,
}

impl MmuGather {
    pub fn new(mm: u32, fullmm: bool) -> Self {
        MmuGather { mm, start: u64::MAX, end: 0, pages: Vec::new(), tables: Vec::new(), fullmm, scratch: Vec::new(), none_entries: 0 }
    }

    #[inline]
    pub fn add_range(&mut self, va: u64) {
        self.start = self.start.min(va);
        self.end = self.end.max(va + 4096);
    }

    pub fn is_empty(&self) -> bool {
        self.end == 0 && self.tables.is_empty()
    }
}

impl Kernel {
    /// Ground truth for the checker: does `cpu` at time `t` still cache a
    /// translation of (mm, va) to `pfn` (no flush has reached it)?
    pub fn tlb_live_entry(&self, cpu: u32, mm: u32, va: u64, pfn: Pfn, t: Ns) -> bool {
        self.tlb_live_entry_w(cpu, mm, va, pfn, t).is_some()
    }

    /// `tlb_live_entry`, saying whether a live entry is writable.
    pub fn tlb_live_entry_w(&self, cpu: u32, mm: u32, va: u64, pfn: Pfn, t: Ns) -> Option<bool> {
        // An exited mm's entries sit in a dead ASID: no CPU loads it again,
        // and whoever takes the slot flushes it first (arch/x86/tlbflush.rs).
        if !self.mms[mm as usize].alive {
            return None;
        }
        let c = &self.cpus[cpu as usize];
        if c.landing.iter().any(|&(at, m)| m == mm && at <= t) {
            return None;
        }
        let mut live = None;
        c.tlb.entries_covering(mm, va, |_, e| {
            if e.pfn_of(va) == pfn {
                live = Some(live.unwrap_or(false) | e.writable());
            }
        });
        live
    }

    /// Whether `cpu` at `t` holds a live entry of (mm, va) -> `pfn` cached
    /// writable and dirty: one a store goes through without a page walk.
    pub fn tlb_live_entry_wd(&self, cpu: u32, mm: u32, va: u64, pfn: Pfn, t: Ns) -> bool {
        if self.tlb_live_entry_w(cpu, mm, va, pfn, t).is_none() {
            return false;
        }
        let mut wd = false;
        self.cpus[cpu as usize].tlb.entries_covering(mm, va, |_, e| wd |= e.pfn_of(va) == pfn && e.writable() && e.dirty());
        wd
    }

    /// tlb_finish_mmu: flush what was gathered, then free pages and tables.
    pub fn tlb_finish_mmu(&mut self, t: Ns, cpu: u32, mut tlb: MmuGather) -> Ns {
        let mut t = t;
        if tlb.fullmm {
            // exit_mmap: every CPU that ran the mm switches to init_mm
            // (flush_tlb_func on a lazy CPU) without flushing the mm's
            // ASID; its entries stay there, unreachable, until another mm
            // takes the slot and flushes it (arch/x86/tlbflush.rs).
            let targets: Vec<u32> = self.mms[tlb.mm as usize].cpumask_iter().collect();
            for c in targets {
                let st = &mut self.cpus[c as usize].tlbstate;
                if st.loaded_mm == tlb.mm {
                    st.loaded_mm = u32::MAX;
                }
            }
            self.stat.inc(Stat::NrTlbLocalFlushAll);
            self.trace.tlb_flush(t, cpu, TlbFlushReason::LocalMmShootdown, None);
            t += self.c.flush_all;
        } else if tlb.end > tlb.start {
            t = self.flush_tlb_mm_range(t, cpu, tlb.mm, tlb.start, tlb.end, !tlb.tables.is_empty());
        }
        let pages = std::mem::take(&mut tlb.pages);
        if !pages.is_empty() {
            t += self.c.tlb_gather;
        }
        for chunk in pages.chunks(31) {
            // release_pages works in folio_batch-sized chunks (PAGEVEC/31).
            t = self.release_folios(t, cpu, chunk);
        }
        for pfn in tlb.tables {
            t += self.c.pgtable_free;
            let p = self.mem_map.get_mut(pfn);
            p.flags &= !pg::PGTABLE;
            p.refcount = 0;
            self.stat.add(Stat::NrPageTablePages, -1);
            t = self.free_folio(t, cpu, pfn);
        }
        t
    }

    /// Charge pending interrupt work on `cpu` (task `tid`'s CPU) to `tid`
    /// (IPIs received).
    #[inline]
    pub fn charge_irq(&mut self, tid: u32, cpu: u32) {
        debug_assert_eq!(cpu, self.tasks[tid as usize].cpu);
        let d = std::mem::take(&mut self.cpus[cpu as usize].irq_debt);
        if d > 0 {
            let tk = &mut self.tasks[tid as usize];
            tk.clock += d;
            tk.sys_ns += d;
            tk.entry_ns[Entry::Irq as usize] += d;
        }
    }
}
