//! The zoned buddy allocator with per-CPU page lists (mm/page_alloc.c).
//!
//! One ZONE_NORMAL per node. Free memory has no `struct Page` state: a free
//! block is a node of an intrusive doubly linked list, stored by its first
//! PFN in a sparse per-zone array (free_blocks.rs: dense only in 4 MiB
//! chunks holding blocks smaller than MAX_PAGE_ORDER), one list per
//! (order, migratetype) as in
//! `zone->free_area[order].free_list[mt]`. The only per-range state is one
//! byte per pageblock (its migratetype), as `pageblock_flags`.
//!
//! Simulated time: every entry point takes `now` and returns when it is
//! done. pcp hits cost `alloc_pcp_ns` / `free_pcp_ns`; work under
//! `zone->lock` costs `buddy_op_ns` per free-list insertion or removal and is
//! serialised across CPUs by the zone's `SpinLock` timeline.
//!
//! Differences from 6.12 worth knowing (see also the item docs):
//! * pcp `high` tunes itself between `high_min` and `high_max` as in 6.12
//!   (grows on refills and on free runs, shrinks while the zone is below its
//!   high watermark, ZONE_BELOW_HIGH); the periodic decay_pcp_high, the
//!   ZONE_RECLAIM_ACTIVE clamp and the high-order `free_high` shortcut are
//!   not modelled. `alloc_factor` and `free_count`, which scale refill and
//!   drain sizes, are.
//! * No highatomic reserves, CMA, watermark boosting, lowmem_reserve (a
//!   single zone per node has none) or guard pages. Compaction capture
//!   happens only while a caller (mm/compaction.rs) arms it.
//! * Fallback claims a pageblock when at least half of it is free; the
//!   kernel also counts "alike" allocated pages, which need per-page
//!   mobility we do not keep.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::shuffle::ShuffleState;
use super::vmstat::{Stat, VmStat};
use super::{Pfn, MAX_PAGE_ORDER, NR_PAGE_ORDERS, PAGEBLOCK_ORDER, PAGE_SHIFT, PMD_ORDER};
use crate::sim::lock::{LineCost, SpinLock};
use crate::sim::Ns;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MigrateType {
    Unmovable = 0,
    Movable = 1,
    Reclaimable = 2,
    HighAtomic = 3,
    Isolate = 4,
}
pub const MIGRATE_TYPES: usize = 5;
/// Migratetypes that have pcp lists and fall back to each other.
pub const MIGRATE_PCPTYPES: usize = 3;

impl MigrateType {
    pub const ALL: [MigrateType; MIGRATE_TYPES] =
        [MigrateType::Unmovable, MigrateType::Movable, MigrateType::Reclaimable, MigrateType::HighAtomic, MigrateType::Isolate];

    #[inline]
    pub fn from_u8(v: u8) -> MigrateType {
        Self::ALL[v as usize]
    }

    /// Pageblocks of these types may merge with each other above
    /// pageblock_order (migratetype_is_mergeable).
    #[inline]
    pub fn is_mergeable(self) -> bool {
        (self as usize) < MIGRATE_PCPTYPES
    }
}

/// Where to steal from when a migratetype's own lists are empty, in order.
const FALLBACKS: [[MigrateType; 2]; MIGRATE_PCPTYPES] = [
    [MigrateType::Reclaimable, MigrateType::Movable],
    [MigrateType::Reclaimable, MigrateType::Unmovable],
    [MigrateType::Unmovable, MigrateType::Movable],
];

/// Where a freed block goes on its free list.
///
/// For [`PageAlloc::putback_isolated`], `Tail` is FPI_TO_TAIL (6.12
/// behaviour) and `Head` means "ordinary placement rules" (head unless the
/// merge-likely or shuffle heuristics pick the tail), which is what v17 of
/// free page reporting did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpiPlace {
    Head,
    Tail,
}

pub use free_blocks::FreeBlock;

/// Allocator parameters derived from knobs and the profile.
#[derive(Clone, Debug)]
pub struct AllocParams {
    pub nr_cpus: u32,
    /// vm.min_free_kbytes; None = the kernel's default formula.
    pub min_free_kbytes: Option<u64>,
    /// vm.watermark_scale_factor (default 10).
    pub watermark_scale_factor: u64,
    /// vm.percpu_pagelist_high_fraction (0 = default sizing).
    pub percpu_pagelist_high_fraction: u64,
    pub alloc_pcp_ns: Ns,
    pub free_pcp_ns: Ns,
    pub buddy_op_ns: Ns,
    pub line: LineCost,
    /// The "buddy merge likely" tail placement of __free_one_page (on in
    /// every kernel since 4.x; a switch so its effect can be measured).
    pub merge_likely_tail: bool,
    /// page_alloc.shuffle=1 (CONFIG_SHUFFLE_PAGE_ALLOCATOR).
    pub shuffle: bool,
    /// Run seed for the shuffle stream.
    pub shuffle_seed: u64,
    /// node_distance, a row per node (the profile's table, or Linux's
    /// default without one); empty in tests: 20 between any two nodes.
    pub distance: Vec<Vec<u32>>,
}

pub struct ZoneSpec {
    pub nid: u32,
    pub start_pfn: Pfn,
    pub nr_pages: u64,
    /// CPUs local to this node (for pcp high sizing); empty for CPU-less nodes.
    pub local_cpus: Vec<u32>,
}

/// Outcome of an allocation attempt.
#[derive(Clone, Copy, Debug)]
pub struct Alloc {
    pub pfn: Pfn,
    pub nid: u32,
    /// Simulated time when the allocator returned.
    pub done: Ns,
    /// LUF generation the block carried while free (0 = none): whoever
    /// hands the pages out must make sure that generation is flushed.
    pub ugen: u16,
    /// Every zone of the zonelist was below its low watermark: the block
    /// came from the slow path, whose caller wakes the kswapds
    /// (__alloc_pages_slowpath: wake_all_kswapds). A zone below low while
    /// a later zone of the zonelist is not is left to the fast path's
    /// fallback, with no kswapd woken (get_page_from_freelist).
    pub slow: bool,
}

/// A block taken off the free lists by [`PageAlloc::isolate_free_block`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IsolatedBlock {
    pub pfn: Pfn,
    pub order: u32,
    /// The list it was taken from.
    pub mt: MigrateType,
    /// Whether it was PG_reported when isolated (the flag itself is gone).
    pub was_reported: bool,
    pub ugen: u16,
}

/// Where a free extent lives, for [`PageAlloc::free_extents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeWhere {
    Buddy { mt: MigrateType, reported: bool },
    Pcp { cpu: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeExtent {
    pub pfn: Pfn,
    pub order: u32,
    pub ugen: u16,
    pub at: FreeWhere,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneLockStats {
    pub acquisitions: u64,
    pub contended: u64,
    pub wait_ns: Ns,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Wmark {
    Min = 0,
    Low = 1,
    High = 2,
}

/// Deliberately broken variants, so tests can show the checker catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocMutant {
    /// Removing a block from a free list forgets to decrement nr_free.
    SkipNrFreeDec,
    /// __free_one_page never merges with a free buddy.
    NoMerge,
    /// Taking a free block for an allocation forgets to clear PG_reported:
    /// the flag stays on the head page, and comes back with it when the
    /// page is a free block head again.
    KeepReportedOnAlloc,
    /// LUF D1: pcp -> buddy stores the order where the generation goes.
    LufD1OrderAsUgen,
    /// LUF M3: a merge keeps the older generation.
    LufMergeKeepsOlder,
    /// LUF D2: split remainders go back with generation 0.
    LufD2SplitDrops,
    /// LUF D3: a pcp refill zeroes the pages' generations; the refiller
    /// alone carries the latest of them.
    LufD3RefillDrops,
}

/// Orders 0..=PAGE_ALLOC_COSTLY_ORDER and PMD_ORDER are cached per CPU.
pub const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;
pub const NR_LOWORDER_PCP_LISTS: usize = MIGRATE_PCPTYPES * (PAGE_ALLOC_COSTLY_ORDER as usize + 1);
/// Plus two PMD_ORDER lists: movable and everything else.
pub const NR_PCP_LISTS: usize = NR_LOWORDER_PCP_LISTS + 2;
/// CONFIG_PCP_BATCH_SCALE_MAX default.
pub const PCP_BATCH_SCALE_MAX: u32 = 5;

#[inline]
pub fn pcp_allowed_order(order: u32) -> bool {
    order <= PAGE_ALLOC_COSTLY_ORDER || order == PMD_ORDER
}

#[inline]
fn order_to_pindex(mt: usize, order: u32) -> usize {
    if order > PAGE_ALLOC_COSTLY_ORDER {
        NR_LOWORDER_PCP_LISTS + (mt == MigrateType::Movable as usize) as usize
    } else {
        MIGRATE_PCPTYPES * order as usize + mt
    }
}

#[inline]
fn pindex_to_order(pindex: usize) -> u32 {
    if pindex >= NR_LOWORDER_PCP_LISTS {
        PMD_ORDER
    } else {
        (pindex / MIGRATE_PCPTYPES) as u32
    }
}

/// True if LUF generation `a` is older than `b` (16-bit wrap-around; 0 is
/// "none" and never compares as a generation).
#[inline]
pub fn ugen_before(a: u16, b: u16) -> bool {
    (b.wrapping_sub(a) as i16) > 0
}

/// The earlier of two generations (the M3 mutant's merge).
fn older_ugen(a: u16, b: u16) -> u16 {
    if a == 0 || b == 0 {
        a.max(b)
    } else if ugen_before(a, b) {
        a
    } else {
        b
    }
}

/// The later of two LUF generations, ignoring 0 ("none").
#[inline]
pub fn ugen_latest(a: u16, b: u16) -> u16 {
    if a == 0 {
        b
    } else if b == 0 || ugen_before(b, a) {
        a
    } else {
        b
    }
}

/// Free-list head/tail per migratetype for one order, encoded PFN + 1.
#[derive(Clone, Copy, Debug, Default)]
struct FreeArea {
    head: [Pfn; MIGRATE_TYPES],
    tail: [Pfn; MIGRATE_TYPES],
    /// Blocks of this order on all its lists (the kernel keeps one count).
    nr_free: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PcpEntry {
    pfn: Pfn,
    ugen: u16,
}

#[derive(Clone, Debug, Default)]
struct PerCpuPages {
    /// Base pages on all lists.
    count: u64,
    /// Pages freed recently without allocation in between: grows drains.
    free_count: u64,
    /// Consecutive refills without frees: grows order-0 refills.
    alloc_factor: u32,
    /// Current pcp->high, between the zone's high_min and high_max (0: not yet set).
    high: u32,
    lists: [VecDeque<PcpEntry>; NR_PCP_LISTS],
}

/// Flags for __free_one_page.
#[derive(Clone, Copy, Debug, Default)]
struct Fpi {
    to_tail: bool,
    skip_report_notify: bool,
}

/// Placement policy and global (not per-zone) state of __free_one_page.
#[derive(Clone, Debug)]
struct Placement {
    merge_likely: bool,
    shuffle: Option<ShuffleState>,
    report_order: Option<u32>,
    report_notify: bool,
    mutant: Option<AllocMutant>,
    /// compaction_capture: a direct compactor's capture_control (zone
    /// start pfn, order); a free that reaches that order in that zone is
    /// handed to it instead of the free lists.
    capture: Option<(Pfn, u32)>,
    /// The captured block: (pfn, order, LUF generation).
    captured: Option<(Pfn, u32, u16)>,
}

struct Zone {
    nid: u32,
    start_pfn: Pfn,
    /// Exclusive.
    end_pfn: u64,
    managed: u64,
    nr_local_cpus: u32,
    free_area: [FreeArea; NR_PAGE_ORDERS],
    blocks: free_blocks::FreeBlocks,
    /// Migratetype per pageblock, indexed from `pb_base`.
    pageblock_mt: Vec<u8>,
    pb_base: u64,
    /// Base pages on the buddy lists (the kernel's zone NR_FREE_PAGES,
    /// which is what watermarks are checked against).
    free_pages: u64,
    /// Base pages on every CPU's pcp lists for this zone.
    pcp_pages: u64,
    /// Order of every block on any CPU's pcp list, by first PFN, so that
    /// "is this frame free?" does not have to scan every CPU's lists.
    pcp_index: FxHashMap<Pfn, u8>,
    /// Maintain `pcp_index` (for `is_free` and the audit); off when no checker runs, for speed.
    track_pcp: bool,
    /// Taken off the lists by isolate_free_block and not yet put back.
    isolated_pages: u64,
    /// Handed out by alloc_pages and not yet freed.
    allocated_pages: i64,
    reported_pages: u64,
    wmark: [u64; 3],
    batch: u32,
    /// pcp high_min: the static size (zone_highsize from the low watermark).
    high: u32,
    /// pcp high_max: the most a pcp may grow to (managed / 8 per CPU).
    high_max: u32,
    /// ZONE_BELOW_HIGH: free pages fell under the high watermark.
    below_high: bool,
    lock: SpinLock,
    /// Free-list insertions + removals, the unit of zone->lock hold time.
    ops: u64,
    mutant: Option<AllocMutant>,
    /// Only with `AllocMutant::KeepReportedOnAlloc`: head pages that left
    /// the free lists by allocation with PG_reported still set.
    stale_reported: rustc_hash::FxHashSet<Pfn>,
}

impl Zone {
    #[inline]
    fn contains(&self, pfn: Pfn) -> bool {
        pfn >= self.start_pfn && (pfn as u64) < self.end_pfn
    }

    #[inline]
    fn pb_index(&self, pfn: Pfn) -> usize {
        ((pfn as u64 >> PAGEBLOCK_ORDER) - self.pb_base) as usize
    }

    #[inline]
    fn pageblock_mt(&self, pfn: Pfn) -> MigrateType {
        MigrateType::from_u8(self.pageblock_mt[self.pb_index(pfn)])
    }

    /// Set the migratetype of every pageblock the block overlaps.
    fn change_pageblock_range(&mut self, pfn: Pfn, order: u32, mt: MigrateType) {
        let first = self.pb_index(pfn);
        let n = if order > PAGEBLOCK_ORDER { 1usize << (order - PAGEBLOCK_ORDER) } else { 1 };
        for b in &mut self.pageblock_mt[first..first + n] {
            *b = mt as u8;
        }
    }

    fn add_to_free_list(&mut self, pfn: Pfn, order: u32, mt: MigrateType, tail: bool, ugen: u16) {
        let link = pfn + 1;
        let mti = mt as usize;
        let area = &mut self.free_area[order as usize];
        let mut blk = FreeBlock { prev: 0, next: 0, order: order as u8, mt: mt as u8, reported: false, ugen };
        if tail {
            let t = area.tail[mti];
            blk.prev = t;
            if t != 0 {
                self.blocks.get_mut(&(t - 1)).expect("free list tail").next = link;
            } else {
                area.head[mti] = link;
            }
            area.tail[mti] = link;
        } else {
            let h = area.head[mti];
            blk.next = h;
            if h != 0 {
                self.blocks.get_mut(&(h - 1)).expect("free list head").prev = link;
            } else {
                area.tail[mti] = link;
            }
            area.head[mti] = link;
        }
        if self.mutant == Some(AllocMutant::KeepReportedOnAlloc) && self.stale_reported.remove(&pfn) {
            // The flag nobody cleared is still on the page.
            blk.reported = true;
            self.reported_pages += 1 << order;
        }
        let old = self.blocks.insert(pfn, blk);
        debug_assert!(old.is_none(), "pfn {pfn:#x} already free");
        area.nr_free += 1;
        self.free_pages += 1 << order;
        self.ops += 1;
    }

    /// Unlink a free block (del_page_from_free_list). PG_reported goes with
    /// it: the returned copy still shows what the flag was.
    fn del_from_free_list(&mut self, pfn: Pfn) -> FreeBlock {
        let blk = self.blocks.remove(&pfn).expect("not a free block");
        let mti = blk.mt as usize;
        let area = &mut self.free_area[blk.order as usize];
        if blk.prev != 0 {
            self.blocks.get_mut(&(blk.prev - 1)).expect("prev").next = blk.next;
        } else {
            area.head[mti] = blk.next;
        }
        if blk.next != 0 {
            self.blocks.get_mut(&(blk.next - 1)).expect("next").prev = blk.prev;
        } else {
            area.tail[mti] = blk.prev;
        }
        if self.mutant != Some(AllocMutant::SkipNrFreeDec) {
            area.nr_free -= 1;
        }
        self.free_pages -= 1 << blk.order;
        if blk.reported {
            self.reported_pages -= 1 << blk.order;
        }
        self.ops += 1;
        blk
    }

    /// Unlink a free block that is being allocated (the del_page_from_free_list
    /// of __rmqueue_smallest and the fallbacks), which clears PG_reported.
    fn take_for_alloc(&mut self, pfn: Pfn) -> FreeBlock {
        let b = self.del_from_free_list(pfn);
        if b.reported && self.mutant == Some(AllocMutant::KeepReportedOnAlloc) {
            self.stale_reported.insert(pfn);
        }
        b
    }

    /// Move a free block to the tail of another migratetype's list,
    /// keeping its flags (move_to_free_list).
    fn move_to_free_list(&mut self, pfn: Pfn, mt: MigrateType) {
        let blk = self.del_from_free_list(pfn);
        self.add_to_free_list(pfn, blk.order as u32, mt, true, blk.ugen);
        if blk.reported {
            self.blocks.get_mut(&pfn).unwrap().reported = true;
            self.reported_pages += 1 << blk.order;
        }
    }

    /// Move every free block inside the pageblock holding `pfn` to `mt` and
    /// retype the pageblock. Returns the free pages found, or None if the
    /// pageblock straddles the zone boundary (cannot be claimed whole).
    fn move_freepages_block(&mut self, pfn: Pfn, mt: MigrateType) -> Option<u64> {
        let start = (pfn as u64) & !((1u64 << PAGEBLOCK_ORDER) - 1);
        let end = start + (1 << PAGEBLOCK_ORDER);
        if start < self.start_pfn as u64 || end > self.end_pfn {
            return None;
        }
        let mut moved = 0;
        let mut p = start;
        while p < end {
            match self.blocks.get(&(p as Pfn)) {
                Some(b) => {
                    let o = b.order as u32;
                    if b.mt != mt as u8 {
                        self.move_to_free_list(p as Pfn, mt);
                    }
                    moved += 1u64 << o;
                    p += 1 << o;
                }
                None => p += 1,
            }
        }
        self.change_pageblock_range(start as Pfn, 0, mt);
        Some(moved)
    }

    /// Free pages in the pageblock holding `pfn`, or None if it straddles
    /// the zone boundary.
    fn pageblock_free_pages(&self, pfn: Pfn) -> Option<u64> {
        let start = (pfn as u64) & !((1u64 << PAGEBLOCK_ORDER) - 1);
        let end = start + (1 << PAGEBLOCK_ORDER);
        if start < self.start_pfn as u64 || end > self.end_pfn {
            return None;
        }
        let (mut free, mut p) = (0, start);
        while p < end {
            match self.blocks.get(&(p as Pfn)) {
                Some(b) => {
                    free += 1u64 << b.order;
                    p += 1 << b.order;
                }
                None => p += 1,
            }
        }
        Some(free)
    }

    /// Whether `pfn` is inside a block on a buddy or pcp list.
    fn is_free(&self, pfn: Pfn) -> bool {
        (0..=MAX_PAGE_ORDER).any(|o| self.free_buddy(pfn & !((1 << o) - 1), o).is_some())
            || [0, 1, 2, 3, PMD_ORDER].iter().any(|&o| self.pcp_index.get(&(pfn & !((1 << o) - 1))) == Some(&(o as u8)))
    }

    /// The buddy of `pfn` at `order` if it is a free block of exactly that
    /// order (page_is_buddy; the map is per zone, so "same zone" is implied).
    #[inline]
    fn free_buddy(&self, buddy_pfn: Pfn, order: u32) -> Option<&FreeBlock> {
        self.blocks.get(&buddy_pfn).filter(|b| b.order as u32 == order)
    }

    /// The block could not merge because its buddy at `order` is in use,
    /// but the other half of the next-larger block is entirely free: if the
    /// buddy comes back soon this cascades two orders up, so keep the block
    /// away from the allocating end of the list.
    fn buddy_merge_likely(&self, pfn: Pfn, buddy_pfn: Pfn, order: u32) -> bool {
        if order >= MAX_PAGE_ORDER - 1 {
            return false;
        }
        let parent = buddy_pfn & pfn;
        let parent_buddy = parent ^ (1 << (order + 1));
        self.free_buddy(parent_buddy, order + 1).is_some()
    }

    /// __free_one_page: merge with free buddies, then insert. Returns the
    /// final block.
    fn free_one_page(&mut self, pl: &mut Placement, mut pfn: Pfn, mut order: u32, mt: MigrateType, fpi: Fpi, mut ugen: u16) -> (Pfn, u32) {
        debug_assert!(pfn & ((1 << order) - 1) == 0, "unaligned free {pfn:#x} order {order}");
        debug_assert!(self.contains(pfn) && (pfn as u64 + (1 << order)) <= self.end_pfn);
        let mut buddy_pfn = pfn ^ (1 << order);
        loop {
            // compaction_capture, checked at every order as the kernel's
            // loop does: the block goes to the compacting task, with the
            // latest generation of everything merged into it so far.
            if let Some((zstart, corder)) = pl.capture {
                if zstart == self.start_pfn && order >= corder && mt != MigrateType::Isolate && pl.captured.is_none() {
                    pl.captured = Some((pfn, order, ugen));
                    pl.capture = None;
                    self.allocated_pages += 1 << order;
                    return (pfn, order);
                }
            }
            if order >= MAX_PAGE_ORDER || pl.mutant == Some(AllocMutant::NoMerge) {
                break;
            }
            buddy_pfn = pfn ^ (1 << order);
            let Some(b) = self.free_buddy(buddy_pfn, order) else { break };
            let buddy_mt = MigrateType::from_u8(b.mt);
            // Above pageblock_order two blocks may belong to pageblocks of
            // different types; only normal types may be joined.
            if order >= PAGEBLOCK_ORDER && buddy_mt != mt && !(mt.is_mergeable() && buddy_mt.is_mergeable()) {
                break;
            }
            let b = self.del_from_free_list(buddy_pfn);
            // The merged block must not be reused before the later of the
            // two deferred flushes has happened.
            ugen = if pl.mutant == Some(AllocMutant::LufMergeKeepsOlder) { older_ugen(ugen, b.ugen) } else { ugen_latest(ugen, b.ugen) };
            if buddy_mt != mt {
                // Match the buddy's pageblocks so a later expand() puts the
                // pieces on the right lists.
                self.change_pageblock_range(buddy_pfn, order, mt);
            }
            pfn &= buddy_pfn;
            order += 1;
        }
        let to_tail = if fpi.to_tail {
            true
        } else if let (Some(sh), true) = (pl.shuffle.as_mut(), ShuffleState::is_shuffle_order(order)) {
            sh.pick_tail()
        } else if pl.merge_likely {
            self.buddy_merge_likely(pfn, buddy_pfn, order)
        } else {
            false
        };
        self.add_to_free_list(pfn, order, mt, to_tail, ugen);
        if !fpi.skip_report_notify && pl.report_order.is_some_and(|ro| order >= ro) {
            pl.report_notify = true;
        }
        (pfn, order)
    }

    /// Split a block of order `high` down to `low`, returning the upper
    /// halves to the free lists (at the head, as 6.12 does). They inherit
    /// the parent's generation, since their TLB entries may be just as
    /// stale, and lose PG_reported.
    #[inline]
    fn expand(&mut self, pfn: Pfn, low: u32, mut high: u32, mt: MigrateType, ugen: u16) {
        let ugen = if self.mutant == Some(AllocMutant::LufD2SplitDrops) { 0 } else { ugen };
        while high > low {
            high -= 1;
            self.add_to_free_list(pfn + (1 << high), high, mt, false, ugen);
        }
    }

    fn rmqueue_smallest(&mut self, order: u32, mt: MigrateType) -> Option<(Pfn, u16)> {
        for cur in order..=MAX_PAGE_ORDER {
            let h = self.free_area[cur as usize].head[mt as usize];
            if h == 0 {
                continue;
            }
            let pfn = h - 1;
            let b = self.take_for_alloc(pfn);
            self.expand(pfn, order, cur, mt, b.ugen);
            return Some((pfn, b.ugen));
        }
        None
    }

    /// Up to `n` order-0 pages of type `mt` appended to the pcp list `list`
    /// (in `pcp_index` too when tracked), as `n` calls of
    /// `rmqueue_smallest(0, mt)` would take them, but a free block at a
    /// time: the pcp refill's pages come from the buddy as runs. Stops
    /// early only when `mt` has no free block left (the caller falls back).
    /// Returns the pages taken and the latest generation among them.
    ///
    /// Why it is the same: with k the smallest order with a free block of
    /// `mt`, the lists of `mt` below k are empty, so the block B at the
    /// head of list k is split and its pieces are taken in ascending PFN
    /// order before anything else; take i (i > 0) takes the piece of
    /// order ctz(i) at B + i, and only one piece of each order is ever on
    /// its list. Taking all of B leaves the lists as if B alone was
    /// deleted; taking m < 2^k pages leaves, for each order j < k with bit
    /// j of m - 1 clear, the piece of order j after the last page taken,
    /// alone on its list. The `ops` counter (zone->lock hold time) gets
    /// what the one-by-one takes would have added: m deletions and
    /// k + (m - 1) - popcount(m - 1) insertions of pieces. Callers check that no
    /// mutant is set (they change deletions, insertions and generations).
    fn rmqueue_bulk_order0(&mut self, n: u64, mt: MigrateType, list: &mut VecDeque<PcpEntry>) -> (u64, u16) {
        debug_assert!(self.mutant.is_none());
        let mti = mt as usize;
        let mut got = 0;
        let mut ugen = 0;
        while got < n {
            let Some(k) = (0..NR_PAGE_ORDERS).find(|&o| self.free_area[o].head[mti] != 0) else { break };
            let pfn = self.free_area[k].head[mti] - 1;
            let ops0 = self.ops;
            let b = self.del_from_free_list(pfn);
            let m = (n - got).min(1 << k);
            for i in 0..m as Pfn {
                list.push_back(PcpEntry { pfn: pfn + i, ugen: b.ugen });
            }
            if self.track_pcp {
                for i in 0..m as Pfn {
                    self.pcp_index.insert(pfn + i, 0);
                }
            }
            if m < 1 << k {
                let last = (m - 1) as Pfn;
                for j in 0..k as u32 {
                    if last & (1 << j) == 0 {
                        self.add_to_free_list(pfn + ((last >> (j + 1)) << (j + 1)) + (1 << j), j, mt, false, b.ugen);
                    }
                }
            }
            self.ops = ops0 + m + k as u64 + (m - 1) - (m - 1).count_ones() as u64;
            ugen = ugen_latest(ugen, b.ugen);
            got += m;
        }
        (got, ugen)
    }

    fn find_suitable_fallback(&self, order: u32, start_mt: MigrateType) -> Option<MigrateType> {
        let area = &self.free_area[order as usize];
        if area.nr_free == 0 {
            return None;
        }
        FALLBACKS[start_mt as usize].iter().copied().find(|f| area.head[*f as usize] != 0)
    }

    fn can_steal_fallback(order: u32, start_mt: MigrateType) -> bool {
        order >= PAGEBLOCK_ORDER / 2 || start_mt != MigrateType::Movable
    }

    /// Take the largest block of a fallback type and make its pageblock(s)
    /// ours, so the next allocations of this type find memory of their own.
    fn rmqueue_claim(&mut self, order: u32, start_mt: MigrateType) -> Option<(Pfn, u16)> {
        for cur in (order..=MAX_PAGE_ORDER).rev() {
            let Some(fmt) = self.find_suitable_fallback(cur, start_mt) else { continue };
            if !Self::can_steal_fallback(cur, start_mt) {
                break;
            }
            let pfn = self.free_area[cur as usize].head[fmt as usize] - 1;
            if cur >= PAGEBLOCK_ORDER {
                let b = self.take_for_alloc(pfn);
                self.change_pageblock_range(pfn, cur, start_mt);
                self.expand(pfn, order, cur, start_mt, b.ugen);
                return Some((pfn, b.ugen));
            }
            if self.pageblock_free_pages(pfn).is_some_and(|f| f >= 1 << (PAGEBLOCK_ORDER - 1)) {
                self.move_freepages_block(pfn, start_mt);
                return self.rmqueue_smallest(order, start_mt);
            }
        }
        None
    }

    /// Take one block of a fallback type without touching pageblocks.
    fn rmqueue_steal(&mut self, order: u32, start_mt: MigrateType) -> Option<(Pfn, u16)> {
        for cur in order..=MAX_PAGE_ORDER {
            let Some(fmt) = self.find_suitable_fallback(cur, start_mt) else { continue };
            let pfn = self.free_area[cur as usize].head[fmt as usize] - 1;
            let b = self.take_for_alloc(pfn);
            self.expand(pfn, order, cur, fmt, b.ugen);
            return Some((pfn, b.ugen));
        }
        None
    }

    fn rmqueue(&mut self, order: u32, mt: MigrateType) -> Option<(Pfn, u16)> {
        if let Some(r) = self.rmqueue_smallest(order, mt) {
            return Some(r);
        }
        if !mt.is_mergeable() {
            return None;
        }
        self.rmqueue_claim(order, mt).or_else(|| self.rmqueue_steal(order, mt))
    }

    /// __zone_watermark_ok without reserves: enough free base pages above
    /// `mark`, and for order > 0 at least one block big enough on a normal list.
    fn watermark_ok(&self, order: u32, mark: u64) -> bool {
        let free = self.free_pages as i64 - ((1i64 << order) - 1);
        if free <= mark as i64 {
            return false;
        }
        if order == 0 {
            return true;
        }
        self.free_area[order as usize..].iter().any(|a| a.nr_free != 0 && a.head[..MIGRATE_PCPTYPES].iter().any(|h| *h != 0))
    }

    /// Drain up to `count` pages from one CPU's lists to the buddy, round
    /// robin over the lists starting at `pindex`, oldest (tail) first.
    fn free_pcppages_bulk(&mut self, pl: &mut Placement, pcp: &mut PerCpuPages, count: u64, pindex: usize) {
        let mut count = count.min(pcp.count) as i64;
        let mut pi = pindex + NR_PCP_LISTS - 1;
        while count > 0 {
            loop {
                pi = (pi + 1) % NR_PCP_LISTS;
                if !pcp.lists[pi].is_empty() {
                    break;
                }
            }
            let order = pindex_to_order(pi);
            let nr = 1u64 << order;
            while let Some(e) = pcp.lists[pi].pop_back() {
                count -= nr as i64;
                pcp.count -= nr;
                self.pcp_pages -= nr;
                if self.track_pcp {
                    self.pcp_index.remove(&e.pfn);
                }
                // The pageblock may have changed type while the page sat on
                // the pcp list: the buddy list follows the pageblock.
                let mt = self.pageblock_mt(e.pfn);
                let ugen = if pl.mutant == Some(AllocMutant::LufD1OrderAsUgen) { order as u16 } else { e.ugen };
                self.free_one_page(pl, e.pfn, order, mt, Fpi::default(), ugen);
                if count <= 0 {
                    break;
                }
            }
        }
    }
}

/// Free a block of zone `z`, with `pcp` the zone's lists of `cpu` (the
/// caller counts it in vmstat): to the head of a pcp list, draining to the
/// buddy past `high`, or straight to the buddy.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn free_to_zone(
    z: &mut Zone,
    pcp: &mut PerCpuPages,
    pl: &mut Placement,
    p: &AllocParams,
    now: Ns,
    cpu: u32,
    pfn: Pfn,
    order: u32,
    ugen: u16,
) -> Ns {
    debug_assert!((pfn as u64 + (1 << order)) <= z.end_pfn);
    let mt = z.pageblock_mt(pfn);
    if pcp_allowed_order(order) && mt != MigrateType::Isolate {
        let pindex = free_to_pcp_list(z, pcp, &[pfn], order, mt, ugen);
        return pcp_free_high(z, pcp, pl, p, now + p.free_pcp_ns, cpu, pindex);
    }
    debug_assert!(!z.is_free(pfn), "double free of pfn {pfn:#x}");
    z.allocated_pages -= 1 << order;
    let ops0 = z.ops;
    z.free_one_page(pl, pfn, order, mt, Fpi::default(), ugen);
    z.lock.lock_for(now, cpu, (z.ops - ops0) * p.buddy_op_ns, &p.line)
}

/// The frees of the blocks `pfns` of `order` (of pageblock type `mt`, not
/// isolated), one after another, to the head of their pcp list, before
/// the test against high (the caller knows that none but the last can
/// reach it); returns the list's index. The counts move by the run's
/// total, as they would page by page.
#[inline(always)]
fn free_to_pcp_list(z: &mut Zone, pcp: &mut PerCpuPages, pfns: &[Pfn], order: u32, mt: MigrateType, ugen: u16) -> usize {
    let n = pfns.len() as u64;
    let pages = n << order;
    z.allocated_pages -= pages as i64;
    // Highatomic pages sit on the movable pcp lists, as in the kernel.
    let pmt = if mt.is_mergeable() { mt } else { MigrateType::Movable };
    // Halved once a free.
    pcp.alloc_factor = pcp.alloc_factor.checked_shr(n as u32).unwrap_or(0);
    let pindex = order_to_pindex(pmt as usize, order);
    let list = &mut pcp.lists[pindex];
    for &pfn in pfns {
        debug_assert!(!z.is_free(pfn), "double free of pfn {pfn:#x}");
        list.push_front(PcpEntry { pfn, ugen });
        if z.track_pcp {
            z.pcp_index.insert(pfn, order as u8);
        }
    }
    pcp.count += pages;
    z.pcp_pages += pages;
    // Grows by each free that finds it under its cap.
    let cap = (z.batch as u64) << PCP_BATCH_SCALE_MAX;
    if pcp.free_count < cap {
        let grows = n.min((cap - pcp.free_count).div_ceil(1 << order));
        pcp.free_count += grows << order;
    }
    pindex
}

/// The end of a free to pcp list `pindex` at `t`: past high, drain to the
/// buddy under zone->lock. Returns when done.
#[inline(always)]
fn pcp_free_high(z: &mut Zone, pcp: &mut PerCpuPages, pl: &mut Placement, p: &AllocParams, t: Ns, cpu: u32, pindex: usize) -> Ns {
    let high = nr_pcp_high(pcp, z.batch, z.high, z.high_max, z.below_high) as u64;
    if pcp.count >= high {
        let n = nr_pcp_free(pcp, z.batch as u64, high);
        let ops0 = z.ops;
        z.free_pcppages_bulk(pl, pcp, n, pindex);
        if z.below_high && z.watermark_ok(0, z.wmark[Wmark::High as usize]) {
            z.below_high = false;
        }
        return z.lock.lock_for(t, cpu, (z.ops - ops0) * p.buddy_op_ns, &p.line);
    }
    t
}

/// `free_to_zone` of each order-0 page of `pfns` (all in `z`) in turn,
/// each from when the previous one is done. While the zone is not below
/// its high watermark and the pcp count stays under high, `nr_pcp_high`
/// only re-clamps pcp->high to what it already is: high is read once and
/// compared per page. The pageblock type is read once per pageblock, until
/// a drain (which may retype pageblocks when it merges).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn free_order0_run(
    z: &mut Zone,
    pcp: &mut PerCpuPages,
    pl: &mut Placement,
    p: &AllocParams,
    now: Ns,
    cpu: u32,
    pfns: &[Pfn],
    ugen: u16,
) -> Ns {
    let mut t = now;
    let (mut pb, mut mt) = (usize::MAX, MigrateType::Movable);
    // pcp high while the shortcut holds; 0: take the general path.
    let mut high = 0;
    let mut i = 0;
    while i < pfns.len() {
        let pfn = pfns[i];
        let pbi = z.pb_index(pfn);
        if pbi != pb {
            pb = pbi;
            mt = z.pageblock_mt(pfn);
        }
        if high == 0 || mt == MigrateType::Isolate {
            t = free_to_zone(z, pcp, pl, p, t, cpu, pfn, 0, ugen);
            pb = usize::MAX;
            high = if z.below_high { 0 } else { pcp_high(pcp, z.high, z.high_max) as u64 };
            i += 1;
            continue;
        }
        // free_to_zone's pcp path, with high known, for the pages of this
        // pageblock that follow, as many as keep the count under high
        // and the one that reaches it (at least this page).
        let room = high.saturating_sub(pcp.count).clamp(1, (pfns.len() - i) as u64) as usize;
        let mut n = 1;
        while n < room && z.pb_index(pfns[i + n]) == pb {
            n += 1;
        }
        let pindex = free_to_pcp_list(z, pcp, &pfns[i..i + n], 0, mt, ugen);
        t += p.free_pcp_ns * n as Ns;
        i += n;
        if pcp.count >= high {
            t = pcp_free_high(z, pcp, pl, p, t, cpu, pindex);
            pb = usize::MAX;
            high = if z.below_high { 0 } else { pcp_high(pcp, z.high, z.high_max) as u64 };
        }
    }
    t
}

/// The smallest percpu_pagelist_high_fraction; without one set, pcp high
/// may grow to what this fraction gives (high_max).
const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u64 = 8;

/// The zoned buddy allocator with per-CPU page lists.
pub struct PageAlloc {
    p: AllocParams,
    zones: Vec<Zone>,
    /// Zone index per node id.
    zone_of_nid: Vec<Option<usize>>,
    /// Zone indices to try, per node id.
    zonelists: Vec<Vec<usize>>,
    /// `cpu * zones.len() + zone`.
    pcp: Vec<PerCpuPages>,
    pl: Placement,
}

impl PageAlloc {
    pub fn params(&self) -> &AllocParams {
        &self.p
    }

    /// Install (or clear) a deliberately broken variant.
    pub fn set_mutant(&mut self, m: Option<AllocMutant>) {
        self.pl.mutant = m;
        for z in &mut self.zones {
            z.mutant = m;
        }
    }

    #[inline]
    fn zone_idx(&self, nid: u32) -> usize {
        self.zone_of_nid.get(nid as usize).copied().flatten().unwrap_or_else(|| panic!("no memory on node {nid}"))
    }

    #[inline]
    fn zone_idx_of_pfn(&self, pfn: Pfn) -> Option<usize> {
        self.zones.iter().position(|z| z.contains(pfn))
    }

    /// Node ids that have memory, ascending by PFN.
    pub fn nids(&self) -> Vec<u32> {
        self.zones.iter().map(|z| z.nid).collect()
    }

    /// The order in which allocations for `nid` try the nodes.
    pub fn zonelist(&self, nid: u32) -> Vec<u32> {
        match self.zonelists.get(nid as usize) {
            Some(l) => l.iter().map(|&i| self.zones[i].nid).collect(),
            None => self.zonelist_order(nid).iter().map(|&i| self.zones[i].nid).collect(),
        }
    }

    /// Node whose zone holds `pfn`.
    pub fn pfn_to_nid(&self, pfn: Pfn) -> Option<u32> {
        self.zone_idx_of_pfn(pfn).map(|i| self.zones[i].nid)
    }

    /// Allocate 2^order contiguous pages, naturally aligned, trying zones in
    /// zonelist order starting at `nid` (then the others by increasing node
    /// distance, a node with CPUs one further: build_zonelists),
    /// honouring the `low` watermark (fast path) then `min`. Orders 0..=3 and
    /// PMD_ORDER go through the CPU's pcp list (refill with `batch` blocks
    /// under zone->lock); others take zone->lock directly. Counts
    /// pgalloc_normal (base pages), updates nr_free_pages. None = below min
    /// everywhere (caller reclaims and retries).
    ///
    /// Watermarks are checked against buddy free pages only, as the kernel
    /// does: pages parked on pcp lists do not count, so a caller that gets
    /// None may `drain_all_pages` and retry, as direct reclaim does.
    ///
    /// Always inlined: a caller with a constant order and migratetype (the
    /// fault path's `alloc_folio`) folds the order and type tests of the
    /// fast path away; the rest (`alloc_pages_slow`) is out of line.
    #[inline(always)]
    pub fn alloc_pages(&mut self, now: Ns, cpu: u32, order: u32, nid: u32, mt: MigrateType, stat: &mut VmStat) -> Option<Alloc> {
        assert!(order <= MAX_PAGE_ORDER, "order {order} too large");
        if nid as usize >= self.zonelists.len() {
            self.build_zonelists(nid as usize + 1);
        }
        // Fast path: the first zone of the zonelist, above its low
        // watermark, serves almost every allocation. The same steps as the
        // first round of the loop below, which then skips that round.
        if let Some(&zi) = self.zonelists[nid as usize].first() {
            if let Some(a) = self.alloc_from_zone(now, cpu, zi, order, mt, Wmark::Low, stat) {
                return Some(a);
            }
        }
        self.alloc_pages_slow(now, cpu, order, nid, mt, stat)
    }

    /// One round of `alloc_pages` on zone `zi` against watermark `wm`.
    #[inline(always)]
    fn alloc_from_zone(
        &mut self,
        now: Ns,
        cpu: u32,
        zi: usize,
        order: u32,
        mt: MigrateType,
        wm: Wmark,
        stat: &mut VmStat,
    ) -> Option<Alloc> {
        let z = &mut self.zones[zi];
        // Detect ZONE_BELOW_HIGH here rather than in the hotter free path.
        if !z.below_high && !z.watermark_ok(order, z.wmark[Wmark::High as usize]) {
            z.below_high = true;
        }
        if !z.watermark_ok(order, z.wmark[wm as usize]) {
            return None;
        }
        let (pfn, ugen, done) = self.rmqueue(now, cpu, zi, order, mt)?;
        let z = &mut self.zones[zi];
        z.allocated_pages += 1 << order;
        stat.add(Stat::PgallocNormal, 1 << order);
        stat.add(Stat::NrFreePages, -(1 << order));
        Some(Alloc { pfn, nid: z.nid, done, ugen, slow: wm == Wmark::Min })
    }

    /// `alloc_pages` after the first zone failed its low watermark or had
    /// nothing: the other zones (still the fast path), then every zone
    /// down to min (the slow path).
    #[inline(never)]
    fn alloc_pages_slow(&mut self, now: Ns, cpu: u32, order: u32, nid: u32, mt: MigrateType, stat: &mut VmStat) -> Option<Alloc> {
        for wm in [Wmark::Low, Wmark::Min] {
            for k in 0..self.zonelists[nid as usize].len() {
                if wm == Wmark::Low && k == 0 {
                    continue; // tried by the fast path
                }
                let zi = self.zonelists[nid as usize][k];
                if let Some(a) = self.alloc_from_zone(now, cpu, zi, order, mt, wm, stat) {
                    return Some(a);
                }
            }
        }
        None
    }

    /// Refill an empty pcp list with a batch of blocks taken under
    /// zone->lock (rmqueue_bulk). Returns when the lock was released and
    /// the latest generation among the blocks. Out of line: once per batch.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn rmqueue_pcp_refill(
        z: &mut Zone,
        pcp: &mut PerCpuPages,
        now: Ns,
        cpu: u32,
        order: u32,
        mt: MigrateType,
        pindex: usize,
        buddy_op_ns: Ns,
        lc: &LineCost,
    ) -> (Ns, u16) {
        let n = nr_pcp_alloc(pcp, z.batch, z.high, z.high_max, z.below_high, order);
        let ops0 = z.ops;
        let mut got = 0;
        let d3 = z.mutant == Some(AllocMutant::LufD3RefillDrops);
        let mut refill_ugen = 0;
        if order == 0 && z.mutant.is_none() {
            (got, refill_ugen) = z.rmqueue_bulk_order0(n, mt, &mut pcp.lists[pindex]);
        }
        let bulk = got;
        for _ in bulk..n {
            let Some((pfn, ugen)) = z.rmqueue(order, mt) else { break };
            // D3: the generation moves to the refiller alone.
            refill_ugen = ugen_latest(refill_ugen, ugen);
            let ugen = if d3 { 0 } else { ugen };
            // Blocks come out in PFN order; appending keeps the list so.
            pcp.lists[pindex].push_back(PcpEntry { pfn, ugen });
            if z.track_pcp {
                z.pcp_index.insert(pfn, order as u8);
            }
            got += 1;
        }
        pcp.count += got << order;
        z.pcp_pages += got << order;
        (z.lock.lock_for(now, cpu, (z.ops - ops0) * buddy_op_ns, lc), refill_ugen)
    }

    /// Always inlined: on the allocation fast path the pcp pop is a few
    /// instructions, less than a call's.
    #[inline(always)]
    fn rmqueue(&mut self, now: Ns, cpu: u32, zi: usize, order: u32, mt: MigrateType) -> Option<(Pfn, u16, Ns)> {
        let nz = self.zones.len();
        let z = &mut self.zones[zi];
        let lc = &self.p.line;
        if pcp_allowed_order(order) && mt.is_mergeable() {
            let pcp = &mut self.pcp[cpu as usize * nz + zi];
            pcp.free_count >>= 1;
            let pindex = order_to_pindex(mt as usize, order);
            let mut t = now;
            let mut refilled = 0;
            if pcp.lists[pindex].is_empty() {
                (t, refilled) = Self::rmqueue_pcp_refill(z, pcp, now, cpu, order, mt, pindex, self.p.buddy_op_ns, lc);
            }
            if let Some(e) = pcp.lists[pindex].pop_front() {
                pcp.count -= 1 << order;
                z.pcp_pages -= 1 << order;
                if z.track_pcp {
                    z.pcp_index.remove(&e.pfn);
                }
                let ugen = if z.mutant == Some(AllocMutant::LufD3RefillDrops) { ugen_latest(e.ugen, refilled) } else { e.ugen };
                return Some((e.pfn, ugen, t + self.p.alloc_pcp_ns));
            }
            // The refill found nothing: the buddy path below cannot do better.
            return None;
        }
        let ops0 = z.ops;
        let r = z.rmqueue(order, mt);
        let t = z.lock.lock_for(now, cpu, (z.ops - ops0) * self.p.buddy_op_ns, lc);
        r.map(|(pfn, ugen)| (pfn, ugen, t))
    }

    /// Free 2^order pages at `pfn` (aligned). Through pcp where the order is
    /// pcp-cached (drain from the list tails to buddy once count >= high:
    /// `batch` pages, more after a run of frees, as nr_pcp_free), else
    /// straight to buddy with merging. Counts pgfree. Returns done time.
    pub fn free_pages(&mut self, now: Ns, cpu: u32, pfn: Pfn, order: u32, stat: &mut VmStat) -> Ns {
        self.free_pages_ugen(now, cpu, pfn, order, 0, stat)
    }

    /// `free_pages` for pages whose TLB flush was deferred (LUF): the block
    /// carries generation `ugen` through pcp and buddy until reallocated.
    ///
    /// pcp: the page goes to the head of its list; once the CPU holds `high`
    /// or more pages, `nr_pcp_free` pages (at least `batch`, more after a run
    /// of frees) go back to the buddy from the list tails.
    pub fn free_pages_ugen(&mut self, now: Ns, cpu: u32, pfn: Pfn, order: u32, ugen: u16, stat: &mut VmStat) -> Ns {
        let zi = self.free_zone_idx(pfn, order);
        stat.add(Stat::Pgfree, 1 << order);
        stat.add(Stat::NrFreePages, 1 << order);
        let nz = self.zones.len();
        free_to_zone(&mut self.zones[zi], &mut self.pcp[cpu as usize * nz + zi], &mut self.pl, &self.p, now, cpu, pfn, order, ugen)
    }

    /// The zone a block being freed belongs to (panics on a bad free).
    #[inline(always)]
    fn free_zone_idx(&self, pfn: Pfn, order: u32) -> usize {
        assert!(order <= MAX_PAGE_ORDER && pfn & ((1 << order) - 1) == 0, "bad free {pfn:#x} order {order}");
        self.zone_idx_of_pfn(pfn).unwrap_or_else(|| panic!("free of pfn {pfn:#x} outside every zone"))
    }

    /// `free_pages_ugen` of each order-0 page of `pfns` in turn, each
    /// starting when the previous one is done: release_pages' loop over a
    /// batch, with one call for the batch instead of one a page.
    pub fn free_pages_bulk_ugen(&mut self, now: Ns, cpu: u32, pfns: &[Pfn], ugen: u16, stat: &mut VmStat) -> Ns {
        // One page each: the counters move by the batch size (nothing
        // below reads them).
        stat.add(Stat::Pgfree, pfns.len() as i64);
        stat.add(Stat::NrFreePages, pfns.len() as i64);
        let mut t = now;
        let nz = self.zones.len();
        let mut rest = pfns;
        while let Some(&first) = rest.first() {
            // Zones do not overlap: while the pages stay in the zone of the
            // run's first page, it is the zone the search would find.
            let zi = self.free_zone_idx(first, 0);
            let z = &mut self.zones[zi];
            let pcp = &mut self.pcp[cpu as usize * nz + zi];
            let n = rest.iter().take_while(|&&pfn| z.contains(pfn)).count();
            t = free_order0_run(z, pcp, &mut self.pl, &self.p, t, cpu, &rest[..n], ugen);
            rest = &rest[n..];
        }
        t
    }

    /// Return every page on `cpu`'s pcp lists to the buddy (drain_pages).
    pub fn drain_pages(&mut self, now: Ns, cpu: u32) -> Ns {
        let nz = self.zones.len();
        let lc = self.p.line;
        let mut t = now;
        for zi in 0..nz {
            let pcp = &mut self.pcp[cpu as usize * nz + zi];
            if pcp.count == 0 {
                continue;
            }
            let z = &mut self.zones[zi];
            let ops0 = z.ops;
            let n = pcp.count;
            z.free_pcppages_bulk(&mut self.pl, pcp, n, 0);
            t = z.lock.lock_for(t, cpu, (z.ops - ops0) * self.p.buddy_op_ns, &lc);
        }
        t
    }

    /// Drain every CPU's lists. Each CPU drains its own (the kernel queues
    /// work on each), all starting at `now`; returns when the last is done.
    pub fn drain_all_pages(&mut self, now: Ns) -> Ns {
        let mut done = now;
        for cpu in 0..self.p.nr_cpus.max(1) {
            done = done.max(self.drain_pages(now, cpu));
        }
        done
    }

    /// Free base pages in buddy and pcp lists, all zones (= nr_free_pages).
    pub fn nr_free(&self) -> u64 {
        self.zones.iter().map(|z| z.free_pages + z.pcp_pages).sum()
    }

    /// Add the boot-time free memory to the nr_free_pages gauge. Call once
    /// on a fresh VmStat; afterwards the allocator keeps it exact.
    pub fn init_vmstat(&self, stat: &mut VmStat) {
        stat.add(Stat::NrFreePages, self.nr_free() as i64);
    }

    /// Buddy free pages of a node's zone (its NR_FREE_PAGES, what watermarks
    /// are checked against; pcp pages are not included).
    pub fn zone_free_pages(&self, nid: u32) -> u64 {
        self.zones[self.zone_idx(nid)].free_pages
    }

    /// Pages on all CPUs' pcp lists for a node's zone.
    pub fn zone_pcp_pages(&self, nid: u32) -> u64 {
        self.zones[self.zone_idx(nid)].pcp_pages
    }

    pub fn zone_managed_pages(&self, nid: u32) -> u64 {
        self.zones[self.zone_idx(nid)].managed
    }

    /// PG_reported base pages on a node's free lists.
    pub fn zone_reported_pages(&self, nid: u32) -> u64 {
        self.zones[self.zone_idx(nid)].reported_pages
    }

    /// Pages isolated by `isolate_free_block` and not yet put back.
    pub fn zone_isolated_pages(&self, nid: u32) -> u64 {
        self.zones[self.zone_idx(nid)].isolated_pages
    }

    /// (min, low, high) in pages.
    pub fn zone_watermarks(&self, nid: u32) -> (u64, u64, u64) {
        let w = self.zones[self.zone_idx(nid)].wmark;
        (w[0], w[1], w[2])
    }

    /// zone_watermark_ok against buddy free pages.
    pub fn zone_watermark_ok(&self, nid: u32, order: u32, mark: u64) -> bool {
        self.zones[self.zone_idx(nid)].watermark_ok(order, mark)
    }

    /// (batch, high) of the zone's pcp lists.
    pub fn zone_pcp_batch_high(&self, nid: u32) -> (u32, u32) {
        let z = &self.zones[self.zone_idx(nid)];
        (z.batch, z.high)
    }

    /// Base pages on one CPU's pcp lists for a node.
    pub fn pcp_count(&self, cpu: u32, nid: u32) -> u64 {
        self.pcp[cpu as usize * self.zones.len() + self.zone_idx(nid)].count
    }

    /// nr_free of free_area[order] (blocks, all migratetypes).
    pub fn zone_nr_free(&self, nid: u32, order: u32) -> u64 {
        self.zones[self.zone_idx(nid)].free_area[order as usize].nr_free
    }

    pub fn pageblock_migratetype(&self, pfn: Pfn) -> Option<MigrateType> {
        self.zone_idx_of_pfn(pfn).map(|i| self.zones[i].pageblock_mt(pfn))
    }

    pub fn zone_lock_stats(&self, nid: u32) -> ZoneLockStats {
        let l = &self.zones[self.zone_idx(nid)].lock;
        ZoneLockStats { acquisitions: l.acquisitions, contended: l.contended, wait_ns: l.wait_ns }
    }

    /// zone->lock, for mechanisms (page reporting) that work on the free
    /// lists under it: they take it with `lock_for`, charging their own
    /// hold time, around calls to the primitives below.
    pub fn zone_lock(&mut self, nid: u32) -> &mut SpinLock {
        let zi = self.zone_idx(nid);
        &mut self.zones[zi].lock
    }

    /// The free block starting at `pfn`, if there is one on a buddy list.
    pub fn free_block(&self, pfn: Pfn) -> Option<FreeBlock> {
        let zi = self.zone_idx_of_pfn(pfn)?;
        self.zones[zi].blocks.get(&pfn).copied()
    }

    /// Free-list insertions and removals done under a node's zone->lock
    /// so far (the unit of its hold time, `buddy_op_ns` each).
    pub fn zone_list_ops(&self, nid: u32) -> u64 {
        self.zones[self.zone_idx(nid)].ops
    }

    /// Buddy free blocks flagged PG_reported, (pfn, order), sorted.
    pub fn reported_blocks(&self) -> Vec<(Pfn, u32)> {
        let mut v: Vec<(Pfn, u32)> =
            self.zones.iter().flat_map(|z| z.blocks.iter().filter(|(_, b)| b.reported).map(|(p, b)| (p, b.order as u32))).collect();
        v.sort_unstable();
        v
    }

    /// Whether the allocated page at `pfn` still carries PG_reported (only
    /// possible with the `KeepReportedOnAlloc` mutant).
    pub fn allocated_page_reported(&self, pfn: Pfn) -> bool {
        self.zone_idx_of_pfn(pfn)
            .is_some_and(|zi| self.zones[zi].stale_reported.contains(&pfn) && !self.zones[zi].blocks.contains_key(&pfn))
    }

    /// First block of a free list.
    pub fn free_list_head(&self, nid: u32, order: u32, mt: MigrateType) -> Option<Pfn> {
        let h = self.zones[self.zone_idx(nid)].free_area[order as usize].head[mt as usize];
        h.checked_sub(1)
    }

    /// Walk a free list head to tail.
    pub fn free_list(&self, nid: u32, order: u32, mt: MigrateType) -> impl Iterator<Item = (Pfn, FreeBlock)> + '_ {
        let z = &self.zones[self.zone_idx(nid)];
        let mut cur = z.free_area[order as usize].head[mt as usize];
        std::iter::from_fn(move || {
            let pfn = cur.checked_sub(1)?;
            let b = *z.blocks.get(&pfn)?;
            cur = b.next;
            Some((pfn, b))
        })
    }

    /// Make `pfn` the head of its list, moving the blocks in front of it to
    /// the tail in their order (list_rotate_to_front), so a walk can resume
    /// there next time.
    pub fn free_list_rotate_to_front(&mut self, pfn: Pfn) {
        let zi = self.zone_idx_of_pfn(pfn).expect("pfn outside every zone");
        let z = &mut self.zones[zi];
        let b = *z.blocks.get(&pfn).expect("not a free block");
        if b.prev == 0 {
            return;
        }
        let area = &mut z.free_area[b.order as usize];
        let mti = b.mt as usize;
        let (old_head, old_tail, new_tail) = (area.head[mti], area.tail[mti], b.prev);
        z.blocks.get_mut(&(old_tail - 1)).unwrap().next = old_head;
        z.blocks.get_mut(&(old_head - 1)).unwrap().prev = old_tail;
        z.blocks.get_mut(&(new_tail - 1)).unwrap().next = 0;
        z.blocks.get_mut(&pfn).unwrap().prev = 0;
        area.head[mti] = pfn + 1;
        area.tail[mti] = new_tail;
    }

    /// page_reporting_order: frees that end at this order or above raise
    /// the notification (None = reporting off).
    pub fn set_page_reporting_order(&mut self, order: Option<u32>) {
        self.pl.report_order = order;
    }

    /// Whether a free reached the reporting order since the last call
    /// (page_reporting_notify_free); clears it.
    pub fn take_page_reporting_notify(&mut self) -> bool {
        std::mem::take(&mut self.pl.report_notify)
    }

    /// Whether `pfn` lies in a free block on a buddy list or a pcp list
    /// (at most 16 hash probes).
    pub fn is_free(&self, pfn: Pfn) -> bool {
        let Some(zi) = self.zone_idx_of_pfn(pfn) else { return false };
        let z = &self.zones[zi];
        if z.track_pcp {
            return z.is_free(pfn);
        }
        // Without the pcp index, look through the lists (slow; checker off).
        let nz = self.zones.len();
        (0..=MAX_PAGE_ORDER).any(|o| z.free_buddy(pfn & !((1 << o) - 1), o).is_some())
            || self.pcp.iter().skip(zi).step_by(nz).any(|pcp| {
                pcp.lists.iter().enumerate().any(|(pi, l)| {
                    let o = pindex_to_order(pi);
                    l.iter().any(|e| e.pfn == pfn & !((1 << o) - 1))
                })
            })
    }

    /// Keep the index that makes `is_free` fast on pcp pages (the invariant
    /// checker needs it; plain runs turn it off to save two hash operations
    /// per pcp allocation and free).
    pub fn set_track_pcp(&mut self, on: bool) {
        for z in &mut self.zones {
            z.track_pcp = on;
            if !on {
                z.pcp_index.clear();
            }
        }
        if on {
            let nz = self.zones.len();
            for (i, pcp) in self.pcp.iter().enumerate() {
                let z = &mut self.zones[i % nz];
                for (pi, l) in pcp.lists.iter().enumerate() {
                    for e in l {
                        z.pcp_index.insert(e.pfn, pindex_to_order(pi) as u8);
                    }
                }
            }
        }
    }

    /// Test hook: a pcp list entry sitting on two lists at once.
    #[cfg(test)]
    fn corrupt_duplicate_pcp_entry(&mut self, cpu: u32, nid: u32) -> bool {
        let zi = self.zone_idx(nid);
        let nz = self.zones.len();
        let pcp = &mut self.pcp[cpu as usize * nz + zi];
        for pi in 0..NR_PCP_LISTS {
            if let Some(e) = pcp.lists[pi].front().copied() {
                pcp.lists[pi].push_back(e);
                pcp.count += 1 << pindex_to_order(pi);
                self.zones[zi].pcp_pages += 1 << pindex_to_order(pi);
                return true;
            }
        }
        false
    }
}

/// The current pcp->high clamped to [high_min, high_max].
fn pcp_high(pcp: &mut PerCpuPages, high_min: u32, high_max: u32) -> u32 {
    let h = if pcp.high == 0 { high_min } else { pcp.high };
    pcp.high = h.clamp(high_min, high_max.max(high_min));
    pcp.high
}

/// The high mark a free compares against (nr_pcp_high, free_high false):
/// while the zone is below its high watermark the pcp shrinks by a free
/// run; when full it grows enough to hold the pages about to be freed.
fn nr_pcp_high(pcp: &mut PerCpuPages, batch: u32, high_min: u32, high_max: u32, below_high: bool) -> u32 {
    let high = pcp_high(pcp, high_min, high_max);
    if high == 0 || high_min == high_max {
        return high;
    }
    if below_high {
        let free_count = pcp.free_count.max(batch as u64) as u32;
        pcp.high = high.saturating_sub(free_count).max(high_min);
        return (pcp.count as u32).max(high_min);
    }
    if pcp.count >= high as u64 {
        let need = pcp.free_count as u32 + batch;
        if pcp.high < need {
            pcp.high = need.clamp(high_min, high_max);
        }
    }
    high
}

/// Blocks to take from the buddy when a pcp list is empty (nr_pcp_alloc):
/// `batch` pages, doubled for every order-0 refill without a free in
/// between, capped so the list stays under high; a refill also lets high
/// grow by the batch unless the zone is below its high watermark.
fn nr_pcp_alloc(pcp: &mut PerCpuPages, batch: u32, high_min: u32, high_max: u32, below_high: bool, order: u32) -> u64 {
    let mut high = pcp_high(pcp, high_min, high_max) as i64;
    let base = batch as i64;
    if high < base {
        return 1;
    }
    let grow = if order == 0 { base << pcp.alloc_factor } else { base };
    if high_min != high_max && !below_high {
        pcp.high = (high + grow).min(high_max as i64) as u32;
        high = pcp.high as i64;
    }
    let mut b = if order == 0 { base << pcp.alloc_factor } else { base };
    if order == 0 {
        let max_nr = (high - pcp.count as i64 - base).max(base);
        if b <= max_nr && pcp.alloc_factor < PCP_BATCH_SCALE_MAX {
            pcp.alloc_factor += 1;
        }
        b = b.min(max_nr);
    }
    if b > 1 {
        b = (b >> order).max(2);
    }
    b as u64
}

/// Pages to drain when a pcp list overflows: at least `batch`, and more
/// after a run of frees (free_count), always leaving `batch` behind.
fn nr_pcp_free(pcp: &PerCpuPages, batch: u64, high: u64) -> u64 {
    if high < batch {
        return 1;
    }
    let max_nr = (high - batch).max(batch);
    pcp.free_count.clamp(batch, max_nr)
}

mod debug;
mod free_blocks;
mod isolation;
mod mm_init;
#[cfg(test)]
mod tests;
