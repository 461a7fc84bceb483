//! LRU lists and the per-CPU LRU-add batch (mm/swap.c), folio release.

use super::mem_map::pg;
use super::mmzone::{folio_lru_list, LruRun, NR_LRU_LISTS};
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;

const LRU_STAT: [Stat; 4] = [Stat::NrInactiveAnon, Stat::NrActiveAnon, Stat::NrInactiveFile, Stat::NrActiveFile];

/// Clear a listed folio's PG_lru and LRU links; returns its flags (as they
/// were), node, order and old links, for `Kernel::lruvec_unlink`.
#[inline(always)]
fn lru_take(p: &mut crate::mm::mem_map::Page) -> (u32, usize, u8, u32, u32) {
    let r = (p.flags, p.nid as usize, p.order, p.lru_prev, p.lru_next);
    p.flags &= !pg::LRU;
    p.lru_prev = 0;
    p.lru_next = 0;
    r
}

/// What freeing a frame clears besides its mapcount (free_folio_reset).
/// Its cache stamp stays (hw/cache.rs): the free touches none of its lines.
#[inline(always)]
fn clear_freed_page(p: &mut crate::mm::mem_map::Page) {
    p.flags = 0;
    p.mapping = 0;
    p.index = 0;
    p.private = 0;
}

impl Kernel {
    /// lruvec_add_folio: caller holds the node's lru_lock (in simulated time).
    pub fn lruvec_add_folio(&mut self, pfn: Pfn) {
        self.lruvec_add_folio_nid(pfn);
    }

    /// `lruvec_add_folio`, returning the folio's node (its lru_lock's),
    /// read in the same frame lookup. Always inlined into the batch drain.
    #[inline(always)]
    fn lruvec_add_folio_nid(&mut self, pfn: Pfn) -> usize {
        let mut acc = [0; NR_LRU_LISTS];
        let nid = self.lruvec_add_folio_put(pfn, false, &mut acc).0;
        self.lru_stat_add(&acc);
        nid
    }

    /// Count the base pages a batch moved onto (or off, negative) each LRU
    /// list, summed in `acc` (nothing reads these counters mid-batch).
    #[inline(always)]
    fn lru_stat_add(&mut self, acc: &[i64; NR_LRU_LISTS]) {
        for (i, &s) in LRU_STAT.iter().enumerate() {
            self.stat.add(s, acc[i]);
        }
    }

    /// `lruvec_add_folio_nid`, also dropping a reference in the same frame
    /// lookup if `put`; returns the node and whether that was the last
    /// reference (or one too many). The pages listed are counted in `acc`
    /// for `lru_stat_add`.
    #[inline(always)]
    fn lruvec_add_folio_put(&mut self, pfn: Pfn, put: bool, acc: &mut [i64; NR_LRU_LISTS]) -> (usize, bool) {
        // PG_lru and the folio's own links are set in the same frame
        // lookup (the list choice ignores PG_lru).
        let nodes = &mut self.nodes;
        let p = self.mem_map.get_mut(pfn);
        let mut last = false;
        if put {
            p.refcount -= 1;
            last = p.refcount <= 0;
        }
        let (flags, nid, order) = (p.flags, p.nid as usize, p.order);
        p.flags |= pg::LRU;
        let lru = folio_lru_list(flags);
        let lruvec = &mut nodes[nid].lruvec;
        p.lru_prev = 0;
        p.lru_next = lruvec.head(lru);
        lruvec.link_head(&mut self.mem_map, lru, pfn, order);
        acc[lru] += 1 << order;
        (nid, last)
    }

    #[inline(always)]
    pub fn lruvec_del_folio(&mut self, pfn: Pfn) {
        // PG_lru and the folio's links are read and cleared in one frame
        // lookup (a listed folio is never its own neighbour).
        let p = self.mem_map.get_mut(pfn);
        let (flags, nid, order, prev, next) = lru_take(p);
        let mut acc = [0; NR_LRU_LISTS];
        self.lruvec_unlink(flags, nid, order, prev, next, &mut acc);
        self.lru_stat_add(&acc);
    }

    /// The rest of `lruvec_del_folio` once `lru_take` has read and cleared
    /// the folio's LRU state (`flags` as they were before); the pages
    /// removed are counted in `acc` for `lru_stat_add`.
    #[inline(always)]
    fn lruvec_unlink(&mut self, flags: u32, nid: usize, order: u8, prev: u32, next: u32, acc: &mut [i64; NR_LRU_LISTS]) {
        let lru = folio_lru_list(flags);
        self.nodes[nid].lruvec.unlink(&mut self.mem_map, lru, prev, next, order);
        acc[lru] -= 1 << order;
    }

    /// Take the stretch `run` (if any) out of its list; its pages are
    /// counted in `acc` for `lru_stat_add`.
    #[inline(always)]
    fn lru_run_end(&mut self, run: &LruRun, acc: &mut [i64; NR_LRU_LISTS]) {
        if run.folios > 0 {
            self.nodes[run.nid].lruvec.unlink_run(&mut self.mem_map, run);
            acc[run.lru] -= run.pages as i64;
        }
    }

    /// folio_add_lru: queue a new folio on this CPU's batch (taking a
    /// reference); a full batch, or any large folio, drains at once.
    /// Small (the drain is out of line): always inlined.
    #[inline(always)]
    pub fn folio_add_lru(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Ns {
        let large = {
            let p = self.mem_map.get_mut(pfn);
            p.refcount += 1;
            p.order > 0
        };
        let b = &mut self.cpus[cpu as usize].lru_add;
        b.push(pfn);
        let t = t + self.c.lru_add;
        if b.len() >= self.c.lru_batch || large {
            self.lru_add_drain_cpu(t, cpu)
        } else {
            t
        }
    }

    /// lru_add_drain_all: every CPU's batch reaches its LRU (callers that
    /// need every folio on a list before isolating: migration, isolation,
    /// invalidation, memory failure).
    pub fn lru_add_drain_all(&mut self, t: Ns) -> Ns {
        let mut t = t;
        for c in 0..self.nr_cpus() {
            t = self.lru_add_drain_cpu(t, c);
        }
        t
    }

    /// Move this CPU's batch onto the LRU lists, one lru_lock section per
    /// node, then drop the batch's references (which may free folios).
    pub fn lru_add_drain_cpu(&mut self, t: Ns, cpu: u32) -> Ns {
        if self.cpus[cpu as usize].lru_add.is_empty() {
            return t;
        }
        let batch = std::mem::take(&mut self.cpus[cpu as usize].lru_add);
        let mut t = t;
        // One lru_lock section per run of folios on the same node. Each
        // folio is listed in the frame lookup that reads its node, and the
        // run's section is charged when the run ends: nothing reads the
        // lists or the lock in between, so only host order differs.
        //
        // The batch's references are dropped in the same lookups (nothing
        // reads a refcount before the release below). Almost always every
        // folio stays referenced (mapped) and that is the whole release;
        // if one does not, the drops are undone and release_folios does
        // them all in its order, as it always did.
        let mut run_nid = usize::MAX;
        let mut run = 0;
        let mut any_last = false;
        let mut acc = [0; NR_LRU_LISTS];
        for &p in &batch {
            let (nid, last) = self.lruvec_add_folio_put(p, true, &mut acc);
            any_last |= last;
            if nid != run_nid && run > 0 {
                t = self.lru_lock_folios(t, cpu, run_nid, run);
                run = 0;
            }
            run_nid = nid;
            run += 1;
        }
        if run > 0 {
            t = self.lru_lock_folios(t, cpu, run_nid, run);
        }
        self.lru_stat_add(&acc);
        if any_last {
            for &p in &batch {
                self.mem_map.get_mut(p).refcount += 1;
            }
            t = self.release_folios(t, cpu, &batch);
        }
        // Hand the (now empty) buffer back so the batch never reallocates.
        let mut batch = batch;
        batch.clear();
        if self.cpus[cpu as usize].lru_add.is_empty() {
            self.cpus[cpu as usize].lru_add = batch;
        }
        t
    }

    /// A section under node `nid`'s lru_lock that lists or unlists `n`
    /// folios, from `t`; returns its end.
    #[inline(always)]
    pub(crate) fn lru_lock_folios(&mut self, t: Ns, cpu: u32, nid: usize, n: usize) -> Ns {
        self.nodes[nid].lruvec.lock_folios(t, cpu, n, self.c.lru_lock_per_folio, &self.lc)
    }

    /// Drop one reference from each folio (folios_put / release_pages):
    /// folios reaching zero leave the LRU under one lru_lock section per node
    /// and return to the allocator.
    pub fn release_folios(&mut self, t: Ns, cpu: u32, folios: &[Pfn]) -> Ns {
        self.release_folios_ugen(t, cpu, folios, 0)
    }

    /// free_unref_folios(..., ugen): `release_folios` for folios whose TLB
    /// flush LUF deferred under generation `ugen`.
    pub fn release_folios_ugen(&mut self, t: Ns, cpu: u32, folios: &[Pfn], ugen: u16) -> Ns {
        let mut t = t;
        let mut dead = std::mem::take(&mut self.scratch_dead);
        dead.clear();
        // Whether every dead folio is order 0 (the bulk free below).
        let mut all_small = true;
        let mut on_lru = 0;
        let mut nid = 0;
        // The bulk free's per-frame reset of an order-0 folio is done in
        // the lookup that finds it dead when it will not report (mapcount
        // 0): it is idempotent, so the free paths below may repeat it, and
        // nothing reads the fields it clears before they would. `reset`
        // says whether every dead folio so far got it. (init_on_free
        // zeroes each frame: the per-folio path below.)
        let eager = !self.knobs.init_on_free;
        let mut reset = true;
        let mut acc = [0; NR_LRU_LISTS];
        // The dead folios leave their lists as stretches (`LruRun`).
        let mut run = LruRun::default();
        for &p in folios {
            let pg = self.mem_map.get_mut(p);
            pg.refcount -= 1;
            if pg.refcount < 0 {
                pg.refcount = 0;
                self.check.report(format!("folio {p}: refcount underflow (put without a reference)"));
                continue;
            }
            if pg.refcount == 0 {
                all_small &= pg.order == 0;
                // A dead folio leaves its LRU list in the same frame
                // lookup. The lru_lock section that covers these removals
                // is charged below, once the batch is counted: nothing
                // reads the lists in between, so only host order differs.
                let lru = if pg.flags & pg::LRU != 0 {
                    on_lru += 1;
                    nid = pg.nid as usize;
                    Some(lru_take(pg))
                } else {
                    None
                };
                if eager && pg.order == 0 && pg.mapcount == 0 {
                    clear_freed_page(pg);
                } else {
                    reset = false;
                }
                if let Some((flags, fnid, order, prev, next)) = lru {
                    if !run.extend(p, prev, next, 1 << order) {
                        self.lru_run_end(&run, &mut acc);
                        run = LruRun { nid: fnid, lru: folio_lru_list(flags), prev, next, folios: 1, pages: 1 << order };
                    }
                }
                dead.push(p);
            }
        }
        self.lru_run_end(&run, &mut acc);
        self.lru_stat_add(&acc);
        if dead.is_empty() {
            self.scratch_dead = dead;
            return t;
        }
        if on_lru > 0 {
            t = self.lru_lock_folios(t, cpu, nid, on_lru);
        }
        // mem_cgroup_uncharge_folios and free_unref_folios, once per batch.
        t += self.c.folios_put_batch;
        self.note_free(cpu);
        if all_small && eager {
            // free_folio_ugen of order-0 folios with init_on_free off: the
            // per-frame reset touches only mem_map and the allocator never
            // reads it, so reset them all, then free the batch in one
            // allocator call.
            if !reset {
                for &p in &dead {
                    self.free_folio_reset(p, 0);
                }
            }
            // The checker sees each frame as free_folio_ugen shows it to
            // it, at the moment the batch goes to the allocator.
            if self.check.enabled {
                for &p in &dead {
                    self.check.on_free(p, 0);
                    self.check_free_flushed(t, p, 0, ugen);
                }
            }
            t += self.c.free_folio * dead.len() as Ns;
            t = self.pa.free_pages_bulk_ugen(t, cpu, &dead, ugen, &mut self.stat);
        } else {
            for &p in &dead {
                t = self.free_folio_ugen(t, cpu, p, ugen);
            }
        }
        self.scratch_dead = dead;
        t
    }

    /// The frames of a freed folio lose their mapping state.
    #[inline(always)]
    fn free_folio_reset(&mut self, pfn: Pfn, order: u32) {
        for i in 0..(1u32 << order) {
            let p = self.mem_map.get_mut(pfn + i);
            if p.mapcount != 0 {
                let m = p.mapcount;
                self.check.report(format!("frame {}: freed while its mapcount is {m}", pfn + i));
            }
            p.mapcount = 0;
            clear_freed_page(p);
        }
    }

    /// Return a folio whose last reference is gone to the page allocator.
    pub fn free_folio(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Ns {
        self.free_folio_ugen(t, cpu, pfn, 0)
    }

    /// The free path ran on `cpu`: its next fault and its next allocation
    /// find their lines displaced (fault_after_free_ns, alloc_after_free_ns).
    #[inline(always)]
    fn note_free(&mut self, cpu: u32) {
        if let Some(c) = self.cpus.get_mut(cpu as usize) {
            c.cache.freed_since_fault = true;
            c.cache.freed_since_alloc = true;
        }
    }

    /// `free_folio` carrying LUF generation `ugen` into pcp/buddy.
    pub fn free_folio_ugen(&mut self, t: Ns, cpu: u32, pfn: Pfn, ugen: u16) -> Ns {
        self.note_free(cpu);
        let order = self.mem_map.get(pfn).order as u32;
        // Large folios leave the deferred-split queue first (free_transhuge_page).
        let t = if order >= 2 { self.free_large_folio(t, cpu, pfn) } else { t };
        self.free_folio_reset(pfn, order);
        // free_pages_prepare checks and resets every tail page.
        let t = t + self.c.free_folio + self.c.free_tail * ((1 << order) - 1);
        self.check.on_free(pfn, order);
        let mut t = t;
        let mut ugen = ugen;
        if self.knobs.init_on_free {
            // The free frame is zeroed: its contents change. LUF v11 flushes
            // what it deferred first.
            if ugen != 0
                && self.knobs.luf.v11_hooks
                && self.knobs.mutant != crate::kernel::knobs::Mutant::Luf(crate::kernel::knobs::LufMutant::PoisonPending)
            {
                let nid = self.pfn_to_nid(pfn);
                let tid = self.current_tid(cpu);
                t = self.check_luf_flush(t, cpu, tid, nid, ugen);
                self.stat.inc(Stat::LufForcedOther);
                ugen = 0;
            }
            self.check_content_change(t, pfn, order, "init_on_free");
            let nid = self.mem_map.get(pfn).nid as usize;
            t = self.mem_traffic(t, cpu, nid, 4096 << order, self.nodes[nid].zero_4k << order);
            // The zeroing brings its lines in: its last touch.
            let stamp = self.llc.on_write(cpu, 1 << order);
            for i in 0..(1u32 << order) {
                self.mem_map.get_mut(pfn + i).cached = stamp;
            }
        }
        self.check_free_flushed(t, pfn, order, ugen);
        self.pa.free_pages_ugen(t, cpu, pfn, order, ugen, &mut self.stat)
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::Kernel;
    use crate::mm::mem_map::pg;
    use crate::mm::page_alloc::MigrateType;

    /// Two CPUs drain a full LRU-add batch each at the same moment: each
    /// drain is one lru_lock section of `lru_lock_per_folio` per folio, and
    /// the second waits for the whole of the first (all folios on node 0).
    #[test]
    fn concurrent_lru_add_drains_serialise_on_the_lru_lock_for_their_batch() {
        let cfg = crate::config::from_toml(
            "[machine]\nprofile = \"generic-x86\"\nnode_mem_mib = [256, 256]\nnr_cpus = 2\n[workload]\nname = \"page_fault1\"\n",
            "<test>",
        )
        .unwrap();
        let mut k = Kernel::boot(cfg.profile.clone(), cfg.knobs.clone(), true, 1).unwrap();
        let batch = k.c.lru_batch;
        let t0 = 1_000_000;
        let mut pfns = Vec::new();
        for cpu in 0..2 {
            for _ in 0..batch {
                let (pfn, _) = k.alloc_folio(t0, cpu, 0, 0, MigrateType::Movable).unwrap();
                k.folio_add_lru(t0, cpu, pfn);
                pfns.push(pfn);
            }
        }
        let hold = k.c.lru_lock_per_folio * batch as u64;
        assert!(hold > 0);
        let lock = k.nodes[0].lruvec.lru_lock();
        assert_eq!((lock.acquisitions, lock.contended), (2, 1));
        assert!(lock.wait_ns >= hold, "the second drain waited {} ns, the first held {hold} ns", lock.wait_ns);
        assert!(pfns.iter().all(|&p| k.mem_map.get(p).flags & pg::LRU != 0));
    }
}
