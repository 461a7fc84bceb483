//! Reclaim (mm/vmscan.c), minimal for the core: direct reclaim of clean,
//! unmapped page-cache folios from the tail of the inactive file list,
//! refilling it from the active list when it runs short. Anonymous memory
//! is not reclaimed (no swap device is modelled yet).

use super::mem_map::pg;
use super::swap::Lru;
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
        self.stat.add(Stat::NrIsolatedFile, nr as i64);
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

    fn shrink_inactive_file(&mut self, t: Ns, cpu: u32, nid: usize) -> (u64, Ns, usize) {
        let cand: Vec<u32> = self.nodes[nid].lruvec.lists[Lru::InactiveFile as usize].iter_from_tail(&self.mem_map).take(SWAP_CLUSTER_MAX).collect();
        if cand.is_empty() {
            return (0, t, 0);
        }
        let hold = self.c.lru_lock_per_folio * cand.len() as Ns;
        let mut t = self.nodes[nid].lruvec.lru_lock.lock_for(t, cpu, hold, &self.lc);
        self.stat.add(Stat::PgscanDirect, cand.len() as i64);
        let mut freed = 0;
        let mut victims = Vec::new();
        // Demotion (shrink_folio_list's demote_folio_list): with a lower
        // tier below this node, evicted folios are migrated there first.
        let demote_to = self.next_demotion_node(nid as u32);
        let mut demote = Vec::new();
        for pfn in cand {
            let p = self.mem_map.get(pfn);
            let reclaimable = p.mapcount == 0 && p.flags & (pg::DIRTY | pg::SHMEM | pg::ANON) == 0 && p.refcount == 1;
            if !reclaimable {
                // Rotate: give it another trip around the list.
                self.lruvec_del_folio(pfn);
                self.lruvec_add_folio(pfn);
                continue;
            }
            if demote_to.is_some() {
                self.folio_isolate_lru(pfn);
                demote.push(pfn);
                continue;
            }
            let ino = p.mapping - 1;
            let idx = p.index;
            self.inodes[ino as usize].pages.remove(&idx);
            self.page_cache_delete(pfn);
            victims.push(pfn);
            freed += 1 << self.mem_map.get(pfn).order;
        }
        if let Some(dst) = demote_to {
            if !demote.is_empty() {
                let (moved, failed, t1) = self.migrate_pages(t, cpu, &demote, dst);
                t = t1;
                self.stat.add(Stat::PgdemoteDirect, moved as i64);
                freed += moved;
                // Could not demote: drop them as plain reclaim would.
                for pfn in failed {
                    freed += self.drop_isolated_cache_folio(pfn);
                    victims.push(pfn);
                }
            }
        }
        self.stat.add(Stat::PgstealDirect, freed as i64);
        t = self.release_folios(t, cpu, &victims);
        (freed, t, victims.len().max(1))
    }

    /// shrink_active_list for file pages: move the oldest active folios to
    /// the inactive list. Returns false when there was nothing to move.
    fn refill_inactive_file(&mut self, t: Ns, cpu: u32, nid: usize, out: &mut Ns) -> bool {
        let cand: Vec<u32> = self.nodes[nid].lruvec.lists[Lru::ActiveFile as usize].iter_from_tail(&self.mem_map).take(SWAP_CLUSTER_MAX).collect();
        if cand.is_empty() {
            return false;
        }
        let hold = self.c.lru_lock_per_folio * cand.len() as Ns;
        *out = self.nodes[nid].lruvec.lru_lock.lock_for(t, cpu, hold, &self.lc);
        self.stat.add(Stat::Pgrefill, cand.len() as i64);
        for pfn in cand {
            self.lruvec_del_folio(pfn);
            self.mem_map.get_mut(pfn).flags &= !(pg::ACTIVE | pg::REFERENCED);
            self.lruvec_add_folio(pfn);
            self.stat.inc(Stat::Pgdeactivate);
        }
        true
    }
}
