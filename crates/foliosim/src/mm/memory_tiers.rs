//! Memory tiers (mm/memory-tiers.c) and the promotion of unmapped
//! page-cache folios (RFC v3 "Promotion of Unmapped Page Cache Folios",
//! docs/mechanisms/pagecache-promotion.md#rules-it-implements): nodes are grouped into tiers by abstract distance, the
//! top tier is the fastest tier holding a node with CPUs, and lower-tier
//! nodes are demotion targets of the tiers above them.
//!
//! The promotion path: `folio_mark_accessed` (filemap.rs) calls
//! `promotion_candidate` for a referenced, active, evictable folio when
//! tiering mode and the sysfs knob are on. The candidate is isolated from
//! the LRU and queued on the reading task's promotion list; the list is
//! migrated in one batch by the task work that runs when the task returns
//! to user space (end of the read() syscall), charged to that task.

use super::mem_map::pg;
use super::vmstat::Stat;
use super::Pfn;
use crate::hw::profile::Profile;
use crate::kernel::knobs::{Knobs, Mutant};
use crate::kernel::Kernel;
use crate::sim::Ns;

/// MEMTIER_CHUNK_BITS: a tier spans 128 units of abstract distance.
pub const MEMTIER_CHUNK_BITS: u32 = 7;
/// MEMTIER_ADISTANCE_DRAM = 4 * 128 + 64: DRAM sits in memory_tier4.
pub const MEMTIER_ADISTANCE_DRAM: u32 = (4 << MEMTIER_CHUNK_BITS) + (1 << (MEMTIER_CHUNK_BITS - 1));
/// NUMA_BALANCING_MEMORY_TIERING bit of kernel.numa_balancing.
pub const NUMA_BALANCING_NORMAL: u8 = 1;
pub const NUMA_BALANCING_MEMORY_TIERING: u8 = 2;

/// The tiers of the machine, computed once at boot (no hotplug).
#[derive(Clone, Debug)]
pub struct MemoryTiers {
    /// Abstract distance of each node.
    pub adistance: Vec<u32>,
    /// Highest abstract distance still counted as top tier
    /// (top_tier_adistance in memory-tiers.c).
    pub top_tier_adistance: u32,
    /// Preferred demotion target per node (None: lowest tier).
    pub demotion_target: Vec<Option<u32>>,
}

impl MemoryTiers {
    /// Nodes with CPUs are DRAM (MEMTIER_ADISTANCE_DRAM). A CPU-less node
    /// gets its distance from its performance relative to the DRAM nodes,
    /// as mt_perf_to_adistance does from HMAT/CDAT data: adistance scales
    /// with the latency ratio and the inverse bandwidth ratio.
    pub fn new(prof: &Profile) -> MemoryTiers {
        let dram: Vec<_> = prof.nodes.iter().filter(|n| n.has_cpus).collect();
        let (dl, db) = if dram.is_empty() {
            (prof.nodes[0].latency_ns, prof.nodes[0].read_bw_gbps)
        } else {
            (
                dram.iter().map(|n| n.latency_ns).sum::<f64>() / dram.len() as f64,
                dram.iter().map(|n| n.read_bw_gbps).sum::<f64>() / dram.len() as f64,
            )
        };
        let adistance: Vec<u32> = prof
            .nodes
            .iter()
            .map(|n| {
                if n.has_cpus {
                    MEMTIER_ADISTANCE_DRAM
                } else {
                    (MEMTIER_ADISTANCE_DRAM as f64 * (n.latency_ns / dl) * (db / n.read_bw_gbps)).round().max(1.0) as u32
                }
            })
            .collect();
        let tier = |a: u32| a >> MEMTIER_CHUNK_BITS;
        // The top tier ends with the first tier that holds a CPU node.
        let top = prof.nodes.iter().zip(&adistance).filter(|(n, _)| n.has_cpus).map(|(_, &a)| tier(a)).min().unwrap_or(tier(adistance[0]));
        let top_tier_adistance = ((top + 1) << MEMTIER_CHUNK_BITS) - 1;
        // Demotion target: a node of the next lower tier (lowest distance
        // above this node's tier; ties to the lowest node id).
        let demotion_target = adistance
            .iter()
            .map(|&a| {
                let below: Vec<(u32, u32)> =
                    adistance.iter().enumerate().filter(|(_, &b)| tier(b) > tier(a)).map(|(i, &b)| (tier(b), i as u32)).collect();
                below.iter().min().map(|&(_, i)| i)
            })
            .collect();
        MemoryTiers { adistance, top_tier_adistance, demotion_target }
    }

    /// The tier id (memory_tierN) of a node.
    pub fn tier_of(&self, nid: u32) -> u32 {
        self.adistance[nid as usize] >> MEMTIER_CHUNK_BITS
    }
}

/// A task's promotion list (task_struct: promo_list, promo_count,
/// numa_promo_work). Folios are kept in list order; `Vec` order is the
/// order of list_add_tail, and head insertion pushes at the front.
#[derive(Clone, Debug, Default)]
pub struct PromoList {
    pub folios: std::collections::VecDeque<Pfn>,
    /// Base pages queued (promo_count).
    pub count: u64,
    /// numa_promo_work is queued (TWA_RESUME).
    pub work_queued: bool,
}

/// The per-node promotion rate limiter and threshold state (nbp_rl_*, nbp_th_*).
#[derive(Clone, Debug, Default)]
pub struct NodeBalance {
    pub rl_window_start: Ns,
    pub rl_nr_cand: u64,
    pub th_period_start: Ns,
    pub th_nr_cand: u64,
    pub threshold_ms: u64,
}

/// All tiering state of the kernel.
pub struct TierState {
    pub tiers: MemoryTiers,
    /// Per task id, grown on demand.
    pub promo: Vec<PromoList>,
    pub nbp: Vec<NodeBalance>,
    /// kswapd thread id per node (spawned when demotion is enabled).
    pub kswapd: Vec<Option<u32>>,
}

impl TierState {
    pub fn new(prof: &Profile) -> TierState {
        let n = prof.nodes.len();
        TierState { tiers: MemoryTiers::new(prof), promo: Vec::new(), nbp: vec![NodeBalance::default(); n], kswapd: vec![None; n] }
    }
}

/// Which end of the task's promotion list a candidate joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEnd {
    /// list_add.
    Head,
    /// list_add_tail.
    Tail,
}

/// A page-cache folio that passed promotion_candidate's checks (not top
/// tier, under the task's cap, hot by should_numa_migrate_memory, clean or
/// swap-backed, the target above its watermark, on an LRU): what a
/// promotion policy sees before it is isolated.
pub struct PromoCandidate {
    pub pfn: Pfn,
    /// Its node, and the node it would move to.
    pub nid: u32,
    pub dst: u32,
    pub order: u32,
    /// Its page flags (mem_map.rs `pg`).
    pub flags: u32,
    /// Pages on the task's promotion list already, and the cap.
    pub queued: u64,
    pub cap: u64,
}

/// A page-cache promotion policy (`promotion_list_order`): whether and
/// where a candidate joins the task's promotion list. Implementations live
/// in policy/, one file each.
pub trait PromotionPolicy: Send {
    /// None: leave the folio on its LRU.
    fn enqueue(&self, c: &PromoCandidate) -> Option<ListEnd>;
}

/// Whether page-cache promotion can run at all (the two inline checks in
/// folio_mark_accessed besides the isolated test).
#[inline]
pub fn pagecache_promotion_on(k: &Knobs) -> bool {
    k.numa_balancing & NUMA_BALANCING_MEMORY_TIERING != 0 && k.pagecache_promotion_enabled
}

impl Kernel {
    /// node_is_toptier.
    #[inline]
    pub fn node_is_toptier(&self, nid: u32) -> bool {
        self.tier.tiers.adistance[nid as usize] <= self.tier.tiers.top_tier_adistance
    }

    /// next_demotion_node, when demotion is enabled.
    pub fn next_demotion_node(&self, nid: u32) -> Option<u32> {
        if !self.knobs.demotion_enabled {
            return None;
        }
        self.tier.tiers.demotion_target[nid as usize]
    }

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

    fn promo_list(&mut self, tid: u32) -> &mut PromoList {
        let i = tid as usize;
        if self.tier.promo.len() <= i {
            self.tier.promo.resize_with(i + 1, PromoList::default);
        }
        &mut self.tier.promo[i]
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
        if self.pgdat_free_space_enough(dst) {
            self.tier.nbp[dst as usize].threshold_ms = 0;
            return true;
        }
        let latency = (now_ms as u16).wrapping_sub(last as u16) as u64;
        let rate_pages = self.knobs.promote_rate_limit_mbps << (20 - 12);
        let hot_threshold_ms = self.knobs.numa_hot_threshold_ms;
        // Adjust the threshold once per scan_period_max (60 s).
        let period_ms = self.knobs.numa_scan_period_max_ms;
        let nb = &mut self.tier.nbp[dst as usize];
        if nb.threshold_ms == 0 {
            nb.threshold_ms = hot_threshold_ms;
            nb.th_period_start = now_ms;
            nb.th_nr_cand = 0;
        }
        if now_ms >= nb.th_period_start + period_ms {
            let step = 2 * hot_threshold_ms / 16;
            let ref_cand = rate_pages * period_ms / 1000;
            if nb.th_nr_cand > ref_cand * 11 / 10 {
                nb.threshold_ms = nb.threshold_ms.saturating_sub(step).max(step);
            } else if nb.th_nr_cand < ref_cand * 9 / 10 {
                nb.threshold_ms = (nb.threshold_ms + step).min(2 * hot_threshold_ms);
            }
            nb.th_period_start = now_ms;
            nb.th_nr_cand = 0;
        }
        if latency >= nb.threshold_ms {
            return false;
        }
        // Per-node rate limit over 1 s windows.
        self.stat.add(Stat::PgpromoteCandidate, nr as i64);
        let nb = &mut self.tier.nbp[dst as usize];
        nb.th_nr_cand += nr;
        if now_ms >= nb.rl_window_start + 1000 {
            nb.rl_window_start = now_ms;
            nb.rl_nr_cand = 0;
        }
        nb.rl_nr_cand += nr;
        nb.rl_nr_cand <= rate_pages
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
        if self.node_is_toptier(nid) || self.tasks[tid as usize].kthread.is_some() {
            return t;
        }
        // 2. Per-task cap: pages compared with the MB/s sysctl value.
        let cap = self.knobs.promote_rate_limit_mbps;
        if self.promo_list(tid).count >= cap {
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
        let queued = self.tier.promo.get(tid as usize).map_or(0, |l| l.count);
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
        let l = self.promo_list(tid);
        if l.folios.is_empty() {
            l.work_queued = true;
        }
        // 7. Append where the policy says (list_add_tail in v3).
        match end {
            ListEnd::Head => l.folios.push_front(pfn),
            ListEnd::Tail => l.folios.push_back(pfn),
        }
        l.count += nr;
        let count = l.count;
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
        if self.tier.promo.len() <= tid as usize || !self.tier.promo[tid as usize].work_queued {
            return t;
        }
        if self.knobs.mutant == Mutant::PromoSkipTaskWork && !self.tasks[tid as usize].exited {
            return t;
        }
        let cpu = self.tasks[tid as usize].cpu;
        let l = &mut self.tier.promo[tid as usize];
        l.work_queued = false;
        let list: Vec<Pfn> = std::mem::take(&mut l.folios).into();
        l.count = 0;
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
        let mut queued = 0i64;
        for (tid, l) in self.tier.promo.iter().enumerate() {
            if !l.folios.is_empty() || l.count != 0 || l.work_queued {
                found.push(format!("task {tid}: {} folios still on its promotion list after returning to user space", l.folios.len()));
            }
            queued += l.folios.len() as i64;
        }
        let mut in_batch: rustc_hash::FxHashSet<Pfn> = Default::default();
        for c in &self.cpus {
            in_batch.extend(c.lru_add.iter().copied());
        }
        let mut on_promo: rustc_hash::FxHashSet<Pfn> = Default::default();
        for l in &self.tier.promo {
            on_promo.extend(l.folios.iter().copied());
        }
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
