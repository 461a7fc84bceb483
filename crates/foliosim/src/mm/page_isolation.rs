//! Pageblock isolation and what is built on it (mm/page_isolation.c,
//! alloc_contig_range in mm/page_alloc.c): a pfn range is taken whole.
//!
//! The range's pageblocks turn MIGRATE_ISOLATE, so its free blocks sit on
//! the ISOLATE lists (their LUF generations kept) and nothing allocates
//! from them; pcp lists are drained into them; every in-use page must be
//! migrated away, else the call fails with -EBUSY and the isolation is
//! undone; then every free block of the range is taken off the lists.
//! That last removal is a LUF exit (docs/mechanisms/lazy-unmap-flush.md#rules-it-implements): the generations go to
//! the task's accumulator and are checked after the zone lock is dropped,
//! before the frames are handed out (alloc_contig_range) or go offline
//! (memory_hotplug.rs).
//!
//! Ranges are aligned to MAX_PAGE_ORDER blocks, as alloc_contig_range
//! rounded them before 6.x, so no free block straddles an edge.

use super::mem_map::pg;
use super::migrate::{MigrateDst, MigrateReason};
use super::page_alloc::{ugen_latest, MigrateType};
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::mm::luf::LufExit;
use crate::sim::Ns;

impl Kernel {
    /// Isolate [start, end) and migrate its in-use pages to `dst`
    /// (__alloc_contig_migrate_range / do_migrate_range). Err with the
    /// time if the range cannot be isolated or a page cannot move (the
    /// isolation is then undone).
    pub(crate) fn isolate_and_evacuate(
        &mut self,
        t: Ns,
        cpu: u32,
        start: Pfn,
        end: Pfn,
        dst: u32,
        reason: MigrateReason,
    ) -> Result<Ns, Ns> {
        if !self.pa.start_isolate_page_range(start, end) {
            return Err(t);
        }
        // Pages on pcp lists go to the ISOLATE lists; pages in per-CPU
        // LRU batches reach their LRU (lru_add_drain_all).
        let t = self.pa.drain_all_pages(t);
        let mut t = self.lru_add_drain_all(t);
        let mut movable = Vec::new();
        let mut busy = false;
        for p in start..end {
            if self.pa.is_free(p) || !self.mem_map.is_present(p) {
                continue;
            }
            let pg_ = self.mem_map.get(p);
            if pg_.flags & pg::ALLOCATED == 0 {
                continue;
            }
            let lru_small = pg_.is_small_lru_folio() && pg_.flags & pg::ISOLATED == 0;
            if !lru_small {
                busy = true;
                break;
            }
            movable.push(p);
        }
        if !busy && !movable.is_empty() {
            let nid = self.mem_map.get(movable[0]).nid as usize;
            t = self.lru_lock_folios(t, cpu, nid, movable.len());
            for &p in &movable {
                self.folio_isolate_lru(p);
            }
            // Freed sources go straight to the ISOLATE lists (an isolated
            // pageblock bypasses pcp), with their LUF generation.
            let (_, failed, t1) = self.migrate_pages_to(t, cpu, &movable, &mut MigrateDst::Node(dst), reason);
            t = t1;
            busy = !failed.is_empty();
            for p in failed {
                t = self.putback_folio(t, cpu, p);
            }
        }
        if busy || (start..end).any(|p| !self.pa.is_free(p)) {
            self.pa.undo_isolate_page_range(start, end, MigrateType::Movable);
            return Err(t);
        }
        Ok(t)
    }

    /// Take every free block of the isolated range off the ISOLATE lists
    /// (isolate_freepages_range / __offline_isolated_pages): their
    /// generations are checked once the zone lock is dropped, and each
    /// block then leaves the allocator (`what` names the exit for I4).
    pub(crate) fn take_isolated_range(&mut self, t: Ns, cpu: u32, start: Pfn, end: Pfn, what: &str) -> (Vec<(Pfn, u32)>, Ns) {
        let nid = self.pfn_to_nid(start);
        let ops0 = self.pa.zone_list_ops(nid);
        let mut blocks = Vec::new();
        let mut ugen = 0u16;
        let mut p = start;
        while p < end {
            let Some(iso) = self.pa.isolate_free_block(p, &mut self.stat) else {
                p += 1;
                continue;
            };
            ugen = ugen_latest(ugen, iso.ugen);
            blocks.push((p, iso.order));
            p += 1 << iso.order;
        }
        let hold = (self.pa.zone_list_ops(nid) - ops0) * self.c.buddy_op;
        let lc = self.lc;
        let t = self.pa.zone_lock(nid).lock_for(t, cpu, hold, &lc);
        let t = self.luf_isolation_exit(t, cpu, nid, ugen);
        for &(b, o) in &blocks {
            self.check_alloc_exit(t, b, o, what);
        }
        (blocks, t)
    }

    /// alloc_contig_range over [start, end) (node-local; MR_CONTIG_RANGE):
    /// on success every frame of the range is allocated to the caller as
    /// an order-0 page with one reference, the pageblocks are MOVABLE
    /// again, and Ok carries the time.
    pub fn alloc_contig_range(&mut self, t: Ns, cpu: u32, start: Pfn, end: Pfn) -> Result<Ns, Ns> {
        let nid = self.pfn_to_nid(start);
        let t = match self.isolate_and_evacuate(t, cpu, start, end, nid, MigrateReason::ContigRange) {
            Ok(t) => t,
            Err(t) => {
                self.stat.inc(Stat::AllocContigFail);
                return Err(t);
            }
        };
        let (blocks, mut t) = self.take_isolated_range(t, cpu, start, end, "alloc_contig_range");
        for (b, o) in blocks {
            self.pa.isolated_to_allocated(b, o);
            // split_free_pages: every frame is an order-0 page of its own.
            for f in b..b + (1 << o) {
                t = self.post_alloc_hook(t, cpu, f, 0, nid, LufExit::Checked, "alloc_contig_range");
            }
        }
        // undo_isolate_page_range: nothing free is left in the range.
        self.pa.undo_isolate_page_range(start, end, MigrateType::Movable);
        self.stat.inc(Stat::AllocContigSuccess);
        Ok(t)
    }

    /// free_contig_range: give every page of [start, end) back.
    pub fn free_contig_range(&mut self, t: Ns, cpu: u32, start: Pfn, end: Pfn) -> Ns {
        let mut t = t;
        for p in start..end {
            self.mem_map.get_mut(p).refcount = 0;
            t = self.free_folio(t, cpu, p);
        }
        t
    }
}
