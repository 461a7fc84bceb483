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

use super::vmstat::{Stat, VmStat};
use super::Pfn;
use crate::hw::profile::Profile;
use crate::kernel::knobs::Knobs;
use crate::sim::Ns;

/// MEMTIER_CHUNK_BITS: a tier spans 128 units of abstract distance.
pub const MEMTIER_CHUNK_BITS: u32 = 7;
/// MEMTIER_ADISTANCE_DRAM = 4 * 128 + 64: DRAM sits in memory_tier4.
pub const MEMTIER_ADISTANCE_DRAM: u32 = (4 << MEMTIER_CHUNK_BITS) + (1 << (MEMTIER_CHUNK_BITS - 1));
pub use crate::kernel::knobs::{NUMA_BALANCING_MEMORY_TIERING, NUMA_BALANCING_NORMAL};

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
        // Demotion target (establish_demotion_targets): of the next lower
        // tier that has nodes, the nodes at the best node_distance from
        // this one are its preferred targets; the kernel picks one of them
        // at random for each demotion, the model the lowest node id.
        let demotion_target = adistance
            .iter()
            .enumerate()
            .map(|(nid, &a)| {
                let below: Vec<(u32, u32, u32)> = adistance
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| tier(b) > tier(a))
                    .map(|(i, &b)| (tier(b), prof.node_distance(nid, i), i as u32))
                    .collect();
                below.iter().min().map(|&(_, _, i)| i)
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
struct PromoList {
    folios: std::collections::VecDeque<Pfn>,
    /// Base pages queued (promo_count).
    count: u64,
    /// numa_promo_work is queued (TWA_RESUME).
    work_queued: bool,
}

/// The per-node promotion rate limiter and threshold state (nbp_rl_*, nbp_th_*).
#[derive(Clone, Debug, Default)]
struct NodeBalance {
    rl_window_start: Ns,
    rl_nr_cand: u64,
    th_period_start: Ns,
    th_nr_cand: u64,
    threshold_ms: u64,
}

/// All tiering state of the kernel: the tiers, the tasks' promotion
/// lists, the per-node promotion threshold and rate limit, the kswapd
/// threads. Its methods take what they need of the rest of the kernel as
/// arguments; the calls that need the whole kernel (isolating and
/// migrating folios, waking kswapd) are in kernel/memory_tiers.rs.
pub struct TierState {
    /// Computed once at boot, read-only after.
    pub tiers: MemoryTiers,
    /// Per task id, grown on demand.
    promo: Vec<PromoList>,
    nbp: Vec<NodeBalance>,
    /// kswapd thread id per node (spawned when demotion is enabled).
    kswapd: Vec<Option<u32>>,
}

impl TierState {
    pub fn new(prof: &Profile) -> TierState {
        let n = prof.nodes.len();
        TierState { tiers: MemoryTiers::new(prof), promo: Vec::new(), nbp: vec![NodeBalance::default(); n], kswapd: vec![None; n] }
    }

    /// node_is_toptier.
    #[inline]
    pub fn node_is_toptier(&self, nid: u32) -> bool {
        self.tiers.adistance[nid as usize] <= self.tiers.top_tier_adistance
    }

    /// node_demotion[nid].allowed: every node of a tier below `nid`'s,
    /// where alloc_demote_folio falls back when its target is short.
    pub fn demotion_allowed(&self, nid: u32) -> Vec<u32> {
        let own = self.tiers.tier_of(nid);
        (0..self.tiers.adistance.len() as u32).filter(|&i| self.tiers.tier_of(i) > own).collect()
    }

    /// next_demotion_node, when demotion is enabled.
    pub fn next_demotion_node(&self, nid: u32, kn: &Knobs) -> Option<u32> {
        if !kn.demotion_enabled {
            return None;
        }
        self.tiers.demotion_target[nid as usize]
    }

    /// The kswapd thread of node `nid`, if one was spawned.
    #[inline]
    pub fn kswapd(&self, nid: u32) -> Option<u32> {
        self.kswapd.get(nid as usize).copied().flatten()
    }

    /// Whether any node has a kswapd (demotion, tiering or swap is on).
    #[inline]
    pub fn has_kswapds(&self) -> bool {
        self.kswapd.iter().any(Option::is_some)
    }

    pub fn set_kswapd(&mut self, nid: u32, tid: u32) {
        self.kswapd[nid as usize] = Some(tid);
    }

    fn promo_list(&mut self, tid: u32) -> &mut PromoList {
        let i = tid as usize;
        if self.promo.len() <= i {
            self.promo.resize_with(i + 1, PromoList::default);
        }
        &mut self.promo[i]
    }

    /// Base pages on task `tid`'s promotion list (promo_count).
    pub fn promo_count(&mut self, tid: u32) -> u64 {
        self.promo_list(tid).count
    }

    /// should_numa_migrate_memory's threshold and rate limit for a folio of
    /// `nr` pages last accessed at `last_ms` (modulo 2^16) moving to `dst`
    /// at `now_ms`, given whether `dst` has free space enough
    /// (pgdat_free_space_enough): numa_promotion_adjust_threshold, the
    /// hint-fault latency against the hot threshold and
    /// numa_promotion_rate_limit.
    pub fn should_promote(
        &mut self,
        now_ms: u64,
        last_ms: u64,
        dst: u32,
        nr: u64,
        free_space_enough: bool,
        kn: &Knobs,
        stat: &mut VmStat,
    ) -> bool {
        if free_space_enough {
            self.nbp[dst as usize].threshold_ms = 0;
            return true;
        }
        let latency = (now_ms as u16).wrapping_sub(last_ms as u16) as u64;
        let rate_pages = kn.promote_rate_limit_mbps << (20 - 12);
        let hot_threshold_ms = kn.numa_hot_threshold_ms;
        // Adjust the threshold once per scan_period_max (60 s).
        let period_ms = kn.numa_scan_period_max_ms;
        let nb = &mut self.nbp[dst as usize];
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
        stat.add(Stat::PgpromoteCandidate, nr as i64);
        nb.th_nr_cand += nr;
        if now_ms >= nb.rl_window_start + 1000 {
            nb.rl_window_start = now_ms;
            nb.rl_nr_cand = 0;
        }
        nb.rl_nr_cand += nr;
        nb.rl_nr_cand <= rate_pages
    }

    /// Pages on task `tid`'s promotion list, without growing the lists.
    pub fn queued(&self, tid: u32) -> u64 {
        self.promo.get(tid as usize).map_or(0, |l| l.count)
    }

    /// Put an isolated folio of `nr` pages on task `tid`'s promotion list
    /// at `end`, queueing the task work on the empty -> non-empty
    /// transition. Returns the list's new promo_count.
    pub fn promo_list_add(&mut self, tid: u32, pfn: Pfn, nr: u64, end: ListEnd) -> u64 {
        let l = self.promo_list(tid);
        if l.folios.is_empty() {
            l.work_queued = true;
        }
        match end {
            ListEnd::Head => l.folios.push_front(pfn),
            ListEnd::Tail => l.folios.push_back(pfn),
        }
        l.count += nr;
        l.count
    }

    /// Task `tid` has its promotion work queued.
    #[inline]
    pub fn work_queued(&self, tid: u32) -> bool {
        self.promo.get(tid as usize).is_some_and(|l| l.work_queued)
    }

    /// Take task `tid`'s promotion list for the task work, leaving it
    /// empty with no work queued.
    pub fn take_promo_list(&mut self, tid: u32) -> Vec<Pfn> {
        let l = &mut self.promo[tid as usize];
        l.work_queued = false;
        l.count = 0;
        std::mem::take(&mut l.folios).into()
    }

    /// Every folio on some task's promotion list.
    pub fn promo_folios(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.promo.iter().flat_map(|l| l.folios.iter().copied())
    }

    /// The lists are empty between steps (the work runs before any return
    /// to user space). Returns the folios still queued.
    pub fn audit_lists(&self, found: &mut Vec<String>) -> i64 {
        let mut queued = 0i64;
        for (tid, l) in self.promo.iter().enumerate() {
            if !l.folios.is_empty() || l.count != 0 || l.work_queued {
                found.push(format!("task {tid}: {} folios still on its promotion list after returning to user space", l.folios.len()));
            }
            queued += l.folios.len() as i64;
        }
        queued
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
