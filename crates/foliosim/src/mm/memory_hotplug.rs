//! Memory offline (mm/memory_hotplug.c offline_pages): a range is
//! isolated, emptied by migration (MR_MEMORY_HOTPLUG) and its free frames
//! are taken out of the zone for good (__offline_isolated_pages).
//!
//! For LUF the taking-out is an exit like any other (docs/mechanisms/lazy-unmap-flush.md#rules-it-implements): a
//! frame some CPU may still read through a deferred entry must be flushed
//! before it goes, since offlined memory may be unplugged (its contents
//! gone) or onlined again and handed out without passing `prep_new_page`
//! with the old generation. So the generations are checked after the zone
//! lock is dropped, as alloc_contig_range does.

use super::migrate::MigrateReason;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;

impl Kernel {
    /// offline_pages over [start, end) (MAX_PAGE_ORDER aligned). In-use
    /// pages move to another node with memory, or to this node outside the
    /// range when there is none. Err (-EBUSY, isolation undone) if a page
    /// cannot move. On success the pageblocks stay isolated and the zone
    /// shrinks.
    pub fn offline_pages(&mut self, t: Ns, cpu: u32, start: Pfn, end: Pfn) -> Result<Ns, Ns> {
        let nid = self.pfn_to_nid(start);
        let dst = self.pa.nids().into_iter().find(|&n| n != nid).unwrap_or(nid);
        let t = self.isolate_and_evacuate(t, cpu, start, end, dst, MigrateReason::MemoryHotplug)?;
        let (blocks, t) = self.take_isolated_range(t, cpu, start, end, "memory offline");
        for (b, o) in blocks {
            self.pa.offline_isolated(b, o);
            self.stat.add(Stat::OfflinePages, 1 << o);
        }
        Ok(t)
    }
}
