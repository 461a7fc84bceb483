//! mmu_gather and TLB flushing (mm/mmu_gather.c, arch/x86/mm/tlb.c):
//! unmapped pages are freed only after every TLB that may cache them was
//! flushed; remote CPUs in mm_cpumask are shot down with IPIs.

use super::mem_map::pg;
use super::vmstat::{Entry, Stat};
use super::Pfn;
use crate::kernel::knobs::Mutant;
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
}

impl MmuGather {
    pub fn new(mm: u32, fullmm: bool) -> Self {
        MmuGather { mm, start: u64::MAX, end: 0, pages: Vec::new(), tables: Vec::new(), fullmm, scratch: Vec::new() }
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
    /// flush_tlb_mm_range: flush [start, end) of `mm` on every CPU that may
    /// cache it. Ranged up to the flush ceiling, full beyond. Returns when
    /// the initiator has all acknowledgements.
    pub fn flush_tlb_mm_range(&mut self, t: Ns, cpu: u32, mm: u32, start: u64, end: u64, freed_tables: bool) -> Ns {
        if !self.mms[mm as usize].alive {
            // exit_mmap: every CPU is lazy on the dying mm (fork.rs).
            return t;
        }
        let pages = (end - start) / 4096;
        let full = pages > self.c.flush_ceiling;
        let mut t = t;
        let asid = mm;
        // Local flush, if this CPU runs the mm.
        let targets: Vec<u32> = self.mms[mm as usize].cpumask_iter().collect();
        if targets.contains(&cpu) {
            self.stat.inc(Stat::TlbFlushEvents);
            if full {
                self.cpus[cpu as usize].tlb.flush_asid(asid);
                self.mm_caught_up(mm, cpu);
                self.stat.inc(Stat::NrTlbLocalFlushAll);
                self.trace.tlb_flush(t, cpu, TlbFlushReason::LocalMmShootdown, None);
                t += self.c.flush_all;
            } else {
                self.cpus[cpu as usize].tlb.flush_range(asid, start, end);
                self.stat.add(Stat::NrTlbLocalFlushOne, pages as i64);
                self.trace.tlb_flush(t, cpu, TlbFlushReason::LocalMmShootdown, Some(pages));
                t += self.c.flush_one * pages;
            }
        }
        if self.knobs.mutant == Mutant::SkipShootdown {
            return t;
        }
        let remote: Vec<u32> = targets.into_iter().filter(|&c| c != cpu).collect();
        let _ = freed_tables; // lazy-TLB CPUs are not modelled: every mm_cpumask CPU is a target
        if remote.is_empty() {
            return t;
        }
        self.stat.inc(Stat::NrTlbRemoteFlush);
        self.stat.add(Stat::NrTlbRemoteFlushReceived, remote.len() as i64);
        self.stat.add(Stat::TlbFlushEvents, remote.len() as i64);
        let recv = self.c.ipi_recv + if full { self.c.flush_all } else { self.c.flush_one * pages };
        for (i, &c) in remote.iter().enumerate() {
            self.trace.tlb_flush(t + self.c.ipi_send * (i as Ns + 1), c, TlbFlushReason::RemoteShootdown, (!full).then_some(pages));
            let tlb = &mut self.cpus[c as usize].tlb;
            if full {
                tlb.flush_asid(asid);
                self.mm_caught_up(mm, c);
            } else {
                tlb.flush_range(asid, start, end);
            }
            self.cpus[c as usize].irq_debt += recv;
        }
        t + self.c.ipi_send * remote.len() as Ns + self.c.ipi_ack
    }

    /// arch_tlbbatch_flush (x86): one IPI round to every CPU of the batch.
    /// A target drops, in full, the entries of each address space whose
    /// TLB generation moved since it last caught up (its loaded mm at once,
    /// the others when it switches back to them: the same entries). The
    /// remote handlers run as the IPIs arrive, so their flushes land over
    /// [t, end) in simulated time; the initiator returns at `end`, when
    /// every acknowledgement is back.
    pub fn arch_tlbbatch_flush(&mut self, t: Ns, cpu: u32, b: &super::rmap::TlbBatch) -> Ns {
        self.stat.inc(Stat::TlbBatchedFlush);
        let targets: Vec<u32> = b.cpus_iter().collect();
        let mut t_local = t;
        let mut sent = 0u64;
        let recv = self.c.ipi_recv + self.c.flush_all;
        for &c in &targets {
            // Address spaces this CPU must catch up with.
            let stale: Vec<u32> = self
                .mms
                .iter()
                .filter(|m| {
                    m.alive
                        && m.cpu_tlb_gen.len() > c as usize
                        && m.cpu_tlb_gen[c as usize] < m.tlb_gen
                        && m.cpumask.get((c / 64) as usize).is_some_and(|w| w & (1 << (c % 64)) != 0)
                })
                .map(|m| m.id)
                .collect();
            for &m in &stale {
                let g = self.mms[m as usize].tlb_gen;
                self.mms[m as usize].cpu_tlb_gen[c as usize] = g;
            }
            self.stat.inc(Stat::TlbFlushEvents);
            if c == cpu {
                for m in stale {
                    self.cpus[c as usize].tlb.flush_asid(m);
                }
                self.stat.inc(Stat::NrTlbLocalFlushAll);
                self.trace.tlb_flush(t_local, c, TlbFlushReason::LocalShootdown, None);
                t_local += self.c.flush_all;
                continue;
            }
            sent += 1;
            self.trace.tlb_flush(t + self.c.ipi_send * sent, c, TlbFlushReason::RemoteShootdown, None);
            // The handler's flush is done when its IRQ work is.
            let at = t + self.c.ipi_send * sent + self.c.ipi_recv;
            for m in stale {
                self.cpus[c as usize].landing.push((at, m));
            }
            self.cpus[c as usize].irq_debt += recv;
        }
        if sent == 0 {
            return t_local;
        }
        self.stat.inc(Stat::NrTlbRemoteFlush);
        self.stat.add(Stat::NrTlbRemoteFlushReceived, sent as i64);
        t_local.max(t + self.c.ipi_send * sent + self.c.ipi_ack)
    }

    /// A full flush of `mm` on `cpu`: it owes that mm nothing any more.
    fn mm_caught_up(&mut self, mm: u32, cpu: u32) {
        let m = &mut self.mms[mm as usize];
        if let Some(g) = m.cpu_tlb_gen.get_mut(cpu as usize) {
            *g = m.tlb_gen;
        }
    }

    /// Run the flush handlers of IPIs that reached `cpu` by `t`.
    #[inline]
    pub fn tlb_apply_landed(&mut self, cpu: u32, t: Ns) {
        let c = &mut self.cpus[cpu as usize];
        if c.landing.is_empty() || c.landing.iter().all(|l| l.0 > t) {
            return;
        }
        let mut keep = Vec::new();
        for (at, m) in std::mem::take(&mut c.landing) {
            if at <= t {
                c.tlb.flush_asid(m);
            } else {
                keep.push((at, m));
            }
        }
        c.landing = keep;
    }

    /// Ground truth for the checker: does `cpu` at time `t` still cache a
    /// translation of (mm, va) to `pfn` (no flush has reached it)?
    pub fn tlb_live_entry(&self, cpu: u32, mm: u32, va: u64, pfn: Pfn, t: Ns) -> bool {
        self.tlb_live_entry_w(cpu, mm, va, pfn, t).is_some()
    }

    /// `tlb_live_entry`, saying whether a live entry is writable.
    pub fn tlb_live_entry_w(&self, cpu: u32, mm: u32, va: u64, pfn: Pfn, t: Ns) -> Option<bool> {
        // An exited mm's entries sit in a dead ASID: no CPU loads it again,
        // and whoever takes the slot flushes it first (mm/asid.rs).
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

    /// flush_tlb_page (ptep_clear_flush).
    pub fn flush_tlb_page(&mut self, t: Ns, cpu: u32, mm: u32, va: u64) -> Ns {
        self.flush_tlb_mm_range(t, cpu, mm, va, va + 4096, false)
    }

    /// tlb_finish_mmu: flush what was gathered, then free pages and tables.
    pub fn tlb_finish_mmu(&mut self, t: Ns, cpu: u32, mut tlb: MmuGather) -> Ns {
        let mut t = t;
        if tlb.fullmm {
            // exit_mmap: every CPU that ran the mm switches to init_mm
            // (flush_tlb_func on a lazy CPU) without flushing the mm's
            // ASID; its entries stay there, unreachable, until another mm
            // takes the slot and flushes it (mm/asid.rs).
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
