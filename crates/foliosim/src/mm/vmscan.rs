//! Reclaim (mm/vmscan.c): page-cache folios from the tail of the inactive
//! file list, refilling it from the active list when it runs short, and
//! anonymous folios from the tail of the inactive anon list when they can
//! go somewhere: demoted to a lower tier (kswapd), or written to a swap
//! device with room (mm/swapfile.rs). `get_scan_count` splits each batch
//! between the two by `vm.swappiness`.

use super::mem_map::pg;
use super::migrate::{MigrateDst, MigrateReason};
use super::mmzone::{folio_is_file_lru, Lru};
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;

/// Folios isolated per shrink_folio_list call (SWAP_CLUSTER_MAX).
const SWAP_CLUSTER_MAX: usize = 32;

impl Kernel {
    /// folio_isolate_lru, with the caller holding lru_lock: the folio
    /// leaves its LRU and the isolation holds a reference. Returns its pages.
    pub(crate) fn folio_isolate_lru(&mut self, pfn: Pfn) -> u64 {
        let nr = 1u64 << self.mem_map.get(pfn).order;
        self.lruvec_del_folio(pfn);
        let pm = self.mem_map.get_mut(pfn);
        pm.flags |= pg::ISOLATED;
        pm.refcount += 1;
        let anon = pm.flags & pg::ANON != 0;
        self.stat.add(if anon { Stat::NrIsolatedAnon } else { Stat::NrIsolatedFile }, nr as i64);
        nr
    }

    /// Evict an isolated, clean page-cache folio: out of the cache, and the
    /// isolation reference dropped (the cache's own goes with the caller's
    /// release_folios). Returns its pages.
    pub(crate) fn drop_isolated_cache_folio(&mut self, pfn: Pfn) -> u64 {
        let (ino, idx, order) = {
            let p = self.mem_map.get(pfn);
            (p.mapping - 1, p.index, p.order)
        };
        self.inodes[ino as usize].pages.remove(&idx);
        self.page_cache_delete(pfn);
        let pm = self.mem_map.get_mut(pfn);
        pm.flags &= !pg::ISOLATED;
        pm.refcount -= 1;
        self.stat.add(Stat::NrIsolatedFile, -(1i64 << order));
        1 << order
    }

    /// try_to_free_pages: reclaim up to `want` base pages. Returns (freed, time).
    pub fn try_to_free_pages(&mut self, t: Ns, cpu: u32, want: u64) -> (u64, Ns) {
        let mut t = self.lru_add_drain_cpu(t, cpu);
        // shrink_slab's deferred-split shrinker: unmapped pages of partly
        // mapped large folios (SHRINK_BATCH = 128 folios).
        let (mut freed, t1) = self.deferred_split_scan(t, cpu, 128);
        t = t1;
        for nid in 0..self.nodes.len() {
            for _ in 0..64 {
                if freed >= want {
                    return (freed, t);
                }
                let (f, t1, scanned) = self.shrink_inactive_file(t, cpu, nid);
                t = t1;
                freed += f;
                if scanned == 0 && !self.refill_inactive_file(t, cpu, nid, &mut t) {
                    break;
                }
            }
        }
        (freed, t)
    }

    /// Whether anonymous folios on `nid` may go to swap: a device with a
    /// free slot (can_reclaim_anon_pages without demotion).
    pub(crate) fn can_swap(&self) -> bool {
        self.swap.nr_free() > 0
    }

    /// get_scan_count for one batch of SWAP_CLUSTER_MAX folios on `nid`
    /// when anonymous memory goes to swap: (anon, file) folios to take.
    /// Without swap room, all file (SCAN_FILE); with a page cache too
    /// small to matter (file + free at or below the high watermark,
    /// sc->file_is_tiny), all anon; else SCAN_FRACT: each list in
    /// proportion to its size times its priority, swappiness for anon and
    /// 200 - swappiness for file (the reclaim costs that weigh them in the
    /// kernel are not modelled: both count as equal).
    pub(crate) fn get_scan_count(&self, nid: usize) -> (usize, usize) {
        if !self.can_swap() || self.tier.next_demotion_node(nid as u32, &self.knobs).is_some() {
            return (0, SWAP_CLUSTER_MAX);
        }
        let l = &self.nodes[nid].lruvec;
        let anon = l.list(Lru::InactiveAnon).pages() + l.list(Lru::ActiveAnon).pages();
        let file = l.list(Lru::InactiveFile).pages() + l.list(Lru::ActiveFile).pages();
        if anon == 0 {
            return (0, SWAP_CLUSTER_MAX);
        }
        let (_, _, high) = self.pa.zone_watermarks(nid as u32);
        if file + self.pa.zone_free_pages(nid as u32) <= high {
            return (SWAP_CLUSTER_MAX, 0);
        }
        let sw = self.knobs.swappiness as u64;
        let (a, f) = (anon * sw, file * (200 - sw));
        if a + f == 0 {
            return (0, SWAP_CLUSTER_MAX);
        }
        let n = ((SWAP_CLUSTER_MAX as u64 * a + (a + f) / 2) / (a + f)) as usize;
        (n, SWAP_CLUSTER_MAX - n)
    }

    /// Up to `n` anonymous folios from the tail of `nid`'s inactive anon
    /// list, the oldest active ones aged onto it first while it is low.
    pub(crate) fn anon_candidates(&mut self, nid: usize, n: usize) -> Vec<Pfn> {
        if n == 0 {
            return Vec::new();
        }
        // shrink_lruvec rebalances: while the inactive list is low against
        // the active one, the oldest active folios are aged onto it
        // (shrink_active_list), even when it is not empty.
        if self.inactive_is_low(nid, Lru::InactiveAnon) {
            let act: Vec<Pfn> = self.nodes[nid].lruvec.list(Lru::ActiveAnon).iter_from_tail(&self.mem_map).take(SWAP_CLUSTER_MAX).collect();
            self.deactivate_folios(&act);
        }
        self.nodes[nid].lruvec.list(Lru::InactiveAnon).iter_from_tail(&self.mem_map).take(n).collect()
    }

    /// With a demotion target, anonymous folios can leave the node even
    /// without swap (can_demote): the tail of the inactive anon list, the
    /// oldest active ones moved there first when it is empty.
    pub(crate) fn anon_demotion_candidates(&mut self, nid: usize) -> Vec<Pfn> {
        let Some(dst) = self.tier.next_demotion_node(nid as u32, &self.knobs) else { return Vec::new() };
        // Demotion targets are allocated without reclaim above the min
        // mark (alloc_migration_target): while the lower tier is below it
        // and there is no swap to fall back on, scanning anon would only
        // fail and rotate.
        let (min, _, _) = self.pa.zone_watermarks(dst);
        if !self.pa.zone_watermark_ok(dst, 0, min) && !self.can_swap() {
            return Vec::new();
        }
        self.anon_candidates(nid, SWAP_CLUSTER_MAX)
    }

    /// inactive_is_low: the inactive list holds less than 1/ratio of the
    /// active one, ratio = sqrt(10 x GiB of both lists) (1 below 1 GiB).
    fn inactive_is_low(&self, nid: usize, inactive: Lru) -> bool {
        let l = &self.nodes[nid].lruvec;
        let active = if inactive == Lru::InactiveAnon { Lru::ActiveAnon } else { Lru::ActiveFile };
        let (i, a) = (l.list(inactive).pages(), l.list(active).pages());
        let gb = (i + a) >> (30 - 12);
        let ratio = if gb > 0 { (10 * gb).isqrt() } else { 1 };
        i * ratio < a
    }

    fn shrink_inactive_file(&mut self, t: Ns, cpu: u32, nid: usize) -> (u64, Ns, usize) {
        // Direct reclaim takes page cache, and anonymous memory when it
        // can go to swap; anonymous memory is demoted by kswapd only (a
        // simplification: the kernel's direct reclaim may demote too).
        let (nanon, nfile) = self.get_scan_count(nid);
        let mut cand: Vec<u32> = self.nodes[nid].lruvec.list(Lru::InactiveFile).iter_from_tail(&self.mem_map).take(nfile).collect();
        cand.extend(self.anon_candidates(nid, nanon));
        if cand.is_empty() {
            return (0, t, 0);
        }
        let t = self.lru_lock_folios(t, cpu, nid, cand.len());
        self.stat.add(Stat::PgscanDirect, cand.len() as i64);
        let (freed, demoted, t, n) = self.shrink_folio_list(t, cpu, nid, &cand);
        self.stat.add(Stat::PgdemoteDirect, demoted as i64);
        self.stat.add(Stat::PgstealDirect, freed as i64);
        (freed, t, n.max(1))
    }

    /// folio_referenced + folio_check_references for a mapped file folio:
    /// test and clear the young bits of its PTEs (x86 does not flush for
    /// that). True if the folio stays: activated (exec, or referenced
    /// twice) or given one more trip with PG_referenced. The caller moves
    /// it between lists, so the flags change only once it is off its list.
    fn folio_check_references(&mut self, pfn: Pfn) -> Option<u32> {
        let mut maps = Vec::new();
        self.rmap_walk(pfn, &mut maps);
        let mut young = 0;
        let mut exec = false;
        for mp in &maps {
            let m = &mut self.mms[mp.mm as usize];
            // ptep_clear_young_notify: the PTE's bit, or a secondary MMU's.
            let secondary = m.mmu_notifier_clear_young(mp.va);
            if let Some(tbl) = m.pt.table_mut(mp.va) {
                let slot = &mut tbl.ptes[super::pgtable::pte_index(mp.va)];
                if slot.0 & super::pgtable::Pte::YOUNG != 0 || secondary {
                    young += 1;
                    exec |= slot.exec();
                    *slot = slot.without(super::pgtable::Pte::YOUNG);
                }
            }
        }
        if young == 0 {
            return None;
        }
        if self.mem_map.get(pfn).flags & pg::REFERENCED != 0 || young > 1 || exec {
            self.stat.inc(Stat::Pgactivate);
            Some(pg::ACTIVE)
        } else {
            Some(pg::REFERENCED)
        }
    }

    /// shrink_folio_list over `cand` (file folios from the tail of the
    /// inactive list, lru_lock already charged): rotate what cannot go,
    /// demote or evict the rest. Mapped folios are unmapped with
    /// TTU_BATCH_FLUSH; one flush retires the batch before anything is
    /// freed, except what lazy unmap flush defers (freed with its
    /// generation). Returns (pages freed here, pages demoted, time, folios
    /// taken).
    pub fn shrink_folio_list(&mut self, t: Ns, cpu: u32, nid: usize, cand: &[Pfn]) -> (u64, u64, Ns, usize) {
        let mut t = t;
        let tid = self.current_tid(cpu);
        let can_unmap = !self.tasks.is_empty();
        let demote_to = self.tier.next_demotion_node(nid as u32, &self.knobs);
        let mut freed = 0;
        // Evicted folios: [0] flushed before they are freed, [1] LUF'd.
        let mut victims: [Vec<Pfn>; 2] = Default::default();
        let mut demote = Vec::new();
        let mut taken = 0;
        // Pages that left, by the LRU they came from (pgsteal_anon/_file).
        let mut steal = [0u64; 2];
        for &pfn in cand {
            let p = self.mem_map.get(pfn);
            let mapped = self.folio_mapcount(pfn);
            let anon = p.flags & pg::ANON != 0;
            // MADV_FREE'd: dropped unless written again (mm/madvise.rs).
            let lazyfree = anon && p.flags & pg::SWAPBACKED == 0;
            let file_lru = usize::from(folio_is_file_lru(p.flags));
            // Anonymous folios leave by demotion, or to swap.
            let evictable = if lazyfree {
                p.refcount == mapped && can_unmap
            } else if anon {
                (demote_to.is_some() || self.can_swap()) && p.refcount == mapped && can_unmap
            } else {
                // A dirty folio that is mapped is written back by pageout
                // once unmapped; an unmapped dirty one waits (no flusher
                // threads are modelled to clean it first).
                p.flags & pg::SHMEM == 0
                    && (p.flags & pg::DIRTY == 0 || mapped > 0 && can_unmap)
                    && p.refcount == 1 + mapped
                    && (mapped == 0 || can_unmap)
            };
            let keep = if evictable && mapped > 0 { self.folio_check_references(pfn) } else { None };
            if !evictable || keep.is_some() {
                // Rotate (or activate): another trip around the lists.
                self.lruvec_del_folio(pfn);
                self.mem_map.get_mut(pfn).flags |= keep.unwrap_or(0);
                self.lruvec_add_folio(pfn);
                continue;
            }
            self.folio_isolate_lru(pfn);
            taken += 1;
            if demote_to.is_some() {
                demote.push(pfn);
                continue;
            }
            let (n, t1) = if lazyfree {
                self.evict_isolated_lazyfree(t, cpu, tid, pfn, &mut victims)
            } else if anon {
                self.evict_isolated_anon(t, cpu, tid, pfn, &mut victims)
            } else {
                self.evict_isolated_file(t, cpu, tid, pfn, &mut victims)
            };
            t = t1;
            freed += n;
            steal[file_lru] += n;
        }
        let mut demoted = 0;
        if let Some(dst) = demote_to {
            if !demote.is_empty() {
                let allowed = self.tier.demotion_allowed(nid as u32);
                let mut to = MigrateDst::Demote { target: dst, allowed };
                // Counted before the move frees them; what fails to move
                // is taken back out below.
                for &pfn in &demote {
                    let p = self.mem_map.get(pfn);
                    steal[usize::from(folio_is_file_lru(p.flags))] += 1 << p.order;
                }
                let (moved, failed, t1) = self.migrate_pages_to(t, cpu, &demote, &mut to, MigrateReason::Tiering);
                t = t1;
                demoted = moved;
                freed += moved;
                // The targets are allocated GFP_NOWAIT on the target node
                // (alloc_demote_folio): one that went below its low mark
                // took the slow path, which wakes the target's kswapd.
                let (_, low, _) = self.pa.zone_watermarks(dst);
                if !failed.is_empty() || self.pa.zone_free_pages(dst) < low {
                    self.wakeup_kswapd(t, dst);
                }
                // Could not demote: reclaim them as plain reclaim would
                // (shrink_folio_list's retry without the demotion pass),
                // anonymous ones to swap if there is any.
                for pfn in failed {
                    let (flags, order) = (self.mem_map.get(pfn).flags, self.mem_map.get(pfn).order);
                    let file_lru = usize::from(folio_is_file_lru(flags));
                    steal[file_lru] -= 1 << order;
                    let (n, t1) = if flags & pg::ANON == 0 {
                        self.evict_isolated_file(t, cpu, tid, pfn, &mut victims)
                    } else if flags & pg::SWAPBACKED == 0 {
                        self.evict_isolated_lazyfree(t, cpu, tid, pfn, &mut victims)
                    } else if self.can_swap() {
                        self.evict_isolated_anon(t, cpu, tid, pfn, &mut victims)
                    } else {
                        self.folio_putback_lru(pfn);
                        continue;
                    };
                    t = t1;
                    freed += n;
                    steal[file_lru] += n;
                }
            }
        }
        self.stat.add(Stat::PgstealAnon, steal[0] as i64);
        self.stat.add(Stat::PgstealFile, steal[1] as i64);
        // LUF'd folios: hand their CPUs over (or give up into the ordinary
        // batch), then one flush for the rest.
        let mut g = 0;
        if can_unmap {
            if !victims[1].is_empty() {
                let (g1, t1) = self.try_to_unmap_luf(t, cpu, tid, nid as u32);
                g = g1;
                t = t1;
                if g != 0 {
                    self.stat.add(Stat::LufDeferred, victims[1].len() as i64);
                }
            }
            t = self.try_to_unmap_flush(t, cpu, tid);
        }
        t = self.release_folios(t, cpu, &victims[0]);
        t = self.release_folios_ugen(t, cpu, &victims[1], g);
        // shrink_node: progress on the node, by kswapd or direct reclaim,
        // revives a kswapd that gave up on it.
        if freed > 0 {
            self.nodes[nid].kswapd_failures = 0;
        }
        (freed, demoted, t, taken)
    }

    /// Evict an isolated page-cache folio, unmapping it first (batched) if
    /// it is mapped; it joins `victims[LUF'd]`, or goes back to its list.
    /// Returns the pages evicted.
    fn evict_isolated_file(&mut self, t: Ns, cpu: u32, tid: u32, pfn: Pfn, victims: &mut [Vec<Pfn>; 2]) -> (u64, Ns) {
        let mut t = t;
        let mut luf = false;
        if self.folio_mapcount(pfn) > 0 {
            let (unmapped, l, t1) = self.try_to_unmap(t, cpu, tid, pfn, true);
            t = t1;
            luf = l;
            let flags = self.mem_map.get(pfn).flags;
            if !unmapped || flags & pg::SHMEM != 0 && flags & pg::DIRTY != 0 {
                // Still mapped, or dirty shmem (no swap device): it goes back.
                self.folio_putback_lru(pfn);
                return (0, t);
            }
            if flags & pg::DIRTY != 0 {
                // Dirtied through a PTE: written back before it can go.
                t = self.pageout(t, cpu, tid, pfn);
            }
        }
        victims[luf as usize].push(pfn);
        (self.drop_isolated_cache_folio(pfn), t)
    }

    /// Swap out an isolated anonymous folio (add_to_swap, try_to_unmap,
    /// pageout): a slot per page, every PTE made a swap entry naming it,
    /// the TLBs that may still write the folio flushed, the pages written
    /// (the write waited for: `swap_write_4k_ns` each, the folio freed in
    /// this pass; the kernel frees it once the write completes). A large
    /// folio goes out whole, as 6.12 swaps out a large folio with a slot
    /// per page. The folio joins `victims` (LUF'd if every PTE was
    /// read-only); if a slot runs out it goes back to its list. Returns
    /// the pages swapped out.
    fn evict_isolated_anon(&mut self, t: Ns, cpu: u32, tid: u32, pfn: Pfn, victims: &mut [Vec<Pfn>; 2]) -> (u64, Ns) {
        let nr = 1u64 << self.mem_map.get(pfn).order;
        let mut slots = Vec::with_capacity(nr as usize);
        for _ in 0..nr {
            match self.swap.get_swap_page() {
                Some(s) => slots.push(s),
                None => {
                    for &s in &slots {
                        self.swap.put_unused(s);
                    }
                    self.folio_putback_lru(pfn);
                    return (0, t);
                }
            }
        }
        let (unmapped, luf, t) = self.try_to_unmap_swap(t, cpu, tid, pfn, true, &slots);
        // Pages no PTE mapped need no slot.
        for &s in &slots {
            self.swap.put_unused(s);
        }
        self.stat.v[Stat::SwapUsed as usize] = self.swap.inuse as i64;
        if !unmapped {
            // A PTE kept it (its slot could count no more): the swap
            // entries set elsewhere stand for copies the device now holds,
            // so the folio is written out all the same and stays here.
            self.check.report(format!("anon folio {pfn}: still mapped after its unmap for swap"));
            self.folio_putback_lru(pfn);
            return (0, t);
        }
        let t = self.pageout_flush(t, cpu, tid, pfn) + nr * self.c.swap_write_4k;
        self.stat.add(Stat::Pswpout, nr as i64);
        let p = self.mem_map.get_mut(pfn);
        p.flags &= !(pg::ISOLATED | pg::DIRTY);
        self.stat.add(Stat::NrIsolatedAnon, -(nr as i64));
        // The isolation's reference is the last: release_folios frees it.
        victims[luf as usize].push(pfn);
        (nr, t)
    }

    /// Drop an isolated lazily freed folio (MADV_FREE): unmapped without a
    /// swap entry, nothing written. try_to_unmap stops at a PTE written
    /// since the madvise, or at a folio someone dirtied without a PTE (a
    /// get_user_pages writer), and makes the folio swap-backed again: it
    /// goes back to its (now anon) list. Returns the pages dropped.
    fn evict_isolated_lazyfree(&mut self, t: Ns, cpu: u32, tid: u32, pfn: Pfn, victims: &mut [Vec<Pfn>; 2]) -> (u64, Ns) {
        let nr = 1u64 << self.mem_map.get(pfn).order;
        let (unmapped, luf, t) = self.try_to_unmap(t, cpu, tid, pfn, true);
        if !unmapped || self.mem_map.get(pfn).flags & pg::SWAPBACKED != 0 {
            self.folio_putback_lru(pfn);
            return (0, t);
        }
        self.mem_map.get_mut(pfn).flags &= !pg::ISOLATED;
        self.stat.add(Stat::NrIsolatedAnon, -(nr as i64));
        self.stat.add(Stat::Pglazyfreed, nr as i64);
        victims[luf as usize].push(pfn);
        (nr, t)
    }

    /// The part of pageout that comes before any write: every TLB that may
    /// still write the folio through a cached dirty entry is flushed
    /// (try_to_unmap_flush_dirty, LUF'd CPUs included), and the checker
    /// sees that nothing can write it after the IO reads it.
    fn pageout_flush(&mut self, t: Ns, cpu: u32, tid: u32, pfn: Pfn) -> Ns {
        let t = if self.knobs.mutant == crate::kernel::knobs::Mutant::ReclaimSkipDirtyFlush {
            t
        } else {
            self.try_to_unmap_flush_dirty(t, cpu, tid)
        };
        if self.check.enabled {
            self.check_pageout(t, pfn);
        }
        t
    }

    /// pageout for a folio try_to_unmap found dirty: first every TLB that
    /// may still write it through a cached dirty entry is flushed
    /// (try_to_unmap_flush_dirty, LUF'd CPUs included), then its contents
    /// go to the IO, which starts at the returned time. The IO is taken as
    /// done at once (the folio is clean and freed in this pass; Linux keeps
    /// it under writeback and frees it on a later one): what matters here
    /// is that nothing writes the folio after the IO has read it.
    fn pageout(&mut self, t: Ns, cpu: u32, tid: u32, pfn: Pfn) -> Ns {
        let t = self.pageout_flush(t, cpu, tid, pfn);
        self.mem_map.get_mut(pfn).flags &= !pg::DIRTY;
        self.stat.inc(Stat::Pgpageout);
        t + self.c.pageout
    }

    /// folio_putback_lru: an isolated folio that could not go returns to its list.
    pub(crate) fn folio_putback_lru(&mut self, pfn: Pfn) {
        let nr = 1i64 << self.mem_map.get(pfn).order;
        let p = self.mem_map.get_mut(pfn);
        p.flags &= !pg::ISOLATED;
        p.refcount -= 1;
        let anon = p.flags & pg::ANON != 0;
        self.stat.add(if anon { Stat::NrIsolatedAnon } else { Stat::NrIsolatedFile }, -nr);
        self.lruvec_add_folio(pfn);
    }

    /// shrink_active_list for file pages: move the oldest active folios to
    /// the inactive list. Returns false when there was nothing to move.
    pub(crate) fn refill_inactive_file(&mut self, t: Ns, cpu: u32, nid: usize, out: &mut Ns) -> bool {
        let cand: Vec<u32> = self.nodes[nid].lruvec.list(Lru::ActiveFile).iter_from_tail(&self.mem_map).take(SWAP_CLUSTER_MAX).collect();
        if cand.is_empty() {
            return false;
        }
        *out = self.lru_lock_folios(t, cpu, nid, cand.len());
        self.stat.add(Stat::Pgrefill, cand.len() as i64);
        self.deactivate_folios(&cand);
        true
    }

    /// Move folios from an active list to the inactive one, unreferenced.
    fn deactivate_folios(&mut self, pfns: &[Pfn]) {
        for &pfn in pfns {
            self.lruvec_del_folio(pfn);
            self.mem_map.get_mut(pfn).flags &= !(pg::ACTIVE | pg::REFERENCED);
            self.lruvec_add_folio(pfn);
            self.stat.inc(Stat::Pgdeactivate);
        }
    }
}
