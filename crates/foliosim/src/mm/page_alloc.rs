//! The zoned buddy allocator with per-CPU page lists (mm/page_alloc.c).
//!
//! INTERFACE STUB — being implemented. See the doc comment of each item.

use super::vmstat::{Stat, VmStat};
use super::{Pfn, NR_PAGE_ORDERS};
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

/// Where a freed block goes on its free list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpiPlace {
    Head,
    Tail,
}

/// A free block on a buddy free list. Free memory has no `struct Page`
/// state in foliosim: this node is all there is.
#[derive(Clone, Copy, Debug, Default)]
pub struct FreeBlock {
    pub prev: Pfn, // PFN + 1 of the previous block on the same list, 0 = none
    pub next: Pfn,
    pub order: u8,
    pub mt: u8,
    /// PG_reported (free page reporting).
    pub reported: bool,
    /// LUF unmap generation carried by the block (0 = none).
    pub ugen: u16,
}

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
}

pub struct PageAlloc {
    // implementation-defined
}

impl PageAlloc {
    pub fn new(_zones: Vec<ZoneSpec>, _p: AllocParams) -> Self {
        todo!()
    }
    /// Allocate 2^order contiguous pages, naturally aligned, trying zones in
    /// zonelist order starting at `nid` (then the others by increasing node
    /// distance, here: increasing |nid difference|, CPU-less nodes last),
    /// honouring the `low` watermark (fast path) then `min`. Orders 0..=3 and
    /// PMD_ORDER go through the CPU's pcp list (refill with `batch` blocks
    /// under zone->lock); others take zone->lock directly. Counts
    /// pgalloc_normal (base pages), updates nr_free_pages. None = below min
    /// everywhere (caller reclaims and retries).
    pub fn alloc_pages(&mut self, _now: Ns, _cpu: u32, _order: u32, _nid: u32, _mt: MigrateType, _stat: &mut VmStat) -> Option<Alloc> {
        todo!()
    }
    /// Free 2^order pages at `pfn` (aligned). Through pcp where the order is
    /// pcp-cached (drain `batch` from the tail to buddy when count > high),
    /// else straight to buddy with merging. Counts pgfree. Returns done time.
    pub fn free_pages(&mut self, _now: Ns, _cpu: u32, _pfn: Pfn, _order: u32, _stat: &mut VmStat) -> Ns {
        todo!()
    }
    pub fn nr_free(&self) -> u64 {
        todo!()
    }
    /// Full audit; Err describes the first violated invariant.
    pub fn check(&self) -> Result<(), String> {
        todo!()
    }
}

#[allow(dead_code)]
fn _unused(_: Stat, _: SpinLock, _: [u8; NR_PAGE_ORDERS], _: FpiPlace) {}
