//! The kernel's side of memory tiers and page-cache promotion
//! (mm/memory_tiers.rs owns the tiers, promotion lists and rate limits):
//! the calls that need the whole kernel, namely the folio's flags and
//! access time, the LRU isolation, the migration and kswapd.

use crate::kernel::knobs::Mutant;
use crate::kernel::Kernel;
use crate::mm::mem_map::pg;
use crate::mm::memory_tiers::PromoCandidate;
use crate::mm::vmstat::Stat;
use crate::mm::Pfn;
use crate::sim::Ns;

impl Kernel {
    /// WMARK_PROMO = high + (high - low): the headroom kswapd keeps in
    /// tiering mode so that promotions find room.
    pub fn wmark_promo(&self, nid: u32) -> u64 {
        let (_, low, high) = self.pa.zone_watermarks(nid);
        high + (high - low)
    }

    /// migrate_balanced_pgdat: some zone has more than high + nr free.
    pub fn migrate_balanced_pgdat(&self, nid: u32, nr: u64) -> bool {
        let (_, _, high) = self.pa.zone_watermarks(nid);
        self.pa.zone_free_pages(nid) > high + nr
    }

    /// pgdat_free_space_enough: free above WMARK_PROMO + max(1 GiB, node/16).
    pub fn pgdat_free_space_enough(&self, nid: u32) -> bool {
        let enough = (1u64 << (30 - 12)).max(self.nodes[nid as usize].nr_pages >> 4);
        self.pa.zone_free_pages(nid) > self.wmark_promo(nid) + enough
    }

    /// should_numa_migrate_memory, tiering branch, for a folio on a slow
    /// node and a top-tier target (kernel/sched/fair.c): pgdat_free_space_enough,
    /// numa_promotion_adjust_threshold, the hint-fault latency against the
    /// hot threshold (kernel.numa_balancing_hot_threshold_ms) and
    /// numa_promotion_rate_limit. Shared by page-cache promotion and the
    /// NUMA hinting fault (mm/numa_balancing.rs).
    pub(crate) fn should_promote(&mut self, t: Ns, pfn: Pfn, dst: u32, nr: u64) -> bool {
        if self.nodes[dst as usize].nr_pages == 0 {
            return false;
        }
        let now_ms = t / 1_000_000;
        // The folio's access time lives in its last_cpupid bits (here
        // `private`, in ms modulo 2^16); store the new one as we read it.
        let last = self.mem_map.get(pfn).private as u64;
        self.mem_map.get_mut(pfn).private = now_ms as u16;
        let free_space_enough = self.pgdat_free_space_enough(dst);
        self.tier.should_promote(now_ms, last, dst, nr, free_space_enough, &self.knobs, &mut self.stat)
    }

    /// promotion_candidate (RFC v3 patch 6), called from folio_mark_accessed
    /// by task `tid` for a referenced, active, evictable folio.
    pub fn promotion_candidate(&mut self, t: Ns, cpu: u32, tid: u32, pfn: Pfn) -> Ns {
        let mut t = t + self.c.promotion_candidate;
        let (nid, order, flags) = {
            let p = self.mem_map.get(pfn);
            (p.nid as u32, p.order as u32, p.flags)
        };
        // 1. Tier and context filter.
        if self.tier.node_is_toptier(nid) || self.tasks[tid as usize].kthread.is_some() {
            return t;
        }
        // 2. Per-task cap: pages compared with the MB/s sysctl value.
        let cap = self.knobs.promote_rate_limit_mbps;
        if self.tier.promo_count(tid) >= cap {
            return t;
        }
        // 3. numa_migrate_check with a NULL vmf: count the hint, ask the
        // (default, per-node preferred MPOL_F_MOF|MOF_ON) task policy for a
        // target: this CPU's node, if should_numa_migrate_memory agrees.
        t += self.c.numa_migrate_check;
        let here = self.cpus[cpu as usize].node;
        self.stat.inc(Stat::NumaHintPageCache);
        if nid == here {
            self.stat.inc(Stat::NumaHintPageCacheLocal);
            return t;
        }
        let nr = 1u64 << order;
        if !self.should_promote(t, pfn, here, nr) {
            return t;
        }
        // 5. migrate_misplaced_folio_prepare(folio, NULL, target).
        if flags & pg::DIRTY != 0 && flags & pg::SWAPBACKED == 0 {
            return t;
        }
        if !self.migrate_balanced_pgdat(here, nr) && self.knobs.mutant != Mutant::PromoIgnoreWatermark {
            self.wakeup_kswapd(t, here);
            return t;
        }
        if flags & pg::LRU == 0 {
            return t; // already isolated (by reclaim or another task)
        }
        let queued = self.tier.queued(tid);
        let cand = PromoCandidate { pfn, nid, dst: here, order, flags, queued, cap };
        let Some(end) = self.promotion.enqueue(&cand) else { return t };
        if self.check.enabled && !self.migrate_balanced_pgdat(here, nr) {
            self.check.report(format!("folio {pfn}: isolated for promotion while node {here} is below its high watermark + {nr}"));
        }
        t = self.lru_lock_folios(t, cpu, nid as usize, 1);
        self.folio_isolate_lru(pfn);
        // 6. Queue the work on the empty -> non-empty transition.
        let exiting = self.tasks[tid as usize].exited;
        if exiting {
            return self.putback_folio(t, cpu, pfn);
        }
        // 7. Append where the policy says (list_add_tail in v3).
        let count = self.tier.promo_list_add(tid, pfn, nr, end);
        // Cap bound (the per-task cap of RFC v3 patch 6): the list overshoots by at most one folio.
        if self.check.enabled && count > cap + nr - 1 && cap > 0 {
            self.check.report(format!("task {tid}: promo_count {count} exceeds the cap {cap} by more than one folio"));
        }
        t
    }

    /// Return an isolated folio to its LRU (putback_movable_pages for one folio).
    pub fn putback_folio(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Ns {
        let (nid, order, anon) = {
            let p = self.mem_map.get(pfn);
            (p.nid as usize, p.order, p.flags & pg::ANON != 0)
        };
        let t = self.lru_lock_folios(t, cpu, nid, 1);
        self.mem_map.get_mut(pfn).flags &= !pg::ISOLATED;
        self.lruvec_add_folio(pfn);
        self.stat.add(if anon { Stat::NrIsolatedAnon } else { Stat::NrIsolatedFile }, -(1i64 << order));
        self.release_folios(t, cpu, &[pfn])
    }

    /// task_numa_promotion_work: runs when task `tid` returns to user space
    /// (or exits), charged to it. Returns the new time.
    pub fn task_numa_promotion_work(&mut self, t: Ns, tid: u32) -> Ns {
        if !self.tier.work_queued(tid) {
            return t;
        }
        if self.knobs.mutant == Mutant::PromoSkipTaskWork && !self.tasks[tid as usize].exited {
            return t;
        }
        let cpu = self.tasks[tid as usize].cpu;
        let list = self.tier.take_promo_list(tid);
        if list.is_empty() {
            return t;
        }
        if self.check.enabled {
            for &p in &list {
                let f = self.mem_map.get(p).flags;
                if f & pg::LRU != 0 || f & pg::ISOLATED == 0 {
                    self.check.report(format!(
                        "folio {p}: on task {tid}'s promotion list but {} (a folio on two lists)",
                        if f & pg::LRU != 0 { "also on an LRU" } else { "not isolated" }
                    ));
                }
            }
        }
        // The destination is the node of the CPU the work runs on.
        let dst = self.cpus[cpu as usize].node;
        let isolated_before = self.stat.get(Stat::NrIsolatedFile);
        let nr_list: i64 = list.iter().map(|&p| 1i64 << self.mem_map.get(p).order).sum();
        let (_, t) = self.migrate_misplaced_folio_batch(t, cpu, &list, dst);
        if self.check.enabled && self.stat.get(Stat::NrIsolatedFile) != isolated_before - nr_list {
            self.check.report(format!(
                "task {tid}: nr_isolated_file {} after the promotion batch, expected {}",
                self.stat.get(Stat::NrIsolatedFile),
                isolated_before - nr_list
            ));
        }
        t
    }

    /// migrate_misplaced_folio_batch: migrate the list to `dst`, put back
    /// what failed, count pgpromote_success/numa_pages_migrated.
    pub fn migrate_misplaced_folio_batch(&mut self, t: Ns, cpu: u32, list: &[Pfn], dst: u32) -> (u64, Ns) {
        let (moved, failed, t) = self.migrate_pages(t, cpu, list, dst);
        let mut t = t;
        for pfn in failed {
            t = self.putback_folio(t, cpu, pfn);
        }
        if moved > 0 {
            self.stat.add(Stat::NumaPagesMigrated, moved as i64);
            self.stat.add(Stat::PgpromoteSuccess, moved as i64);
        }
        (moved, t)
    }

    /// Audit part for tiering: promotion lists are empty between steps (the
    /// work runs before any return to user space); every page-cache folio
    /// off the LRU is accounted for; nr_isolated_file matches.
    pub fn tier_audit(&self, found: &mut Vec<String>) {
        let queued = self.tier.audit_lists(found);
        let mut in_batch: rustc_hash::FxHashSet<Pfn> = Default::default();
        for c in &self.cpus {
            in_batch.extend(c.lru_add.iter().copied());
        }
        let on_promo: rustc_hash::FxHashSet<Pfn> = self.tier.promo_folios().collect();
        let mut leaked = 0;
        for ino in &self.inodes {
            for &p in ino.pages.values() {
                let f = self.mem_map.get(p).flags;
                if f & pg::LRU == 0 && !in_batch.contains(&p) && !on_promo.contains(&p) {
                    if leaked < 4 {
                        found.push(format!("folio {p}: page-cache folio isolated (flags {f:#x}) but on no list (leaked isolation)"));
                    }
                    leaked += 1;
                }
            }
        }
        if self.stat.get(Stat::NrIsolatedFile) != queued {
            found.push(format!("nr_isolated_file {} but {queued} folios are queued for promotion", self.stat.get(Stat::NrIsolatedFile)));
        }
    }
}
