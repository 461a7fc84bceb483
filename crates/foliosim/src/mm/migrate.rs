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
use crate::mm::luf::LufExit;
use crate::sim::Ns;

/// Where destination folios come from (migrate_pages' get_new_folio).
#[derive(Clone, Debug)]
pub enum MigrateDst {
    /// alloc_migration_target on this node only, no reclaim.
    Node(u32),
    /// alloc_demote_folio: the target node, then (its zonelist order)
    /// any node of `allowed`, the tiers below the source's; no reclaim.
    Demote { target: u32, allowed: Vec<u32> },
    /// compaction_alloc: order-0 frames compaction isolated from the free
    /// lists (and already checked for a LUF generation), used from the end.
    Isolated(Vec<Pfn>),
}

/// enum migrate_reason, as far as the model needs to tell reasons apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateReason {
    /// Demotion, NUMA promotion: the existing callers.
    Tiering,
    Compaction,
    ContigRange,
    MemoryHotplug,
    /// Soft offline: the source is poisoned, not freed.
    MemoryFailure,
    /// move_pages(2).
    Syscall,
}

/// Flags folio_migrate_flags carries to the new folio.
const MIGRATE_FLAGS: u32 =
    pg::REFERENCED | pg::ACTIVE | pg::WORKINGSET | pg::UPTODATE | pg::DIRTY | pg::SWAPBACKED | pg::SHMEM | pg::UNEVICTABLE;

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
        let done = self.post_alloc_hook(a.done, cpu, a.pfn, order, a.nid, LufExit::Alloc(a.ugen), "migration target");
        Ok((a.pfn, done))
    }

    /// alloc_demote_folio: first on the target alone (__GFP_THISNODE), so
    /// that a short target wakes its kswapd rather than the folio going
    /// further down; then without __GFP_THISNODE, restricted to `allowed`,
    /// along the target's zonelist. Neither attempt reclaims.
    fn alloc_demote_folio(&mut self, t: Ns, cpu: u32, order: u32, target: u32, allowed: &[u32]) -> Result<(Pfn, Ns), Ns> {
        let t = match self.alloc_migration_target(t, cpu, order, target) {
            Ok(done) => return Ok(done),
            Err(t) => t,
        };
        for nid in self.pa.zonelist(target) {
            if nid != target && allowed.contains(&nid) {
                if let Ok(done) = self.alloc_migration_target(t, cpu, order, nid) {
                    return Ok(done);
                }
            }
        }
        Err(t)
    }

    /// Move one isolated folio whose mappings (if any) are migration
    /// entries to `dst`: copy it, switch its page-cache entry or anon
    /// identity, point the migration entries at the copy, free the old
    /// folio (carrying LUF generation `ugen`). Returns the new PFN; on
    /// failure the caller restores the mappings.
    fn migrate_folio_move(
        &mut self,
        t: Ns,
        cpu: u32,
        src: Pfn,
        dst: &mut MigrateDst,
        reason: MigrateReason,
        ugen: u16,
    ) -> Result<(Pfn, Ns), Ns> {
        let (order, mapping, index, snid, flags, private) = {
            let p = self.mem_map.get(src);
            (p.order as u32, p.mapping, p.index, p.nid as usize, p.flags, p.private)
        };
        if mapping == 0 {
            return Err(t);
        }
        let anon = flags & pg::ANON != 0;
        let (new, mut t) = match dst {
            MigrateDst::Node(nid) => self.alloc_migration_target(t, cpu, order, *nid)?,
            MigrateDst::Demote { target, allowed } => self.alloc_demote_folio(t, cpu, order, *target, allowed)?,
            MigrateDst::Isolated(free) => self.compaction_alloc(t, cpu, order, free)?,
        };
        let dnid = self.mem_map.get(new).nid as usize;
        // Lock, freeze the reference count, copy, switch the xarray entry.
        let nr = 1u64 << order;
        t += self.c.migrate_folio;
        t = self.copy_pages(t, cpu, snid, dnid, nr, self.nodes[snid].copy_4k.max(self.nodes[dnid].copy_4k) * nr);
        self.check_guest_write(new, order, "copied into");
        {
            let p = self.mem_map.get_mut(new);
            p.flags |= flags & (MIGRATE_FLAGS | pg::ANON | pg::ANON_EXCLUSIVE);
            p.mapping = mapping;
            p.index = index;
            p.private = private;
        }
        for i in 1..nr as u32 {
            let (m, ix) = (mapping, index + i as u64);
            // AnonExclusive is each page's own: the migration entry of a
            // tail page carries it as the head's does.
            let excl = self.mem_map.get(src + i).flags & pg::ANON_EXCLUSIVE;
            let p = self.mem_map.get_mut(new + i);
            p.mapping = m;
            p.index = ix;
            if anon {
                p.flags |= pg::ANON | excl;
            }
        }
        if !anon {
            self.inodes[(mapping - 1) as usize].pages.insert(index, new);
            t += self.c.pc_insert;
        }
        t = self.remove_migration_ptes(t, cpu, src, new);
        if anon {
            // The allocation's reference: an anon folio lives on its mappings.
            self.mem_map.get_mut(new).refcount -= 1;
        }
        // The old folio: its cache and isolation references go.
        {
            let p = self.mem_map.get_mut(src);
            p.flags &= !(pg::ISOLATED | pg::DIRTY);
            p.mapping = 0;
            p.refcount = 0;
        }
        self.stat.add(if anon { Stat::NrIsolatedAnon } else { Stat::NrIsolatedFile }, -(nr as i64));
        if reason == MigrateReason::MemoryFailure {
            // The poisoned source never returns to the allocator, so no
            // exit would ever check its generation: flush now (v10).
            if ugen != 0 && self.knobs.mutant != crate::kernel::knobs::Mutant::Luf(crate::kernel::knobs::LufMutant::DeferMemoryFailure) {
                let tid = self.current_tid(cpu);
                t = self.check_luf_flush(t, cpu, tid, snid as u32, ugen);
                self.stat.inc(Stat::LufForcedOther);
            }
            t = self.page_handle_poison(t, src);
        } else {
            t = self.free_folio_ugen(t, cpu, src, ugen);
        }
        // The new folio joins the destination's LRU.
        t = self.folio_add_lru(t, cpu, new);
        self.stat.add(Stat::PgmigrateSuccess, nr as i64);
        Ok((new, t))
    }

    /// The kernel side of move_pages(2) (add_folio_for_migration, then
    /// do_move_pages_to_node): isolate each order-0 folio on an LRU and
    /// migrate the list to `nid` (MR_SYSCALL). Folios that did not move go
    /// back to their LRU. Returns (pages moved, time).
    pub fn move_pages_to_node(&mut self, t: Ns, cpu: u32, pfns: &[Pfn], nid: u32) -> (u64, Ns) {
        // lru_cache_disable: every CPU's LRU batch drained first.
        let mut t = self.lru_add_drain_all(t);
        let mut list = Vec::new();
        for &p in pfns {
            let pg_ = self.mem_map.get(p);
            if pg_.flags & (pg::HEAD | pg::LRU) == pg::HEAD | pg::LRU
                && pg_.flags & pg::ISOLATED == 0
                && pg_.order == 0
                && pg_.nid as u32 != nid
            {
                t = self.lru_lock_folios(t, cpu, pg_.nid as usize, 1);
                self.folio_isolate_lru(p);
                list.push(p);
            }
        }
        let (moved, failed, mut t) = self.migrate_pages_to(t, cpu, &list, &mut MigrateDst::Node(nid), MigrateReason::Syscall);
        for p in failed {
            t = self.putback_folio(t, cpu, p);
        }
        (moved, t)
    }

    /// migrate_pages_batch in async mode: unmap every folio of the list
    /// (one batched TLB flush for all, LUF'd ones handed over first), then
    /// move them in order. Returns (pages moved, folios that failed and are
    /// still isolated, time).
    pub fn migrate_pages(&mut self, t: Ns, cpu: u32, list: &[Pfn], dst: u32) -> (u64, Vec<Pfn>, Ns) {
        self.migrate_pages_to(t, cpu, list, &mut MigrateDst::Node(dst), MigrateReason::Tiering)
    }

    /// `migrate_pages` with the destinations from `dst` and a reason.
    /// Every reason goes through this async batch: 6.12's sync modes try
    /// one MIGRATE_ASYNC batch first (migrate_pages_sync), and that batch
    /// unmaps with TTU_BATCH_FLUSH, so LUF may defer for any reason.
    /// With `migrate.batch_flush` off (before 7e12beb8ca2a) each PTE is
    /// flushed as it is unmapped.
    pub fn migrate_pages_to(&mut self, t: Ns, cpu: u32, list: &[Pfn], dst: &mut MigrateDst, reason: MigrateReason) -> (u64, Vec<Pfn>, Ns) {
        let mut t = t;
        let tid = self.current_tid(cpu);
        let mut moved = 0;
        let mut failed = Vec::new();
        // Unmap: mapped folios get migration entries.
        let mut luf = vec![false; list.len()];
        let mut ok = vec![true; list.len()];
        let mut snid = None;
        for (i, &pfn) in list.iter().enumerate() {
            snid.get_or_insert(self.mem_map.get(pfn).nid as u32);
            if self.mem_map.get(pfn).mapcount == 0 && self.folio_mapcount(pfn) == 0 {
                continue;
            }
            if self.tasks.is_empty() {
                ok[i] = false;
                continue;
            }
            let (unmapped, l, t1) = self.try_to_migrate(t, cpu, tid, pfn, self.knobs.migrate_batch_flush);
            t = t1;
            luf[i] = l;
            if !unmapped {
                t = self.remove_migration_ptes(t, cpu, pfn, pfn);
                ok[i] = false;
            }
        }
        let mut g = 0;
        if !self.tasks.is_empty() {
            if luf.iter().any(|&l| l) {
                let (g1, t1) = self.try_to_unmap_luf(t, cpu, tid, snid.unwrap_or(0));
                g = g1;
                t = t1;
                if g != 0 {
                    self.stat.add(Stat::LufDeferred, luf.iter().filter(|&&l| l).count() as i64);
                }
            }
            t = self.try_to_unmap_flush(t, cpu, tid);
        }
        // Move.
        for (i, &pfn) in list.iter().enumerate() {
            let nr = 1u64 << self.mem_map.get(pfn).order;
            let res = if ok[i] { self.migrate_folio_move(t, cpu, pfn, dst, reason, if luf[i] { g } else { 0 }) } else { Err(t) };
            match res {
                Ok((_, t1)) => {
                    t = t1;
                    moved += nr;
                }
                Err(t1) => {
                    t = t1;
                    if ok[i] {
                        // Could not allocate: map the old folio back.
                        t = self.remove_migration_ptes(t, cpu, pfn, pfn);
                    }
                    self.stat.add(Stat::PgmigrateFail, nr as i64);
                    failed.push(pfn);
                }
            }
        }
        (moved, failed, t)
    }
}
