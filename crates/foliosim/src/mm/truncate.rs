//! invalidate_inode_pages2 (mm/truncate.c): a file changed somewhere the
//! page cache did not see (an NFS server, a FUSE daemon), so its cached
//! folios are unmapped and dropped and the next access reads the new data.
//!
//! Lazy unmap flush (docs/mechanisms/lazy-unmap-flush.md#scenarios, scenario 11; Dave Hansen's file-change
//! case in the v10 thread, 2024-05-24): folios LUF'd
//! earlier are no longer in the cache, so the invalidation finds neither
//! them nor their PTEs (already none), and nothing flushes the stale
//! entries still showing the old contents. No posted version hooks this;
//! `luf.invalidate_hook` is the obvious fix (a forced flush first, as
//! v11's file_end_write does for local writes), off by default.

use super::luf::ForcedBy;
use super::mem_map::pg;
use super::vmstat::Stat;
use crate::kernel::Kernel;
use crate::sim::Ns;

impl Kernel {
    /// Invalidate every cached page of `ino` (the remote side has already
    /// changed the data): each cached folio is unmapped from every mm with
    /// an immediate flush (unmap_mapping_pages), written back first if
    /// dirty (launder_folio), and dropped. Returns the time.
    pub fn invalidate_inode_pages2(&mut self, t: Ns, cpu: u32, tid: u32, ino: u32) -> Ns {
        let mut t = t;
        if self.knobs.luf.invalidate_hook && self.luf_hooks_on() {
            t = self.luf_flush(t, cpu, tid, ForcedBy::Invalidate);
        }
        t = self.lru_add_drain_all(t);
        let mut cached: Vec<(u64, u32)> = self.inodes[ino as usize].pages.iter().collect();
        cached.sort_unstable();
        let mut put = Vec::new();
        for (_, pfn) in cached {
            let p = self.mem_map.get(pfn);
            let mapped = self.folio_mapcount(pfn);
            // A folio someone else holds (isolated by reclaim or migration,
            // pinned) is skipped, as invalidate_inode_pages2 returns -EBUSY.
            if p.flags & pg::LRU == 0 || p.refcount != 1 + mapped {
                continue;
            }
            t += self.c.lru_lock_per_folio;
            self.folio_isolate_lru(pfn);
            if mapped > 0 {
                let (unmapped, _, t1) = self.try_to_unmap(t, cpu, tid, pfn, false);
                t = t1;
                if !unmapped {
                    self.folio_putback_lru(pfn);
                    continue;
                }
            }
            if self.mem_map.get(pfn).flags & pg::DIRTY != 0 {
                // launder_folio: the local changes go to the server first.
                self.mem_map.get_mut(pfn).flags &= !pg::DIRTY;
                self.stat.inc(Stat::Pgpageout);
                t += self.c.pageout;
            }
            self.stat.inc(Stat::PgInvalidate);
            self.drop_isolated_cache_folio(pfn);
            put.push(pfn);
        }
        t = self.release_folios(t, cpu, &put);
        // The remote change itself: every page of the file has new data.
        if self.check.enabled {
            for idx in 0..self.inodes[ino as usize].data_pages {
                self.check.bump_data((false, ino + 1, idx));
            }
        }
        t
    }
}
