//! Taking free memory off the buddy lists and giving it back, for the
//! callers outside the allocator (the helpers mm/page_isolation.c,
//! mm/compaction.c, mm/page_reporting.c and mm/memory-failure.c use):
//! __isolate_free_page and its putback, compaction's capture, pageblock
//! isolation (start/undo_isolate_page_range), take_page_off_buddy, the
//! offlining of an isolated block.

use super::*;

impl PageAlloc {
    /// __isolate_free_page: take the free block starting at `pfn` off its
    /// list; its pages stop counting as free. Refused (None) if `pfn` is not
    /// the start of a free buddy block, or if taking it would leave the zone
    /// at or below min + 2^order. Caller holds zone->lock.
    pub fn isolate_free_block(&mut self, pfn: Pfn, stat: &mut VmStat) -> Option<IsolatedBlock> {
        let zi = self.zone_idx_of_pfn(pfn)?;
        let z = &mut self.zones[zi];
        let b = *z.blocks.get(&pfn)?;
        let order = b.order as u32;
        let pb_mt = z.pageblock_mt(pfn);
        if pb_mt != MigrateType::Isolate && !z.watermark_ok(0, z.wmark[Wmark::Min as usize] + (1 << order)) {
            return None;
        }
        z.del_from_free_list(pfn);
        z.isolated_pages += 1 << order;
        stat.add(Stat::NrFreePages, -(1 << order));
        // Half a pageblock or more is going to a device that cares nothing
        // for mobility; mark it movable so it comes back there.
        if order >= PAGEBLOCK_ORDER - 1 {
            let mut p = pfn as u64;
            let end = pfn as u64 + (1 << order);
            while p < end {
                let m = z.pageblock_mt(p as Pfn);
                if m.is_mergeable() && m != MigrateType::Movable {
                    z.move_freepages_block(p as Pfn, MigrateType::Movable);
                }
                p += 1 << PAGEBLOCK_ORDER;
            }
        }
        Some(IsolatedBlock { pfn, order, mt: MigrateType::from_u8(b.mt), was_reported: b.reported, ugen: b.ugen })
    }

    /// Return an isolated block (__putback_isolated_page). `Tail` puts it
    /// at the tail (6.12), `Head` uses the ordinary placement (5.7). With
    /// `reported`, the block is flagged PG_reported if it is still a free
    /// block of the same order afterwards (it did not merge), as the
    /// reporting drain does. Does not notify page reporting. Caller holds
    /// zone->lock.
    pub fn putback_isolated(&mut self, pfn: Pfn, order: u32, place: FpiPlace, reported: bool, stat: &mut VmStat) {
        self.putback_isolated_ugen(pfn, order, place, reported, 0, stat)
    }

    /// `putback_isolated` carrying a LUF generation.
    pub fn putback_isolated_ugen(&mut self, pfn: Pfn, order: u32, place: FpiPlace, reported: bool, ugen: u16, stat: &mut VmStat) {
        let zi = self.zone_idx_of_pfn(pfn).expect("putback outside every zone");
        let z = &mut self.zones[zi];
        assert!(z.isolated_pages >= 1 << order, "putback of pages never isolated");
        z.isolated_pages -= 1 << order;
        stat.add(Stat::NrFreePages, 1 << order);
        let mt = z.pageblock_mt(pfn);
        let fpi = Fpi { to_tail: place == FpiPlace::Tail, skip_report_notify: true };
        z.free_one_page(&mut self.pl, pfn, order, mt, fpi, ugen);
        if reported {
            if let Some(b) = z.blocks.get_mut(&pfn).filter(|b| b.order as u32 == order) {
                b.reported = true;
                z.reported_pages += 1 << order;
            }
        }
    }

    /// Arm (Some(order)) or disarm (None) compaction capture for the zone
    /// of node `nid` (current->capture_control of a direct compactor).
    pub fn set_capture(&mut self, nid: u32, order: Option<u32>) {
        let zstart = self.zones[self.zone_idx(nid)].start_pfn;
        self.pl.capture = order.map(|o| (zstart, o));
        if order.is_some() {
            self.pl.captured = None;
        }
    }

    /// The block a free handed to the armed compactor, if any: (pfn,
    /// order, LUF generation). It no longer counts as free.
    pub fn take_captured(&mut self, stat: &mut VmStat) -> Option<(Pfn, u32, u16)> {
        let c = self.pl.captured.take()?;
        stat.add(Stat::NrFreePages, -(1 << c.1));
        Some(c)
    }

    /// Pages taken off the lists by `isolate_free_block` become allocated
    /// (split_map_pages: compaction's targets, alloc_contig_range's range).
    pub fn isolated_to_allocated(&mut self, pfn: Pfn, order: u32) {
        let zi = self.zone_idx_of_pfn(pfn).expect("pfn outside every zone");
        let z = &mut self.zones[zi];
        assert!(z.isolated_pages >= 1 << order, "pages never isolated");
        z.isolated_pages -= 1 << order;
        z.allocated_pages += 1 << order;
    }

    /// The free buddy block containing `pfn`, as (first pfn, order).
    pub fn free_block_containing(&self, pfn: Pfn) -> Option<(Pfn, u32)> {
        let zi = self.zone_idx_of_pfn(pfn)?;
        let z = &self.zones[zi];
        (0..=MAX_PAGE_ORDER).find_map(|o| {
            let head = pfn & !((1 << o) - 1);
            z.free_buddy(head, o).map(|_| (head, o))
        })
    }

    /// take_page_off_buddy (hwpoison): take the single free frame `pfn`
    /// out of its buddy block; the rest of the block goes back in pieces
    /// (break_down_buddy_pages), each keeping the block's LUF generation.
    /// The frame counts as isolated for good. Returns its generation, or
    /// None if `pfn` is not in a free buddy block. Caller holds zone->lock.
    pub fn take_page_off_buddy(&mut self, pfn: Pfn, stat: &mut VmStat) -> Option<u16> {
        let (head, order) = self.free_block_containing(pfn)?;
        let zi = self.zone_idx_of_pfn(pfn)?;
        let z = &mut self.zones[zi];
        let b = z.del_from_free_list(head);
        let mt = MigrateType::from_u8(b.mt);
        let (mut lo, mut o) = (head, order);
        while o > 0 {
            o -= 1;
            // Keep the half holding `pfn`, free the other.
            let (keep, give) = if pfn < lo + (1 << o) { (lo, lo + (1 << o)) } else { (lo + (1 << o), lo) };
            z.add_to_free_list(give, o, mt, false, b.ugen);
            lo = keep;
        }
        debug_assert_eq!(lo, pfn);
        z.isolated_pages += 1;
        stat.add(Stat::NrFreePages, -1);
        Some(b.ugen)
    }

    /// set_migratetype_isolate over [start, end), whole pageblocks aligned
    /// to MAX_PAGE_ORDER (so no free block straddles the range, as the
    /// pre-6.x alloc_contig_range rounded it): every free block in it
    /// moves to the ISOLATE lists, keeping its generation, and frees into
    /// it go there too. Returns false (nothing changed) if the range
    /// leaves its zone or is not aligned.
    pub fn start_isolate_page_range(&mut self, start: Pfn, end: Pfn) -> bool {
        let align = 1 << MAX_PAGE_ORDER;
        let Some(zi) = self.zone_idx_of_pfn(start) else { return false };
        let z = &mut self.zones[zi];
        if !start.is_multiple_of(align) || !end.is_multiple_of(align) || end <= start || end as u64 > z.end_pfn {
            return false;
        }
        let mut p = start;
        while p < end {
            z.move_freepages_block(p, MigrateType::Isolate);
            p += 1 << PAGEBLOCK_ORDER;
        }
        true
    }

    /// unset_migratetype_isolate: the range's pageblocks become `mt` again
    /// and their free blocks go back to its lists (generations kept).
    pub fn undo_isolate_page_range(&mut self, start: Pfn, end: Pfn, mt: MigrateType) {
        let zi = self.zone_idx_of_pfn(start).expect("pfn outside every zone");
        let z = &mut self.zones[zi];
        let mut p = start;
        while p < end {
            z.move_freepages_block(p, mt);
            p += 1 << PAGEBLOCK_ORDER;
        }
        // Free blocks in the two halves of a max-order block may now merge.
        let heads: Vec<Pfn> = {
            let mut v: Vec<Pfn> = z.blocks.iter().map(|(p, _)| p).filter(|&b| b >= start && b < end).collect();
            v.sort_unstable();
            v
        };
        for h in heads {
            if let Some(b) = z.blocks.get(&h).copied() {
                if z.free_buddy(h ^ (1 << b.order), b.order as u32).is_some() {
                    let b = z.del_from_free_list(h);
                    z.free_one_page(&mut self.pl, h, b.order as u32, mt, Fpi { to_tail: false, skip_report_notify: true }, b.ugen);
                }
            }
        }
    }

    /// __offline_isolated_pages: frames isolated from an offlined range
    /// leave the zone (adjust_managed_page_count), and the watermarks
    /// follow the smaller zone (init_per_zone_wmark_min).
    pub fn offline_isolated(&mut self, pfn: Pfn, order: u32) {
        let zi = self.zone_idx_of_pfn(pfn).expect("pfn outside every zone");
        let z = &mut self.zones[zi];
        assert!(z.isolated_pages >= 1 << order, "pages never isolated");
        z.isolated_pages -= 1 << order;
        z.managed -= 1 << order;
        self.setup_per_zone_wmarks();
    }
}
