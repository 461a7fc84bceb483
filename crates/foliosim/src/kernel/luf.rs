//! The kernel's side of lazy unmap flush (mm/luf.rs owns the pending
//! sets): the calls that need more than LUF's own state, namely the
//! current task's batches, the IPI round (arch_tlbbatch_flush), the page
//! allocator's exits and the checker.

use crate::kernel::knobs::{LufMutant, Mutant};
use crate::kernel::Kernel;
use crate::mm::luf::{ForcedBy, LufExit, LufFlush};
use crate::mm::page_alloc::MigrateType;
use crate::mm::vmstat::Stat;
use crate::mm::Pfn;
use crate::sim::Ns;

impl Kernel {
    /// Forced-flush hooks are compiled in (LUF on, not the M12 mutant).
    #[inline]
    pub fn luf_hooks_on(&self) -> bool {
        self.knobs.luf.enabled && self.knobs.mutant != Mutant::Luf(LufMutant::NoWpHooks)
    }

    /// try_to_unmap_luf for task `tid` (mm/luf.rs).
    pub fn try_to_unmap_luf(&mut self, t: Ns, cpu: u32, tid: u32, nid: u32) -> (u16, Ns) {
        let u = &mut self.tasks[tid as usize].ubc;
        self.luf.try_to_unmap_luf(t, cpu, nid, u, &self.knobs, self.nodes.len(), &self.lc, &mut self.stat)
    }

    /// check_luf_flush: on return, generation `u` of node `nid`'s set has
    /// been flushed on every CPU that deferred it.
    pub fn check_luf_flush(&mut self, t: Ns, cpu: u32, tid: u32, nid: u32, u: u16) -> Ns {
        if u == 0 || !self.knobs.luf.enabled {
            return t;
        }
        let (t, mut b) = match self.luf.check_flush(t, cpu, nid, u, &self.knobs, self.nodes.len(), &self.lc) {
            LufFlush::Done(t) => return t,
            LufFlush::Flush(t, b) => (t, b),
        };
        // try_to_unmap_flush: the task's own batches go in the same round.
        let uc = &mut self.tasks[tid as usize].ubc;
        b.fold(&mut uc.ubc);
        b.fold(&mut uc.luf);
        if self.irqs_off && b.cpus_iter().any(|c| c != cpu) {
            self.check.report(format!("I8: cpu {cpu} starts a LUF shootdown with IRQs disabled at {t} ns (deadlock hazard)"));
        }
        self.stat.inc(Stat::LufFlush);
        self.stat.add(Stat::LufFlushCpus, b.cpus_iter().count() as i64);
        let end = self.arch_tlbbatch_flush(t, cpu, &b);
        self.luf.flush_started(nid, u, t, end, &self.knobs);
        end
    }

    /// Ordinary batched flush of `cpus` over [start, end) (mm/luf.rs).
    pub(crate) fn luf_retire_flushed(&mut self, start: Ns, end: Ns, cpus: &[u64]) {
        self.luf.retire_flushed(start, end, cpus, &self.knobs, self.nodes.len());
    }

    /// luf_flush: the forced give-up. Flush everything deferred in every
    /// set, whatever the caller's interest.
    pub fn luf_flush(&mut self, t: Ns, cpu: u32, tid: u32, why: ForcedBy) -> Ns {
        if !self.knobs.luf.enabled || !self.luf.any_pending() {
            return t;
        }
        self.stat.inc(match why {
            ForcedBy::WpFault => Stat::LufForcedWp,
            ForcedBy::MmapWrite => Stat::LufForcedMmap,
            ForcedBy::FaultWritable => Stat::LufForcedFault,
            ForcedBy::FileWrite => Stat::LufForcedWrite,
            ForcedBy::InitOnFree | ForcedBy::MemoryFailure => Stat::LufForcedOther,
            ForcedBy::Invalidate => Stat::LufForcedInvalidate,
        });
        let tid = tid.min(self.tasks.len().saturating_sub(1) as u32);
        let mut t = t;
        for (nid, g) in self.luf.open_gens(&self.knobs) {
            t = self.check_luf_flush(t, cpu, tid, nid, g);
        }
        t
    }

    /// Would taking a page of generation `ugen` on node `nid` at `t` need a flush?
    pub fn luf_pending(&self, nid: u32, ugen: u16, t: Ns) -> bool {
        self.luf.pending(nid, ugen, t, &self.knobs)
    }

    /// An order-0 allocation with IRQs disabled (GFP_ATOMIC from an
    /// interrupt). It must not start a shootdown, so, as RFC v12 does, it
    /// passes by up to three pages whose generation is still pending
    /// (they go back afterwards) and fails rather than flush.
    pub fn alloc_page_atomic(&mut self, t: Ns, cpu: u32, nid: u32) -> Option<(Pfn, Ns)> {
        let d5 = self.knobs.mutant == Mutant::Luf(LufMutant::D5IrqOffFlush);
        self.irqs_off = true;
        let mut t = t;
        let mut aside = Vec::new();
        let mut got = None;
        for _ in 0..3 {
            let Some(a) = self.pa.alloc_pages(t, cpu, 0, nid, MigrateType::Movable, &mut self.stat) else { break };
            t = a.done;
            if !d5 && self.luf_pending(a.nid, a.ugen, t) {
                aside.push((a.pfn, a.ugen));
                continue;
            }
            t = self.post_alloc_hook(t, cpu, a.pfn, 0, a.nid, LufExit::Alloc(a.ugen), "atomic allocation");
            got = Some(a.pfn);
            break;
        }
        for (pfn, ugen) in aside {
            t = self.pa.free_pages_ugen(t, cpu, pfn, 0, ugen, &mut self.stat);
        }
        self.irqs_off = false;
        got.map(|p| (p, t))
    }

    /// An exit that takes free pages off the lists for a purpose other
    /// than an ordinary allocation (compaction isolation and capture,
    /// alloc_contig_range, memory offline, hwpoison take-off): the same
    /// check as `prep_new_page`, unless the M6 mutant skips it.
    pub fn luf_isolation_exit(&mut self, t: Ns, cpu: u32, nid: u32, ugen: u16) -> Ns {
        if self.knobs.mutant == Mutant::Luf(LufMutant::SkipIsolationCheck) {
            return t;
        }
        self.luf_alloc_exit(t, cpu, nid, ugen)
    }

    /// An exit from the allocator (prep_new_page and its siblings): the
    /// task picked up generation `ugen` with the block at node `nid`, and
    /// flushes it before the new owner's first access.
    pub fn luf_alloc_exit(&mut self, t: Ns, cpu: u32, nid: u32, ugen: u16) -> Ns {
        if ugen == 0 || !self.knobs.luf.enabled {
            return t;
        }
        self.stat.inc(Stat::LufAllocPending);
        if self.knobs.mutant == Mutant::Luf(LufMutant::SkipAllocFlush) {
            return t;
        }
        let tid = self.cpus[cpu as usize].curr;
        let tid = if (tid as usize) < self.tasks.len() { tid } else { 0 };
        let acc = crate::mm::page_alloc::ugen_latest(self.tasks.get(tid as usize).map_or(0, |x| x.ubc.ugen), ugen);
        if let Some(tk) = self.tasks.get_mut(tid as usize) {
            tk.ubc.ugen = 0;
        }
        if self.tasks.is_empty() {
            return t;
        }
        self.check_luf_flush(t, cpu, tid, nid, acc)
    }
}
