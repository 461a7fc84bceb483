//! Lazy unmap flush (docs/mechanisms/lazy-unmap-flush.md): the allocator exits other than
//! `prep_new_page` (scenario 6: compaction free-page isolation and
//! capture, alloc_contig_range, memory offline, hwpoison take-off),
//! migration source reuse and MR_MEMORY_FAILURE (scenario 19), and munmap
//! freeing the PTE table before the same address is mapped again
//! (scenario 12, no PTE table left). LUF as specified and the baseline
//! stay clean under every seed; each broken variant is caught.

mod common;

use common::{caught, H, LUF, PAGES, SEEDS};
use foliosim::mm::Pfn;
use foliosim::sim::Ns;
use foliosim::workload::{map, prot, Op};

/// Process A with threads on CPUs 0..2 maps file F read-only and reads
/// it; returns (harness, A's tids, base, F's inode, F's frames, time).
fn readers(knobs: &str, seed: u64) -> (H, Vec<u32>, u64, u32, Vec<Pfn>, Ns) {
    let mut h = H::boot(knobs, seed);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let a2 = h.thread(a0, 2);
    let (base, mut t) = h.map_file(a0, 0, f, prot::READ);
    for &tid in &[a0, a1, a2] {
        let r = h.rand(1000);
        t = h.read_all(tid, t + r, base);
    }
    let frames = file_frames(&h, f);
    (h, vec![a0, a1, a2], base, f, frames, t)
}

fn file_frames(h: &H, ino: u32) -> Vec<Pfn> {
    (0..PAGES).filter_map(|i| h.k.inodes()[ino as usize].pages.get(&i).copied()).collect()
}

/// `readers`, then process C on CPU 3 reclaims F (LUF defers the flush:
/// the frames are free with a pending generation, on CPU 3's pcp list,
/// then drained to buddy). Returns C's tid too.
fn readers_reclaimed(knobs: &str, seed: u64) -> (H, Vec<u32>, u64, Vec<Pfn>, u32, Ns) {
    let (mut h, a, base, _, frames, t) = readers(knobs, seed);
    let c = h.process(3);
    let (freed, t) = h.reclaim(c, t + 1000, PAGES);
    assert!(freed >= PAGES, "reclaim freed {freed}");
    let t = h.k.pa_mut().drain_pages(t, 3);
    (h, a, base, frames, c, t)
}

fn reread(h: &mut H, a: &[u32], base: u64, t: Ns) {
    for &tid in a {
        let r = h.rand(1000);
        h.read_all(tid, t + r, base);
    }
}

fn span(frames: &[Pfn]) -> (Pfn, Pfn) {
    (*frames.iter().min().unwrap(), *frames.iter().max().unwrap() + 1)
}

/// Scenario 6, compaction free-page isolation: the free scanner isolates
/// F's reclaimed frames (pending generation) and compaction copies file
/// G's folios into them.
fn scenario_compaction_free(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, f, frames, t) = readers(knobs, seed);
    // G: page cache of another process on this node, read after F (so
    // reclaim takes F first), to be moved by compaction.
    let g = h.file(PAGES);
    let b = h.process(4);
    let (gb, t) = h.map_file(b, t + 100, g, prot::READ);
    let t = h.read_all(b, t, gb);
    let c = h.process(3);
    let (freed, t) = h.reclaim(c, t + 1000, PAGES);
    assert!(freed >= PAGES, "reclaim freed {freed}");
    let t = h.k.pa_mut().drain_pages(t, 3);
    // Reclaim took the oldest: mostly F, perhaps a few of G. What is left
    // of G is moved; the reclaimed frames are the free targets.
    let gframes = file_frames(&h, g);
    let mut left = file_frames(&h, f);
    left.extend(&gframes);
    let frames: Vec<Pfn> = frames.into_iter().filter(|p| !left.contains(p)).collect();
    // The free scanner starts at the free block holding F's first frame.
    let (f0, _) = h.k.pa().free_block_containing(span(&frames).0).expect("F's frame is in buddy");
    let (g0, g1) = span(&gframes);
    h.k.cpu_mut(3).curr = c;
    let r = h.rand(1000);
    let res = h.k.compact_zone_range(t + r, 3, 0, (g0, g1), (f0, f0 + 1024), None);
    assert!(res.migrated > 0, "compaction moved G into F's frames");
    reread(&mut h, &a, base, res.done);
    h
}

/// Scenario 6, compaction capture: compaction moves F itself (mapped
/// read-only on three CPUs: LUF defers the sources' flush); the freed
/// sources merge on the drain and a block is captured for the compactor.
fn scenario_compaction_capture(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, _, frames, t) = readers(knobs, seed);
    let c = h.process(3);
    for cpu in 0..h.k.nr_cpus() {
        let _ = h.k.lru_add_drain_cpu(t, cpu);
    }
    let (f0, f1) = span(&frames);
    let free = (8192, 8192 + 2 * PAGES as Pfn);
    assert_eq!(h.k.pfn_to_nid(free.0), 0);
    h.k.cpu_mut(3).curr = c;
    let r = h.rand(1000);
    let res = h.k.compact_zone_range(t + r, 3, 0, (f0, f1), free, Some(1));
    assert!(res.migrated > 0);
    assert!(res.captured.is_some(), "a freed source pair merged and was captured");
    reread(&mut h, &a, base, res.done);
    h
}

/// The MAX_PAGE_ORDER-aligned range holding F's first frame.
fn aligned_range(frames: &[Pfn]) -> (Pfn, Pfn) {
    let s = span(frames).0 & !1023;
    (s, s + 1024)
}

/// Scenario 6 on the MAX_PAGE_ORDER-aligned range holding F's pending
/// frames: `take` (alloc_contig_range, offline_pages) isolates it from
/// CPU 3 and returns when done.
fn scenario_range(knobs: &str, seed: u64, take: impl FnOnce(&mut foliosim::kernel::Kernel, Ns, Pfn, Pfn) -> Ns) -> H {
    let (mut h, a, base, frames, c, t) = readers_reclaimed(knobs, seed);
    let (s, e) = aligned_range(&frames);
    h.k.cpu_mut(3).curr = c;
    let r = h.rand(1000);
    let t = take(&mut h.k, t + r, s, e);
    reread(&mut h, &a, base, t);
    h
}

/// Scenario 6, alloc_contig_range over the range holding F's pending frames.
fn scenario_contig(knobs: &str, seed: u64) -> H {
    scenario_range(knobs, seed, |k, t, s, e| k.alloc_contig_range(t, 3, s, e).expect("the range holds only free and movable pages"))
}

/// Scenario 6, memory offline of the range holding F's pending frames.
fn scenario_offline(knobs: &str, seed: u64) -> H {
    scenario_range(knobs, seed, |k, t, s, e| k.offline_pages(t, 3, s, e).expect("the range holds only free and movable pages"))
}

/// Scenario 6, hwpoison take-off: memory_failure on free frames of F
/// whose flush is still pending.
fn scenario_hwpoison_free(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, frames, c, t) = readers_reclaimed(knobs, seed);
    h.k.cpu_mut(3).curr = c;
    let mut t = t + h.rand(1000);
    for i in 0..4 {
        let pfn = frames[(seed as usize * 7 + i * 13) % frames.len()];
        t = h.k.memory_failure(t, 3, pfn).expect("a free frame is taken off buddy");
    }
    reread(&mut h, &a, base, t);
    h
}

/// Scenario 19a: a destination of one migration is the source of the
/// next before the first one's deferred flush happened. A (CPUs 0, 1)
/// reads F on node 0; F moves to node 1 (LUF: CPUs 0, 1 still cache the
/// old frames); a new thread of A on CPU 2 reads the new frames; they move
/// back to node 0 (LUF again, same epoch); then allocators on both nodes
/// take the freed frames and A reads again.
fn scenario_migrate_reuse(knobs: &str, seed: u64) -> H {
    let mut h = H::boot(knobs, seed);
    let d0 = h.allocator(3);
    let d1 = h.allocator(9);
    let f = h.file(PAGES);
    let a0 = h.process(0);
    let a1 = h.thread(a0, 1);
    let c = h.process(3);
    let (base, mut t) = h.map_file(a0, 0, f, prot::READ);
    for &tid in &[a0, a1] {
        let r = h.rand(500);
        t = h.read_all(tid, t + r, base);
    }
    h.k.cpu_mut(3).curr = c;
    let src = file_frames(&h, f);
    let (moved, t) = h.k.move_pages_to_node(t + 100, 3, &src, 1);
    assert_eq!(moved, PAGES, "first migration");
    let a2 = h.thread(a0, 2);
    let r = h.rand(500);
    let t = h.read_all(a2, t + r, base);
    let mid = file_frames(&h, f);
    assert!(mid.iter().all(|&p| h.k.pfn_to_nid(p) == 1));
    h.k.cpu_mut(3).curr = c;
    let r = h.rand(500);
    let (moved, t) = h.k.move_pages_to_node(t + r, 3, &mid, 0);
    assert_eq!(moved, PAGES, "second migration, before the first was flushed");
    let t = h.k.pa_mut().drain_pages(t, 3);
    let (r0, r1) = (h.rand(1000), h.rand(1000));
    let t0 = h.alloc_write(d0, t + r0, 4 * PAGES);
    let t1 = h.alloc_write(d1, t + r1, 4 * PAGES);
    reread(&mut h, &[a0, a1, a2], base, t0.max(t1));
    h
}

/// Scenario 19b: soft offline (MR_MEMORY_FAILURE) of pages of F that A
/// maps read-only on three CPUs: the migration is LUF-able but the
/// poisoned source never returns to the allocator, so the flush must
/// happen at once. Then a hard memory_failure on another mapped page:
/// unmapped with an immediate flush, no deferral at all.
fn scenario_memory_failure(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, f, frames, t) = readers(knobs, seed);
    let c = h.process(3);
    h.k.cpu_mut(3).curr = c;
    let mut t = t + h.rand(1000);
    for i in 0..4 {
        let pfn = frames[(seed as usize * 5 + i * 11) % frames.len()];
        t = h.k.soft_offline_page(t, 3, pfn).expect("soft offline migrates the folio");
    }
    let deferred = h.stat("foliosim_luf_deferred");
    let victim = *h.k.inodes()[f as usize].pages.get(&(PAGES - 1 - seed % 8)).unwrap();
    t = h.k.memory_failure(t + 100, 3, victim).expect("a clean mapped page-cache folio is handled");
    assert_eq!(h.stat("foliosim_luf_deferred"), deferred, "memory_failure unmaps without TTU_BATCH_FLUSH");
    reread(&mut h, &a, base, t + 100);
    h
}

/// Scenario 12, no PTE table left: after the LUF, A munmaps the range;
/// its table is empty (reclaim cleared every PTE) and free_pgtables frees
/// it. Then file G is mapped at the same address: no zap_pte_range visit
/// happens there any more, so only munmap's zap can have flushed.
fn scenario_munmap_freed_table(knobs: &str, seed: u64) -> H {
    let (mut h, a, base, _, _, t) = readers_reclaimed(knobs, seed);
    let mm = h.k.tasks()[a[0] as usize].mm;
    let g = h.file(PAGES);
    let (_, t) = h.val(a[0], t + 100, Op::Munmap { addr: base, len: PAGES << 12 });
    assert!(h.k.mms()[mm as usize].pt().table(base).is_none(), "free_pgtables freed the PTE table");
    let (fd, t) = h.val(a[0], t, Op::Open { file: g });
    let (_, t) =
        h.val(a[0], t, Op::Mmap { addr: base, len: PAGES << 12, prot: prot::READ, flags: map::SHARED | map::FIXED, fd: fd as i32, off: 0 });
    reread(&mut h, &a, base, t);
    h
}

fn exits(knobs: &str, seed: u64) -> Vec<(&'static str, H)> {
    vec![
        ("compaction free isolation", scenario_compaction_free(knobs, seed)),
        ("compaction capture", scenario_compaction_capture(knobs, seed)),
        ("alloc_contig_range", scenario_contig(knobs, seed)),
        ("memory offline", scenario_offline(knobs, seed)),
        ("hwpoison take-off", scenario_hwpoison_free(knobs, seed)),
        ("migration source reuse", scenario_migrate_reuse(knobs, seed)),
        ("memory failure", scenario_memory_failure(knobs, seed)),
        ("munmap freed table", scenario_munmap_freed_table(knobs, seed)),
    ]
}

#[test]
fn luf_as_specified_passes_every_exit() {
    for seed in 1..=SEEDS {
        for (name, h) in exits(LUF, seed) {
            assert!(h.violations().is_empty(), "seed {seed}, scenario {name}: {:?}", h.violations());
            assert_eq!(h.k.pa().check(), Ok(()), "seed {seed}, scenario {name}");
        }
    }
}

#[test]
fn baseline_passes_every_exit() {
    for seed in 1..=SEEDS {
        for (name, h) in exits("", seed) {
            assert!(h.violations().is_empty(), "seed {seed}, scenario {name}: {:?}", h.violations());
            assert_eq!(h.stat("foliosim_luf_deferred"), 0);
            assert_eq!(h.k.pa().check(), Ok(()), "seed {seed}, scenario {name}");
        }
    }
}

/// The scenarios reach the exit with a generation still pending (else
/// they would test nothing), and the exits do their job.
#[test]
fn exits_meet_pending_generations() {
    let h = scenario_compaction_free(LUF, 1);
    assert!(h.stat("compact_isolated") > 0 && h.stat("compact_free_scanned") > 0 && h.stat("compact_migrate_scanned") > 0);
    assert!(h.stat("foliosim_luf_alloc_pending") >= 1 && h.stat("foliosim_luf_flush") >= 1);
    let h = scenario_compaction_capture(LUF, 1);
    assert_eq!(h.stat("compact_success"), 1);
    assert!(h.stat("foliosim_luf_deferred") > 0 && h.stat("foliosim_luf_flush") >= 1);
    let h = scenario_contig(LUF, 1);
    assert_eq!(h.stat("foliosim_alloc_contig_success"), 1);
    assert!(h.stat("foliosim_luf_flush") >= 1);
    let h = scenario_offline(LUF, 1);
    assert_eq!(h.stat("foliosim_offline_pages"), 1024);
    assert!(h.stat("foliosim_luf_flush") >= 1);
    let h = scenario_hwpoison_free(LUF, 1);
    assert_eq!(h.stat("foliosim_hwpoison_pages"), 4);
    assert!(h.stat("foliosim_luf_flush") >= 1);
    let h = scenario_memory_failure(LUF, 1);
    assert_eq!(h.stat("foliosim_hwpoison_pages"), 5);
    assert!(h.stat("foliosim_luf_deferred") >= 1, "soft offline's async batch was LUF'd");
}

#[test]
fn m6_skip_isolation_check_is_caught_at_every_exit() {
    let m = "luf_skip_isolation_check";
    assert!(caught(m, LUF, scenario_compaction_free), "compaction free-page isolation");
    assert!(caught(m, LUF, scenario_compaction_capture), "compaction capture");
    assert!(caught(m, LUF, scenario_contig), "alloc_contig_range");
    assert!(caught(m, LUF, scenario_offline), "memory offline");
    assert!(caught(m, LUF, scenario_hwpoison_free), "hwpoison take-off");
}

#[test]
fn handover_forgetting_an_unsettled_migration_is_caught() {
    assert!(caught("luf_handover_overwrites", LUF, scenario_migrate_reuse));
}

#[test]
fn deferring_a_memory_failure_migration_is_caught() {
    let knobs = format!("{LUF}\n\"debug.mutant\" = \"luf_defer_memory_failure\"");
    assert!(
        (1..=SEEDS).any(|s| scenario_memory_failure(&knobs, s).violations().iter().any(|v| v.starts_with("I3") && v.contains("hwpoison")))
    );
}

#[test]
fn zap_skipping_an_empty_table_is_caught() {
    let knobs = format!("{LUF}\n\"debug.mutant\" = \"luf_zap_skips_empty_table\"");
    assert!((1..=SEEDS).any(|s| scenario_munmap_freed_table(&knobs, s).violations().iter().any(|v| v.starts_with("I6a"))));
}

/// `migrate.batch_flush = false` (7e12beb8ca2a reverted, the XSBench
/// baseline): moving a file two threads on CPUs 0 and 1 have mapped takes
/// one shootdown per page instead of one per migrate_pages batch, and LUF
/// has no batch to defer.
#[test]
fn unbatched_migration_sends_a_shootdown_per_page() {
    let run = |knobs: &str| {
        let mut h = H::boot(knobs, 1);
        let f = h.file(PAGES);
        let a0 = h.process(0);
        let a1 = h.thread(a0, 1);
        let c = h.process(3);
        let (base, mut t) = h.map_file(a0, 0, f, prot::READ);
        for &tid in &[a0, a1] {
            t = h.read_all(tid, t, base);
        }
        h.k.cpu_mut(3).curr = c;
        let src = file_frames(&h, f);
        let before = h.stat("nr_tlb_remote_flush");
        let (moved, _) = h.k.move_pages_to_node(t + 100, 3, &src, 1);
        assert_eq!(moved, PAGES);
        assert!(h.violations().is_empty(), "{knobs}: {:?}", h.violations());
        (h.stat("nr_tlb_remote_flush") - before, h.stat("foliosim_luf_deferred"))
    };
    let (batched, _) = run("");
    let (single, _) = run("\"migrate.batch_flush\" = false");
    assert_eq!(batched, 1, "one round for the batch");
    assert_eq!(single, PAGES as i64, "one round per page");
    let (_, deferred) = run(&format!("{LUF}\n\"migrate.batch_flush\" = false"));
    assert_eq!(deferred, 0, "without a batch LUF defers nothing");
    let (_, deferred) = run(LUF);
    assert!(deferred > 0);
}
