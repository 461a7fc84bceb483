//! Memory failure (mm/memory-failure.c): a frame reported bad is taken
//! out of use for good.
//!
//! * A free frame: `take_page_off_buddy` removes it from its buddy block
//!   (the rest goes back, keeping the block's LUF generation). This is an
//!   exit (docs/mechanisms/lazy-unmap-flush.md#rules-it-implements): a CPU still caching the frame through a
//!   deferred entry would read poisoned memory (a machine check), so the
//!   generation is checked after the zone lock is dropped.
//! * A mapped page-cache folio (hard offline, `memory_failure`): its PTEs
//!   are cleared without TTU_BATCH_FLUSH (hwpoison_user_mappings), each
//!   flushed at once, so LUF never defers them; the clean folio leaves the
//!   page cache (me_pagecache_clean) and the frame stays poisoned.
//! * Soft offline (`soft_offline_page`): the contents are still good, so
//!   the folio migrates (MR_MEMORY_FAILURE) and the old frame is poisoned
//!   instead of freed. Its async batch may be LUF'd like any migration;
//!   since the source never returns to the allocator, v10 flushes that
//!   generation at once (migrate.rs).
//!
//! Only order-0 page-cache folios are handled; anything else is counted
//! and ignored (MF_IGNORED).

use super::mem_map::pg;
use super::migrate::{MigrateDst, MigrateReason};
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;

/// How `hwpoison_start` left the frame.
enum Poison {
    OffBuddy(Ns),
    Isolated(Ns, u32),
    Refused(Ns),
}

impl Kernel {
    /// The frame is out of use (page_handle_poison / SetPageHWPoison): it
    /// counts as leaving the allocator's hands for good, and its contents
    /// are poison from now on.
    pub(crate) fn page_handle_poison(&mut self, t: Ns, pfn: Pfn) -> Ns {
        self.check_content_change(t, pfn, 0, "hwpoison");
        let p = self.mem_map.get_mut(pfn);
        p.flags = pg::ALLOCATED | pg::HWPOISON;
        p.refcount = 0;
        p.mapcount = 0;
        p.mapping = 0;
        p.index = 0;
        p.alloc_epoch = p.alloc_epoch.wrapping_add(1);
        self.stat.inc(Stat::HwpoisonPages);
        t
    }

    /// take_page_off_buddy for a free frame (draining pcp lists first, as
    /// shake_page does when the frame is not in buddy). Returns None if
    /// the frame is not free.
    pub fn take_page_off_buddy(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Option<Ns> {
        let mut t = t;
        if !self.pa.is_free(pfn) {
            return None;
        }
        if self.pa.free_block_containing(pfn).is_none() {
            t = self.pa.drain_all_pages(t);
        }
        let nid = self.pfn_to_nid(pfn);
        let ops0 = self.pa.zone_list_ops(nid);
        let ugen = self.pa.take_page_off_buddy(pfn, &mut self.stat)?;
        let hold = (self.pa.zone_list_ops(nid) - ops0) * self.c.buddy_op;
        let lc = self.lc;
        t = self.pa.zone_lock(nid).lock_for(t, cpu, hold, &lc);
        t = self.luf_isolation_exit(t, cpu, nid, ugen);
        Some(self.page_handle_poison(t, pfn))
    }

    /// The start memory_failure and soft_offline_page share: a free frame
    /// is taken off buddy (`Poison::OffBuddy`); otherwise, once every LRU
    /// batch is drained (shake_page), an order-0 folio on its LRU with a
    /// mapping and none of the flags in `refuse` is isolated from it
    /// (`Poison::Isolated`, with its node); anything else is left alone.
    fn hwpoison_start(&mut self, t: Ns, cpu: u32, pfn: Pfn, refuse: u32) -> Poison {
        self.stat.inc(Stat::MemoryFailure);
        if let Some(t) = self.take_page_off_buddy(t, cpu, pfn) {
            return Poison::OffBuddy(t);
        }
        let t = self.lru_add_drain_all(t);
        let p = *self.mem_map.get(pfn);
        if !p.is_small_lru_folio() || p.flags & refuse != 0 {
            return Poison::Refused(t);
        }
        let t = self.lru_lock_folios(t, cpu, p.nid as usize, 1);
        self.folio_isolate_lru(pfn);
        Poison::Isolated(t, p.nid as u32)
    }

    /// memory_failure(pfn): hard offline. A free frame is taken off buddy;
    /// a clean order-0 page-cache folio is unmapped with an immediate
    /// flush per PTE and dropped from the cache. Err if ignored.
    pub fn memory_failure(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Result<Ns, Ns> {
        let t = match self.hwpoison_start(t, cpu, pfn, pg::ANON | pg::DIRTY) {
            Poison::OffBuddy(t) => return Ok(t),
            Poison::Refused(t) => return Err(t),
            Poison::Isolated(t, _) => t,
        };
        // hwpoison_user_mappings: no TTU_BATCH_FLUSH, so every PTE is
        // flushed as it is cleared and nothing is left for LUF.
        let tid = self.current_tid(cpu);
        let (unmapped, _, t) = self.try_to_unmap(t, cpu, tid, pfn, false);
        if !unmapped {
            return Err(t);
        }
        // me_pagecache_clean: out of the page cache, references dropped.
        self.drop_isolated_cache_folio(pfn);
        self.mem_map.get_mut(pfn).refcount -= 1;
        Ok(self.page_handle_poison(t, pfn))
    }

    /// soft_offline_page(pfn): migrate an in-use order-0 page-cache folio
    /// away (MR_MEMORY_FAILURE) and poison the old frame; a free frame is
    /// taken off buddy. Err if the page could not be handled.
    pub fn soft_offline_page(&mut self, t: Ns, cpu: u32, pfn: Pfn) -> Result<Ns, Ns> {
        let (t, nid) = match self.hwpoison_start(t, cpu, pfn, 0) {
            Poison::OffBuddy(t) => return Ok(t),
            Poison::Refused(t) => return Err(t),
            Poison::Isolated(t, nid) => (t, nid),
        };
        // alloc_migration_target on the same node.
        let (moved, failed, mut t) = self.migrate_pages_to(t, cpu, &[pfn], &mut MigrateDst::Node(nid), MigrateReason::MemoryFailure);
        for f in failed {
            t = self.putback_folio(t, cpu, f);
        }
        if moved == 0 {
            return Err(t);
        }
        Ok(t)
    }
}
