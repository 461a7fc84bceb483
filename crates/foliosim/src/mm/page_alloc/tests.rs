use super::mm_init::{default_min_free_kbytes, zone_batchsize};
use super::*;
use crate::sim::rng::Rng;
use proptest::prelude::*;

const LC: LineCost = crate::sim::lock::TEST_LINE_COST;
const ALLOC_PCP: Ns = 20;
const FREE_PCP: Ns = 25;
const BUDDY_OP: Ns = 40;

fn params(nr_cpus: u32) -> AllocParams {
    AllocParams {
        nr_cpus,
        min_free_kbytes: None,
        watermark_scale_factor: 10,
        percpu_pagelist_high_fraction: 0,
        alloc_pcp_ns: ALLOC_PCP,
        free_pcp_ns: FREE_PCP,
        buddy_op_ns: BUDDY_OP,
        line: LC,
        merge_likely_tail: true,
        shuffle: false,
        shuffle_seed: 0,
        distance: Vec::new(),
    }
}

fn zone(nid: u32, start_pfn: Pfn, nr_pages: u64, cpus: &[u32]) -> ZoneSpec {
    ZoneSpec { nid, start_pfn, nr_pages, local_cpus: cpus.to_vec() }
}

fn one_zone(start: Pfn, nr: u64, nr_cpus: u32) -> (PageAlloc, VmStat) {
    let cpus: Vec<u32> = (0..nr_cpus).collect();
    let pa = PageAlloc::new(vec![zone(0, start, nr, &cpus)], params(nr_cpus));
    let mut st = VmStat::default();
    pa.init_vmstat(&mut st);
    (pa, st)
}

/// (pfn, order) of every buddy block, sorted.
fn buddy_blocks(pa: &PageAlloc) -> Vec<(Pfn, u32)> {
    pa.free_extents().iter().filter(|e| matches!(e.at, FreeWhere::Buddy { .. })).map(|e| (e.pfn, e.order)).collect()
}

fn list(pa: &PageAlloc, nid: u32, order: u32, mt: MigrateType) -> Vec<Pfn> {
    pa.free_list(nid, order, mt).map(|(p, _)| p).collect()
}

#[test]
fn ugen_comparison_wraps_and_ignores_zero() {
    assert_eq!(ugen_latest(0, 5), 5);
    assert_eq!(ugen_latest(5, 0), 5);
    assert_eq!(ugen_latest(5, 7), 7);
    assert_eq!(ugen_latest(7, 5), 7);
    assert_eq!(ugen_latest(0xFFFF, 2), 2, "2 comes after 0xffff across the wrap");
    assert_eq!(ugen_latest(2, 0xFFFF), 2);
    assert_eq!(ugen_latest(0, 0), 0);
    assert!(ugen_before(0xFFF0, 3));
    assert!(!ugen_before(3, 0xFFF0));
}

#[test]
fn kernel_sizing_formulas() {
    // The table in calculate_min_free_kbytes' comment.
    assert_eq!(default_min_free_kbytes(16 << 8), 512); // 16 MiB
    assert_eq!(default_min_free_kbytes(1 << 18), 4096); // 1 GiB
    assert_eq!(default_min_free_kbytes(4 << 18), 8192); // 4 GiB
    assert_eq!(default_min_free_kbytes(16 << 18), 16384); // 16 GiB
    assert_eq!(default_min_free_kbytes(8 << 18), 11585); // 8 GiB: int_sqrt(8Gi KiB * 16)
    assert_eq!(default_min_free_kbytes(1), 128);
    assert_eq!(default_min_free_kbytes(1 << 32), 262_144); // 16 TiB clamps
    assert_eq!(zone_batchsize(1 << 20), 63);
    assert_eq!(zone_batchsize(1 << 16), 15);
    assert_eq!(zone_batchsize(4096), 1);
    assert_eq!(zone_batchsize(1 << 30), 63);
}

#[test]
fn watermarks_and_pcp_sizes_of_a_4gib_node() {
    let (pa, _) = one_zone(0, 1 << 20, 2);
    assert_eq!(pa.min_free_kbytes(), 8192);
    // min = 2048 pages; gap = max(min/4, 0.1% of 1Mi pages = 1048).
    assert_eq!(pa.zone_watermarks(0), (2048, 2048 + 1048, 2048 + 2 * 1048));
    // high = low watermark split over the node's two CPUs.
    assert_eq!(pa.zone_pcp_batch_high(0), (63, 3096 / 2));

    let mut p = params(2);
    p.min_free_kbytes = Some(65536);
    p.watermark_scale_factor = 100;
    let pa = PageAlloc::new(vec![zone(0, 0, 1 << 19, &[0]), zone(1, 1 << 19, 1 << 19, &[1])], p);
    // min_free spread by size: 16384 pages over two equal zones.
    assert_eq!(pa.zone_watermarks(1), (8192, 8192 + 5242, 8192 + 2 * 5242));
}

#[test]
fn boot_layout_is_aligned_ascending_and_allocates_upwards() {
    let (pa, _) = one_zone(3, 5000, 1);
    pa.check().unwrap();
    let blocks = buddy_blocks(&pa);
    assert_eq!(blocks.iter().map(|b| 1u64 << b.1).sum::<u64>(), 5000);
    assert_eq!(&blocks[..4], &[(3, 0), (4, 2), (8, 3), (16, 4)]);
    let big = list(&pa, 0, 10, MigrateType::Movable);
    assert_eq!(big, vec![1024, 2048, 3072]);
    assert_eq!(pa.nr_free(), 5000);
    // Ascending allocation gives ascending, in fact contiguous, PFNs (on
    // an aligned zone: the small edge blocks above would go first).
    let (mut pa, mut st) = one_zone(1 << 12, 1 << 14, 1);
    let pfns: Vec<Pfn> = (0..300).map(|i| pa.alloc_pages(i, 0, 0, 0, MigrateType::Movable, &mut st).unwrap().pfn).collect();
    assert_eq!(pfns, ((1 << 12)..(1 << 12) + 300).collect::<Vec<_>>());
    pa.check().unwrap();
    pa.check_vmstat(&st).unwrap();
}

#[test]
fn freeing_everything_restores_boot_state() {
    let (mut pa, mut st) = one_zone(1000, 20_000, 4);
    let boot = buddy_blocks(&pa);
    let mut rng = Rng::new(42);
    let orders = [0, 0, 0, 1, 2, 3, 4, 6, 9, 10];
    let mut live = Vec::new();
    for i in 0..3000 {
        let order = orders[rng.below(orders.len() as u64) as usize];
        let mt = MigrateType::from_u8(rng.below(3) as u8);
        let cpu = rng.below(4) as u32;
        if let Some(a) = pa.alloc_pages(i * 100, cpu, order, 0, mt, &mut st) {
            live.push((a.pfn, order));
        }
        if rng.below(3) == 0 && !live.is_empty() {
            let (pfn, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
            pa.free_pages(i * 100 + 50, rng.below(4) as u32, pfn, o, &mut st);
        }
    }
    assert!(live.len() > 100);
    assert_ne!(buddy_blocks(&pa), boot);
    pa.check().unwrap();
    while let Some((pfn, o)) = live.pop() {
        pa.free_pages(1 << 30, pfn % 4, pfn, o, &mut st);
    }
    pa.drain_all_pages(1 << 31);
    pa.check().unwrap();
    pa.check_vmstat(&st).unwrap();
    assert_eq!(pa.nr_free(), 20_000);
    assert_eq!(buddy_blocks(&pa), boot, "every block merged back to its boot shape");
    assert_eq!(st.get(Stat::PgallocNormal), st.get(Stat::Pgfree));
}

#[test]
fn pcp_refill_takes_batch_under_one_lock_and_grows() {
    let (mut pa, mut st) = one_zone(0, 1 << 20, 2);
    let a = pa.alloc_pages(1000, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(pa.zone_lock_stats(0).acquisitions, 1);
    assert_eq!(pa.pcp_count(0, 0), 62, "batch 63 taken, one handed out");
    // The refill held the lock for its list operations, then the pcp pop.
    assert!(a.done >= 1000 + 63 * BUDDY_OP + ALLOC_PCP, "{}", a.done);
    for i in 0..62 {
        let a = pa.alloc_pages(10_000 + i, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
        assert_eq!(a.done, 10_000 + i + ALLOC_PCP, "a pcp hit costs alloc_pcp_ns only");
    }
    assert_eq!(pa.zone_lock_stats(0).acquisitions, 1);
    assert_eq!(pa.pcp_count(0, 0), 0);
    pa.alloc_pages(20_000, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(pa.zone_lock_stats(0).acquisitions, 2);
    assert_eq!(pa.pcp_count(0, 0), 125, "second refill without frees is doubled");
    // Higher pcp orders refill batch >> order blocks, at least two.
    pa.alloc_pages(30_000, 1, 9, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(pa.pcp_count(1, 0), 512);
    pa.alloc_pages(30_000, 1, 2, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(pa.pcp_count(1, 0), 512 + (63 / 4 - 1) * 4);
    pa.check().unwrap();
}

#[test]
fn pcp_drain_at_high_frees_oldest_pages() {
    let (mut pa, mut st) = one_zone(0, 1 << 20, 2);
    let (batch, high) = pa.zone_pcp_batch_high(0);
    assert_eq!((batch, high), (63, 1548));
    let pfns: Vec<Pfn> = (0..2000).map(|_| pa.alloc_pages(0, 1, 0, 0, MigrateType::Movable, &mut st).unwrap().pfn).collect();
    let acq = pa.zone_lock_stats(0).acquisitions;
    for (i, &pfn) in pfns[..high as usize - 1].iter().enumerate() {
        let done = pa.free_pages(1_000_000, 0, pfn, 0, &mut st);
        assert_eq!(done, 1_000_000 + FREE_PCP);
        assert_eq!(pa.pcp_count(0, 0), i as u64 + 1);
    }
    assert_eq!(pa.zone_lock_stats(0).acquisitions, acq, "no drain below high");
    let done = pa.free_pages(2_000_000, 0, pfns[high as usize - 1], 0, &mut st);
    assert_eq!(pa.zone_lock_stats(0).acquisitions, acq + 1);
    // A run of frees grows the drain up to high - batch, leaving batch.
    assert_eq!(pa.pcp_count(0, 0), batch as u64);
    assert!(done > 2_000_000 + FREE_PCP);
    let on_pcp: Vec<Pfn> = pa.free_extents().iter().filter(|e| e.at == FreeWhere::Pcp { cpu: 0 }).map(|e| e.pfn).collect();
    let newest: Vec<Pfn> = pfns[high as usize - batch as usize..high as usize].to_vec();
    assert_eq!(on_pcp, newest, "the list tail (oldest frees) went to the buddy");
    assert!(pa.is_free(pfns[0]) && !on_pcp.contains(&pfns[0]));
    pa.check().unwrap();
    pa.check_vmstat(&st).unwrap();
}

#[test]
fn orders_outside_pcp_take_zone_lock_every_time() {
    let (mut pa, mut st) = one_zone(0, 1 << 16, 1);
    for (i, order) in [4u32, 5, 8, 10].into_iter().enumerate() {
        let before = pa.zone_lock_stats(0).acquisitions;
        let a = pa.alloc_pages(0, 0, order, 0, MigrateType::Movable, &mut st).unwrap();
        pa.free_pages(0, 0, a.pfn, order, &mut st);
        assert_eq!(pa.zone_lock_stats(0).acquisitions, before + 2, "order {order} (#{i})");
        assert_eq!(pa.pcp_count(0, 0), 0);
    }
}

#[test]
fn zone_lock_serialises_cpus_in_simulated_time() {
    let (mut pa, mut st) = one_zone(0, 1 << 16, 8);
    let mut done: Vec<Ns> = (0..8).map(|cpu| pa.alloc_pages(1000, cpu, 4, 0, MigrateType::Movable, &mut st).unwrap().done).collect();
    let sorted = {
        let mut d = done.clone();
        d.sort();
        d
    };
    assert_eq!(done, sorted, "FIFO: later callers finish later");
    done.dedup();
    assert_eq!(done.len(), 8);
    // Each holder works at least one list op; the last waits for all others.
    assert!(done[7] >= 1000 + 8 * BUDDY_OP);
    let s = pa.zone_lock_stats(0);
    assert_eq!(s.acquisitions, 8);
    assert_eq!(s.contended, 7);
    assert!(s.wait_ns > 0);
}

#[test]
fn watermarks_spill_to_next_node_then_min_then_fail() {
    let mut p = params(2);
    p.min_free_kbytes = Some(4096);
    let mut pa = PageAlloc::new(vec![zone(0, 0, 1 << 14, &[0]), zone(1, 1 << 14, 1 << 14, &[1])], p);
    let mut st = VmStat::default();
    pa.init_vmstat(&mut st);
    let (min, low, _) = pa.zone_watermarks(0);
    assert_eq!((min, low), (512, 640));
    let mut nids = Vec::new();
    let mut live = Vec::new();
    while let Some(a) = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st) {
        if nids.last() != Some(&a.nid) {
            nids.push(a.nid);
            // At each switch the previous node has just crossed a mark.
        }
        live.push(a.pfn);
    }
    assert_eq!(nids, vec![0, 1, 0, 1], "low on 0, low on 1, then min on 0, min on 1");
    for nid in [0, 1] {
        let f = pa.zone_free_pages(nid);
        assert!(f - 15 <= min && f + 16 - 15 > min, "node {nid} stopped at min: {f}");
    }
    pa.check().unwrap();
    // Freeing a block lifts node 0 over min again.
    pa.free_pages(0, 0, live[0], 4, &mut st);
    let a = pa.alloc_pages(0, 0, 4, 1, MigrateType::Movable, &mut st).unwrap();
    assert_eq!((a.pfn, a.nid), (live[0], 0));
    assert!(pa.alloc_pages(0, 0, 4, 1, MigrateType::Movable, &mut st).is_none());
    pa.check_vmstat(&st).unwrap();
}

#[test]
fn zonelists_go_by_distance_headless_first_among_equals() {
    let zones = || vec![zone(0, 0, 4096, &[0]), zone(1, 4096, 4096, &[1]), zone(2, 8192, 4096, &[]), zone(3, 12288, 4096, &[2])];
    // No table: every other node at 20, a node with CPUs one further.
    let pa = PageAlloc::new(zones(), params(3));
    assert_eq!(pa.zonelist(1), vec![1, 2, 0, 3]);
    assert_eq!(pa.zonelist(2), vec![2, 1, 3, 0]);
    assert_eq!(pa.zonelist(0), vec![0, 2, 1, 3]);
    assert_eq!(pa.zonelist(7), vec![2, 3, 1, 0], "memoryless node: nearest first");
    // A two-socket table with one CXL node (2) on socket 0: from node 0 the
    // local CXL comes before the remote DRAM, from node 1 after it.
    let mut p = params(3);
    p.distance = vec![vec![10, 21, 14, 21], vec![21, 10, 24, 21], vec![14, 24, 10, 24], vec![21, 21, 24, 10]];
    let pa = PageAlloc::new(zones(), p);
    assert_eq!(pa.zonelist(0), vec![0, 2, 1, 3]);
    assert_eq!(pa.zonelist(1), vec![1, 0, 3, 2]);
}

#[test]
fn order_zero_watermark_uses_buddy_pages_only() {
    // 1024 pages: default min_free_kbytes 256, min 64 pages.
    let (mut pa, mut st) = one_zone(0, 1024, 1);
    let mut n = 0;
    while pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).is_some() {
        n += 1;
    }
    // An order-0 refill of up to batch << alloc_factor pages may dip
    // below min after the check, as in the kernel.
    let (min, _, _) = pa.zone_watermarks(0);
    assert_eq!(min, 64);
    assert!(pa.zone_free_pages(0) <= min);
    assert_eq!(pa.zone_free_pages(0) + pa.pcp_count(0, 0) + n, 1024);
    // Pages parked on the pcp list are free but not usable until drained.
    assert_eq!(pa.nr_free(), 1024 - n);
    assert!(pa.pcp_count(0, 0) > 0);
    let (buddy, pcp) = (pa.zone_free_pages(0), pa.pcp_count(0, 0));
    pa.drain_all_pages(0);
    assert_eq!(pa.zone_free_pages(0), buddy + pcp);
    assert_eq!(pa.nr_free(), 1024 - n);
    pa.check().unwrap();
}

#[test]
fn merge_likely_heuristic_places_at_tail() {
    for merge_likely in [true, false] {
        let mut p = params(1);
        p.merge_likely_tail = merge_likely;
        let mut pa = PageAlloc::new(vec![zone(0, 0x1000, 8192, &[0])], p);
        let PageAlloc { zones, pl, .. } = &mut pa;
        let z = &mut zones[0];
        // Take the first max-order block and hand back pieces by hand:
        // [0x1002,0x1003] free as order 1, 0x1005 free as order 0 (its
        // buddy 0x1004 in use), 0x1001 in use.
        z.del_from_free_list(0x1000);
        z.add_to_free_list(0x1002, 1, MigrateType::Movable, false, 0);
        z.add_to_free_list(0x1005, 0, MigrateType::Movable, false, 0);
        let r = z.free_one_page(pl, 0x1000, 0, MigrateType::Movable, Fpi::default(), 0);
        assert_eq!(r, (0x1000, 0), "0x1001 is in use: no merge");
        let l = list(&pa, 0, 0, MigrateType::Movable);
        if merge_likely {
            assert_eq!(l, vec![0x1005, 0x1000], "parent's buddy free: tail");
        } else {
            assert_eq!(l, vec![0x1000, 0x1005]);
        }
        // Without a free order-1 parent buddy the block goes to the head.
        let PageAlloc { zones, pl, .. } = &mut pa;
        let z = &mut zones[0];
        z.free_one_page(pl, 0x1009, 0, MigrateType::Movable, Fpi::default(), 0);
        assert_eq!(list(&pa, 0, 0, MigrateType::Movable)[0], 0x1009);
    }
}

#[test]
fn merge_likely_never_applies_to_the_top_two_orders() {
    let (mut pa, _) = one_zone(0, 4096, 1);
    let z = &pa.zones[0];
    // Order 9 at 0 with the order-10 block at 1024 free: still head.
    assert!(!z.buddy_merge_likely(0, 512, 9));
    assert!(!z.buddy_merge_likely(0, 1024, 10));
    let PageAlloc { zones, .. } = &mut pa;
    zones[0].del_from_free_list(0);
    zones[0].add_to_free_list(512, 9, MigrateType::Movable, false, 0);
    assert!(!zones[0].buddy_merge_likely(256, 256 ^ 256, 8) || zones[0].free_buddy(0, 9).is_none());
    // Order 8 at 0 (buddy 256 in use) with order-9 block at 512 free: tail.
    assert!(zones[0].buddy_merge_likely(0, 256, 8));
}

#[test]
fn shuffle_randomises_boot_lists_and_top_order_frees() {
    let mut p = params(1);
    p.shuffle = true;
    p.shuffle_seed = 9;
    let mut pa = PageAlloc::new(vec![zone(0, 0, 64 << 10, &[0])], p.clone());
    let l = list(&pa, 0, 10, MigrateType::Movable);
    let mut sorted = l.clone();
    sorted.sort();
    assert_eq!(sorted, (0..64).map(|i| i << 10).collect::<Vec<Pfn>>());
    assert_ne!(l, sorted, "boot lists are permuted");
    pa.check().unwrap();
    let mut st = VmStat::default();
    let (mut heads, mut tails) = (0, 0);
    for i in 0..64 {
        let a = pa.alloc_pages(i, 0, 10, 0, MigrateType::Movable, &mut st).unwrap();
        pa.free_pages(i, 0, a.pfn, 10, &mut st);
        let l = list(&pa, 0, 10, MigrateType::Movable);
        if l[0] == a.pfn {
            heads += 1;
        } else {
            assert_eq!(*l.last().unwrap(), a.pfn);
            tails += 1;
        }
    }
    assert!(heads > 10 && tails > 10, "{heads} {tails}");
    // Without shuffle an order-10 free always goes to the head.
    p.shuffle = false;
    let mut pa = PageAlloc::new(vec![zone(0, 0, 64 << 10, &[0])], p);
    assert_eq!(list(&pa, 0, 10, MigrateType::Movable), sorted);
    for i in 0..8 {
        let a = pa.alloc_pages(i, 0, 10, 0, MigrateType::Movable, &mut st).unwrap();
        pa.free_pages(i, 0, a.pfn, 10, &mut st);
        assert_eq!(list(&pa, 0, 10, MigrateType::Movable)[0], a.pfn);
    }
}

fn scripted_run(seed: u64, shuffle: bool) -> Vec<(Pfn, Ns)> {
    let mut p = params(4);
    p.shuffle = shuffle;
    p.shuffle_seed = seed;
    let mut pa = PageAlloc::new(vec![zone(0, 0, 1 << 15, &[0, 1]), zone(1, 1 << 15, 1 << 15, &[2, 3])], p);
    let mut st = VmStat::default();
    let mut rng = Rng::new(7); // the workload itself is fixed
    let mut live = Vec::new();
    let mut out = Vec::new();
    for i in 0..2000u64 {
        let order = [0, 0, 1, 3, 4, 9, 10][rng.below(7) as usize];
        let cpu = rng.below(4) as u32;
        if let Some(a) = pa.alloc_pages(i * 37, cpu, order, cpu / 2, MigrateType::Movable, &mut st) {
            out.push((a.pfn, a.done));
            live.push((a.pfn, order));
        }
        if rng.below(2) == 0 && !live.is_empty() {
            let (pfn, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
            out.push((pfn, pa.free_pages(i * 37 + 11, cpu, pfn, o, &mut st)));
        }
    }
    pa.check().unwrap();
    out
}

#[test]
fn determinism() {
    assert_eq!(scripted_run(1, false), scripted_run(1, false));
    assert_eq!(scripted_run(1, true), scripted_run(1, true));
    assert_ne!(scripted_run(1, true), scripted_run(2, true), "the seed drives the shuffle");
    assert_eq!(scripted_run(1, false), scripted_run(2, false), "the seed is only used by the shuffle");
}

#[test]
fn ugen_survives_pcp_merge_and_split() {
    // One max-order block: everything merges back into it.
    let (mut pa, mut st) = one_zone(0, 1024, 1);
    let a = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!((a.pfn, a.ugen), (0, 0));
    // Free it as two halves with different generations, via pcp.
    pa.free_pages_ugen(0, 0, 0, 3, 0xFFFF, &mut st);
    pa.free_pages_ugen(0, 0, 8, 3, 2, &mut st);
    let on_pcp: Vec<u16> = pa.free_extents().iter().filter(|e| matches!(e.at, FreeWhere::Pcp { .. })).map(|e| e.ugen).collect();
    assert_eq!(on_pcp, vec![0xFFFF, 2], "pcp keeps each page's generation");
    pa.drain_pages(0, 0);
    let b = pa.free_block(0).unwrap();
    assert_eq!((b.order, b.ugen, b.reported), (10, 2, false), "merged block keeps the later generation");
    // Split: the allocation and every remainder carry the parent's generation.
    let a = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!((a.pfn, a.ugen), (0, 2));
    for e in pa.free_extents() {
        assert_eq!(e.ugen, 2, "{e:?}");
        assert_eq!(e.at, FreeWhere::Buddy { mt: MigrateType::Movable, reported: false });
    }
    // pcp refills hand the generation through too.
    let a0 = pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(a0.ugen, 2);
    pa.check().unwrap();
}

#[test]
fn reported_flag_through_isolate_putback_split_and_merge() {
    let mut p = params(1);
    p.min_free_kbytes = Some(64); // min = 16 pages
    let mut pa = PageAlloc::new(vec![zone(0, 0, 2048, &[0])], p);
    let mut st = VmStat::default();
    pa.init_vmstat(&mut st);
    pa.set_page_reporting_order(Some(9));
    assert_eq!(list(&pa, 0, 10, MigrateType::Movable), vec![0, 1024]);
    let iso = pa.isolate_free_block(0, &mut st).unwrap();
    assert_eq!((iso.order, iso.mt, iso.was_reported), (10, MigrateType::Movable, false));
    assert_eq!(pa.nr_free(), 1024);
    assert_eq!(pa.zone_isolated_pages(0), 1024);
    assert!(!pa.is_free(5));
    pa.check().unwrap();
    pa.check_vmstat(&st).unwrap();
    // A second isolation would leave the zone below min + 1024.
    assert!(pa.isolate_free_block(1024, &mut st).is_none());
    assert!(pa.isolate_free_block(3, &mut st).is_none(), "not a free block");
    pa.putback_isolated(0, 10, FpiPlace::Tail, true, &mut st);
    assert!(!pa.take_page_reporting_notify(), "putback does not re-notify");
    assert_eq!(list(&pa, 0, 10, MigrateType::Movable), vec![1024, 0]);
    assert!(pa.free_block(0).unwrap().reported);
    assert_eq!(pa.zone_reported_pages(0), 1024);
    pa.check().unwrap();
    // The unreported head block goes first.
    let a = pa.alloc_pages(0, 0, 10, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(a.pfn, 1024);
    assert_eq!(pa.zone_reported_pages(0), 1024);
    // Splitting the reported block leaves unreported remainders.
    let b = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(b.pfn, 0);
    assert_eq!(pa.zone_reported_pages(0), 0);
    assert!(pa.free_extents().iter().all(|e| !matches!(e.at, FreeWhere::Buddy { reported: true, .. })));
    // Merging back: the whole block is free again, unreported, and the
    // free reached the reporting order.
    pa.free_pages(0, 0, 0, 4, &mut st);
    let blk = pa.free_block(0).unwrap();
    assert_eq!((blk.order, blk.reported), (10, false));
    assert!(pa.take_page_reporting_notify());
    assert!(!pa.take_page_reporting_notify());
    pa.check().unwrap();
    pa.check_vmstat(&st).unwrap();
}

#[test]
fn reported_putback_that_merges_is_not_flagged() {
    let mut p = params(1);
    p.min_free_kbytes = Some(64);
    let mut pa = PageAlloc::new(vec![zone(0, 0, 2048, &[0])], p);
    let mut st = VmStat::default();
    let a = pa.alloc_pages(0, 0, 8, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(a.pfn, 0);
    // Isolate the order-8 remainder at 256, free the first one, put back.
    assert_eq!(pa.free_block(256).map(|b| b.order), Some(8));
    let iso = pa.isolate_free_block(256, &mut st).unwrap();
    assert_eq!(iso.order, 8);
    pa.free_pages(0, 0, 0, 8, &mut st);
    pa.putback_isolated(256, 8, FpiPlace::Tail, true, &mut st);
    let b = pa.free_block(0).unwrap();
    assert_eq!((b.order, b.reported), (10, false));
    assert!(pa.free_block(256).is_none());
    assert_eq!(pa.zone_reported_pages(0), 0);
    pa.check().unwrap();
}

#[test]
fn free_list_rotation() {
    let (mut pa, _) = one_zone(0, 6 << 10, 1);
    assert_eq!(list(&pa, 0, 10, MigrateType::Movable), vec![0, 1024, 2048, 3072, 4096, 5120]);
    pa.free_list_rotate_to_front(3072);
    assert_eq!(list(&pa, 0, 10, MigrateType::Movable), vec![3072, 4096, 5120, 0, 1024, 2048]);
    pa.free_list_rotate_to_front(2048);
    assert_eq!(list(&pa, 0, 10, MigrateType::Movable), vec![2048, 3072, 4096, 5120, 0, 1024]);
    pa.free_list_rotate_to_front(2048);
    assert_eq!(pa.free_list_head(0, 10, MigrateType::Movable), Some(2048));
    pa.check().unwrap();
}

#[test]
fn unmovable_fallback_claims_whole_pageblocks() {
    let (mut pa, mut st) = one_zone(0, 1 << 14, 1);
    let a = pa.alloc_pages(0, 0, 0, 0, MigrateType::Unmovable, &mut st).unwrap();
    // The largest movable block was taken over: both of its pageblocks.
    assert_eq!(pa.pageblock_migratetype(a.pfn), Some(MigrateType::Unmovable));
    let base = a.pfn & !1023;
    assert_eq!(pa.pageblock_migratetype(base + 512), Some(MigrateType::Unmovable));
    assert_eq!(pa.pageblock_migratetype(base + 1024), Some(MigrateType::Movable));
    assert!(list(&pa, 0, 9, MigrateType::Unmovable).contains(&(base + 512)));
    // Movable allocations stay out of it.
    for _ in 0..100 {
        let m = pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
        assert_eq!(pa.pageblock_migratetype(m.pfn), Some(MigrateType::Movable));
    }
    // Freed unmovable pages go back to the unmovable lists.
    pa.free_pages(0, 0, a.pfn, 0, &mut st);
    pa.drain_all_pages(0);
    pa.check().unwrap();
}

#[test]
fn small_fallback_steals_or_claims_half_free_pageblock() {
    let (mut pa, mut st) = one_zone(0, 2048, 1);
    pa.set_min_free_kbytes(Some(0));
    // The first unmovable request claims max-order block 0 (two pageblocks).
    let unmov: Vec<Pfn> = (0..64).map(|_| pa.alloc_pages(0, 0, 4, 0, MigrateType::Unmovable, &mut st).unwrap().pfn).collect();
    assert!(unmov.iter().all(|p| *p < 1024), "{unmov:?}");
    while pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).is_some() {}
    assert_eq!(pa.zone_free_pages(0), 0);
    // One free unmovable chunk in a mostly used pageblock: a movable
    // request takes it without retyping the pageblock.
    pa.free_pages(0, 0, 320, 4, &mut st);
    let m = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(m.pfn, 320);
    assert_eq!(pa.pageblock_migratetype(320), Some(MigrateType::Unmovable), "stolen, not claimed");
    // Half the pageblock free: the movable request claims all of it.
    for p in (0..256).step_by(16) {
        pa.free_pages(0, 0, p, 4, &mut st);
    }
    assert_eq!(pa.free_block(0).map(|b| (b.order, b.mt)), Some((8, MigrateType::Unmovable as u8)));
    let m = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(m.pfn, 0);
    assert_eq!(pa.pageblock_migratetype(0), Some(MigrateType::Movable), "claimed");
    assert_eq!(pa.pageblock_migratetype(512), Some(MigrateType::Unmovable));
    assert_eq!(list(&pa, 0, 4, MigrateType::Movable), vec![16]);
    pa.check().unwrap();
}

#[test]
fn is_free_sees_buddy_and_pcp_pages() {
    let (mut pa, mut st) = one_zone(0, 1 << 16, 2);
    let a = pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
    assert!(!pa.is_free(a.pfn));
    assert!(pa.is_free(a.pfn + 1), "on cpu 0's pcp list");
    assert!(pa.free_block(a.pfn + 1).is_none());
    assert!(pa.is_free(3000), "inside a buddy block");
    pa.free_pages(0, 1, a.pfn, 0, &mut st);
    assert!(pa.is_free(a.pfn));
    assert!(!pa.is_free(1 << 20), "outside every zone");
    let x = pa.alloc_pages(0, 0, 10, 0, MigrateType::Movable, &mut st).unwrap();
    assert!(!pa.is_free(x.pfn + 77));
}

#[test]
fn vmstat_counters_are_exact() {
    let (mut pa, mut st) = one_zone(0, 1 << 14, 2);
    assert_eq!(st.get(Stat::NrFreePages), 1 << 14);
    let a = pa.alloc_pages(0, 0, 3, 0, MigrateType::Movable, &mut st).unwrap();
    let b = pa.alloc_pages(0, 1, 9, 0, MigrateType::Movable, &mut st).unwrap();
    let c = pa.alloc_pages(0, 1, 5, 0, MigrateType::Movable, &mut st).unwrap();
    assert_eq!(st.get(Stat::PgallocNormal), 8 + 512 + 32);
    assert_eq!(st.get(Stat::NrFreePages), (1 << 14) - 552);
    pa.check_vmstat(&st).unwrap();
    pa.free_pages(0, 0, b.pfn, 9, &mut st);
    pa.free_pages(0, 0, c.pfn, 5, &mut st);
    assert_eq!(st.get(Stat::Pgfree), 544);
    pa.check_vmstat(&st).unwrap();
    pa.drain_all_pages(0);
    pa.check_vmstat(&st).unwrap();
    pa.free_pages(0, 0, a.pfn, 3, &mut st);
    assert_eq!(st.get(Stat::NrFreePages), 1 << 14);
    st.add(Stat::NrFreePages, 1);
    assert!(pa.check_vmstat(&st).is_err());
}

#[test]
fn mutant_skip_nr_free_dec_is_caught() {
    let (mut pa, mut st) = one_zone(0, 1 << 14, 1);
    pa.set_mutant(Some(AllocMutant::SkipNrFreeDec));
    pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    let e = pa.check().unwrap_err();
    assert!(e.contains("nr_free"), "{e}");
}

#[test]
fn mutant_no_merge_is_caught() {
    let (mut pa, mut st) = one_zone(0, 1 << 14, 1);
    pa.set_mutant(Some(AllocMutant::NoMerge));
    let a = pa.alloc_pages(0, 0, 4, 0, MigrateType::Movable, &mut st).unwrap();
    pa.check().unwrap();
    pa.free_pages(0, 0, a.pfn, 4, &mut st);
    let e = pa.check().unwrap_err();
    assert!(e.contains("not merged"), "{e}");
}

#[test]
fn corrupted_pcp_list_is_caught() {
    let (mut pa, mut st) = one_zone(0, 1 << 14, 1);
    pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
    pa.check().unwrap();
    assert!(pa.corrupt_duplicate_pcp_entry(0, 0));
    let e = pa.check().unwrap_err();
    assert!(e.contains("overlap") || e.contains("pcp index"), "{e}");
}

#[test]
fn corrupted_list_link_is_caught() {
    let (mut pa, _) = one_zone(0, 1 << 14, 1);
    // Unlink a middle block's back pointer.
    let second = list(&pa, 0, 10, MigrateType::Movable)[1];
    pa.zones[0].blocks.get_mut(&second).unwrap().prev = 0;
    let e = pa.check().unwrap_err();
    assert!(e.contains("prev"), "{e}");
}

#[test]
#[ignore = "timing; run with --ignored --nocapture"]
fn pcp_hit_speed() {
    let (mut pa, mut st) = one_zone(0, 1 << 20, 1);
    let n = 20_000_000u64;
    let t = std::time::Instant::now();
    let mut x = 0u64;
    for i in 0..n {
        let a = pa.alloc_pages(i, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
        x = x.wrapping_add(a.pfn as u64);
        pa.free_pages(i, 0, a.pfn, 0, &mut st);
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!("alloc+free pcp hit: {ns:.1} ns ({x})");
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { cpu: u32, order: u32, nid: u32, mt: u8 },
    Free { idx: usize, cpu: u32, ugen: u16 },
    Drain { cpu: u32 },
    DrainAll,
    IsolatePutback { idx: usize, tail: bool, reported: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3u32, prop::sample::select(vec![0u32, 0, 0, 1, 2, 3, 4, 5, 8, 9, 10]), 0..3u32, 0..3u8)
            .prop_map(|(cpu, order, nid, mt)| Op::Alloc { cpu, order, nid, mt }),
        3 => (any::<usize>(), 0..3u32, prop::sample::select(vec![0u16, 0, 1, 2, 0x7FFF, 0xFFFF]))
            .prop_map(|(idx, cpu, ugen)| Op::Free { idx, cpu, ugen }),
        1 => (0..3u32).prop_map(|cpu| Op::Drain { cpu }),
        1 => Just(Op::DrainAll),
        1 => (any::<usize>(), any::<bool>(), any::<bool>()).prop_map(|(idx, tail, reported)| Op::IsolatePutback { idx, tail, reported }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn random_alloc_free_keeps_invariants(
        ops in prop::collection::vec(op(), 1..400),
        shuffle in any::<bool>(),
        merge_likely in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut p = params(3);
        p.shuffle = shuffle;
        p.merge_likely_tail = merge_likely;
        p.shuffle_seed = seed;
        p.min_free_kbytes = Some(256);
        // Unaligned starts and ends; node 2 is CPU-less.
        let zones = vec![zone(0, 5, 6000, &[0, 1]), zone(1, 8192, 4100, &[2]), zone(2, 16384 + 512, 2048 + 7, &[])];
        let managed: u64 = 6000 + 4100 + 2055;
        let mut pa = PageAlloc::new(zones, p);
        let mut st = VmStat::default();
        pa.init_vmstat(&mut st);
        let mut live: Vec<(Pfn, u32)> = Vec::new();
        let mut now = 0;
        for op in ops {
            now += 100;
            match op {
                Op::Alloc { cpu, order, nid, mt } => {
                    if let Some(a) = pa.alloc_pages(now, cpu, order, nid, MigrateType::from_u8(mt), &mut st) {
                        prop_assert_eq!(a.pfn & ((1 << order) - 1), 0);
                        prop_assert!(a.done >= now);
                        prop_assert_eq!(pa.pfn_to_nid(a.pfn), Some(a.nid));
                        prop_assert!(!pa.is_free(a.pfn));
                        live.push((a.pfn, order));
                    }
                }
                Op::Free { idx, cpu, ugen } if !live.is_empty() => {
                    let (pfn, order) = live.swap_remove(idx % live.len());
                    let done = pa.free_pages_ugen(now, cpu, pfn, order, ugen, &mut st);
                    prop_assert!(done >= now);
                    prop_assert!(pa.is_free(pfn));
                }
                Op::Free { .. } => {}
                Op::Drain { cpu } => { pa.drain_pages(now, cpu); }
                Op::DrainAll => { pa.drain_all_pages(now); }
                Op::IsolatePutback { idx, tail, reported } => {
                    let buddy: Vec<FreeExtent> = pa.free_extents().into_iter().filter(|e| matches!(e.at, FreeWhere::Buddy { .. })).collect();
                    if !buddy.is_empty() {
                        let e = buddy[idx % buddy.len()];
                        if let Some(iso) = pa.isolate_free_block(e.pfn, &mut st) {
                            prop_assert_eq!((iso.pfn, iso.order, iso.ugen), (e.pfn, e.order, e.ugen));
                            pa.check().map_err(TestCaseError::fail)?;
                            let place = if tail { FpiPlace::Tail } else { FpiPlace::Head };
                            pa.putback_isolated_ugen(e.pfn, e.order, place, reported, iso.ugen, &mut st);
                        }
                    }
                }
            }
            pa.check().map_err(TestCaseError::fail)?;
            pa.check_vmstat(&st).map_err(TestCaseError::fail)?;
            let out: u64 = live.iter().map(|l| 1u64 << l.1).sum();
            prop_assert_eq!(pa.nr_free() + out, managed);
        }
        // Outstanding blocks never overlap free memory.
        let ext = pa.free_extents();
        for &(pfn, order) in &live {
            let i = ext.partition_point(|e| e.pfn < pfn + (1 << order));
            if i > 0 {
                let e = ext[i - 1];
                prop_assert!(e.pfn as u64 + (1u64 << e.order) <= pfn as u64, "{:?} overlaps live {:#x}/{}", e, pfn, order);
            }
        }
        for (pfn, order) in live.drain(..) {
            pa.free_pages(now, 0, pfn, order, &mut st);
        }
        pa.drain_all_pages(now);
        pa.check().map_err(TestCaseError::fail)?;
        prop_assert_eq!(pa.nr_free(), managed);
        prop_assert_eq!(st.get(Stat::PgallocNormal), st.get(Stat::Pgfree));
    }
}

#[test]
fn pcp_high_grows_on_free_runs_and_shrinks_below_the_high_watermark() {
    // 4 GiB node, 2 CPUs: high_min = 1548, high_max = managed/8/2.
    let (mut pa, mut st) = one_zone(0, 1 << 20, 2);
    let (batch, high_min) = pa.zone_pcp_batch_high(0);
    // page_fault1's pattern on one CPU: allocate a run, free it, repeat.
    // Refills raise pcp->high toward high_max, so the frees that follow stay
    // on the pcp instead of going back to the buddy.
    let mut peak = 0;
    for _ in 0..3 {
        let pfns: Vec<Pfn> = (0..20_000).map(|_| pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).unwrap().pfn).collect();
        for &pfn in &pfns {
            pa.free_pages(0, 0, pfn, 0, &mut st);
            peak = peak.max(pa.pcp_count(0, 0));
        }
    }
    // With a static high the list could never exceed high_min + a batch.
    assert!(peak > 4 * high_min as u64, "pcp peaked at {peak}, high_min {high_min}");
    pa.check().unwrap();
    pa.check_vmstat(&st).unwrap();
    // Now fill the zone until it is below its high watermark: frees must
    // shrink the pcp back toward high_min.
    let (_, _, high_wm) = pa.zone_watermarks(0);
    let mut held = Vec::new();
    while pa.zone_free_pages(0) > high_wm / 2 {
        match pa.alloc_pages(0, 1, 0, 0, MigrateType::Movable, &mut st) {
            Some(a) => held.push(a.pfn),
            None => break,
        }
    }
    // CPU 0's pcp is still large from the runs above; the next free, with the
    // zone below its high watermark, must drain it instead of growing it.
    let c0 = pa.pcp_count(0, 0);
    assert!(c0 > 4 * high_min as u64);
    pa.free_pages(0, 0, held[0], 0, &mut st);
    assert!(pa.pcp_count(0, 0) + batch as u64 - 1 <= c0, "below the high watermark a free must drain: {c0} -> {}", pa.pcp_count(0, 0));
    pa.check().unwrap();
}

/// take_page_off_buddy: the frame leaves, the rest of its block goes back
/// in pieces that keep the block's LUF generation, the audit holds.
#[test]
fn take_page_off_buddy_keeps_the_generation_on_the_pieces() {
    let (mut pa, mut st) = one_zone(0, 4096, 1);
    let a = pa.alloc_pages(0, 0, 3, 0, MigrateType::Movable, &mut st).unwrap();
    pa.free_pages_ugen(0, 0, a.pfn, 3, 9, &mut st);
    pa.drain_pages(0, 0);
    let (head, order) = pa.free_block_containing(a.pfn + 5).unwrap();
    let before = pa.nr_free();
    assert_eq!(pa.take_page_off_buddy(a.pfn + 5, &mut st), Some(9));
    assert!(!pa.is_free(a.pfn + 5));
    assert_eq!(pa.nr_free(), before - 1);
    for p in head..head + (1 << order) {
        if p != a.pfn + 5 {
            assert!(pa.is_free(p), "frame {p} back on a list");
        }
    }
    let e = pa.free_extents();
    assert!(e.iter().filter(|x| x.pfn >= a.pfn && x.pfn < a.pfn + 8).all(|x| x.ugen == 9), "{e:?}");
    assert_eq!(pa.check(), Ok(()));
    pa.check_vmstat(&st).unwrap();
    assert_eq!(pa.take_page_off_buddy(a.pfn + 5, &mut st), None, "no longer free");
}

/// compaction_capture: with capture armed, the free that merges up to the
/// wanted order is handed over (with the latest generation) instead of
/// reaching the lists; disarmed, nothing is captured.
#[test]
fn capture_takes_the_merged_block_with_its_generation() {
    let (mut pa, mut st) = one_zone(0, 4096, 1);
    let a = pa.alloc_pages(0, 0, 1, 0, MigrateType::Movable, &mut st).unwrap();
    // The refill's other order-1 blocks reach buddy before capture is armed.
    pa.drain_pages(0, 0);
    pa.set_capture(0, Some(1));
    // The first half alone is order 0: not enough.
    pa.free_pages_ugen(0, 0, a.pfn, 0, 3, &mut st);
    pa.drain_pages(0, 0);
    assert_eq!(pa.take_captured(&mut st), None);
    pa.set_capture(0, Some(1));
    pa.free_pages_ugen(0, 0, a.pfn + 1, 0, 4, &mut st);
    pa.drain_pages(0, 0);
    pa.set_capture(0, None);
    assert_eq!(pa.take_captured(&mut st), Some((a.pfn, 1, 4)));
    assert!(!pa.is_free(a.pfn) && !pa.is_free(a.pfn + 1));
    assert_eq!(pa.check(), Ok(()));
    pa.check_vmstat(&st).unwrap();
}

/// Isolating a MAX_PAGE_ORDER range moves its free blocks to ISOLATE
/// (generation kept), frees into it bypass pcp, and undo brings them back.
#[test]
fn pageblock_isolation_keeps_generations_and_undoes() {
    let (mut pa, mut st) = one_zone(0, 4096, 1);
    let a = pa.alloc_pages(0, 0, 0, 0, MigrateType::Movable, &mut st).unwrap();
    let (s, e) = (a.pfn & !1023, (a.pfn & !1023) + 1024);
    assert!(!pa.start_isolate_page_range(s + 1, e), "unaligned");
    assert!(pa.start_isolate_page_range(s, e));
    assert_eq!(pa.pageblock_migratetype(s), Some(MigrateType::Isolate));
    pa.free_pages_ugen(0, 0, a.pfn, 0, 6, &mut st);
    assert_eq!(pa.pcp_count(0, 0), 0, "an isolated pageblock bypasses pcp");
    assert!(pa.free_extents().iter().any(|x| x.pfn <= a.pfn && a.pfn < x.pfn + (1 << x.order) && x.ugen == 6));
    assert!(pa.alloc_pages(0, 0, 10, 0, MigrateType::Movable, &mut st).is_none_or(|x| x.pfn >= e || x.pfn + 1024 <= s));
    pa.undo_isolate_page_range(s, e, MigrateType::Movable);
    assert_eq!(pa.pageblock_migratetype(s), Some(MigrateType::Movable));
    assert_eq!(pa.check(), Ok(()));
}

/// A zone fragmented by a seeded mix of allocations and frees (with LUF
/// generations), its per-CPU lists drained back into the buddy.
fn fragmented_zone(seed: u64) -> PageAlloc {
    let (mut pa, mut st) = one_zone(0, 1 << 13, 1);
    let mut rng = Rng::new(seed);
    let mut live = Vec::new();
    for i in 0..300u64 {
        let order = [0, 0, 1, 2, 3, 5][rng.below(6) as usize];
        if let Some(a) = pa.alloc_pages(i, 0, order, 0, MigrateType::Movable, &mut st) {
            live.push((a.pfn, order));
        }
        if rng.below(3) == 0 && !live.is_empty() {
            let (pfn, o) = live.swap_remove(rng.below(live.len() as u64) as usize);
            pa.free_pages_ugen(i, 0, pfn, o, 1 + rng.below(9) as u16, &mut st);
        }
    }
    pa.drain_pages(0, 0);
    pa
}

proptest! {
    /// The pcp refill's bulk take (`rmqueue_bulk_order0`, a free block at a
    /// time) leaves the zone exactly as the same number of one-by-one
    /// `rmqueue_smallest` takes: the same pages in the same order with
    /// their generations, every free list, nr_free and the zone->lock ops.
    #[test]
    fn bulk_order0_refill_is_one_by_one_takes(seed in any::<u64>(), n in 1u64..600) {
        let mt = MigrateType::Movable;
        let (mut bulk, mut single) = (fragmented_zone(seed), fragmented_zone(seed));
        let mut got_bulk = VecDeque::new();
        let (got, ugen) = bulk.zones[0].rmqueue_bulk_order0(n, mt, &mut got_bulk);
        let mut got_single = VecDeque::new();
        let mut ugen_single = 0;
        while (got_single.len() as u64) < n {
            let Some((pfn, u)) = single.zones[0].rmqueue_smallest(0, mt) else { break };
            got_single.push_back(PcpEntry { pfn, ugen: u });
            ugen_single = ugen_latest(ugen_single, u);
        }
        prop_assert_eq!(got, got_single.len() as u64);
        prop_assert_eq!(ugen, ugen_single);
        let pages = |l: &VecDeque<PcpEntry>| l.iter().map(|e| (e.pfn, e.ugen)).collect::<Vec<_>>();
        prop_assert_eq!(pages(&got_bulk), pages(&got_single));
        prop_assert_eq!(bulk.zones[0].ops, single.zones[0].ops);
        for order in 0..NR_PAGE_ORDERS as u32 {
            for m in [MigrateType::Unmovable, MigrateType::Movable, MigrateType::Reclaimable, MigrateType::HighAtomic, MigrateType::Isolate] {
                let blocks = |pa: &PageAlloc| pa.free_list(0, order, m).map(|(p, b)| (p, b.order, b.ugen, b.reported)).collect::<Vec<_>>();
                prop_assert_eq!(blocks(&bulk), blocks(&single), "order {} {:?}", order, m);
            }
            prop_assert_eq!(bulk.zones[0].free_area[order as usize].nr_free, single.zones[0].free_area[order as usize].nr_free);
        }
    }
}

proptest! {
    /// A batch of order-0 frees in one call (`free_pages_bulk_ugen`, whose
    /// pages go to the pcp list a pageblock's run at a time) leaves the
    /// allocator as the same frees one by one: the same end time, pcp
    /// lists and counts, free lists, zone->lock statistics and counters.
    #[test]
    fn bulk_free_is_one_by_one_frees(seed in any::<u64>(), n in 1usize..3000, shuffled in any::<bool>()) {
        let mut rng = Rng::new(seed);
        let (mut bulk, mut st_bulk) = one_zone(0, 1 << 14, 1);
        let (mut single, mut st_single) = one_zone(0, 1 << 14, 1);
        let mut pfns = Vec::new();
        for i in 0..n as u64 {
            let a = bulk.alloc_pages(i, 0, 0, 0, MigrateType::Movable, &mut st_bulk);
            let b = single.alloc_pages(i, 0, 0, 0, MigrateType::Movable, &mut st_single);
            prop_assert_eq!(a.map(|a| a.pfn), b.map(|b| b.pfn));
            if let Some(a) = a {
                pfns.push(a.pfn);
            }
        }
        if shuffled {
            for i in (1..pfns.len()).rev() {
                pfns.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let ugen = rng.below(3) as u16;
        let t_bulk = bulk.free_pages_bulk_ugen(5000, 0, &pfns, ugen, &mut st_bulk);
        let mut t_single = 5000;
        for &p in &pfns {
            t_single = single.free_pages_ugen(t_single, 0, p, 0, ugen, &mut st_single);
        }
        prop_assert_eq!(t_bulk, t_single);
        let (pb, ps) = (&bulk.pcp[0], &single.pcp[0]);
        prop_assert_eq!((pb.count, pb.free_count, pb.alloc_factor, pb.high), (ps.count, ps.free_count, ps.alloc_factor, ps.high));
        for (lb, ls) in pb.lists.iter().zip(&ps.lists) {
            prop_assert_eq!(lb, ls);
        }
        prop_assert_eq!(bulk.zones[0].ops, single.zones[0].ops);
        prop_assert_eq!(bulk.zone_lock_stats(0), single.zone_lock_stats(0));
        prop_assert_eq!((bulk.zones[0].allocated_pages, bulk.zones[0].pcp_pages), (single.zones[0].allocated_pages, single.zones[0].pcp_pages));
        for order in 0..NR_PAGE_ORDERS as u32 {
            for m in MigrateType::ALL {
                let blocks = |pa: &PageAlloc| pa.free_list(0, order, m).map(|(p, b)| (p, b.order, b.ugen, b.reported)).collect::<Vec<_>>();
                prop_assert_eq!(blocks(&bulk), blocks(&single), "order {} {:?}", order, m);
            }
        }
        prop_assert_eq!(st_bulk, st_single);
    }
}
