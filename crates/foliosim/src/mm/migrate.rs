//! Folio migration between nodes (mm/migrate.c), for promotion and
//! demotion of unmapped page-cache folios.
//!
//! `migrate_pages` walks the list in order; for each folio it allocates the
//! destination on the target node only (__GFP_THISNODE, no reclaim: a
//! failed allocation fails that folio), copies the contents, switches the
//! page-cache entry to the new folio, carries the flags over, puts the new
//! folio on the destination's LRU and frees the old one. Destinations are
//! allocated in list order from this CPU's per-CPU list of the target
//! zone, so the list order becomes the physical order on the target.

use super::mem_map::pg;
use super::page_alloc::MigrateType;
use super::vmstat::Stat;
use super::Pfn;
use crate::kernel::Kernel;
use crate::sim::Ns;

/// Flags folio_migrate_flags carries to the new folio.
const MIGRATE_FLAGS: u32 = pg::REFERENCED | pg::ACTIVE | pg::WORKINGSET | pg::UPTODATE | pg::DIRTY | pg::SWAPBACKED | pg::SHMEM | pg::UNEVICTABLE;

impl Kernel {
    /// Allocate a destination folio on `nid` only, without reclaim
    /// (alloc_misplaced_dst_folio / alloc_demote_folio). Err(time) on failure.
    pub fn alloc_migration_target(&mut self, t: Ns, cpu: u32, order: u32, nid: u32) -> Result<(Pfn, Ns), Ns> {
        // __GFP_THISNODE and no reclaim: the zone must pass its min mark.
        let (min, _, _) = self.pa.zone_watermarks(nid);
        if !self.pa.zone_watermark_ok(nid, order, min) {
            return Err(t);
        }
        let Some(a) = self.pa.alloc_pages(t, cpu, order, nid, MigrateType::Movable, &mut self.stat) else { return Err(t) };
        if a.nid != nid {
            // Fell back along the zonelist: THISNODE forbids it.
            return Err(self.pa.free_pages(a.done, cpu, a.pfn, order, &mut self.stat));
        }
        for i in 0..(1u32 << order) {
            let p = self.mem_map.get_mut(a.pfn + i);
            p.flags = pg::ALLOCATED | if i == 0 { pg::HEAD } else { pg::TAIL };
            p.order = order as u8;
            p.nid = a.nid as u8;
            p.refcount = if i == 0 { 1 } else { 0 };
            p.mapcount = 0;
            p.mapping = 0;
            p.index = 0;
            p.private = 0;
            p.lru_prev = 0;
            p.lru_next = 0;
            p.alloc_epoch = p.alloc_epoch.wrapping_add(1);
        }
        self.check.on_alloc(&self.mem_map, &self.pa, a.pfn, order);
        Ok((a.pfn, a.done))
    }

    /// Migrate one isolated, unmapped page-cache folio to `dst`. On
    /// success the old folio is freed and the new one is on the LRU
    /// (through this CPU's LRU-add batch). Returns the new PFN.
    pub fn migrate_folio(&mut self, t: Ns, cpu: u32, src: Pfn, dst: u32) -> Result<(Pfn, Ns), Ns> {
        let (order, mapping, index, mapcount, snid, flags, private) = {
            let p = self.mem_map.get(src);
            (p.order as u32, p.mapping, p.index, p.mapcount, p.nid as usize, p.flags, p.private)
        };
        // Mapped folios would need try_to_unmap and remove_migration_ptes:
        // not modelled, so they fail and are put back.
        if mapcount != 0 || mapping == 0 || flags & pg::ANON != 0 {
            return Err(t);
        }
        let (new, mut t) = self.alloc_migration_target(t, cpu, order, dst)?;
        // Lock, freeze the reference count, copy, switch the xarray entry.
        let nr = 1u64 << order;
        t += self.c.migrate_folio;
        t += self.nodes[snid].copy_4k.max(self.nodes[dst as usize].copy_4k) * nr;
        {
            let p = self.mem_map.get_mut(new);
            p.flags |= flags & MIGRATE_FLAGS;
            p.mapping = mapping;
            p.index = index;
            p.private = private;
        }
        for i in 1..nr as u32 {
            let (m, ix) = (mapping, index + i as u64);
            let p = self.mem_map.get_mut(new + i);
            p.mapping = m;
            p.index = ix;
        }
        self.inodes[(mapping - 1) as usize].pages.insert(index, new);
        t += self.c.pc_insert;
        // The old folio: its cache and isolation references go; no longer
        // in the page cache.
        {
            let p = self.mem_map.get_mut(src);
            p.flags &= !(pg::ISOLATED | pg::DIRTY);
            p.mapping = 0;
            p.refcount = 0;
        }
        self.stat.add(Stat::NrIsolatedFile, -(nr as i64));
        t = self.free_folio(t, cpu, src);
        // The new folio joins the destination's LRU.
        t = self.folio_add_lru(t, cpu, new);
        self.stat.add(Stat::PgmigrateSuccess, nr as i64);
        Ok((new, t))
    }

    /// migrate_pages: migrate the list in order. Returns (pages moved,
    /// folios that failed and are still isolated, time).
    pub fn migrate_pages(&mut self, t: Ns, cpu: u32, list: &[Pfn], dst: u32) -> (u64, Vec<Pfn>, Ns) {
        let mut t = t;
        let mut moved = 0;
        let mut failed = Vec::new();
        for &pfn in list {
            let nr = 1u64 << self.mem_map.get(pfn).order;
            match self.migrate_folio(t, cpu, pfn, dst) {
                Ok((_, t1)) => {
                    t = t1;
                    moved += nr;
                }
                Err(t1) => {
                    t = t1;
                    self.stat.add(Stat::PgmigrateFail, nr as i64);
                    failed.push(pfn);
                }
            }
        }
        (moved, failed, t)
    }
}
