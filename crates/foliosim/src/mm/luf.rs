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
//!
//! This file owns the pending sets and luf_lock; its methods take what
//! they need of the kernel (knobs, node count, line costs, the task's
//! batches) as arguments. The calls that need the whole kernel (the IPI
//! round, the allocator's exits, the task lookup) are in kernel/luf.rs.

use super::mm_types_task::{TaskUbc, TlbBatch};
use super::page_alloc::ugen_before;
use super::vmstat::{Stat, VmStat};
use crate::kernel::knobs::{Knobs, LufMutant, Mutant};
use crate::sim::lock::{LineCost, SpinLock};
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
struct LufSet {
    /// Union of the CPUs of every deferral not flushed yet.
    ubc: TlbBatch,
    /// Generation of the open deferral set (luf_gen).
    gen: u16,
    /// What luf_gen becomes at the next deferral (luf_gen_next).
    gen_next: u16,
    /// Last generation whose flush completed, as of `done_at`; before that
    /// time readers still see `done_prev`.
    gen_done: u16,
    done_prev: u16,
    done_at: Ns,
    /// Ordinary try_to_unmap_flush windows in progress (on_flushing).
    flushing: Vec<(Ns, Ns)>,
    /// The LUF flush in progress (luf_on_flushing), as its window.
    luf_flushing: Option<(Ns, Ns)>,
    /// Step (c) of ordinary flushes: drop these CPUs from `ubc` once the
    /// IPI round has ended.
    retire: Vec<(Ns, Vec<u64>)>,
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
    fn done_seen(&self, t: Ns) -> u16 {
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

/// Global LUF state: one pending set (v10) or one per zone, and luf_lock.
#[derive(Debug, Default)]
pub struct Luf {
    sets: Vec<LufSet>,
    lock: SpinLock,
}

/// What `check_flush` found: the generation is already flushed (or
/// someone else's flush covers it), or the caller must flush this batch
/// in one IPI round starting at the given time and then report it with
/// `flush_started`.
pub enum LufFlush {
    Done(Ns),
    Flush(Ns, TlbBatch),
}

impl Luf {
    /// One pending set whose generation `done` is flushed and whose next
    /// deferral gets `done + 1`, as after that many LUF flushes: for tests
    /// of the 16-bit wrap, which would otherwise take 32,768 flushes.
    pub fn at_generation(done: u16) -> Luf {
        let set = LufSet { gen: done, gen_next: ugen_next(done), gen_done: done, done_prev: done, ..Default::default() };
        Luf { sets: vec![set], lock: SpinLock::default() }
    }

    /// The pending set a page of node `nid` belongs to.
    #[inline]
    fn set_idx(kn: &Knobs, nid: u32) -> usize {
        if kn.luf.per_zone {
            nid as usize
        } else {
            0
        }
    }

    /// Sets are made on first use: a run that never defers has none.
    fn ensure_sets(&mut self, kn: &Knobs, nr_nodes: usize) {
        let n = if kn.luf.per_zone { nr_nodes } else { 1 };
        if self.sets.len() < n {
            self.sets.resize(n, LufSet::default());
        }
    }

    /// Wrap-aware "a is before b", or the M14 mutant's signed compare.
    fn before(kn: &Knobs, a: u16, b: u16) -> bool {
        if kn.mutant == Mutant::Luf(LufMutant::SignedCompare) {
            (a as i16) < (b as i16)
        } else {
            ugen_before(a, b)
        }
    }

    /// try_to_unmap_luf: hand the task's LUF'd CPUs (`u.luf`) to the
    /// pending set of node `nid`. Returns the generation to free the
    /// folios with, or 0 when it gave up (the CPUs then go to the task's
    /// ordinary batch).
    pub fn try_to_unmap_luf(
        &mut self,
        t: Ns,
        cpu: u32,
        nid: u32,
        u: &mut TaskUbc,
        kn: &Knobs,
        nr_nodes: usize,
        lc: &LineCost,
        stat: &mut VmStat,
    ) -> (u16, Ns) {
        if !u.luf.flush_required {
            return (0, t);
        }
        self.ensure_sets(kn, nr_nodes);
        let si = Self::set_idx(kn, nid);
        let t = self.lock.lock_for(t, cpu, 0, lc);
        let refuse = kn.mutant != Mutant::Luf(LufMutant::NoOnFlushingRefusal);
        let set = &mut self.sets[si];
        set.apply_retires(t);
        let busy = set.ordinary_flush_running(t) || set.luf_flushing.is_some_and(|(s, e)| s <= t && t < e);
        if busy && refuse {
            u.ubc.fold(&mut u.luf);
            stat.inc(Stat::LufGiveupFlushing);
            return (0, t);
        }
        if kn.mutant == Mutant::Luf(LufMutant::HandoverOverwrites) && set.ubc.flush_required {
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

    /// check_luf_flush up to the IPI round: has generation `u` (not 0) of
    /// node `nid`'s set been flushed on every CPU that deferred it? If
    /// not, the set's CPUs are taken for the caller to flush.
    pub fn check_flush(&mut self, t: Ns, cpu: u32, nid: u32, u: u16, kn: &Knobs, nr_nodes: usize, lc: &LineCost) -> LufFlush {
        self.ensure_sets(kn, nr_nodes);
        let si = Self::set_idx(kn, nid);
        let mut t = t;
        loop {
            let done = {
                let set = &mut self.sets[si];
                set.apply_retires(t);
                set.done_seen(t)
            };
            if !Self::before(kn, done, u) {
                return LufFlush::Done(t);
            }
            t = self.lock.lock_for(t, cpu, 0, lc);
            let set = &mut self.sets[si];
            if ugen_next(set.done_seen(t)) != u {
                return LufFlush::Done(t);
            }
            if let Some((_, e)) = set.luf_flushing {
                // A LUF flush not finished at `t` (steps run in host order,
                // so one that starts later in simulated time counts too).
                if t < e {
                    // Someone else is flushing `u`: wait for it.
                    if kn.mutant == Mutant::Luf(LufMutant::NoWait) {
                        return LufFlush::Done(t);
                    }
                    t = e;
                    continue;
                }
            }
            if !set.ubc.flush_required {
                // Ordinary flushes already covered every deferred CPU.
                return LufFlush::Done(t);
            }
            let b = std::mem::take(&mut set.ubc);
            set.gen_next = ugen_next(set.gen);
            return LufFlush::Flush(t, b);
        }
    }

    /// The IPI round `check_flush` asked for runs over [start, end):
    /// generation `u` of node `nid`'s set is done when it ends (at its
    /// start under the M4 mutant).
    pub fn flush_started(&mut self, nid: u32, u: u16, start: Ns, end: Ns, kn: &Knobs) {
        let early = kn.mutant == Mutant::Luf(LufMutant::EarlyDone);
        let set = &mut self.sets[Self::set_idx(kn, nid)];
        set.luf_flushing = Some((start, end));
        set.done_prev = set.done_seen(start);
        set.gen_done = u;
        set.done_at = if early { start } else { end };
    }

    /// Ordinary batched flush of `cpus` over [start, end): deferrals are
    /// refused meanwhile, and at `end` its CPUs leave every pending set.
    pub fn retire_flushed(&mut self, start: Ns, end: Ns, cpus: &[u64], kn: &Knobs, nr_nodes: usize) {
        self.ensure_sets(kn, nr_nodes);
        for set in &mut self.sets {
            set.flushing.push((start, end));
            set.retire.push((end, cpus.to_vec()));
        }
    }

    /// Some set holds deferred CPUs not flushed yet.
    pub fn any_pending(&self) -> bool {
        self.sets.iter().any(|s| s.ubc.flush_required)
    }

    /// The open generation of every set, with the node whose pages it
    /// covers: what the forced give-up (`luf_flush`) flushes.
    pub fn open_gens(&self, kn: &Knobs) -> Vec<(u32, u16)> {
        self.sets.iter().enumerate().map(|(si, s)| (if kn.luf.per_zone { si as u32 } else { 0 }, s.gen)).collect()
    }

    /// Would taking a page of generation `ugen` on node `nid` at `t` need a flush?
    pub fn pending(&self, nid: u32, ugen: u16, t: Ns, kn: &Knobs) -> bool {
        if ugen == 0 || !kn.luf.enabled {
            return false;
        }
        self.sets.get(Self::set_idx(kn, nid)).is_some_and(|s| Self::before(kn, s.done_seen(t), ugen))
    }

    /// luf_gen_done of node `nid`'s set as a reader at `t` sees it (0
    /// before the first deferral): for the checker's audit.
    pub fn done_seen(&self, nid: u32, t: Ns, kn: &Knobs) -> u16 {
        self.sets.get(Self::set_idx(kn, nid)).map_or(0, |s| s.done_seen(t))
    }
}
