//! Memory compaction (mm/compaction.c), the parts that take frames out of
//! the allocator by other doors than `prep_new_page`:
//!
//! * the free scanner (`isolate_freepages_block`) takes free buddy blocks
//!   off their lists and splits them into order-0 frames that become
//!   migration targets (`compaction_alloc`): a copy into such a frame is
//!   the new owner's first write;
//! * `compaction_capture`: while a direct compactor runs, a free that
//!   merges up to the order it wants is handed straight to it
//!   (page_alloc.rs arms it, `Placement::capture`).
//!
//! Both are LUF exits (docs/mechanisms/lazy-unmap-flush.md#rules-it-implements): the generations the blocks carried go
//! to the task's accumulator and are checked (`luf_isolation_exit`) after
//! the zone lock is dropped and before any frame is used.
//!
//! The scanners walk caller-given pfn ranges instead of meeting in the
//! middle of the zone, and the per-pfn scan itself costs nothing in
//! simulated time (no cost constant exists for it); zone and LRU lock
//! holds and the migration are charged as elsewhere.

use super::mem_map::pg;
use super::migrate::{MigrateDst, MigrateReason};
use super::page_alloc::FpiPlace;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::mm::memory::LufExit;
use crate::sim::Ns;

/// What `compact_zone_range` did.
#[derive(Clone, Debug, Default)]
pub struct CompactResult {
    /// Base pages migrated.
    pub migrated: u64,
    /// The block captured for the caller (order `capture_order`), now
    /// allocated to it, if any.
    pub captured: Option<(Pfn, u32)>,
    pub done: Ns,
}

impl Kernel {
    /// isolate_freepages_block over [start, end) of node `nid`: free buddy
    /// blocks starting in the range are taken off their lists
    /// (__isolate_free_page, refused at the min watermark: the scan stops
    /// there) and split into order-0 frames, until `want` frames are held
    /// (as the kernel stops once nr_freepages covers nr_migratepages).
    /// Returns them in pfn order.
    pub fn isolate_freepages_block(&mut self, t: Ns, cpu: u32, nid: u32, start: Pfn, end: Pfn, want: usize) -> (Vec<Pfn>, Ns) {
        let ops0 = self.pa.zone_list_ops(nid);
        let mut freepages = Vec::new();
        let mut ugen = 0u16;
        let mut scanned = 0i64;
        let mut p = start;
        while p < end && freepages.len() < want {
            scanned += 1;
            let Some(b) = self.pa.free_block(p) else {
                p += 1;
                continue;
            };
            let Some(iso) = self.pa.isolate_free_block(p, &mut self.stat) else { break };
            // The removal from the free list hands the block's generation
            // to this task (update task ugen).
            ugen = super::page_alloc::ugen_latest(ugen, iso.ugen);
            freepages.extend(p..p + (1 << iso.order));
            p += 1 << b.order;
        }
        self.stat.add(Stat::CompactFreeScanned, scanned);
        self.stat.add(Stat::CompactIsolated, freepages.len() as i64);
        let hold = (self.pa.zone_list_ops(nid) - ops0) * self.c.buddy_op;
        let lc = self.lc;
        let t = self.pa.zone_lock(nid).lock_for(t, cpu, hold, &lc);
        // After the lock is dropped, before any frame is a target.
        let t = self.luf_isolation_exit(t, cpu, nid, ugen);
        (freepages, t)
    }

    /// compaction_alloc: the next isolated free frame as a migration
    /// target (order 0 only; a large source fails). The frame leaves the
    /// allocator here: the copy into it, on `cpu`, the migrating CPU, is its
    /// new owner's first write.
    pub(crate) fn compaction_alloc(&mut self, t: Ns, cpu: u32, order: u32, free: &mut Vec<Pfn>) -> Result<(Pfn, Ns), Ns> {
        if order != 0 {
            return Err(t);
        }
        // The first isolated frame (list_first_entry of cc->freepages).
        if free.is_empty() {
            return Err(t);
        }
        let pfn = free.remove(0);
        let nid = self.pfn_to_nid(pfn);
        self.pa.isolated_to_allocated(pfn, 0);
        // The generation was checked at isolation.
        let t = self.post_alloc_hook(t, cpu, pfn, 0, nid, LufExit::Checked, "compaction free page");
        Ok((pfn, t))
    }

    /// isolate_migratepages_block over [start, end): order-0 folios on an
    /// LRU with a mapping (page cache or anon) are isolated as sources.
    pub fn isolate_migratepages_range(&mut self, t: Ns, cpu: u32, start: Pfn, end: Pfn) -> (Vec<Pfn>, Ns) {
        let mut list = Vec::new();
        for p in start..end {
            if !self.mem_map.is_present(p) {
                continue;
            }
            let pg_ = self.mem_map.get(p);
            if pg_.flags & (pg::ALLOCATED | pg::ISOLATED) == pg::ALLOCATED && pg_.is_small_lru_folio() {
                list.push(p);
            }
        }
        self.stat.add(Stat::CompactMigrateScanned, (end - start) as i64);
        self.stat.add(Stat::CompactIsolated, list.len() as i64);
        let mut t = t;
        if let Some(&first) = list.first() {
            let nid = self.mem_map.get(first).nid as usize;
            t = self.lru_lock_folios(t, cpu, nid, list.len());
        }
        for &p in &list {
            self.folio_isolate_lru(p);
        }
        (list, t)
    }

    /// compact_zone over caller-given ranges of node `nid`: isolate the
    /// movable folios of `migrate`, the free frames of `free`, move the
    /// first into the second (async migration, so LUF may defer the
    /// sources' flush), then drain this CPU's pcp lists so the freed
    /// sources merge (lru_add_drain_cpu_zone), with capture armed for
    /// `capture_order` as a direct compactor has it. Unused free frames
    /// go back (release_free_list, generation 0: their generation was
    /// checked at isolation).
    pub fn compact_zone_range(
        &mut self,
        t: Ns,
        cpu: u32,
        nid: u32,
        migrate: (Pfn, Pfn),
        free: (Pfn, Pfn),
        capture_order: Option<u32>,
    ) -> CompactResult {
        let t = self.lru_add_drain_cpu(t, cpu);
        let (src, t) = self.isolate_migratepages_range(t, cpu, migrate.0, migrate.1);
        let (freepages, mut t) = self.isolate_freepages_block(t, cpu, nid, free.0, free.1, src.len());
        if capture_order.is_some() {
            self.pa.set_capture(nid, capture_order);
        }
        let mut dst = MigrateDst::Isolated(freepages);
        let (migrated, failed, t1) = self.migrate_pages_to(t, cpu, &src, &mut dst, MigrateReason::Compaction);
        t = t1;
        for p in failed {
            t = self.putback_folio(t, cpu, p);
        }
        t = self.pa.drain_pages(t, cpu);
        self.pa.set_capture(nid, None);
        let mut captured = None;
        if let Some((pfn, order, ugen)) = self.pa.take_captured(&mut self.stat) {
            // The capturer's prep_new_page checks the generation the
            // captured block carried.
            t = self.post_alloc_hook(t, cpu, pfn, order, nid, LufExit::Isolation(ugen), "compaction capture");
            self.stat.inc(Stat::CompactSuccess);
            captured = Some((pfn, order));
        }
        if let MigrateDst::Isolated(left) = dst {
            let ops0 = self.pa.zone_list_ops(nid);
            for p in left {
                self.pa.putback_isolated_ugen(p, 0, FpiPlace::Head, false, 0, &mut self.stat);
            }
            let hold = (self.pa.zone_list_ops(nid) - ops0) * self.c.buddy_op;
            let lc = self.lc;
            t = self.pa.zone_lock(nid).lock_for(t, cpu, hold, &lc);
        }
        CompactResult { migrated, captured, done: t }
    }
}
