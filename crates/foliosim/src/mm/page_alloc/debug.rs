//! The allocator checked against itself (the invariant checker's view, as
//! mm/debug_page_alloc.c and show_free_areas look at it): every free
//! extent, the nr_free_pages gauge, the free lists' full audit.

use super::*;

impl PageAlloc {
    /// Every free block, buddy and pcp, sorted by PFN.
    pub fn free_extents(&self) -> Vec<FreeExtent> {
        let nz = self.zones.len();
        let mut v = Vec::new();
        for (zi, z) in self.zones.iter().enumerate() {
            for (pfn, b) in z.blocks.iter() {
                v.push(FreeExtent {
                    pfn,
                    order: b.order as u32,
                    ugen: b.ugen,
                    at: FreeWhere::Buddy { mt: MigrateType::from_u8(b.mt), reported: b.reported },
                });
            }
            for cpu in 0..self.pcp.len() / nz {
                for (pi, l) in self.pcp[cpu * nz + zi].lists.iter().enumerate() {
                    for e in l {
                        let at = FreeWhere::Pcp { cpu: cpu as u32 };
                        v.push(FreeExtent { pfn: e.pfn, order: pindex_to_order(pi), ugen: e.ugen, at });
                    }
                }
            }
        }
        v.sort_unstable_by_key(|e| (e.pfn, e.order));
        v
    }

    /// The nr_free_pages gauge must equal the true free count.
    pub fn check_vmstat(&self, stat: &VmStat) -> Result<(), String> {
        let g = stat.get(Stat::NrFreePages);
        if g != self.nr_free() as i64 {
            return Err(format!("nr_free_pages gauge {g} != free pages {}", self.nr_free()));
        }
        Ok(())
    }

    /// Full audit; Err describes the first violated invariant.
    pub fn check(&self) -> Result<(), String> {
        let nz = self.zones.len();
        for (zi, z) in self.zones.iter().enumerate() {
            let nid = z.nid;
            let mut seen = 0usize;
            let mut free_pages = 0u64;
            let mut reported = 0u64;
            for order in 0..=MAX_PAGE_ORDER {
                let area = &z.free_area[order as usize];
                let mut blocks_here = 0u64;
                for mt in MigrateType::ALL {
                    let mut prev = 0;
                    let mut cur = area.head[mt as usize];
                    while cur != 0 {
                        let pfn = cur - 1;
                        let Some(b) = z.blocks.get(&pfn) else {
                            return Err(format!("node {nid} order {order} {mt:?}: list links to {pfn:#x}, not a free block"));
                        };
                        if b.prev != prev {
                            return Err(format!("node {nid}: block {pfn:#x} prev {:#x} != {prev:#x}", b.prev));
                        }
                        if b.order as u32 != order || b.mt != mt as u8 {
                            return Err(format!("node {nid}: block {pfn:#x} (order {} mt {}) on list order {order} {mt:?}", b.order, b.mt));
                        }
                        if pfn & ((1 << order) - 1) != 0 {
                            return Err(format!("node {nid}: block {pfn:#x} not aligned to order {order}"));
                        }
                        if !z.contains(pfn) || pfn as u64 + (1 << order) > z.end_pfn {
                            return Err(format!("node {nid}: block {pfn:#x} order {order} outside the zone"));
                        }
                        // A block's list must follow its pageblock(s).
                        let n = if order > PAGEBLOCK_ORDER { 1 << (order - PAGEBLOCK_ORDER) } else { 1 };
                        let first = z.pb_index(pfn);
                        if z.pageblock_mt[first..first + n].iter().any(|m| *m != b.mt) {
                            return Err(format!("node {nid}: block {pfn:#x} on {mt:?} list, pageblock type differs"));
                        }
                        if order < MAX_PAGE_ORDER {
                            if let Some(bb) = z.free_buddy(pfn ^ (1 << order), order) {
                                let bmt = MigrateType::from_u8(bb.mt);
                                let refused = order >= PAGEBLOCK_ORDER && bmt != mt && !(bmt.is_mergeable() && mt.is_mergeable());
                                if !refused {
                                    return Err(format!(
                                        "node {nid}: free buddies {pfn:#x} and {:#x} of order {order} not merged",
                                        pfn ^ (1 << order)
                                    ));
                                }
                            }
                        }
                        seen += 1;
                        blocks_here += 1;
                        if seen > z.blocks.len() {
                            return Err(format!("node {nid}: free list cycle at {pfn:#x}"));
                        }
                        free_pages += 1 << order;
                        if b.reported {
                            reported += 1 << order;
                        }
                        prev = cur;
                        cur = b.next;
                    }
                    if area.tail[mt as usize] != prev {
                        return Err(format!("node {nid} order {order} {mt:?}: tail {:#x} != last {prev:#x}", area.tail[mt as usize]));
                    }
                }
                if blocks_here != area.nr_free {
                    return Err(format!("node {nid} order {order}: nr_free {} but {blocks_here} blocks listed", area.nr_free));
                }
            }
            if seen != z.blocks.len() {
                return Err(format!("node {nid}: {} free blocks but {seen} on lists", z.blocks.len()));
            }
            if free_pages != z.free_pages {
                return Err(format!("node {nid}: free_pages {} but lists hold {free_pages}", z.free_pages));
            }
            if reported != z.reported_pages {
                return Err(format!("node {nid}: reported_pages {} but lists hold {reported}", z.reported_pages));
            }
            let mut pcp_pages = 0;
            let mut pcp_entries = 0;
            for cpu in 0..self.pcp.len() / nz {
                let pcp = &self.pcp[cpu * nz + zi];
                let mut count = 0;
                for (pi, l) in pcp.lists.iter().enumerate() {
                    let order = pindex_to_order(pi);
                    for e in l {
                        if e.pfn & ((1 << order) - 1) != 0 || !z.contains(e.pfn) || e.pfn as u64 + (1 << order) > z.end_pfn {
                            return Err(format!("node {nid} cpu {cpu}: pcp page {:#x} order {order} misplaced", e.pfn));
                        }
                        if z.track_pcp && z.pcp_index.get(&e.pfn) != Some(&(order as u8)) {
                            return Err(format!("node {nid} cpu {cpu}: pcp page {:#x} order {order} missing from the pcp index", e.pfn));
                        }
                        count += 1u64 << order;
                        pcp_entries += 1;
                    }
                }
                if count != pcp.count {
                    return Err(format!("node {nid} cpu {cpu}: pcp count {} but lists hold {count}", pcp.count));
                }
                pcp_pages += count;
            }
            if z.track_pcp && pcp_entries != z.pcp_index.len() {
                return Err(format!("node {nid}: pcp index holds {} blocks, lists {pcp_entries}", z.pcp_index.len()));
            }
            if pcp_pages != z.pcp_pages {
                return Err(format!("node {nid}: pcp_pages {} but lists hold {pcp_pages}", z.pcp_pages));
            }
            let total = (z.free_pages + z.pcp_pages + z.isolated_pages) as i64 + z.allocated_pages;
            if z.allocated_pages < 0 || total != z.managed as i64 {
                return Err(format!(
                    "node {nid}: free {} + pcp {} + isolated {} + allocated {} != managed {}",
                    z.free_pages, z.pcp_pages, z.isolated_pages, z.allocated_pages, z.managed
                ));
            }
        }
        let ext = self.free_extents();
        for w in ext.windows(2) {
            if w[0].pfn as u64 + (1u64 << w[0].order) > w[1].pfn as u64 {
                return Err(format!("free blocks overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        Ok(())
    }
}
