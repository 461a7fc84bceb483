//! kswapd (mm/vmscan.c balance_pgdat) with demotion: one kernel thread per
//! node, woken by the allocator's slow path once every node of the
//! zonelist is below its low watermark (or by promotion finding the target
//! unbalanced); a node below low while the next node of the zonelist has
//! room only spills the allocation there. It reclaims clean, unmapped
//! page-cache folios from the tail of the inactive file list until the
//! node is back above its high watermark (the promo watermark in
//! memory-tiering mode). With demotion enabled a folio chosen for eviction
//! is first migrated to the node's demotion target; only if that fails is
//! it dropped.
//!
//! A run is one balance_pgdat: priorities DEF_PRIORITY down to 1, each
//! scanning the node's evictable LRU pages >> priority (so a whole run
//! scans about the LRU once), until the node is balanced. A run that
//! reclaimed nothing counts in `kswapd_failures`; after MAX_RECLAIM_RETRIES
//! such runs the node is hopeless: kswapd sleeps and wakeup_kswapd leaves
//! it asleep until reclaim on the node (direct reclaim, typically) makes
//! progress again and resets the count.

use super::memory::MAX_RECLAIM_RETRIES;
use super::memory_tiers::NUMA_BALANCING_MEMORY_TIERING;
use super::mmzone::{KswapdRun, Lru};
use super::vmstat::Stat;
use crate::kernel::task::KthreadFn;
use crate::kernel::task::KthreadNext;
use crate::kernel::Kernel;
use crate::sim::Ns;

/// mm/vmscan.c: the priority a balance_pgdat run starts at.
const DEF_PRIORITY: u32 = 12;

impl Kernel {
    /// The free-page level kswapd reclaims a node up to.
    pub fn kswapd_target(&self, nid: u32) -> u64 {
        if self.knobs.numa_balancing & NUMA_BALANCING_MEMORY_TIERING != 0 {
            self.wmark_promo(nid)
        } else {
            self.pa.zone_watermarks(nid).2
        }
    }

    /// wakeup_kswapd: wake the node's kswapd if it exists and the node is
    /// short of its target.
    pub fn wakeup_kswapd(&mut self, t: Ns, nid: u32) {
        if let Some(tid) = self.tier.kswapd(nid) {
            // A hopeless node is left to direct reclaim.
            if self.nodes[nid as usize].kswapd_failures >= MAX_RECLAIM_RETRIES {
                return;
            }
            if self.pa.zone_free_pages(nid) < self.kswapd_target(nid) {
                self.wake_up(tid, t);
            }
        }
    }

    /// wake_all_kswapds: an allocation for node `nid` found every node of
    /// its zonelist below its low watermark (the allocator's slow path):
    /// each node's kswapd wakes if the node is short of its target.
    #[inline(never)]
    pub fn wake_all_kswapds(&mut self, t: Ns, nid: u32) {
        if !self.tier.has_kswapds() {
            return;
        }
        for n in self.pa.zonelist(nid) {
            self.wakeup_kswapd(t, n);
        }
    }

    /// Spawn one kswapd per node (boot, when demotion or tiering is on).
    pub fn spawn_kswapds(&mut self) {
        for nid in 0..self.nodes.len() as u32 {
            // Bound to the first CPU of the node, or CPU 0 for CPU-less nodes.
            let cpu = (0..self.nr_cpus()).find(|&c| self.cpus[c as usize].node == nid).unwrap_or(0);
            let tid = self.spawn_kthread(cpu, None, KthreadFn::Kswapd(nid));
            self.tier.set_kswapd(nid, tid);
        }
    }

    /// The LRU pages kswapd's scan covers on `nid`: file pages, and
    /// anonymous ones when they can be demoted or swapped (get_scan_count).
    fn kswapd_lru_pages(&self, nid: usize) -> u64 {
        let l = &self.nodes[nid].lruvec;
        let mut n = l.list(Lru::InactiveFile).pages() + l.list(Lru::ActiveFile).pages();
        if self.tier.next_demotion_node(nid as u32, &self.knobs).is_some() || self.can_swap() {
            n += l.list(Lru::InactiveAnon).pages() + l.list(Lru::ActiveAnon).pages();
        }
        n
    }

    /// One shrink_folio_list round on `nid`'s inactive lists: file folios,
    /// and anonymous ones to demote or (get_scan_count's share) to swap.
    /// Returns (pages freed on this node, folios scanned, time).
    pub fn kswapd_shrink_node(&mut self, t: Ns, cpu: u32, nid: usize) -> (u64, usize, Ns) {
        let (nanon, nfile) = self.get_scan_count(nid);
        let mut cand: Vec<u32> = self.nodes[nid].lruvec.list(Lru::InactiveFile).iter_from_tail(&self.mem_map).take(nfile).collect();
        let mut t = t;
        if cand.is_empty() && nfile > 0 {
            // shrink_active_list: age the oldest active folios.
            self.refill_inactive_file(t, cpu, nid, &mut t);
            cand = self.nodes[nid].lruvec.list(Lru::InactiveFile).iter_from_tail(&self.mem_map).take(nfile).collect();
        }
        cand.extend(self.anon_demotion_candidates(nid));
        cand.extend(self.anon_candidates(nid, nanon));
        if cand.is_empty() {
            return (0, 0, t);
        }
        t = self.lru_lock_folios(t, cpu, nid, cand.len());
        self.stat.add(Stat::PgscanKswapd, cand.len() as i64);
        let (freed, demoted, t, _) = self.shrink_folio_list(t, cpu, nid, &cand);
        self.stat.add(Stat::PgdemoteKswapd, demoted as i64);
        self.stat.add(Stat::PgstealKswapd, freed as i64);
        (freed, cand.len(), t)
    }

    /// kswapd's loop: one step of node `nid`'s kswapd, task `tid`; the
    /// balance_pgdat run it continues is the node's `kswapd_run`.
    pub fn kswapd(&mut self, tid: u32, nid: u32) -> KthreadNext {
        let t0 = self.tasks[tid as usize].clock;
        let cpu = self.tasks[tid as usize].cpu;
        let n = nid as usize;
        let mut t = t0;
        let target = self.kswapd_target(nid);
        // The balance_pgdat run this step continues; the node keeps it
        // between steps.
        let mut run = self.nodes[n].kswapd_run.take();
        // One batch of rounds per run, so user tasks interleave.
        for _ in 0..64 {
            // prepare_kswapd_sleep: a hopeless node, or a balanced one.
            if self.nodes[n].kswapd_failures >= MAX_RECLAIM_RETRIES || self.pa.zone_free_pages(nid) >= target {
                run = None;
                break;
            }
            let b = run.get_or_insert_with(|| KswapdRun {
                priority: DEF_PRIORITY,
                to_scan: (self.kswapd_lru_pages(n) >> DEF_PRIORITY).max(1),
                reclaimed: 0,
            });
            let (freed, scanned, t1) = self.kswapd_shrink_node(t, cpu, n);
            t = t1;
            b.reclaimed += freed;
            b.to_scan = b.to_scan.saturating_sub(scanned as u64);
            if scanned > 0 && b.to_scan > 0 {
                continue;
            }
            // This priority is done (or there was nothing to scan): the
            // next one scans twice as much; after priority 1 the run ends.
            if b.priority > 1 {
                b.priority -= 1;
                b.to_scan = (self.kswapd_lru_pages(n) >> b.priority).max(1);
                continue;
            }
            if b.reclaimed == 0 {
                self.nodes[n].kswapd_failures += 1;
            }
            run = None;
            if scanned == 0 {
                break;
            }
        }
        self.nodes[n].kswapd_run = run;
        let tk = &mut self.tasks[tid as usize];
        tk.sys_ns += t - t0;
        tk.clock = t;
        let hopeless = self.nodes[n].kswapd_failures >= MAX_RECLAIM_RETRIES;
        if !hopeless && self.pa.zone_free_pages(nid) < target && t > t0 {
            KthreadNext::At(t)
        } else {
            KthreadNext::Sleep
        }
    }
}
