//! Setting the allocator up (mm/mm_init.c, and the sizing helpers of
//! mm/page_alloc.c it uses): the zones and their free lists at boot, the
//! zonelists, the watermarks (min_free_kbytes, watermark_scale_factor),
//! the per-CPU lists' batch and high.

use super::*;

/// The kernel's boot-time vm.min_free_kbytes for `lowmem_pages` of memory:
/// 4 * sqrt(lowmem in KiB), clamped to [128 KiB, 256 MiB].
pub(super) fn default_min_free_kbytes(lowmem_pages: u64) -> u64 {
    let kbytes = lowmem_pages * (crate::types::PAGE_SIZE >> 10);
    int_sqrt(kbytes * 16).clamp(128, 262_144)
}

fn int_sqrt(x: u64) -> u64 {
    let mut r = (x as f64).sqrt() as u64;
    // f64 rounding can be one off either way for large x.
    while r > 0 && r.checked_mul(r).is_none_or(|sq| sq > x) {
        r -= 1;
    }
    while (r + 1).checked_mul(r + 1).is_some_and(|sq| sq <= x) {
        r += 1;
    }
    r
}

fn rounddown_pow_of_two(x: u64) -> u64 {
    if x == 0 {
        0
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// pcp batch: ~0.1% of the zone or 1 MiB, whichever is smaller, /4, then
/// forced to 2^n - 1 (power-of-two batches alias badly in caches).
pub(super) fn zone_batchsize(managed: u64) -> u32 {
    let mut batch = (managed >> 10).min((1 << 20) >> PAGE_SHIFT) / 4;
    if batch < 1 {
        batch = 1;
    }
    let batch = rounddown_pow_of_two(batch + batch / 2) - 1;
    batch.max(1) as u32
}

/// pcp->high when the lists are full enough that background reclaim would
/// not start early: the zone's low watermark (or managed/fraction) split
/// over the node's CPUs, at least 4 batches.
fn zone_highsize(z: &Zone, batch: u32, nr_cpus: u32, high_fraction: u64) -> u32 {
    let total = z.managed.checked_div(high_fraction).unwrap_or(z.wmark[Wmark::Low as usize]);
    let split = if z.nr_local_cpus > 0 { z.nr_local_cpus } else { nr_cpus.max(1) };
    let high = total / split as u64;
    high.max(batch as u64 * 4).min(u32::MAX as u64) as u32
}

impl PageAlloc {
    pub fn new(zones: Vec<ZoneSpec>, p: AllocParams) -> Self {
        let mut specs = zones;
        specs.retain(|z| z.nr_pages > 0);
        specs.sort_by_key(|z| z.start_pfn);
        for w in specs.windows(2) {
            assert!(w[0].start_pfn as u64 + w[0].nr_pages <= w[1].start_pfn as u64, "zones of nodes {} and {} overlap", w[0].nid, w[1].nid);
        }
        let mut pl = Placement {
            merge_likely: p.merge_likely_tail,
            shuffle: p.shuffle.then(|| ShuffleState::new(p.shuffle_seed)),
            report_order: None,
            report_notify: false,
            mutant: None,
            capture: None,
            captured: None,
        };
        let mut zones = Vec::with_capacity(specs.len());
        for s in &specs {
            let end = s.start_pfn as u64 + s.nr_pages;
            // Profile::validate admits no larger machine.
            assert!(end <= crate::types::MAX_NR_FRAMES, "node {} ends beyond the 32-bit PFN space", s.nid);
            let pb_base = s.start_pfn as u64 >> PAGEBLOCK_ORDER;
            let pb_last = (end - 1) >> PAGEBLOCK_ORDER;
            let mut z = Zone {
                nid: s.nid,
                start_pfn: s.start_pfn,
                end_pfn: end,
                managed: s.nr_pages,
                nr_local_cpus: s.local_cpus.len() as u32,
                free_area: [FreeArea::default(); NR_PAGE_ORDERS],
                blocks: free_blocks::FreeBlocks::new(s.start_pfn, end),
                // Boot marks every pageblock MOVABLE.
                pageblock_mt: vec![MigrateType::Movable as u8; (pb_last - pb_base + 1) as usize],
                pb_base,
                free_pages: 0,
                pcp_pages: 0,
                pcp_index: FxHashMap::default(),
                track_pcp: true,
                isolated_pages: 0,
                allocated_pages: 0,
                reported_pages: 0,
                wmark: [0; 3],
                batch: 1,
                high: 4,
                high_max: 4,
                below_high: false,
                lock: SpinLock::default(),
                ops: 0,
                mutant: None,
                stale_reported: Default::default(),
            };
            // Boot frees memory in the largest aligned blocks, each to the
            // tail, so the lists come out in ascending PFN order.
            let mut blocks = Vec::new();
            let mut pfn = s.start_pfn as u64;
            while pfn < end {
                let mut order = (pfn.trailing_zeros()).min(MAX_PAGE_ORDER);
                while pfn + (1 << order) > end {
                    order -= 1;
                }
                blocks.push((pfn as Pfn, order));
                pfn += 1 << order;
            }
            if let Some(sh) = pl.shuffle.as_mut() {
                sh.permute(&mut blocks);
            }
            for (pfn, order) in blocks {
                z.add_to_free_list(pfn, order, MigrateType::Movable, true, 0);
            }
            z.ops = 0;
            zones.push(z);
        }

        let max_nid = specs.iter().map(|s| s.nid as usize).max().map_or(0, |m| m + 1);
        let mut zone_of_nid = vec![None; max_nid];
        for (i, z) in zones.iter().enumerate() {
            assert!(zone_of_nid[z.nid as usize].is_none(), "two zones for node {}", z.nid);
            zone_of_nid[z.nid as usize] = Some(i);
        }
        let nr_cpus = p.nr_cpus.max(1) as usize;
        let pcp = vec![PerCpuPages::default(); nr_cpus * zones.len()];
        let mut pa = PageAlloc { p, zones, zone_of_nid, zonelists: Vec::new(), pcp, pl };
        pa.build_zonelists(max_nid);
        pa.setup_per_zone_wmarks();
        pa
    }

    /// Zonelists for nodes 0..n (memoryless nodes included: their lists
    /// start at the nearest node with memory), as build_zonelists_in_node_order
    /// takes find_next_best_node's answers: the node itself, then by
    /// node_distance, a node with CPUs counting one further
    /// (PENALTY_FOR_NODE_WITH_CPUS: headless nodes first among equals).
    /// Equals then go by |nid difference| and nid, where the kernel spreads
    /// them by node_load (a round robin over the nodes it fills in).
    pub(super) fn build_zonelists(&mut self, n: usize) {
        self.zonelists = (0..n as u32).map(|nid| self.zonelist_order(nid)).collect();
    }

    /// Node `nid`'s zonelist: zone indices, best first (build_zonelists).
    pub(super) fn zonelist_order(&self, nid: u32) -> Vec<usize> {
        let row = self.p.distance.get(nid as usize).map_or(&[][..], |r| &r[..]);
        let node_distance = |b: u32| crate::hw::profile::slit_distance(row, nid as usize, b as usize);
        let mut l: Vec<usize> = (0..self.zones.len()).collect();
        l.sort_by_key(|&i| {
            let z = &self.zones[i];
            (z.nid != nid, node_distance(z.nid) + u32::from(z.nr_local_cpus != 0), z.nid.abs_diff(nid), z.nid)
        });
        l
    }

    /// __setup_per_zone_wmarks + zone_pcp_update: vm.min_free_kbytes spread
    /// over zones by size, gaps scaled by watermark_scale_factor, then the
    /// pcp batch and high that depend on them.
    pub(super) fn setup_per_zone_wmarks(&mut self) {
        let lowmem: u64 = self.zones.iter().map(|z| z.managed).sum();
        let mfk = self.min_free_kbytes();
        let pages_min = mfk >> (PAGE_SHIFT - 10);
        let wsf = self.p.watermark_scale_factor;
        for z in &mut self.zones {
            let min = (pages_min as u128 * z.managed as u128 / lowmem.max(1) as u128) as u64;
            let gap = (min >> 2).max((z.managed as u128 * wsf as u128 / 10_000) as u64);
            z.wmark = [min, min + gap, min + 2 * gap];
            z.batch = zone_batchsize(z.managed);
            z.high = zone_highsize(z, z.batch, self.p.nr_cpus, self.p.percpu_pagelist_high_fraction);
            z.high_max = if self.p.percpu_pagelist_high_fraction != 0 {
                z.high
            } else {
                zone_highsize(z, z.batch, self.p.nr_cpus, MIN_PERCPU_PAGELIST_HIGH_FRACTION)
            };
        }
    }

    /// The effective vm.min_free_kbytes.
    pub fn min_free_kbytes(&self) -> u64 {
        let lowmem: u64 = self.zones.iter().map(|z| z.managed).sum();
        self.p.min_free_kbytes.unwrap_or_else(|| default_min_free_kbytes(lowmem))
    }

    /// Writing vm.min_free_kbytes (None = back to the default formula).
    pub fn set_min_free_kbytes(&mut self, v: Option<u64>) {
        self.p.min_free_kbytes = v;
        self.setup_per_zone_wmarks();
    }

    /// Writing vm.watermark_scale_factor.
    pub fn set_watermark_scale_factor(&mut self, v: u64) {
        self.p.watermark_scale_factor = v;
        self.setup_per_zone_wmarks();
    }
}
