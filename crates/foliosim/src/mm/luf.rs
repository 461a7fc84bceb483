//! Lazy unmap flush (the LUF v10 series, never merged; docs/mechanisms/lazy-unmap-flush.md).
//!
//! When reclaim or async migration unmaps an order-0 folio whose every PTE
//! was read-only, a CPU still caching the old translation can only read
//! the frame, and a free frame's contents do not change. So the shootdown
//! may wait until the frame leaves the page allocator again. Deferred CPUs
//! pile up in one pending set (global as in v10, or one per zone); every
//! deferral until the next LUF flush gets the same 16-bit generation,
//! which travels with the page through pcp and buddy (mm/page_alloc.rs).
//! Whoever takes a page out of the allocator checks its generation and, if
//! that generation was not flushed yet, flushes the whole pending set
//! (`check_luf_flush`) before touching the page.
//!
//! Interleavings are real in simulated time: an ordinary batched flush and
//! a LUF flush occupy a window [start, end) while their IPIs are in flight.
//! A deferral inside an ordinary flush's window is refused (its end would
//! otherwise retire CPUs it never flushed); a second LUF flusher inside a
//! LUF window waits for its end.

use super::page_alloc::ugen_before;
use super::page_alloc::MigrateType;
use super::rmap::TlbBatch;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::knobs::{LufMutant, Mutant};
use crate::kernel::Kernel;
use crate::sim::Ns;

/// How the block `post_alloc_hook` prepares was checked for a pending
/// lazy-unmap flush.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LufExit {
    /// An ordinary allocation that took a block carrying this generation.
    Alloc(u16),
    /// Free pages taken off the lists by another door (compaction capture).
    Isolation(u16),
    /// Already checked when the frames were isolated.
    Checked,
}

/// Windows older than this behind the current time are forgotten.
const WINDOW_HORIZON: Ns = 10_000_000;

/// The next generation, skipping 0 ("none").
pub fn ugen_next(g: u16) -> u16 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// One pending set (luf_ubc with its generations and lock state).
#[derive(Clone, Debug)]
pub struct LufSet {
    /// Union of the CPUs of every deferral not flushed yet.
    pub ubc: TlbBatch,
    /// Generation of the open deferral set (luf_gen).
    pub gen: u16,
    /// What luf_gen becomes at the next deferral (luf_gen_next).
    pub gen_next: u16,
    /// Last generation whose flush completed, as of `done_at`; before that
    /// time readers still see `done_prev`.
    pub gen_done: u16,
    pub done_prev: u16,
    pub done_at: Ns,
    /// Ordinary try_to_unmap_flush windows in progress (on_flushing).
    pub flushing: Vec<(Ns, Ns)>,
    /// The LUF flush in progress (luf_on_flushing), as its window.
    pub luf_flushing: Option<(Ns, Ns)>,
    /// Step (c) of ordinary flushes: drop these CPUs from `ubc` once the
    /// IPI round has ended.
    pub retire: Vec<(Ns, Vec<u64>)>,
}

impl Default for LufSet {
    fn default() -> Self {
        LufSet {
            ubc: TlbBatch::default(),
            gen: 0,
            gen_next: 1,
            gen_done: 0,
            done_prev: 0,
            done_at: 0,
            flushing: Vec::new(),
            luf_flushing: None,
            retire: Vec::new(),
        }
    }
}

impl LufSet {
    /// luf_gen_done as a reader at `t` sees it (READ_ONCE).
    pub fn done_seen(&self, t: Ns) -> u16 {
        if t >= self.done_at {
            self.gen_done
        } else {
            self.done_prev
        }
    }

    fn apply_retires(&mut self, t: Ns) {
        if self.retire.iter().all(|r| r.0 > t) {
            return;
        }
        let mut keep = Vec::new();
        for (at, cpus) in std::mem::take(&mut self.retire) {
            if at <= t {
                self.ubc.done(&cpus);
            } else {
                keep.push((at, cpus));
            }
        }
        self.retire = keep;
        self.flushing.retain(|w| w.1 + WINDOW_HORIZON > t);
    }

    fn ordinary_flush_running(&self, t: Ns) -> bool {
        self.flushing.iter().any(|&(s, e)| s <= t && t < e)
    }
}

/// Global LUF state: one set (v10) or one per zone.
#[derive(Clone, Debug, Default)]
pub struct Luf {
    pub sets: Vec<LufSet>,
}

/// Why a forced flush (`luf_flush`) ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForcedBy {
    WpFault,
    MmapWrite,
    FaultWritable,
    FileWrite,
    InitOnFree,
    MemoryFailure,
    /// invalidate_inode_pages2 under `luf.invalidate_hook`.
    Invalidate,
}

impl Kernel {
    /// Forced-flush hooks are compiled in (LUF on, not the M12 mutant).
    #[inline]
    pub fn luf_hooks_on(&self) -> bool {
        self.knobs.luf.enabled && self.knobs.mutant != Mutant::Luf(LufMutant::NoWpHooks)
    }

    /// The pending set a page of node `nid` belongs to.
    fn luf_set_idx(&self, nid: u32) -> usize {
        if self.knobs.luf.per_zone {
            nid as usize
        } else {
            0
        }
    }

    fn luf_ensure_sets(&mut self) {
        let n = if self.knobs.luf.per_zone { self.nodes.len() } else { 1 };
        if self.luf.sets.len() < n {
            self.luf.sets.resize(n, LufSet::default());
        }
    }

    /// Wrap-aware "a is before b", or the M14 mutant's signed compare.
    fn luf_before(&self, a: u16, b: u16) -> bool {
        if self.knobs.mutant == Mutant::Luf(LufMutant::SignedCompare) {
            (a as i16) < (b as i16)
        } else {
            ugen_before(a, b)
        }
    }

    /// try_to_unmap_luf: hand this task's LUF'd CPUs to the pending set of
    /// node `nid`. Returns the generation to free the folios with, or 0
    /// when it gave up (the CPUs then go to the task's ordinary batch).
    pub fn try_to_unmap_luf(&mut self, t: Ns, cpu: u32, tid: u32, nid: u32) -> (u16, Ns) {
        if !self.tasks[tid as usize].ubc.luf.flush_required {
            return (0, t);
        }
        self.luf_ensure_sets();
        let si = self.luf_set_idx(nid);
        let t = self.luf_lock.lock_for(t, cpu, 0, &self.lc);
        let refuse = self.knobs.mutant != Mutant::Luf(LufMutant::NoOnFlushingRefusal);
        let set = &mut self.luf.sets[si];
        set.apply_retires(t);
        let busy = set.ordinary_flush_running(t) || set.luf_flushing.is_some_and(|(s, e)| s <= t && t < e);
        let u = &mut self.tasks[tid as usize].ubc;
        if busy && refuse {
            u.ubc.fold(&mut u.luf);
            self.stat.inc(Stat::LufGiveupFlushing);
            return (0, t);
        }
        if self.knobs.mutant == Mutant::Luf(LufMutant::HandoverOverwrites) && set.ubc.flush_required {
            // Broken: the earlier deferrals are taken as settled, their
            // CPUs dropped and their generation marked done, unflushed.
            set.ubc.clear();
            set.gen_done = set.gen;
            set.done_prev = set.gen;
            set.gen_next = ugen_next(set.gen);
        }
        set.ubc.fold(&mut u.luf);
        set.gen = set.gen_next;
        (set.gen, t)
    }

    /// check_luf_flush: on return, generation `u` of node `nid`'s set has
    /// been flushed on every CPU that deferred it.
    pub fn check_luf_flush(&mut self, t: Ns, cpu: u32, tid: u32, nid: u32, u: u16) -> Ns {
        if u == 0 || !self.knobs.luf.enabled {
            return t;
        }
        self.luf_ensure_sets();
        let si = self.luf_set_idx(nid);
        let mut t = t;
        loop {
            let done = {
                let set = &mut self.luf.sets[si];
                set.apply_retires(t);
                set.done_seen(t)
            };
            if !self.luf_before(done, u) {
                return t;
            }
            t = self.luf_lock.lock_for(t, cpu, 0, &self.lc);
            let set = &mut self.luf.sets[si];
            if ugen_next(set.done_seen(t)) != u {
                return t;
            }
            if let Some((_, e)) = set.luf_flushing {
                // A LUF flush not finished at `t` (steps run in host order,
                // so one that starts later in simulated time counts too).
                if t < e {
                    // Someone else is flushing `u`: wait for it.
                    if self.knobs.mutant == Mutant::Luf(LufMutant::NoWait) {
                        return t;
                    }
                    t = e;
                    continue;
                }
            }
            if !set.ubc.flush_required {
                // Ordinary flushes already covered every deferred CPU.
                return t;
            }
            let mut b = std::mem::take(&mut set.ubc);
            set.gen_next = ugen_next(set.gen);
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
            let early = self.knobs.mutant == Mutant::Luf(LufMutant::EarlyDone);
            let set = &mut self.luf.sets[si];
            set.luf_flushing = Some((t, end));
            set.done_prev = set.done_seen(t);
            set.gen_done = u;
            set.done_at = if early { t } else { end };
            return end;
        }
    }

    /// Ordinary batched flush of `cpus` over [start, end): deferrals are
    /// refused meanwhile, and at `end` its CPUs leave every pending set.
    pub(crate) fn luf_retire_flushed(&mut self, start: Ns, end: Ns, cpus: &[u64]) {
        self.luf_ensure_sets();
        for set in &mut self.luf.sets {
            set.flushing.push((start, end));
            set.retire.push((end, cpus.to_vec()));
        }
    }

    /// luf_flush: the forced give-up. Flush everything deferred in every
    /// set, whatever the caller's interest.
    pub fn luf_flush(&mut self, t: Ns, cpu: u32, tid: u32, why: ForcedBy) -> Ns {
        if !self.knobs.luf.enabled || self.luf.sets.iter().all(|s| !s.ubc.flush_required) {
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
        for si in 0..self.luf.sets.len() {
            let g = self.luf.sets[si].gen;
            let nid = if self.knobs.luf.per_zone { si as u32 } else { 0 };
            t = self.check_luf_flush(t, cpu, tid, nid, g);
        }
        t
    }

    /// Would taking a page of generation `ugen` on node `nid` at `t` need a flush?
    pub fn luf_pending(&self, nid: u32, ugen: u16, t: Ns) -> bool {
        if ugen == 0 || !self.knobs.luf.enabled {
            return false;
        }
        let si = if self.knobs.luf.per_zone { nid as usize } else { 0 };
        self.luf.sets.get(si).is_some_and(|s| self.luf_before(s.done_seen(t), ugen))
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
